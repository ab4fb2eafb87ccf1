// `causal` is a bool in the contract; declaring it `i32` is a bool/i32 confusion.
use attn_dsl_macros::variant;

#[variant(mask = my_mask, bounds = my_bounds)]
mod my_variant {
    #[device]
    fn my_mask(q_abs: Tile, k: Tile, causal: i32) -> Tile<bool> {
        (k <= q_abs) | (causal != 0)
    }

    #[device]
    fn my_bounds<const TILE_SIZE: i32>(seq_len: i32) -> (i32, i32, i32) {
        (0, cdiv(seq_len, TILE_SIZE), seq_len)
    }
}

fn main() {}
