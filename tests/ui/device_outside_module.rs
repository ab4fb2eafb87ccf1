// A #[device] fn outside a #[module] could never be called by a kernel.
use attn_dsl_macros::device;

#[device]
fn double(x: Tile) -> Tile {
    x + x
}

fn main() {}
