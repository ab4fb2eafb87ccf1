//! Helpers of the MLA-DCP op tests (one GPU and NCCL): a step's inputs on the device, the
//! per-rank outputs, and their comparison with the dense f64 reference of `mla_support`.

#![allow(dead_code)]

use super::mla_support::{rank_slice, reference, table_and_shards, tolerances, Case, Inputs};
use attn_runtime::ops::mla_dcp::act_dtype::ActivationElem;
use attn_runtime::ops::mla_dcp::cpu::current_kv;
use attn_runtime::ops::mla_dcp::op::{DecodeElem, LaunchReport, MlaDcpDecodeArgs};
use attn_runtime::ops::mla_dcp::plan::{LATENT, QK_WIDTH, V_HEAD};
use attn_runtime::parity::{compare, CompareError};
use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::Arc;

pub fn to_elems<E: ActivationElem>(v: impl IntoIterator<Item = f64>) -> Vec<E> {
    v.into_iter().map(|x| E::from_f32(x as f32)).collect()
}

pub fn from_elems<E: ActivationElem>(v: &[E]) -> Vec<f64> {
    v.iter().map(|e| f64::from(e.to_f32())).collect()
}

/// The step's inputs on the device: per rank its shard, q_loc and W_UV; shared q_all, cur_kv
/// and the block table.
pub struct DeviceInputs<E> {
    pub caches: Vec<CudaSlice<E>>,
    pub q_locs: Vec<CudaSlice<E>>,
    pub w_uvs: Vec<CudaSlice<E>>,
    pub q_all: CudaSlice<E>,
    pub cur_kv: CudaSlice<E>,
    pub table: CudaSlice<i32>,
    /// Host copy of `table` (the op validates page ids through it).
    pub table_host: Vec<i32>,
    pub stride: usize,
}

impl<E: DecodeElem> DeviceInputs<E> {
    pub fn upload(stream: &Arc<CudaStream>, case: &Case, inputs: &Inputs) -> Self {
        Self::upload_padded(stream, case, inputs, 0)
    }

    /// [`Self::upload`] with every shard's cache padded with NaN to at least `cache_len`
    /// elements (whole blocks past the shard, never read), so the caches of different
    /// steps fit one buffer.
    pub fn upload_padded(
        stream: &Arc<CudaStream>,
        case: &Case,
        inputs: &Inputs,
        cache_len: usize,
    ) -> Self {
        let plan = case.plan();
        let (table, shards) = table_and_shards(&plan, inputs);
        let (d, n, t) = (case.d as usize, case.heads as usize, case.tokens());
        let q = t * n * QK_WIDTH;
        let w = n * LATENT * V_HEAD;
        let up = |v: Vec<E>| stream.clone_htod(&v).expect("upload");
        let f64s = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
        DeviceInputs {
            caches: shards
                .iter()
                .map(|s| {
                    let mut c = s.cache.to_f64s();
                    if c.len() < cache_len {
                        c.resize(cache_len, f64::NAN);
                    }
                    up(to_elems(c))
                })
                .collect(),
            q_locs: (0..d)
                .map(|r| up(to_elems(f64s(&inputs.queries[r * q..(r + 1) * q]))))
                .collect(),
            w_uvs: (0..d)
                .map(|r| up(to_elems(f64s(&inputs.w_uv[r * w..(r + 1) * w]))))
                .collect(),
            q_all: up(to_elems(f64s(&inputs.queries))),
            cur_kv: up(to_elems(f64s(&current_kv(&plan, &inputs.latents)))),
            table: stream.clone_htod(&table).expect("upload"),
            table_host: table,
            stride: plan.step.block_table_stride,
        }
    }

    /// Copies `from`'s buffers into this step's (same sizes), keeping the addresses a
    /// captured graph holds.
    pub fn overwrite_from(&mut self, stream: &Arc<CudaStream>, from: &Self) {
        fn copy<T: cudarc::driver::DeviceRepr>(
            s: &Arc<CudaStream>,
            src: &CudaSlice<T>,
            dst: &mut CudaSlice<T>,
        ) {
            assert_eq!(src.len(), dst.len(), "captured buffers keep their size");
            s.memcpy_dtod(src, dst)
                .expect("copy into the captured buffer");
        }
        let pairs = |a: &mut Vec<CudaSlice<E>>, b: &Vec<CudaSlice<E>>| {
            assert_eq!(a.len(), b.len(), "ranks");
            for (dst, src) in a.iter_mut().zip(b) {
                copy(stream, src, dst);
            }
        };
        pairs(&mut self.caches, &from.caches);
        pairs(&mut self.q_locs, &from.q_locs);
        pairs(&mut self.w_uvs, &from.w_uvs);
        copy(stream, &from.q_all, &mut self.q_all);
        copy(stream, &from.cur_kv, &mut self.cur_kv);
        copy(stream, &from.table, &mut self.table);
        assert_eq!(self.stride, from.stride, "block-table stride");
        self.table_host.clone_from(&from.table_host);
    }

    pub fn args<'a>(
        &'a self,
        case: &'a Case,
        r: usize,
        with_q_all: bool,
    ) -> MlaDcpDecodeArgs<'a, E> {
        MlaDcpDecodeArgs {
            query_lens: &case.query_lens,
            seq_lens: &case.seq_lens,
            q_loc: self.q_locs[r].as_view(),
            q_all: with_q_all.then(|| self.q_all.as_view()),
            cur_kv: self.cur_kv.as_view(),
            cache: self.caches[r].as_view(),
            block_table: self.table.as_view(),
            block_table_host: &self.table_host,
            block_table_stride: self.stride,
            w_uv: self.w_uvs[r].as_view(),
        }
    }
}

/// Each rank's (y, lat_out) after one simulated step.
pub struct Outputs {
    pub y: Vec<Vec<f64>>,
    /// Each rank's `lat_out`; none when the step fused the combine with V-up.
    pub lat: Vec<Vec<f64>>,
    pub reports: Vec<LaunchReport>,
}

/// Compares every rank's y (and lat_out) with the f64 reference; returns the worst y error.
pub fn check_vs_reference(
    name: &str,
    case: &Case,
    inputs: &Inputs,
    out: &Outputs,
) -> Result<f64, CompareError> {
    let (lat_ref, y_ref) = reference(case, inputs);
    let (lat_tol, y_tol) = tolerances(case.dtype);
    let mut worst: f64 = 0.0;
    assert!(
        out.lat.is_empty() || out.lat.len() == case.d as usize,
        "{name}: a lat_out for some ranks only"
    );
    for (r, lat) in out.lat.iter().enumerate() {
        compare(
            &format!("{name}: lat_out rank {r}"),
            lat,
            &rank_slice(&lat_ref, case, r, LATENT),
            lat_tol,
        )?;
    }
    for r in 0..case.d as usize {
        let c = compare(
            &format!("{name}: y rank {r}"),
            &out.y[r],
            &rank_slice(&y_ref, case, r, V_HEAD),
            y_tol,
        )?;
        worst = worst.max(c.max_abs_err);
    }
    Ok(worst)
}
