//! Criterion benches of the registered kernels with CUDA-event timing (feature `gpu`).
//! Throughput is reported as GB/s (compulsory bytes); `attn bench` prints % of the floor.

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
}

criterion_group! {
    name = benches;
    config = criterion_on_device0();
    targets = bench_registered
}
criterion_main!(benches);
