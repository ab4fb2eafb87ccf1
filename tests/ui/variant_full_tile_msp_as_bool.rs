// FULL_TILE's `msp` is the range's key limit, an `i32`.
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
    fn my_full_tile(k_last: i32, msp: bool) -> bool {
        msp & (k_last < 0)
    }
}

fn main() {}
