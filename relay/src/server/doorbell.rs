//! The doorbell, desktop side (`domain::doorbell`): one outbound WebSocket to the URL the
//! server hands out in its sync answers, authenticated with the device token.
//!
//! - `{"ring":"sync"}` wakes the relay's loop for a pass at once (with every slot busy it
//!   syncs but starts nothing); `{"ring":"control","command_id":…}` makes that running command
//!   check its control at once (the other slots wait for their own polls).
//! - A keep-alive every [`PING_EVERY`](domain::doorbell::PING_EVERY) (the data message
//!   [`KEEPALIVE`](domain::doorbell::KEEPALIVE), which a route of the WebSocket API answers:
//!   API Gateway documents no answer to ping frames) keeps the connection inside API Gateway's 10-minute idle limit,
//!   and each must be answered within [`PONG_DEADLINE`](domain::doorbell::PONG_DEADLINE): a socket cut silently (a laptop that
//!   slept, a Wi-Fi change, a NAT that forgot the flow — no close frame ever arrives) is called
//!   dead then and replaced. TCP keepalive (60 s idle, then every 10 s) covers the time between
//!   pings on the kernel's side. It is replaced before the 2-hour limit, at once when the loop
//!   sees the computer wake or its network addresses change ([`Doorbell::reconnect`]), and after
//!   a failure it is retried with the relay's jittered backoff (1 s, 2 s, … 5 min).
//! - Syncs carry `DOORBELL_HEADER` with the age of the socket's last answer, by the wall clock
//!   (which, unlike the monotonic one, counts the time a Mac slept); the server relaxes the
//!   safety poll to 300 s only while that age is within `PROVEN_WITHIN`. When it drops, the loop
//!   goes back to its own interval at once and syncs (rings sent while it was down are lost, the
//!   sync is not).
//! - It connects through the `http://` proxy the environment names for its URL
//!   ([`crate::server::proxy`]: `HTTPS_PROXY` for `wss://`), with an HTTP `CONNECT` tunnel.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use domain::doorbell::{MAX_CONNECTION, RECONNECT_BEFORE_LIMIT, Ring};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::{Notify, watch};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::server::backoff::Backoff;
use crate::server::proxy::Proxies;

pub use crate::config::DoorbellTiming as Timing;

/// The doorbell's state, shared by the socket task, the loop and the HTTP client.
#[derive(Debug)]
pub struct Doorbell {
    /// A `sync` ring (or a reconnect, which may have missed rings).
    pub sync: Notify,
    /// `control` rings, by run: each running slot listens for its own ([`Doorbell::control_rings`]).
    control: tokio::sync::broadcast::Sender<domain::ids::CommandId>,
    /// `task` rings: a task a run handed to a chat ended ([`Doorbell::task_rings`]).
    tasks: tokio::sync::broadcast::Sender<domain::ids::TaskId>,
    up: watch::Sender<bool>,
    url: watch::Sender<Option<String>>,
    rings: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// When the socket last proved alive (opened, or any frame received), by the wall clock.
    alive_at: Mutex<Option<SystemTime>>,
    /// Asks for a new socket now (the computer woke, its addresses changed).
    renew: Notify,
}

impl Default for Doorbell {
    fn default() -> Self {
        Self {
            sync: Notify::new(),
            control: tokio::sync::broadcast::channel(64).0,
            tasks: tokio::sync::broadcast::channel(64).0,
            up: watch::channel(false).0,
            url: watch::channel(None).0,
            rings: AtomicU64::new(0),
            last_error: Mutex::new(None),
            alive_at: Mutex::new(None),
            renew: Notify::new(),
        }
    }
}

impl Doorbell {
    /// Whether the socket is open now.
    pub fn is_up(&self) -> bool {
        *self.up.borrow()
    }

    /// How long ago the open socket last proved alive (by the wall clock, so the time a
    /// computer slept counts); `None` while it is not open.
    pub fn alive_age(&self) -> Option<Duration> {
        if !self.is_up() {
            return None;
        }
        let at = (*self.alive_at.lock().ok()?)?;
        Some(SystemTime::now().duration_since(at).unwrap_or_default())
    }

    /// Replaces the socket now (and skips a backoff wait): the loop calls it when the computer
    /// woke or its network changed, after which an open socket is likely dead.
    pub fn reconnect(&self) {
        self.renew.notify_one();
    }

    fn alive(&self) {
        if let Ok(mut g) = self.alive_at.lock() {
            *g = Some(SystemTime::now());
        }
    }

    /// Tests only: the socket is open and just proved alive (or is closed).
    #[cfg(test)]
    pub(crate) fn set_up_for_tests(&self, up: bool) {
        self.alive();
        self.up.send_replace(up);
    }

    /// Changes of [`Doorbell::is_up`].
    pub fn watch_up(&self) -> watch::Receiver<bool> {
        self.up.subscribe()
    }

    /// The URL the server handed out (from every sync answer); a new one reconnects.
    pub fn offer_url(&self, url: Option<String>) {
        self.url.send_if_modified(|u| {
            let changed = *u != url;
            *u = url;
            changed
        });
    }

    /// Rings received since the relay started.
    pub fn rings(&self) -> u64 {
        self.rings.load(Ordering::Relaxed)
    }

    /// One line for `relay status`.
    pub fn describe(&self) -> String {
        if self.is_up() {
            return format!("connected ({} rings so far)", self.rings());
        }
        match (self.url.borrow().is_some(), self.last_error.lock().ok().and_then(|e| e.clone())) {
            (false, _) => "not offered by the server (polling only)".into(),
            (true, Some(e)) => format!("reconnecting (last error: {e}); polling meanwhile"),
            (true, None) => "connecting".into(),
        }
    }

    fn set_error(&self, e: Option<String>) {
        if let Ok(mut g) = self.last_error.lock() {
            *g = e;
        }
    }

    /// Rings `command`'s control check (the socket, or the simulation directly).
    pub fn ring_control(&self, command: domain::ids::CommandId) {
        // No receiver: no run is listening, nothing to wake.
        let _ = self.control.send(command);
    }

    /// The control rings from now on: a running slot checks control at once when its own run
    /// is rung (or when rings were missed: a lagging receiver).
    pub fn control_rings(&self) -> tokio::sync::broadcast::Receiver<domain::ids::CommandId> {
        self.control.subscribe()
    }

    /// Rings the wait for `task` (the socket, or a test directly).
    pub fn ring_task(&self, task: domain::ids::TaskId) {
        let _ = self.tasks.send(task);
    }

    /// The task rings from now on: each waiting ask listens for its own task (and reads again
    /// when rings were missed: a lagging receiver).
    pub fn task_rings(&self) -> tokio::sync::broadcast::Receiver<domain::ids::TaskId> {
        self.tasks.subscribe()
    }

    fn received(&self, text: &str) {
        if text == domain::doorbell::KEEPALIVE_ANSWER {
            return;
        }
        match serde_json::from_str::<Ring>(text) {
            Ok(Ring::Sync) => {
                self.rings.fetch_add(1, Ordering::Relaxed);
                self.sync.notify_one();
            }
            Ok(Ring::Control { command_id }) => {
                self.rings.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(command = %command_id, "control ring");
                self.ring_control(command_id);
            }
            Ok(Ring::Task { task_id, .. }) => {
                self.rings.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(task = %task_id, "task ring");
                self.ring_task(task_id);
            }
            Err(_) => tracing::debug!(text, "unknown doorbell message; ignored"),
        }
    }
}

/// Why a connection ended.
enum Ended {
    /// Replaced on purpose (the 2-hour limit, a wake, a new URL): reconnect at once.
    Refresh,
    /// Closed or failed: reconnect after the backoff.
    Dropped(String),
}

/// Keeps the doorbell open with `token` for as long as the task lives (the caller aborts it),
/// pinging as `timing` says; each connection goes through the proxies the relay uses then
/// ([`crate::server::system_proxy::live`]), so a proxy that changed with the network is
/// followed at the next (re)connect.
pub async fn keep_open(bell: Arc<Doorbell>, token: String, mut backoff: Backoff, timing: Timing) {
    let mut url_rx = bell.url.subscribe();
    loop {
        let Some(url) = url_rx.borrow_and_update().clone() else {
            if url_rx.changed().await.is_err() {
                return;
            }
            continue;
        };
        let ended = match connect(&url, &token, &crate::server::system_proxy::live()).await {
            Err(e) => Ended::Dropped(e),
            Ok(ws) => {
                tracing::info!(%url, "doorbell connected; the safety poll relaxes");
                backoff.reset();
                bell.set_error(None);
                bell.alive();
                bell.up.send_replace(true);
                // Rings sent while it was down are lost: one sync covers them.
                bell.sync.notify_one();
                let ended = tokio::select! {
                    e = listen(ws, &bell, timing) => e,
                    _ = url_rx.changed() => Ended::Refresh,
                };
                bell.up.send_replace(false);
                ended
            }
        };
        match ended {
            Ended::Refresh => {}
            Ended::Dropped(e) => {
                let delay = backoff.next_delay();
                tracing::info!(error = %e, retry_in_ms = delay.as_millis() as u64, "doorbell down; polling meanwhile");
                bell.set_error(Some(e));
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = url_rx.changed() => {}
                    () = bell.renew.notified() => {}
                }
            }
        }
    }
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(url: &str, token: &str, proxies: &Proxies) -> Result<Socket, String> {
    let mut req = url.into_client_request().map_err(|e| format!("bad doorbell URL {url}: {e}"))?;
    let auth = format!("Bearer {token}").parse().map_err(|_| "the device token is not a valid header".to_owned())?;
    req.headers_mut().insert(http::header::AUTHORIZATION, auth);
    let tls = req.uri().scheme_str() == Some("wss");
    let host = req.uri().host().ok_or_else(|| format!("bad doorbell URL {url}: no host"))?.to_owned();
    let port = req.uri().port_u16().unwrap_or(if tls { 443 } else { 80 });
    let connector = tokio_tungstenite::Connector::Rustls(tls_config()?);
    let connecting = async {
        let tcp = crate::server::proxy::connect(proxies.for_target(tls, &host), &host, port).await?;
        keepalive(&tcp);
        match tokio_tungstenite::client_async_tls_with_config(req, tcp, None, Some(connector)).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(res)) => {
                Err(format!("the server refused the doorbell (HTTP {})", res.status().as_u16()))
            }
            Err(e) => Err(e.to_string()),
            Ok((ws, _)) => Ok(ws),
        }
    };
    tokio::time::timeout(Duration::from_secs(15), connecting).await.map_err(|_| "connecting timed out".to_owned())?
}

/// Opens the doorbell at `url` with `token` through `proxies`, and closes it (`relay check`).
///
/// # Errors
/// Why it did not open.
pub async fn probe(url: &str, token: &str, proxies: &Proxies) -> Result<(), String> {
    let mut ws = connect(url, token, proxies).await?;
    let _ = ws.close(None).await;
    Ok(())
}

/// TCP keepalive on the doorbell's socket: probes after 60 s idle, every 10 s, 3 unanswered
/// end it. (Between pings the kernel notices a dead peer on its own; the pong deadline is
/// what the relay itself enforces.)
fn keepalive(tcp: &tokio::net::TcpStream) {
    let params = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(60))
        .with_interval(Duration::from_secs(10))
        .with_retries(3);
    if let Err(e) = socket2::SockRef::from(tcp).set_tcp_keepalive(&params) {
        tracing::debug!(error = %e, "TCP keepalive not set on the doorbell");
    }
}

/// The same trust as the relay's HTTPS calls: the platform's verifier (the macOS keychain,
/// the system roots elsewhere).
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls_platform_verifier::ConfigVerifierExt;
    let _ = rustls::crypto::ring::default_provider().install_default();
    rustls::ClientConfig::with_platform_verifier().map(Arc::new).map_err(|e| format!("TLS set-up failed: {e}"))
}

async fn listen(ws: Socket, bell: &Doorbell, timing: Timing) -> Ended {
    let (mut tx, mut rx) = ws.split();
    let mut ping = tokio::time::interval(timing.ping);
    ping.tick().await;
    let refresh = tokio::time::sleep(MAX_CONNECTION - RECONNECT_BEFORE_LIMIT);
    tokio::pin!(refresh);
    // When the oldest unanswered ping went out (any frame received answers it).
    let mut unanswered: Option<tokio::time::Instant> = None;
    loop {
        let deadline = async {
            match unanswered {
                Some(sent) => tokio::time::sleep_until(sent + timing.pong_deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            msg = rx.next() => {
                if let Some(Ok(_)) = &msg {
                    bell.alive();
                    unanswered = None;
                }
                match msg {
                    Some(Ok(Message::Text(t))) => bell.received(t.as_str()),
                    Some(Ok(Message::Close(frame))) => {
                        return Ended::Dropped(frame.map_or_else(|| "closed by the server".into(), |f| {
                            format!("closed by the server ({} {})", u16::from(f.code), f.reason)
                        }));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Ended::Dropped(e.to_string()),
                    None => return Ended::Dropped("connection ended".into()),
                }
            }
            _ = ping.tick() => {
                // A data message its route answers (API Gateway documents no answer to a ping frame).
                if let Err(e) = tx.send(Message::Text(domain::doorbell::KEEPALIVE.into())).await {
                    return Ended::Dropped(e.to_string());
                }
                unanswered.get_or_insert_with(tokio::time::Instant::now);
            }
            () = deadline => {
                return Ended::Dropped(format!(
                    "no answer to a ping within {} s: the connection died without closing (a sleep or a network change)",
                    timing.pong_deadline.as_secs_f64()
                ));
            }
            () = bell.renew.notified() => {
                let _ = tx.send(Message::Close(None)).await;
                return Ended::Refresh;
            }
            () = &mut refresh => {
                let _ = tx.send(Message::Close(None)).await;
                return Ended::Refresh;
            }
        }
    }
}

/// `http(s)://…` → `ws(s)://…` (a doorbell URL given as the server's own scheme).
pub fn websocket_url(url: &str) -> String {
    if let Some(rest) = url.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = url.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        url.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_wake_the_right_waiter() {
        let bell = Doorbell::default();
        let mut rings = bell.control_rings();
        let id = domain::ids::CommandId::generate();
        bell.received(r#"{"ring":"sync"}"#);
        bell.received(&format!(r#"{{"ring":"control","command_id":"{id}"}}"#));
        bell.received(r#"{"ring":"party"}"#);
        assert_eq!(bell.rings(), 2);
        // The sync ring stored one permit; the control ring reached the listener with its run.
        let now = futures_util::FutureExt::now_or_never(bell.sync.notified());
        assert!(now.is_some());
        assert_eq!(rings.try_recv().unwrap(), id);
        assert!(rings.try_recv().is_err());
        assert!(futures_util::FutureExt::now_or_never(bell.sync.notified()).is_none());
    }

    #[test]
    fn urls_and_status_lines() {
        assert_eq!(websocket_url("https://a.example/x"), "wss://a.example/x");
        assert_eq!(websocket_url("http://127.0.0.1:8787/x"), "ws://127.0.0.1:8787/x");
        let bell = Doorbell::default();
        assert!(bell.describe().contains("polling only"));
        bell.offer_url(Some("ws://x".into()));
        assert_eq!(bell.describe(), "connecting");
    }
}
