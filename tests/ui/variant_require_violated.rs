// A variant's own require rule, violated by its declared default.
use attn_dsl_macros::variant;

#[variant(mask = my_mask, bounds = my_bounds)]
mod my_variant {
    #[device(require(WINDOW >= 1, "WINDOW must be >= 1"))]
    fn my_mask<const WINDOW: i32 = 0>(q_abs: Tile, k: Tile) -> Tile<bool> {
        (k <= q_abs) & (q_abs - k < WINDOW)
    }

    #[device]
    fn my_bounds<const TILE_SIZE: i32>(seq_len: i32) -> (i32, i32, i32) {
        (0, cdiv(seq_len, TILE_SIZE), seq_len)
    }
}

fn main() {}
