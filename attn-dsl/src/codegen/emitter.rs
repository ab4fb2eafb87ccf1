//! The emitter proper: walks the specialized IR in program order and writes one block of
//! C++ per op, with structured control flow mapped onto C++ loops and ifs.

use super::c_types::{reg_type, scalar_param_type, storage_type};
use super::names::NameTable;
use super::tile_map::TileMap;
use super::writer::SourceWriter;
use super::CodegenError;
use crate::gpu_ir::{GpuBlock, GpuOp, GpuProgram};
use crate::ir::{Elem, Function, Op, OpId, OpKind, ParamKind, ScalarType, ValueId};

/// Largest dynamic shared memory any supported GPU grants one block (sm_90: 227 KiB).
pub(crate) const MAX_SHARED_BYTES: usize = 227 * 1024;

/// State of one emission: the output text, value names and the scratch-memory high-water mark.
pub(crate) struct Emitter<'f> {
    pub(crate) f: &'f Function,
    /// The GPU-level program being emitted (allocs, copies, barriers around the tile ops).
    pub(crate) prog: &'f GpuProgram,
    /// Stage counters of the pipelined loops around the point being emitted, innermost last.
    pub(crate) stage_vars: Vec<String>,
    /// The stage counter of each pipelined loop (declared with its prologue).
    pub(crate) loop_stage: std::collections::BTreeMap<u32, String>,
    /// Row sums emitted as per-lane partials (see `deferred_sum`).
    pub(crate) partial_rows: std::collections::BTreeSet<u32>,
    /// Uses of each value (operands of ops, yields included).
    use_counts: Vec<u32>,
    /// Reductions a copy computed once per row before its chunk loop: value → (variable,
    /// the row index expression it holds).
    pub(crate) hoisted: std::collections::BTreeMap<u32, (String, String)>,
    /// Values a recomputed loop or branch binds while its statements are generated (its
    /// scalars, induction variable, carried tiles at the batch's element): value → (C++
    /// expression, the element it is valid at; `None` for scalars).
    pub(crate) remat_locals: std::cell::RefCell<
        std::collections::BTreeMap<u32, (String, Option<super::elem_index::ElemIndex>)>,
    >,
    pub(crate) w: SourceWriter,
    pub(crate) threads: usize,
    /// Bytes of dynamic shared memory the ops emitted so far need (max over ops).
    pub(crate) scratch_bytes: usize,
    /// The warpgroup whose owned region is being emitted (see `owned_region`).
    pub(crate) owner: Option<u32>,
    /// Bytes of scratch the owned regions need, a warpgroup.
    pub(crate) owned_scratch_bytes: usize,
    /// Bytes of the handoff buffers placed so far (see `handoff`).
    pub(crate) handoff_bytes: usize,
    /// What of the scratch buffer may have been read since the last barrier
    /// (`scratch_ledger`).
    pub(crate) scratch_reads: super::scratch_ledger::ScratchReads,
    /// Whether the op being emitted reported its scratch accesses to the ledger.
    pub(crate) scratch_reported: bool,
    /// Bytes of the largest row reduction's cross-warp slot (`scratch_ledger`; 0: none).
    pub(crate) reduction_slot_bytes: usize,
    /// Whether row reductions may take slots of their own and handoffs may move off the
    /// bytes the last reads touched (not when the scratch they add did not fit).
    pub(crate) reduction_slots_allowed: bool,
    /// The text of the owned regions emitted since the current op's mark: the ledger reads
    /// past them (`scratch_ledger`).
    pub(crate) owned_spans: Vec<std::ops::Range<usize>>,
    /// What the ledger takes as read at the next block's entry instead of everything (a
    /// loop body whose back edge it computed, see `warpgroup_loops`).
    pub(crate) block_entry_reads: Option<super::scratch_ledger::ScratchReads>,
    /// The ledger at the end of the last block emitted.
    pub(crate) block_end_reads: super::scratch_ledger::ScratchReads,
    /// The ops after the one being emitted in its block (a handoff looks at the dot it
    /// feeds).
    pub(crate) following: &'f [GpuOp],
    /// Dot A operands a handoff staged where the dot reads them (value → scratch offset,
    /// and where the text stood once the handoff was done: nothing after may touch the
    /// scratch buffer before the dot reads it).
    pub(crate) staged_by_handoff: std::collections::BTreeMap<u32, (usize, usize)>,
    /// Each handoff's offset among those bytes (by result value), kept for the program's
    /// second emission (the unsplit one of a split program).
    pub(crate) handoff_at: std::collections::BTreeMap<u32, usize>,
    /// The warpgroup a loop copied per warpgroup is being emitted for (`warpgroup_loops`).
    pub(crate) only_warpgroup: Option<u32>,
    /// Values an owned region defined and kept (out of scope after it).
    pub(crate) region_locals: std::collections::BTreeSet<u32>,
    /// Tiles an owned region declared before it opened, for the op defining them inside
    /// (`define_tile`) to fill in place (see `owned_region`).
    pub(crate) predeclared: std::collections::BTreeSet<u32>,
    /// The tensor maps the kernel takes after its parameters (TMA copies).
    pub(crate) tensor_maps: Vec<super::TensorMapParam>,
    names: Vec<Option<String>>,
    table: NameTable,
    /// The op defining each value (None for block arguments).
    pub(crate) defs: Vec<Option<OpId>>,
    /// Tiles recomputed at each use instead of stored (see [`super::recompute`]).
    deferred: Vec<bool>,
    /// Operands of the op being emitted that were converted to its distribution, and the
    /// arrays that hold them (cleared after every op).
    pub(crate) converted: std::collections::BTreeMap<u32, String>,
    /// Loads that may be fused into a dot's operand staging, and those that were.
    stageable: Vec<bool>,
    fused: Vec<bool>,
    /// Loop-invariant A operands held as mma fragments, and their register arrays.
    held_a: std::collections::BTreeMap<u32, String>,
    /// Warpgroup MMAs issued without their wait, in issue order (dot result, accumulator
    /// array, its registers), each waited for at the dot's `MmaWait`.
    pub(crate) pending_mma: Vec<(u32, String, usize)>,
    /// A wait the next op, a row scale, emits at the head of both arms of its branch.
    pub(crate) scale_wait: Option<super::wgmma::PendingWait>,
    /// Warpgroup MMAs (by result) that accumulate in place into a loop's carried value,
    /// waited for in the next iteration (`GpuOp::MmaWaitCarried`).
    pub(crate) carried_acc: std::collections::BTreeMap<u32, ValueId>,
    /// Warpgroup MMAs whose register A fragments a `PackA` packed ahead (dot result, array).
    pub(crate) packed_a: std::collections::BTreeMap<u32, String>,
    /// Warpgroup MMAs (by result) whose first k-steps' A fragments a [`GpuOp::HoldA`]
    /// loaded: the array and how many k-steps it holds.
    pub(crate) held_shared_a: std::collections::BTreeMap<u32, (String, usize)>,
    /// Runtime loops around the point being emitted.
    loop_depth: usize,
    /// Values read only as the A or B operand of 16-bit dots, which round every element to
    /// the operand type (round to nearest even) when they pack or stage it.
    dot_operand_only: Vec<bool>,
    /// Which threads the ops being emitted run on (see [`Role`]).
    pub(crate) role: Role,
    /// The N of the program's transposed-B dots ([`super::wgmma::trans_b_widths`]).
    pub(crate) trans_b_widths: Vec<usize>,
    /// Row offsets a producer's copy kept for a later copy of the same rows in another
    /// buffer (see [`super::shared_rows::SharedRows`]).
    pub(crate) shared_rows: Vec<super::shared_rows::SharedRows>,
    /// Row-offset arrays declared so far (their names' numbers).
    pub(crate) shared_rows_declared: usize,
    /// The run-start row a copy's address is being recomputed at (see
    /// [`super::page_pointer`]).
    pub(crate) run_start: std::cell::RefCell<Option<super::page_pointer::RunStart>>,
    /// Whether a copy's mask is being recomputed (see [`super::mask_bound`]).
    pub(crate) copy_mask: std::cell::Cell<bool>,
    /// A row's page term recomputed as zero, and its page (see [`super::page_row`]): the
    /// product, the page value, and the page's text where the recomputation met it.
    pub(crate) zeroed: std::cell::RefCell<Option<(ValueId, ValueId, Option<String>)>>,
}

/// The threads a program is emitted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Every thread of the block: block barriers are `__syncthreads`.
    Whole,
    /// A warp-specialized kernel's producer: loops and branches carry no values (its
    /// program keeps only scalar work and copies).
    Producer,
    /// A warp-specialized kernel's consumers: block barriers are a named barrier over
    /// their threads (the producer never reaches them).
    Consumer,
}

/// The named barrier of a warp-specialized kernel's consumers (0 is `__syncthreads`, 1-3
/// are the warpgroup turns).
pub(crate) const CONSUMER_BARRIER: usize = 4;

impl<'f> Emitter<'f> {
    pub(crate) fn new(f: &'f Function, prog: &'f GpuProgram) -> Result<Self, CodegenError> {
        if f.num_warps == 0 || f.num_warps > 32 {
            return Err(CodegenError::NumWarps(f.num_warps));
        }
        let mut defs = vec![None; f.values.len()];
        f.walk(&mut |id, op| {
            for r in &op.results {
                defs[r.0 as usize] = Some(id);
            }
        });
        Ok(Emitter {
            f,
            prog,
            stage_vars: Vec::new(),
            loop_stage: Default::default(),
            hoisted: Default::default(),
            partial_rows: Default::default(),
            use_counts: f.use_counts(),
            remat_locals: Default::default(),
            w: SourceWriter::default(),
            threads: 32 * f.num_warps as usize,
            scratch_bytes: 0,
            owner: None,
            owned_scratch_bytes: 0,
            handoff_bytes: 0,
            scratch_reads: Default::default(),
            scratch_reported: false,
            reduction_slot_bytes: 0,
            reduction_slots_allowed: true,
            owned_spans: Vec::new(),
            following: &[],
            block_entry_reads: None,
            block_end_reads: Default::default(),
            staged_by_handoff: Default::default(),
            handoff_at: Default::default(),
            region_locals: Default::default(),
            only_warpgroup: None,
            predeclared: Default::default(),
            tensor_maps: Vec::new(),
            names: vec![None; f.values.len()],
            table: NameTable::default(),
            defs,
            deferred: vec![false; f.values.len()],
            converted: Default::default(),
            stageable: super::staged_load::find_stageable_loads(f),
            fused: vec![false; f.values.len()],
            held_a: Default::default(),
            shared_rows: Vec::new(),
            shared_rows_declared: 0,
            run_start: Default::default(),
            copy_mask: Default::default(),
            zeroed: Default::default(),
            pending_mma: Default::default(),
            scale_wait: None,
            carried_acc: Default::default(),
            packed_a: Default::default(),
            held_shared_a: Default::default(),
            loop_depth: 0,
            dot_operand_only: dot_operand_only(f),
            role: Role::Whole,
            trans_b_widths: super::wgmma::trans_b_widths(f, prog),
        })
    }

    /// A barrier over every thread running the program (see [`Role`]).
    pub(crate) fn emit_block_sync(&mut self) {
        let sync = self.block_sync();
        self.w.line(sync);
        // Its caller accesses the scratch buffer after it without telling the ledger.
        self.forget_scratch_reads();
    }

    /// The statement of [`Self::emit_block_sync`].
    pub(crate) fn block_sync(&self) -> String {
        if let Some(sync) = self.owned_sync() {
            return sync;
        }
        match self.role {
            Role::Consumer => format!("attn_bar_sync({CONSUMER_BARRIER}, {});", self.threads),
            _ => "__syncthreads();".into(),
        }
    }

    /// Forgets what the last program emitted (names of its values, its loops' counters,
    /// held fragments), keeping the parameters' names: the next program is emitted in a
    /// scope of its own.
    pub(crate) fn start_program(&mut self, param_names: &[Option<String>]) {
        self.names = param_names.to_vec();
        self.stage_vars.clear();
        self.loop_stage.clear();
        self.partial_rows.clear();
        self.hoisted.clear();
        self.remat_locals.borrow_mut().clear();
        self.converted.clear();
        self.held_a.clear();
        self.pending_mma.clear();
        self.scale_wait = None;
        self.packed_a.clear();
        self.held_shared_a.clear();
        self.loop_depth = 0;
        self.deferred.iter_mut().for_each(|d| *d = false);
        self.fused.iter_mut().for_each(|d| *d = false);
    }

    /// The names bound so far (the parameters', before any program is emitted).
    pub(crate) fn bound_names(&self) -> Vec<Option<String>> {
        self.names.clone()
    }

    /// How many operands (of ops and terminators) read `v`.
    pub(crate) fn use_count(&self, v: ValueId) -> u32 {
        self.use_counts[v.0 as usize]
    }

    /// Whether `v` is only read as a dot's A or B operand (see `dot_operand_only`).
    pub(crate) fn only_dot_operand(&self, v: ValueId) -> bool {
        self.dot_operand_only[v.0 as usize]
    }

    // ---- values ----

    /// The C++ name of a value that has been defined.
    pub(crate) fn name(&self, v: ValueId) -> Result<&str, CodegenError> {
        self.names
            .get(v.0 as usize)
            .and_then(|n| n.as_deref())
            .ok_or(CodegenError::UndefinedValue(v.0))
    }

    /// Gives `v` a fresh name derived from its DSL name.
    pub(crate) fn bind_new(&mut self, v: ValueId) -> String {
        let dsl = self.f.value(v).name.clone();
        let n = self.table.value(dsl.as_deref(), v.0);
        self.names[v.0 as usize] = Some(n.clone());
        n
    }

    /// A fresh C++ identifier derived from `base` (for emitter temporaries).
    pub(crate) fn fresh_name(&mut self, base: &str) -> String {
        self.table.claim(base)
    }

    /// Converts every stored tile operand of `op` whose distribution differs from `want`
    /// (the distribution the op works in), for the duration of the op.
    pub(crate) fn convert_operands(&mut self, op: &Op, want: TileMap) -> Result<(), CodegenError> {
        for &v in &op.operands {
            let stored = !self.f.ty(v).is_scalar() && !self.is_deferred(v);
            if stored && self.map(v) != want && !self.converted.contains_key(&v.0) {
                let n = self.convert(v, want)?;
                self.converted.insert(v.0, n);
            }
        }
        Ok(())
    }

    /// Makes `v` another name for an existing C++ variable (loop-carried values).
    pub(crate) fn alias(&mut self, v: ValueId, name: &str) {
        self.names[v.0 as usize] = Some(name.to_string());
    }

    pub(crate) fn elem(&self, v: ValueId) -> Elem {
        self.f.ty(v).elem
    }

    /// The scalar type of a number-valued value.
    pub(crate) fn scalar(&self, v: ValueId) -> Result<ScalarType, CodegenError> {
        self.elem(v)
            .scalar()
            .ok_or_else(|| CodegenError::Unsupported(format!("value %{} is a pointer", v.0)))
    }

    pub(crate) fn shape(&self, v: ValueId) -> &'f [usize] {
        &self.f.ty(v).shape
    }

    /// How `v`'s elements are spread over the threads (from its layout).
    pub(crate) fn map(&self, v: ValueId) -> TileMap {
        let t = self.f.ty(v);
        match t.layout.owner() {
            Some(_) => TileMap::for_layout(t.layout.unowned(), &t.shape, 128),
            None => TileMap::for_layout(&t.layout, &t.shape, self.threads),
        }
    }

    /// Whether any tile uses the `Mma` distribution (its lane coordinates are then defined
    /// once at the top of the kernel).
    pub(crate) fn uses_mma(&self) -> bool {
        self.f.values.iter().enumerate().any(|(i, v)| {
            !v.ty.is_scalar() && matches!(self.map(ValueId(i as u32)), TileMap::Mma(_))
        })
    }

    pub(crate) fn is_deferred(&self, v: ValueId) -> bool {
        self.deferred.get(v.0 as usize).copied().unwrap_or(false)
    }

    pub(crate) fn is_stageable(&self, v: ValueId) -> bool {
        self.stageable.get(v.0 as usize).copied().unwrap_or(false)
    }

    /// The register array holding `a` as A fragments, if a loop around this point holds it.
    pub(crate) fn held_a_fragments(&self, a: ValueId) -> Option<String> {
        self.held_a.get(&a.0).cloned()
    }

    pub(crate) fn hold_a(&mut self, a: ValueId, frag: String) {
        self.held_a.insert(a.0, frag);
    }

    pub(crate) fn set_fused(&mut self, v: ValueId) {
        if let Some(d) = self.fused.get_mut(v.0 as usize) {
            *d = true;
        }
    }

    pub(crate) fn set_deferred(&mut self, v: ValueId, on: bool) {
        if let Some(d) = self.deferred.get_mut(v.0 as usize) {
            *d = on;
        }
    }

    /// `v` as seen from register slot `slot`: `name[slot]` for tiles, `name` for scalars,
    /// the element's expression for deferred tiles.
    pub(crate) fn at(&self, v: ValueId, slot: &str) -> Result<String, CodegenError> {
        if self.is_deferred(v) {
            return self.expr_at(v, &self.map(v).index(slot));
        }
        if let Some(n) = self.converted.get(&v.0) {
            return Ok(format!("{n}[{slot}]"));
        }
        if self.fused.get(v.0 as usize).copied().unwrap_or(false) {
            return self.staged_load_expr(v, slot);
        }
        let n = self.name(v)?;
        Ok(if self.f.ty(v).is_scalar() {
            n.to_string()
        } else {
            format!("{n}[{slot}]")
        })
    }

    /// `v` as seen from register slot `slot` of distribution `map` (the distribution of the
    /// op being emitted): recomputed tiles are evaluated at that slot's element; stored tiles
    /// must be in `map` already (see [`Self::convert_operands`]).
    pub(crate) fn at_in(
        &self,
        v: ValueId,
        map: TileMap,
        slot: &str,
    ) -> Result<String, CodegenError> {
        if self.f.ty(v).is_scalar() {
            return Ok(self.name(v)?.to_string());
        }
        if self.is_deferred(v) {
            return self.expr_at(v, &map.index(slot));
        }
        if let Some(n) = self.converted.get(&v.0) {
            return Ok(format!("{n}[{slot}]"));
        }
        if self.map(v) != map {
            return Err(CodegenError::Malformed(format!(
                "%{} is held as {:?} but read as {map:?} without a conversion",
                v.0,
                self.map(v)
            )));
        }
        Ok(format!("{}[{slot}]", self.name(v)?))
    }

    /// The id of the op that defines `v`, if it is not a block argument.
    pub(crate) fn def_id(&self, v: ValueId) -> Option<OpId> {
        self.defs.get(v.0 as usize).copied().flatten()
    }

    /// The op that defines `v`, if it is not a block argument.
    pub(crate) fn def_op(&self, v: ValueId) -> Option<&'f Op> {
        let f = self.f;
        self.defs
            .get(v.0 as usize)
            .copied()
            .flatten()
            .map(|o| f.op(o))
    }

    /// The scalar a tile is a splat (or broadcast of a splat) of, or `v` itself if scalar.
    pub(crate) fn uniform_scalar(&self, v: ValueId) -> Option<ValueId> {
        if self.f.ty(v).is_scalar() {
            return Some(v);
        }
        let op = self.def_op(v)?;
        match op.kind {
            OpKind::Splat { .. } | OpKind::Broadcast { .. } | OpKind::ExpandDims { .. } => {
                self.uniform_scalar(op.operands[0])
            }
            _ => None,
        }
    }

    /// The integer constant `v` is (through splats and broadcasts).
    pub(crate) fn int_constant(&self, v: ValueId) -> Option<i64> {
        match self.def_op(self.uniform_scalar(v)?)?.kind {
            OpKind::Const(crate::ir::Scalar::Int(k, _)) => Some(k),
            _ => None,
        }
    }

    /// Declares the C++ variable of `v` without initializing it.
    pub(crate) fn declare(&mut self, v: ValueId, name: &str) {
        let t = reg_type(self.elem(v));
        if self.f.ty(v).is_scalar() {
            self.w.line(format!("{t} {name};"));
        } else {
            self.w.line(format!("{t} {name}[{}];", self.map(v).slots()));
        }
    }

    /// Defines `res` elementwise: `expr(slot)` gives the value of each owned slot.
    pub(crate) fn define_map(
        &mut self,
        res: ValueId,
        expr: impl Fn(&Self, &str) -> Result<String, CodegenError>,
    ) -> Result<(), CodegenError> {
        let name = self.bind_new(res);
        let t = reg_type(self.elem(res));
        if self.f.ty(res).is_scalar() {
            let e = expr(self, "")?;
            self.w.line(format!("{t} {name} = {e};"));
            return Ok(());
        }
        let slots = self.map(res).slots();
        self.w.line(format!("{t} {name}[{slots}];"));
        if slots == 1 {
            let e = expr(self, "0")?;
            self.w.line(format!("{name}[0] = {e};"));
        } else {
            let e = expr(self, "s")?;
            self.w.open_unrolled("s", slots);
            self.w.line(format!("{name}[s] = {e};"));
            self.w.close("");
        }
        Ok(())
    }

    /// Declares `res` as a tile to be filled by the caller (who writes the slots itself).
    pub(crate) fn define_tile(&mut self, res: ValueId) -> String {
        if self.predeclared.remove(&res.0) {
            if let Ok(name) = self.name(res) {
                return name.to_string();
            }
        }
        let name = self.bind_new(res);
        self.declare(res, &name);
        name
    }

    /// Binds `res` to `src`'s array (a value that takes over another's registers, which
    /// nothing reads afterwards).
    pub(crate) fn alias_tile(
        &mut self,
        res: ValueId,
        src: ValueId,
    ) -> Result<String, CodegenError> {
        let name = self.name(src)?.to_string();
        self.names[res.0 as usize] = Some(name.clone());
        Ok(name)
    }

    /// Records a bigger scratch need.
    pub(crate) fn need_scratch(&mut self, bytes: usize) {
        if self.owner.is_some() {
            self.owned_scratch_bytes = self.owned_scratch_bytes.max(bytes);
            return;
        }
        self.scratch_bytes = self.scratch_bytes.max(bytes);
    }

    // ---- kernel ----

    /// Emits the whole translation unit.
    pub(crate) fn emit_kernel(&mut self, entry: &str, header: &str) -> Result<(), CodegenError> {
        self.w.line(format!("#include \"{}\"", super::PRELUDE_NAME));
        self.w.line("");
        for l in header.lines() {
            self.w.line(format!("// {l}"));
        }
        let params = self.emit_param_list()?;
        // The body first (the launch bounds of a warp-specialized kernel depend on the
        // scratch memory it needs), then the signature around it.
        let outer = std::mem::replace(&mut self.w, super::writer::SourceWriter::at_depth(1));
        self.emit_body()?;
        let body = std::mem::replace(&mut self.w, outer);
        let placed = [self.owned_scratch_define(), self.reduction_slots_define()];
        for defines in placed.into_iter().flatten() {
            for d in defines.lines() {
                self.w.line(d);
            }
        }
        let bounds = match &self.prog.specialization {
            Some(_) => {
                let regs = self.ws_registers();
                regs.define(&mut self.w);
                format!("{}, {}", regs.block_threads, regs.blocks_per_sm)
            }
            None => self.threads.to_string(),
        };
        self.w.line(format!(
            "extern \"C\" __global__ void __launch_bounds__({bounds}) {entry}("
        ));
        for (i, p) in params.iter().enumerate() {
            let sep = if i + 1 == params.len() { "" } else { "," };
            self.w.line(format!("    {p}{sep}"));
        }
        self.w.open(")");
        if let Some(parity) = self.reduction_parity_declaration() {
            self.w.line(parity);
        }
        self.w.append(body);
        self.w.close("");
        Ok(())
    }

    /// The kernel's statements: what every thread shares (parameters, shared-memory
    /// pointers), then the program, or, warp-specialized, the producer's and the
    /// consumers' programs.
    fn emit_body(&mut self) -> Result<(), CodegenError> {
        if self.prog.specialization.is_none() {
            self.emit_thread_coords("threadIdx.x");
            self.emit_warpgroup_index(&self.prog.body);
        }
        self.emit_scalar_param_conversions();
        self.emit_alloc_pointers();
        if let Some(ws) = &self.prog.specialization {
            return self.emit_specialized(ws);
        }
        self.emit_tma_setup()?;
        let body = &self.prog.body;
        self.emit_program(body)
    }

    /// `tid` (this thread's index among the threads running the program: `from`) and the
    /// mma fragment coordinates.
    pub(crate) fn emit_thread_coords(&mut self, from: &str) {
        self.w.line(format!("const int tid = {from};"));
        // The range lets the compiler divide `tid` by powers of two with plain shifts.
        self.w.line(format!(
            "__builtin_assume(tid >= 0 && tid < {});",
            self.threads
        ));
        if self.uses_mma() {
            self.w.line(
                "// mma fragment coordinates: warp, row group g = lane / 4, column pair t4 = lane % 4",
            );
            self.w.line(
                "const int attn_warp = tid / 32, attn_g = (tid % 32) / 4, attn_t4 = tid % 4;",
            );
        }
    }

    /// Emits the ops of a whole program, which must end in `Return`.
    pub(crate) fn emit_program(&mut self, body: &'f GpuBlock) -> Result<(), CodegenError> {
        if let Some(term) = self.emit_ops(body)? {
            let op = self.f.op(term);
            if op.kind != OpKind::Return {
                return Err(CodegenError::Malformed(format!(
                    "kernel body ends in {:?}, not Return",
                    op.kind
                )));
            }
        }
        Ok(())
    }

    /// Names the parameters and returns their C++ declarations.
    fn emit_param_list(&mut self) -> Result<Vec<String>, CodegenError> {
        let mut decls = Vec::new();
        for p in &self.f.params {
            let name = self.table.claim(&p.name);
            self.names[p.value.0 as usize] = Some(name.clone());
            decls.push(match p.kind {
                ParamKind::Ptr {
                    elem,
                    mutable: false,
                } => {
                    format!("const {}* __restrict__ {name}", storage_type(elem))
                }
                ParamKind::Ptr {
                    elem,
                    mutable: true,
                } => format!("{}* __restrict__ {name}", storage_type(elem)),
                ParamKind::Scalar(s) => format!("{} {name}", scalar_param_type(s)),
            });
        }
        let (maps, params) = self.tma_params()?;
        decls.extend(maps);
        self.tensor_maps = params;
        Ok(decls)
    }

    /// 16-bit float scalar parameters arrive as f32 and are rounded once on entry.
    fn emit_scalar_param_conversions(&mut self) {
        for p in &self.f.params {
            let ParamKind::Scalar(s @ (ScalarType::Bf16 | ScalarType::F16)) = p.kind else {
                continue;
            };
            let raw = self.names[p.value.0 as usize].clone().unwrap_or_default();
            let reg = self.table.claim(&format!("{raw}_{s}"));
            self.w.line(format!(
                "const float {reg} = {};",
                super::c_types::round_to(s, raw)
            ));
            self.names[p.value.0 as usize] = Some(reg);
        }
    }

    /// Emits every op of `b` except its terminator, which it returns.
    pub(crate) fn emit_ops(&mut self, b: &'f GpuBlock) -> Result<Option<OpId>, CodegenError> {
        let mut fused_into_previous = false;
        let mut emitted_until = 0;
        // A block is entered from anywhere (a loop's body from its own last iteration too),
        // unless its entry was computed.
        match self.block_entry_reads.take() {
            Some(reads) => self.scratch_reads = reads,
            None => self.forget_scratch_reads(),
        }
        let mut mark = self.scratch_mark();
        for (i, g) in b.ops.iter().enumerate() {
            // What the last op did to the scratch buffer, then a mark for this one.
            self.scratch_check(mark);
            mark = self.scratch_mark();
            if std::mem::take(&mut fused_into_previous) || i < emitted_until {
                continue;
            }
            self.following = &b.ops[i + 1..];
            // A run of ops one warpgroup owns runs on it alone.
            if let Some(w) = self.gpu_op_owner(g) {
                emitted_until = i + self.owned_run_len(&b.ops, i, w);
                self.emit_owned_run(w, &b.ops[i..emitted_until])?;
                continue;
            }
            let o = match g {
                // A run of handoffs meets behind one barrier.
                GpuOp::Tile(o) if self.f.op(*o).kind == OpKind::Handoff => {
                    emitted_until = i + self.emit_handoffs_from(&b.ops[i..])?;
                    continue;
                }
                GpuOp::Tile(o) => *o,
                GpuOp::AsyncCopy(c) => {
                    // The next copy shares this one's loops when it can (see `copies_fuse`).
                    match b.ops.get(i + 1) {
                        Some(GpuOp::AsyncCopy(n)) if self.copies_fuse(c, n) => {
                            self.emit_async_copies(&[c, n])?;
                            fused_into_previous = true;
                        }
                        _ => self.emit_async_copies(&[c])?,
                    }
                    continue;
                }
                GpuOp::For {
                    op,
                    body,
                    pipelined,
                } => {
                    self.emit_for(*op, body, *pipelined)?;
                    self.forget_scratch_reads();
                    continue;
                }
                GpuOp::If {
                    op,
                    then_block,
                    else_block,
                } => {
                    let before = self.scratch_reads.clone();
                    self.emit_if(self.f.op(*op), then_block, else_block)?;
                    self.after_branch(mark, before);
                    continue;
                }
                GpuOp::While { op, before, after } => {
                    self.emit_while(self.f.op(*op), before, after)?;
                    self.forget_scratch_reads();
                    continue;
                }
                other => {
                    self.emit_gpu_op(other)?;
                    continue;
                }
            };
            let op = self.f.op(o);
            if op.kind.is_terminator() {
                if i + 1 != b.ops.len() {
                    return Err(CodegenError::Malformed(format!(
                        "{:?} in the middle of a block",
                        op.kind
                    )));
                }
                self.block_end_reads = self.scratch_reads.clone();
                return Ok(Some(o));
            }
            self.emit_op(op)?;
            if self.scale_wait.is_some() {
                return Err(CodegenError::Malformed(format!(
                    "a warpgroup wait left for {:?}, which did not take it",
                    op.kind
                )));
            }
        }
        self.scratch_check(mark);
        self.block_end_reads = self.scratch_reads.clone();
        Ok(None)
    }

    /// The `// L<line>: ...` comment heading the code of a tile op.
    pub(crate) fn op_comment(&mut self, op: &Op) {
        let summary = super::describe::describe(self.f, op);
        if op.loc.line > 0 {
            self.w.line(format!("// L{}: {summary}", op.loc.line));
        } else {
            self.w.line(format!("// {summary}"));
        }
    }

    pub(crate) fn emit_op(&mut self, op: &'f Op) -> Result<(), CodegenError> {
        self.op_comment(op);
        match &op.kind {
            OpKind::For | OpKind::If | OpKind::While => Err(CodegenError::Malformed(format!(
                "{:?} outside the GPU program's structure",
                op.kind
            ))),
            OpKind::Condition | OpKind::Yield | OpKind::Return => Err(CodegenError::Malformed(
                format!("stray terminator {:?}", op.kind),
            )),
            _ => {
                let r = self.emit_simple(op);
                self.converted.clear();
                r
            }
        }
    }

    /// Single result of `op`, or an error naming the op.
    pub(crate) fn result(op: &Op) -> Result<ValueId, CodegenError> {
        op.results
            .first()
            .copied()
            .ok_or_else(|| CodegenError::Malformed(format!("{:?} has no result", op.kind)))
    }

    pub(crate) fn operand(op: &Op, i: usize) -> Result<ValueId, CodegenError> {
        op.operands
            .get(i)
            .copied()
            .ok_or_else(|| CodegenError::Malformed(format!("{:?} lacks operand {i}", op.kind)))
    }

    // ---- control flow ----

    /// Declares one variable per carried value (named after the first DSL name among
    /// `aliases[..][k]` and `hints[k]`) and aliases every value in `aliases[k]` to the k-th
    /// variable.
    fn declare_carried(
        &mut self,
        prefer: &[ValueId],
        aliases: &[&[ValueId]],
        hints: &[ValueId],
    ) -> Vec<String> {
        let mut out = Vec::new();
        for (k, &v) in prefer.iter().enumerate() {
            let named = aliases
                .iter()
                .filter_map(|a| a.get(k))
                .chain(hints.get(k))
                .find(|x| self.f.value(**x).name.is_some());
            let src = named.copied().unwrap_or(v);
            let dsl = self.f.value(src).name.clone();
            let name = self.table.value(dsl.as_deref(), v.0);
            self.declare(v, &name);
            for a in aliases {
                if let Some(&x) = a.get(k) {
                    self.alias(x, &name);
                }
            }
            out.push(name);
        }
        out
    }

    /// `targets = sources` as a simultaneous assignment (through temporaries when a
    /// source is also a target at another position, e.g. `(a, b) = (b, a)`).
    fn assign_all(&mut self, targets: &[String], sources: &[ValueId]) -> Result<(), CodegenError> {
        if targets.len() != sources.len() {
            return Err(CodegenError::Malformed(format!(
                "{} values yielded to {} loop or branch results",
                sources.len(),
                targets.len()
            )));
        }
        // Deferred tiles have no variable, so they never alias a target.
        let src_names: Vec<Option<String>> = sources
            .iter()
            .map(|&s| {
                if self.is_deferred(s) {
                    Ok(None)
                } else {
                    self.name(s).map(|n| Some(n.to_string()))
                }
            })
            .collect::<Result<_, _>>()?;
        let clash = src_names.iter().enumerate().any(|(i, s)| {
            targets
                .iter()
                .enumerate()
                .any(|(j, t)| i != j && s.as_deref() == Some(t.as_str()))
        });
        let mut from = src_names.clone();
        if clash {
            for (k, &s) in sources.iter().enumerate() {
                let tmp = self.table.claim(&format!("{}_next", targets[k]));
                self.declare(s, &tmp);
                self.copy(s, &tmp)?;
                from[k] = Some(tmp);
            }
        }
        for (k, &s) in sources.iter().enumerate() {
            match &from[k] {
                Some(n) if *n == targets[k] => {}
                Some(n) => {
                    let n = n.clone();
                    self.copy_var(s, &targets[k], &n)
                }
                None => self.copy(s, &targets[k])?,
            }
        }
        Ok(())
    }

    /// `dst = v` for every owned element (`v` may be deferred).
    fn copy(&mut self, v: ValueId, dst: &str) -> Result<(), CodegenError> {
        // An owned index tile is recomputed from its owner's thread coordinates.
        if let (Some(w), None, true) =
            (self.f.ty(v).layout.owner(), self.owner, self.is_deferred(v))
        {
            return self.on_warpgroup(w, |e| e.copy(v, dst));
        }
        if self.f.ty(v).is_scalar() {
            let e = self.at(v, "")?;
            self.w.line(format!("{dst} = {e};"));
        } else {
            let e = self.at(v, "s")?;
            self.w.open_unrolled("s", self.map(v).slots());
            self.w.line(format!("{dst}[s] = {e};"));
            self.w.close("");
        }
        Ok(())
    }

    /// `dst = src` between two variables shaped like `like`.
    pub(crate) fn copy_var(&mut self, like: ValueId, dst: &str, src: &str) {
        if self.f.ty(like).is_scalar() {
            self.w.line(format!("{dst} = {src};"));
        } else {
            let slots = self.map(like).slots();
            self.w.open_unrolled("s", slots);
            self.w.line(format!("{dst}[s] = {src}[s];"));
            self.w.close("");
        }
    }

    fn region(op: &Op, i: usize) -> Result<&crate::ir::Block, CodegenError> {
        op.regions
            .get(i)
            .ok_or_else(|| CodegenError::Malformed(format!("{:?} lacks region {i}", op.kind)))
    }

    /// Emits a region and returns its terminator's operands, checking the terminator kind.
    fn emit_region(&mut self, b: &'f GpuBlock, want: OpKind) -> Result<Vec<ValueId>, CodegenError> {
        let term = self
            .emit_ops(b)?
            .ok_or_else(|| CodegenError::Malformed("region without terminator".into()))?;
        let t = self.f.op(term);
        if t.kind != want {
            return Err(CodegenError::Malformed(format!(
                "region ends in {:?}, expected {want:?}",
                t.kind
            )));
        }
        Ok(t.operands.clone())
    }

    fn emit_for(
        &mut self,
        id: OpId,
        gbody: &'f GpuBlock,
        pipelined: bool,
    ) -> Result<(), CodegenError> {
        let op = self.f.op(id);
        self.op_comment(op);
        let body = Self::region(op, 0)?;
        let ring_loop = self.prog.specialization.as_ref().map(|s| s.loop_op);
        if self.role == Role::Producer && ring_loop == Some(id) {
            return self.emit_producer_for(op, id, gbody, pipelined);
        }
        let held = self.hold_invariant_a_operands(body)?;
        self.enter_ring(id, pipelined)?;
        let deferred = self.deferred_row_sums(op);
        for (_, r) in &deferred {
            self.partial_rows.insert(r.0);
        }
        let inits = &op.operands[3..];
        let iters = body.args.get(1..).unwrap_or(&[]);
        let carried = self.declare_carried(&op.results, &[&op.results, iters], inits);
        self.assign_all(&carried, inits)?;
        // PV accumulating in place into a carried value (`gpu_ir::pv_wait_behind`): for
        // this loop's body only (the unsplit program emits the same dot without it).
        let carried_into: Vec<(u32, ValueId)> = gbody
            .ops
            .iter()
            .filter_map(|g| match g {
                GpuOp::MmaWaitCarried { dot, value } => {
                    Some((self.f.op(*dot).results[0].0, *value))
                }
                _ => None,
            })
            .collect();
        self.carried_acc.extend(carried_into.iter().copied());
        for (i, _) in &deferred {
            let r = op.results[*i];
            self.on_owner_of(r, |e| e.start_row_sum(r))?;
        }
        match self.loop_warpgroups(gbody) {
            Some(groups) => self.emit_loop_per_warpgroup(id, gbody, &carried, pipelined, groups)?,
            None => self.emit_loop(id, gbody, &carried, pipelined)?,
        }
        for (i, _) in deferred {
            let r = op.results[i];
            self.on_owner_of(r, |e| e.finish_row_sum(r))?;
        }
        for a in held {
            self.held_a.remove(&a.0);
        }
        for (res, _) in carried_into {
            self.carried_acc.remove(&res);
        }
        Ok(())
    }

    /// The loop statement of `id` with body `gbody`, its carried values in `carried`.
    pub(crate) fn emit_loop(
        &mut self,
        id: OpId,
        gbody: &'f GpuBlock,
        carried: &[String],
        pipelined: bool,
    ) -> Result<(), CodegenError> {
        let op = self.f.op(id);
        let body = Self::region(op, 0)?;
        if self.unrolls_scan(op, gbody) {
            self.w.line(SCAN_LOOP_PRAGMA);
        } else if self.loop_depth > 0 {
            self.w.line(NESTED_LOOP_PRAGMA);
        }
        self.open_for(op, body)?;
        self.loop_depth += 1;
        let next = self.emit_region(gbody, OpKind::Yield);
        self.loop_depth -= 1;
        let next = next?;
        self.assign_all(carried, &next)?;
        if pipelined {
            self.advance_stage(id);
        }
        self.w.close("");
        Ok(())
    }

    /// Whether loop `op` is a short scalar scan to unroll (opt-in:
    /// `ATTN_CODEGEN_ENABLE=unroll_scans`): constant bounds, at most [`MAX_SCAN_TRIPS`]
    /// iterations, and a body of scalar tile ops only (no GPU-IR memory ops, no tiles).
    /// Rolled, such a loop waits for each iteration's loads before the next one's issue:
    /// P3's two scans of its 30 image ranges before the KV loop, 19 instructions and two
    /// `LDG` an iteration, are ~1.4 µs of its programs' prologue (the P1 shape without
    /// images: 0.8 µs).
    fn unrolls_scan(&self, op: &Op, gbody: &GpuBlock) -> bool {
        if !crate::features::on("unroll_scans") {
            return false;
        }
        let trips = match (
            self.int_constant(op.operands[0]),
            self.int_constant(op.operands[1]),
            self.int_constant(op.operands[2]),
        ) {
            (Some(lo), Some(hi), Some(step)) if step > 0 => (hi - lo).max(0) / step,
            _ => return false,
        };
        let mut scalar = true;
        crate::gpu_ir::walk_block(gbody, &mut |g| {
            scalar &= match g {
                GpuOp::Tile(o) => {
                    let t = self.f.op(*o);
                    t.operands
                        .iter()
                        .chain(&t.results)
                        .all(|v| self.f.ty(*v).is_scalar())
                }
                GpuOp::If { .. } | GpuOp::For { .. } | GpuOp::While { .. } => true,
                _ => false,
            };
        });
        trips <= MAX_SCAN_TRIPS && scalar
    }

    /// The ring's loop in the producer's program: the induction variable and the ring's
    /// counter, no carried values (its body yields the consumers' tiles, which it never
    /// computes).
    fn emit_producer_for(
        &mut self,
        op: &'f Op,
        id: OpId,
        gbody: &'f GpuBlock,
        pipelined: bool,
    ) -> Result<(), CodegenError> {
        self.enter_ring(id, pipelined)?;
        self.open_for(op, Self::region(op, 0)?)?;
        self.emit_ops(gbody)?;
        if pipelined {
            self.advance_stage(id);
        }
        self.w.close("");
        Ok(())
    }

    /// Binds the loop's induction variable and opens `for (iv = lo; iv < hi; iv += step)`.
    fn open_for(&mut self, op: &'f Op, body: &'f crate::ir::Block) -> Result<(), CodegenError> {
        let iv = *body
            .args
            .first()
            .ok_or_else(|| CodegenError::Malformed("for without induction variable".into()))?;
        let ivn = self.bind_new(iv);
        let bound = |e: &Self, i: usize| -> Result<String, CodegenError> {
            Ok(e.name(Self::operand(op, i)?)?.to_string())
        };
        let (lo, hi, step) = (bound(self, 0)?, bound(self, 1)?, bound(self, 2)?);
        self.w.open(format!(
            "for (int {ivn} = {lo}; {ivn} < {hi}; {ivn} += {step})"
        ));
        Ok(())
    }

    /// Declares a pipelined loop's stage counter and makes it the innermost ring's.
    fn enter_ring(&mut self, id: OpId, pipelined: bool) -> Result<(), CodegenError> {
        if pipelined {
            let st = self.stage_var(id)?;
            self.stage_vars.push(st);
        }
        Ok(())
    }

    /// Pops the pipelined loop's stage counter and moves it to the ring's next buffer.
    fn advance_stage(&mut self, id: OpId) {
        let st = self.stage_vars.pop().unwrap_or_default();
        match self.prog.ring_stages(self.f, id) {
            // One buffer (the seesaw's halves, `gpu_ir::seesaw_ring`): the counter stays 0.
            1 => {}
            2 => self.w.line(format!("{st} ^= 1;")),
            s => self
                .w
                .line(format!("{st} = {st} == {} ? 0 : {st} + 1;", s - 1)),
        }
    }

    fn emit_if(
        &mut self,
        op: &'f Op,
        then_block: &'f GpuBlock,
        else_block: &'f GpuBlock,
    ) -> Result<(), CodegenError> {
        self.op_comment(op);
        let cond = self.name(Self::operand(op, 0)?)?.to_string();
        let results = self.declare_carried(&op.results, &[&op.results], &[]);
        self.w.open(format!("if ({cond})"));
        let tv = self.emit_region(then_block, OpKind::Yield)?;
        self.assign_all(&results, &tv)?;
        self.w.reopen("} else {");
        let ev = self.emit_region(else_block, OpKind::Yield)?;
        self.assign_all(&results, &ev)?;
        self.w.close("");
        Ok(())
    }

    fn emit_while(
        &mut self,
        op: &'f Op,
        gbefore: &'f GpuBlock,
        gafter: &'f GpuBlock,
    ) -> Result<(), CodegenError> {
        self.op_comment(op);
        let before = Self::region(op, 0)?;
        let after = Self::region(op, 1)?;
        let carried = self.declare_carried(&before.args, &[&before.args], &op.operands);
        self.assign_all(&carried, &op.operands)?;
        let passed = self.declare_carried(&op.results, &[&op.results, &after.args], &[]);
        self.w.open("while (true)");
        let cond_ops = self.emit_region(gbefore, OpKind::Condition)?;
        let (c, vars) = cond_ops
            .split_first()
            .ok_or_else(|| CodegenError::Malformed("empty Condition".into()))?;
        self.assign_all(&passed, vars)?;
        let c = self.name(*c)?.to_string();
        self.w.line(format!("if (!{c}) break;"));
        let next = self.emit_region(gafter, OpKind::Yield)?;
        self.assign_all(&carried, &next)?;
        self.w.close("");
        Ok(())
    }
}

/// Precedes a runtime loop nested in another one (image ranges meeting a tile, inside the
/// tile loop): its trip count is data, usually one or two, so the copies an unrolling
/// compiler makes (four, with a remainder loop) only bloat the enclosing loop's code.
/// `_Pragma`, not `#pragma`: recomputed statements may share a line.
pub(crate) const NESTED_LOOP_PRAGMA: &str = "_Pragma(\"unroll 1\")";

/// A short scalar scan unrolled by 8 (see [`Emitter::unrolls_scan`]), so its iterations'
/// loads issue eight at a time. Whole, P3's two scans of 30 ranges spilled 52 bytes in the
/// consumers (NVRTC 13, sm_90a); by 8 (or 10, 15) they compile clean.
const SCAN_LOOP_PRAGMA: &str = "_Pragma(\"unroll 8\")";

/// The longest scan [`Emitter::unrolls_scan`] unrolls.
const MAX_SCAN_TRIPS: i64 = 32;

/// Per value: read at least once, and only as operand 0 or 1 of a `dot` — directly, or
/// yielded into a loop's carried value read only so (P carried to the next iteration's PV:
/// `passes::pv_behind`), whose result after the loop is unread or read only so too.
fn dot_operand_only(f: &Function) -> Vec<bool> {
    let mut uses = vec![(0u32, 0u32); f.values.len()];
    // (yielded value, the loop's block argument and result it becomes)
    let mut carried = Vec::new();
    f.walk(&mut |_, op| {
        for (i, v) in op.operands.iter().enumerate() {
            let u = &mut uses[v.0 as usize];
            u.0 += 1;
            u.1 += u32::from(op.kind == OpKind::Dot && i < 2);
        }
        if op.kind == OpKind::For {
            let body = &op.regions[0];
            if let Some(y) = body.ops.last().map(|&o| f.op(o)) {
                for (k, &v) in y.operands.iter().enumerate() {
                    if let (Some(&arg), Some(&res)) = (body.args.get(k + 1), op.results.get(k)) {
                        carried.push((v, arg, res));
                    }
                }
            }
        }
    });
    let mut only: Vec<bool> = uses.iter().map(|&(n, d)| n > 0 && n == d).collect();
    loop {
        let mut changed = false;
        for &(v, arg, res) in &carried {
            let res_ok = uses[res.0 as usize].0 == 0 || only[res.0 as usize];
            if !only[v.0 as usize] && only[arg.0 as usize] && res_ok {
                let (n, d) = uses[v.0 as usize];
                if n == d + 1 {
                    uses[v.0 as usize].1 += 1;
                    only[v.0 as usize] = true;
                    changed = true;
                }
            }
        }
        if !changed {
            return only;
        }
    }
}
