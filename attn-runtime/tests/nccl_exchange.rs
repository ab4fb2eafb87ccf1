//! NCCL collectives of MLA-DCP between 2 GPUs (feature `nccl`; fewer than 2 GPUs is a failure):
//! the history A2A moves exactly the permuted bytes (single process over both devices, and one
//! thread per GPU), the Q all-gather is rank-major, AG+RS merges like the f64 reference and like
//! the A2A path, and bad inputs come back as typed errors before any NCCL call.

#![cfg(feature = "nccl")]

use attn_runtime::ops::mla_dcp::act_dtype::ActDtype;
use attn_runtime::ops::mla_dcp::ag_rs::{ag_rs_single_process, AgRsBuffers, LseCorrection};
use attn_runtime::ops::mla_dcp::chunk_layout::ChunkLayout;
use attn_runtime::ops::mla_dcp::exchange::{
    a2a_rank, a2a_single_process, all_gather_single_process, ExchangeError, SelfChunk,
};
use attn_runtime::problem::SplitMix64;
use cudarc::driver::{CudaContext, CudaSlice, CudaViewMut};
use cudarc::nccl::{Comm, Id};
use half::bf16;
use std::sync::Mutex;

mod mla_partials;
use mla_partials::{merge_f64, random_partials};

/// NCCL communicators of concurrently running tests would contend for the same GPUs.
static GPUS: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    GPUS.lock().unwrap_or_else(|e| e.into_inner())
}

const D: usize = 2;

fn comms() -> Vec<Comm> {
    let n = CudaContext::device_count().expect("CUDA driver");
    assert!(n >= D as i32, "the NCCL tests need {D} GPUs, found {n}");
    let streams = (0..D)
        .map(|i| CudaContext::new(i).unwrap().new_stream().unwrap())
        .collect();
    Comm::from_devices(streams).expect("NCCL communicators over both GPUs")
}

fn layout() -> ChunkLayout {
    ChunkLayout::new(D, 16, 3, 512, ActDtype::Bf16).unwrap()
}

const POISON: u8 = 0xA5;

fn check_a2a(c: &ChunkLayout, sends: &[Vec<u8>], recvs: &[Vec<u8>], self_chunk: SelfChunk) {
    let cb = c.chunk_bytes();
    for (r, recv) in recvs.iter().enumerate() {
        for (p, send) in sends.iter().enumerate() {
            let got = &recv[c.chunk_offset(p)..c.chunk_offset(p) + cb];
            let sent = &send[c.chunk_offset(r)..c.chunk_offset(r) + cb];
            if p == r && self_chunk == SelfChunk::Skip {
                assert!(
                    got.iter().all(|&b| b == POISON),
                    "Skip: rank {r}'s own chunk was written"
                );
            } else {
                let bad = got.iter().zip(sent).filter(|(a, b)| a != b).count();
                assert_eq!(bad, 0, "{self_chunk:?}: recv[{r}] chunk {p} differs from send[{p}] chunk {r} in {bad} bytes");
            }
        }
    }
}

#[test]
fn a2a_single_process_moves_exactly_the_permuted_bytes() {
    let _g = lock();
    let comms = comms();
    let c = layout();
    for (k, self_chunk) in [SelfChunk::Copy, SelfChunk::Nccl, SelfChunk::Skip]
        .into_iter()
        .enumerate()
    {
        let mut rng = SplitMix64(100 + k as u64);
        let sends_host: Vec<Vec<u8>> = (0..D).map(|_| rng.bytes(c.total_bytes())).collect();
        let sends: Vec<CudaSlice<u8>> = comms
            .iter()
            .zip(&sends_host)
            .map(|(cm, h)| cm.stream().clone_htod(h).unwrap())
            .collect();
        let mut recvs: Vec<CudaSlice<u8>> = comms
            .iter()
            .map(|cm| {
                cm.stream()
                    .clone_htod(&vec![POISON; c.total_bytes()])
                    .unwrap()
            })
            .collect();
        let send_views: Vec<_> = sends.iter().map(|s| s.as_view()).collect();
        let mut recv_views: Vec<CudaViewMut<u8>> =
            recvs.iter_mut().map(|r| r.as_view_mut()).collect();
        a2a_single_process(&comms, &c, &send_views, &mut recv_views, self_chunk).unwrap();
        drop(recv_views);
        let recvs_host: Vec<Vec<u8>> = comms
            .iter()
            .zip(&recvs)
            .map(|(cm, r)| cm.stream().clone_dtoh(r).unwrap())
            .collect();
        check_a2a(&c, &sends_host, &recvs_host, self_chunk);
    }
}

#[test]
fn a2a_rank_one_thread_per_gpu() {
    let _g = lock();
    let n = CudaContext::device_count().expect("CUDA driver");
    assert!(n >= D as i32, "the NCCL tests need {D} GPUs, found {n}");
    let id = Id::new().expect("NCCL unique id");
    let c = layout();
    let threads: Vec<_> = (0..D)
        .map(|r| {
            std::thread::spawn(move || {
                let stream = CudaContext::new(r).unwrap().new_stream().unwrap();
                let comm = Comm::from_rank(stream.clone(), r, D, id).expect("NCCL init from rank");
                let send_host = SplitMix64(200 + r as u64).bytes(c.total_bytes());
                let send = stream.clone_htod(&send_host).unwrap();
                let mut recv = stream.clone_htod(&vec![POISON; c.total_bytes()]).unwrap();
                a2a_rank(
                    &comm,
                    &c,
                    &send.as_view(),
                    &mut recv.as_view_mut(),
                    SelfChunk::Copy,
                )
                .unwrap();
                (send_host, stream.clone_dtoh(&recv).unwrap())
            })
        })
        .collect();
    let (sends, recvs): (Vec<_>, Vec<_>) = threads.into_iter().map(|t| t.join().unwrap()).unzip();
    check_a2a(&c, &sends, &recvs, SelfChunk::Copy);
}

#[test]
fn all_gather_of_q_is_rank_major() {
    let _g = lock();
    let comms = comms();
    let per_rank = 3 * 16 * 576;
    let mut rng = SplitMix64(300);
    let q_host: Vec<Vec<bf16>> = (0..D)
        .map(|_| {
            (0..per_rank)
                .map(|_| bf16::from_f32(rng.nonzero_unit_f32()))
                .collect()
        })
        .collect();
    let q_loc: Vec<CudaSlice<bf16>> = comms
        .iter()
        .zip(&q_host)
        .map(|(cm, h)| cm.stream().clone_htod(h).unwrap())
        .collect();
    let mut q_all: Vec<CudaSlice<bf16>> = comms
        .iter()
        .map(|cm| {
            cm.stream()
                .clone_htod(&vec![bf16::NAN; D * per_rank])
                .unwrap()
        })
        .collect();
    let sends: Vec<_> = q_loc.iter().map(|s| s.as_view()).collect();
    let mut recvs: Vec<_> = q_all.iter_mut().map(|s| s.as_view_mut()).collect();
    all_gather_single_process(&comms, &sends, &mut recvs).unwrap();
    drop(recvs);
    let want: Vec<u16> = q_host.iter().flatten().map(|v| v.to_bits()).collect();
    for (r, (cm, got)) in comms.iter().zip(&q_all).enumerate() {
        let got: Vec<u16> = cm
            .stream()
            .clone_dtoh(got)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert!(got == want, "rank {r}: q_all is not [q_loc_0, q_loc_1]");
    }
}

#[test]
fn ag_rs_matches_the_f64_merge_and_the_a2a_path() {
    let _g = lock();
    let comms = comms();
    let c = ChunkLayout::new(D, 4, 3, 64, ActDtype::Bf16).unwrap();
    let (n, t_, l_) = (c.heads, c.tokens, c.latent);
    let dn = D * n;
    let mut rng = SplitMix64(400);
    // Rank 1 has an empty shard for token 0: lse −∞ and a NaN output that must not leak.
    let parts = random_partials::<bf16>(&mut rng, &c);
    // AG+RS.
    let corrections: Vec<LseCorrection> = comms
        .iter()
        .map(|cm| LseCorrection::new(&cm.stream()).unwrap())
        .collect();
    let outs: Vec<CudaSlice<bf16>> = comms
        .iter()
        .zip(&parts)
        .map(|(cm, p)| cm.stream().clone_htod(&p.0).unwrap())
        .collect();
    let lses: Vec<CudaSlice<f32>> = comms
        .iter()
        .zip(&parts)
        .map(|(cm, p)| cm.stream().clone_htod(&p.1).unwrap())
        .collect();
    let mut bufs: Vec<AgRsBuffers> = comms
        .iter()
        .map(|cm| AgRsBuffers::new(&cm.stream(), &c).unwrap())
        .collect();
    for (cm, b) in comms.iter().zip(bufs.iter_mut()) {
        cm.stream()
            .memcpy_htod(&vec![f32::NAN; t_ * n * l_], &mut b.merged_out)
            .unwrap();
    }
    let out_views: Vec<_> = outs.iter().map(|s| s.as_view()).collect();
    let lse_views: Vec<_> = lses.iter().map(|s| s.as_view()).collect();
    ag_rs_single_process(&comms, &corrections, &c, &out_views, &lse_views, &mut bufs).unwrap();
    // A2A of the packed partials.
    let sends: Vec<CudaSlice<u8>> = comms
        .iter()
        .zip(&parts)
        .map(|(cm, p)| {
            cm.stream()
                .clone_htod(&c.pack_host(&p.0, &p.1).unwrap())
                .unwrap()
        })
        .collect();
    let mut recvs: Vec<CudaSlice<u8>> = comms
        .iter()
        .map(|cm| cm.stream().alloc_zeros::<u8>(c.total_bytes()).unwrap())
        .collect();
    let send_views: Vec<_> = sends.iter().map(|s| s.as_view()).collect();
    let mut recv_views: Vec<_> = recvs.iter_mut().map(|s| s.as_view_mut()).collect();
    a2a_single_process(&comms, &c, &send_views, &mut recv_views, SelfChunk::Copy).unwrap();
    drop(recv_views);
    for (r, cm) in comms.iter().enumerate() {
        let merged = cm.stream().clone_dtoh(&bufs[r].merged_out).unwrap();
        let recv = cm.stream().clone_dtoh(&recvs[r]).unwrap();
        let chunks: Vec<(Vec<bf16>, Vec<f32>)> = (0..D)
            .map(|p| c.unpack_chunk_host(&recv, p).unwrap())
            .collect();
        for t in 0..t_ {
            for h in 0..n {
                let g = r * n + h;
                let reference: Vec<(Vec<f64>, f64)> = parts
                    .iter()
                    .map(|(o, l)| {
                        (
                            (0..l_).map(|x| o[(t * dn + g) * l_ + x].to_f64()).collect(),
                            l[t * dn + g] as f64,
                        )
                    })
                    .collect();
                let via_a2a: Vec<(Vec<f64>, f64)> = chunks
                    .iter()
                    .map(|(o, l)| {
                        (
                            (0..l_).map(|x| o[(h * t_ + t) * l_ + x].to_f64()).collect(),
                            l[h * t_ + t] as f64,
                        )
                    })
                    .collect();
                let (want, _) = merge_f64(&reference, l_);
                let (a2a, _) = merge_f64(&via_a2a, l_);
                for x in 0..l_ {
                    let got = merged[(t * n + h) * l_ + x] as f64;
                    assert!(
                        (got - want[x]).abs() <= 1e-4 * (1.0 + want[x].abs()),
                        "AG+RS rank {r} t={t} h={h} x={x}: {got} vs {}",
                        want[x]
                    );
                    // The A2A carries the exact partials, so its merge equals the reference bit for bit.
                    assert!(
                        a2a[x].to_bits() == want[x].to_bits(),
                        "A2A rank {r} t={t} h={h} x={x}: {} vs {}",
                        a2a[x],
                        want[x]
                    );
                }
            }
        }
    }
}

#[test]
fn bad_inputs_are_typed_errors_before_any_nccl_call() {
    let _g = lock();
    let comms = comms();
    let c = layout();
    let sends: Vec<CudaSlice<u8>> = comms
        .iter()
        .map(|cm| cm.stream().alloc_zeros::<u8>(c.total_bytes()).unwrap())
        .collect();
    let mut recvs: Vec<CudaSlice<u8>> = comms
        .iter()
        .map(|cm| cm.stream().alloc_zeros::<u8>(c.total_bytes()).unwrap())
        .collect();
    let short = comms[1]
        .stream()
        .alloc_zeros::<u8>(c.total_bytes() - 1)
        .unwrap();
    let send_views: Vec<_> = sends.iter().map(|s| s.as_view()).collect();

    let wrong_d = ChunkLayout::new(3, 16, 3, 512, ActDtype::Bf16).unwrap();
    let mut rv: Vec<_> = recvs.iter_mut().map(|s| s.as_view_mut()).collect();
    let err =
        a2a_single_process(&comms, &wrong_d, &send_views, &mut rv, SelfChunk::Copy).unwrap_err();
    assert!(
        matches!(err, ExchangeError::WorldSizeMismatch { world: 2, ranks: 3 }),
        "{err}"
    );

    let err =
        a2a_single_process(&comms, &c, &send_views[..1], &mut rv, SelfChunk::Copy).unwrap_err();
    assert!(
        matches!(
            err,
            ExchangeError::RankCount {
                got: 1,
                expected: 2,
                ..
            }
        ),
        "{err}"
    );

    let short_sends = [sends[0].as_view(), short.as_view()];
    let err = a2a_single_process(&comms, &c, &short_sends, &mut rv, SelfChunk::Copy).unwrap_err();
    assert!(
        matches!(
            err,
            ExchangeError::BufferTooSmall {
                buffer: "hist_send",
                rank: 1,
                ..
            }
        ),
        "{err}"
    );

    // A buffer on the other GPU.
    let swapped = [sends[1].as_view(), sends[0].as_view()];
    let err = a2a_single_process(&comms, &c, &swapped, &mut rv, SelfChunk::Copy).unwrap_err();
    assert!(
        matches!(
            err,
            ExchangeError::WrongDevice {
                buffer: "hist_send",
                rank: 0,
                got: 1,
                expected: 0
            }
        ),
        "{err}"
    );
    drop(rv);

    let q: Vec<CudaSlice<f32>> = comms
        .iter()
        .map(|cm| cm.stream().alloc_zeros::<f32>(10).unwrap())
        .collect();
    let mut q_all: Vec<CudaSlice<f32>> = comms
        .iter()
        .map(|cm| cm.stream().alloc_zeros::<f32>(19).unwrap())
        .collect();
    let qv: Vec<_> = q.iter().map(|s| s.as_view()).collect();
    let mut qa: Vec<_> = q_all.iter_mut().map(|s| s.as_view_mut()).collect();
    let err = all_gather_single_process(&comms, &qv, &mut qa).unwrap_err();
    assert!(
        matches!(
            err,
            ExchangeError::BufferTooSmall {
                buffer: "all-gather recv",
                got: 19,
                needed: 20,
                ..
            }
        ),
        "{err}"
    );

    // The communicators still work after the rejected calls.
    let mut rv: Vec<_> = recvs.iter_mut().map(|s| s.as_view_mut()).collect();
    a2a_single_process(&comms, &c, &send_views, &mut rv, SelfChunk::Nccl).unwrap();
}
