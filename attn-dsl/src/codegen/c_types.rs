//! How IR element types look in CUDA C++: register types, global-memory storage types,
//! shared-memory scratch encodings, rounding after float ops and literal spellings.

use crate::ir::{Elem, Scalar, ScalarType};

/// The C++ type of one element in registers. bf16/f16 live in `float` (exactly
/// representable values); pointers are `const T*` (stores cast constness away).
pub(crate) fn reg_type(e: Elem) -> String {
    match e {
        Elem::Scalar(s) => scalar_reg_type(s).to_string(),
        Elem::Ptr(s) => format!("const {}*", storage_type(s)),
    }
}

pub(crate) fn scalar_reg_type(s: ScalarType) -> &'static str {
    match s {
        ScalarType::Bf16 | ScalarType::F16 | ScalarType::F32 => "float",
        ScalarType::I32 => "int",
        ScalarType::I64 => "long long",
        ScalarType::Bool => "bool",
    }
}

/// The C++ type of one element in global memory (what kernel pointer parameters point to).
pub(crate) fn storage_type(s: ScalarType) -> &'static str {
    match s {
        ScalarType::Bf16 => "bf16",
        ScalarType::F16 => "f16",
        ScalarType::F32 => "float",
        ScalarType::I32 => "int",
        ScalarType::I64 => "long long",
        ScalarType::Bool => "bool",
    }
}

/// The type of a kernel scalar parameter passed by value: bf16/f16 scalars arrive as f32
/// (`ScalarArg::F32`) and are rounded on entry, as in the CPU executor.
pub(crate) fn scalar_param_type(s: ScalarType) -> &'static str {
    scalar_reg_type(s)
}

/// How an element is kept in the shared-memory scratch buffer: C++ type and size in
/// bytes. 16-bit floats are stored as their bits to halve the footprint.
pub(crate) fn scratch_type(e: Elem) -> (String, usize) {
    match e {
        Elem::Scalar(ScalarType::Bf16 | ScalarType::F16) => ("unsigned short".into(), 2),
        Elem::Scalar(s) => (scalar_reg_type(s).into(), s.size_bytes()),
        Elem::Ptr(_) => (reg_type(e), 8),
    }
}

/// Expression that encodes register value `x` for the scratch buffer.
pub(crate) fn to_scratch(e: Elem, x: &str) -> String {
    match e {
        Elem::Scalar(ScalarType::Bf16) => format!("attn_f32_to_bf16_bits({x})"),
        Elem::Scalar(ScalarType::F16) => format!("attn_f32_to_f16_bits({x})"),
        _ => x.to_string(),
    }
}

/// Expression that decodes scratch element `x` into a register value.
pub(crate) fn from_scratch(e: Elem, x: &str) -> String {
    match e {
        Elem::Scalar(ScalarType::Bf16) => format!("attn_bf16_bits_to_f32({x})"),
        Elem::Scalar(ScalarType::F16) => format!("attn_f16_bits_to_f32({x})"),
        _ => x.to_string(),
    }
}

/// Wraps an f32 expression so its value is rounded to `s` (identity unless bf16/f16).
pub(crate) fn round_to(s: ScalarType, expr: String) -> String {
    match s {
        ScalarType::Bf16 => format!("attn_round_bf16({expr})"),
        ScalarType::F16 => format!("attn_round_f16({expr})"),
        _ => expr,
    }
}

/// The exact C++ spelling of a literal, already rounded to its type as the CPU executor
/// rounds it (f64 → f32 → bf16/f16).
pub(crate) fn literal(s: Scalar) -> String {
    match s {
        Scalar::Bool(b) => b.to_string(),
        Scalar::Int(v, ScalarType::I64) => i64_literal(v),
        Scalar::Int(v, ScalarType::Bool) => (v != 0).to_string(),
        Scalar::Int(v, t) if t.is_float() => float_literal(v as f64, t),
        Scalar::Int(v, _) => i32_literal(v as i32),
        Scalar::Float(v, t) if t.is_float() => float_literal(v, t),
        Scalar::Float(v, ScalarType::I64) => i64_literal(v as i64),
        Scalar::Float(v, ScalarType::Bool) => (v != 0.0).to_string(),
        Scalar::Float(v, _) => i32_literal(v as i32),
    }
}

fn i32_literal(v: i32) -> String {
    if v == i32::MIN {
        "(-2147483647 - 1)".into()
    } else {
        v.to_string()
    }
}

fn i64_literal(v: i64) -> String {
    if v == i64::MIN {
        "(-9223372036854775807LL - 1LL)".into()
    } else {
        format!("{v}LL")
    }
}

/// Rounds `v` to the float type `t` the way the CPU executor does (to f32, then narrowed).
pub(crate) fn round_f64(v: f64, t: ScalarType) -> f32 {
    let x = v as f32;
    match t {
        ScalarType::Bf16 => half::bf16::from_f32(x).to_f32(),
        ScalarType::F16 => half::f16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// A float literal whose value is exactly the rounded constant: Rust prints the shortest
/// decimal that round-trips to the same f32, and C++ rounds that decimal correctly.
fn float_literal(v: f64, t: ScalarType) -> String {
    let x = round_f64(v, t);
    if x.is_nan() {
        "attn_nan()".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "attn_inf()".into()
        } else {
            "(-attn_inf())".into()
        }
    } else {
        let s = format!("{x:?}");
        if s.starts_with('-') {
            format!("({s}f)")
        } else {
            format!("{s}f")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_exact_and_typed() {
        assert_eq!(literal(Scalar::Float(0.1, ScalarType::F32)), "0.1f");
        assert_eq!(literal(Scalar::Float(-2.5, ScalarType::F32)), "(-2.5f)");
        // 0.1 in bf16 is exactly 0.10009765625: the literal must denote that f32.
        let bf = literal(Scalar::Float(0.1, ScalarType::Bf16));
        let parsed: f32 = bf.trim_end_matches('f').parse().expect("decimal literal");
        assert_eq!(parsed.to_bits(), 0x3DCD_0000, "{bf} is not 0.10009765625");
        assert_eq!(
            literal(Scalar::Float(f64::NEG_INFINITY, ScalarType::F32)),
            "(-attn_inf())"
        );
        assert_eq!(literal(Scalar::Float(1e300, ScalarType::F32)), "attn_inf()");
        assert_eq!(
            literal(Scalar::Int(i32::MIN as i64, ScalarType::I32)),
            "(-2147483647 - 1)"
        );
        assert_eq!(literal(Scalar::Int(5, ScalarType::I64)), "5LL");
        assert_eq!(literal(Scalar::Bool(true)), "true");
        assert_eq!(literal(Scalar::Float(1e-45, ScalarType::F32)), "1e-45f");
    }
}
