//! The local doorbell (`domain::doorbell`): `GET /external-assistants/graph-relays/doorbell`
//! upgraded to a WebSocket, authenticated by the device token on the upgrade request (401 and
//! nothing kept otherwise), fed by the rings of the embedded store's committed changes.
//!
//! Like API Gateway's WebSocket API in the cloud, a connection lasts at most 2 hours. What one
//! leaked device token can cost is bounded:
//!
//! - **Sockets**: at most [`MAX_SOCKETS_PER_DEVICE`] per device — a newer one replaces the
//!   oldest, which is closed with [`CLOSE_REPLACED`] — and at most [`Limits::total`] in all
//!   (503 past it; the relay polls instead).
//! - **Messages**: a relay sends only pings and a close, so a frame or message over
//!   [`MAX_CLIENT_MESSAGE_BYTES`] ends the socket before it is buffered, and any data message
//!   ends it too.
//! - **Token checks**: one per device every [`Hub::recheck`], however many sockets it has; a
//!   revoked device's sockets all close ([`CLOSE_REVOKED`]) and its reconnects are refused.
//!
//! [`Hub::set_enabled`] stops the doorbell while the server keeps running (tests kill it
//! mid-way to show the poll takes over).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use domain::doorbell::{
    CLOSE_REPLACED, CLOSE_REVOKED, MAX_CLIENT_MESSAGE_BYTES, MAX_CONNECTION, MAX_SOCKETS_PER_DEVICE, Ring, RingFor,
};
use domain::ids::OwnerId;
use domain::store::AuthenticateDevices;
use tokio::sync::{mpsc, oneshot};

/// Rings waiting for one socket; more are dropped (a ring is a hint).
const PER_CONNECTION: usize = 64;

/// Why the hub closes a socket.
type CloseWith = (u16, &'static str);

struct Conn {
    owner: OwnerId,
    device: uuid::Uuid,
    tx: mpsc::Sender<Ring>,
    close: Option<oneshot::Sender<CloseWith>>,
}

/// The sockets, and one token watch per device that has any.
#[derive(Default)]
struct Sockets {
    conns: HashMap<u64, Conn>,
    watches: HashMap<uuid::Uuid, tokio::task::JoinHandle<()>>,
}

impl Sockets {
    /// Forgets socket `id` and tells it to close with `why`.
    fn close(&mut self, id: u64, why: CloseWith) {
        if let Some(c) = self.conns.remove(&id)
            && let Some(tx) = c.close
        {
            let _ = tx.send(why);
        }
    }
}

/// The hub's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Sockets per device (a newer one replaces the oldest).
    pub per_device: usize,
    /// Sockets in all.
    pub total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { per_device: MAX_SOCKETS_PER_DEVICE, total: DEFAULT_TOTAL }
    }
}

/// Sockets the local doorbell holds at most (below the listener's connection cap, so sockets
/// cannot take every connection).
pub const DEFAULT_TOTAL: usize = 128;

/// The doorbell is at its [`Limits::total`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// The open doorbell sockets, by owner.
pub struct Hub {
    next: AtomicU64,
    sockets: Mutex<Sockets>,
    limits: Limits,
    store: Arc<dyn AuthenticateDevices>,
    enabled: AtomicBool,
    /// Closes every socket when the doorbell is disabled.
    closed: tokio::sync::Notify,
    /// How often each device's token is checked again.
    pub recheck: Duration,
    rings_sent: AtomicU64,
    token_checks: AtomicU64,
    /// Fault hook: rings are dropped instead of sent (tests show the safety poll covers them).
    dropping: AtomicBool,
}

/// A socket's place in the hub, taken before the upgrade: its rings, and the hub's word to
/// close it. Dropping it (the socket ended, or the upgrade never happened) frees the place.
pub struct Registration {
    hub: Arc<Hub>,
    id: u64,
    device: uuid::Uuid,
    rings: mpsc::Receiver<Ring>,
    close: oneshot::Receiver<CloseWith>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.hub.release(self.id, self.device);
    }
}

impl Hub {
    /// An empty hub checking tokens in `store` every `recheck`, with the default limits.
    pub fn new(store: Arc<dyn AuthenticateDevices>, recheck: Duration) -> Self {
        Self::with_limits(store, recheck, Limits::default())
    }

    /// An empty hub with `limits`.
    pub fn with_limits(store: Arc<dyn AuthenticateDevices>, recheck: Duration, limits: Limits) -> Self {
        Self {
            next: AtomicU64::new(1),
            sockets: Mutex::new(Sockets::default()),
            limits,
            store,
            enabled: AtomicBool::new(true),
            closed: tokio::sync::Notify::new(),
            recheck,
            rings_sent: AtomicU64::new(0),
            token_checks: AtomicU64::new(0),
            dropping: AtomicBool::new(false),
        }
    }

    /// Drops every ring from now on (`true`) or sends them again: a lost-ring fault.
    pub fn drop_rings(&self, on: bool) {
        self.dropping.store(on, Ordering::SeqCst);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sockets> {
        self.sockets.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends `r` to the sockets of its owner's desktops in `to` (`None`: all of them), as
    /// [`domain::store::ring_recipients`] resolves it.
    pub fn ring(&self, r: &RingFor, to: Option<&std::collections::BTreeSet<uuid::Uuid>>) {
        if self.dropping.load(Ordering::SeqCst) {
            return;
        }
        let sockets = self.lock();
        let targets = sockets.conns.values().filter(|c| c.owner == r.owner && to.is_none_or(|d| d.contains(&c.device)));
        for c in targets {
            // Counted before it is handed over (and taken back if it was not): whoever has
            // received a ring sees it counted (the channel orders the two).
            self.rings_sent.fetch_add(1, Ordering::Relaxed);
            if c.tx.try_send(r.ring.clone()).is_err() {
                self.rings_sent.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// How many sockets are open (of `device`, or of all).
    pub fn connected(&self, device: Option<uuid::Uuid>) -> usize {
        self.lock().conns.values().filter(|c| device.is_none_or(|d| c.device == d)).count()
    }

    /// Rings handed to sockets so far.
    pub fn rings_sent(&self) -> u64 {
        self.rings_sent.load(Ordering::Relaxed)
    }

    /// Token checks of open sockets made so far (one per device per [`Self::recheck`]).
    pub fn token_checks(&self) -> u64 {
        self.token_checks.load(Ordering::Relaxed)
    }

    /// Turns the doorbell off (every socket closes, upgrades answer 503) or on again.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
        if !on {
            self.closed.notify_waiters();
        }
    }

    /// Takes a place for a socket of `device` (token hash `hash`): the device's oldest socket
    /// is closed when it has [`Limits::per_device`] already; refused when the hub is full.
    ///
    /// # Errors
    /// [`Full`] at [`Limits::total`] sockets (after making room within the device's own).
    pub fn reserve(self: &Arc<Self>, owner: OwnerId, device: uuid::Uuid, hash: String) -> Result<Registration, Full> {
        let (tx, rings) = mpsc::channel(PER_CONNECTION);
        let (close_tx, close) = oneshot::channel();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut s = self.lock();
        let mut mine: Vec<u64> = s.conns.iter().filter(|(_, c)| c.device == device).map(|(id, _)| *id).collect();
        mine.sort_unstable();
        let excess = (mine.len() + 1).saturating_sub(self.limits.per_device.max(1));
        for old in mine.into_iter().take(excess) {
            s.close(old, (CLOSE_REPLACED, "replaced by a newer connection of this device"));
        }
        if s.conns.len() >= self.limits.total {
            return Err(Full);
        }
        s.conns.insert(id, Conn { owner, device, tx, close: Some(close_tx) });
        s.watches.entry(device).or_insert_with(|| tokio::spawn(watch_token(Arc::downgrade(self), device, hash)));
        drop(s);
        Ok(Registration { hub: Arc::clone(self), id, device, rings, close })
    }

    fn release(&self, id: u64, device: uuid::Uuid) {
        let mut s = self.lock();
        s.conns.remove(&id);
        if !s.conns.values().any(|c| c.device == device)
            && let Some(w) = s.watches.remove(&device)
        {
            w.abort();
        }
    }

    /// Closes every socket of `device` (its token was revoked).
    fn close_device(&self, device: uuid::Uuid) {
        let mut s = self.lock();
        let ids: Vec<u64> = s.conns.iter().filter(|(_, c)| c.device == device).map(|(id, _)| *id).collect();
        for id in ids {
            s.close(id, (CLOSE_REVOKED, "device revoked"));
        }
        s.watches.remove(&device);
    }
}

/// Checks `device`'s token every [`Hub::recheck`] while it has sockets: one read for all of
/// them. A read that fails is not a revocation (the next check decides).
async fn watch_token(hub: Weak<Hub>, device: uuid::Uuid, hash: String) {
    let Some(every) = hub.upgrade().map(|h| h.recheck) else { return };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(hub) = hub.upgrade() else { return };
        hub.token_checks.fetch_add(1, Ordering::Relaxed);
        if matches!(hub.store.device_by_token_hash(&hash).await, Ok(None)) {
            hub.close_device(device);
            return;
        }
    }
}

/// Forwards the store's rings to the hub until the store is gone.
pub fn feed(store: &store_sqlite::SqliteStore, hub: Arc<Hub>) -> tokio::task::JoinHandle<()> {
    let mut rings = store.rings();
    let store = store.clone();
    tokio::spawn(async move {
        loop {
            match rings.recv().await {
                Ok(r) => {
                    let to = domain::store::ring_recipients(&store, &r).await;
                    hub.ring(&r, to.as_ref());
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::debug!(skipped = n, "doorbell fell behind; the relays' polls cover it");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

/// The upgrade: 401 without a valid device token, 503 while the doorbell is off or full.
/// `keep` (the listener's connection slot) lives as long as the socket.
pub async fn upgrade<K: Send + 'static>(
    hub: Arc<Hub>,
    headers: &http::HeaderMap,
    ws: WebSocketUpgrade,
    keep: K,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !hub.enabled.load(Ordering::SeqCst) {
        return (http::StatusCode::SERVICE_UNAVAILABLE, "doorbell unavailable").into_response();
    }
    let Some(device) = http_util::device_of(hub.store.as_ref(), headers).await.ok().flatten() else {
        return http_util::http_json::error(http::StatusCode::UNAUTHORIZED, http_util::DEVICE_TOKEN_REQUIRED)
            .map(axum::body::Body::from)
            .into_response();
    };
    let Ok(reg) = hub.reserve(device.owner, device.device_id, device.token_hash) else {
        return http_util::http_json::error(
            http::StatusCode::SERVICE_UNAVAILABLE,
            "the doorbell has no room for another socket; poll instead",
        )
        .map(axum::body::Body::from)
        .into_response();
    };
    ws.max_message_size(MAX_CLIENT_MESSAGE_BYTES).max_frame_size(MAX_CLIENT_MESSAGE_BYTES).on_upgrade(
        move |socket| async move {
            let _keep = keep;
            serve(socket, reg).await;
        },
    )
}

async fn serve(mut socket: WebSocket, mut reg: Registration) {
    let hub = Arc::clone(&reg.hub);
    tracing::debug!(device = %reg.device, "doorbell connected");
    let limit = tokio::time::sleep(MAX_CONNECTION);
    tokio::pin!(limit);
    let closed = hub.closed.notified();
    tokio::pin!(closed);
    let close = |code: u16, reason: &'static str| Message::Close(Some(CloseFrame { code, reason: reason.into() }));
    loop {
        tokio::select! {
            Some(ring) = reg.rings.recv() => {
                let text = serde_json::to_string(&ring).unwrap_or_default();
                if socket.send(Message::Text(text.into())).await.is_err() {
                    break;
                }
            }
            msg = socket.recv() => match msg {
                // An oversized frame or message is an error here, before it is buffered.
                None | Some(Err(_) | Ok(Message::Close(_))) => break,
                // Pings are answered by the WebSocket layer.
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                // The relay's keep-alive, answered as the cloud's `ping` route answers it.
                Some(Ok(Message::Text(t))) if t.as_str() == domain::doorbell::KEEPALIVE => {
                    if socket.send(Message::Text(domain::doorbell::KEEPALIVE_ANSWER.into())).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Text(_) | Message::Binary(_))) => {
                    let _ = socket.send(close(1008, "the doorbell takes no other messages")).await;
                    break;
                }
            },
            why = &mut reg.close => {
                if let Ok((code, reason)) = why {
                    let _ = socket.send(close(code, reason)).await;
                }
                break;
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
    tracing::debug!(device = %reg.device, "doorbell disconnected");
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::devices::Device;
    use domain::store::StoreResult;

    /// A device store that counts reads and can revoke.
    struct Devices {
        reads: AtomicU64,
        revoked: AtomicBool,
    }

    #[async_trait::async_trait]
    impl AuthenticateDevices for Devices {
        async fn device_by_token_hash(&self, hash: &str) -> StoreResult<Option<Device>> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            if self.revoked.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let owner = OwnerId::new("o").unwrap_or_else(|_| unreachable!());
            Ok(Some(Device::new(&owner, "d", hash, domain::clock::Timestamp::from_millis(0))))
        }

        async fn record_device_seen(&self, _: &Device, _: Option<&domain::fleet::RelayReport>) -> StoreResult<()> {
            Ok(())
        }
    }

    fn hub(limits: Limits) -> (Arc<Hub>, Arc<Devices>) {
        let devices = Arc::new(Devices { reads: AtomicU64::new(0), revoked: AtomicBool::new(false) });
        let store: Arc<dyn AuthenticateDevices> = Arc::clone(&devices) as _;
        (Arc::new(Hub::with_limits(store, Duration::from_secs(2), limits)), devices)
    }

    fn owner() -> OwnerId {
        OwnerId::new("o").unwrap_or_else(|_| unreachable!())
    }

    #[tokio::test(start_paused = true)]
    async fn one_token_check_serves_every_socket_of_a_device_and_a_revocation_closes_them_all() {
        let (hub, devices) = hub(Limits::default());
        let device = uuid::Uuid::new_v4();
        let mut regs: Vec<Registration> =
            (0..MAX_SOCKETS_PER_DEVICE).map(|_| hub.reserve(owner(), device, "h".into()).unwrap()).collect();
        tokio::time::sleep(Duration::from_secs(20) + Duration::from_millis(100)).await;
        let reads = devices.reads.load(Ordering::SeqCst);
        assert_eq!(reads, 10, "one check per device every 2 s for {} sockets", regs.len());
        devices.revoked.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(2)).await;
        for r in &mut regs {
            assert_eq!(r.close.try_recv().unwrap().0, CLOSE_REVOKED);
        }
        assert_eq!(hub.connected(Some(device)), 0);
        drop(regs);
        let before = devices.reads.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(devices.reads.load(Ordering::SeqCst), before, "no checks once the sockets are gone");
    }

    #[tokio::test(start_paused = true)]
    async fn a_newer_socket_replaces_the_oldest_and_the_hub_has_a_total() {
        let (hub, _) = hub(Limits { per_device: 2, total: 3 });
        let a = uuid::Uuid::new_v4();
        let mut first = hub.reserve(owner(), a, "a".into()).unwrap();
        let _second = hub.reserve(owner(), a, "a".into()).unwrap();
        let _third = hub.reserve(owner(), a, "a".into()).unwrap();
        assert_eq!(first.close.try_recv().unwrap().0, CLOSE_REPLACED, "the oldest is told to close");
        assert_eq!(hub.connected(Some(a)), 2);
        drop(first);
        assert_eq!(hub.connected(Some(a)), 2, "releasing a replaced socket frees nothing else");
        let b = uuid::Uuid::new_v4();
        let _b1 = hub.reserve(owner(), b, "b".into()).unwrap();
        assert!(hub.reserve(owner(), uuid::Uuid::new_v4(), "c".into()).is_err(), "full at 3");
        assert_eq!(hub.connected(None), 3);
    }

    /// The local server's rings go where the cloud's do (`domain::store::ring_recipients`, one
    /// place): a queued run's ring reaches the desktop sharing its session, not the owner's
    /// other desktop, through the real store's ring feed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queued_runs_ring_reaches_only_the_desktops_sharing_its_session() {
        use domain::store::{ManageDevices, ManageProjects, QueueRuns, SyncSessions};
        let path = std::env::temp_dir().join(format!("foundry-hub-{}.sqlite3", uuid::Uuid::new_v4()));
        let clock = Arc::new(domain::clock::ManualClock::starting_now());
        let store = Arc::new(store_sqlite::SqliteStore::open(&path, clock, domain::limits::Policy::default()).unwrap());
        let owner = owner();
        let project = store.create_project(&owner, "P").await.unwrap();
        store.set_project_enabled(&owner, project.project_id, true).await.unwrap();
        let session = |n: u8| domain::runs::SessionMeta {
            graph_session_id: domain::ids::GraphSessionId::parse("s", &format!("gs_{}", format!("{n:02x}").repeat(16)))
                .unwrap(),
            name: "G".into(),
            description: String::new(),
            slug: "g".into(),
            version: "1".into(),
            status: "ready".into(),
        };
        let (sharer, other) = (
            store.create_device(&owner, "a", "ha").await.unwrap(),
            store.create_device(&owner, "b", "hb").await.unwrap(),
        );
        for (d, n) in [(&sharer, 1), (&other, 2)] {
            store.sync_sessions(&owner, project.project_id, d.device_id, &[session(n)]).await.unwrap();
        }
        let hub = Arc::new(Hub::new(Arc::clone(&store) as Arc<dyn AuthenticateDevices>, Duration::from_secs(2)));
        let mut shares = hub.reserve(owner.clone(), sharer.device_id, "ha".into()).unwrap();
        let mut not = hub.reserve(owner.clone(), other.device_id, "hb".into()).unwrap();
        let feeding = feed(&store, Arc::clone(&hub));
        let req = domain::runs::QueueRun {
            owner: owner.clone(),
            agent: domain::ids::AgentId::new("c", "o").unwrap(),
            project_id: None,
            graph_session_id: session(1).graph_session_id,
            arguments: serde_json::json!({}),
            idempotency_key: domain::ids::IdempotencyKey::parse("hub-ring-0001").unwrap(),
        };
        store.queue_run(&req).await.unwrap();
        let ring = tokio::time::timeout(Duration::from_secs(10), shares.rings.recv()).await;
        assert_eq!(ring.ok().flatten(), Some(Ring::Sync), "the sharing desktop was not rung");
        // The hub hands a ring to every target at once: the other desktop's would be there now.
        assert!(not.rings.try_recv().is_err(), "a desktop that does not share the session was rung");
        assert_eq!(hub.rings_sent(), 1);
        feeding.abort();
        let _ = std::fs::remove_file(&path);
    }
}
