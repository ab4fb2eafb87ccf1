//! Maps NVRTC diagnostics back to DSL source lines.
//!
//! The emitter writes a `// L<line>: ...` comment before the code of each op; a CUDA line
//! in an NVRTC message belongs to the nearest such comment at or above it. That is how a
//! user sees "DSL line 12" rather than a line of generated code they never wrote.

use std::fmt;

/// How serious an NVRTC message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Remark,
    Warning,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Remark => "remark",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One NVRTC message, located in the generated CUDA and, when possible, in the DSL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file NVRTC names: the program name or a header (the prelude).
    pub file: String,
    /// 1-based line in `file`.
    pub cuda_line: u32,
    /// The DSL line of the op whose code contains `cuda_line` (program file only).
    pub dsl_line: Option<u32>,
    pub severity: Severity,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dsl_line {
            Some(l) => write!(
                f,
                "DSL line {l} ({}:{}): {}: {}",
                self.file, self.cuda_line, self.severity, self.message
            ),
            None => write!(
                f,
                "{}:{}: {}: {}",
                self.file, self.cuda_line, self.severity, self.message
            ),
        }
    }
}

/// For each CUDA line (1-based), the DSL line of the nearest preceding `// L<n>:` marker.
#[derive(Clone, Debug, Default)]
pub struct LineMap {
    /// `dsl[i]` = DSL line for CUDA line `i + 1`.
    dsl: Vec<Option<u32>>,
}

impl LineMap {
    /// Scans generated CUDA for `// L<line>:` markers.
    pub fn new(cuda_source: &str) -> Self {
        let mut current = None;
        let dsl = cuda_source
            .lines()
            .map(|line| {
                if let Some(l) = marker_line(line) {
                    current = Some(l);
                }
                current
            })
            .collect();
        LineMap { dsl }
    }

    /// The DSL line for 1-based CUDA line `cuda_line`, if a marker precedes it.
    pub fn dsl_line(&self, cuda_line: u32) -> Option<u32> {
        let idx = (cuda_line as usize).checked_sub(1)?;
        // Lines past the end (NVRTC counts a trailing line) keep the last marker.
        self.dsl
            .get(idx)
            .copied()
            .unwrap_or_else(|| self.dsl.last().copied().flatten())
    }
}

/// `// L12: ...` → 12 (leading whitespace allowed; the marker must start the comment).
fn marker_line(line: &str) -> Option<u32> {
    let rest = line
        .trim_start()
        .strip_prefix("//")?
        .trim_start()
        .strip_prefix('L')?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    if digits.is_empty() || !rest[digits.len()..].starts_with(':') {
        return None;
    }
    digits.parse().ok()
}

/// Parses NVRTC's log (`file(line): error: message`) into diagnostics; lines of the
/// program named `program_name` get their DSL line from `map`.
pub fn parse_nvrtc_log(log: &str, program_name: &str, map: &LineMap) -> Vec<Diagnostic> {
    log.lines()
        .filter_map(parse_diagnostic_line)
        .map(|(file, cuda_line, severity, message)| {
            let dsl_line = if file == program_name {
                map.dsl_line(cuda_line)
            } else {
                None
            };
            Diagnostic {
                file,
                cuda_line,
                dsl_line,
                severity,
                message,
            }
        })
        .collect()
}

/// `name.cu(12): error: identifier "x" is undefined` (also `warning #177-D: ...`).
fn parse_diagnostic_line(line: &str) -> Option<(String, u32, Severity, String)> {
    let open = line.find('(')?;
    let close = open + line[open..].find("): ")?;
    let file = line[..open].trim().to_string();
    let cuda_line: u32 = line[open + 1..close].parse().ok()?;
    let rest = &line[close + 3..];
    let colon = rest.find(": ")?;
    let head = rest[..colon].trim();
    let severity = if head.contains("error") {
        Severity::Error
    } else if head.starts_with("warning") {
        Severity::Warning
    } else if head.starts_with("remark") {
        Severity::Remark
    } else {
        return None;
    };
    Some((
        file,
        cuda_line,
        severity,
        rest[colon + 2..].trim().to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "#include \"attn_prelude.cuh\"\n\
                       extern \"C\" __global__ void k(float* y) {\n\
                       // L3: x = program_id(0)\n\
                       int x = blockIdx.x;\n\
                       // L7: store(...)\n\
                       y[x] = undefined_thing;\n\
                       }\n";

    #[test]
    fn cuda_lines_map_to_nearest_preceding_dsl_marker() {
        let m = LineMap::new(SRC);
        assert_eq!(m.dsl_line(1), None);
        assert_eq!(m.dsl_line(2), None);
        assert_eq!(m.dsl_line(3), Some(3));
        assert_eq!(m.dsl_line(4), Some(3));
        assert_eq!(m.dsl_line(6), Some(7));
        assert_eq!(m.dsl_line(7), Some(7));
        assert_eq!(m.dsl_line(0), None);
    }

    #[test]
    fn markers_need_digits_and_colon() {
        assert_eq!(marker_line("  // L12: add"), Some(12));
        assert_eq!(marker_line("// Loop over keys"), None);
        assert_eq!(marker_line("// L12 add"), None);
        assert_eq!(marker_line("x = 1; // L12: add"), None);
    }

    #[test]
    fn nvrtc_log_lines_become_diagnostics_with_dsl_lines() {
        let log = "k.cu(6): error: identifier \"undefined_thing\" is undefined\n\
                   \n\
                   attn_prelude.cuh(2): warning #177-D: variable \"q\" was declared but never referenced\n\
                   1 error detected in the compilation of \"k.cu\".\n";
        let d = parse_nvrtc_log(log, "k.cu", &LineMap::new(SRC));
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0].severity, Severity::Error);
        assert_eq!(d[0].cuda_line, 6);
        assert_eq!(d[0].dsl_line, Some(7));
        assert!(d[0]
            .to_string()
            .starts_with("DSL line 7 (k.cu:6): error: identifier"));
        assert_eq!(d[1].severity, Severity::Warning);
        assert_eq!(d[1].file, "attn_prelude.cuh");
        assert_eq!(d[1].dsl_line, None);
    }
}
