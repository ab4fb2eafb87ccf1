//! `ATTN_CODEGEN_DUMP=<dir> cargo test -p attn-dsl --test codegen_dump -- --ignored` writes
//! the CUDA of every test program and DSL kernel (and the prelude) to `<dir>`, for reading
//! or for running on a GPU host with an external harness.

mod codegen_common;

use attn_dsl::codegen::{emit_cuda, CudaKernel, PRELUDE, PRELUDE_NAME};

#[test]
#[ignore = "writes files; run explicitly with ATTN_CODEGEN_DUMP set"]
fn dump_sources() {
    let dir = std::env::var("ATTN_CODEGEN_DUMP").expect("set ATTN_CODEGEN_DUMP to a directory");
    std::fs::create_dir_all(&dir).expect("create dump dir");
    std::fs::write(format!("{dir}/{PRELUDE_NAME}"), PRELUDE).expect("write prelude");
    let mut kernels: Vec<(String, CudaKernel)> = codegen_common::all_programs()
        .into_iter()
        .map(|(label, f)| (label, emit_cuda(&f).expect("emit")))
        .collect();
    kernels.extend(codegen_common::dsl_kernels());
    let mut index = String::new();
    for (label, k) in kernels {
        std::fs::write(format!("{dir}/{}.cu", k.entry), &k.source).expect("write source");
        index.push_str(&format!(
            "{} {} {} {label}\n",
            k.entry, k.block_threads, k.shared_bytes
        ));
    }
    std::fs::write(format!("{dir}/index.txt"), index).expect("write index");
}
