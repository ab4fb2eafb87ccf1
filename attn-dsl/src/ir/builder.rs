//! Typed construction of IR. Every constructor checks its operands and computes the
//! result type, so an ill-typed program is rejected where it is built (with both shapes
//! or dtypes in the message) instead of by a later pass.

use super::function::{Block, Function, Loc, Op, ValueId};
use super::ops::{BinaryOp, CmpPred, OpKind, ReduceKind, Scalar, UnaryOp};
use super::types::{Elem, ScalarType, Type};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IrError {
    #[error("shape mismatch in `{op}`: {lhs} vs {rhs}")]
    ShapeMismatch {
        op: String,
        lhs: String,
        rhs: String,
    },
    #[error("dtype mismatch in `{op}`: {lhs} vs {rhs}")]
    DtypeMismatch {
        op: String,
        lhs: String,
        rhs: String,
    },
    #[error("`{op}`: {msg}")]
    Invalid { op: String, msg: String },
}

fn shape_str(s: &[usize]) -> String {
    let d: Vec<String> = s.iter().map(|x| x.to_string()).collect();
    format!("[{}]", d.join(", "))
}

fn invalid(op: &str, msg: impl Into<String>) -> IrError {
    IrError::Invalid {
        op: op.into(),
        msg: msg.into(),
    }
}

pub type IrResult<T> = Result<T, IrError>;

/// Appends ops at the end of the innermost open block.
pub struct Builder<'f> {
    pub func: &'f mut Function,
    stack: Vec<Block>,
    /// Location attached to ops created from now on.
    pub loc: Loc,
}

impl<'f> Builder<'f> {
    /// Starts building the function's entry block (which keeps its parameter args).
    pub fn new(func: &'f mut Function) -> Self {
        let entry = std::mem::take(&mut func.body);
        Builder {
            func,
            stack: vec![entry],
            loc: Loc::default(),
        }
    }

    /// Closes the entry block with `Return` and stores it as the function body.
    pub fn finish(mut self) {
        self.emit(OpKind::Return, vec![], vec![], vec![]);
        debug_assert_eq!(self.stack.len(), 1, "unclosed region");
        self.func.body = self.stack.pop().unwrap_or_default();
    }

    pub fn ty(&self, v: ValueId) -> &Type {
        self.func.ty(v)
    }

    pub fn set_name(&mut self, v: ValueId, name: &str) {
        self.func.values[v.0 as usize].name = Some(name.to_string());
    }

    /// Creates an op with explicit result types and appends it to the current block.
    pub fn emit(
        &mut self,
        kind: OpKind,
        operands: Vec<ValueId>,
        result_tys: Vec<Type>,
        regions: Vec<Block>,
    ) -> Vec<ValueId> {
        let results: Vec<ValueId> = result_tys
            .into_iter()
            .map(|t| self.func.new_value(t, None))
            .collect();
        let id = self.func.push_op(Op {
            kind,
            operands,
            results: results.clone(),
            regions,
            loc: self.loc,
        });
        self.stack.last_mut().expect("no open block").ops.push(id);
        results
    }

    fn emit1(&mut self, kind: OpKind, operands: Vec<ValueId>, ty: Type) -> ValueId {
        self.emit(kind, operands, vec![ty], vec![])[0]
    }

    /// Opens a nested block whose arguments have the given types.
    pub fn begin_block(&mut self, arg_tys: &[Type]) -> Vec<ValueId> {
        let args: Vec<ValueId> = arg_tys
            .iter()
            .map(|t| self.func.new_value(t.clone(), None))
            .collect();
        self.stack.push(Block {
            args: args.clone(),
            ops: vec![],
        });
        args
    }

    /// Closes the innermost nested block (which must already end in a terminator).
    pub fn end_block(&mut self) -> Block {
        assert!(self.stack.len() > 1, "end_block without begin_block");
        self.stack.pop().unwrap_or_default()
    }

    // ---- leaves ----

    pub fn constant(&mut self, s: Scalar) -> ValueId {
        self.emit1(OpKind::Const(s), vec![], Type::scalar(s.ty()))
    }
    pub fn const_i32(&mut self, v: i64) -> ValueId {
        self.constant(Scalar::Int(v, ScalarType::I32))
    }
    pub fn const_f32(&mut self, v: f64) -> ValueId {
        self.constant(Scalar::Float(v, ScalarType::F32))
    }
    pub fn const_bool(&mut self, v: bool) -> ValueId {
        self.constant(Scalar::Bool(v))
    }
    pub fn program_id(&mut self, axis: u8) -> IrResult<ValueId> {
        if axis > 2 {
            return Err(invalid(
                "program_id",
                format!("axis {axis} out of range 0..3"),
            ));
        }
        Ok(self.emit1(
            OpKind::ProgramId(axis),
            vec![],
            Type::scalar(ScalarType::I32),
        ))
    }
    pub fn num_programs(&mut self, axis: u8) -> IrResult<ValueId> {
        if axis > 2 {
            return Err(invalid(
                "num_programs",
                format!("axis {axis} out of range 0..3"),
            ));
        }
        Ok(self.emit1(
            OpKind::NumPrograms(axis),
            vec![],
            Type::scalar(ScalarType::I32),
        ))
    }
    pub fn arange(&mut self, n: usize) -> IrResult<ValueId> {
        if n == 0 || !n.is_power_of_two() {
            return Err(invalid(
                "arange",
                format!("length must be a power of two, got {n}"),
            ));
        }
        Ok(self.emit1(
            OpKind::Arange { n },
            vec![],
            Type::tile(Elem::Scalar(ScalarType::I32), vec![n]),
        ))
    }

    // ---- shape ops ----

    pub fn splat(&mut self, x: ValueId, shape: &[usize]) -> IrResult<ValueId> {
        let t = self.ty(x).clone();
        if !t.is_scalar() {
            return Err(invalid("full", format!("expects a scalar, got {t}")));
        }
        if shape.is_empty() {
            return Ok(x);
        }
        Ok(self.emit1(
            OpKind::Splat {
                shape: shape.to_vec(),
            },
            vec![x],
            Type::tile(t.elem, shape.to_vec()),
        ))
    }

    /// Broadcasts `x` to `shape` (same rank; size-1 dims repeat). No-op when equal.
    pub fn broadcast(&mut self, x: ValueId, shape: &[usize]) -> IrResult<ValueId> {
        let t = self.ty(x).clone();
        if t.shape == shape {
            return Ok(x);
        }
        if t.is_scalar() {
            return self.splat(x, shape);
        }
        let ok =
            t.rank() == shape.len() && t.shape.iter().zip(shape).all(|(&a, &b)| a == b || a == 1);
        if !ok {
            return Err(IrError::ShapeMismatch {
                op: "broadcast".into(),
                lhs: shape_str(&t.shape),
                rhs: shape_str(shape),
            });
        }
        Ok(self.emit1(
            OpKind::Broadcast {
                shape: shape.to_vec(),
            },
            vec![x],
            t.with_shape(shape.to_vec()),
        ))
    }

    /// The common shape of two operands under numpy broadcasting (rank ≤ 2).
    pub fn broadcast_shape(&self, op: &str, a: &[usize], b: &[usize]) -> IrResult<Vec<usize>> {
        let mismatch = || IrError::ShapeMismatch {
            op: op.into(),
            lhs: shape_str(a),
            rhs: shape_str(b),
        };
        if a.is_empty() {
            return Ok(b.to_vec());
        }
        if b.is_empty() {
            return Ok(a.to_vec());
        }
        if a.len() != b.len() {
            return Err(mismatch());
        }
        a.iter()
            .zip(b)
            .map(|(&x, &y)| match (x, y) {
                _ if x == y => Ok(x),
                (1, _) => Ok(y),
                (_, 1) => Ok(x),
                _ => Err(mismatch()),
            })
            .collect()
    }

    /// Brings both operands to their common shape (splat / broadcast as needed).
    pub fn broadcast_pair(
        &mut self,
        op: &str,
        a: ValueId,
        b: ValueId,
    ) -> IrResult<(ValueId, ValueId)> {
        let sa = self.ty(a).shape.clone();
        let sb = self.ty(b).shape.clone();
        let s = self.broadcast_shape(op, &sa, &sb)?;
        Ok((self.broadcast(a, &s)?, self.broadcast(b, &s)?))
    }

    pub fn expand_dims(&mut self, x: ValueId, axis: usize) -> IrResult<ValueId> {
        let t = self.ty(x).clone();
        if axis > t.rank() || t.rank() >= 2 {
            return Err(invalid(
                "unsqueeze",
                format!("axis {axis} invalid for {t} (tiles have rank ≤ 2)"),
            ));
        }
        let mut shape = t.shape.clone();
        shape.insert(axis, 1);
        Ok(self.emit1(OpKind::ExpandDims { axis }, vec![x], t.with_shape(shape)))
    }

    /// The tile `x`, to be held by other threads (the layout passes say which).
    pub fn handoff(&mut self, x: ValueId) -> IrResult<ValueId> {
        let t = self.ty(x).clone();
        if t.is_scalar() {
            return Err(invalid("handoff", format!("hands over a tile, got {t}")));
        }
        Ok(self.emit1(OpKind::Handoff, vec![x], t))
    }

    pub fn trans(&mut self, x: ValueId) -> IrResult<ValueId> {
        let t = self.ty(x).clone();
        if t.rank() != 2 {
            return Err(invalid("trans", format!("expects a rank-2 tile, got {t}")));
        }
        Ok(self.emit1(
            OpKind::Trans,
            vec![x],
            t.with_shape(vec![t.shape[1], t.shape[0]]),
        ))
    }

    // ---- arithmetic ----

    pub fn unary(&mut self, op: UnaryOp, x: ValueId) -> IrResult<ValueId> {
        let t = self.ty(x).clone();
        let s = t
            .elem
            .scalar()
            .ok_or_else(|| invalid(&format!("{op:?}"), format!("not defined on {t}")))?;
        let ok = match op {
            UnaryOp::Neg | UnaryOp::Abs => s != ScalarType::Bool,
            UnaryOp::Not => !s.is_float(),
            _ => s.is_float(),
        };
        if !ok {
            return Err(invalid(
                &format!("{op:?}").to_lowercase(),
                format!("not defined on {t}"),
            ));
        }
        Ok(self.emit1(OpKind::Unary(op), vec![x], t))
    }

    fn check_same_elem(&self, op: &str, a: ValueId, b: ValueId) -> IrResult<ScalarType> {
        let (ta, tb) = (self.ty(a), self.ty(b));
        if ta.elem != tb.elem {
            return Err(IrError::DtypeMismatch {
                op: op.into(),
                lhs: ta.elem.to_string(),
                rhs: tb.elem.to_string(),
            });
        }
        ta.elem
            .scalar()
            .ok_or_else(|| invalid(op, format!("not defined on {}", ta.elem)))
    }

    /// `a op b` with broadcasting; operands must already share a dtype.
    pub fn binary(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> IrResult<ValueId> {
        let name = format!("{op:?}").to_lowercase();
        let s = self.check_same_elem(&name, a, b)?;
        let ok = match op {
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => !s.is_float(),
            BinaryOp::Shl | BinaryOp::Shr | BinaryOp::Rem => s.is_int(),
            _ => s != ScalarType::Bool,
        };
        if !ok {
            return Err(invalid(&name, format!("not defined on {s}")));
        }
        let (a, b) = self.broadcast_pair(&name, a, b)?;
        let t = self.ty(a).clone();
        Ok(self.emit1(OpKind::Binary(op), vec![a, b], t))
    }

    pub fn cmp(&mut self, pred: CmpPred, a: ValueId, b: ValueId) -> IrResult<ValueId> {
        let name = format!("{pred:?}").to_lowercase();
        self.check_same_elem(&name, a, b)?;
        let (a, b) = self.broadcast_pair(&name, a, b)?;
        let t = self.ty(a).with_elem(Elem::Scalar(ScalarType::Bool));
        Ok(self.emit1(OpKind::Cmp(pred), vec![a, b], t))
    }

    pub fn select(&mut self, c: ValueId, a: ValueId, b: ValueId) -> IrResult<ValueId> {
        if self.ty(c).elem != Elem::Scalar(ScalarType::Bool) {
            return Err(invalid(
                "select",
                format!("condition must be bool, got {}", self.ty(c)),
            ));
        }
        let (ta, tb) = (self.ty(a).elem, self.ty(b).elem);
        if ta != tb {
            return Err(IrError::DtypeMismatch {
                op: "select".into(),
                lhs: ta.to_string(),
                rhs: tb.to_string(),
            });
        }
        let sc = self.ty(c).shape.clone();
        let (sa, sb) = (self.ty(a).shape.clone(), self.ty(b).shape.clone());
        let s = self.broadcast_shape("select", &sa, &sb)?;
        let s = self.broadcast_shape("select", &sc, &s)?;
        let (c, a, b) = (
            self.broadcast(c, &s)?,
            self.broadcast(a, &s)?,
            self.broadcast(b, &s)?,
        );
        let t = self.ty(a).clone();
        Ok(self.emit1(OpKind::Select, vec![c, a, b], t))
    }

    pub fn cast(&mut self, x: ValueId, to: ScalarType) -> IrResult<ValueId> {
        let t = self.ty(x).clone();
        if t.elem == Elem::Scalar(to) {
            return Ok(x);
        }
        if t.elem.scalar().is_none() {
            return Err(invalid("cast", format!("cannot cast {t} to {to}")));
        }
        Ok(self.emit1(OpKind::Cast(to), vec![x], t.with_elem(Elem::Scalar(to))))
    }

    pub fn add_ptr(&mut self, p: ValueId, off: ValueId) -> IrResult<ValueId> {
        let tp = self.ty(p).clone();
        if tp.elem.pointee().is_none() {
            return Err(invalid(
                "pointer offset",
                format!("left side must be a pointer, got {tp}"),
            ));
        }
        let to = self.ty(off).clone();
        if !matches!(to.elem, Elem::Scalar(ScalarType::I32 | ScalarType::I64)) {
            return Err(invalid(
                "pointer offset",
                format!("offset must be i32 or i64, got {to}"),
            ));
        }
        let (p, off) = self.broadcast_pair("pointer offset", p, off)?;
        let t = self.ty(p).clone();
        Ok(self.emit1(OpKind::AddPtr, vec![p, off], t))
    }

    // ---- memory ----

    pub fn load(
        &mut self,
        p: ValueId,
        mask: Option<ValueId>,
        other: Option<ValueId>,
    ) -> IrResult<ValueId> {
        let tp = self.ty(p).clone();
        let elem = tp
            .elem
            .pointee()
            .ok_or_else(|| invalid("load", format!("expects pointers, got {tp}")))?;
        let mut operands = vec![p];
        if let Some(m) = mask {
            self.check_mask("load", m)?;
            let m = self.broadcast(m, &tp.shape)?;
            operands.push(m);
        }
        if let Some(o) = other {
            if mask.is_none() {
                return Err(invalid("load", "`other` needs a mask"));
            }
            let to = self.ty(o).clone();
            if to.elem != Elem::Scalar(elem) {
                return Err(IrError::DtypeMismatch {
                    op: "load other".into(),
                    lhs: elem.to_string(),
                    rhs: to.elem.to_string(),
                });
            }
            operands.push(self.broadcast(o, &tp.shape)?);
        }
        let kind = OpKind::Load {
            has_mask: mask.is_some(),
            has_other: other.is_some(),
        };
        Ok(self.emit1(kind, operands, tp.with_elem(Elem::Scalar(elem))))
    }

    fn check_mask(&self, op: &str, m: ValueId) -> IrResult<()> {
        if self.ty(m).elem != Elem::Scalar(ScalarType::Bool) {
            return Err(invalid(
                op,
                format!("mask must be bool, got {}", self.ty(m)),
            ));
        }
        Ok(())
    }

    pub fn store(&mut self, p: ValueId, v: ValueId, mask: Option<ValueId>) -> IrResult<()> {
        let tp = self.ty(p).clone();
        let elem = tp
            .elem
            .pointee()
            .ok_or_else(|| invalid("store", format!("expects pointers, got {tp}")))?;
        let tv = self.ty(v).clone();
        if tv.elem != Elem::Scalar(elem) {
            return Err(IrError::DtypeMismatch {
                op: "store".into(),
                lhs: format!("ptr<{elem}>"),
                rhs: tv.elem.to_string(),
            });
        }
        // Pointers may be broadcast against the value (store a row to one address per column).
        let s = self.broadcast_shape("store", &tp.shape, &tv.shape)?;
        let p = self.broadcast(p, &s)?;
        let v = self.broadcast(v, &s)?;
        let mut operands = vec![p, v];
        if let Some(m) = mask {
            self.check_mask("store", m)?;
            operands.push(self.broadcast(m, &s)?);
        }
        self.emit(
            OpKind::Store {
                has_mask: mask.is_some(),
            },
            operands,
            vec![],
            vec![],
        );
        Ok(())
    }

    pub fn dot(&mut self, a: ValueId, b: ValueId, acc: Option<ValueId>) -> IrResult<ValueId> {
        let (ta, tb) = (self.ty(a).clone(), self.ty(b).clone());
        if ta.rank() != 2 || tb.rank() != 2 || ta.shape[1] != tb.shape[0] {
            return Err(IrError::ShapeMismatch {
                op: "dot".into(),
                lhs: shape_str(&ta.shape),
                rhs: shape_str(&tb.shape),
            });
        }
        if ta.elem != tb.elem || !ta.elem.scalar().is_some_and(|s| s.is_float()) {
            return Err(IrError::DtypeMismatch {
                op: "dot".into(),
                lhs: ta.elem.to_string(),
                rhs: tb.elem.to_string(),
            });
        }
        let out = vec![ta.shape[0], tb.shape[1]];
        let acc = match acc {
            Some(c) => {
                let tc = self.ty(c).clone();
                if tc.shape != out {
                    return Err(IrError::ShapeMismatch {
                        op: "dot accumulator".into(),
                        lhs: shape_str(&out),
                        rhs: shape_str(&tc.shape),
                    });
                }
                if tc.elem != Elem::Scalar(ScalarType::F32) {
                    return Err(IrError::DtypeMismatch {
                        op: "dot accumulator".into(),
                        lhs: "f32".into(),
                        rhs: tc.elem.to_string(),
                    });
                }
                c
            }
            None => {
                let z = self.const_f32(0.0);
                self.splat(z, &out)?
            }
        };
        Ok(self.emit1(
            OpKind::Dot,
            vec![a, b, acc],
            Type::tile(Elem::Scalar(ScalarType::F32), out),
        ))
    }

    pub fn reduce(&mut self, kind: ReduceKind, x: ValueId, axis: usize) -> IrResult<ValueId> {
        let t = self.ty(x).clone();
        if axis >= t.rank() {
            return Err(invalid(
                "reduce",
                format!("axis {axis} out of range for {t}"),
            ));
        }
        if t.elem.scalar().is_none_or(|s| s == ScalarType::Bool) {
            return Err(invalid("reduce", format!("not defined on {t}")));
        }
        let mut shape = t.shape.clone();
        shape.remove(axis);
        Ok(self.emit1(OpKind::Reduce { kind, axis }, vec![x], t.with_shape(shape)))
    }

    // ---- control flow ----

    pub fn yield_(&mut self, vals: Vec<ValueId>) {
        self.emit(OpKind::Yield, vals, vec![], vec![]);
    }

    /// Builds `for iv in (lo..hi).step_by(step)` carrying `inits`; `body` receives
    /// (builder, iv, iters) and returns the next iters (types must match).
    pub fn for_loop(
        &mut self,
        lo: ValueId,
        hi: ValueId,
        step: ValueId,
        inits: Vec<ValueId>,
        body: impl FnOnce(&mut Self, ValueId, Vec<ValueId>) -> IrResult<Vec<ValueId>>,
    ) -> IrResult<Vec<ValueId>> {
        for v in [lo, hi, step] {
            if *self.ty(v) != Type::scalar(ScalarType::I32) {
                return Err(invalid(
                    "for",
                    format!("bounds must be i32 scalars, got {}", self.ty(v)),
                ));
            }
        }
        let mut arg_tys = vec![Type::scalar(ScalarType::I32)];
        arg_tys.extend(inits.iter().map(|&v| self.ty(v).clone()));
        let args = self.begin_block(&arg_tys);
        let next = body(self, args[0], args[1..].to_vec())?;
        self.check_carried("for", &inits, &next)?;
        self.yield_(next);
        let region = self.end_block();
        let mut operands = vec![lo, hi, step];
        operands.extend(&inits);
        Ok(self.emit(OpKind::For, operands, arg_tys[1..].to_vec(), vec![region]))
    }

    fn check_carried(&self, op: &str, before: &[ValueId], after: &[ValueId]) -> IrResult<()> {
        for (a, b) in before.iter().zip(after) {
            let (ta, tb) = (self.ty(*a), self.ty(*b));
            if ta.shape != tb.shape || ta.elem != tb.elem {
                return Err(invalid(
                    op,
                    format!("loop-carried value changes type: {ta} becomes {tb}"),
                ));
            }
        }
        if before.len() != after.len() {
            return Err(invalid(op, "loop-carried value count changed"));
        }
        Ok(())
    }

    /// Builds `if cond { then } else { else }`; both closures return the yielded values.
    pub fn if_else(
        &mut self,
        cond: ValueId,
        then_: impl FnOnce(&mut Self) -> IrResult<Vec<ValueId>>,
        else_: impl FnOnce(&mut Self) -> IrResult<Vec<ValueId>>,
    ) -> IrResult<Vec<ValueId>> {
        if *self.ty(cond) != Type::scalar(ScalarType::Bool) {
            return Err(invalid(
                "if",
                format!("condition must be a bool scalar, got {}", self.ty(cond)),
            ));
        }
        self.begin_block(&[]);
        let tv = then_(self)?;
        self.yield_(tv.clone());
        let tb = self.end_block();
        self.begin_block(&[]);
        let ev = else_(self)?;
        self.check_carried("if", &tv, &ev)?;
        self.yield_(ev);
        let eb = self.end_block();
        let tys = tv.iter().map(|&v| self.ty(v).clone()).collect();
        Ok(self.emit(OpKind::If, vec![cond], tys, vec![tb, eb]))
    }

    /// Builds `while cond(vars) { vars = body(vars) }`.
    pub fn while_loop(
        &mut self,
        inits: Vec<ValueId>,
        cond: impl FnOnce(&mut Self, Vec<ValueId>) -> IrResult<ValueId>,
        body: impl FnOnce(&mut Self, Vec<ValueId>) -> IrResult<Vec<ValueId>>,
    ) -> IrResult<Vec<ValueId>> {
        let tys: Vec<Type> = inits.iter().map(|&v| self.ty(v).clone()).collect();
        let args = self.begin_block(&tys);
        let c = cond(self, args.clone())?;
        if *self.ty(c) != Type::scalar(ScalarType::Bool) {
            return Err(invalid(
                "while",
                format!("condition must be a bool scalar, got {}", self.ty(c)),
            ));
        }
        let mut cops = vec![c];
        cops.extend(&args);
        self.emit(OpKind::Condition, cops, vec![], vec![]);
        let before = self.end_block();
        let args = self.begin_block(&tys);
        let next = body(self, args)?;
        self.check_carried("while", &inits, &next)?;
        self.yield_(next);
        let after = self.end_block();
        Ok(self.emit(OpKind::While, inits, tys, vec![before, after]))
    }
}
