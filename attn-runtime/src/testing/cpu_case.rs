//! Runs one case on the CPU executor and checks it against the f64 reference, with
//! poisoned outputs: every valid element must be written (finite) and within tolerance,
//! and the row padding after each token must still hold its NaN poison.

use crate::ops::unified_attention::cpu::{run_unified_attention_cpu, CpuOptions, CpuRun};
use crate::reference::unified_attention::{unified_attention, AttentionOptions};

use super::paged::{assert_close, PagedData, ATOL, RTOL};

/// Poisoned elements after every token row of q and out.
pub const ROW_PADDING: usize = 7;

/// Reference (probabilities rounded to the data dtype, as the kernel casts P) vs kernel.
pub fn check_case(
    name: &str,
    data: &PagedData,
    options: AttentionOptions<'_>,
    cpu: CpuOptions<'_>,
) -> (CpuRun, Vec<f64>) {
    let options = AttentionOptions {
        round_p: Some(data.dtype),
        ..options
    };
    let problem = data.problem(options);
    let want = unified_attention(&problem).unwrap_or_else(|e| panic!("{name}: reference: {e}"));
    let cpu = CpuOptions {
        dtype: data.dtype,
        row_padding: ROW_PADDING,
        ..cpu
    };
    let run = run_unified_attention_cpu(&problem, &cpu).unwrap_or_else(|e| panic!("{name}: {e}"));
    let context = format!("{name} ({} path)", run.plan.path_name());
    assert_poison_intact(&run, data, &context);
    assert_close(&run.output, &want, ATOL, RTOL, &context);
    (run, want)
}

/// Valid elements are finite (written, no NaN leaked); padding is still NaN (untouched).
pub fn assert_poison_intact(run: &CpuRun, data: &PagedData, context: &str) {
    let row = data.num_query_heads * data.head_size;
    for (i, &x) in run.raw_output.iter().enumerate() {
        let in_row = i % run.out_token_stride < row;
        if in_row {
            assert!(
                x.is_finite(),
                "{context}: output element {i} is {x} (unwritten or NaN leaked)"
            );
        } else {
            assert!(
                x.is_nan(),
                "{context}: padding element {i} was overwritten with {x}"
            );
        }
    }
}
