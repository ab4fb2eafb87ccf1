//! Shared helpers for the cross-crate tests, and DSL kernels defined in a library crate so
//! that the integration tests instantiate them from *another* crate (as users of
//! `attn-runtime` do).

pub mod record_backend;

use attn_dsl_macros::module;

/// Elementwise kernels: a `#[device]` function chosen by a constexpr is applied to a
/// masked block of `x` and stored to `out`.
#[module]
pub mod vector {
    /// Doubles a tile (device functions are generic over shapes: the type is ignored).
    #[device]
    fn double(x: Tile) -> Tile {
        x + x
    }

    /// Returns its argument.
    #[device]
    fn identity(x: Tile) -> Tile {
        x
    }

    /// `out[i] = F(x[i])` for `i < n`, one block of `BLOCK` elements per program.
    #[kernel(num_warps = 4, require(BLOCK >= 16, "BLOCK must be at least 16"))]
    pub fn map<T, const BLOCK: i32, const F: Device>(x: *const T, out: *mut T, n: i32, scale: f32) {
        let pid = program_id(0);
        let offs = pid * BLOCK + arange::<BLOCK>();
        let mask = offs < n;
        let v = load(x + offs, mask, 0);
        let y = F(v).cast::<f32>() * scale;
        store(out + offs, y.cast::<T>(), mask);
    }
}
