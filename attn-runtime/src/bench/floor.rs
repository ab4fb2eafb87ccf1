//! Physical floors from `specs/performance.md` §3: `floor = max(bytes / 4.3e12 B/s,
//! useful FLOPs / 790e12 FLOP/s)`; a kernel is reported as % of that floor.

/// HBM bandwidth used for the memory floor (H200, planning figure).
pub const HBM_BYTES_PER_S: f64 = 4.3e12;
/// Dense bf16 wgmma rate used for the compute floor (H200, planning figure).
pub const WGMMA_FLOPS_PER_S: f64 = 790e12;

/// The floor of one problem, in seconds, and which resource sets it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Floor {
    pub memory_s: f64,
    pub compute_s: f64,
}

impl Floor {
    pub fn new(flops: f64, bytes: f64) -> Self {
        Floor {
            memory_s: bytes / HBM_BYTES_PER_S,
            compute_s: flops / WGMMA_FLOPS_PER_S,
        }
    }
    pub fn seconds(&self) -> f64 {
        self.memory_s.max(self.compute_s)
    }
    /// `memory` or `compute`.
    pub fn bound(&self) -> &'static str {
        if self.memory_s >= self.compute_s {
            "memory"
        } else {
            "compute"
        }
    }
    /// How close a measured time is to the floor: 100 % = at the floor.
    pub fn percent_of_floor(&self, measured_s: f64) -> f64 {
        if measured_s > 0.0 {
            100.0 * self.seconds() / measured_s
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_match_the_spec_table() {
        // D1: 1.07 GB of KV, decode → 250 µs memory floor.
        let d1 = Floor::new(1.0e9, 1.0737e9);
        assert_eq!(d1.bound(), "memory");
        assert!((d1.seconds() * 1e6 - 249.7).abs() < 1.0, "{}", d1.seconds());
        // P1: 128.9 GFLOP, 201 MB → 163 µs compute floor.
        let p1 = Floor::new(128.9e9, 201e6);
        assert_eq!(p1.bound(), "compute");
        assert!((p1.seconds() * 1e6 - 163.2).abs() < 0.5, "{}", p1.seconds());
        assert!((p1.percent_of_floor(2.0 * p1.seconds()) - 50.0).abs() < 1e-9);
    }
}
