//! The MLA step's small kernels' emitted CUDA, as the GPU op launches it (the plan's
//! constexprs and divisibility promises, so the `cp.async` paths), run on the CPU simulator of
//! attn-dsl's codegen tests (g++, one std::thread per CUDA thread) against the CPU executor on
//! the same random inputs, outputs poisoned. The GPU runs this code only in device calls; here
//! CI checks its data movement: the current part's, the combine's, and the fused merge's part
//! accumulators, its `W_UV` steps shared by every part and the own part's select between the
//! send and receive buffers.
//! Skipped when g++ is missing.

#[path = "../../attn-dsl/tests/codegen_common/cpu_sim.rs"]
#[allow(dead_code)]
mod cpu_sim;

use attn_dsl::interp::HostBuffer;
use attn_dsl::ir::{Function, ParamKind, ScalarType};
use attn_dsl::kernel::ScalarArg;
use attn_runtime::kernels::mla_dcp::specialize_kernel;
use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
use attn_runtime::ops::mla_dcp::plan::{BufferRole, DecodePlan, DecodeStep, KernelLaunch, PlanArg};
use attn_runtime::split_mix64::SplitMix64;
use cpu_sim::SimArg;

fn plan(d: u32) -> DecodePlan {
    DecodeStep {
        query_lens: vec![1, 4, 2, 1],
        seq_lens: vec![300, 90, 40, 7],
        layout: DcpLayout::new(d, 8, 64).expect("layout"),
        heads_per_rank: 2,
        dtype: ScalarType::Bf16,
        softmax_scale: 0.135,
        block_table_stride: 8,
        num_sms: 132,
    }
    .plan()
    .expect("plan")
}

/// Whether argument `i` of `f` is a buffer the kernel writes.
fn writes(f: &Function, i: usize) -> bool {
    matches!(
        f.params.get(i).map(|p| p.kind),
        Some(ParamKind::Ptr { mutable: true, .. })
    )
}

/// The launch's arguments: random buffers (LSEs in a range whose weights all count, one row
/// of each LSE buffer not finite, so a dropped part is exercised), the outputs poisoned.
fn args(plan: &DecodePlan, l: &KernelLaunch, f: &Function, seed: u64) -> Vec<SimArg> {
    let mut rng = SplitMix64(seed);
    l.args
        .iter()
        .enumerate()
        .map(|(i, a)| match *a {
            PlanArg::Buffer(role) => {
                let (t, n) = (plan.buffer_dtype(role), plan.buffer_len(role).unwrap_or(0));
                match role {
                    // The step's metadata, as the op uploads it.
                    BufferRole::TokenReq => SimArg::Buf(HostBuffer::I32(plan.step.token_req())),
                    BufferRole::CuSeqlensQ => {
                        SimArg::Buf(HostBuffer::I32(plan.step.cu_seqlens_q()))
                    }
                    _ if writes(f, i) => SimArg::Buf(HostBuffer::poisoned(t, n)),
                    BufferRole::RecvLse | BufferRole::SendLse | BufferRole::CurLse => {
                        let mut v: Vec<f64> = (0..n).map(|_| rng.uniform(-3.0, 3.0)).collect();
                        if let Some(x) = v.get_mut(n / 3) {
                            *x = f64::NEG_INFINITY;
                        }
                        SimArg::Buf(HostBuffer::from_f64s(t, &v))
                    }
                    _ => {
                        let v: Vec<f64> = (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect();
                        SimArg::Buf(HostBuffer::from_f64s(t, &v))
                    }
                }
            }
            PlanArg::I32(v) => SimArg::Scalar(ScalarArg::I32(v)),
            PlanArg::I64(v) => SimArg::Scalar(ScalarArg::I64(v)),
            PlanArg::F32(v) => SimArg::Scalar(ScalarArg::F32(v)),
        })
        .collect()
}

/// Runs `l` both ways and compares its outputs.
fn check(label: &str, plan: &DecodePlan, l: &KernelLaunch, seed: u64) {
    if !cpu_sim::have_gxx() {
        eprintln!("skipping {label}: no g++");
        return;
    }
    let f = specialize_kernel(l.kernel, &l.bindings()).expect("specialize");
    let cuda = l.compile().expect("compile").cuda;
    let mut want = args(plan, l, &f, seed);
    cpu_sim::run_interp(&f, l.grid, &mut want).unwrap_or_else(|e| panic!("{label}: {e}"));
    let mut got = args(plan, l, &f, seed);
    cpu_sim::run(&cuda, l.grid, &mut got).unwrap_or_else(|e| panic!("{label}: {e}"));
    let mut compared = 0;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let (SimArg::Buf(g), SimArg::Buf(w), true) = (g, w, writes(&f, i)) else {
            continue;
        };
        for (j, (a, b)) in g.to_f64s().iter().zip(w.to_f64s()).enumerate() {
            // NaN (a poisoned element either side left unwritten) never passes.
            assert!(
                (a - b).abs() <= 2e-2 * (1.0 + b.abs()),
                "{label}: output[{j}]: simulated {a}, executor {b}"
            );
            compared += 1;
        }
    }
    assert!(compared > 0, "{label}: nothing compared");
}

/// [`check`] of the launch `launch` picks from the plan of each group size in `groups`.
fn check_groups(
    what: &str,
    groups: &[u32],
    seed: u64,
    launch: impl Fn(&DecodePlan) -> KernelLaunch,
) {
    for &d in groups {
        let p = plan(d);
        check(
            &format!("{what} D={d}"),
            &p,
            &launch(&p),
            seed + u64::from(d),
        );
    }
}

#[test]
fn fused_merge_matches_the_executor_with_and_without_the_own_part() {
    check_groups("fused merge", &[1, 2], 40, |p| p.combine_v_up.clone());
    for rank in 0..2 {
        let own = |p: &DecodePlan| p.combine_v_up_reading_own_part(rank);
        // Rank 1 is in the group of two only.
        check_groups(
            &format!("fused merge, own part {rank}"),
            &[1, 2][rank as usize..],
            50,
            own,
        );
    }
}

#[test]
fn combine_matches_the_executor() {
    check_groups("combine", &[1, 2, 4], 60, |p| p.combine.clone());
}

/// The current part: a mixed chunk (query lengths 1, 4, 2, 1), its causal mask inside the
/// chunk, the rows of the ragged head tile.
#[test]
fn current_part_matches_the_executor() {
    check_groups("current part", &[1, 2], 70, |p| p.current.clone());
}
