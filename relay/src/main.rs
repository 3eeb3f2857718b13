//! `relay [--config PATH] <run|status|check|install|uninstall|session …>`: argument parsing and wiring;
//! the subcommands live in `relay::cli`, the loop in `relay::agent`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use relay::agent::Relay;
use relay::config::{CONFIG_ENV, default_config_path};
use relay::{cli, service};

const USAGE: &str = "usage: relay [--config PATH] <pair|run|status|check|install|uninstall|session>
  pair URL   pair this desktop with the owner's account (approve it in the panel) [--name NAME]
  run        poll the server and run shared Graph sessions (Ctrl-C / SIGTERM stop it)
  status     config, last sync, outbox size, current run
  check      validate the config and reach the server with the device token
  install    write a launchd agent (macOS) or systemd user unit (Linux) that starts the relay at login
  uninstall  remove it
config: --config, else $FOUNDRY_RELAY_CONFIG, else the platform config dir (relay.toml)";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Under launchd or systemd the relay writes its own bounded log file (service::LOG_FILE_ENV).
    match std::env::var_os(service::LOG_FILE_ENV) {
        Some(file) => {
            if let Err(e) = logging::init_file(std::path::Path::new(&file), service::LOG_MAX_BYTES) {
                logging::init_terminal();
                tracing::warn!(error = %e, "cannot open the log file; logging to stdout");
            }
        }
        None => logging::init_terminal(),
    }
    let mut args = std::env::args().skip(1);
    let mut config_path: Option<PathBuf> = std::env::var_os(CONFIG_ENV).map(PathBuf::from);
    let mut command = None;
    let mut rest: Vec<String> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--config" if command.is_none() => config_path = Some(args.next().context("--config needs a path")?.into()),
            "-h" | "--help" if command.is_none() => {
                println!("{USAGE}");
                return Ok(());
            }
            c if command.is_none() => command = Some(c.to_owned()),
            // `session` and `pair` take their own arguments (a command after `--`, a URL).
            _ if matches!(command.as_deref(), Some("session" | "pair")) => rest.push(a),
            other => bail!("unexpected argument {other:?}\n{USAGE}"),
        }
    }
    let config_path = config_path.or_else(default_config_path).context("no config path: set --config")?;
    match command.as_deref() {
        Some("run") => run(&config_path).await,
        Some("status") => Ok(cli::status(&config_path)?),
        Some("check") => Ok(cli::check(&config_path).await?),
        Some("install") => Ok(cli::install(&config_path)?),
        Some("uninstall") => Ok(cli::uninstall(&config_path)?),
        Some("session") => Ok(relay::sessions::command(&config_path, &rest)?),
        Some("pair") => Ok(relay::pair::command(&config_path, &rest).await?),
        _ => bail!("{USAGE}"),
    }
}

/// `relay run`. Under launchd or systemd ([`service::SUPERVISED_ENV`]) a config that does not
/// load, or a state folder another relay holds, is logged and retried every
/// [`service::THROTTLE_SECONDS`] (the owner fixes the file, the other relay stops) instead of
/// exiting into a restart loop; in a terminal it is an error at once.
async fn run(config_path: &std::path::Path) -> anyhow::Result<()> {
    let supervised = std::env::var_os(service::SUPERVISED_ENV).is_some();
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let started = cli::load(config_path).map_err(anyhow::Error::from).and_then(|config| {
            for w in &config.warnings {
                tracing::warn!("{w}");
            }
            tracing::info!(server = %config.server_url, sessions = config.sessions.len(), "relay starting");
            Ok(Relay::new(config)?)
        });
        match started {
            Ok(relay) => return Ok(relay.watching(config_path.to_path_buf()).run(&mut shutdown).await?),
            Err(e) if supervised => {
                tracing::error!(error = %format!("{e:#}"), retry_in_s = service::THROTTLE_SECONDS, "cannot start yet");
                tokio::select! {
                    () = tokio::time::sleep(std::time::Duration::from_secs(service::THROTTLE_SECONDS.into())) => {}
                    () = &mut shutdown => return Ok(()),
                }
            }
            Err(e) => return Err(e),
        }
    }
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
