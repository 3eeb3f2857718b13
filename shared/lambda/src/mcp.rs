//! The `mcp` function: the MCP endpoint, dispatching each `tools/call` to the tool's own
//! function with a synchronous Lambda invoke.

use std::collections::HashMap;
use std::sync::Arc;

use auth::{Audience, Authenticator, JwksCache, Keys};
use aws_sdk_lambda::primitives::Blob;
use domain::clock::{SharedClock, SystemClock};
use mcp_endpoint::{Dispatch, McpEndpoint, RESOURCE_METADATA_PATH, resource_metadata_response};
use oauth::{AS_METADATA_PATH, AuthServerConfig, metadata_response};
use tools::{DispatchError, ToolCall, ToolFault, ToolName, ToolReply};

use crate::config::McpConfig;
use crate::http_glue::{http_request, lambda_response};
use crate::jwks::HttpJwks;
use crate::{Error, aws_config, env, init_tracing};

/// How long one tool invoke (all its attempts) may take before the call fails with the
/// endpoint's own error: longer than a tool function's timeout (the template's 10 s), shorter
/// than the `mcp` function's (28 s), which is under the HTTP API's 30 s integration limit.
pub const INVOKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// `tools/call` → a synchronous invoke of the tool's own function.
pub struct LambdaDispatch {
    client: aws_sdk_lambda::Client,
    functions: HashMap<ToolName, String>,
}

impl LambdaDispatch {
    /// Dispatch to `functions` (tool → function name or ARN).
    pub fn new(aws: &aws_config::SdkConfig, functions: HashMap<ToolName, String>) -> Self {
        let timeouts = aws_config::timeout::TimeoutConfig::builder().operation_timeout(INVOKE_TIMEOUT).build();
        let config = aws_sdk_lambda::config::Builder::from(aws).timeout_config(timeouts).build();
        Self { client: aws_sdk_lambda::Client::from_conf(config), functions }
    }
}

#[async_trait::async_trait]
impl Dispatch for LambdaDispatch {
    /// Sends the raw call; the tool's function parses its own copy of the arguments.
    async fn dispatch(&self, call: ToolCall) -> Result<ToolReply, ToolFault> {
        let name = self.functions.get(&call.tool).ok_or(DispatchError::NoFunction(call.tool.as_str()))?;
        let function = || name.clone();
        tracing::info!(tool = call.tool.as_str(), function = name.as_str(), "invoking the tool");
        let payload =
            serde_json::to_vec(&call).map_err(|e| DispatchError::Invoke { function: function(), source: e.into() })?;
        let out = self.client.invoke().function_name(name).payload(Blob::new(payload)).send().await.map_err(|e| {
            tracing::warn!(error = %aws_sdk_lambda::error::DisplayErrorContext(&e), function = name.as_str(), "Lambda Invoke failed");
            DispatchError::Invoke { function: function(), source: e.into() }
        })?;
        let body = out.payload().map(|b| b.as_ref().to_vec()).unwrap_or_default();
        if let Some(kind) = out.function_error() {
            let detail = format!("{kind}: {}", String::from_utf8_lossy(&body));
            return Err(DispatchError::Function { function: function(), detail }.into());
        }
        serde_json::from_slice(&body).map_err(|e| {
            DispatchError::Function { function: function(), detail: format!("not a tool reply: {e}") }.into()
        })
    }
}

/// Runs the `mcp` function until the runtime stops it.
///
/// # Errors
/// Bad configuration (every problem at once, before any work), or the runtime failing.
pub async fn run() -> Result<(), Error> {
    init_tracing();
    let config = McpConfig::from_env(env)?;
    let aws = aws_config().await;
    let clock: SharedClock = Arc::new(SystemClock);
    let auth = Authenticator {
        issuer: config.issuer.clone(),
        // Any app client of the pool: chats register their own (RFC 7591, register_client).
        audience: Audience::AnyClient,
        keys: Keys::Jwks(JwksCache::new(Arc::new(HttpJwks::new(&config.jwks_url)?))),
        clock: clock.clone(),
    };
    let dispatch = LambdaDispatch::new(&aws, config.functions.clone());
    // The owners' budgets are counted in the table, and each host's handshake recorded under the
    // owner's chats (the function writes nothing else there).
    let store = Arc::new(crate::dynamo_store(&aws, &config.table, config.policy));
    let endpoint = Arc::new(
        McpEndpoint::new(Arc::new(dispatch), Arc::new(auth), config.endpoint.clone())
            .with_budget(config.policy.owner_requests_per_minute, Arc::clone(&store) as _, clock.clone())
            .with_hosts(store, clock),
    );
    let auth_server = Arc::new(config.auth_server);
    lambda_http::run(lambda_http::service_fn(move |req: lambda_http::Request| {
        let (endpoint, auth_server) = (Arc::clone(&endpoint), Arc::clone(&auth_server));
        async move { Ok::<_, Error>(route(&endpoint, &auth_server, req).await) }
    }))
    .await
}

/// Routes one HTTP API request: the MCP path, the protected-resource metadata, or the
/// authorization-server metadata (RFC 8414).
pub async fn route<D: Dispatch + ?Sized>(
    endpoint: &McpEndpoint<D>,
    auth_server: &AuthServerConfig,
    req: lambda_http::Request,
) -> http::Response<lambda_http::Body> {
    use tracing::Instrument;
    let req = http_request(req);
    let span = crate::http_glue::request_span(&req);
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    // Browser-based clients call these cross-origin (`http_util::cors`).
    let res = http_util::cors::with_cors(&method, &path, || async {
        if path.starts_with(RESOURCE_METADATA_PATH) {
            resource_metadata_response(endpoint.config(), req.headers())
        } else if path.starts_with(AS_METADATA_PATH) {
            metadata_response(auth_server, &endpoint.config().base_url(req.headers()))
        } else {
            endpoint.handle(req).instrument(span).await
        }
    })
    .await;
    lambda_response(res)
}
