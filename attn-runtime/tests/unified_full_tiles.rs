//! The full-tile predicate (`vllm_full_tile`, the DSL function the kernel uses to skip the
//! mask and the V guard) against the host reference mask: on random geometries, every tile it
//! calls full must have every key allowed for every query of the block (a wrong "full" would
//! silently attend masked keys). Runs the DSL function itself on the CPU executor, through a
//! one-program probe kernel merged into the unified module. Also counts how often it says
//! full, so a predicate that never fires (and skips nothing) fails too, and how often a tile
//! is full only through a multimodal range (queries and keys inside one image), so the
//! range branch must fire as well.

use attn_dsl::interp::{run, HostBuffer};
use attn_dsl::{Binding, ConstValue};
use attn_runtime::kernels::dsl_module::module_from_source;
use attn_runtime::kernels::specialization_cache::specialize_cached;
use attn_runtime::kernels::unified_attention;
use attn_runtime::ops::unified_attention::mask::{allowed, MaskConfig, SequenceMask};
use attn_runtime::problem::SplitMix64;

const PROBE: &str = r#"
mod full_tile_probe {
    #[kernel(num_warps = 1)]
    pub fn full_tile_probe<
        const SLIDING_WINDOW: i32,
        const CHUNK_LOOKBACK: i32,
        const USE_R_SWA: bool,
        const R_SWA_WINDOW: i32,
        const USE_MM_PREFIX: bool,
        const USE_MM_QUERY_RANGE: bool,
        const MM_PREFIX_CLAMP_SW: bool,
    >(geometry: *const i32, mm_ranges: *const i32, out: *mut i32) {
        let full = vllm_full_tile(
            load(geometry),
            load(geometry + 1),
            load(geometry + 2),
            load(geometry + 3),
            load(geometry + 4),
            load(geometry + 5) != 0,
            load(geometry + 6),
            mm_ranges,
            0,
            load(geometry + 7),
        );
        store(out, full.cast::<i32>());
    }
}
"#;

/// One random case: mask configuration, sequence, query block and key tile.
struct Case {
    cfg: MaskConfig,
    seq_len: i64,
    causal: bool,
    rswa_prefix: i64,
    q: (i64, i64),
    k: (i64, i64),
    msp: i64,
    /// Inclusive `[s, e]` multimodal ranges (used when `cfg.use_mm_prefix`).
    ranges: Vec<[i32; 2]>,
}

fn case(rng: &mut SplitMix64) -> Case {
    let mut below = |n: i64| rng.below(n.max(1) as usize) as i64;
    let seq_len = 1 + below(600);
    let mode = below(4);
    let window = if mode >= 1 { 1 + below(300) as i32 } else { 0 };
    let use_r_swa = mode == 3;
    let use_mm_prefix = below(2) == 0;
    let cfg = MaskConfig {
        sliding_window: if use_r_swa { 0 } else { window },
        use_r_swa,
        r_swa_window: if use_r_swa { window } else { 0 },
        use_mm_prefix,
        mm_prefix_clamp_sw: use_mm_prefix && below(2) == 0,
        ..MaskConfig::full()
    };
    let q0 = below(seq_len);
    let q1 = (q0 + below(64)).min(seq_len - 1);
    // Keys near the queries half the time, so tiles inside one image are common.
    let k0 = if below(2) == 0 {
        (q0 - 40 + below(80)).max(0)
    } else {
        below(seq_len)
    };
    let k1 = k0 + 15 + 16 * below(4);
    let mut ranges = Vec::new();
    if use_mm_prefix {
        // One range around both intervals, give or take a few positions (so its edges cut
        // through them about as often as they clear them), and up to two anywhere.
        let (lo, hi) = (q0.min(k0), q1.max(k1));
        ranges.push([
            (lo - below(8) + 2).max(0) as i32,
            (hi + below(8) - 2) as i32,
        ]);
        for _ in 0..below(3) {
            let s = below(seq_len);
            ranges.push([s as i32, (s + below(200)) as i32]);
        }
    }
    Case {
        cfg,
        seq_len,
        causal: below(3) != 0,
        rswa_prefix: below(seq_len + 1),
        q: (q0, q1),
        k: (k0, k1),
        msp: (seq_len - below(32)).max(0),
        ranges,
    }
}

fn predicate(c: &Case) -> bool {
    let module = unified_attention::module()
        .and_then(|m| m.merged_with(&module_from_source(PROBE, "full_tile_probe")?))
        .expect("module");
    let int = |v: i32| ConstValue::Int(i64::from(v));
    let bindings = [
        Binding::new("SLIDING_WINDOW", int(c.cfg.sliding_window)),
        Binding::new("CHUNK_LOOKBACK", int(-1)),
        Binding::new("USE_R_SWA", ConstValue::Bool(c.cfg.use_r_swa)),
        Binding::new("R_SWA_WINDOW", int(c.cfg.r_swa_window)),
        Binding::new("USE_MM_PREFIX", ConstValue::Bool(c.cfg.use_mm_prefix)),
        Binding::new("USE_MM_QUERY_RANGE", ConstValue::Bool(false)),
        Binding::new(
            "MM_PREFIX_CLAMP_SW",
            ConstValue::Bool(c.cfg.mm_prefix_clamp_sw),
        ),
    ];
    let f = specialize_cached(&module, "full_tile_probe", &bindings).expect("specialize");
    let g = [
        c.k.0,
        c.k.1,
        c.q.0,
        c.q.1,
        c.msp,
        i64::from(c.causal),
        c.rswa_prefix,
        c.ranges.len() as i64,
    ];
    let geometry = HostBuffer::I32(g.iter().map(|&x| x as i32).collect());
    // One padding range past the used ones: the predicate must not read it.
    let flat: Vec<i32> = c
        .ranges
        .iter()
        .flatten()
        .copied()
        .chain([0, i32::MAX])
        .collect();
    let ranges = HostBuffer::I32(flat);
    let mut out = HostBuffer::I32(vec![-1]);
    run(
        &f,
        [1, 1, 1],
        vec![geometry.arg_in(), ranges.arg_in(), out.arg_out()],
    )
    .expect("run");
    match out.to_f64s()[0] {
        0.0 => false,
        1.0 => true,
        other => panic!("probe wrote {other}"),
    }
}

/// Every key of the tile allowed (and below msp) for every query of the block, with the
/// case's ranges or without any.
fn truly_full(c: &Case, with_ranges: bool) -> bool {
    let seq = SequenceMask {
        seq_len: c.seq_len,
        causal: c.causal,
        rswa_prefix_len: c.rswa_prefix,
        mm_ranges: if with_ranges { &c.ranges } else { &[] },
    };
    (c.q.0..=c.q.1).all(|q| (c.k.0..=c.k.1).all(|k| k < c.msp && allowed(&c.cfg, &seq, q, k)))
}

#[test]
fn full_tiles_are_fully_allowed() {
    let mut rng = SplitMix64(0x5eed_f011);
    let (mut full, mut exact, mut by_range) = (0, 0, 0);
    for i in 0..600 {
        let c = case(&mut rng);
        let (said, truth) = (predicate(&c), truly_full(&c, true));
        assert!(
            !said || truth,
            "case {i}: full tile with a masked key: window {} r-swa {} causal {} mm {} clamp {} \
             ranges {:?} q {:?} k {:?} msp {} L {}",
            c.cfg.sliding_window,
            c.cfg.r_swa_window,
            c.causal,
            c.cfg.use_mm_prefix,
            c.cfg.mm_prefix_clamp_sw,
            c.ranges,
            c.q,
            c.k,
            c.msp,
            c.seq_len
        );
        full += usize::from(said);
        exact += usize::from(said == truth);
        by_range += usize::from(said && !truly_full(&c, false));
    }
    println!(
        "{full} of 600 tiles full ({by_range} only through a range); predicate exact on {exact}"
    );
    assert!(
        full >= 30,
        "the predicate almost never fires ({full} of 600)"
    );
    assert!(
        by_range >= 20,
        "the range branch almost never fires ({by_range} of 600)"
    );
}
