//! What an [`super::MlaDcpContext`] is built for: the DCP geometry of this rank, the model side,
//! the token bucket its buffers are sized for, and the choices of the step (exchange, V-up path).

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use super::super::metadata::DcpLayout;
use super::super::plan::{fused_merges, FusedTile, FUSED_MAX_DCP, QK_WIDTH};
use super::super::streams::JoinMode;
use super::error::MlaError;

/// How the history partials reach the rank that owns their heads (spec §9.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExchangeMode {
    /// Grouped ncclSend/ncclRecv of raw bytes (the preferred path); D = 1 needs no communicator.
    A2a,
    /// vLLM's all-gather of the LSEs + correction + reduce-scatter, then a 2-way merge with the
    /// current part: the cross-checking mode. Needs a communicator.
    AgRs,
    /// D ranks simulated on one GPU: the caller provides `q_all` and the exchange is
    /// [`super::simulated_exchange`] over all D contexts (sharing one main stream).
    Simulated,
    /// Benchmark stand-in for one rank: the caller provides `q_all`, and the exchange is a
    /// device copy `hist_recv = hist_send` (the same bytes an A2A moves, no wire). The result is
    /// only meaningful for D = 1.
    Loopback,
}

/// Which implementation projects the merged latent through W_UV (spec §6, §9.2 step 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VupPath {
    /// One cuBLAS strided-batched GEMM (§6.2).
    Cublas,
    /// The DSL kernel `mla_v_up` of the plan.
    DslKernel,
    /// The hand-written CUDA fallback of `vup.rs`.
    HandWritten,
    /// The combine and V-up in one DSL kernel (`mla_combine_v_up`): each part's rows times
    /// W_UV, weighted, straight into `y`; `lat_out` is not written.
    Fused,
}

/// Debug knobs of the stream orchestration, for the ordering tests only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// [`JoinMode::SkipJoinUnsafe`] removes the main stream's wait on current_attn_done.
    pub join_mode: JoinMode,
    /// Spin this many SM cycles on the side stream before the current-chunk attention.
    pub side_delay_cycles: Option<i64>,
    /// Spin this many SM cycles on the main stream where the exchange starts (wire time of a
    /// slow link), so a timeline can tell "the current part ran during the exchange" from
    /// "it ran after it" without depending on kernel durations.
    pub exchange_delay_cycles: Option<i64>,
    /// The host enqueues the main stream's gather and history before the side stream's
    /// current part (see [`CurrentOrder`]).
    pub current_order: CurrentOrder,
}

/// When the host enqueues the side stream's current part relative to the main stream's
/// history. Either is correct (the events order the streams); they differ in which kernel's
/// programs reach the SMs first and in how long the main stream idles while the host
/// enqueues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CurrentOrder {
    /// The history first where the current part writes only its LSE (one-token chunks
    /// merged by the fused combine + V-up: a light part that fits where the history's waves
    /// leave SMs), else the current part first. H200, 2026-12-04, one call, two rounds, the
    /// history first against the current part first with an LSE-only part: graph-replayed
    /// steps L1 319.7 / 322.0 against 328.5 / 327.2 µs, its dcp-2 rank 185.1 / 184.2 against
    /// 190.3 / 190.6, 32 × 8192 177.9 / 177.7 against 181.8 / 181.5; eager steps the same or
    /// faster. A part that wrote its rows delayed the history's second wave instead (L1 388
    /// against 381 µs, 2026-12-03).
    #[default]
    Auto,
    /// The current part first: its programs run before the history fills the SMs; the
    /// history waits for the host to enqueue the current part.
    First,
    /// The history first: it starts at once; the current part (on a stream of the device's
    /// greatest priority) takes SMs as the history's first programs finish.
    AfterHistory,
}

impl CurrentOrder {
    /// Whether the history is enqueued before the current part, for a current part that
    /// writes only its LSE (`lse_only`) or its rows too.
    pub fn history_first(self, lse_only: bool) -> bool {
        match self {
            CurrentOrder::Auto => lse_only,
            CurrentOrder::First => false,
            CurrentOrder::AfterHistory => true,
        }
    }
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            join_mode: JoinMode::Join,
            side_delay_cycles: None,
            exchange_delay_cycles: None,
            current_order: CurrentOrder::default(),
        }
    }
}

/// Everything fixed for the lifetime of a context (one per rank and token bucket).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlaDcpConfig {
    /// D, I and B of the token sharding (§2.2).
    pub layout: DcpLayout,
    /// r: this rank in `0..D`.
    pub dcp_rank: u32,
    /// N: heads this rank owns (the history pass runs D·N gathered heads).
    pub heads_per_rank: u32,
    /// Softmax scale of the 576-wide product (§1.2; from the model config).
    pub softmax_scale: f32,
    /// Token bucket: the most query tokens (Σ q_len) one call may carry.
    pub max_tokens: usize,
    /// The most requests one call may carry.
    pub max_batch: usize,
    /// How the history partials are exchanged across ranks.
    pub exchange: ExchangeMode,
    /// Which V-up implementation runs.
    pub vup: VupPath,
    /// Forces the history split count (tests, tuning); `None` uses the plan's heuristic.
    pub forced_splits: Option<u32>,
    /// Forces the history tile height, gathered heads per program (tuning sweeps; one of
    /// `plan::HIST_BLOCK_H_CHOICES`); `None` uses the plan's rule.
    pub forced_history_heads: Option<u32>,
    /// Forces the history's keys per tile (tuning sweeps; a power of two from 16 up to the
    /// largest dividing the page); `None` uses the plan's rule.
    pub forced_history_kv_tile: Option<u32>,
    /// Forces the history's key tiles to move as TMA boxes (`true`) or by `cp.async`
    /// (tests, A/B runs); `None` uses the plan's choice (`plan::HIST_TMA`).
    pub forced_history_tma: Option<bool>,
    /// Forces the fused combine + V-up's tile: tokens a program, latent columns a step and
    /// ring stages (tuning sweeps; `VupPath::Fused` only); `None` uses the plan's.
    pub forced_fused_tile: Option<FusedTile>,
    /// Forces the columns a history-reduce program merges (`COLS`, a power of two from 16 to
    /// 512; tuning sweeps); `None` uses the plan's rule.
    pub forced_reduce_cols: Option<u32>,
    /// A step of one-token chunks merged by the fused combine + V-up reads the current rows
    /// from `cur_kv` and its current part writes only the LSE
    /// ([`crate::ops::mla_dcp::plan::DecodePlan::read_single_key_chunks_from_kv`]); on by
    /// default, off for A/B runs.
    pub current_rows_from_kv: bool,
    /// Records timing events around every stage ([`super::MlaDcpContext::stage_times`]).
    pub profile: bool,
    /// Stream options of the context.
    pub streams: StreamOptions,
}

impl MlaDcpConfig {
    /// A config with the defaults of the op: A2A exchange, heuristic splits, no profiling, and
    /// V-up fused into the combine up to D = 2 (its limit, [`FUSED_MAX_DCP`]; measured faster
    /// there, H200 2026-12-04, merge stage µs against the combine + cuBLAS: L1 19.3 against
    /// 31.0, its dcp-2 rank 16.4 against 22.1, 32 × 8192 12.2 / 10.6 against 18.8 / 14.3,
    /// 1 × 32768 12.3 against 14.4 and 11.7 against 11.2 at dcp 2), cuBLAS after the combine
    /// from D = 4.
    pub fn new(
        layout: DcpLayout,
        dcp_rank: u32,
        heads_per_rank: u32,
        softmax_scale: f32,
        max_tokens: usize,
        max_batch: usize,
    ) -> Self {
        MlaDcpConfig {
            layout,
            dcp_rank,
            heads_per_rank,
            softmax_scale,
            max_tokens,
            max_batch,
            exchange: ExchangeMode::A2a,
            vup: if fused_merges(layout.dcp_size) {
                VupPath::Fused
            } else {
                VupPath::Cublas
            },
            forced_splits: None,
            forced_history_heads: None,
            forced_history_kv_tile: None,
            forced_history_tma: None,
            forced_fused_tile: None,
            forced_reduce_cols: None,
            current_rows_from_kv: true,
            profile: false,
            streams: StreamOptions::default(),
        }
    }

    /// D.
    pub fn dcp_size(&self) -> usize {
        self.layout.dcp_size as usize
    }

    /// N.
    pub fn heads(&self) -> usize {
        self.heads_per_rank as usize
    }

    /// D·N: heads of the history pass (saturating: [`Self::check_bucket`] refuses a
    /// geometry where it would not fit).
    pub fn gathered_heads(&self) -> usize {
        self.dcp_size().saturating_mul(self.heads())
    }

    /// The bucket's sizes are usable: every call's `T · D · N · 576` must fit in i32 (the
    /// plan refuses it otherwise), so a `max_tokens` past that bound could never be used,
    /// and refusing it here keeps every buffer size of the context far from wrapping.
    pub fn check_bucket(&self) -> Result<(), MlaError> {
        let limit = usize::try_from(i32::MAX).unwrap_or(usize::MAX);
        let per_token = self.gathered_heads().saturating_mul(QK_WIDTH);
        for (what, got, max) in [
            ("dcp_size * heads_per_rank * 576", per_token, limit),
            (
                "max_tokens",
                self.max_tokens,
                limit.checked_div(per_token).unwrap_or(limit),
            ),
            ("max_batch", self.max_batch, limit),
        ] {
            if got > max {
                return Err(MlaError::BucketTooLarge { what, got, max });
            }
        }
        Ok(())
    }

    /// Whether the merge reads the rank's own history part from `hist_send`, where the history
    /// wrote it, so that the exchange moves only the peers' chunks: the fused merge over the
    /// A2A and loopback exchanges (the simulated exchange permutes whole buffers across
    /// contexts; AG+RS merges the history itself).
    pub fn own_part_in_place(&self) -> bool {
        self.vup == VupPath::Fused
            && matches!(self.exchange, ExchangeMode::A2a | ExchangeMode::Loopback)
    }

    /// The V-up path takes this group: the fused combine + V-up merges at most
    /// [`FUSED_MAX_DCP`] ranks' parts (AG+RS hands it one part of history at any size).
    pub fn check_vup(&self) -> Result<(), MlaError> {
        let dcp_size = self.layout.dcp_size;
        let one_part = self.exchange == ExchangeMode::AgRs;
        if self.vup == VupPath::Fused && !fused_merges(dcp_size) && !one_part {
            return Err(MlaError::FusedGroupTooLarge {
                dcp_size,
                max: FUSED_MAX_DCP,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default order puts the history first exactly where the current part is light.
    #[test]
    fn the_history_goes_first_where_the_current_part_writes_only_its_lse() {
        let auto = StreamOptions::default().current_order;
        assert_eq!(auto, CurrentOrder::Auto);
        assert!(auto.history_first(true) && !auto.history_first(false));
        for lse_only in [false, true] {
            assert!(!CurrentOrder::First.history_first(lse_only));
            assert!(CurrentOrder::AfterHistory.history_first(lse_only));
        }
    }

    /// The fused merge is the default where it takes the group, and forcing it on a larger
    /// group is a typed error before anything is allocated, unless AG+RS merges the history
    /// first.
    #[test]
    fn fused_vup_takes_groups_of_at_most_two() {
        for d in [1, 2, 4, 8] {
            let layout = DcpLayout::new(d, 1, 64).expect("layout");
            let default = MlaDcpConfig::new(layout, 0, 16, 0.1, 128, 64);
            default
                .check_vup()
                .expect("the default V-up takes its group");
            let fused = MlaDcpConfig {
                vup: VupPath::Fused,
                ..default
            };
            let err = fused.check_vup();
            if d <= FUSED_MAX_DCP {
                err.expect("the fused merge takes one or two ranks' parts");
            } else {
                assert!(
                    matches!(err, Err(MlaError::FusedGroupTooLarge { dcp_size, max: 2 }) if dcp_size == d),
                    "{err:?}"
                );
                let ag_rs = MlaDcpConfig {
                    exchange: ExchangeMode::AgRs,
                    ..fused
                };
                ag_rs.check_vup().expect("AG+RS merges one part of history");
            }
        }
    }
}
