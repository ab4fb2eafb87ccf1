// unified_attention rejects chunked attention on a non-causal sequence (spec 2.1 rule 15) at compile time (same message at run time).
use attn_dsl_macros::instantiate;

instantiate!(
    Bad = attn_runtime::kernels::unified_attention::unified::unified_attention {
        T = bf16,
        HEAD_SIZE = 128,
        HEAD_SIZE_PADDED = 128,
        BLOCK_SIZE = 16,
        TILE_SIZE = 32,
        BLOCK_M = 16,
        BLOCK_Q = 8,
        NUM_QUERIES_PER_KV = 2,
        SLIDING_WINDOW = 1024,
        USE_MM_PREFIX = false,
        MM_PREFIX_CLAMP_SW = false,
        MAX_MM_RANGES = 2,
        USE_CAUSAL = false,
        CHUNK_LOOKBACK = 0,
        CHUNK_SIZE = 1024,
    }
);

fn main() {}
