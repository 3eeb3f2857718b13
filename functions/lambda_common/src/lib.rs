//! # lambda-common — what every Lambda function crate shares
//!
//! Each `functions/<name>` crate's `main` is one call into this crate; everything a function
//! does lives in `shared` (the domain, the tool handlers, the MCP endpoint) and is wired here:
//!
//! | item | what |
//! |---|---|
//! | [`config`] | typed settings from the environment, every key a constant, all errors reported at once |
//! | [`run_tool`] | a tool function: `ToolCall` in, `ToolReply` out, on DynamoDB (and S3 for artifacts) |
//! | [`run_mcp`] | the `mcp` function: HTTP API events through [`shared::mcp::McpEndpoint`] |
//! | [`run_relay_api`] | the `graph_relay` function: [`shared::relay_api::RelayApi`] |
//! | [`run_owner_api`] | the `owner_api` function: [`shared::owner_api::OwnerApi`] |
//! | [`LambdaDispatch`] | `tools/call` → synchronous invoke of the tool's own function |
//! | [`HttpJwks`] | fetches the OAuth issuer's JWKS (cached by `shared::auth::JwksCache`) |
//! | [`S3Blobs`] | artifact bytes in S3 |
//!
//! Errors follow one rule: a domain rejection is a tool result, bad input a `-32602`, and an
//! infrastructure fault a Lambda error (retryable, details only in the logs).

pub mod config;

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_lambda::primitives::Blob;
use bytes::Bytes;
use lambda_runtime::{LambdaEvent, service_fn};
use shared::auth::{Authenticator, FetchJwks, JwksCache, Keys};
use shared::clock::{SharedClock, SystemClock};
use shared::mcp::{Dispatch, McpEndpoint, RESOURCE_METADATA_PATH, resource_metadata_response};
use shared::store::dynamo::DynamoStore;
use shared::tools::{BlobStore, ToolCall, ToolDeps, ToolFault, ToolName, ToolReply, handle};

pub use config::{McpConfig, OwnerConfig, RelayConfig, ToolConfig};

/// The error type Lambda entry points return.
pub type Error = lambda_runtime::Error;

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_current_span(false)
        .without_time()
        .try_init();
}

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// Runs the Lambda function for `tool` until the runtime stops it.
///
/// # Errors
/// Bad configuration (before any work), or the runtime failing.
pub async fn run_tool(tool: ToolName) -> Result<(), Error> {
    init_tracing();
    let config = ToolConfig::from_env(tool, env).map_err(Error::from)?;
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&aws), config.table.clone(), clock.clone(), config.policy);
    let blobs: Arc<dyn BlobStore> = match &config.bucket {
        Some(bucket) => Arc::new(S3Blobs { client: aws_sdk_s3::Client::new(&aws), bucket: bucket.clone() }),
        None => Arc::new(NoBlobs),
    };
    let deps = Arc::new(ToolDeps { store: Arc::new(store), clock, policy: config.policy, blobs });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<ToolCall>| {
        let deps = Arc::clone(&deps);
        async move { handle_tool(&deps, tool, &event.payload).await.map_err(Error::from) }
    }))
    .await
}

/// One invocation of a tool function: refuses calls meant for another tool.
///
/// # Errors
/// [`ToolFault`] (retryable) when the store fails or the call was routed to the wrong function.
pub async fn handle_tool<S: shared::tools::ToolStore + ?Sized>(
    deps: &ToolDeps<S>,
    tool: ToolName,
    call: &ToolCall,
) -> Result<ToolReply, ToolFault> {
    if call.tool != tool {
        return Err(ToolFault::Dispatch(format!("{} reached the {} function", call.tool.as_str(), tool.as_str())));
    }
    let reply = handle(deps, call).await;
    if let Err(e) = &reply {
        tracing::error!(tool = tool.as_str(), error = %e, "tool failed");
    }
    reply
}

/// Artifact bytes in S3 (the bucket encrypts at rest; the key is content-addressed).
pub struct S3Blobs {
    client: aws_sdk_s3::Client,
    bucket: String,
}

#[async_trait::async_trait]
impl BlobStore for S3Blobs {
    async fn put(&self, key: &str, bytes: Vec<u8>, content_type: &str) -> Result<(), String> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(bytes.into())
            .send()
            .await
            .map(drop)
            .map_err(|e| format!("put {key}: {}", aws_sdk_s3::error::DisplayErrorContext(e)))
    }
}

/// For functions without an artifact bucket: never called (only the upload tool stores blobs).
struct NoBlobs;

#[async_trait::async_trait]
impl BlobStore for NoBlobs {
    async fn put(&self, key: &str, _bytes: Vec<u8>, _content_type: &str) -> Result<(), String> {
        Err(format!("this function has no artifact bucket (put {key})"))
    }
}

/// `tools/call` → a synchronous invoke of the tool's own function.
pub struct LambdaDispatch {
    client: aws_sdk_lambda::Client,
    functions: HashMap<ToolName, String>,
}

#[async_trait::async_trait]
impl Dispatch for LambdaDispatch {
    async fn dispatch(&self, call: ToolCall) -> Result<ToolReply, ToolFault> {
        let name = self.functions.get(&call.tool).ok_or_else(|| ToolFault::Dispatch(format!("no function for {}", call.tool.as_str())))?;
        let payload = serde_json::to_vec(&call).map_err(|e| ToolFault::Dispatch(e.to_string()))?;
        let out = self
            .client
            .invoke()
            .function_name(name)
            .payload(Blob::new(payload))
            .send()
            .await
            .map_err(|e| ToolFault::Dispatch(aws_sdk_lambda::error::DisplayErrorContext(e).to_string()))?;
        let body = out.payload().map(|b| b.as_ref().to_vec()).unwrap_or_default();
        if let Some(kind) = out.function_error() {
            return Err(ToolFault::Dispatch(format!("{name} failed ({kind}): {}", String::from_utf8_lossy(&body))));
        }
        serde_json::from_slice(&body).map_err(|e| ToolFault::Dispatch(format!("{name} answered something else: {e}")))
    }
}

/// Fetches a JWKS document over HTTPS.
pub struct HttpJwks {
    client: reqwest::Client,
    url: String,
}

#[async_trait::async_trait]
impl FetchJwks for HttpJwks {
    async fn fetch(&self) -> Result<jsonwebtoken::jwk::JwkSet, String> {
        let res = self.client.get(&self.url).send().await.map_err(|e| e.to_string())?;
        if !res.status().is_success() {
            return Err(format!("GET {} answered {}", self.url, res.status()));
        }
        res.json().await.map_err(|e| e.to_string())
    }
}

/// Runs the `mcp` function until the runtime stops it.
///
/// # Errors
/// Bad configuration (before any work), or the runtime failing.
pub async fn run_mcp() -> Result<(), Error> {
    init_tracing();
    let config = McpConfig::from_env(env).map_err(Error::from)?;
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .map_err(Error::from)?;
    let auth = Authenticator {
        issuer: config.issuer.clone(),
        audiences: config.audiences.clone(),
        keys: Keys::Jwks(JwksCache::new(Arc::new(HttpJwks { client: http, url: config.jwks_url.clone() }))),
        clock,
    };
    let dispatch = LambdaDispatch { client: aws_sdk_lambda::Client::new(&aws), functions: config.functions.clone() };
    let endpoint = Arc::new(McpEndpoint::new(Arc::new(dispatch), Arc::new(auth), config.endpoint.clone()));
    lambda_http::run(lambda_http::service_fn(move |req: lambda_http::Request| {
        let endpoint = Arc::clone(&endpoint);
        async move { Ok::<_, Error>(route(&endpoint, req).await) }
    }))
    .await
}

fn http_request(req: lambda_http::Request) -> http::Request<Bytes> {
    let (parts, body) = req.into_parts();
    http::Request::from_parts(parts, Bytes::copy_from_slice(body.as_ref()))
}

fn lambda_response(res: http::Response<Bytes>) -> http::Response<lambda_http::Body> {
    res.map(|b| lambda_http::Body::from(b.to_vec()))
}

/// Runs the `graph_relay` function (the relay API) until the runtime stops it.
///
/// # Errors
/// Bad configuration (before any work), or the runtime failing.
pub async fn run_relay_api() -> Result<(), Error> {
    init_tracing();
    let config = RelayConfig::from_env(env).map_err(Error::from)?;
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&aws), config.table, clock.clone(), config.policy);
    let api = Arc::new(shared::relay_api::RelayApi { store: Arc::new(store), clock, policy: config.policy });
    lambda_http::run(lambda_http::service_fn(move |req: lambda_http::Request| {
        let api = Arc::clone(&api);
        async move { Ok::<_, Error>(lambda_response(api.handle(http_request(req)).await)) }
    }))
    .await
}

/// Runs the `owner_api` function until the runtime stops it.
///
/// # Errors
/// Bad configuration (before any work), or the runtime failing.
pub async fn run_owner_api() -> Result<(), Error> {
    init_tracing();
    let config = OwnerConfig::from_env(env).map_err(Error::from)?;
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let clock: SharedClock = Arc::new(SystemClock);
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(5)).build().map_err(Error::from)?;
    let auth = Authenticator {
        issuer: config.issuer.clone(),
        audiences: config.audiences.clone(),
        keys: Keys::Jwks(JwksCache::new(Arc::new(HttpJwks { client: http, url: config.jwks_url.clone() }))),
        clock: clock.clone(),
    };
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&aws), config.table, clock, config.policy);
    let api = Arc::new(shared::owner_api::OwnerApi { store: Arc::new(store), auth: Arc::new(auth) });
    lambda_http::run(lambda_http::service_fn(move |req: lambda_http::Request| {
        let api = Arc::clone(&api);
        async move { Ok::<_, Error>(lambda_response(api.handle(http_request(req)).await)) }
    }))
    .await
}

/// Routes one HTTP API request: the MCP path, or the protected-resource metadata.
pub async fn route<D: Dispatch + ?Sized>(endpoint: &McpEndpoint<D>, req: lambda_http::Request) -> http::Response<lambda_http::Body> {
    let req = http_request(req);
    let res = if req.uri().path().starts_with(RESOURCE_METADATA_PATH) {
        resource_metadata_response(endpoint.config(), req.headers())
    } else {
        endpoint.handle(req).await
    };
    lambda_response(res)
}
