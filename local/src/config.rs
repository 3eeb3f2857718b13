//! Configuration of the local server, read from the environment once.
//!
//! Every key and default is a named constant; every bad value is reported together and the
//! process stops before doing any work.

use std::path::PathBuf;

/// Folder for the SQLite file, the token secret and artifact blobs.
pub const DATA_DIR: &str = "FOUNDRY_DATA_DIR";
/// Port on 127.0.0.1 (0 picks a free one).
pub const PORT: &str = "FOUNDRY_PORT";
/// Base URL clients use, if not `http://127.0.0.1:<port>` (e.g. behind a tunnel).
pub const PUBLIC_URL: &str = "FOUNDRY_PUBLIC_URL";
/// Seconds between relay polls the server asks for (default 20).
pub const POLL_INTERVAL_SECONDS: &str = "FOUNDRY_POLL_INTERVAL_SECONDS";
/// Seconds without a control poll before a run reads `desktop stopped reporting` (default 600).
pub const HEARTBEAT_TIMEOUT_SECONDS: &str = "FOUNDRY_HEARTBEAT_TIMEOUT_SECONDS";
/// Pairings one source address may start per hour (default 10).
pub const PAIRINGS_PER_SOURCE_PER_HOUR: &str = "FOUNDRY_PAIRINGS_PER_SOURCE_PER_HOUR";
/// New OAuth clients (dynamic registrations) this machine's own MCP clients — from a loopback
/// address, directly — may make per UTC hour, together (default
/// [`oauth::DEFAULT_REGISTRATIONS_PER_LOOPBACK`]).
pub const LOOPBACK_REGISTRATIONS_PER_HOUR: &str = "FOUNDRY_LOOPBACK_REGISTRATIONS_PER_HOUR";
/// New OAuth clients per UTC hour from one other source: everything that comes through a
/// tunnel or proxy is one source (`oauth::peer_source`; default
/// [`oauth::DEFAULT_REGISTRATIONS_PER_SOURCE`]).
pub const REGISTRATIONS_PER_SOURCE_PER_HOUR: &str = "FOUNDRY_REGISTRATIONS_PER_SOURCE_PER_HOUR";
/// What the registration refusals name as raising each limit.
pub const REGISTRATION_SETTINGS: oauth::LimitSettings = oauth::LimitSettings {
    // Every source but loopback is the one tunnel source here: the hourly limit follows it.
    per_hour: REGISTRATIONS_PER_SOURCE_PER_HOUR,
    per_source: REGISTRATIONS_PER_SOURCE_PER_HOUR,
    per_loopback: LOOPBACK_REGISTRATIONS_PER_HOUR,
};
/// Requests one owner may make a minute on each surface (default 6,000; `domain::budget`).
pub const OWNER_REQUESTS_PER_MINUTE: &str = "FOUNDRY_OWNER_REQUESTS_PER_MINUTE";
/// Seconds between owner-panel refreshes (default 15).
pub const PANEL_REFRESH_SECONDS: &str = "FOUNDRY_PANEL_REFRESH_SECONDS";
/// Default for [`PORT`].
pub const DEFAULT_PORT: u16 = 8787;
/// Folder of relay builds served at `/relay/download/` (default `dist` in the working folder,
/// where `infra/relay-dist.sh` writes them).
pub const RELAY_DIST: &str = "FOUNDRY_RELAY_DIST";
/// Seconds a connection may take to send a request's headers, and may sit idle between
/// requests, before it is closed (default 10).
pub const HEADER_TIMEOUT_SECONDS: &str = "FOUNDRY_HEADER_TIMEOUT_SECONDS";
/// Most connections (doorbell sockets included) open at once; more wait to be accepted
/// (default 256).
pub const MAX_CONNECTIONS: &str = "FOUNDRY_MAX_CONNECTIONS";
/// Development switch: `true` lets OAuth clients' metadata documents (`client_id` URLs) be
/// fetched from a loopback address — without certificate checks for that host — so a developer
/// or a test can host one on this machine. Off by default: loopback, private and other special
/// addresses are never fetched (`oauth::cimd`).
pub const ALLOW_LOOPBACK_CLIENT_METADATA: &str = "FOUNDRY_ALLOW_LOOPBACK_CLIENT_METADATA";
/// Development, with [`ALLOW_LOOPBACK_CLIENT_METADATA`] only: `host=127.0.0.1:port,…`, hosts
/// whose client metadata documents are fetched from that loopback address, so a host's own
/// document is replayed under its own URL (`oauth::cimd::Documents::pinning`).
pub const DEV_DOCUMENT_HOSTS: &str = "FOUNDRY_DEV_DOCUMENT_HOSTS";
/// Default for [`HEADER_TIMEOUT_SECONDS`]: a browser or client sends its headers at once, a
/// connection that sends half a request line is cut off instead of kept for good.
pub const DEFAULT_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Default for [`MAX_CONNECTIONS`]: far above what one owner's panel, chats and desktops
/// open, and below the 1,024 file handles a process gets by default on Linux (256 on macOS
/// counts the database and logs too, which is why it is not higher).
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

pub use settings::ConfigError;
use settings::{PolicyKeys, Reader};

/// The time policy's keys (the lease is not configurable locally).
const POLICY: PolicyKeys = PolicyKeys {
    lease: None,
    heartbeat_timeout: HEARTBEAT_TIMEOUT_SECONDS,
    poll_interval: POLL_INTERVAL_SECONDS,
    pairings_per_source: PAIRINGS_PER_SOURCE_PER_HOUR,
    owner_requests_per_minute: OWNER_REQUESTS_PER_MINUTE,
};

/// The local server's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    /// Where the data lives.
    pub data_dir: PathBuf,
    /// Where to listen.
    pub port: u16,
    /// The base URL announced to clients.
    pub public_url: Option<String>,
    /// Time rules (poll interval and heartbeat timeout are configurable, for tests and demos).
    pub policy: domain::limits::Policy,
    /// OAuth dynamic registrations an hour: from loopback ([`LOOPBACK_REGISTRATIONS_PER_HOUR`])
    /// and from the one tunnel source ([`REGISTRATIONS_PER_SOURCE_PER_HOUR`]).
    pub registrations: oauth::RegistrationLimits,
    /// Seconds between owner-panel refreshes while its tab is visible.
    pub panel_refresh_seconds: u32,
    /// Where the relay builds for `/relay/install.sh` are (`dist/` unless set).
    pub relay_dist: PathBuf,
    /// The safety poll a relay whose doorbell is connected is told to keep (300 s).
    pub doorbell_poll_interval: std::time::Duration,
    /// How long a connection may take over a request's headers (or sit idle between requests).
    pub header_timeout: std::time::Duration,
    /// Most connections open at once.
    pub max_connections: usize,
    /// [`ALLOW_LOOPBACK_CLIENT_METADATA`].
    pub allow_loopback_client_metadata: bool,
    /// [`DEV_DOCUMENT_HOSTS`]: hosts whose client metadata documents are fetched from a
    /// loopback address (only with the loopback switch).
    pub dev_document_hosts: Vec<(String, std::net::SocketAddr)>,
    /// The clock the server reads: the system's, unless a test moves time.
    pub clock: ServerClock,
}

/// The server's clock ([`LocalConfig::clock`]): two are equal when they are the same clock.
#[derive(Clone)]
pub struct ServerClock(pub domain::clock::SharedClock);

impl Default for ServerClock {
    fn default() -> Self {
        Self(std::sync::Arc::new(domain::clock::SystemClock))
    }
}

impl std::fmt::Debug for ServerClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerClock")
    }
}

impl PartialEq for ServerClock {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ServerClock {}

impl LocalConfig {
    /// Defaults with the data in `data_dir` and any free port (tests and embedding).
    pub fn at(data_dir: PathBuf) -> Self {
        Self {
            data_dir,
            port: 0,
            public_url: None,
            policy: domain::limits::Policy::default(),
            registrations: registration_limits(
                oauth::DEFAULT_REGISTRATIONS_PER_LOOPBACK,
                oauth::DEFAULT_REGISTRATIONS_PER_SOURCE,
            ),
            panel_refresh_seconds: panel::DEFAULT_REFRESH_SECONDS,
            relay_dist: PathBuf::from("dist"),
            doorbell_poll_interval: domain::doorbell::DOORBELL_POLL_INTERVAL,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            allow_loopback_client_metadata: false,
            dev_document_hosts: Vec::new(),
            clock: ServerClock::default(),
        }
    }

    /// Reads the settings through `get` (the environment in `main`, a map in tests).
    ///
    /// # Errors
    /// [`ConfigError`] with every bad value.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut r = Reader::new(&get);
        let port = r.port(PORT, DEFAULT_PORT);
        let public_url = r.optional_url(PUBLIC_URL);
        let data_dir = match r.optional(DATA_DIR) {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => default_data_dir(&get).unwrap_or_else(|| {
                r.problem(DATA_DIR, "not set and no home folder to default to");
                PathBuf::new()
            }),
        };
        let policy = r.policy(POLICY);
        let registrations = registration_limits(
            r.count(LOOPBACK_REGISTRATIONS_PER_HOUR, oauth::DEFAULT_REGISTRATIONS_PER_LOOPBACK),
            r.count(REGISTRATIONS_PER_SOURCE_PER_HOUR, oauth::DEFAULT_REGISTRATIONS_PER_SOURCE),
        );
        let panel_refresh_seconds =
            r.seconds_within(PANEL_REFRESH_SECONDS, panel::DEFAULT_REFRESH_SECONDS, panel::PANEL_REFRESH_RANGE);
        let relay_dist =
            r.optional(RELAY_DIST).filter(|d| !d.is_empty()).map_or_else(|| PathBuf::from("dist"), PathBuf::from);
        let header_timeout = r.seconds(HEADER_TIMEOUT_SECONDS, DEFAULT_HEADER_TIMEOUT);
        let max_connections = r.count(MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS);
        let allow_loopback_client_metadata = r.flag(ALLOW_LOOPBACK_CLIENT_METADATA, false);
        let dev_document_hosts = match r.optional(DEV_DOCUMENT_HOSTS) {
            Some(v) if allow_loopback_client_metadata => oauth::cimd::Documents::parse_pins(&v),
            _ => Vec::new(),
        };
        r.finish(Self {
            data_dir,
            port,
            public_url,
            policy,
            registrations,
            panel_refresh_seconds,
            relay_dist,
            doorbell_poll_interval: domain::doorbell::DOORBELL_POLL_INTERVAL,
            header_timeout,
            max_connections,
            allow_loopback_client_metadata,
            dev_document_hosts,
            clock: ServerClock::default(),
        })
    }
}

/// The local registration limits: `per_loopback` from this machine, `per_source` from the one
/// tunnel source, and the hourly limit no lower (every source but loopback is that one here).
pub fn registration_limits(per_loopback: usize, per_source: usize) -> oauth::RegistrationLimits {
    oauth::RegistrationLimits {
        per_hour: per_source.max(oauth::DEFAULT_REGISTRATIONS_PER_HOUR),
        per_source,
        per_loopback: Some(per_loopback),
        cap: oauth::DEFAULT_REGISTRATION_CAP,
    }
}

/// The platform's per-user data folder.
fn default_data_dir(get: &impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if cfg!(target_os = "macos") {
        return get("HOME").map(|h| PathBuf::from(h).join("Library/Application Support/foundry-connect"));
    }
    get("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| get("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .map(|d| d.join("foundry-connect"))
}

/// The `Host` values of this server: the public URL's authority, and loopback with `port`.
pub(crate) fn accepted_hosts(public_url: &str, port: u16) -> Vec<String> {
    let mut hosts = vec![format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")];
    if let Some(authority) = public_url.split_once("://").map(|(_, rest)| rest.split('/').next().unwrap_or(rest)) {
        hosts.push(authority.to_owned());
    }
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Result<LocalConfig, ConfigError> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        LocalConfig::from_env(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_and_overrides() {
        let c = from(&[("HOME", "/home/u"), ("XDG_DATA_HOME", "")]).unwrap();
        assert_eq!(c.port, DEFAULT_PORT);
        if !cfg!(target_os = "macos") {
            assert_eq!(c.data_dir, PathBuf::from("/home/u/.local/share/foundry-connect"));
        }
        let c = from(&[
            (DATA_DIR, "/tmp/x"),
            (PORT, "0"),
            (PUBLIC_URL, "https://x.example/"),
            (POLL_INTERVAL_SECONDS, "1"),
        ])
        .unwrap();
        assert_eq!(c.policy.poll_interval, std::time::Duration::from_secs(1));
        assert_eq!(
            (c.data_dir, c.port, c.public_url.as_deref()),
            (PathBuf::from("/tmp/x"), 0, Some("https://x.example"))
        );
    }

    /// The names the README documents, spelled as the README spells them (not through the
    /// constants the code reads, so a misspelled constant is caught), each read and applied.
    #[test]
    fn every_setting_the_readme_documents_is_read_under_its_documented_name() {
        let readme = include_str!("../../README.md");
        let table = readme.split("Settings (environment;").nth(1).expect("the README's settings table");
        let documented: Vec<&str> = table
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
            .filter(|name| name.starts_with("FOUNDRY_"))
            .collect();
        assert!(documented.len() >= 12, "{documented:?}");
        let asked = std::cell::RefCell::new(std::collections::BTreeSet::new());
        let _ = LocalConfig::from_env(|k| {
            asked.borrow_mut().insert(k.to_owned());
            None
        });
        for name in &documented {
            assert!(asked.borrow().contains(*name), "the README documents {name}, the server never reads it");
        }
        let c = from(&[
            ("HOME", "/home/u"),
            ("XDG_DATA_HOME", "/x"),
            ("FOUNDRY_HEARTBEAT_TIMEOUT_SECONDS", "7"),
            ("FOUNDRY_PAIRINGS_PER_SOURCE_PER_HOUR", "3"),
            ("FOUNDRY_LOOPBACK_REGISTRATIONS_PER_HOUR", "70"),
            ("FOUNDRY_REGISTRATIONS_PER_SOURCE_PER_HOUR", "2"),
            ("FOUNDRY_PANEL_REFRESH_SECONDS", "5"),
            ("FOUNDRY_RELAY_DIST", "/srv/builds"),
        ])
        .unwrap();
        if !cfg!(target_os = "macos") {
            assert_eq!(c.data_dir, PathBuf::from("/x/foundry-connect"), "$XDG_DATA_HOME/foundry-connect");
        }
        assert_eq!(c.policy.heartbeat_timeout, std::time::Duration::from_secs(7));
        assert_eq!(c.policy.pairings_per_source_per_hour, 3);
        assert_eq!((c.registrations.per_loopback, c.registrations.per_source), (Some(70), 2));
        assert_eq!((c.panel_refresh_seconds, c.relay_dist), (5, PathBuf::from("/srv/builds")));
    }

    /// The registration limits' defaults (loopback's own, larger), and a bad value of either
    /// refused naming the variable and the rule: the server does not start (`main` stops at
    /// this error).
    #[test]
    fn the_registration_limits_default_apart_and_bad_values_are_refused_by_name() {
        let c = from(&[(DATA_DIR, "/tmp/x")]).unwrap();
        assert_eq!(c.registrations, LocalConfig::at(PathBuf::from("/tmp/x")).registrations);
        assert_eq!(
            (c.registrations.per_loopback, c.registrations.per_source, c.registrations.per_hour),
            (Some(oauth::DEFAULT_REGISTRATIONS_PER_LOOPBACK), oauth::DEFAULT_REGISTRATIONS_PER_SOURCE, 20)
        );
        const { assert!(oauth::DEFAULT_REGISTRATIONS_PER_LOOPBACK >= 7 * 7, "seven hosts, seven times over") };
        let c = from(&[(DATA_DIR, "/tmp/x"), (REGISTRATIONS_PER_SOURCE_PER_HOUR, "40")]).unwrap();
        assert_eq!(c.registrations.per_hour, 40, "the hourly limit follows the tunnel's");
        for bad in ["0", "-1", "fifty", "", "5.5"] {
            let e = from(&[(DATA_DIR, "/tmp/x"), (LOOPBACK_REGISTRATIONS_PER_HOUR, bad)]).unwrap_err();
            assert_eq!(
                e.problems,
                [format!("FOUNDRY_LOOPBACK_REGISTRATIONS_PER_HOUR: must be a whole number > 0 (got {bad:?})")],
                "{bad:?}"
            );
            let e = from(&[(DATA_DIR, "/tmp/x"), (REGISTRATIONS_PER_SOURCE_PER_HOUR, bad)]).unwrap_err();
            assert_eq!(
                e.problems,
                [format!("FOUNDRY_REGISTRATIONS_PER_SOURCE_PER_HOUR: must be a whole number > 0 (got {bad:?})")],
                "{bad:?}"
            );
        }
    }

    #[test]
    fn reports_every_bad_value_at_once() {
        let e = from(&[(PORT, "eighty"), (PUBLIC_URL, "ftp://x")]).unwrap_err();
        assert_eq!(e.problems.len(), 3, "{e}");
    }

    #[test]
    fn a_public_url_with_a_newline_or_a_space_is_refused() {
        for bad in ["https://x.example\n  Device token:  fcd_forged", "https://x.example/ x", "https://x.example\r\n"] {
            let e = from(&[(DATA_DIR, "/tmp/x"), (PUBLIC_URL, bad)]).unwrap_err();
            assert!(e.problems.iter().any(|p| p.starts_with(PUBLIC_URL)), "{bad:?}: {e}");
        }
        let c = from(&[(DATA_DIR, "/tmp/x"), (HEADER_TIMEOUT_SECONDS, "2"), (MAX_CONNECTIONS, "8")]).unwrap();
        assert_eq!((c.header_timeout, c.max_connections), (std::time::Duration::from_secs(2), 8));
        assert!(from(&[(DATA_DIR, "/tmp/x"), (MAX_CONNECTIONS, "0")]).is_err());
    }
}
