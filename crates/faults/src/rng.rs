//! The seeded randomness of everything that must replay: SplitMix64, one word
//! of state. Written here (a dozen lines) so a seed means the same sequence on
//! every platform and with every version of every dependency. The simulator's
//! networks and workloads and the real path's fault injection draw from it.

/// A seeded SplitMix64 generator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`. Always draws once, whatever `p`, so the n-th
    /// decision depends on the seed alone, not on the probabilities before it.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Uniform in `0..n` (`n` > 0; the tiny modulo bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    /// An independent generator derived from this one (for a sub-system).
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_reasonable_spread() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(Rng::new(8).next_u64(), xs[0]);
        let mut r = Rng::new(1);
        let hits = (0..10_000).filter(|_| r.chance(0.2)).count();
        assert!((1700..2300).contains(&hits), "{hits}");
        assert!((0..1000).all(|_| r.range(3, 5) >= 3 && r.range(3, 5) <= 5));
        assert!(!r.chance(0.0));
        let u = r.unit();
        assert!((0.0..1.0).contains(&u));
    }

    /// (Moved from io's fault tests with the generator.)
    #[test]
    fn rng_is_deterministic_and_uniform() {
        let a: Vec<u64> = (0..8)
            .scan(Rng::new(42), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..8)
            .scan(Rng::new(42), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..8)
            .scan(Rng::new(43), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Mean of 100 000 uniforms: 0.5 ± 5 standard deviations (σ = 1/sqrt(12 n)).
        let mut r = Rng::new(1);
        let n = 100_000;
        let mean = (0..n).map(|_| r.unit()).sum::<f64>() / f64::from(n);
        assert!(
            (mean - 0.5).abs() < 5.0 / (12.0 * f64::from(n)).sqrt(),
            "{mean}"
        );
        let mut buckets = [0u32; 3];
        for _ in 0..30_000 {
            buckets[r.below(3) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&k| (9_000..11_000).contains(&k)),
            "{buckets:?}"
        );
    }
}
