//! Time, injected.
//!
//! Every rule that depends on time (leases, 24 h expiry, heartbeat timeouts, idempotency
//! windows) asks a [`Clock`] for "now" instead of the operating system, so tests and the
//! simulator move time forward by hand and never sleep.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A point in time: milliseconds since the Unix epoch, UTC.
///
/// Stored as a plain integer in both stores so that conditions such as `lease_until <= :now`
/// compare numbers, not strings.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    /// A timestamp from milliseconds since the epoch.
    pub const fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// Whole seconds since the epoch (rounded down), as DynamoDB's TTL attribute wants.
    pub const fn as_epoch_seconds(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// This instant plus `d` (saturating).
    pub fn plus(self, d: Duration) -> Self {
        Self(self.0.saturating_add(duration_ms(d)))
    }

    /// This instant minus `d` (saturating).
    pub fn minus(self, d: Duration) -> Self {
        Self(self.0.saturating_sub(duration_ms(d)))
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }

    /// A zero-padded decimal form that sorts like the number (for sort keys).
    pub fn sortable(self) -> String {
        format!("{:015}", self.0.max(0))
    }

    /// RFC 3339 in UTC with millisecond precision, e.g. `2026-11-29T10:18:26.000Z`.
    pub fn rfc3339(self) -> String {
        self.to_string()
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.rem_euclid(1000);
        let secs = self.0.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        write!(f, "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", sod / 3600, (sod / 60) % 60, sod % 60)
    }
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Where "now" comes from.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// A shared clock handle, as the stores and handlers hold it.
pub type SharedClock = Arc<dyn Clock>;

/// The operating system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let ms = SystemTime::now().duration_since(UNIX_EPOCH).map(duration_ms).unwrap_or(0);
        Timestamp(ms)
    }
}

/// A clock that only moves when told to. Shared by cloning the `Arc` around it.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self(AtomicI64::new(start.0))
    }

    /// A clock standing at the current wall-clock time (so stored TTLs look realistic).
    pub fn starting_now() -> Self {
        Self::new(SystemClock.now())
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(duration_ms(d), Ordering::SeqCst);
    }

    /// Sets the clock to `t`.
    pub fn set(&self, t: Timestamp) {
        self.0.store(t.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(Timestamp::from_millis(0).rfc3339(), "1970-01-01T00:00:00.000Z");
        // 2026-11-29T10:18:26.123Z
        assert_eq!(Timestamp::from_millis(1_795_947_506_123).rfc3339(), "2026-11-29T10:18:26.123Z");
        // A leap day.
        assert_eq!(Timestamp::from_millis(1_709_164_800_000).rfc3339(), "2024-02-29T00:00:00.000Z");
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(Timestamp::from_millis(1_000));
        assert_eq!(c.now().as_millis(), 1_000);
        c.advance(Duration::from_secs(2));
        assert_eq!(c.now().as_millis(), 3_000);
        assert_eq!(c.now().since(Timestamp::from_millis(500)), Duration::from_millis(2_500));
        assert_eq!(Timestamp::from_millis(5).since(c.now()), Duration::ZERO);
    }

    #[test]
    fn sortable_sorts_like_numbers() {
        let a = Timestamp::from_millis(999).sortable();
        let b = Timestamp::from_millis(1_000).sortable();
        assert!(a < b);
    }
}
