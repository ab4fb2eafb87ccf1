// The signature says `Tile<bool>`, the body returns an i32 tile: caught by specializing the
// body against the kernel's contract, at the declared return type.
use attn_dsl_macros::variant;

#[variant(mask = my_mask, bounds = my_bounds)]
mod my_variant {
    #[device]
    fn my_mask(q_abs: Tile, k: Tile) -> Tile<bool> {
        q_abs - k
    }

    #[device]
    fn my_bounds<const TILE_SIZE: i32>(seq_len: i32) -> (i32, i32, i32) {
        (0, cdiv(seq_len, TILE_SIZE), seq_len)
    }
}

fn main() {}
