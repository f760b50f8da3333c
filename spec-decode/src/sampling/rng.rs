//! The per-request random stream.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One request's own random stream (ChaCha8), seeded from the request's seed.
///
/// Each request owns its stream and draws from it only for its own samples and acceptance
/// tests, so its output is reproducible whatever other requests share the batch.
#[derive(Clone, Debug)]
pub struct RequestRng {
    inner: ChaCha8Rng,
}

impl RequestRng {
    /// A stream fully determined by `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            inner: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// A stream seeded from the operating system's entropy source (for unseeded requests).
    pub fn from_os_entropy() -> Self {
        Self {
            inner: ChaCha8Rng::from_os_rng(),
        }
    }

    /// The next uniform sample in `[0, 1)`, with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        self.inner.random::<f64>()
    }

    /// The next 64 random bits (for callers that derive further streams).
    pub fn next_u64(&mut self) -> u64 {
        self.inner.random::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_different_seed_different_stream() {
        let draw = |seed| {
            let mut rng = RequestRng::new(seed);
            (0..8).map(|_| rng.uniform()).collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
        assert!(draw(7).iter().all(|u| (0.0..1.0).contains(u)));
    }

    #[test]
    fn clones_continue_identically() {
        let mut a = RequestRng::new(1);
        a.uniform();
        let mut b = a.clone();
        assert_eq!(a.next_u64(), b.next_u64());
    }
}
