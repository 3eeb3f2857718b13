//! Noticing that the computer slept: the loop then reconnects and syncs at once, and a run
//! the server gave up on while the computer slept is reported as such
//! ([`domain::errors::MAC_SLEPT`]).

use std::time::Duration;

/// How often the relay checks whether the computer slept.
pub(super) const WAKE_CHECK: Duration = Duration::from_secs(5);
/// The system proxy is read again every this many wake checks (a minute) besides after a
/// wake or a network change (`crate::server::system_proxy`).
pub(super) const PROXY_EVERY_TICKS: u32 = 12;
/// Wall time past monotonic time that counts as a sleep (monotonic clocks stop while the
/// computer sleeps on macOS and Linux; the wall clock does not).
const SLEEP_GAP: Duration = Duration::from_secs(10);

/// The two clocks a sleep shows between. Tests move the wall clock ahead to stage a sleep.
#[derive(Debug, Default)]
pub(crate) struct Clocks {
    /// Seconds added to the wall clock's reading (tests only).
    #[cfg(test)]
    pub(crate) wall_ahead: std::sync::atomic::AtomicU64,
}

impl Clocks {
    /// Both clocks now.
    pub(super) fn mark(&self) -> Mark {
        #[cfg(test)]
        let ahead = Duration::from_secs(self.wall_ahead.load(std::sync::atomic::Ordering::SeqCst));
        #[cfg(not(test))]
        let ahead = Duration::ZERO;
        Mark { mono: std::time::Instant::now(), wall: std::time::SystemTime::now() + ahead }
    }
}

/// Both clocks at one moment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    mono: std::time::Instant,
    wall: std::time::SystemTime,
}

impl Mark {
    /// How long the computer slept between this mark and `later`, if it did.
    pub(super) fn slept_until(&self, later: &Mark) -> Option<Duration> {
        slept(later.mono.duration_since(self.mono), later.wall.duration_since(self.wall).ok())
    }
}

/// Notices a sleep: the wall clock moved on further than the monotonic clock since last time.
pub(super) struct WakeCheck {
    last: Mark,
}

impl WakeCheck {
    pub(super) fn now(clocks: &Clocks) -> Self {
        Self { last: clocks.mark() }
    }

    /// Whether the computer slept since the last call.
    pub(super) fn woke(&mut self, clocks: &Clocks) -> bool {
        let next = clocks.mark();
        let slept = self.last.slept_until(&next).is_some();
        self.last = next;
        slept
    }
}

/// How long the computer slept, when `wall` elapsed (None: the clock went back) exceeds `mono`
/// elapsed by a sleep's worth.
fn slept(mono: Duration, wall: Option<Duration>) -> Option<Duration> {
    wall.filter(|w| *w > mono + SLEEP_GAP).map(|w| w - mono)
}

/// The error of a run the server stopped waiting for while the computer slept `asleep`: what
/// happened, and what keeps a Mac awake with its lid closed (Apple: closed-display mode needs
/// power and an external display, keyboard or mouse; `caffeinate -i` only stops idle sleep).
pub(super) fn slept_reason(asleep: Duration, platform: crate::machine::service::Platform) -> String {
    let minutes = asleep.as_secs().div_ceil(60);
    let what = domain::errors::MAC_SLEPT;
    match platform {
        crate::machine::service::Platform::MacOs => format!(
            "{what} (asleep about {minutes} min, past the server's wait for a report): a Mac sleeps when its lid is \
             closed unless it is on power with an external display, keyboard or mouse (closed-display mode); keep \
             it open, or see the relay guide, \"A run whose Mac slept\""
        ),
        crate::machine::service::Platform::Linux => format!(
            "this computer slept during the run (asleep about {minutes} min, past the server's wait for a report); \
             keep it awake while Graphs run"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_clock_far_ahead_of_the_monotonic_one_is_a_sleep() {
        let s = Duration::from_secs;
        assert_eq!(slept(s(5), Some(s(5))), None, "awake");
        assert_eq!(slept(s(5), Some(s(14))), None, "a small clock correction");
        assert_eq!(slept(s(5), Some(s(3600))), Some(s(3595)), "an hour asleep");
        assert_eq!(slept(s(5), None), None, "the wall clock went back (NTP): not a sleep");
    }

    #[test]
    fn the_reason_starts_with_the_documented_words_and_says_how_long() {
        let mac = slept_reason(Duration::from_secs(25 * 60 + 1), crate::machine::service::Platform::MacOs);
        assert!(mac.starts_with("the Mac slept during the run (asleep about 26 min"), "{mac}");
        assert!(mac.contains("closed-display mode"), "{mac}");
        assert!(mac.chars().count() <= domain::limits::MAX_ERROR_CHARS, "{mac}");
    }
}
