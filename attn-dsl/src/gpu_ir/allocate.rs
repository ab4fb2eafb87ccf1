//! Shared-memory allocation by liveness: each alloc lives from its first to its last access in
//! program order (a use inside a loop keeps it alive for the whole loop, since the next
//! iteration comes back to it); allocs whose lives do not overlap share bytes. Offsets are
//! 16-byte aligned (what `cp.async` and `ldmatrix` rows need), 1024-byte aligned for swizzled
//! allocs (whole swizzle atoms, as tensor-core descriptors address them). The TMA copies'
//! mbarriers and the warp-specialized ring's follow the allocs; the tile emitter's scratch
//! buffer comes after them.

use super::program::{AllocId, GpuBlock, GpuOp, GpuProgram};

/// Assigns every alloc's offset and the program's `alloc_bytes`.
pub fn run(p: &mut GpuProgram) {
    let mut live = vec![None::<(usize, usize)>; p.allocs.len()];
    let mut clock = 0;
    number(&p.body, &mut clock, &mut live);
    // The producer may fill its ring before the consumers reach the loop: the allocs it
    // writes are alive from the start to the end of the loop (the consumers' last read).
    if let Some(ws) = &p.specialization {
        let mut ring = vec![None; live.len()];
        number(&ws.producer, &mut 0, &mut ring);
        for (l, r) in live.iter_mut().zip(&ring) {
            if r.is_some() {
                *l = Some((0, l.map_or(clock, |l| l.1)));
            }
        }
    }
    // A staged store's buffer stays alive to the end: its last chunk reads are not followed
    // by a barrier, so no later access may reuse its bytes (the ring a loop before it used
    // may: the store's leading barrier orders those reads).
    super::program::walk_block(&p.body, &mut |op| {
        if let GpuOp::StagedStore(s) = op {
            touch(&mut live, s.buf, clock, usize::MAX);
        }
    });
    let mut order: Vec<usize> = (0..p.allocs.len()).collect();
    order.sort_by_key(|&i| live[i].map(|l| l.0).unwrap_or(usize::MAX));
    let mut placed: Vec<(usize, usize, (usize, usize))> = Vec::new();
    let mut total = 0;
    for i in order {
        let span = live[i].unwrap_or((0, 0));
        let size = p.allocs[i].bytes();
        let align = p.allocs[i].alignment();
        let mut offset = 0;
        // First fit among the placed allocs whose lives overlap this one's.
        let mut clashes: Vec<(usize, usize)> = placed
            .iter()
            .filter(|(_, _, l)| l.0 <= span.1 && span.0 <= l.1)
            .map(|&(o, s, _)| (o, s))
            .collect();
        clashes.sort();
        for (o, s) in clashes {
            if offset + size <= o {
                break;
            }
            offset = offset.max((o + s).next_multiple_of(align));
        }
        p.allocs[i].offset = offset;
        placed.push((offset, size, span));
        total = total.max(offset + size);
    }
    p.tma_offset = total.next_multiple_of(8);
    let ws_offset = p.tma_offset + p.tma_bytes();
    if let Some(ws) = &mut p.specialization {
        ws.mbar_offset = ws_offset;
    }
    p.alloc_bytes = (ws_offset + p.ws_bytes()).next_multiple_of(16);
}

/// Numbers ops in program order and records each alloc's live range.
fn number(b: &GpuBlock, clock: &mut usize, live: &mut [Option<(usize, usize)>]) {
    for op in &b.ops {
        *clock += 1;
        let start = *clock;
        for a in accessed(op) {
            touch(live, a, start, start);
        }
        if let GpuOp::For { body, .. } | GpuOp::While { after: body, .. } = op {
            let mut inner = vec![None; live.len()];
            if let GpuOp::While { before, .. } = op {
                number(before, clock, &mut inner);
            }
            number(body, clock, &mut inner);
            // Used anywhere in the loop: alive for all of it.
            for (i, l) in inner.iter().enumerate() {
                if l.is_some() {
                    touch(live, AllocId(i as u32), start, *clock);
                }
            }
        } else {
            for inner in super::program::nested(op) {
                number(inner, clock, live);
            }
        }
    }
}

fn touch(live: &mut [Option<(usize, usize)>], a: AllocId, lo: usize, hi: usize) {
    let e = &mut live[a.0 as usize];
    *e = Some(match *e {
        Some((l, h)) => (l.min(lo), h.max(hi)),
        None => (lo, hi),
    });
}

fn accessed(op: &GpuOp) -> Vec<AllocId> {
    match op {
        GpuOp::AsyncCopy(c) => vec![c.dst],
        GpuOp::StagedStore(s) => vec![s.buf],
        GpuOp::Mma { a, b, .. } => [a.alloc(), b.alloc()]
            .into_iter()
            .flatten()
            .map(|(id, _)| id)
            .collect(),
        _ => vec![],
    }
}
