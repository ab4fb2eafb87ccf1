//! Rules for tiles owned by one warpgroup ([`Layout::Owned`]): an op runs where its tiles
//! live, so every tile it reads or defines must live on the same threads. An owned op may
//! read scalars (every thread holds them) but no tile of another warpgroup or of the whole
//! program: those would need a conversion, which moves data between warpgroups.

use crate::ir::function::{Function, Op};
use crate::ir::ops::OpKind;
use crate::ir::types::Layout;

/// Warps in a warpgroup.
const WARPGROUP_WARPS: u32 = 4;

/// Checks `op`'s tiles against one another and each owned layout against the program.
pub(super) fn check(f: &Function, op: &Op) -> Result<(), String> {
    let tiles = op
        .operands
        .iter()
        .chain(&op.results)
        .map(|&v| f.ty(v))
        .filter(|t| !t.is_scalar());
    for t in tiles {
        match &t.layout {
            Layout::Owned { warpgroup, inner } => check_owned(f, *warpgroup, inner)?,
            l if owned_inside(l) => {
                return Err(format!(
                    "layout {} names its owner inside: ownership is the outermost layout",
                    crate::ir::printer::format_layout(l)
                ))
            }
            _ => {}
        }
    }
    // Control flow and terminators carry values without computing on them; the carried
    // variables' layouts are checked where they must match (`op_rules`). A handoff moves
    // its tile from one owner to another.
    if matches!(
        op.kind,
        OpKind::For
            | OpKind::If
            | OpKind::While
            | OpKind::Yield
            | OpKind::Condition
            | OpKind::Return
            | OpKind::Handoff
    ) {
        return Ok(());
    }
    let owned_input = op
        .operands
        .iter()
        .any(|&v| f.ty(v).layout.owner().is_some());
    if owned_input && op.results.iter().any(|&r| f.ty(r).is_scalar()) {
        return Err(
            "computes a scalar from a tile one warpgroup owns: every thread holds a \
                    scalar, but only the owner could compute this one (reduce to a row \
                    vector instead)"
                .into(),
        );
    }
    // An owned dot may read its A and B operands held by every warp: the code generator
    // reads those from shared memory, which every warp sees (an error where it cannot).
    let shared_operand = |v: &crate::ir::ValueId| {
        op.kind == OpKind::Dot
            && op.operands[..2].contains(v)
            && f.ty(*v).layout.owner().is_none()
            && op.results.iter().any(|&r| f.ty(r).layout.owner().is_some())
    };
    let mut owners = op
        .operands
        .iter()
        .filter(|v| !shared_operand(v))
        .chain(&op.results)
        .map(|&v| f.ty(v))
        .filter(|t| !t.is_scalar())
        .map(|t| t.layout.owner());
    match owners.next() {
        Some(first) if owners.any(|o| o != first) => Err(format!(
            "mixes tiles of different owners ({}): an op runs on the warps that hold its \
             tiles, so they must all belong to one warpgroup or all to the whole program",
            describe(op, f)
        )),
        _ => Ok(()),
    }
}

/// The owners of `op`'s tiles, operands then results.
fn describe(op: &Op, f: &Function) -> String {
    let names: Vec<String> = op
        .operands
        .iter()
        .chain(&op.results)
        .filter(|&&v| !f.ty(v).is_scalar())
        .map(|&v| match f.ty(v).layout.owner() {
            Some(w) => format!("%{} on warpgroup {w}", v.0),
            None => format!("%{} on every warp", v.0),
        })
        .collect();
    names.join(", ")
}

/// Whether an owned layout sits inside `l` (under a slice or an operand).
fn owned_inside(l: &Layout) -> bool {
    match l {
        Layout::Slice { parent, .. } | Layout::DotOperand { parent, .. } => {
            matches!(**parent, Layout::Owned { .. }) || owned_inside(parent)
        }
        _ => false,
    }
}

/// An owned layout names a warpgroup of the program and spreads over its four warps.
fn check_owned(f: &Function, warpgroup: u32, inner: &Layout) -> Result<(), String> {
    if (warpgroup + 1) * WARPGROUP_WARPS > f.num_warps {
        return Err(format!(
            "a tile owned by warpgroup {warpgroup}, which a program of {} warps does not have",
            f.num_warps
        ));
    }
    let warps = match inner {
        Layout::Mma { warps_per_cta } => Some(warps_per_cta.iter().product::<u32>()),
        Layout::Blocked(b) => Some(b.warps_per_cta.iter().product::<u32>()),
        Layout::Slice { parent, .. } | Layout::DotOperand { parent, .. } => {
            return check_owned(f, warpgroup, parent)
        }
        Layout::Owned { .. } => return Err("an owned layout inside an owned layout".into()),
        Layout::Unassigned | Layout::Shared { .. } => None,
    };
    match warps {
        Some(w) if w != WARPGROUP_WARPS => Err(format!(
            "an owned layout spread over {w} warps (a warpgroup has {WARPGROUP_WARPS})"
        )),
        _ => Ok(()),
    }
}
