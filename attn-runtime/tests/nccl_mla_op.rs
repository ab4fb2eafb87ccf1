//! The MLA-DCP decode op between TWO GPUs (feature `nccl`; fewer than 2 GPUs is a failure): one
//! process, one thread and one NCCL communicator per GPU (D = 2), the real Q all-gather and the
//! real exchange. Each rank's `y [T, N·128]` must match the dense f64 reference for its heads,
//! in the A2A mode and in the AG+RS parity mode, and the two modes must agree.

#![cfg(feature = "nccl")]

mod mla_op_support;
mod mla_support;

use attn_runtime::launch::CudaDevice;
use attn_runtime::ops::mla_dcp::op::{
    mla_dcp_decode, ExchangeMode, MlaDcpConfig, MlaDcpContext, MlaError,
};
use attn_runtime::parity::{compare, Tolerance};
use cudarc::driver::CudaContext;
use cudarc::nccl::{Comm, Id};
use half::bf16;
use mla_op_support::{check_vs_reference, from_elems, DeviceInputs, Outputs};
use mla_support::{dsv3_scale, Case, Inputs};
use std::sync::Arc;

const D: usize = 2;
const MODES: [ExchangeMode; 2] = [ExchangeMode::A2a, ExchangeMode::AgRs];

fn require_gpus() {
    let n = CudaContext::device_count().expect("CUDA driver");
    assert!(n >= D as i32, "the NCCL tests need {D} GPUs, found {n}");
}

/// Rank `r`'s y (and lat_out) for each mode of [`MODES`], run in its own thread on GPU r.
fn run_rank(
    case: &Case,
    inputs: &Inputs,
    r: usize,
    ids: [Id; 2],
) -> Vec<(Vec<f64>, Option<Vec<f64>>)> {
    let dev = CudaDevice::new(r).expect("GPU");
    let mut results = Vec::new();
    for (mode, id) in MODES.into_iter().zip(ids) {
        let main = dev.new_stream().expect("stream");
        let comm = Comm::from_rank(main.clone(), r, D, id).expect("NCCL init from rank");
        let data = DeviceInputs::<bf16>::upload(&main, case, inputs);
        let mut config = MlaDcpConfig::new(
            case.step().layout,
            r as u32,
            case.heads,
            dsv3_scale(),
            case.tokens() + 1,
            case.seq_lens.len(),
        );
        config.exchange = mode;
        let mut ctx = MlaDcpContext::new(&dev, main.clone(), config, Some(comm))
            .unwrap_or_else(|e| panic!("rank {r} {mode:?}: {e}"));
        let args = data.args(case, r, false);
        // Twice: the second call is the steady state (nothing uploaded, nothing compiled).
        for _ in 0..2 {
            mla_dcp_decode(&mut ctx, &args).unwrap_or_else(|e| panic!("rank {r} {mode:?}: {e}"));
        }
        main.synchronize().expect("the step ran");
        let y = from_elems(&main.clone_dtoh(&ctx.output()).expect("download"));
        // The fused merge (the default at D = 2, reading the own part in place) has no lat_out.
        let lat = ctx
            .latent_output()
            .map(|v| from_elems(&main.clone_dtoh(&v).expect("download")));
        results.push((y, lat));
    }
    results
}

#[test]
fn two_ranks_a2a_and_ag_rs_match_the_reference_and_each_other() {
    require_gpus();
    let case = Case::new(2, 8, 64, 4, &[300, 7, 2], &[1, 4, 2]);
    let inputs = Arc::new(Inputs::random(&case, 31));
    let ids = [Id::new().expect("NCCL id"), Id::new().expect("NCCL id")];
    let threads: Vec<_> = (0..D)
        .map(|r| {
            let (case, inputs) = (case.clone(), inputs.clone());
            std::thread::spawn(move || run_rank(&case, &inputs, r, ids))
        })
        .collect();
    let per_rank: Vec<_> = threads
        .into_iter()
        .map(|t| t.join().expect("rank thread"))
        .collect();
    for (m, mode) in MODES.iter().enumerate() {
        let out = Outputs {
            y: per_rank.iter().map(|r| r[m].0.clone()).collect(),
            lat: per_rank.iter().filter_map(|r| r[m].1.clone()).collect(),
            reports: Vec::new(),
        };
        let name = format!("NCCL D=2 {mode:?}");
        let max_abs =
            check_vs_reference(&name, &case, &inputs, &out).unwrap_or_else(|e| panic!("{e}"));
        println!("MLA {name} max_abs={max_abs:.3e}");
    }
    for (r, res) in per_rank.iter().enumerate() {
        let c = compare(
            &format!("rank {r}: A2A vs AG+RS"),
            &res[0].0,
            &res[1].0,
            Tolerance::new(2e-2, 2e-2),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        println!(
            "MLA NCCL D=2 A2A-vs-AG+RS rank {r} max_abs={:.3e}",
            c.max_abs_err
        );
    }
}

#[test]
fn a_communicator_of_the_wrong_geometry_is_a_typed_error() {
    require_gpus();
    let case = Case::new(2, 8, 64, 4, &[30], &[1]);
    let id = Id::new().expect("NCCL id");
    let threads: Vec<_> = (0..D)
        .map(|r| {
            let case = case.clone();
            std::thread::spawn(move || {
                let dev = CudaDevice::new(r).expect("GPU");
                let main = dev.new_stream().expect("stream");
                let comm = Comm::from_rank(main.clone(), r, D, id).expect("NCCL init");
                // Rank r's communicator handed to a context that claims to be rank 1 − r.
                let config = MlaDcpConfig::new(
                    case.step().layout,
                    1 - r as u32,
                    case.heads,
                    dsv3_scale(),
                    4,
                    1,
                );
                MlaDcpContext::<bf16>::new(&dev, main, config, Some(comm)).err()
            })
        })
        .collect();
    for t in threads {
        let err = t.join().expect("rank thread");
        assert!(
            matches!(err, Some(MlaError::CommGeometry { .. })),
            "{err:?}"
        );
    }
}
