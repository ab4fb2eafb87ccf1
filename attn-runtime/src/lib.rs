//! attn-runtime: NVRTC JIT, content-keyed cache, typed launches, tensors, and the ops.
//!
//! # A newcomer's path
//!
//! The workspace has four crates: `attn-dsl` (the tile compiler as a library: front end,
//! IR, passes, CPU executor, CUDA emitter), `attn-dsl-macros` (`#[module]`, `#[kernel]`,
//! `#[device]`, `#[variant]`, `instantiate!`), this crate (kernels written in the DSL, the
//! ops built on them, NVRTC, the cache, launches, dense f64 references, the `attn` CLI's
//! logic in [`cli`]) and `attn-examples` (user variants). Every step below runs on the CPU
//! executor without a GPU (`--cpu`, or automatically when none is found) and is checked
//! against an f64 reference; on a GPU the same command launches the NVRTC-compiled kernel.
//!
//! 1. **Softmax**, one program per row: [`kernels::proof`] (`softmax`). See its CUDA with
//!    `attn emit softmax`, compile it with `attn compile softmax` (registers, spills,
//!    cache outcome), run it with `attn run softmax --cpu`.
//! 2. **Matmul**, tiles and `dot`: `attn run matmul --cpu`, `attn emit matmul BLOCK_M=64`
//!    (any constexpr is a `NAME=VALUE` binding; `attn list` shows the defaults).
//! 3. **Flash attention**, the online softmax over KV tiles: `attn run flash_attention
//!    --cpu`; on a GPU `attn bench flash_attention` (CUDA events, TFLOP/s, % of the floor).
//! 4. **Unified attention**, vLLM's paged varlen kernel with its mask and tile bounds as
//!    `#[device]` functions ([`kernels::unified_attention`]), reached through the op
//!    [`ops::unified_attention::gpu::unified_attention`] (GPU) or
//!    [`ops::unified_attention::cpu::run_unified_attention_cpu`] (CPU executor):
//!    `attn run unified_attention --cpu --set SEQ=256` runs the Gemma4 sliding-window
//!    preset against the dense reference; `attn masks --seq-len 512 --window 128` draws a
//!    mask and the tiles its DSL bounds visit; `attn bench unified_attention` times it.
//! 5. **A variant**: a new mask is two or three short `#[device]` functions in a
//!    `#[variant]` module (`examples/src/sink_window.rs`; the guide is
//!    `docs/writing-a-variant.md`), built from its [`ops::unified_attention::variant::Variant`].
//!    From the command line, for a variant in any file:
//!    `attn check-variant examples/src/sink_window.rs --module sink_window --mask
//!    sink_window_mask --bounds sink_window_bounds --full-tile sink_window_full_tile
//!    --tile-ranges 2` checks its contract, bounds ⊇ mask and its full tiles;
//!    `attn run unified_attention --variant examples/src/sink_window.rs --module
//!    sink_window --mask sink_window_mask --bounds sink_window_bounds --tile-ranges 2
//!    --set SEQ=256 --cpu` runs it through the op against the dense reference of its own
//!    DSL mask; `attn bench unified_attention --variant ..` times it on a GPU.
//!
//! The checking kit a variant's author uses in tests is
//! [`ops::unified_attention::variant_check`] and [`testing`] (random paged problems,
//! poisoned outputs, [`testing::masked_reference()`]).

pub mod bench;
pub mod cache;
#[cfg(feature = "candle")]
pub mod candle;
pub mod cli;
pub mod graph;
pub mod jit;
pub mod kernels;
pub mod launch;
pub mod ops;
pub mod parity;
pub mod problem;
pub mod reference;
pub mod registry;
pub mod split_mix64;
pub mod tensor;
pub mod testing;
pub mod timing;
