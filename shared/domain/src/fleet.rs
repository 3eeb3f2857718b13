//! What a desktop says about itself on each sync, and the state its owner sees (SPEC §4).
//!
//! The relay names its version, platform and host in the [`RELAY_HEADER`] of every sync (a
//! header, not a body field: the sync body refuses unknown fields, and an older server must
//! keep accepting a newer relay). The server keeps it on the device record in the same
//! conditional write that keeps "last seen" (`AuthenticateDevices::record_device_seen`): that
//! write happens when the minute changed *or* the report did, so an idle sync pays nothing new.
//!
//! [`state`] turns the record into what the owner's panel shows: busy (running a run),
//! online (with the doorbell or polling), offline, stale, or revoked (a pause in force shows
//! over these: `Device::state`). "Last seen" is kept to the minute, so a desktop is offline
//! only once it missed its interval by more than that granularity and one more interval.
//!
//! A relay does not sync while it runs a run (its control polls keep the run alive), so
//! "busy" comes from the runs, not the record: a started run names its desktop
//! (`Run::device_id`), and [`busy_with`] finds the runs still reporting. No write is added
//! for it anywhere.

use std::time::Duration;

use crate::clock::Timestamp;
use crate::doorbell::DOORBELL_POLL_INTERVAL;
use crate::limits::Policy;
use crate::runs::{Run, RunStatus};

/// How fresh a device's `last_seen_at` is kept.
pub const DEVICE_SEEN_GRANULARITY: Duration = Duration::from_secs(60);
/// The sync request header carrying a [`RelayReport`].
pub const RELAY_HEADER: &str = "x-foundry-relay";
/// Longest version string (`0.4.0`, `1.2.3-rc.1+build.5`).
pub const MAX_VERSION_CHARS: usize = 32;
/// Longest platform string (`macos-aarch64`, `linux-x86_64`).
pub const MAX_PLATFORM_CHARS: usize = 32;
/// Longest host name (characters).
pub const MAX_HOST_CHARS: usize = 64;

/// A relay's description of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayReport {
    /// The relay's version (`relay --version`).
    pub version: String,
    /// Its build's operating system and architecture, as the release archives name them.
    pub platform: String,
    /// The machine's host name.
    pub host: String,
    /// Whether its doorbell was connected (proven alive) at this sync.
    pub doorbell: bool,
    /// A newer build its server publishes, as the relay's last update check found it (none:
    /// up to date, never checked, or an older relay); a pinned or `auto_update = false` relay
    /// keeps saying it until it is updated.
    pub update: Option<String>,
    /// Its slots (`max_parallel`, 1 to [`crate::progress::MAX_PARALLEL`]); none from a relay
    /// older than slots, which runs one at a time.
    pub slots: Option<u32>,
    /// How many of the sessions it shares it cannot use now (a folder missing, or refused by
    /// macOS's privacy controls; `relay status` and `relay check` on the desktop name them):
    /// they are not offered in its syncs. None from a relay older than that report.
    pub unavailable: Option<u32>,
}

impl RelayReport {
    /// The [`RELAY_HEADER`] value: `version=…; platform=…; host=…`, the host percent-encoded
    /// (any byte outside `A-Za-z0-9.-_`), so a header stays ASCII whatever the machine's name.
    /// The doorbell is not in it: the server knows that from the doorbell header.
    pub fn header_value(&self) -> String {
        let mut host = String::new();
        for b in self.host.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_') {
                host.push(char::from(b));
            } else {
                host.push_str(&format!("%{b:02X}"));
            }
        }
        let update = self.update.as_ref().map(|u| format!("; update={u}")).unwrap_or_default();
        let slots = self.slots.map(|n| format!("; slots={n}")).unwrap_or_default();
        let unavailable = self.unavailable.filter(|n| *n > 0).map(|n| format!("; unavailable={n}")).unwrap_or_default();
        format!("version={}; platform={}; host={host}{update}{slots}{unavailable}", self.version, self.platform)
    }

    /// Reads a [`RELAY_HEADER`] value; `doorbell` is what the doorbell header proved.
    ///
    /// # Errors
    /// A message naming the header, the part and the rule it breaks.
    pub fn parse(value: &str, doorbell: bool) -> Result<Self, String> {
        let (mut version, mut platform, mut host, mut update, mut slots, mut unavailable) =
            (None, None, None, None, None, None);
        for part in value.split(';') {
            let part = part.trim();
            let Some((key, v)) = part.split_once('=') else {
                return Err(format!("{RELAY_HEADER}: `{part}` is not key=value"));
            };
            let slot = match key {
                "version" => &mut version,
                "platform" => &mut platform,
                "host" => &mut host,
                "update" => &mut update,
                "slots" => &mut slots,
                "unavailable" => &mut unavailable,
                // Later relays may say more: an older server ignores it.
                _ => continue,
            };
            if slot.replace(v).is_some() {
                return Err(format!("{RELAY_HEADER}: {key} is given twice"));
            }
        }
        let version = need(version, "version")?;
        let version_ok = |v: &str| {
            !v.is_empty()
                && v.chars().count() <= MAX_VERSION_CHARS
                && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'))
        };
        for (key, v) in [("version", Some(version)), ("update", update)] {
            if let Some(v) = v
                && !version_ok(v)
            {
                return Err(format!("{RELAY_HEADER}: {key} must be 1 to {MAX_VERSION_CHARS} of A-Z a-z 0-9 . - +"));
            }
        }
        let platform = need(platform, "platform")?;
        if platform.is_empty()
            || platform.chars().count() > MAX_PLATFORM_CHARS
            || !platform.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_'))
        {
            return Err(format!("{RELAY_HEADER}: platform must be 1 to {MAX_PLATFORM_CHARS} of a-z 0-9 - _"));
        }
        let host = percent_decode(need(host, "host")?)
            .ok_or_else(|| format!("{RELAY_HEADER}: host must be percent-encoded UTF-8"))?;
        if host.is_empty() || host.chars().count() > MAX_HOST_CHARS || host.chars().any(char::is_control) {
            return Err(format!(
                "{RELAY_HEADER}: host must be 1 to {MAX_HOST_CHARS} characters, none a control character"
            ));
        }
        let slots = match slots {
            None => None,
            Some(n) => Some(
                n.parse::<u32>()
                    .ok()
                    .filter(|n| (1..=crate::progress::MAX_PARALLEL).contains(n))
                    .ok_or_else(|| format!("{RELAY_HEADER}: slots must be 1 to {}", crate::progress::MAX_PARALLEL))?,
            ),
        };
        let unavailable = match unavailable {
            None => None,
            Some(n) => Some(
                n.parse::<u32>()
                    .ok()
                    .filter(|n| (1..=crate::limits::MAX_SHARED_SESSIONS as u32).contains(n))
                    .ok_or_else(|| {
                        format!("{RELAY_HEADER}: unavailable must be 1 to {}", crate::limits::MAX_SHARED_SESSIONS)
                    })?,
            ),
        };
        Ok(Self {
            version: version.to_owned(),
            platform: platform.to_owned(),
            host,
            doorbell,
            update: update.map(str::to_owned),
            slots,
            unavailable,
        })
    }
}

impl RelayReport {
    /// The form a store keeps (one string, so "did it change" is one comparison in a
    /// condition): the header value plus `; doorbell=0|1`.
    pub fn to_record(&self) -> String {
        format!("{}; doorbell={}", self.header_value(), u8::from(self.doorbell))
    }

    /// Reads [`Self::to_record`]'s form back; `None` for anything else (a damaged record
    /// shows as no report rather than failing the owner's listing).
    pub fn from_record(record: &str) -> Option<Self> {
        let (header, doorbell) = record.rsplit_once("; doorbell=")?;
        let doorbell = match doorbell {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        Self::parse(header, doorbell).ok()
    }
}

fn need<'a>(v: Option<&'a str>, key: &str) -> Result<&'a str, String> {
    v.ok_or_else(|| format!("{RELAY_HEADER}: {key} is required"))
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What the owner sees of a desktop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DesktopState {
    /// Synced recently with its doorbell connected: a queued run starts within a second.
    OnlineDoorbell,
    /// Synced recently by polling: a queued run starts within its poll interval.
    OnlinePolling,
    /// Running a run (its control polls keep it alive; it syncs again when the run ends).
    Busy,
    /// Not seen within its interval (or never): runs queued for it wait.
    Offline,
    /// Offline for [`STALE_AFTER`] or longer (or never connected in that long since it was
    /// made): probably gone; the owner may remove it.
    Stale,
    /// The owner paused it: it finishes its run and takes no new one; runs queued for it wait.
    Paused,
    /// Its token was revoked.
    Revoked,
}

impl DesktopState {
    /// The wire name (`online_doorbell`, `online_polling`, `busy`, `offline`, `stale`,
    /// `paused`, `revoked`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnlineDoorbell => "online_doorbell",
            Self::OnlinePolling => "online_polling",
            Self::Busy => "busy",
            Self::Offline => "offline",
            Self::Stale => "stale",
            Self::Paused => "paused",
            Self::Revoked => "revoked",
        }
    }
}

/// How long after its last recorded sync a desktop still counts as online: its interval
/// (relaxed to [`DOORBELL_POLL_INTERVAL`] while the doorbell is up, else `poll_interval`),
/// plus [`DEVICE_SEEN_GRANULARITY`] (the record is kept to the minute), plus one more interval
/// of slack (one lost sync, a slow network).
pub fn online_window(doorbell: bool, poll_interval: Duration) -> Duration {
    let interval = if doorbell { DOORBELL_POLL_INTERVAL } else { poll_interval };
    interval * 2 + DEVICE_SEEN_GRANULARITY
}

/// How long a desktop is offline before the owner's table calls it stale (GitHub removes
/// self-hosted runners after 14 days offline; a laptop on a month's holiday is not gone, so
/// 30 days, and nothing is removed without the owner).
pub const STALE_AFTER: Duration = Duration::from_secs(30 * 24 * 3600);

/// What is known of a desktop when its state is computed ([`state`]).
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// Its token was revoked.
    pub revoked: bool,
    /// When it was made (a desktop that never connected is stale this long after).
    pub created_at: Timestamp,
    /// Its last recorded sync.
    pub last_seen: Option<Timestamp>,
    /// Its doorbell was up at that sync.
    pub doorbell: bool,
    /// It is running a run that still reports (its relay does not sync until the run ends).
    pub busy: bool,
}

/// The state at `now` of a desktop `seen` so, for a deployment whose relays poll every
/// `poll_interval` (`Device::state`): revoked, else busy, else online within
/// [`online_window`], else stale after [`STALE_AFTER`], else offline.
pub fn state(seen: Seen, now: Timestamp, poll_interval: Duration) -> DesktopState {
    if seen.revoked {
        return DesktopState::Revoked;
    }
    if seen.busy {
        return DesktopState::Busy;
    }
    match seen.last_seen {
        Some(at) if now < at.plus(online_window(seen.doorbell, poll_interval)) => {
            if seen.doorbell {
                DesktopState::OnlineDoorbell
            } else {
                DesktopState::OnlinePolling
            }
        }
        last => {
            if now >= last.unwrap_or(seen.created_at).plus(STALE_AFTER) {
                DesktopState::Stale
            } else {
                DesktopState::Offline
            }
        }
    }
}

/// When the desktop watch looks at a queued run's desktops, after it was queued: past a
/// polling relay's window (2 × 20 s + 60 s), and past a doorbell relay's (2 × 300 s + 60 s).
/// SQS delays a message at most 15 minutes, so both fit in one queue.
pub const WATCH_AFTER: [Duration; 2] = [Duration::from_secs(120), Duration::from_secs(720)];

/// The run each desktop is running at `now`, from `runs` (the owner's recent runs): started by
/// it (`Run::device_id`) and still running as a caller sees it (control polls arriving). A
/// desktop with several (a relay with parallel slots) is shown with the oldest.
pub fn busy_with<'a>(
    runs: &'a [Run],
    now: Timestamp,
    policy: &Policy,
) -> std::collections::BTreeMap<uuid::Uuid, &'a Run> {
    let mut out = std::collections::BTreeMap::new();
    for run in runs {
        let Some(device) = run.device_id else { continue };
        if run.view(now, policy).status != RunStatus::Running {
            continue;
        }
        out.entry(device)
            .and_modify(|r: &mut &Run| {
                if run.started_at < r.started_at {
                    *r = run;
                }
            })
            .or_insert(run);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(host: &str) -> RelayReport {
        RelayReport {
            version: "0.4.0".into(),
            platform: "macos-aarch64".into(),
            host: host.into(),
            doorbell: false,
            update: None,
            slots: None,
            unavailable: None,
        }
    }

    #[test]
    fn the_header_round_trips_any_host_name() {
        for host in ["MacBook-Pro.local", "José's iMac; =%", "桌面"] {
            let r = report(host);
            let v = r.header_value();
            assert!(v.is_ascii(), "{v}");
            assert_eq!(RelayReport::parse(&v, false).unwrap(), r);
            let kept = RelayReport { doorbell: true, ..r.clone() };
            assert_eq!(RelayReport::from_record(&kept.to_record()).unwrap(), kept);
            assert_eq!(RelayReport::from_record(&r.to_record()).unwrap(), r);
        }
        assert_eq!(RelayReport::from_record("version=1; platform=p; host=h"), None);
        // A newer build the relay saw published rides along; a bad one is refused by name.
        let behind = RelayReport { update: Some("0.5.0".into()), ..report("h") };
        assert_eq!(RelayReport::parse(&behind.header_value(), false).unwrap(), behind);
        assert_eq!(RelayReport::from_record(&behind.to_record()).unwrap(), behind);
        let bad = RelayReport::parse("version=0.4.0; platform=linux-x86_64; host=h; update=", false).unwrap_err();
        assert!(bad.starts_with("x-foundry-relay: update must be"), "{bad}");
        // So do its slots, and an older relay's report (no slots) still reads.
        let wide = RelayReport { slots: Some(5), ..report("h") };
        assert_eq!(RelayReport::parse(&wide.header_value(), false).unwrap(), wide);
        assert_eq!(RelayReport::from_record(&wide.to_record()).unwrap(), wide);
        for n in ["0", "17", "x", ""] {
            let bad = RelayReport::parse(&format!("version=1; platform=p; host=h; slots={n}"), false).unwrap_err();
            assert_eq!(bad, "x-foundry-relay: slots must be 1 to 16", "slots={n}");
        }
        // Sessions it cannot use now: a count (the desktop names them), absent when none.
        let short = RelayReport { unavailable: Some(2), ..report("h") };
        assert!(short.header_value().ends_with("; unavailable=2"), "{}", short.header_value());
        assert_eq!(RelayReport::parse(&short.header_value(), false).unwrap(), short);
        assert_eq!(RelayReport::from_record(&short.to_record()).unwrap(), short);
        let none = RelayReport { unavailable: Some(0), ..report("h") };
        assert!(!none.header_value().contains("unavailable"), "{}", none.header_value());
        for n in ["0", "101", "-1", ""] {
            let bad =
                RelayReport::parse(&format!("version=1; platform=p; host=h; unavailable={n}"), false).unwrap_err();
            assert_eq!(bad, "x-foundry-relay: unavailable must be 1 to 100", "unavailable={n}");
        }
    }

    #[test]
    fn bad_reports_name_the_part_and_the_rule() {
        let cases = [
            ("platform=linux-x86_64; host=a", "version is required"),
            ("version=1; version=2; platform=p; host=a", "version is given twice"),
            ("version=1 2; platform=p; host=a", "version must be"),
            ("version=1; platform=MacOS; host=a", "platform must be"),
            ("version=1; platform=p; host=%FF", "host must be percent-encoded UTF-8"),
            ("version=1; platform=p; host=%0A", "none a control character"),
            ("version=1; platform=p; host=", "host must be 1 to 64"),
            ("version=1; platform=p; host", "`host` is not key=value"),
        ];
        for (value, want) in cases {
            let err = RelayReport::parse(value, false).unwrap_err();
            assert!(err.starts_with(RELAY_HEADER) && err.contains(want), "{value}: {err}");
        }
        let long = format!("version=1; platform=p; host={}", "h".repeat(MAX_HOST_CHARS + 1));
        assert!(RelayReport::parse(&long, false).is_err());
        assert!(RelayReport::parse("version=1; platform=p; host=h; future=x", false).is_ok());
    }

    #[test]
    fn a_desktop_goes_offline_after_its_window_and_the_doorbell_widens_it() {
        let t0 = Timestamp::from_millis(1_000_000_000);
        let poll = Duration::from_secs(20);
        let never = Seen { revoked: false, created_at: t0, last_seen: None, doorbell: false, busy: false };
        assert_eq!(state(never, t0, poll), DesktopState::Offline, "never seen");
        let seen = Seen { last_seen: Some(t0), ..never };
        let bell = Seen { doorbell: true, ..seen };
        let window = online_window(false, poll);
        assert_eq!(state(seen, t0.plus(window - Duration::from_millis(1)), poll), DesktopState::OnlinePolling);
        assert_eq!(state(seen, t0.plus(window), poll), DesktopState::Offline);
        assert_eq!(state(bell, t0.plus(window), poll), DesktopState::OnlineDoorbell);
        assert_eq!(state(bell, t0.plus(online_window(true, poll)), poll), DesktopState::Offline);
        assert_eq!(state(Seen { revoked: true, ..bell }, t0, poll), DesktopState::Revoked);
        // Busy outlives the sync window (the relay does not sync during a run).
        let running = Seen { busy: true, ..seen };
        assert_eq!(state(running, t0.plus(window * 10), poll), DesktopState::Busy);
        assert_eq!(state(Seen { revoked: true, ..running }, t0, poll), DesktopState::Revoked);
        // Stale: 30 days after the last sync, or after its making when it never synced.
        let month = t0.plus(STALE_AFTER);
        assert_eq!(state(seen, month.minus(Duration::from_millis(1)), poll), DesktopState::Offline);
        assert_eq!(state(seen, month, poll), DesktopState::Stale);
        assert_eq!(state(never, month, poll), DesktopState::Stale);
        assert_eq!(state(Seen { created_at: t0.plus(window), ..never }, month, poll), DesktopState::Offline);
    }
}
