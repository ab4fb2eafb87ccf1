//! A [`StagedStore`] as CUDA: a barrier (the staging bytes were a buffer other threads may
//! still read), each thread's fragment pairs written into the alloc as packed 32-bit words,
//! a barrier, then each row's 16-byte chunks loaded from the alloc and stored to global
//! memory in the store's own lane groups, pointer and mask recomputed per chunk.

use super::elem_index::ElemIndex;
use super::emitter::Emitter;
use super::remat::Scope;
use super::tile_map::TileMap;
use super::CodegenError;
use crate::gpu_ir::StagedStore;
use crate::ir::{OpKind, ScalarType};

type Res<T> = Result<T, CodegenError>;

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
        let (p, v) = (Self::operand(op, 0)?, Self::operand(op, 1)?);
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
        let al = self.prog.alloc(s.buf).clone();
        let pack = match self.f.ty(p).elem.pointee() {
            Some(ScalarType::F16) => "attn_pack_f16",
            _ => "attn_pack_bf16",
        };
        let buf = "attn_staged";
        self.w.open("");
        self.w.line(format!(
            "unsigned short* const {buf} = {};",
            super::async_copy::buf_name(s.buf)
        ));
        let sync = self.block_sync();
        self.w.line(format!(
            "{sync} // the staged tile reuses buffers others may still read"
        ));
        self.w.open_unrolled_pairs("s", pm.slots());
        let at = al.offset(&pm.row("s"), &pm.col("s"));
        let (lo, hi) = (
            self.at_in(v, self.map(p), "s")?,
            self.at_in(v, self.map(p), "(s + 1)")?,
        );
        let write = format!("attn_sts2({buf} + {at}, {pack}({lo}, {hi}));");
        match pm.writer("s") {
            Some(w) => self.w.line(format!("if ({w}) {write}")),
            None => self.w.line(write),
        }
        self.w.close("");
        self.w.line(format!("{sync} // the staged tile is written"));
        self.open_copy_passes(al.rows, s.map.lanes);
        let cc = "attn_col";
        let chunk = ElemIndex::Coords {
            row: "attn_row".into(),
            col: cc.into(),
        };
        let ptr = self.remat_expr(p, &chunk, &Scope::InPlace)?;
        let store = format!("attn_st16({ptr}, {buf} + {});", al.offset("attn_row", cc));
        let call = if has_mask {
            let mask = self.remat_expr(Self::operand(op, 2)?, &chunk, &Scope::InPlace)?;
            format!("if ({mask}) {store}")
        } else {
            store
        };
        self.chunk_loop(
            s.map.row_contiguous,
            al.cols,
            s.map.lanes,
            s.map.chunk,
            &[call],
        );
        self.w.close("");
        self.w.close("");
        self.converted.clear();
        Ok(())
    }
}
