mod codegen_common;
#[test]
#[ignore]
fn dump() {
    let f = codegen_common::small_dot(attn_dsl::ir::ScalarType::Bf16, 8, 4, 2, 1);
    println!("{}", attn_dsl::codegen::emit_cuda(&f).unwrap().source);
    let f = codegen_common::softmax(4, 32, 8);
    println!("{}", attn_dsl::codegen::emit_cuda(&f).unwrap().source);
}
