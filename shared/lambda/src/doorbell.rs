//! The cloud doorbell (`domain::doorbell`): two functions around API Gateway's WebSocket API.
//!
//! - **`doorbell`** serves the API's `$connect` and `$disconnect` routes. `$connect` checks the
//!   device token in the upgrade request's `Authorization` header (401 and nothing stored
//!   without a valid one) and records the socket as that device's; past
//!   [`domain::doorbell::MAX_SOCKETS_PER_DEVICE`] sockets of the device the oldest are closed
//!   and forgotten (a newer one replaces them: one leaked token cannot hold more, and a ring
//!   never fans out to more); `$disconnect` forgets it. API Gateway itself bounds the size of
//!   what a client may send (32 KB frames, 128 KB messages) and the route selection sends any
//!   message to no route.
//! - **`ring_doorbell`** reads the table's stream (filtered by the template to the records that
//!   ring): a run queued (`sync`) is posted to the sockets of the desktops sharing its session,
//!   a cancel asked of a running run (`control`) to the desktop running it, through the
//!   `@connections` management API, [`RING_FANOUT`] posts at a time (a `410 Gone` socket is forgotten once it is older than
//!   `domain::doorbell::CONNECT_WINDOW`: a younger one may not be established yet); a device revoked has
//!   its sockets closed. Rings are hints — the relay still polls — so a failure is logged and
//!   never fails the batch (a retried batch would ring twice, for nothing).

use std::sync::Arc;

use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayWebsocketProxyRequest};
use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use domain::store::{AuthenticateDevices, DoorbellConnections};
use lambda_runtime::{LambdaEvent, service_fn};

use crate::config::{DoorbellConfig, RingConfig};
use crate::{Error, aws_config, dynamo_store, env, init_tracing};

/// Why a post to a socket failed.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The socket is gone (`410`): forget it.
    #[error("connection gone")]
    Gone,
    /// Anything else (logged).
    #[error("@connections call failed")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// The `@connections` management API.
#[async_trait::async_trait]
pub trait Sockets: Send + Sync {
    /// Sends `text` to the socket.
    async fn post(&self, connection_id: &str, text: &str) -> Result<(), SocketError>;
    /// Closes the socket.
    async fn close(&self, connection_id: &str) -> Result<(), SocketError>;
}

/// API Gateway's management API at the doorbell stage's endpoint.
pub struct ApiSockets {
    client: aws_sdk_apigatewaymanagement::Client,
}

impl ApiSockets {
    /// A client for the stage at `endpoint` (`https://{api}.execute-api.{region}.amazonaws.com/{stage}`).
    pub fn new(aws: &aws_config::SdkConfig, endpoint: &str) -> Self {
        let config = aws_sdk_apigatewaymanagement::config::Builder::from(aws).endpoint_url(endpoint).build();
        Self { client: aws_sdk_apigatewaymanagement::Client::from_conf(config) }
    }
}

fn socket_error<E>(
    e: aws_sdk_apigatewaymanagement::error::SdkError<E, aws_sdk_apigatewaymanagement::config::http::HttpResponse>,
) -> SocketError
where
    E: std::error::Error + Send + Sync + 'static,
{
    if e.raw_response().is_some_and(|r| r.status().as_u16() == 410) {
        SocketError::Gone
    } else {
        SocketError::Failed(aws_sdk_apigatewaymanagement::error::DisplayErrorContext(e).to_string().into())
    }
}

#[async_trait::async_trait]
impl Sockets for ApiSockets {
    async fn post(&self, connection_id: &str, text: &str) -> Result<(), SocketError> {
        self.client
            .post_to_connection()
            .connection_id(connection_id)
            .data(aws_sdk_apigatewaymanagement::primitives::Blob::new(text.as_bytes()))
            .send()
            .await
            .map(drop)
            .map_err(socket_error)
    }

    async fn close(&self, connection_id: &str) -> Result<(), SocketError> {
        self.client.delete_connection().connection_id(connection_id).send().await.map(drop).map_err(socket_error)
    }
}

fn answer(status: i64, body: &str) -> ApiGatewayProxyResponse {
    let mut r = ApiGatewayProxyResponse::default();
    r.status_code = status;
    r.body = Some(aws_lambda_events::encodings::Body::Text(body.to_owned()));
    r
}

/// Closes and forgets the sockets of `device` that a newer one replaces (all but the newest
/// [`domain::doorbell::MAX_SOCKETS_PER_DEVICE`]); how many. Failures are logged: the socket's
/// items then expire with their TTL.
pub async fn replace_old_sockets<S: DoorbellConnections + ?Sized, P: Sockets + ?Sized>(
    store: &S,
    sockets: &P,
    device: &domain::devices::Device,
) -> usize {
    let mine: Vec<_> =
        connections(store, &device.owner).await.into_iter().filter(|c| c.device_id == device.device_id).collect();
    let mut closed = 0;
    for c in domain::doorbell::sockets_to_replace(&mine) {
        if let Err(SocketError::Failed(e)) = sockets.close(&c.connection_id).await {
            tracing::warn!(error = %e, "closing a replaced doorbell socket failed");
        }
        match store.close_connection(&c.connection_id).await {
            Ok(()) => closed += 1,
            Err(e) => tracing::warn!(error = %domain::errors::ErrorChain(&e), "forgetting a replaced socket failed"),
        }
    }
    closed
}

/// One `$connect` or `$disconnect`.
pub async fn socket_event<S: AuthenticateDevices + DoorbellConnections + ?Sized, P: Sockets + ?Sized>(
    store: &S,
    sockets: &P,
    event: &ApiGatewayWebsocketProxyRequest,
) -> ApiGatewayProxyResponse {
    let ctx = &event.request_context;
    let Some(connection_id) = ctx.connection_id.as_deref() else {
        return answer(400, r#"{"error":"no connection id"}"#);
    };
    match ctx.route_key.as_deref() {
        Some("$connect") => {
            let device = match http_util::device_of(store, &event.headers).await {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(error = %domain::errors::ErrorChain(&e), "doorbell connect: token lookup failed");
                    return answer(503, r#"{"error":"temporarily unavailable; retry"}"#);
                }
            };
            let Some(device) = device else {
                let body = serde_json::json!({ "error": http_util::DEVICE_TOKEN_REQUIRED }).to_string();
                return answer(401, &body);
            };
            match store.open_connection(&device.owner, device.device_id, connection_id).await {
                Ok(()) => {
                    let replaced = replace_old_sockets(store, sockets, &device).await;
                    tracing::info!(device = %device.device_id, replaced, "doorbell connected");
                    answer(200, "")
                }
                Err(e) => {
                    tracing::error!(error = %domain::errors::ErrorChain(&e), "doorbell connect: recording failed");
                    answer(503, r#"{"error":"temporarily unavailable; retry"}"#)
                }
            }
        }
        Some("$disconnect") => {
            if let Err(e) = store.close_connection(connection_id).await {
                tracing::warn!(error = %domain::errors::ErrorChain(&e), "doorbell disconnect: forgetting failed (TTL removes it)");
            }
            answer(200, "")
        }
        _ => answer(400, r#"{"error":"the doorbell takes no messages"}"#),
    }
}

/// What a stream batch rang.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RingReport {
    /// Rings posted.
    pub posted: usize,
    /// Sockets found gone (forgotten).
    pub gone: usize,
    /// Sockets answered `410` while younger than [`domain::doorbell::CONNECT_WINDOW`]: kept,
    /// since API Gateway may not have established them yet.
    pub young: usize,
    /// Sockets of revoked devices closed.
    pub closed: usize,
}

/// Posts to one owner's sockets at most this many at a time: a ring to many desktops takes
/// about one post's time per this many, not one per desktop.
pub const RING_FANOUT: usize = 32;

/// Rings the sockets a stream batch calls for, at `now`: each ring goes only to the desktops
/// it is for ([`domain::store::ring_recipients`]: those sharing a queued run's session, the one
/// running a run asked to cancel, …), posted [`RING_FANOUT`] at a time.
pub async fn ring_records<S, P>(
    store: &S,
    sockets: &P,
    event: &StreamEvent,
    now: domain::clock::Timestamp,
) -> RingReport
where
    S: DoorbellConnections + domain::store::ManageProjects + ?Sized,
    P: Sockets + ?Sized,
{
    use futures_util::StreamExt as _;
    let mut report = RingReport::default();
    for record in &event.records {
        let (old, new) = match crate::stream_images(record) {
            Ok(images) => images,
            Err(e) => {
                tracing::debug!(error = %domain::errors::ErrorChain(&e), "undecodable stream record; no ring");
                continue;
            }
        };
        if let Ok(Some(ring)) = store_dynamo::ring_of_change(old.as_ref(), new.as_ref()) {
            let text = serde_json::to_string(&ring.ring).unwrap_or_default();
            let to = domain::store::ring_recipients(store, &ring).await;
            let targets: Vec<_> = connections(store, &ring.owner)
                .await
                .into_iter()
                .filter(|c| to.as_ref().is_none_or(|devices| devices.contains(&c.device_id)))
                .collect();
            let mut posts = futures_util::stream::iter(targets)
                .map(|c| {
                    let text = &text;
                    async move {
                        let result = sockets.post(&c.connection_id, text).await;
                        (c, result)
                    }
                })
                .buffer_unordered(RING_FANOUT);
            while let Some((c, result)) = posts.next().await {
                match result {
                    Ok(()) => report.posted += 1,
                    Err(SocketError::Gone) if !domain::doorbell::forget_on_gone(&c, now) => report.young += 1,
                    Err(SocketError::Gone) => {
                        report.gone += 1;
                        let _ = store.close_connection(&c.connection_id).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %domain::errors::ErrorChain(&e), "ring not delivered; the poll covers it")
                    }
                }
            }
        }
        if let Ok(Some((owner, device))) = store_dynamo::revoked_device_of_change(old.as_ref(), new.as_ref()) {
            for c in connections(store, &owner).await.into_iter().filter(|c| c.device_id == device) {
                if !matches!(sockets.close(&c.connection_id).await, Err(SocketError::Failed(_))) {
                    report.closed += 1;
                }
                let _ = store.close_connection(&c.connection_id).await;
            }
        }
    }
    report
}

async fn connections<S: DoorbellConnections + ?Sized>(
    store: &S,
    owner: &domain::ids::OwnerId,
) -> Vec<domain::doorbell::Connection> {
    store.connections_of(owner).await.unwrap_or_else(|e| {
        tracing::warn!(error = %domain::errors::ErrorChain(&e), "listing doorbell sockets failed; no ring");
        Vec::new()
    })
}

/// Runs the `doorbell` function (`$connect`, `$disconnect`) until the runtime stops it.
///
/// # Errors
/// Bad configuration, or the runtime failing.
pub async fn run_socket() -> Result<(), Error> {
    init_tracing();
    let config = DoorbellConfig::from_env(env)?;
    let aws = aws_config().await;
    let store = Arc::new(dynamo_store(&aws, &config.table, Default::default()));
    let sockets = Arc::new(ApiSockets::new(&aws, &config.endpoint));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<ApiGatewayWebsocketProxyRequest>| {
        let (store, sockets) = (Arc::clone(&store), Arc::clone(&sockets));
        async move { Ok::<_, Error>(socket_event(store.as_ref(), sockets.as_ref(), &event.payload).await) }
    }))
    .await
}

/// Runs the `ring_doorbell` function (the table's stream) until the runtime stops it.
///
/// # Errors
/// Bad configuration, or the runtime failing.
pub async fn run_ring() -> Result<(), Error> {
    init_tracing();
    let config = RingConfig::from_env(env)?;
    let aws = aws_config().await;
    let store = Arc::new(dynamo_store(&aws, &config.table, Default::default()));
    let sockets = Arc::new(ApiSockets::new(&aws, &config.endpoint));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<StreamEvent>| {
        let (store, sockets) = (Arc::clone(&store), Arc::clone(&sockets));
        async move {
            let now = domain::clock::Clock::now(&domain::clock::SystemClock);
            let report = ring_records(store.as_ref(), sockets.as_ref(), &event.payload, now).await;
            if report != RingReport::default() {
                tracing::info!(
                    posted = report.posted,
                    gone = report.gone,
                    young = report.young,
                    closed = report.closed,
                    "rang"
                );
            }
            Ok::<_, Error>(())
        }
    }))
    .await
}
