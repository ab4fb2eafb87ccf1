//! Global-memory loads and stores. A lane touches memory only when the thread owns the
//! slot and its mask is true; masked-off lanes of a load take `other` (or zero) without
//! dereferencing their pointer, so out-of-bounds addresses under a false mask are safe.

use super::elementwise::zero;
use super::emitter::Emitter;
use super::tile_map::TileMap;
use super::CodegenError;
use crate::ir::{Elem, Op, OpKind, ScalarType, ValueId};

type Res<T> = Result<T, CodegenError>;

impl<'f> Emitter<'f> {
    /// The condition under which slot `s` of an access shaped like operand 0 happens: the
    /// slot holds an element (loads) or this thread is its one writer (stores), and the
    /// mask is true.
    fn access_guard(
        &self,
        op: &Op,
        mask: Option<usize>,
        s: &str,
        store: bool,
    ) -> Res<Option<String>> {
        let access = self.access_map(op)?;
        let own = match (self.f.ty(access.0).is_scalar(), store) {
            (true, _) => None,
            (false, false) => access.1.owned(s),
            (false, true) => access.1.writer(s),
        };
        let m = mask
            .map(|i| Self::operand(op, i).and_then(|v| self.at_in(v, access.1, s)))
            .transpose()?;
        Ok(match (own, m) {
            (Some(o), Some(m)) => Some(format!("{o} && {m}")),
            (Some(c), None) | (None, Some(c)) => Some(c),
            (None, None) => None,
        })
    }

    /// The value whose distribution an access runs in (the loaded result, or the stored
    /// pointer) and that distribution.
    fn access_map(&self, op: &Op) -> Res<(ValueId, TileMap)> {
        let v = match op.kind {
            OpKind::Load { .. } => Self::result(op)?,
            _ => Self::operand(op, 0)?,
        };
        Ok((v, self.map(v)))
    }

    pub(crate) fn emit_load(&mut self, op: &'f Op, has_mask: bool, has_other: bool) -> Res<()> {
        let res = Self::result(op)?;
        let p = Self::operand(op, 0)?;
        let other = if has_other {
            Some(Self::operand(op, 2)?)
        } else {
            None
        };
        let fallback = |e: &Self, s: &str| -> Res<String> {
            match other {
                Some(o) => e.at_in(o, e.map(res), s),
                None => Ok(zero(e.elem(res)).to_string()),
            }
        };
        let mask = has_mask.then_some(1);
        if self.f.ty(res).is_scalar() {
            let name = self.bind_new(res);
            let t = super::c_types::reg_type(self.elem(res));
            let ptr = self.at(p, "")?;
            let e = match self.access_guard(op, mask, "", false)? {
                Some(g) => format!("({g}) ? attn_ld({ptr}) : {}", fallback(self, "")?),
                None => format!("attn_ld({ptr})"),
            };
            self.w.line(format!("{t} {name} = {e};"));
            return Ok(());
        }
        if self.try_fuse_load(op, res) {
            return Ok(());
        }
        self.convert_operands(op, self.map(res))?;
        let name = self.define_tile(res);
        let slots = self.map(res).slots();
        self.w.open_unrolled("s", slots);
        let ptr = self.at_in(p, self.map(res), "s")?;
        match self.access_guard(op, mask, "s", false)? {
            Some(g) => {
                let ptr = self.hoisted_address(&ptr);
                self.w
                    .line(format!("{name}[s] = {};", fallback(self, "s")?));
                self.w.line(format!("if ({g}) {name}[s] = attn_ld({ptr});"));
            }
            None => self.w.line(format!("{name}[s] = attn_ld({ptr});")),
        }
        self.w.close("");
        Ok(())
    }

    /// Leaves a load whose only user is a later dot's operand staging to that staging (see
    /// [`super::staged_load`]) when its mask and `other` need no registers; returns whether
    /// it did.
    fn try_fuse_load(&mut self, op: &Op, res: ValueId) -> bool {
        let operands_free = op.operands[1..]
            .iter()
            .all(|&v| self.f.ty(v).is_scalar() || self.is_deferred(v));
        if !self.is_stageable(res) || !operands_free {
            return false;
        }
        self.set_fused(res);
        self.w
            .line("// (read from global memory by the dot's operand staging)");
        true
    }

    /// Slot `slot` of a tile load `op` as one expression (`other` where masked or unowned).
    pub(crate) fn load_element(&self, op: &Op, slot: &str) -> Res<String> {
        let res = Self::result(op)?;
        let map = self.map(res);
        let ptr = self.at_in(Self::operand(op, 0)?, map, slot)?;
        let (has_mask, other) = match op.kind {
            OpKind::Load {
                has_mask,
                has_other,
            } => (
                has_mask,
                if has_other {
                    self.at_in(Self::operand(op, 2)?, map, slot)?
                } else {
                    zero(self.elem(res)).to_string()
                },
            ),
            _ => return Err(CodegenError::Malformed("load_element of a non-load".into())),
        };
        Ok(
            match self.access_guard(op, has_mask.then_some(1), slot, false)? {
                Some(g) => format!("(({g}) ? attn_ld({ptr}) : {other})"),
                None => format!("attn_ld({ptr})"),
            },
        )
    }

    pub(crate) fn emit_store(&mut self, op: &'f Op, has_mask: bool) -> Res<()> {
        let (p, v) = (Self::operand(op, 0)?, Self::operand(op, 1)?);
        let mask = has_mask.then_some(2);
        let scalar = self.f.ty(p).is_scalar();
        if !scalar {
            self.convert_operands(op, self.map(p))?;
            if self.stores_pairs(op, has_mask) {
                return self.emit_paired_store(op, mask);
            }
        }
        if scalar {
            // Every thread stores the same value: its own later loads then see it.
            let st = format!("attn_st({}, {});", self.at(p, "")?, self.at(v, "")?);
            let guarded = match self.access_guard(op, mask, "", true)? {
                Some(g) => format!("if ({g}) {st}"),
                None => st,
            };
            self.w.line(guarded);
            return Ok(());
        }
        let pm = self.map(p);
        let (ptr, val) = (self.at_in(p, pm, "s")?, self.at_in(v, pm, "s")?);
        self.w.open_unrolled("s", pm.slots());
        self.emit_guarded_store(op, mask, &ptr, &[val])?;
        self.w.close("");
        Ok(())
    }

    /// `attn_st{N}(ptr, values...)` of slot `s` under the access's guard, the address
    /// computed before the guard (see [`Self::hoisted_address`]).
    fn emit_guarded_store(
        &mut self,
        op: &Op,
        mask: Option<usize>,
        ptr: &str,
        values: &[String],
    ) -> Res<()> {
        let f = if values.len() == 2 {
            "attn_st2"
        } else {
            "attn_st"
        };
        let values = values.join(", ");
        match self.access_guard(op, mask, "s", true)? {
            Some(g) => {
                let ptr = self.hoisted_address(ptr);
                self.w.line(format!("if ({g}) {f}({ptr}, {values});"));
            }
            None => self.w.line(format!("{f}({ptr}, {values});")),
        }
        Ok(())
    }

    /// Binds the address `ptr` of an unrolled slot's guarded access to a local before the
    /// guard and returns the local's name. Computed inside each guard, the address is
    /// control-dependent on it, so ptxas cannot share its row part between the unrolled
    /// slots of a row: a division by a run-time extent (the MLA history's exchange rows
    /// divide by `heads_per_rank`) was redone for each of 64 stores, half of the history's
    /// epilogue (H200: 20.5k → 9.2k cycles a program). The index math is defined for every
    /// element (the mask guards only the access), so computing it unguarded is exact.
    fn hoisted_address(&mut self, ptr: &str) -> &'static str {
        self.w.line(format!("const auto attn_addr = {ptr};"));
        "attn_addr"
    }

    /// Whether a store of an `Mma`-fragment tile writes each lane's two adjacent columns
    /// (slots `2i`, `2i + 1`: columns `2t`, `2t + 1` of one row) in one access: 16- or
    /// 32-bit elements, the pointer contiguous along the columns in pairs aligned to the
    /// pair's size, the mask the same for both, and no column past the tile. A partial's
    /// f32 [64, 512] rows then leave in 8-byte stores, half the instructions.
    fn stores_pairs(&self, op: &Op, has_mask: bool) -> bool {
        let (Ok(p), Ok(v)) = (Self::operand(op, 0), Self::operand(op, 1)) else {
            return false;
        };
        let TileMap::Mma(map) = self.map(p) else {
            return false;
        };
        let Some(elem) = self.f.ty(p).elem.pointee() else {
            return false;
        };
        let bytes = elem.size_bytes() as u64;
        let same_mask = !has_mask
            || Self::operand(op, 2).is_ok_and(|m| {
                self.prog
                    .axis
                    .get(m)
                    .constancy
                    .get(1)
                    .is_some_and(|&c| c >= 2)
            });
        self.f.ty(p).rank() == 2
            && map.column_pairs()
            && matches!(elem, ScalarType::F32 | ScalarType::Bf16 | ScalarType::F16)
            && self.f.ty(v).rank() == 2
            && self.prog.axis.is_contiguous(p, 1, 2, 2 * bytes)
            && same_mask
    }

    /// The store of [`Self::stores_pairs`]: one `attn_st2` per slot pair.
    fn emit_paired_store(&mut self, op: &'f Op, mask: Option<usize>) -> Res<()> {
        let (p, v) = (Self::operand(op, 0)?, Self::operand(op, 1)?);
        let pm = self.map(p);
        let ptr = self.at_in(p, pm, "s")?;
        let src = self.pack_source(v, pm);
        let values = [self.at_in(src, pm, "s")?, self.at_in(src, pm, "(s + 1)")?];
        self.w.open_unrolled_pairs("s", pm.slots());
        self.emit_guarded_store(op, mask, &ptr, &values)?;
        self.w.close("");
        Ok(())
    }

    /// What a packed 16-bit store reads for the stored value `v`: the f32 operand of a cast
    /// to the stored type, when it is held as the stored tile is. Packing rounds to nearest
    /// even as the cast does, so the bits are the same, and each pair costs one packing
    /// convert instead of two rounding converts before it (P1's staged epilogue carried 128
    /// of those a thread).
    pub(super) fn pack_source(&self, v: ValueId, map: TileMap) -> ValueId {
        // `v` is the stored value, so a cast defining it casts to the stored type.
        let operand = self
            .def_op(v)
            .filter(|d| matches!(d.kind, OpKind::Cast(_)))
            .and_then(|d| d.operands.first().copied());
        match operand {
            Some(x)
                if self.elem(x) == Elem::Scalar(ScalarType::F32)
                    && !self.converted.contains_key(&v.0)
                    && self.map(x) == map =>
            {
                x
            }
            _ => v,
        }
    }
}
