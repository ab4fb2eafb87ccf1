// Closures are Rust, not DSL: rejected when the kernel is defined.
use attn_dsl_macros::kernel;

#[kernel]
pub fn scale<const BLOCK: i32>(x: *const f32, out: *mut f32) {
    let offs = arange::<BLOCK>();
    let twice = |t| t * 2.0;
    store(out + offs, twice(load(x + offs)));
}

fn main() {}
