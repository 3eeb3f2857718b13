//! `relay check`: what would stop the relay under its login service, found from a terminal.
//!
//! A relay in Terminal and the same relay under launchd or systemd differ in everything that
//! usually breaks it: the environment (launchd gives `PATH=/usr/bin:/bin:/usr/sbin:/sbin` and
//! no proxy), the working directory, and on macOS the privacy controls (TCC asks on behalf of
//! `relay` itself, not Terminal). So the checks run with the variables of the installed
//! service file ([`crate::machine::service::service_environment`]) and say, for each finding, the fix:
//!
//! - the config loads; it and the device token are not writable (or, for the token, readable)
//!   by others; the service file is installed and 0644 (launchd refuses a group-writable one);
//! - each session's folder exists and is readable and writable, and on macOS whether it is one
//!   TCC guards (Documents, Desktop, Downloads, iCloud Drive, other volumes);
//! - each session's command is found on the agent's `PATH`;
//! - the proxy the agent would use answers, and the server answers and accepts the token;
//! - the desktop's clock is within a minute of the server's (`Date`);
//! - the doorbell opens.
//!
//! Nothing is written: the server check is a control poll for a command that does not exist
//! (404), and the doorbell URL comes from a sync of exactly the sessions the relay itself
//! syncs.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::config::{Config, file_mode as mode};
use crate::machine::service::{self, Platform};
use crate::server::proxy::Proxies;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Fine.
    Ok,
    /// Works, but worth knowing (and fixing).
    Note,
    /// Stops the relay or a session.
    Fail,
}

/// One thing checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How bad.
    pub level: Level,
    /// What was found.
    pub what: String,
    /// What to do about it.
    pub fix: Option<String>,
}

fn ok(what: impl Into<String>) -> Finding {
    Finding { level: Level::Ok, what: what.into(), fix: None }
}

fn note(what: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding { level: Level::Note, what: what.into(), fix: Some(fix.into()) }
}

fn fail(what: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding { level: Level::Fail, what: what.into(), fix: Some(fix.into()) }
}

/// Largest difference between the desktop's clock and the server's that passes.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(60);

/// Folders macOS privacy controls (TCC) guard, under the home folder: a process that launchd
/// started is asked about on its own behalf ("Operation not permitted", or a prompt nobody
/// sees), however the same folder behaves from Terminal.
pub const PROTECTED_IN_HOME: [&str; 4] = ["Documents", "Desktop", "Downloads", "Library/Mobile Documents"];

/// Whether `dir` is one of the places TCC guards: [`PROTECTED_IN_HOME`], or another volume
/// (`/Volumes/…`: external and network disks).
pub fn tcc_protected(dir: &Path, home: &Path) -> Option<String> {
    if dir.starts_with("/Volumes") {
        return Some("another volume (removable or network)".into());
    }
    PROTECTED_IN_HOME.iter().find(|p| dir.starts_with(home.join(p))).map(|p| match *p {
        "Library/Mobile Documents" => "iCloud Drive".to_owned(),
        other => format!("~/{other}"),
    })
}

/// Where `program` is on `path` (a program with a `/` is taken as it is).
pub fn find_program(program: &str, path: &str, cwd: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let p = if Path::new(program).is_absolute() { PathBuf::from(program) } else { cwd.join(program) };
        return runnable(&p).then_some(p);
    }
    path.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(program)).find(|p| runnable(p))
}

/// Whether `dir` can be listed and written (a file created and removed).
fn usable(dir: &Path) -> Result<(), std::io::Error> {
    std::fs::read_dir(dir)?;
    let probe = dir.join(format!(".relay-check-{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

/// The checks that need no network, with the agent's environment `env` (`None`: no service
/// installed; the relay's own environment stands in).
pub fn local_findings(
    platform: Platform,
    config_path: &Path,
    config: &Config,
    home: &Path,
    env: Option<&[(String, String)]>,
    exe: &Path,
) -> Vec<Finding> {
    let mut out = vec![ok(format!("config {} loads ({} session(s))", config_path.display(), config.sessions.len()))];
    if let Some(m) = mode(config_path) {
        if m & 0o022 != 0 {
            out.push(fail(
                format!("the config is writable by others (mode {m:o}): they could change which commands run"),
                format!("chmod 600 {}", config_path.display()),
            ));
        } else if m & 0o044 != 0 && config.device_token_file.is_none() {
            out.push(fail(
                format!("the config holds the device token and others can read it (mode {m:o})"),
                format!("chmod 600 {}", config_path.display()),
            ));
        }
    }
    if let Some(f) = &config.device_token_file {
        match mode(f) {
            Some(m) if m & 0o077 != 0 => {
                out.push(fail(
                    format!("the device token {} is open to others (mode {m:o})", f.display()),
                    format!("chmod 600 {}", f.display()),
                ));
            }
            Some(_) => out.push(ok(format!("device token {} is 0600", f.display()))),
            None => out.push(fail(
                format!("the device token file {} is missing", f.display()),
                "pair again: relay pair SERVER_URL",
            )),
        }
    }
    let file = service::service_file(platform, home);
    let lookup = |k: &str| -> Option<String> {
        match env {
            Some(pairs) => pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
            None => std::env::var(k).ok(),
        }
    };
    match env {
        Some(_) => {
            out.push(ok(format!("login service {} (its variables are used below)", file.display())));
            if let Some(m) = mode(&file)
                && m & 0o022 != 0
            {
                out.push(fail(
                    format!("the login service file is writable by others (mode {m:o}): launchd refuses it"),
                    format!("chmod 644 {} (or run relay install again)", file.display()),
                ));
            }
        }
        None => out.push(note(
            format!(
                "no login service installed ({} is missing): checking with this shell's environment",
                file.display()
            ),
            "relay install (it starts the relay at every login)",
        )),
    }
    let agent_path = lookup("PATH").unwrap_or_else(|| "/usr/bin:/bin:/usr/sbin:/sbin".into());
    for s in &config.sessions {
        let name = &s.meta.slug;
        let dir = s.launch.working_dir.clone().unwrap_or_else(|| home.to_path_buf());
        match usable(&dir) {
            Ok(()) => out.push(ok(format!("session {name}: folder {} readable and writable", dir.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && platform == Platform::MacOs => out.push(fail(
                format!("session {name}: folder {}: {e}", dir.display()),
                format!(
                    "macOS privacy controls: give {} access in System Settings > Privacy & Security > Full Disk Access (or Files and Folders)",
                    exe.display()
                ),
            )),
            Err(e) => out.push(fail(
                format!("session {name}: folder {}: {e}", dir.display()),
                "make it readable and writable by you, or set the session's working_dir to one that is",
            )),
        }
        if platform == Platform::MacOs
            && let Some(place) = tcc_protected(&dir, home)
        {
            out.push(note(
                format!("session {name}: its folder is in {place}, which macOS guards: under launchd, macOS asks on behalf of relay itself, not Terminal"),
                format!(
                    "grant {} Full Disk Access (System Settings > Privacy & Security > Full Disk Access, +), or move the graph's files out of {place}; an ad-hoc signed build loses the grant at each update (docs/relay.md, \"macOS privacy controls\")",
                    exe.display()
                ),
            ));
        }
        let path = s.launch.env.get("PATH").cloned().unwrap_or_else(|| agent_path.clone());
        match s.launch.command.first() {
            Some(program) => match find_program(program, &path, &dir) {
                Some(found) => out.push(ok(format!("session {name}: command {program} is {}", found.display()))),
                None => out.push(fail(
                    format!("session {name}: command {program} is not found on the agent's PATH ({path})"),
                    format!(
                        "use its full path in the session (`command -v {program}` in your shell prints it), or add its folder to PATH and run relay install again"
                    ),
                )),
            },
            None => out.push(fail(format!("session {name}: no command"), "relay session remove, then add it again with a command")),
        }
    }
    let proxies = Proxies::from_lookup(&lookup);
    for p in &proxies.unsupported {
        out.push(note(format!("proxy setting ignored, connecting directly: {p}"), "use an http:// proxy"));
    }
    if platform == Platform::MacOs {
        out.push(note(
            "macOS 15+: a graph that connects to a host on your local network needs Local Network permission for relay (launchd agents are not exempt, as Terminal is)",
            "allow relay when macOS asks, or in System Settings > Privacy & Security > Local Network",
        ));
    }
    out
}

/// What the agent's Graphs get of the owner's environment, against this terminal's: the names
/// (never values) the terminal has and the agent lacks, and `PATH` entries tied to one version
/// of a tool or one shell ([`crate::machine::environment`]).
pub fn environment_findings(
    terminal: &std::collections::BTreeMap<String, String>,
    agent: &std::collections::BTreeMap<String, String>,
) -> Vec<Finding> {
    use crate::machine::environment::{fragile_path_entries, missing_names};
    let mut out = Vec::new();
    let missing = missing_names(terminal, agent);
    if missing.is_empty() {
        out.push(ok("Graphs get every variable this shell has"));
    } else {
        out.push(note(
            format!("Graphs lack {} variable(s) this shell has: {}", missing.len(), missing.join(", ")),
            "export them in ~/.zprofile or ~/.zshrc (the agent reads your login shell unless shell_environment = false), or set them in the session's env",
        ));
    }
    for (entry, why) in fragile_path_entries(agent.get("PATH").map_or("", String::as_str)) {
        out.push(note(
            format!("the agent's PATH has {entry}: {why}, which breaks when it changes"),
            "put a stable folder first (e.g. the version manager's shims), or rely on the login shell's PATH (shell_environment)",
        ));
    }
    out
}

/// What the running agent itself reported in `status.json` (its own view, which a check from
/// Terminal cannot have: macOS asks on behalf of the agent): each unavailable session.
pub fn agent_findings(status: Option<&crate::machine::status::Status>) -> Vec<Finding> {
    status
        .map(|s| {
            s.unavailable
                .iter()
                .map(|(slug, why)| fail(format!("the running agent reports session {slug} unavailable"), why.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The proxies the agent uses: its service's variables when they name a proxy, else the Mac's
/// system proxy (`system`, from `scutil --proxy`; `crate::server::system_proxy`), with what
/// that means for the owner: the system proxy in use, or a PAC file or discovery the relay
/// cannot follow (it connects directly, which such a network usually refuses).
pub fn proxy_findings(agent: Proxies, system: Option<&crate::server::system_proxy::System>) -> (Proxies, Vec<Finding>) {
    let uses_env = agent.any() || !agent.unsupported.is_empty();
    let proxies = crate::server::system_proxy::effective(agent, system);
    let mut out = Vec::new();
    if let Some(system) = system.filter(|_| !uses_env) {
        if proxies.any() {
            out.push(ok(format!("the system proxy is used (scutil --proxy): {}", proxies.describe())));
        } else if let Some(pac) = system.pac_only() {
            out.push(fail(
                format!("the system proxy is {pac}, which the relay does not run: it connects directly"),
                "ask IT for the proxy the PAC file picks, then in your shell: export HTTPS_PROXY=http://host:port, and run relay install again",
            ));
        }
    }
    (proxies, out)
}

/// The server and doorbell checks, through the proxies of `env`.
pub async fn network_findings(config: &Config, proxies: &Proxies) -> Vec<Finding> {
    let mut out = Vec::new();
    let url = reqwest::Url::parse(&config.server_url).ok();
    let host = url.as_ref().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default();
    let tls = url.as_ref().is_some_and(|u| u.scheme() == "https");
    if let Some(p) = proxies.for_target(tls, &host) {
        match tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect((p.host.as_str(), p.port)))
            .await
        {
            Ok(Ok(_)) => out.push(ok(format!("proxy {}:{} answers", p.host, p.port))),
            Ok(Err(e)) => out.push(fail(
                format!("proxy {}:{}: {e}", p.host, p.port),
                "check the proxy variables (relay install copies them from your shell)",
            )),
            Err(_) => out.push(fail(
                format!("proxy {}:{} does not answer within 5 s", p.host, p.port),
                "check the proxy variables",
            )),
        }
    }
    let http = match crate::server::client::https_client_with(proxies) {
        Ok(h) => h,
        Err(e) => return vec![fail(format!("HTTPS cannot start: {e}"), "report this (the relay's TLS set-up failed)")],
    };
    let nobody = "00000000-0000-4000-8000-000000000000";
    let control = format!("{}{}/commands/{nobody}/control", config.server_url, domain::relay::PREFIX);
    match http.get(&control).bearer_auth(&config.device_token).send().await {
        Err(e) => {
            out.push(fail(
                format!("server {} unreachable: {e}", config.server_url),
                "check the network, the proxy, and server_url",
            ));
            return out;
        }
        Ok(res) => {
            let status = res.status().as_u16();
            match status {
                401 | 403 => out.push(fail(
                    format!(
                        "server {} refuses the device token ({status}): revoked, or for another server",
                        config.server_url
                    ),
                    "pair again: relay pair SERVER_URL",
                )),
                s if s < 500 => out.push(ok(format!("server {} reachable; device token accepted", config.server_url))),
                s => out.push(fail(
                    format!("server {} answers {s}", config.server_url),
                    "try again later; the relay retries on its own",
                )),
            }
            if let Some(skew) = res
                .headers()
                .get(http::header::DATE)
                .and_then(|d| d.to_str().ok())
                .and_then(|d| httpdate::parse_http_date(d).ok())
                .map(|server| clock_skew(SystemTime::now(), server))
            {
                if skew > MAX_CLOCK_SKEW {
                    out.push(fail(
                        format!("this desktop's clock is {} s off the server's", skew.as_secs()),
                        "turn on automatic time (macOS: System Settings > General > Date & Time; Linux: timedatectl set-ntp true)",
                    ));
                } else {
                    out.push(ok(format!("clock within {} s of the server's", skew.as_secs().max(1))));
                }
            }
            if matches!(status, 401 | 403) {
                return out;
            }
        }
    }
    if !config.doorbell {
        out.push(ok("doorbell off in the config (doorbell = false): polling only"));
        return out;
    }
    out.push(doorbell_finding(config, proxies, http).await);
    out
}

/// How far apart two clocks are.
pub fn clock_skew(here: SystemTime, there: SystemTime) -> Duration {
    here.duration_since(there).or_else(|_| there.duration_since(here)).unwrap_or_default()
}

async fn doorbell_finding(config: &Config, proxies: &Proxies, http: reqwest::Client) -> Finding {
    use crate::server::client::{Client, RelayServer, Synced};
    let Some(project) = config.projects().first().copied() else {
        return note("doorbell not checked: no sessions yet", "relay session add …, then relay check");
    };
    let client = Client::with_http(http, &config.server_url, &config.device_token);
    match client.sync(project, &config.sessions_for(project), 0).await {
        Ok(Synced::Commands { doorbell_url: Some(url), .. }) => {
            let url = crate::server::doorbell::websocket_url(&url);
            match crate::server::doorbell::probe(&url, &config.device_token, proxies).await {
                Ok(()) => ok(format!("doorbell {url} opens (queued runs start at once)")),
                Err(e) => note(
                    format!("doorbell {url} does not open: {e}"),
                    "runs still start, at the next poll; a proxy or firewall that blocks WebSockets is the usual cause",
                ),
            }
        }
        Ok(Synced::Commands { doorbell_url: None, .. }) => ok("the server offers no doorbell: polling only"),
        Ok(Synced::Disabled) => note("doorbell not checked: the owner disabled this project", "enable it in the panel"),
        Err(e) => fail(format!("sync failed: {e}"), "see the message; relay status shows the relay's last error"),
    }
}

/// Prints `findings`; the number that failed.
pub fn print(findings: &[Finding]) -> usize {
    for f in findings {
        let tag = match f.level {
            Level::Ok => "ok  ",
            Level::Note => "note",
            Level::Fail => "FAIL",
        };
        println!("{tag}  {}", f.what);
        if let Some(fix) = &f.fix
            && f.level != Level::Ok
        {
            println!("      fix: {fix}");
        }
    }
    findings.iter().filter(|f| f.level == Level::Fail).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folders_macos_guards() {
        let home = Path::new("/Users/ana");
        assert_eq!(tcc_protected(Path::new("/Users/ana/Documents/graphs"), home).as_deref(), Some("~/Documents"));
        assert_eq!(tcc_protected(Path::new("/Users/ana/Desktop"), home).as_deref(), Some("~/Desktop"));
        assert_eq!(
            tcc_protected(Path::new("/Users/ana/Library/Mobile Documents/com~apple~CloudDocs/x"), home).as_deref(),
            Some("iCloud Drive")
        );
        assert!(tcc_protected(Path::new("/Volumes/USB/work"), home).is_some());
        assert_eq!(tcc_protected(Path::new("/Users/ana/graphs"), home), None);
        assert_eq!(tcc_protected(Path::new("/Users/ana/DocumentsOld"), home), None, "a prefix is not the folder");
    }

    /// `relay check` on a Mac whose proxy is only a PAC file (the real `scutil --proxy`
    /// output) fails naming it; one with a system HTTP proxy says it is used; a proxy in the
    /// agent's own variables wins over both.
    #[test]
    fn a_pac_only_system_proxy_fails_the_check_and_a_plain_one_is_used() {
        use crate::server::system_proxy::parse_scutil;
        let pac = parse_scutil(include_str!("../../../tests/fixtures/macos/scutil-proxy-pac.txt"));
        let (used, found) = proxy_findings(Proxies::default(), Some(&pac));
        assert!(!used.any());
        assert!(
            found
                .iter()
                .any(|f| f.level == Level::Fail && f.what.contains("a PAC file (http://wpad.company.com/wpad.dat)")),
            "{found:?}"
        );
        let http = parse_scutil(include_str!("../../../tests/fixtures/macos/scutil-proxy-http.txt"));
        let (used, found) = proxy_findings(Proxies::default(), Some(&http));
        assert_eq!(used.for_target(false, "example.com").map(|p| p.port), Some(8118));
        assert!(found.iter().any(|f| f.level == Level::Ok && f.what.contains("the system proxy is used")), "{found:?}");
        let env = Proxies::from_pairs(&[("HTTPS_PROXY".into(), "http://env.corp:3128".into())]);
        let (used, found) = proxy_findings(env.clone(), Some(&pac));
        assert_eq!(used, env);
        assert!(found.is_empty(), "{found:?}");
        assert!(proxy_findings(Proxies::default(), None).1.is_empty(), "Linux: nothing to say");
    }

    #[test]
    fn programs_are_looked_up_on_the_agents_path() {
        assert!(find_program("sh", "/nonexistent:/bin:/usr/bin", Path::new("/")).is_some());
        assert_eq!(find_program("sh", "/nonexistent", Path::new("/")), None);
        assert_eq!(find_program("/bin/sh", "", Path::new("/")).as_deref(), Some(Path::new("/bin/sh")));
        assert_eq!(find_program("/etc/hostname-nope", "", Path::new("/")), None);
    }

    #[test]
    fn clock_skew_either_way() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(clock_skew(t, t + Duration::from_secs(90)), Duration::from_secs(90));
        assert_eq!(clock_skew(t + Duration::from_secs(90), t), Duration::from_secs(90));
    }

    #[test]
    fn the_agents_missing_names_fragile_path_and_unavailable_sessions_are_findings() {
        let m = |pairs: &[(&str, &str)]| {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<std::collections::BTreeMap<_, _>>()
        };
        let terminal = m(&[("PATH", "/usr/bin"), ("ANTHROPIC_API_KEY", "sk-secret"), ("TERM_PROGRAM", "iTerm.app")]);
        let agent = m(&[("PATH", "/Users/ana/.nvm/versions/node/v20.11.1/bin:/usr/bin")]);
        let f = environment_findings(&terminal, &agent);
        assert!(f[0].level == Level::Note && f[0].what.ends_with("this shell has: ANTHROPIC_API_KEY"), "{f:?}");
        assert!(!format!("{f:?}").contains("sk-secret"), "a value reached the output");
        assert!(f[1].what.contains("one Node version of nvm"), "{f:?}");
        assert_eq!(environment_findings(&terminal, &terminal)[0].level, Level::Ok);
        let status = crate::machine::status::Status {
            unavailable: [(
                "weekly".to_owned(),
                "folder /Volumes/W: No such file or directory (os error 2); plug in".to_owned(),
            )]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let f = agent_findings(Some(&status));
        assert_eq!(f.len(), 1);
        assert!(f[0].level == Level::Fail && f[0].fix.as_deref().is_some_and(|x| x.contains("os error 2")), "{f:?}");
    }
}
