// A variant's mask must return `Tile<bool>`, not an integer tile.
use attn_dsl_macros::variant;

#[variant(mask = my_mask, bounds = my_bounds)]
mod my_variant {
    #[device]
    fn my_mask(q_abs: Tile, k: Tile) -> Tile<i32> {
        select(k <= q_abs, 1, 0)
    }

    #[device]
    fn my_bounds<const TILE_SIZE: i32>(seq_len: i32) -> (i32, i32, i32) {
        (0, cdiv(seq_len, TILE_SIZE), seq_len)
    }
}

fn main() {}
