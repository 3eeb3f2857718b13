//! A webhook receiver on 127.0.0.1 for the event tests: it verifies every request's signature
//! the documented way (`events::verify`) and records what it got; it can be told to
//! fail its first N requests, or all of them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};

/// One received request.
#[derive(Debug, Clone)]
pub struct Received {
    /// `webhook-id`.
    pub id: String,
    /// The event type from the body.
    pub kind: String,
    /// The body.
    pub body: serde_json::Value,
    /// Whether the signature verified with the subscription's secret.
    pub signature_ok: bool,
    /// `webhook-timestamp`.
    pub timestamp: i64,
}

/// The receiver's state.
#[derive(Default)]
pub struct Inner {
    /// The secret to verify with (set after subscribing).
    pub secret: Mutex<String>,
    /// Every request that was answered 2xx.
    pub accepted: Mutex<Vec<Received>>,
    /// Every request, answered or not.
    pub hits: AtomicUsize,
    /// Answer 503 to this many requests first (`usize::MAX`: always).
    pub fail_first: AtomicUsize,
    /// Every request's `webhook-id`, answered or not, in order.
    pub ids: Mutex<Vec<String>>,
}

/// A running receiver.
#[derive(Clone)]
pub struct Receiver {
    /// Its URL (`http://127.0.0.1:<port>/hook`).
    pub url: String,
    /// Its state.
    pub state: Arc<Inner>,
}

impl Receiver {
    /// Starts a receiver on a free port.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start() -> Receiver {
        let state = Arc::new(Inner::default());
        let app = axum::Router::new().route("/hook", axum::routing::post(hook)).with_state(state.clone());
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        #[allow(clippy::expect_used)]
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { url, state }
    }

    /// A receiver that accepts connections and never answers (a hanging webhook): its URL.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn hanging() -> String {
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        #[allow(clippy::expect_used)]
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        url
    }

    /// Requests answered 2xx so far.
    pub fn accepted(&self) -> Vec<Received> {
        self.state.accepted.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Every request's `webhook-id` so far (failed attempts included), in order.
    pub fn ids(&self) -> Vec<String> {
        self.state.ids.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Every request so far.
    pub fn hits(&self) -> usize {
        self.state.hits.load(Ordering::SeqCst)
    }

    /// Uses `secret` to verify signatures from now on.
    pub fn set_secret(&self, secret: &str) {
        if let Ok(mut s) = self.state.secret.lock() {
            *s = secret.to_owned();
        }
    }

    /// Fails the next `n` requests with 503 (`usize::MAX`: all).
    pub fn fail_first(&self, n: usize) {
        self.state.fail_first.store(n, Ordering::SeqCst);
    }
}

async fn hook(State(state): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    state.hits.fetch_add(1, Ordering::SeqCst);
    if let Ok(mut ids) = state.ids.lock() {
        ids.push(headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned());
    }
    let failing = state.fail_first.load(Ordering::SeqCst);
    if failing > 0 {
        if failing != usize::MAX {
            state.fail_first.fetch_sub(1, Ordering::SeqCst);
        }
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let h = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let text = String::from_utf8_lossy(&body).into_owned();
    let secret = state.secret.lock().map(|s| s.clone()).unwrap_or_default();
    // The signature, checked at the request's own timestamp: tests move the notifier's clock by
    // hours, so freshness is checked in `events`' unit tests instead.
    let now = h("webhook-timestamp").parse().unwrap_or(0);
    let signature_ok =
        events::verify(&secret, &h("webhook-id"), &h("webhook-timestamp"), &h("webhook-signature"), &text, now).is_ok();
    let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let kind = body["type"].as_str().unwrap_or_default().to_owned();
    if let Ok(mut v) = state.accepted.lock() {
        v.push(Received { id: h("webhook-id"), kind, body, signature_ok, timestamp: now });
    }
    StatusCode::NO_CONTENT
}
