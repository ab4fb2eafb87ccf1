//! `-Xptxas -v` statistics (registers, spills, shared memory) parsed from NVRTC's log,
//! so `attn compile` and the tests can report spills without a GPU or `cuobjdump`.

use serde::{Deserialize, Serialize};

/// Resource usage of one compiled function as ptxas reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelStats {
    /// Function name as in the cubin (the `extern "C"` entry name).
    pub function: String,
    /// The arch ptxas compiled for (`sm_90`).
    pub arch: String,
    pub registers: u32,
    pub barriers: u32,
    /// Static shared memory (dynamic shared memory is a launch parameter, not counted).
    pub shared_bytes: u32,
    pub stack_frame_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
}

impl KernelStats {
    /// True when ptxas spilled registers to local memory (a performance warning).
    pub fn spills(&self) -> bool {
        self.spill_store_bytes > 0 || self.spill_load_bytes > 0
    }
}

/// Parses every function's statistics from a ptxas verbose log, in log order.
///
/// ptxas prints, per entry function: `Compiling entry function 'f' for 'sm_90'`, then
/// `Function properties for f` / `N bytes stack frame, N bytes spill stores, N bytes spill
/// loads`, then `Used N registers, used N barriers, N bytes smem, ...`.
pub fn parse_ptxas_stats(log: &str) -> Vec<KernelStats> {
    let mut out: Vec<KernelStats> = Vec::new();
    let mut current: Option<usize> = None;
    for line in log.lines() {
        if let Some((function, arch)) = compiling_entry(line) {
            out.push(KernelStats {
                function,
                arch,
                ..KernelStats::default()
            });
            current = Some(out.len() - 1);
        } else if let Some(name) = line.split("Function properties for ").nth(1) {
            let name = name.trim();
            current = out.iter().position(|s| s.function == name);
        } else if let Some(s) = current.and_then(|i| out.get_mut(i)) {
            if line.contains("bytes stack frame") {
                s.stack_frame_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
                s.spill_store_bytes = number_before(line, "bytes spill stores").unwrap_or(0);
                s.spill_load_bytes = number_before(line, "bytes spill loads").unwrap_or(0);
            } else if line.contains("Used ") && line.contains("registers") {
                s.registers = number_before(line, "registers").unwrap_or(0);
                s.barriers = number_before(line, "barriers").unwrap_or(0);
                s.shared_bytes = number_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    out
}

/// `ptxas info : Compiling entry function 'f' for 'sm_90'` → (f, sm_90).
fn compiling_entry(line: &str) -> Option<(String, String)> {
    let rest = line.split("Compiling entry function '").nth(1)?;
    let (name, rest) = rest.split_once('\'')?;
    let arch = rest.split('\'').nth(1).unwrap_or("").to_string();
    Some((name.to_string(), arch))
}

/// The integer right before `label` in `line` (`..., 12 bytes spill stores` → 12).
fn number_before(line: &str, label: &str) -> Option<u32> {
    let head = &line[..line.find(label)?];
    head.split(|c: char| !c.is_ascii_digit())
        .rev()
        .find(|t| !t.is_empty())?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'vadd' for 'sm_80'\n\
ptxas info    : Function properties for vadd\n\
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem, 372 bytes cmem[0]\n\
ptxas info    : Compiling entry function 'flash' for 'sm_80'\n\
ptxas info    : Function properties for flash\n\
ptxas         .     48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads\n\
ptxas info    : Used 255 registers, 372 bytes cmem[0]\n\
ptxas info    : Compile time = 3.348 ms\n";

    #[test]
    fn parses_registers_spills_and_smem_per_entry() {
        let s = parse_ptxas_stats(LOG);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0],
            KernelStats {
                function: "vadd".into(),
                arch: "sm_80".into(),
                registers: 10,
                barriers: 1,
                shared_bytes: 1024,
                ..Default::default()
            }
        );
        assert!(!s[0].spills());
        assert_eq!(
            (s[1].registers, s[1].shared_bytes, s[1].barriers),
            (255, 0, 0)
        );
        assert_eq!(
            (
                s[1].stack_frame_bytes,
                s[1].spill_store_bytes,
                s[1].spill_load_bytes
            ),
            (48, 40, 36)
        );
        assert!(s[1].spills());
    }

    #[test]
    fn empty_log_gives_no_stats() {
        assert!(parse_ptxas_stats("").is_empty());
    }
}
