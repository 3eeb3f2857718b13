//! Who this relay is: its version (and how versions compare), its platform and host name as it
//! reports them to the server, and what the last update check learned of newer builds. A leaf:
//! it uses nothing else of the relay, so the server client, the self-update and the config can
//! all read it without reaching into one another.

use std::path::Path;
use std::time::Duration;

/// How often the daily check runs (`auto_update`).
pub const CHECK_EVERY: Duration = Duration::from_secs(24 * 3600);

/// This build's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `x.y.z` with an optional `-pre` (and `+build`, ignored): the numbers and the pre-release.
pub(crate) fn parse_version(v: &str) -> Option<([u64; 3], Option<&str>)> {
    let v = v.split('+').next()?;
    let (core, pre) = match v.split_once('-') {
        Some((c, p)) if !p.is_empty() => (c, Some(p)),
        Some(_) => return None,
        None => (v, None),
    };
    let mut n = [0u64; 3];
    let mut parts = core.split('.');
    for slot in &mut n {
        *slot = parts.next()?.parse().ok()?;
    }
    parts.next().is_none().then_some((n, pre))
}

/// Semantic-version order (a pre-release sorts before its release); unparsable sorts first.
pub fn compare(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (parse_version(a), parse_version(b)) {
        (Some((na, pa)), Some((nb, pb))) => na.cmp(&nb).then_with(|| match (pa, pb) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(x), Some(y)) => x.cmp(y),
        }),
        (Some(_), None) => Ordering::Greater,
        (None, Some(_)) => Ordering::Less,
        (None, None) => Ordering::Equal,
    }
}

/// Checks a `pin` setting: a version as the builds are named.
///
/// # Errors
/// The rule, naming the setting.
pub fn check_pin(pin: &str) -> Result<(), String> {
    match parse_version(pin) {
        Some(_) if pin.len() <= domain::fleet::MAX_VERSION_CHARS => Ok(()),
        _ => Err(format!("pin: must be a version like \"0.4.0\" (got {pin:?})")),
    }
}

/// How the relay names this desktop unless `--name` says otherwise: the host name.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map(|h| h.trim_end_matches(".local").to_owned())
        .filter(|h| !h.trim().is_empty())
        .unwrap_or_else(|| "desktop".into())
}

/// What this relay tells the server of itself on each sync (the owner's Desktops table):
/// its version, `<os>-<arch>` as the release archives name platforms, and the host name (at
/// most [`domain::fleet::MAX_HOST_CHARS`] characters of it).
pub fn this_relay() -> domain::fleet::RelayReport {
    let host: String = host_name().chars().filter(|c| !c.is_control()).take(domain::fleet::MAX_HOST_CHARS).collect();
    domain::fleet::RelayReport {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        platform: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        host: if host.is_empty() { "desktop".into() } else { host },
        doorbell: false,
        update: None,
        slots: None,
        unavailable: None,
    }
}

/// The last daily check, kept in the state folder (`update.json`) so a relay restarted
/// often still checks once a day, and `relay status` can say how it went.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LastCheck {
    /// When (RFC 3339).
    pub at: String,
    /// When (milliseconds since the epoch: what [`LastCheck::due_in`] reads).
    pub at_ms: i64,
    /// What it found, or why it failed.
    pub outcome: String,
    /// The newest build the server published then, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published: Option<String>,
}

/// The file [`LastCheck`] lives in, under the state folder.
pub const LAST_CHECK_FILE: &str = "update.json";

impl LastCheck {
    /// Read from `state_dir` (none when never checked, or unreadable).
    pub fn read(state_dir: &Path) -> Option<Self> {
        serde_json::from_slice(&std::fs::read(state_dir.join(LAST_CHECK_FILE)).ok()?).ok()
    }

    /// Written to `state_dir` (atomically).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write(&self, state_dir: &Path) -> std::io::Result<()> {
        let tmp = state_dir.join(".update.tmp");
        private_files::write(&tmp, &serde_json::to_vec_pretty(self).unwrap_or_default())?;
        std::fs::rename(tmp, state_dir.join(LAST_CHECK_FILE))
    }

    /// How long until the next daily check is due at `now` (zero: now).
    pub fn due_in(last: Option<&Self>, now: domain::clock::Timestamp) -> Duration {
        let Some(last) = last else { return Duration::ZERO };
        let next = domain::clock::Timestamp::from_millis(last.at_ms).plus(CHECK_EVERY);
        if next > now { next.since(now) } else { Duration::ZERO }
    }
}
