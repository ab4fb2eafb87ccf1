//! Warp-specialized kernels as CUDA (`gpu_ir::warp_specialize`): the block's last
//! warpgroup runs the producer's program, the others the consumers'; the ring's stages
//! change hands through a *full* and an *empty* mbarrier each, and `setmaxnreg` moves
//! registers from the producer to the consumers.
//!
//! ```text
//! if (ATTN_WARP_SPECIALIZED)      mbarriers initialized, __syncthreads
//!   producer warpgroup:           setmaxnreg.dec; its program; return
//!   consumers:                    setmaxnreg.inc; their program
//! else                            the producer's threads return; the unsplit program
//! ```
//!
//! The unsplit program (targets without `setmaxnreg`: the `mma.sync` branch) is the
//! program before the split, run by the consumers' threads alone. The simulator of emitted
//! CUDA defines `ATTN_WARP_SPECIALIZED` and runs the split, its consumers on `mma.sync`.

use super::emitter::{Emitter, Role};
use super::writer::SourceWriter;
use super::CodegenError;
use crate::gpu_ir::warp_specialize::{
    largest_accumulator, register_split, two_blocks_fit, RegisterSplit,
};
use crate::gpu_ir::{Iterations, Stage, StageSync, WarpSpecialization};

type Res<T> = Result<T, CodegenError>;

/// Shared memory per SM on sm_90 (228 KiB) and what the driver reserves per block.
const SM_SHARED_BYTES: usize = 228 * 1024;
const BLOCK_RESERVED_SHARED_BYTES: usize = 1024;
/// Blocks per SM the launch bounds ask for at most (two programs hide each other's
/// softmax; more would starve the consumers of registers).
const MAX_BLOCKS_PER_SM: usize = 2;
/// The register split of a warp-specialized kernel.
pub(crate) struct WsRegisters {
    pub(crate) block_threads: usize,
    pub(crate) blocks_per_sm: usize,
    /// Registers per thread at launch (`__launch_bounds__` gives ptxas this budget).
    launch: usize,
    producer: usize,
    consumer: usize,
}

impl WsRegisters {
    /// The macros the program's `setmaxnreg` read, with why they are what they are.
    pub(crate) fn define(&self, w: &mut SourceWriter) {
        w.line(format!(
            "// Warp-specialized: {} threads, {} block(s) per SM, {} registers a thread at launch;",
            self.block_threads, self.blocks_per_sm, self.launch
        ));
        w.line(format!(
            "// the producer warpgroup drops to {}, the consumers take {}.",
            self.producer, self.consumer
        ));
        w.line(format!("#define ATTN_WS_PRODUCER_REGS {}", self.producer));
        w.line(format!("#define ATTN_WS_CONSUMER_REGS {}", self.consumer));
    }
}

impl<'f> Emitter<'f> {
    /// How the registers split: the blocks that fit an SM's shared memory (at most two), the
    /// launch budget they leave each thread, the producer's share (as little as lets the
    /// consumers reach their cap) and the consumers' (the rest).
    pub(crate) fn ws_registers(&self) -> WsRegisters {
        let producers = self
            .prog
            .specialization
            .as_ref()
            .map_or(0, |s| s.producer_threads);
        let block_threads = self.threads + producers;
        let shared = self.prog.alloc_bytes + self.scratch_bytes + BLOCK_RESERVED_SHARED_BYTES;
        let blocks_per_sm = if two_blocks_fit(block_threads, largest_accumulator(self.f)) {
            (SM_SHARED_BYTES / shared).clamp(1, MAX_BLOCKS_PER_SM)
        } else {
            1
        };
        let RegisterSplit {
            launch,
            producer,
            consumer,
        } = register_split(self.threads, producers, blocks_per_sm);
        WsRegisters {
            block_threads,
            blocks_per_sm,
            launch,
            producer,
            consumer,
        }
    }

    /// The split of the program being emitted (a stage handshake needs one).
    pub(crate) fn split(&self) -> Res<&'f WarpSpecialization> {
        self.prog
            .specialization
            .as_ref()
            .ok_or_else(|| CodegenError::Malformed("a stage handshake outside a split".into()))
    }

    /// The body of a warp-specialized kernel (see the module note).
    pub(crate) fn emit_specialized(&mut self, ws: &'f WarpSpecialization) -> Res<()> {
        let consumers = self.threads;
        let params = self.bound_names();
        self.w.line("#if ATTN_WARP_SPECIALIZED");
        self.emit_stage_barriers(ws)?;
        self.w.open(format!("if (threadIdx.x >= {consumers})"));
        self.w.line("attn_setmaxnreg_dec<ATTN_WS_PRODUCER_REGS>();");
        self.emit_role(Role::Producer, &params, &ws.producer, ws.producer_threads)?;
        if ws.copies_arrive {
            // Its last copies still land (and arrive) after the loop.
            self.w.line("attn_cp_wait<0>();");
        }
        self.w.line("return;");
        self.w.close("");
        self.w.line("attn_setmaxnreg_inc<ATTN_WS_CONSUMER_REGS>();");
        self.w.open("");
        self.emit_role(Role::Consumer, &params, &self.prog.body, consumers)?;
        self.w.close("");
        self.w.line("#else");
        self.w.line(format!(
            "if (threadIdx.x >= {consumers}) return; // the producer's threads: nothing to do here"
        ));
        self.w.open("");
        self.emit_role(Role::Whole, &params, &ws.unsplit, consumers)?;
        self.w.close("");
        self.w.line("#endif");
        self.role = Role::Whole;
        Ok(())
    }

    /// One role's program in a scope of its own, `tid` counting its own threads.
    fn emit_role(
        &mut self,
        role: Role,
        params: &[Option<String>],
        body: &'f crate::gpu_ir::GpuBlock,
        threads: usize,
    ) -> Res<()> {
        let all = self.threads;
        self.start_program(params);
        self.role = role;
        self.threads = threads;
        match role {
            Role::Producer => self.emit_thread_coords(&format!("(int)threadIdx.x - {all}")),
            _ => self.emit_thread_coords("threadIdx.x"),
        }
        self.emit_warpgroup_index(body);
        // Per stage, the parity of the phase this role waits for next: the consumers wait
        // for fills (from phase 0), the producer for releases (a fresh stage counts as
        // released: parity 1 names the phase before the first).
        let phases = if role == Role::Producer {
            let ws = self.split()?;
            (1u32 << (ws.stages * ws.parts)) - 1
        } else {
            0
        };
        self.w.line(format!("unsigned attn_ws_phase = {phases}u;"));
        if role == Role::Producer {
            self.emit_tma_part(|e| {
                e.emit_tma_state();
                Ok(())
            })?;
        } else if consumers_land_boxes(body) {
            // The consumers' own phase bits for the boxes' mbarriers they wait on.
            self.emit_tma_part(|e| {
                e.w.line("unsigned attn_tma_phase = 0u;");
                Ok(())
            })?;
        }
        let r = self.emit_program(body);
        self.threads = all;
        r
    }

    /// The ring's mbarriers, initialized by thread 0 before every thread's first use:
    /// `full[s]` completes when each producer warp arrived, `empty[s]` when each consumer
    /// warp did. The producer's TMA boxes land on mbarriers of their own (`tma_copy`).
    fn emit_stage_barriers(&mut self, ws: &WarpSpecialization) -> Res<()> {
        self.w.line(format!(
            "unsigned long long* const attn_ws_bar = reinterpret_cast<unsigned long long*>(attn_smem + {}); // full[{stages}], empty[{stages}]{parts}",
            ws.mbar_offset,
            stages = ws.stages,
            parts = match ws.parts {
                1 => String::new(),
                n => format!(", for each of {n} parts"),
            }
        ));
        self.emit_tma_part(|e| {
            e.emit_tma_pointers();
            Ok(())
        })?;
        self.w.open("if (threadIdx.x == 0)");
        self.emit_tma_part(|e| e.emit_tma_init())?;
        // Full: one arrival a producer warp, or a producer thread when its copies arrive.
        let full = match ws.copies_arrive {
            true => ws.producer_threads,
            false => ws.producer_threads / 32,
        };
        let empty = self.threads / 32;
        for part in 0..ws.parts {
            self.w.open_unrolled("s", ws.stages);
            self.w.line(format!(
                "attn_mbar_init(&attn_ws_bar[{}], {full}u);",
                full_bar(ws.stages, part, "s")
            ));
            self.w.line(format!(
                "attn_mbar_init(&attn_ws_bar[{}], {empty}u);",
                empty_bar(ws.stages, part, "s")
            ));
            self.w.close("");
        }
        self.w.line("attn_mbar_init_fence();");
        self.w.close("");
        self.w.line("__syncthreads();");
        Ok(())
    }

    /// A step of the stage handshake (see [`StageSync`]).
    pub(crate) fn emit_stage_sync(&mut self, sync: StageSync) -> Res<()> {
        let WarpSpecialization {
            loop_op, stages, ..
        } = *self.split()?;
        let full = |part: usize, s: &str| full_bar(stages, part, s);
        let empty = |part: usize, s: &str| empty_bar(stages, part, s);
        let bit = |part: usize, s: &str| offset(stages * part, s);
        match sync {
            StageSync::Acquire { stage, at, part } => {
                let (_, guard) = self.copy_iteration(loop_op, at)?;
                let counter = self.stage_var(loop_op)?;
                let s = self.stage_index(stages, stage, Some(&counter))?;
                self.w.open(format!("if ({guard})"));
                self.emit_phase_wait(&empty(part, &s), &bit(part, &s));
                self.w.close("");
            }
            StageSync::Filled => {
                let s = self.stage_index(stages, Stage::Current, None)?;
                // The newest `stages - 2` groups are the tiles after this one, in flight.
                self.w
                    .line("// this thread's copies of the stage landed, visible to wgmma");
                self.w.line(format!("attn_cp_wait<{}>();", stages - 2));
                self.w.line("attn_fence_proxy_async();");
                self.emit_warp_arrive(&full(0, &s));
            }
            StageSync::Issued { stage, at, part } => {
                let (_, guard) = self.copy_iteration(loop_op, at)?;
                let counter = self.stage_var(loop_op)?;
                let s = self.stage_index(stages, stage, Some(&counter))?;
                self.w
                    .line("// this thread's copies of the stage arrive on it as they land");
                self.w.line(format!(
                    "if ({guard}) attn_cp_mbar_arrive(&attn_ws_bar[{}]);",
                    full(part, &s)
                ));
            }
            StageSync::Wait { part, when, .. } => {
                let s = self.stage_index(stages, Stage::Current, None)?;
                let guard = match when {
                    Iterations::All => None,
                    Iterations::First => Some(self.first_iteration(loop_op)?),
                    Iterations::AfterFirst => {
                        Some(format!("!({})", self.first_iteration(loop_op)?))
                    }
                };
                if let Some(g) = &guard {
                    self.w.open(format!("if ({g})"));
                }
                self.emit_phase_wait(&full(part, &s), &bit(part, &s));
                if self.split()?.copies_arrive {
                    // The producer never fenced its landed copies for the tensor cores.
                    self.w.line("attn_fence_proxy_async();");
                }
                if guard.is_some() {
                    self.w.close("");
                }
            }
            StageSync::Release { stage, part } => {
                let s = self.stage_index(stages, stage, None)?;
                // The first iteration has no previous stage to release.
                let guarded = stage == Stage::Previous;
                if guarded {
                    let first = self.first_iteration(loop_op)?;
                    self.w.open(format!("if (!({first}))"));
                }
                self.emit_warp_arrive(&empty(part, &s));
                if guarded {
                    self.w.close("");
                }
            }
        }
        Ok(())
    }

    /// Waits for the next phase of mbarrier `bar` (an index) this role waits on, the phase
    /// parity being bit `bit` of the role's phase word, and flips that bit.
    fn emit_phase_wait(&mut self, bar: &str, bit: &str) {
        self.w.open("");
        self.w.line(format!("const unsigned attn_s = {bit};"));
        self.w.line(format!(
            "attn_mbar_wait(&attn_ws_bar[{bar}], (attn_ws_phase >> attn_s) & 1u);"
        ));
        self.w.line("attn_ws_phase ^= 1u << attn_s;");
        self.w.close("");
    }

    /// The warp's arrival on mbarrier `bar` once all its lanes got here.
    fn emit_warp_arrive(&mut self, bar: &str) {
        self.w.line("attn_warp_sync();");
        self.w.line(format!(
            "if ((tid & 31) == 0) attn_mbar_arrive(&attn_ws_bar[{bar}]);"
        ));
    }
}

// The ring's mbarriers for `stages` stages, part after part (see `StageSync`): part `k`'s
// full barriers start at `2 k S`, its empty ones `S` later; its phase bits at `k S`.

/// `base + s` as an index expression (`s` alone at 0).
fn offset(base: usize, s: &str) -> String {
    match base {
        0 => s.to_string(),
        b => format!("{b} + {s}"),
    }
}

/// The index of part `part`'s *full* mbarrier of stage `s`.
fn full_bar(stages: usize, part: usize, s: &str) -> String {
    offset(2 * stages * part, s)
}

/// The index of part `part`'s *empty* mbarrier of stage `s`.
fn empty_bar(stages: usize, part: usize, s: &str) -> String {
    offset(2 * stages * part + stages, s)
}

/// Whether a consumers' program waits on TMA boxes itself (`Landing::Consumers`).
fn consumers_land_boxes(body: &crate::gpu_ir::GpuBlock) -> bool {
    let mut any = false;
    crate::gpu_ir::walk_block(body, &mut |o| {
        any |= matches!(
            o,
            crate::gpu_ir::GpuOp::TmaLanded {
                by: crate::gpu_ir::Landing::Consumers,
                ..
            }
        );
    });
    any
}
