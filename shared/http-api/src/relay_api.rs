//! The relay HTTP API (SPEC §4): what the desktop relay calls, with its device token.
//!
//! | route | does |
//! |---|---|
//! | `POST {PREFIX}/sync` | replace the project's shared-session set (≤ 100), record the sync, return queued commands + `poll_interval_s` |
//! | `POST {PREFIX}/commands/{id}/start` | queued → running; `409 {"status":"cancelled"}` if cancelled meanwhile |
//! | `GET {PREFIX}/commands/{id}/control` | heartbeat; `{"cancel_requested":bool}`; one a minute carries the relay's report (`x-foundry-relay`), recorded as a sync's |
//! | `POST {PREFIX}/commands/{id}/control` | the same check, recording the running Graph's newest progress in the heartbeat's write (`domain::progress`) |
//! | `POST {PREFIX}/commands/{id}/complete` | running → terminal, idempotent by sha256, cancel wins |
//! | `POST {PREFIX}/pairings` (no token) | start pairing a desktop: a user code for the owner, a device code to poll with |
//! | `POST {PREFIX}/pairings/token` (no token) | poll: RFC 8628's pending / slow_down / denied / expired, or the new device |
//! | `POST {PREFIX}/pause`, `POST {PREFIX}/resume` | the desktop's own pause (`relay pause` / `relay resume`) |
//! | `POST {PREFIX}/tasks` | a running Graph hands a task to one of the owner's chat links (`domain::dispatch`) |
//! | `GET {PREFIX}/links/{link}/tasks/{task}` | a task this desktop handed over: status and result |
//!
//! Plain functions over `http` types: the `graph_relay` Lambda and the local server call
//! [`RelayApi::handle`]. Every input is checked before any write (command ids are UUIDs, the
//! session list and the completion within their limits); every error is JSON
//! `{"error": "<field>: <rule>"}` with a fitting status.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, StatusCode};

use domain::clock::SharedClock;
use domain::fleet::{RELAY_HEADER, RelayReport};
use domain::ids::{CommandId, OwnerId};
use domain::limits::Policy;
use domain::pairing::{
    Desktop, PAIRING_TTL, POLL_INTERVAL, Pairing, PollOutcome, StartOutcome as PairingStart, UserCode, new_device_code,
    parse_device_code, validate_token_hash,
};
use domain::projects::SyncOutcome;
use domain::relay::{
    CompleteResponse, ControlResponse, ErrorResponse, QueuedCommand, StartRequest, StartResponse, StatusResponse,
    SyncRequest, SyncResponse,
};
use domain::relay::{PairError, PairRequest, PairResponse, PairTokenRequest, PairTokenResponse};
use domain::runs::{
    CompleteOutcome, Completion, ControlOutcome, QueueFilter, RunStatus, StartOutcome, validate_sessions,
};
use domain::store::{
    AuthenticateDevices, DispatchTasks, LimitAttempts, PairDevices, PauseDevices, RelayRuns, StoreError, SyncSessions,
};
use http_util::http_json;
use http_util::routes::{self as table, Answer, Auth, Body, Found, Param, Route, error_body};

use http_util::ClientSource;

/// Path prefix of the relay API.
pub use domain::relay::PREFIX;
/// Largest request body (a 100-session sync or a maximal completion fit easily).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Most queued commands returned by one sync (oldest first).
pub const MAX_COMMANDS_PER_SYNC: usize = 100;

/// The IAM actions the `graph_relay` function needs on the table (token lookup, the
/// conditional updates, the queue index, and a pairing's check that no device has its token).
/// Proven against the emulator in the suite.
pub const DYNAMODB_ACTIONS: &[&str] =
    &["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:ConditionCheckItem"];

/// The store capabilities the relay API uses.
pub trait RelayStore:
    SyncSessions + RelayRuns + AuthenticateDevices + PauseDevices + PairDevices + DispatchTasks + LimitAttempts
{
}
impl<
    T: SyncSessions
        + RelayRuns
        + AuthenticateDevices
        + PauseDevices
        + PairDevices
        + DispatchTasks
        + LimitAttempts
        + ?Sized,
> RelayStore for T
{
}

pub use http_util::{DEVICE_TOKEN_REQUIRED, device_of};

/// What a pairing request from an address over its hourly allowance is told.
pub const TOO_MANY_PAIRINGS: &str = "too many pairing requests from this address this hour; try again later";

/// What a pairing whose token hash is already a device's is told (at the start; an approval
/// of one is refused the same way in the owner API).
pub const TOKEN_IN_USE: &str =
    "token_sha256: this token already belongs to a device; run `relay pair` again (it makes a new token)";

/// The relay API over a store.
pub struct RelayApi<S: ?Sized> {
    /// The store.
    pub store: Arc<S>,
    /// The clock (`server_time`).
    pub clock: SharedClock,
    /// `poll_interval_s` comes from here.
    pub policy: Policy,
    /// The stack's public URL (pairing answers point the owner at `{public_url}/panel`).
    pub public_url: String,
    /// The doorbell's URL handed to relays in every sync (`None`: no doorbell).
    pub doorbell_url: Option<String>,
    /// The safety poll a relay with its doorbell connected is told to keep
    /// ([`domain::doorbell::DOORBELL_POLL_INTERVAL`]).
    pub doorbell_poll_interval: std::time::Duration,
    /// Each owner's desktops' requests a minute ([`domain::budget::Surface::Relay`]): built from
    /// `policy` on the first request, one per process (start it with `Default::default()`).
    pub budget: std::sync::OnceLock<domain::budget::OwnerBudget>,
}

fn internal(e: &StoreError) -> http::Response<Bytes> {
    http_json::unavailable("relay API", e)
}

mod routes;
pub use routes::{JSON_REQUIRED, Op, ROUTES};

impl<S: RelayStore + ?Sized> RelayApi<S> {
    /// This process's count of each owner's requests, at `policy`'s limit.
    fn budget(&self) -> &domain::budget::OwnerBudget {
        self.budget.get_or_init(|| {
            domain::budget::OwnerBudget::new(domain::budget::Surface::Relay, self.policy.owner_requests_per_minute)
        })
    }

    /// Answers one request whose path starts with [`PREFIX`].
    pub async fn handle(&self, req: http::Request<Bytes>) -> http::Response<Bytes> {
        if req.body().len() > MAX_BODY_BYTES {
            return http_json::error(StatusCode::PAYLOAD_TOO_LARGE, format!("body: at most {MAX_BODY_BYTES} bytes"));
        }
        let (route, p) = match table::find(ROUTES, req.method(), req.uri().path()) {
            Found::Route(r, p) => (r, p),
            Found::WrongMethod(allow) => return http_json::method_not_allowed(&allow),
            Found::NoRoute => {
                let path = req.uri().path().strip_prefix(PREFIX).unwrap_or_default();
                return http_json::error(StatusCode::NOT_FOUND, format!("no route {path}"));
            }
        };
        if route.body.is_some() && !http_util::media_type_is(req.headers(), "application/json") {
            return http_json::error(StatusCode::UNSUPPORTED_MEDIA_TYPE, JSON_REQUIRED);
        }
        match route.op {
            Op::StartPairing => return self.start_pairing(&req).await,
            Op::PollPairing => return self.poll_pairing(req.body()).await,
            Op::Sync
            | Op::StartCommand
            | Op::CommandControl
            | Op::ReportProgress
            | Op::CompleteCommand
            | Op::Pause
            | Op::Resume
            | Op::DispatchTask
            | Op::ReadDispatched => {}
        }
        let device = match device_of(self.store.as_ref(), req.headers()).await {
            Ok(d) => d,
            Err(e) => return internal(&e),
        };
        let Some(device) = device else {
            return http_json::error(StatusCode::UNAUTHORIZED, DEVICE_TOKEN_REQUIRED);
        };
        let owner = device.owner.clone();
        if let Some(refused) =
            http_json::over_budget(self.budget(), self.store.as_ref(), &owner, self.clock.now()).await
        {
            return refused;
        }
        let command = || CommandId::parse("command_id", p[0]);
        match route.op {
            Op::Sync => {
                let doorbell_up = doorbell_up(req.headers());
                // What the relay says of itself (domain::fleet); an older relay says nothing.
                let report = match report_of(req.headers()) {
                    Ok(r) => r,
                    Err(e) => return http_json::error(StatusCode::BAD_REQUEST, e),
                };
                let pause = device.pause_at(self.clock.now()).cloned();
                let res = self.sync(&owner, device.device_id, req.body(), doorbell_up, pause.as_ref()).await;
                if res.status() == StatusCode::OK {
                    self.seen(&device, report.as_ref()).await;
                }
                res
            }
            Op::StartCommand => match command() {
                Err(e) => http_json::error(StatusCode::BAD_REQUEST, e.to_string()),
                Ok(id) => self.start(&owner, id, device.device_id, req.body()).await,
            },
            Op::CommandControl | Op::ReportProgress => match command() {
                Err(e) => http_json::error(StatusCode::BAD_REQUEST, e.to_string()),
                Ok(id) => {
                    let report = match report_of(req.headers()) {
                        Ok(r) => r,
                        Err(e) => return http_json::error(StatusCode::BAD_REQUEST, e),
                    };
                    let progress = if route.op == Op::ReportProgress {
                        match http_json::parse::<domain::relay::ControlRequest>(req.body()) {
                            Ok(p) => match p.validate() {
                                Ok(()) => Some(p),
                                Err(e) => return http_json::error(StatusCode::BAD_REQUEST, e.to_string()),
                            },
                            Err(m) => return http_json::error(StatusCode::BAD_REQUEST, m),
                        }
                    } else {
                        None
                    };
                    let res = self.control(&owner, id, progress.as_ref()).await;
                    // A relay running a run syncs again only when it ends: about once a minute
                    // a control poll carries its report, and that one says it is there (the
                    // sync's conditional last-seen write; the polls between cost nothing more).
                    if res.status() == StatusCode::OK && report.is_some() {
                        self.seen(&device, report.as_ref()).await;
                    }
                    res
                }
            },
            Op::CompleteCommand => match command() {
                Err(e) => http_json::error(StatusCode::BAD_REQUEST, e.to_string()),
                Ok(id) => self.complete(&owner, id, req.body()).await,
            },
            Op::Pause | Op::Resume => self.pause(&device, route.op == Op::Pause, req.body()).await,
            Op::DispatchTask => self.dispatch(&device, req.body()).await,
            Op::ReadDispatched => {
                match (
                    domain::ids::ChatLinkId::parse("chat_link_id", p[0]),
                    domain::ids::TaskId::parse("task_id", p[1]),
                ) {
                    (Ok(link), Ok(task)) => self.read_dispatched(&device, link, task).await,
                    (Err(e), _) | (_, Err(e)) => http_json::error(StatusCode::BAD_REQUEST, e.to_string()),
                }
            }
            // Answered before the token is looked up (they need none).
            Op::StartPairing | Op::PollPairing => http_json::error(StatusCode::NOT_FOUND, "no route"),
        }
    }

    /// Records that `device` was heard from (with its `report`, on a sync): only the owner's
    /// "last seen" and the desktop watch depend on it, so a failure is logged, never answered.
    async fn seen(&self, device: &domain::devices::Device, report: Option<&RelayReport>) {
        if let Err(e) = self.store.record_device_seen(device, report).await {
            tracing::warn!(error = %domain::errors::ErrorChain(&e), "recording the device's last sync failed");
        }
    }

    /// `POST /pause` and `POST /resume`: the desktop's own pause, under the owner API's rule
    /// (`domain::devices::Pause::new`).
    async fn pause(&self, device: &domain::devices::Device, pause: bool, body: &[u8]) -> http::Response<Bytes> {
        let set = if pause {
            let b: domain::relay::PauseRequest = match http_json::parse(body) {
                Ok(b) => b,
                Err(m) => return http_json::error(StatusCode::BAD_REQUEST, m),
            };
            match domain::devices::Pause::new(self.clock.now(), b.for_seconds, b.note) {
                Ok(p) => Some(p),
                Err(e) => return http_json::error(StatusCode::BAD_REQUEST, e),
            }
        } else {
            if let Err(m) = http_json::parse::<domain::relay::ResumeRequest>(body) {
                return http_json::error(StatusCode::BAD_REQUEST, m);
            }
            None
        };
        match self.store.set_device_pause(&device.owner, device.device_id, set.as_ref()).await {
            Err(e) => internal(&e),
            // Revoked between the token check and now.
            Ok(false) => http_json::error(StatusCode::UNAUTHORIZED, DEVICE_TOKEN_REQUIRED),
            Ok(true) => http_json::response(
                StatusCode::OK,
                domain::relay::PauseResponse {
                    paused: set.map(|p| domain::relay::PausedNotice {
                        until: p.until.map(domain::clock::Timestamp::rfc3339),
                        note: p.note,
                    }),
                },
            ),
        }
    }

    /// `POST /sync`: this device's sessions replace its own list (other desktops sharing the
    /// project keep theirs), and only commands for sessions this device shares are handed to it
    /// — a desktop is never given another desktop's run, so it never refuses (cancels) one.
    /// While the relay says its doorbell is connected, the safety poll relaxes to
    /// [`domain::doorbell::DOORBELL_POLL_INTERVAL`].
    ///
    /// A paused desktop still syncs its sessions (they stay listed for the chats) but is handed
    /// no command: its queued runs wait, and the answer says why (`paused`).
    async fn sync(
        &self,
        owner: &OwnerId,
        device: uuid::Uuid,
        body: &[u8],
        doorbell_up: bool,
        pause: Option<&domain::devices::Pause>,
    ) -> http::Response<Bytes> {
        let b: SyncRequest = match http_json::parse(body) {
            Ok(b) => b,
            Err(m) => return http_json::error(StatusCode::BAD_REQUEST, m),
        };
        let project = b.project_id;
        if let Err(e) = b.validate_slots() {
            return http_json::error(StatusCode::BAD_REQUEST, e.to_string());
        }
        if let Err(e) = validate_sessions(&b.sessions) {
            return http_json::error(StatusCode::BAD_REQUEST, e.to_string());
        }
        match self.store.sync_sessions(owner, project, device, &b.sessions).await {
            Err(e) => internal(&e),
            Ok(SyncOutcome::NotFound) => http_json::error(StatusCode::NOT_FOUND, "project_id: no such project"),
            Ok(SyncOutcome::TooLarge { bytes }) => http_json::error(
                StatusCode::BAD_REQUEST,
                format!(
                    "sessions: every desktop's shared sessions of a project take at most {} bytes together (this sync would make {bytes}); share fewer sessions or shorter descriptions",
                    domain::limits::MAX_SHARES_BYTES
                ),
            ),
            Ok(SyncOutcome::Disabled) => http_json::response(
                StatusCode::CONFLICT,
                ErrorResponse { error: "project is not enabled for connected agents".into(), enabled: Some(false) },
            ),
            Ok(SyncOutcome::Synced(p)) => {
                let filter = QueueFilter {
                    mine: b.sessions.iter().map(|s| s.graph_session_id.clone()).collect(),
                    shared: p.sessions.iter().map(|s| s.graph_session_id.clone()).collect(),
                };
                // A relay with every slot busy is handed nothing (it syncs to stay seen).
                let limit = b.free_slots.map_or(MAX_COMMANDS_PER_SYNC, |n| (n as usize).min(MAX_COMMANDS_PER_SYNC));
                let queued = match pause {
                    Some(_) => Ok(Vec::new()),
                    None if limit == 0 => Ok(Vec::new()),
                    None => self.store.list_queued(owner, project, limit, &filter).await,
                };
                match queued {
                    Err(e) => internal(&e),
                    Ok(runs) => http_json::response(
                        StatusCode::OK,
                        SyncResponse {
                            commands: runs
                                .into_iter()
                                .map(|r| QueuedCommand {
                                    command_id: r.command_id,
                                    graph_session_id: r.graph_session_id,
                                    slug: r.slug,
                                    arguments: r.arguments,
                                    queued_at: r.queued_at.rfc3339(),
                                })
                                .collect(),
                            poll_interval_s: if doorbell_up && self.doorbell_url.is_some() {
                                self.doorbell_poll_interval.as_secs().max(1)
                            } else {
                                self.policy.poll_interval.as_secs()
                            },
                            server_time: self.clock.now().rfc3339(),
                            doorbell_url: self.doorbell_url.clone(),
                            paused: pause.map(|p| domain::relay::PausedNotice {
                                until: p.until.map(domain::clock::Timestamp::rfc3339),
                                note: p.note.clone(),
                            }),
                        },
                    ),
                }
            }
        }
    }

    /// `POST /pairings`: a pending pairing under a fresh user code (drawn again on the rare
    /// collision), counted against the caller's address.
    async fn start_pairing(&self, req: &http::Request<Bytes>) -> http::Response<Bytes> {
        let b: PairRequest = match http_json::parse(req.body()) {
            Ok(b) => b,
            Err(m) => return http_json::error(StatusCode::BAD_REQUEST, m),
        };
        let desktop = Desktop { name: b.name, os: b.os, arch: b.arch };
        if let Err(e) = desktop.validate().and_then(|()| validate_token_hash(&b.token_sha256)) {
            return http_json::error(StatusCode::BAD_REQUEST, e.to_string());
        }
        let source = req.extensions().get::<ClientSource>().map(|s| s.0.as_str()).unwrap_or_default();
        for _ in 0..5 {
            let (code, device_code, hash) =
                match UserCode::generate().and_then(|c| new_device_code(&c).map(|(dc, h)| (c, dc, h))) {
                    Ok(v) => v,
                    Err(e) => return http_json::unavailable("drawing a pairing code", &e),
                };
            let p = Pairing::new(code.clone(), hash, b.token_sha256.clone(), desktop.clone(), source, self.clock.now());
            match self.store.start_pairing(&p).await {
                Err(e) => return internal(&e),
                Ok(PairingStart::CodeTaken) => {}
                Ok(PairingStart::TooMany) => return http_json::error(StatusCode::TOO_MANY_REQUESTS, TOO_MANY_PAIRINGS),
                Ok(PairingStart::TokenInUse) => return http_json::error(StatusCode::CONFLICT, TOKEN_IN_USE),
                Ok(PairingStart::Started) => {
                    let panel = format!("{}{}", self.public_url.trim_end_matches('/'), panel::PATH);
                    return http_json::response(
                        StatusCode::OK,
                        PairResponse {
                            device_code,
                            user_code: code.display(),
                            verification_uri_complete: format!("{panel}?pair={}", code.display()),
                            verification_uri: panel,
                            expires_in: PAIRING_TTL.as_secs(),
                            interval: POLL_INTERVAL.as_secs(),
                        },
                    );
                }
            }
        }
        tracing::error!("five fresh pairing codes in a row were taken");
        http_json::error(StatusCode::SERVICE_UNAVAILABLE, "temporarily unavailable; retry")
    }

    /// `POST /pairings/token`: RFC 8628 §3.5's answers, or the paired device.
    async fn poll_pairing(&self, body: &[u8]) -> http::Response<Bytes> {
        let b: PairTokenRequest = match http_json::parse(body) {
            Ok(b) => b,
            Err(m) => return http_json::error(StatusCode::BAD_REQUEST, m),
        };
        let outcome = match parse_device_code(&b.device_code) {
            None => PollOutcome::Expired,
            Some((code, hash)) => match self.store.poll_pairing(&code, &hash).await {
                Ok(o) => o,
                Err(e) => return internal(&e),
            },
        };
        let refuse = |error: &str, description: &str, interval: Option<u64>| {
            http_json::response(
                StatusCode::BAD_REQUEST,
                PairError { error: error.into(), error_description: description.into(), interval },
            )
        };
        match outcome {
            PollOutcome::Paired { owner, device_id, device_name } => http_json::response(
                StatusCode::OK,
                PairTokenResponse { device_id, device_name, account: owner.as_str().to_owned() },
            ),
            PollOutcome::TokenInUse => refuse(
                "access_denied",
                "this desktop's token already belongs to a device (another pairing of it was redeemed first); run `relay pair` again",
                None,
            ),
            PollOutcome::Pending => {
                refuse("authorization_pending", "waiting for the owner to approve this desktop in the panel", None)
            }
            PollOutcome::SlowDown => refuse(
                "slow_down",
                "polled too soon; wait the interval between polls",
                Some(POLL_INTERVAL.as_secs() + 5),
            ),
            PollOutcome::Refused => refuse("access_denied", "the owner refused this desktop", None),
            PollOutcome::Expired => refuse(
                "expired_token",
                "this pairing code expired or does not exist; run `relay pair` again for a new one",
                None,
            ),
        }
    }

    async fn start(&self, owner: &OwnerId, id: CommandId, device: uuid::Uuid, body: &[u8]) -> http::Response<Bytes> {
        let b: StartRequest = match http_json::parse(body) {
            Ok(b) => b,
            Err(m) => return http_json::error(StatusCode::BAD_REQUEST, m),
        };
        if let Err(e) = domain::limits::validate_execution_id(&b.execution_id) {
            return http_json::error(StatusCode::BAD_REQUEST, e.to_string());
        }
        match self.store.start_run(owner, id, &b.execution_id, device).await {
            Err(e) => internal(&e),
            Ok(StartOutcome::Started) => {
                http_json::response(StatusCode::OK, StartResponse { status: RunStatus::Running, replayed: false })
            }
            Ok(StartOutcome::Replayed) => {
                http_json::response(StatusCode::OK, StartResponse { status: RunStatus::Running, replayed: true })
            }
            Ok(StartOutcome::Refused(status)) => http_json::response(StatusCode::CONFLICT, StatusResponse { status }),
            Ok(StartOutcome::NotFound) => http_json::error(StatusCode::NOT_FOUND, "command_id: no such command"),
        }
    }

    async fn control(
        &self,
        owner: &OwnerId,
        id: CommandId,
        progress: Option<&domain::relay::ControlRequest>,
    ) -> http::Response<Bytes> {
        match self.store.control_run(owner, id, progress).await {
            Err(e) => internal(&e),
            Ok(ControlOutcome::Running { cancel_requested }) => {
                http_json::response(StatusCode::OK, ControlResponse { cancel_requested, status: None })
            }
            // Not running for the server any more (cancelled, timed out): the relay must stop.
            Ok(ControlOutcome::NotRunning(s)) => {
                http_json::response(StatusCode::OK, ControlResponse { cancel_requested: true, status: Some(s) })
            }
            Ok(ControlOutcome::NotFound) => http_json::error(StatusCode::NOT_FOUND, "command_id: no such command"),
        }
    }

    async fn complete(&self, owner: &OwnerId, id: CommandId, body: &[u8]) -> http::Response<Bytes> {
        let c: Completion = match http_json::parse(body) {
            Ok(c) => c,
            Err(m) => return http_json::error(StatusCode::BAD_REQUEST, m),
        };
        if let Err(e) = c.validate() {
            return http_json::error(StatusCode::BAD_REQUEST, e.to_string());
        }
        let outcome = match self.store.complete_run(owner, id, &c).await {
            Err(e) => return internal(&e),
            Ok(o) => o,
        };
        match outcome {
            CompleteOutcome::Recorded(status) => {
                http_json::response(StatusCode::OK, CompleteResponse { ok: true, replayed: false, status })
            }
            CompleteOutcome::Replayed(status) => {
                http_json::response(StatusCode::OK, CompleteResponse { ok: true, replayed: true, status })
            }
            CompleteOutcome::Conflict(status) => http_json::response(StatusCode::CONFLICT, StatusResponse { status }),
            CompleteOutcome::NotFound => http_json::error(StatusCode::NOT_FOUND, "command_id: no such command"),
        }
    }
}

impl<S: RelayStore + ?Sized> RelayApi<S> {
    /// `POST /tasks`: checks the request, the device's hourly count, then the store's one
    /// transaction (`DispatchTasks::dispatch_task`).
    async fn dispatch(&self, device: &domain::devices::Device, body: &[u8]) -> http::Response<Bytes> {
        use domain::dispatch::{DispatchOutcome, DispatchRejection, DispatchResponse, DispatchedTask};
        let b: domain::dispatch::DispatchRequest = match http_json::parse(body) {
            Ok(b) => b,
            Err(m) => return http_json::error(StatusCode::BAD_REQUEST, m),
        };
        let req = match self.dispatch_request(device, b) {
            Ok(r) => r,
            Err(e) => return http_json::error(StatusCode::BAD_REQUEST, e.to_string()),
        };
        let now = self.clock.now();
        let (counter, window_end) = domain::dispatch::device_hour(device.device_id, now);
        match self.store.failed_attempts(&counter, window_end).await {
            Err(e) => return internal(&e),
            Ok(n) if n >= domain::dispatch::MAX_TASKS_PER_DEVICE_HOUR => {
                return http_json::error(
                    StatusCode::TOO_MANY_REQUESTS,
                    DispatchRejection::TooManyForDevice.to_string(),
                );
            }
            Ok(_) => {}
        }
        match self.store.dispatch_task(&req).await {
            Err(e) => internal(&e),
            Ok(DispatchOutcome::Assigned(task)) => {
                // Counted after the write: concurrent dispatches can pass the hourly bound by
                // as many as run at once, never by more (the bound is a brake, not a quota).
                if let Err(e) = self.store.record_failed_attempt(&counter, window_end).await {
                    tracing::warn!(error = %domain::errors::ErrorChain(&e), "counting a dispatch failed");
                }
                http_json::response(
                    StatusCode::OK,
                    DispatchResponse { task: DispatchedTask::of(&task, now), replayed: false },
                )
            }
            Ok(DispatchOutcome::Replayed(task)) => http_json::response(
                StatusCode::OK,
                DispatchResponse { task: DispatchedTask::of(&task, self.clock.now()), replayed: true },
            ),
            Ok(DispatchOutcome::Rejected(why)) => {
                let status = match why {
                    DispatchRejection::LinkRefuses => StatusCode::NOT_FOUND,
                    DispatchRejection::TooManyForDevice => StatusCode::TOO_MANY_REQUESTS,
                    DispatchRejection::IdempotencyMismatch
                    | DispatchRejection::RunNotRunning
                    | DispatchRejection::TooManyForRun => StatusCode::CONFLICT,
                };
                http_json::error(status, why.to_string())
            }
        }
    }

    /// The validated store request of `b` from `device`.
    fn dispatch_request(
        &self,
        device: &domain::devices::Device,
        b: domain::dispatch::DispatchRequest,
    ) -> Result<domain::dispatch::DispatchTask, domain::errors::InputError> {
        let command_id = CommandId::parse("command_id", &b.command_id)?;
        let link_id = domain::ids::ChatLinkId::parse("chat_link_id", &b.chat_link_id)?;
        domain::dispatch::validate_dispatch_objective(&b.objective)?;
        let idempotency_key = domain::ids::IdempotencyKey::parse(&b.idempotency_key)?;
        let max = self.policy.max_dispatch_ttl();
        let ttl = domain::dispatch::validate_dispatch_ttl(b.expires_in_s.unwrap_or(max.as_secs()), max)?;
        Ok(domain::dispatch::DispatchTask {
            owner: device.owner.clone(),
            device_id: device.device_id,
            command_id,
            link_id,
            objective: b.objective,
            idempotency_key,
            ttl,
        })
    }

    /// `GET /links/{link}/tasks/{task}`: a task this device handed over, as it is now.
    async fn read_dispatched(
        &self,
        device: &domain::devices::Device,
        link: domain::ids::ChatLinkId,
        task: domain::ids::TaskId,
    ) -> http::Response<Bytes> {
        match self.store.dispatched_task(&device.owner, device.device_id, link, task).await {
            Err(e) => internal(&e),
            Ok(None) => http_json::error(StatusCode::NOT_FOUND, "task_id: no task this desktop handed to a chat"),
            Ok(Some(t)) => {
                http_json::response(StatusCode::OK, domain::dispatch::DispatchedTask::of(&t, self.clock.now()))
            }
        }
    }
}

/// Whether the request's doorbell header proves the relay's socket alive.
fn doorbell_up(headers: &http::HeaderMap) -> bool {
    headers
        .get(domain::doorbell::DOORBELL_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(domain::doorbell::proven_alive)
}

/// The relay's report of itself in [`RELAY_HEADER`], if it sent one (with its doorbell as the
/// doorbell header proves it).
///
/// # Errors
/// The header's part and rule, for a 400.
fn report_of(headers: &http::HeaderMap) -> Result<Option<RelayReport>, String> {
    match headers.get(RELAY_HEADER).map(|v| v.to_str()) {
        None => Ok(None),
        Some(Err(_)) => Err(format!("{RELAY_HEADER}: must be ASCII")),
        Some(Ok(v)) => RelayReport::parse(v, doorbell_up(headers)).map(Some),
    }
}
