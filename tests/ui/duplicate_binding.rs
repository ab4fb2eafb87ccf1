// The same constexpr bound twice.
use attn_dsl_macros::{instantiate, module};

#[module]
mod copy {
    #[kernel(require(BLOCK >= 16, "BLOCK must be at least 16"))]
    pub fn copy<T, const BLOCK: i32>(x: *const T, out: *mut T, n: i32) {
        let offs = program_id(0) * BLOCK + arange::<BLOCK>();
        let mask = offs < n;
        store(out + offs, load(x + offs, mask), mask);
    }
}

instantiate!(Twice = copy::copy { T = f32, BLOCK = 64, BLOCK = 128 });

fn main() {}
