// BOUNDS returns (tile_lo, tile_hi, msp); a pair is the wrong tuple.
use attn_dsl_macros::variant;

#[variant(mask = my_mask, bounds = my_bounds)]
mod my_variant {
    #[device]
    fn my_mask(q_abs: Tile, k: Tile) -> Tile<bool> {
        k <= q_abs
    }

    #[device]
    fn my_bounds<const TILE_SIZE: i32>(seq_len: i32) -> (i32, i32) {
        (0, cdiv(seq_len, TILE_SIZE))
    }
}

fn main() {}
