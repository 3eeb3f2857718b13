//! The owner API's wire types: the request bodies it reads and every response body it writes.
//! The handlers build these and nothing else, and [`crate::openapi`] publishes their schemas,
//! so the document and the answers are one definition.
//!
//! The functions at the end make each view from its domain value.
//!
//! Times are RFC 3339 strings; `null` means "not yet" (never synced, not revoked, not finished).

use domain::clock::Timestamp;
use domain::devices::Device;
use domain::events::DeliveryOutcome;
use domain::ids::{ChatLinkId, CommandId, IdempotencyKey, ProjectId, TaskId};
use domain::limits::{MAX_NAME_CHARS, MAX_OBJECTIVE_CHARS, Policy, cut_chars};
use domain::pairing::{Pairing, PairingStatus};
use domain::projects::{ChatLink, Project};
use domain::runs::Run;
use domain::tasks::{Task, TaskStatus};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::chat_views::*;
pub use super::run_views::*;

/// `POST /projects`, `POST /devices`: a name.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NameBody {
    /// 1 to 200 characters, not only spaces.
    #[schemars(length(min = 1, max = MAX_NAME_CHARS))]
    pub name: String,
}

/// `POST /pairings/{code}/approve`: the device's name (the desktop's own name when left out or
/// when the body is empty).
#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    /// 1 to 200 characters, not only spaces.
    #[serde(default)]
    #[schemars(length(min = 1, max = MAX_NAME_CHARS))]
    pub name: Option<String>,
}

/// `PUT /projects/{id}`: the switch for connected agents.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnableBody {
    /// Whether connected agents may see and use the project.
    pub enabled: bool,
}

/// `POST /links`: a chat link to a project.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkBody {
    /// The owner's project.
    pub project_id: ProjectId,
    /// 1 to 200 characters, not only spaces.
    #[schemars(length(min = 1, max = MAX_NAME_CHARS))]
    pub name: String,
}

/// `POST /links/{id}/tasks`: assign a task.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AssignBody {
    /// What the chat should do: 1 to 10,000 characters, not only spaces.
    #[schemars(length(min = 1, max = MAX_OBJECTIVE_CHARS))]
    pub objective: String,
    /// The same key with the same objective answers the same task (200); with another, 409.
    #[schemars(length(min = IdempotencyKey::MIN_CHARS, max = IdempotencyKey::MAX_CHARS))]
    pub idempotency_key: String,
}

/// `PUT /links/{id}/subscription`: where the link's events go.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionBody {
    /// An `https://` URL on a public host (private, loopback and metadata addresses are refused).
    pub url: String,
}

/// `PUT /links/{id}/desktop-tasks`: let the owner's desktops hand the link tasks.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DesktopTasksBody {
    /// Only runs of these Graph sessions (`gs_…`, at most 20) may ask; empty or absent: any.
    #[serde(default)]
    pub sessions: Vec<String>,
}

/// A graph session a desktop shares in a project.
#[derive(Serialize, JsonSchema)]
pub struct SessionView {
    /// `gs_` + 32 lowercase hex.
    pub graph_session_id: String,
    /// Its name.
    pub name: String,
    /// Its slug.
    pub slug: String,
}

/// A project.
#[derive(Serialize, JsonSchema)]
pub struct ProjectView {
    /// Its id.
    pub project_id: ProjectId,
    /// Its name.
    pub name: String,
    /// Whether connected agents may use it.
    pub enabled: bool,
    /// How many sessions its desktops share.
    pub shared_sessions: usize,
    /// Those sessions.
    pub sessions: Vec<SessionView>,
    /// The last relay sync.
    pub last_sync_at: Option<String>,
    /// When it was made.
    pub created_at: String,
}

/// `GET /projects`.
#[derive(Serialize, JsonSchema)]
pub struct ProjectList {
    /// The owner's projects.
    pub projects: Vec<ProjectView>,
}

/// A desktop's device token (never the token itself after it was made).
#[derive(Serialize, JsonSchema)]
pub struct DeviceView {
    /// Its id.
    pub device_id: uuid::Uuid,
    /// Its name.
    pub name: String,
    /// When it was made.
    pub created_at: String,
    /// When it was revoked.
    pub revoked_at: Option<String>,
    /// The last sync with it (kept to the minute): when it is offline, offline since then.
    pub last_seen_at: Option<String>,
    /// Whether a run queued for it starts soon (`domain::fleet::state`).
    pub state: DesktopStateView,
    /// What its relay reported at its last sync: none before that, or from an older relay.
    pub relay: Option<RelayView>,
    /// The owner's pause in force (none when not paused or the pause ended).
    pub paused: Option<PauseView>,
    /// The run it is running, if any (a paused desktop may still be finishing one).
    pub busy: Option<BusyView>,
    /// The sessions it shares, per project, as of its last sync.
    pub sessions: Vec<SharedSessionView>,
    /// Offline for 30 days or more (or never connected in 30 days): probably gone; `DELETE`
    /// removes it.
    pub stale: bool,
}

/// The run a desktop is running.
#[derive(Clone, Serialize, JsonSchema)]
pub struct BusyView {
    /// The run.
    pub command_id: CommandId,
    /// Its session.
    pub graph_session_id: String,
    /// When it started.
    pub started_at: Option<String>,
    /// How many runs this desktop is running (several with parallel slots; this is the oldest).
    pub running: usize,
}

/// A session a desktop shares.
#[derive(Clone, Serialize, JsonSchema)]
pub struct SharedSessionView {
    /// The project it is shared in.
    pub project_id: ProjectId,
    /// The session.
    pub graph_session_id: String,
    /// Its name as synced.
    pub name: String,
}

/// What the Desktops table needs beyond the device records: who is busy with what, and who
/// shares which session (from the owner's projects and recent runs, already read).
#[derive(Default)]
pub struct Fleet {
    busy: std::collections::BTreeMap<uuid::Uuid, BusyView>,
    sessions: std::collections::BTreeMap<uuid::Uuid, Vec<SharedSessionView>>,
}

impl Fleet {
    /// From the owner's `projects` and recent `runs` at `now`.
    pub fn of(projects: &[Project], runs: &[Run], now: Timestamp, policy: &Policy) -> Self {
        let busy = domain::fleet::busy_with(runs, now, policy)
            .into_iter()
            .map(|(d, r)| {
                let running = runs
                    .iter()
                    .filter(|o| {
                        o.device_id == Some(d) && o.view(now, policy).status == domain::runs::RunStatus::Running
                    })
                    .count();
                let view = BusyView {
                    command_id: r.command_id,
                    graph_session_id: r.graph_session_id.to_string(),
                    started_at: time(r.started_at),
                    running,
                };
                (d, view)
            })
            .collect();
        let mut sessions: std::collections::BTreeMap<uuid::Uuid, Vec<SharedSessionView>> =
            std::collections::BTreeMap::new();
        for p in projects {
            for (device, ids) in &p.shared_by {
                for id in ids {
                    let name = p.sessions.iter().find(|s| &s.graph_session_id == id).map(|s| s.name.clone());
                    sessions.entry(*device).or_default().push(SharedSessionView {
                        project_id: p.project_id,
                        graph_session_id: id.to_string(),
                        name: name.unwrap_or_default(),
                    });
                }
            }
        }
        Self { busy, sessions }
    }
}

/// A desktop's pause.
#[derive(Serialize, JsonSchema)]
pub struct PauseView {
    /// When it was paused.
    pub at: String,
    /// When it ends by itself; none: until resumed.
    pub until: Option<String>,
    /// The owner's note.
    pub note: String,
}

/// A desktop's state: online with the doorbell (a queued run starts within a second), online
/// polling (within its poll interval), offline (not seen within its interval; runs wait),
/// paused by the owner (runs wait), or revoked.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DesktopStateView {
    /// Synced recently, doorbell connected.
    OnlineDoorbell,
    /// Synced recently, polling.
    OnlinePolling,
    /// Running a run (see `busy`).
    Busy,
    /// Not seen within its interval, or never.
    Offline,
    /// Offline for 30 days or more: probably gone.
    Stale,
    /// Paused by the owner: finishes its run, takes no new one.
    Paused,
    /// Its token was revoked.
    Revoked,
}

/// What a desktop's relay says of itself on each sync.
#[derive(Serialize, JsonSchema)]
pub struct RelayView {
    /// `relay --version`.
    pub version: String,
    /// Its build's operating system and architecture (`macos-aarch64`, `linux-x86_64`, …).
    pub platform: String,
    /// The machine's host name.
    pub host: String,
    /// A newer build the server publishes, as the relay's last update check (daily, or
    /// `relay update`) found it: none when up to date or not known.
    pub update: Option<String>,
    /// How many runs it may run at once (`max_parallel`): none from a relay too old to say,
    /// which runs one at a time.
    pub slots: Option<u32>,
    /// How many of its sessions it cannot use now (a folder missing, or refused by macOS's
    /// privacy controls): they are not offered to chats until it can; `relay check` on the
    /// desktop names them and the fix. None when all can be used, or from an older relay.
    pub unavailable: Option<u32>,
}

/// `GET /devices`.
#[derive(Serialize, JsonSchema)]
pub struct DeviceList {
    /// The owner's devices, revoked ones included.
    pub devices: Vec<DeviceView>,
}

/// `POST /devices`: the device and its token, shown this once.
#[derive(Serialize, JsonSchema)]
pub struct NewDevice {
    /// The device.
    #[serde(flatten)]
    pub device: DeviceView,
    /// `fcd_…`: the relay's `Authorization: Bearer` token.
    pub token: String,
    /// That it is shown only now.
    pub note: String,
}

/// Where a pairing is.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PairingState {
    /// Waiting for the owner.
    Pending,
    /// Approved; the relay's next poll makes the device.
    Approved,
    /// Refused.
    Refused,
    /// The relay has its device.
    Redeemed,
}

/// A desktop waiting to be paired (or just decided).
#[derive(Serialize, JsonSchema)]
pub struct PairingView {
    /// `BCDF-GHJK`.
    pub user_code: String,
    /// Where it is.
    pub status: PairingState,
    /// The desktop's name.
    pub name: String,
    /// Its operating system.
    pub os: String,
    /// Its architecture.
    pub arch: String,
    /// The address the relay asked from, as the server saw it (RFC 8628 §5.4: the owner can
    /// tell a request from their own desktop from one someone else started; empty when the
    /// transport does not say).
    pub requested_from: String,
    /// When the relay asked.
    pub created_at: String,
    /// When the codes expire.
    pub expires_at: String,
    /// The device, once approved.
    pub device_id: Option<uuid::Uuid>,
    /// Its name, once approved.
    pub device_name: Option<String>,
}

/// The outcome of the latest webhook delivery to a link's subscription.
#[derive(Serialize, JsonSchema)]
pub struct DeliveryView {
    /// The event.
    pub event_id: String,
    /// Its type (`task.assigned`, …).
    pub event_type: String,
    /// When the attempt ended.
    pub at: String,
    /// Whether the receiver answered 2xx.
    pub ok: bool,
    /// `HTTP 200`, `timed out`, `refused: …` (never the receiver's body).
    pub detail: String,
}

/// A link's event subscription.
#[derive(Serialize, JsonSchema)]
pub struct SubscriptionView {
    /// Where events go.
    pub url: String,
    /// When it was set.
    pub created_at: String,
    /// The latest delivery.
    pub last_delivery: Option<DeliveryView>,
    /// The signing secret (`whsec_…`): only in the answer that made the subscription.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// A chat link.
#[derive(Serialize, JsonSchema)]
pub struct LinkView {
    /// Its id (the chat's `chat_link_id`).
    pub chat_link_id: ChatLinkId,
    /// The project it is bound to.
    pub project_id: ProjectId,
    /// Its name.
    pub name: String,
    /// When it was made.
    pub created_at: String,
    /// Its event subscription.
    pub subscription: Option<SubscriptionView>,
    /// Whether the owner's desktops may hand it tasks (`null`: no), and from which Graph
    /// sessions (an empty list: any).
    pub desktop_tasks: Option<domain::dispatch::DesktopTasks>,
}

/// `PUT /links/{id}/subscription`: the link with its subscription's secret, shown this once.
#[derive(Serialize, JsonSchema)]
pub struct NewSubscription {
    /// The link (`subscription.secret` set).
    #[serde(flatten)]
    pub link: LinkView,
    /// That the secret is shown only now.
    pub note: String,
}

/// `GET /links`.
#[derive(Serialize, JsonSchema)]
pub struct LinkList {
    /// The owner's live links.
    pub links: Vec<LinkView>,
}

/// `DELETE /links/{id}`.
#[derive(Serialize, JsonSchema)]
pub struct LinkDeleted {
    /// Always true.
    pub deleted: bool,
    /// How many of its open tasks were cancelled.
    pub cancelled_tasks: usize,
}

/// `DELETE /devices/{id}`.
#[derive(Serialize, JsonSchema)]
pub struct DeviceRevoked {
    /// Always true.
    pub revoked: bool,
}

/// `POST /devices/{id}/remove`.
#[derive(Serialize, JsonSchema)]
pub struct DeviceRemoved {
    /// Always true.
    pub removed: bool,
}

/// A task in a list (and the start of its detail).
#[derive(Serialize, JsonSchema)]
pub struct TaskSummary {
    /// Its id.
    pub task_id: TaskId,
    /// Its status now.
    pub status: TaskStatus,
    /// The status for a person.
    pub label: String,
    /// The objective: in lists its first 200 characters.
    pub objective: String,
    /// Whether `objective` was cut.
    pub objective_truncated: bool,
    /// When it was assigned.
    pub created_at: String,
    /// When it ended.
    pub finished_at: Option<String>,
    /// Where it came from when a desktop's Graph handed it over (`null`: the owner assigned it).
    pub origin: Option<domain::dispatch::TaskOrigin>,
}

/// A task's live claim.
#[derive(Serialize, JsonSchema)]
pub struct ClaimView {
    /// The claim's fencing id.
    pub claim_id: String,
    /// When the lease ends.
    pub lease_until: String,
    /// Whether the task is claimed and the lease has not ended.
    pub live: bool,
    /// RFC 3339: when this claim was taken.
    pub claimed_at: Option<String>,
}

/// An artifact a chat uploaded with its result.
#[derive(Serialize, JsonSchema)]
pub struct ArtifactView {
    /// Its id.
    pub artifact_id: String,
    /// Its file name.
    pub name: String,
    /// Its media type.
    pub content_type: String,
    /// Bytes.
    pub size: u64,
    /// sha256 (hex) of the bytes.
    pub sha256: String,
    /// A short-lived download link (`null` where the stack keeps no artifacts).
    pub download_url: Option<String>,
}

/// `GET /links/{id}/tasks/{task}`: all of it.
#[derive(Serialize, JsonSchema)]
pub struct TaskDetail {
    /// The summary, with the whole objective.
    #[serde(flatten)]
    pub summary: TaskSummary,
    /// When an unclaimed task expires.
    pub expires_at: String,
    /// The chat's result.
    pub result: Option<String>,
    /// The claim, while there is one.
    pub claim: Option<ClaimView>,
    /// Its artifacts.
    pub artifacts: Vec<ArtifactView>,
}

/// `GET /links/{id}/tasks`: a page, newest first.
#[derive(Serialize, JsonSchema)]
pub struct TaskPage {
    /// The link.
    pub chat_link_id: ChatLinkId,
    /// The page.
    pub tasks: Vec<TaskSummary>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// `POST /links/{id}/tasks/{task}/cancel`: the task's status after it.
#[derive(Serialize, JsonSchema)]
pub struct TaskCancelled {
    /// The task.
    pub task_id: TaskId,
    /// `cancelled`, or the status that kept it from being cancelled.
    pub status: TaskStatus,
    /// The status for a person.
    pub label: String,
}

/// `GET /overview`: the panel's refresh in one answer.
#[derive(Serialize, JsonSchema)]
pub struct Overview {
    /// The projects.
    pub projects: Vec<ProjectView>,
    /// The devices.
    pub devices: Vec<DeviceView>,
    /// The live links.
    pub links: Vec<LinkView>,
    /// The 20 latest runs.
    pub runs: Vec<RunView>,
    /// The chats that were issued a token for this owner, the latest first (at most 20):
    /// empty until a chat has connected with the connector URL.
    pub chats: Vec<ChatView>,
    /// The host programs that connected for this owner (their latest handshake), the latest
    /// first (at most 20).
    pub hosts: Vec<HostView>,
    /// The release this server runs (CHANGELOG.md), shown in the panel's footer.
    pub version: String,
}

// What each view is made from.

pub(super) fn project_view(p: &Project) -> ProjectView {
    ProjectView {
        project_id: p.project_id,
        name: p.name.clone(),
        enabled: p.enabled,
        shared_sessions: p.sessions.len(),
        sessions: p
            .sessions
            .iter()
            .map(|s| SessionView {
                graph_session_id: s.graph_session_id.as_str().to_owned(),
                name: s.name.clone(),
                slug: s.slug.clone(),
            })
            .collect(),
        last_sync_at: time(p.last_sync_at),
        created_at: p.created_at.rfc3339(),
    }
}

pub(super) fn device_view(d: &Device, now: Timestamp, policy: &Policy, fleet: &Fleet) -> DeviceView {
    use domain::fleet::DesktopState;
    let busy = fleet.busy.get(&d.device_id).filter(|_| d.revoked_at.is_none());
    let state = d.state(now, policy.poll_interval, busy.is_some());
    DeviceView {
        device_id: d.device_id,
        name: d.name.clone(),
        created_at: d.created_at.rfc3339(),
        revoked_at: time(d.revoked_at),
        last_seen_at: time(d.last_seen_at),
        stale: state == DesktopState::Stale,
        busy: busy.cloned(),
        sessions: fleet.sessions.get(&d.device_id).cloned().unwrap_or_default(),
        state: match state {
            DesktopState::OnlineDoorbell => DesktopStateView::OnlineDoorbell,
            DesktopState::OnlinePolling => DesktopStateView::OnlinePolling,
            DesktopState::Busy => DesktopStateView::Busy,
            DesktopState::Offline => DesktopStateView::Offline,
            DesktopState::Stale => DesktopStateView::Stale,
            DesktopState::Paused => DesktopStateView::Paused,
            DesktopState::Revoked => DesktopStateView::Revoked,
        },
        paused: d.pause_at(now).map(|p| PauseView { at: p.at.rfc3339(), until: time(p.until), note: p.note.clone() }),
        relay: d.relay.as_ref().map(|r| RelayView {
            version: r.version.clone(),
            platform: r.platform.clone(),
            host: r.host.clone(),
            update: r.update.clone(),
            slots: r.slots,
            unavailable: r.unavailable,
        }),
    }
}

pub(super) fn pairing_view(p: &Pairing) -> PairingView {
    let (status, device) = match &p.status {
        PairingStatus::Pending => (PairingState::Pending, None),
        PairingStatus::Refused => (PairingState::Refused, None),
        PairingStatus::Approved { device_id, device_name, .. } => {
            (PairingState::Approved, Some((*device_id, device_name.clone())))
        }
        PairingStatus::Redeemed { device_id, device_name, .. } => {
            (PairingState::Redeemed, Some((*device_id, device_name.clone())))
        }
    };
    let (device_id, device_name) = device.unzip();
    PairingView {
        user_code: p.user_code.display(),
        status,
        name: p.desktop.name.clone(),
        os: p.desktop.os.clone(),
        arch: p.desktop.arch.clone(),
        requested_from: p.source_address.clone(),
        created_at: p.created_at.rfc3339(),
        expires_at: p.expires_at.rfc3339(),
        device_id,
        device_name,
    }
}

pub(super) fn link_view(l: &ChatLink, last_delivery: Option<&DeliveryOutcome>) -> LinkView {
    LinkView {
        chat_link_id: l.link_id,
        project_id: l.project_id,
        name: l.name.clone(),
        created_at: l.created_at.rfc3339(),
        // Never the secret: it is shown once, when the subscription is made.
        subscription: l.subscription.as_ref().map(|s| SubscriptionView {
            url: s.url.clone(),
            created_at: s.created_at.rfc3339(),
            last_delivery: last_delivery.map(|d| DeliveryView {
                event_id: d.event_id.clone(),
                event_type: d.event_type.as_str().to_owned(),
                at: d.at.rfc3339(),
                ok: d.ok,
                detail: d.detail.clone(),
            }),
            secret: None,
        }),
        desktop_tasks: l.desktop_tasks.clone(),
    }
}

/// A task in a list: the label and a preview of the objective.
pub(super) fn task_summary(t: &Task, now: Timestamp) -> TaskSummary {
    let status = t.status_at(now);
    let preview = cut_chars(&t.objective, super::OBJECTIVE_PREVIEW_CHARS);
    TaskSummary {
        task_id: t.task_id,
        status,
        label: status.label().to_owned(),
        objective: preview.to_owned(),
        objective_truncated: preview.len() < t.objective.len(),
        created_at: t.created_at.rfc3339(),
        finished_at: time(t.finished_at),
        origin: t.origin.clone(),
    }
}
