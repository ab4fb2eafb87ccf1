//! NVRTC JIT (DESIGN §3.6): generated CUDA + the prelude (an in-memory header) → a cubin
//! for the exact arch, or PTX when this NVRTC cannot target the arch; NVRTC errors mapped
//! to DSL lines; `-Xptxas -v` statistics recorded per kernel. Needs NVRTC, not a GPU.

mod arch;
mod error;
mod line_map;
mod nvrtc_program;
mod ptxas_stats;
pub mod source_override;

pub use arch::{Arch, ArchParseError};
pub use error::JitError;
pub use line_map::{parse_nvrtc_log, Diagnostic, LineMap, Severity};
pub use nvrtc_program::{nvrtc_version, supported_archs};
pub use ptxas_stats::{parse_ptxas_stats, KernelStats};

use attn_dsl::codegen::{CudaKernel, PRELUDE, PRELUDE_NAME};
use attn_dsl::kernel::KernelInfo;
use nvrtc_program::NvrtcProgram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One translation unit to compile: the kernel source and the prelude it includes.
#[derive(Clone, Copy, Debug)]
pub struct CudaSource<'a> {
    /// The `extern "C"` entry point.
    pub entry: &'a str,
    /// The kernel translation unit (it `#include`s [`PRELUDE_NAME`]).
    pub source: &'a str,
    /// Text of the header handed to NVRTC as `prelude_name`.
    pub prelude: &'a str,
    pub prelude_name: &'a str,
}

impl<'a> CudaSource<'a> {
    /// A source that includes the compiler's own prelude.
    pub fn new(entry: &'a str, source: &'a str) -> Self {
        CudaSource {
            entry,
            source,
            prelude: PRELUDE,
            prelude_name: PRELUDE_NAME,
        }
    }

    /// The same source with another prelude (tests, hand-written kernels).
    pub fn with_prelude(self, prelude: &'a str) -> Self {
        CudaSource { prelude, ..self }
    }

    /// A run-time specialization from the emitter.
    pub fn from_kernel(k: &'a CudaKernel) -> Self {
        CudaSource::new(&k.entry, &k.source)
    }

    /// A specialization produced by `instantiate!`.
    pub fn from_info(info: &'a KernelInfo) -> Self {
        CudaSource::new(info.entry, info.cuda_source)
    }

    /// Name of the program in NVRTC messages (`<entry>.cu`).
    pub fn program_name(&self) -> String {
        format!("{}.cu", self.entry)
    }
}

/// How NVRTC is invoked. Part of the cache key: a different option is a different binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitOptions {
    pub arch: Arch,
    /// Extra NVRTC options appended after the standard ones.
    pub extra: Vec<String>,
}

impl JitOptions {
    pub fn new(arch: Arch) -> Self {
        JitOptions {
            arch,
            extra: Vec::new(),
        }
    }

    /// The options passed to NVRTC, for `target_option` (a cubin or a PTX arch flag).
    fn nvrtc_args(&self, target_option: String) -> Vec<String> {
        let mut v = vec![
            target_option,
            "--std=c++17".to_string(),
            "-lineinfo".to_string(),
            // Register/spill/smem statistics in the log (parsed into KernelStats).
            "--ptxas-options=-v".to_string(),
        ];
        v.extend(self.extra.iter().cloned());
        v
    }

    /// A stable rendering of everything that changes the output, for the cache key.
    pub fn fingerprint(&self) -> String {
        self.nvrtc_args(self.arch.cubin_option()).join(" ")
    }
}

/// What NVRTC produced: a binary for the driver to load.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModuleImage {
    /// SASS for exactly the target arch: loads without JIT.
    Cubin(Vec<u8>),
    /// PTX for the driver to JIT (NVRTC too old for the device's arch).
    Ptx(String),
}

impl ModuleImage {
    pub fn kind(&self) -> &'static str {
        match self {
            ModuleImage::Cubin(_) => "cubin",
            ModuleImage::Ptx(_) => "ptx",
        }
    }
    pub fn len(&self) -> usize {
        match self {
            ModuleImage::Cubin(b) => b.len(),
            ModuleImage::Ptx(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A compiled translation unit with its statistics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompiledModule {
    pub entry: String,
    /// The arch the image was built for (a lower one for a PTX fallback).
    pub arch_label: String,
    pub image: ModuleImage,
    /// `-Xptxas -v` statistics per kernel function in the unit.
    pub stats: Vec<KernelStats>,
    /// NVRTC's log (warnings, statistics).
    pub log: String,
    /// Wall time NVRTC took (zero when loaded from the disk cache).
    pub compile_time: Duration,
    /// NVRTC version as `major.minor`.
    pub nvrtc_version: String,
}

impl CompiledModule {
    /// Statistics of the entry point (ptxas names it exactly).
    pub fn entry_stats(&self) -> Option<&KernelStats> {
        self.stats.iter().find(|s| s.function == self.entry)
    }
}

static NVRTC_COMPILES: AtomicU64 = AtomicU64::new(0);

/// How many NVRTC compiles this process has run (tests count cache hits with it).
pub fn nvrtc_compile_count() -> u64 {
    NVRTC_COMPILES.load(Ordering::Relaxed)
}

/// Compiles `source` for `arch` with the standard options (no GPU needed).
pub fn compile_for_arch(source: &CudaSource<'_>, arch: Arch) -> Result<CompiledModule, JitError> {
    compile(source, &JitOptions::new(arch))
}

/// Compiles `source`: a cubin for `opts.arch` when this NVRTC supports it, else PTX for the
/// newest virtual arch it knows that does not exceed the target (the driver JITs it).
pub fn compile(source: &CudaSource<'_>, opts: &JitOptions) -> Result<CompiledModule, JitError> {
    let (major, minor) = nvrtc_version()?;
    let version = format!("{major}.{minor}");
    let supported = supported_archs()?;
    let (target_option, arch_label) = if supported.contains(&opts.arch.number) {
        (opts.arch.cubin_option(), opts.arch.to_string())
    } else {
        let fallback = supported
            .iter()
            .copied()
            .filter(|&a| a <= opts.arch.number)
            .max()
            .ok_or_else(|| JitError::UnsupportedArch {
                arch: opts.arch,
                version: version.clone(),
                supported: supported
                    .iter()
                    .map(|a| format!("sm_{a}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let arch = Arch {
            number: fallback,
            arch_specific: false,
        };
        (arch.ptx_option(), format!("compute_{fallback}"))
    };
    let program_name = source.program_name();
    let program = NvrtcProgram::new(
        &program_name,
        source.entry,
        source.source,
        &[(source.prelude_name, source.prelude)],
    )?;
    let started = Instant::now();
    NVRTC_COMPILES.fetch_add(1, Ordering::Relaxed);
    let ok = program.compile(&opts.nvrtc_args(target_option.clone()))?;
    let compile_time = started.elapsed();
    let log = program.log()?;
    if !ok {
        let diagnostics = parse_nvrtc_log(&log, &program_name, &LineMap::new(source.source));
        return Err(JitError::Compile {
            entry: source.entry.to_string(),
            arch: opts.arch,
            diagnostics,
            log,
        });
    }
    let image = if target_option.contains("compute_") {
        ModuleImage::Ptx(program.ptx()?)
    } else {
        ModuleImage::Cubin(program.cubin()?)
    };
    Ok(CompiledModule {
        entry: source.entry.to_string(),
        arch_label,
        image,
        stats: parse_ptxas_stats(&log),
        log,
        compile_time,
        nvrtc_version: version,
    })
}
