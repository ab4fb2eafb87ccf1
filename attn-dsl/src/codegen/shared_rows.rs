//! Row offsets a split ring's producer keeps for a later copy of the same rows (V's copy
//! after K's of the same tile, each issued after its own part's acquire): computing V's rows
//! again cost the split ring its gain.

use super::emitter::{Emitter, Role};
use super::writer::Scope as TextScope;
use crate::gpu_ir::{AsyncCopy, LocalAlloc};

/// A producer copy's per-pass row offsets kept for a later copy of the same rows: valid for
/// a copy with the same guard, the same thread distribution (rows a pass, lanes a row,
/// elements a chunk) and the same row-start expression but for its base pointer, emitted
/// while the array's block is open. The text is the proof: a producer's scalars are named
/// once (its loops carry no values), so equal text means equal rows in that iteration.
pub(crate) struct SharedRows {
    pub(crate) base: String,
    pub(crate) start: String,
    pub(crate) guard: Option<String>,
    pub(crate) dims: (usize, usize, usize),
    pub(crate) var: String,
    pub(crate) scope: TextScope,
}

/// The offset a split ring's producer keeps for a row (`src` from kernel pointer `base`):
/// in bytes with `byte_rows` (opt-in), else in elements. An element offset is a pointer
/// difference, a division by the element size the compiler keeps in the kept value (P0's
/// producer loop: 16 of its 334 SASS instructions shift the eight rows' offsets down,
/// and V's copy shifts them up again); a byte offset is the address arithmetic as it was.
pub(crate) fn rows_offset(src: &str, base: &str) -> String {
    if crate::features::on("byte_rows") {
        format!("(const char*)({src}) - (const char*)({base})")
    } else {
        format!("{src} - {base}")
    }
}

/// The row of kernel pointer `base` at the offset kept in `kept[p]` ([`rows_offset`]).
pub(crate) fn offset_rows(base: &str, kept: &str) -> String {
    if crate::features::on("byte_rows") {
        format!("reinterpret_cast<decltype(+{base})>((const char*)({base}) + {kept}[p])")
    } else {
        format!("{base} + {kept}[p]")
    }
}

/// `text` with every whole identifier `from` replaced by `to` (so `k_cache` never matches
/// inside `k_cache_scale`).
pub(crate) fn replace_ident(text: &str, from: &str, to: &str) -> String {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(from) {
        let before = rest[..at].chars().last().or_else(|| out.chars().last());
        let after = rest[at + from.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(is_ident) || after.is_some_and(is_ident) {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = &rest[at + from.len()..];
    }
    out.push_str(rest);
    out
}

impl Emitter<'_> {
    /// A split ring's producer copies whose rows a later copy may read again (V's after K's
    /// of the same tile, each issued after its own part's acquire): an array of each pass's
    /// element offset declared before the copies' guard, where the later copy still sees it.
    /// `None` for the others (and without a split ring, where K and V of a tile are one
    /// group and share rows within it). Computing V's rows again cost the split ring its
    /// gain: P0 2.344 ms, 2.113 / 2.117 with V reading K's offsets, 2.139 / 2.134 with one
    /// ring (H200, 2026-12-04, `bench/experiments/split_ring_shared_rows.py`).
    pub(crate) fn declare_shared_rows(
        &mut self,
        cs: &[&AsyncCopy],
        al: &LocalAlloc,
        lanes: usize,
    ) -> Vec<Option<(String, TextScope)>> {
        let split_ring = self.in_split_ring();
        let passes = al.rows.div_ceil(self.threads / lanes);
        cs.iter()
            .map(|c| {
                let wanted = split_ring
                    && c.map.row_contiguous
                    && self.root_pointer(self.f.op(c.load).operands[0]).is_some();
                wanted.then(|| {
                    let var = format!("attn_rows{}", self.shared_rows_declared);
                    self.shared_rows_declared += 1;
                    self.w.line(format!("long long {var}[{passes}];"));
                    (var, self.w.scope())
                })
            })
            .collect()
    }

    /// Whether this is a split ring's producer (K and V filled on their own acquires).
    pub(crate) fn in_split_ring(&self) -> bool {
        self.role == Role::Producer
            && self
                .prog
                .specialization
                .as_ref()
                .is_some_and(|ws| ws.parts > 1)
    }
}

#[cfg(test)]
mod tests {
    use super::replace_ident;

    #[test]
    fn only_whole_identifiers_are_replaced() {
        assert_eq!(
            replace_ident("(k_cache + k_cache_off) * k_cache", "k_cache", "v_cache"),
            "(v_cache + k_cache_off) * v_cache"
        );
        assert_eq!(replace_ident("xk_cache", "k_cache", "v"), "xk_cache");
    }
}
