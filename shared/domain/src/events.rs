//! Events (SPEC §8): what a state change means to the outside, derived from the item as it was
//! and as it is — never invented by a handler, never lost by one.
//!
//! [`derive_task`] and [`derive_run`] are pure: the cloud's stream publisher feeds them the old
//! and new images of every changed item, the embedded store feeds them the rows it is changing,
//! inside the same transaction. The same change always yields the same event id (a hash of what
//! changed, never of when it was observed), so a redelivered event is recognisable, and the
//! cloud and the local server agree on ids.
//!
//! | change | event |
//! |---|---|
//! | a task appears | `task.assigned` |
//! | a task gets a claim (first, or a takeover after the lease ran out) | `task.claimed` (per claim id) |
//! | a task is submitted | `task.completed` / `task.failed` |
//! | a task is cancelled (by the owner, or with its deleted chat link) | `task.cancelled` |
//! | a run is queued | `run.queued` |
//! | a run is started by the relay | `run.started` (per execution id) |
//! | a run ends | `run.completed` / `run.failed` / `run.cancelled` |
//! | the desktop watch finds a desktop silent past its window while a run waits for it | `desktop.offline` |
//! | that desktop syncs again | `desktop.online` |
//!
//! Nothing else emits: heartbeats, cancel flags, TTL updates, a deleted link's finished tasks
//! being hidden, or expiry (which is computed on read and never written). Events carry ids and
//! states, never an objective or a result (the owner API serves those to whoever may see them).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clock::Timestamp;
use crate::devices::Device;
use crate::runs::{Run, RunStatus};
use crate::tasks::{Task, TaskStatus};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    /// The owner assigned a task to a chat link.
    #[serde(rename = "task.assigned")]
    TaskAssigned,
    /// A chat claimed a task.
    #[serde(rename = "task.claimed")]
    TaskClaimed,
    /// A chat submitted a task as completed.
    #[serde(rename = "task.completed")]
    TaskCompleted,
    /// A chat submitted a task as failed.
    #[serde(rename = "task.failed")]
    TaskFailed,
    /// The owner cancelled a task (or deleted its chat link).
    #[serde(rename = "task.cancelled")]
    TaskCancelled,
    /// An agent queued a Graph run.
    #[serde(rename = "run.queued")]
    RunQueued,
    /// The desktop started a run.
    #[serde(rename = "run.started")]
    RunStarted,
    /// A run completed.
    #[serde(rename = "run.completed")]
    RunCompleted,
    /// A run failed.
    #[serde(rename = "run.failed")]
    RunFailed,
    /// A run was cancelled.
    #[serde(rename = "run.cancelled")]
    RunCancelled,
    /// A desktop that had work queued for it stopped syncing.
    #[serde(rename = "desktop.offline")]
    DesktopOffline,
    /// That desktop synced again.
    #[serde(rename = "desktop.online")]
    DesktopOnline,
}

impl EventType {
    /// The wire spelling, e.g. `task.claimed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TaskAssigned => "task.assigned",
            Self::TaskClaimed => "task.claimed",
            Self::TaskCompleted => "task.completed",
            Self::TaskFailed => "task.failed",
            Self::TaskCancelled => "task.cancelled",
            Self::RunQueued => "run.queued",
            Self::RunStarted => "run.started",
            Self::RunCompleted => "run.completed",
            Self::RunFailed => "run.failed",
            Self::RunCancelled => "run.cancelled",
            Self::DesktopOffline => "desktop.offline",
            Self::DesktopOnline => "desktop.online",
        }
    }

    /// Whether it is about a desktop (delivered to every subscribed link of the owner: a
    /// desktop serves all the owner's projects).
    pub fn is_desktop(self) -> bool {
        matches!(self, Self::DesktopOffline | Self::DesktopOnline)
    }

    /// Whether it is about a chat task (delivered to that task's link) rather than a run
    /// (delivered to the subscribed links of the run's project).
    pub fn is_task(self) -> bool {
        matches!(
            self,
            Self::TaskAssigned | Self::TaskClaimed | Self::TaskCompleted | Self::TaskFailed | Self::TaskCancelled
        )
    }
}

/// The ids and state an event carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventData {
    /// The owner whose data changed.
    pub owner: String,
    /// The status after the change.
    pub status: String,
    /// The chat link (task events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_link_id: Option<String>,
    /// The task (task events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The claim (`task.claimed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_id: Option<String>,
    /// The project (run events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// The run (run events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<String>,
    /// The graph session (run events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_session_id: Option<String>,
    /// The desktop (desktop events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    /// Where a task came from when a desktop's Graph handed it to the chat (task events of
    /// such tasks): the desktop, the Graph session and the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Box<crate::dispatch::TaskOrigin>>,
}

/// One event, as queued and as delivered (the webhook body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Stable: the same change always has the same id (`evt_` + 32 hex).
    pub id: String,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// When the change happened (RFC 3339, from the item itself).
    pub timestamp: String,
    /// Ids and state.
    pub data: EventData,
}

impl Event {
    /// The event's JSON (the webhook body).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// How the last delivery to a chat link's subscription went (shown next to the subscription
/// line in the panel).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryOutcome {
    /// The event delivered (or tried).
    pub event_id: String,
    /// Its type.
    pub event_type: EventType,
    /// When the attempt ended.
    pub at: Timestamp,
    /// Whether the receiver answered 2xx.
    pub ok: bool,
    /// `HTTP 200`, `HTTP 503`, `timed out`, `refused: …` (never the receiver's body).
    pub detail: String,
}

/// An event waiting in the embedded store's outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// The event.
    pub event: Event,
    /// Delivery attempts so far.
    pub attempts: u32,
}

/// `evt_` + the first 32 hex digits of sha256 over the length-prefixed parts.
fn event_id(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    format!("evt_{}", &hex::encode(h.finalize())[..32])
}

fn task_event(kind: EventType, t: &Task, at: Timestamp, claim: Option<String>) -> Event {
    let task_id = t.task_id.to_string();
    let mut parts = vec![kind.as_str(), task_id.as_str()];
    if let Some(c) = &claim {
        parts.push(c.as_str());
    }
    Event {
        id: event_id(&parts),
        kind,
        timestamp: at.rfc3339(),
        data: EventData {
            owner: t.owner.to_string(),
            status: t.status.as_str().to_owned(),
            chat_link_id: Some(t.link_id.to_string()),
            task_id: Some(task_id),
            claim_id: claim,
            project_id: None,
            command_id: None,
            graph_session_id: None,
            device_id: None,
            origin: t.origin.clone().map(Box::new),
        },
    }
}

/// The events of one task change (`old`/`new`: the item before and after; `None` = absent).
pub fn derive_task(old: Option<&Task>, new: Option<&Task>) -> Vec<Event> {
    let Some(new) = new else { return Vec::new() };
    let changed_status = old.map(|o| o.status) != Some(new.status);
    let mut out = Vec::new();
    if old.is_none() {
        out.push(task_event(EventType::TaskAssigned, new, new.created_at, None));
    }
    let new_claim = new.status == TaskStatus::Claimed && old.and_then(|o| o.claim_id) != new.claim_id;
    if new_claim && let Some(claim) = new.claim_id {
        let at = new.claimed_at.unwrap_or(new.created_at);
        out.push(task_event(EventType::TaskClaimed, new, at, Some(claim.to_string())));
    }
    if changed_status {
        let kind = match new.status {
            TaskStatus::Completed => Some(EventType::TaskCompleted),
            TaskStatus::Failed => Some(EventType::TaskFailed),
            TaskStatus::Cancelled => Some(EventType::TaskCancelled),
            TaskStatus::Queued | TaskStatus::Claimed | TaskStatus::Expired => None,
        };
        if let Some(kind) = kind {
            out.push(task_event(kind, new, new.finished_at.unwrap_or(new.created_at), None));
        }
    }
    out
}

fn run_event(kind: EventType, r: &Run, at: Timestamp, extra: Option<&str>) -> Event {
    let command_id = r.command_id.to_string();
    let mut parts = vec![kind.as_str(), command_id.as_str()];
    if let Some(e) = extra {
        parts.push(e);
    }
    Event {
        id: event_id(&parts),
        kind,
        timestamp: at.rfc3339(),
        data: EventData {
            owner: r.owner.to_string(),
            status: r.status.as_str().to_owned(),
            chat_link_id: None,
            task_id: None,
            claim_id: None,
            project_id: Some(r.project_id.to_string()),
            command_id: Some(command_id),
            graph_session_id: Some(r.graph_session_id.to_string()),
            device_id: None,
            origin: None,
        },
    }
}

/// The events of one run change.
pub fn derive_run(old: Option<&Run>, new: Option<&Run>) -> Vec<Event> {
    let Some(new) = new else { return Vec::new() };
    if old.map(|o| o.status) == Some(new.status) {
        return Vec::new();
    }
    let kind = match new.status {
        RunStatus::Queued if old.is_none() => EventType::RunQueued,
        RunStatus::Queued | RunStatus::Expired => return Vec::new(),
        RunStatus::Running => EventType::RunStarted,
        RunStatus::Completed => EventType::RunCompleted,
        RunStatus::Failed => EventType::RunFailed,
        RunStatus::Cancelled => EventType::RunCancelled,
    };
    let (at, extra) = match kind {
        EventType::RunQueued => (new.queued_at, None),
        EventType::RunStarted => (new.started_at.unwrap_or(new.queued_at), new.execution_id.as_deref()),
        _ => (new.finished_at.unwrap_or(new.queued_at), None),
    };
    vec![run_event(kind, new, at, extra)]
}

/// The events of one device record change: `desktop.offline` when the watch marked it
/// (`offline_since` set), `desktop.online` when its next sync cleared the mark. The id hashes
/// the device and the mark's time, so each outage has one pair of ids.
pub fn derive_device(old: Option<&Device>, new: Option<&Device>) -> Vec<Event> {
    let (Some(old), Some(new)) = (old, new) else { return Vec::new() };
    let (kind, since, at) = match (old.offline_since, new.offline_since) {
        (None, Some(since)) => (EventType::DesktopOffline, since, since),
        (Some(since), None) if new.revoked_at.is_none() => {
            (EventType::DesktopOnline, since, new.last_seen_at.unwrap_or(since))
        }
        _ => return Vec::new(),
    };
    let device_id = new.device_id.to_string();
    let since = since.as_millis().to_string();
    Vec::from([Event {
        id: event_id(&[kind.as_str(), device_id.as_str(), since.as_str()]),
        kind,
        timestamp: at.rfc3339(),
        data: EventData {
            owner: new.owner.to_string(),
            status: if kind == EventType::DesktopOffline { "offline" } else { "online" }.to_owned(),
            chat_link_id: None,
            task_id: None,
            claim_id: None,
            project_id: None,
            command_id: None,
            graph_session_id: None,
            device_id: Some(device_id),
            origin: None,
        },
    }])
}

/// A request to look at a queued run's desktops later (`fleet::WATCH_AFTER`): the cloud's
/// publisher queues it, delayed, beside the `run.queued` event; the notifier runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesktopWatch {
    /// The run's owner.
    pub owner: String,
    /// The agent that queued it (whose run it is to read).
    pub agent: String,
    /// The run.
    pub command_id: String,
}

/// The watch a run change asks for: one when a run is queued (`run.queued`), none otherwise.
pub fn watch_of_run(old: Option<&Run>, new: Option<&Run>) -> Option<DesktopWatch> {
    let new = new.filter(|n| old.is_none() && n.status == RunStatus::Queued)?;
    Some(DesktopWatch {
        owner: new.owner.to_string(),
        agent: new.agent.as_str().to_owned(),
        command_id: new.command_id.to_string(),
    })
}

/// A message on the events queue: an event to deliver, or a desktop watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
// One message at a time is built, sent or read: its size on the stack does not matter, and a
// Box would only add an allocation to every event.
#[allow(clippy::large_enum_variant)]
pub enum QueueMessage {
    /// `{"desktop_watch": {...}}`.
    Watch {
        /// The watch.
        desktop_watch: DesktopWatch,
    },
    /// An event (its JSON is the webhook body).
    Event(Event),
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ids::{ChatLinkId, ClaimId, IdempotencyKey, OwnerId};
    use crate::limits::Policy;
    use crate::runs::{Completion, FinalStatus};
    use crate::tasks::AssignTask;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_millis(1_800_000_000_000 + s * 1000)
    }

    fn task() -> Task {
        let req = AssignTask {
            owner: OwnerId::new("o").unwrap(),
            link_id: ChatLinkId::generate(),
            objective: "secret objective text".into(),
            idempotency_key: IdempotencyKey::parse("key-00001").unwrap(),
        };
        Task::assigned(&req, at(0), &Policy::default())
    }

    fn claimed(t: &Task, s: i64) -> Task {
        Task {
            status: TaskStatus::Claimed,
            claim_id: Some(ClaimId::generate()),
            claimed_at: Some(at(s)),
            lease_until: Some(at(s + 900)),
            ..t.clone()
        }
    }

    fn kinds(events: &[Event]) -> Vec<&'static str> {
        events.iter().map(|e| e.kind.as_str()).collect()
    }

    #[test]
    fn every_task_transition_has_exactly_its_events() {
        let queued = task();
        assert_eq!(kinds(&derive_task(None, Some(&queued))), ["task.assigned"]);
        let c1 = claimed(&queued, 5);
        let claim = derive_task(Some(&queued), Some(&c1));
        assert_eq!(kinds(&claim), ["task.claimed"]);
        assert_eq!(claim[0].data.claim_id, c1.claim_id.map(|c| c.to_string()));
        assert_eq!(claim[0].timestamp, at(5).rfc3339());
        // A takeover after the lease ran out is a new claim: a new event with a new id.
        let c2 = claimed(&c1, 1_000);
        let takeover = derive_task(Some(&c1), Some(&c2));
        assert_eq!(kinds(&takeover), ["task.claimed"]);
        assert_ne!(takeover[0].id, claim[0].id);
        // The same claim again (a replay writes nothing, but an identical image must not emit).
        assert!(derive_task(Some(&c2), Some(&c2)).is_empty());
        for (status, kind) in [
            (TaskStatus::Completed, "task.completed"),
            (TaskStatus::Failed, "task.failed"),
            (TaskStatus::Cancelled, "task.cancelled"),
        ] {
            let done = Task { status, finished_at: Some(at(20)), ..c2.clone() };
            let events = derive_task(Some(&c2), Some(&done));
            assert_eq!(kinds(&events), [kind]);
            assert_eq!(events[0].data.status, status.as_str());
            // Hiding a finished task with its deleted link emits nothing more.
            let hidden = Task { link_deleted: true, ..done.clone() };
            assert!(derive_task(Some(&done), Some(&hidden)).is_empty());
        }
        // The owner cancels a queued task.
        let cancelled = Task { status: TaskStatus::Cancelled, finished_at: Some(at(3)), ..queued.clone() };
        assert_eq!(kinds(&derive_task(Some(&queued), Some(&cancelled))), ["task.cancelled"]);
        // Deleted items (TTL) and unchanged items emit nothing.
        assert!(derive_task(Some(&queued), None).is_empty());
        assert!(derive_task(Some(&queued), Some(&queued)).is_empty());
    }

    fn run() -> Run {
        crate::runs::sample_run()
    }

    #[test]
    fn every_run_transition_has_exactly_its_events() {
        let queued = run();
        assert_eq!(kinds(&derive_run(None, Some(&queued))), ["run.queued"]);
        let running = Run {
            status: RunStatus::Running,
            started_at: Some(at(9)),
            last_heartbeat_at: Some(at(9)),
            execution_id: Some("exec-1".into()),
            ..queued.clone()
        };
        let started = derive_run(Some(&queued), Some(&running));
        assert_eq!(kinds(&started), ["run.started"]);
        assert_eq!(started[0].timestamp, at(9).rfc3339());
        // Heartbeats and the cancel flag change the item but not its state: nothing.
        let beat = Run { last_heartbeat_at: Some(at(12)), ..running.clone() };
        assert!(derive_run(Some(&running), Some(&beat)).is_empty());
        let flagged = Run { cancel_requested: true, ..beat.clone() };
        assert!(derive_run(Some(&beat), Some(&flagged)).is_empty());
        for (status, kind) in [
            (RunStatus::Completed, "run.completed"),
            (RunStatus::Failed, "run.failed"),
            (RunStatus::Cancelled, "run.cancelled"),
        ] {
            let completion = Completion {
                execution_id: "exec-1".into(),
                status: FinalStatus::Completed,
                result: Some("secret result".into()),
                result_truncated: false,
                error: None,
                total_tokens: None,
                reported_cost: None,
            };
            let done = Run { status, finished_at: Some(at(60)), completion: Some(completion), ..running.clone() };
            let events = derive_run(Some(&running), Some(&done));
            assert_eq!(kinds(&events), [kind]);
            let body = events[0].to_json();
            assert!(!body.contains("secret"), "an event carried text: {body}");
        }
        // Cancelled while queued.
        let cancelled = Run { status: RunStatus::Cancelled, finished_at: Some(at(2)), ..queued.clone() };
        assert_eq!(kinds(&derive_run(Some(&queued), Some(&cancelled))), ["run.cancelled"]);
        assert!(derive_run(Some(&queued), None).is_empty());
    }

    #[test]
    fn ids_are_stable_and_events_never_carry_text() {
        let queued = task();
        let a = derive_task(None, Some(&queued));
        let b = derive_task(None, Some(&queued.clone()));
        assert_eq!(a, b, "the same change must give the same event");
        assert!(a[0].id.starts_with("evt_") && a[0].id.len() == 36);
        assert!(!a[0].to_json().contains("secret objective"), "an event carried the objective");
        let other = task();
        assert_ne!(derive_task(None, Some(&other))[0].id, a[0].id);
        let _ = Duration::ZERO;
    }

    #[test]
    fn a_desktop_outage_is_one_offline_and_one_online_event() {
        let owner = OwnerId::new("o").unwrap();
        let seen = Device { last_seen_at: Some(at(0)), ..Device::new(&owner, "Laptop", "h", at(0)) };
        let marked = Device { offline_since: Some(at(120)), ..seen.clone() };
        let back = Device { offline_since: None, last_seen_at: Some(at(500)), ..marked.clone() };
        let off = derive_device(Some(&seen), Some(&marked));
        assert_eq!(kinds(&off), ["desktop.offline"]);
        assert_eq!(
            (off[0].data.device_id.clone(), off[0].timestamp.clone()),
            (Some(seen.device_id.to_string()), at(120).rfc3339())
        );
        let on = derive_device(Some(&marked), Some(&back));
        assert_eq!(kinds(&on), ["desktop.online"]);
        assert_eq!((on[0].data.status.as_str(), on[0].timestamp.clone()), ("online", at(500).rfc3339()));
        assert_ne!(on[0].id, off[0].id);
        // A sync of an online desktop, its first sighting, and a revoke that clears its offline
        // mark: nothing; a second outage: new ids.
        assert!(derive_device(Some(&seen), Some(&back)).is_empty());
        assert!(derive_device(None, Some(&seen)).is_empty());
        let revoked = Device { offline_since: None, revoked_at: Some(at(600)), ..marked.clone() };
        assert!(derive_device(Some(&marked), Some(&revoked)).is_empty());
        let again = Device { offline_since: Some(at(900)), ..back.clone() };
        assert_ne!(derive_device(Some(&back), Some(&again))[0].id, off[0].id);
        // The queue's two kinds of message read back as what they are.
        let json = off[0].to_json();
        assert_eq!(serde_json::from_str::<QueueMessage>(&json).unwrap(), QueueMessage::Event(off[0].clone()));
        let w = DesktopWatch { owner: "o".into(), agent: "a".into(), command_id: "c".into() };
        let m = serde_json::to_string(&QueueMessage::Watch { desktop_watch: w.clone() }).unwrap();
        assert_eq!(serde_json::from_str::<QueueMessage>(&m).unwrap(), QueueMessage::Watch { desktop_watch: w });
    }
}
