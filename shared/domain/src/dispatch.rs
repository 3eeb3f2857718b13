//! Tasks a desktop hands to a chat (issue 57): a Graph running on the owner's desktop asks one
//! of its owner's linked chats to do a step and waits for the answer.
//!
//! ```text
//!  Graph ──ask──► relay (journal on disk) ──POST tasks, device token──► server
//!                                                                         │ one transaction:
//!                                                                         │  the run is running on this device
//!                                                                         │  and has dispatched < MAX_TASKS_PER_RUN,
//!                                                                         │  the link accepts desktop tasks (from this session),
//!                                                                         │  the key is new (or the same request: replay)
//!                                                                         ▼
//!  chat ◄──list / claim / submit (an ordinary linked-chat task, with its origin)──
//!     submit ──► the task ends ──► ring {"ring":"task"} ──► relay reads it ──► Graph
//! ```
//!
//! The task is an ordinary [`Task`] with an [`TaskOrigin`]: it is listed, claimed, fenced,
//! submitted and expired like any other. What is different is decided here:
//!
//! - **Consent.** A link accepts tasks from desktops only when the owner said so
//!   ([`DesktopTasks`], off by default), optionally only from named Graph sessions. A refusal
//!   reads the same whether the link is missing, another owner's, deleted or not accepting
//!   ([`DispatchRejection::LinkRefuses`]): a device learns nothing of links it may not use.
//! - **The run is the capability.** A dispatch names the run it comes from; it is accepted only
//!   while that run is running on the asking device. A device reads only the tasks it
//!   dispatched ([`Task::dispatched_by`]), and when the run ends its open tasks are cancelled.
//! - **Time.** A dispatched task expires [`DEFAULT_DISPATCH_TTL`] after it was assigned unless
//!   the Graph asks for less ([`MIN_DISPATCH_TTL`] at least); never more than the owner tasks'
//!   24 hours.
//! - **Bounds.** At most [`MAX_TASKS_PER_RUN`] tasks over a run's life (counted in the run's
//!   own record, in the same transaction), at most [`MAX_TASKS_PER_DEVICE_HOUR`] new tasks per
//!   device and hour, objectives as long as the owner's.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::errors::{IDEMPOTENCY_MISMATCH, InputError};
use crate::ids::{ChatLinkId, CommandId, GraphSessionId, IdempotencyKey, OwnerId};
use crate::runs::sha256_hex;
use crate::tasks::{Task, TaskStatus, validate_objective};

/// How long a dispatched task waits for its chat by default: 30 minutes.
pub use crate::limits::DEFAULT_DISPATCH_TTL;
/// The shortest expiry a Graph may ask for.
pub const MIN_DISPATCH_TTL: Duration = Duration::from_secs(60);
/// Most tasks one run hands to chats over its life.
pub const MAX_TASKS_PER_RUN: u32 = 20;
/// Most new tasks one desktop hands to chats per hour (all its runs together).
pub const MAX_TASKS_PER_DEVICE_HOUR: u32 = 200;
/// Most Graph sessions a link's [`DesktopTasks`] may name.
pub const MAX_DESKTOP_SESSIONS: usize = 20;

pub use crate::tasks::TaskOrigin;

/// A chat link's consent to tasks from the owner's desktops. Absent on a link: it accepts none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DesktopTasks {
    /// Only runs of these Graph sessions may ask; empty: any of the owner's sessions.
    #[serde(default)]
    pub sessions: Vec<GraphSessionId>,
}

impl DesktopTasks {
    /// Whether a run of `session` may ask.
    pub fn admits(&self, session: &GraphSessionId) -> bool {
        self.sessions.is_empty() || self.sessions.contains(session)
    }

    /// Checks the owner's setting: at most [`MAX_DESKTOP_SESSIONS`] sessions, none twice.
    ///
    /// # Errors
    /// [`InputError`] on `sessions`.
    pub fn validate(&self) -> Result<(), InputError> {
        if self.sessions.len() > MAX_DESKTOP_SESSIONS {
            return Err(InputError::new(
                "sessions",
                format!("at most {MAX_DESKTOP_SESSIONS} Graph sessions (got {})", self.sessions.len()),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = self.sessions.iter().find(|s| !seen.insert(s.as_str())) {
            return Err(InputError::new("sessions", format!("{dup} is named twice")));
        }
        Ok(())
    }

    /// The one-attribute form both stores keep: `*` for any session, else `,gs_…,gs_…,` (a
    /// session id holds no comma, so `,<id>,` is found only for a named one).
    pub fn encode(&self) -> String {
        if self.sessions.is_empty() {
            return ANY_SESSION.to_owned();
        }
        let mut out = String::from(",");
        for s in &self.sessions {
            out.push_str(s.as_str());
            out.push(',');
        }
        out
    }

    /// The inverse of [`DesktopTasks::encode`]; `None` for something it never wrote.
    pub fn decode(stored: &str) -> Option<Self> {
        if stored == ANY_SESSION {
            return Some(Self::default());
        }
        let inner = stored.strip_prefix(',')?.strip_suffix(',')?;
        let sessions =
            inner.split(',').map(|s| GraphSessionId::parse("sessions", s).ok()).collect::<Option<Vec<_>>>()?;
        Some(Self { sessions })
    }
}

/// [`DesktopTasks::encode`] of "any session".
pub const ANY_SESSION: &str = "*";

/// What the encoded [`DesktopTasks`] must contain to admit `session` (with [`ANY_SESSION`]).
pub fn session_marker(session: &GraphSessionId) -> String {
    format!(",{},", session.as_str())
}

/// A desktop's request to hand a task to a chat, validated at the edge.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchTask {
    /// The device's owner.
    pub owner: OwnerId,
    /// The device whose relay asks.
    pub device_id: uuid::Uuid,
    /// The run that asks (running on that device).
    pub command_id: CommandId,
    /// The chat link asked.
    pub link_id: ChatLinkId,
    /// What to do (validated with [`validate_objective`]).
    pub objective: String,
    /// The Graph's key: the same key with the same objective is the same task.
    pub idempotency_key: IdempotencyKey,
    /// How long the chat has ([`validate_dispatch_ttl`]).
    pub ttl: Duration,
}

impl DispatchTask {
    /// sha256 over what makes two dispatches "the same": the run, the link, the objective and
    /// the expiry asked for.
    pub fn request_hash(&self) -> String {
        let canonical = serde_json::json!({
            "command_id": self.command_id.to_string(),
            "chat_link_id": self.link_id.to_string(),
            "objective": self.objective,
            "ttl_s": self.ttl.as_secs(),
        });
        sha256_hex(canonical.to_string().as_bytes())
    }

    /// The idempotency scope: keys are the device's own (two desktops never collide).
    pub fn record_principal(&self) -> String {
        format!("{}/{}", self.owner.as_str(), self.device_id)
    }

    /// The task this dispatch creates at `now` for a run of `session`: queued, expiring
    /// [`DispatchTask::ttl`] after `now`, with its origin.
    pub fn task(&self, session: &GraphSessionId, now: Timestamp) -> Task {
        let mut t = Task::assigned(
            &crate::tasks::AssignTask {
                owner: self.owner.clone(),
                link_id: self.link_id,
                objective: self.objective.clone(),
                idempotency_key: self.idempotency_key.clone(),
            },
            now,
            &crate::limits::Policy::default(),
        );
        t.expires_at = now.plus(self.ttl);
        t.origin = Some(TaskOrigin {
            device_id: self.device_id,
            graph_session_id: session.clone(),
            command_id: self.command_id,
        });
        t
    }
}

/// Checks the expiry a Graph asks for: [`MIN_DISPATCH_TTL`] to `max` (the deployment's
/// dispatch TTL, itself never above the owner tasks' TTL), in whole seconds.
///
/// # Errors
/// [`InputError`] on `expires_in_s`.
pub fn validate_dispatch_ttl(seconds: u64, max: Duration) -> Result<Duration, InputError> {
    if seconds < MIN_DISPATCH_TTL.as_secs() || seconds > max.as_secs() {
        return Err(InputError::new(
            "expires_in_s",
            format!("must be {} to {} seconds (got {seconds})", MIN_DISPATCH_TTL.as_secs(), max.as_secs()),
        ));
    }
    Ok(Duration::from_secs(seconds))
}

/// Checks a dispatch's objective: the owner's rule ([`validate_objective`]).
///
/// # Errors
/// [`InputError`] on `objective`.
pub fn validate_dispatch_objective(objective: &str) -> Result<(), InputError> {
    validate_objective(objective)
}

/// Outcome of a dispatch.
#[derive(Debug, Clone, PartialEq)]
pub enum DispatchOutcome {
    /// A new task.
    Assigned(Task),
    /// The same key with the same request: the task from before.
    Replayed(Task),
    /// Nothing written.
    Rejected(DispatchRejection),
}

/// Why a dispatch was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DispatchRejection {
    /// The key was used with another request.
    #[error("{}", IDEMPOTENCY_MISMATCH)]
    IdempotencyMismatch,
    /// No link of this owner accepts tasks from this run: missing, another owner's, deleted,
    /// not accepting desktop tasks, or not from this Graph session (never told apart).
    #[error("{}", LINK_REFUSES)]
    LinkRefuses,
    /// The run is not running on this device (never was, or ended: its capability is dead).
    #[error("{}", RUN_NOT_RUNNING)]
    RunNotRunning,
    /// The run handed out [`MAX_TASKS_PER_RUN`] tasks already.
    #[error("{}", TOO_MANY_FOR_RUN)]
    TooManyForRun,
    /// The device handed out [`MAX_TASKS_PER_DEVICE_HOUR`] tasks this hour.
    #[error("{}", TOO_MANY_FOR_DEVICE)]
    TooManyForDevice,
}

/// What a refused link reads (the same for every reason).
pub const LINK_REFUSES: &str = "chat_link_id: no chat link of this owner accepts tasks from this Graph";
/// What a dispatch from a run that is not running on the device reads.
pub const RUN_NOT_RUNNING: &str = "command_id: the run is not running on this desktop";
/// What a run past [`MAX_TASKS_PER_RUN`] reads.
pub const TOO_MANY_FOR_RUN: &str = "command_id: a run hands at most 20 tasks to chats";
/// What a device past [`MAX_TASKS_PER_DEVICE_HOUR`] reads.
pub const TOO_MANY_FOR_DEVICE: &str = "too many tasks handed to chats from this desktop this hour; try again later";

/// Whether a stored run admits a dispatch from `device` now: it is that device's and running.
pub fn run_admits(run: &crate::runs::Run, owner: &OwnerId, device: uuid::Uuid) -> bool {
    &run.owner == owner && run.status == crate::runs::RunStatus::Running && run.device_id == Some(device)
}

/// The counter key of a device's dispatches in the hour ending at the returned time
/// (`store::LimitAttempts`).
pub fn device_hour(device: uuid::Uuid, now: Timestamp) -> (String, Timestamp) {
    const HOUR_MS: i64 = 3_600_000;
    let end = (now.as_millis() / HOUR_MS + 1) * HOUR_MS;
    (format!("dispatch#{device}"), Timestamp::from_millis(end))
}

impl Task {
    /// Whether `device` of `owner` dispatched this task (what a relay may read).
    pub fn dispatched_by(&self, owner: &OwnerId, device: uuid::Uuid) -> bool {
        &self.owner == owner && self.origin.as_ref().is_some_and(|o| o.device_id == device)
    }
}

/// A dispatched task as the desktop reads it: enough to hand the Graph its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DispatchedTask {
    /// The task.
    pub task_id: String,
    /// The link it went to.
    pub chat_link_id: String,
    /// queued, claimed, completed, failed, cancelled or expired.
    pub status: TaskStatus,
    /// The chat's result, once submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// When it expires (RFC 3339).
    pub expires_at: String,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

impl DispatchedTask {
    /// The view of `t` at `now` (its status computed: an open task past its expiry reads
    /// `expired`).
    pub fn of(t: &Task, now: Timestamp) -> Self {
        Self {
            task_id: t.task_id.to_string(),
            chat_link_id: t.link_id.to_string(),
            status: t.status_at(now),
            result: t.result.clone(),
            expires_at: t.expires_at.rfc3339(),
            finished_at: t.finished_at.map(Timestamp::rfc3339),
        }
    }

    /// Whether the Graph's wait is over.
    pub fn ended(&self) -> bool {
        !self.status.is_open()
    }
}

/// The relay API's dispatch request (`POST …/tasks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DispatchRequest {
    /// The run asking (running on this desktop).
    pub command_id: String,
    /// The chat link asked.
    pub chat_link_id: String,
    /// What to do (1 to 10,000 characters).
    pub objective: String,
    /// The Graph's key (8 to 128 characters): the same key and request give the same task.
    pub idempotency_key: String,
    /// Seconds the chat has (60 up to the deployment's limit, 1,800 by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<u64>,
}

/// The relay API's answer to a dispatch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DispatchResponse {
    /// The task as it is now.
    pub task: DispatchedTask,
    /// The same key and request were seen before: this is that task.
    pub replayed: bool,
}

/// Whether a task's change ends a dispatched task: the desktop's doorbell rings for it.
pub fn ring_for_task(old: Option<&Task>, new: &Task) -> Option<crate::doorbell::RingFor> {
    let origin = new.origin.as_ref()?;
    let ended = !new.status.is_open() && old.is_none_or(|o| o.status.is_open());
    ended.then(|| crate::doorbell::RingFor {
        owner: new.owner.clone(),
        to: crate::doorbell::Recipients::Device(origin.device_id),
        ring: crate::doorbell::Ring::Task { task_id: new.task_id, command_id: origin.command_id },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(n: u8) -> GraphSessionId {
        GraphSessionId::parse("s", &format!("gs_{}", format!("{n:02x}").repeat(16))).unwrap()
    }

    #[test]
    fn the_consent_encodes_to_one_attribute_and_back() {
        let any = DesktopTasks::default();
        assert_eq!(any.encode(), "*");
        assert_eq!(DesktopTasks::decode("*"), Some(any.clone()));
        let two = DesktopTasks { sessions: vec![session(1), session(2)] };
        let stored = two.encode();
        assert!(stored.contains(&session_marker(&session(2))));
        assert!(!stored.contains(&session_marker(&session(3))));
        assert_eq!(DesktopTasks::decode(&stored), Some(two.clone()));
        assert!(two.admits(&session(1)) && !two.admits(&session(3)) && any.admits(&session(3)));
        assert_eq!(DesktopTasks::decode("gs_x"), None);
    }

    #[test]
    fn the_consent_names_each_session_once_and_few() {
        let dup = DesktopTasks { sessions: vec![session(1), session(1)] };
        assert_eq!(dup.validate().unwrap_err().field, "sessions");
        let many = DesktopTasks { sessions: (0..=MAX_DESKTOP_SESSIONS as u8).map(session).collect() };
        assert!(many.validate().is_err());
        assert!(DesktopTasks { sessions: vec![session(1)] }.validate().is_ok());
    }

    #[test]
    fn the_expiry_is_a_minute_to_the_deployments_limit() {
        assert!(validate_dispatch_ttl(59, DEFAULT_DISPATCH_TTL).is_err());
        assert_eq!(validate_dispatch_ttl(60, DEFAULT_DISPATCH_TTL).unwrap(), MIN_DISPATCH_TTL);
        assert!(validate_dispatch_ttl(1800, DEFAULT_DISPATCH_TTL).is_ok());
        assert_eq!(validate_dispatch_ttl(1801, DEFAULT_DISPATCH_TTL).unwrap_err().field, "expires_in_s");
    }

    #[test]
    fn device_hours_are_fixed_windows() {
        let d = uuid::Uuid::nil();
        let (k, end) = device_hour(d, Timestamp::from_millis(3_600_000 * 5 + 10));
        assert_eq!((k.as_str(), end.as_millis()), ("dispatch#00000000-0000-0000-0000-000000000000", 3_600_000 * 6));
    }
}
