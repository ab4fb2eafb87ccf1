//! Criterion benches of the registered kernels with CUDA-event timing (feature `gpu`).
//! Throughput is reported as GB/s (compulsory bytes); `attn bench` prints % of the floor.

use attn_dsl::{Binding, ConstValue};
use attn_runtime::bench::measurement::{criterion_on_device0, CudaEventTime};
use attn_runtime::launch::{CudaDevice, CudaKernelHandle};
use attn_runtime::parity::DeviceProblem;
use attn_runtime::problem::Problem;
use attn_runtime::registry::{KernelEntry, Registry};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// One registered kernel at `bindings`, ready to launch: its name for the bench (key and
/// problem label), the problem's throughput, the kernel and the problem on the device.
struct Prepared {
    name: String,
    problem: Problem,
    kernel: CudaKernelHandle,
    on_device: DeviceProblem,
}

fn prepare(entry: &KernelEntry, bindings: &[Binding], stream: &Arc<CudaStream>) -> Prepared {
    let built = (entry.build)(bindings).expect("build");
    let problem = (entry.problem)(bindings).expect("problem");
    let kernel = match &built.prelude {
        Some(p) => CudaKernelHandle::with_prelude(built.cuda.clone(), p.clone()),
        None => CudaKernelHandle::new(built.cuda.clone()),
    };
    let on_device = DeviceProblem::upload(stream, &problem).expect("upload");
    Prepared {
        name: format!("{} {}", built.key, problem.label),
        problem,
        kernel,
        on_device,
    }
}

fn bench_registered(c: &mut Criterion<CudaEventTime>) {
    let dev = CudaDevice::new(0).expect("benches need a CUDA device");
    let stream = dev.default_stream();
    let registry = Registry::with_builtins();
    let mut group = c.benchmark_group("proof_kernels");
    for entry in registry.entries() {
        let mut k = prepare(entry, &(entry.default_bindings)(), &stream);
        group.throughput(Throughput::Bytes(k.problem.bytes as u64));
        group.bench_function(k.name.clone(), |b| {
            b.iter(|| k.on_device.launch(&stream, &k.kernel).expect("launch"))
        });
    }
    // The proof flash attention at the GPU-IR issue's target shape (16 heads × 4096, D 128,
    // causal), counted in FLOPs: criterion's elements are the kernel's `4 · pairs · d ·
    // heads`, which `bench/results.py` reports as TFLOP/s.
    if let Some(entry) = registry
        .entries()
        .iter()
        .find(|e| e.name == "flash_attention")
    {
        let set = |name: &str, v: i64| Binding::new(name, ConstValue::Int(v));
        let mut bindings = (entry.default_bindings)();
        bindings.retain(|b| !matches!(b.name.as_str(), "HEADS" | "Q_LEN" | "KV_LEN" | "HEAD_DIM"));
        bindings.extend([
            set("HEADS", 16),
            set("Q_LEN", 4096),
            set("KV_LEN", 4096),
            set("HEAD_DIM", 128),
        ]);
        let mut k = prepare(entry, &bindings, &stream);
        group.throughput(Throughput::Elements(k.problem.flops as u64));
        group.bench_function(format!("{} (FLOPs)", k.name), |b| {
            b.iter(|| k.on_device.launch(&stream, &k.kernel).expect("launch"))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = criterion_on_device0();
    targets = bench_registered
}
criterion_main!(benches);
