//! Linked chat tasks: work the owner assigns to one host conversation (SPEC §6).
//!
//! ```text
//!          claim (one conditional write)      submit (current claim_id only)
//!  queued ─────────────────────────────► claimed ─────────────────────────► completed | failed
//!    │  ▲                                   │ │
//!    │  └── lease_until passed: the next claim takes over with a new claim_id;
//!    │      the old claim's submit is rejected (fencing)
//!    └─ cancel (owner) ─► cancelled ◄───────┘ │
//!    └─ now ≥ expires_at (24 h after assignment) ─► reads `expired` (computed, never written)
//! ```

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::errors::{InputError, NOT_CLAIMABLE_MISSING, STALE_CLAIM, TASK_CANCELLED};
use crate::ids::{ChatLinkId, ClaimId, OwnerId, TaskId};
use crate::limits::{MAX_OBJECTIVE_CHARS, MAX_RESULT_BYTES, MAX_TASK_RESULT_CHARS, Policy, char_len};
use crate::runs::sha256_hex;

/// A task's status as callers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Waiting for the host chat.
    Queued,
    /// Claimed by the host chat.
    Claimed,
    /// Finished with a result.
    Completed,
    /// Finished as failed.
    Failed,
    /// Cancelled by the owner.
    Cancelled,
    /// Not finished within 24 h of assignment.
    Expired,
}

impl TaskStatus {
    /// The stored and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Claimed => "claimed",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }

    /// Every status, in lifecycle order.
    pub const ALL: [Self; 6] =
        [Self::Queued, Self::Claimed, Self::Completed, Self::Failed, Self::Cancelled, Self::Expired];

    /// Parses the stored spelling (the inverse of [`TaskStatus::as_str`]).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The label the owner's panel shows.
    pub fn label(self) -> &'static str {
        match self {
            Self::Queued => "Waiting for host chat",
            Self::Claimed => "Claimed by host chat",
            Self::Completed => "Completed",
            Self::Failed => "Failed",
            Self::Cancelled => "Cancelled",
            Self::Expired => "Expired",
        }
    }

    /// Whether the task is still open (queued or claimed).
    pub fn is_open(self) -> bool {
        matches!(self, Self::Queued | Self::Claimed)
    }
}

/// The statuses a host chat may submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SubmitStatus {
    /// The work is done.
    Completed,
    /// The work could not be done.
    Failed,
}

impl From<SubmitStatus> for TaskStatus {
    fn from(s: SubmitStatus) -> Self {
        match s {
            SubmitStatus::Completed => Self::Completed,
            SubmitStatus::Failed => Self::Failed,
        }
    }
}

/// Where a task a desktop's Graph handed to a chat (`crate::dispatch`) came from: the desktop, the Graph session and the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TaskOrigin {
    /// The desktop whose relay asked.
    pub device_id: uuid::Uuid,
    /// The Graph session of the run.
    pub graph_session_id: crate::ids::GraphSessionId,
    /// The run that asked.
    pub command_id: crate::ids::CommandId,
}

/// A stored task.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// UUIDv7: sorts by assignment time.
    pub task_id: TaskId,
    /// The only link that can see or claim it.
    pub link_id: ChatLinkId,
    /// The owner who assigned it.
    pub owner: OwnerId,
    /// What to do.
    pub objective: String,
    /// Stored status (never `expired`; see [`Task::status_at`]).
    pub status: TaskStatus,
    /// When it was assigned.
    pub created_at: Timestamp,
    /// 24 h after assignment.
    pub expires_at: Timestamp,
    /// The current claim (the fencing token).
    pub claim_id: Option<ClaimId>,
    /// The current claim holds the task until then.
    pub lease_until: Option<Timestamp>,
    /// When the current claim was made.
    pub claimed_at: Option<Timestamp>,
    /// The submitted result.
    pub result: Option<String>,
    /// sha256(status + result) of the accepted submit.
    pub result_hash: Option<String>,
    /// When it reached a terminal status.
    pub finished_at: Option<Timestamp>,
    /// The owner deleted its chat link: the task is invisible to every chat (it reads as
    /// missing, exactly like an unknown task) and, if it was open, it was cancelled.
    pub link_deleted: bool,
    /// Where it came from when a desktop's Graph handed it over (`crate::dispatch`); `None`
    /// for the owner's own tasks.
    pub origin: Option<TaskOrigin>,
}

/// One page of a link's tasks, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPage {
    /// The tasks of this page.
    pub tasks: Vec<Task>,
    /// Pass this as `before` to get the next page; `None` on the last page.
    pub next: Option<TaskId>,
}

impl Task {
    /// A freshly assigned task: queued, expiring `policy.task_ttl` after `now`.
    pub fn assigned(req: &AssignTask, now: Timestamp, policy: &Policy) -> Self {
        Self {
            task_id: TaskId::generate(),
            link_id: req.link_id,
            owner: req.owner.clone(),
            objective: req.objective.clone(),
            status: TaskStatus::Queued,
            created_at: now,
            expires_at: now.plus(policy.task_ttl),
            claim_id: None,
            lease_until: None,
            claimed_at: None,
            result: None,
            result_hash: None,
            finished_at: None,
            link_deleted: false,
            origin: None,
        }
    }

    /// Whether a chat of `owner` asking through `link` may see this task at all: same owner,
    /// same link, and the link not deleted. Everything else reads as missing.
    pub fn visible_to(&self, owner: &OwnerId, link: &ChatLinkId) -> bool {
        &self.owner == owner && &self.link_id == link && !self.link_deleted
    }

    /// The status at `now`: an open task at or past `expires_at` is `expired`.
    pub fn status_at(&self, now: Timestamp) -> TaskStatus {
        if self.status.is_open() && now >= self.expires_at { TaskStatus::Expired } else { self.status }
    }
}

/// sha256(status + result), as stored with an accepted submit.
pub fn result_hash(status: SubmitStatus, result: &str) -> String {
    let status = TaskStatus::from(status).as_str();
    let mut bytes = Vec::with_capacity(status.len() + result.len());
    bytes.extend_from_slice(status.as_bytes());
    bytes.extend_from_slice(result.as_bytes());
    sha256_hex(&bytes)
}

/// Checks an objective: 1 to 10,000 characters, not blank.
///
/// # Errors
/// [`InputError`] on `objective`.
pub fn validate_objective(objective: &str) -> Result<(), InputError> {
    let n = char_len(objective);
    if objective.trim().is_empty() || n > MAX_OBJECTIVE_CHARS {
        return Err(InputError::new(
            "objective",
            format!("must be 1 to {MAX_OBJECTIVE_CHARS} characters and not blank (got {n})"),
        ));
    }
    Ok(())
}

/// Checks a submitted result: at most 100,000 characters and 340,000 UTF-8 bytes.
///
/// # Errors
/// [`InputError`] on `result`.
pub fn validate_task_result(result: &str) -> Result<(), InputError> {
    let n = char_len(result);
    if n > MAX_TASK_RESULT_CHARS || result.len() > MAX_RESULT_BYTES {
        return Err(InputError::new(
            "result",
            format!(
                "must be at most {MAX_TASK_RESULT_CHARS} characters and {MAX_RESULT_BYTES} UTF-8 bytes (got {n} characters, {} bytes)",
                result.len()
            ),
        ));
    }
    Ok(())
}

/// A host chat's submit, validated at the edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitTask {
    /// The owner the chat acts for.
    pub owner: OwnerId,
    /// The chat link submitting.
    pub link_id: ChatLinkId,
    /// The task.
    pub task_id: TaskId,
    /// The claim presented (the fencing token).
    pub claim_id: ClaimId,
    /// How the work ended.
    pub status: SubmitStatus,
    /// The result text (validated with [`validate_task_result`]).
    pub result: String,
}

impl SubmitTask {
    /// sha256(status + result): what an accepted submit stores and a replay must match.
    pub fn result_hash(&self) -> String {
        result_hash(self.status, &self.result)
    }
}

/// Outcome of a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// A new claim (first claim, or a takeover of an expired lease).
    Claimed {
        /// The fencing token.
        claim_id: ClaimId,
        /// The claim holds the task until then.
        lease_until: Timestamp,
    },
    /// The same link claimed again while its claim is live: the same claim.
    Replayed {
        /// The existing claim.
        claim_id: ClaimId,
        /// Its lease.
        lease_until: Timestamp,
    },
    /// Nothing changed.
    Rejected(ClaimRejection),
}

/// Why a claim failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClaimRejection {
    /// Unknown task, or a task of another link (never confirm it exists).
    #[error("{}", NOT_CLAIMABLE_MISSING)]
    Missing,
    /// Exists but is not claimable now.
    #[error("not claimable: {}", .0.as_str())]
    NotClaimable(TaskStatus),
}

/// Outcome of a submit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// Accepted: the task is finished.
    Accepted,
    /// The identical submit (same claim, same status and result) was accepted before.
    Replayed,
    /// Nothing changed.
    Rejected(SubmitRejection),
}

/// Why a submit (or an artifact upload) was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitRejection {
    /// Unknown task, or a task of another link.
    #[error("rejected: task not found")]
    Missing,
    /// The claim was taken over after its lease ran out (or finished by another claim).
    #[error("{}", STALE_CLAIM)]
    StaleClaim,
    /// The claim id never held this task.
    #[error("rejected: claim_id does not hold this task; claim it first")]
    NotClaimed,
    /// The owner cancelled the task.
    #[error("{}", TASK_CANCELLED)]
    Cancelled,
    /// The task expired (24 h after assignment).
    #[error("rejected: task is expired")]
    Expired,
    /// Finished: no more artifacts can be attached.
    #[error("rejected: task is already finished")]
    Finished,
    /// Finished by this claim with a different result.
    #[error("rejected: task is already finished with a different result")]
    DifferentResult,
}

/// Outcome of the owner's cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelTaskOutcome {
    /// Was open; now cancelled.
    Cancelled,
    /// Already terminal or expired: its status, unchanged.
    Unchanged(TaskStatus),
    /// Unknown, or not this owner's.
    NotFound,
}

/// A task assignment request from the owner.
#[derive(Debug, Clone, PartialEq)]
pub struct AssignTask {
    /// The owner assigning it.
    pub owner: OwnerId,
    /// The link it goes to.
    pub link_id: ChatLinkId,
    /// What to do (validated with [`validate_objective`]).
    pub objective: String,
    /// The panel's key, kept while the objective text is unchanged.
    pub idempotency_key: crate::ids::IdempotencyKey,
}

impl AssignTask {
    /// sha256 over what makes two assignments "the same": the link and the objective.
    pub fn request_hash(&self) -> String {
        let canonical = serde_json::json!({ "chat_link_id": self.link_id.to_string(), "objective": self.objective });
        sha256_hex(canonical.to_string().as_bytes())
    }
}

/// Outcome of an assignment.
#[derive(Debug, Clone, PartialEq)]
pub enum AssignOutcome {
    /// A new task.
    Assigned(Task),
    /// Same key, same objective: the task from before.
    Replayed(Task),
    /// Nothing written.
    Rejected(AssignRejection),
}

/// Why an assignment was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AssignRejection {
    /// The key was used with another objective (or link).
    #[error("{}", crate::errors::IDEMPOTENCY_MISMATCH)]
    IdempotencyMismatch,
    /// The link is not the owner's.
    #[error("chat_link_id: no such chat link")]
    LinkNotFound,
}

/// The record of an uploaded artifact (the bytes live in object storage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactRecord {
    /// The link of the task.
    pub link_id: ChatLinkId,
    /// The task it belongs to.
    pub task_id: TaskId,
    /// The claim that uploaded it.
    pub claim_id: ClaimId,
    /// Stable across retries (chosen by the caller).
    pub artifact_id: String,
    /// File name.
    pub name: String,
    /// MIME type.
    pub content_type: String,
    /// sha256 of the bytes.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// Where the bytes are stored.
    pub object_key: String,
}

/// Whether an upload may store its bytes, decided before it does (so a refused upload leaves
/// no object behind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArtifactCheck {
    /// The claim holds the task and the artifact id is new: store the bytes, then record them.
    Proceed,
    /// The task holds as many artifacts, or as many bytes, as it may.
    OverCap(ArtifactCap),
    /// The same artifact id with the same bytes is recorded already: nothing to store.
    Replayed,
    /// The artifact id is recorded with other bytes.
    DifferentContent,
    /// Fencing refuses it.
    Rejected(SubmitRejection),
}

/// What a task's artifacts use already.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArtifactUsage {
    /// How many.
    pub count: u32,
    /// Their bytes together.
    pub bytes: u64,
}

/// A cap an upload would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactCap {
    /// [`crate::limits::MAX_ARTIFACTS_PER_TASK`].
    #[error("rejected: a task holds at most {} artifacts", crate::limits::MAX_ARTIFACTS_PER_TASK)]
    Count,
    /// [`crate::limits::MAX_ARTIFACT_BYTES_PER_TASK`].
    #[error("rejected: a task's artifacts hold at most {} MiB together", crate::limits::MAX_ARTIFACT_BYTES_PER_TASK / (1024 * 1024))]
    Bytes,
}

impl ArtifactUsage {
    /// Whether one more artifact of `size` bytes fits.
    ///
    /// # Errors
    /// The cap it would pass.
    pub fn admits(&self, size: u64) -> Result<(), ArtifactCap> {
        if self.count >= crate::limits::MAX_ARTIFACTS_PER_TASK {
            return Err(ArtifactCap::Count);
        }
        if self.bytes.saturating_add(size) > crate::limits::MAX_ARTIFACT_BYTES_PER_TASK {
            return Err(ArtifactCap::Bytes);
        }
        Ok(())
    }
}

/// Decides an upload from the artifact's record (if any), the task as it is now and what its
/// artifacts use.
pub fn check_artifact(
    existing_sha: Option<&str>,
    task: Option<&Task>,
    owner: &OwnerId,
    record: &ArtifactRecord,
    now: Timestamp,
    usage: ArtifactUsage,
) -> ArtifactCheck {
    let visible = task.filter(|t| t.visible_to(owner, &record.link_id));
    match existing_sha {
        Some(sha) if visible.is_some() => {
            return if sha == record.sha256 { ArtifactCheck::Replayed } else { ArtifactCheck::DifferentContent };
        }
        _ => {}
    }
    let holds = visible.is_some_and(|t| t.status_at(now) == TaskStatus::Claimed && t.claim_id == Some(record.claim_id));
    if holds {
        return match usage.admits(record.size) {
            Ok(()) => ArtifactCheck::Proceed,
            Err(cap) => ArtifactCheck::OverCap(cap),
        };
    }
    match classify_submit(visible, owner, &record.link_id, &record.claim_id, None, now) {
        SubmitOutcome::Rejected(why) => ArtifactCheck::Rejected(why),
        _ => ArtifactCheck::Rejected(SubmitRejection::StaleClaim),
    }
}

/// Outcome of recording an artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArtifactOutcome {
    /// Recorded.
    Recorded,
    /// The task holds as many artifacts, or as many bytes, as it may: nothing recorded.
    OverCap(ArtifactCap),
    /// The same artifact id with the same bytes was recorded before.
    Replayed,
    /// Same artifact id, different bytes.
    DifferentContent,
    /// Fencing rules refused it.
    Rejected(SubmitRejection),
}

/// Classifies a failed claim from the task's old image (`None`: no such item). The same link
/// asking again while its claim is live gets that claim back.
pub fn classify_claim(old: Option<&Task>, owner: &OwnerId, link: &ChatLinkId, now: Timestamp) -> ClaimOutcome {
    let Some(task) = old.filter(|t| t.visible_to(owner, link)) else {
        return ClaimOutcome::Rejected(ClaimRejection::Missing);
    };
    let status = task.status_at(now);
    match (status, task.claim_id, task.lease_until) {
        (TaskStatus::Claimed, Some(claim_id), Some(lease_until)) if lease_until > now => {
            ClaimOutcome::Replayed { claim_id, lease_until }
        }
        _ => ClaimOutcome::Rejected(ClaimRejection::NotClaimable(status)),
    }
}

/// Classifies a failed submit (or artifact fencing check) from the task's old image.
/// `hash` is `None` for artifact uploads, which have no result of their own.
pub fn classify_submit(
    old: Option<&Task>,
    owner: &OwnerId,
    link: &ChatLinkId,
    claim: &ClaimId,
    hash: Option<&str>,
    now: Timestamp,
) -> SubmitOutcome {
    let Some(task) = old.filter(|t| t.visible_to(owner, link)) else {
        return SubmitOutcome::Rejected(SubmitRejection::Missing);
    };
    let ours = task.claim_id.as_ref() == Some(claim);
    let rejection = match task.status_at(now) {
        TaskStatus::Cancelled => SubmitRejection::Cancelled,
        TaskStatus::Completed | TaskStatus::Failed if ours => match hash {
            Some(h) if task.result_hash.as_deref() == Some(h) => return SubmitOutcome::Replayed,
            Some(_) => SubmitRejection::DifferentResult,
            None => SubmitRejection::Finished,
        },
        TaskStatus::Expired => SubmitRejection::Expired,
        TaskStatus::Queued => SubmitRejection::NotClaimed,
        TaskStatus::Claimed if ours => {
            // The write's condition held for this image; only a race with another write can
            // land here. Report it as the claim being taken over, which is what it was.
            SubmitRejection::StaleClaim
        }
        TaskStatus::Claimed | TaskStatus::Completed | TaskStatus::Failed => SubmitRejection::StaleClaim,
    };
    SubmitOutcome::Rejected(rejection)
}

/// Classifies a failed owner cancel.
pub fn classify_cancel_task(
    old: Option<&Task>,
    owner: &OwnerId,
    link: &ChatLinkId,
    now: Timestamp,
) -> CancelTaskOutcome {
    match old.filter(|t| t.visible_to(owner, link)) {
        None => CancelTaskOutcome::NotFound,
        Some(t) => CancelTaskOutcome::Unchanged(t.status_at(now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_rejections_read_as_the_spec_says() {
        assert_eq!(ClaimRejection::Missing.to_string(), "not claimable: missing");
        assert_eq!(ClaimRejection::NotClaimable(TaskStatus::Completed).to_string(), "not claimable: completed");
        assert_eq!(SubmitRejection::StaleClaim.to_string(), "rejected: stale claim, task was re-claimed");
        assert_eq!(SubmitRejection::Cancelled.to_string(), "rejected: task is cancelled");
    }

    #[test]
    fn result_hash_covers_status_and_result() {
        assert_ne!(result_hash(SubmitStatus::Completed, "x"), result_hash(SubmitStatus::Failed, "x"));
        assert_eq!(result_hash(SubmitStatus::Completed, "x"), result_hash(SubmitStatus::Completed, "x"));
    }
}
