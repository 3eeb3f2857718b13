//! The relay's configuration file (TOML), read once at start.
//!
//! ```toml
//! server_url = "https://abc.execute-api.eu-west-1.amazonaws.com"
//! device_token_file = "~/.config/foundry-relay/device-token"   # or: device_token = "fcd_…"
//!
//! [[sessions]]
//! graph_session_id = "gs_0123456789abcdef0123456789abcdef"
//! name = "Weekly report"
//! description = "Drafts the weekly report from the team's notes"
//! slug = "weekly-report"
//! version = "3"
//! projects = ["0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b"]
//! command = ["/usr/local/bin/run-graph", "weekly-report"]
//! ```
//!
//! `max_parallel = 3` lets three commands run at once (default 1, at most 16).
//!
//! Every problem in the file is reported at once, naming the key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::ids::{GraphSessionId, ProjectId};
use domain::runs::{SessionMeta, validate_sessions};
use serde::Deserialize;

/// Default time between control polls while a run is running (SPEC §5: 3 s).
pub const DEFAULT_CONTROL_POLL: Duration = Duration::from_secs(3);
/// Default poll interval until the server says otherwise (SPEC §5: 20 s).
pub const DEFAULT_POLL: Duration = Duration::from_secs(20);
/// Default time between SIGTERM and SIGKILL when a run is cancelled.
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(5);
/// Environment variable overriding the config file's path.
pub const CONFIG_ENV: &str = "FOUNDRY_RELAY_CONFIG";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    server_url: String,
    #[serde(default)]
    device_token: Option<String>,
    #[serde(default)]
    device_token_file: Option<PathBuf>,
    #[serde(default)]
    state_dir: Option<PathBuf>,
    #[serde(default)]
    control_poll_ms: Option<u64>,
    #[serde(default)]
    poll_s: Option<u64>,
    #[serde(default)]
    cancel_grace_ms: Option<u64>,
    #[serde(default = "yes")]
    doorbell: bool,
    #[serde(default)]
    doorbell_ping_ms: Option<u64>,
    #[serde(default)]
    doorbell_pong_deadline_ms: Option<u64>,
    #[serde(default = "yes")]
    auto_update: bool,
    #[serde(default)]
    pin: Option<String>,
    #[serde(default)]
    max_parallel: Option<u32>,
    #[serde(default)]
    shell_environment: Option<bool>,
    #[serde(default)]
    sessions: Vec<RawSession>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSession {
    graph_session_id: String,
    name: String,
    #[serde(default)]
    description: String,
    slug: String,
    #[serde(default)]
    version: String,
    #[serde(default = "ready")]
    status: String,
    #[serde(default)]
    projects: Vec<String>,
    command: Vec<String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    working_dir: Option<PathBuf>,
}

fn yes() -> bool {
    true
}

fn ready() -> String {
    "ready".into()
}

/// One graph session this desktop can run.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// What the server sees.
    pub meta: SessionMeta,
    /// The projects it is shared in.
    pub projects: Vec<ProjectId>,
    /// The program and its arguments (reads the run's arguments, JSON, on stdin; prints the
    /// result on stdout), the variables it adds to the relay's environment, its folder.
    pub launch: Launch,
}

/// The relay's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server's base URL.
    pub server_url: String,
    /// The device token.
    pub device_token: String,
    /// Where it was read from, when it came from a file.
    pub device_token_file: Option<PathBuf>,
    /// Problems that do not stop the relay (a token file others can read).
    pub warnings: Vec<String>,
    /// Where the outbox, the start journal and `status.json` live.
    pub state_dir: PathBuf,
    /// Between control polls during a run.
    pub control_poll: Duration,
    /// Poll interval until the server sends `poll_interval_s`.
    pub poll: Duration,
    /// SIGTERM → SIGKILL grace on cancel.
    pub cancel_grace: Duration,
    /// Whether to keep the doorbell open when the server offers one (`doorbell = false`: poll
    /// only).
    pub doorbell: bool,
    /// How often the doorbell is pinged and how long a ping may go unanswered
    /// (`doorbell_ping_ms`, `doorbell_pong_deadline_ms`; default 240 s and 20 s — shorter only
    /// for tests: API Gateway bills each ping as a message).
    pub doorbell_timing: DoorbellTiming,
    /// Whether the relay checks its server for a newer build once a day and installs it
    /// between runs (`auto_update`, default on; [`crate::machine::update`]).
    pub auto_update: bool,
    /// A version to hold (`pin = "0.4.0"`): updates install only that one.
    pub pin: Option<String>,
    /// How many commands may run at once (`max_parallel`, 1 to 16; default 1: the seed's serial
    /// desktop, one Graph at a time). Each has its own control checks, process group, journal
    /// and outbox entry.
    pub max_parallel: usize,
    /// Whether Graphs get the owner's login shell environment (`shell_environment`; default:
    /// on under the login service, where the agent has almost none of it; off in a terminal,
    /// which already has it). [`crate::machine::environment`].
    pub shell_environment: Option<bool>,
    /// The sessions this desktop runs.
    pub sessions: Vec<Session>,
}

impl Config {
    /// The projects any session is shared in, in first-seen order.
    pub fn projects(&self) -> Vec<ProjectId> {
        let mut out: Vec<ProjectId> = Vec::new();
        for s in &self.sessions {
            for p in &s.projects {
                if !out.contains(p) {
                    out.push(*p);
                }
            }
        }
        out
    }

    /// The session metadata marked for `project` (what a sync sends).
    pub fn sessions_for(&self, project: ProjectId) -> Vec<SessionMeta> {
        self.sessions.iter().filter(|s| s.projects.contains(&project)).map(|s| s.meta.clone()).collect()
    }

    /// The session with this id, if configured.
    pub fn session(&self, id: &GraphSessionId) -> Option<&Session> {
        self.sessions.iter().find(|s| &s.meta.graph_session_id == id)
    }

    /// Reads and checks `path`.
    ///
    /// # Errors
    /// Every problem, one per line, naming the key.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read ({e})", path.display()))?;
        Self::parse(&text, path.parent().unwrap_or(Path::new(".")))
    }

    /// Parses config text; relative paths are relative to `base`.
    ///
    /// # Errors
    /// Every problem, one per line, naming the key.
    pub fn parse(text: &str, base: &Path) -> Result<Self, String> {
        Self::parse_in(text, base, std::env::var_os("HOME").map(PathBuf::from).as_deref())
    }

    /// [`Config::parse`] with `~` meaning `home`.
    ///
    /// # Errors
    /// Every problem, one per line, naming the key.
    pub fn parse_in(text: &str, base: &Path, home: Option<&Path>) -> Result<Self, String> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| format!("config: {e}"))?;
        let mut errors = Vec::new();
        if let Some(problem) = server_url_problem(&raw.server_url) {
            errors.push(format!("server_url: {problem} (got {:?})", raw.server_url));
        }
        let resolve = |p: &Path| resolve_path(p, base, home);
        let device_token = match (&raw.device_token, &raw.device_token_file) {
            (Some(t), None) => t.trim().to_owned(),
            (None, Some(f)) => std::fs::read_to_string(resolve(f)).map(|t| t.trim().to_owned()).unwrap_or_else(|e| {
                errors.push(format!("device_token_file: cannot read {} ({e})", resolve(f).display()));
                String::new()
            }),
            _ => {
                errors.push("device_token / device_token_file: set exactly one".into());
                String::new()
            }
        };
        if !device_token.is_empty() && !device_token.starts_with(domain::devices::TOKEN_PREFIX) {
            errors.push(format!("device_token: must start with {}", domain::devices::TOKEN_PREFIX));
        }
        let mut sessions = Vec::new();
        for (i, s) in raw.sessions.into_iter().enumerate() {
            // Every key of the session is checked, a bad id included: one reading of the file
            // names every problem.
            let id = GraphSessionId::parse("graph_session_id", &s.graph_session_id)
                .map_err(|e| errors.push(format!("sessions[{i}].{e}")))
                .ok();
            let mut projects = Vec::new();
            for p in &s.projects {
                match ProjectId::parse("projects", p) {
                    Ok(p) => projects.push(p),
                    Err(e) => errors.push(format!("sessions[{i}].{e}")),
                }
            }
            if s.command.is_empty() {
                errors.push(format!("sessions[{i}].command: must name a program"));
            }
            let Some(id) = id else { continue };
            let meta = SessionMeta {
                graph_session_id: id,
                name: s.name,
                description: s.description,
                slug: s.slug,
                version: s.version,
                status: s.status,
            };
            // A folder that is missing now (a disk not mounted yet) makes this session
            // unavailable until it is back, never the whole file invalid
            // (crate::machine::folders).
            let working_dir = s.working_dir.map(|d| resolve(&d));
            let launch = Launch { command: s.command, env: s.env, working_dir };
            sessions.push(Session { meta, projects, launch });
        }
        let metas: Vec<SessionMeta> = sessions.iter().map(|s| s.meta.clone()).collect();
        if let Err(e) = validate_sessions(&metas) {
            errors.push(e.to_string());
        }
        let state_dir = match raw.state_dir {
            Some(d) => resolve(&d),
            None => default_state_dir().unwrap_or_else(|| base.join("relay-state")),
        };
        let ms = |v: Option<u64>, d: Duration| v.map(Duration::from_millis).unwrap_or(d);
        let device_token_file = raw.device_token_file.as_deref().map(resolve);
        let mut warnings = Vec::new();
        if let Some(f) = &device_token_file
            && let Some(mode) = file_mode(f)
            && mode & 0o077 != 0
        {
            warnings.push(format!(
                "device_token_file: {} is readable by other users (mode {mode:o}); run: chmod 600 {}",
                f.display(),
                f.display()
            ));
        }
        let config = Config {
            server_url: raw.server_url.trim_end_matches('/').to_owned(),
            device_token,
            device_token_file,
            warnings,
            state_dir,
            control_poll: ms(raw.control_poll_ms, DEFAULT_CONTROL_POLL),
            poll: raw.poll_s.map(Duration::from_secs).unwrap_or(DEFAULT_POLL),
            cancel_grace: ms(raw.cancel_grace_ms, DEFAULT_CANCEL_GRACE),
            doorbell: raw.doorbell,
            doorbell_timing: DoorbellTiming {
                ping: ms(raw.doorbell_ping_ms, domain::doorbell::PING_EVERY),
                pong_deadline: ms(raw.doorbell_pong_deadline_ms, domain::doorbell::PONG_DEADLINE),
            },
            auto_update: raw.auto_update,
            pin: raw.pin.clone(),
            max_parallel: raw.max_parallel.unwrap_or(1) as usize,
            shell_environment: raw.shell_environment,
            sessions,
        };
        if let Some(n) = raw.max_parallel
            && !(1..=domain::progress::MAX_PARALLEL).contains(&n)
        {
            errors.push(format!("max_parallel: must be 1 to {} (got {n})", domain::progress::MAX_PARALLEL));
        }
        if let Some(pin) = &raw.pin
            && let Err(e) = crate::identity::check_pin(pin)
        {
            errors.push(e);
        }
        if config.control_poll.is_zero() || config.poll.is_zero() {
            errors.push("control_poll_ms / poll_s: must be > 0".into());
        }
        if config.doorbell_timing.ping.is_zero() || config.doorbell_timing.pong_deadline.is_zero() {
            errors.push("doorbell_ping_ms / doorbell_pong_deadline_ms: must be > 0".into());
        }
        if errors.is_empty() { Ok(config) } else { Err(errors.join("\n")) }
    }
}

/// The permission bits of `path`, if it exists.
pub(crate) fn file_mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).ok().map(|m| m.permissions().mode() & 0o777)
}

/// A path from the config: `~/…` is the home folder; other relative paths are relative to the
/// config's folder (`base`).
pub(crate) fn resolve_path(p: &Path, base: &Path, home: Option<&Path>) -> PathBuf {
    match (p.strip_prefix("~"), home) {
        (Ok(rest), Some(h)) => h.join(rest),
        _ if p.is_absolute() => p.to_path_buf(),
        _ => base.join(p),
    }
}

/// The platform's per-user config file: `~/Library/Application Support/foundry-relay/relay.toml`
/// on macOS, `$XDG_CONFIG_HOME/foundry-relay/relay.toml` (or `~/.config/…`) elsewhere.
pub fn default_config_path() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from)?;
    let dir = if cfg!(target_os = "macos") {
        home.join("Library/Application Support")
    } else {
        std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from).unwrap_or_else(|| home.join(".config"))
    };
    Some(dir.join("foundry-relay/relay.toml"))
}

/// The platform's per-user state folder (`~/Library/Application Support/foundry-relay/state` on
/// macOS, `$XDG_STATE_HOME/foundry-relay` or `~/.local/state/foundry-relay` elsewhere).
pub fn default_state_dir() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from)?;
    Some(if cfg!(target_os = "macos") {
        home.join("Library/Application Support/foundry-relay/state")
    } else {
        std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".local/state"))
            .join("foundry-relay")
    })
}

/// Why `url` cannot be the server: the device token goes with every request, so it must be
/// `https://`, or plain `http://` to this machine only (the local server).
pub(crate) fn server_url_problem(url: &str) -> Option<&'static str> {
    if let Some(rest) = url.strip_prefix("https://") {
        return rest.is_empty().then_some("has no host");
    }
    let Some(rest) = url.strip_prefix("http://") else { return Some("must be an https:// URL") };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let loopback =
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    (!loopback).then_some(
        "plain http:// is allowed only to this machine (127.0.0.1, ::1, localhost): the device token would cross the network unencrypted; use https://",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_token_never_goes_over_plain_http_to_another_machine() {
        for ok in [
            "https://abc.execute-api.eu-west-1.amazonaws.com",
            "http://127.0.0.1:8787",
            "http://127.0.0.2",
            "http://localhost:8787/",
            "http://[::1]:8787",
        ] {
            assert_eq!(server_url_problem(ok), None, "{ok}");
        }
        for refused in [
            "http://10.0.0.5:8787",
            "http://example.com",
            "http://127.0.0.1.example.com",
            "http://localhost.example.com:8787",
            "http://[2001:db8::1]:8787",
            "ftp://127.0.0.1",
            "https://",
        ] {
            assert!(server_url_problem(refused).is_some(), "{refused} was accepted");
        }
        let text = "server_url = \"http://192.168.1.20:8787\"\ndevice_token = \"fcd_abc\"\n";
        let e = Config::parse(text, Path::new("/tmp")).unwrap_err();
        assert!(e.contains("server_url: plain http:// is allowed only to this machine"), "{e}");
    }

    #[test]
    fn reports_every_problem_with_its_key() {
        let text = r#"
server_url = "ftp://x"
device_token = "nope"
[[sessions]]
graph_session_id = "gs_123"
name = "a"
slug = "a"
command = []
[[sessions]]
graph_session_id = "gs_0123456789abcdef0123456789abcdef"
name = "b"
slug = "b"
projects = ["not-a-uuid"]
command = []
"#;
        let e = Config::parse(text, Path::new("/tmp")).unwrap_err();
        for needle in [
            "server_url",
            "device_token: must start",
            "sessions[0].graph_session_id",
            "sessions[0].command",
            "sessions[1].projects",
            "sessions[1].command",
        ] {
            assert!(e.contains(needle), "{needle} missing from:\n{e}");
        }
    }

    #[test]
    fn parses_a_good_file() {
        let text = r#"
server_url = "http://127.0.0.1:8787/"
device_token = "fcd_abc"
state_dir = "state"
control_poll_ms = 200
[[sessions]]
graph_session_id = "gs_0123456789abcdef0123456789abcdef"
name = "Weekly"
slug = "weekly"
projects = ["0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b"]
command = ["sh", "-c", "cat"]
"#;
        let c = Config::parse(text, Path::new("/base")).unwrap();
        assert_eq!(c.server_url, "http://127.0.0.1:8787");
        assert_eq!(c.state_dir, PathBuf::from("/base/state"));
        assert_eq!(c.control_poll, Duration::from_millis(200));
        assert_eq!(c.projects().len(), 1);
        assert_eq!(c.sessions_for(c.projects()[0]).len(), 1);
    }

    /// A cancelled Graph's group gets `cancel_grace_ms` between SIGTERM and SIGKILL: 5 s
    /// unless the file says otherwise.
    #[test]
    fn the_cancel_grace_is_five_seconds_unless_set() {
        let text = "server_url = \"http://127.0.0.1:8787\"\ndevice_token = \"fcd_abc\"\n";
        let c = Config::parse(text, Path::new("/base")).unwrap();
        assert_eq!(c.cancel_grace, Duration::from_secs(5));
        let c = Config::parse(&format!("{text}cancel_grace_ms = 1500\n"), Path::new("/base")).unwrap();
        assert_eq!(c.cancel_grace, Duration::from_millis(1500));
    }

    /// `~/` in paths is the home folder; a token file other users can read is a warning; a
    /// session's `env` and `working_dir` reach its launch.
    #[test]
    fn home_paths_token_file_modes_and_session_environments() {
        use std::os::unix::fs::PermissionsExt;
        let home = std::env::temp_dir().join(format!("relay-home-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(home.join(".config")).unwrap();
        let token = home.join(".config/device-token");
        std::fs::write(&token, "fcd_abc\n").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
        let text = format!(
            r#"
server_url = "http://127.0.0.1:8787"
device_token_file = "~/.config/device-token"
state_dir = "state"
[[sessions]]
graph_session_id = "gs_0123456789abcdef0123456789abcdef"
name = "Weekly"
slug = "weekly"
projects = ["0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b"]
command = ["node", "weekly.js"]
working_dir = "{}"
env = {{ NODE_ENV = "production" }}
"#,
            home.display()
        );
        let c = Config::parse_in(&text, Path::new("/base"), Some(&home)).unwrap();
        assert_eq!(c.device_token, "fcd_abc");
        assert_eq!(c.device_token_file.as_deref(), Some(token.as_path()));
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("readable by other users") && c.warnings[0].contains("chmod 600"));
        let s = &c.sessions[0].launch;
        assert_eq!(s.command, ["node", "weekly.js"]);
        assert_eq!(s.env.get("NODE_ENV").map(String::as_str), Some("production"));
        assert_eq!(s.working_dir.as_deref(), Some(home.as_path()));
        // A folder missing at start leaves the file valid: that session is unavailable
        // (crate::machine::folders), the others run.
        let bad = text.replace(&home.display().to_string(), "/no/such/folder");
        let c = Config::parse_in(&bad, Path::new("/base"), Some(&home)).unwrap();
        assert_eq!(c.sessions[0].launch.working_dir.as_deref(), Some(Path::new("/no/such/folder")));
        let _ = std::fs::remove_dir_all(home);
    }
}

/// How often the socket is pinged and how long each ping may go unanswered (the config's
/// `doorbell_ping_ms` / `doorbell_pong_deadline_ms` shorten them in tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoorbellTiming {
    /// Between pings.
    pub ping: Duration,
    /// How long a ping may go unanswered.
    pub pong_deadline: Duration,
}

impl Default for DoorbellTiming {
    fn default() -> Self {
        Self { ping: domain::doorbell::PING_EVERY, pong_deadline: domain::doorbell::PONG_DEADLINE }
    }
}

/// What a session runs: the program and its arguments, the environment it adds, and where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launch {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Variables set for the graph on top of the relay's own environment (a session's `env`).
    pub env: std::collections::BTreeMap<String, String>,
    /// The graph's working directory; the relay's own when `None`.
    pub working_dir: Option<std::path::PathBuf>,
}

impl From<Vec<String>> for Launch {
    fn from(command: Vec<String>) -> Self {
        Self { command, ..Self::default() }
    }
}
