//! Registry entries of unified attention for `attn emit` / `attn compile`: one per
//! performance-table shape (P0 dense causal 16k, P1 Gemma4 sliding layer, P3 P1 + image
//! ranges, D1 decode), and P0/P1/P3 as an sm_90a device plans them (`_sm90a`), each
//! defaulting to the constexprs the op's plan binds for that shape;
//! `K=V` overrides any of them. `unified_attention` is P1. Like the op's launcher for a
//! contiguous cache, the entries promise every stride parameter a multiple of 16.
//!
//! The op launches up to two kernels (3D: attention + reduce) over paged inputs, which the
//! registry's one-kernel problem model does not describe: `attn run` / `attn bench` of these
//! entries go through the public op instead (`cli::unified`), and their `problem` says so.

use super::{BuiltKernel, KernelEntry};
use crate::kernels::specialization_cache::specialize_cached;
use crate::kernels::unified_attention::{module, ATTENTION_KERNEL};
use crate::ops::unified_attention::config::{AttentionProblem, MmRangeEncoding, MmaKind};
use crate::ops::unified_attention::gpu::specialization_key;
use crate::ops::unified_attention::plan::{
    attention_bindings, choose_config, MaskVariant, PathChoice,
};
use crate::problem::Problem;
use attn_dsl::codegen::emit_cuda;
use attn_dsl::ir::{ParamKind, ScalarType};
use attn_dsl::Binding;

/// The presets' entries: the four shapes as planned for `mma.sync`, and P0, P1, P3 as an
/// sm_90a device plans them (`_sm90a`: the launch table's warpgroup entries, the kernel
/// generated with its `wgmma` branch; compile with `--arch sm_90a` to see that branch).
pub(super) fn entries() -> Vec<KernelEntry> {
    vec![
        entry(
            "unified_attention",
            "unified attention, P1 shape (Gemma4 sliding, 16/8/256, W 1024)",
            p1,
        ),
        entry(
            "unified_attention_p0",
            "unified attention, P0 shape (dense causal 16/16/128)",
            p0,
        ),
        entry(
            "unified_attention_p3",
            "unified attention, P3 shape (P1 + 30 clamped image ranges)",
            p3,
        ),
        entry(
            "unified_attention_d1",
            "unified attention, D1 shape (decode 32/8/128, 2D)",
            d1,
        ),
        warpgroup_entry(
            "unified_attention_sm90a",
            "unified attention, P1 shape, as an sm_90a device plans it (warpgroup MMAs)",
            || warpgroup(p1_problem()),
        ),
        warpgroup_entry(
            "unified_attention_p0_sm90a",
            "unified attention, P0 shape, as an sm_90a device plans it (warpgroup MMAs)",
            || warpgroup(p0_problem()),
        ),
        warpgroup_entry(
            "unified_attention_p3_sm90a",
            "unified attention, P3 shape, as an sm_90a device plans it (warpgroup MMAs)",
            || warpgroup(p3_problem()),
        ),
    ]
}

fn entry(name: &'static str, summary: &'static str, defaults: fn() -> Vec<Binding>) -> KernelEntry {
    super::op_preset_entry(name, summary, defaults, build, no_problem)
}

fn warpgroup_entry(
    name: &'static str,
    summary: &'static str,
    defaults: fn() -> Vec<Binding>,
) -> KernelEntry {
    super::op_preset_entry(name, summary, defaults, build_warpgroup, emit_only)
}

/// The bindings of `p` planned for warpgroup MMAs.
fn warpgroup(p: AttentionProblem) -> Vec<Binding> {
    plan_bindings(
        AttentionProblem {
            mma: MmaKind::Warpgroup,
            ..p
        },
        PathChoice::Heuristic,
    )
}

fn plan_bindings(p: AttentionProblem, path: PathChoice) -> Vec<Binding> {
    match choose_config(&p, path) {
        // Specialized as for a positive softmax scale, every model's (the sign is all the
        // kernel's constexprs see of it).
        Ok(cfg) => attention_bindings(&cfg, ScalarType::Bf16, &MaskVariant::default(), 1.0),
        // The presets are valid configurations; an empty list makes `build` say so.
        Err(_) => vec![],
    }
}

fn p0_problem() -> AttentionProblem {
    AttentionProblem {
        max_seqlen_q: 16384,
        ..AttentionProblem::dense_causal(16, 16, 128)
    }
}

fn p0() -> Vec<Binding> {
    plan_bindings(p0_problem(), PathChoice::Heuristic)
}

fn p1_problem() -> AttentionProblem {
    AttentionProblem {
        max_seqlen_q: 8192,
        sliding_window: 1024,
        ..AttentionProblem::dense_causal(16, 8, 256)
    }
}

fn p1() -> Vec<Binding> {
    plan_bindings(p1_problem(), PathChoice::Heuristic)
}

fn p3_problem() -> AttentionProblem {
    AttentionProblem {
        mm: MmRangeEncoding::PerSequence { max_ranges: 30 },
        mm_prefix_clamp_sw: true,
        ..p1_problem()
    }
}

fn p3() -> Vec<Binding> {
    plan_bindings(p3_problem(), PathChoice::Heuristic)
}

fn d1() -> Vec<Binding> {
    let p = AttentionProblem {
        max_seqlen_q: 1,
        num_seqs: 64,
        ..AttentionProblem::dense_causal(32, 8, 128)
    };
    plan_bindings(p, PathChoice::Force2d)
}

fn build(bindings: &[Binding]) -> Result<BuiltKernel, String> {
    build_for(bindings, MmaKind::Sync)
}

fn build_warpgroup(bindings: &[Binding]) -> Result<BuiltKernel, String> {
    build_for(bindings, MmaKind::Warpgroup)
}

/// The preset's kernel as the op emits it for the tensor-core target `mma`.
fn build_for(bindings: &[Binding], mma: MmaKind) -> Result<BuiltKernel, String> {
    if bindings.is_empty() {
        return Err("internal error: the preset has no valid configuration".into());
    }
    let m = module().map_err(|e| e.to_string())?;
    let f = specialize_cached(&m, ATTENTION_KERNEL, bindings)
        .map_err(|e| format!("{} (line {})", e.message, e.span.start().line))?;
    // The shapes' caches use vLLM's contiguous layout, whose strides are all multiples of
    // 16: the op's launcher promises exactly that, so the emitted code is the op's.
    let mut f = (*f).clone();
    // (name, whether 64-bit) of each integer stride parameter.
    let strides: Vec<(String, bool)> = f
        .params
        .iter()
        .filter_map(|p| match p.kind {
            ParamKind::Scalar(t) if t.is_int() && p.name.contains("stride") => {
                Some((p.name.clone(), t == attn_dsl::ir::ScalarType::I64))
            }
            _ => None,
        })
        .collect();
    let names = |only_i64: bool| -> Vec<&str> {
        strides
            .iter()
            .filter(|(_, is_i64)| *is_i64 || !only_i64)
            .map(|(n, _)| n.as_str())
            .collect()
    };
    attn_dsl::passes::assume::divisible(&mut f, &names(false))?;
    // And, with `wide_mul`, every 64-bit one in `int`'s range, as the op promises for
    // these shapes' strides.
    if attn_dsl::features::wide_mul() {
        attn_dsl::passes::assume::fits_i32(&mut f, &names(true))?;
    }
    f.warpgroup_mma = mma == MmaKind::Warpgroup;
    let cuda = emit_cuda(&f).map_err(|e| e.to_string())?;
    Ok(BuiltKernel {
        key: specialization_key(ATTENTION_KERNEL, bindings, mma),
        cuda,
        prelude: None,
        ir: Some(f),
    })
}

fn no_problem(_: &[Binding]) -> Result<Problem, String> {
    Err(
        "the unified-attention op launches up to two kernels over paged inputs: `attn run` / \
         `attn bench` of this entry run the public op (`SEQ=<n>`, `SEQS=<n>`), not a one-kernel \
         problem"
            .into(),
    )
}

fn emit_only(_: &[Binding]) -> Result<Problem, String> {
    Err(
        "an `_sm90a` entry is for `attn emit` / `attn compile --arch sm_90a` only: `attn run` / \
         `attn bench` of the plain preset (e.g. `unified_attention_p0`) run the public op, which \
         plans the warpgroup entry itself on an sm_90a device"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The presets emit what the op launches: every stride promised a multiple of 16, so the
    /// K/V tiles move by `cp.async` (without the promise they would be staged elementwise).
    #[test]
    fn presets_carry_the_ops_stride_promises() {
        for e in entries() {
            let built = (e.build)(&(e.default_bindings)()).expect("preset builds");
            assert_eq!(
                built.cuda.source.contains("wgmma.mma_async"),
                e.name.ends_with("_sm90a"),
                "{}: warpgroup branch iff an sm_90a preset",
                e.name
            );
            let ir = built.ir.expect("ir");
            let promised: Vec<&str> = ir
                .assumed_divisible
                .iter()
                .map(|(n, _)| n.as_str())
                .collect();
            for s in ["kv_stride_block", "kv_stride_slot", "kv_stride_head"] {
                assert!(
                    promised.contains(&s),
                    "{}: {s} not promised: {promised:?}",
                    e.name
                );
            }
            assert!(
                built.cuda.source.contains("attn_cp_async16"),
                "{}: no async copy",
                e.name
            );
        }
    }
}
