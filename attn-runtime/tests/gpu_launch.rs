//! GPU launch tests (feature `gpu`; a missing GPU is a failure): untyped launches of
//! hand-written CUDA, validation errors before launch, shared-memory opt-in, typed
//! launches through the `Cuda` backend, event timing, TMA tensor maps the launcher encodes.
#![cfg(feature = "gpu")]

mod common;

use attn_dsl::codegen::{CudaKernel, RowStride, TensorMapParam};
use attn_dsl::ir::{ParamKind, ScalarType, ValueId};
use attn_dsl::kernel::{Backend, Kernel, KernelInfo, ParamInfo, ScalarArg};
use attn_runtime::launch::{
    launch, Cuda, CudaDevice, CudaKernelHandle, Grid, KernelArg, LaunchError, TypedKernel,
};
use attn_runtime::tensor::Tensor;
use attn_runtime::timing::EventTimer;
use common::{TEST_PRELUDE, VADD_SRC};

fn device() -> CudaDevice {
    CudaDevice::new(0).expect("the gpu feature requires a CUDA device")
}

fn param(name: &str, kind: ParamKind, i: u32) -> attn_dsl::ir::Param {
    attn_dsl::ir::Param {
        name: name.into(),
        kind,
        value: ValueId(i),
    }
}

fn vadd_handle(block_threads: u32, shared_bytes: u32, src: &str) -> CudaKernelHandle {
    let k = CudaKernel {
        entry: "test_vadd".into(),
        source: src.into(),
        hash: String::new(),
        params: vec![
            param(
                "x",
                ParamKind::Ptr {
                    elem: ScalarType::F32,
                    mutable: false,
                },
                0,
            ),
            param(
                "y",
                ParamKind::Ptr {
                    elem: ScalarType::F32,
                    mutable: true,
                },
                1,
            ),
            param("n", ParamKind::Scalar(ScalarType::I32), 2),
        ],
        block_threads,
        shared_bytes,
        assumed_divisible: Vec::new(),
        assumed_i32: Vec::new(),
        tensor_maps: Vec::new(),
    };
    CudaKernelHandle::with_prelude(k, TEST_PRELUDE)
}

fn inputs(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 * 0.01 - 5.0)
        .collect()
}

#[test]
fn untyped_launch_writes_exactly_the_valid_elements() {
    let dev = device();
    let stream = dev.default_stream();
    let n = 1000; // not a multiple of 128: tail mask
    let xs = inputs(n + 24);
    let x = Tensor::from_host(&stream, &xs, &[n + 24]).expect("upload");
    let mut y = Tensor::filled(&stream, &[n + 24], f32::NAN).expect("poisoned output");
    let h = vadd_handle(128, 0, VADD_SRC);
    let args = vec![
        KernelArg::input(x.as_in()),
        KernelArg::output(y.as_out()),
        KernelArg::Scalar(ScalarArg::I32(n as i32)),
    ];
    h.launch(&stream, (n as u32).div_ceil(128), args)
        .expect("launch");
    let got = y.to_host(&stream).expect("download");
    for (i, (&g, &x)) in got.iter().zip(&xs).enumerate() {
        if i < n {
            assert_eq!(g, x + 2.0 * x, "element {i}");
        } else {
            assert!(g.is_nan(), "element {i} past n was written");
        }
    }
    let loaded = h.load(stream.context()).expect("cached slot");
    // From the driver: the NVRTC log may have nothing of the entry (see `LoadedKernel`).
    assert!(
        loaded.stats.registers > 0 && loaded.stats.function == "test_vadd",
        "statistics of the loaded entry: {:?} (module {:?})",
        loaded.stats,
        loaded.outcome
    );
}

#[test]
fn validation_rejects_bad_launches_before_touching_memory() {
    let dev = device();
    let stream = dev.default_stream();
    let x = Tensor::from_host(&stream, &inputs(64), &[64]).expect("upload");
    let mut y = Tensor::<f32>::zeros(&stream, &[64]).expect("alloc");
    let h = vadd_handle(128, 0, VADD_SRC);
    fn mk<'a>(x: &'a Tensor<f32>, y: &'a mut Tensor<f32>) -> Vec<KernelArg<'a>> {
        vec![
            KernelArg::input(x.as_in()),
            KernelArg::output(y.as_out()),
            KernelArg::Scalar(ScalarArg::I32(64)),
        ]
    }
    let e = h
        .launch(&stream, Grid([0, 1, 1]), mk(&x, &mut y))
        .expect_err("empty grid");
    assert!(matches!(e, LaunchError::GridDim { axis: 'x', .. }), "{e}");
    let e = h
        .launch(&stream, Grid([1, 70000, 1]), mk(&x, &mut y))
        .expect_err("grid y");
    assert!(matches!(e, LaunchError::GridDim { axis: 'y', .. }), "{e}");
    let e = h
        .launch(&stream, 1, vec![KernelArg::input(x.as_in())])
        .expect_err("count");
    assert!(
        matches!(
            e,
            LaunchError::ArgCount {
                expected: 3,
                got: 1,
                ..
            }
        ),
        "{e}"
    );
    let e = h
        .launch(
            &stream,
            1,
            vec![
                KernelArg::input(x.as_in()),
                KernelArg::input(x.as_in()),
                KernelArg::Scalar(ScalarArg::I32(1)),
            ],
        )
        .expect_err("read-only output");
    assert!(matches!(e, LaunchError::ArgKind { index: 1, .. }), "{e}");
    let e = h
        .launch(
            &stream,
            1,
            vec![
                KernelArg::input(x.as_in()),
                KernelArg::output(y.as_out()),
                KernelArg::Scalar(ScalarArg::F32(1.0)),
            ],
        )
        .expect_err("scalar dtype");
    assert!(matches!(e, LaunchError::ArgKind { index: 2, .. }), "{e}");
    let off = x.slice().slice(1..);
    let e = h
        .launch(
            &stream,
            1,
            vec![
                KernelArg::input(off),
                KernelArg::output(y.as_out()),
                KernelArg::Scalar(ScalarArg::I32(1)),
            ],
        )
        .expect_err("misaligned");
    assert!(matches!(e, LaunchError::Misaligned { index: 0, .. }), "{e}");
    let big = vadd_handle(2048, 0, VADD_SRC);
    assert!(matches!(
        big.launch(&stream, 1, mk(&x, &mut y)),
        Err(LaunchError::BlockThreads { .. })
    ));
    let huge_smem = vadd_handle(128, 400 * 1024, VADD_SRC);
    assert!(matches!(
        huge_smem.launch(&stream, 1, mk(&x, &mut y)),
        Err(LaunchError::SharedMemory { .. })
    ));
}

const SMEM_SRC: &str = r#"#include "attn_prelude.cuh"
extern "C" __global__ void test_vadd(const float* x, float* y, int n) {
  extern __shared__ float buf[];
  // L3: stage through 96 KB of dynamic shared memory
  for (int j = threadIdx.x; j < 24576; j += blockDim.x) buf[j] = (float)j;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + buf[24575 - threadIdx.x];
}
"#;

#[test]
fn dynamic_shared_memory_above_48k_opts_in() {
    let dev = device();
    let stream = dev.default_stream();
    let xs = inputs(256);
    let x = Tensor::from_host(&stream, &xs, &[256]).expect("upload");
    let mut y = Tensor::filled(&stream, &[256], f32::NAN).expect("alloc");
    let h = vadd_handle(128, 96 * 1024, SMEM_SRC);
    h.launch(
        &stream,
        2,
        vec![
            KernelArg::input(x.as_in()),
            KernelArg::output(y.as_out()),
            KernelArg::Scalar(ScalarArg::I32(256)),
        ],
    )
    .expect("96 KB launch");
    let got = y.to_host(&stream).expect("download");
    for (i, (&g, &x)) in got.iter().zip(&xs).enumerate() {
        assert_eq!(g, x + (24575 - (i % 128)) as f32, "element {i}");
    }
}

/// What `instantiate!` would generate for the vadd kernel (written by hand here).
struct VaddKernel;
struct VaddArgs<'a, B: Backend> {
    x: B::In<'a, f32>,
    y: B::Out<'a, f32>,
    n: i32,
}
impl Kernel for VaddKernel {
    const INFO: KernelInfo = KernelInfo {
        kernel: "test_vadd",
        key: "test_vadd<>",
        entry: "test_vadd",
        cuda_source: VADD_SRC,
        hash: "test",
        ir_text: "",
        params: &[
            ParamInfo::Ptr {
                name: "x",
                elem: ScalarType::F32,
                mutable: false,
            },
            ParamInfo::Ptr {
                name: "y",
                elem: ScalarType::F32,
                mutable: true,
            },
            ParamInfo::Scalar {
                name: "n",
                ty: ScalarType::I32,
            },
        ],
        block_threads: 128,
        shared_bytes: 0,
    };
    type Args<'a, B: Backend> = VaddArgs<'a, B>;
    fn marshal<'a, B: Backend>(a: Self::Args<'a, B>) -> Vec<B::Arg<'a>> {
        vec![
            B::input(a.x),
            B::output(a.y),
            B::scalar(ScalarArg::I32(a.n)),
        ]
    }
}

#[test]
fn typed_launch_through_the_cuda_backend() {
    // The typed path uses the compiler's prelude; this test kernel needs its helper, so
    // it goes through a TEST_PRELUDE-free variant of the source.
    let dev = device();
    let stream = dev.default_stream();
    let xs = inputs(300);
    let x = Tensor::from_host(&stream, &xs, &[300]).expect("upload");
    let mut y = Tensor::filled(&stream, &[300], f32::NAN).expect("alloc");
    static SLOT: TypedKernel<PlainVadd> = TypedKernel::new();
    SLOT.launch(
        &stream,
        3,
        VaddArgs::<Cuda> {
            x: x.as_in(),
            y: y.as_out(),
            n: 300,
        },
    )
    .expect("typed launch");
    let got = y.to_host(&stream).expect("download");
    assert!(got.iter().zip(&xs).all(|(&g, &x)| g == 3.0 * x));
    let mut z = Tensor::filled(&stream, &[300], f32::NAN).expect("alloc");
    launch::<PlainVadd>(
        &stream,
        3,
        VaddArgs::<Cuda> {
            x: x.as_in(),
            y: z.as_out(),
            n: 300,
        },
    )
    .expect("free launch");
    assert_eq!(z.to_host(&stream).expect("download"), got);
    let _ = VaddKernel::INFO;
}

const PLAIN_VADD_SRC: &str = r#"extern "C" __global__ void plain_vadd(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 3.0f * x[i];
}
"#;

/// A typed kernel whose source needs no prelude.
struct PlainVadd;
impl Kernel for PlainVadd {
    const INFO: KernelInfo = KernelInfo {
        kernel: "plain_vadd",
        key: "plain_vadd<>",
        entry: "plain_vadd",
        cuda_source: PLAIN_VADD_SRC,
        ..VaddKernel::INFO
    };
    type Args<'a, B: Backend> = VaddArgs<'a, B>;
    fn marshal<'a, B: Backend>(a: Self::Args<'a, B>) -> Vec<B::Arg<'a>> {
        VaddKernel::marshal::<B>(a)
    }
}

#[test]
fn event_timer_measures_device_time() {
    let dev = device();
    let stream = dev.default_stream();
    let n = 1 << 24;
    let x = Tensor::from_host(&stream, &vec![1.0f32; n], &[n]).expect("upload");
    let mut y = Tensor::<f32>::zeros(&stream, &[n]).expect("alloc");
    let h = vadd_handle(128, 0, VADD_SRC);
    let t = EventTimer::new(&stream).expect("events");
    t.start(&stream).expect("start");
    h.launch(
        &stream,
        (n as u32).div_ceil(128),
        vec![
            KernelArg::input(x.as_in()),
            KernelArg::output(y.as_out()),
            KernelArg::Scalar(ScalarArg::I32(n as i32)),
        ],
    )
    .expect("launch");
    t.stop(&stream).expect("stop");
    let ms = t.elapsed_ms().expect("elapsed");
    assert!(ms > 0.0 && ms.is_finite(), "{ms}");
}

/// One TMA box per block through the launcher-encoded map `xm` (a view of `x` as rows of
/// `2·d` bf16, boxes of 16 × 64, 128-byte swizzle), un-swizzled into the dense `y` of
/// `gridDim.y·16` rows × `gridDim.x·64` columns.
const TMA_SRC: &str = r#"
struct alignas(64) attn_tensor_map { unsigned long long opaque[16]; };
extern "C" __global__ void __launch_bounds__(128) test_tma_box(
    const unsigned short* __restrict__ x, unsigned short* __restrict__ y, int d,
    const __grid_constant__ attn_tensor_map xm) {
  extern __shared__ unsigned char dyn[];
  __shared__ alignas(8) unsigned long long bar;
  // The 128-byte swizzle pattern repeats every 1024 bytes: align the box to that.
  unsigned base = (unsigned)__cvta_generic_to_shared(dyn);
  unsigned box = (base + 1023u) & ~1023u;
  const unsigned short* tile = (const unsigned short*)(dyn + (box - base));
  unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
  const int rows = 16, cols = 64, bytes = rows * cols * 2;
  int c0 = blockIdx.x * cols, r0 = blockIdx.y * rows;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];"
        :: "r"(box), "l"((unsigned long long)&xm), "r"(c0), "r"(r0), "r"(b) : "memory");
  }
  unsigned done = 0;
  while (!done) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(b) : "memory");
  }
  int w = gridDim.x * cols;
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    int r = i / cols, c = i % cols;
    int off = r * 128 + ((((c >> 3) ^ (r & 7))) << 4) + (c & 7) * 2;
    y[(r0 + r) * w + c0 + c] = tile[off / 2];
  }
}
"#;

fn tma_handle() -> CudaKernelHandle {
    let bf16_ptr = |mutable| ParamKind::Ptr {
        elem: ScalarType::Bf16,
        mutable,
    };
    let k = CudaKernel {
        entry: "test_tma_box".into(),
        source: TMA_SRC.into(),
        hash: String::new(),
        params: vec![
            param("x", bf16_ptr(false), 0),
            param("y", bf16_ptr(true), 1),
            param("d", ParamKind::Scalar(ScalarType::I32), 2),
        ],
        block_threads: 128,
        // One 2 KiB box plus the slack to align it to 1024 bytes.
        shared_bytes: 2048 + 1024,
        assumed_divisible: Vec::new(),
        assumed_i32: Vec::new(),
        tensor_maps: vec![TensorMapParam {
            name: "xm".into(),
            base_param: 0,
            elem: ScalarType::Bf16,
            row_stride: RowStride {
                param: Some(2),
                coeff: 2,
            },
            box_rows: 16,
            box_cols: 64,
        }],
    };
    CudaKernelHandle::with_prelude(k, TEST_PRELUDE)
}

#[test]
fn tensor_maps_are_encoded_from_the_arguments_and_read_zeros_out_of_range() {
    use half::bf16;
    let dev = device();
    let stream = dev.default_stream();
    let h = tma_handle();
    // Rows of 2·80 = 160 elements (320 B), 37 rows: 3 × 3 boxes of 16 × 64, whose last
    // column and row boxes reach past the view.
    let (d, rows) = (80usize, 37usize);
    let s = 2 * d;
    let xs: Vec<bf16> = (0..rows * s)
        .map(|i| bf16::from_f32((i % 251) as f32 + 1.0))
        .collect();
    let x = Tensor::from_host(&stream, &xs, &[rows * s]).expect("upload");
    let (gx, gy) = (s.div_ceil(64), rows.div_ceil(16));
    let w = gx * 64;
    let mut y = Tensor::filled(&stream, &[gy * 16 * w], bf16::NAN).expect("alloc");
    h.launch(
        &stream,
        Grid([gx as u32, gy as u32, 1]),
        vec![
            KernelArg::input(x.as_in()),
            KernelArg::output(y.as_out()),
            KernelArg::Scalar(ScalarArg::I32(d as i32)),
        ],
    )
    .expect("TMA launch");
    let got = y.to_host(&stream).expect("download");
    for r in 0..gy * 16 {
        for c in 0..w {
            let want = if r < rows && c < s {
                xs[r * s + c]
            } else {
                bf16::ZERO
            };
            assert_eq!(got[r * w + c].to_bits(), want.to_bits(), "row {r} col {c}");
        }
    }

    // A row stride of 2·81 bf16 (324 B) is no multiple of 16 B: refused before launching.
    let e = h
        .launch(
            &stream,
            Grid([1, 1, 1]),
            vec![
                KernelArg::input(x.as_in()),
                KernelArg::output(y.as_out()),
                KernelArg::Scalar(ScalarArg::I32(81)),
            ],
        )
        .expect_err("misaligned stride");
    assert!(
        matches!(&e, LaunchError::TensorMap { param, .. } if param == "xm"),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("324 B; TMA needs a multiple of 16 B"),
        "{e}"
    );
}
