//! IR text printer (round-trips through [`super::parser`]).
//!
//! The text form is MLIR-like and is what tests snapshot, so it is deterministic and
//! faithful: every value type (with its layout), value name, op attribute, source location,
//! parameter and `num_warps` is printed, and [`super::parser::parse_function`] rebuilds the
//! same [`Function`] from it.
//!
//! ```text
//! kernel @softmax(%x: ptr<f32>, %out: mut ptr<f32>, %n: i32) warps(4) {
//!   %0 = program_id 0 : i32                               loc(12:5)
//!   %offs = arange 128 : tile<i32, 128>                   loc(13:16)
//!   %m.1, %l.1 = for %i: i32 = %lo to %hi step %s iter(%m: f32 = %a, %l: f32 = %b) : f32, f32 {
//!     ...
//!     yield %m2, %l2
//!   } loc(20:5)
//!   return
//! }
//! ```
//!
//! Value names: a value named `m` prints as `%m`; later values with the same name print as
//! `%m.1`, `%m.2`, ... (the parser strips the `.N`); unnamed values print as `%N` with `N`
//! their arena index; names that are not identifiers are quoted (`%"a b"`).

use super::function::{Block, Function, Loc, Op, ParamKind, ValueId};
use super::ops::{BinaryOp, CmpPred, OpKind, ReduceKind, Scalar, UnaryOp};
use super::types::{BlockedLayout, Layout, Type};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Column at which `loc(...)` starts on single-line ops, so locations line up.
const LOC_COLUMN: usize = 56;

/// Prints `f` in the IR text form.
pub fn print_function(f: &Function) -> String {
    let names = ValueNames::assign(f);
    let mut p = Printer {
        f,
        names,
        out: String::new(),
    };
    p.function();
    p.out
}

/// `f32`, `ptr<bf16>`, `tile<f32, 16x64>`, followed by ` #layout` when one is assigned.
pub fn format_type(t: &Type) -> String {
    match &t.layout {
        Layout::Unassigned => t.to_string(),
        l => format!("{t} {}", format_layout(l)),
    }
}

/// `#blocked<spt=[1, 8], tpw=[4, 8], wpc=[4, 1], order=[1, 0]>` and friends.
pub fn format_layout(l: &Layout) -> String {
    match l {
        Layout::Unassigned => "#unassigned".to_string(),
        Layout::Blocked(b) => format_blocked(b),
        Layout::Mma { warps_per_cta } => format!("#mma<wpc={}>", list(warps_per_cta)),
        Layout::DotOperand { op_idx, parent } => {
            format!("#dot_op<idx={op_idx}, parent={}>", format_layout(parent))
        }
        Layout::Slice { dim, parent } => {
            format!("#slice<dim={dim}, parent={}>", format_layout(parent))
        }
        Layout::Shared {
            vec,
            per_phase,
            max_phase,
            stages,
        } => format!(
            "#shared<vec={vec}, per_phase={per_phase}, max_phase={max_phase}, stages={stages}>"
        ),
        Layout::Owned { warpgroup, inner } => {
            format!("#owned<wg={warpgroup}, inner={}>", format_layout(inner))
        }
    }
}

fn format_blocked(b: &BlockedLayout) -> String {
    format!(
        "#blocked<spt={}, tpw={}, wpc={}, order={}>",
        list(&b.size_per_thread),
        list(&b.threads_per_warp),
        list(&b.warps_per_cta),
        list(&b.order)
    )
}

/// `[a, b, c]`.
pub(crate) fn list<T: std::fmt::Display>(xs: &[T]) -> String {
    let parts: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// A literal as the parser reads it back: integers in decimal, floats in Rust's shortest
/// round-tripping form (`1.0`, `1e-7`, `inf`, `-inf`, `NaN`), bools as `true`/`false`.
pub fn format_scalar(s: &Scalar) -> String {
    match s {
        Scalar::Int(v, _) => v.to_string(),
        Scalar::Float(v, _) => format!("{v:?}"),
        Scalar::Bool(b) => b.to_string(),
    }
}

/// The textual mnemonic of a unary op.
pub(crate) fn unary_name(op: UnaryOp) -> &'static str {
    match op {
        UnaryOp::Neg => "neg",
        UnaryOp::Not => "not",
        UnaryOp::Exp => "exp",
        UnaryOp::Exp2 => "exp2",
        UnaryOp::Log => "log",
        UnaryOp::Log2 => "log2",
        UnaryOp::Sqrt => "sqrt",
        UnaryOp::Tanh => "tanh",
        UnaryOp::Abs => "abs",
    }
}

/// The textual mnemonic of a binary op.
pub(crate) fn binary_name(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "add",
        BinaryOp::Sub => "sub",
        BinaryOp::Mul => "mul",
        BinaryOp::Div => "div",
        BinaryOp::Rem => "rem",
        BinaryOp::Min => "min",
        BinaryOp::Max => "max",
        BinaryOp::And => "and",
        BinaryOp::Or => "or",
        BinaryOp::Xor => "xor",
        BinaryOp::Shl => "shl",
        BinaryOp::Shr => "shr",
    }
}

pub(crate) fn cmp_name(p: CmpPred) -> &'static str {
    match p {
        CmpPred::Eq => "eq",
        CmpPred::Ne => "ne",
        CmpPred::Lt => "lt",
        CmpPred::Le => "le",
        CmpPred::Gt => "gt",
        CmpPred::Ge => "ge",
    }
}

pub(crate) fn reduce_name(k: ReduceKind) -> &'static str {
    match k {
        ReduceKind::Sum => "sum",
        ReduceKind::Max => "max",
        ReduceKind::Min => "min",
    }
}

/// True for `[A-Za-z_][A-Za-z0-9_]*`: names printed without quotes.
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `"..."` with `\` and `"` escaped.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Unique, deterministic text names for every value reachable from the body.
struct ValueNames {
    text: Vec<Option<String>>,
    seen: BTreeMap<String, usize>,
}

impl ValueNames {
    fn assign(f: &Function) -> Self {
        let mut n = ValueNames {
            text: vec![None; f.values.len()],
            seen: BTreeMap::new(),
        };
        for &a in &f.body.args {
            n.define(f, a);
        }
        n.block(f, &f.body);
        n
    }

    /// Names values in the order the printer writes their definitions.
    fn block(&mut self, f: &Function, b: &Block) {
        for &o in &b.ops {
            let op = f.op(o);
            for &r in &op.results {
                self.define(f, r);
            }
            for region in &op.regions {
                for &a in &region.args {
                    self.define(f, a);
                }
                self.block(f, region);
            }
        }
    }

    fn define(&mut self, f: &Function, v: ValueId) {
        let idx = v.0 as usize;
        if idx >= self.text.len() || self.text[idx].is_some() {
            return;
        }
        let text = match &f.values[idx].name {
            None => idx.to_string(),
            Some(name) => {
                let base = if is_identifier(name) {
                    name.clone()
                } else {
                    quote(name)
                };
                let count = self.seen.entry(base.clone()).or_insert(0);
                *count += 1;
                if *count == 1 {
                    base
                } else {
                    format!("{base}.{}", *count - 1)
                }
            }
        };
        self.text[idx] = Some(text);
    }

    /// The text of `v` (without `%`); values never defined print as `?N` so a corrupt
    /// function still prints (the parser rejects it).
    fn get(&self, v: ValueId) -> String {
        match self.text.get(v.0 as usize) {
            Some(Some(t)) => t.clone(),
            _ => format!("?{}", v.0),
        }
    }
}

struct Printer<'a> {
    f: &'a Function,
    names: ValueNames,
    out: String,
}

impl Printer<'_> {
    fn function(&mut self) {
        let f = self.f;
        let params: Vec<String> = f
            .params
            .iter()
            .map(|p| {
                let vname = self.names.get(p.value);
                let same = f
                    .values
                    .get(p.value.0 as usize)
                    .and_then(|v| v.name.as_deref())
                    == Some(&p.name);
                let alias = if same {
                    String::new()
                } else {
                    format!(" as {}", name_text(&p.name))
                };
                let ty = match p.kind {
                    ParamKind::Ptr {
                        elem,
                        mutable: true,
                    } => format!("mut ptr<{elem}>"),
                    ParamKind::Ptr {
                        elem,
                        mutable: false,
                    } => format!("ptr<{elem}>"),
                    ParamKind::Scalar(s) => s.to_string(),
                };
                format!("%{vname}{alias}: {ty}")
            })
            .collect();
        let _ = writeln!(
            self.out,
            "kernel @{}({}) warps({}) {{",
            name_text(&f.name),
            params.join(", "),
            f.num_warps
        );
        self.block(&f.body, 1);
        self.out.push_str("}\n");
    }

    fn block(&mut self, b: &Block, depth: usize) {
        for &o in &b.ops {
            self.op(self.f.op(o), depth);
        }
    }

    fn v(&self, v: ValueId) -> String {
        format!("%{}", self.names.get(v))
    }

    fn vs(&self, vs: &[ValueId]) -> String {
        vs.iter().map(|&v| self.v(v)).collect::<Vec<_>>().join(", ")
    }

    fn types(&self, vs: &[ValueId]) -> String {
        vs.iter()
            .map(|&v| self.ty_of(v))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn ty_of(&self, v: ValueId) -> String {
        match self.f.values.get(v.0 as usize) {
            Some(d) => format_type(&d.ty),
            None => "?".to_string(),
        }
    }

    fn typed_args(&self, args: &[ValueId]) -> String {
        args.iter()
            .map(|&a| format!("{}: {}", self.v(a), self.ty_of(a)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn op(&mut self, op: &Op, depth: usize) {
        let indent = "  ".repeat(depth);
        let mut line = indent.clone();
        if !op.results.is_empty() {
            let _ = write!(line, "{} = ", self.vs(&op.results));
        }
        if op.kind.num_regions() > 0 {
            self.region_op(op, line, depth);
            return;
        }
        line.push_str(&self.op_body(op));
        if !op.results.is_empty() {
            let _ = write!(line, " : {}", self.types(&op.results));
        }
        self.out.push_str(&with_loc(line, op.loc));
        self.out.push('\n');
    }

    /// Mnemonic, attributes and operands of a region-free op.
    fn op_body(&self, op: &Op) -> String {
        let ops = &op.operands;
        let o = |i: usize| {
            ops.get(i)
                .map(|&v| self.v(v))
                .unwrap_or_else(|| "%?".into())
        };
        match &op.kind {
            OpKind::Const(s) => format!("const {}", format_scalar(s)),
            OpKind::ProgramId(a) => format!("program_id {a}"),
            OpKind::NumPrograms(a) => format!("num_programs {a}"),
            OpKind::Arange { n } => format!("arange {n}"),
            OpKind::Splat { shape } => format!("splat {} to {}", self.vs(ops), list(shape)),
            OpKind::Broadcast { shape } => format!("broadcast {} to {}", self.vs(ops), list(shape)),
            OpKind::ExpandDims { axis } => format!("expand_dims {} axis {axis}", self.vs(ops)),
            OpKind::Trans => format!("trans {}", self.vs(ops)),
            OpKind::Handoff => format!("handoff {}", self.vs(ops)),
            OpKind::Unary(u) => format!("{} {}", unary_name(*u), self.vs(ops)),
            OpKind::Binary(b) => format!("{} {}", binary_name(*b), self.vs(ops)),
            OpKind::Cmp(p) => format!("cmp {} {}", cmp_name(*p), self.vs(ops)),
            OpKind::Select => format!("select {}", self.vs(ops)),
            OpKind::Cast(t) => format!("cast {} to {t}", self.vs(ops)),
            OpKind::AddPtr => format!("add_ptr {}", self.vs(ops)),
            OpKind::Load {
                has_mask,
                has_other,
            } => {
                let mut s = format!("load {}", o(0));
                if *has_mask {
                    let _ = write!(s, " mask {}", o(1));
                }
                if *has_other {
                    let _ = write!(s, " other {}", o(2));
                }
                s
            }
            OpKind::Store { has_mask } => {
                let mut s = format!("store {}, {}", o(0), o(1));
                if *has_mask {
                    let _ = write!(s, " mask {}", o(2));
                }
                s
            }
            OpKind::Dot => format!("dot {}", self.vs(ops)),
            OpKind::Reduce { kind, axis } => {
                format!("reduce {} {} axis {axis}", reduce_name(*kind), self.vs(ops))
            }
            OpKind::Condition => format!("condition {}", self.vs(ops)).trim_end().to_string(),
            OpKind::Yield => format!("yield {}", self.vs(ops)).trim_end().to_string(),
            OpKind::Return => format!("return {}", self.vs(ops)).trim_end().to_string(),
            OpKind::For | OpKind::If | OpKind::While => {
                unreachable!("region ops print in region_op")
            }
        }
    }

    /// `for`/`if`/`while`: header line, regions, closing brace with the location.
    fn region_op(&mut self, op: &Op, mut line: String, depth: usize) {
        let indent = "  ".repeat(depth);
        let result_tys = if op.results.is_empty() {
            String::new()
        } else {
            format!(" : {}", self.types(&op.results))
        };
        let empty = Block::default();
        let region = |i: usize| op.regions.get(i).unwrap_or(&empty);
        match op.kind {
            OpKind::For => {
                let r = region(0);
                let iv = r
                    .args
                    .first()
                    .map(|&a| self.typed_args(&[a]))
                    .unwrap_or_else(|| "%?: i32".into());
                let bounds: Vec<String> = (0..3)
                    .map(|i| {
                        op.operands
                            .get(i)
                            .map(|&v| self.v(v))
                            .unwrap_or("%?".into())
                    })
                    .collect();
                let _ = write!(
                    line,
                    "for {iv} = {} to {} step {}",
                    bounds[0], bounds[1], bounds[2]
                );
                let inits = op.operands.get(3..).unwrap_or(&[]);
                let iters = r.args.get(1..).unwrap_or(&[]);
                if !inits.is_empty() || !iters.is_empty() {
                    let pairs: Vec<String> = (0..inits.len().max(iters.len()))
                        .map(|i| {
                            let arg = iters
                                .get(i)
                                .map(|&a| self.typed_args(&[a]))
                                .unwrap_or("%?: ?".into());
                            let init = inits.get(i).map(|&v| self.v(v)).unwrap_or("%?".into());
                            format!("{arg} = {init}")
                        })
                        .collect();
                    let _ = write!(line, " iter({})", pairs.join(", "));
                }
                let _ = writeln!(self.out, "{line}{result_tys} {{");
                self.block(r, depth + 1);
            }
            OpKind::If => {
                let _ = writeln!(
                    self.out,
                    "{line}if {}{result_tys} {{",
                    self.vs(&op.operands)
                );
                self.block(region(0), depth + 1);
                let _ = writeln!(self.out, "{indent}}} else {{");
                self.block(region(1), depth + 1);
            }
            OpKind::While => {
                let before = region(0);
                let pairs: Vec<String> = (0..op.operands.len().max(before.args.len()))
                    .map(|i| {
                        let arg = before
                            .args
                            .get(i)
                            .map(|&a| self.typed_args(&[a]))
                            .unwrap_or("%?: ?".into());
                        let init = op
                            .operands
                            .get(i)
                            .map(|&v| self.v(v))
                            .unwrap_or("%?".into());
                        format!("{arg} = {init}")
                    })
                    .collect();
                let _ = writeln!(
                    self.out,
                    "{line}while ({}){result_tys} {{",
                    pairs.join(", ")
                );
                self.block(before, depth + 1);
                let body = region(1);
                let _ = writeln!(
                    self.out,
                    "{indent}}} do ({}) {{",
                    self.typed_args(&body.args)
                );
                self.block(body, depth + 1);
            }
            _ => unreachable!("only for/if/while have regions"),
        }
        self.out.push_str(&with_loc(format!("{indent}}}"), op.loc));
        self.out.push('\n');
    }
}

/// A kernel or parameter name: bare when an identifier, quoted otherwise.
fn name_text(s: &str) -> String {
    if is_identifier(s) {
        s.to_string()
    } else {
        quote(s)
    }
}

/// Appends `loc(l:c)` (aligned to [`LOC_COLUMN`]) unless the location is unknown.
fn with_loc(mut line: String, loc: Loc) -> String {
    if loc == Loc::default() {
        return line;
    }
    let pad = LOC_COLUMN.saturating_sub(line.chars().count()).max(1);
    line.push_str(&" ".repeat(pad));
    let _ = write!(line, "loc({}:{})", loc.line, loc.col);
    line
}

/// The mnemonic of an op kind as printed (`add`, `cmp lt`, `for`), for diagnostics.
pub fn mnemonic(kind: &OpKind) -> String {
    match kind {
        OpKind::Const(_) => "const".into(),
        OpKind::ProgramId(_) => "program_id".into(),
        OpKind::NumPrograms(_) => "num_programs".into(),
        OpKind::Arange { .. } => "arange".into(),
        OpKind::Splat { .. } => "splat".into(),
        OpKind::Broadcast { .. } => "broadcast".into(),
        OpKind::ExpandDims { .. } => "expand_dims".into(),
        OpKind::Trans => "trans".into(),
        OpKind::Unary(u) => unary_name(*u).into(),
        OpKind::Binary(b) => binary_name(*b).into(),
        OpKind::Cmp(p) => format!("cmp {}", cmp_name(*p)),
        OpKind::Select => "select".into(),
        OpKind::Cast(_) => "cast".into(),
        OpKind::AddPtr => "add_ptr".into(),
        OpKind::Load { .. } => "load".into(),
        OpKind::Store { .. } => "store".into(),
        OpKind::Dot => "dot".into(),
        OpKind::Reduce { kind, .. } => format!("reduce {}", reduce_name(*kind)),
        OpKind::Handoff => "handoff".into(),
        OpKind::For => "for".into(),
        OpKind::If => "if".into(),
        OpKind::While => "while".into(),
        OpKind::Condition => "condition".into(),
        OpKind::Yield => "yield".into(),
        OpKind::Return => "return".into(),
    }
}
