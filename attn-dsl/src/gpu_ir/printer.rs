//! Text form of a GPU program: the allocs, then the op tree with tile ops named by their
//! tile-IR op kind and result. Tests snapshot it; it is what `attn emit --gpu-ir` prints.

use super::program::{
    CopyAt, GpuBlock, GpuOp, GpuProgram, Iterations, OperandSource, Stage, StageSync,
};
use crate::ir::{Function, OpId};
use std::fmt::Write;

/// Prints `p` (lowered from `f`).
pub fn print_program(f: &Function, p: &GpuProgram) -> String {
    let mut s = String::new();
    for (i, a) in p.allocs.iter().enumerate() {
        let _ = writeln!(
            s,
            "%a{i} = local_alloc {} : {}[{} x {}] {} stages {} @ {}",
            a.name,
            a.elem,
            a.rows,
            a.cols,
            if a.swizzled {
                "swizzled".to_string()
            } else {
                format!("pad {}", a.pad)
            },
            a.stages,
            a.offset
        );
    }
    let _ = writeln!(s, "// shared: {} bytes of allocs", p.alloc_bytes);
    if let Some(ws) = &p.specialization {
        let _ = writeln!(
            s,
            "// producer warpgroup ({} threads):",
            ws.producer_threads
        );
        block(f, p, &ws.producer, 0, &mut s);
        let _ = writeln!(s, "// consumers:");
    }
    block(f, p, &p.body, 0, &mut s);
    s
}

fn stage(s: Stage) -> String {
    match s {
        Stage::Only => String::new(),
        Stage::Current => "[cur]".into(),
        Stage::Next => "[next]".into(),
        Stage::Previous => "[prev]".into(),
        Stage::Fixed(k) => format!("[{k}]"),
    }
}

fn tile_op(f: &Function, o: OpId) -> String {
    let op = f.op(o);
    let res: Vec<String> = op.results.iter().map(|r| format!("%{}", r.0)).collect();
    let kind = format!("{:?}", op.kind);
    let kind = kind
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or("")
        .to_lowercase();
    if res.is_empty() {
        kind
    } else {
        format!("{} = {kind}", res.join(", "))
    }
}

fn operand(src: &OperandSource) -> String {
    match src {
        OperandSource::Registers => "registers".into(),
        OperandSource::Shared {
            alloc,
            stage: st,
            trans,
            ..
        } => format!(
            "ldmatrix{} %a{}{}",
            if *trans { ".trans" } else { "" },
            alloc.0,
            stage(*st)
        ),
    }
}

fn block(f: &Function, p: &GpuProgram, b: &GpuBlock, depth: usize, s: &mut String) {
    let pad = "  ".repeat(depth);
    for op in &b.ops {
        let line = match op {
            GpuOp::Tile(o) => tile_op(f, *o),
            GpuOp::For { op, pipelined, .. } => format!(
                "{} {{{}",
                tile_op(f, *op),
                if *pipelined {
                    format!("  // pipelined, {} stages", p.ring_stages(f, *op))
                } else {
                    String::new()
                }
            ),
            GpuOp::If { op, .. } | GpuOp::While { op, .. } => format!("{} {{", tile_op(f, *op)),
            GpuOp::AsyncCopy(c) => format!(
                "async_copy %{} -> %a{}{} (axis {}, {} per chunk{}{})",
                f.op(c.load).results[0].0,
                c.dst.0,
                stage(c.stage),
                c.map.contiguous_axis,
                c.map.chunk,
                match c.at {
                    CopyAt::InPlace => "",
                    CopyAt::Prologue(0) => ", first iteration",
                    CopyAt::Prologue(_) => ", a prologue iteration",
                    CopyAt::Ahead(1) => ", next iteration",
                    CopyAt::Ahead(_) => ", stages - 1 iterations ahead",
                },
                match c.engine {
                    super::program::CopyEngine::Threads => String::new(),
                    super::program::CopyEngine::Tma { map, group_rows } =>
                        format!(", tma map {map} boxes of {group_rows} rows"),
                }
            ),
            GpuOp::TmaLanded {
                alloc,
                stage: st,
                by,
            } => {
                format!("tma_landed %a{}{} by {by:?}", alloc.0, stage(*st))
            }
            GpuOp::Commit => "commit".into(),
            GpuOp::Wait { pending } => format!("wait {pending}"),
            GpuOp::Barrier { reason } => format!("barrier // {reason:?}"),
            GpuOp::Mma {
                dot,
                a,
                b,
                inline_wait,
                chained_from,
            } => format!(
                "%{} = mma a: {}, b: {}{}{}",
                f.op(*dot).results[0].0,
                operand(a),
                operand(b),
                if *inline_wait { "" } else { ", async" },
                chained_from.map_or(String::new(), |d| format!(
                    ", continues %{}",
                    f.op(d).results[0].0
                ))
            ),
            GpuOp::MmaWait { dot, in_scale } => match in_scale {
                Some(s) => format!(
                    "mma_wait %{} in the arms of %{}",
                    f.op(*dot).results[0].0,
                    f.op(*s).results[0].0
                ),
                None => format!("mma_wait %{}", f.op(*dot).results[0].0),
            },
            GpuOp::MmaWaitCarried { dot, value } => format!(
                "mma_wait %{} (last iteration's, into %{})",
                f.op(*dot).results[0].0,
                value.0
            ),
            GpuOp::PackA { dot, from } => format!(
                "pack_a %{} <- {}",
                f.op(*dot).results[0].0,
                from.map_or("zeros".into(), |v| format!("%{}", v.0))
            ),
            GpuOp::HoldA { dot, steps, .. } => {
                format!("hold_a %{} first {steps} k-steps", f.op(*dot).results[0].0)
            }
            GpuOp::Turn(t) => format!("turn {}", format!("{t:?}").to_lowercase()),
            GpuOp::Stage(sync) => match sync {
                StageSync::Acquire {
                    stage: st, part, ..
                } => {
                    format!("stage_acquire{}{}", part_of(*part), stage(*st))
                }
                StageSync::Filled => "stage_filled[cur]".into(),
                StageSync::Issued {
                    stage: st, part, ..
                } => {
                    format!("stage_issued{}{}", part_of(*part), stage(*st))
                }
                StageSync::Wait { part, when, by } => {
                    let when = match when {
                        Iterations::All => "",
                        Iterations::First => " (first iteration)",
                        Iterations::AfterFirst => " (after the first iteration)",
                    };
                    let by = by.map(|w| format!(" by warpgroup {w}")).unwrap_or_default();
                    format!("stage_wait{}[cur]{when}{by}", part_of(*part))
                }
                StageSync::Release { stage: st, part } => {
                    format!("stage_release{}{}", part_of(*part), stage(*st))
                }
            },
            GpuOp::StagedStore(st) => format!(
                "staged_store {} via %a{} ({} lanes a row)",
                tile_op(f, st.store),
                st.buf.0,
                st.map.lanes
            ),
        };
        let _ = writeln!(s, "{pad}{line}");
        let inner = super::program::nested(op);
        for (i, nb) in inner.iter().enumerate() {
            if i > 0 {
                let _ = writeln!(s, "{pad}}} else {{");
            }
            block(f, p, nb, depth + 1, s);
        }
        if !inner.is_empty() {
            let _ = writeln!(s, "{pad}}}");
        }
    }
}

/// A ring part's suffix: nothing for the whole ring (or its first part), `.1` for the second.
fn part_of(part: usize) -> String {
    match part {
        0 => String::new(),
        k => format!(".{k}"),
    }
}
