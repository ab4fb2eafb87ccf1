// `if const { .. }` demands a constexpr condition; `n` is a runtime value.
use attn_dsl_macros::{instantiate, module};

#[module]
mod fill {
    #[kernel]
    pub fn fill<const BLOCK: i32>(out: *mut f32, n: i32) {
        let offs = program_id(0) * BLOCK + arange::<BLOCK>();
        if const { n > 0 } {
            store(out + offs, full([BLOCK], 1.0), offs < n);
        }
    }
}

instantiate!(FillIf = fill::fill { BLOCK = 64 });

fn main() {}
