//! Test programs moved onto warpgroups (`Layout::Owned`): a 4-warp program's tiles owned
//! by one warpgroup of an 8-warp program, or each of two chains by its own warpgroup.

use attn_dsl::ir::{Function, Layout};

/// `f` (laid out for 4 warps) on warpgroup `w` of a program of `warps` warps: every tile
/// owned by it.
pub fn on_warpgroup(mut f: Function, w: u32, warps: u32) -> Function {
    own(&mut f, |_| Some(w));
    f.num_warps = warps;
    f
}

/// Lays `f` out (for its own warps) and gives each tile value the owner `owner(index)`.
pub fn own(f: &mut Function, owner: impl Fn(usize) -> Option<u32>) {
    attn_dsl::passes::layout::run(f);
    for (i, v) in f.values.iter_mut().enumerate() {
        if v.ty.is_scalar() {
            continue;
        }
        if let Some(w) = owner(i) {
            let inner = Box::new(std::mem::take(&mut v.ty.layout));
            v.ty.layout = Layout::Owned {
                warpgroup: w,
                inner,
            };
        }
    }
}

/// Two softmax slabs a program: rows `[0, 16)` of each program's block on warpgroup 0,
/// rows `[16, 32)` on warpgroup 1 (every tile the second slab's ops define owned by it).
pub fn two_softmaxes() -> Function {
    let mut f = super::softmax_slabs(16, 128, 4, 2);
    let slab = defining_lines(&f);
    own(&mut f, |i| slab[i].map(|line| line / 100));
    f.num_warps = 8;
    f
}

/// The source line of the op defining each value (`None` for block arguments).
fn defining_lines(f: &Function) -> Vec<Option<u32>> {
    let mut lines = vec![None; f.values.len()];
    for op in &f.ops {
        for r in &op.results {
            lines[r.0 as usize] = Some(op.loc.line);
        }
    }
    lines
}
