//! cudarc views of candle's CUDA storage, in place: a tensor's view starts at its layout's
//! offset and spans its strided extent, and the op's launch waits on (and records) the
//! buffer's events like any cudarc use, so candle work on other streams stays ordered.

use std::sync::Arc;

use attn_dsl::kernel::DslType;
use candle_core::cuda_backend::CudaDType;
use candle_core::{CudaStorage, Layout, Storage, StorageRef, Tensor};
use cudarc::driver::{CudaSlice, CudaStream, CudaView, DevicePtr, DeviceRepr};

use super::error::CandleOpError;
use crate::ops::unified_attention::paged_cache::{CacheGeometry, PagedKvCache};
use crate::tensor::extent;

/// Elements a layout spans from its start offset.
pub(crate) fn layout_span(l: &Layout) -> usize {
    extent(l.dims(), l.stride()).unwrap_or(usize::MAX)
}

/// The view of `len` elements at the layout's offset.
pub(crate) fn view<'s, T: CudaDType>(
    s: &'s CudaStorage,
    l: &Layout,
) -> candle_core::Result<CudaView<'s, T>> {
    let start = l.start_offset();
    let end = start.saturating_add(layout_span(l));
    let slice = s.as_cuda_slice::<T>()?;
    if end > slice.len() {
        candle_core::bail!(
            "a view of [{start}, {end}) past a storage of {}",
            slice.len()
        );
    }
    Ok(slice.slice(start..end))
}

/// Read guards of the extra tensors of a call, held while their views are used.
pub(crate) struct Held<'t> {
    entries: Vec<(&'static str, StorageRef<'t>, &'t Tensor)>,
}

impl<'t> Held<'t> {
    pub fn lock(
        op: &'static str,
        tensors: Vec<(&'static str, &'t Tensor)>,
    ) -> Result<Self, CandleOpError> {
        let mut entries = Vec::with_capacity(tensors.len());
        for (name, t) in tensors {
            let (guard, _) = t.storage_and_layout();
            if !matches!(&*guard, Storage::Cuda(_)) {
                return Err(CandleOpError::NeedsCuda { op, tensor: name });
            }
            entries.push((name, guard, t));
        }
        Ok(Held { entries })
    }

    /// The view of the tensor named `name` (one of those locked).
    pub fn view<T: CudaDType>(&self, name: &str) -> candle_core::Result<CudaView<'_, T>> {
        let Some((_, guard, t)) = self.entries.iter().find(|(n, _, _)| *n == name) else {
            candle_core::bail!("internal error: tensor `{name}` was not locked");
        };
        match &**guard {
            Storage::Cuda(s) => view(s, t.layout()),
            _ => candle_core::bail!("internal error: `{name}` is not on CUDA"),
        }
    }
}

/// A paged cache over candle's K and V storage without owning it: the slices are aliases
/// of candle's allocations and are forgotten, never freed, when this drops.
pub(crate) struct AliasedCache<T> {
    cache: Option<PagedKvCache<T>>,
}

impl<T: DslType + DeviceRepr + CudaDType> AliasedCache<T> {
    /// # Safety
    /// `k` and `v` must outlive the alias, and it must be used only on `stream`, the stream
    /// candle orders their other uses on.
    pub unsafe fn new(
        stream: &Arc<CudaStream>,
        geometry: CacheGeometry,
        k: CudaView<'_, T>,
        v: CudaView<'_, T>,
    ) -> Result<Self, CandleOpError> {
        let alias = |x: &CudaView<'_, T>| -> CudaSlice<T> {
            let (ptr, _record) = x.device_ptr(stream);
            // SAFETY: `ptr` addresses `x.len()` live elements (the caller keeps them alive).
            unsafe { stream.upgrade_device_ptr::<T>(ptr, x.len()) }
        };
        let (k, v) = (alias(&k), alias(&v));
        match PagedKvCache::from_slices_or_return(geometry, k, v) {
            Ok(cache) => Ok(AliasedCache { cache: Some(cache) }),
            Err(returned) => {
                let (e, k, v) = *returned;
                let _ = (k.leak(), v.leak());
                Err(CandleOpError::Cache(e))
            }
        }
    }

    pub fn cache(&self) -> Option<&PagedKvCache<T>> {
        self.cache.as_ref()
    }
}

impl<T> Drop for AliasedCache<T> {
    fn drop(&mut self) {
        if let Some(c) = self.cache.take() {
            let (k, v) = c.into_slices();
            // Forget the handles: candle owns (and frees) the memory.
            let _ = (k.leak(), v.leak());
        }
    }
}
