//! Hand-written CUDA used by the runtime tests until the emitter lands: a tiny prelude
//! under the real prelude name, and kernels carrying `// L<line>:` markers like emitted code.

#![allow(dead_code)]

/// A stand-in for the compiler prelude (same include name, different content).
pub const TEST_PRELUDE: &str =
    "#pragma once\n__device__ inline float attn_twice(float v) { return 2.0f * v; }\n";

/// `y[i] = x[i] + 2 * x[i]` over `n` elements with a tail mask.
pub const VADD_SRC: &str = r#"#include "attn_prelude.cuh"
extern "C" __global__ void __launch_bounds__(128) test_vadd(const float* __restrict__ x, float* __restrict__ y, int n) {
  // L3: offs = program_id(0) * BLOCK + arange::<BLOCK>()
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  // L4: mask = offs < n
  bool m = i < n;
  // L5: store(y + offs, x + twice(x), mask)
  if (m) { y[i] = x[i] + attn_twice(x[i]); }
}
"#;

/// A unique, empty scratch directory for one test.
pub fn scratch_dir(test: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let d = std::env::temp_dir().join(format!("attn-rt-{test}-{}-{nanos}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}
