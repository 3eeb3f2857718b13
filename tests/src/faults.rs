//! A DynamoDB endpoint that fails on purpose: a proxy in front of the emulator (like the
//! serializing wrapper, in front of it) that answers a set share of DynamoDB requests with the
//! errors DynamoDB really returns — `ThrottlingException`, `ProvisionedThroughputExceededException`,
//! `InternalServerError`, a `TransactionConflict` cancellation — or forwards a write and then
//! loses its answer (a 500 after the write committed). Seeded, so a run can be replayed; it
//! counts what it did.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// The share (0–1) of DynamoDB requests each fault hits.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rates {
    /// `ThrottlingException` (400, retryable).
    pub throttling: f64,
    /// `ProvisionedThroughputExceededException` (400, retryable).
    pub throughput: f64,
    /// `InternalServerError` (500, retryable) before the request reaches the table.
    pub internal: f64,
    /// `TransactionCanceledException` with `TransactionConflict`, on `TransactWriteItems`.
    pub conflict: f64,
    /// A write that commits, answered with a 500 as if its answer was lost.
    pub lost_answer: f64,
}

/// What the proxy did.
#[derive(Debug, Default)]
pub struct Counts {
    /// Requests seen.
    pub requests: AtomicU64,
    /// Throttling answers.
    pub throttled: AtomicU64,
    /// Provisioned-throughput answers.
    pub throughput: AtomicU64,
    /// Internal errors before the table.
    pub internal: AtomicU64,
    /// Transaction conflicts.
    pub conflicts: AtomicU64,
    /// Writes committed whose answer was replaced by a 500.
    pub lost_answers: AtomicU64,
}

impl Counts {
    /// `(kind, count)` of every fault, for a report.
    pub fn report(&self) -> Vec<(&'static str, u64)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("requests", g(&self.requests)),
            ("ThrottlingException", g(&self.throttled)),
            ("ProvisionedThroughputExceededException", g(&self.throughput)),
            ("InternalServerError", g(&self.internal)),
            ("TransactionConflict", g(&self.conflicts)),
            ("committed, answer lost", g(&self.lost_answers)),
        ]
    }
}

struct Proxy {
    upstream: String,
    rates: Rates,
    rng: std::sync::Mutex<u64>,
    counts: Arc<Counts>,
    http: reqwest::Client,
}

impl Proxy {
    fn roll(&self) -> f64 {
        let mut x = self.rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        (*x >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn dynamo_error(status: StatusCode, kind: &str, extra: &str) -> Response {
    let body = format!(r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{kind}","message":"injected {kind}"{extra}}}"#);
    (status, [("content-type", "application/x-amz-json-1.0"), ("x-amzn-requestid", "injected-fault")], body)
        .into_response()
}

async fn forward(State(p): State<Arc<Proxy>>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let target = headers.get("x-amz-target").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let dynamo = target.starts_with("DynamoDB_");
    let op = target.rsplit('.').next().unwrap_or_default().to_owned();
    if dynamo {
        p.counts.requests.fetch_add(1, Ordering::Relaxed);
        let r = p.roll();
        let mut edge = p.rates.throttling;
        if r < edge {
            p.counts.throttled.fetch_add(1, Ordering::Relaxed);
            return dynamo_error(StatusCode::BAD_REQUEST, "ThrottlingException", "");
        }
        edge += p.rates.throughput;
        if r < edge {
            p.counts.throughput.fetch_add(1, Ordering::Relaxed);
            return dynamo_error(StatusCode::BAD_REQUEST, "ProvisionedThroughputExceededException", "");
        }
        edge += p.rates.internal;
        if r < edge {
            p.counts.internal.fetch_add(1, Ordering::Relaxed);
            return dynamo_error(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", "");
        }
        edge += p.rates.conflict;
        if r < edge && op == "TransactWriteItems" {
            p.counts.conflicts.fetch_add(1, Ordering::Relaxed);
            return dynamo_error(
                StatusCode::BAD_REQUEST,
                "TransactionCanceledException",
                r#","CancellationReasons":[{"Code":"TransactionConflict","Message":"injected"}]"#,
            );
        }
    }
    let lose = dynamo
        && matches!(op.as_str(), "PutItem" | "UpdateItem" | "DeleteItem" | "TransactWriteItems")
        && p.roll() < p.rates.lost_answer;
    let url = format!("{}{}", p.upstream, uri.path_and_query().map(|x| x.as_str()).unwrap_or("/"));
    let mut req = p.http.request(method, url).body(body);
    for (k, v) in &headers {
        if k != "host" && k != "content-length" {
            req = req.header(k, v);
        }
    }
    let Ok(res) = req.send().await else {
        return (StatusCode::BAD_GATEWAY, "upstream unreachable").into_response();
    };
    if lose {
        let _ = res.bytes().await;
        p.counts.lost_answers.fetch_add(1, Ordering::Relaxed);
        return dynamo_error(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", "");
    }
    let status = StatusCode::from_u16(res.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut out = Response::builder().status(status);
    for (k, v) in res.headers() {
        if k != "content-length" && k != "transfer-encoding" {
            out = out.header(k, v);
        }
    }
    let bytes = res.bytes().await.unwrap_or_default();
    out.body(Body::from(bytes)).unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}

/// Starts the proxy on 127.0.0.1 in front of `upstream`: its URL and its counts.
///
/// # Panics
/// When it cannot bind a port.
pub async fn start(upstream: &str, rates: Rates, seed: u64) -> (String, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let proxy = Arc::new(Proxy {
        upstream: upstream.trim_end_matches('/').to_owned(),
        rates,
        rng: std::sync::Mutex::new(seed | 1),
        counts: Arc::clone(&counts),
        http: crate::http(),
    });
    #[allow(clippy::expect_used)]
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.expect("bind");
    #[allow(clippy::expect_used)]
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().fallback(forward).with_state(proxy);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), counts)
}
