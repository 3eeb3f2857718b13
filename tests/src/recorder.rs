//! A recording reverse proxy on loopback: a real relay talks to the local server through it,
//! and each relay API exchange is kept (method, path, the relay's own headers, the request
//! body, the status and the answer), for a release's frozen `relay_requests.json` (issue 60,
//! docs/releasing.md). The device token is never kept.

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use serde::{Deserialize, Serialize};

/// One request of the relay and the server's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// `GET` or `POST`.
    pub method: String,
    /// The path under the relay API's prefix (`/sync`, `/commands/<id>/start`, …).
    pub path: String,
    /// The relay's own headers (`x-foundry-*`), as sent.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub headers: std::collections::BTreeMap<String, String>,
    /// The JSON body, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
    /// The answer's status.
    pub status: u16,
    /// The answer's JSON body (`null` when it was not JSON).
    pub answer: serde_json::Value,
}

struct Inner {
    upstream: String,
    prefix: String,
    http: reqwest::Client,
    kept: Mutex<Vec<Exchange>>,
}

/// A running recorder.
#[derive(Clone)]
pub struct Recorder {
    /// Where a relay's `server_url` points (`http://127.0.0.1:<port>`).
    pub url: String,
    inner: Arc<Inner>,
}

impl Recorder {
    /// Starts a recorder in front of `upstream` (a server's base URL) that keeps the exchanges
    /// under `prefix` and forwards everything.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start(upstream: &str, prefix: &str) -> Recorder {
        let inner = Arc::new(Inner {
            upstream: upstream.trim_end_matches('/').to_owned(),
            prefix: prefix.to_owned(),
            http: crate::http(),
            kept: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new().fallback(forward).with_state(inner.clone());
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        #[allow(clippy::expect_used)]
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Recorder { url, inner }
    }

    /// The exchanges kept so far, oldest first.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.inner.kept.lock().map(|k| k.clone()).unwrap_or_default()
    }
}

async fn forward(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let mut req = inner.http.request(method.clone(), format!("{}{path_and_query}", inner.upstream));
    for (name, value) in &headers {
        if name != axum::http::header::HOST && name != axum::http::header::CONTENT_LENGTH {
            req = req.header(name, value);
        }
    }
    let res = match req.body(body.clone()).send().await {
        Ok(r) => r,
        Err(e) => return axum::response::IntoResponse::into_response((StatusCode::BAD_GATEWAY, e.to_string())),
    };
    let status = res.status().as_u16();
    let content_type = res.headers().get(reqwest::header::CONTENT_TYPE).cloned();
    let answer = res.bytes().await.unwrap_or_default();
    if let Some(path) = uri.path().strip_prefix(&inner.prefix)
        && !path.starts_with("/download")
    {
        let kept_headers = headers
            .iter()
            .filter(|(n, _)| n.as_str().starts_with("x-foundry-"))
            .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        let exchange = Exchange {
            method: method.as_str().to_owned(),
            path: path.to_owned(),
            headers: kept_headers,
            body: (!body.is_empty()).then(|| serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null)),
            status,
            answer: serde_json::from_slice(&answer).unwrap_or(serde_json::Value::Null),
        };
        if let Ok(mut kept) = inner.kept.lock() {
            kept.push(exchange);
        }
    }
    let mut out = axum::response::Response::new(Body::from(answer));
    *out.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    if let Some(ct) = content_type {
        out.headers_mut().insert(axum::http::header::CONTENT_TYPE, ct);
    }
    out
}
