//! `relay [--config PATH] <run|status|check|install|uninstall>`

use std::path::PathBuf;

use anyhow::{Context, bail};
use relay::agent::{Relay, Status};
use relay::client::{Client, RelayServer};
use relay::config::{CONFIG_ENV, Config, default_config_path};
use relay::service::{self, Platform};

const USAGE: &str = "usage: relay [--config PATH] <run|status|check|install|uninstall>
  run        poll the server and run shared Graph sessions (Ctrl-C / SIGTERM stop it)
  status     config, last sync, outbox size, current run
  check      validate the config and reach the server with the device token
  install    write a launchd agent (macOS) or systemd user unit (Linux) that starts the relay at login
  uninstall  remove it
config: --config, else $FOUNDRY_RELAY_CONFIG, else the platform config dir (relay.toml)";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        // Colours only on a terminal: a service manager's log file gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let mut args = std::env::args().skip(1);
    let mut config_path: Option<PathBuf> = std::env::var_os(CONFIG_ENV).map(PathBuf::from);
    let mut command = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--config" => config_path = Some(args.next().context("--config needs a path")?.into()),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            c if command.is_none() => command = Some(c.to_owned()),
            other => bail!("unexpected argument {other:?}\n{USAGE}"),
        }
    }
    let config_path = config_path.or_else(default_config_path).context("no config path: set --config")?;
    let load = || Config::load(&config_path).map_err(|e| anyhow::anyhow!("{}:\n{e}", config_path.display()));
    match command.as_deref() {
        Some("run") => {
            let config = load()?;
            tracing::info!(server = %config.server_url, sessions = config.sessions.len(), "relay starting");
            Relay::new(config)?.watching(config_path.clone()).run(shutdown_signal()).await
        }
        Some("status") => {
            let config = load()?;
            println!("config:   {}", config_path.display());
            println!("server:   {}", config.server_url);
            println!(
                "sessions: {}",
                config.sessions.iter().map(|s| s.meta.slug.as_str()).collect::<Vec<_>>().join(", ")
            );
            match std::fs::read(config.state_dir.join("status.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Status>(&b).ok())
            {
                Some(s) => {
                    println!("last sync: {}", s.last_sync_at.as_deref().unwrap_or("never"));
                    println!("outbox:    {} completion(s) waiting", s.outbox);
                    println!("running:   {}", s.current_run.as_deref().unwrap_or("nothing"));
                    if let Some(e) = s.last_error {
                        println!("last error: {e}");
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
                }
                None => println!("status:   the relay has not run yet"),
            }
            Ok(())
        }
        Some("check") => {
            let config = load()?;
            let client = Client::new(&config.server_url, &config.device_token)?;
            // A control poll for a command that does not exist: 404 proves the server is
            // reachable and accepts the token, and it writes nothing.
            match client.control(domain::ids::CommandId::parse("c", "00000000-0000-4000-8000-000000000000")?).await {
                Ok(_) => {
                    println!(
                        "config OK ({} session(s)); server {} reachable; device token accepted",
                        config.sessions.len(),
                        config.server_url
                    );
                    Ok(())
                }
                Err(e) => bail!("server check failed: {e}"),
            }
        }
        Some("install") => {
            let home = PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?);
            load()?;
            let platform = Platform::current();
            let file = service::service_file(platform, &home);
            let log_dir = home.join(if platform == Platform::MacOs { "Library/Logs" } else { ".local/state" });
            std::fs::create_dir_all(file.parent().context("service path")?)?;
            std::fs::create_dir_all(&log_dir)?;
            let exe = std::env::current_exe()?;
            let text = service::service_text(platform, &exe, &std::fs::canonicalize(&config_path)?, &log_dir);
            std::fs::write(&file, text)?;
            println!("wrote {}", file.display());
            let commands = service::load_commands(platform, &file, &uid());
            match service::run_commands(&commands) {
                Ok(()) => {
                    println!("loaded: the relay runs now and at every login");
                    Ok(())
                }
                Err(e) => bail!(
                    "wrote {} but could not load it: {e}\nload it yourself with: {}",
                    file.display(),
                    commands.iter().map(|c| c.join(" ")).collect::<Vec<_>>().join(" && ")
                ),
            }
        }
        Some("uninstall") => {
            let home = PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?);
            let platform = Platform::current();
            let file = service::service_file(platform, &home);
            if !file.exists() {
                println!("nothing installed at {}", file.display());
                return Ok(());
            }
            if let Err(e) = service::run_commands(&service::unload_commands(platform, &uid())) {
                // Not loaded (or no service manager): removing the file is still right.
                eprintln!("unloading: {e}");
            }
            std::fs::remove_file(&file)?;
            println!("unloaded and removed {}", file.display());
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

/// The user's numeric id (launchd's `gui/<uid>` domain).
fn uid() -> String {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "501".into())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}
