// A variant's FULL_TILE answers for a whole tile: a scalar `bool`, not a tile of them.
use attn_dsl_macros::variant;

#[variant(mask = my_mask, bounds = my_bounds, full_tile = my_full_tile)]
mod my_variant {
    #[device]
    fn my_mask(q_abs: Tile, k: Tile) -> Tile<bool> {
        k <= q_abs
    }

    #[device]
    fn my_bounds<const TILE_SIZE: i32>(seq_len: i32) -> (i32, i32, i32) {
        (0, cdiv(seq_len, TILE_SIZE), seq_len)
    }

    #[device]
    fn my_full_tile(k_last: i32, q_first: i32) -> Tile<bool> {
        full([1], k_last <= q_first)
    }
}

fn main() {}
