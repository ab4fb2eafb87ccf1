//! Ops computed per element in registers (no data moves between threads): literals, grid
//! queries, `arange`, splats, unsqueeze, arithmetic, comparisons, select, casts and pointer
//! offsets. Float results are rounded to their dtype after every op and f32 arithmetic uses
//! the `__f*_rn` intrinsics, which NVRTC never contracts into FMAs, so results match the CPU
//! executor bit for bit (transcendentals aside: `expf` & co. are within 2 ulp).

use super::c_types::{literal, round_to};
use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::CodegenError;
use crate::ir::{BinaryOp, CmpPred, Elem, Op, OpKind, ScalarType, UnaryOp, ValueId};

type Res<T> = Result<T, CodegenError>;

impl<'f> Emitter<'f> {
    /// Emits any op that is not control flow.
    pub(crate) fn emit_simple(&mut self, op: &'f Op) -> Res<()> {
        match &op.kind {
            OpKind::Load {
                has_mask,
                has_other,
            } => return self.emit_load(op, *has_mask, *has_other),
            OpKind::Store { has_mask } => return self.emit_store(op, *has_mask),
            OpKind::Broadcast { .. } => return self.emit_broadcast(op),
            OpKind::Trans => return self.emit_trans(op),
            OpKind::Handoff => return self.emit_handoff_run(&[op]),
            OpKind::Reduce { kind, axis } => return self.emit_reduce(op, *kind, *axis),
            OpKind::Dot => return self.emit_dot(op),
            _ => {}
        }
        let res = Self::result(op)?;
        match &op.kind {
            OpKind::Const(s) => {
                let lit = literal(*s);
                self.define_map(res, move |_, _| Ok(lit.clone()))
            }
            OpKind::ProgramId(a) => {
                let e = format!("(int)blockIdx.{}", axis_letter(*a)?);
                self.define_map(res, move |_, _| Ok(e.clone()))
            }
            OpKind::NumPrograms(a) => {
                let e = format!("(int)gridDim.{}", axis_letter(*a)?);
                self.define_map(res, move |_, _| Ok(e.clone()))
            }
            _ => {
                let factor = self.row_scale_factor(op);
                if let (Some(factor), Some(_)) = (factor, &self.scale_wait) {
                    // It holds the wait for its branch's arms: emitted here, not deferred.
                    return self.emit_row_scale(op, factor);
                }
                if self.try_defer(op, res)? {
                    return Ok(());
                }
                if let Some(factor) = factor {
                    return self.emit_row_scale(op, factor);
                }
                let m = self.map(res);
                self.convert_operands(op, m)?;
                self.define_map(res, move |e, s| {
                    // Stored operands share the result's slot (converted if need be);
                    // recomputed ones are evaluated at the element they contribute.
                    e.element_expr(op, &m.index(s), &|v, at| {
                        if e.is_deferred(v) {
                            e.expr_at(v, at)
                        } else {
                            e.at_in(v, m, s)
                        }
                    })
                })
            }
        }
    }

    /// For a masked fill (a 2-D f32 tile `select` with one arm a splat: the scores' mask)
    /// emitted while warpgroup MMAs are in flight: whether the splat is the false arm
    /// (`Some(true)`) or the true one, emitted as `attn_fill_select`. In flight, the MMAs'
    /// registers are locked and NVVM's speculated fill cost P0 a register copy per score
    /// and spills; elsewhere the plain `?:` is as fast or faster (H200, one call: P1 0.347
    /// against 0.353 ms with `attn_fill_select`, P3 and D1 equal). Since the softmax moved
    /// around PV's wait, P1's plain `?:` costs a copy of every score before the mask's
    /// branch, full tiles included (32 moves a thread a tile in SASS, none with
    /// `attn_fill_select`): `ATTN_CODEGEN_ENABLE=fill_select_all` takes it in every
    /// warpgroup-MMA kernel, to time it again (D1's `mma.sync` loop grew with it).
    fn fill_side(&self, op: &Op) -> Res<Option<bool>> {
        let res = Self::result(op)?;
        let everywhere = self.f.warpgroup_mma && crate::features::on("fill_select_all");
        if !crate::features::on("fill_select")
            || (self.pending_mma.is_empty() && !everywhere)
            || self.shape(res).len() != 2
            || self.scalar(res)? != ScalarType::F32
        {
            return Ok(None);
        }
        let splat = |i: usize| -> Res<bool> {
            let v = Self::operand(op, i)?;
            Ok(matches!(
                self.def_op(v).map(|d| &d.kind),
                Some(OpKind::Splat { .. })
            ))
        };
        Ok(match (splat(1)?, splat(2)?) {
            (false, true) => Some(true),
            (true, false) => Some(false),
            _ => None,
        })
    }

    /// The value of one element of `op`'s result, given its index `at` and a way to read an
    /// operand at the element the result's element needs (`operand(value, index)`), for the
    /// ops that need no other element: `arange`, splats, `unsqueeze`, arithmetic,
    /// comparisons, select, casts, pointer offsets.
    pub(crate) fn element_expr(
        &self,
        op: &Op,
        at: &ElemIndex,
        operand: &dyn Fn(ValueId, &ElemIndex) -> Res<String>,
    ) -> Res<String> {
        let arg = |i: usize| Self::operand(op, i).and_then(|v| operand(v, at));
        let res = Self::result(op)?;
        match &op.kind {
            OpKind::Arange { .. } => Ok(at.flat(self.shape(res))),
            OpKind::Splat { .. } => arg(0),
            OpKind::ExpandDims { axis } if self.shape(res).len() == 2 => {
                let x = Self::operand(op, 0)?;
                operand(x, &at.squeezed(self.shape(res), *axis))
            }
            OpKind::ExpandDims { .. } => arg(0),
            OpKind::Unary(UnaryOp::Exp) if self.fast_exp_of_difference(op) => {
                let sub = self.def_op(Self::operand(op, 0)?).ok_or_else(|| {
                    CodegenError::Malformed("exp operand lost its definition".into())
                })?;
                let (x, y) = (Self::operand(sub, 0)?, Self::operand(sub, 1)?);
                if let Some((a, c)) = self.f32_product(x) {
                    return Ok(format!(
                        "attn_fast_exp_fma({}, {}, {})",
                        operand(a, at)?,
                        operand(c, at)?,
                        operand(y, at)?
                    ));
                }
                // A row vector's e^(x − y) is the rescale's factor: exactly 1 where the max
                // did not move (`exact_alpha`, and under `lazy_rescale`, which needs it),
                // which the accumulator's skip tests for.
                let exact = crate::features::on("exact_alpha") || crate::features::lazy_rescale();
                let f = if self.shape(res).len() == 1 && exact {
                    "attn_fast_exp_sub_exact"
                } else {
                    "attn_fast_exp_sub"
                };
                Ok(format!("{f}({}, {})", operand(x, at)?, operand(y, at)?))
            }
            OpKind::Unary(u) => {
                let t = self.scalar(Self::operand(op, 0)?)?;
                let x = arg(0)?;
                Ok(match fast_unary(self.f.fast_math, *u, t, &x) {
                    Some(e) => e,
                    None => unary(*u, t, &x),
                })
            }
            OpKind::Binary(b) => {
                if let Some(e) = self.wide_mul(op, at, operand)? {
                    return Ok(e);
                }
                let t = self.scalar(Self::operand(op, 0)?)?;
                let (x, y) = (arg(0)?, arg(1)?);
                // A tile divided by a value every element shares (a per-program scalar).
                let shared_divisor = *b == BinaryOp::Div
                    && crate::features::on("shared_divisor")
                    && !self.f.ty(res).is_scalar()
                    && self.uniform_scalar(Self::operand(op, 1)?).is_some();
                match fast_binary(self.f.fast_math, *b, t, &x, &y, shared_divisor) {
                    Some(e) => Ok(e),
                    None => binary(*b, t, &x, &y),
                }
            }
            OpKind::Cmp(p) => Ok(format!("({} {} {})", arg(0)?, cmp_op(*p), arg(1)?)),
            OpKind::Select => Ok(match self.fill_side(op)? {
                Some(true) => format!("attn_fill_select({}, {}, {})", arg(0)?, arg(1)?, arg(2)?),
                Some(false) => {
                    format!("attn_fill_select(!{}, {}, {})", arg(0)?, arg(2)?, arg(1)?)
                }
                None => format!("({} ? {} : {})", arg(0)?, arg(1)?, arg(2)?),
            }),
            // A 16-bit cast only a dot reads is rounded once, by the dot's own conversion to
            // the operand type (the same round to nearest even): rounding here as well would
            // hold a second copy of the tile in registers.
            OpKind::Cast(ScalarType::Bf16 | ScalarType::F16)
                if self.only_dot_operand(res) && self.scalar(Self::operand(op, 0)?)?.is_float() =>
            {
                arg(0)
            }
            OpKind::Cast(to) => Ok(cast(self.scalar(Self::operand(op, 0)?)?, *to, &arg(0)?)),
            OpKind::AddPtr => Ok(format!("({} + {})", arg(0)?, arg(1)?)),
            other => Err(CodegenError::Malformed(format!(
                "{other:?} is not a simple op"
            ))),
        }
    }
}

impl Emitter<'_> {
    /// Whether `v` can be named here: not a value an owned region kept to itself (fused
    /// expressions read through other ops' definitions, past a closed region's scope).
    fn in_scope(&self, v: ValueId) -> bool {
        !self.region_locals.contains(&v.0)
    }

    /// The factors `(a, c)` of `x = a · c` in f32, `c` the one held as a per-program scalar
    /// where there is one: `exp(a·c − y)` is then one FMA into the exponent with `c·log2 e`
    /// computed once, not a multiply a score and another FMA (the attention kernels scale
    /// their scores in the exponent, `SCALE_AFTER_MAX`).
    fn f32_product(&self, x: ValueId) -> Option<(ValueId, ValueId)> {
        let d = self.def_op(x)?;
        if d.kind != OpKind::Binary(BinaryOp::Mul)
            || !d
                .operands
                .iter()
                .all(|&v| self.scalar(v) == Ok(ScalarType::F32))
        {
            return None;
        }
        let (a, b) = (*d.operands.first()?, *d.operands.get(1)?);
        if !self.in_scope(a) || !self.in_scope(b) {
            return None;
        }
        let uniform = |v| self.uniform_scalar(v).is_some();
        Some(if uniform(a) && !uniform(b) {
            (b, a)
        } else {
            (a, b)
        })
    }

    /// Whether `op` is an f32 `exp(x - y)` under `fast_math` (emitted as one FMA and `ex2`
    /// from `x` and `y` directly, so the difference itself is never needed).
    fn fast_exp_of_difference(&self, op: &Op) -> bool {
        let Ok(arg) = Self::operand(op, 0) else {
            return false;
        };
        let f32_sub = self.def_op(arg).is_some_and(|d| {
            d.kind == OpKind::Binary(BinaryOp::Sub)
                && d.operands
                    .iter()
                    .all(|&v| self.scalar(v) == Ok(ScalarType::F32) && self.in_scope(v))
        });
        self.f.fast_math && f32_sub
    }
}

fn axis_letter(a: u8) -> Res<char> {
    match a {
        0 => Ok('x'),
        1 => Ok('y'),
        2 => Ok('z'),
        _ => Err(CodegenError::Malformed(format!(
            "grid axis {a} out of range 0..3"
        ))),
    }
}

fn cmp_op(p: CmpPred) -> &'static str {
    match p {
        CmpPred::Eq => "==",
        CmpPred::Ne => "!=",
        CmpPred::Lt => "<",
        CmpPred::Le => "<=",
        CmpPred::Gt => ">",
        CmpPred::Ge => ">=",
    }
}

/// `op x` under `fast_math`, f32: `exp` through the hardware `ex2` (`attn_fast_exp`: one
/// multiply and one MUFU op instead of a range-reduced polynomial, results below 2^-126
/// flushed to zero), and `tanh` through `tanh.approx` (`attn_fast_tanh`: one MUFU op, relative
/// error below 2^-10.9, where `tanhf` runs an exponential, a division and their fix-ups:
/// Gemma-2's softcap, a tanh per score, took P1 from 0.354 to 0.620 ms at 128 × 64 on the
/// H200, 2026-12-02).
fn fast_unary(fast: bool, op: UnaryOp, t: ScalarType, x: &str) -> Option<String> {
    if !fast || t != ScalarType::F32 {
        return None;
    }
    match op {
        UnaryOp::Exp => Some(format!("attn_fast_exp({x})")),
        UnaryOp::Tanh => Some(format!("attn_fast_tanh({x})")),
        _ => None,
    }
}

/// `a op b` under `fast_math`: plain f32 `+ - *`, which NVRTC contracts into FMAs (the
/// softmax's scale, max subtraction and rescaling), and a division by a divisor the whole
/// tile shares (`shared_divisor`) as a multiply by its reciprocal (`attn_mul_rcp`: the
/// reciprocal of a loop-invariant scalar is hoisted out of the loop, where `__fdiv_rn` is a
/// MUFU op, ~8 more instructions and a slow-path check an element; the product is within
/// 1.5 ulp of the quotient, and a divisor below 2^-126 gives an infinite reciprocal:
/// Gemma-2's softcap, `tanh(s / softcap)`, divided every score). 16-bit types keep their
/// rounding.
fn fast_binary(
    fast: bool,
    op: BinaryOp,
    t: ScalarType,
    a: &str,
    b: &str,
    shared_divisor: bool,
) -> Option<String> {
    if !fast || t != ScalarType::F32 {
        return None;
    }
    let o = match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div if shared_divisor => return Some(format!("attn_mul_rcp({a}, {b})")),
        _ => return None,
    };
    Some(format!("({a} {o} {b})"))
}

/// `op x` on element type `t`.
pub(crate) fn unary(op: UnaryOp, t: ScalarType, x: &str) -> String {
    let math = |f: &str| round_to(t, format!("{f}({x})"));
    match op {
        UnaryOp::Neg if t.is_float() => format!("(-{x})"),
        UnaryOp::Neg => format!("attn_wneg({x})"),
        UnaryOp::Not if t == ScalarType::Bool => format!("(!{x})"),
        UnaryOp::Not => format!("(~{x})"),
        UnaryOp::Abs if t.is_float() => format!("fabsf({x})"),
        UnaryOp::Abs => format!("attn_wabs({x})"),
        UnaryOp::Exp => math("expf"),
        UnaryOp::Exp2 => math("exp2f"),
        UnaryOp::Log => math("logf"),
        UnaryOp::Log2 => math("log2f"),
        UnaryOp::Sqrt => math("__fsqrt_rn"),
        UnaryOp::Tanh => math("tanhf"),
    }
}

/// `a op b` on element type `t` (also the combiner of reductions).
pub(crate) fn binary(op: BinaryOp, t: ScalarType, a: &str, b: &str) -> Res<String> {
    binary_expr(op, t, a, b)
        .ok_or_else(|| CodegenError::Unsupported(format!("`{op:?}` on {t} values")))
}

fn binary_expr(op: BinaryOp, t: ScalarType, a: &str, b: &str) -> Option<String> {
    if t.is_float() {
        let f = match op {
            BinaryOp::Add => "__fadd_rn",
            BinaryOp::Sub => "__fsub_rn",
            BinaryOp::Mul => "__fmul_rn",
            BinaryOp::Div => "__fdiv_rn",
            // Min/max of representable values is representable: no rounding needed.
            BinaryOp::Min => return Some(format!("fminf({a}, {b})")),
            BinaryOp::Max => return Some(format!("fmaxf({a}, {b})")),
            _ => return None,
        };
        return Some(round_to(t, format!("{f}({a}, {b})")));
    }
    if t == ScalarType::Bool {
        let o = match op {
            BinaryOp::And => "&&",
            BinaryOp::Or => "||",
            BinaryOp::Xor => "!=",
            _ => return None,
        };
        return Some(format!("({a} {o} {b})"));
    }
    let call = |f: &str| format!("{f}({a}, {b})");
    let infix = |o: &str| format!("({a} {o} {b})");
    Some(match op {
        BinaryOp::Add => call("attn_wadd"),
        BinaryOp::Sub => call("attn_wsub"),
        BinaryOp::Mul => call("attn_wmul"),
        BinaryOp::Div => infix("/"),
        BinaryOp::Rem => infix("%"),
        BinaryOp::Min => call("attn_min"),
        BinaryOp::Max => call("attn_max"),
        BinaryOp::And => infix("&"),
        BinaryOp::Or => infix("|"),
        BinaryOp::Xor => infix("^"),
        BinaryOp::Shl => call("attn_shl"),
        BinaryOp::Shr => call("attn_shr"),
    })
}

/// Converts `x` from `from` to `to` with the CPU executor's rounding rules.
pub(crate) fn cast(from: ScalarType, to: ScalarType, x: &str) -> String {
    use ScalarType::*;
    match (from, to) {
        _ if from == to => x.to_string(),
        (Bf16 | F16 | F32, F32) => x.to_string(),
        (Bf16 | F16 | F32, Bf16 | F16) => round_to(to, x.to_string()),
        (Bf16 | F16 | F32, I32) => format!("__float2int_rz({x})"),
        (Bf16 | F16 | F32, I64) => format!("__float2ll_rz({x})"),
        (Bf16 | F16 | F32, Bool) => format!("({x} != 0.0f)"),
        (I32, F32) => format!("__int2float_rn({x})"),
        (I64, F32) => format!("__ll2float_rn({x})"),
        // Like the CPU executor: round to f32 first, then narrow.
        (I32, Bf16 | F16) => round_to(to, format!("__int2float_rn({x})")),
        (I64, Bf16 | F16) => round_to(to, format!("__ll2float_rn({x})")),
        (I32, I64) => format!("(long long)({x})"),
        (I64, I32) => format!("(int)({x})"),
        (I32 | I64, Bool) => format!("({x} != 0)"),
        (Bool, F32 | Bf16 | F16) => format!("({x} ? 1.0f : 0.0f)"),
        (Bool, I32) => format!("({x} ? 1 : 0)"),
        (Bool, I64) => format!("({x} ? 1LL : 0LL)"),
        _ => x.to_string(),
    }
}

/// The zero of an element type (what masked-off loads read when no `other` is given).
pub(crate) fn zero(e: Elem) -> &'static str {
    match e {
        Elem::Scalar(ScalarType::Bool) => "false",
        Elem::Scalar(ScalarType::I32) => "0",
        Elem::Scalar(ScalarType::I64) => "0LL",
        Elem::Scalar(_) => "0.0f",
        Elem::Ptr(_) => "nullptr",
    }
}
