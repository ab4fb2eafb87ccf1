//! TMA tensor maps of generated kernels, encoded by the launcher for every launch.
//!
//! A kernel whose bulk (TMA) copies stage tiles into swizzled shared memory reads global
//! memory through `CUtensorMap`s, one per viewed buffer, passed after its ordinary
//! parameters as `const __grid_constant__ attn_tensor_map NAME`. A map embeds the
//! buffer's device address and extent, which are only known at the call, so the caller
//! never supplies maps: the launcher encodes each one from the ordinary arguments (the
//! base buffer's address and length, the row stride's scalar) right before the launch.
//!
//! [`tiled_map_inputs`] computes and checks the encode call's inputs (pure, tested
//! without a GPU); [`encode_tiled`] is the one driver call; [`encode_maps`] does both for
//! every map of a launch.

use super::validate::LaunchSpec;
use super::LaunchError;
use attn_dsl::codegen::{CudaKernel, TensorMapParam};
use attn_dsl::ir::{ParamKind, ScalarType};
use attn_dsl::kernel::ScalarArg;
use cudarc::driver::sys::{
    self, CUresult, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill,
    CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use std::ffi::c_void;

/// Bytes of one box row: the 128-byte swizzle (the layout of the shared-memory tiles the
/// maps fill) needs box rows of exactly this size.
pub const SWIZZLE_BYTES: u64 = 128;
/// Largest box extent along any dimension (driver limit).
pub const MAX_BOX_ROWS: u32 = 256;
/// Global strides must be below this many bytes (driver limit).
pub const MAX_STRIDE_BYTES: u64 = 1 << 40;
/// Global strides and the base address must be multiples of this (driver limit).
pub const TMA_ALIGN: u64 = 16;
/// A dimension holds at most this many elements (driver limit).
pub const MAX_DIM_ELEMS: u64 = 1 << 32;
/// Rows of a view must stay below this: the kernel's box coordinates are 32-bit signed.
pub const MAX_ROWS: u64 = 1 << 31;

// The kernel declares `attn_tensor_map` as a 128-byte, 64-byte-aligned struct.
const _: () = assert!(std::mem::size_of::<CUtensorMap>() == 128);
const _: () = assert!(std::mem::align_of::<CUtensorMap>() >= 64);

/// A tensor map parameter as the launcher sees it (from
/// [`attn_dsl::codegen::TensorMapParam`]): a 2D view of buffer argument `base_param` as
/// rows of `stride_coeff × (scalar argument stride_param)` elements (`stride_coeff` alone
/// when `stride_param` is `None`), read in boxes of `box_rows × box_cols` elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMapSpec {
    /// The kernel's parameter name (for errors).
    pub name: String,
    /// Index of the viewed buffer among the ordinary parameters.
    pub base_param: usize,
    /// Element type of the view (bf16 or f16).
    pub elem: ScalarType,
    /// Index of the integer scalar the row stride scales, if any.
    pub stride_param: Option<usize>,
    pub stride_coeff: i64,
    pub box_rows: u32,
    pub box_cols: u32,
}

impl TensorMapSpec {
    pub fn from_codegen(p: &TensorMapParam) -> Self {
        TensorMapSpec {
            name: p.name.clone(),
            base_param: p.base_param,
            elem: p.elem,
            stride_param: p.row_stride.param,
            stride_coeff: p.row_stride.coeff,
            box_rows: p.box_rows,
            box_cols: p.box_cols,
        }
    }

    /// The maps of a generated kernel, in parameter order.
    pub fn of_kernel(k: &CudaKernel) -> Vec<Self> {
        k.tensor_maps.iter().map(Self::from_codegen).collect()
    }
}

/// What map encoding reads from one ordinary argument of a launch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MapArg {
    /// A buffer: element type, device address, length in elements.
    Buffer {
        elem: ScalarType,
        ptr: u64,
        len: usize,
    },
    Scalar(ScalarArg),
}

/// The inputs of one rank-2 `cuTensorMapEncodeTiled` call (dimension 0 is the contiguous
/// one: the elements of a row; dimension 1 the rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TiledMapInputs {
    pub data_type: CUtensorMapDataType,
    pub global_address: u64,
    /// `[row stride S, ceil(len / S)]` elements.
    pub global_dim: [u64; 2],
    /// Bytes between rows (`S · elem_bytes`); dimension 0's stride is implicit.
    pub global_strides: [u64; 1],
    /// `[box_cols, box_rows]` elements.
    pub box_dim: [u32; 2],
    pub element_strides: [u32; 2],
    pub interleave: CUtensorMapInterleave,
    pub swizzle: CUtensorMapSwizzle,
    pub l2_promotion: CUtensorMapL2promotion,
    pub oob_fill: CUtensorMapFloatOOBfill,
}

fn map_error(spec: &LaunchSpec, map: &TensorMapSpec, why: String) -> LaunchError {
    LaunchError::TensorMap {
        kernel: spec.entry.clone(),
        param: map.name.clone(),
        why,
    }
}

fn param_name(spec: &LaunchSpec, index: usize) -> String {
    spec.params
        .get(index)
        .map_or_else(|| format!("#{index}"), |p| format!("`{}`", p.name))
}

fn data_type(elem: ScalarType) -> Option<CUtensorMapDataType> {
    match elem {
        ScalarType::Bf16 => Some(CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16),
        ScalarType::F16 => Some(CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16),
        _ => None,
    }
}

/// Checks what does not depend on the arguments: the element type, the box, and that the
/// base and stride parameters exist with the right kinds. [`super::LoadedKernel::load`]
/// runs it so a malformed kernel fails before its first launch.
pub fn check_map_spec(spec: &LaunchSpec, map: &TensorMapSpec) -> Result<(), LaunchError> {
    let err = |why| Err(map_error(spec, map, why));
    if data_type(map.elem).is_none() {
        return err(format!(
            "element type {}: tensor maps view bf16 or f16 buffers only",
            map.elem
        ));
    }
    let elem_bytes = map.elem.size_bytes() as u64;
    let row_bytes = u64::from(map.box_cols) * elem_bytes;
    if row_bytes != SWIZZLE_BYTES {
        return err(format!(
            "box rows are {} elements × {elem_bytes} B = {row_bytes} B; the 128-byte swizzle \
             needs box rows of exactly {SWIZZLE_BYTES} B ({} {} elements)",
            map.box_cols,
            SWIZZLE_BYTES / elem_bytes,
            map.elem
        ));
    }
    if map.box_rows == 0 || map.box_rows > MAX_BOX_ROWS {
        return err(format!(
            "box of {} rows; a TMA box has 1..={MAX_BOX_ROWS} rows",
            map.box_rows
        ));
    }
    match spec.params.get(map.base_param).map(|p| p.kind) {
        Some(ParamKind::Ptr { elem, .. }) if elem == map.elem => {}
        Some(ParamKind::Ptr { elem, .. }) => {
            return err(format!(
                "views {} elements but its base parameter {} is a {elem} buffer",
                map.elem,
                param_name(spec, map.base_param)
            ))
        }
        Some(ParamKind::Scalar(ty)) => {
            return err(format!(
                "its base parameter {} is a {ty} scalar; expected a {} buffer",
                param_name(spec, map.base_param),
                map.elem
            ))
        }
        None => {
            return err(format!(
                "base parameter index {} is out of range (the kernel has {} parameters)",
                map.base_param,
                spec.params.len()
            ))
        }
    }
    if let Some(i) = map.stride_param {
        match spec.params.get(i).map(|p| p.kind) {
            Some(ParamKind::Scalar(ScalarType::I32 | ScalarType::I64)) => {}
            Some(ParamKind::Scalar(ty)) => {
                return err(format!(
                    "its row stride scales parameter {}, a {ty} scalar; expected an i32 or \
                     i64 scalar",
                    param_name(spec, i)
                ))
            }
            Some(ParamKind::Ptr { .. }) => {
                return err(format!(
                    "its row stride scales parameter {}, a buffer; expected an i32 or i64 \
                     scalar",
                    param_name(spec, i)
                ))
            }
            None => {
                return err(format!(
                    "row stride parameter index {i} is out of range (the kernel has {} \
                     parameters)",
                    spec.params.len()
                ))
            }
        }
    }
    Ok(())
}

/// The encode inputs of `map` for a launch whose base buffer starts at `base_ptr` and
/// holds `len` elements, and whose row-stride scalar (if the map has one) is
/// `stride_value`. The view is `S = coeff · stride_value` elements wide and
/// `ceil(len / S)` rows tall: boxes past the last row or column read zeros. When `len` is
/// not a multiple of `S` the last row is partial and its elements past the buffer's end
/// are inside the view (not zero-filled), so the kernel must only ask for boxes over its
/// data's columns there (a strided view's rows end at the data, not at `S`).
///
/// Refused (with [`LaunchError::TensorMap`]): `S ≤ 0`, `S` bytes not a multiple of 16 or
/// ≥ 2^40, `S` above 2^32 elements, a base address not 16-byte aligned, an empty
/// buffer, 2^31 rows or more, and whatever [`check_map_spec`] refuses.
pub fn tiled_map_inputs(
    spec: &LaunchSpec,
    map: &TensorMapSpec,
    base_ptr: u64,
    len: usize,
    stride_value: Option<i64>,
) -> Result<TiledMapInputs, LaunchError> {
    check_map_spec(spec, map)?;
    checked_inputs(spec, map, base_ptr, len, stride_value)
}

/// [`tiled_map_inputs`] after [`check_map_spec`].
fn checked_inputs(
    spec: &LaunchSpec,
    map: &TensorMapSpec,
    base_ptr: u64,
    len: usize,
    stride_value: Option<i64>,
) -> Result<TiledMapInputs, LaunchError> {
    let err = |why| Err(map_error(spec, map, why));
    let data_type = data_type(map.elem).expect("checked by check_map_spec");
    let elem_bytes = map.elem.size_bytes() as u64;
    let base = param_name(spec, map.base_param);
    let (stride, how) = match (map.stride_param, stride_value) {
        (None, _) => (Some(map.stride_coeff), format!("{}", map.stride_coeff)),
        (Some(i), Some(v)) => (
            map.stride_coeff.checked_mul(v),
            format!("{} × {} ({v})", map.stride_coeff, param_name(spec, i)),
        ),
        (Some(i), None) => {
            return err(format!(
                "no value for its row-stride parameter {}",
                param_name(spec, i)
            ))
        }
    };
    let Some(stride) = stride else {
        return err(format!("the row stride {how} overflows i64"));
    };
    if stride <= 0 {
        return err(format!(
            "the row stride {how} = {stride} elements; it must be positive"
        ));
    }
    let s = stride as u64;
    let Some(stride_bytes) = s.checked_mul(elem_bytes) else {
        return err(format!(
            "the row stride {how} = {s} elements overflows u64 bytes"
        ));
    };
    if !stride_bytes.is_multiple_of(TMA_ALIGN) {
        return err(format!(
            "the row stride {how} = {s} elements is {stride_bytes} B; TMA needs a multiple \
             of {TMA_ALIGN} B (a multiple of {} {} elements)",
            TMA_ALIGN / elem_bytes,
            map.elem
        ));
    }
    if stride_bytes >= MAX_STRIDE_BYTES {
        return err(format!(
            "the row stride {how} = {s} elements is {stride_bytes} B; TMA needs less than \
             2^40 B"
        ));
    }
    if s > MAX_DIM_ELEMS {
        return err(format!(
            "the row stride {how} = {s} elements; a TMA dimension holds at most 2^32 elements"
        ));
    }
    if !base_ptr.is_multiple_of(TMA_ALIGN) {
        return err(format!(
            "buffer {base} starts at {base_ptr:#x}, which is not {TMA_ALIGN}-byte aligned; TMA \
             needs a {TMA_ALIGN}-byte aligned base address"
        ));
    }
    if len == 0 {
        return err(format!(
            "buffer {base} is empty; a tensor map needs at least one row"
        ));
    }
    let rows = (len as u64).div_ceil(s);
    if rows >= MAX_ROWS {
        return err(format!(
            "buffer {base} of {len} elements is {rows} rows of {s}; at most 2^31 - 1 rows \
             (box coordinates are 32-bit)"
        ));
    }
    Ok(TiledMapInputs {
        data_type,
        global_address: base_ptr,
        global_dim: [s, rows],
        global_strides: [stride_bytes],
        box_dim: [map.box_cols, map.box_rows],
        element_strides: [1, 1],
        interleave: CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle: CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        l2_promotion: l2_promotion(),
        oob_fill: CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    })
}

/// 128-byte L2 promotion (a box row of the 128-byte swizzle is 128 bytes), unless an
/// experiment asks for another (`jit::source_override::tma_l2_promotion`).
fn l2_promotion() -> CUtensorMapL2promotion {
    use CUtensorMapL2promotion::*;
    match crate::jit::source_override::tma_l2_promotion() {
        Some(0) => CU_TENSOR_MAP_L2_PROMOTION_NONE,
        Some(64) => CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
        Some(256) => CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        _ => CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
    }
}

/// [`tiled_map_inputs`] with the base buffer and stride scalar taken from the launch's
/// ordinary arguments (`args[i]` is argument `i`).
pub fn tiled_map_inputs_from_args(
    spec: &LaunchSpec,
    map: &TensorMapSpec,
    args: &[MapArg],
) -> Result<TiledMapInputs, LaunchError> {
    check_map_spec(spec, map)?;
    let err = |why| Err(map_error(spec, map, why));
    let (ptr, len) = match args.get(map.base_param) {
        Some(&MapArg::Buffer { elem, ptr, len }) if elem == map.elem => (ptr, len),
        Some(&MapArg::Buffer { elem, .. }) => {
            return err(format!(
                "views {} elements but argument {} is a {elem} buffer",
                map.elem,
                param_name(spec, map.base_param)
            ))
        }
        Some(MapArg::Scalar(_)) | None => {
            return err(format!(
                "argument {} is not a buffer",
                param_name(spec, map.base_param)
            ))
        }
    };
    let stride_value = match map.stride_param {
        None => None,
        Some(i) => match args.get(i) {
            Some(MapArg::Scalar(ScalarArg::I32(v))) => Some(i64::from(*v)),
            Some(MapArg::Scalar(ScalarArg::I64(v))) => Some(*v),
            _ => {
                return err(format!(
                    "argument {} (the row stride) is not an i32 or i64 scalar",
                    param_name(spec, i)
                ))
            }
        },
    };
    checked_inputs(spec, map, ptr, len, stride_value)
}

/// Encodes one map with the driver into `out`.
pub fn encode_tiled(
    spec: &LaunchSpec,
    map: &TensorMapSpec,
    inputs: &TiledMapInputs,
    out: &mut CUtensorMap,
) -> Result<(), LaunchError> {
    // SAFETY: rank 2 matches the arrays' lengths (`global_strides` has rank - 1 entries);
    // all pointers are to live locals; the driver writes only `out` and does not touch the
    // global address (it is only recorded in the map).
    let result = unsafe {
        sys::cuTensorMapEncodeTiled(
            out,
            inputs.data_type,
            2,
            inputs.global_address as *mut c_void,
            inputs.global_dim.as_ptr(),
            inputs.global_strides.as_ptr(),
            inputs.box_dim.as_ptr(),
            inputs.element_strides.as_ptr(),
            inputs.interleave,
            inputs.swizzle,
            inputs.l2_promotion,
            inputs.oob_fill,
        )
    };
    if result != CUresult::CUDA_SUCCESS {
        return Err(map_error(
            spec,
            map,
            format!("cuTensorMapEncodeTiled returned {result:?} for {inputs:?}"),
        ));
    }
    Ok(())
}

/// Every map of `spec`, encoded for one launch with ordinary arguments `args`, in
/// parameter order. The launcher passes a pointer to each after the ordinary arguments;
/// the driver copies them at the launch, so they must live until the launch returns.
pub fn encode_maps(spec: &LaunchSpec, args: &[MapArg]) -> Result<Vec<CUtensorMap>, LaunchError> {
    let mut maps = vec![CUtensorMap { opaque: [0; 16] }; spec.tensor_maps.len()];
    for (map, out) in spec.tensor_maps.iter().zip(&mut maps) {
        let inputs = tiled_map_inputs_from_args(spec, map, args)?;
        encode_tiled(spec, map, &inputs, out)?;
    }
    Ok(maps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::ParamSpec;
    use attn_dsl::codegen::RowStride;

    fn ptr(name: &str, elem: ScalarType) -> ParamSpec {
        ParamSpec {
            name: name.into(),
            kind: ParamKind::Ptr {
                elem,
                mutable: false,
            },
            divisible_by: 1,
            fits_i32: false,
        }
    }
    fn scalar(name: &str, ty: ScalarType) -> ParamSpec {
        ParamSpec {
            name: name.into(),
            kind: ParamKind::Scalar(ty),
            divisible_by: 1,
            fits_i32: false,
        }
    }

    /// `k(q: *const bf16, kv: *const f16, d: i32, n: i64, x: f32, o: *const f32)` with a
    /// map over `q` (rows of 2·d) and one over `kv` (rows of 64).
    fn spec() -> LaunchSpec {
        LaunchSpec {
            entry: "k".into(),
            params: vec![
                ptr("q", ScalarType::Bf16),
                ptr("kv", ScalarType::F16),
                scalar("d", ScalarType::I32),
                scalar("n", ScalarType::I64),
                scalar("x", ScalarType::F32),
                ptr("o", ScalarType::F32),
            ],
            block_threads: 128,
            shared_bytes: 0,
            tensor_maps: vec![
                TensorMapSpec {
                    name: "q_map".into(),
                    base_param: 0,
                    elem: ScalarType::Bf16,
                    stride_param: Some(2),
                    stride_coeff: 2,
                    box_rows: 64,
                    box_cols: 64,
                },
                TensorMapSpec {
                    name: "kv_map".into(),
                    base_param: 1,
                    elem: ScalarType::F16,
                    stride_param: None,
                    stride_coeff: 64,
                    box_rows: 128,
                    box_cols: 64,
                },
            ],
        }
    }

    fn why(e: LaunchError) -> String {
        match e {
            LaunchError::TensorMap { why, .. } => why,
            e => panic!("expected a tensor-map error, got {e}"),
        }
    }

    /// Asserts the inputs were refused with a reason containing `text`.
    fn refused(r: Result<TiledMapInputs, LaunchError>, text: &str) {
        let w = why(r.expect_err("refused"));
        assert!(w.contains(text), "{w}");
    }

    const BASE: u64 = 0x7f00_0000_1000;

    #[test]
    fn from_codegen_copies_the_view() {
        let p = TensorMapParam {
            name: "m".into(),
            base_param: 3,
            elem: ScalarType::F16,
            row_stride: RowStride {
                param: Some(5),
                coeff: 8,
            },
            box_rows: 32,
            box_cols: 64,
        };
        assert_eq!(
            TensorMapSpec::from_codegen(&p),
            TensorMapSpec {
                name: "m".into(),
                base_param: 3,
                elem: ScalarType::F16,
                stride_param: Some(5),
                stride_coeff: 8,
                box_rows: 32,
                box_cols: 64,
            }
        );
    }

    #[test]
    fn a_good_map_is_rows_of_the_stride_with_a_128_byte_swizzled_box() {
        let s = spec();
        // d = 96: rows of 192 bf16 (384 B); 1000 elements are 6 rows (the last partial).
        let i = tiled_map_inputs(&s, &s.tensor_maps[0], BASE, 1000, Some(96)).unwrap();
        assert_eq!(
            i,
            TiledMapInputs {
                data_type: CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                global_address: BASE,
                global_dim: [192, 6],
                global_strides: [384],
                box_dim: [64, 64],
                element_strides: [1, 1],
                interleave: CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle: CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                l2_promotion: CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                oob_fill: CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            }
        );
        // A constant stride ignores the value; f16 maps to FLOAT16.
        let i = tiled_map_inputs(&s, &s.tensor_maps[1], BASE, 64 * 10, None).unwrap();
        assert_eq!(
            i.data_type,
            CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16
        );
        assert_eq!((i.global_dim, i.global_strides), ([64, 10], [128]));
        assert_eq!(i.box_dim, [64, 128]);
    }

    #[test]
    fn inputs_come_from_the_ordinary_arguments() {
        let s = spec();
        let args = [
            MapArg::Buffer {
                elem: ScalarType::Bf16,
                ptr: BASE,
                len: 4096,
            },
            MapArg::Buffer {
                elem: ScalarType::F16,
                ptr: BASE + 0x10_0000,
                len: 64 * 3 + 1,
            },
            MapArg::Scalar(ScalarArg::I32(64)),
            MapArg::Scalar(ScalarArg::I64(16)),
            MapArg::Scalar(ScalarArg::F32(1.0)),
            MapArg::Buffer {
                elem: ScalarType::F32,
                ptr: BASE,
                len: 1,
            },
        ];
        let q = tiled_map_inputs_from_args(&s, &s.tensor_maps[0], &args).unwrap();
        assert_eq!((q.global_address, q.global_dim), (BASE, [128, 32]));
        let kv = tiled_map_inputs_from_args(&s, &s.tensor_maps[1], &args).unwrap();
        assert_eq!(
            (kv.global_address, kv.global_dim),
            (BASE + 0x10_0000, [64, 4])
        );

        // An i64 stride scalar works too.
        let mut s64 = s.clone();
        s64.tensor_maps[0].stride_param = Some(3);
        let q = tiled_map_inputs_from_args(&s64, &s64.tensor_maps[0], &args).unwrap();
        assert_eq!(q.global_dim, [32, 128]);

        // A float stride parameter is refused (spec check), as is a scalar base argument.
        let mut bad = s.clone();
        bad.tensor_maps[0].stride_param = Some(4);
        let w = why(tiled_map_inputs_from_args(&bad, &bad.tensor_maps[0], &args).unwrap_err());
        assert!(
            w.contains("`x`, a f32 scalar; expected an i32 or i64"),
            "{w}"
        );
        let mut swapped = args;
        swapped.swap(0, 2);
        let w = why(tiled_map_inputs_from_args(&s, &s.tensor_maps[0], &swapped).unwrap_err());
        assert!(w.contains("argument `q` is not a buffer"), "{w}");
    }

    #[test]
    fn a_non_positive_or_overflowing_stride_is_refused() {
        let s = spec();
        let m = &s.tensor_maps[0];
        refused(
            tiled_map_inputs(&s, m, BASE, 100, Some(0)),
            "2 × `d` (0) = 0 elements; it must be positive",
        );
        refused(
            tiled_map_inputs(&s, m, BASE, 100, Some(-8)),
            "= -16 elements",
        );
        refused(
            tiled_map_inputs(&s, m, BASE, 100, Some(i64::MAX)),
            "overflows i64",
        );
        refused(
            tiled_map_inputs(&s, m, BASE, 100, None),
            "no value for its row-stride parameter `d`",
        );
    }

    #[test]
    fn a_stride_off_16_bytes_or_too_long_is_refused() {
        let s = spec();
        let m = &s.tensor_maps[0];
        // 2·3 = 6 bf16 = 12 B.
        refused(
            tiled_map_inputs(&s, m, BASE, 100, Some(3)),
            "is 12 B; TMA needs a multiple of 16 B (a multiple of 8 bf16 elements)",
        );
        // 2^32 elements is the largest dimension, and 2^33 B is fine as a stride.
        assert!(tiled_map_inputs(&s, m, BASE, 1 << 33, Some(1 << 31)).is_ok());
        refused(
            tiled_map_inputs(&s, m, BASE, 100, Some(1 << 32)),
            "at most 2^32 elements",
        );
        // 2^39 elements (2^40 B) is over both limits; the byte limit speaks first.
        let mut wide = s.clone();
        wide.tensor_maps[1].stride_coeff = 1 << 39;
        refused(
            tiled_map_inputs(&wide, &wide.tensor_maps[1], BASE, 100, None),
            "is 1099511627776 B; TMA needs less than 2^40 B",
        );
    }

    #[test]
    fn a_misaligned_base_or_a_bad_extent_is_refused() {
        let s = spec();
        let m = &s.tensor_maps[0];
        refused(
            tiled_map_inputs(&s, m, BASE + 8, 100, Some(64)),
            "buffer `q` starts at 0x7f0000001008, which is not 16-byte aligned",
        );
        refused(
            tiled_map_inputs(&s, m, BASE, 0, Some(64)),
            "buffer `q` is empty",
        );
        // Rows of 8 elements: 2^34 - 8 elements fit in 2^31 - 1 rows, one more row does not.
        let fits = ((1u64 << 31) - 1) * 8;
        let i = tiled_map_inputs(&s, m, BASE, fits as usize, Some(4)).unwrap();
        assert_eq!(i.global_dim, [8, (1 << 31) - 1]);
        refused(
            tiled_map_inputs(&s, m, BASE, fits as usize + 1, Some(4)),
            "is 2147483648 rows of 8; at most 2^31 - 1 rows",
        );
    }

    #[test]
    fn a_box_that_is_not_128_bytes_wide_or_too_tall_is_refused() {
        let mut s = spec();
        s.tensor_maps[0].box_cols = 32;
        refused(tiled_map_inputs(&s, &s.tensor_maps[0], BASE, 100, Some(64)), "32 elements × 2 B = 64 B; the 128-byte swizzle needs box rows of exactly 128 B (64 bf16 elements)");
        let mut s = spec();
        for rows in [0, 257] {
            s.tensor_maps[0].box_rows = rows;
            refused(
                tiled_map_inputs(&s, &s.tensor_maps[0], BASE, 100, Some(64)),
                "a TMA box has 1..=256 rows",
            );
        }
        s.tensor_maps[0].box_rows = 256;
        assert!(tiled_map_inputs(&s, &s.tensor_maps[0], BASE, 100, Some(64)).is_ok());
    }

    #[test]
    fn a_map_over_a_wrong_type_or_parameter_is_refused() {
        let mut s = spec();
        s.tensor_maps[0].elem = ScalarType::F32;
        s.tensor_maps[0].box_cols = 32;
        let e = tiled_map_inputs(&s, &s.tensor_maps[0], BASE, 100, Some(64)).unwrap_err();
        assert!(
            e.to_string()
                .contains("kernel `k` tensor map `q_map`: element type f32: tensor maps view bf16 or f16 buffers only"),
            "{e}"
        );
        let mut s = spec();
        s.tensor_maps[0].elem = ScalarType::F16;
        let w = why(check_map_spec(&s, &s.tensor_maps[0]).unwrap_err());
        assert!(
            w.contains("views f16 elements but its base parameter `q` is a bf16 buffer"),
            "{w}"
        );
        let mut s = spec();
        s.tensor_maps[0].base_param = 2;
        let w = why(check_map_spec(&s, &s.tensor_maps[0]).unwrap_err());
        assert!(w.contains("base parameter `d` is a i32 scalar"), "{w}");
        s.tensor_maps[0].base_param = 6;
        let w = why(check_map_spec(&s, &s.tensor_maps[0]).unwrap_err());
        assert!(w.contains("index 6 is out of range"), "{w}");
        let mut s = spec();
        s.tensor_maps[0].stride_param = Some(5);
        let w = why(check_map_spec(&s, &s.tensor_maps[0]).unwrap_err());
        assert!(w.contains("`o`, a buffer"), "{w}");
        for m in &spec().tensor_maps {
            assert!(check_map_spec(&spec(), m).is_ok());
        }
    }

    #[test]
    fn a_launch_without_maps_encodes_nothing() {
        let mut s = spec();
        s.tensor_maps.clear();
        assert!(encode_maps(&s, &[]).unwrap().is_empty());
    }
}
