//! Loop-invariant A operands held as `mma.sync` A fragments in registers.
//!
//! In attention the query tile is the A operand of `dot(q, k)` in every iteration of the key
//! loop but never changes. Instead of staging it through shared memory each iteration, the
//! emitter stages it once before the loop and loads each warp's A fragments (four 32-bit
//! registers of two 16-bit values per 16×16 step, for the warp's 16-row slabs) into a register
//! array that the loop's dots read directly. The f32 copy of the tile is then dead, so the
//! loop also holds half the registers for it (two bf16 per register instead of one f32).

use super::dot::MmaPlan;
use super::emitter::Emitter;
use super::tile_map::MmaMap;
use super::CodegenError;
use crate::ir::{Block, OpKind, ScalarType, ValueId};

type Res<T> = Result<T, CodegenError>;

impl<'f> Emitter<'f> {
    /// Before a loop with body `body`: holds the A operand of every tensor-core dot directly
    /// in `body` whose A is a stored tile defined outside the loop and whose accumulator lives
    /// in fragments. Returns the held values (to release after the loop).
    pub(crate) fn hold_invariant_a_operands(&mut self, body: &'f Block) -> Res<Vec<ValueId>> {
        let inside = crate::gpu_ir::remat::defined_in(self.f, body);
        let mut held = Vec::new();
        for &o in &body.ops {
            let op = self.f.op(o);
            if op.kind != OpKind::Dot || op.operands.len() < 3 || op.results.is_empty() {
                continue;
            }
            let (a, acc, res) = (op.operands[0], op.operands[2], op.results[0]);
            let stored = !self.f.ty(a).is_scalar() && !self.is_deferred(a) && self.name(a).is_ok();
            let sixteen = matches!(
                self.f.ty(a).elem.scalar(),
                Some(ScalarType::Bf16 | ScalarType::F16)
            );
            if inside[a.0 as usize] || !stored || !sixteen || self.held_a_fragments(a).is_some() {
                continue;
            }
            let (Some(map), [m, k], [_, n]) =
                (self.fragment_map(acc, res), self.shape(a), self.shape(res))
            else {
                continue;
            };
            self.emit_a_fragments(a, &MmaPlan::new(*m, *n, *k), map)?;
            held.push(a);
        }
        Ok(held)
    }

    /// Stages `a` once and loads this warp's A fragments into a new register array.
    fn emit_a_fragments(&mut self, a: ValueId, p: &MmaPlan, map: MmaMap) -> Res<()> {
        let steps = p.kp / 16;
        let base = self.name(a)?.to_string();
        let name = self.fresh_name(&format!("{base}_frag"));
        self.w.line(format!(
            "// ({base}: loop-invariant A operand, held as mma fragments across the loop)"
        ));
        self.w.line(format!(
            "unsigned {name}[{}];",
            map.slabs_per_warp * steps * 4
        ));
        self.on_owner_of(a, |e| e.load_a_fragments(a, p, map, &name))?;
        self.hold_a(a, name);
        Ok(())
    }

    /// Stages `a` and loads this warp's fragments of it into `name`.
    fn load_a_fragments(&mut self, a: ValueId, p: &MmaPlan, map: MmaMap, name: &str) -> Res<()> {
        let steps = p.kp / 16;
        self.need_scratch(p.staged_a_bytes());
        self.w.open("");
        self.w.line(super::dot_shared::staged_a_pointer(0));
        self.emit_block_sync();
        self.stage_a(a, p)?;
        self.emit_block_sync();
        self.w.open_unrolled("j", map.slabs_per_warp);
        // Warps past the last slab read the last one (their fragments are never used).
        self.w.line(format!(
            "const int slab = attn_min({}, {});",
            map.slab("j"),
            map.slabs - 1
        ));
        self.w.line(format!(
            "const unsigned short* pa = sa + (slab * 16 + attn_g) * {} + 2 * attn_t4;",
            p.ld
        ));
        self.w.open_unrolled("kk", steps);
        for (q, off) in [
            (0, "kk * 16".to_string()),
            (1, format!("{} + kk * 16", 8 * p.ld)),
            (2, "kk * 16 + 8".to_string()),
            (3, format!("{} + kk * 16 + 8", 8 * p.ld)),
        ] {
            self.w.line(format!(
                "{name}[(j * {steps} + kk) * 4 + {q}] = *reinterpret_cast<const unsigned*>(pa + {off});"
            ));
        }
        self.w.close("");
        self.w.close("");
        self.w.close("");
        Ok(())
    }
}
