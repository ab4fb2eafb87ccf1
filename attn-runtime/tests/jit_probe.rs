use attn_runtime::jit::*;
#[test]
fn probe() {
    let src = "#include \"attn_prelude.cuh\"\nextern \"C\" __global__ void vadd(const float* x, float* y, int n) {\n  // L3: i\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  __shared__ float s[256]; s[threadIdx.x] = x[i]; __syncthreads();\n  // L5: store\n  if (i < n) y[i] = s[255 - threadIdx.x] + twice(x[i]);\n}\n";
    let pre = "__device__ inline float twice(float v) { return 2.0f * v; }\n";
    for a in [Arch::SM_80, Arch::SM_90] {
        let m = compile_for_arch(&CudaSource::new("vadd", src).with_prelude(pre), a).unwrap();
        println!("{} {} {}\nLOG<<{}>>", m.arch_label, m.image.kind(), m.image.len(), m.log);
    }
    let bad = src.replace("twice(x[i])", "thrice(x[i])");
    let e = compile_for_arch(&CudaSource::new("vadd", &bad).with_prelude(pre), Arch::SM_90).unwrap_err();
    println!("ERR {e}\n{e:?}");
    println!("{:?} {:?}", nvrtc_version(), supported_archs());
}
