//! Runs emitted CUDA on the CPU: g++ compiles the kernel against `sim_prelude.h` (one
//! std::thread per CUDA thread, barriers for `__syncthreads`, per-warp exchanges for
//! shuffles and `mma.sync`), so tests can check the emitter's data movement against the
//! CPU executor without a GPU. A warpgroup-targeted source runs either branch: `mma.sync`'s,
//! or sm_90a's (`wgmma`, named barriers, TMA boxes: `sim_wgmma.h`, `sim_tma.h`). Skips (returns `None`) when no `g++`
//! is installed.

#[path = "sim_wgmma.rs"]
mod sim_wgmma;

use attn_dsl::codegen::CudaKernel;
use attn_dsl::interp::{self, CpuArg, HostBuffer};
use attn_dsl::ir::{Function, ParamKind, ScalarType};
use attn_dsl::kernel::ScalarArg;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

const SIM_PRELUDE: &str = include_str!("sim_prelude.h");
const SIM_WGMMA: &str = include_str!("sim_wgmma.h");
const SIM_TMA: &str = include_str!("sim_tma.h");

/// Which branch of an emitted source the simulator compiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Branch {
    /// The `mma.sync` branch (what an sm_80 device runs).
    MmaSync,
    /// The sm_90a branch (`__CUDA_ARCH_FEAT_SM90_ALL`): warpgroup MMAs, warpgroup turns.
    Wgmma,
}

/// When copies land (`ATTN_SIM_LANDING_DELAY_US` of the simulator's process): a `cp.async`
/// group at its wait, late by the delay, and a TMA box at once (`Early`) or at the first wait
/// on its mbarrier (`Late`). Early landing catches a stage refilled while still read, late
/// landing a read that does not wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Landing {
    Early,
    Late,
}

impl Branch {
    /// Whether `source` has an sm_90a branch to run.
    pub fn present(self, source: &str) -> bool {
        self == Branch::MmaSync || source.contains("__CUDA_ARCH_FEAT_SM90_ALL")
    }
}

/// One kernel argument: a buffer (read back after the run) or a scalar.
#[derive(Clone, Debug)]
pub enum SimArg {
    Buf(HostBuffer),
    Scalar(ScalarArg),
}

/// Whether `g++` is available (the simulator's only requirement).
pub fn have_gxx() -> bool {
    Command::new("g++").arg("--version").output().is_ok()
}

/// Whether the simulator is built with ThreadSanitizer (`ATTN_SIM_RACECHECK=1`): every CUDA
/// thread is a `std::thread` and every barrier a `std::barrier` (or a lock), so two threads
/// touching the same shared-memory byte, one writing, with no barrier between them is a
/// data race ThreadSanitizer reports, and the run fails: a racecheck of the emitted
/// kernel's barriers without a GPU (a dropped barrier that was needed fails here even
/// where the values it guarded happen to come out right).
pub fn race_checked() -> bool {
    std::env::var("ATTN_SIM_RACECHECK").is_ok_and(|v| v == "1")
}

/// One directory per (kernel, simulator prelude, driver, racecheck): a cached binary is never
/// stale.
fn work_dir(k: &CudaKernel, branch: Branch) -> PathBuf {
    let mut h = blake3::Hasher::new();
    // The source itself, not `k.hash`: a test may run an edited copy of an emitted kernel.
    h.update(k.source.as_bytes());
    h.update(SIM_PRELUDE.as_bytes());
    h.update(SIM_WGMMA.as_bytes());
    h.update(SIM_TMA.as_bytes());
    h.update(format!("{branch:?}").as_bytes());
    h.update(main_source(k).as_bytes());
    h.update(&[u8::from(race_checked())]);
    let hex = h.finalize().to_hex();
    let dir = std::env::temp_dir().join(format!("attn_sim_{}", &hex[..16]));
    std::fs::create_dir_all(&dir).expect("create sim dir");
    dir
}

fn c_scalar_type(s: ScalarType) -> &'static str {
    match s {
        ScalarType::Bf16 | ScalarType::F16 | ScalarType::F32 => "float",
        ScalarType::I32 => "int",
        ScalarType::I64 => "long long",
        ScalarType::Bool => "bool",
    }
}

fn c_storage_type(s: ScalarType) -> &'static str {
    match s {
        ScalarType::Bf16 => "bf16",
        ScalarType::F16 => "f16",
        ScalarType::F32 => "float",
        ScalarType::I32 => "int",
        ScalarType::I64 => "long long",
        ScalarType::Bool => "bool",
    }
}

/// The host driver: reads the grid and the arguments, runs every block, writes the buffers.
fn main_source(k: &CudaKernel) -> String {
    let mut decl = String::new();
    let mut call = Vec::new();
    let mut write = String::new();
    for (i, p) in k.params.iter().enumerate() {
        match p.kind {
            ParamKind::Ptr { elem, .. } => {
                decl.push_str(&format!(
                    "    std::vector<unsigned char> a{i} = read_blob(in);\n"
                ));
                call.push(format!("({}*)a{i}.data()", c_storage_type(elem)));
                write.push_str(&format!("    write_blob(out, a{i});\n"));
            }
            ParamKind::Scalar(s) => {
                let t = c_scalar_type(s);
                decl.push_str(&format!(
                    "    {t} a{i}; if (fread(&a{i}, sizeof(a{i}), 1, in) != 1) return 2;\n"
                ));
                call.push(format!("a{i}"));
            }
        }
    }
    // Tensor maps are read only by the sm_90a branch (`sim_tma.h`).
    for m in &k.tensor_maps {
        let stride = match m.row_stride.param {
            Some(p) => format!("{}LL * (long long)a{p}", m.row_stride.coeff),
            None => format!("{}LL", m.row_stride.coeff),
        };
        call.push(format!(
            "attn_sim_map(a{b}.data(), a{b}.size(), {stride}, {}, {}, {})",
            m.box_rows,
            m.box_cols,
            m.elem.size_bytes(),
            b = m.base_param,
        ));
    }
    let threads = k.block_threads;
    format!(
        r#"#include "attn_prelude.cuh"
#include "kernel.inc"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>
thread_local attn_dim3 threadIdx, blockIdx;
attn_dim3 gridDim, blockDim;
std::barrier<>* attn_block_barrier;
std::barrier<>* attn_warp_barriers[32];
attn_lane_regs attn_warp_regs[32][32];
thread_local std::vector<std::vector<attn_pending_copy>> attn_copy_groups;
thread_local std::vector<attn_pending_copy> attn_open_copies;
alignas(16) unsigned char attn_smem[232448];
static std::vector<unsigned char> read_blob(FILE* f) {{
    unsigned long long n = 0;
    if (fread(&n, 8, 1, f) != 1) exit(3);
    std::vector<unsigned char> v(n + 16);
    if (n && fread(v.data(), 1, n, f) != n) exit(3);
    v.resize(n);
    return v;
}}
static void write_blob(FILE* f, const std::vector<unsigned char>& v) {{
    unsigned long long n = v.size();
    fwrite(&n, 8, 1, f);
    fwrite(v.data(), 1, n, f);
}}
// A kernel whose barriers or mbarriers never complete would hang the test run: after
// `ATTN_SIM_TIMEOUT_S` seconds (default 600) the simulator stops and says so.
static void watchdog() {{
    const char* v = std::getenv("ATTN_SIM_TIMEOUT_S");
    const int s = v ? std::atoi(v) : 600;
    std::thread([s] {{
        std::this_thread::sleep_for(std::chrono::seconds(s));
        std::fprintf(stderr, "simulator: no end after %d s (a barrier or an mbarrier phase that never completes?)\n", s);
        std::fflush(stderr);
        std::_Exit(4);
    }}).detach();
}}
int main(int argc, char** argv) {{
    if (argc != 3) return 1;
    watchdog();
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 1;
    unsigned g[3];
    if (fread(g, 4, 3, in) != 3) return 2;
{decl}    fclose(in);
    const unsigned T = {threads};
    gridDim = {{g[0], g[1], g[2]}};
    blockDim = {{T, 1, 1}};
    std::barrier<> block_bar(T);
    attn_block_barrier = &block_bar;
    std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
    for (unsigned w = 0; w < T / 32; ++w) {{
        warp_bars.emplace_back(new std::barrier<>(32));
        attn_warp_barriers[w] = warp_bars.back().get();
    }}
    for (unsigned z = 0; z < g[2]; ++z)
        for (unsigned y = 0; y < g[1]; ++y)
            for (unsigned x = 0; x < g[0]; ++x) {{
                std::vector<std::thread> ts;
                for (unsigned t = 0; t < T; ++t)
                    ts.emplace_back([&, t] {{
                        threadIdx = {{t, 0, 0}};
                        blockIdx = {{x, y, z}};
                        {entry}({args});
                    }});
                for (auto& t : ts) t.join();
            }}
    FILE* out = fopen(argv[2], "wb");
    if (!out) return 1;
{write}    fclose(out);
    return 0;
}}
"#,
        entry = k.entry,
        args = call.join(", "),
    )
}

/// Compiles (once per content hash) and returns the simulator binary.
fn build(k: &CudaKernel, branch: Branch) -> Result<PathBuf, String> {
    let dir = work_dir(k, branch);
    let bin = dir.join("sim");
    if bin.exists() {
        return Ok(bin);
    }
    let (prelude, source, define) = match branch {
        Branch::MmaSync => (SIM_PRELUDE.to_string(), k.source.clone(), None),
        Branch::Wgmma => (
            format!("{SIM_PRELUDE}\n{SIM_WGMMA}\n{SIM_TMA}"),
            sim_wgmma::rewrite(&k.source)?,
            Some("-D__CUDA_ARCH_FEAT_SM90_ALL=1"),
        ),
    };
    std::fs::write(dir.join("attn_prelude.cuh"), prelude).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("kernel.inc"), source).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("main.cpp"), main_source(k)).map_err(|e| e.to_string())?;
    let tmp = dir.join(format!("sim.tmp{}", std::process::id()));
    let racecheck: &[&str] = if race_checked() {
        &["-fsanitize=thread", "-g"]
    } else {
        &[]
    };
    let out = Command::new("g++")
        .args(["-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-w"])
        .args(define)
        .args(racecheck)
        .arg("-o")
        .arg(&tmp)
        .arg(dir.join("main.cpp"))
        .current_dir(&dir)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "g++ failed on {}:\n{}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::rename(&tmp, &bin).map_err(|e| e.to_string())?;
    Ok(bin)
}

fn buffer_bytes(b: &HostBuffer) -> Vec<u8> {
    match b {
        HostBuffer::Bf16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        HostBuffer::F16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        HostBuffer::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostBuffer::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostBuffer::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostBuffer::Bool(v) => v.iter().map(|&x| x as u8).collect(),
    }
}

fn buffer_from_bytes(like: &HostBuffer, b: &[u8]) -> HostBuffer {
    use half::{bf16, f16};
    let u16s = || b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]));
    let w4 = || b.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
    match like {
        HostBuffer::Bf16(_) => HostBuffer::Bf16(u16s().map(bf16::from_bits).collect()),
        HostBuffer::F16(_) => HostBuffer::F16(u16s().map(f16::from_bits).collect()),
        HostBuffer::F32(_) => HostBuffer::F32(w4().map(f32::from_le_bytes).collect()),
        HostBuffer::I32(_) => HostBuffer::I32(w4().map(i32::from_le_bytes).collect()),
        HostBuffer::I64(_) => HostBuffer::I64(
            b.chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        ),
        HostBuffer::Bool(_) => HostBuffer::Bool(b.iter().map(|&x| x != 0).collect()),
    }
}

fn scalar_bytes(s: ScalarArg) -> Vec<u8> {
    match s {
        ScalarArg::I32(v) => v.to_le_bytes().to_vec(),
        ScalarArg::I64(v) => v.to_le_bytes().to_vec(),
        ScalarArg::F32(v) => v.to_le_bytes().to_vec(),
        ScalarArg::Bool(v) => vec![v as u8],
    }
}

/// Runs kernel `k` over `grid` with `args` on the CPU simulator (its `mma.sync` branch);
/// buffers are updated in place.
pub fn run(k: &CudaKernel, grid: [u32; 3], args: &mut [SimArg]) -> Result<(), String> {
    run_branch(k, grid, args, Branch::MmaSync, None)
}

/// [`run`] on the given branch of the source, the copies landing as `landing` says (`None`:
/// as the process's `ATTN_SIM_LANDING_DELAY_US` says).
pub fn run_branch(
    k: &CudaKernel,
    grid: [u32; 3],
    args: &mut [SimArg],
    branch: Branch,
    landing: Option<Landing>,
) -> Result<(), String> {
    let bin = build(k, branch)?;
    let dir = bin.parent().map(Path::to_path_buf).unwrap_or_default();
    let tag = format!("{}_{:?}", std::process::id(), std::thread::current().id());
    let tag: String = tag
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let (inp, outp) = (
        dir.join(format!("in_{tag}")),
        dir.join(format!("out_{tag}")),
    );
    let mut blob = Vec::new();
    for g in grid {
        blob.extend_from_slice(&g.to_le_bytes());
    }
    for a in args.iter() {
        match a {
            SimArg::Buf(b) => {
                let bytes = buffer_bytes(b);
                blob.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                blob.extend_from_slice(&bytes);
            }
            SimArg::Scalar(s) => blob.extend_from_slice(&scalar_bytes(*s)),
        }
    }
    std::fs::File::create(&inp)
        .and_then(|mut f| f.write_all(&blob))
        .map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&bin);
    // The first race ends the run with a report (ThreadSanitizer's exit code 66).
    cmd.env("TSAN_OPTIONS", "halt_on_error=1 exitcode=66");
    match landing {
        Some(Landing::Early) => cmd.env("ATTN_SIM_LANDING_DELAY_US", "0"),
        Some(Landing::Late) => cmd.env("ATTN_SIM_LANDING_DELAY_US", "300"),
        None => &mut cmd,
    };
    let st = cmd
        .arg(&inp)
        .arg(&outp)
        .output()
        .map_err(|e| e.to_string())?;
    if !st.status.success() {
        return Err(format!(
            "simulator exited with {}: {}",
            st.status,
            String::from_utf8_lossy(&st.stderr)
        ));
    }
    let out = std::fs::read(&outp).map_err(|e| e.to_string())?;
    let (_, _) = (std::fs::remove_file(&inp), std::fs::remove_file(&outp));
    let mut pos = 0usize;
    for a in args.iter_mut() {
        if let SimArg::Buf(b) = a {
            let n = u64::from_le_bytes(out[pos..pos + 8].try_into().expect("len")) as usize;
            pos += 8;
            *b = buffer_from_bytes(b, &out[pos..pos + n]);
            pos += n;
        }
    }
    Ok(())
}

/// Runs `f` on the CPU executor with the same arguments (buffers updated in place).
pub fn run_interp(f: &Function, grid: [u32; 3], args: &mut [SimArg]) -> Result<(), String> {
    let cpu: Vec<CpuArg<'_>> = f
        .params
        .iter()
        .zip(args.iter_mut())
        .map(|(p, a)| match (a, p.kind) {
            (SimArg::Scalar(s), _) => CpuArg::Scalar(*s),
            (SimArg::Buf(b), ParamKind::Ptr { mutable: true, .. }) => b.arg_out(),
            (SimArg::Buf(b), _) => b.arg_in(),
        })
        .collect();
    interp::run(f, grid, cpu)
        .map(|_| ())
        .map_err(|e| e.to_string())
}
