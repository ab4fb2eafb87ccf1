// unified_attention rejects BLOCK_Q that is not BLOCK_M / NUM_QUERIES_PER_KV at compile time (same message at run time).
use attn_dsl_macros::instantiate;

instantiate!(
    Bad = attn_runtime::kernels::unified_attention::unified::unified_attention {
        T = bf16,
        HEAD_SIZE = 128,
        HEAD_SIZE_PADDED = 128,
        BLOCK_SIZE = 16,
        TILE_SIZE = 32,
        BLOCK_M = 16,
        BLOCK_Q = 4,
        NUM_QUERIES_PER_KV = 2,
        SLIDING_WINDOW = 1024,
        USE_CAUSAL = true,
        USE_PER_SEQ_CAUSAL = false,
        CHUNK_LOOKBACK = -1,
        CHUNK_SIZE = 0,
        USE_MM_PREFIX = true,
        USE_MM_QUERY_RANGE = false,
        MM_PREFIX_CLAMP_SW = true,
        MAX_MM_RANGES = 2,
        USE_R_SWA = false,
        R_SWA_WINDOW = 0,
        USE_SOFTCAP = false,
        USE_SINKS = false,
        USE_ALIBI_SLOPES = false,
        USE_ALIBI_SQRT = false,
        USE_QQ_BIAS = false,
        IS_3D = false,
        NUM_SEGMENTS = 1,
        MASK = vllm_mask,
        BOUNDS = vllm_bounds,
    }
);

fn main() {}
