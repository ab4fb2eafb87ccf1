// tile_ranges follows the kernel's TILE_RANGES rule (1..=8).
use attn_dsl_macros::variant;

#[variant(mask = my_mask, bounds = my_bounds, tile_ranges = 0)]
mod my_variant {
    #[device]
    fn my_mask(q_abs: Tile, k: Tile) -> Tile<bool> {
        k <= q_abs
    }

    #[device]
    fn my_bounds<const TILE_SIZE: i32>(seq_len: i32) -> (i32, i32, i32) {
        (0, cdiv(seq_len, TILE_SIZE), seq_len)
    }
}

fn main() {}
