// `tma = N + 1` is an integer: the copy engine takes a boolean, reported at the expression
// with the bound value.
use attn_dsl_macros::{instantiate, module};

#[module]
mod rows {
    #[kernel(tma = N + 1)]
    pub fn fill<const N: i32>(out: *mut f32) {
        store(out + arange::<16>(), full([16], 1.0));
    }
}

instantiate!(Fill = rows::fill { N = 2 });

fn main() {}
