//! Criterion benches of the registered kernels with CUDA-event timing (feature `gpu`).
//! Throughput is reported as GB/s (compulsory bytes); `attn bench` prints % of the floor.

use attn_dsl::{Binding, ConstValue};
use attn_runtime::bench::measurement::{criterion_on_device0, CudaEventTime};
use attn_runtime::launch::{CudaDevice, CudaKernelHandle};
use attn_runtime::parity::DeviceProblem;
use attn_runtime::registry::Registry;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn bench_registered(c: &mut Criterion<CudaEventTime>) {
    let dev = CudaDevice::new(0).expect("benches need a CUDA device");
    let stream = dev.default_stream();
    let registry = Registry::with_builtins();
    let mut group = c.benchmark_group("proof_kernels");
    for entry in registry.entries() {
        let bindings = (entry.default_bindings)();
        let built = (entry.build)(&bindings).expect("build");
        let problem = (entry.problem)(&bindings).expect("problem");
        let h = match &built.prelude {
            Some(p) => CudaKernelHandle::with_prelude(built.cuda.clone(), p.clone()),
            None => CudaKernelHandle::new(built.cuda.clone()),
        };
        let mut dev_problem = DeviceProblem::upload(&stream, &problem).expect("upload");
        group.throughput(Throughput::Bytes(problem.bytes as u64));
        group.bench_function(format!("{} {}", built.key, problem.label), |b| {
            b.iter(|| dev_problem.launch(&stream, &h).expect("launch"))
        });
    }
    group.finish();
    bench_flash_target(c, &dev, &registry);
}

/// The proof flash attention at the GPU-IR issue's target shape (16 heads × 4096, D 128,
/// causal), counted in FLOPs: criterion's elements are the kernel's `4 · pairs · d · heads`,
/// which `bench/results.py` reports as TFLOP/s.
fn bench_flash_target(c: &mut Criterion<CudaEventTime>, dev: &CudaDevice, registry: &Registry) {
    let Some(entry) = registry
        .entries()
        .iter()
        .find(|e| e.name == "flash_attention")
    else {
        return;
    };
    let set = |name: &str, v: i64| Binding::new(name, ConstValue::Int(v));
    let mut bindings = (entry.default_bindings)();
    bindings.retain(|b| !matches!(b.name.as_str(), "HEADS" | "Q_LEN" | "KV_LEN" | "HEAD_DIM"));
    bindings.extend([
        set("HEADS", 16),
        set("Q_LEN", 4096),
        set("KV_LEN", 4096),
        set("HEAD_DIM", 128),
    ]);
    let stream = dev.default_stream();
    let built = (entry.build)(&bindings).expect("build");
    let problem = (entry.problem)(&bindings).expect("problem");
    let h = match &built.prelude {
        Some(p) => CudaKernelHandle::with_prelude(built.cuda.clone(), p.clone()),
        None => CudaKernelHandle::new(built.cuda.clone()),
    };
    let mut dev_problem = DeviceProblem::upload(&stream, &problem).expect("upload");
    let mut group = c.benchmark_group("proof_kernels");
    group.throughput(Throughput::Elements(problem.flops as u64));
    group.bench_function(format!("{} {} (FLOPs)", built.key, problem.label), |b| {
        b.iter(|| dev_problem.launch(&stream, &h).expect("launch"))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = criterion_on_device0();
    targets = bench_registered
}
criterion_main!(benches);
