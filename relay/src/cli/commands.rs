//! The subcommands other than `run`: `status`, `check`, `install`, `uninstall`. Each prints
//! what it did for the owner and returns an error the binary prints.

use std::path::{Path, PathBuf};

use super::{CliError, load, parse_duration};
use crate::config::Config;
use crate::machine::service::{self, Platform};
use crate::machine::status::Status;

/// `relay pause [--for DURATION] [--note TEXT]`: asks the server to pause this desktop (the
/// same pause as the panel's; the server checks the bounds).
///
/// # Errors
/// The config, the duration, or the server's refusal.
pub async fn pause(config_path: &Path, duration: Option<&str>, note: Option<String>) -> Result<(), CliError> {
    let config = load(config_path)?;
    let for_seconds = duration.map(parse_duration).transpose()?;
    let req = domain::relay::PauseRequest { for_seconds, note };
    let client = crate::server::client::Client::new(&config.server_url, &config.device_token)
        .map_err(|e| CliError(format!("cannot start TLS: {e}")))?;
    let paused = client.set_pause(Some(&req)).await.map_err(server_error)?;
    match paused.and_then(|p| p.until) {
        Some(until) => println!("paused until {until}: the run in progress finishes, no new one starts"),
        None => println!("paused until `relay resume`: the run in progress finishes, no new one starts"),
    }
    Ok(())
}

/// `relay resume`: ends this desktop's pause.
///
/// # Errors
/// The config or the server's refusal.
pub async fn resume(config_path: &Path) -> Result<(), CliError> {
    let config = load(config_path)?;
    let client = crate::server::client::Client::new(&config.server_url, &config.device_token)
        .map_err(|e| CliError(format!("cannot start TLS: {e}")))?;
    client.set_pause(None).await.map_err(server_error)?;
    println!("resumed: queued runs start at the next sync");
    Ok(())
}

/// `relay update`: installs the server's newest build for this machine over the running
/// binary (a running `relay run` restarts into it once its current run, if any, ends).
///
/// # Errors
/// Why nothing was installed (the binary is unchanged).
pub async fn update(config_path: &Path) -> Result<(), CliError> {
    let config = load(config_path)?;
    let binary =
        crate::machine::update::Binary::current().map_err(|e| CliError(format!("cannot find this binary: {e}")))?;
    // `relay update` is the owner asking: it installs, after saying what it costs on a Mac.
    let platform = Platform::current();
    if let Some(why) =
        crate::machine::update::grants_at_risk(platform, || crate::machine::update::codesign(binary.path()))
    {
        println!("note: if a newer build is installed, {why}");
    }
    let outcome =
        crate::machine::update::check_now(&config, binary.path(), None).await.map_err(|e| CliError(e.to_string()))?;
    println!("{outcome}");
    // The service file a newer build writes may differ (a key added, a limit raised): the
    // installed build rewrites it from what the file records, when it changed. Also when
    // this build was installed earlier by the daily check, which never touches the file.
    let as_root = nix::unistd::geteuid().is_root() && std::env::var_os(ALLOW_ROOT_ENV).is_none();
    if as_root {
        println!(
            "not refreshing the login service as root (run relay update as the user whose desktop runs the graphs)"
        );
    } else if service::service_file(platform, &home()?).exists() {
        let status = std::process::Command::new(binary.path())
            .arg("--config")
            .arg(config_path)
            .args(["install", "--refresh"])
            .status()
            .map_err(|e| CliError(format!("running {} install --refresh: {e}", binary.path().display())))?;
        if !status.success() {
            return Err(CliError(format!(
                "refreshing the login service failed ({status}); `relay install` rewrites it"
            )));
        }
    }
    Ok(())
}

/// The server's refusal as the owner reads it: its `error` field when it has one.
fn server_error(e: crate::server::client::ClientError) -> CliError {
    match e {
        crate::server::client::ClientError::Refused { body, .. } => {
            let msg = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned))
                .unwrap_or(body);
            CliError(format!("the server refused: {msg}"))
        }
        other => CliError(other.to_string()),
    }
}

/// `relay status`: the config, and what the running relay last wrote to `status.json`.
///
/// # Errors
/// When the config does not load.
pub fn status(config_path: &Path) -> Result<(), CliError> {
    let config = load(config_path)?;
    println!("config:   {}", config_path.display());
    if let Ok(home) = home() {
        println!("logs:     {}", service::log_dir(Platform::current(), &home).join("relay.log").display());
    }
    println!("server:   {}", config.server_url);
    println!("sessions: {}", config.sessions.iter().map(|s| s.meta.slug.as_str()).collect::<Vec<_>>().join(", "));
    let updates = match (&config.pin, config.auto_update) {
        (Some(pin), _) => format!("pinned to {pin}"),
        (None, true) => "checked daily, installed between runs".to_owned(),
        (None, false) => "off (auto_update = false): run `relay update`".to_owned(),
    };
    println!(
        "version:  {} ({}), host {}",
        crate::machine::update::VERSION,
        crate::machine::update::target(),
        crate::identity::this_relay().host
    );
    println!("updates:  {updates}");
    if let Some(last) = crate::machine::update::LastCheck::read(&config.state_dir) {
        println!("last update check: {}: {}", last.at, last.outcome);
        if let Some(p) =
            last.published.filter(|p| crate::machine::update::compare(p, crate::machine::update::VERSION).is_gt())
        {
            println!("newer build: {p} is published (relay update installs it)");
        }
    }
    let Some(s) = std::fs::read(config.state_dir.join("status.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Status>(&b).ok())
    else {
        println!("status:   the relay has not run yet");
        return Ok(());
    };
    println!("last sync: {}", s.last_sync_at.as_deref().unwrap_or("never"));
    println!("outbox:    {} completion(s) waiting", s.outbox);
    let running = if s.running.is_empty() { "nothing".to_owned() } else { s.running.join(", ") };
    println!("running:   {running} ({} of {} slots busy)", s.running.len(), s.slots.max(1));
    println!("doorbell:  {}", if s.doorbell.is_empty() { "off" } else { s.doorbell.as_str() });
    println!("poll:      every {} s", s.poll_interval_s);
    if let Some(p) = &s.paused {
        println!("paused:    by the owner, {p}: the run in progress finishes, no new one starts");
    }
    if let Some(e) = s.last_error {
        println!("last error: {e}");
    }
    if s.unsaved > 0 {
        println!(
            "unsaved:   {} completion(s) the outbox could not hold (a full disk?), delivered from memory",
            s.unsaved
        );
    }
    for name in &s.quarantined {
        println!(
            "quarantined: {} (unreadable; look at it, then delete it)",
            config.state_dir.join("quarantine").join(name).display()
        );
    }
    for (project, p) in &s.projects {
        println!(
            "project {project}: {} at {}; sessions: {}; queued seen: {}",
            p.outcome,
            p.last_sync_at.as_deref().unwrap_or("never"),
            if p.sessions.is_empty() { "none".to_owned() } else { p.sessions.join(", ") },
            p.queued
        );
    }
    Ok(())
}

/// `relay check`: every finding of [`crate::machine::check`], under the login service's environment.
///
/// # Errors
/// When the config does not load, or any check failed (each printed with its fix).
pub async fn check(config_path: &Path) -> Result<(), CliError> {
    let failed = crate::machine::check::print(&findings(config_path).await?);
    if failed > 0 {
        return Err(CliError(format!("{failed} problem(s) found (each with its fix above)")));
    }
    println!("all checks passed");
    Ok(())
}

async fn findings(config_path: &Path) -> Result<Vec<crate::machine::check::Finding>, CliError> {
    let config = load(config_path)?;
    let home = home()?;
    let platform = Platform::current();
    let env = std::fs::read_to_string(service::service_file(platform, &home))
        .ok()
        .map(|text| service::service_environment(platform, &text));
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("relay"));
    let mut out = crate::machine::check::local_findings(platform, config_path, &config, &home, env.as_deref(), &exe);
    // The agent's environment: the service file's variables, and (unless switched off) what
    // the login shell exports, read the way the agent reads it.
    let mut agent: std::collections::BTreeMap<String, String> = env.clone().unwrap_or_default().into_iter().collect();
    if env.is_some() && config.shell_environment != Some(false) {
        use crate::machine::environment;
        match environment::login_shell(&environment::shell(), &exe, &home) {
            Ok(vars) => {
                for (k, v) in vars {
                    agent.entry(k).or_insert(v);
                }
            }
            Err(e) => out.push(crate::machine::check::Finding {
                level: crate::machine::check::Level::Note,
                what: format!("the login shell's environment cannot be read: {e}"),
                fix: Some("fix the shell's startup files, or set shell_environment = false".into()),
            }),
        }
    }
    if env.is_some() {
        let terminal: std::collections::BTreeMap<String, String> = std::env::vars().collect();
        out.extend(crate::machine::check::environment_findings(&terminal, &agent));
    }
    if platform == Platform::MacOs && env.is_some() {
        let log = service::log_dir(platform, &home).join("relay.log");
        out.extend(crate::machine::launchd::ask(&uid(), &log.display().to_string()));
    }
    let status: Option<crate::machine::status::Status> =
        std::fs::read(config.state_dir.join("status.json")).ok().and_then(|b| serde_json::from_slice(&b).ok());
    out.extend(crate::machine::check::agent_findings(status.as_ref()));
    let agent_proxies = match &env {
        Some(pairs) => crate::server::proxy::Proxies::from_pairs(pairs),
        None => crate::server::proxy::Proxies::from_env(),
    };
    // Read at the command's start (`main`): no second `scutil`.
    let system = crate::server::system_proxy::last_system();
    let (proxies, found) = crate::machine::check::proxy_findings(agent_proxies, system.as_ref());
    out.extend(found);
    out.extend(crate::machine::check::network_findings(&config, &proxies).await);
    Ok(out)
}

/// Tests only (they run as root on CI machines): lets `install` run as root.
pub const ALLOW_ROOT_ENV: &str = "FOUNDRY_RELAY_TEST_ALLOW_ROOT";

/// `relay install`: writes the login service for this platform (0644, with the install-time
/// `PATH`, `LANG` and proxy variables) and loads it (again: a second install replaces the
/// loaded job), then runs `relay check` under it. Refused as root: a login service belongs to
/// the owner's account, and graphs must not run as root.
///
/// With no session to load into — a Mac reached over SSH or not logged in at the GUI, a Linux
/// shell without a user service manager — the file is written and the command succeeds: the
/// relay starts at the next login (docs/relay.md says what headless machines need). On Linux
/// it also says when the relay would stop at logout (no lingering).
///
/// # Errors
/// When run as root, `HOME` is unset, the config does not load, or the file cannot be written
/// or loaded (with the system's reason and the fix when it is a known one).
pub async fn install(config_path: &Path, exe: Option<PathBuf>, refresh: bool) -> Result<(), CliError> {
    if nix::unistd::geteuid().is_root() && std::env::var_os(ALLOW_ROOT_ENV).is_none() {
        return Err(CliError::new(
            "refusing to install as root: run `relay install` as the user whose desktop runs the graphs",
        ));
    }
    let home = home()?;
    load(config_path)?;
    let platform = Platform::current();
    let file = service::service_file(platform, &home);
    let log_dir = service::log_dir(platform, &home);
    std::fs::create_dir_all(file.parent().ok_or_else(|| CliError::new("service path has no folder"))?)?;
    std::fs::create_dir_all(&log_dir)?;
    let spec = if refresh {
        let Some(old) = std::fs::read_to_string(&file).ok() else {
            println!("no login service installed ({}): nothing to refresh", file.display());
            return Ok(());
        };
        let Some(service::Recorded { exe, path, lang, carried }) = service::recorded(platform, &old) else {
            return Err(CliError(format!(
                "{} was not written by relay install: run `relay install` to replace it",
                file.display()
            )));
        };
        let config = std::fs::canonicalize(config_path)?;
        service::ServiceSpec { exe, config, log_dir: log_dir.clone(), working_dir: home.clone(), path, lang, carried }
    } else {
        service::ServiceSpec {
            exe: match exe {
                Some(exe) => std::path::absolute(exe)?,
                None => std::env::current_exe()?,
            },
            config: std::fs::canonicalize(config_path)?,
            log_dir: log_dir.clone(),
            working_dir: home.clone(),
            path: std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into()),
            lang: std::env::var("LANG").ok().filter(|l| !l.is_empty()).unwrap_or_else(|| "en_US.UTF-8".into()),
            carried: service::carried_from(|k| std::env::var(k).ok()),
        }
    };
    let text = service::service_text(platform, &spec);
    let unchanged = std::fs::read_to_string(&file).is_ok_and(|old| old == text);
    if refresh && unchanged {
        println!("the login service file is current for this build: left as it is");
        return Ok(());
    }
    service::write_service_file(&file, &text).map_err(|e| CliError(format!("writing {}: {e}", file.display())))?;
    println!("wrote {}", file.display());
    println!("graphs will run with PATH={} (from this shell; run install again after changing it)", spec.path);
    for (entry, why) in crate::machine::environment::fragile_path_entries(&spec.path) {
        println!(
            "warning: PATH entry {entry} is {why}: it breaks when that changes (the agent also reads your login shell's PATH, shell_environment)"
        );
    }
    if !spec.carried.is_empty() {
        let names: Vec<&str> = spec.carried.iter().map(|(k, _)| k.as_str()).collect();
        println!("proxy settings carried into the service: {}", names.join(", "));
    }
    let uid = uid();
    let session = service::session(platform, &uid);
    let loaded = matches!(session, service::Session::Present) && service::loaded(platform, &uid);
    match session {
        service::Session::Absent(why) => {
            let (what, then) = match platform {
                Platform::MacOs => (
                    "no GUI login session now (over SSH, or nobody logged in)",
                    "for a Mac nobody logs in to, turn on automatic login or use a LaunchDaemon (docs/relay.md, \"Headless Macs\")",
                ),
                Platform::Linux => (
                    "no systemd user manager reachable now",
                    "to run it without a login, enable lingering: loginctl enable-linger $USER",
                ),
            };
            if platform == Platform::Linux && why.contains("No such file or directory") {
                println!(
                    "systemd is not installed here ({why}): the unit was written but nothing will start it; start `relay run` from your desktop's autostart instead"
                );
            } else {
                println!("{what} ({why}): the relay starts at your next login");
                println!("        {then}");
            }
        }
        service::Session::Present if unchanged && loaded => {
            // Reloading would stop the agent and its run: an unchanged file needs none, and a
            // new build is picked up by the running relay between runs.
            println!(
                "the login service is unchanged and loaded: left running (a run in progress finishes; a new build takes over between runs)"
            );
        }
        service::Session::Present => {
            if loaded {
                println!(
                    "the login service changed: reloading it (a run in progress stops and reads \"relay restarted during run\")"
                );
            }
            let commands = service::load_commands(platform, &file, &uid);
            if let Err(e) = service::run_commands(&commands, std::time::Duration::from_millis(500)) {
                let hint = service::load_failure_hint(platform, &e).map(|h| format!("\n{h}")).unwrap_or_default();
                return Err(CliError(format!(
                    "wrote {} but could not load it: {e}{hint}\nload it yourself with: {}",
                    file.display(),
                    commands.iter().map(|c| c.command.join(" ")).collect::<Vec<_>>().join(" && ")
                )));
            }
            println!("loaded: the relay runs now and at every login");
            if platform == Platform::Linux && service::lingering(&uid) == Some(false) {
                println!(
                    "note:   systemd stops it when you log out; to keep it running: loginctl enable-linger {}",
                    std::env::var("USER").unwrap_or_else(|_| uid.clone())
                );
            }
        }
    }
    println!("logs:   {}", log_dir.join("relay.log").display());
    println!();
    println!("checking the setup as the login service will see it (relay check):");
    let failed = crate::machine::check::print(&findings(config_path).await?);
    if failed > 0 {
        println!("{failed} problem(s) to fix (above); the service is installed, and `relay check` tests again");
    }
    Ok(())
}

/// `relay uninstall`: unloads the login service — by its label, so a job whose file was
/// already deleted goes too — removes its file, and says what it leaves (the state folder with
/// the outbox and journal, the device token).
///
/// # Errors
/// When `HOME` is unset or the file cannot be removed.
pub fn uninstall(config_path: &Path) -> Result<(), CliError> {
    let home = home()?;
    let platform = Platform::current();
    let file = service::service_file(platform, &home);
    if let Err(e) = service::run_commands(&service::unload_commands(platform, &uid()), std::time::Duration::ZERO) {
        eprintln!("unloading: {e}");
    }
    if file.exists() {
        std::fs::remove_file(&file)?;
        println!("unloaded and removed {}", file.display());
    } else {
        println!("unloaded; no service file at {}", file.display());
    }
    if let Ok(config) = Config::load(config_path) {
        println!(
            "left in place: the state folder {} (outbox, journal, status), the config {}{}",
            config.state_dir.display(),
            config_path.display(),
            config
                .device_token_file
                .as_ref()
                .map(|f| format!(", the device token {}", f.display()))
                .unwrap_or_default()
        );
    }
    Ok(())
}

fn home() -> Result<PathBuf, CliError> {
    std::env::var_os("HOME").map(PathBuf::from).ok_or_else(|| CliError::new("HOME is not set"))
}

/// The user's numeric id (launchd's `gui/<uid>` domain).
fn uid() -> String {
    nix::unistd::getuid().to_string()
}
