// A `Device` constexpr bound to a name that is not a #[device] fn of the kernel's module.
use attn_dsl_macros::instantiate;

instantiate!(Triple = attn_tests::vector::map { T = f32, BLOCK = 64, F = triple });

fn main() {}
