//! Limits and time policy: every number the product enforces, with its default.
//!
//! Lengths are counted in Unicode scalar values ("characters"), never bytes: 99,899 Japanese
//! characters fit in the 100,000-character completion budget although they are 299,697 UTF-8
//! bytes (SPEC §4).

use std::time::Duration;

/// Most characters in the JSON text of a completion `{execution_id,status,result,total_tokens,
/// reported_cost}`; above it the relay sends `result_truncated` instead (all or nothing).
pub const MAX_COMPLETION_CHARS: usize = 100_000;

/// Most UTF-8 bytes of a stored result (graph runs and chat tasks alike). A DynamoDB item
/// holds at most 400 KB; 100,000 characters of 4-byte text (emoji) would not fit, so such a
/// result is treated like an over-long one (`result_truncated` for runs, a clear error for
/// tasks). Only text that is mostly outside the Basic Multilingual Plane can reach this:
/// 100,000 Japanese characters are 300,000 bytes.
pub const MAX_RESULT_BYTES: usize = 340_000;

/// Most characters of an error message; longer ones are cut (by the relay, and again by the
/// server if a client does not).
pub const MAX_ERROR_CHARS: usize = 2_000;

/// Most graph sessions a project can share (one sync body).
pub const MAX_SHARED_SESSIONS: usize = 100;
/// Most bytes a project's shared sessions take as stored: every desktop's list and their union,
/// as JSON, together. DynamoDB holds a project in one item of at most 400 KB; 100 sessions at
/// every field's maximum are more than that, so the total is bounded, not only each field.
pub const MAX_SHARES_BYTES: usize = 300_000;

/// Most characters of a task's objective.
pub const MAX_OBJECTIVE_CHARS: usize = 10_000;

/// Most artifacts one task holds (each is presigned on every read of the task).
pub const MAX_ARTIFACTS_PER_TASK: u32 = 20;
/// Most bytes one task's artifacts hold together: 25 MiB.
pub const MAX_ARTIFACT_BYTES_PER_TASK: u64 = 25 * 1024 * 1024;

/// Most characters of a chat task's submitted result.
pub const MAX_TASK_RESULT_CHARS: usize = 100_000;

/// Most characters of a project or chat link name.
pub const MAX_NAME_CHARS: usize = 200;

/// Most characters of a graph session's description.
pub const MAX_DESCRIPTION_CHARS: usize = 1_000;

/// Most characters of a graph session's slug, version or status.
pub const MAX_SHORT_FIELD_CHARS: usize = 128;

/// Most characters of a relay execution id.
pub const MAX_EXECUTION_ID_CHARS: usize = 128;
/// How many runs queued just ahead of one `ReadRuns::own_runs_ahead` looks at (one bounded
/// query; a longer backlog reads as this long).
pub const MAX_RUNS_AHEAD: usize = 100;

/// Most bytes of a run's `arguments` JSON text (with the largest result, the item stays under
/// DynamoDB's 400 KB).
pub const MAX_ARGUMENTS_BYTES: usize = 32 * 1024;

/// Default for [`Policy::lease`].
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15 * 60);
/// Default for [`Policy::task_ttl`] and [`Policy::queued_ttl`].
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(24 * 3600);
/// Default for [`Policy::idempotency_ttl`].
pub const DEFAULT_IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 3600);
/// Default for [`Policy::dispatch_ttl`]: 30 minutes (the seed report's execution limit of the
/// desktop's dispatcher).
pub const DEFAULT_DISPATCH_TTL: Duration = Duration::from_secs(30 * 60);
/// Default for [`Policy::retention`].
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default for [`Policy::heartbeat_timeout`].
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Default for [`Policy::poll_interval`].
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(20);

/// The time rules of a deployment. Stores take one at construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How long a claim holds a task before another claim may take it over.
    pub lease: Duration,
    /// A task expires this long after it was assigned.
    pub task_ttl: Duration,
    /// A queued command expires this long after it was queued.
    pub queued_ttl: Duration,
    /// How long idempotency keys are remembered.
    pub idempotency_ttl: Duration,
    /// How long finished items stay readable before the TTL attribute lets DynamoDB drop them.
    pub retention: Duration,
    /// A running command with no control poll for this long reads as `failed`
    /// (`desktop stopped reporting`).
    pub heartbeat_timeout: Duration,
    /// The relay poll interval the server asks for (`poll_interval_s` in sync responses).
    pub poll_interval: Duration,
    /// The longest a task a desktop hands to a chat waits (`crate::dispatch`), and its
    /// default: 30 minutes. Never above [`Policy::task_ttl`] ([`Policy::max_dispatch_ttl`]).
    pub dispatch_ttl: Duration,
    /// Pairings one source address may start per UTC hour (default
    /// [`DEFAULT_PAIRINGS_PER_SOURCE_PER_HOUR`]): a company pairing hundreds of desktops behind
    /// one address raises it (issue 59; docs/scale.md, "Onboarding ceilings").
    pub pairings_per_source_per_hour: u32,
    /// Requests one owner may make a minute on each surface (default
    /// [`DEFAULT_OWNER_REQUESTS_PER_MINUTE`], `crate::budget`; docs/scale.md, "Each owner has a
    /// budget").
    pub owner_requests_per_minute: u32,
}

/// Requests one owner may make a minute on each surface unless the deployment sets another
/// number (the template's `OwnerRequestsPerMinute`, locally `FOUNDRY_OWNER_REQUESTS_PER_MINUTE`):
/// 100 a second, a tenth of the busiest route's throttle (`POST /mcp`, 1,000/s), and well above
/// an owner with 500 desktops on the doorbell (~20/s).
pub const DEFAULT_OWNER_REQUESTS_PER_MINUTE: u32 = 6_000;

/// Pairings one source address may start per UTC hour unless the deployment sets another
/// number ([`Policy::pairings_per_source_per_hour`]).
pub const DEFAULT_PAIRINGS_PER_SOURCE_PER_HOUR: u32 = 10;

impl Default for Policy {
    fn default() -> Self {
        Self {
            lease: DEFAULT_LEASE,
            task_ttl: DEFAULT_EXPIRY,
            queued_ttl: DEFAULT_EXPIRY,
            idempotency_ttl: DEFAULT_IDEMPOTENCY_TTL,
            retention: DEFAULT_RETENTION,
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
            poll_interval: DEFAULT_POLL_INTERVAL,
            dispatch_ttl: DEFAULT_DISPATCH_TTL,
            pairings_per_source_per_hour: DEFAULT_PAIRINGS_PER_SOURCE_PER_HOUR,
            owner_requests_per_minute: DEFAULT_OWNER_REQUESTS_PER_MINUTE,
        }
    }
}

impl Policy {
    /// The dispatch TTL in force: the configured one, never above the owner tasks' TTL.
    pub fn max_dispatch_ttl(&self) -> Duration {
        self.dispatch_ttl.min(self.task_ttl)
    }
}

/// Cuts `s` to at most `max` characters (never inside a character).
pub fn cut_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Checks a relay's execution id (what `start`, `control` with progress and `complete` carry):
/// 1 to [`MAX_EXECUTION_ID_CHARS`] characters.
///
/// # Errors
/// [`InputError`](crate::errors::InputError) on `execution_id`.
pub fn validate_execution_id(id: &str) -> Result<(), crate::errors::InputError> {
    let n = char_len(id);
    if n == 0 || n > MAX_EXECUTION_ID_CHARS {
        return Err(crate::errors::InputError::new(
            "execution_id",
            format!("must be 1 to {MAX_EXECUTION_ID_CHARS} characters (got {n})"),
        ));
    }
    Ok(())
}

/// Number of characters (Unicode scalar values) in `s`.
pub fn char_len(s: &str) -> usize {
    s.chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_characters_not_bytes() {
        let s = "日本語".repeat(1_000);
        let cut = cut_chars(&s, MAX_ERROR_CHARS);
        assert_eq!(char_len(cut), 2_000);
        assert_eq!(cut.len(), 6_000);
        assert_eq!(cut_chars("short", 2_000), "short");
    }
}
