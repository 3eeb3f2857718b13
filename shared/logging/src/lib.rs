//! # logging — the one tracing set-up of every binary
//!
//! Every binary filters by `RUST_LOG` (default `info`). The local server and the relay print
//! plain text, with colours only on a terminal (a service manager's log file gets no escape
//! codes); Lambda functions print JSON lines without timestamps (CloudWatch adds its own).
//! Installing twice is harmless: the first set-up stays.

use tracing_subscriber::EnvFilter;

/// The filter from `RUST_LOG`, or `info`.
fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into())
}

/// Plain-text logs to stdout, coloured only when stdout is a terminal.
pub fn init_terminal() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .try_init();
}

/// JSON lines for CloudWatch, without timestamps (the log service adds them).
#[cfg(feature = "json")]
pub fn init_json() {
    let _ =
        tracing_subscriber::fmt().json().with_env_filter(filter()).with_current_span(false).without_time().try_init();
}
