// A runtime parameter used as a tile shape.
use attn_dsl_macros::{instantiate, module};

#[module]
mod fill {
    #[kernel]
    pub fn fill<const BLOCK: i32>(out: *mut f32, n: i32) {
        let offs = program_id(0) * BLOCK + arange::<BLOCK>();
        let ones = full([n], 1.0);
        store(out + offs, ones, offs < n);
    }
}

instantiate!(FillN = fill::fill { BLOCK = 64 });

fn main() {}
