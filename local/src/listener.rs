//! The local server's listener: HTTP/1.1 on 127.0.0.1 with two bounds a plain `axum::serve`
//! does not have.
//!
//! - **A header-read timeout** ([`Limits::header_timeout`]): a connection must send a request's
//!   headers within it, and may not sit idle between requests for longer (hyper's
//!   `header_read_timeout`, which needs a timer that `axum::serve` never sets). A connection
//!   that sends half a request line is cut off instead of kept for good.
//! - **A connection cap** ([`Limits::max_connections`]): at most that many connections are open
//!   at once; the next one waits in the kernel's accept queue until one closes. A WebSocket
//!   upgraded from a connection keeps its slot ([`Slot`], carried in the request's extensions
//!   into the doorbell), so sockets count too.
//!
//! Everything else is axum's router, given the peer address as [`ConnectInfo`] as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower_service::Service;

/// The listener's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long a request's headers may take (and a connection may idle between requests).
    pub header_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
}

/// Connections open now and at most so far (tests and `relay status`-like checks read it).
#[derive(Debug, Default)]
pub struct Gauge {
    open: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    /// Connections open now (upgraded sockets included).
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// The most connections that were open at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

struct SlotInner {
    _permit: OwnedSemaphorePermit,
    gauge: Arc<Gauge>,
}

impl Drop for SlotInner {
    fn drop(&mut self) {
        self.gauge.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One connection's place under the cap; released when the connection and every socket
/// upgraded from it are gone. Every request carries it as an extension.
#[derive(Clone)]
pub struct Slot(#[allow(dead_code)] Arc<SlotInner>);

impl Slot {
    fn new(permit: OwnedSemaphorePermit, gauge: Arc<Gauge>) -> Self {
        let open = gauge.open.fetch_add(1, Ordering::SeqCst) + 1;
        gauge.peak.fetch_max(open, Ordering::SeqCst);
        Self(Arc::new(SlotInner { _permit: permit, gauge }))
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets every open connection
/// finish its request in flight (idle ones close at once) and returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: Limits,
    gauge: Arc<Gauge>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // A slot first: at the cap, connections wait in the accept queue, not in memory here.
        let permit = tokio::select! {
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file handles, or a connection reset before it was accepted: keep
                    // serving the ones open, try again shortly.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let slot = Slot::new(permit, Arc::clone(&gauge));
        let app = app.clone();
        let mut stop = stop_rx.clone();
        conns.spawn(async move {
            let svc = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req.extensions_mut().insert(slot.clone());
                let mut app = app.clone();
                async move { app.call(req).await }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, %peer, "connection ended with an error");
                    }
                }
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.as_mut().await;
                }
            }
        });
        while conns.try_join_next().is_some() {}
    }
    let _ = stop_tx.send(true);
    while conns.join_next().await.is_some() {}
}
