//! Error strings a caller sees, in one place, and the input-validation error.
//!
//! The strings in this module are part of the contract (SPEC §10): clients, tests and tool
//! descriptions match them byte for byte, so they are constants, never built ad hoc.

use std::fmt;

/// A run that is unknown or was started by another agent (deliberately identical).
pub const RUN_NOT_FOUND: &str = "Graph run not found or access removed";
/// The relay's consent re-check before running a command failed.
pub const SESSION_NO_LONGER_SHARED: &str = "Graph session is no longer shared with this project";
/// A task asked through another chat link, or an unknown task (deliberately identical).
pub const NOT_CLAIMABLE_MISSING: &str = "not claimable: missing";
/// A task read through another chat link, or an unknown task (deliberately identical).
pub const TASK_NOT_FOUND: &str = "Linked chat task not found or access removed";
/// A submit with a claim that was taken over after its lease ran out.
pub const STALE_CLAIM: &str = "rejected: stale claim, task was re-claimed";
/// A submit on a task the owner cancelled.
pub const TASK_CANCELLED: &str = "rejected: task is cancelled";
/// An idempotency key reused with different arguments.
pub const IDEMPOTENCY_MISMATCH: &str = "idempotency_key was already used with different arguments";
/// A running command whose relay stopped sending control polls.
pub const DESKTOP_STOPPED_REPORTING: &str = "desktop stopped reporting";
/// How a relay's `failed` completion begins when the computer slept through the run's
/// heartbeat timeout (macOS sleeps with the lid closed despite `caffeinate -i`); the relay
/// adds how long it slept and the fix. Recorded over [`DESKTOP_STOPPED_REPORTING`]
/// (`store::RelayRuns::complete_run`).
pub const MAC_SLEPT: &str = "the Mac slept during the run";
/// A command the relay had started when it died, completed on the relay's next start.
pub const RELAY_RESTARTED: &str = "relay restarted during run";

/// Bad input: names the field and the rule it broke. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {rule}")]
pub struct InputError {
    /// The field, as the caller spelled it (e.g. `idempotency_key`).
    pub field: &'static str,
    /// The rule, in plain words (e.g. `must be 8 to 128 characters`).
    pub rule: String,
}

impl InputError {
    /// An error for `field` breaking `rule`.
    pub fn new(field: &'static str, rule: impl fmt::Display) -> Self {
        Self { field, rule: rule.to_string() }
    }
}

/// Displays an error with every cause in its `source()` chain, `outer: inner: innermost` —
/// the same walk as the AWS SDK's `DisplayErrorContext`, for any error. Used where a failure
/// is logged; the chain never goes into a response.
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut next = self.0.source();
        while let Some(e) = next {
            write!(f, ": {e}")?;
            next = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] InputError);

    #[test]
    fn error_chain_shows_every_cause() {
        let e = Outer(InputError::new("name", "must not be blank"));
        assert_eq!(ErrorChain(&e).to_string(), "outer: name: must not be blank");
    }
}
