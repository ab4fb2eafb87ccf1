// The mask uses a constexpr it never declares: an error at the use, at build time.
use attn_dsl_macros::variant;

#[variant(mask = my_mask, bounds = my_bounds)]
mod my_variant {
    #[device]
    fn my_mask(q_abs: Tile, k: Tile) -> Tile<bool> {
        (k <= q_abs) & ((k < NUM_SINKS) | (q_abs - k < 64))
    }

    #[device]
    fn my_bounds<const TILE_SIZE: i32>(seq_len: i32) -> (i32, i32, i32) {
        (0, cdiv(seq_len, TILE_SIZE), seq_len)
    }
}

fn main() {}
