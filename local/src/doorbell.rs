//! The local doorbell (`domain::doorbell`): `GET /external-assistants/graph-relays/doorbell`
//! upgraded to a WebSocket, authenticated by the device token on the upgrade request (401 and
//! nothing kept otherwise), fed by the rings of the embedded store's committed changes.
//!
//! Like API Gateway's WebSocket API in the cloud, a connection lasts at most 2 hours; the token
//! is checked again every [`Hub::recheck`] so a revoked device's socket closes (code 4401) and
//! its reconnects are refused. [`Hub::set_enabled`] stops the doorbell while the server keeps
//! running (tests kill it mid-way to show the poll takes over).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use domain::doorbell::{MAX_CONNECTION, Ring, RingFor};
use domain::ids::OwnerId;
use domain::store::AuthenticateDevices;
use store_sqlite::SqliteStore;
use tokio::sync::mpsc;

/// Rings waiting for one socket; more are dropped (a ring is a hint).
const PER_CONNECTION: usize = 64;

struct Conn {
    owner: OwnerId,
    device: uuid::Uuid,
    tx: mpsc::Sender<Ring>,
}

/// The open doorbell sockets, by owner.
pub struct Hub {
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Conn>>,
    enabled: AtomicBool,
    /// Closes every socket when the doorbell is disabled.
    closed: tokio::sync::Notify,
    /// How often each socket's token is checked again.
    pub recheck: Duration,
    rings_sent: AtomicU64,
    /// Fault hook: rings are dropped instead of sent (tests show the safety poll covers them).
    dropping: AtomicBool,
}

impl Hub {
    /// An empty hub checking tokens every `recheck`.
    pub fn new(recheck: Duration) -> Self {
        Self {
            next: AtomicU64::new(1),
            conns: Mutex::new(HashMap::new()),
            enabled: AtomicBool::new(true),
            closed: tokio::sync::Notify::new(),
            recheck,
            rings_sent: AtomicU64::new(0),
            dropping: AtomicBool::new(false),
        }
    }

    /// Drops every ring from now on (`true`) or sends them again: a lost-ring fault.
    pub fn drop_rings(&self, on: bool) {
        self.dropping.store(on, Ordering::SeqCst);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Conn>> {
        self.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends `r` to every socket of its owner's desktops.
    pub fn ring(&self, r: &RingFor) {
        if self.dropping.load(Ordering::SeqCst) {
            return;
        }
        for c in self.lock().values().filter(|c| c.owner == r.owner) {
            if c.tx.try_send(r.ring.clone()).is_ok() {
                self.rings_sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// How many sockets are open (of `device`, or of all).
    pub fn connected(&self, device: Option<uuid::Uuid>) -> usize {
        self.lock().values().filter(|c| device.is_none_or(|d| c.device == d)).count()
    }

    /// Rings handed to sockets so far.
    pub fn rings_sent(&self) -> u64 {
        self.rings_sent.load(Ordering::Relaxed)
    }

    /// Turns the doorbell off (every socket closes, upgrades answer 503) or on again.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
        if !on {
            self.closed.notify_waiters();
        }
    }

    fn register(&self, owner: OwnerId, device: uuid::Uuid) -> (u64, mpsc::Receiver<Ring>) {
        let (tx, rx) = mpsc::channel(PER_CONNECTION);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, Conn { owner, device, tx });
        (id, rx)
    }

    fn unregister(&self, id: u64) {
        self.lock().remove(&id);
    }
}

/// Forwards the store's rings to the hub until the store is gone.
pub fn feed(store: &SqliteStore, hub: Arc<Hub>) -> tokio::task::JoinHandle<()> {
    let mut rings = store.rings();
    tokio::spawn(async move {
        loop {
            match rings.recv().await {
                Ok(r) => hub.ring(&r),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::debug!(skipped = n, "doorbell fell behind; the relays' polls cover it");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

/// The upgrade: 401 without a valid device token, 503 while the doorbell is off.
pub async fn upgrade(
    hub: Arc<Hub>,
    store: Arc<SqliteStore>,
    headers: &http::HeaderMap,
    ws: WebSocketUpgrade,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !hub.enabled.load(Ordering::SeqCst) {
        return (http::StatusCode::SERVICE_UNAVAILABLE, "doorbell unavailable").into_response();
    }
    let Some(device) = service::relay_api::device_of(store.as_ref(), headers).await.ok().flatten() else {
        return service::http_json::error(http::StatusCode::UNAUTHORIZED, service::relay_api::DEVICE_TOKEN_REQUIRED)
            .map(axum::body::Body::from)
            .into_response();
    };
    ws.on_upgrade(move |socket| serve(socket, hub, store, device.owner, device.device_id, device.token_hash))
}

async fn serve(
    mut socket: WebSocket,
    hub: Arc<Hub>,
    store: Arc<SqliteStore>,
    owner: OwnerId,
    device: uuid::Uuid,
    hash: String,
) {
    let (id, mut rx) = hub.register(owner, device);
    tracing::debug!(%device, "doorbell connected");
    let mut recheck = tokio::time::interval(hub.recheck);
    recheck.tick().await;
    let limit = tokio::time::sleep(MAX_CONNECTION);
    tokio::pin!(limit);
    let closed = hub.closed.notified();
    tokio::pin!(closed);
    let close = |code: u16, reason: &'static str| Message::Close(Some(CloseFrame { code, reason: reason.into() }));
    loop {
        tokio::select! {
            Some(ring) = rx.recv() => {
                let text = serde_json::to_string(&ring).unwrap_or_default();
                if socket.send(Message::Text(text.into())).await.is_err() {
                    break;
                }
            }
            msg = socket.recv() => match msg {
                None | Some(Err(_) | Ok(Message::Close(_))) => break,
                // Pings are answered by the WebSocket layer; the relay sends nothing else.
                Some(Ok(_)) => {}
            },
            _ = recheck.tick() => {
                // Revoked (a read that fails is not a revocation: the next check decides).
                if matches!(store.device_by_token_hash(&hash).await, Ok(None)) {
                    let _ = socket.send(close(4401, "device revoked")).await;
                    break;
                }
            }
            () = &mut closed => {
                let _ = socket.send(close(1012, "doorbell restarting")).await;
                break;
            }
            () = &mut limit => {
                let _ = socket.send(close(1001, "connection limit reached; reconnect")).await;
                break;
            }
        }
    }
    hub.unregister(id);
    tracing::debug!(%device, "doorbell disconnected");
}
