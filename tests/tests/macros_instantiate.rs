//! `instantiate!` end to end: kernels from another crate (`attn_tests::vector`), from a
//! module of this file and stand-alone, with dtype, int and `#[device]` constexprs; checks
//! the generated `KernelInfo` and that `marshal` keeps parameter order and kinds.

use attn_dsl::ir::ScalarType;
use attn_dsl::kernel::{Kernel, ParamInfo, ScalarArg};
use attn_dsl::ConstValue;
use attn_dsl_macros::{instantiate, kernel, module};
use attn_tests::record_backend::{RecordBackend, Recorded};
use half::bf16;

// A kernel of another crate, with a device function passed as a constexpr.
instantiate!(pub MapDoubleBf16 = attn_tests::vector::map { T = bf16, BLOCK = 64, F = double });
// Several instantiations in one call, private visibility.
instantiate!(
    MapIdentityF32 = attn_tests::vector::map { T = f32, BLOCK = 16, F = identity };
    MapIdentityI32 = attn_tests::vector::map { BLOCK = 128, F = identity, T = i32 }
);

/// A module local to this crate: scalar parameters of every by-value kind, after a pointer.
#[module]
mod local {
    #[kernel(num_warps = 8)]
    pub fn fill<const BLOCK: i32, const NEG: i32>(
        out: *mut f32,
        n: i64,
        value: f32,
        flag: bool,
        m: i32,
    ) {
        let offs = program_id(0) * BLOCK + arange::<BLOCK>() + NEG;
        let v = full([BLOCK], value);
        store(out + offs, select(flag, v, v + 1.0), offs < m);
    }
}
instantiate!(FillNeg = local::fill { BLOCK = 32, NEG = -3 });

/// A stand-alone kernel: pointer parameters of two element types, interleaved with scalars.
#[kernel(require(BLOCK <= 1024, "BLOCK must be at most 1024"))]
pub fn gather<const BLOCK: i32>(idx: *const i32, n: i32, src: *const f32, dst: *mut f32) {
    let offs = program_id(0) * BLOCK + arange::<BLOCK>();
    let mask = offs < n;
    let i = load(idx + offs, mask, 0);
    store(dst + offs, load(src + i, mask, 0.0), mask);
}
instantiate!(pub Gather256 = gather { BLOCK = 256 });

#[test]
fn info_of_cross_crate_kernel_has_params_in_order_with_bound_dtype() {
    let info = MapDoubleBf16::INFO;
    assert_eq!(info.kernel, "map");
    assert_eq!(info.key, "map<T=bf16,BLOCK=64,F=double>");
    assert_eq!(
        info.params,
        &[
            ParamInfo::Ptr {
                name: "x",
                elem: ScalarType::Bf16,
                mutable: false
            },
            ParamInfo::Ptr {
                name: "out",
                elem: ScalarType::Bf16,
                mutable: true
            },
            ParamInfo::Scalar {
                name: "n",
                ty: ScalarType::I32
            },
            ParamInfo::Scalar {
                name: "scale",
                ty: ScalarType::F32
            },
        ]
    );
    assert!(
        !info.entry.is_empty() && info.cuda_source.contains(info.entry),
        "entry not in the CUDA source"
    );
    assert!(!info.hash.is_empty() && !info.ir_text.is_empty());
    assert_eq!(info.block_threads, 128, "num_warps = 4");
}

#[test]
fn instantiations_differ_by_key_and_hash() {
    let keys = [
        MapDoubleBf16::INFO.key,
        MapIdentityF32::INFO.key,
        MapIdentityI32::INFO.key,
    ];
    assert_eq!(keys[1], "map<T=f32,BLOCK=16,F=identity>");
    assert_eq!(
        keys[2], "map<T=i32,BLOCK=128,F=identity>",
        "key follows declaration order, not binding order"
    );
    assert_ne!(MapIdentityF32::INFO.hash, MapIdentityI32::INFO.hash);
    assert_ne!(MapIdentityF32::INFO.entry, MapIdentityI32::INFO.entry);
    assert_eq!(
        MapIdentityI32::INFO.params[0],
        ParamInfo::Ptr {
            name: "x",
            elem: ScalarType::I32,
            mutable: false
        }
    );
}

#[test]
fn marshal_keeps_parameter_order_and_kinds() {
    let x = vec![bf16::from_f32(1.5); 7];
    let mut out = vec![bf16::ZERO; 9];
    let (x_addr, out_addr) = (x.as_ptr() as usize, out.as_ptr() as usize);
    let args = MapDoubleBf16Args::<RecordBackend> {
        x: &x,
        out: &mut out,
        n: 7,
        scale: 0.25,
    };
    let marshalled = MapDoubleBf16::marshal::<RecordBackend>(args);
    assert_eq!(
        marshalled,
        vec![
            Recorded::Input {
                elem: ScalarType::Bf16,
                addr: x_addr,
                len: 7
            },
            Recorded::Output {
                elem: ScalarType::Bf16,
                addr: out_addr,
                len: 9
            },
            Recorded::Scalar(ScalarArg::I32(7)),
            Recorded::Scalar(ScalarArg::F32(0.25)),
        ]
    );
}

#[test]
fn marshal_passes_every_scalar_kind_by_value() {
    let mut out = vec![0.0f32; 3];
    let out_addr = out.as_ptr() as usize;
    let args = FillNegArgs::<RecordBackend> {
        out: &mut out,
        n: -5_000_000_000,
        value: -2.5,
        flag: true,
        m: 11,
    };
    assert_eq!(
        FillNeg::marshal::<RecordBackend>(args),
        vec![
            Recorded::Output {
                elem: ScalarType::F32,
                addr: out_addr,
                len: 3
            },
            Recorded::Scalar(ScalarArg::I64(-5_000_000_000)),
            Recorded::Scalar(ScalarArg::F32(-2.5)),
            Recorded::Scalar(ScalarArg::Bool(true)),
            Recorded::Scalar(ScalarArg::I32(11)),
        ]
    );
    assert_eq!(FillNeg::INFO.key, "fill<BLOCK=32,NEG=-3>");
    assert_eq!(FillNeg::INFO.block_threads, 256, "num_warps = 8");
}

#[test]
fn standalone_kernel_interleaves_pointers_and_scalars() {
    let idx = vec![2i32, 0, 1];
    let src = vec![1.0f32, 2.0, 3.0, 4.0];
    let mut dst = vec![f32::NAN; 3];
    let addrs = (
        idx.as_ptr() as usize,
        src.as_ptr() as usize,
        dst.as_ptr() as usize,
    );
    let args = Gather256Args::<RecordBackend> {
        idx: &idx,
        n: 3,
        src: &src,
        dst: &mut dst,
    };
    assert_eq!(
        Gather256::marshal::<RecordBackend>(args),
        vec![
            Recorded::Input {
                elem: ScalarType::I32,
                addr: addrs.0,
                len: 3
            },
            Recorded::Scalar(ScalarArg::I32(3)),
            Recorded::Input {
                elem: ScalarType::F32,
                addr: addrs.1,
                len: 4
            },
            Recorded::Output {
                elem: ScalarType::F32,
                addr: addrs.2,
                len: 3
            },
        ]
    );
    assert_eq!(Gather256::INFO.key, "gather<BLOCK=256>");
}

#[test]
fn run_time_template_matches_compile_time_instantiation() {
    let compiled = attn_tests::vector::MAP_TEMPLATE
        .specialize(&[
            ("T", ConstValue::Dtype(ScalarType::Bf16)),
            ("BLOCK", ConstValue::Int(64)),
            ("F", ConstValue::Device("double".into())),
        ])
        .expect("the same bindings that instantiate! accepted");
    let info = MapDoubleBf16::INFO;
    assert_eq!(compiled.specialized.key(), info.key);
    assert_eq!(
        compiled.ir_text, info.ir_text,
        "run-time IR (with DSL lines) equals compile-time IR"
    );
    assert_eq!(compiled.cuda.source, info.cuda_source);
    assert_eq!(compiled.cuda.hash, info.hash);
    // A stand-alone kernel's template works the same way.
    let gather = GATHER_TEMPLATE
        .specialize(&[("BLOCK", ConstValue::Int(256))])
        .expect("valid bindings");
    assert_eq!(gather.cuda.source, Gather256::INFO.cuda_source);
}

#[test]
fn run_time_require_error_names_the_rule_and_the_kernel_line() {
    let err = GATHER_TEMPLATE
        .specialize(&[("BLOCK", ConstValue::Int(2048))])
        .expect_err("BLOCK > 1024");
    assert!(err.message.contains("BLOCK must be at most 1024"), "{err}");
    assert!(err.file.ends_with("macros_instantiate.rs"), "{}", err.file);
    let fn_line = include_str!("macros_instantiate.rs")
        .lines()
        .position(|l| l.starts_with("pub fn gather<"))
        .expect("the kernel is in this file") as u32
        + 1;
    assert_eq!(
        err.line, fn_line,
        "an error at a binding reports the kernel's line"
    );
    assert!(
        err.to_string()
            .contains(&format!("macros_instantiate.rs:{fn_line}")),
        "{err}"
    );
}

#[test]
fn specialize_error_is_send_sync_static() {
    fn assert_send_sync<E: Send + Sync + 'static + std::error::Error>() {}
    assert_send_sync::<attn_dsl::template::SpecializeError>();
}
