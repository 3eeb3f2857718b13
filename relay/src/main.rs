//! `relay [--config PATH] <run|status|check|install|uninstall>`: argument parsing and wiring;
//! the subcommands live in `relay::cli`, the loop in `relay::agent`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use relay::agent::Relay;
use relay::cli;
use relay::config::{CONFIG_ENV, default_config_path};

const USAGE: &str = "usage: relay [--config PATH] <run|status|check|install|uninstall>
  run        poll the server and run shared Graph sessions (Ctrl-C / SIGTERM stop it)
  status     config, last sync, outbox size, current run
  check      validate the config and reach the server with the device token
  install    write a launchd agent (macOS) or systemd user unit (Linux) that starts the relay at login
  uninstall  remove it
config: --config, else $FOUNDRY_RELAY_CONFIG, else the platform config dir (relay.toml)";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    logging::init_terminal();
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
    match command.as_deref() {
        Some("run") => {
            let config = cli::load(&config_path)?;
            tracing::info!(server = %config.server_url, sessions = config.sessions.len(), "relay starting");
            Ok(Relay::new(config)?.watching(config_path).run(shutdown_signal()).await?)
        }
        Some("status") => Ok(cli::status(&config_path)?),
        Some("check") => Ok(cli::check(&config_path).await?),
        Some("install") => Ok(cli::install(&config_path)?),
        Some("uninstall") => Ok(cli::uninstall()?),
        _ => bail!("{USAGE}"),
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
