//! The one pseudo-random generator of the workspace's host code, tests and benches: a
//! SplitMix64 stream. Test inputs must be reproducible across runs and machines and cost no
//! dependency; every test draws from this one stream so that a fix to (say) the range of
//! `below` reaches all of them at once.

/// A deterministic pseudo-random stream (SplitMix64) for test inputs: reproducible
/// across runs and machines, no dependency. The field is the state; any seed is valid.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `[0, n)`; 0 when `n` is 0, so that callers drawing an index of a
    /// possibly empty range need no special case (the index is then never used).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Uniform in `[-1, 1)` as f32, never exactly 0: device tests bound their error by
    /// `Σ |a·b|`, and a zero input would let that bound vanish for a whole row.
    pub fn nonzero_unit_f32(&mut self) -> f32 {
        let x = self.uniform(-1.0, 1.0) as f32;
        if x == 0.0 {
            0.5
        } else {
            x
        }
    }

    /// `n` uniform bytes (the high byte of each draw).
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next_u64() >> 56) as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_stream_is_deterministic_and_in_range() {
        let (mut a, mut b) = (SplitMix64(7), SplitMix64(7));
        let xs: Vec<f64> = (0..1000).map(|_| a.uniform(-1.0, 1.0)).collect();
        assert_eq!(
            xs,
            (0..1000).map(|_| b.uniform(-1.0, 1.0)).collect::<Vec<_>>()
        );
        assert!(xs.iter().all(|&x| (-1.0..1.0).contains(&x)));
        assert!(xs.iter().any(|&x| x > 0.5) && xs.iter().any(|&x| x < -0.5));
    }

    #[test]
    fn below_covers_the_range_and_tolerates_zero() {
        let mut r = SplitMix64(3);
        let xs: Vec<usize> = (0..1000).map(|_| r.below(5)).collect();
        assert!(xs.iter().all(|&x| x < 5));
        assert!((0..5).all(|k| xs.contains(&k)));
        assert_eq!(r.below(0), 0);
    }

    #[test]
    fn nonzero_unit_is_in_range_and_not_zero() {
        let mut r = SplitMix64(11);
        let xs: Vec<f32> = (0..1000).map(|_| r.nonzero_unit_f32()).collect();
        assert!(xs.iter().all(|&x| (-1.0..1.0).contains(&x) && x != 0.0));
        assert!(xs.iter().any(|&x| x > 0.5) && xs.iter().any(|&x| x < -0.5));
    }

    #[test]
    fn bytes_use_the_whole_range() {
        let b = SplitMix64(5).bytes(4096);
        assert_eq!(b.len(), 4096);
        assert!(b.iter().any(|&x| x > 200) && b.iter().any(|&x| x < 50));
    }
}
