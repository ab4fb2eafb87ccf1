// `mask = ..` names a function the module does not define.
use attn_dsl_macros::variant;

#[variant(mask = my_mask, bounds = my_bounds)]
mod my_variant {
    #[device]
    fn my_msk(q_abs: Tile, k: Tile) -> Tile<bool> {
        k <= q_abs
    }

    #[device]
    fn my_bounds<const TILE_SIZE: i32>(seq_len: i32) -> (i32, i32, i32) {
        (0, cdiv(seq_len, TILE_SIZE), seq_len)
    }
}

fn main() {}
