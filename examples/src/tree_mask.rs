//! Speculative-decoding tree attention: the scheduled queries of a sequence are the nodes
//! of a draft tree (in topological order, parents first) appended after its context; a node
//! sees the whole context and the draft nodes that are its ancestors or itself.
//!
//! `aux` row of a sequence (bool, as 0 / 1): the `[TREE_SIZE, TREE_SIZE]` ancestor matrix,
//! `aux[i · TREE_SIZE + j] = 1` iff node j is an ancestor of node i or i itself. Ancestors
//! come first, so the mask is causal and the bounds are the causal ones.

use attn_dsl_macros::variant;
use attn_runtime::ops::unified_attention::variant::{AuxDtype, AuxRow, Variant};

#[variant(mask = tree_mask, bounds = tree_bounds)]
pub mod tree_mask {
    /// `k < context_len ∨ tree[q − context_len][k − context_len]`, for `k ≤ q < L`.
    #[device(require(TREE_SIZE >= 1, "TREE_SIZE must be >= 1"))]
    fn tree_mask<const TREE_SIZE: i32 = 16>(
        q_abs: Tile,
        k: Tile,
        seq_len: i32,
        context_len: i32,
        qlen: i32,
        aux: Ptr,
    ) -> Tile<bool> {
        let i = q_abs - context_len;
        let j = k - context_len;
        let in_tree = (i >= 0) & (i < qlen) & (j >= 0) & (j <= i) & (i < TREE_SIZE);
        let edge = load(aux + i * TREE_SIZE + j, in_tree, 0) != 0;
        ((k < context_len) | (in_tree & edge)) & (k <= q_abs) & (k < seq_len)
    }

    /// Causal: tiles `[0, cdiv(last query + 1, TILE))`.
    #[device]
    fn tree_bounds<const TILE_SIZE: i32, const BLOCK_Q: i32>(
        context_len: i32,
        seq_len: i32,
        qlen: i32,
        b: i32,
    ) -> (i32, i32, i32) {
        let last_q = context_len + min(b * BLOCK_Q + BLOCK_Q - 1, qlen - 1);
        let msp = min(last_q + 1, seq_len);
        (0, cdiv(msp, TILE_SIZE), msp)
    }
}

/// The tree-mask variant for trees of up to `tree_size` nodes.
pub fn variant(tree_size: i32) -> Variant {
    let n = usize::try_from(tree_size.max(1)).unwrap_or(1);
    Variant::from_source(&tree_mask::VARIANT)
        .with_constexpr("TREE_SIZE", tree_size)
        .with_aux_i32("ancestors", AuxDtype::Bool, AuxRow::Fixed(n * n))
}

/// The ancestor matrix `[n, n]` (row-major, 0 / 1) of a tree given by parent indices
/// (`parents[i] < i`, −1 for a root).
pub fn ancestors(parents: &[i32], n: usize) -> Vec<i32> {
    let mut m = vec![0; n * n];
    for i in 0..parents.len().min(n) {
        let mut j = i as i32;
        while j >= 0 {
            m[i * n + j as usize] = 1;
            j = parents[j as usize];
        }
    }
    m
}
