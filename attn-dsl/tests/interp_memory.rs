//! CPU executor: memory semantics (masks, bounds, read-only arguments, argument checks).

mod interp_support;

use attn_dsl::interp::{self, Access, Cpu, CpuArg, ExecError, HostBuffer};
use attn_dsl::ir::{BinaryOp, CmpPred, Function, ParamKind, ScalarType::*};
use attn_dsl::kernel::{Backend, Kernel, KernelInfo, ParamInfo, ScalarArg};
use interp_support::{at, kernel, ptr_in, ptr_out, Rng};

const POISON: f32 = -77777.0;

/// `out[i] = x[i] + y[i]` for `i < n`, `BLOCK` elements per program, tail masked.
/// Loads sit on line 10, the store on line 20.
fn vector_add(block: usize, masked: bool) -> Function {
    let params = [
        ("x", ptr_in(F32)),
        ("y", ptr_in(F32)),
        ("out", ptr_out(F32)),
        ("n", ParamKind::Scalar(I32)),
    ];
    kernel("vadd", &params, |b, p| {
        let pid = b.program_id(0)?;
        let bs = b.const_i32(block as i64);
        let start = b.binary(BinaryOp::Mul, pid, bs)?;
        let ar = b.arange(block)?;
        let offs = b.binary(BinaryOp::Add, start, ar)?;
        let mask = b.cmp(CmpPred::Lt, offs, p[3])?;
        let mask = masked.then_some(mask);
        at(b, 10);
        let px = b.add_ptr(p[0], offs)?;
        let x = b.load(px, mask, None)?;
        let py = b.add_ptr(p[1], offs)?;
        let y = b.load(py, mask, None)?;
        let s = b.binary(BinaryOp::Add, x, y)?;
        at(b, 20);
        let po = b.add_ptr(p[2], offs)?;
        b.store(po, s, mask)
    })
}

#[test]
fn vector_add_with_tail_mask_writes_exactly_the_valid_elements() {
    let (n, block) = (1000usize, 128usize);
    let mut rng = Rng::new(1);
    let x: Vec<f32> = rng
        .vec(n, -10.0, 10.0)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let y: Vec<f32> = rng
        .vec(n, -10.0, 10.0)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    // 24 extra elements past n must stay poisoned; x and y end exactly at n, so any
    // unmasked tail read would be an out-of-bounds error.
    let mut out = vec![POISON; n + 24];
    let f = vector_add(block, true);
    let grid = [n.div_ceil(block) as u32, 1, 1];
    let args = vec![
        Cpu::input(&x[..]),
        Cpu::input(&y[..]),
        Cpu::output(&mut out[..]),
        Cpu::scalar(ScalarArg::I32(n as i32)),
    ];
    let stats = interp::run(&f, grid, args).unwrap();
    for i in 0..n {
        assert_eq!(out[i], x[i] + y[i], "element {i}");
    }
    assert!(
        out[n..].iter().all(|&v| v == POISON),
        "elements past n were written"
    );
    assert_eq!(stats.programs, 8);
    assert_eq!(
        stats.bytes_loaded,
        2 * 4 * n as u64,
        "masked-off lanes must not count as loaded"
    );
    assert_eq!(stats.bytes_stored, 4 * n as u64);
}

#[test]
fn unmasked_out_of_bounds_load_names_line_param_and_offset() {
    let (n, block) = (100usize, 64usize);
    let x = vec![1.0f32; n];
    let y = vec![2.0f32; n];
    let mut out = vec![POISON; 128];
    let f = vector_add(block, false);
    let args = vec![
        Cpu::input(&x[..]),
        Cpu::input(&y[..]),
        Cpu::output(&mut out[..]),
        Cpu::scalar(ScalarArg::I32(n as i32)),
    ];
    let err = interp::run(&f, [2, 1, 1], args).unwrap_err();
    match &err {
        ExecError::OutOfBounds {
            line,
            access,
            param,
            offset,
            len,
            program,
            ..
        } => {
            assert_eq!(
                (*line, *access, param.as_str(), *offset, *len),
                (10, Access::Load, "x", 100, 100)
            );
            assert_eq!(*program, [1, 0, 0]);
        }
        other => panic!("expected OutOfBounds, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("line 10:5") && msg.contains("`x`[100]") && msg.contains("100 elements"),
        "{msg}"
    );
}

#[test]
fn out_of_bounds_store_is_reported_even_when_loads_fit() {
    // x and y are long enough, `out` is not: the store (line 20) must be the one that fails.
    let x = vec![1.0f32; 128];
    let y = vec![2.0f32; 128];
    let mut out = vec![POISON; 100];
    let f = vector_add(64, false);
    let args = vec![
        Cpu::input(&x[..]),
        Cpu::input(&y[..]),
        Cpu::output(&mut out[..]),
        Cpu::scalar(ScalarArg::I32(128)),
    ];
    let err = interp::run(&f, [2, 1, 1], args).unwrap_err();
    assert!(
        matches!(
            &err,
            ExecError::OutOfBounds {
                line: 20,
                access: Access::Store,
                offset: 100,
                len: 100,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.line(), Some(20));
}

#[test]
fn negative_offset_is_out_of_bounds() {
    let params = [("x", ptr_in(I32)), ("out", ptr_out(I32))];
    let f = kernel("neg", &params, |b, p| {
        let ar = b.arange(4)?;
        let one = b.const_i32(1);
        let offs = b.binary(BinaryOp::Sub, ar, one)?; // -1, 0, 1, 2
        at(b, 7);
        let px = b.add_ptr(p[0], offs)?;
        let v = b.load(px, None, None)?;
        let po = b.add_ptr(p[1], ar)?;
        b.store(po, v, None)
    });
    let x = [5i32; 4];
    let mut out = [0i32; 4];
    let err = interp::run(
        &f,
        [1, 1, 1],
        vec![Cpu::input(&x[..]), Cpu::output(&mut out[..])],
    )
    .unwrap_err();
    assert!(
        matches!(
            &err,
            ExecError::OutOfBounds {
                line: 7,
                offset: -1,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn masked_load_reads_other_and_never_touches_memory() {
    // Offsets run far past the 4-element buffer, but only the first 4 lanes are active.
    let params = [("x", ptr_in(F32)), ("out", ptr_out(F32))];
    let f = kernel("masked", &params, |b, p| {
        let ar = b.arange(16)?;
        let big = b.const_i32(1_000_000);
        let four = b.const_i32(4);
        let active = b.cmp(CmpPred::Lt, ar, four)?;
        let far = b.binary(BinaryOp::Mul, ar, big)?;
        let offs = b.select(active, ar, far)?;
        let px = b.add_ptr(p[0], offs)?;
        let other = b.const_f32(-1.5);
        let v = b.load(px, Some(active), Some(other))?;
        let po = b.add_ptr(p[1], ar)?;
        b.store(po, v, None)
    });
    let x = [1.0f32, 2.0, 3.0, 4.0];
    let mut out = vec![POISON; 16];
    let stats = interp::run(
        &f,
        [1, 1, 1],
        vec![Cpu::input(&x[..]), Cpu::output(&mut out[..])],
    )
    .unwrap();
    assert_eq!(&out[..4], &x[..]);
    assert!(out[4..].iter().all(|&v| v == -1.5), "{out:?}");
    assert_eq!(stats.bytes_loaded, 16);
}

#[test]
fn duplicate_store_addresses_last_lane_wins() {
    let params = [("out", ptr_out(I32))];
    let f = kernel("dup", &params, |b, p| {
        let ar = b.arange(8)?;
        let two = b.const_i32(2);
        let offs = b.binary(BinaryOp::Rem, ar, two)?; // 0,1,0,1,...
        let po = b.add_ptr(p[0], offs)?;
        b.store(po, ar, None)
    });
    let mut out = vec![-1i32; 2];
    interp::run(&f, [1, 1, 1], vec![Cpu::output(&mut out[..])]).unwrap();
    assert_eq!(out, vec![6, 7]);
}

#[test]
fn store_through_read_only_argument_is_rejected() {
    // A hand-built IR that stores through a `*const` parameter (the front end forbids it).
    let params = [("x", ptr_in(F32))];
    let f = kernel("ro", &params, |b, p| {
        let v = b.const_f32(1.0);
        at(b, 12);
        b.store(p[0], v, None)
    });
    let x = [0.0f32; 1];
    let err = interp::run(&f, [1, 1, 1], vec![Cpu::input(&x[..])]).unwrap_err();
    assert!(
        matches!(&err, ExecError::StoreToReadOnly { line: 12, param, .. } if param == "x"),
        "{err:?}"
    );
}

#[test]
fn argument_mismatches_are_reported_before_running() {
    let f = vector_add(64, true);
    let x = vec![0.0f32; 64];
    let xi = vec![0i32; 64];
    let mut out = vec![POISON; 64];
    let n = || Cpu::scalar(ScalarArg::I32(64));

    let err = interp::run(&f, [1, 1, 1], vec![Cpu::input(&x[..])]).unwrap_err();
    assert!(
        matches!(
            err,
            ExecError::ArgCount {
                expected: 4,
                got: 1,
                ..
            }
        ),
        "{err:?}"
    );

    // dtype: i32 buffer for a *const f32 parameter.
    let args = vec![
        Cpu::input(&xi[..]),
        Cpu::input(&x[..]),
        Cpu::output(&mut out[..]),
        n(),
    ];
    let err = interp::run(&f, [1, 1, 1], args).unwrap_err();
    assert!(
        matches!(&err, ExecError::ArgMismatch { index: 0, name, .. } if name == "x"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("*const f32") && err.to_string().contains("i32"),
        "{err}"
    );

    // in vs out: a read-only buffer for the *mut parameter.
    let args = vec![
        Cpu::input(&x[..]),
        Cpu::input(&x[..]),
        Cpu::input(&x[..]),
        n(),
    ];
    let err = interp::run(&f, [1, 1, 1], args).unwrap_err();
    assert!(
        matches!(&err, ExecError::ArgMismatch { index: 2, .. }),
        "{err:?}"
    );

    // kind: a scalar where a pointer goes, and a wrong scalar type.
    let args = vec![n(), Cpu::input(&x[..]), Cpu::output(&mut out[..]), n()];
    assert!(matches!(
        interp::run(&f, [1, 1, 1], args),
        Err(ExecError::ArgMismatch { index: 0, .. })
    ));
    let args = vec![
        Cpu::input(&x[..]),
        Cpu::input(&x[..]),
        Cpu::output(&mut out[..]),
        Cpu::scalar(ScalarArg::I64(64)),
    ];
    assert!(matches!(
        interp::run(&f, [1, 1, 1], args),
        Err(ExecError::ArgMismatch { index: 3, .. })
    ));
    assert!(
        out.iter().all(|&v| v == POISON),
        "nothing may run on a mismatch"
    );

    let args = vec![
        Cpu::input(&x[..]),
        Cpu::input(&x[..]),
        Cpu::output(&mut out[..]),
        n(),
    ];
    assert!(matches!(
        interp::run(&f, [1, 0, 1], args),
        Err(ExecError::EmptyGrid { .. })
    ));
}

#[test]
fn host_buffers_round_trip_through_a_kernel() {
    let f = vector_add(64, true);
    let x = HostBuffer::from(vec![1.0f32; 50]);
    let y = HostBuffer::from_f64s(F32, &[0.25; 50]);
    let mut out = HostBuffer::zeros(F32, 50);
    let args = vec![
        x.arg_in(),
        y.arg_in(),
        out.arg_out(),
        CpuArg::Scalar(ScalarArg::I32(50)),
    ];
    interp::run(&f, [1, 1, 1], args).unwrap();
    assert_eq!(out.to_f64s(), vec![1.25; 50]);
    assert_eq!((out.dtype(), out.len()), (F32, 50));
}

/// A hand-written stand-in for what `instantiate!` generates, to test the `Cpu` backend
/// marshalling path.
struct VAdd;

struct VAddArgs<'a, B: Backend> {
    x: B::In<'a, f32>,
    y: B::In<'a, f32>,
    out: B::Out<'a, f32>,
    n: i32,
}

impl Kernel for VAdd {
    const INFO: KernelInfo = KernelInfo {
        kernel: "vadd",
        key: "vadd<>",
        entry: "vadd",
        cuda_source: "",
        hash: "",
        ir_text: "this is not IR",
        params: &[
            ParamInfo::Ptr {
                name: "x",
                elem: F32,
                mutable: false,
            },
            ParamInfo::Ptr {
                name: "y",
                elem: F32,
                mutable: false,
            },
            ParamInfo::Ptr {
                name: "out",
                elem: F32,
                mutable: true,
            },
            ParamInfo::Scalar { name: "n", ty: I32 },
        ],
        block_threads: 128,
        shared_bytes: 0,
    };
    type Args<'a, B: Backend> = VAddArgs<'a, B>;
    fn marshal<'a, B: Backend>(a: Self::Args<'a, B>) -> Vec<B::Arg<'a>> {
        vec![
            B::input(a.x),
            B::input(a.y),
            B::output(a.out),
            B::scalar(ScalarArg::I32(a.n)),
        ]
    }
}

#[test]
fn typed_kernel_args_marshal_through_the_cpu_backend() {
    let f = vector_add(32, true);
    let x = vec![3.0f32; 40];
    let y = vec![0.5f32; 40];
    let mut out = vec![POISON; 40];
    let args = VAdd::marshal::<Cpu>(VAddArgs {
        x: &x,
        y: &y,
        out: &mut out,
        n: 40,
    });
    interp::run(&f, [2, 1, 1], args).unwrap();
    assert_eq!(out, vec![3.5; 40]);
    // `launch` parses the kernel's IR text first; unparsable text is a typed error.
    let err = interp::launch::<VAdd>(
        [1, 1, 1],
        VAddArgs {
            x: &x,
            y: &y,
            out: &mut out,
            n: 40,
        },
    )
    .unwrap_err();
    assert!(matches!(err, ExecError::IrParse(_)), "{err:?}");
}
