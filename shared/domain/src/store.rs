//! The store, split by capability.
//!
//! Each Lambda function depends only on the capabilities it uses (and its IAM policy allows
//! only their DynamoDB actions): a read tool takes `&impl ReadRuns`, the claim tool
//! `&impl ClaimTasks`. Two crates implement every capability with the same semantics —
//! `store-dynamo` (one DynamoDB table) and `store-sqlite` (the embedded store) — proven by one
//! conformance suite (`tests/`).
//!
//! Rules every implementation keeps:
//! - every state change is one conditional write (or one transaction); a failed condition is
//!   an outcome, classified from the item's old image by the pure functions in
//!   [`crate::runs`] and [`crate::tasks`], never a second read;
//! - no read writes: expiry and lost heartbeats are computed on read and enforced inside the
//!   write conditions;
//! - input is validated before a store is called; stores trust their typed arguments.

use async_trait::async_trait;

use crate::clients::{ChatConnection, ClientSummary, ClientUseRecord, HostSeen, RegisteredClient, Rotation};
use crate::clock::Timestamp;
use crate::devices::Device;
use crate::events::{DeliveryOutcome, OutboxEntry};
use crate::ids::{AgentId, ChatLinkId, CommandId, OwnerId, ProjectId, TaskId};
use crate::pairing::{DecideOutcome, Decision, Pairing, PollOutcome, StartOutcome as PairingStart, UserCode};
use crate::projects::{ChatLink, Project, Subscription, SyncOutcome};
use crate::runs::{
    CancelRunOutcome, CompleteOutcome, Completion, ControlOutcome, QueueFilter, QueueOutcome, QueueRun, Run,
    SessionMeta, StartOutcome,
};
use crate::tasks::{
    ArtifactCheck, ArtifactOutcome, ArtifactRecord, AssignOutcome, AssignTask, CancelTaskOutcome, ClaimOutcome,
    SubmitOutcome, SubmitTask, Task, TaskPage,
};

/// A boxed error cause, kept for the logs.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A failure of the storage itself (not a domain outcome). Every variant keeps its cause;
/// callers log it with [`crate::errors::ErrorChain`] and answer a retryable error without
/// details.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Retryable: the backend could not be reached, throttled the request, timed out, or the
    /// write lost a race with a concurrent transaction more often than it retries.
    #[error("store unavailable")]
    Unavailable(#[source] BoxError),
    /// The backend refused the request for a reason a retry will not fix (a missing table, a
    /// missing permission, a request it considers invalid): a deployment or code problem.
    #[error("store refused the request")]
    Refused(#[source] BoxError),
    /// An item did not have the shape this code writes.
    #[error("stored item is malformed: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// A retryable backend failure.
    pub fn unavailable(e: impl Into<BoxError>) -> Self {
        Self::Unavailable(e.into())
    }

    /// A backend refusal that a retry will not fix.
    pub fn refused(e: impl Into<BoxError>) -> Self {
        Self::Refused(e.into())
    }

    /// Whether retrying the same call later can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// Result of a store call.
pub type StoreResult<T> = Result<T, StoreError>;

/// Owner: projects and their consent switch.
#[async_trait]
pub trait ManageProjects: Send + Sync {
    /// Creates a project (disabled for connected agents until the owner enables it).
    async fn create_project(&self, owner: &OwnerId, name: &str) -> StoreResult<Project>;
    /// Enables or disables a project for connected agents; `None` if not the owner's.
    async fn set_project_enabled(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        enabled: bool,
    ) -> StoreResult<Option<Project>>;
    /// One project of the owner.
    async fn get_project(&self, owner: &OwnerId, project: ProjectId) -> StoreResult<Option<Project>>;
    /// All projects of the owner.
    async fn list_projects(&self, owner: &OwnerId) -> StoreResult<Vec<Project>>;
}

/// Relay: replace one device's shared-session set in a project and record the sync time.
#[async_trait]
pub trait SyncSessions: Send + Sync {
    /// Replaces `device`'s set (already validated, ≤ 100) and the project's union in one
    /// conditional write (SQLite: one transaction; DynamoDB: a read and a versioned write,
    /// retried when another device's sync won the race). Other devices' sets are untouched.
    async fn sync_sessions(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        device: uuid::Uuid,
        sessions: &[SessionMeta],
    ) -> StoreResult<SyncOutcome>;
}

/// Agent: queue a run (idempotent per agent and key).
#[async_trait]
pub trait QueueRuns: Send + Sync {
    /// Queues a run: one transaction (consent check + key + command).
    async fn queue_run(&self, req: &QueueRun) -> StoreResult<QueueOutcome>;
}

/// Agent: read its own runs.
#[async_trait]
pub trait ReadRuns: Send + Sync {
    /// The run if it exists and this agent queued it.
    async fn get_run(&self, agent: &AgentId, command: CommandId) -> StoreResult<Option<Run>>;
    /// How many of the [`crate::limits::MAX_RUNS_AHEAD`] runs queued just ahead of `run` in its
    /// project (queued before it, still queued, unexpired) are its own agent's: what a queued
    /// run waits for on a desktop with few slots. Only the agent's own runs count: another
    /// agent's queue is not its to learn (one bounded query, no writes).
    async fn own_runs_ahead(&self, run: &Run) -> StoreResult<usize>;
}

/// Agent: cancel its own runs.
#[async_trait]
pub trait CancelRuns: Send + Sync {
    /// Queued → cancelled in one write; running → cancel flag; terminal → unchanged.
    async fn cancel_run(&self, agent: &AgentId, command: CommandId) -> StoreResult<CancelRunOutcome>;
}

/// Relay: the queue of a project and the run lifecycle.
#[async_trait]
pub trait RelayRuns: Send + Sync {
    /// The project's first `limit` queued, unexpired commands that `filter` keeps, oldest first
    /// (the filter applies before the limit; one query per page, no writes).
    async fn list_queued(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        limit: usize,
        filter: &QueueFilter,
    ) -> StoreResult<Vec<Run>>;
    /// queued → running on `device` (the desktop whose relay asks, kept for the owner's
    /// "busy with"); refused if cancelled or expired meanwhile.
    async fn start_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
        execution_id: &str,
        device: uuid::Uuid,
    ) -> StoreResult<StartOutcome>;
    /// Heartbeat; tells whether the agent asked to cancel. With `progress`, the same write
    /// records the run's newest progress, only under the execution it was started with.
    async fn control_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
        progress: Option<&crate::relay::ControlRequest>,
    ) -> StoreResult<ControlOutcome>;
    /// running (or queued, for a refused command) → terminal; idempotent by sha256; cancel wins.
    /// A run that reads `failed` because its desktop stopped reporting (heartbeat lost) still
    /// takes one `failed` completion from the execution that ran it: the status everyone has
    /// seen stays, the error becomes the relay's reason (e.g. [`crate::errors::MAC_SLEPT`]),
    /// and the run is stored ended (so `run.failed` is emitted then).
    /// Whatever the outcome (but `NotFound`), the open tasks the run handed to chats
    /// ([`crate::dispatch`]) are cancelled: a repeat (the relay's retry) finishes what a call
    /// cut short left.
    async fn complete_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
        completion: &Completion,
    ) -> StoreResult<CompleteOutcome>;
}

/// Owner: chat links.
#[async_trait]
pub trait ManageLinks: Send + Sync {
    /// Creates a link in one of the owner's projects; `None` if the project is not the owner's.
    async fn create_link(&self, owner: &OwnerId, project: ProjectId, name: &str) -> StoreResult<Option<ChatLink>>;
    /// One link of the owner.
    async fn get_link(&self, owner: &OwnerId, link: ChatLinkId) -> StoreResult<Option<ChatLink>>;
    /// All links of the owner.
    async fn list_links(&self, owner: &OwnerId) -> StoreResult<Vec<ChatLink>>;
    /// Deletes a link: it disappears for the owner and for every chat, its open tasks become
    /// `cancelled`, and all its tasks read as missing through MCP. `None` if the owner has no
    /// such link; otherwise how many open tasks this call cancelled. Safe to repeat: a delete
    /// cut short is finished by the next one.
    async fn delete_link(&self, owner: &OwnerId, link: ChatLinkId) -> StoreResult<Option<usize>>;
    /// Sets (or with `None` removes) the link's event subscription; `None` if no such link.
    async fn set_subscription(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        subscription: Option<&Subscription>,
    ) -> StoreResult<Option<ChatLink>>;
    /// Lets the owner's desktops hand the link tasks (`Some`, from the named Graph sessions or
    /// any) or stops it (`None`); `None` if no such link. Tasks already handed over stay.
    async fn set_desktop_tasks(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        desktop_tasks: Option<&crate::dispatch::DesktopTasks>,
    ) -> StoreResult<Option<ChatLink>>;
}

/// Relay API: tasks a desktop's running Graph hands to its owner's chats ([`crate::dispatch`]).
#[async_trait]
pub trait DispatchTasks: Send + Sync {
    /// Hands a task over in one transaction: the run is running on the device and has room
    /// ([`crate::dispatch::MAX_TASKS_PER_RUN`], counted on the run), the link accepts tasks
    /// from the run's Graph session, the key is new (the same key and request replay; another
    /// request under it is refused). Nothing is written unless all hold.
    async fn dispatch_task(&self, req: &crate::dispatch::DispatchTask)
    -> StoreResult<crate::dispatch::DispatchOutcome>;
    /// A task `device` of `owner` dispatched; `None` for any other (one read, no write).
    async fn dispatched_task(
        &self,
        owner: &OwnerId,
        device: uuid::Uuid,
        link: ChatLinkId,
        task: TaskId,
    ) -> StoreResult<Option<Task>>;
}

/// Owner: assign, cancel and list tasks.
#[async_trait]
pub trait AssignTasks: Send + Sync {
    /// Assigns a task (idempotent by key + objective): one transaction.
    async fn assign_task(&self, req: &AssignTask) -> StoreResult<AssignOutcome>;
    /// Cancels an open task in one conditional write.
    async fn cancel_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<CancelTaskOutcome>;
    /// A link's tasks, newest first, `limit` per page, starting after `before` (a task id from
    /// the previous page's `next`). One query; the caller checked the link is the owner's.
    async fn list_link_tasks(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        limit: usize,
        before: Option<TaskId>,
    ) -> StoreResult<TaskPage>;
    /// The artifacts recorded for a task, oldest first (one query).
    async fn list_artifacts(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId)
    -> StoreResult<Vec<ArtifactRecord>>;
}

/// Owner: the recent graph runs of all the owner's projects, whichever agent queued them, and
/// the owner's cancel of any of them.
#[async_trait]
pub trait OwnerRuns: Send + Sync {
    /// The owner's runs, newest first, `limit` per page, starting after `before`. One query.
    async fn recent_runs(&self, owner: &OwnerId, limit: usize, before: Option<CommandId>) -> StoreResult<Vec<Run>>;
    /// The owner cancels one of their runs, whichever agent queued it: the rule and the writes
    /// of [`CancelRuns::cancel_run`] (queued → cancelled in one conditional write; running →
    /// the cancel flag; ended → unchanged), scoped to the owner instead of the agent
    /// ([`crate::runs::Canceller::Owner`]). Answers the outcome and the run as it is after it
    /// (from the write's own answer: no read added); `None` when the owner has no such run,
    /// and then nothing was written.
    async fn cancel_owned_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
    ) -> StoreResult<Option<(CancelRunOutcome, Run)>>;
}

/// Agent: read a link's tasks.
#[async_trait]
pub trait ReadTasks: Send + Sync {
    /// The link's open (queued or claimed, unexpired) tasks, oldest first: one query, no writes.
    async fn list_open_tasks(&self, owner: &OwnerId, link: ChatLinkId, limit: usize) -> StoreResult<Vec<Task>>;
    /// One task of the link.
    async fn get_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<Option<Task>>;
}

/// Agent: claim and submit.
#[async_trait]
pub trait ClaimTasks: Send + Sync {
    /// One conditional write; the same link asking again while its claim is live gets it back.
    async fn claim_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<ClaimOutcome>;
    /// Accepted only with the current claim id; identical retries replay.
    async fn submit_task(&self, req: &SubmitTask) -> StoreResult<SubmitOutcome>;
}

/// Agent: record an uploaded artifact (idempotent by artifact id + sha256, same fencing).
#[async_trait]
pub trait RecordArtifacts: Send + Sync {
    /// Records the artifact if the claim still holds the task.
    async fn record_artifact(&self, owner: &OwnerId, record: &ArtifactRecord) -> StoreResult<ArtifactOutcome>;
    /// Before the bytes are stored: reads the artifact's record and the task together (one
    /// consistent read, no write) and decides with [`crate::tasks::check_artifact`].
    async fn check_artifact(&self, owner: &OwnerId, record: &ArtifactRecord) -> StoreResult<ArtifactCheck>;
}

/// Owner: device tokens of desktop relays.
#[async_trait]
pub trait ManageDevices: Send + Sync {
    /// Registers a device with an already generated token hash.
    async fn create_device(&self, owner: &OwnerId, name: &str, token_hash: &str) -> StoreResult<Device>;
    /// The owner's devices (revoked ones included), oldest first.
    async fn list_devices(&self, owner: &OwnerId) -> StoreResult<Vec<Device>>;
    /// One of the owner's devices (revoked included). One read.
    async fn get_device(&self, owner: &OwnerId, device: uuid::Uuid) -> StoreResult<Option<Device>>;
    /// Revokes a device and withdraws the sessions it shared in the owner's projects (a
    /// revoked desktop will never run them); `false` if it is not the owner's.
    async fn revoke_device(&self, owner: &OwnerId, device: uuid::Uuid) -> StoreResult<bool>;
    /// Revokes a device (as [`ManageDevices::revoke_device`]) and forgets it: it is no longer
    /// listed and its token is unknown. `false` if it is not the owner's.
    async fn remove_device(&self, owner: &OwnerId, device: uuid::Uuid) -> StoreResult<bool>;
}

/// Owner API and relay API (`relay pause`): pausing a desktop.
#[async_trait]
pub trait PauseDevices: Send + Sync {
    /// Pauses the owner's unrevoked device (`Some`, replacing a pause it has) or resumes it
    /// (`None`); `false` if it is not the owner's or is revoked. The pause is on the record
    /// the relay's token finds, so a sync sees it without another read.
    async fn set_device_pause(
        &self,
        owner: &OwnerId,
        device: uuid::Uuid,
        pause: Option<&crate::devices::Pause>,
    ) -> StoreResult<bool>;
}

/// The desktop watch (`desktop.offline`): marking a desktop gone while work waits for it.
#[async_trait]
pub trait WatchDesktops: Send + Sync {
    /// Marks the owner's device offline since now, if it is still as the watch saw it: not
    /// revoked, not marked, last seen at `last_seen` (a sync since then wins). `true` when
    /// marked. One conditional write; the change is the `desktop.offline` event, and the
    /// device's next sync (`record_device_seen`) clears it (`desktop.online`).
    async fn mark_offline(
        &self,
        owner: &OwnerId,
        device: uuid::Uuid,
        last_seen: Option<crate::clock::Timestamp>,
    ) -> StoreResult<bool>;
}

/// Relay API: who presents this token hash (unrevoked devices only).
#[async_trait]
pub trait AuthenticateDevices: Send + Sync {
    /// The device with this token hash, if it exists and is not revoked. One read, no write.
    async fn device_by_token_hash(&self, token_hash: &str) -> StoreResult<Option<Device>>;
    /// Records that the device synced at `now` and what its relay `report`ed (kept as it was
    /// when `None`: an older relay), at most once per [`DEVICE_SEEN_GRANULARITY`] unless the
    /// report changed (one conditional write that usually does nothing), so the owner sees
    /// when each desktop was last seen, and what it runs, without a write per request. A mark
    /// of the desktop watch (`offline_since`) is cleared in the same write.
    async fn record_device_seen(&self, device: &Device, report: Option<&crate::fleet::RelayReport>) -> StoreResult<()>;
}

/// Notifier: the last delivery outcome per chat link (written by the notifier, read by the
/// owner API for the panel).
#[async_trait]
pub trait RecordDeliveries: Send + Sync {
    /// Remembers how the latest delivery to `link`'s subscription went: an outcome older (by
    /// its `at`) than the one kept is ignored, so racing deliveries never show an older one.
    async fn record_delivery(&self, owner: &OwnerId, link: ChatLinkId, outcome: &DeliveryOutcome) -> StoreResult<()>;
    /// The latest outcome of every link of the owner that had a delivery (one query).
    async fn last_deliveries(&self, owner: &OwnerId) -> StoreResult<Vec<(ChatLinkId, DeliveryOutcome)>>;
}

/// The embedded store's event outbox: events written in the same transaction as the change
/// they describe (the cloud reads the table's stream instead), for the local notifier.
#[async_trait]
pub trait EventOutbox: Send + Sync {
    /// Up to `limit` pending events whose next attempt is due, oldest first.
    async fn due_events(&self, limit: usize) -> StoreResult<Vec<OutboxEntry>>;
    /// The event was delivered (or had nowhere to go): it leaves the outbox.
    async fn event_delivered(&self, event_id: &str) -> StoreResult<()>;
    /// A failed attempt: try again at `retry_at`, or with `None` give up (the event is kept as
    /// `dead`, the local dead-letter queue).
    async fn event_failed(&self, event_id: &str, retry_at: Option<Timestamp>, error: &str) -> StoreResult<()>;
    /// Events given up on (newest first), for inspection and redrive.
    async fn dead_events(&self, limit: usize) -> StoreResult<Vec<OutboxEntry>>;
}

/// Relay API and owner API: pairing a desktop with an owner ([`crate::pairing`]).
#[async_trait]
pub trait PairDevices: Send + Sync {
    /// Stores a new pending pairing and counts it against its source's hourly allowance
    /// ([`crate::limits::Policy::pairings_per_source_per_hour`]), in one transaction. A user code
    /// whose earlier pairing expired over an hour ago may be used again.
    async fn start_pairing(&self, pairing: &Pairing) -> StoreResult<PairingStart>;
    /// The pairing with this user code, whatever its state (one read, no write).
    async fn get_pairing(&self, code: &UserCode) -> StoreResult<Option<Pairing>>;
    /// The owner's decision: one conditional write from `pending` and unexpired.
    async fn decide_pairing(&self, code: &UserCode, owner: &OwnerId, decision: &Decision)
    -> StoreResult<DecideOutcome>;
    /// The relay's poll, decided by [`crate::pairing::classify_poll`]: records the poll time
    /// while pending, or creates the device and marks the pairing redeemed (one transaction
    /// conditional on `approved`: a code is redeemed once).
    async fn poll_pairing(&self, code: &UserCode, device_code_hash: &str) -> StoreResult<PollOutcome>;
}

/// Counts per key and fixed window: failed attempts (pairing codes that matched nothing), so
/// guessing is bounded ([`crate::pairing::FAILED_LOOKUPS_PER_WINDOW`]), and each owner's
/// requests on each surface ([`crate::budget`]). A count is kept until its window ends and
/// means nothing afterwards.
#[async_trait]
pub trait LimitAttempts: Send + Sync {
    /// The failed attempts counted for `key` in the window ending at `window_end` (one read,
    /// no write).
    async fn failed_attempts(&self, key: &str, window_end: Timestamp) -> StoreResult<u32>;
    /// Counts one more failed attempt for `key` in that window; the count after it.
    async fn record_failed_attempt(&self, key: &str, window_end: Timestamp) -> StoreResult<u32>;
    /// Counts `n` more for `key` in the window ending at `window_end` if the count stays at
    /// most `limit` (one conditional write: concurrent takers never pass it together);
    /// otherwise counts nothing and says how many are left ([`crate::budget`]).
    async fn take_attempts(&self, key: &str, window_end: Timestamp, n: u32, limit: u32) -> StoreResult<Taken>;
}

/// What [`LimitAttempts::take_attempts`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Counted.
    Taken,
    /// Not counted: only `left` remain under the limit.
    Short {
        /// The limit minus the count.
        left: u32,
    },
}

/// The cloud doorbell's open sockets (`crate::doorbell`): written by the `$connect` and
/// `$disconnect` routes, read by the stream consumer that rings. (The local server keeps its
/// sockets in memory: only DynamoDB implements this.)
#[async_trait]
pub trait DoorbellConnections: Send + Sync {
    /// Records `connection_id` as `device`'s, for `owner`, kept a little past API Gateway's
    /// 2-hour limit.
    async fn open_connection(&self, owner: &OwnerId, device: uuid::Uuid, connection_id: &str) -> StoreResult<()>;
    /// Forgets `connection_id` (`$disconnect`, or API Gateway answered 410 Gone); fine if unknown.
    async fn close_connection(&self, connection_id: &str) -> StoreResult<()>;
    /// The owner's open sockets (past the 2-hour limit ones left out): one query.
    async fn connections_of(&self, owner: &OwnerId) -> StoreResult<Vec<crate::doorbell::Connection>>;
}

// ---- OAuth clients (the authorization servers, `crate::clients`) ----------------------------

/// Where registered clients are kept.
#[async_trait]
pub trait RegisterClients: Send + Sync {
    /// Every client of the registry (pre-created ones too; callers filter by [`crate::clients::NAME_PREFIX`]).
    async fn list_clients(&self) -> StoreResult<Vec<ClientSummary>>;
    /// One client, or `None` if there is none with that id.
    async fn get_client(&self, client_id: &str) -> StoreResult<Option<RegisteredClient>>;
    /// Creates a public client (authorization code + PKCE, refresh tokens, no secret) that may
    /// use exactly `redirect_uris` and ask for exactly `scopes`.
    async fn create_client(
        &self,
        name: &str,
        redirect_uris: &[String],
        scopes: &[String],
    ) -> StoreResult<RegisteredClient>;
    /// Deletes a client (fine if it is already gone).
    async fn delete_client(&self, client_id: &str) -> StoreResult<()>;
}

/// When registered clients were first and last issued a token. The stores keep it (Cognito
/// keeps no such record; in the cloud the stack's token facade sees each exchange), so
/// registrations nobody completed, and those idle past their refresh tokens, can be removed.
#[async_trait]
pub trait ClientUse: Send + Sync {
    /// Records that `client_id` was issued a token now (the first time is kept, the last
    /// replaced; one write, safe to repeat).
    async fn mark_client_used(&self, client_id: &str) -> StoreResult<()>;
    /// When it was first and last issued a token; `None` if it never was.
    async fn client_use(&self, client_id: &str) -> StoreResult<Option<ClientUseRecord>>;
    /// Records that `client_id` was issued a token for `owner` now: a chat connected (the first
    /// time is kept, the last replaced; one write). `token_client` is the client id the token
    /// carries, when it is not `client_id` (see [`ChatConnection::token_client`]).
    async fn mark_chat_connected(
        &self,
        owner: &OwnerId,
        client_id: &str,
        token_client: Option<&str>,
    ) -> StoreResult<()>;
    /// The chats issued a token for `owner`, the latest first, at most
    /// [`MAX_LISTED_CHAT_CONNECTIONS`](crate::clients::MAX_LISTED_CHAT_CONNECTIONS).
    async fn chat_connections(&self, owner: &OwnerId) -> StoreResult<Vec<ChatConnection>>;
    /// Records a host's handshake for `owner`: one record per client id and host name, the
    /// latest replacing the one before (one unconditional write).
    async fn mark_host_seen(&self, owner: &OwnerId, host: &HostSeen) -> StoreResult<()>;
    /// The hosts seen for `owner`, the latest first, at most
    /// [`MAX_LISTED_HOSTS`](crate::clients::MAX_LISTED_HOSTS).
    async fn hosts_seen(&self, owner: &OwnerId) -> StoreResult<Vec<HostSeen>>;
    /// [`Self::chat_connections`] and [`Self::hosts_seen`] together (the panel's overview): a
    /// store that keeps them side by side reads both at once.
    async fn chats_and_hosts(&self, owner: &OwnerId) -> StoreResult<(Vec<ChatConnection>, Vec<HostSeen>)> {
        Ok((self.chat_connections(owner).await?, self.hosts_seen(owner).await?))
    }
}

/// The cloud facade's authorization flows (`oauth::facade`): one-time records kept under a key
/// until they expire — an authorization request waiting for Cognito's answer, a code bound to
/// the redirect URI it was sent to. (The local server keeps its flows in memory: only DynamoDB
/// implements this.)
#[async_trait]
pub trait AuthorizationFlows: Send + Sync {
    /// Keeps `record` under `key` until `expires`; `false` (nothing written) when the key is
    /// taken.
    async fn begin_flow(&self, key: &str, record: &str, expires: Timestamp) -> StoreResult<bool>;
    /// Removes the record under `key` and returns it unless it has expired: of concurrent
    /// callers, exactly one gets it (one conditional delete).
    async fn take_flow(&self, key: &str) -> StoreResult<Option<String>>;
}

/// Which Cognito app client serves each client metadata document (`oauth::facade`): one per
/// document URL, created once, whatever number of connections and instances ask at once.
#[async_trait]
pub trait MetadataClients: Send + Sync {
    /// The app client recorded for the document at `url`.
    async fn metadata_client(&self, url: &str) -> StoreResult<Option<String>>;
    /// Records `client_id` for `url` unless one is recorded already; the one recorded after the
    /// call (the first writer's: a loser deletes the app client it created).
    async fn keep_metadata_client(&self, url: &str, client_id: &str) -> StoreResult<String>;
}

/// The last good copy of each client metadata document (`oauth::cimd`), kept by both stores so
/// that a client whose host refuses one fetch (a bot wall's 403, a 429, a 5xx, a timeout) still
/// signs in from the copy fetched before, on any instance.
#[async_trait]
pub trait DocumentCopies: Send + Sync {
    /// Keeps `body` (a document that passed validation) as the copy of `url` fetched at
    /// `fetched`, unless a copy fetched later is kept already (one conditional write).
    async fn keep_document_copy(&self, url: &str, body: &str, fetched: Timestamp) -> StoreResult<()>;
    /// The copy kept for `url` and when it was fetched.
    async fn document_copy(&self, url: &str) -> StoreResult<Option<(String, Timestamp)>>;
}

/// The redirect URIs of each registered client, kept beside the registry when the registry
/// cannot hold them (Cognito's callbacks allow neither `http://127.0.0.1` nor URLs past 1,024
/// characters, and the facade owns the one callback Cognito needs). Only DynamoDB implements it.
#[async_trait]
pub trait ClientRedirects: Send + Sync {
    /// Records `client_id`'s redirect URIs (replacing any).
    async fn keep_client_redirects(&self, client_id: &str, redirect_uris: &[String]) -> StoreResult<()>;
    /// The redirect URIs recorded for `client_id`; `None` for a client registered before they
    /// were kept here.
    async fn client_redirects(&self, client_id: &str) -> StoreResult<Option<Vec<String>>>;
    /// Forgets them (the client was deleted); fine if none were kept.
    async fn forget_client_redirects(&self, client_id: &str) -> StoreResult<()>;
}

/// Refresh-token families of the local authorization server (Cognito keeps its own).
#[async_trait]
pub trait RefreshTokens: Send + Sync {
    /// Starts `family` with `token` current, kept until `expires`.
    async fn start_family(&self, family: &str, token: &str, expires: Timestamp) -> StoreResult<()>;
    /// Presents `token` of `family`: current → `next` becomes current ([`Rotation::Rotated`]);
    /// another of the family → the family is revoked ([`Rotation::Reused`]); else
    /// [`Rotation::Revoked`]. One conditional write.
    async fn rotate(&self, family: &str, token: &str, next: &str) -> StoreResult<Rotation>;
    /// Revokes `family` (fine if unknown).
    async fn revoke_family(&self, family: &str) -> StoreResult<()>;
}

pub use crate::fleet::DEVICE_SEEN_GRANULARITY;

/// Every capability: what the local server and the test suite hold.
pub trait Store:
    ManageProjects
    + SyncSessions
    + QueueRuns
    + ReadRuns
    + CancelRuns
    + RelayRuns
    + ManageLinks
    + AssignTasks
    + ReadTasks
    + ClaimTasks
    + RecordArtifacts
    + DispatchTasks
    + ManageDevices
    + PauseDevices
    + WatchDesktops
    + AuthenticateDevices
    + OwnerRuns
    + RecordDeliveries
    + PairDevices
    + LimitAttempts
    + ClientUse
    + DocumentCopies
{
}

impl<T> Store for T where
    T: ManageProjects
        + SyncSessions
        + QueueRuns
        + ReadRuns
        + CancelRuns
        + RelayRuns
        + ManageLinks
        + AssignTasks
        + ReadTasks
        + ClaimTasks
        + RecordArtifacts
        + DispatchTasks
        + ManageDevices
        + PauseDevices
        + WatchDesktops
        + AuthenticateDevices
        + OwnerRuns
        + RecordDeliveries
        + PairDevices
        + LimitAttempts
        + ClientUse
        + DocumentCopies
{
}

/// The desktops `ring` is for ([`crate::doorbell::Recipients`]), `None` meaning every desktop of the owner. The sharing
/// desktops are read from the run's project at the time of the ring; when the project cannot
/// be read, every desktop is rung (a ring is a hint: one too many costs a sync, one missing
/// costs the poll interval).
pub async fn ring_recipients<S: ManageProjects + ?Sized>(
    store: &S,
    ring: &crate::doorbell::RingFor,
) -> Option<std::collections::BTreeSet<uuid::Uuid>> {
    match &ring.to {
        crate::doorbell::Recipients::Device(d) => Some([*d].into()),
        crate::doorbell::Recipients::All => None,
        crate::doorbell::Recipients::Sharing { project, session } => {
            match store.get_project(&ring.owner, *project).await {
                Ok(Some(p)) => Some(p.devices_sharing(session).collect()),
                Ok(None) => Some(std::collections::BTreeSet::new()),
                Err(_) => None,
            }
        }
    }
}
