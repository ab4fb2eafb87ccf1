//! Registry entries of the MLA kernels for `attn emit` / `attn compile`: the history
//! specialization the MLA-DCP op's plan launches for the L1 row (128 × 4096, 128 heads) and
//! the L2 row (128 × 32768, 16 heads) on `mma.sync`, and for L1 on sm_90a (64-head tiles on
//! two warpgroups); on sm_90a L1's fused combine + V-up and 1 × 32768's split reduce; each
//! with the plan's stride promise; `K=V` overrides any constexpr. The op launches five
//! kernels over paged inputs and an exchange, so `attn run` of these entries points at the
//! op (`gpu_mla_op`, the `mla_decode` bench).

use super::{BuiltKernel, KernelEntry};
use crate::kernels::mla_dcp::compile_kernel_assuming;
use crate::ops::mla_dcp::metadata::DcpLayout;
use crate::ops::mla_dcp::plan::{DecodePlan, DecodeStep};
use crate::ops::unified_attention::config::MmaKind;
use crate::problem::Problem;
use crate::reference::mla::MlaConfig;
use attn_dsl::passes::assume::Promises;
use attn_dsl::Binding;

/// The two entries.
pub(super) fn entries() -> Vec<KernelEntry> {
    vec![
        entry(
            "mla_history",
            "MLA history split-KV, L1 plan (128 x 4096, 128 heads, dcp 1)",
            || history_bindings(128, 4096, 128),
        ),
        entry(
            "mla_history_l2",
            "MLA history split-KV, L2 plan (128 x 32768, 16 heads, dcp 1)",
            || history_bindings(128, 32768, 16),
        ),
        entry(
            "mla_history_sm90a",
            "MLA history split-KV, L1 plan on an sm_90a device (64-head tiles on two \
             warpgroups, warpgroup MMAs)",
            || history_bindings_on(MmaKind::Warpgroup, 128, 4096, 128),
        ),
        KernelEntry {
            build: build_merge,
            ..entry(
                "mla_combine_v_up_sm90a",
                "MLA fused combine + V-up, L1 plan on an sm_90a device (one-token chunks: \
                 the current rows read from the keys)",
                || merge_bindings(128, 4096, 128),
            )
        },
        KernelEntry {
            build: build_reduce,
            ..entry(
                "mla_history_reduce_sm90a",
                "MLA history split merge, 1 x 32768 plan on an sm_90a device (64 splits)",
                || reduce_bindings(1, 32768, 128),
            )
        },
    ]
}

fn entry(name: &'static str, summary: &'static str, defaults: fn() -> Vec<Binding>) -> KernelEntry {
    super::op_preset_entry(name, summary, defaults, build, no_problem)
}

/// The plan the op makes for `batch` decode requests of `ctx` tokens over `heads` heads
/// (page 64, one rank) on a device whose dots run as `mma`.
fn plan_on(mma: MmaKind, batch: usize, ctx: u32, heads: u32) -> Option<DecodePlan> {
    let layout = DcpLayout::new(1, 1, 64).ok()?;
    let scale = MlaConfig::deepseek_v3().softmax_scale() as f32;
    let step = DecodeStep::uniform_decode(batch, ctx, heads, layout, scale, 132);
    step.plan_tuned(mma, None, None, None).ok()
}

/// The constexprs of the history launch the op plans for `batch` decode requests of `ctx`
/// tokens over `heads` heads (page 64, one rank).
fn history_bindings(batch: usize, ctx: u32, heads: u32) -> Vec<Binding> {
    history_bindings_on(MmaKind::Sync, batch, ctx, heads)
}

/// [`history_bindings`] as a device whose dots run as `mma` plans them.
fn history_bindings_on(mma: MmaKind, batch: usize, ctx: u32, heads: u32) -> Vec<Binding> {
    plan_on(mma, batch, ctx, heads)
        .map(|p| p.history.bindings())
        .unwrap_or_default()
}

/// The fused combine + V-up's constexprs in the sm_90a plan of that step, its one-token
/// chunks read from the keys (the op's default).
fn merge_bindings(batch: usize, ctx: u32, heads: u32) -> Vec<Binding> {
    plan_on(MmaKind::Warpgroup, batch, ctx, heads)
        .map(|mut p| {
            p.read_single_key_chunks_from_kv();
            p.combine_v_up.bindings()
        })
        .unwrap_or_default()
}

/// The history reduce's constexprs in the sm_90a plan of that step (empty when the step
/// runs one split: no reduce).
fn reduce_bindings(batch: usize, ctx: u32, heads: u32) -> Vec<Binding> {
    plan_on(MmaKind::Warpgroup, batch, ctx, heads)
        .and_then(|p| p.history_reduce)
        .map(|l| l.bindings())
        .unwrap_or_default()
}

fn build_reduce(bindings: &[Binding]) -> Result<BuiltKernel, String> {
    build_assuming("mla_history_reduce", bindings, &["chunk_stride_out"])
}

fn build_merge(bindings: &[Binding]) -> Result<BuiltKernel, String> {
    build_assuming("mla_combine_v_up", bindings, &["chunk_stride_out"])
}

fn build(bindings: &[Binding]) -> Result<BuiltKernel, String> {
    // The latent cache is [blocks, BLOCK_SIZE, 576] and the exchange chunks are 256-byte
    // aligned: both strides are multiples of 16, which the op's plan promises
    // (`KernelLaunch::divisible`).
    build_assuming(
        "mla_history",
        bindings,
        &["cache_stride_block", "chunk_stride_out"],
    )
}

/// `kernel` on the preset's `bindings`, with the stride parameters the op's plan promises
/// divisible by 16 (and, with `wide_mul`, the block stride in `int`'s range, as the plan
/// promises for these shapes).
fn build_assuming(
    kernel: &str,
    bindings: &[Binding],
    divisible: &[&'static str],
) -> Result<BuiltKernel, String> {
    if bindings.is_empty() {
        return Err("internal error: the preset has no valid plan".into());
    }
    let promises = Promises {
        divisible: divisible.to_vec(),
        fits_i32: divisible
            .iter()
            .copied()
            .filter(|&n| n == "cache_stride_block" && attn_dsl::features::wide_mul())
            .collect(),
    };
    let c = compile_kernel_assuming(kernel, bindings, &promises).map_err(|e| e.to_string())?;
    Ok(BuiltKernel {
        key: c.specialized.key(),
        cuda: c.cuda,
        prelude: None,
        ir: Some(c.specialized.ir),
    })
}

fn no_problem(_: &[Binding]) -> Result<Problem, String> {
    Err(
        "the MLA-DCP op launches five kernels over a paged latent cache and an exchange: run it \
         through the op (`tests/gpu_mla_op.rs`, the `mla_decode` bench), not as a one-kernel \
         problem"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merge and reduce presets build the plan's specializations: L1's fused combine +
    /// V-up reading the current rows from the keys over all 128 output columns, 1 × 32768's
    /// reduce a quarter row a program.
    #[test]
    fn presets_build_the_ops_merge_and_reduce() {
        let key = |name: &str| {
            let e = entries().into_iter().find(|e| e.name == name).expect(name);
            (e.build)(&(e.default_bindings)())
                .expect("preset builds")
                .key
        };
        let merge = key("mla_combine_v_up_sm90a");
        assert!(merge.contains("CUR_FROM_KV=true,BLOCK_V=128"), "{merge}");
        let reduce = key("mla_history_reduce_sm90a");
        assert!(
            reduce.contains("NUM_SPLITS=64,") && reduce.contains("COLS=128"),
            "{reduce}"
        );
    }

    /// The entries build the op's specialization: the stride promised, the latent tile
    /// moved by `cp.async`.
    #[test]
    fn presets_build_the_ops_history_kernel() {
        let histories = ["mla_history", "mla_history_l2", "mla_history_sm90a"];
        for e in entries()
            .into_iter()
            .filter(|e| histories.contains(&e.name))
        {
            let built = build(&(e.default_bindings)()).expect("preset builds");
            let ir = built.ir.expect("ir");
            assert!(
                ir.assumed_divisible
                    .iter()
                    .any(|(n, _)| n == "cache_stride_block"),
                "{}",
                e.name
            );
            assert!(built.cuda.source.contains("attn_cp_async16"), "{}", e.name);
            // The plan's tile heights: 32 heads for L1's 128, one 16-row slab for L2's 16,
            // a warpgroup's 64 on sm_90a.
            let heads = match e.name {
                n if n.ends_with("_l2") => 16,
                n if n.ends_with("_sm90a") => 64,
                _ => 32,
            };
            assert!(
                built.key.contains(&format!("BLOCK_H={heads},")),
                "{}: {}",
                e.name,
                built.key
            );
        }
    }
}
