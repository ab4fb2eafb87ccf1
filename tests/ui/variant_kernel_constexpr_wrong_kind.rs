// TILE_SIZE is the kernel's i32 constexpr; a variant cannot redeclare it as bool.
use attn_dsl_macros::variant;

#[variant(mask = my_mask, bounds = my_bounds)]
mod my_variant {
    #[device]
    fn my_mask(q_abs: Tile, k: Tile) -> Tile<bool> {
        k <= q_abs
    }

    #[device]
    fn my_bounds<const TILE_SIZE: bool>(seq_len: i32) -> (i32, i32, i32) {
        (0, seq_len, seq_len)
    }
}

fn main() {}
