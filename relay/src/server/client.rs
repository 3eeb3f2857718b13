//! The relay's HTTP client for the relay API (outbound HTTPS only; no listening port).

use std::future::Future;
use std::time::Duration;

use domain::ids::{CommandId, ProjectId};
use domain::relay::{CompleteResponse, ControlResponse, StartRequest, StatusResponse, SyncRequest, SyncResponse};
use domain::runs::{Completion, SessionMeta};
use serde::de::DeserializeOwned;

/// A queued command as `sync` returns it.
pub type Command = domain::relay::QueuedCommand;

/// What `sync` answered.
#[derive(Debug, Clone)]
pub enum Synced {
    /// The project's queued commands, oldest first, and the server's poll interval.
    Commands {
        /// Queued commands.
        commands: Vec<Command>,
        /// Seconds between polls.
        poll_interval: Duration,
        /// Where the doorbell is, when the server has one.
        doorbell_url: Option<String>,
        /// The owner paused this desktop (then `commands` is empty).
        paused: Option<domain::relay::PausedNotice>,
    },
    /// The owner disabled the project for connected agents.
    Disabled,
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Network trouble or a 5xx: retry later with backoff.
    #[error("server unreachable or failing: {0}")]
    Retryable(String),
    /// The server refused for good (4xx other than the documented conflicts).
    #[error("server refused: {status} {body}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// Response body.
        body: String,
    },
}

/// What `start` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// Running now (or already, with this execution id).
    Running,
    /// Not startable (e.g. cancelled meanwhile): the relay must not run it.
    Refused(String),
}

/// What `complete` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completed {
    /// Recorded (or replayed) with this status.
    Recorded(String),
    /// The server has it ended otherwise (409): final, drop from the outbox.
    Conflict(String),
}

/// What a control check answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Running: go on.
    Go,
    /// The agent asked to cancel: stop the run.
    Cancel,
    /// The server no longer has the run running (its status, or `missing`): stop it. A
    /// `failed` here is a run the server stopped waiting for (no report for its heartbeat
    /// timeout).
    Ended(String),
}

/// What the relay loop needs from the server: the four relay API calls. [`Client`] is the
/// real one (HTTPS); tests drive the loop with an in-memory one under tokio's paused time.
pub trait RelayServer: Send + Sync {
    /// `POST /sync`: this device's sessions for `project`; the project's queued commands, at
    /// most `free_slots` of them.
    fn sync(
        &self,
        project: ProjectId,
        sessions: &[SessionMeta],
        free_slots: u32,
    ) -> impl Future<Output = Result<Synced, ClientError>> + Send;
    /// `POST /commands/{id}/start`.
    fn start(&self, id: CommandId, execution_id: &str) -> impl Future<Output = Result<Started, ClientError>> + Send;
    /// `GET /commands/{id}/control`: whether to stop, and why.
    fn control(&self, id: CommandId) -> impl Future<Output = Result<Control, ClientError>> + Send;
    /// `POST /commands/{id}/control`: the same check, forwarding the run's newest progress.
    /// A server double without progress only checks control.
    fn progress(
        &self,
        id: CommandId,
        execution_id: &str,
        progress: &domain::progress::Progress,
    ) -> impl Future<Output = Result<Control, ClientError>> + Send {
        let _ = (execution_id, progress);
        self.control(id)
    }
    /// `POST /commands/{id}/complete`.
    fn complete(
        &self,
        id: CommandId,
        completion: &Completion,
    ) -> impl Future<Output = Result<Completed, ClientError>> + Send;
    /// The relay's slots now (its config's `max_parallel`), which its reports tell the server
    /// (`get_graph_run` counts them in a queued run's `check_after_s`). A double ignores it.
    fn set_slots(&self, slots: usize) {
        let _ = slots;
    }
    /// How many of its sessions the relay cannot use now (folders missing or refused), which
    /// its reports tell the server (the panel shows it). A double ignores it.
    fn set_unavailable(&self, sessions: usize) {
        let _ = sessions;
    }
    /// The computer woke or its network changed: connections kept for reuse are most likely
    /// dead (or go through a proxy no longer in use); drop them so the next request connects
    /// afresh. A double keeps none.
    fn renew_connections(&self) {}
    /// `POST /tasks`: a running Graph hands a task to a chat (`domain::dispatch`). A double
    /// that hands none refuses.
    fn dispatch(
        &self,
        request: &domain::dispatch::DispatchRequest,
    ) -> impl Future<Output = Result<domain::dispatch::DispatchResponse, ClientError>> + Send {
        let _ = request;
        std::future::ready(Err(ClientError::Refused {
            status: 501,
            body: "this server hands no tasks to chats".into(),
        }))
    }
    /// `GET /links/{link}/tasks/{task}`: a task this desktop handed over, as it is now.
    fn read_dispatched(
        &self,
        link: &str,
        task: &str,
    ) -> impl Future<Output = Result<domain::dispatch::DispatchedTask, ClientError>> + Send {
        let _ = (link, task);
        std::future::ready(Err(ClientError::Refused {
            status: 501,
            body: "this server hands no tasks to chats".into(),
        }))
    }
}

/// How the client's requests reach the server: [`Https`] in the product; the simulation
/// answers them in process with the real relay API handler. The client's reading of answers
/// (what is retryable, what is final) is the same either way.
pub trait Transport: Send + Sync {
    /// Sends `method path` (relative to the relay API prefix) with an optional JSON body;
    /// returns the status and the body text, or a network failure.
    fn request(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> impl Future<Output = Result<(u16, String), ClientError>> + Send;

    /// The relay's slots now (`max_parallel`), for the report its requests carry; a transport
    /// that sends no report ignores it.
    fn set_slots(&self, slots: usize) {
        let _ = slots;
    }

    /// Drops the connections kept for reuse ([`RelayServer::renew_connections`]).
    fn renew(&self) {}

    /// The sessions the relay cannot use now, for its report ([`RelayServer::set_unavailable`]).
    fn set_unavailable(&self, sessions: usize) {
        let _ = sessions;
    }
}

/// HTTPS to the server, with the device token.
#[derive(Clone)]
pub struct Https {
    /// Replaced by a new client (an empty connection pool) after a wake or a network change.
    http: std::sync::Arc<std::sync::RwLock<reqwest::Client>>,
    base: String,
    token: String,
    /// While it is open, syncs say how long ago it last answered (`DOORBELL_HEADER`): the
    /// server relaxes the poll while that is recent.
    bell: Option<std::sync::Arc<crate::server::doorbell::Doorbell>>,
    /// The [`domain::fleet::RELAY_HEADER`] every sync carries ([`this_relay`](crate::identity::this_relay)).
    report: domain::fleet::RelayReport,
    /// The state folder, whose last update check (`update.json`) says whether a newer build
    /// is published: the report's `update`.
    state_dir: Option<std::path::PathBuf>,
    /// When a request last carried the report.
    reported: std::sync::Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    /// The relay's slots, as its config says now (the report's `slots`).
    slots: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// Its sessions unavailable now (the report's `unavailable`).
    unavailable: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Https {
    /// Whether a control poll should carry the report: none sent for
    /// [`domain::fleet::DEVICE_SEEN_GRANULARITY`] (the server keeps "last seen" to that).
    fn report_due(&self) -> bool {
        let last = self.reported.lock().map(|l| *l).unwrap_or(None);
        last.is_none_or(|at| at.elapsed() >= domain::fleet::DEVICE_SEEN_GRANULARITY)
    }

    /// The report for a request now: [`this_relay`](crate::identity::this_relay), and a newer published build when the last
    /// update check found one.
    fn report_now(&self) -> String {
        if let Ok(mut l) = self.reported.lock() {
            *l = Some(std::time::Instant::now());
        }
        let published = self.state_dir.as_deref().and_then(crate::identity::LastCheck::read).and_then(|c| c.published);
        let update =
            published.filter(|p| crate::identity::compare(p, crate::identity::VERSION) == std::cmp::Ordering::Greater);
        let slots = Some(self.slots.load(std::sync::atomic::Ordering::Relaxed).max(1));
        let unavailable = Some(self.unavailable.load(std::sync::atomic::Ordering::Relaxed)).filter(|n| *n > 0);
        domain::fleet::RelayReport { update, slots, unavailable, ..self.report.clone() }.header_value()
    }
}

impl Transport for Https {
    async fn request(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, String), ClientError> {
        let url = format!("{}{path}", self.base);
        let http = self.http.read().map(|h| h.clone()).unwrap_or_else(|p| p.into_inner().clone());
        let mut req = match method {
            "GET" => http.get(url),
            _ => http.post(url),
        };
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        // Every sync says what the relay is; during a run (no syncs) one control poll a minute
        // does, so the owner sees the desktop there and the desktop watch leaves it alone.
        if path == "/sync" || (path.ends_with("/control") && self.report_due()) {
            req = req.header(domain::fleet::RELAY_HEADER, self.report_now());
            if let Some(age) = self.bell.as_ref().and_then(|b| b.alive_age()) {
                req = req.header(domain::doorbell::DOORBELL_HEADER, domain::doorbell::alive_header(age));
            }
        }
        let res = req.bearer_auth(&self.token).send().await.map_err(|e| ClientError::Retryable(e.to_string()))?;
        let status = res.status().as_u16();
        let text = res.text().await.map_err(|e| ClientError::Retryable(e.to_string()))?;
        Ok((status, text))
    }

    fn set_slots(&self, slots: usize) {
        self.slots.store(u32::try_from(slots).unwrap_or(u32::MAX), std::sync::atomic::Ordering::Relaxed);
    }

    fn set_unavailable(&self, sessions: usize) {
        let n = u32::try_from(sessions.min(domain::limits::MAX_SHARED_SESSIONS)).unwrap_or(u32::MAX);
        self.unavailable.store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// A new client: reqwest keeps idle connections by the monotonic clock, which stops while
    /// a Mac sleeps, so a connection that went dead during the sleep would otherwise be
    /// reused (and a request wait for its timeout) after the wake.
    fn renew(&self) {
        match https_client() {
            Ok(fresh) => {
                if let Ok(mut http) = self.http.write() {
                    *http = fresh;
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot renew the HTTPS client; keeping the old one"),
        }
    }
}

/// The relay API client.
#[derive(Clone)]
pub struct Client<T = Https> {
    transport: T,
}

/// Reads a response body the server documents; a body that does not parse means the server
/// is misbehaving (or a proxy answered): retry later.
fn body<T: DeserializeOwned>(text: &str) -> Result<T, ClientError> {
    serde_json::from_str(text).map_err(|e| ClientError::Retryable(format!("unexpected response ({e}): {text}")))
}

/// The status in a 409/404 body, `missing` when there is none.
fn status_of(text: &str) -> String {
    serde_json::from_str::<StatusResponse>(text)
        .map(|s| s.status.as_str().to_owned())
        .unwrap_or_else(|_| "missing".into())
}

/// The relay's HTTP client (the relay API, `relay pair`): rustls with ring, 30 s per request,
/// 10 s to connect, through the proxies the relay uses now
/// ([`crate::server::system_proxy::live`]: its environment's, else a Mac's system proxy), read
/// again for each new connection.
///
/// # Errors
/// When the TLS stack cannot start.
pub fn https_client() -> Result<reqwest::Client, reqwest::Error> {
    build(crate::server::system_proxy::for_reqwest())
}

/// [`https_client`] through `proxies` (`relay check` passes the agent's, read from its service
/// file): the same rule as the doorbell's socket, not reqwest's own reading of the variables.
///
/// # Errors
/// When the TLS stack cannot start.
pub fn https_client_with(proxies: &crate::server::proxy::Proxies) -> Result<reqwest::Client, reqwest::Error> {
    build(proxies.for_reqwest())
}

fn build(proxy: reqwest::Proxy) -> Result<reqwest::Client, reqwest::Error> {
    // reqwest is built without a crypto provider (see Cargo.toml): use ring. Installing twice
    // is harmless (the second returns the first).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(10))
        .no_proxy()
        .proxy(proxy)
        .build()
}

impl Client<Https> {
    /// A client for `server_url` with `token`.
    ///
    /// # Errors
    /// When the TLS stack cannot start.
    pub fn new(server_url: &str, token: &str) -> Result<Self, reqwest::Error> {
        Ok(Self::with_http(https_client()?, server_url, token))
    }

    /// A client for `server_url` with `token` over `http` (`relay check`'s, with the agent's
    /// proxies).
    pub fn with_http(http: reqwest::Client, server_url: &str, token: &str) -> Self {
        Self::over(Https {
            http: std::sync::Arc::new(std::sync::RwLock::new(http)),
            base: format!("{server_url}{}", domain::relay::PREFIX),
            token: token.to_owned(),
            bell: None,
            report: crate::identity::this_relay(),
            state_dir: None,
            reported: std::sync::Arc::new(std::sync::Mutex::new(None)),
            slots: std::sync::Arc::new(std::sync::atomic::AtomicU32::new(1)),
            unavailable: std::sync::Arc::default(),
        })
    }

    /// Syncs say whether the last update check kept in `state_dir` found a newer build.
    #[must_use]
    pub fn with_state_dir(mut self, state_dir: std::path::PathBuf) -> Self {
        self.transport.state_dir = Some(state_dir);
        self
    }

    /// Syncs tell the server when `bell` is connected.
    #[must_use]
    pub fn with_doorbell(mut self, bell: std::sync::Arc<crate::server::doorbell::Doorbell>) -> Self {
        self.transport.bell = Some(bell);
        self
    }
}

impl<T: Transport> Client<T> {
    /// A client over `transport`.
    pub fn over(transport: T) -> Self {
        Self { transport }
    }

    async fn send(
        &self,
        method: &'static str,
        path: &str,
        json: Option<Vec<u8>>,
    ) -> Result<(u16, String), ClientError> {
        let (status, body) = self.transport.request(method, path, json).await?;
        if status >= 500 || status == 429 {
            return Err(ClientError::Retryable(format!("{status} {body}")));
        }
        // A rejected device token is the owner's to fix (a new token in the config); until
        // then keep every completion in the outbox and back off, never drop one.
        if status == 401 || status == 403 {
            return Err(ClientError::Retryable(format!("device token rejected ({status}): {body}")));
        }
        // Only the relay API's own 404 (`{"error": "command_id: no such command"}`) says a
        // command is gone, and the relay acts on it (it stops the run, drops the completion).
        // A 404 of something else — API Gateway's `{"message":"Not Found"}` for a route the
        // deployed stack lacks, a proxy's page — says nothing about the run: retry later, and
        // lose nothing meanwhile.
        if status == 404 && serde_json::from_str::<domain::relay::ErrorResponse>(&body).is_err() {
            return Err(ClientError::Retryable(format!(
                "404 that is not the relay API's answer (a route this server lacks? check server_url): {body}"
            )));
        }
        Ok((status, body))
    }

    /// `relay pause` (`Some`) or `relay resume` (`None`): the pause now in force.
    ///
    /// # Errors
    /// A refusal (a bad duration or note, a revoked token) or the network.
    pub async fn set_pause(
        &self,
        pause: Option<&domain::relay::PauseRequest>,
    ) -> Result<Option<domain::relay::PausedNotice>, ClientError> {
        let (path, b) = match pause {
            Some(p) => ("/pause", json(p)),
            None => ("/resume", json(&domain::relay::ResumeRequest {})),
        };
        let (status, text) = self.send("POST", path, b).await?;
        match status {
            200 => Ok(body::<domain::relay::PauseResponse>(&text)?.paused),
            _ => Err(Self::refused(status, text)),
        }
    }

    fn refused(status: u16, body: String) -> ClientError {
        ClientError::Refused { status, body }
    }

    /// A control check's answer, `GET` or `POST` alike: whether to stop (a run the server no
    /// longer knows — `404` — is stopped too).
    fn control_answer(status: u16, text: String) -> Result<Control, ClientError> {
        match status {
            200 => {
                let answer: ControlResponse = body(&text)?;
                Ok(match answer.status {
                    Some(ended) => Control::Ended(ended.as_str().to_owned()),
                    None if answer.cancel_requested => Control::Cancel,
                    None => Control::Go,
                })
            }
            404 => Ok(Control::Ended("missing".into())),
            _ => Err(Self::refused(status, text)),
        }
    }
}

fn json(v: &impl serde::Serialize) -> Option<Vec<u8>> {
    serde_json::to_vec(v).ok()
}

impl<T: Transport> RelayServer for Client<T> {
    async fn dispatch(
        &self,
        request: &domain::dispatch::DispatchRequest,
    ) -> Result<domain::dispatch::DispatchResponse, ClientError> {
        let (status, text) = self.send("POST", "/tasks", json(request)).await?;
        match status {
            200 => body(&text),
            _ => Err(Self::refused(status, text)),
        }
    }

    async fn read_dispatched(&self, link: &str, task: &str) -> Result<domain::dispatch::DispatchedTask, ClientError> {
        // Ids the server handed out; anything else is refused before it is sent.
        let ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        if !ok(link) || !ok(task) {
            return Err(Self::refused(400, "chat_link_id and task_id must be ids the server handed out".into()));
        }
        let (status, text) = self.send("GET", &format!("/links/{link}/tasks/{task}"), None).await?;
        match status {
            200 => body(&text),
            _ => Err(Self::refused(status, text)),
        }
    }

    async fn sync(&self, project: ProjectId, sessions: &[SessionMeta], free_slots: u32) -> Result<Synced, ClientError> {
        let req = SyncRequest { project_id: project, sessions: sessions.to_vec(), free_slots: Some(free_slots) };
        let (status, text) = self.send("POST", "/sync", json(&req)).await?;
        match status {
            200 => {
                let r: SyncResponse = body(&text)?;
                Ok(Synced::Commands {
                    commands: r.commands,
                    poll_interval: Duration::from_secs(r.poll_interval_s.max(1)),
                    doorbell_url: r.doorbell_url,
                    paused: r.paused,
                })
            }
            409 => Ok(Synced::Disabled),
            _ => Err(Self::refused(status, text)),
        }
    }

    async fn start(&self, id: CommandId, execution_id: &str) -> Result<Started, ClientError> {
        let req = StartRequest { execution_id: execution_id.to_owned() };
        let (status, text) = self.send("POST", &format!("/commands/{id}/start"), json(&req)).await?;
        match status {
            200 => Ok(Started::Running),
            409 | 404 => Ok(Started::Refused(status_of(&text))),
            _ => Err(Self::refused(status, text)),
        }
    }

    async fn control(&self, id: CommandId) -> Result<Control, ClientError> {
        let (status, text) = self.send("GET", &format!("/commands/{id}/control"), None).await?;
        Self::control_answer(status, text)
    }

    async fn progress(
        &self,
        id: CommandId,
        execution_id: &str,
        progress: &domain::progress::Progress,
    ) -> Result<Control, ClientError> {
        let req = domain::relay::ControlRequest { execution_id: execution_id.to_owned(), progress: progress.clone() };
        let (status, text) = self.send("POST", &format!("/commands/{id}/control"), json(&req)).await?;
        Self::control_answer(status, text)
    }

    async fn complete(&self, id: CommandId, completion: &Completion) -> Result<Completed, ClientError> {
        let (status, text) = self.send("POST", &format!("/commands/{id}/complete"), json(completion)).await?;
        match status {
            200 => Ok(Completed::Recorded(body::<CompleteResponse>(&text)?.status.as_str().to_owned())),
            409 | 404 => Ok(Completed::Conflict(status_of(&text))),
            _ => Err(Self::refused(status, text)),
        }
    }

    fn set_slots(&self, slots: usize) {
        self.transport.set_slots(slots);
    }

    fn renew_connections(&self) {
        self.transport.renew();
    }

    fn set_unavailable(&self, sessions: usize) {
        self.transport.set_unavailable(sessions);
    }
}

#[cfg(test)]
mod tests;
