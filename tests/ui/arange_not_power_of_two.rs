// `arange::<BLOCK>()` with BLOCK = 96: the value is reported.
use attn_dsl_macros::{instantiate, module};

#[module]
mod fill {
    #[kernel]
    pub fn fill<const BLOCK: i32>(out: *mut f32, n: i32) {
        let offs = program_id(0) * BLOCK + arange::<BLOCK>();
        store(out + offs, full([BLOCK], 1.0), offs < n);
    }
}

instantiate!(Fill96 = fill::fill { BLOCK = 96 });

fn main() {}
