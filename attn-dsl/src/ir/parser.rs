//! IR text parser (inverse of [`super::printer`]).
//!
//! Values and ops are allocated in the order the [`super::Builder`] allocates them (block
//! arguments when their region opens, an op's results and the op itself after its regions),
//! so parsing the printed form of a builder-made function gives back an identical
//! [`Function`], arena indices included. The parser checks syntax and name resolution
//! (every `%name` defined once, before its uses); types are checked by [`super::verify`].

mod lexer;

use super::function::{Block, Function, Loc, Op, OpId, Param, ParamKind, ValueId};
use super::ops::{BinaryOp, CmpPred, UnaryOp};
use super::ops::{OpKind, ReduceKind, Scalar};
use super::printer::{binary_name, cmp_name, unary_name};
use super::types::{BlockedLayout, Elem, Layout, ScalarType, Type};
use lexer::{Tok, Token};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("IR parse error at line {line}: {msg}")]
pub struct ParseError {
    pub line: usize,
    pub msg: String,
}

/// Parses the text form produced by [`super::printer::print_function`].
pub fn parse_function(text: &str) -> Result<Function, ParseError> {
    let toks = lexer::tokenize(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        f: Function::new("", 1),
        scope: BTreeMap::new(),
    };
    p.function()?;
    if let Some(t) = p.toks.get(p.pos) {
        return Err(ParseError {
            line: t.line,
            msg: format!("expected end of input after the kernel, found {}", t.tok),
        });
    }
    Ok(p.f)
}

/// A value named on the left of `=` (or as a block argument), not yet allocated.
struct PendingValue {
    key: String,
    name: Option<String>,
    line: usize,
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    f: Function,
    /// Printed name (text after `%`) → value, for every value defined so far.
    scope: BTreeMap<String, ValueId>,
}

type PResult<T> = Result<T, ParseError>;

/// A parsed `for`/`if`/`while`: kind, operands, regions, result types.
type RegionOp = (OpKind, Vec<ValueId>, Vec<Block>, Vec<Type>);

impl Parser {
    // ---- token helpers ----

    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or(self.toks.last())
            .map_or(1, |t| t.line)
    }

    fn err<T>(&self, expected: &str) -> PResult<T> {
        let found = match self.toks.get(self.pos) {
            Some(t) => t.tok.to_string(),
            None => "end of input".to_string(),
        };
        Err(ParseError {
            line: self.line(),
            msg: format!("expected {expected}, found {found}"),
        })
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }

    fn bump(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|t| t.tok.clone());
        self.pos += 1;
        t
    }

    fn is_punct(&self, c: char) -> bool {
        self.peek() == Some(&Tok::Punct(c))
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(x)) if x == w)
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let hit = self.is_punct(c);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn eat_word(&mut self, w: &str) -> bool {
        let hit = self.is_word(w);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn expect_punct(&mut self, c: char) -> PResult<()> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            self.err(&format!("`{c}`"))
        }
    }

    fn expect_word(&mut self, w: &str) -> PResult<()> {
        if self.eat_word(w) {
            Ok(())
        } else {
            self.err(&format!("`{w}`"))
        }
    }

    fn word(&mut self, what: &str) -> PResult<String> {
        match self.peek() {
            Some(Tok::Word(w)) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            _ => self.err(what),
        }
    }

    fn number<T: std::str::FromStr>(&mut self, what: &str) -> PResult<T> {
        match self.peek() {
            Some(Tok::Word(w)) => match w.parse::<T>() {
                Ok(n) => {
                    self.pos += 1;
                    Ok(n)
                }
                Err(_) => self.err(what),
            },
            _ => self.err(what),
        }
    }

    // ---- values ----

    /// A `%name` about to be defined.
    fn pending(&mut self) -> PResult<PendingValue> {
        let line = self.line();
        match self.peek() {
            Some(Tok::Value { key, name }) => {
                let v = PendingValue {
                    key: key.clone(),
                    name: name.clone(),
                    line,
                };
                self.pos += 1;
                Ok(v)
            }
            _ => self.err("a value name `%...`"),
        }
    }

    fn define(&mut self, p: PendingValue, ty: Type) -> PResult<ValueId> {
        if self.scope.contains_key(&p.key) {
            return Err(ParseError {
                line: p.line,
                msg: format!("value `%{}` is defined twice", p.key),
            });
        }
        let v = self.f.new_value(ty, p.name);
        self.scope.insert(p.key, v);
        Ok(v)
    }

    /// A use of a previously defined value.
    fn use_value(&mut self) -> PResult<ValueId> {
        match self.peek() {
            Some(Tok::Value { key, .. }) => match self.scope.get(key) {
                Some(&v) => {
                    self.pos += 1;
                    Ok(v)
                }
                None => Err(ParseError {
                    line: self.line(),
                    msg: format!("use of undefined value `%{key}`"),
                }),
            },
            _ => self.err("a value `%...`"),
        }
    }

    /// Comma-separated uses; empty when the next token is not a value.
    fn use_list(&mut self) -> PResult<Vec<ValueId>> {
        let mut out = vec![];
        if !matches!(self.peek(), Some(Tok::Value { .. })) {
            return Ok(out);
        }
        loop {
            out.push(self.use_value()?);
            if !self.eat_punct(',') {
                return Ok(out);
            }
        }
    }

    // ---- types ----

    fn scalar_type(&mut self) -> PResult<ScalarType> {
        match self.peek() {
            Some(Tok::Word(w)) => match ScalarType::from_name(w) {
                Some(s) => {
                    self.pos += 1;
                    Ok(s)
                }
                None => self.err("a scalar type (bf16, f16, f32, i32, i64, bool)"),
            },
            _ => self.err("a scalar type (bf16, f16, f32, i32, i64, bool)"),
        }
    }

    fn elem(&mut self) -> PResult<Elem> {
        if self.eat_word("ptr") {
            self.expect_punct('<')?;
            let s = self.scalar_type()?;
            self.expect_punct('>')?;
            return Ok(Elem::Ptr(s));
        }
        Ok(Elem::Scalar(self.scalar_type()?))
    }

    fn ty(&mut self) -> PResult<Type> {
        let mut t = if self.eat_word("tile") {
            self.expect_punct('<')?;
            let elem = self.elem()?;
            self.expect_punct(',')?;
            let line = self.line();
            let dims = self.word("a tile shape like `16x64`")?;
            let shape = dims
                .split('x')
                .map(|d| d.parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| ParseError {
                    line,
                    msg: format!("expected a tile shape like `16x64`, found `{dims}`"),
                })?;
            self.expect_punct('>')?;
            Type::tile(elem, shape)
        } else {
            Type {
                elem: self.elem()?,
                shape: vec![],
                layout: Layout::Unassigned,
            }
        };
        if matches!(self.peek(), Some(Tok::Attr(_))) {
            t.layout = self.layout()?;
        }
        Ok(t)
    }

    fn type_list(&mut self) -> PResult<Vec<Type>> {
        let mut out = vec![self.ty()?];
        while self.eat_punct(',') {
            out.push(self.ty()?);
        }
        Ok(out)
    }

    fn u32_list(&mut self) -> PResult<Vec<u32>> {
        self.expect_punct('[')?;
        let mut out = vec![];
        if self.eat_punct(']') {
            return Ok(out);
        }
        loop {
            out.push(self.number("an unsigned integer")?);
            if self.eat_punct(']') {
                return Ok(out);
            }
            self.expect_punct(',')?;
        }
    }

    fn usize_list(&mut self) -> PResult<Vec<usize>> {
        Ok(self.u32_list()?.into_iter().map(|d| d as usize).collect())
    }

    /// `key=` then the value parsed by `f`.
    fn field<T>(&mut self, key: &str, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
        self.expect_word(key)?;
        self.expect_punct('=')?;
        f(self)
    }

    fn layout(&mut self) -> PResult<Layout> {
        let name = match self.bump() {
            Some(Tok::Attr(a)) => a,
            _ => {
                self.pos -= 1;
                return self.err("a layout `#...`");
            }
        };
        if name == "unassigned" {
            return Ok(Layout::Unassigned);
        }
        self.expect_punct('<')?;
        let l = match name.as_str() {
            "blocked" => {
                let size_per_thread = self.field("spt", Self::u32_list)?;
                self.expect_punct(',')?;
                let threads_per_warp = self.field("tpw", Self::u32_list)?;
                self.expect_punct(',')?;
                let warps_per_cta = self.field("wpc", Self::u32_list)?;
                self.expect_punct(',')?;
                let order = self.field("order", Self::u32_list)?;
                Layout::Blocked(BlockedLayout {
                    size_per_thread,
                    threads_per_warp,
                    warps_per_cta,
                    order,
                })
            }
            "mma" => {
                let w = self.field("wpc", Self::u32_list)?;
                match w.as_slice() {
                    [a, b] => Layout::Mma {
                        warps_per_cta: [*a, *b],
                    },
                    _ => return self.err("two warps_per_cta entries for #mma"),
                }
            }
            "dot_op" => {
                let op_idx = self.field("idx", |p| p.number::<u8>("an operand index"))?;
                self.expect_punct(',')?;
                let parent = Box::new(self.field("parent", Self::layout)?);
                Layout::DotOperand { op_idx, parent }
            }
            "slice" => {
                let dim = self.field("dim", |p| p.number::<u8>("a dimension"))?;
                self.expect_punct(',')?;
                let parent = Box::new(self.field("parent", Self::layout)?);
                Layout::Slice { dim, parent }
            }
            "shared" => {
                let vec = self.field("vec", |p| p.number::<u32>("an integer"))?;
                self.expect_punct(',')?;
                let per_phase = self.field("per_phase", |p| p.number::<u32>("an integer"))?;
                self.expect_punct(',')?;
                let max_phase = self.field("max_phase", |p| p.number::<u32>("an integer"))?;
                self.expect_punct(',')?;
                let stages = self.field("stages", |p| p.number::<u32>("an integer"))?;
                Layout::Shared {
                    vec,
                    per_phase,
                    max_phase,
                    stages,
                }
            }
            "owned" => {
                let warpgroup = self.field("wg", |p| p.number::<u32>("a warpgroup index"))?;
                self.expect_punct(',')?;
                let inner = Box::new(self.field("inner", Self::layout)?);
                Layout::Owned { warpgroup, inner }
            }
            other => {
                self.pos -= 2;
                return Err(ParseError {
                    line: self.line(),
                    msg: format!("unknown layout `#{other}` (expected #blocked, #mma, #dot_op, #slice, #shared, #owned)"),
                });
            }
        };
        self.expect_punct('>')?;
        Ok(l)
    }

    // ---- structure ----

    fn function(&mut self) -> PResult<()> {
        self.expect_word("kernel")?;
        self.f.name = match self.bump() {
            Some(Tok::Global(g)) => g,
            _ => {
                self.pos -= 1;
                return self.err("the kernel name `@name`");
            }
        };
        self.expect_punct('(')?;
        if !self.eat_punct(')') {
            loop {
                self.param()?;
                if self.eat_punct(')') {
                    break;
                }
                self.expect_punct(',')?;
            }
        }
        self.expect_word("warps")?;
        self.expect_punct('(')?;
        self.f.num_warps = self.number("the warp count")?;
        self.expect_punct(')')?;
        self.expect_punct('{')?;
        let ops = self.ops_until_close()?;
        self.f.body.ops = ops;
        Ok(())
    }

    /// `%v: ty`, `%v: mut ptr<T>`, or `%v as name: ty` when the parameter and value names differ.
    fn param(&mut self) -> PResult<()> {
        let pv = self.pending()?;
        let alias = if self.eat_word("as") {
            match self.bump() {
                Some(Tok::Word(w)) => Some(w),
                Some(Tok::Str(s)) => Some(s),
                _ => {
                    self.pos -= 1;
                    return self.err("a parameter name after `as`");
                }
            }
        } else {
            None
        };
        self.expect_punct(':')?;
        let mutable = self.eat_word("mut");
        let line = self.line();
        let kind = match self.elem()? {
            Elem::Ptr(elem) => ParamKind::Ptr { elem, mutable },
            Elem::Scalar(s) if !mutable => ParamKind::Scalar(s),
            Elem::Scalar(s) => {
                return Err(ParseError {
                    line,
                    msg: format!("`mut` applies to pointer parameters only, found `mut {s}`"),
                })
            }
        };
        let name = match alias.or_else(|| pv.name.clone()) {
            Some(n) => n,
            None => {
                return Err(ParseError {
                    line,
                    msg: format!("parameter `%{}` needs a name (`as name`)", pv.key),
                })
            }
        };
        let ty = match kind {
            ParamKind::Ptr { elem, .. } => Type::ptr(elem),
            ParamKind::Scalar(s) => Type::scalar(s),
        };
        let value = self.define(pv, ty)?;
        self.f.body.args.push(value);
        self.f.params.push(Param { name, kind, value });
        Ok(())
    }

    /// Ops up to and including the closing `}` of the current block.
    fn ops_until_close(&mut self) -> PResult<Vec<OpId>> {
        let mut ops = vec![];
        while !self.eat_punct('}') {
            if self.peek().is_none() {
                return self.err("`}` closing the block");
            }
            ops.push(self.op()?);
        }
        Ok(ops)
    }

    fn loc(&mut self) -> PResult<Loc> {
        if !self.eat_word("loc") {
            return Ok(Loc::default());
        }
        self.expect_punct('(')?;
        let line = self.number("a line number")?;
        self.expect_punct(':')?;
        let col = self.number("a column number")?;
        self.expect_punct(')')?;
        Ok(Loc { line, col })
    }

    fn op(&mut self) -> PResult<OpId> {
        let mut results = vec![];
        if matches!(self.peek(), Some(Tok::Value { .. })) {
            loop {
                results.push(self.pending()?);
                if !self.eat_punct(',') {
                    break;
                }
            }
            self.expect_punct('=')?;
        }
        let line = self.line();
        let mnemonic = self.word("an op name")?;
        let (kind, operands, regions, tys) = match mnemonic.as_str() {
            "for" => self.for_op()?,
            "if" => self.if_op()?,
            "while" => self.while_op()?,
            "const" => {
                let lit = self.word("a literal")?;
                let tys = self.result_types(results.len())?;
                let s = match tys.first() {
                    Some(t) => literal(&lit, t, line)?,
                    None => {
                        return Err(ParseError {
                            line,
                            msg: "`const` needs one result".into(),
                        })
                    }
                };
                (OpKind::Const(s), vec![], vec![], tys)
            }
            _ => {
                let (k, o) = self.simple_op(&mnemonic, line)?;
                (k, o, vec![], self.result_types(results.len())?)
            }
        };
        if tys.len() != results.len() {
            return Err(ParseError {
                line,
                msg: format!(
                    "`{mnemonic}` names {} result(s) but lists {} type(s)",
                    results.len(),
                    tys.len()
                ),
            });
        }
        let loc = self.loc()?;
        let mut rs = vec![];
        for (p, t) in results.into_iter().zip(tys) {
            rs.push(self.define(p, t)?);
        }
        Ok(self.f.push_op(Op {
            kind,
            operands,
            results: rs,
            regions,
            loc,
        }))
    }

    /// `: t1, t2` after a region-free op with results.
    fn result_types(&mut self, n: usize) -> PResult<Vec<Type>> {
        if n == 0 {
            return Ok(vec![]);
        }
        self.expect_punct(':')?;
        self.type_list()
    }

    fn simple_op(&mut self, m: &str, line: usize) -> PResult<(OpKind, Vec<ValueId>)> {
        let kind = match m {
            "program_id" => return Ok((OpKind::ProgramId(self.number("an axis")?), vec![])),
            "num_programs" => return Ok((OpKind::NumPrograms(self.number("an axis")?), vec![])),
            "arange" => {
                return Ok((
                    OpKind::Arange {
                        n: self.number("a length")?,
                    },
                    vec![],
                ))
            }
            "splat" | "broadcast" => {
                let x = self.use_list()?;
                self.expect_word("to")?;
                let shape = self.usize_list()?;
                let k = if m == "splat" {
                    OpKind::Splat { shape }
                } else {
                    OpKind::Broadcast { shape }
                };
                return Ok((k, x));
            }
            "expand_dims" => {
                let x = self.use_list()?;
                self.expect_word("axis")?;
                return Ok((
                    OpKind::ExpandDims {
                        axis: self.number("an axis")?,
                    },
                    x,
                ));
            }
            "cast" => {
                let x = self.use_list()?;
                self.expect_word("to")?;
                return Ok((OpKind::Cast(self.scalar_type()?), x));
            }
            "cmp" => {
                let pred = self.word("a comparison predicate")?;
                match CmpPred::ALL.iter().find(|p| cmp_name(**p) == pred) {
                    Some(p) => OpKind::Cmp(*p),
                    None => {
                        return Err(ParseError {
                            line,
                            msg: format!(
                                "unknown comparison `{pred}` (expected eq, ne, lt, le, gt, ge)"
                            ),
                        })
                    }
                }
            }
            "reduce" => {
                let k = match self.word("a reduction kind")?.as_str() {
                    "sum" => ReduceKind::Sum,
                    "max" => ReduceKind::Max,
                    "min" => ReduceKind::Min,
                    other => {
                        return Err(ParseError {
                            line,
                            msg: format!("unknown reduction `{other}` (expected sum, max, min)"),
                        })
                    }
                };
                let x = self.use_list()?;
                self.expect_word("axis")?;
                return Ok((
                    OpKind::Reduce {
                        kind: k,
                        axis: self.number("an axis")?,
                    },
                    x,
                ));
            }
            "load" => {
                let mut ops = vec![self.use_value()?];
                let has_mask = self.eat_word("mask");
                if has_mask {
                    ops.push(self.use_value()?);
                }
                let has_other = self.eat_word("other");
                if has_other {
                    ops.push(self.use_value()?);
                }
                return Ok((
                    OpKind::Load {
                        has_mask,
                        has_other,
                    },
                    ops,
                ));
            }
            "store" => {
                let mut ops = vec![self.use_value()?];
                self.expect_punct(',')?;
                ops.push(self.use_value()?);
                let has_mask = self.eat_word("mask");
                if has_mask {
                    ops.push(self.use_value()?);
                }
                return Ok((OpKind::Store { has_mask }, ops));
            }
            "trans" => OpKind::Trans,
            "handoff" => OpKind::Handoff,
            "select" => OpKind::Select,
            "add_ptr" => OpKind::AddPtr,
            "dot" => OpKind::Dot,
            "condition" => OpKind::Condition,
            "yield" => OpKind::Yield,
            "return" => OpKind::Return,
            other => {
                if let Some(u) = UnaryOp::ALL.iter().find(|u| unary_name(**u) == other) {
                    OpKind::Unary(*u)
                } else if let Some(b) = BinaryOp::ALL.iter().find(|b| binary_name(**b) == other) {
                    OpKind::Binary(*b)
                } else {
                    return Err(ParseError {
                        line,
                        msg: format!("unknown op `{other}`"),
                    });
                }
            }
        };
        Ok((kind, self.use_list()?))
    }

    /// `for %iv: i32 = %lo to %hi step %s [iter(%a: T = %x, ...)] [: T, ...] { ... }`.
    fn for_op(&mut self) -> PResult<RegionOp> {
        let iv = self.pending()?;
        self.expect_punct(':')?;
        let iv_ty = self.ty()?;
        self.expect_punct('=')?;
        let lo = self.use_value()?;
        self.expect_word("to")?;
        let hi = self.use_value()?;
        self.expect_word("step")?;
        let step = self.use_value()?;
        let mut operands = vec![lo, hi, step];
        let mut args = vec![(iv, iv_ty)];
        if self.eat_word("iter") {
            self.expect_punct('(')?;
            for (arg, ty, init) in self.bound_args()? {
                args.push((arg, ty));
                operands.push(init);
            }
        }
        let tys = self.region_types()?;
        self.expect_punct('{')?;
        let body = self.region(args)?;
        Ok((OpKind::For, operands, vec![body], tys))
    }

    /// `if %c [: T, ...] { ... } else { ... }`.
    fn if_op(&mut self) -> PResult<RegionOp> {
        let c = self.use_value()?;
        let tys = self.region_types()?;
        self.expect_punct('{')?;
        let then_ = self.region(vec![])?;
        self.expect_word("else")?;
        self.expect_punct('{')?;
        let else_ = self.region(vec![])?;
        Ok((OpKind::If, vec![c], vec![then_, else_], tys))
    }

    /// `while (%a: T = %x, ...) [: T, ...] { ... } do (%b: T, ...) { ... }`.
    fn while_op(&mut self) -> PResult<RegionOp> {
        self.expect_punct('(')?;
        let bound = self.bound_args()?;
        let mut inits = vec![];
        let mut args = vec![];
        for (arg, ty, init) in bound {
            inits.push(init);
            args.push((arg, ty));
        }
        let tys = self.region_types()?;
        self.expect_punct('{')?;
        let before = self.region(args)?;
        self.expect_word("do")?;
        self.expect_punct('(')?;
        let mut body_args = vec![];
        if !self.eat_punct(')') {
            loop {
                let a = self.pending()?;
                self.expect_punct(':')?;
                body_args.push((a, self.ty()?));
                if self.eat_punct(')') {
                    break;
                }
                self.expect_punct(',')?;
            }
        }
        self.expect_punct('{')?;
        let body = self.region(body_args)?;
        Ok((OpKind::While, inits, vec![before, body], tys))
    }

    /// `%a: T = %x, ...)` (after the opening parenthesis).
    fn bound_args(&mut self) -> PResult<Vec<(PendingValue, Type, ValueId)>> {
        let mut out = vec![];
        if self.eat_punct(')') {
            return Ok(out);
        }
        loop {
            let a = self.pending()?;
            self.expect_punct(':')?;
            let ty = self.ty()?;
            self.expect_punct('=')?;
            let init = self.use_value()?;
            out.push((a, ty, init));
            if self.eat_punct(')') {
                return Ok(out);
            }
            self.expect_punct(',')?;
        }
    }

    /// Optional `: T, ...` before a region op's first `{`: the op's result types.
    fn region_types(&mut self) -> PResult<Vec<Type>> {
        if self.eat_punct(':') {
            self.type_list()
        } else {
            Ok(vec![])
        }
    }

    /// Defines the block arguments, then parses ops up to the closing `}`.
    fn region(&mut self, args: Vec<(PendingValue, Type)>) -> PResult<Block> {
        let mut ids = vec![];
        for (p, t) in args {
            ids.push(self.define(p, t)?);
        }
        let ops = self.ops_until_close()?;
        Ok(Block { args: ids, ops })
    }
}

/// A `const` literal; its variant follows the result type `ty` (bool, integer or float).
fn literal(lit: &str, ty: &Type, line: usize) -> PResult<Scalar> {
    let bad = |what: &str| ParseError {
        line,
        msg: format!("expected {what} literal for `{ty}`, found `{lit}`"),
    };
    if !ty.is_scalar() {
        return Err(bad("a scalar (constants are scalars; tiles use `splat`)"));
    }
    Ok(match ty.elem {
        Elem::Scalar(ScalarType::Bool) => match lit {
            "true" => Scalar::Bool(true),
            "false" => Scalar::Bool(false),
            _ => return Err(bad("a `true`/`false`")),
        },
        Elem::Scalar(s) if s.is_float() => {
            Scalar::Float(lit.parse().map_err(|_| bad("a float"))?, s)
        }
        Elem::Scalar(s) => Scalar::Int(lit.parse().map_err(|_| bad("an integer"))?, s),
        Elem::Ptr(_) => return Err(bad("a number (constants are never pointers)")),
    })
}
