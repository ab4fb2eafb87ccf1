//! The device buffers of one rank, allocated once for the context's token bucket (spec §9.1) so
//! that steady-state calls allocate nothing and a CUDA graph would see fixed addresses. Every float
//! buffer starts NaN-poisoned (bytes 0xFF), so an element a kernel forgets to write shows up.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use super::super::act_dtype::ActivationElem;
use super::super::chunk_layout::ChunkLayout;
use super::super::plan::{self, LATENT, MAX_SPLITS, QK_WIDTH, V_HEAD};
use super::config::{ExchangeMode, MlaDcpConfig};
use super::error::MlaError;
use cudarc::driver::{result, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, PinnedHostSlice};
use std::sync::Arc;

/// i32 elements per 16 bytes: every metadata section starts on a 16-byte boundary, as the
/// launch validation requires of every buffer argument.
const I32_ALIGN: usize = 4;

fn pad(n: usize) -> Option<usize> {
    n.div_ceil(I32_ALIGN).checked_mul(I32_ALIGN)
}

/// `a · b · …` as the element count of `buffer`, or a typed error naming it. The bucket
/// bound ([`MlaDcpConfig::check_bucket`]) keeps these far from usize::MAX; the checks keep a
/// wrapped size from ever becoming a short allocation the kernels write past.
fn size(buffer: &'static str, factors: &[usize]) -> Result<usize, MlaError> {
    factors
        .iter()
        .try_fold(1usize, |n, &f| n.checked_mul(f))
        .ok_or(MlaError::SizeOverflow { buffer })
}

/// Where `token_req`, `cu_seqlens_q` and `hist_lens` live inside the one metadata buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MetaLayout {
    pub token_req: usize,
    pub cu_seqlens_q: usize,
    pub hist_lens: usize,
    pub total: usize,
}

impl MetaLayout {
    pub fn new(max_tokens: usize, max_batch: usize) -> Result<Self, MlaError> {
        let overflow = MlaError::SizeOverflow { buffer: "metadata" };
        let cu_seqlens_q = pad(max_tokens).ok_or(overflow)?;
        let hist_lens = max_batch
            .checked_add(1)
            .and_then(pad)
            .and_then(|n| n.checked_add(cu_seqlens_q))
            .ok_or(MlaError::SizeOverflow { buffer: "metadata" })?;
        let total = pad(max_batch)
            .and_then(|n| n.checked_add(hist_lens))
            .ok_or(MlaError::SizeOverflow { buffer: "metadata" })?;
        Ok(MetaLayout {
            token_req: 0,
            cu_seqlens_q,
            hist_lens,
            total,
        })
    }
}

/// (token, split) pairs the split scratch holds. The plan's heuristic gives at most
/// ⌊slots / (T · head_tiles)⌋ splits (slots = SMs × resident programs per SM, at least one
/// split), so T · splits ≤ T + ⌈slots / head_tiles⌉; a forced count S needs T · S.
pub(crate) fn split_slots(config: &MlaDcpConfig, num_sms: usize) -> usize {
    let t = config.max_tokens;
    let max = MAX_SPLITS as usize;
    // Saturating: the bucket bound keeps `t · 64` far below usize::MAX, and a saturated count
    // would fail the allocation, never shrink it.
    match config.forced_splits {
        Some(s) => t.saturating_mul(usize::try_from(s).unwrap_or(max).clamp(1, max)),
        None => {
            let tiling = plan::HistoryTiling::new(
                config.gathered_heads() as u64,
                config.forced_history_heads,
            );
            let tiles = (tiling.head_tiles as usize).max(1);
            let slots = num_sms.saturating_mul(tiling.programs_per_sm as usize);
            t.saturating_add(slots.div_ceil(tiles))
                .min(t.saturating_mul(max))
        }
    }
}

/// An f32 view of a byte buffer owned elsewhere: the history reduce writes the partial outputs
/// (activation dtype) and the LSEs (f32) of one exchange buffer, so it needs two mutable typed
/// views of the same allocation at once, which cudarc's borrow rules cannot give. The alias is
/// never freed (dropping it leaks the handle, not the memory), and it is only used on the stream
/// that owns the buffer, so stream order keeps it coherent with the owner.
pub(crate) struct F32Alias {
    view: Option<CudaSlice<f32>>,
}

impl F32Alias {
    /// # Safety
    /// `owner` must outlive the alias and be used only on `stream` while the alias is in use.
    unsafe fn new(stream: &Arc<CudaStream>, owner: &CudaSlice<u8>) -> Self {
        let (ptr, _guard) = owner.device_ptr(stream);
        // SAFETY: `ptr` is a live allocation of `owner.len()` bytes; the caller keeps it alive.
        let view = unsafe { stream.upgrade_device_ptr::<f32>(ptr, owner.len() / 4) };
        F32Alias { view: Some(view) }
    }

    pub fn get_mut(&mut self) -> Option<&mut CudaSlice<f32>> {
        self.view.as_mut()
    }
}

impl Drop for F32Alias {
    fn drop(&mut self) {
        if let Some(v) = self.view.take() {
            // Forget the handle without freeing: the owner frees the memory.
            let _ = v.leak();
        }
    }
}

/// Workspace of the AG+RS parity mode (allocated only in that mode).
pub(crate) struct AgRsWorkspace<E> {
    /// `[T, D·N, 512]`: the history partials in the gathered-head layout AG+RS expects.
    pub out: CudaSlice<E>,
    /// `[T, D·N]` f32.
    pub lse: CudaSlice<f32>,
    /// One-chunk exchange buffer holding the merged history of this rank's heads, which the
    /// combine (DCP_SIZE = 1) merges with the current part.
    pub recv: CudaSlice<u8>,
}

/// Every buffer one rank's decode step reads or writes, besides the caller's inputs.
pub(crate) struct DecodeBuffers<E> {
    pub meta_layout: MetaLayout,
    /// `token_req | cu_seqlens_q | hist_lens` (i32).
    pub meta: CudaSlice<i32>,
    /// Pinned staging of `meta`, so the upload is a true async copy.
    pub meta_host: PinnedHostSlice<i32>,
    /// `q_all [D, T, N, 576]`: the all-gather target (NCCL modes with D > 1 only).
    pub q_all: Option<CudaSlice<E>>,
    /// Split scratch `[T, D·N, S, 512]` f32 and `[T, D·N, S]` f32.
    pub split_out: CudaSlice<f32>,
    pub split_lse: CudaSlice<f32>,
    pub split_slots: usize,
    pub hist_send: CudaSlice<u8>,
    /// Declared after `hist_send`: never outlives it.
    pub send_lse: F32Alias,
    pub hist_recv: CudaSlice<u8>,
    pub cur_out: CudaSlice<E>,
    pub cur_lse: CudaSlice<f32>,
    pub lat_out: CudaSlice<E>,
    pub y: CudaSlice<E>,
    pub ag_rs: Option<AgRsWorkspace<E>>,
}

/// Fills `buf` with 0xFF bytes (NaN for bf16, f16 and f32; −1 for i32) on `stream`.
pub(crate) fn poison<T, B: DevicePtrMut<T>>(
    stream: &Arc<CudaStream>,
    buf: &mut B,
) -> Result<(), MlaError> {
    let bytes = buf.num_bytes();
    let (ptr, _guard) = buf.device_ptr_mut(stream);
    // SAFETY: `ptr` addresses `bytes` bytes of a live allocation of this context.
    unsafe { result::memset_d8_async(ptr, 0xFF, bytes, stream.cu_stream()) }
        .map_err(MlaError::driver("poisoning a fresh buffer"))
}

fn alloc<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<CudaSlice<T>, MlaError> {
    let mut s = stream
        .alloc_zeros::<T>(len.max(1))
        .map_err(MlaError::driver("allocating the decode buffers"))?;
    poison(stream, &mut s)?;
    Ok(s)
}

impl<E: ActivationElem> DecodeBuffers<E> {
    /// Allocates every buffer for `config`'s bucket on `stream`'s device.
    pub fn new(
        stream: &Arc<CudaStream>,
        config: &MlaDcpConfig,
        num_sms: usize,
    ) -> Result<Self, MlaError> {
        let (t, d, n) = (config.max_tokens, config.dcp_size(), config.heads());
        let dn = config.gathered_heads();
        let meta_layout = MetaLayout::new(t, config.max_batch)?;
        let meta = alloc::<i32>(stream, meta_layout.total)?;
        // SAFETY: pinned memory is plain host memory; it is fully written before every upload.
        let meta_host = unsafe { stream.context().alloc_pinned::<i32>(meta_layout.total) }
            .map_err(MlaError::driver("allocating the pinned metadata staging"))?;
        let gathers = matches!(config.exchange, ExchangeMode::A2a | ExchangeMode::AgRs) && d > 1;
        let q_all = if gathers {
            Some(alloc::<E>(stream, size("q_all", &[d, t, n, QK_WIDTH])?)?)
        } else {
            None
        };
        let split_slots = split_slots(config, num_sms);
        let chunk = ChunkLayout::new(d, n, t, LATENT, E::DTYPE)?;
        let hist_send = alloc::<u8>(stream, chunk.total_bytes())?;
        // SAFETY: `send_lse` is declared after `hist_send` in this struct (dropped first) and
        // both are used only on the main stream.
        let send_lse = unsafe { F32Alias::new(stream, &hist_send) };
        let ag_rs = if config.exchange == ExchangeMode::AgRs {
            let one = ChunkLayout::new(1, n, t, LATENT, E::DTYPE)?;
            Some(AgRsWorkspace {
                out: alloc::<E>(stream, size("AG+RS out", &[t, dn, LATENT])?)?,
                lse: alloc::<f32>(stream, size("AG+RS lse", &[t, dn])?)?,
                recv: alloc::<u8>(stream, one.total_bytes())?,
            })
        } else {
            None
        };
        Ok(DecodeBuffers {
            meta_layout,
            meta,
            meta_host,
            q_all,
            split_out: alloc::<f32>(stream, size("split_out", &[split_slots, dn, LATENT])?)?,
            split_lse: alloc::<f32>(stream, size("split_lse", &[split_slots, dn])?)?,
            split_slots,
            hist_send,
            send_lse,
            hist_recv: alloc::<u8>(stream, chunk.total_bytes())?,
            cur_out: alloc::<E>(stream, size("cur_out", &[t, n, LATENT])?)?,
            cur_lse: alloc::<f32>(stream, size("cur_lse", &[t, n])?)?,
            lat_out: alloc::<E>(stream, size("lat_out", &[t, n, LATENT])?)?,
            y: alloc::<E>(stream, size("y", &[t, n, V_HEAD])?)?,
            ag_rs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::metadata::DcpLayout;
    use super::*;

    #[test]
    fn meta_sections_are_16_byte_aligned() {
        let m = MetaLayout::new(5, 3).unwrap();
        assert_eq!(
            (m.token_req, m.cu_seqlens_q, m.hist_lens, m.total),
            (0, 8, 12, 16)
        );
        let m = MetaLayout::new(128, 128).unwrap();
        assert_eq!((m.cu_seqlens_q, m.hist_lens, m.total), (128, 260, 388));
    }

    /// A bucket of usize::MAX tokens used to wrap the metadata size (a panic in debug, a
    /// short buffer in release); the sizes are now checked and the bucket itself is refused.
    #[test]
    fn huge_buckets_are_typed_errors() {
        assert!(matches!(
            MetaLayout::new(usize::MAX, 1),
            Err(MlaError::SizeOverflow { .. })
        ));
        assert!(MetaLayout::new(1, usize::MAX).is_err());
        assert!(size("y", &[usize::MAX, 2]).is_err());
        let layout = DcpLayout::new(4, 1, 64).unwrap();
        let ok = MlaDcpConfig::new(layout, 0, 16, 0.1, 128, 64);
        ok.check_bucket().expect("a serving bucket");
        // 2^31 / (4 · 16 · 576) = 58254 tokens at most.
        let edge = MlaDcpConfig {
            max_tokens: 58_254,
            ..ok
        };
        edge.check_bucket().expect("the largest usable bucket");
        for bad in [
            MlaDcpConfig {
                max_tokens: 58_255,
                ..ok
            },
            MlaDcpConfig {
                max_tokens: usize::MAX,
                ..ok
            },
            MlaDcpConfig {
                max_batch: usize::MAX,
                ..ok
            },
            MlaDcpConfig {
                heads_per_rank: u32::MAX,
                ..ok
            },
        ] {
            let err = bad.check_bucket();
            assert!(
                matches!(err, Err(MlaError::BucketTooLarge { .. })),
                "{err:?}"
            );
        }
        let huge = MlaDcpConfig {
            max_tokens: usize::MAX,
            forced_splits: Some(64),
            ..ok
        };
        assert_eq!(split_slots(&huge, 132), usize::MAX);
    }

    #[test]
    fn split_slots_cover_the_heuristic_and_forced_counts() {
        let layout = DcpLayout::new(1, 1, 64).unwrap();
        let mut c = MlaDcpConfig::new(layout, 0, 128, 0.1, 128, 128);
        // D·N = 128 → BLOCK_H 32, 4 head tiles, 2 programs per SM: 128 + 264 / 4.
        assert_eq!(split_slots(&c, 132), 194);
        c.max_tokens = 1;
        assert_eq!(split_slots(&c, 132), 64, "capped at MAX_SPLITS per token");
        c.forced_splits = Some(3);
        assert_eq!(split_slots(&c, 132), 3);
    }

    /// The scratch holds every split count the plan's heuristic picks, for each tile height.
    #[test]
    fn split_slots_hold_the_plans_splits() {
        use super::super::super::plan::DecodeStep;
        for (heads, forced) in [
            (128, None),
            (128, Some(64)),
            (128, Some(16)),
            (16, None),
            (40, None),
        ] {
            for tokens in [1usize, 3, 32, 128] {
                let layout = DcpLayout::new(1, 1, 64).unwrap();
                let mut c = MlaDcpConfig::new(layout, 0, heads, 0.1, tokens, tokens);
                c.forced_history_heads = forced;
                let step = DecodeStep::uniform_decode(tokens, 4096, heads, layout, 0.1, 132);
                let plan = step.plan_with(None, forced).expect("plan");
                let need = plan.num_tokens * plan.num_splits as usize;
                assert!(
                    need <= split_slots(&c, 132),
                    "{heads} heads, {forced:?}, {tokens} tokens: {need} > {}",
                    split_slots(&c, 132)
                );
            }
        }
    }
}
