//! GPU architectures as NVRTC names them (`sm_90`, `sm_90a`): the JIT compiles for the
//! device's exact arch so the cubin loads without a driver-side PTX JIT.

use std::fmt;
use std::str::FromStr;

/// A streaming-multiprocessor architecture, e.g. `sm_90` (H100/H200) or `sm_80` (A100).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    /// Compute capability as `10 * major + minor` (90 for sm_90).
    pub number: u32,
    /// Arch-specific features (`sm_90a`: wgmma, setmaxnreg), not forward compatible.
    pub arch_specific: bool,
}

/// A string that is not an `sm_XY[a]` name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid GPU architecture `{0}`: expected `sm_<major><minor>` such as `sm_80`, `sm_90` or `sm_90a`")]
pub struct ArchParseError(pub String);

impl Arch {
    pub const SM_80: Arch = Arch {
        number: 80,
        arch_specific: false,
    };
    pub const SM_90: Arch = Arch {
        number: 90,
        arch_specific: false,
    };

    /// The arch of a device with compute capability `major.minor`.
    pub fn from_compute_capability(major: i32, minor: i32) -> Arch {
        let number = (major.max(0) as u32) * 10 + minor.max(0) as u32;
        Arch {
            number,
            arch_specific: false,
        }
    }

    /// The arch the JIT compiles for on a device of compute capability `major.minor`: its
    /// exact arch, with the arch-specific features where the device has them (`sm_90a` on
    /// 9.0: the warpgroup MMA path of sources that carry one; a cubin of it loads on 9.0
    /// devices only, which is all the JIT targets).
    pub fn native(major: i32, minor: i32) -> Arch {
        let plain = Self::from_compute_capability(major, minor);
        Arch {
            arch_specific: plain.number == 90,
            ..plain
        }
    }

    /// NVRTC option producing a cubin for exactly this arch.
    pub fn cubin_option(self) -> String {
        format!("--gpu-architecture={self}")
    }

    /// NVRTC option producing PTX for this arch's virtual architecture (`compute_90`).
    pub fn ptx_option(self) -> String {
        let suffix = if self.arch_specific { "a" } else { "" };
        format!("--gpu-architecture=compute_{}{suffix}", self.number)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let suffix = if self.arch_specific { "a" } else { "" };
        write!(f, "sm_{}{suffix}", self.number)
    }
}

impl FromStr for Arch {
    type Err = ArchParseError;

    /// Accepts `sm_90`, `sm_90a`, `compute_90` and a bare `90`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ArchParseError(s.to_string());
        let t = s.trim();
        let t = t
            .strip_prefix("sm_")
            .or_else(|| t.strip_prefix("compute_"))
            .unwrap_or(t);
        let (digits, arch_specific) = match t.strip_suffix('a') {
            Some(d) => (d, true),
            None => (t, false),
        };
        if digits.len() < 2 || !digits.chars().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        let number: u32 = digits.parse().map_err(|_| bad())?;
        Ok(Arch {
            number,
            arch_specific,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_arch_names() {
        assert_eq!("sm_90".parse::<Arch>(), Ok(Arch::SM_90));
        assert_eq!("80".parse::<Arch>(), Ok(Arch::SM_80));
        let a: Arch = "sm_90a".parse().expect("sm_90a parses");
        assert!(a.arch_specific);
        assert_eq!(a.to_string(), "sm_90a");
        assert_eq!(a.ptx_option(), "--gpu-architecture=compute_90a");
        assert_eq!(Arch::SM_80.cubin_option(), "--gpu-architecture=sm_80");
        assert!("sm_x0".parse::<Arch>().is_err());
        assert!("sm_9".parse::<Arch>().is_err());
        assert_eq!(Arch::native(9, 0).to_string(), "sm_90a");
        assert_eq!(Arch::native(8, 0), Arch::SM_80);
        assert_eq!(Arch::from_compute_capability(9, 0), Arch::SM_90);
    }
}
