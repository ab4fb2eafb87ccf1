//! The scratch ledger (feature `scratch_ledger`, shipped in session 28): a scratch write's
//! leading barrier goes where no read of its bytes came after the last barrier, and the
//! cross-warp step of a row reduction alternates between two slots of its own. On MLA's
//! loop shape (`latent_fwd` on two warpgroups: the row maximum reduced across the 4 × 2
//! warp grid, P staged for PV) a tile's four barriers become two, on both targets; the
//! emitted kernels match the executor on the simulator (the benchmark rows' kernels with
//! it: `attn-runtime/tests/sim_opt_in.rs`).

mod codegen_common;

use attn_dsl::codegen::emit_cuda;
use attn_dsl::ir::Function;
use codegen_common::sim_check::{check, latent_args};

/// The ledger on whatever the environment says (a shipped feature named in
/// `ATTN_CODEGEN_ENABLE` is accepted as what is already so).
fn setup() {
    std::env::set_var("ATTN_CODEGEN_ENABLE", "scratch_ledger");
}

/// `latent_fwd` (MLA's loop) on two warpgroups, for warpgroup MMAs or not, laid out again
/// for the 8 warps (a 4 × 2 grid: the rows' reductions cross warps).
fn latent(warpgroups: bool) -> Function {
    let mut f = codegen_common::latent_fwd_two_warpgroups(64, 128, warpgroups);
    attn_dsl::passes::layout::run(&mut f);
    f
}

/// The key loop of the program after `from`: from its `for` (the first after `from` over
/// `start_n`) to its closing brace at the same indentation.
fn loop_body<'s>(src: &'s str, from: &str) -> &'s str {
    let start = src.find(from).expect("program");
    let at = start + src[start..].find("for (int start_n").expect("key loop");
    let indent = src[..at].rsplit('\n').next().unwrap_or("").len();
    let close = format!("\n{}}}", " ".repeat(indent));
    let end = at + src[at..].find(&close).expect("loop end");
    &src[at..end]
}

fn barriers(code: &str) -> usize {
    code.matches("attn_bar_sync(").count() + code.matches("__syncthreads()").count()
}

#[test]
fn the_latent_loop_keeps_two_barriers_a_tile() {
    setup();
    for warpgroups in [false, true] {
        let f = latent(warpgroups);
        let src = emit_cuda(&f).expect("emit").source;
        assert!(src.contains("unsigned attn_red_par = 0u;"), "{src}");
        assert!(src.contains("#define ATTN_RED_SLOT_AT(p)"), "{src}");
        // The consumers' loop on sm_90a (warp-specialized: the ring's handshakes are
        // mbarriers), else the program's (a barrier at the top for the ring's stage).
        let (from, ring) = if warpgroups {
            ("attn_setmaxnreg_inc", 0)
        } else {
            ("attn_warp", 1)
        };
        let body = loop_body(&src, from);
        // The row maximum's exchange and P staged, each a barrier after its writes only.
        assert_eq!(barriers(body), ring + 2, "{body}");
        assert_eq!(body.matches("(no barrier: bytes 0..").count(), 1, "{body}");
        assert_eq!(body.matches("attn_red_par ^= 1u;").count(), 1, "{body}");
    }
}

#[test]
fn the_latent_loop_matches_the_executor() {
    setup();
    for warpgroups in [false, true] {
        let f = latent(warpgroups);
        for (seq, seed) in [(150usize, 61u64), (256, 62), (40, 63)] {
            let heads = 2usize;
            check(
                &format!("ledger latent {seq} warpgroups={warpgroups}"),
                &f,
                [seq.div_ceil(64) as u32, heads as u32, 1],
                latent_args(heads, seq, 128, seed),
                2e-2,
            );
        }
    }
}

/// Where the ledger knows nothing, the barrier stays: the test attention program on two
/// warpgroups stages its queries before the loop (the program's start: every byte may have
/// been read) behind a barrier, and P in the loop without one (the row maximum's exchange
/// came after the last read of those bytes); it matches the executor.
#[test]
fn a_write_where_the_ledger_knows_nothing_keeps_its_barrier() {
    setup();
    let f = codegen_common::attention(64, 64, 64, 8);
    let src = emit_cuda(&f).expect("emit").source;
    let staged: Vec<&str> = src
        .split("unsigned short* sa = reinterpret_cast<unsigned short*>(attn_scratch);")
        .skip(1)
        .map(|rest| rest.trim_start().lines().next().unwrap_or(""))
        .collect();
    assert_eq!(staged.len(), 2, "{src}");
    assert_eq!(staged[0], "__syncthreads();", "{src}");
    assert!(staged[1].starts_with("// (no barrier: bytes 0.."), "{src}");
    let args =
        codegen_common::sim_check::flash_args(attn_dsl::ir::ScalarType::Bf16, 1, 150, 64, 64);
    check("ledger attention", &f, [3, 1, 1], args, 2e-2);
}
