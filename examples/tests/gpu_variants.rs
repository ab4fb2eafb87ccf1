//! GPU parity of the example variants through the public op (feature `gpu`): each variant
//! on fresh random inputs (2D prefill and 3D split-KV decode), against the dense f64
//! reference of its own definition and against the CPU executor, with poisoned outputs;
//! a second call compiles nothing (same caching as the built-in mask); a bad aux tensor is
//! a typed error. Prints `VARIANT <name> path=<..> max_abs=<..>`.

use attn_examples::{
    document_window, packed_documents, prefix_lm, sink_window, tree_mask, Variant,
};
use attn_runtime::launch::CudaDevice;
use attn_runtime::ops::unified_attention::config::SplitKvWorkspace;
use attn_runtime::ops::unified_attention::cpu::{
    run_unified_attention_cpu, CpuOptions, CpuVariant,
};
use attn_runtime::ops::unified_attention::gpu::{
    AttnError, ContextOptions, UnifiedAttentionContext, WorkspaceCapacity,
};
use attn_runtime::ops::unified_attention::plan::PathChoice;
use attn_runtime::ops::unified_attention::variant::AuxError;
use attn_runtime::reference::unified_attention::AttentionOptions;
use attn_runtime::testing::device_variant::{DeviceRunError, DeviceVariantProblem};
use attn_runtime::testing::{
    assert_close, masked_reference, max_abs_diff, seeded, Geometry, PagedData, SplitMix64, ATOL,
    RTOL,
};
use half::bf16;

fn context() -> UnifiedAttentionContext {
    let dev = CudaDevice::new(0).expect("the gpu feature requires a CUDA device");
    let options = ContextOptions {
        split_kv: Some(SplitKvWorkspace {
            seq_threshold_3d: 8,
            num_segments: 16,
        }),
        workspace: Some(WorkspaceCapacity {
            max_tokens: 64,
            max_query_heads: 32,
            max_head_size: 256,
            max_segments: 16,
        }),
    };
    UnifiedAttentionContext::new(&dev, dev.default_stream(), options).expect("context")
}

fn fresh_seed(name: &str) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    eprintln!("{name}: seed {nanos}");
    nanos
}

/// One variant case: its data and aux tensors and its definition.
struct Case<'a> {
    name: &'a str,
    variant: &'a Variant,
    data: PagedData,
    aux_i32: Option<(Vec<i32>, usize)>,
    mask: Box<dyn Fn(usize, i64, i64) -> bool + Sync + 'a>,
    path: PathChoice,
}

/// GPU vs the dense reference and vs the CPU executor; then a steady-state call.
fn check(ctx: &UnifiedAttentionContext, c: &Case<'_>) {
    let aux = c.aux_i32.as_ref().map(|(v, s)| (v.as_slice(), *s));
    let mut dev =
        DeviceVariantProblem::<bf16>::upload(ctx.stream(), &c.data, aux, None).expect("upload");
    let (got, report) = dev
        .run_checked(ctx, &c.data, Some(c.variant), c.path)
        .unwrap_or_else(|e| panic!("{}: {e}", c.name));
    let want = masked_reference(&c.data, &*c.mask);
    println!(
        "VARIANT {} path={} tile={} max_abs={:.3e}",
        c.name,
        report.path_name(),
        report.config.tile_size,
        max_abs_diff(&got, &want)
    );
    assert_close(&got, &want, ATOL, RTOL, c.name);
    let cpu_variant = CpuVariant {
        variant: c.variant,
        aux_i32: aux,
        aux_f32: None,
    };
    let cpu = run_unified_attention_cpu(
        &c.data.problem(AttentionOptions::default()),
        &CpuOptions {
            dtype: c.data.dtype,
            path: c.path,
            variant: Some(cpu_variant),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{} (CPU): {e}", c.name));
    let cpu64: Vec<f64> = cpu.output.iter().map(|&x| f64::from(x)).collect();
    assert_close(
        &got,
        &cpu64,
        ATOL,
        RTOL,
        &format!("{} GPU vs CPU executor", c.name),
    );
    let (_, again) = dev
        .run_checked(ctx, &c.data, Some(c.variant), c.path)
        .expect("second call");
    assert_eq!(
        again.compiled, 0,
        "{}: a second call must reuse the compiled specialization",
        c.name
    );
}

fn doc_ids(seq_lens: &[i32], stride: usize, rng: &mut SplitMix64) -> Vec<i32> {
    let mut ids = vec![-1; seq_lens.len() * stride];
    for (s, &l) in seq_lens.iter().enumerate() {
        let (mut doc, mut left) = (0, 1 + rng.below(300));
        for k in 0..(l as usize).saturating_sub(3) {
            if left == 0 {
                doc += 1;
                left = 1 + rng.below(300);
            }
            ids[s * stride + k] = doc;
            left -= 1;
        }
    }
    ids
}

const PREFILL: &[(usize, usize)] = &[(1, 1328), (5, 18), (129, 463), (700, 700)];
const DECODE: &[(usize, usize)] = &[(1, 523), (1, 37), (1, 2011)];

fn data(seqs: &[(usize, usize)], seed: u64) -> PagedData {
    PagedData::random(&Geometry::new(seqs, (8, 2), 128), seed)
}

fn same_doc(ids: &[i32], stride: usize, s: usize, q: i64, k: i64) -> bool {
    let doc = |x: i64| ids[s * stride + x as usize];
    doc(q) >= 0 && doc(q) == doc(k) && k <= q
}

#[test]
fn example_variants_match_reference_on_the_gpu() {
    let ctx = context();
    let seed = fresh_seed("gpu variants");
    let sinks = sink_window::variant(4, 128);
    let docs = packed_documents::variant();
    let doc_window = document_window::variant(200);
    let prefix = prefix_lm::variant();
    for (seqs, path) in [
        (PREFILL, PathChoice::Force2d),
        (DECODE, PathChoice::Force3d { num_segments: 8 }),
    ] {
        let sink_mask = |_: usize, q: i64, k: i64| k <= q && (k < 4 || q - k < 128);
        check(
            &ctx,
            &Case {
                name: "sinks+window",
                variant: &sinks,
                data: data(seqs, seed),
                aux_i32: None,
                mask: Box::new(sink_mask),
                path,
            },
        );
        let d = data(seqs, seed + 1);
        let stride = 2048;
        let ids = doc_ids(&d.seq_lens, stride, &mut seeded(seed + 2));
        let m = ids.clone();
        let mask = Box::new(move |s: usize, q: i64, k: i64| same_doc(&m, stride, s, q, k));
        check(
            &ctx,
            &Case {
                name: "packed documents",
                variant: &docs,
                data: d,
                aux_i32: Some((ids.clone(), stride)),
                mask,
                path,
            },
        );
        let d = data(seqs, seed + 3);
        let m = ids.clone();
        let mask =
            Box::new(move |s: usize, q: i64, k: i64| same_doc(&m, stride, s, q, k) && q - k < 200);
        check(
            &ctx,
            &Case {
                name: "documents+window",
                variant: &doc_window,
                data: d,
                aux_i32: Some((ids, stride)),
                mask,
                path,
            },
        );
        let d = data(seqs, seed + 4);
        let p: Vec<i32> = d.seq_lens.iter().map(|&l| l / 3).collect();
        let pm = p.clone();
        let mask = Box::new(move |s: usize, q: i64, k: i64| k <= q || k < i64::from(pm[s]));
        check(
            &ctx,
            &Case {
                name: "prefix-LM",
                variant: &prefix,
                data: d,
                aux_i32: Some((p, 1)),
                mask,
                path,
            },
        );
    }
}

#[test]
fn tree_mask_variant_matches_reference_on_the_gpu() {
    const TREE: usize = 64;
    let ctx = context();
    let seed = fresh_seed("gpu tree mask");
    let variant = tree_mask::variant(TREE as i32);
    let seqs = [(37, 900), (64, 130), (1, 2000), (12, 12)];
    let d = PagedData::random(&Geometry::new(&seqs, (8, 2), 128), seed);
    let mut rng = seeded(seed + 1);
    let trees: Vec<Vec<i32>> = seqs
        .iter()
        .map(|&(n, _)| {
            let parents: Vec<i32> = (0..n)
                .map(|i| {
                    if i == 0 || rng.below(6) == 0 {
                        -1
                    } else {
                        rng.below(i) as i32
                    }
                })
                .collect();
            tree_mask::ancestors(&parents, TREE)
        })
        .collect();
    let t = trees.clone();
    let mask = Box::new(move |s: usize, q: i64, k: i64| {
        let (n, l) = seqs[s];
        let context = (l - n) as i64;
        k < context || {
            let (i, j) = ((q - context) as usize, (k - context) as usize);
            j <= i && t[s][i * TREE + j] == 1
        }
    });
    check(
        &ctx,
        &Case {
            name: "tree mask",
            variant: &variant,
            data: d,
            aux_i32: Some((trees.concat(), TREE * TREE)),
            mask,
            path: PathChoice::Force2d,
        },
    );
}

#[test]
fn a_bad_aux_tensor_is_a_typed_error() {
    let ctx = context();
    let variant = packed_documents::variant();
    let d = data(PREFILL, 7);
    // Rows of 1000 ids cannot hold a 1328-key sequence's ids.
    let ids = vec![0; 4 * 1000];
    let mut dev = DeviceVariantProblem::<bf16>::upload(ctx.stream(), &d, Some((&ids, 1000)), None)
        .expect("upload");
    let err = dev
        .run_checked(&ctx, &d, Some(&variant), PathChoice::Force2d)
        .expect_err("too short rows");
    assert!(
        matches!(
            err,
            DeviceRunError::Op(AttnError::Aux(AuxError::RowTooShort {
                seq: 0,
                needed: 1328,
                ..
            }))
        ),
        "{err}"
    );
}
