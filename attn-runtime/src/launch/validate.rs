//! Host-side launch validation, pure so it is tested without a GPU: grid and block
//! limits, shared memory against the opt-in maximum, argument count/kind/dtype against
//! the kernel's parameters, and the 16-byte alignment contract of buffers.

use super::tensor_map::TensorMapSpec;
use super::{Grid, LaunchError};
use attn_dsl::ir::{ParamKind, ScalarType};
use attn_dsl::kernel::{ParamInfo, ScalarArg};

/// Shared memory a block gets without opting in (`cudaFuncSetAttribute`).
pub const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;
/// The alignment every buffer argument must have (16-byte vector loads).
pub const BUFFER_ALIGN: u64 = 16;

/// What the device allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    pub max_grid: [u32; 3],
    pub max_block_threads: u32,
    /// Dynamic + static shared memory per block after opting in.
    pub max_shared_optin: u32,
    pub sm_count: u32,
}

impl DeviceLimits {
    /// The H100/H200 (sm_90) limits, for tests and documentation.
    pub const SM90: DeviceLimits = DeviceLimits {
        max_grid: [i32::MAX as u32, 65535, 65535],
        max_block_threads: 1024,
        max_shared_optin: 227 * 1024,
        sm_count: 132,
    };
}

/// A kernel parameter, from `instantiate!` metadata or a run-time `CudaKernel`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    pub name: String,
    pub kind: ParamKind,
    /// The value must be a multiple of this (1: no promise). The code was specialized on
    /// it (see `attn_dsl::passes::assume`), so a call that breaks it is refused.
    pub divisible_by: u64,
    /// The 64-bit value must lie in `int`'s range with the promise's headroom: the code
    /// multiplies it as an `int` (`attn_dsl::passes::assume::keeps_i32`).
    pub fits_i32: bool,
}

impl ParamSpec {
    pub fn from_info(p: &ParamInfo) -> Self {
        match *p {
            ParamInfo::Ptr {
                name,
                elem,
                mutable,
            } => ParamSpec {
                name: name.into(),
                kind: ParamKind::Ptr { elem, mutable },
                divisible_by: 1,
                fits_i32: false,
            },
            ParamInfo::Scalar { name, ty } => ParamSpec {
                name: name.into(),
                kind: ParamKind::Scalar(ty),
                divisible_by: 1,
                fits_i32: false,
            },
        }
    }
    pub fn from_ir(p: &attn_dsl::ir::Param) -> Self {
        ParamSpec {
            name: p.name.clone(),
            kind: p.kind,
            divisible_by: 1,
            fits_i32: false,
        }
    }

    /// The parameters of a generated kernel with its divisibility promises.
    pub fn of_kernel(k: &attn_dsl::codegen::CudaKernel) -> Vec<Self> {
        k.params
            .iter()
            .map(|p| ParamSpec {
                divisible_by: k
                    .assumed_divisible
                    .iter()
                    .find(|(n, _)| *n == p.name)
                    .map_or(1, |(_, d)| *d),
                fits_i32: k.assumed_i32.contains(&p.name),
                ..ParamSpec::from_ir(p)
            })
            .collect()
    }
}

/// What a launch needs to know about a kernel besides its code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchSpec {
    pub entry: String,
    pub params: Vec<ParamSpec>,
    pub block_threads: u32,
    /// Dynamic shared memory per block.
    pub shared_bytes: u32,
    /// TMA tensor maps the kernel takes after [`Self::params`], in order. The caller never
    /// passes them (arguments are checked against `params` alone): the launcher encodes
    /// them from the arguments for every launch, because each embeds its buffer's address.
    pub tensor_maps: Vec<TensorMapSpec>,
}

/// An argument as validation sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgSummary {
    Buffer { elem: ScalarType, mutable: bool },
    Scalar(ScalarArg),
}

/// Checks grid, block and shared memory. `static_shared` is what ptxas reported;
/// `func_max_threads` the per-function limit (registers can lower it below 1024).
pub fn validate_config(
    spec: &LaunchSpec,
    limits: &DeviceLimits,
    grid: Grid,
    static_shared: u32,
    func_max_threads: u32,
) -> Result<(), LaunchError> {
    for (axis, (&value, &max)) in ['x', 'y', 'z']
        .into_iter()
        .zip(grid.0.iter().zip(limits.max_grid.iter()))
    {
        if value == 0 || value > max {
            return Err(LaunchError::GridDim {
                kernel: spec.entry.clone(),
                axis,
                value,
                max,
            });
        }
    }
    let max_threads = limits.max_block_threads.min(func_max_threads).min(1024);
    if spec.block_threads == 0 || spec.block_threads > max_threads {
        return Err(LaunchError::BlockThreads {
            kernel: spec.entry.clone(),
            threads: spec.block_threads,
            max: max_threads,
        });
    }
    if spec.shared_bytes as u64 + static_shared as u64 > limits.max_shared_optin as u64 {
        return Err(LaunchError::SharedMemory {
            kernel: spec.entry.clone(),
            dynamic: spec.shared_bytes,
            static_bytes: static_shared,
            max: limits.max_shared_optin,
        });
    }
    Ok(())
}

/// Checks argument count, kind and dtype against the kernel's parameters. A writable
/// buffer may be passed where the kernel only reads; a read-only one never where it writes.
pub fn validate_args(spec: &LaunchSpec, args: &[ArgSummary]) -> Result<(), LaunchError> {
    if args.len() != spec.params.len() {
        let names = spec
            .params
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(LaunchError::ArgCount {
            kernel: spec.entry.clone(),
            expected: spec.params.len(),
            got: args.len(),
            names,
        });
    }
    for (index, (p, a)) in spec.params.iter().zip(args).enumerate() {
        if let ArgSummary::Scalar(ScalarArg::I32(v)) = a {
            check_divisible(spec, index, p, i64::from(*v))?;
        }
        if let ArgSummary::Scalar(ScalarArg::I64(v)) = a {
            check_divisible(spec, index, p, *v)?;
            check_i32(spec, index, p, *v)?;
        }
        if !arg_matches(p.kind, a) {
            return Err(LaunchError::ArgKind {
                kernel: spec.entry.clone(),
                index,
                name: p.name.clone(),
                expected: describe_param(p.kind),
                got: describe_arg(a),
            });
        }
    }
    Ok(())
}

fn check_divisible(
    spec: &LaunchSpec,
    index: usize,
    p: &ParamSpec,
    v: i64,
) -> Result<(), LaunchError> {
    if p.divisible_by > 1 && !attn_dsl::passes::assume::keeps(v, p.divisible_by) {
        return Err(LaunchError::Divisibility {
            kernel: spec.entry.clone(),
            index,
            name: p.name.clone(),
            value: v,
            divisor: p.divisible_by,
        });
    }
    Ok(())
}

fn check_i32(spec: &LaunchSpec, index: usize, p: &ParamSpec, v: i64) -> Result<(), LaunchError> {
    if p.fits_i32 && !attn_dsl::passes::assume::keeps_i32(v) {
        return Err(LaunchError::OutsideI32 {
            kernel: spec.entry.clone(),
            index,
            name: p.name.clone(),
            value: v,
        });
    }
    Ok(())
}

/// Checks the alignment contract of one buffer's device address.
pub fn validate_alignment(spec: &LaunchSpec, index: usize, addr: u64) -> Result<(), LaunchError> {
    if !addr.is_multiple_of(BUFFER_ALIGN) {
        let name = spec
            .params
            .get(index)
            .map(|p| p.name.clone())
            .unwrap_or_default();
        return Err(LaunchError::Misaligned {
            kernel: spec.entry.clone(),
            index,
            name,
            addr,
            align: BUFFER_ALIGN,
        });
    }
    Ok(())
}

fn arg_matches(kind: ParamKind, arg: &ArgSummary) -> bool {
    match (kind, arg) {
        (
            ParamKind::Ptr { elem, mutable },
            ArgSummary::Buffer {
                elem: e,
                mutable: m,
            },
        ) => elem == *e && (*m || !mutable),
        (ParamKind::Scalar(ty), ArgSummary::Scalar(v)) => scalar_type(v) == ty,
        _ => false,
    }
}

/// The DSL type a scalar argument carries.
pub fn scalar_type(v: &ScalarArg) -> ScalarType {
    match v {
        ScalarArg::I32(_) => ScalarType::I32,
        ScalarArg::I64(_) => ScalarType::I64,
        ScalarArg::F32(_) => ScalarType::F32,
        ScalarArg::Bool(_) => ScalarType::Bool,
    }
}

fn describe_param(kind: ParamKind) -> String {
    match kind {
        ParamKind::Ptr {
            elem,
            mutable: true,
        } => format!("a writable {elem} buffer (`*mut {elem}`)"),
        ParamKind::Ptr {
            elem,
            mutable: false,
        } => format!("a {elem} buffer (`*const {elem}`)"),
        ParamKind::Scalar(ty) => format!("a {ty} scalar"),
    }
}

fn describe_arg(a: &ArgSummary) -> String {
    match a {
        ArgSummary::Buffer {
            elem,
            mutable: true,
        } => format!("a writable {elem} buffer"),
        ArgSummary::Buffer {
            elem,
            mutable: false,
        } => format!("a read-only {elem} buffer"),
        ArgSummary::Scalar(v) => format!("a {} scalar ({v:?})", scalar_type(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(block_threads: u32, shared_bytes: u32) -> LaunchSpec {
        LaunchSpec {
            entry: "k".into(),
            params: vec![
                ParamSpec {
                    name: "x".into(),
                    kind: ParamKind::Ptr {
                        elem: ScalarType::Bf16,
                        mutable: false,
                    },
                    divisible_by: 1,
                    fits_i32: false,
                },
                ParamSpec {
                    name: "y".into(),
                    kind: ParamKind::Ptr {
                        elem: ScalarType::F32,
                        mutable: true,
                    },
                    divisible_by: 1,
                    fits_i32: false,
                },
                ParamSpec {
                    name: "n".into(),
                    kind: ParamKind::Scalar(ScalarType::I32),
                    divisible_by: 1,
                    fits_i32: false,
                },
            ],
            block_threads,
            shared_bytes,
            tensor_maps: vec![],
        }
    }
    const L: DeviceLimits = DeviceLimits::SM90;

    /// Arguments for [`spec`]'s parameters, `n` its scalar.
    fn spec_args(n: ScalarArg) -> [ArgSummary; 3] {
        [
            ArgSummary::Buffer {
                elem: ScalarType::Bf16,
                mutable: false,
            },
            ArgSummary::Buffer {
                elem: ScalarType::F32,
                mutable: true,
            },
            ArgSummary::Scalar(n),
        ]
    }

    #[test]
    fn a_broken_divisibility_promise_is_refused() {
        let args = |n: i32| spec_args(ScalarArg::I32(n));
        let mut s = spec(128, 0);
        s.params[2].divisible_by = 16;
        assert!(validate_args(&s, &args(48)).is_ok());
        let e = validate_args(&s, &args(40)).expect_err("40 is not a multiple of 16");
        assert!(
            matches!(
                e,
                LaunchError::Divisibility {
                    value: 40,
                    divisor: 16,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_broken_i32_promise_is_refused() {
        let mut s = spec(128, 0);
        s.params[2].kind = ParamKind::Scalar(ScalarType::I64);
        s.params[2].fits_i32 = true;
        let args = |n: i64| spec_args(ScalarArg::I64(n));
        let most = i64::from(i32::MAX) / attn_dsl::passes::assume::I32_HEADROOM;
        assert!(validate_args(&s, &args(most)).is_ok());
        assert!(validate_args(&s, &args(-most)).is_ok());
        for v in [most + 1, -most - 1, 1i64 << 31] {
            let e = validate_args(&s, &args(v)).expect_err("outside i32");
            assert!(
                matches!(e, LaunchError::OutsideI32 { value, index: 2, .. } if value == v),
                "{e}"
            );
        }
    }

    #[test]
    fn grid_dims_must_be_positive_and_within_limits() {
        assert!(validate_config(&spec(128, 0), &L, Grid([1, 1, 1]), 0, 1024).is_ok());
        let e = validate_config(&spec(128, 0), &L, Grid([4, 0, 1]), 0, 1024).expect_err("zero y");
        assert!(
            matches!(
                e,
                LaunchError::GridDim {
                    axis: 'y',
                    value: 0,
                    ..
                }
            ),
            "{e}"
        );
        let e = validate_config(&spec(128, 0), &L, Grid([1, 1, 65536]), 0, 1024)
            .expect_err("z too big");
        assert!(
            e.to_string()
                .contains("grid dimension z is 65536; it must be in 1..=65535"),
            "{e}"
        );
    }

    #[test]
    fn block_threads_limited_by_device_and_function() {
        assert!(validate_config(&spec(1024, 0), &L, Grid([1, 1, 1]), 0, 1024).is_ok());
        assert!(matches!(
            validate_config(&spec(2048, 0), &L, Grid([1, 1, 1]), 0, 1024),
            Err(LaunchError::BlockThreads {
                threads: 2048,
                max: 1024,
                ..
            })
        ));
        assert!(matches!(
            validate_config(&spec(512, 0), &L, Grid([1, 1, 1]), 0, 256),
            Err(LaunchError::BlockThreads { max: 256, .. })
        ));
        assert!(validate_config(&spec(0, 0), &L, Grid([1, 1, 1]), 0, 1024).is_err());
    }

    #[test]
    fn shared_memory_above_optin_max_is_rejected() {
        assert!(
            validate_config(&spec(128, 100 * 1024), &L, Grid([1, 1, 1]), 0, 1024).is_ok(),
            "opt-in covers 100 KB"
        );
        assert!(validate_config(&spec(128, 227 * 1024), &L, Grid([1, 1, 1]), 0, 1024).is_ok());
        let e = validate_config(&spec(128, 227 * 1024), &L, Grid([1, 1, 1]), 16, 1024)
            .expect_err("static pushes over");
        assert!(
            matches!(
                e,
                LaunchError::SharedMemory {
                    dynamic: 232448,
                    static_bytes: 16,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn args_checked_for_count_kind_and_dtype() {
        let s = spec(128, 0);
        let ok = spec_args(ScalarArg::I32(7));
        assert!(validate_args(&s, &ok).is_ok());
        let e = validate_args(&s, &ok[..2]).expect_err("count");
        assert!(
            e.to_string().contains("takes 3 arguments (x, y, n); got 2"),
            "{e}"
        );

        let mut wrong_dtype = ok;
        wrong_dtype[0] = ArgSummary::Buffer {
            elem: ScalarType::F16,
            mutable: false,
        };
        let e = validate_args(&s, &wrong_dtype).expect_err("dtype");
        assert!(
            e.to_string()
                .contains("argument 0 (`x`): expected a bf16 buffer"),
            "{e}"
        );

        let mut read_only_out = ok;
        read_only_out[1] = ArgSummary::Buffer {
            elem: ScalarType::F32,
            mutable: false,
        };
        assert!(matches!(
            validate_args(&s, &read_only_out),
            Err(LaunchError::ArgKind { index: 1, .. })
        ));

        let mut writable_in = ok;
        writable_in[0] = ArgSummary::Buffer {
            elem: ScalarType::Bf16,
            mutable: true,
        };
        assert!(
            validate_args(&s, &writable_in).is_ok(),
            "a writable buffer may be read"
        );

        let mut wrong_scalar = ok;
        wrong_scalar[2] = ArgSummary::Scalar(ScalarArg::I64(7));
        assert!(matches!(
            validate_args(&s, &wrong_scalar),
            Err(LaunchError::ArgKind { index: 2, .. })
        ));

        let mut scalar_for_buffer = ok;
        scalar_for_buffer[0] = ArgSummary::Scalar(ScalarArg::F32(1.0));
        assert!(validate_args(&s, &scalar_for_buffer).is_err());
    }

    #[test]
    fn buffers_must_be_16_byte_aligned() {
        let s = spec(128, 0);
        assert!(validate_alignment(&s, 0, 0x7f00_0000_0100).is_ok());
        let e = validate_alignment(&s, 1, 0x7f00_0000_0104).expect_err("misaligned");
        assert!(
            e.to_string()
                .contains("argument 1 (`y`): device address 0x7f0000000104 is not 16-byte aligned"),
            "{e}"
        );
    }
}
