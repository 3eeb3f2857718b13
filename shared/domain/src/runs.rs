//! Graph runs: the command a chat queues for the owner's desktop (SPEC §3, §4).
//!
//! ```text
//!            start (relay)             complete (relay)
//!  queued ───────────────► running ───────────────────► completed | failed | cancelled
//!    │  \                     │   cancel (agent) sets cancel_requested; complete then
//!    │   \ cancel (agent)     │   records `cancelled` whatever the relay reports
//!    │    └──► cancelled      └─ no control poll for heartbeat_timeout ─► reads `failed`
//!    └─ now ≥ expires_at ─► reads `expired`                 ("desktop stopped reporting")
//! ```
//!
//! The stored status only changes by conditional writes. `expired` and the heartbeat failure
//! are computed on read ([`Run::view`]) and enforced inside every write's condition, so no read
//! ever writes.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clock::Timestamp;
use crate::errors::{DESKTOP_STOPPED_REPORTING, InputError};
use crate::ids::{AgentId, CommandId, GraphSessionId, IdempotencyKey, OwnerId, ProjectId};
use crate::limits::{
    MAX_ARGUMENTS_BYTES, MAX_COMPLETION_CHARS, MAX_DESCRIPTION_CHARS, MAX_ERROR_CHARS, MAX_NAME_CHARS,
    MAX_RESULT_BYTES, MAX_SHARED_SESSIONS, MAX_SHORT_FIELD_CHARS, Policy, char_len, cut_chars,
};

mod cancel;
mod queue;
pub use cancel::{CancelRunOutcome, CancelStep, Canceller, classify_cancel};
pub use queue::{QueueFilter, QueueRejection, QueueTarget};

/// Status of a run as a caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Waiting for the desktop to pick it up.
    Queued,
    /// Started by the relay.
    Running,
    /// Finished with a result.
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled before or while running.
    Cancelled,
    /// Still queued 24 h after it was queued; never runs.
    Expired,
}

impl RunStatus {
    /// The stored spelling (also the wire spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }

    /// Every status, in lifecycle order.
    pub const ALL: [Self; 6] =
        [Self::Queued, Self::Running, Self::Completed, Self::Failed, Self::Cancelled, Self::Expired];

    /// Parses the stored spelling (the inverse of [`RunStatus::as_str`]).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Whether nothing can change this run any more.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Queued | Self::Running)
    }
}

/// How a run ended, as the relay reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum FinalStatus {
    /// The graph finished.
    Completed,
    /// The graph failed.
    Failed,
    /// The relay stopped it (cancel flag) or refused it (consent re-check).
    Cancelled,
}

impl From<FinalStatus> for RunStatus {
    fn from(s: FinalStatus) -> Self {
        match s {
            FinalStatus::Completed => Self::Completed,
            FinalStatus::Failed => Self::Failed,
            FinalStatus::Cancelled => Self::Cancelled,
        }
    }
}

/// Metadata of one graph session shared in a project, as the relay syncs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionMeta {
    /// `gs_` + 32 lowercase hex.
    pub graph_session_id: GraphSessionId,
    /// Display name (not blank).
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = MAX_NAME_CHARS)))]
    pub name: String,
    /// What the graph does (for the model choosing it).
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_DESCRIPTION_CHARS)))]
    pub description: String,
    /// Stable short name; the relay refuses a command whose slug changed since it was queued.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = MAX_SHORT_FIELD_CHARS)))]
    pub slug: String,
    /// The graph's version.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_SHORT_FIELD_CHARS)))]
    pub version: String,
    /// The graph's status on the desktop (free text, e.g. `ready`).
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_SHORT_FIELD_CHARS)))]
    pub status: String,
}

/// Validates a whole shared-session set: at most 100, each field within its limit, no
/// duplicate ids.
///
/// # Errors
/// The first [`InputError`] found, naming the field as `sessions[i].field`.
pub fn validate_sessions(sessions: &[SessionMeta]) -> Result<(), InputError> {
    if sessions.len() > MAX_SHARED_SESSIONS {
        return Err(InputError::new(
            "sessions",
            format!("at most {MAX_SHARED_SESSIONS} sessions per project (got {})", sessions.len()),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for s in sessions {
        if !seen.insert(s.graph_session_id.as_str()) {
            return Err(InputError::new(
                "sessions",
                format!("graph_session_id {} appears more than once", s.graph_session_id),
            ));
        }
        let fields: [(&'static str, &str, usize, bool); 5] = [
            ("sessions[].name", &s.name, MAX_NAME_CHARS, true),
            ("sessions[].description", &s.description, MAX_DESCRIPTION_CHARS, false),
            ("sessions[].slug", &s.slug, MAX_SHORT_FIELD_CHARS, true),
            ("sessions[].version", &s.version, MAX_SHORT_FIELD_CHARS, false),
            ("sessions[].status", &s.status, MAX_SHORT_FIELD_CHARS, false),
        ];
        for (field, value, max, required) in fields {
            let n = char_len(value);
            if n > max || (required && value.trim().is_empty()) {
                let rule = if required {
                    format!("must be 1 to {max} characters (got {n})")
                } else {
                    format!("must be at most {max} characters (got {n})")
                };
                return Err(InputError::new(field, rule));
            }
        }
    }
    Ok(())
}

/// A request to queue a run, already validated at the edge.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRun {
    /// Whose projects the agent acts on.
    pub owner: OwnerId,
    /// The calling agent; the key and the run are scoped to it.
    pub agent: AgentId,
    /// The project, if the caller named one.
    pub project_id: Option<ProjectId>,
    /// The session to run.
    pub graph_session_id: GraphSessionId,
    /// Arguments passed to the graph as JSON on stdin (an object).
    pub arguments: serde_json::Value,
    /// The caller's idempotency key.
    pub idempotency_key: IdempotencyKey,
}

impl QueueRun {
    /// Checks the arguments rule: an object of at most 64 KiB of JSON.
    ///
    /// # Errors
    /// [`InputError`] on `arguments`.
    pub fn validate(&self) -> Result<(), InputError> {
        if !self.arguments.is_object() {
            return Err(InputError::new("arguments", "must be a JSON object"));
        }
        let n = self.arguments.to_string().len();
        if n > MAX_ARGUMENTS_BYTES {
            return Err(InputError::new(
                "arguments",
                format!("must be at most {MAX_ARGUMENTS_BYTES} bytes of JSON (got {n})"),
            ));
        }
        Ok(())
    }

    /// sha256 over what makes two requests "the same": session, arguments and the project as
    /// given. `serde_json` keeps object keys sorted, so key order in the caller's JSON does not
    /// matter.
    pub fn request_hash(&self) -> String {
        let canonical = serde_json::json!({
            "graph_session_id": self.graph_session_id.as_str(),
            "arguments": self.arguments,
            "project_id": self.project_id.map(|p| p.to_string()),
        });
        sha256_hex(canonical.to_string().as_bytes())
    }
}

/// The key of an idempotency record: sha256 over (scope, agent-or-owner, key), so keys of
/// different agents never meet and no separator can be forged.
pub fn idempotency_record_key(scope: &str, principal: &str, key: &IdempotencyKey) -> String {
    let mut h = Sha256::new();
    for part in [scope, principal, key.as_str()] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A completion as the relay posts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Completion {
    /// The execution id the relay sent with `start`.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = crate::limits::MAX_EXECUTION_ID_CHARS)))]
    pub execution_id: String,
    /// How the run ended.
    pub status: FinalStatus,
    /// The graph's output (absent when truncated or failed): at most 340,000 UTF-8 bytes, and the
    /// whole completion at most 100,000 characters of JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_COMPLETION_CHARS)))]
    pub result: Option<String>,
    /// `true` when the result did not fit and was left out (all or nothing).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub result_truncated: bool,
    /// Why it failed (at most 2,000 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_ERROR_CHARS)))]
    pub error: Option<String>,
    /// Tokens the graph reported using.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Cost the graph reported (finite, ≥ 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 0.0)))]
    pub reported_cost: Option<f64>,
}

/// The part of a completion whose JSON text is bounded, in the order the relay serializes it.
#[derive(Serialize)]
struct BoundedPart<'a> {
    execution_id: &'a str,
    status: FinalStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reported_cost: Option<f64>,
}

/// Slots per graph session in a project's duration summary.
pub const DURATION_SLOTS: u64 = 8;

/// The summary slot a completed run writes its duration to: `<session>#<0..8>`, chosen from the
/// millisecond it finished (a random-replacement sample of the session's recent runs — no read
/// needed to keep it, in either store — and deterministic under a virtual clock).
pub fn duration_key(session: &GraphSessionId, finished_at: Timestamp) -> String {
    let slot = finished_at.as_millis().rem_euclid(DURATION_SLOTS as i64);
    format!("{session}#{slot}")
}

/// The expected duration of a run of `session`: the median of its recent completed runs
/// (`None` without history).
pub fn expected_duration(
    recent: &std::collections::BTreeMap<String, u64>,
    session: &GraphSessionId,
) -> Option<Duration> {
    let prefix = format!("{session}#");
    let mut ms: Vec<u64> = recent.iter().filter(|(k, _)| k.starts_with(&prefix)).map(|(_, v)| *v).collect();
    if ms.is_empty() {
        return None;
    }
    ms.sort_unstable();
    Some(Duration::from_millis(ms[(ms.len() - 1) / 2]))
}

/// How a [`Completion::refusal_report`]'s error begins.
pub const COMPLETION_REFUSED_PREFIX: &str = "the server refused this run's result: ";

impl Completion {
    /// Characters in the JSON text of `{execution_id,status,result,total_tokens,reported_cost}`
    /// (absent fields left out), the measure bounded by [`MAX_COMPLETION_CHARS`].
    pub fn bounded_chars(&self) -> usize {
        let part = BoundedPart {
            execution_id: &self.execution_id,
            status: self.status,
            result: self.result.as_deref(),
            total_tokens: self.total_tokens,
            reported_cost: self.reported_cost,
        };
        serde_json::to_string(&part).map(|s| char_len(&s)).unwrap_or(usize::MAX)
    }

    /// Whether the result may be sent as is; otherwise the relay sends `result_truncated`.
    pub fn result_fits(&self) -> bool {
        self.bounded_chars() <= MAX_COMPLETION_CHARS && self.result.as_ref().is_none_or(|r| r.len() <= MAX_RESULT_BYTES)
    }

    /// The relay's bounding step: all or nothing for the result, errors cut to 2,000
    /// characters, optional fields the server would refuse dropped (a negative or non-finite
    /// `reported_cost`): one bad optional field must not cost the whole result. The server
    /// runs [`Completion::validate`] on what arrives.
    pub fn bounded(mut self) -> Self {
        if let Some(e) = &self.error {
            self.error = Some(cut_chars(e, MAX_ERROR_CHARS).to_owned());
        }
        if self.reported_cost.is_some_and(|c| !c.is_finite() || c < 0.0) {
            self.reported_cost = None;
        }
        if !self.result_fits() {
            self.result = None;
            self.result_truncated = true;
        }
        self
    }

    /// What the relay sends when the server refused this completion: the run `failed`, with
    /// the refusal as the error (same execution id, nothing else), so the run is never lost.
    pub fn refusal_report(&self, refusal: &str) -> Self {
        Self {
            execution_id: self.execution_id.clone(),
            status: FinalStatus::Failed,
            result: None,
            result_truncated: false,
            error: Some(cut_chars(&format!("{COMPLETION_REFUSED_PREFIX}{refusal}"), MAX_ERROR_CHARS).to_owned()),
            total_tokens: None,
            reported_cost: None,
        }
    }

    /// Whether this is a [`Completion::refusal_report`] (not reported again if refused too).
    pub fn is_refusal_report(&self) -> bool {
        self.status == FinalStatus::Failed
            && self.result.is_none()
            && self.error.as_deref().is_some_and(|e| e.starts_with(COMPLETION_REFUSED_PREFIX))
    }

    /// The server's check of a completion. Nothing is cut here: a client that sends too much
    /// gets a clear error instead of silently losing data.
    ///
    /// # Errors
    /// [`InputError`] naming the field.
    pub fn validate(&self) -> Result<(), InputError> {
        crate::limits::validate_execution_id(&self.execution_id)?;
        if self.result_truncated && self.result.is_some() {
            return Err(InputError::new("result", "must be absent when result_truncated is true (all or nothing)"));
        }
        if let Some(r) = &self.result
            && r.len() > MAX_RESULT_BYTES
        {
            return Err(InputError::new(
                "result",
                format!("must be at most {MAX_RESULT_BYTES} UTF-8 bytes; send result_truncated instead"),
            ));
        }
        let chars = self.bounded_chars();
        if chars > MAX_COMPLETION_CHARS {
            return Err(InputError::new(
                "result",
                format!(
                    "the completion JSON is {chars} characters; at most {MAX_COMPLETION_CHARS} are allowed, send result_truncated instead"
                ),
            ));
        }
        if let Some(e) = &self.error {
            let n = char_len(e);
            if n > MAX_ERROR_CHARS {
                return Err(InputError::new(
                    "error",
                    format!("must be at most {MAX_ERROR_CHARS} characters (got {n})"),
                ));
            }
        }
        if let Some(c) = self.reported_cost
            && (!c.is_finite() || c < 0.0)
        {
            return Err(InputError::new("reported_cost", "must be a finite number ≥ 0"));
        }
        Ok(())
    }

    /// sha256 of the completion's canonical JSON: an identical repeat is a replay.
    pub fn hash(&self) -> String {
        sha256_hex(serde_json::to_string(self).unwrap_or_default().as_bytes())
    }
}

/// A stored run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The ticket.
    pub command_id: CommandId,
    /// The owner whose desktop runs it.
    pub owner: OwnerId,
    /// The agent that queued it; only it can read or cancel the run.
    pub agent: AgentId,
    /// The project it was queued in.
    pub project_id: ProjectId,
    /// The session to run.
    pub graph_session_id: GraphSessionId,
    /// The session's slug when queued (the relay re-checks it).
    pub slug: String,
    /// Arguments for the graph.
    pub arguments: serde_json::Value,
    /// Stored status (never `expired`; see [`Run::view`]).
    pub status: RunStatus,
    /// When it was queued.
    pub queued_at: Timestamp,
    /// A queued run expires at this time.
    pub expires_at: Timestamp,
    /// When the relay started it.
    pub started_at: Option<Timestamp>,
    /// When it reached a terminal status.
    pub finished_at: Option<Timestamp>,
    /// The relay's execution id.
    pub execution_id: Option<String>,
    /// The desktop whose relay started it (none while queued, and for runs started before
    /// desktops were recorded): what makes the owner's Desktops table say "busy with".
    pub device_id: Option<uuid::Uuid>,
    /// The agent asked to cancel while it was running.
    pub cancel_requested: bool,
    /// Last control poll (or the start).
    pub last_heartbeat_at: Option<Timestamp>,
    /// How it ended, as completed.
    pub completion: Option<Completion>,
    /// sha256 of the recorded completion ([`Completion::hash`]): a repeat with the same hash
    /// is a replay.
    pub completion_hash: Option<String>,
    /// What the Graph last said of itself while running, as the relay forwarded it.
    pub progress: Option<crate::progress::RunProgress>,
}

/// A run as a caller sees it at a given time.
#[derive(Debug, Clone, PartialEq)]
pub struct RunView {
    /// Effective status.
    pub status: RunStatus,
    /// Error text, if failed (including `desktop stopped reporting`).
    pub error: Option<String>,
}

impl Run {
    /// A freshly queued run for `req` in `target` (the project and slug consent resolved).
    pub fn queued(req: &QueueRun, target: QueueTarget, now: Timestamp, policy: &Policy) -> Self {
        Self {
            command_id: CommandId::generate(),
            owner: req.owner.clone(),
            agent: req.agent.clone(),
            project_id: target.project_id,
            graph_session_id: req.graph_session_id.clone(),
            slug: target.slug,
            arguments: req.arguments.clone(),
            status: RunStatus::Queued,
            queued_at: now,
            expires_at: now.plus(policy.queued_ttl),
            started_at: None,
            finished_at: None,
            execution_id: None,
            device_id: None,
            cancel_requested: false,
            last_heartbeat_at: None,
            completion: None,
            completion_hash: None,
            progress: None,
        }
    }

    /// The status and error at `now`: a queued run past `expires_at` is `expired`; a running
    /// run with no control poll for `policy.heartbeat_timeout` is `failed` with
    /// `desktop stopped reporting`.
    pub fn view(&self, now: Timestamp, policy: &Policy) -> RunView {
        let error = self.completion.as_ref().and_then(|c| c.error.clone());
        match self.status {
            RunStatus::Queued if now >= self.expires_at => RunView { status: RunStatus::Expired, error: None },
            RunStatus::Running if self.heartbeat_lost(now, policy) => {
                RunView { status: RunStatus::Failed, error: Some(DESKTOP_STOPPED_REPORTING.to_owned()) }
            }
            status => RunView { status, error },
        }
    }

    /// Whether the relay stopped reporting on this running command.
    pub fn heartbeat_lost(&self, now: Timestamp, policy: &Policy) -> bool {
        let last = self.last_heartbeat_at.or(self.started_at).unwrap_or(self.queued_at);
        now >= last.plus(policy.heartbeat_timeout)
    }
}

/// Outcome of queueing a run.
#[derive(Debug, Clone, PartialEq)]
pub enum QueueOutcome {
    /// A new command was written.
    Queued(Run),
    /// The same key and arguments were seen before: the original command.
    Replayed(Run),
    /// Nothing was written.
    Rejected(QueueRejection),
}

/// Outcome of the relay's `start`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartOutcome {
    /// queued → running.
    Started,
    /// Already running with this execution id (a retried start).
    Replayed,
    /// Not startable; the relay must not run it. Carries the effective status.
    Refused(RunStatus),
    /// Unknown, or not this owner's.
    NotFound,
}

/// Outcome of the relay's control poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlOutcome {
    /// Heartbeat recorded; whether the agent asked to cancel.
    Running {
        /// The agent asked to cancel.
        cancel_requested: bool,
    },
    /// The run is no longer running (for the server): the relay should stop it.
    NotRunning(RunStatus),
    /// Unknown, or not this owner's.
    NotFound,
}

/// Outcome of the relay's `complete`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompleteOutcome {
    /// Recorded with this status (`cancelled` if cancel was requested).
    Recorded(RunStatus),
    /// The identical completion was recorded before.
    Replayed(RunStatus),
    /// The run already ended otherwise (or cannot be completed): the status it has.
    Conflict(RunStatus),
    /// Unknown, or not this owner's.
    NotFound,
}

/// Classifies a failed `start` from the old image.
pub fn classify_start(
    old: Option<&Run>,
    owner: &OwnerId,
    execution_id: &str,
    now: Timestamp,
    policy: &Policy,
) -> StartOutcome {
    let Some(run) = old.filter(|r| &r.owner == owner) else {
        return StartOutcome::NotFound;
    };
    let status = run.view(now, policy).status;
    if status == RunStatus::Running && run.execution_id.as_deref() == Some(execution_id) {
        StartOutcome::Replayed
    } else {
        StartOutcome::Refused(status)
    }
}

/// Classifies a failed control poll (heartbeat) from the old image.
pub fn classify_control(old: Option<&Run>, owner: &OwnerId, now: Timestamp, policy: &Policy) -> ControlOutcome {
    match old.filter(|r| &r.owner == owner) {
        None => ControlOutcome::NotFound,
        Some(run) => ControlOutcome::NotRunning(run.view(now, policy).status),
    }
}

/// What a `complete` does next, decided from the run's old image after the first
/// conditional write failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompleteStep {
    /// Final answer.
    Done(CompleteOutcome),
    /// The agent asked to cancel: record `cancelled` instead (a second conditional write).
    RecordCancelled,
}

/// Classifies a failed `complete`.
pub fn classify_complete(
    old: Option<&Run>,
    owner: &OwnerId,
    completion: &Completion,
    hash: &str,
    now: Timestamp,
    policy: &Policy,
) -> CompleteStep {
    let Some(run) = old.filter(|r| &r.owner == owner) else {
        return CompleteStep::Done(CompleteOutcome::NotFound);
    };
    let view = run.view(now, policy);
    if run.status.is_terminal() {
        let same = run.completion_hash.as_deref() == Some(hash);
        return CompleteStep::Done(if same {
            CompleteOutcome::Replayed(run.status)
        } else {
            CompleteOutcome::Conflict(run.status)
        });
    }
    if view.status == RunStatus::Running
        && run.cancel_requested
        && run.execution_id.as_deref() == Some(completion.execution_id.as_str())
    {
        return CompleteStep::RecordCancelled;
    }
    CompleteStep::Done(CompleteOutcome::Conflict(view.status))
}

#[cfg(test)]
mod tests;

/// A queued run for unit tests across the crate's modules.
#[cfg(test)]
pub(crate) fn sample_run() -> Run {
    use crate::ids::{AgentId, GraphSessionId, IdempotencyKey};
    let req = QueueRun {
        owner: OwnerId::new("o").unwrap(),
        agent: AgentId::new("claude", "o").unwrap(),
        project_id: None,
        graph_session_id: GraphSessionId::parse("g", &format!("gs_{}", "a".repeat(32))).unwrap(),
        arguments: serde_json::json!({"secret": "args"}),
        idempotency_key: IdempotencyKey::parse("key-00002").unwrap(),
    };
    let target = QueueTarget { project_id: crate::ids::ProjectId::generate(), slug: "report".into() };
    Run::queued(&req, target, crate::clock::Timestamp::from_millis(0), &Policy::default())
}
