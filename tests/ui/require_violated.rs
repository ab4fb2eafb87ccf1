// A violated `require` rule points at the binding and shows the constexpr values.
use attn_dsl_macros::instantiate;

instantiate!(TooSmall = attn_tests::vector::map { T = f32, BLOCK = 8, F = double });

fn main() {}
