//! API Gateway's WebSocket API, emulated for the cloud shape: the doorbell's `$connect` and
//! `$disconnect` routes invoke the `doorbell` function binary through the Lambda emulator
//! (its answer's status decides the upgrade, as API Gateway's does), and the `@connections`
//! management API — `POST` a message, `DELETE` a connection, `410 Gone` for one that is not
//! open — is what the `ring_doorbell` binary calls. A client's data message goes to the route
//! its `action` names; the template's mock routes answer it (the relay's keep-alive), any other
//! gets nothing back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::cloud::Emulator;

/// The emulated WebSocket API.
#[derive(Default)]
pub struct DoorbellShim {
    emu: OnceLock<(Arc<Emulator>, String)>,
    sockets: Mutex<HashMap<String, mpsc::UnboundedSender<Option<String>>>>,
    next: AtomicU64,
    /// Messages posted through `@connections`.
    pub posted: AtomicU64,
    /// `$connect`s the function refused.
    pub refused: AtomicU64,
}

impl DoorbellShim {
    /// Routes `$connect` / `$disconnect` to `emu`'s doorbell function from now on.
    pub fn attach(&self, emu: Arc<Emulator>) {
        if let Some(name) = emu.name_of("DoorbellFunction").map(str::to_owned) {
            let _ = self.emu.set((emu, name));
        }
    }

    /// Sockets ever asked for (upgrades tried).
    pub fn connects(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Open sockets.
    pub fn open(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<Option<String>>>> {
        self.sockets.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn route(&self, route: &str, id: &str, headers: &HeaderMap) -> Option<(u16, String)> {
        let (emu, name) = self.emu.get()?;
        let headers: serde_json::Map<String, Value> =
            headers.iter().filter_map(|(k, v)| Some((k.as_str().to_owned(), json!(v.to_str().ok()?)))).collect();
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let event = json!({
            "headers": headers,
            "requestContext": {
                "routeKey": route,
                "eventType": if route == "$connect" { "CONNECT" } else { "DISCONNECT" },
                "connectionId": id,
                "apiId": "doorbell",
                "stage": "relay",
                "domainName": "127.0.0.1",
                "requestId": uuid::Uuid::new_v4().to_string(),
                "extendedRequestId": uuid::Uuid::new_v4().to_string(),
                "connectedAt": now,
                "requestTimeEpoch": now,
                "requestTime": "01/Dec/2026:00:00:00 +0000",
                "messageDirection": "IN",
                "identity": {"sourceIp": "127.0.0.1"},
            },
            "isBase64Encoded": false,
        });
        let answer = match emu.invoke(name, event.to_string().into()).await {
            Ok(a) => a,
            Err(e) => {
                eprintln!("doorbell shim: {route} failed: {}", String::from_utf8_lossy(&e));
                return None;
            }
        };
        let v: Value = serde_json::from_slice(&answer).ok()?;
        Some((v["statusCode"].as_u64().unwrap_or(500) as u16, v["body"].as_str().unwrap_or_default().to_owned()))
    }
}

/// The shim's routes: `GET /relay` (the socket), `POST|DELETE /relay/@connections/{id}`.
pub fn router(shim: Arc<DoorbellShim>) -> axum::Router {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/relay", get(connect))
        .route("/relay/@connections/{id}", post(post_message).delete(delete_connection))
        .with_state(shim)
}

async fn connect(
    State(shim): State<Arc<DoorbellShim>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> axum::response::Response {
    let id = format!("conn{}x", shim.next.fetch_add(1, Ordering::Relaxed));
    match shim.route("$connect", &id, &headers).await {
        None => (StatusCode::SERVICE_UNAVAILABLE, "doorbell function not attached").into_response(),
        Some((status, body)) if status != 200 => {
            shim.refused.fetch_add(1, Ordering::Relaxed);
            (StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN), body).into_response()
        }
        Some(_) => ws.on_upgrade(move |mut socket| async move {
            let (tx, mut rx) = mpsc::unbounded_channel();
            shim.lock().insert(id.clone(), tx);
            loop {
                tokio::select! {
                    m = rx.recv() => match m {
                        Some(Some(text)) => if socket.send(Message::Text(text.into())).await.is_err() { break },
                        // DELETE @connections: API Gateway closes the socket.
                        Some(None) | None => {
                            let _ = socket.send(Message::Close(None)).await;
                            break;
                        }
                    },
                    m = socket.recv() => match m {
                        None | Some(Err(_) | Ok(Message::Close(_))) => break,
                        // A data message goes to the route its `action` names: a mock route
                        // of the template answers it; with no such route, nothing comes back.
                        Some(Ok(Message::Text(text))) => {
                            let action = serde_json::from_str::<Value>(text.as_str()).ok().and_then(|v| v["action"].as_str().map(str::to_owned));
                            let answer = shim.emu.get().and_then(|(emu, _)| action.and_then(|a| emu.websocket_mocks.get(&a).cloned()));
                            if let Some(answer) = answer && socket.send(Message::Text(answer.into())).await.is_err() {
                                break;
                            }
                        }
                        Some(Ok(_)) => {}
                    },
                }
            }
            shim.lock().remove(&id);
            let _ = shim.route("$disconnect", &id, &HeaderMap::new()).await;
        }),
    }
}

fn gone() -> axum::response::Response {
    (StatusCode::GONE, axum::Json(json!({"message": "GoneException"}))).into_response()
}

/// API Gateway's check of a management call: `execute-api:ManageConnections` on
/// `<api>/<stage>/<METHOD>/@connections/<id>` for the caller's role (the emulator's IAM check).
async fn refused(headers: &HeaderMap, method: &str, id: &str) -> Option<axum::response::Response> {
    let key = crate::cloud::signing_key(headers)?;
    let arn = format!(
        "arn:aws:execute-api:{}:{}:doorbell/relay/{method}/@connections/{id}",
        crate::cloud::REGION,
        crate::cloud::ACCOUNT
    );
    let action = "execute-api:ManageConnections";
    (!crate::cloud::iam_allows(&key, action, &arn).await)
        .then(|| crate::cloud::access_denied(StatusCode::FORBIDDEN, &key, action, &arn))
}

async fn post_message(
    State(shim): State<Arc<DoorbellShim>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    if let Some(no) = refused(&headers, "POST", &id).await {
        return no;
    }
    let tx = shim.lock().get(&id).cloned();
    match tx {
        Some(tx) if tx.send(Some(String::from_utf8_lossy(&body).into_owned())).is_ok() => {
            shim.posted.fetch_add(1, Ordering::Relaxed);
            StatusCode::OK.into_response()
        }
        _ => gone(),
    }
}

async fn delete_connection(
    State(shim): State<Arc<DoorbellShim>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> axum::response::Response {
    if let Some(no) = refused(&headers, "DELETE", &id).await {
        return no;
    }
    let tx = shim.lock().remove(&id);
    match tx {
        Some(tx) => {
            let _ = tx.send(None);
            StatusCode::NO_CONTENT.into_response()
        }
        None => gone(),
    }
}
