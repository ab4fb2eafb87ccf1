//! The paged KV cache of unified attention (spec §1.1, §1.3; DESIGN §3.7): K and V pages
//! `[num_blocks, block_size, Hkv, D]` on the GPU, owned together with their geometry, so
//! a block table can be checked against the cache it indexes before any launch.

#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use attn_dsl::kernel::DslType;
use cudarc::driver::{CudaSlice, CudaStream, CudaView, DeviceRepr, DriverError, ValidAsZeroBits};
use std::sync::Arc;
use thiserror::Error;

use super::validate::{check_block_ids, InputError, TensorMeta};

/// Shape of a paged cache: `num_blocks` pages of `block_size` token slots, each slot
/// holding `num_kv_heads × head_size` contiguous elements (NHD layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheGeometry {
    /// Pages (blocks) in the cache.
    pub num_blocks: usize,
    /// Token slots per block.
    pub block_size: usize,
    /// KV heads Hkv.
    pub num_kv_heads: usize,
    /// Head size D.
    pub head_size: usize,
}

impl CacheGeometry {
    /// `[num_blocks, block_size, Hkv, D]`.
    pub fn shape(&self) -> [usize; 4] {
        [
            self.num_blocks,
            self.block_size,
            self.num_kv_heads,
            self.head_size,
        ]
    }

    /// Element strides `[block, slot, head]` (D is contiguous), as the kernel takes them.
    /// Exact for a geometry that passed [`Self::check`]; saturating (never wrapping) otherwise.
    pub fn strides(&self) -> [usize; 3] {
        let head = self.head_size;
        let slot = self.num_kv_heads.saturating_mul(head);
        [self.block_size.saturating_mul(slot), slot, head]
    }

    /// Elements of one of K or V, or an error when the count does not fit the kernels'
    /// `i64` offsets (a wrapped count would let a tiny buffer pass for a huge cache).
    pub fn elements(&self) -> Result<usize, PagedCacheError> {
        self.num_blocks
            .checked_mul(self.block_size)
            .and_then(|x| x.checked_mul(self.num_kv_heads))
            .and_then(|x| x.checked_mul(self.head_size))
            .filter(|&n| i64::try_from(n).is_ok())
            .ok_or(PagedCacheError::Overflow { geometry: *self })
    }

    /// Element offset of `(block, slot, head, 0)` (saturating, like [`Self::strides`]).
    pub fn offset(&self, block: usize, slot: usize, head: usize) -> usize {
        let [b, s, h] = self.strides();
        block
            .saturating_mul(b)
            .saturating_add(slot.saturating_mul(s))
            .saturating_add(head.saturating_mul(h))
    }

    /// Every extent at least 1, the spec's `BLOCK_SIZE % 16 == 0` (§2.1 rule 2), and a
    /// representable element count.
    pub fn check(&self) -> Result<(), PagedCacheError> {
        let ok = self.num_blocks > 0
            && self.num_kv_heads > 0
            && self.head_size > 0
            && self.block_size > 0
            && self.block_size.is_multiple_of(16);
        if !ok {
            return Err(PagedCacheError::Geometry { geometry: *self });
        }
        self.elements().map(|_| ())
    }

    /// [`Self::check`], and K and V of `k_len` and `v_len` elements fill exactly this
    /// geometry (a shorter buffer would be read out of bounds, a longer one is a caller's
    /// layout mistake).
    fn check_pages(&self, k_len: usize, v_len: usize) -> Result<(), PagedCacheError> {
        let expected = self.elements()?;
        self.check()?;
        for (which, got) in [("k", k_len), ("v", v_len)] {
            if got != expected {
                return Err(PagedCacheError::Length {
                    which,
                    got,
                    expected,
                    geometry: *self,
                });
            }
        }
        Ok(())
    }
}

/// Why a cache could not be built.
#[derive(Debug, Error)]
pub enum PagedCacheError {
    /// An extent is 0 or `block_size` is not a multiple of 16.
    #[error(
        "cache geometry {geometry:?} is invalid: every extent must be >= 1 and block_size a \
         multiple of 16"
    )]
    Geometry {
        /// The cache geometry.
        geometry: CacheGeometry,
    },
    /// The cache holds more elements than `i64` offsets address.
    #[error("cache geometry {geometry:?} holds more elements than i64 offsets can address")]
    Overflow {
        /// The cache geometry.
        geometry: CacheGeometry,
    },
    /// Host data for K or V has the wrong number of elements.
    #[error("{which} holds {got} elements; geometry {geometry:?} needs {expected}")]
    Length {
        /// Which tensor (`"k"` or `"v"`).
        which: &'static str,
        /// Elements it holds.
        got: usize,
        /// Elements the geometry needs.
        expected: usize,
        /// The cache geometry.
        geometry: CacheGeometry,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed while {during}: {source}")]
    Driver {
        /// What the cache was doing.
        during: &'static str,
        /// The driver error.
        source: DriverError,
    },
}

fn driver(during: &'static str) -> impl FnOnce(DriverError) -> PagedCacheError {
    move |source| PagedCacheError::Driver { during, source }
}

/// The GPU K and V pages of one attention layer, with their geometry.
#[derive(Debug)]
pub struct PagedKvCache<T> {
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    geometry: CacheGeometry,
}

impl<T> PagedKvCache<T> {
    /// The K and V buffers back (e.g. to release aliases of memory owned elsewhere).
    pub fn into_slices(self) -> (CudaSlice<T>, CudaSlice<T>) {
        (self.k, self.v)
    }
}

impl<T: DslType + DeviceRepr> PagedKvCache<T> {
    /// Wraps K and V buffers allocated elsewhere (e.g. filled on the GPU), checking sizes.
    pub fn from_slices(
        geometry: CacheGeometry,
        k: CudaSlice<T>,
        v: CudaSlice<T>,
    ) -> Result<Self, PagedCacheError> {
        Self::from_slices_or_return(geometry, k, v).map_err(|r| r.0)
    }

    /// [`Self::from_slices`] that hands the buffers back on failure (for callers whose
    /// buffers alias memory owned elsewhere and so must never be dropped as owners).
    #[allow(clippy::type_complexity)]
    pub fn from_slices_or_return(
        geometry: CacheGeometry,
        k: CudaSlice<T>,
        v: CudaSlice<T>,
    ) -> Result<Self, Box<(PagedCacheError, CudaSlice<T>, CudaSlice<T>)>> {
        match geometry.check_pages(k.len(), v.len()) {
            Ok(()) => Ok(PagedKvCache { k, v, geometry }),
            Err(e) => Err(Box::new((e, k, v))),
        }
    }

    /// Uploads host pages (row-major `[num_blocks, block_size, Hkv, D]`).
    pub fn from_host(
        stream: &Arc<CudaStream>,
        geometry: CacheGeometry,
        k: &[T],
        v: &[T],
    ) -> Result<Self, PagedCacheError> {
        geometry.check_pages(k.len(), v.len())?;
        let k = stream.clone_htod(k).map_err(driver("uploading K pages"))?;
        let v = stream.clone_htod(v).map_err(driver("uploading V pages"))?;
        Self::from_slices(geometry, k, v)
    }
}

impl<T: DslType + DeviceRepr + ValidAsZeroBits> PagedKvCache<T> {
    /// A zero-filled cache (to be written by a KV-append kernel or `k_mut`/`v_mut`).
    pub fn zeros(
        stream: &Arc<CudaStream>,
        geometry: CacheGeometry,
    ) -> Result<Self, PagedCacheError> {
        geometry.check()?;
        let n = geometry.elements()?;
        let k = stream
            .alloc_zeros(n)
            .map_err(driver("allocating K pages"))?;
        let v = stream
            .alloc_zeros(n)
            .map_err(driver("allocating V pages"))?;
        Self::from_slices(geometry, k, v)
    }
}

impl<T: DslType> PagedKvCache<T> {
    /// Blocks, block size, KV heads and head size of the cache.
    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
    }

    /// The K pages (a kernel input).
    pub fn k(&self) -> CudaView<'_, T> {
        self.k.as_view()
    }

    /// The V pages (a kernel input).
    pub fn v(&self) -> CudaView<'_, T> {
        self.v.as_view()
    }

    /// The K buffer itself, for writers (KV append, test fills).
    pub fn k_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.k
    }

    /// The V buffer itself, for writers.
    pub fn v_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.v
    }

    /// Shape, strides and dtype of K (and V), for the op's input validation.
    pub fn meta(&self) -> TensorMeta<4> {
        TensorMeta::contiguous(self.geometry.shape(), T::TYPE)
    }

    /// Checks a block table (`[S, ≥ cols]` with row stride `row_stride`) against this
    /// cache: each row covers `ceil(seq_lens[s] / block_size)` blocks and every used
    /// entry names a block of the cache. Entries past a sequence's last block are not read.
    pub fn check_block_table(
        &self,
        block_table: &[i32],
        row_stride: usize,
        seq_lens: &[i32],
    ) -> Result<(), InputError> {
        check_block_table(&self.geometry, block_table, row_stride, seq_lens)
    }
}

/// [`PagedKvCache::check_block_table`] on a bare geometry.
pub fn check_block_table(
    geometry: &CacheGeometry,
    block_table: &[i32],
    row_stride: usize,
    seq_lens: &[i32],
) -> Result<(), InputError> {
    let rows = seq_lens.len();
    let buffer_err = || InputError::BlockTableBuffer {
        rows,
        cols: row_stride,
        stride: row_stride,
        len: block_table.len(),
    };
    match rows.checked_mul(row_stride) {
        Some(n) if n <= block_table.len() => {}
        _ => return Err(buffer_err()),
    }
    let bs = geometry.block_size.max(1);
    for (seq, &l) in seq_lens.iter().enumerate() {
        let needed = usize::try_from(l).unwrap_or(0).div_ceil(bs);
        if needed > row_stride {
            return Err(InputError::BlockTableRowTooShort {
                seq,
                cols: row_stride,
                seq_len: l,
                block_size: bs,
                needed,
            });
        }
        let row = seq
            .checked_mul(row_stride)
            .and_then(|start| block_table.get(start..start.checked_add(needed)?))
            .ok_or_else(buffer_err)?;
        check_block_ids(seq, row, geometry.num_blocks)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: CacheGeometry = CacheGeometry {
        num_blocks: 8,
        block_size: 16,
        num_kv_heads: 2,
        head_size: 4,
    };

    #[test]
    fn strides_follow_the_nhd_layout() {
        assert_eq!(G.strides(), [128, 8, 4]);
        assert_eq!(G.elements().ok(), Some(1024));
        assert_eq!(G.offset(3, 5, 1), 3 * 128 + 5 * 8 + 4);
        assert!(G.check().is_ok());
        let bad = CacheGeometry {
            block_size: 24,
            ..G
        };
        assert!(
            bad.check().is_err(),
            "block size 24 is not a multiple of 16"
        );
    }

    #[test]
    fn element_counts_never_wrap() {
        // 2^54 + 8 blocks of 16 × 2 × 32 = 2^10 elements: 2^64 + 2^13 wraps to 8192.
        let huge = CacheGeometry {
            num_blocks: (1 << 54) + 8,
            block_size: 16,
            num_kv_heads: 2,
            head_size: 32,
        };
        assert!(matches!(
            huge.elements(),
            Err(PagedCacheError::Overflow { .. })
        ));
        assert!(huge.check().is_err());
        assert!(matches!(
            huge.check_pages(8192, 8192),
            Err(PagedCacheError::Overflow { .. })
        ));
    }

    #[test]
    fn block_tables_are_checked_against_the_cache() {
        // Two sequences: 17 tokens (2 blocks), 16 tokens (1 block); stride 3.
        let table = [7, 0, -5, 2, 99, 99];
        assert!(check_block_table(&G, &table, 3, &[17, 16]).is_ok());
        let e = check_block_table(&G, &table, 3, &[17, 17]).expect_err("99 is no block");
        assert!(
            matches!(
                e,
                InputError::BlockIdOutOfRange {
                    seq: 1,
                    block: 1,
                    got: 99,
                    num_blocks: 8
                }
            ),
            "{e}"
        );
        let e = check_block_table(&G, &table, 3, &[49, 1]).expect_err("49 tokens need 4 blocks");
        assert!(
            matches!(e, InputError::BlockTableRowTooShort { needed: 4, .. }),
            "{e}"
        );
        let e = check_block_table(&G, &table[..4], 3, &[1, 1]).expect_err("short buffer");
        assert!(
            matches!(e, InputError::BlockTableBuffer { len: 4, .. }),
            "{e}"
        );
        let e = check_block_table(&G, &[-1, 0], 1, &[16, 0]).expect_err("negative id");
        assert!(
            matches!(e, InputError::BlockIdOutOfRange { got: -1, .. }),
            "{e}"
        );
    }
}
