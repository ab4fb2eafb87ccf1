//! NVRTC time, registers, spills and shared memory of the unified-attention kernel (BLOCK_M 16,
//! TILE 32, HEAD 128/256, causal, bf16): `cargo test -p attn-runtime --test nvrtc_unified_probe
//! -- --ignored --nocapture`. Ignored by default (needs NVRTC; prints, asserts nothing). The
//! kernel module is included by path until `kernels/mod.rs` exports it.

#[path = "../src/kernels/unified_attention.rs"]
mod ua;
use attn_dsl::ir::ScalarType;
use attn_dsl::ConstValue;
use attn_runtime::jit::{compile_for_arch, CudaSource};

#[test]
#[ignore]
fn unified_attention_nvrtc_stats() {
    for head in [128i64, 256] {
        let i = ConstValue::Int;
        let b = ConstValue::Bool;
        let binds: Vec<(&str, ConstValue)> = vec![
            ("T", ConstValue::Dtype(ScalarType::Bf16)),
            ("HEAD_SIZE", i(head)),
            ("HEAD_SIZE_PADDED", i(head)),
            ("BLOCK_SIZE", i(16)),
            ("TILE_SIZE", i(32)),
            ("BLOCK_M", i(16)),
            ("BLOCK_Q", i(4)),
            ("NUM_QUERIES_PER_KV", i(4)),
            ("SLIDING_WINDOW", i(0)),
            ("USE_CAUSAL", b(true)),
            ("USE_PER_SEQ_CAUSAL", b(false)),
            ("CHUNK_LOOKBACK", i(-1)),
            ("CHUNK_SIZE", i(0)),
            ("USE_MM_PREFIX", b(false)),
            ("USE_MM_QUERY_RANGE", b(false)),
            ("MM_PREFIX_CLAMP_SW", b(false)),
            ("MAX_MM_RANGES", i(0)),
            ("USE_R_SWA", b(false)),
            ("R_SWA_WINDOW", i(0)),
            ("USE_SOFTCAP", b(false)),
            ("USE_SINKS", b(false)),
            ("USE_ALIBI_SLOPES", b(false)),
            ("USE_ALIBI_SQRT", b(false)),
            ("IS_3D", b(false)),
            ("NUM_SEGMENTS", i(1)),
        ];
        let c = ua::unified::UNIFIED_ATTENTION_TEMPLATE
            .specialize(&binds)
            .expect("specialize");
        std::fs::write(format!("/tmp/ua_{head}.cu"), &c.cuda.source).unwrap();
        let m = compile_for_arch(&CudaSource::from_kernel(&c.cuda), "sm_90".parse().unwrap())
            .expect("nvrtc");
        println!(
            "HEAD {head}: NVRTC {:?} stats {:?} smem dyn {}",
            m.compile_time,
            m.entry_stats(),
            c.cuda.shared_bytes
        );
    }
}
