//! Noticing that the computer slept (the loop then reconnects and syncs at once).

use std::time::Duration;

/// How often the relay checks whether the computer slept.
pub(super) const WAKE_CHECK: Duration = Duration::from_secs(5);
/// Wall time past monotonic time that counts as a sleep (monotonic clocks stop while the
/// computer sleeps on macOS and Linux; the wall clock does not).
const SLEEP_GAP: Duration = Duration::from_secs(10);

/// Notices a sleep: the wall clock moved on further than the monotonic clock since last time.
pub(super) struct WakeCheck {
    mono: std::time::Instant,
    wall: std::time::SystemTime,
}

impl WakeCheck {
    pub(super) fn now() -> Self {
        Self { mono: std::time::Instant::now(), wall: std::time::SystemTime::now() }
    }

    /// Whether the computer slept since the last call.
    pub(super) fn woke(&mut self) -> bool {
        let next = Self::now();
        let slept = slept(next.mono.duration_since(self.mono), next.wall.duration_since(self.wall).ok());
        *self = next;
        slept
    }
}

/// Whether `wall` elapsed (None: the clock went back) exceeds `mono` elapsed by a sleep's worth.
fn slept(mono: Duration, wall: Option<Duration>) -> bool {
    wall.is_some_and(|w| w > mono + SLEEP_GAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_clock_far_ahead_of_the_monotonic_one_is_a_sleep() {
        let s = Duration::from_secs;
        assert!(!slept(s(5), Some(s(5))), "awake");
        assert!(!slept(s(5), Some(s(14))), "a small clock correction");
        assert!(slept(s(5), Some(s(3600))), "an hour asleep");
        assert!(!slept(s(5), None), "the wall clock went back (NTP): not a sleep");
    }
}
