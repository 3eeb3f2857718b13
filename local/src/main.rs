//! `cargo run -p local`: the whole stack on 127.0.0.1 with the embedded store.

use local::{LocalConfig, start};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
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
