//! The example variants on the CPU executor: parity of the full unified-attention kernel
//! with a dense f64 reference of each variant's own definition (fresh random inputs,
//! poisoned outputs), the bounds ⊇ mask property with the DSL mask equal to the definition,
//! and the tile visits of sinks + window. The same parity on the plan an sm_90a device gets,
//! its emitted CUDA run on the simulator's sm_90a branch (`*_on_sm90a`).

#[path = "../../attn-runtime/tests/sim_launcher/mod.rs"]
mod sim_launcher;

use sim_launcher::{Landing, SimLauncher};

use attn_examples::{
    document_window, packed_documents, prefix_lm, sink_window, tree_mask, Variant,
};
use attn_runtime::ops::unified_attention::config::MmaKind;
use attn_runtime::ops::unified_attention::cpu::{
    run_unified_attention_cpu, CpuOptions, CpuVariant, HostLauncher,
};
use attn_runtime::ops::unified_attention::plan::PathChoice;
use attn_runtime::ops::unified_attention::variant_check::{
    check_bounds, probe_config, sequence_tile_visits, CaseGeometry, CheckOptions, VariantCase,
};
use attn_runtime::reference::unified_attention::AttentionOptions;
use attn_runtime::testing::{
    assert_close, assert_poison_intact, masked_reference, seeded, Geometry, PagedData, SplitMix64,
    ATOL, ROW_PADDING, RTOL,
};

/// A fresh seed per run (the data must not be one lucky draw), printed for reproduction.
fn fresh_seed(name: &str) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let seed = nanos ^ name.len() as u64;
    eprintln!("{name}: seed {seed}");
    seed
}

/// Runs the kernel with the variant and checks it against `mask`'s dense reference.
fn parity(
    name: &str,
    cpu: CpuVariant<'_>,
    data: &PagedData,
    path: PathChoice,
    mask: &(dyn Fn(usize, i64, i64) -> bool + Sync),
) {
    parity_on(name, cpu, data, path, mask, None);
}

/// The variant's kernel as an sm_90a device runs it: the plan's warpgroup tiling, its
/// emitted CUDA run on the simulator's sm_90a branch (`sim_launcher`).
fn parity_on_sm90a(
    name: &str,
    cpu: CpuVariant<'_>,
    data: &PagedData,
    path: PathChoice,
    mask: &(dyn Fn(usize, i64, i64) -> bool + Sync),
) {
    if !sim_launcher::have_gxx() {
        eprintln!("skipping {name}: no g++");
        return;
    }
    parity_on(
        name,
        cpu,
        data,
        path,
        mask,
        Some(sim_launcher::for_target(MmaKind::Warpgroup, Landing::Late)),
    );
}

/// [`parity`] on the warpgroup plan with `launcher` running its launches, or on the
/// executor's default plan for `None`.
fn parity_on(
    name: &str,
    cpu: CpuVariant<'_>,
    data: &PagedData,
    path: PathChoice,
    mask: &(dyn Fn(usize, i64, i64) -> bool + Sync),
    launcher: Option<&'static SimLauncher>,
) {
    let problem = data.problem(AttentionOptions::default());
    let options = CpuOptions {
        dtype: data.dtype,
        path,
        variant: Some(cpu),
        row_padding: ROW_PADDING,
        mma: launcher.map_or(MmaKind::Sync, |_| MmaKind::Warpgroup),
        launcher: launcher.map(|l| l as &dyn HostLauncher),
        ..Default::default()
    };
    let run =
        run_unified_attention_cpu(&problem, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_poison_intact(&run, data, name);
    assert_close(&run.output, &masked_reference(data, mask), ATOL, RTOL, name);
}

/// Document ids `[S, stride]`: contiguous documents of random lengths, then padding (−1).
fn doc_ids(seq_lens: &[i32], stride: usize, rng: &mut SplitMix64, padding: usize) -> Vec<i32> {
    let mut ids = vec![-1; seq_lens.len() * stride];
    for (s, &l) in seq_lens.iter().enumerate() {
        let real = (l as usize).saturating_sub(padding);
        let (mut doc, mut left) = (0, 1 + rng.below(40));
        for k in 0..real {
            if left == 0 {
                doc += 1;
                left = 1 + rng.below(40);
            }
            ids[s * stride + k] = doc;
            left -= 1;
        }
    }
    ids
}

const SEQS: &[(usize, usize)] = &[(1, 150), (37, 90), (29, 93)];
const DECODE: &[(usize, usize)] = &[(1, 123), (1, 37), (1, 150)];

fn same_doc(ids: &[i32], stride: usize, s: usize, q: i64, k: i64) -> bool {
    let doc = |x: i64| ids[s * stride + x as usize];
    doc(q) >= 0 && doc(q) == doc(k) && k <= q
}

/// How a case checks its variant: [`parity`] on the executor or [`parity_on_sm90a`].
type Parity =
    fn(&str, CpuVariant<'_>, &PagedData, PathChoice, &(dyn Fn(usize, i64, i64) -> bool + Sync));

#[test]
fn packed_documents_match_reference_and_pad_rows_are_zero() {
    packed_documents_case("packed documents", parity);
}

/// Packed documents whose last 5 keys (hence queries) are padding: fully masked rows.
fn packed_documents_case(name: &str, parity: Parity) {
    let variant = packed_documents::variant();
    let seed = fresh_seed(name);
    let data = PagedData::random(&Geometry::new(SEQS, (4, 2), 64), seed);
    let stride = 160;
    let ids = doc_ids(&data.seq_lens, stride, &mut seeded(seed), 5);
    let mask = |s: usize, q: i64, k: i64| same_doc(&ids, stride, s, q, k);
    let cpu = CpuVariant::with_i32(&variant, &ids, stride);
    parity(name, cpu, &data, PathChoice::Force2d, &mask);
    let decode = PagedData::random(&Geometry::new(DECODE, (4, 2), 64), seed + 1);
    let ids = doc_ids(&decode.seq_lens, stride, &mut seeded(seed + 2), 0);
    let mask = |s: usize, q: i64, k: i64| same_doc(&ids, stride, s, q, k);
    let cpu = CpuVariant::with_i32(&variant, &ids, stride);
    let path = PathChoice::Force3d { num_segments: 4 };
    parity(&format!("{name} 3D"), cpu, &decode, path, &mask);
}

#[test]
fn prefix_lm_matches_reference() {
    prefix_lm_case("prefix-LM", 64, parity);
}

fn prefix_lm_case(name: &str, head_size: usize, parity: Parity) {
    let variant = prefix_lm::variant();
    let data = PagedData::random(&Geometry::new(SEQS, (8, 2), head_size), fresh_seed(name));
    let prefix = [100, 70, 0];
    let mask = |s: usize, q: i64, k: i64| k <= q || k < i64::from(prefix[s]);
    let cpu = CpuVariant::with_i32(&variant, &prefix, 1);
    parity(name, cpu, &data, PathChoice::Force2d, &mask);
}

#[test]
fn sink_window_matches_reference_in_2d_and_3d() {
    sink_window_case("sinks + window", parity);
}

fn sink_window_case(name: &str, parity: Parity) {
    let (sinks, window) = (3, 20);
    let variant = sink_window::variant(sinks, window);
    let mask =
        |_: usize, q: i64, k: i64| k <= q && (k < i64::from(sinks) || q - k < i64::from(window));
    let seed = fresh_seed(name);
    let data = PagedData::random(&Geometry::new(SEQS, (4, 2), 64), seed);
    let cpu = CpuVariant {
        variant: &variant,
        aux_i32: None,
        aux_f32: None,
    };
    parity(name, cpu, &data, PathChoice::Force2d, &mask);
    let decode = PagedData::random(&Geometry::new(DECODE, (4, 2), 64), seed + 1);
    let path = PathChoice::Force3d { num_segments: 4 };
    parity(&format!("{name} 3D"), cpu, &decode, path, &mask);
}

/// A random draft tree of `n` nodes: node i's parent is a random earlier node (or none).
fn random_parents(rng: &mut SplitMix64, n: usize) -> Vec<i32> {
    (0..n)
        .map(|i| {
            if i == 0 || rng.below(5) == 0 {
                -1
            } else {
                rng.below(i) as i32
            }
        })
        .collect()
}

#[test]
fn tree_mask_from_aux_matches_reference() {
    const TREE: usize = 16;
    let variant = tree_mask::variant(TREE as i32);
    let seed = fresh_seed("tree mask");
    let seqs = [(11, 75), (16, 40), (1, 33)];
    let data = PagedData::random(&Geometry::new(&seqs, (4, 2), 64), seed);
    let mut rng = seeded(seed + 3);
    let trees: Vec<Vec<i32>> = seqs
        .iter()
        .map(|&(qlen, _)| tree_mask::ancestors(&random_parents(&mut rng, qlen), TREE))
        .collect();
    let aux: Vec<i32> = trees.concat();
    let mask = |s: usize, q: i64, k: i64| {
        let (qlen, l) = seqs[s];
        let context = (l - qlen) as i64;
        if k < context {
            return k <= q;
        }
        let (i, j) = ((q - context) as usize, (k - context) as usize);
        j <= i && trees[s][i * TREE + j] == 1
    };
    let cpu = CpuVariant::with_i32(&variant, &aux, TREE * TREE);
    parity("tree mask", cpu, &data, PathChoice::Force2d, &mask);
}

#[test]
fn document_window_matches_reference() {
    let window = 24;
    let variant = document_window::variant(window);
    let seed = fresh_seed("documents + window");
    let data = PagedData::random(&Geometry::new(SEQS, (4, 2), 64), seed);
    let stride = 160;
    let ids = doc_ids(&data.seq_lens, stride, &mut seeded(seed + 4), 3);
    let mask =
        |s: usize, q: i64, k: i64| same_doc(&ids, stride, s, q, k) && q - k < i64::from(window);
    let cpu = CpuVariant::with_i32(&variant, &ids, stride);
    parity("documents + window", cpu, &data, PathChoice::Force2d, &mask);
}

#[test]
fn a_wrong_definition_fails_parity() {
    // The harness must be able to fail: prefix-LM checked against plain causal attention.
    let variant = prefix_lm::variant();
    let data = PagedData::random(
        &Geometry::new(SEQS, (4, 2), 64),
        fresh_seed("wrong definition"),
    );
    let prefix = [100, 70, 0];
    let causal = |_: usize, q: i64, k: i64| k <= q;
    let cpu = CpuVariant::with_i32(&variant, &prefix, 1);
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        parity(
            "prefix-LM vs causal",
            cpu,
            &data,
            PathChoice::Force2d,
            &causal,
        )
    }));
    assert!(
        failed.is_err(),
        "a mask that differs from the kernel's must fail parity"
    );
}

fn options(name: &str) -> CheckOptions {
    CheckOptions {
        cases: 60,
        seed: fresh_seed(name),
        max_seq_len: 256,
    }
}

fn assert_covers(
    name: &str,
    variant: &Variant,
    make: &dyn Fn(&mut SplitMix64, CaseGeometry) -> VariantCase,
) {
    let report =
        check_bounds(variant, &options(name), make).unwrap_or_else(|e| panic!("{name}: {e}"));
    eprintln!("{name}: {report}");
    assert!(report.passed(), "{name}: {report}");
    assert!(
        report.needed_tiles > 0,
        "{name}: no case had an allowed key"
    );
}

fn docs_case(rng: &mut SplitMix64, g: CaseGeometry, window: Option<i64>) -> VariantCase {
    let l = g.seq_len as usize;
    let padding = rng.below(4);
    let ids = doc_ids(&[g.seq_len], l, rng, padding);
    VariantCase::new(ids.clone(), move |q, k| {
        same_doc(&ids, l, 0, q, k) && window.is_none_or(|w| q - k < w)
    })
}

#[test]
fn every_example_variant_bounds_cover_its_mask() {
    assert_covers(
        "packed documents",
        &packed_documents::variant(),
        &|rng, g| docs_case(rng, g, None),
    );
    assert_covers(
        "documents + window",
        &document_window::variant(24),
        &|rng, g| docs_case(rng, g, Some(24)),
    );
    assert_covers("prefix-LM", &prefix_lm::variant(), &|rng, g| {
        let p = rng.below(g.seq_len as usize + 1) as i32;
        VariantCase::new(vec![p], move |q, k| k <= q || k < i64::from(p))
    });
    assert_covers("sinks + window", &sink_window::variant(5, 40), &|_, _| {
        VariantCase::new(vec![], |q, k| k <= q && (k < 5 || q - k < 40))
    });
    assert_covers("tree mask", &tree_mask::variant(32), &|rng, g| {
        let qlen = (g.query_len as usize).min(32);
        let tree = tree_mask::ancestors(&random_parents(rng, qlen), 32);
        let context = i64::from(g.seq_len - g.query_len);
        let t = tree.clone();
        VariantCase::new(tree, move |q, k| {
            let i = q - context;
            if k < context {
                return k <= q;
            }
            let j = k - context;
            i < 32 && j <= i && t[(i * 32 + j) as usize] == 1
        })
    });
}

#[test]
fn bounds_that_miss_keys_are_reported() {
    // The property must be able to fail: prefix-LM's bounds checked against a mask that
    // also allows the key right after each query.
    let report = check_bounds(
        &prefix_lm::variant(),
        &options("missing keys"),
        &|rng, g| {
            let p = rng.below(g.seq_len as usize + 1) as i32;
            VariantCase::new(vec![p], move |q, k| k <= q + 1 || k < i64::from(p))
        },
    )
    .expect("check runs");
    assert!(!report.passed(), "{report}");
    assert!(report.mask_mismatch_count > 0, "{report}");
}

/// The figure: L 1024, window 128, 4 sinks: visits within 1.1x of the tiles that
/// hold an allowed key (one contiguous range visited 2112 for 708).
#[test]
fn sink_window_visits_only_sink_and_window_tiles() {
    let variant = sink_window::variant(4, 128);
    let case = VariantCase::new(vec![], |q, k| k <= q && (k < 4 || q - k < 128));
    for (tile, nqpkv) in [(16, 1), (32, 2), (64, 4)] {
        let cfg = probe_config(tile, nqpkv).expect("config");
        let r = sequence_tile_visits(&variant, &cfg, &case, 1024).expect("visits");
        eprintln!("sinks + window, tile {tile}, BLOCK_Q {}: {r}", cfg.block_q);
        assert!(r.passed(), "{r}");
        assert!(r.slack() <= 1.1, "tile {tile}: {r}");
    }
}

/// Sinks + window declares full tiles (most window tiles skip the mask), all sound, and the
/// 2D / 3D parity above runs through them.
#[test]
fn sink_window_full_tiles_are_declared_and_sound() {
    let name = "sinks + window full tiles";
    let report = check_bounds(&sink_window::variant(5, 40), &options(name), &|_, _| {
        VariantCase::new(vec![], |q, k| k <= q && (k < 5 || q - k < 40))
    })
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    eprintln!("{name}: {report}");
    assert!(report.passed(), "{report}");
    assert!(report.full_tiles > 0, "no tile declared full: {report}");
    let cfg = probe_config(16, 1).expect("config");
    let case = VariantCase::new(vec![], |q, k| k <= q && (k < 4 || q - k < 128));
    let whole =
        sequence_tile_visits(&sink_window::variant(4, 128), &cfg, &case, 1024).expect("visits");
    assert!(
        whole.full_tiles * 2 > whole.visited_tiles,
        "most visited tiles are full: {whole}"
    );
}

/// A FULL_TILE that forgets the window: causal-only full tiles inside a windowed mask.
#[attn_dsl_macros::variant(mask = w_mask, bounds = w_bounds, full_tile = w_full_tile)]
mod forgetful_full_tile {
    #[device]
    fn w_mask(q_abs: Tile, k: Tile, seq_len: i32) -> Tile<bool> {
        (k <= q_abs) & (q_abs - k < 24) & (k < seq_len)
    }

    #[device]
    fn w_bounds<const TILE_SIZE: i32, const BLOCK_Q: i32>(
        context_len: i32,
        seq_len: i32,
        qlen: i32,
        b: i32,
    ) -> (i32, i32, i32) {
        let last_q = context_len + min(b * BLOCK_Q + BLOCK_Q - 1, qlen - 1);
        let msp = min(last_q + 1, seq_len);
        (0, cdiv(msp, TILE_SIZE), msp)
    }

    /// Unsound: ignores the window of 24.
    #[device]
    fn w_full_tile(k_last: i32, q_first: i32, msp: i32) -> bool {
        (k_last < msp) & (k_last <= q_first)
    }
}

/// The soundness check must be able to fail, and the kernel must really skip the mask on
/// a full tile: the unsound FULL_TILE is reported, and the CPU run leaves the reference.
#[test]
fn an_unsound_full_tile_is_reported_and_breaks_parity() {
    let variant = Variant::from_source(&forgetful_full_tile::VARIANT);
    let name = "forgetful full tile";
    let report = check_bounds(&variant, &options(name), &|_, _| {
        VariantCase::new(vec![], |q, k| k <= q && q - k < 24)
    })
    .expect("check runs");
    assert!(!report.passed(), "{report}");
    assert!(report.unsound_full_count > 0, "{report}");
    assert_eq!(report.missed_count, 0, "{report}");
    let data = PagedData::random(&Geometry::new(&[(150, 150)], (4, 2), 64), fresh_seed(name));
    let problem = data.problem(AttentionOptions::default());
    let options = CpuOptions {
        dtype: data.dtype,
        path: PathChoice::Force2d,
        variant: Some(CpuVariant {
            variant: &variant,
            aux_i32: None,
            aux_f32: None,
        }),
        ..Default::default()
    };
    let run = run_unified_attention_cpu(&problem, &options).expect("runs");
    let want = masked_reference(&data, &|_, q, k| k <= q && q - k < 24);
    let worst = run
        .output
        .iter()
        .zip(&want)
        .map(|(&g, &w)| (f64::from(g) - w).abs())
        .fold(0.0, f64::max);
    assert!(
        worst > 10.0 * ATOL,
        "the full tiles were masked anyway: {worst}"
    );
}

/// Packed documents with padding rows (fully masked), prefix-LM at D 128, and sinks + window
/// in 2D and 3D, on the plans an sm_90a device gets.
#[test]
fn documents_and_prefix_lm_on_sm90a() {
    packed_documents_case("packed documents sm_90a", parity_on_sm90a);
    prefix_lm_case("prefix-LM sm_90a", 128, parity_on_sm90a);
}

#[test]
fn sink_window_on_sm90a() {
    sink_window_case("sinks + window sm_90a", parity_on_sm90a);
}
