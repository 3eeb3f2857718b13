//! Retry delays after a failed pass: exponential with ±25 % jitter, reset by a success. The
//! jitter comes from the OS, or from a seed (the simulation: same seed, same delays).

use std::time::Duration;

/// First retry delay after a failed pass.
pub const BACKOFF_START: Duration = Duration::from_secs(1);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// Exponential backoff with ±25 % jitter, reset on success.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    /// Jitter from the OS (`None`), or from a seeded generator (the simulation: same seed,
    /// same delays).
    seeded: Option<u64>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: BACKOFF_START, seeded: None }
    }
}

impl Backoff {
    /// Backoff whose jitter comes from `seed` (deterministic).
    pub fn seeded(seed: u64) -> Self {
        Self { next: BACKOFF_START, seeded: Some(seed | 1) }
    }

    fn jitter_bits(&mut self) -> u16 {
        match &mut self.seeded {
            // xorshift64
            Some(x) => {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                (*x >> 16) as u16
            }
            None => {
                let mut b = [0u8; 2];
                if getrandom::fill(&mut b).is_ok() { u16::from_le_bytes(b) } else { 32768 }
            }
        }
    }

    /// The delay before the next try (and doubles the one after, up to [`BACKOFF_MAX`]).
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        let r = self.jitter_bits();
        // factor in [0.75, 1.25)
        base.mul_f64(0.75 + f64::from(r) / 131_072.0)
    }

    /// After a success.
    pub fn reset(&mut self) {
        self.next = BACKOFF_START;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_resets() {
        let mut b = Backoff::default();
        let d1 = b.next_delay();
        let d2 = b.next_delay();
        assert!(d1 >= Duration::from_millis(750) && d1 < Duration::from_millis(1250), "{d1:?}");
        assert!(d2 >= Duration::from_millis(1500) && d2 < Duration::from_millis(2500), "{d2:?}");
        for _ in 0..20 {
            b.next_delay();
        }
        let capped = b.next_delay();
        assert!(capped >= BACKOFF_MAX.mul_f64(0.75) && capped < BACKOFF_MAX.mul_f64(1.25), "{capped:?}");
        b.reset();
        assert!(b.next_delay() < Duration::from_millis(1250));
        // The jitter varies: relays that failed together do not retry together.
        let firsts: std::collections::BTreeSet<Duration> =
            (0..20u64).map(|i| Backoff::seeded(2 * i + 1).next_delay()).collect();
        assert!(firsts.len() >= 10, "20 relays' first delays take only {} values", firsts.len());
    }
}
