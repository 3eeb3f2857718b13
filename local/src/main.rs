//! `cargo run -p local`: the whole stack on 127.0.0.1 with the embedded store.

use local::{LocalConfig, start};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Configuration is by environment (README); the one argument is the version question.
    match std::env::args().nth(1).as_deref() {
        None => {}
        Some("--version" | "-V") => {
            println!("foundry-connect local {}", env!("CARGO_PKG_VERSION"));
            return Ok(());
        }
        Some(other) => anyhow::bail!(
            "unexpected argument {other:?}: local takes only --version (configure it with FOUNDRY_* variables, README)"
        ),
    }
    logging::init_terminal();
    let config = LocalConfig::from_env(|k| std::env::var(k).ok())?;
    let running = start(config.clone()).await?;
    println!(
        "{}\n  Data folder:   {}\n\nCtrl-C (or SIGTERM) stops the server.",
        running.banner(),
        config.data_dir.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    running.stop().await;
    Ok(())
}
