mod unified_common;
use unified_common::*;
use attn_runtime::ops::unified_attention::cpu::{unified_attention_cpu, CpuOptions};
use attn_runtime::reference::unified_attention::{unified_attention, AttentionOptions};
use attn_runtime::reference::Dtype;

#[test]
fn smoke() {
    let g = Geometry::new(&[(5, 18), (1, 37)], (4, 4), 64);
    let data = PagedData::random(&g, 1);
    let opts = AttentionOptions { round_p: Some(Dtype::Bf16), ..Default::default() };
    let p = data.problem(opts);
    let want = unified_attention(&p).unwrap();
    let got = unified_attention_cpu(&p, &CpuOptions::default()).unwrap();
    assert_close(&got, &want, ATOL, RTOL, "smoke");
}

#[test]
fn smoke_can_fail() {
    let g = Geometry::new(&[(5, 18), (1, 37)], (4, 4), 64);
    let data = PagedData::random(&g, 1);
    let p = data.problem(AttentionOptions { round_p: Some(Dtype::Bf16), ..Default::default() });
    let want = unified_attention(&data.problem(AttentionOptions { sliding_window: 4, ..Default::default() })).unwrap();
    let got = unified_attention_cpu(&p, &CpuOptions::default()).unwrap();
    eprintln!("diff vs wrong reference {}", max_abs_diff(&got, &want));
    let want = unified_attention(&p).unwrap();
    eprintln!("diff vs right reference {}", max_abs_diff(&got, &want));
}
