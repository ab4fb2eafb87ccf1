//! The MLA-DCP launch plan: validation errors, metadata arrays, grids, the split heuristic and
//! the exchange layout (spec §9.1–§9.2).

use attn_dsl::ir::ScalarType;
use attn_runtime::ops::mla_dcp::metadata::DcpLayout;
use attn_runtime::ops::mla_dcp::plan::{
    fused_tile, DecodeStep, ExchangeLayout, PlanArg, PlanError, MAX_SPLITS, MIN_KEYS_PER_SPLIT,
};
use attn_runtime::ops::unified_attention::config::MmaKind;

fn step(d: u32, q: &[u32], s: &[u32]) -> DecodeStep {
    DecodeStep {
        query_lens: q.to_vec(),
        seq_lens: s.to_vec(),
        layout: DcpLayout::new(d, 8, 64).expect("layout"),
        heads_per_rank: 16,
        dtype: ScalarType::Bf16,
        softmax_scale: 0.135,
        block_table_stride: 64,
        num_sms: 132,
    }
}

#[test]
fn metadata_arrays() {
    let s = step(2, &[1, 4, 2], &[100, 20, 2]);
    assert_eq!(s.token_req(), vec![0, 1, 1, 1, 1, 2, 2]);
    assert_eq!(s.cu_seqlens_q(), vec![0, 1, 5, 7]);
    // History 99, 16, 0 split over D = 2, I = 8: §2.3 closed form.
    assert_eq!(s.hist_lens(0), vec![51, 8, 0]);
    assert_eq!(s.hist_lens(1), vec![48, 8, 0]);
}

#[test]
fn grids_and_bindings() {
    let p = step(8, &[2, 1], &[4000, 10]).plan().expect("plan");
    assert_eq!(p.num_tokens, 3);
    // 128 gathered heads in tiles of HIST_BLOCK_H = 32, a token's 4 tiles adjacent on x.
    assert_eq!(p.history.grid, [3 * 4, p.num_splits, 1]);
    let reduce = p.history_reduce.as_ref().expect("several splits: a reduce");
    assert!(p.num_splits > 1);
    // 3 × 128 programs are under four an SM: each merges half of the 512 columns.
    assert_eq!(reduce.grid, [3, 128, 2]);
    assert!(reduce.key().contains("COLS=256"), "{}", reduce.key());
    assert_eq!(p.current.grid, [3, 1, 1]);
    assert_eq!(p.combine.grid, [3, 16, 1]);
    assert_eq!(p.v_up.grid, [1, 16, 1]);
    assert_eq!(
        p.combine.key(),
        "mla_combine<T=bf16,DCP_SIZE=8,PARTS_PADDED=16>"
    );
    assert_eq!(p.history.args.len(), 18);
    assert!(p.history.args.contains(&PlanArg::I64(64 * 576)));
    assert_eq!(binding(&p, "DIRECT"), 0);
}

/// One split: the history writes the exchange layout itself (`DIRECT`), and there is no
/// reduce launch.
#[test]
fn one_split_writes_the_exchange_layout_without_a_reduce() {
    let p = step(8, &[1; 40], &[600; 40]).plan().expect("plan");
    assert_eq!(p.num_splits, 1);
    assert_eq!(binding(&p, "DIRECT"), 1);
    assert!(p.history_reduce.is_none());
    // History, current, combine and V-up: the fused combine + V-up takes groups of at most
    // two ranks, not this one of eight.
    assert_eq!(p.launches().len(), 4);
    assert!(!p.fused_merges_the_group());
    let forced = step(8, &[1; 40], &[600; 40])
        .plan_with_splits(Some(2))
        .expect("plan");
    assert_eq!(binding(&forced, "DIRECT"), 0);
    assert_eq!(forced.launches().len(), 5);
    let two = step(2, &[1; 40], &[600; 40]).plan().expect("plan");
    let kernels: Vec<_> = two.launches().iter().map(|l| l.kernel).collect();
    assert_eq!(kernels.last(), Some(&"mla_combine_v_up"), "{kernels:?}");
}

/// The fused combine + V-up on warpgroup MMAs (feature `merge_wgmma`, shipped): 64 tokens ×
/// 128 columns a program, and the `WARPGROUPS` constexpr in the key only then (the
/// `mma.sync` tiles' keys unchanged); taken by a warpgroup plan from 64 tokens, never on
/// `mma.sync`, nor below a warpgroup MMA's 64 tokens.
#[test]
fn fused_combine_v_up_on_warpgroups_takes_64_tokens() {
    use attn_runtime::ops::mla_dcp::plan::{fused_tile_on, warpgroup_fused_tile};
    let w = warpgroup_fused_tile();
    assert!(w.warpgroups);
    assert_eq!(
        (w.block_t, w.lat_chunk, w.stages, w.block_v),
        (64, 64, 2, 128)
    );
    assert!(attn_dsl::features::merge_wgmma());
    for t in [64, 128, 512] {
        assert_eq!(fused_tile_on(MmaKind::Warpgroup, t, 128, 2, 132), w, "{t}");
        assert_eq!(
            fused_tile_on(MmaKind::Sync, t, 128, 2, 132),
            fused_tile(t, 128, 2, 132),
            "{t}"
        );
    }
    assert_eq!(
        fused_tile_on(MmaKind::Warpgroup, 63, 128, 2, 132),
        fused_tile(63, 128, 2, 132)
    );
    let mut p = step(2, &[1; 40], &[600; 40]).plan().expect("plan");
    assert!(!p.combine_v_up.key().contains("WARPGROUPS"));
    p.retile_combine_v_up(w);
    let key = p.combine_v_up.key();
    assert!(
        key.contains("BLOCK_T=64,LAT_CHUNK=64,STAGES=2,BLOCK_V=128,WARPGROUPS=true"),
        "{key}"
    );
    assert_eq!(p.combine_v_up.grid, [1, 16, 1]);
    p.retile_combine_v_up(fused_tile(40, 16, 3, 132));
    assert!(!p.combine_v_up.key().contains("WARPGROUPS"));
    // Forced on a context: refused where the plan is for `mma.sync`, the plan unchanged.
    let before = p.combine_v_up.key();
    let err = p
        .force_fused_tile(MmaKind::Sync, w)
        .expect_err("mma.sync plan");
    assert_eq!(err, PlanError::WarpgroupTileOnSync);
    assert!(err.to_string().contains("needs warpgroup MMAs"), "{err}");
    assert_eq!(p.combine_v_up.key(), before);
    p.force_fused_tile(MmaKind::Warpgroup, w)
        .expect("warpgroup plan");
    assert!(p.combine_v_up.key().contains("WARPGROUPS=true"));
}

/// The fused combine + V-up takes the largest token tile that still gives every SM four
/// part-products (64 latent columns a step), or 16 tokens and 128 columns; a step whose
/// programs would not fill every SM twice splits the 128 output columns in two.
#[test]
fn fused_combine_v_up_tiles_fill_the_sms() {
    let tile = |t, n, parts, sms| {
        let f = fused_tile(t, n, parts, sms);
        (f.block_t, f.lat_chunk, f.stages, f.block_v)
    };
    // L1 at dcp 1 (two parts: 4 × 128 programs) and its dcp-2 rank (64 heads, three parts:
    // 4 × 64 programs, under two an SM).
    assert_eq!(tile(128, 128, 2, 132), (32, 64, 2, 128));
    assert_eq!(tile(128, 64, 3, 132), (32, 64, 2, 64));
    assert_eq!(tile(512, 128, 2, 132), (64, 64, 2, 128));
    // 32 × 8192 and 1 × 32768.
    assert_eq!(tile(32, 128, 2, 132), (16, 128, 2, 64));
    assert_eq!(tile(32, 64, 3, 132), (16, 128, 2, 64));
    assert_eq!(tile(1, 128, 2, 132), (16, 128, 2, 64));
    let p = step(2, &[1; 40], &[600; 40]).plan().expect("plan");
    let l = &p.combine_v_up;
    let (bt, chunk, stages, bv) = tile(40, 16, 3, p.step.num_sms);
    assert_eq!(l.grid, [40u32.div_ceil(bt), 16, 128 / bv]);
    assert!(
        l.key().contains(&format!(
            "BLOCK_T={bt},LAT_CHUNK={chunk},STAGES={stages},BLOCK_V={bv}"
        )),
        "{}",
        l.key()
    );
}

/// The history reduce merges whole rows where its programs fill the SMs four times over,
/// and down to a quarter row a program where they do not.
#[test]
fn history_reduce_columns_fill_the_sms() {
    use attn_runtime::ops::mla_dcp::plan::reduce_cols;
    assert_eq!(reduce_cols(32 * 128, 132), 512);
    assert_eq!(reduce_cols(528, 132), 512);
    assert_eq!(reduce_cols(264, 132), 256);
    assert_eq!(reduce_cols(128, 132), 128);
    assert_eq!(reduce_cols(1, 132), 128);
}

#[test]
fn split_heuristic_occupancy_and_length() {
    // Long history, few programs: occupancy-bound (132 SMs x 2 programs / (1 token · 4 head
    // tiles of 32) = 66, clamped to MAX_SPLITS; the same at 64-head tiles, 1 program per SM
    // over 2 tiles), and 33 at 16-head tiles (8 of them).
    let mut long = step(8, &[1], &[1 << 20]);
    long.block_table_stride = 4096;
    let p = long.plan().expect("plan");
    assert_eq!(p.num_splits, MAX_SPLITS);
    assert_eq!(
        long.plan_with(None, Some(64)).expect("plan").num_splits,
        MAX_SPLITS
    );
    assert_eq!(long.plan_with(None, Some(16)).expect("plan").num_splits, 33);
    assert!(matches!(
        long.plan_with(None, Some(8)),
        Err(PlanError::HistoryHeads { got: 8 })
    ));
    // One head tile: 264 splits wanted, clamped.
    let mut few_heads = step(1, &[1], &[1 << 20]);
    few_heads.heads_per_rank = 16;
    few_heads.block_table_stride = 16384;
    assert_eq!(few_heads.plan().expect("plan").num_splits, MAX_SPLITS);
    // Short local history: length-bound, one split.
    let p = step(8, &[1], &[8 * MIN_KEYS_PER_SPLIT as u32])
        .plan()
        .expect("plan");
    assert_eq!(p.num_splits, 1);
    // Many tokens fill the machine already (300 programs of one 32-head tile, 264 slots).
    let q = vec![1; 300];
    let s = vec![100_000; 300];
    let mut st = step(2, &q, &s);
    st.block_table_stride = 1000;
    assert_eq!(st.plan().expect("plan").num_splits, 1);
    // Forced counts are clamped.
    assert_eq!(
        step(2, &[1], &[10])
            .plan_with_splits(Some(0))
            .expect("plan")
            .num_splits,
        1
    );
}

/// The benchmark rows' split counts: one wave of resident programs at most (L2's 128
/// programs take 2 splits of 264 slots, not 3).
#[test]
fn benchmark_rows_split_within_one_wave() {
    let scale = 0.135;
    let rows = [
        (128, 32768, 16, 1, 2), // L2
        (128, 4096, 128, 1, 1), // L1
        (128, 4096, 64, 2, 1),  // L1, dcp 2 (per rank)
        (1, 32768, 128, 1, MAX_SPLITS),
        (32, 8192, 128, 1, 2),
    ];
    for (batch, ctx, heads, dcp, want) in rows {
        let layout = DcpLayout::new(dcp, 1, 64).expect("layout");
        let p = DecodeStep::uniform_decode(batch, ctx, heads, layout, scale, 132)
            .plan()
            .expect("plan");
        assert_eq!(p.num_splits, want, "{batch}x{ctx} h{heads} dcp{dcp}");
    }
}

#[test]
fn exchange_layout_offsets() {
    // N = 16, T = 3, bf16: out = 16·3·512·2 = 49152 B, lse 192 B → chunk 49408 B.
    let e = ExchangeLayout::new(4, 16, 3, 2);
    assert_eq!(e.lse_offset_bytes(), 49152);
    assert_eq!(e.chunk_bytes(), 49408);
    assert_eq!(e.total_bytes(), 4 * 49408);
    assert_eq!(e.chunk_stride_out(), 49408 / 2);
    assert_eq!(e.lse_index(1, 2, 1), 49408 / 4 + 49152 / 4 + 2 * 3 + 1);
    assert_eq!(e.out_index(1, 0, 2, 5), 49408 / 2 + 2 * 512 + 5);
    let odd = ExchangeLayout::new(2, 1, 1, 2);
    assert_eq!((odd.lse_offset_bytes(), odd.chunk_bytes()), (1024, 1280));
}

#[test]
fn invalid_steps_are_typed_errors() {
    let ok = step(2, &[1], &[10]);
    let cases: Vec<(DecodeStep, PlanError)> = vec![
        (
            DecodeStep {
                query_lens: vec![],
                seq_lens: vec![],
                ..ok.clone()
            },
            PlanError::EmptyBatch,
        ),
        (
            DecodeStep {
                query_lens: vec![1, 1],
                ..ok.clone()
            },
            PlanError::BatchLength {
                got: 2,
                expected: 1,
            },
        ),
        (
            DecodeStep {
                query_lens: vec![0],
                ..ok.clone()
            },
            PlanError::EmptyQuery { request: 0 },
        ),
        (
            DecodeStep {
                query_lens: vec![65],
                seq_lens: vec![70],
                ..ok.clone()
            },
            PlanError::QueryTooLong {
                request: 0,
                query_len: 65,
            },
        ),
        (
            DecodeStep {
                query_lens: vec![11],
                ..ok.clone()
            },
            PlanError::QueryLongerThanSequence {
                request: 0,
                query_len: 11,
                seq_len: 10,
            },
        ),
        (
            DecodeStep {
                heads_per_rank: 0,
                ..ok.clone()
            },
            PlanError::NoHeads,
        ),
        (
            DecodeStep {
                dtype: ScalarType::F32,
                ..ok.clone()
            },
            PlanError::Dtype(ScalarType::F32),
        ),
        (
            DecodeStep {
                num_sms: 0,
                ..ok.clone()
            },
            PlanError::NoSms,
        ),
        (
            DecodeStep {
                seq_lens: vec![10_000],
                block_table_stride: 4,
                ..ok.clone()
            },
            PlanError::BlockTableTooNarrow {
                request: 0,
                needed: 79,
                stride: 4,
            },
        ),
    ];
    for (s, want) in cases {
        assert_eq!(s.plan(), Err(want.clone()), "{want}");
    }
    let msg = PlanError::QueryTooLong {
        request: 3,
        query_len: 65,
    }
    .to_string();
    assert!(msg.contains("65") && msg.contains("64"), "{msg}");
}

/// The plan's exchange layout is the plumbing's `ChunkLayout` (what the NCCL A2A moves), in
/// element strides.
#[test]
fn exchange_layout_agrees_with_chunk_layout() {
    use attn_runtime::ops::mla_dcp::act_dtype::ActDtype;
    use attn_runtime::ops::mla_dcp::chunk_layout::ChunkLayout;
    for (d, n, t) in [(1, 1, 1), (2, 3, 5), (4, 16, 3), (8, 2, 7)] {
        let c = ChunkLayout::new(d, n, t, 512, ActDtype::Bf16).expect("chunk layout");
        let e = ExchangeLayout::new(d, n, t, 2);
        assert_eq!(e.chunk_bytes(), c.chunk_bytes());
        assert_eq!(e.total_bytes(), c.total_bytes());
        assert_eq!(e.lse_offset_bytes(), c.lse_offset_in_chunk());
        assert_eq!(
            e.out_index(d - 1, n - 1, t - 1, 7) * 2,
            c.out_byte(d - 1, n - 1, t - 1, 7)
        );
        assert_eq!(
            e.lse_index(d - 1, n - 1, t - 1) * 4,
            c.lse_byte(d - 1, n - 1, t - 1)
        );
    }
}

/// The warpgroup target's history tiling: whole 64-head tiles on two warpgroups with 64-key
/// tiles from 64 gathered heads (one program per SM, so the occupancy-bound split count
/// halves against `mma.sync`'s two 32-head programs), 16 heads keep the narrow tiling, and
/// a forced height other than 64 keeps `mma.sync`'s; on `mma.sync` 64 heads keep 32-key
/// tiles.
#[test]
fn warpgroup_tiling_takes_whole_head_tiles() {
    let mut long = step(8, &[1], &[1 << 20]);
    long.block_table_stride = 4096;
    let wg = |s: &DecodeStep, heads: Option<u32>| {
        s.plan_tuned(MmaKind::Warpgroup, None, heads, None)
            .expect("plan")
    };
    // 128 gathered heads: 2 tiles of 64; 132 slots / 2 programs = 66 splits, clamped.
    let p = wg(&long, None);
    assert_eq!(
        (p.history.kernel, p.history.grid[0], p.num_splits),
        ("mla_history", 2, 64)
    );
    assert_eq!((binding(&p, "BLOCK_H"), binding(&p, "KV_TILE")), (64, 64));
    let full = step(8, &[1; 34], &[4096; 34]);
    let p = wg(&full, None);
    assert_eq!(p.history.grid, [34 * 2, 1, 1]);
    assert_eq!(wg(&full, Some(64)).history, p.history);
    let forced = wg(&full, Some(32));
    assert_eq!(
        (binding(&forced, "BLOCK_H"), binding(&forced, "KV_TILE")),
        (32, 32)
    );
    let sync = full.plan_with(None, Some(64)).expect("plan");
    assert_eq!(binding(&sync, "KV_TILE"), 32);
    let narrow = step(1, &[1], &[4096]);
    assert_eq!(binding(&wg(&narrow, None), "BLOCK_H"), 16);
}

fn binding(p: &attn_runtime::ops::mla_dcp::plan::DecodePlan, name: &str) -> i64 {
    p.history
        .bindings()
        .iter()
        .find(|b| b.name == name)
        .and_then(|b| match b.value {
            attn_dsl::ConstValue::Int(v) => Some(v),
            attn_dsl::ConstValue::Bool(v) => Some(i64::from(v)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {name}"))
}
