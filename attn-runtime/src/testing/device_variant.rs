//! A [`PagedData`] problem on the device, run through the public GPU op with a variant:
//! q and out with padded token rows, out NaN-poisoned before every run and checked after
//! (every valid element written and finite, the padding untouched). What a variant's GPU
//! parity test and its bench need, exported so a user's crate does the same.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};

use super::paged::PagedData;
use crate::ops::unified_attention::args::{
    Metadata, MmPrefixRanges, TokenLayout, Tokens, UnifiedAttentionArgs,
};
use crate::ops::unified_attention::gpu::{AttnError, LaunchReport, UnifiedAttentionContext};
use crate::ops::unified_attention::paged_cache::{CacheGeometry, PagedCacheError, PagedKvCache};
use crate::ops::unified_attention::plan::PathChoice;
use crate::ops::unified_attention::variant::Variant;
use crate::ops::unified_attention::variant_args::{AuxTensor, VariantArgs};
use crate::reference::Dtype;
use attn_dsl::kernel::DslType;

/// Poisoned elements after each token row of q and out (16 bytes keeps rows aligned).
pub const DEVICE_ROW_PADDING: usize = 8;

/// A 16-bit kernel dtype with its host conversions.
pub trait DeviceDtype: DslType + DeviceRepr + ValidAsZeroBits + Copy + Send + Sync {
    const DTYPE: Dtype;
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
}

impl DeviceDtype for bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}

impl DeviceDtype for f16 {
    const DTYPE: Dtype = Dtype::F16;
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// Why a device run failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceRunError {
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    #[error(transparent)]
    Cache(#[from] PagedCacheError),
    #[error(transparent)]
    Op(#[from] AttnError),
    #[error("{0}")]
    Output(String),
}

/// The problem, the variant's aux tensors and the poisoned output, on the device.
pub struct DeviceVariantProblem<T> {
    q: CudaSlice<T>,
    out: CudaSlice<T>,
    cache: PagedKvCache<T>,
    cu_seqlens_q: CudaSlice<i32>,
    seq_lens: CudaSlice<i32>,
    block_table: CudaSlice<i32>,
    aux_i32: Option<(CudaSlice<i32>, Vec<i32>, usize)>,
    aux_f32: Option<(CudaSlice<f32>, Vec<f32>, usize)>,
    /// Per-sequence image ranges `[S, R, 2]` (flattened) and `R`.
    mm_ranges: Option<(CudaSlice<i32>, Vec<i32>, usize)>,
    layout: TokenLayout,
    poison: Vec<T>,
    stream: Arc<CudaStream>,
}

impl<T: DeviceDtype> DeviceVariantProblem<T> {
    /// Uploads `data` (padded q rows) and the aux tensors (`(values, row stride)`).
    pub fn upload(
        stream: &Arc<CudaStream>,
        data: &PagedData,
        aux_i32: Option<(&[i32], usize)>,
        aux_f32: Option<(&[f32], usize)>,
    ) -> Result<Self, DeviceRunError> {
        let (hq, d) = (data.num_query_heads, data.head_size);
        let t = data.num_tokens();
        let layout = TokenLayout {
            token_stride: hq * d + DEVICE_ROW_PADDING,
            ..TokenLayout::contiguous(t, hq, d)
        };
        let nan = T::from_f32(f32::NAN);
        let mut q = vec![nan; t * layout.token_stride];
        for tok in 0..t {
            for i in 0..hq * d {
                q[tok * layout.token_stride + i] = T::from_f32(data.q[tok * hq * d + i]);
            }
        }
        let conv = |v: &[f32]| v.iter().map(|&x| T::from_f32(x)).collect::<Vec<T>>();
        let page = data.block_size * data.num_kv_heads * d;
        let geometry = CacheGeometry {
            num_blocks: data.k_cache.len() / page.max(1),
            block_size: data.block_size,
            num_kv_heads: data.num_kv_heads,
            head_size: d,
        };
        let cache =
            PagedKvCache::from_host(stream, geometry, &conv(&data.k_cache), &conv(&data.v_cache))?;
        let poison = vec![nan; t * layout.token_stride];
        let i32s = |v: &[i32]| stream.clone_htod(v);
        Ok(DeviceVariantProblem {
            q: stream.clone_htod(&q)?,
            out: stream.clone_htod(&poison)?,
            cache,
            cu_seqlens_q: i32s(&data.cu_seqlens_q)?,
            seq_lens: i32s(&data.seq_lens)?,
            block_table: i32s(&data.block_table)?,
            aux_i32: match aux_i32 {
                Some((v, s)) => Some((stream.clone_htod(&nonempty(v, 0))?, v.to_vec(), s)),
                None => None,
            },
            aux_f32: match aux_f32 {
                Some((v, s)) => Some((stream.clone_htod(&nonempty(v, 0.0))?, v.to_vec(), s)),
                None => None,
            },
            mm_ranges: None,
            layout,
            poison,
            stream: stream.clone(),
        })
    }

    /// Per-sequence image ranges `[S, max_ranges]` (inclusive `[start, end]`), passed as
    /// `mm_prefix_ranges` by [`DeviceVariantProblem::args`].
    pub fn set_mm_ranges(
        &mut self,
        ranges: &[[i32; 2]],
        max_ranges: usize,
    ) -> Result<(), DeviceRunError> {
        let flat = ranges.as_flattened().to_vec();
        self.mm_ranges = Some((
            self.stream.clone_htod(&nonempty(&flat, -1))?,
            flat,
            max_ranges,
        ));
        Ok(())
    }

    /// The op's arguments with `variant` bound (NaN-poison the output first with
    /// [`DeviceVariantProblem::poison_output`] when checking).
    pub fn args<'a>(
        &'a mut self,
        data: &'a PagedData,
        variant: Option<&'a Variant>,
        path: PathChoice,
    ) -> UnifiedAttentionArgs<'a, T> {
        let meta = |device: &'a CudaSlice<i32>, host: &'a [i32]| Metadata {
            device: device.as_view(),
            host,
        };
        let mut args = UnifiedAttentionArgs::new(
            Tokens {
                data: self.q.as_view(),
                layout: self.layout,
            },
            Tokens {
                data: self.out.as_view_mut(),
                layout: self.layout,
            },
            &self.cache,
            meta(&self.cu_seqlens_q, &data.cu_seqlens_q),
            meta(&self.seq_lens, &data.seq_lens),
            meta(&self.block_table, &data.block_table),
            data.block_table_stride,
        );
        args.path = path;
        if let Some((d, h, r)) = &self.mm_ranges {
            args.mm_prefix_ranges = MmPrefixRanges::PerSequence {
                ranges: meta(d, h),
                max_ranges: *r,
            };
        }
        args.variant = variant.map(|variant| VariantArgs {
            variant,
            aux_i32: self.aux_i32.as_ref().map(|(d, h, s)| AuxTensor {
                device: d.as_view(),
                host: Some(h.as_slice()),
                row_stride: *s,
            }),
            aux_f32: self.aux_f32.as_ref().map(|(d, h, s)| AuxTensor {
                device: d.as_view(),
                host: Some(h.as_slice()),
                row_stride: *s,
            }),
        });
        args
    }

    /// Refills the output with NaN (no allocation).
    pub fn poison_output(&mut self) -> Result<(), DeviceRunError> {
        self.stream.memcpy_htod(&self.poison, &mut self.out)?;
        Ok(())
    }

    /// Poisons the output, runs the op once, and returns `[T, Hq, D]` after checking every
    /// valid element was written (finite) and the padding still holds its poison.
    pub fn run_checked(
        &mut self,
        ctx: &UnifiedAttentionContext,
        data: &PagedData,
        variant: Option<&Variant>,
        path: PathChoice,
    ) -> Result<(Vec<f32>, LaunchReport), DeviceRunError> {
        self.run_checked_with(ctx, data, variant, path, |_| {})
    }

    /// [`DeviceVariantProblem::run_checked`] with the op's scalar options (scale, window,
    /// clamp, ...) set by `configure` on the arguments before the call.
    pub fn run_checked_with(
        &mut self,
        ctx: &UnifiedAttentionContext,
        data: &PagedData,
        variant: Option<&Variant>,
        path: PathChoice,
        configure: impl FnOnce(&mut UnifiedAttentionArgs<'_, T>),
    ) -> Result<(Vec<f32>, LaunchReport), DeviceRunError> {
        self.poison_output()?;
        let report = {
            let mut args = self.args(data, variant, path);
            configure(&mut args);
            crate::ops::unified_attention::gpu::unified_attention(ctx, &mut args)?
        };
        ctx.stream().synchronize()?;
        Ok((self.output()?, report))
    }

    fn output(&self) -> Result<Vec<f32>, DeviceRunError> {
        let raw: Vec<f32> = self
            .stream
            .clone_dtoh(&self.out)?
            .into_iter()
            .map(T::to_f32)
            .collect();
        let row = self.layout.num_heads * self.layout.head_size;
        let mut valid = Vec::with_capacity(self.layout.num_tokens * row);
        for (i, &x) in raw.iter().enumerate() {
            let in_row = i % self.layout.token_stride < row;
            if in_row && !x.is_finite() {
                return Err(DeviceRunError::Output(format!(
                    "out element {i} is {x} (unwritten or NaN leaked)"
                )));
            }
            if !in_row && !x.is_nan() {
                return Err(DeviceRunError::Output(format!(
                    "padding element {i} was overwritten with {x}"
                )));
            }
            if in_row {
                valid.push(x);
            }
        }
        Ok(valid)
    }
}

/// An empty tensor still needs an address: one never-read element.
fn nonempty<E: Copy>(v: &[E], fill: E) -> Vec<E> {
    if v.is_empty() {
        vec![fill]
    } else {
        v.to_vec()
    }
}
