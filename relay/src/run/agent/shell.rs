//! The owner's login shell environment, read for Graphs and refreshed when stale
//! ([`crate::machine::environment`]).

use super::Relay;
use crate::run::executor;
use crate::server::client::RelayServer;

/// The last capture of the login shell's environment.
#[derive(Default)]
pub(super) struct ShellEnv {
    pub(super) at: Option<std::time::Instant>,
    pub(super) vars: std::collections::BTreeMap<String, String>,
}

impl<S: RelayServer, E: executor::Execute> Relay<S, E> {
    /// Reads the login shell's environment again when it is due (a failure keeps the last one).
    pub(super) async fn refresh_shell_environment(&self) {
        use crate::machine::environment;
        let Some(holder) = &self.shell_env else { return };
        let due = holder.lock().is_ok_and(|h| h.at.is_none_or(|t| t.elapsed() >= environment::REFRESH));
        if !due {
            return;
        }
        let (shell, exe) = (environment::shell(), self.exe());
        let home = std::env::var_os("HOME").map_or_else(|| std::path::PathBuf::from("/"), std::path::PathBuf::from);
        let read = tokio::task::spawn_blocking(move || environment::login_shell(&shell, &exe, &home)).await;
        let mut h = holder.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        h.at = Some(std::time::Instant::now());
        match read {
            Ok(Ok(vars)) => {
                // Names only: values may be keys.
                tracing::info!(names = %vars.keys().cloned().collect::<Vec<_>>().join(" "), "login shell environment read for Graphs");
                h.vars = vars;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the login shell's environment; Graphs keep the last one read")
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the login shell's environment"),
        }
    }

    /// The login shell's variables a Graph gets (its session's `env` goes on top).
    pub(crate) fn shell_vars(&self) -> std::collections::BTreeMap<String, String> {
        self.shell_env.as_ref().and_then(|h| h.lock().ok().map(|h| h.vars.clone())).unwrap_or_default()
    }
}
