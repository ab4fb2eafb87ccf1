// `num_warps = BLOCK / 16` with BLOCK = 48 gives 3 warps: reported at the binding, with the value.
use attn_dsl_macros::{instantiate, module};

#[module]
mod rows {
    #[kernel(num_warps = BLOCK / 16)]
    pub fn fill<const BLOCK: i32>(out: *mut f32) {
        store(out + arange::<16>(), full([16], 1.0));
    }
}

instantiate!(Fill48 = rows::fill { BLOCK = 48 });

fn main() {}
