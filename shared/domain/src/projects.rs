//! Projects and chat links: the owner's consent boundaries.
//!
//! A project is enabled (or not) for connected agents and carries the graph sessions its
//! desktops share in it — per device ([`DeviceShares`]), so two desktops sharing one project
//! never overwrite each other's list; what agents see and the queue-time consent check use
//! the union ([`Project::sessions`]). A chat link binds one host conversation to one project.

use crate::clock::Timestamp;
use crate::errors::InputError;
use crate::ids::{ChatLinkId, GraphSessionId, OwnerId, ProjectId};
use crate::limits::{MAX_NAME_CHARS, char_len};
use crate::runs::{QueueRejection, QueueTarget, SessionMeta};

/// A project of an owner.
#[derive(Debug, Clone, PartialEq)]
pub struct Project {
    /// Its id.
    pub project_id: ProjectId,
    /// Whose it is.
    pub owner: OwnerId,
    /// Display name.
    pub name: String,
    /// Whether connected agents may use it.
    pub enabled: bool,
    /// Graph sessions shared in it by any device, as of each device's last sync (the union of
    /// the per-device lists, kept by the stores in the same write as the device's list).
    pub sessions: Vec<SessionMeta>,
    /// When a relay last synced it.
    pub last_sync_at: Option<Timestamp>,
    /// When it was created.
    pub created_at: Timestamp,
    /// Recent durations (ms) of completed runs per session, by [`crate::runs::duration_key`]:
    /// what `check_after_s` of a running run is computed from.
    pub recent_durations: std::collections::BTreeMap<String, u64>,
    /// Which desktop shares which of [`Project::sessions`] ([`shared_by`] of the per-device
    /// lists): who can run a queued run, and what the owner's Desktops table lists per desktop.
    pub shared_by: std::collections::BTreeMap<uuid::Uuid, Vec<GraphSessionId>>,
}

impl Project {
    /// A new project of `owner`: disabled for connected agents, nothing shared yet.
    pub fn new(owner: &OwnerId, name: &str, now: Timestamp) -> Self {
        Self {
            project_id: ProjectId::generate(),
            owner: owner.clone(),
            name: name.to_owned(),
            enabled: false,
            sessions: Vec::new(),
            last_sync_at: None,
            created_at: now,
            recent_durations: std::collections::BTreeMap::new(),
            shared_by: std::collections::BTreeMap::new(),
        }
    }

    /// The desktops that share `session` here (those that can run a run queued for it).
    pub fn devices_sharing<'a>(&'a self, session: &'a GraphSessionId) -> impl Iterator<Item = uuid::Uuid> + 'a {
        self.shared_by.iter().filter(|(_, list)| list.contains(session)).map(|(d, _)| *d)
    }

    /// How long a run of `session` is expected to take (median of recent completed runs).
    pub fn expected_duration(&self, session: &GraphSessionId) -> Option<std::time::Duration> {
        crate::runs::expected_duration(&self.recent_durations, session)
    }

    /// The shared session with this id, if any.
    pub fn session(&self, id: &GraphSessionId) -> Option<&SessionMeta> {
        self.sessions.iter().find(|s| &s.graph_session_id == id)
    }
}

/// The sessions each device shares in one project: device id → its list (the whole set it
/// sent in its last sync). Ordered by device id, so the union is deterministic.
pub type DeviceShares = std::collections::BTreeMap<uuid::Uuid, Vec<SessionMeta>>;

/// Each device's session ids (what [`Project::shared_by`] keeps of the per-device lists);
/// a device whose list is empty is left out.
pub fn shared_by(shares: &DeviceShares) -> std::collections::BTreeMap<uuid::Uuid, Vec<GraphSessionId>> {
    shares
        .iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(d, list)| (*d, list.iter().map(|s| s.graph_session_id.clone()).collect()))
        .collect()
}

/// The union of every device's shared sessions: each session once (the first device's
/// description wins when two desktops describe the same session differently).
pub fn union_of(shares: &DeviceShares) -> Vec<SessionMeta> {
    let mut out: Vec<SessionMeta> = Vec::new();
    for list in shares.values() {
        for s in list {
            if !out.iter().any(|o| o.graph_session_id == s.graph_session_id) {
                out.push(s.clone());
            }
        }
    }
    out
}

/// A project's shares as stored: every device's list and their union, each as JSON. Encoded
/// once per sync; [`StoredShares::bytes`] is what [`crate::limits::MAX_SHARES_BYTES`] bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredShares {
    /// The union of every device's list ([`union_of`]).
    pub union: Vec<SessionMeta>,
    /// `union` as JSON.
    pub union_json: String,
    /// Every device's list, as JSON.
    pub shares_json: String,
}

impl StoredShares {
    /// Encodes `shares` and their union.
    pub fn of(shares: &DeviceShares) -> Result<Self, serde_json::Error> {
        let union = union_of(shares);
        Ok(Self { union_json: serde_json::to_string(&union)?, shares_json: serde_json::to_string(shares)?, union })
    }

    /// What they take as stored.
    pub fn bytes(&self) -> usize {
        self.union_json.len() + self.shares_json.len()
    }
}

/// Replaces `device`'s list in `shares` (an empty list removes the device).
pub fn with_device_share(mut shares: DeviceShares, device: uuid::Uuid, sessions: &[SessionMeta]) -> DeviceShares {
    if sessions.is_empty() {
        shares.remove(&device);
    } else {
        shares.insert(device, sessions.to_vec());
    }
    shares
}

/// How often a sync that changes nothing still records the project's `last_sync_at`. A
/// DynamoDB write is billed by the whole item it changes, and the project item holds every
/// sharing desktop's list: written on every sync of every desktop, one busy owner's project
/// was a hot, costly item (issue 59). So a sync writes it when its desktop's list changed, and
/// otherwise only to move `last_sync_at` once this much older — what reads it (the panel's
/// "last sync", `check_after_s`'s next sync) is then up to this much behind.
pub const SYNC_STAMP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// What a sync writes to its project ([`sync_write`]).
#[derive(Debug, Clone, PartialEq)]
pub enum SyncWrite {
    /// The desktop's list changed: the shares (and their union) as they become.
    Shares(DeviceShares),
    /// Nothing changed, but `last_sync_at` is [`SYNC_STAMP_EVERY`] old or more: that alone.
    Stamp,
    /// Nothing to write.
    Nothing,
}

/// What a sync of `device` with `sessions` writes to a project whose shares are `shares` and
/// whose last sync was recorded at `last_sync_at`, at `now`.
pub fn sync_write(
    shares: &DeviceShares,
    device: uuid::Uuid,
    sessions: &[SessionMeta],
    last_sync_at: Option<Timestamp>,
    now: Timestamp,
) -> SyncWrite {
    let unchanged = shares.get(&device).map_or(sessions.is_empty(), |list| list.as_slice() == sessions);
    if !unchanged {
        return SyncWrite::Shares(with_device_share(shares.clone(), device, sessions));
    }
    match last_sync_at {
        Some(t) if now.since(t) < SYNC_STAMP_EVERY => SyncWrite::Nothing,
        _ => SyncWrite::Stamp,
    }
}

/// The recent durations (`crate::runs::duration_key`) worth keeping once the shares are
/// `union`: those of sessions still shared. Without this the map grew with every session ever
/// run in the project, toward the item's 400 KB (issue 59); with it, it holds at most
/// [`crate::runs::DURATION_SLOTS`] per shared session.
pub fn durations_kept(
    durations: &std::collections::BTreeMap<String, u64>,
    union: &[SessionMeta],
) -> std::collections::BTreeMap<String, u64> {
    durations
        .iter()
        .filter(|(k, _)| {
            k.rsplit_once('#').is_some_and(|(session, _)| union.iter().any(|m| m.graph_session_id.as_str() == session))
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// A chat link's event subscription: where its events are delivered as signed webhooks
/// (SPEC §8). The secret signs every delivery; the owner sees it once, when it is created.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Subscription {
    /// The receiver (checked again at delivery time).
    pub url: String,
    /// `whsec_` + base64 of 32 random bytes (the Standard Webhooks format).
    pub secret: String,
    /// When it was set.
    pub created_at: Timestamp,
}

/// A chat link: one host conversation bound to one project.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatLink {
    /// Its id.
    pub link_id: ChatLinkId,
    /// Whose it is.
    pub owner: OwnerId,
    /// The project it belongs to.
    pub project_id: ProjectId,
    /// Display name (e.g. the conversation's title).
    pub name: String,
    /// When it was created.
    pub created_at: Timestamp,
    /// Where its events go, if the owner subscribed it.
    pub subscription: Option<Subscription>,
    /// Whether (and from which Graph sessions) the owner's desktops may hand it tasks
    /// (`crate::dispatch`); `None`, the default: never.
    pub desktop_tasks: Option<crate::dispatch::DesktopTasks>,
}

impl ChatLink {
    /// A new chat link of `owner` in `project`.
    pub fn new(owner: &OwnerId, project: ProjectId, name: &str, now: Timestamp) -> Self {
        Self {
            link_id: ChatLinkId::generate(),
            owner: owner.clone(),
            project_id: project,
            name: name.to_owned(),
            created_at: now,
            subscription: None,
            desktop_tasks: None,
        }
    }
}

/// A fresh event-subscription secret: `whsec_` + base64 of 32 random bytes (the Standard
/// Webhooks format; receivers' libraries accept it as is).
///
/// # Errors
/// When the operating system cannot provide randomness.
pub fn new_webhook_secret() -> Result<String, getrandom::Error> {
    use base64::Engine;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(bytes)))
}

/// Checks a project or link name: 1 to 200 characters, not blank.
///
/// # Errors
/// [`InputError`] on `name`.
pub fn validate_name(name: &str) -> Result<(), InputError> {
    let n = char_len(name);
    if name.trim().is_empty() || n > MAX_NAME_CHARS {
        return Err(InputError::new(
            "name",
            format!("must be 1 to {MAX_NAME_CHARS} characters and not blank (got {n})"),
        ));
    }
    Ok(())
}

/// Outcome of a relay sync.
#[derive(Debug, Clone, PartialEq)]
pub enum SyncOutcome {
    /// The set was replaced and the sync time recorded.
    Synced(Project),
    /// The owner has not enabled the project for connected agents; nothing was written.
    Disabled,
    /// Not this owner's project.
    NotFound,
    /// The project's shares would take more than [`crate::limits::MAX_SHARES_BYTES`] (`bytes`
    /// with this sync); nothing was written.
    TooLarge {
        /// What they would take.
        bytes: usize,
    },
}

/// Consent at queue time for a caller-named project: it must be the owner's, enabled, and
/// share the session.
///
/// # Errors
/// The [`QueueRejection`] naming what is missing.
pub fn check_named_project(project: Option<&Project>, gs: &GraphSessionId) -> Result<QueueTarget, QueueRejection> {
    let p = project.ok_or(QueueRejection::ProjectNotFound)?;
    if !p.enabled {
        return Err(QueueRejection::ProjectDisabled(p.project_id));
    }
    let s = p.session(gs).ok_or_else(|| QueueRejection::SessionNotSharedInProject(gs.clone(), p.project_id))?;
    Ok(QueueTarget { project_id: p.project_id, slug: s.slug.clone() })
}

/// Consent at queue time without a project: exactly one enabled project of the owner must
/// share the session.
///
/// # Errors
/// [`QueueRejection::SessionNotShared`] or [`QueueRejection::AmbiguousProject`].
pub fn resolve_project(projects: &[Project], gs: &GraphSessionId) -> Result<QueueTarget, QueueRejection> {
    let mut hits = projects.iter().filter(|p| p.enabled).filter_map(|p| p.session(gs).map(|s| (p, s)));
    match (hits.next(), hits.next()) {
        (None, _) => Err(QueueRejection::SessionNotShared(gs.clone())),
        (Some((p, s)), None) => Ok(QueueTarget { project_id: p.project_id, slug: s.slug.clone() }),
        (Some((a, _)), Some((b, _))) => {
            let mut ids = vec![a.project_id, b.project_id];
            ids.extend(hits.map(|(p, _)| p.project_id));
            ids.sort();
            Err(QueueRejection::AmbiguousProject(gs.clone(), ids))
        }
    }
}
