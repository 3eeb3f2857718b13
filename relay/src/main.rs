//! `relay [--config PATH] <pair|run|status|check|pause|resume|update|install|uninstall|session|completions>`: the
//! command line is `relay::cli::args` (clap); the subcommands live in `relay::cli` (`commands`, `pair`, `sessions`), the loop in
//! `relay::run::agent`. Errors are printed as one message (`relay: …`, exit 1), never as a stack
//! trace, whatever `RUST_BACKTRACE` says.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use relay::cli::args::{Cli, Command};
use relay::cli::{self, commands};
use relay::config::{CONFIG_ENV, default_config_path};
use relay::machine::service;
use relay::run::agent::Relay;

#[tokio::main]
async fn main() -> ExitCode {
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
    let args = Cli::parse();
    // A Graph's ask: no config (the run's environment says where to ask), its own exit codes.
    if let Command::Task(relay::cli::args::Task::Ask(ask)) = &args.command {
        return relay::cli::task::ask(ask).await;
    }
    // The built-in hello Graph, run by the relay as a session's command: no config either.
    if let Command::Hello = args.command {
        return tokio::task::spawn_blocking(relay::cli::hello::run).await.unwrap_or(ExitCode::FAILURE);
    }
    match dispatch(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("relay: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(args: Cli) -> anyhow::Result<()> {
    if let Command::PrintEnvironment = args.command {
        println!("{}", relay::machine::environment::print_environment());
        return Ok(());
    }
    if let Command::Completions { shell } = args.command {
        clap_complete::generate(shell, &mut Cli::command(), "relay", &mut std::io::stdout());
        return Ok(());
    }
    // The proxies every command's connections use: the environment's, else a Mac's system
    // proxy (relay::server::system_proxy); the agent reads it again as the network changes.
    let _ = tokio::task::spawn_blocking(relay::machine::system_proxy::refresh_proxies).await;
    let config_path: PathBuf = args
        .config
        .or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from))
        .or_else(default_config_path)
        .ok_or_else(|| anyhow::anyhow!("no config path: HOME is not set; pass --config PATH"))?;
    match args.command {
        Command::Run => run(&config_path).await,
        Command::Status => Ok(commands::status(&config_path)?),
        Command::Pause { duration, note } => Ok(commands::pause(&config_path, duration.as_deref(), note).await?),
        Command::Resume => Ok(commands::resume(&config_path).await?),
        Command::Update => Ok(commands::update(&config_path).await?),
        Command::Check => Ok(commands::check(&config_path).await?),
        Command::Install { exe, refresh } => Ok(commands::install(&config_path, exe, refresh).await?),
        Command::Uninstall => Ok(commands::uninstall(&config_path)?),
        Command::Session(which) => Ok(relay::cli::sessions::command(&config_path, which)?),
        Command::Pair(pair) => Ok(relay::cli::pair::command(&config_path, pair).await?),
        Command::Completions { .. } | Command::Task(_) | Command::PrintEnvironment | Command::Hello => Ok(()),
    }
}

/// `relay run`. Under launchd or systemd ([`service::SUPERVISED_ENV`]) a config that does not
/// load, or a state folder another relay holds, is logged and retried every
/// [`service::THROTTLE_SECONDS`] (the owner fixes the file, the other relay stops) instead of
/// exiting into a restart loop; in a terminal it is an error at once.
async fn run(config_path: &std::path::Path) -> anyhow::Result<()> {
    let supervised = std::env::var_os(service::SUPERVISED_ENV).is_some();
    // launchd's soft limit is 256 open files: raised for the relay and every Graph it starts.
    match relay::machine::environment::raise_open_files() {
        Ok((before, after)) if after > before => tracing::info!(before, after, "open-file limit raised"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit; Graphs keep the current one"),
    }
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
            Ok(relay) => {
                // Where this binary is, for the updates (`relay::machine::update`); a system that cannot
                // say runs the relay without them rather than not at all.
                let binary = match relay::machine::update::Binary::current() {
                    Ok(b) => Some(b),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot find this binary's path: updates are off");
                        None
                    }
                };
                let checks = relay.config_snapshot();
                let shell_env = checks.shell_environment.unwrap_or(supervised);
                let daily = binary
                    .clone()
                    .filter(|_| checks.auto_update)
                    .map(|b| tokio::spawn(relay::machine::update::daily(checks, b)));
                let mut relay = relay.watching(config_path.to_path_buf());
                if shell_env {
                    relay = relay.with_shell_environment();
                }
                if let Some(b) = &binary {
                    relay = relay.restart_when_replaced(b.clone());
                }
                relay.run(&mut shutdown).await?;
                if let Some(d) = daily {
                    d.abort();
                }
                if let Some(binary) = binary.filter(relay::machine::update::Binary::replaced) {
                    // Same process id: launchd and systemd see no exit.
                    let e = binary.restart();
                    return Err(anyhow::anyhow!("cannot start the new build {}: {e}", binary.path().display()));
                }
                return Ok(());
            }
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
