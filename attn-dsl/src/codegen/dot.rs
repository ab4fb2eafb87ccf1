//! `dot(a[M,K], b[K,N], acc[M,N])`.
//!
//! bf16/f16 operands go through tensor cores: A is staged row-major and B transposed
//! (`[N][K]`, so each thread's pair of K-consecutive elements is one 32-bit word) in the
//! scratch buffer as 16-bit values, zero-padded to multiples of 16 (M, K) and 8 (N), with
//! rows padded by 8 halves so the fragment loads of a warp hit 32 distinct banks. Warps take
//! 16×8 output tiles round-robin and run `mma.sync.m16n8k16` over K in ascending 16-steps,
//! accumulating in f32 registers; the accumulator enters and leaves the fragments through
//! the scratch buffer (the accumulator and the operands never need scratch at the same
//! time, so the need is the larger of the two). f32 operands use a plain FMA loop over
//! staged operands, K ascending, which matches the CPU executor's f32 accumulation exactly.

use super::c_types::to_scratch;
use super::emitter::Emitter;
use super::tile_map::{MmaMap, TileMap};
use super::CodegenError;
use crate::ir::{Elem, Op, OpKind, ScalarType, ValueId};

type Res<T> = Result<T, CodegenError>;

/// Geometry of the tensor-core path for one dot.
pub(crate) struct MmaPlan {
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    /// K padded to 16 (the MMA's K step).
    pub(crate) kp: usize,
    /// Row pitch of the staged A and Bᵀ, in 16-bit elements.
    pub(crate) ld: usize,
    /// 16×8 output tiles along N, and in total.
    tiles_n: usize,
    tiles: usize,
    /// Byte offset of Bᵀ in the scratch buffer.
    b_offset: usize,
    scratch_bytes: usize,
}

impl MmaPlan {
    pub(crate) fn new(m: usize, n: usize, k: usize) -> Self {
        let (mp, np, kp) = (
            m.next_multiple_of(16),
            n.next_multiple_of(8),
            k.next_multiple_of(16),
        );
        let ld = kp + 8;
        let b_offset = (mp * ld * 2).next_multiple_of(16);
        let operands = b_offset + np * ld * 2;
        let (tiles_n, tiles) = (np / 8, (mp / 16) * (np / 8));
        MmaPlan {
            m,
            n,
            k,
            kp,
            ld,
            tiles_n,
            tiles,
            b_offset,
            scratch_bytes: operands.max(m * n * 4),
        }
    }

    /// Bytes of A's rows staged in the scratch buffer (16-bit elements, `ld` apart).
    pub(crate) fn staged_a_bytes(&self) -> usize {
        self.m.next_multiple_of(16) * self.ld * 2
    }
}

impl<'f> Emitter<'f> {
    pub(crate) fn emit_dot(&mut self, op: &'f Op) -> Res<()> {
        let (a, b, acc) = (
            Self::operand(op, 0)?,
            Self::operand(op, 1)?,
            Self::operand(op, 2)?,
        );
        let res = Self::result(op)?;
        let (m, k, n) = match (self.shape(a), self.shape(b)) {
            ([m, k], [k2, n]) if k == k2 => (*m, *k, *n),
            (sa, sb) => {
                return Err(CodegenError::Malformed(format!(
                    "dot of shapes {sa:?} and {sb:?}"
                )))
            }
        };
        match self.scalar(a)? {
            ScalarType::F32 => self.emit_dot_fma(a, b, acc, res, (m, k, n)),
            t @ (ScalarType::Bf16 | ScalarType::F16) => {
                let plan = MmaPlan::new(m, n, k);
                match self.fragment_map(acc, res) {
                    Some(map) => self.emit_dot_in_fragments(a, b, acc, res, t, plan, map),
                    None => self.emit_dot_mma(a, b, acc, res, t, plan),
                }
            }
            t => Err(CodegenError::Unsupported(format!(
                "dot on {t} operands (allowed: bf16, f16, f32)"
            ))),
        }
    }

    /// Writes every owned element of tile `x` to `dst[index]`, where `index` is an
    /// expression in the element's row `r` and column `c`. With `pairs` (an `Mma` fragment
    /// tile of 16-bit elements, `index` even at even columns), each lane's slot pair
    /// `(2i, 2i + 1)`, columns `2t` and `2t + 1` of one row, goes in one 32-bit store.
    fn scatter(
        &mut self,
        x: ValueId,
        dst: &str,
        index: &str,
        conv: impl Fn(&str) -> String,
        pairs: bool,
    ) -> Res<()> {
        let m = self.map(x);
        let (r, c) = m.index("s").coords(self.shape(x));
        let st = if pairs {
            let (lo, hi) = (self.at(x, "s")?, self.at(x, "(s + 1)")?);
            self.w.open_unrolled_pairs("s", m.slots());
            format!(
                "*reinterpret_cast<unsigned*>(&{dst}[{index}]) = (unsigned){} | ((unsigned){} << 16);",
                conv(&lo),
                conv(&hi)
            )
        } else {
            let xs = self.at(x, "s")?;
            self.w.open_unrolled("s", m.slots());
            format!("{dst}[{index}] = {};", conv(&xs))
        };
        self.w.line(format!("const int r = {r}, c = {c};"));
        match m.writer("s") {
            Some(g) => self.w.line(format!("if ({g}) {st}")),
            None => self.w.line(st),
        }
        self.w.close("");
        Ok(())
    }

    fn emit_dot_fma(
        &mut self,
        a: ValueId,
        b: ValueId,
        acc: ValueId,
        res: ValueId,
        (m, k, n): (usize, usize, usize),
    ) -> Res<()> {
        self.need_scratch((m * k + k * n) * 4);
        let name = self.define_tile(res);
        let acc_s = self.at_in(acc, self.map(res), "s")?;
        self.w.open("");
        self.w
            .line("float* sa = reinterpret_cast<float*>(attn_scratch);");
        self.w.line(format!("float* sb = sa + {};", m * k));
        self.emit_block_sync();
        self.scatter(a, "sa", &format!("r * {k} + c"), str::to_string, false)?;
        self.scatter(b, "sb", &format!("r * {n} + c"), str::to_string, false)?;
        self.emit_block_sync();
        let rm = self.map(res);
        self.w.open_unrolled("s", rm.slots());
        self.w
            .line(format!("const int f = {};", rm.flat_clamped("s")));
        self.w.line(format!("const int r = f / {n}, c = f % {n};"));
        self.w.line(format!("float sum = {acc_s};"));
        self.w.line(format!(
            "for (int k = 0; k < {k}; ++k) sum = fmaf(sa[r * {k} + k], sb[k * {n} + c], sum);"
        ));
        self.w.line(format!("{name}[s] = sum;"));
        self.w.close("");
        self.w.close("");
        Ok(())
    }

    /// The scalar an accumulator tile was splat from (`dot(a, b)` without `acc`), if any.
    pub(crate) fn splat_source(&self, acc: ValueId) -> Option<ValueId> {
        let op = self.def_op(acc)?;
        matches!(op.kind, OpKind::Splat { .. })
            .then(|| op.operands.first().copied())
            .flatten()
    }

    fn emit_dot_mma(
        &mut self,
        a: ValueId,
        b: ValueId,
        acc: ValueId,
        res: ValueId,
        t: ScalarType,
        p: MmaPlan,
    ) -> Res<()> {
        self.need_scratch(p.scratch_bytes);
        let name = self.define_tile(res);
        let warps = self.threads / 32;
        let per_warp = p.tiles.div_ceil(warps);
        let tile_coords = |w: &mut super::writer::SourceWriter| {
            w.line(format!("const int tile = warp + j * {warps};"));
            w.line(format!(
                "const int r0 = (tile / {}) * 16 + g, c0 = (tile % {}) * 8 + 2 * t4;",
                p.tiles_n, p.tiles_n
            ));
        };
        self.w.open("");
        self.w
            .line("const int warp = tid / 32, g = (tid % 32) / 4, t4 = tid % 4;");
        self.w.line(format!("float frag[{per_warp}][4];"));
        // 1. Accumulator into fragments.
        if let Some(x) = self.splat_source(acc) {
            let xn = self.name(x)?.to_string();
            self.w.open_unrolled("j", per_warp);
            self.w.line(format!(
                "frag[j][0] = frag[j][1] = frag[j][2] = frag[j][3] = {xn};"
            ));
            self.w.close("");
        } else {
            self.w
                .line("float* sc = reinterpret_cast<float*>(attn_scratch);");
            self.emit_block_sync();
            self.scatter(
                acc,
                "sc",
                &format!("r * {} + c", p.n),
                str::to_string,
                false,
            )?;
            self.emit_block_sync();
            self.w.open_unrolled("j", per_warp);
            tile_coords(&mut self.w);
            self.w.open_unrolled("q", 4);
            self.w
                .line("const int r = r0 + (q >> 1) * 8, c = c0 + (q & 1);");
            self.w.line(format!(
                "frag[j][q] = (tile < {} && r < {} && c < {}) ? sc[r * {} + c] : 0.0f;",
                p.tiles, p.m, p.n, p.n
            ));
            self.w.close("");
            self.w.close("");
        }
        // 2. Operands into scratch as 16-bit values, zero-padded.
        self.stage_operands(Some(a), b, &p)?;
        // 3. Tensor-core loop, K ascending.
        let (mma, ld) = (mma_fn(t), p.ld);
        self.w.open_unrolled("j", per_warp);
        tile_coords(&mut self.w);
        self.w.open(format!("if (tile < {})", p.tiles));
        self.w.line(format!(
            "const unsigned short* pa = sa + r0 * {ld} + 2 * t4;"
        ));
        self.w.line(format!(
            "const unsigned short* pb = sb + ((tile % {}) * 8 + g) * {ld} + 2 * t4;",
            p.tiles_n
        ));
        self.w.line("#pragma unroll");
        self.w
            .open(format!("for (int k0 = 0; k0 < {}; k0 += 16)", p.kp));
        let word =
            |base: &str, off: String| format!("*reinterpret_cast<const unsigned*>({base} + {off})");
        self.w.line(format!(
            "{mma}(frag[j], {}, {}, {}, {}, {}, {});",
            word("pa", "k0".into()),
            word("pa", format!("{} + k0", 8 * ld)),
            word("pa", "k0 + 8".into()),
            word("pa", format!("{} + k0 + 8", 8 * ld)),
            word("pb", "k0".into()),
            word("pb", "k0 + 8".into()),
        ));
        self.w.close("");
        self.w.close("");
        self.w.close("");
        // 4. Fragments back to the owners of the result.
        self.w
            .line("float* sd = reinterpret_cast<float*>(attn_scratch);");
        self.emit_block_sync();
        self.w.open_unrolled("j", per_warp);
        tile_coords(&mut self.w);
        self.w.open_unrolled("q", 4);
        self.w
            .line("const int r = r0 + (q >> 1) * 8, c = c0 + (q & 1);");
        self.w.line(format!(
            "if (tile < {} && r < {} && c < {}) sd[r * {} + c] = frag[j][q];",
            p.tiles, p.m, p.n, p.n
        ));
        self.w.close("");
        self.w.close("");
        self.emit_block_sync();
        let rm = self.map(res);
        self.w.open_unrolled("s", rm.slots());
        self.w
            .line(format!("{name}[s] = sd[{}];", rm.flat_clamped("s")));
        self.w.close("");
        self.w.close("");
        Ok(())
    }
}

/// The prelude's `mma.sync` wrapper for operands of type `t`.
fn mma_fn(t: ScalarType) -> &'static str {
    if t == ScalarType::Bf16 {
        "attn_mma_bf16_16816"
    } else {
        "attn_mma_f16_16816"
    }
}

impl<'f> Emitter<'f> {
    /// Writes A row-major and B transposed into the scratch buffer as 16-bit values,
    /// zero-padded to the MMA tile, between two barriers (declares `sa` and `sb`). `a` is
    /// `None` when the dot reads A from fragments held in registers.
    fn stage_operands(&mut self, a: Option<ValueId>, b: ValueId, p: &MmaPlan) -> Res<()> {
        if a.is_some() {
            self.w
                .line("unsigned short* sa = reinterpret_cast<unsigned short*>(attn_scratch);");
        }
        self.w.line(format!(
            "unsigned short* sb = reinterpret_cast<unsigned short*>(attn_scratch + {});",
            p.b_offset
        ));
        self.emit_block_sync();
        if let Some(a) = a {
            self.stage_a(a, p)?;
        }
        let (ld, elem) = (p.ld, self.elem(b));
        self.scatter(
            b,
            "sb",
            &format!("c * {ld} + r"),
            |x| to_scratch(elem, x),
            false,
        )?;
        self.zero_padding("sb", p.n.next_multiple_of(8), p.n, p);
        self.emit_block_sync();
        Ok(())
    }

    /// Writes A (`[m, k]`) row-major into `sa`, zero-padded to 16 rows and 16 columns.
    pub(crate) fn stage_a(&mut self, a: ValueId, p: &MmaPlan) -> Res<()> {
        let (ld, elem) = (p.ld, self.elem(a));
        // Each lane's two adjacent columns in one 32-bit store (P of MLA's PV: 8 stores a
        // thread instead of 16).
        let pairs = matches!(self.map(a), TileMap::Mma(m) if m.column_pairs())
            && ld.is_multiple_of(2)
            && matches!(elem, Elem::Scalar(ScalarType::Bf16 | ScalarType::F16));
        self.scatter(
            a,
            "sa",
            &format!("r * {ld} + c"),
            |x| to_scratch(elem, x),
            pairs,
        )?;
        self.zero_padding("sa", p.m.next_multiple_of(16), p.m, p);
        Ok(())
    }

    /// Zeroes the padding rows (`live_rows..rows`) and columns (`k..kp`) of a staged operand.
    fn zero_padding(&mut self, buf: &str, rows: usize, live_rows: usize, p: &MmaPlan) {
        if rows == live_rows && p.kp == p.k {
            return;
        }
        self.w.line(format!(
            "for (int i = tid; i < {}; i += {}) {{",
            rows * p.kp,
            self.threads
        ));
        self.w.line(format!(
            "    const int row = i / {}, k = i % {};",
            p.kp, p.kp
        ));
        self.w.line(format!(
            "    if (row >= {live_rows} || k >= {}) {buf}[row * {} + k] = 0;",
            p.k, p.ld
        ));
        self.w.line("}");
    }

    /// The `Mma` distribution of `res` when the accumulator can live in its registers as
    /// fragments: `res` is an `Mma` tile with more than one column and `acc` has the same
    /// distribution (or is a splat or recomputed tile, readable in any distribution).
    pub(crate) fn fragment_map(&self, acc: ValueId, res: ValueId) -> Option<MmaMap> {
        let TileMap::Mma(map) = self.map(res) else {
            return None;
        };
        let acc_ok = self.is_deferred(acc)
            || self.splat_source(acc).is_some()
            || self.map(acc) == TileMap::Mma(map);
        (!map.is_rows() && acc_ok).then_some(map)
    }

    /// The `Mma` distribution of A when its accumulator-layout fragments can be repacked into
    /// A fragments in registers: same rows and warps as the result, K a multiple of 16.
    pub(crate) fn repackable_a(&self, a: ValueId, res: &MmaMap, p: &MmaPlan) -> Option<MmaMap> {
        let TileMap::Mma(am) = self.map(a) else {
            return None;
        };
        // Column-split fragments hold only a column block of A's rows per warp, but every
        // warp needs all of K: those are staged instead.
        let fits = !am.is_rows()
            && !am.col_split()
            && !res.col_split()
            && am.m == res.m
            && am.same_grid(res)
            && p.k == p.kp;
        fits.then_some(am)
    }

    /// `dot` whose accumulator and result are `Mma` fragments in registers: the result
    /// starts as a copy of the accumulator, each warp runs `mma.sync` on its own 16-row
    /// slabs over every 8-column tile, K ascending, and nothing leaves the registers. Only
    /// the operands go through the scratch buffer.
    #[allow(clippy::too_many_arguments)]
    fn emit_dot_in_fragments(
        &mut self,
        a: ValueId,
        b: ValueId,
        acc: ValueId,
        res: ValueId,
        t: ScalarType,
        p: MmaPlan,
        map: MmaMap,
    ) -> Res<()> {
        self.need_scratch(p.b_offset + p.n.next_multiple_of(8) * p.ld * 2);
        let name = self.init_accumulator(acc, res, map)?;
        self.w.open("");
        let held_a = self.held_a_fragments(a);
        let repacked = self.repackable_a(a, &map, &p);
        let staged = held_a.is_none() && repacked.is_none();
        self.stage_operands(staged.then_some(a), b, &p)?;
        let (ld, tiles_n) = (p.ld, map.tiles_n);
        self.w.open_unrolled("j", map.slabs_per_warp);
        self.w.line(format!("const int slab = {};", map.slab("j")));
        let guarded = map.ragged_slabs();
        if guarded {
            self.w.open(format!("if (slab < {})", map.slabs));
        }
        self.w.line("#pragma unroll");
        self.w
            .open(format!("for (int k0 = 0; k0 < {}; k0 += 16)", p.kp));
        let word =
            |base: &str, off: String| format!("*reinterpret_cast<const unsigned*>({base} + {off})");
        let from = match (&held_a, repacked) {
            (Some(frag), _) => super::dot_shared::AFrom::Held(frag.clone()),
            (None, Some(am)) => super::dot_shared::AFrom::Repacked(am),
            (None, None) => super::dot_shared::AFrom::Staged,
        };
        self.emit_a_step(a, &from, &p, t)?;
        self.w.open_unrolled("nt", tiles_n);
        self.w.line(format!(
            "const unsigned short* pb = sb + ({} * 8 + attn_g) * {ld} + 2 * attn_t4;",
            map.col_tile("nt")
        ));
        self.w.line(format!(
            "{}(&{name}[(j * {tiles_n} + nt) * 4], a0, a1, a2, a3, {}, {});",
            mma_fn(t),
            word("pb", "k0".into()),
            word("pb", "k0 + 8".into()),
        ));
        self.w.close("");
        self.w.close("");
        if guarded {
            self.w.close("");
        }
        self.w.close("");
        self.w.close("");
        Ok(())
    }

    /// The expression of slot `s` a dot's result fragments start from: a splat's scalar or
    /// the accumulator's own fragments.
    fn accumulator_init(&self, acc: ValueId, map: MmaMap) -> Res<String> {
        match self.splat_source(acc) {
            Some(x) => Ok(self.name(x)?.to_string()),
            None => self.at_in(acc, TileMap::Mma(map), "s"),
        }
    }

    /// Defines the result fragments of a dot as a copy of its accumulator (a splat's scalar
    /// or the accumulator's own fragments) and returns the result's name.
    pub(crate) fn init_accumulator(
        &mut self,
        acc: ValueId,
        res: ValueId,
        map: MmaMap,
    ) -> Res<String> {
        let init = self.accumulator_init(acc, map)?;
        let name = self.define_tile(res);
        self.w.open_unrolled("s", map.slots());
        self.w.line(format!("{name}[s] = {init};"));
        self.w.close("");
        Ok(name)
    }

    /// [`Self::init_accumulator`] into the array of loop-carried `into` (see
    /// `gpu_ir::pv_wait_behind`): the MMAs accumulate in place in it, so the loop's yield
    /// copies nothing out of registers still in flight.
    pub(crate) fn init_carried_accumulator(
        &mut self,
        acc: ValueId,
        res: ValueId,
        into: ValueId,
        map: MmaMap,
    ) -> Res<String> {
        let name = self.name(into)?.to_string();
        let init = self.accumulator_init(acc, map)?;
        if init != format!("{name}[s]") {
            self.w.open_unrolled("s", map.slots());
            self.w.line(format!("{name}[s] = {init};"));
            self.w.close("");
        }
        self.alias(res, &name);
        Ok(name)
    }
}
