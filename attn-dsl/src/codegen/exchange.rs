//! Ops that move elements between threads, through the shared-memory scratch buffer:
//! `broadcast`, `trans` and `reduce`. Each writes its source tile to scratch in row-major
//! order between two barriers and then reads what every owned output slot needs. The
//! barrier before the write protects readers of the previous scratch use; control flow is
//! uniform (conditions are scalars, identical in every thread), so barriers are legal.

use super::c_types::{from_scratch, reg_type, round_to, scratch_type, to_scratch};
use super::elem_index::ElemIndex;
use super::elementwise::{binary, zero};
use super::emitter::Emitter;
use super::recompute::check_broadcast;
use super::tile_map::TileMap;
use super::CodegenError;
use crate::ir::{BinaryOp, Elem, Op, ReduceKind, ScalarType, ValueId};

type Res<T> = Result<T, CodegenError>;

impl<'f> Emitter<'f> {
    /// Opens a scope, declares `sx` (the scratch buffer typed for `x`'s elements) and writes
    /// tile `x` into it between two barriers. The caller closes the scope.
    fn stage_tile(&mut self, x: ValueId) -> Res<()> {
        let elem = self.elem(x);
        let (st, bytes) = scratch_type(elem);
        let m = self.map(x);
        self.need_scratch(m.elems() * bytes);
        self.w.open("");
        self.w
            .line(format!("{st}* sx = reinterpret_cast<{st}*>(attn_scratch);"));
        self.emit_block_sync();
        self.w.open_unrolled("s", m.slots());
        let store = format!(
            "sx[{}] = {};",
            m.flat("s"),
            to_scratch(elem, &self.at(x, "s")?)
        );
        match m.writer("s") {
            Some(g) => self.w.line(format!("if ({g}) {store}")),
            None => self.w.line(store),
        }
        self.w.close("");
        self.emit_block_sync();
        Ok(())
    }

    /// Fills every slot of `res` with `read(flat index expr)` (an index into `sx`).
    fn gather(&mut self, res: ValueId, name: &str, index: impl Fn(&str) -> String) -> Res<()> {
        self.gather_into(self.elem(res), self.map(res), name, index)
    }

    /// Fills every slot of register array `name` (elements `elem`, distribution `m`) with
    /// `read(flat index expr)` (an index into `sx`).
    fn gather_into(
        &mut self,
        elem: Elem,
        m: TileMap,
        name: &str,
        index: impl Fn(&str) -> String,
    ) -> Res<()> {
        self.w.open_unrolled("s", m.slots());
        self.w
            .line(format!("const int f = {};", m.flat_clamped("s")));
        let v = from_scratch(elem, &format!("sx[{}]", index("f")));
        self.w.line(format!("{name}[s] = {v};"));
        self.w.close("");
        Ok(())
    }

    /// `convert_layout`: copies tile `v` into a new register array in distribution `want`
    /// through the scratch buffer and returns the array's name. Used where two layouts meet
    /// (an operand whose distribution differs from the one its consumer works in).
    pub(crate) fn convert(&mut self, v: ValueId, want: TileMap) -> Res<String> {
        let elem = self.elem(v);
        let base = format!("{}_cvt", self.name(v)?);
        let name = self.fresh_name(&base);
        self.w.line(format!(
            "// (layout conversion of {} through shared memory)",
            self.name(v)?
        ));
        self.w
            .line(format!("{} {name}[{}];", reg_type(elem), want.slots()));
        self.stage_tile(v)?;
        self.gather_into(elem, want, &name, |f| f.to_string())?;
        self.w.close("");
        Ok(name)
    }

    pub(crate) fn emit_broadcast(&mut self, op: &'f Op) -> Res<()> {
        let (x, res) = (Self::operand(op, 0)?, Self::result(op)?);
        if self.try_defer(op, res)? || self.try_broadcast_rows(x, res)? {
            return Ok(());
        }
        let (src, dst) = (self.shape(x).to_vec(), self.shape(res).to_vec());
        check_broadcast(&src, &dst)?;
        let name = self.define_tile(res);
        self.stage_tile(x)?;
        let index = move |f: &str| {
            ElemIndex::Flat(f.to_string())
                .broadcast_source(&src, &dst)
                .flat(&src)
        };
        self.gather(res, &name, index)?;
        self.w.close("");
        Ok(())
    }

    pub(crate) fn emit_trans(&mut self, op: &'f Op) -> Res<()> {
        let (x, res) = (Self::operand(op, 0)?, Self::result(op)?);
        let (m, n) = match self.shape(x) {
            [m, n] => (*m, *n),
            s => return Err(CodegenError::Malformed(format!("trans of shape {s:?}"))),
        };
        let name = self.define_tile(res);
        self.stage_tile(x)?;
        // res[r][c] (res is n x m) = x[c][r].
        self.gather(res, &name, move |f| {
            format!("({f} % {m}) * {n} + {f} / {m}")
        })?;
        self.w.close("");
        Ok(())
    }

    /// Reduction along `axis` in ascending index order, like the CPU executor: sums start
    /// from zero and accumulate in f32 (wrapping for integers), rounded to the dtype at the
    /// end; `max`/`min` start from the first element and ignore NaN.
    pub(crate) fn emit_reduce(&mut self, op: &'f Op, kind: ReduceKind, axis: usize) -> Res<()> {
        if self.try_reduce_rows(op, kind, axis)? {
            return Ok(());
        }
        let (x, res) = (Self::operand(op, 0)?, Self::result(op)?);
        let t = self.scalar(x)?;
        let elem = self.elem(x);
        let item = from_scratch(elem, "sx[base + k * stride]");
        // (initial value, first k, combine step, final conversion)
        let (init, k0, step, finish) = match kind {
            ReduceKind::Sum if t.is_float() => (
                "0.0f".to_string(),
                0,
                binary(BinaryOp::Add, ScalarType::F32, "acc", &item)?,
                round_to(t, "acc".into()),
            ),
            ReduceKind::Sum => (
                zero(elem).to_string(),
                0,
                binary(BinaryOp::Add, t, "acc", &item)?,
                "acc".into(),
            ),
            ReduceKind::Max | ReduceKind::Min => {
                let bop = if kind == ReduceKind::Max {
                    BinaryOp::Max
                } else {
                    BinaryOp::Min
                };
                (
                    from_scratch(elem, "sx[base]"),
                    1,
                    binary(bop, t, "acc", &item)?,
                    "acc".into(),
                )
            }
        };
        // Reduced elements of output `f`: sx[f * row + k * stride] for k < count.
        let (count, stride, row) = match (self.shape(x), axis) {
            ([n], 0) => (*n, 1, 0),
            ([_, n], 1) => (*n, 1, *n),
            ([m, n], 0) => (*m, *n, 1),
            (s, a) => {
                return Err(CodegenError::Malformed(format!(
                    "reduce axis {a} of shape {s:?}"
                )))
            }
        };
        let base = move |f: &str| match row {
            0 => "0".to_string(),
            1 => f.to_string(),
            r => format!("{f} * {r}"),
        };
        let rt = reg_type(elem);
        let scalar_out = self.f.ty(res).is_scalar();
        let name = self.define_tile(res);
        self.stage_tile(x)?;
        self.w.line(format!("const int stride = {stride};"));
        let body = |e: &mut Self, target: String, f: &str| {
            e.w.line(format!("const int base = {};", base(f)));
            e.w.line(format!("{rt} acc = {init};"));
            e.w.line(format!(
                "for (int k = {k0}; k < {count}; ++k) acc = {step};"
            ));
            e.w.line(format!("{target} = {finish};"));
        };
        if scalar_out {
            self.w.open("");
            body(self, name.clone(), "0");
            self.w.close("");
        } else {
            let m = self.map(res);
            self.w.open_unrolled("s", m.slots());
            self.w
                .line(format!("const int f = {};", m.flat_clamped("s")));
            body(self, format!("{name}[s]"), "f");
            self.w.close("");
        }
        self.w.close("");
        Ok(())
    }
}
