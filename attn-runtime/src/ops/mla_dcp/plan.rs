//! Launch plan of one MLA-DCP decode step (spec `mla_dcp.md` §9.1–§9.2), independent of the
//! backend: which kernels run, on which constexpr bindings and grids, with which arguments, and
//! how the history exchange buffers are laid out. The CPU simulation (`cpu.rs`) and the GPU op
//! (`op.rs`) execute the same plan, so the only thing they differ in is where buffers live.

use super::launches;
use super::metadata::{history_len, DcpLayout};
use crate::kernels::mla_dcp::{compile_kernel_assuming, MlaKernelError};
use crate::ops::unified_attention::config::MmaKind;
use attn_dsl::ir::ScalarType;
use attn_dsl::passes::assume::Promises;
use attn_dsl::{Binding, ConstValue};
use thiserror::Error;

/// L: latent width of a partial output row (the value width of the absorbed decode).
pub const LATENT: usize = 512;
/// L + R: width of an absorbed query / latent cache row.
pub const QK_WIDTH: usize = 576;
/// V: per-head width of the V-up output.
pub const V_HEAD: usize = 128;
/// Alignment of each part of an exchange chunk and of each chunk, in bytes (§9.1).
pub const CHUNK_ALIGN: usize = 256;
/// Upper bound on KV splits of the history pass (bounds the split scratch).
pub const MAX_SPLITS: u32 = 64;
/// Gathered heads per history program when there are at least this many: two 16-row `mma`
/// slabs on a 2 × 2 warp grid (each warp one slab's [16, 256] accumulator half, 128
/// registers), so every latent B fragment read from shared memory feeds two heads' slabs
/// where 16 heads fed one: per 32-key tile a warp issues 100 `ldmatrix` for 136 `mma` (84 for
/// 68 at 16 heads). (A 64-head tile on 4 warps gives each a whole [16, 512] slab: it spills.)
pub const HIST_BLOCK_H: u32 = 32;
/// Gathered heads per history program below [`HIST_BLOCK_H`] heads (L2's 16): one slab whose
/// columns the 4 warps split, so no warp idles.
pub const HIST_BLOCK_H_NARROW: u32 = 16;

/// Gathered heads per history program for `gathered` heads (see [`HIST_BLOCK_H`]).
fn hist_block_h(gathered: u64) -> u32 {
    if gathered >= u64::from(HIST_BLOCK_H) {
        HIST_BLOCK_H
    } else {
        HIST_BLOCK_H_NARROW
    }
}

/// The history tile heights a plan may be forced to (`MlaDcpConfig::forced_history_heads`):
/// 64 runs on 8 warps (a 4 × 2 grid), the others on 4.
pub const HIST_BLOCK_H_CHOICES: [u32; 3] = [16, 32, 64];

/// How the history pass tiles the gathered heads: the plan's and the split scratch's one
/// source for the tile height, the head tiles and the resident programs per SM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryTiling {
    /// Gathered heads per program (`BLOCK_H`).
    pub block_h: u32,
    /// Tiles of `block_h` heads.
    pub head_tiles: u32,
    /// Programs resident per SM: shared memory holds the queries and two latent stages of two
    /// programs up to 32 heads (111 KB each), of one at 64 (148 KB, 217 KB with the
    /// warpgroups' 64-key tiles).
    pub programs_per_sm: u32,
    /// 64-head tiles on two warpgroups (sm_90a): every dot a `wgmma`, 64-key tiles.
    pub warpgroups: bool,
}

impl HistoryTiling {
    /// The tiling of `gathered` heads, at the plan's rule's height or the `forced` one.
    pub fn new(gathered: u64, forced: Option<u32>) -> Self {
        let block_h = forced.unwrap_or_else(|| hist_block_h(gathered));
        HistoryTiling {
            block_h,
            head_tiles: gathered.div_ceil(u64::from(block_h)) as u32,
            programs_per_sm: if block_h > 32 {
                1
            } else {
                HIST_PROGRAMS_PER_SM
            },
            warpgroups: false,
        }
    }

    /// The tiling a target of `mma` gets: on warpgroup MMAs, from 64 gathered heads, 64-head
    /// tiles on the two warpgroups of a 4 × 2 warp grid (each warpgroup one column half of
    /// the scores and of the output, P shared through shared memory), unless a height is
    /// `forced`; otherwise [`Self::new`]. Measured on the H200 (2026-12-02, `mla_decode`
    /// bench, history kernel alone), against `mma.sync`'s 32-head tiles: L1 (128 × 4096)
    /// 758 → 431 µs; and against the one-warpgroup programs that split the value columns
    /// and computed the scores twice (the earlier sm_90a tiling): 1 × 32768 68.7 → 59.9 µs,
    /// 32 × 8192 370 → 217 µs.
    pub fn for_target(gathered: u64, forced: Option<u32>, mma: MmaKind) -> Self {
        let wide = mma == MmaKind::Warpgroup
            && gathered >= u64::from(HIST_BLOCK_H_WARPGROUPS)
            && forced.is_none_or(|h| h == HIST_BLOCK_H_WARPGROUPS);
        if !wide {
            return Self::new(gathered, forced);
        }
        HistoryTiling {
            warpgroups: true,
            ..Self::new(gathered, Some(HIST_BLOCK_H_WARPGROUPS))
        }
    }

    /// Keys per tile the tiling prefers (the page may allow fewer): 64 on the warpgroup
    /// grid, whose two warpgroups each take half of the tile's scores (`m64n32` at 64 keys:
    /// L1's history 565 → 441 µs against 32 keys, H200, 2026-12-02), else
    /// [`HIST_KV_TILE`].
    pub fn kv_tile(&self) -> u32 {
        if self.warpgroups {
            HIST_KV_TILE_WARPGROUPS
        } else {
            HIST_KV_TILE
        }
    }
}

/// Gathered heads per history program of the warpgroup-MMA tiling: the rows of one
/// warpgroup (`wgmma` is 64 rows tall).
pub const HIST_BLOCK_H_WARPGROUPS: u32 = 64;
/// Keys per history tile (a power of two; smaller when the page is): a 32 × 576 latent
/// tile is 37 KB of shared memory per stage, so two stages and the queries leave room for
/// two programs per SM.
pub const HIST_KV_TILE: u32 = 32;
/// Keys per history tile on the warpgroup grid ([`HistoryTiling::kv_tile`]): the 64 × 576
/// queries and two stages of 64 × 576 keys take 217 KB of shared memory, one program per SM.
pub const HIST_KV_TILE_WARPGROUPS: u32 = 64;
/// History programs resident per SM: shared memory (the 32 × 576 queries and two stages of
/// the latent tile, 111 KB) fits two in an SM's 228 KB, and so do the registers (240 × 128).
pub const HIST_PROGRAMS_PER_SM: u32 = 2;
/// Whether the history's latent tiles move as TMA boxes (its `TMA`) where the plan chooses:
/// no. They did from 64 tiles a program when that measured 1.3–2.7 % faster (L1, 32 × 8192;
/// H200, 2026-12-03); since the rescale changes of session 20 `cp.async` is the faster
/// (H200, 2026-12-05, one call, three rounds each: L1 323.6 against 331.9 µs, 32 × 8192
/// 178.3 against 182.6; docs/gpu_ir.md, "TMA boxes no longer pay on the history"). The form
/// stays a choice: [`DecodePlan::set_history_tma`], `MlaDcpConfig::forced_history_tma`.
pub const HIST_TMA: bool = false;
/// Fewest local history keys worth a split of their own: below this, the reduce and the
/// extra partial cost more than the parallelism buys (the local-length threshold of §9.2).
pub const MIN_KEYS_PER_SPLIT: u64 = 256;
/// Longest current chunk (MTP / speculative tokens per request) the current kernel takes in
/// one tile.
pub const MAX_QUERY_LEN: u32 = 64;
/// Tokens per program of the V-up fallback kernel.
pub const VUP_BLOCK_T: u32 = 16;
/// Largest group the fused combine + V-up (`mla_combine_v_up`) merges: it holds an
/// accumulator a part (the current one and one a rank), so one step of `W_UV`'s rows serves
/// every part; larger groups take the combine, then V-up (or AG+RS, whose merge sees one part
/// of history).
pub const FUSED_MAX_DCP: u32 = 2;

/// Whether the fused combine + V-up merges the parts of a group of `dcp_size` ranks as they
/// arrive ([`FUSED_MAX_DCP`]).
pub fn fused_merges(dcp_size: u32) -> bool {
    dcp_size <= FUSED_MAX_DCP
}
/// The fused combine + V-up's `own_part` when every part comes from the receive buffer.
pub const NO_OWN_PART: i32 = -1;
/// Token tiles the fused combine + V-up (`mla_combine_v_up`) chooses from, largest first.
pub const FUSED_BLOCK_T_CHOICES: [u32; 3] = [64, 32, 16];

/// The fused combine + V-up's tiling: tokens a program, latent columns a step, and the depth
/// of the ring its copies stream through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedTile {
    /// Tokens a program (`BLOCK_T`).
    pub block_t: u32,
    /// Latent columns a step (`LAT_CHUNK`).
    pub lat_chunk: u32,
    /// Stages of the copy ring (`STAGES`, 2–4).
    pub stages: u32,
    /// Output columns a program (`BLOCK_V`, 64 or 128 of `W_UV`'s 128): 64 doubles the
    /// programs of a step of few tokens.
    pub block_v: u32,
    /// The products as warpgroup MMAs (`WARPGROUPS`, sm_90a; 64-token tiles, or 128 at dcp 1).
    pub warpgroups: bool,
}

/// The fused combine + V-up's tile for `t` tokens of `n` heads merging `parts` parts on
/// `num_sms` SMs. A program streams its parts' rows and one `W_UV[n]` step for all of them
/// through a ring (two stages: deeper ones measured no faster): larger token tiles
/// read `W_UV` fewer times, smaller ones put more products in flight. The largest token tile
/// that still gives every SM four part-products (programs × parts), at least 16 tokens; 64
/// latent columns a step, 128 at 16 tokens. H200, 2026-12-04, the sweep of 16–64 tokens ×
/// 64/128 columns (stage µs): L1 19.3 at 32 × 64 against 20.1 at 64 × 64 (two parts: 64
/// tokens would give 512 part-products), its dcp-2 rank 16.4 at 32 × 64 against 19.7 at
/// 16 × 128 (three parts: 768); 32 × 8192 and 1 × 32768 12.2–10.6 at 16 × 128 against
/// 13.5–12.1 at 16 × 64.
///
/// A step whose programs (token tiles × heads) would not fill every SM twice splits the
/// 128 output columns over two programs (`block_v` 64): each streams half of `W_UV[n]`, the
/// part rows twice as often (few at so few tokens), and the SMs keep twice the bytes in
/// flight (one program an SM streamed `W_UV[n]` in four dependent steps).
pub fn fused_tile(t: usize, n: u32, parts: u32, num_sms: u32) -> FusedTile {
    let token_tiles = |bt: u32| (t as u64).div_ceil(u64::from(bt));
    let products = |bt: u32| token_tiles(bt) * u64::from(n * parts);
    let block_t = FUSED_BLOCK_T_CHOICES
        .into_iter()
        .find(|&bt| products(bt) >= 4 * u64::from(num_sms))
        .unwrap_or(16);
    let programs = token_tiles(block_t) * u64::from(n);
    FusedTile {
        block_t,
        lat_chunk: if block_t == 16 { 128 } else { 64 },
        stages: 2,
        block_v: if programs < 2 * u64::from(num_sms) {
            64
        } else {
            128
        },
        warpgroups: false,
    }
}

/// Tokens a program of the fused combine + V-up on warpgroup MMAs: one warpgroup MMA's rows.
pub const FUSED_WARPGROUP_BLOCK_T: u32 = 64;

/// Tokens a program of the fused combine + V-up on warpgroup MMAs over two warpgroups' rows
/// (opt-in `merge_t128`; two parts only: three parts' accumulators spill).
pub const FUSED_WARPGROUP_WIDE_BLOCK_T: u32 = 128;

/// The fused combine + V-up's tile on `mma`: [`warpgroup_fused_tile`] on warpgroup MMAs where
/// the step has a warpgroup MMA's 64 rows of tokens (feature `merge_wgmma`, shipped in
/// session 28; `ATTN_CODEGEN_DISABLE=merge_wgmma`), [`wide_warpgroup_fused_tile`] from 128
/// tokens of two parts (one rank) where the opt-in `merge_t128` asks, else [`fused_tile`].
pub fn fused_tile_on(mma: MmaKind, t: usize, n: u32, parts: u32, num_sms: u32) -> FusedTile {
    let on_warpgroups = mma == MmaKind::Warpgroup && attn_dsl::features::merge_wgmma();
    let wide = on_warpgroups
        && attn_dsl::features::merge_t128()
        && parts == 2
        && t >= FUSED_WARPGROUP_WIDE_BLOCK_T as usize;
    if wide {
        wide_warpgroup_fused_tile()
    } else if on_warpgroups && t >= FUSED_WARPGROUP_BLOCK_T as usize {
        warpgroup_fused_tile()
    } else {
        fused_tile(t, n, parts, num_sms)
    }
}

/// The fused combine + V-up on warpgroup MMAs (L1's merge 19.4 → 17.7 µs, H100): 64 tokens
/// a program, each of its two warpgroups a 64-column half of every part's product (the
/// narrowest block a `wgmma` reads `W_UV`'s row-major rows in, so 128 columns a program),
/// `wgmma` reading the parts' rows and `W_UV[n]`'s from the ring (the `mma.sync` form's
/// `HMMA`s wait on their `ldmatrix` loads: docs/gpu_ir.md, "One-token chunks"); 64 latent
/// columns a step, two stages.
pub fn warpgroup_fused_tile() -> FusedTile {
    FusedTile {
        block_t: FUSED_WARPGROUP_BLOCK_T,
        lat_chunk: 64,
        stages: 2,
        block_v: 128,
        warpgroups: true,
    }
}

/// The fused combine + V-up on warpgroup MMAs over 128 tokens (opt-in `merge_t128`, not yet
/// timed): four warpgroups on the 8 × 2 warp grid (two token halves by two column halves)
/// and a producer, so L1's 128 tokens are one program a head, which reads `W_UV[n]` once
/// (the 64-token tile's two programs of a head read it twice, the second time from L2 at
/// best) and holds half the part rows an SM does now (two 64-token programs an SM).
pub fn wide_warpgroup_fused_tile() -> FusedTile {
    FusedTile {
        block_t: FUSED_WARPGROUP_WIDE_BLOCK_T,
        ..warpgroup_fused_tile()
    }
}

/// Columns of the 512 latent ones a `mla_history_reduce` program merges (`COLS`): the
/// widest that still gives `programs` (tokens × gathered heads) four programs an SM, at
/// least 128. 1 × 32768 (128 programs of 64 splits) merges a quarter row a program.
pub fn reduce_cols(programs: u64, num_sms: u32) -> u32 {
    let mut cols = 512;
    while cols > 128 && programs * u64::from(512 / cols) < 4 * u64::from(num_sms) {
        cols /= 2;
    }
    cols
}
/// Most heads of one `mla_current` program.
pub const CURRENT_BLOCK_H: u32 = 32;

/// A decode step the plan cannot be built for.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlanError {
    /// A forced history tile height the kernel has no tiling for.
    #[error("history tile of {got} heads; choose one of {HIST_BLOCK_H_CHOICES:?}")]
    HistoryHeads {
        /// The forced height.
        got: u32,
    },
    /// A forced history key tile the pages cannot be cut into.
    #[error("history key tile of {got} keys; choose a power of two from 16 up to {max} (the largest that divides the page)")]
    HistoryKvTile {
        /// The forced keys per tile.
        got: u32,
        /// The largest power of two dividing the page.
        max: u32,
    },
    /// A forced fused-merge tile on warpgroup MMAs for a device without them.
    #[error("the fused merge's warpgroup tile (`FusedTile::warpgroups`) needs warpgroup MMAs (an sm_90a device); this plan is for mma.sync")]
    WarpgroupTileOnSync,
    /// The step has no request.
    #[error("the batch is empty; a decode step needs at least one request")]
    EmptyBatch,
    /// `query_lens` and `seq_lens` differ in length.
    #[error(
        "query_lens has {got} entries but seq_lens has {expected}; give one of each per request"
    )]
    BatchLength {
        /// Entries of `query_lens`.
        got: usize,
        /// Entries of `seq_lens`.
        expected: usize,
    },
    /// A request has no current-chunk token.
    #[error("request {request} has query_len 0; a decode request carries 1..={max} tokens", max = MAX_QUERY_LEN)]
    EmptyQuery {
        /// Request index.
        request: usize,
    },
    /// A request's current chunk is longer than [`MAX_QUERY_LEN`].
    #[error("request {request} has query_len {query_len} > {max}, the longest current chunk supported", max = MAX_QUERY_LEN)]
    QueryTooLong {
        /// Request index.
        request: usize,
        /// Its current-chunk length.
        query_len: u32,
    },
    /// A request's current chunk is longer than its sequence.
    #[error("request {request} has query_len {query_len} > seq_len {seq_len}; the chunk is part of the sequence")]
    QueryLongerThanSequence {
        /// Request index.
        request: usize,
        /// Its current-chunk length.
        query_len: u32,
        /// Its sequence length.
        seq_len: u32,
    },
    /// `heads_per_rank` is 0.
    #[error("heads_per_rank = 0; each rank owns at least one head")]
    NoHeads,
    /// The KV block size is not a positive multiple of 16.
    #[error("block_size = {0} is not a positive multiple of 16")]
    BlockSize(u32),
    /// The activation dtype is neither bf16 nor f16.
    #[error("activation dtype {0} is not supported; use bf16 or f16")]
    Dtype(ScalarType),
    /// The block table's rows are narrower than a request needs.
    #[error("request {request} needs {needed} block-table columns but rows have {stride}")]
    BlockTableTooNarrow {
        /// Request index.
        request: usize,
        /// Columns it needs.
        needed: u64,
        /// Row stride of the block table, in entries.
        stride: usize,
    },
    /// `num_sms` is 0.
    #[error("num_sms = 0; give the device's multiprocessor count (or 1 for one split)")]
    NoSms,
    /// A size or index does not fit the kernels' 32-bit indices.
    #[error("{what} = {value} overflows the 32-bit index range of the kernels")]
    Overflow {
        /// Name of the value.
        what: &'static str,
        /// The value.
        value: u64,
    },
}

/// What a decode step is: the batch, the DCP geometry and the model side (spec §2, §9).
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeStep {
    /// q_len_b: current-chunk tokens of each request (1 + MTP/speculative tokens).
    pub query_lens: Vec<u32>,
    /// S_b: total length of each request, history plus the current chunk.
    pub seq_lens: Vec<u32>,
    /// D, I and B of §2.2.
    pub layout: DcpLayout,
    /// N: heads owned by one rank (the history pass sees D·N gathered heads).
    pub heads_per_rank: u32,
    /// Activation dtype of queries, cache, partial outputs and V-up (bf16 or f16).
    pub dtype: ScalarType,
    /// Softmax scale of the full 576-wide product (§1.2).
    pub softmax_scale: f32,
    /// Columns of one block-table row (max virtual blocks per request).
    pub block_table_stride: usize,
    /// Multiprocessors of the device: drives the split count (any value ≥ 1 on the CPU).
    pub num_sms: u32,
}

/// The buffers a plan's kernels read and write, by role. A backend maps each to its storage;
/// on the GPU `SendOut`/`SendLse` (and `RecvOut`/`RecvLse`) are two typed views of one byte
/// buffer laid out by [`ExchangeLayout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BufferRole {
    /// `q_all [D, T, N, 576]`, rank-major all-gather of the queries.
    QAll,
    /// `q_loc [T, N, 576]`, this rank's queries.
    QLoc,
    /// `cache [num_blocks, B, 576]`, this rank's paged latent shard.
    LatentCache,
    /// `block_table [batch, stride]` i32.
    BlockTable,
    /// `token_req [T]` i32: the request of each token.
    TokenReq,
    /// `cu_seqlens_q [batch + 1]` i32: first token of each request.
    CuSeqlensQ,
    /// `hist_lens [batch]` i32: this rank's local history lengths.
    HistLens,
    /// `cur_kv [T, 576]`, the current chunk's latent rows (replicated).
    CurKv,
    /// Split scratch `[T, D·N, S, 512]` f32.
    SplitOut,
    /// Split scratch `[T, D·N, S]` f32.
    SplitLse,
    /// `hist_send` outputs (activation dtype view).
    SendOut,
    /// `hist_send` LSEs (f32 view).
    SendLse,
    /// `hist_recv` outputs (activation dtype view).
    RecvOut,
    /// `hist_recv` LSEs (f32 view).
    RecvLse,
    /// `cur_out [T, N, 512]`.
    CurOut,
    /// `cur_lse [T, N]` f32.
    CurLse,
    /// `lat_out [T, N, 512]`, the combine output.
    LatOut,
    /// `w_uv [N, 512, 128]`, this rank's heads.
    WUv,
    /// `y [T, N·128]`.
    Y,
}

/// One kernel argument: a buffer by role or a scalar by value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PlanArg {
    /// A buffer, by role.
    Buffer(BufferRole),
    /// An `i32` scalar.
    I32(i32),
    /// An `i64` scalar.
    I64(i64),
    /// An `f32` scalar.
    F32(f32),
}

/// One kernel launch: the kernel of the `mla` module, its constexprs, grid and arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelLaunch {
    /// Name of the kernel in the `mla` module.
    pub kernel: &'static str,
    /// Constexpr bindings in declaration order.
    pub constexprs: Vec<(&'static str, ConstValue)>,
    /// `[x, y, z]`, x fastest.
    pub grid: [u32; 3],
    /// Arguments in parameter order.
    pub args: Vec<PlanArg>,
    /// Integer parameters the specialization may assume multiples of 16, and 64-bit ones in
    /// `int`'s range (their arguments here keep the promises; part of [`KernelLaunch::key`]).
    pub promises: Promises,
}

impl KernelLaunch {
    /// The constexprs as specializer bindings.
    pub fn bindings(&self) -> Vec<Binding> {
        self.constexprs
            .iter()
            .map(|(n, v)| Binding::new(*n, v.clone()))
            .collect()
    }

    /// `kernel<NAME=value,...>`, for reports and specialization caches.
    pub fn key(&self) -> String {
        let b: Vec<String> = self
            .constexprs
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        let key = format!("{}<{}>", self.kernel, b.join(","));
        let key = if self.promises.divisible.is_empty() {
            key
        } else {
            format!("{key}|div16[{}]", self.promises.divisible.join(","))
        };
        key + &self.promises.i32_key()
    }

    /// Specializes the launch's kernel on its constexprs and divisibility promises.
    pub fn compile(&self) -> Result<attn_dsl::driver::Compiled, MlaKernelError> {
        compile_kernel_assuming(self.kernel, &self.bindings(), &self.promises)
    }
}

/// Layout of `hist_send` / `hist_recv` (§9.1): D chunks; chunk p = { out `[N, T, 512]` in the
/// activation dtype, lse `[N, T]` f32 }, the lse part starting on a 256 B boundary and each
/// chunk padded to a 256 B multiple, so the exchange moves raw bytes and keeps the f32 LSE bits.
/// Same arithmetic as the plumbing branch's `chunk_layout::ChunkLayout`; the kernels take it as
/// element strides of the two typed views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExchangeLayout {
    /// Ranks D (chunks).
    pub ranks: usize,
    /// Heads per rank N.
    pub heads: usize,
    /// Tokens T.
    pub tokens: usize,
    /// Bytes per activation element.
    pub elem_bytes: usize,
    lse_offset_bytes: usize,
    chunk_bytes: usize,
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

impl ExchangeLayout {
    /// The layout for `ranks` ranks of `heads × tokens` rows of `elem_bytes`-byte elements.
    pub fn new(ranks: usize, heads: usize, tokens: usize, elem_bytes: usize) -> Self {
        let rows = heads * tokens;
        let lse_offset_bytes = round_up(rows * LATENT * elem_bytes, CHUNK_ALIGN);
        let chunk_bytes = round_up(lse_offset_bytes + rows * 4, CHUNK_ALIGN);
        ExchangeLayout {
            ranks,
            heads,
            tokens,
            elem_bytes,
            lse_offset_bytes,
            chunk_bytes,
        }
    }

    /// Bytes of one padded chunk (what goes to one peer).
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    /// Bytes of the whole buffer.
    pub fn total_bytes(&self) -> usize {
        self.chunk_bytes * self.ranks
    }

    /// Byte offset of the lse part inside a chunk.
    pub fn lse_offset_bytes(&self) -> usize {
        self.lse_offset_bytes
    }

    /// Chunk stride in activation elements (the `*T` view).
    pub fn chunk_stride_out(&self) -> usize {
        self.chunk_bytes / self.elem_bytes
    }

    /// Chunk stride in f32 elements (the `*f32` view).
    pub fn chunk_stride_lse(&self) -> usize {
        self.chunk_bytes / 4
    }

    /// Offset of the lse part in f32 elements from its chunk's start.
    pub fn lse_offset(&self) -> usize {
        self.lse_offset_bytes / 4
    }

    /// Element index of `out[h, t, l]` of chunk p in the activation view.
    pub fn out_index(&self, p: usize, h: usize, t: usize, l: usize) -> usize {
        p * self.chunk_stride_out() + (h * self.tokens + t) * LATENT + l
    }

    /// Element index of `lse[h, t]` of chunk p in the f32 view.
    pub fn lse_index(&self, p: usize, h: usize, t: usize) -> usize {
        p * self.chunk_stride_lse() + self.lse_offset() + h * self.tokens + t
    }
}

/// Everything one rank launches for a decode step, in stream order, plus the host metadata
/// arrays the kernels read.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodePlan {
    /// The decode step the plan is for.
    pub step: DecodeStep,
    /// T: tokens of the step (Σ q_len_b).
    pub num_tokens: usize,
    /// KV splits of the history pass.
    pub num_splits: u32,
    /// Layout of `hist_send` / `hist_recv`.
    pub exchange: ExchangeLayout,
    /// `mla_history`: split-KV attention of all D·N gathered heads over the rank's shard.
    pub history: KernelLaunch,
    /// `mla_history_reduce`: merges the splits into `hist_send`; none when the history runs
    /// one split (`DIRECT`: it writes `hist_send` itself).
    pub history_reduce: Option<KernelLaunch>,
    /// `mla_current`: causal chunk attention of the rank's own heads (side stream).
    pub current: KernelLaunch,
    /// `mla_combine`: D received history partials + the current part → `lat_out`.
    pub combine: KernelLaunch,
    /// `mla_v_up`: the V-up fallback kernel (the GPU op prefers cuBLAS).
    pub v_up: KernelLaunch,
    /// `mla_combine_v_up`: the combine and V-up in one kernel, `y` straight from the parts
    /// (the op's `VupPath::Fused`; `lat_out` is then not written). Its `DCP_SIZE` is the
    /// group's, which the kernel takes up to [`FUSED_MAX_DCP`] (see [`Self::launches`]).
    pub combine_v_up: KernelLaunch,
}

/// Sets (or adds, at the end) the constexpr `name` of `l`.
fn set_constexpr(l: &mut KernelLaunch, name: &'static str, v: ConstValue) {
    match l.constexprs.iter_mut().find(|(n, _)| *n == name) {
        Some(slot) => slot.1 = v,
        None => l.constexprs.push((name, v)),
    }
}

/// Sets the fused combine + V-up's tile constexprs and its grid over `tokens`.
pub(super) fn set_fused_tile(l: &mut KernelLaunch, tile: FusedTile, tokens: usize) {
    let int = |v: u32| ConstValue::Int(v.into());
    set_constexpr(l, "BLOCK_T", int(tile.block_t));
    set_constexpr(l, "LAT_CHUNK", int(tile.lat_chunk));
    set_constexpr(l, "STAGES", int(tile.stages));
    set_constexpr(l, "BLOCK_V", int(tile.block_v));
    // Named only when on, so the `mma.sync` tiles' keys stay as they were.
    l.constexprs.retain(|(n, _)| *n != "WARPGROUPS");
    if tile.warpgroups {
        set_constexpr(l, "WARPGROUPS", ConstValue::Bool(true));
    }
    l.grid[0] = (tokens as u32).div_ceil(tile.block_t.max(1));
    l.grid[2] = 128 / tile.block_v.max(1);
}

/// Sets the history reduce's columns a program and its grid's column blocks.
pub(super) fn set_reduce_cols(l: &mut KernelLaunch, cols: u32) {
    set_constexpr(l, "COLS", ConstValue::Int(cols.into()));
    l.grid[2] = 512 / cols.max(1);
}

pub(super) fn next_pow2_at_least(x: u32, floor: u32) -> u32 {
    x.max(floor).next_power_of_two()
}

pub(super) fn to_i32(what: &'static str, v: u64) -> Result<i32, PlanError> {
    i32::try_from(v).map_err(|_| PlanError::Overflow { what, value: v })
}

impl DecodeStep {
    /// `batch` bf16 decode requests (q_len 1) of `ctx` tokens each over `heads_per_rank`
    /// heads, the block table as wide as the longest needs: the benchmark rows' shape.
    pub fn uniform_decode(
        batch: usize,
        ctx: u32,
        heads_per_rank: u32,
        layout: DcpLayout,
        softmax_scale: f32,
        num_sms: u32,
    ) -> Self {
        DecodeStep {
            query_lens: vec![1; batch],
            seq_lens: vec![ctx; batch],
            heads_per_rank,
            dtype: ScalarType::Bf16,
            softmax_scale,
            block_table_stride: layout.max_blocks_per_request(u64::from(ctx)) as usize,
            layout,
            num_sms,
        }
    }

    /// Checks the batch and geometry against what the kernels support.
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.seq_lens.is_empty() {
            return Err(PlanError::EmptyBatch);
        }
        if self.query_lens.len() != self.seq_lens.len() {
            return Err(PlanError::BatchLength {
                got: self.query_lens.len(),
                expected: self.seq_lens.len(),
            });
        }
        if self.heads_per_rank == 0 {
            return Err(PlanError::NoHeads);
        }
        if self.num_sms == 0 {
            return Err(PlanError::NoSms);
        }
        let b = self.layout.block_size;
        if b == 0 || !b.is_multiple_of(16) {
            return Err(PlanError::BlockSize(b));
        }
        if !matches!(self.dtype, ScalarType::Bf16 | ScalarType::F16) {
            return Err(PlanError::Dtype(self.dtype));
        }
        for (request, (&q, &s)) in self.query_lens.iter().zip(&self.seq_lens).enumerate() {
            if q == 0 {
                return Err(PlanError::EmptyQuery { request });
            }
            if q > MAX_QUERY_LEN {
                return Err(PlanError::QueryTooLong {
                    request,
                    query_len: q,
                });
            }
            // The kernels hold lengths and history positions in i32.
            if i32::try_from(s).is_err() {
                return Err(PlanError::Overflow {
                    what: "seq_len",
                    value: u64::from(s),
                });
            }
            if q > s {
                return Err(PlanError::QueryLongerThanSequence {
                    request,
                    query_len: q,
                    seq_len: s,
                });
            }
            let needed = self.virtual_blocks(s);
            if needed > self.block_table_stride as u64 {
                return Err(PlanError::BlockTableTooNarrow {
                    request,
                    needed,
                    stride: self.block_table_stride,
                });
            }
        }
        Ok(())
    }

    /// Block-table columns a request of total length `s` uses: ⌈s / (B·D)⌉ (§2.2).
    pub fn virtual_blocks(&self, s: u32) -> u64 {
        u64::from(s).div_ceil(u64::from(self.layout.block_size) * u64::from(self.layout.dcp_size))
    }

    /// T = Σ q_len_b.
    pub fn num_tokens(&self) -> usize {
        self.query_lens.iter().map(|&q| q as usize).sum()
    }

    /// `token_req[t]`: the request of token t (tokens are the requests' chunks in order).
    pub fn token_req(&self) -> Vec<i32> {
        let mut v = Vec::with_capacity(self.num_tokens());
        for (b, &q) in self.query_lens.iter().enumerate() {
            v.extend(std::iter::repeat_n(b as i32, q as usize));
        }
        v
    }

    /// `cu_seqlens_q`: `[0, q_0, q_0 + q_1, ...]` (batch + 1 entries).
    pub fn cu_seqlens_q(&self) -> Vec<i32> {
        let mut v = vec![0i32];
        for &q in &self.query_lens {
            let last = *v.last().unwrap_or(&0);
            v.push(last + q as i32);
        }
        v
    }

    /// `cp_history_seq_len` of `rank` (§2.3): `n_local(S_b − q_len_b, rank)`.
    pub fn hist_lens(&self, rank: u32) -> Vec<i32> {
        self.seq_lens
            .iter()
            .zip(&self.query_lens)
            .map(|(&s, &q)| {
                self.layout
                    .n_local(history_len(u64::from(s), u64::from(q)), rank) as i32
            })
            .collect()
    }

    /// KV splits of the history pass (§9.2), the same on every rank so that one
    /// specialization serves all of them:
    /// - FlashMLA-like occupancy: the most splits for which `T · head_tiles · splits` still
    ///   fits the SMs' resident programs ([`HistoryTiling::programs_per_sm`]) in one wave. Rounding up
    ///   instead starts a second, partial wave: L2 (128 programs, 264 resident) ran 1.74 ms
    ///   with 3 splits against 1.30 ms with 2 (H200, 2026-12-01);
    /// - local-length threshold: no split gets fewer than [`MIN_KEYS_PER_SPLIT`] keys of the
    ///   longest local history (rank 0 holds the most: `n_local` is non-increasing in r);
    /// - at most [`MAX_SPLITS`], at least 1.
    pub fn num_splits(&self, tiling: HistoryTiling) -> u32 {
        let programs = (self.num_tokens() as u64 * u64::from(tiling.head_tiles)).max(1);
        let slots = u64::from(self.num_sms) * u64::from(tiling.programs_per_sm);
        let occupancy = (slots / programs).max(1);
        let by_length = self
            .longest_local_history()
            .div_ceil(MIN_KEYS_PER_SPLIT)
            .max(1);
        occupancy.min(by_length).clamp(1, u64::from(MAX_SPLITS)) as u32
    }

    /// History tiles of `kv_tile` keys the longest program runs over `num_splits` splits (rank
    /// 0's share: ranks differ by at most a page).
    pub fn tiles_per_program(&self, kv_tile: u32, num_splits: u32) -> u64 {
        self.longest_local_history()
            .div_ceil(u64::from(kv_tile.max(1)))
            .div_ceil(u64::from(num_splits.max(1)))
    }

    /// Keys of the longest local history (rank 0 holds the most: `n_local` is
    /// non-increasing in r).
    fn longest_local_history(&self) -> u64 {
        let longest = self.hist_lens(0).into_iter().max().unwrap_or(0);
        u64::try_from(longest).unwrap_or(0)
    }

    /// Builds the plan (same for every rank: per-rank data lives in the buffers).
    pub fn plan(&self) -> Result<DecodePlan, PlanError> {
        self.validate()?;
        self.plan_with_splits(None)
    }

    /// Like [`DecodeStep::plan`] with the split count forced (tests, tuning); clamped to
    /// `1..=MAX_SPLITS`.
    pub fn plan_with_splits(&self, splits: Option<u32>) -> Result<DecodePlan, PlanError> {
        self.plan_with(splits, None)
    }

    /// Like [`DecodeStep::plan_with_splits`] with the history tile height forced too (one of
    /// [`HIST_BLOCK_H_CHOICES`]; tuning sweeps).
    pub fn plan_with(
        &self,
        splits: Option<u32>,
        block_h: Option<u32>,
    ) -> Result<DecodePlan, PlanError> {
        self.plan_tuned(MmaKind::Sync, splits, block_h, None)
    }

    /// Like [`DecodeStep::plan_with`] for a target whose dots run as `mma` (the history
    /// tiling depends on it: [`HistoryTiling::for_target`]), with the history's keys per tile
    /// forced too (`KV_TILE`, tuning sweeps: a power of two from 16 up to the largest that
    /// divides the page).
    pub fn plan_tuned(
        &self,
        mma: MmaKind,
        splits: Option<u32>,
        block_h: Option<u32>,
        kv_tile: Option<u32>,
    ) -> Result<DecodePlan, PlanError> {
        self.validate()?;
        if let Some(h) = block_h.filter(|h| !HIST_BLOCK_H_CHOICES.contains(h)) {
            return Err(PlanError::HistoryHeads { got: h });
        }
        let dims = launches::StepDims::new(self)?;
        let tiling = HistoryTiling::for_target(dims.gathered, block_h, mma);
        let shape = launches::HistoryShape {
            tiling,
            kv_tile: self.history_kv_tile(tiling, kv_tile)?,
            num_splits: splits.map_or_else(|| self.num_splits(tiling), |s| s.clamp(1, MAX_SPLITS)),
        };
        let exchange = ExchangeLayout::new(dims.dcp as usize, dims.heads as usize, dims.tokens, 2);
        Ok(DecodePlan {
            step: self.clone(),
            num_tokens: dims.tokens,
            num_splits: shape.num_splits,
            exchange,
            history: launches::history(self, &dims, shape, &exchange),
            history_reduce: launches::history_reduce(self, &dims, shape, &exchange),
            current: launches::current(self, &dims),
            combine: launches::combine(self, &dims, &exchange),
            v_up: launches::v_up(self, &dims),
            combine_v_up: launches::combine_v_up(self, &dims, &exchange, mma),
        })
    }

    /// The history's keys a tile: `forced` (a power of two from 16 up to the largest that
    /// divides the page), else the largest power of two at most the tiling's tile that
    /// divides the page, so tiles never straddle a block.
    fn history_kv_tile(
        &self,
        tiling: HistoryTiling,
        forced: Option<u32>,
    ) -> Result<u32, PlanError> {
        let b = self.layout.block_size;
        let preferred = tiling.kv_tile();
        let page_tile = 1u32 << b.trailing_zeros().min(preferred.trailing_zeros());
        let largest = 1u32 << b.trailing_zeros().min(31);
        match forced {
            None => Ok(page_tile),
            Some(k) if k.is_power_of_two() && (16..=largest).contains(&k) => Ok(k),
            Some(got) => Err(PlanError::HistoryKvTile { got, max: largest }),
        }
    }
}

impl DecodePlan {
    /// The fused combine + V-up retiled (tuning sweeps; the kernel's `require`s refuse tiles
    /// it has no code for when it is specialized).
    pub fn retile_combine_v_up(&mut self, tile: FusedTile) {
        set_fused_tile(&mut self.combine_v_up, tile, self.num_tokens);
    }

    /// The fused combine + V-up forced to `tile` on a plan for `mma` (a context's
    /// `forced_fused_tile`): a warpgroup tile only where the plan is for warpgroup MMAs.
    pub fn force_fused_tile(&mut self, mma: MmaKind, tile: FusedTile) -> Result<(), PlanError> {
        if tile.warpgroups && mma != MmaKind::Warpgroup {
            return Err(PlanError::WarpgroupTileOnSync);
        }
        self.retile_combine_v_up(tile);
        Ok(())
    }

    /// The history's key tiles moved as TMA boxes (`true`: on the two-warpgroup tiling, sm_90a)
    /// or by `cp.async`, whatever [`HIST_TMA`] chose (tests of the form the plan does not
    /// pick, A/B runs).
    pub fn set_history_tma(&mut self, tma: bool) {
        for (name, v) in &mut self.history.constexprs {
            if *name == "TMA" {
                *v = ConstValue::Bool(tma);
            }
        }
    }

    /// The history reduce's programs set to merge `cols` columns each (tuning sweeps; the
    /// kernel's `require`s refuse a width it has no code for when it is specialized).
    pub fn recolumn_history_reduce(&mut self, cols: u32) {
        if let Some(l) = &mut self.history_reduce {
            set_reduce_cols(l, cols);
        }
    }

    /// The fused combine + V-up reading part `rank` (the rank's own history) from the send
    /// buffer, where the history wrote it, so the exchange may leave it out.
    pub fn combine_v_up_reading_own_part(&self, rank: u32) -> KernelLaunch {
        let mut l = self.combine_v_up.clone();
        // The own part precedes the three exchange strides (`merge_args`).
        let own = l.args.len().checked_sub(4).and_then(|i| l.args.get_mut(i));
        if let Some(a @ PlanArg::I32(NO_OWN_PART)) = own {
            *a = PlanArg::I32(i32::try_from(rank).unwrap_or(NO_OWN_PART));
        }
        l
    }

    /// For a step whose chunks are one token each (plain decode), merged by the fused
    /// combine + V-up: the current part writes only its LSE (`mla_current`'s `LSE_ONLY`) and
    /// the fused merge reads the current rows from `cur_kv` (`CUR_FROM_KV`), since a chunk of
    /// one key gives each head of its token that key's latent row, exactly. The
    /// `[T, N, 512]` current rows then never go to memory (at L1 16.8 MB written by the side
    /// stream and read back by the merge). Returns whether the plan changed; the plan's
    /// unfused `combine` no longer has its current rows afterwards, so only a context
    /// merging by `combine_v_up` asks.
    pub fn read_single_key_chunks_from_kv(&mut self) -> bool {
        let single = self.step.query_lens.iter().all(|&q| q == 1);
        if !single || !self.fused_merges_the_group() {
            return false;
        }
        set_constexpr(&mut self.current, "LSE_ONLY", ConstValue::Bool(true));
        set_constexpr(
            &mut self.combine_v_up,
            "CUR_FROM_KV",
            ConstValue::Bool(true),
        );
        for a in &mut self.combine_v_up.args {
            if *a == PlanArg::Buffer(BufferRole::CurOut) {
                *a = PlanArg::Buffer(BufferRole::CurKv);
            }
        }
        true
    }

    /// Whether the current part's rows come from `cur_kv` ([`Self::read_single_key_chunks_from_kv`]).
    pub fn current_rows_from_kv(&self) -> bool {
        self.combine_v_up
            .constexprs
            .contains(&("CUR_FROM_KV", ConstValue::Bool(true)))
    }

    /// Whether the fused combine + V-up takes this plan's group as it is
    /// ([`FUSED_MAX_DCP`]); AG+RS merges one part of history at any group size.
    pub fn fused_merges_the_group(&self) -> bool {
        fused_merges(self.step.layout.dcp_size)
    }

    /// Every launch the plan holds, in S0/S1 program order (§9.4): history, reduce, current,
    /// combine, V-up, and the fused combine + V-up that replaces the last two under the op's
    /// `VupPath::Fused` where the group is small enough for it ([`FUSED_MAX_DCP`]).
    pub fn launches(&self) -> Vec<&KernelLaunch> {
        [
            Some(&self.history),
            self.history_reduce.as_ref(),
            Some(&self.current),
            Some(&self.combine),
            Some(&self.v_up),
            self.fused_merges_the_group().then_some(&self.combine_v_up),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Elements of each buffer role (activation elements, f32 or i32 as the role's dtype),
    /// for a backend that allocates them. `LatentCache` and `BlockTable` belong to the
    /// caller and are `None`.
    pub fn buffer_len(&self, role: BufferRole) -> Option<usize> {
        let (t, d, n) = (
            self.num_tokens,
            self.step.layout.dcp_size as usize,
            self.step.heads_per_rank as usize,
        );
        let s = self.num_splits as usize;
        let batch = self.step.seq_lens.len();
        Some(match role {
            BufferRole::QAll => d * t * n * QK_WIDTH,
            BufferRole::QLoc => t * n * QK_WIDTH,
            BufferRole::LatentCache | BufferRole::BlockTable => return None,
            BufferRole::TokenReq => t,
            BufferRole::CuSeqlensQ => batch + 1,
            BufferRole::HistLens => batch,
            BufferRole::CurKv => t * QK_WIDTH,
            BufferRole::SplitOut => t * d * n * s * LATENT,
            BufferRole::SplitLse => t * d * n * s,
            BufferRole::SendOut | BufferRole::RecvOut => d * self.exchange.chunk_stride_out(),
            BufferRole::SendLse | BufferRole::RecvLse => d * self.exchange.chunk_stride_lse(),
            BufferRole::CurOut | BufferRole::LatOut => t * n * LATENT,
            BufferRole::CurLse => t * n,
            BufferRole::WUv => n * LATENT * V_HEAD,
            BufferRole::Y => t * n * V_HEAD,
        })
    }

    /// Element type of each buffer role.
    pub fn buffer_dtype(&self, role: BufferRole) -> ScalarType {
        match role {
            BufferRole::BlockTable
            | BufferRole::TokenReq
            | BufferRole::CuSeqlensQ
            | BufferRole::HistLens => ScalarType::I32,
            BufferRole::SplitOut
            | BufferRole::SplitLse
            | BufferRole::SendLse
            | BufferRole::RecvLse
            | BufferRole::CurLse => ScalarType::F32,
            _ => self.step.dtype,
        }
    }
}
