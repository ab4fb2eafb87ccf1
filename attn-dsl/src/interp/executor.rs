//! The interpreter loop: runs one program instance at a time over the grid (x fastest),
//! evaluating each op of the structured IR on whole tiles.

use super::cpu_backend::CpuArg;
use super::dot::dot;
use super::elementwise::{binary, cast, compare, select, unary};
use super::error::{malformed, ExecError, Fault};
use super::memory::{Memory, Site};
use super::numerics::{round_float, wrap_int};
use super::reduce::reduce;
use super::shape_ops::{broadcast, splat, transpose};
use super::tile::{same_len, Ptr, TileData};
use crate::ir::{Block, Function, Loc, Op, OpId, OpKind, Scalar, ScalarType, Type, ValueId};

/// Tunables of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecOptions {
    /// A `while` whose body runs more often than this (in one program instance) is an
    /// error, so a kernel bug is a CI failure instead of a hang.
    pub max_while_iterations: u64,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            max_while_iterations: 1 << 20,
        }
    }
}

/// What a run did: for tests (e.g. that masked lanes moved no bytes) and for the CLI.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecStats {
    /// Program instances run (the grid's size).
    pub programs: u64,
    /// Ops evaluated, counting each loop iteration's ops again.
    pub ops_executed: u64,
    /// Bytes read by active (mask-true) load lanes.
    pub bytes_loaded: u64,
    /// Bytes written by active (mask-true) store lanes.
    pub bytes_stored: u64,
}

/// Runs `f` over `grid` with `args` (checked against `f.params` before anything runs).
pub fn run_with(
    f: &Function,
    grid: [u32; 3],
    args: Vec<CpuArg<'_>>,
    opts: &ExecOptions,
) -> Result<ExecStats, ExecError> {
    let (mut mem, entry) = Memory::bind(f, args)?;
    if grid.contains(&0) {
        return Err(ExecError::EmptyGrid { grid });
    }
    let mut env: Vec<Option<TileData>> = vec![None; f.values.len()];
    let mut stats = ExecStats::default();
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                env.iter_mut().for_each(|v| *v = None);
                let mut p = Program {
                    f,
                    mem: &mut mem,
                    env: &mut env,
                    opts,
                    ops: 0,
                    pid: [x, y, z],
                    grid,
                };
                p.run(&entry)?;
                stats.ops_executed += p.ops;
                stats.programs += 1;
            }
        }
    }
    stats.bytes_loaded = mem.bytes_loaded;
    stats.bytes_stored = mem.bytes_stored;
    Ok(stats)
}

/// How control leaves a block.
enum Flow {
    /// Fell off the end (only valid for the kernel body).
    Next,
    Yield(Vec<TileData>),
    Condition(bool, Vec<TileData>),
    Return,
}

/// Attaches an op's location to a numeric fault.
trait AtLoc<T> {
    fn at(self, loc: Loc) -> Result<T, ExecError>;
}

impl<T> AtLoc<T> for Result<T, Fault> {
    fn at(self, loc: Loc) -> Result<T, ExecError> {
        self.map_err(|e| e.at(loc))
    }
}

/// One program instance in flight.
struct Program<'r, 'a> {
    f: &'r Function,
    mem: &'r mut Memory<'a>,
    env: &'r mut Vec<Option<TileData>>,
    opts: &'r ExecOptions,
    ops: u64,
    pid: [u32; 3],
    grid: [u32; 3],
}

impl<'r> Program<'r, '_> {
    fn run(&mut self, entry: &[TileData]) -> Result<(), ExecError> {
        let body = &self.f.body;
        self.bind(&body.args, entry.to_vec(), Loc::default())?;
        match self.run_block(body)? {
            Flow::Next | Flow::Return => Ok(()),
            Flow::Yield(_) | Flow::Condition(..) => Err(malformed(
                "kernel body ends in yield/condition instead of return",
            )
            .at(Loc::default())),
        }
    }

    fn run_block(&mut self, b: &'r Block) -> Result<Flow, ExecError> {
        for &id in &b.ops {
            match self.exec(id)? {
                Flow::Next => {}
                flow => return Ok(flow),
            }
        }
        Ok(Flow::Next)
    }

    fn exec(&mut self, id: OpId) -> Result<Flow, ExecError> {
        let f = self.f;
        let op = f
            .ops
            .get(id.0 as usize)
            .ok_or_else(|| malformed(format!("no op {}", id.0)).at(Loc::default()))?;
        self.ops += 1;
        match &op.kind {
            OpKind::For => self.exec_for(op),
            OpKind::If => self.exec_if(op),
            OpKind::While => self.exec_while(op),
            OpKind::Yield => Ok(Flow::Yield(self.values(&op.operands, op.loc)?)),
            OpKind::Condition => {
                let (c, vars) = op
                    .operands
                    .split_first()
                    .ok_or_else(|| malformed("condition without operand").at(op.loc))?;
                let c = self.val(*c, op.loc)?.scalar_bool().at(op.loc)?;
                Ok(Flow::Condition(c, self.values(vars, op.loc)?))
            }
            OpKind::Return => Ok(Flow::Return),
            OpKind::Store { has_mask } => self.exec_store(op, *has_mask).map(|()| Flow::Next),
            _ => {
                let data = self.compute(op)?;
                let result = self.single_result(op)?;
                self.set(result, data);
                Ok(Flow::Next)
            }
        }
    }

    /// Evaluates an op with exactly one result and no regions.
    fn compute(&mut self, op: &Op) -> Result<TileData, ExecError> {
        let loc = op.loc;
        let ty = self.f.ty(self.single_result(op)?).clone();
        Ok(match &op.kind {
            OpKind::Const(s) => const_data(*s),
            OpKind::ProgramId(a) => TileData::Int(vec![self.axis(&self.pid, *a, loc)?]),
            OpKind::NumPrograms(a) => TileData::Int(vec![self.axis(&self.grid, *a, loc)?]),
            OpKind::Arange { n } => TileData::Int((0..*n as i64).collect()),
            OpKind::Splat { shape } => {
                splat(self.operand(op, 0)?, shape.iter().product()).at(loc)?
            }
            OpKind::Broadcast { shape } => {
                let from = &self.operand_ty(op, 0)?.shape;
                broadcast(self.operand(op, 0)?, from, shape).at(loc)?
            }
            OpKind::ExpandDims { .. } | OpKind::Handoff => self.operand(op, 0)?.clone(),
            OpKind::Trans => {
                transpose(self.operand(op, 0)?, &self.operand_ty(op, 0)?.shape).at(loc)?
            }
            OpKind::Unary(u) => unary(*u, scalar_of(&ty, loc)?, self.operand(op, 0)?).at(loc)?,
            OpKind::Binary(b) => binary(
                *b,
                scalar_of(&ty, loc)?,
                self.operand(op, 0)?,
                self.operand(op, 1)?,
            )
            .at(loc)?,
            OpKind::Cmp(p) => compare(*p, self.operand(op, 0)?, self.operand(op, 1)?).at(loc)?,
            OpKind::Select => select(
                self.operand(op, 0)?,
                self.operand(op, 1)?,
                self.operand(op, 2)?,
            )
            .at(loc)?,
            OpKind::Cast(to) => cast(*to, self.operand(op, 0)?).at(loc)?,
            OpKind::AddPtr => add_ptr(self.operand(op, 0)?, self.operand(op, 1)?).at(loc)?,
            OpKind::Load {
                has_mask,
                has_other,
            } => self.exec_load(op, *has_mask, *has_other, &ty)?,
            OpKind::Dot => self.exec_dot(op)?,
            OpKind::Reduce { kind, axis } => {
                let xt = self.operand_ty(op, 0)?;
                reduce(
                    *kind,
                    scalar_of(xt, loc)?,
                    self.operand(op, 0)?,
                    &xt.shape,
                    *axis,
                )
                .at(loc)?
            }
            other => return Err(malformed(format!("{other:?} has no single value")).at(loc)),
        })
    }

    fn exec_load(
        &mut self,
        op: &Op,
        has_mask: bool,
        has_other: bool,
        ty: &Type,
    ) -> Result<TileData, ExecError> {
        let elem = scalar_of(ty, op.loc)?;
        let env: &Vec<Option<TileData>> = self.env;
        let get = |i: usize| operand_in(env, op, i);
        let ptrs = get(0)?.ptrs().at(op.loc)?;
        let mask = if has_mask {
            Some(get(1)?.bools().at(op.loc)?)
        } else {
            None
        };
        let other = if has_other { Some(get(2)?) } else { None };
        self.mem.load(ptrs, mask, other, elem, self.site(op.loc))
    }

    fn exec_store(&mut self, op: &Op, has_mask: bool) -> Result<(), ExecError> {
        let elem = self
            .operand_ty(op, 0)?
            .elem
            .pointee()
            .ok_or_else(|| malformed("store through a non-pointer").at(op.loc))?;
        let env: &Vec<Option<TileData>> = self.env;
        let get = |i: usize| operand_in(env, op, i);
        let ptrs = get(0)?.ptrs().at(op.loc)?;
        let value = get(1)?;
        let mask = if has_mask {
            Some(get(2)?.bools().at(op.loc)?)
        } else {
            None
        };
        let site = self.site(op.loc);
        self.mem.store(ptrs, value, mask, elem, site)
    }

    fn exec_dot(&self, op: &Op) -> Result<TileData, ExecError> {
        let (at, bt) = (self.operand_ty(op, 0)?, self.operand_ty(op, 1)?);
        let (&[m, k], &[_, n]) = (at.shape.as_slice(), bt.shape.as_slice()) else {
            return Err(malformed(format!("dot of {at} and {bt}")).at(op.loc));
        };
        let a = self.operand(op, 0)?.floats().at(op.loc)?;
        let b = self.operand(op, 1)?.floats().at(op.loc)?;
        let acc = self.operand(op, 2)?.floats().at(op.loc)?;
        dot(a, b, acc, m, k, n).map(TileData::Float).at(op.loc)
    }

    /// `for iv in (lo..hi).step_by(step)`, carrying values through region 0.
    fn exec_for(&mut self, op: &'r Op) -> Result<Flow, ExecError> {
        let loc = op.loc;
        if op.operands.len() < 3 {
            return Err(malformed("for needs lo, hi, step").at(loc));
        }
        let bound = |i: usize| self.operand(op, i).and_then(|d| d.scalar_int().at(loc));
        let (lo, hi, step) = (bound(0)?, bound(1)?, bound(2)?);
        if step <= 0 {
            return Err(ExecError::NonPositiveStep {
                line: loc.line,
                col: loc.col,
                step,
            });
        }
        let body = self.region(op, 0)?;
        let mut iters = self.values(&op.operands[3..], loc)?;
        let mut iv = lo; // i64: cannot overflow where an i32 induction variable would wrap
        while iv < hi {
            let mut args = vec![TileData::Int(vec![iv])];
            args.append(&mut iters);
            self.bind(&body.args, args, loc)?;
            match self.run_block(body)? {
                Flow::Yield(next) => iters = next,
                Flow::Return => return Ok(Flow::Return),
                _ => return Err(malformed("for body must end in yield").at(loc)),
            }
            iv += step;
        }
        self.bind(&op.results, iters, loc)?;
        Ok(Flow::Next)
    }

    fn exec_if(&mut self, op: &'r Op) -> Result<Flow, ExecError> {
        let c = self.operand(op, 0)?.scalar_bool().at(op.loc)?;
        let region = self.region(op, if c { 0 } else { 1 })?;
        match self.run_block(region)? {
            Flow::Yield(vals) => self.bind(&op.results, vals, op.loc).map(|()| Flow::Next),
            Flow::Return => Ok(Flow::Return),
            _ => Err(malformed("if branch must end in yield").at(op.loc)),
        }
    }

    /// `while`: region 0 computes the condition (and the values passed on), region 1 the
    /// next loop variables. Bounded by `ExecOptions::max_while_iterations`.
    fn exec_while(&mut self, op: &'r Op) -> Result<Flow, ExecError> {
        let loc = op.loc;
        let (before, after) = (self.region(op, 0)?, self.region(op, 1)?);
        let mut vars = self.values(&op.operands, loc)?;
        let mut iterations = 0u64;
        loop {
            self.bind(&before.args, vars, loc)?;
            vars = match self.run_block(before)? {
                Flow::Condition(false, finals) => {
                    self.bind(&op.results, finals, loc)?;
                    return Ok(Flow::Next);
                }
                Flow::Condition(true, vals) => vals,
                Flow::Return => return Ok(Flow::Return),
                _ => return Err(malformed("while condition region must end in condition").at(loc)),
            };
            iterations += 1;
            if iterations > self.opts.max_while_iterations {
                let limit = self.opts.max_while_iterations;
                return Err(ExecError::WhileLimit {
                    line: loc.line,
                    col: loc.col,
                    limit,
                });
            }
            self.bind(&after.args, vars, loc)?;
            vars = match self.run_block(after)? {
                Flow::Yield(next) => next,
                Flow::Return => return Ok(Flow::Return),
                _ => return Err(malformed("while body must end in yield").at(loc)),
            };
        }
    }

    // ---- value plumbing ----

    fn site(&self, loc: Loc) -> Site {
        Site {
            loc,
            program: self.pid,
        }
    }

    fn val(&self, v: ValueId, loc: Loc) -> Result<&TileData, ExecError> {
        value_in(self.env, v, loc)
    }

    fn operand(&self, op: &Op, i: usize) -> Result<&TileData, ExecError> {
        operand_in(self.env, op, i)
    }

    fn operand_ty(&self, op: &Op, i: usize) -> Result<&'r Type, ExecError> {
        let f = self.f;
        let v = op
            .operands
            .get(i)
            .ok_or_else(|| malformed(format!("missing operand {i}")).at(op.loc))?;
        f.values
            .get(v.0 as usize)
            .map(|d| &d.ty)
            .ok_or_else(|| malformed(format!("unknown value %{}", v.0)).at(op.loc))
    }

    fn values(&self, vs: &[ValueId], loc: Loc) -> Result<Vec<TileData>, ExecError> {
        vs.iter().map(|&v| self.val(v, loc).cloned()).collect()
    }

    fn set(&mut self, v: ValueId, d: TileData) {
        if let Some(slot) = self.env.get_mut(v.0 as usize) {
            *slot = Some(d);
        }
    }

    /// Assigns `vals` to `targets` (block arguments or op results), counts must agree.
    fn bind(
        &mut self,
        targets: &[ValueId],
        vals: Vec<TileData>,
        loc: Loc,
    ) -> Result<(), ExecError> {
        if targets.len() != vals.len() || targets.iter().any(|t| t.0 as usize >= self.env.len()) {
            let msg = format!("{} values passed to {} slots", vals.len(), targets.len());
            return Err(malformed(msg).at(loc));
        }
        for (&t, d) in targets.iter().zip(vals) {
            self.set(t, d);
        }
        Ok(())
    }

    fn single_result(&self, op: &Op) -> Result<ValueId, ExecError> {
        match op.results.as_slice() {
            [r] if (r.0 as usize) < self.env.len() => Ok(*r),
            rs => Err(malformed(format!(
                "{:?} must have one result, has {}",
                op.kind,
                rs.len()
            ))
            .at(op.loc)),
        }
    }

    fn region(&self, op: &'r Op, i: usize) -> Result<&'r Block, ExecError> {
        op.regions
            .get(i)
            .ok_or_else(|| malformed(format!("{:?} lacks region {i}", op.kind)).at(op.loc))
    }

    fn axis(&self, of: &[u32; 3], axis: u8, loc: Loc) -> Result<i64, ExecError> {
        of.get(axis as usize)
            .map(|&x| x as i64)
            .ok_or_else(|| malformed(format!("grid axis {axis} out of range 0..3")).at(loc))
    }
}

fn value_in(env: &[Option<TileData>], v: ValueId, loc: Loc) -> Result<&TileData, ExecError> {
    env.get(v.0 as usize)
        .and_then(Option::as_ref)
        .ok_or_else(|| malformed(format!("value %{} used before it is defined", v.0)).at(loc))
}

fn operand_in<'e>(
    env: &'e [Option<TileData>],
    op: &Op,
    i: usize,
) -> Result<&'e TileData, ExecError> {
    let v = op
        .operands
        .get(i)
        .ok_or_else(|| malformed(format!("{:?} lacks operand {i}", op.kind)).at(op.loc))?;
    value_in(env, *v, op.loc)
}

fn scalar_of(ty: &Type, loc: Loc) -> Result<ScalarType, ExecError> {
    ty.elem
        .scalar()
        .ok_or_else(|| malformed(format!("expected a numeric type, got {ty}")).at(loc))
}

fn const_data(s: Scalar) -> TileData {
    match s {
        Scalar::Int(v, ty) if ty.is_float() => TileData::Float(vec![round_float(ty, v as f64)]),
        Scalar::Int(v, ty) => TileData::Int(vec![wrap_int(ty, v)]),
        Scalar::Float(v, ty) => TileData::Float(vec![round_float(ty, v)]),
        Scalar::Bool(b) => TileData::Bool(vec![b]),
    }
}

/// Advances each pointer by its offset (in elements; 64-bit like GPU address arithmetic).
fn add_ptr(p: &TileData, off: &TileData) -> Result<TileData, Fault> {
    let (p, off) = (p.ptrs()?, off.ints()?);
    same_len(p.len(), off.len())?;
    Ok(TileData::Ptr(
        p.iter()
            .zip(off)
            .map(|(p, &o)| Ptr {
                arg: p.arg,
                off: p.off.wrapping_add(o),
            })
            .collect(),
    ))
}
