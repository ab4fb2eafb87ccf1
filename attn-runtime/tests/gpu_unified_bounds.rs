//! The DSL tile bounds and mask on the GPU (feature `gpu`): the `bounds_probe` kernel,
//! compiled by NVRTC and run as one program, must give the spec §4 seed geometry
//! (`[3, 72)` causal clamped MM, `[3, 68)` non-causal / bidirectional), and the same
//! bounds and mask as the CPU executor's probe and the reference mask.
#![cfg(feature = "gpu")]

use attn_dsl::codegen::emit_cuda;
use attn_runtime::kernels::bounds_probe::{probe_bindings, probe_block, probe_module, ProbeBlock};
use attn_runtime::kernels::specialization_cache::specialize_cached;
use attn_runtime::kernels::unified_attention;
use attn_runtime::launch::{CudaDevice, CudaKernelHandle, KernelArg};
use attn_runtime::ops::unified_attention::config::UnifiedAttentionConfig;
use attn_runtime::ops::unified_attention::mask::{allowed, SequenceMask};
use attn_runtime::ops::unified_attention::plan::MaskVariant;

mod bounds_common;
use bounds_common::{clamped_mm, plain_config, seed_block, seed_config};

/// What the GPU probe returned: `(lo, hi, msp)` and `mask[row][k]`.
struct GpuProbe {
    bounds: (i32, i32, i32),
    mask: Vec<Vec<bool>>,
}

/// Specializes the probe (merged into the unified module, as the CPU probe does), emits
/// CUDA, and runs it as one program on the GPU.
fn probe_on_gpu(cfg: &UnifiedAttentionConfig, block: &ProbeBlock<'_>, keys: usize) -> GpuProbe {
    let module = unified_attention::module()
        .and_then(|m| m.merged_with(&probe_module()?))
        .expect("module");
    let bindings = probe_bindings(cfg, &MaskVariant::default(), keys);
    let f = specialize_cached(&module, "bounds_probe", &bindings).expect("specialize probe");
    let handle = CudaKernelHandle::new(emit_cuda(&f).expect("emit probe"));
    let dev = CudaDevice::new(0).expect("the gpu feature requires a CUDA device");
    let stream = dev.default_stream();
    let geometry = [
        block.context_len,
        block.seq_len,
        block.query_len,
        block.q_block,
        i32::from(block.causal),
        block.rswa_prefix_len,
    ];
    let nonempty = |v: &[i32]| if v.is_empty() { vec![0] } else { v.to_vec() };
    let up = |v: &[i32]| stream.clone_htod(v).expect("upload");
    let inputs = [
        up(&geometry),
        up(&nonempty(block.mm_ranges.as_flattened())),
        up(&nonempty(block.query_ranges.as_flattened())),
        up(&[0]),
    ];
    let block_m = cfg.block_m as usize;
    let mut bounds = up(&[i32::MIN; 3]);
    let mut mask = up(&vec![-1; block_m * keys]);
    // FULL_TILE's verdict for every tile of the (one) range, poisoned like the mask.
    let tiles = keys / cfg.tile_size as usize;
    let mut full = up(&vec![-1; tiles]);
    // The variant's f32 aux input (none for the built-in mask: a one-element stand-in).
    let aux_f32 = stream.clone_htod(&[0.0f32]).expect("upload");
    let mut args: Vec<KernelArg<'_>> = inputs
        .iter()
        .map(|b| KernelArg::input(b.as_view()))
        .collect();
    args.push(KernelArg::input(aux_f32.as_view()));
    args.push(KernelArg::output(bounds.as_view_mut()));
    args.push(KernelArg::output(full.as_view_mut()));
    args.push(KernelArg::output(mask.as_view_mut()));
    handle
        .launch(&stream, [1, 1, 1], args)
        .expect("launch probe");
    let b = stream.clone_dtoh(&bounds).expect("download bounds");
    let m = stream.clone_dtoh(&mask).expect("download mask");
    let f = stream.clone_dtoh(&full).expect("download full tiles");
    assert!(
        f.iter().all(|&x| x == 0 || x == 1),
        "FULL_TILE wrote every tile's verdict: {f:?}"
    );
    assert!(
        m.iter().all(|&x| x == 0 || x == 1),
        "mask entries must be written 0/1"
    );
    GpuProbe {
        bounds: (b[0], b[1], b[2]),
        mask: m
            .chunks(keys)
            .map(|r| r.iter().map(|&x| x == 1).collect())
            .collect(),
    }
}

/// Spec §4 seed geometry: context 0, L = qlen = 4096, b = 140 (rows 1120..1127), BLOCK_Q 8,
/// nqpkv 2, TILE 32, W 1024, clamped MM, MAX_MM_RANGES 2 (second range padding).
fn seed(use_causal: bool, per_seq: Option<bool>, range: [i32; 2]) -> (i32, i32, i32) {
    let cfg = seed_config(use_causal, per_seq);
    let ranges = [range, [0, 0]];
    let block = seed_block(use_causal, per_seq, &ranges);
    let gpu = probe_on_gpu(&cfg, &block, 16);
    let module = unified_attention::module().expect("module");
    let cpu = probe_block(&module, &cfg, &MaskVariant::default(), &block, 16).expect("CPU probe");
    assert_eq!(
        gpu.bounds,
        (cpu.loop_lo, cpu.loop_hi, cpu.max_seq_prefix_len),
        "GPU and CPU executor disagree on the bounds"
    );
    assert_eq!(
        gpu.mask, cpu.mask,
        "GPU and CPU executor disagree on the mask"
    );
    println!(
        "UNIFIED bounds causal={use_causal} per_seq={per_seq:?} range={range:?} -> {:?}",
        gpu.bounds
    );
    gpu.bounds
}

#[test]
fn seed_clamped_mm_prunes_to_3_72_on_gpu() {
    assert_eq!(seed(true, None, [1024, 2303]), (3, 72, 4096));
}

#[test]
fn seed_non_causal_keeps_right_window_3_68_on_gpu() {
    assert_eq!(seed(false, None, [1024, 1500]), (3, 68, 4096));
}

#[test]
fn seed_per_seq_causal_on_gpu() {
    assert_eq!(seed(true, Some(false), [1024, 1500]), (3, 68, 4096));
    assert_eq!(seed(true, Some(true), [1024, 1500]), (3, 47, 4096));
}

/// A block where the mask is interesting over every probed key: the GPU mask equals the
/// reference predicate for every valid row, and every allowed key lies in the bounds.
#[test]
fn gpu_mask_matches_reference_and_bounds_cover_it() {
    // Keys probed (a power of two for `arange`); keys ≥ L = 100 must come out masked.
    const KEYS: usize = 128;
    for (use_causal, b) in [(true, 2), (false, 3)] {
        let cfg = UnifiedAttentionConfig {
            use_causal,
            ..clamped_mm(plain_config(16, 2, 16, 64), 2)
        };
        cfg.validate().expect("valid probe configuration");
        let ranges = [[8, 40], [60, 90]];
        let block = ProbeBlock {
            context_len: 16,
            seq_len: 100,
            query_len: 84,
            q_block: b,
            causal: use_causal,
            rswa_prefix_len: 0,
            mm_ranges: &ranges,
            query_ranges: &[],
            mask_aux: &[],
            mask_aux_f32: &[],
        };
        let gpu = probe_on_gpu(&cfg, &block, KEYS);
        let (lo, hi, _) = gpu.bounds;
        let seq = SequenceMask {
            seq_len: i64::from(block.seq_len),
            causal: use_causal,
            rswa_prefix_len: 0,
            mm_ranges: &ranges,
        };
        let nq = cfg.num_queries_per_kv as usize;
        let mut allowed_pairs = 0;
        for (r, row) in gpu.mask.iter().enumerate() {
            let t = b as usize * cfg.block_q as usize + r / nq;
            let valid = r < cfg.block_q as usize * nq && t < block.query_len as usize;
            let q = i64::from(block.context_len) + t as i64;
            for (k, &got) in row.iter().enumerate() {
                let want = valid && allowed(&cfg.mask_config(), &seq, q, k as i64);
                assert_eq!(got, want, "causal={use_causal} row {r} key {k}");
                if want {
                    allowed_pairs += 1;
                    let tile = k as i32 / cfg.tile_size;
                    assert!(
                        lo <= tile && tile < hi,
                        "key {k} (tile {tile}) outside [{lo}, {hi})"
                    );
                }
            }
        }
        assert!(allowed_pairs > 0, "the probed block must see some keys");
        println!(
            "UNIFIED bounds mask causal={use_causal} b={b} -> {:?}",
            gpu.bounds
        );
    }
}
