//! A [`StagedStore`] as CUDA: a barrier (the staging bytes were a buffer other threads may
//! still read), each thread's fragment pairs written into the alloc as packed 32-bit words,
//! a barrier, then each row's 16-byte chunks loaded from the alloc and stored to global
//! memory in the store's own lane groups, pointer and mask recomputed per chunk.

use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::mma_map::MmaMap;
use super::remat::Scope;
use super::tile_map::TileMap;
use super::CodegenError;
use crate::gpu_ir::StagedStore;
use crate::ir::{Op, OpKind, ScalarType};

type Res<T> = Result<T, CodegenError>;

/// The C++ name of the staging alloc's pointer.
const STAGED: &str = "attn_staged";

impl<'f> Emitter<'f> {
    pub(crate) fn emit_staged_store(&mut self, s: &'f StagedStore) -> Res<()> {
        let op = self.f.op(s.store);
        let OpKind::Store { has_mask } = op.kind else {
            return Err(CodegenError::Malformed(
                "a staged store of a non-store".into(),
            ));
        };
        self.op_comment(op);
        // Warpgroup MMAs still in flight may read the bytes the staging reuses (the leading
        // barrier orders other threads' reads, not this thread's asynchronous ones): such a
        // store stays a direct one.
        if !self.pending_mma.is_empty() {
            let r = self.emit_store(op, has_mask);
            self.converted.clear();
            return r;
        }
        let p = Self::operand(op, 0)?;
        let TileMap::Mma(pm) = self.map(p) else {
            return Err(CodegenError::Malformed(
                "a staged store of a tile not in fragments".into(),
            ));
        };
        if !pm.column_pairs() {
            return Err(CodegenError::Malformed(
                "a staged store of fragments without column pairs".into(),
            ));
        }
        self.convert_operands(op, self.map(p))?;
        self.w.open("");
        self.w.line(format!(
            "unsigned short* const {STAGED} = {};",
            super::async_copy::buf_name(s.buf)
        ));
        self.stage_fragments(op, s, &pm)?;
        self.store_staged_rows(op, s, has_mask)?;
        self.w.close("");
        self.converted.clear();
        Ok(())
    }

    /// Between two barriers, each thread's fragment pairs of the stored value into the
    /// staging alloc as packed 16-bit pairs.
    fn stage_fragments(&mut self, op: &Op, s: &StagedStore, pm: &MmaMap) -> Res<()> {
        let (p, v) = (Self::operand(op, 0)?, Self::operand(op, 1)?);
        let pack = match self.f.ty(p).elem.pointee() {
            Some(ScalarType::F16) => "attn_pack_f16",
            _ => "attn_pack_bf16",
        };
        let sync = self.block_sync();
        self.w.line(format!(
            "{sync} // the staged tile reuses buffers others may still read"
        ));
        self.w.open_unrolled_pairs("s", pm.slots());
        let at = self.prog.alloc(s.buf).offset(&pm.row("s"), &pm.col("s"));
        let src = self.pack_source(v, self.map(p));
        let (lo, hi) = (
            self.at_in(src, self.map(p), "s")?,
            self.at_in(src, self.map(p), "(s + 1)")?,
        );
        let write = format!("attn_sts2({STAGED} + {at}, {pack}({lo}, {hi}));");
        match pm.writer("s") {
            Some(w) => self.w.line(format!("if ({w}) {write}")),
            None => self.w.line(write),
        }
        self.w.close("");
        self.w.line(format!("{sync} // the staged tile is written"));
        Ok(())
    }

    /// Each row of the staging alloc to global memory in 16-byte chunks, `lanes` threads a
    /// row, the store's pointer and mask recomputed at each chunk.
    fn store_staged_rows(&mut self, op: &Op, s: &StagedStore, has_mask: bool) -> Res<()> {
        let al = self.prog.alloc(s.buf).clone();
        self.open_copy_passes(al.rows, s.map.lanes);
        let cc = "attn_col";
        let chunk = ElemIndex::Coords {
            row: "attn_row".into(),
            col: cc.into(),
        };
        let ptr = self.remat_expr(Self::operand(op, 0)?, &chunk, &Scope::InPlace)?;
        let store = format!(
            "attn_st16({ptr}, {STAGED} + {});",
            al.offset("attn_row", cc)
        );
        let call = if has_mask {
            let mask = self.remat_expr(Self::operand(op, 2)?, &chunk, &Scope::InPlace)?;
            format!("if ({mask}) {store}")
        } else {
            store
        };
        let m = s.map;
        self.chunk_loop(m.row_contiguous, al.cols, m.lanes, m.chunk, &[call]);
        self.w.close("");
        Ok(())
    }
}
