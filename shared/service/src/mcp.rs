//! The MCP endpoint: rmcp in stateless JSON mode behind a thin HTTP layer (SPEC §1, §2).
//!
//! [`McpEndpoint::handle`] takes a plain `http::Request<Bytes>` and returns a plain response,
//! so the `mcp` Lambda (through `lambda_http`) and the local server (through axum) run exactly
//! the same code. The layer around rmcp does what rmcp leaves to the application:
//!
//! 1. `GET`/`DELETE` → `405 Allow: POST` at once (clients hang or loop on anything slower);
//! 2. bodies over the limit → `413`, bodies that are not JSON → `400` with `-32700` (rmcp
//!    would answer a plain-text 415);
//! 3. bearer token → [`Identity`], or `401` with `WWW-Authenticate: Bearer resource_metadata=…`
//!    (also for a token carrying the owner scope, or neither connector scope);
//! 4. `tools/call` of a tool whose scope the token lacks → `403 insufficient_scope`;
//! 5. rmcp answers the protocol (both `2025-11-25` and `2026-07-28`), and [`McpHandler`]
//!    validates arguments and hands the call to a [`Dispatch`] — a synchronous Lambda invoke in
//!    the cloud, [`InProcess`] locally;
//! 6. `tools/list` responses get the top-level `securitySchemes` field that rmcp's `Tool` type
//!    cannot carry (copied from each tool's `_meta`).
//!
//! **The direct path.** A plain `tools/call` — the hot request of every agent — is answered
//! without rmcp's per-request machinery (a serve loop spawned per request, the body parsed a
//! second time, channels between tasks: measured in `docs/results.md`, "Peer benchmark") when
//! it is unmistakably one rmcp would serve the same way: a protocol version before
//! `2026-07-28` in the header, no `_meta`, no session or `Origin` header, an accepted `Host`, a
//! plain `Accept` listing JSON and SSE, a JSON content type, an integer or string `id`. It runs
//! the same [`McpHandler::call`] and serializes rmcp's own response types with the same legacy
//! shaping; everything else goes to rmcp. `tests/tests/mcp_direct.rs` sends the same requests
//! both ways and compares the answers.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::{BodyExt, Full};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonRpcError,
    JsonRpcResponse, JsonRpcVersion2_0, ListToolsResult, PaginatedRequestParams, RequestId, ServerCapabilities,
    ServerConfig, ServerJsonRpcMessage, ServerResult, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, ServerHandler};

use crate::auth::{AuthError, Authenticator, Identity, ScopeSpelling, bearer};
use crate::tools::{
    SCOPE_OWNER, SCOPE_READ, SCOPE_RUN, ToolCall, ToolDeps, ToolFault, ToolName, ToolReply, ToolStore, catalogue,
    handle,
};

/// Default largest request body: an artifact of 3 MiB is 4 MiB of base64 plus JSON.
pub const DEFAULT_MAX_BODY_BYTES: usize = 5 * 1024 * 1024;

/// Path of the protected-resource metadata document (RFC 9728).
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Where a tool call goes after the `mcp` layer checked it.
#[async_trait::async_trait]
pub trait Dispatch: Send + Sync + 'static {
    /// Runs `call` in the tool's own function (or in process).
    async fn dispatch(&self, call: ToolCall) -> Result<ToolReply, ToolFault>;
}

/// Dispatch in the same process: the local server and tests.
pub struct InProcess<S: ?Sized>(pub ToolDeps<S>);

#[async_trait::async_trait]
impl<S: ToolStore + ?Sized + 'static> Dispatch for InProcess<S> {
    async fn dispatch(&self, call: ToolCall) -> Result<ToolReply, ToolFault> {
        handle(&self.0, &call).await
    }
}

/// The rmcp server handler: catalogue, validation, dispatch.
pub struct McpHandler<D: ?Sized> {
    dispatch: Arc<D>,
    tools: Arc<Vec<Tool>>,
}

impl<D: ?Sized> Clone for McpHandler<D> {
    fn clone(&self) -> Self {
        Self { dispatch: Arc::clone(&self.dispatch), tools: Arc::clone(&self.tools) }
    }
}

fn rmcp_tools(scopes: &ScopeSpelling) -> Vec<Tool> {
    catalogue(scopes).into_iter().filter_map(|t| serde_json::from_value(t).ok()).collect()
}

const INSTRUCTIONS: &str = "foundry-connect hands work to the owner's desktop and to linked chats. \
Graph runs are queued, not run inline: run_graph_session returns a ticket, get_graph_run reads it \
(first after check_after_s). Linked chat tasks are claimed, worked on, then submitted with the claim_id.";

impl<D: Dispatch + ?Sized> ServerHandler for McpHandler<D> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("foundry-connect", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult { tools: self.tools.as_ref().clone(), ..Default::default() })
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let identity =
            context.extensions.get::<http::request::Parts>().and_then(|p| p.extensions.get::<Identity>()).cloned();
        self.call(identity, request).await
    }
}

impl<D: Dispatch + ?Sized> McpHandler<D> {
    /// One `tools/call`, for rmcp's handler and the direct path alike: scope, validation,
    /// dispatch, and the mapping of the tool's reply to a result or a JSON-RPC error.
    pub async fn call(
        &self,
        identity: Option<Identity>,
        request: CallToolRequestParams,
    ) -> Result<CallToolResponse, McpError> {
        let Some(tool) = ToolName::parse(&request.name) else {
            return Err(McpError::invalid_params(format!("Unknown tool: {}", request.name), None));
        };
        let identity = identity.ok_or_else(|| McpError::internal_error("request without identity", None))?;
        if !identity.has_scope(tool.spec().scope) {
            return Err(McpError::invalid_request(
                format!("insufficient scope: {} needs {}", tool.as_str(), tool.spec().scope),
                None,
            ));
        }
        let arguments = request.arguments.map(serde_json::Value::Object).unwrap_or(serde_json::Value::Null);
        tool.validate(&arguments).map_err(|m| McpError::invalid_params(m, None))?;
        let call = ToolCall { tool, owner: identity.owner, agent: identity.agent, arguments };
        match self.dispatch.dispatch(call).await {
            Ok(ToolReply::Ok { structured }) => Ok(CallToolResult::structured(structured).into()),
            Ok(ToolReply::Rejected { message }) => Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into()),
            Ok(ToolReply::Invalid { message }) => Err(McpError::invalid_params(message, None)),
            Err(fault) => {
                tracing::error!(tool = tool.as_str(), error = %domain::errors::ErrorChain(&fault), "tool call failed");
                Err(McpError::internal_error("temporarily unavailable; retry with the same arguments", None))
            }
        }
    }
}

/// How the endpoint presents itself.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// The public base URL, e.g. `https://mcp.example.com`; `None` = `https://<Host header>`
    /// (behind API Gateway, whose URL the function cannot know without a dependency cycle).
    pub public_url: Option<String>,
    /// The MCP path, e.g. `/mcp`.
    pub mcp_path: String,
    /// `Host` values accepted (rmcp's DNS-rebinding protection): `Some(empty)` = loopback only
    /// (the local server), `Some(list)` = those, `None` = no check (API Gateway routes only
    /// requests for its own domains, and every request needs a bearer token).
    pub allowed_hosts: Option<Vec<String>>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// How the authorization server spells the scopes (what the endpoint advertises).
    pub scopes: ScopeSpelling,
}

impl EndpointConfig {
    /// The base URL for a request: `https://` + its `Host` when that is one of the accepted
    /// hosts other than the configured URL's (a custom domain), else the configured URL, else
    /// `https://` + the `Host`.
    pub fn base_url(&self, headers: &http::HeaderMap) -> String {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let configured = self.public_url.as_deref().map(|u| u.trim_end_matches('/').to_owned());
        let configured_host = configured.as_deref().and_then(|u| u.split_once("://")).map(|(_, h)| h.to_owned());
        match (host, configured) {
            (Some(h), Some(_))
                if Some(h) != configured_host.as_deref()
                    && self.allowed_hosts.as_ref().is_some_and(|a| a.iter().any(|x| x == h)) =>
            {
                format!("https://{h}")
            }
            (_, Some(u)) => u,
            (h, None) => format!("https://{}", h.unwrap_or("localhost")),
        }
    }

    /// The resource identifier: the MCP URL.
    pub fn resource(&self, base: &str) -> String {
        format!("{base}{}", self.mcp_path)
    }

    /// The metadata URL announced in `WWW-Authenticate`.
    pub fn metadata_url(&self, base: &str) -> String {
        format!("{base}{RESOURCE_METADATA_PATH}")
    }

    /// The RFC 9728 protected-resource metadata document.
    pub fn resource_metadata(&self, base: &str) -> serde_json::Value {
        serde_json::json!({
            "resource": self.resource(base),
            // The stack's own authorization-server metadata (crate::oauth), at the same base.
            "authorization_servers": [base],
            "scopes_supported": [self.scopes.spell(crate::tools::SCOPE_READ), self.scopes.spell(crate::tools::SCOPE_RUN)],
            "bearer_methods_supported": ["header"],
            "resource_name": "foundry-connect",
        })
    }
}

/// The MCP endpoint: HTTP in, HTTP out.
pub struct McpEndpoint<D: ?Sized> {
    service: StreamableHttpService<McpHandler<D>, NeverSessionManager>,
    handler: McpHandler<D>,
    auth: Arc<Authenticator>,
    config: EndpointConfig,
    /// `Host` values rmcp accepts, normalized as rmcp does; `None` = no check.
    hosts: Option<Vec<(String, Option<u16>)>>,
    direct: bool,
    verified: VerifiedTokens,
}

/// Tokens this endpoint verified lately, each with the identity it carries: an agent sends
/// the same token on every call, and verifying it (parse, signature, claims) was 12 % of a
/// `list_linked_chat_tasks` in the profile. Keyed by the exact token text, so only the same
/// bytes hit; an entry lasts until the token expires and at most [`VERIFIED_FOR`] (a key
/// withdrawn from the issuer's set stops being honoured within that time); at most
/// [`VERIFIED_MAX`] entries (expired ones are dropped first, else all).
#[derive(Default)]
struct VerifiedTokens(std::sync::Mutex<std::collections::HashMap<Box<str>, (Identity, domain::clock::Timestamp)>>);

/// How long a verified token is remembered at most.
pub const VERIFIED_FOR: std::time::Duration = std::time::Duration::from_secs(60);
/// How many verified tokens are remembered at most.
pub const VERIFIED_MAX: usize = 1024;

impl VerifiedTokens {
    fn get(&self, token: &str, now: domain::clock::Timestamp) -> Option<Identity> {
        let map = self.0.lock().ok()?;
        map.get(token).filter(|(_, until)| now < *until).map(|(id, _)| id.clone())
    }

    fn put(&self, token: &str, identity: Identity, until: domain::clock::Timestamp, now: domain::clock::Timestamp) {
        let Ok(mut map) = self.0.lock() else { return };
        if map.len() >= VERIFIED_MAX {
            map.retain(|_, (_, u)| now < *u);
            if map.len() >= VERIFIED_MAX {
                map.clear();
            }
        }
        map.insert(token.into(), (identity, until.min(now.plus(VERIFIED_FOR))));
    }
}

/// Protocol versions whose `tools/call` rmcp serves on its legacy stateless path (no
/// per-request metadata, no SEP-2243 headers): the only ones the direct path answers.
const DIRECT_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// rmcp's `Host` normalization: brackets trimmed, lower case, port kept apart.
fn normalized_authority(s: &str) -> Option<(String, Option<u16>)> {
    let a = http::uri::Authority::try_from(s.trim()).ok()?;
    Some((a.host().trim_matches('[').trim_matches(']').to_ascii_lowercase(), a.port_u16()))
}

impl<D: Dispatch + ?Sized> McpEndpoint<D> {
    /// An endpoint dispatching to `dispatch`, verifying tokens with `auth`.
    pub fn new(dispatch: Arc<D>, auth: Arc<Authenticator>, config: EndpointConfig) -> Self {
        let handler = McpHandler { dispatch, tools: Arc::new(rmcp_tools(&config.scopes)) };
        let mut rmcp_config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
            .with_max_request_body_bytes(config.max_body_bytes);
        match &config.allowed_hosts {
            None => rmcp_config = rmcp_config.disable_allowed_hosts(),
            Some(hosts) if !hosts.is_empty() => rmcp_config = rmcp_config.with_allowed_hosts(hosts.clone()),
            Some(_) => {}
        }
        // The direct path accepts the `Host` values rmcp was just configured with (an empty
        // list is rmcp's "no check").
        let hosts = (!rmcp_config.allowed_hosts.is_empty())
            .then(|| rmcp_config.allowed_hosts.iter().filter_map(|h| normalized_authority(h)).collect());
        let for_rmcp = handler.clone();
        let service = StreamableHttpService::new(
            move || Ok(for_rmcp.clone()),
            Arc::new(NeverSessionManager::default()),
            rmcp_config,
        );
        Self { service, handler, auth, config, hosts, direct: true, verified: VerifiedTokens::default() }
    }

    /// Who `token` is: remembered from an earlier call while that answer holds, else verified.
    async fn identity(&self, token: &str) -> Result<Identity, AuthError> {
        let now = self.auth.clock.now();
        if let Some(identity) = self.verified.get(token, now) {
            return Ok(identity);
        }
        let (identity, until) = self.auth.verify_until(token).await?;
        self.verified.put(token, identity.clone(), until, now);
        Ok(identity)
    }

    /// Sends every request through rmcp, even plain `tools/call`s (the direct path off): for
    /// the tests that compare both paths, and for diagnosis.
    pub fn without_direct_calls(mut self) -> Self {
        self.direct = false;
        self
    }

    /// Whether [`Self::handle`] would answer `req` on the direct path (once its token checks
    /// out): for the tests that compare both paths, and for diagnosis.
    pub fn answers_directly(&self, req: &http::Request<Bytes>) -> bool {
        self.direct
            && serde_json::from_slice::<serde_json::Value>(req.body())
                .is_ok_and(|m| self.direct_call(req.headers(), &m).is_some())
    }

    /// The call, when `message` is a plain `tools/call` that rmcp would serve on its legacy
    /// stateless path exactly as [`Self::answer_directly`] does; `None` sends it to rmcp.
    /// Every check is as strict as rmcp's or stricter (anything unusual goes to rmcp).
    fn direct_call(
        &self,
        headers: &http::HeaderMap,
        message: &serde_json::Value,
    ) -> Option<(RequestId, CallToolRequestParams)> {
        let version = headers.get("mcp-protocol-version")?.to_str().ok()?;
        if !DIRECT_VERSIONS.contains(&version)
            || headers.contains_key("mcp-session-id")
            || headers.contains_key(header::ORIGIN)
        {
            return None;
        }
        if let Some(allowed) = &self.hosts {
            let host = normalized_authority(headers.get(header::HOST)?.to_str().ok()?)?;
            if !allowed.iter().any(|(h, p)| *h == host.0 && p.is_none_or(|p| host.1 == Some(p))) {
                return None;
            }
        }
        let (mut json, mut sse) = (false, false);
        for value in headers.get_all(header::ACCEPT) {
            for entry in value.to_str().ok()?.split(',') {
                let entry = entry.trim();
                if entry.contains([';', '"']) {
                    return None;
                }
                json |= entry.eq_ignore_ascii_case("application/json");
                sse |= entry.eq_ignore_ascii_case("text/event-stream");
            }
        }
        let content_type = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
        let essence = content_type.split_once(';').map_or(content_type, |(e, _)| e);
        if !json || !sse || !essence.trim().eq_ignore_ascii_case("application/json") {
            return None;
        }
        let m = message.as_object()?;
        if m.len() != 4 || m.get("jsonrpc")?.as_str()? != "2.0" || m.get("method")?.as_str()? != "tools/call" {
            return None;
        }
        let id = match m.get("id")? {
            v @ serde_json::Value::String(_) => v,
            v @ serde_json::Value::Number(n) if n.is_i64() => v,
            _ => return None,
        };
        let params = m.get("params")?.as_object()?;
        if params.keys().any(|k| k != "name" && k != "arguments")
            || !params.get("name")?.is_string()
            || params.get("arguments").is_some_and(|a| !a.is_object())
        {
            return None;
        }
        let id = serde_json::from_value::<RequestId>(id.clone()).ok()?;
        let params = serde_json::from_value::<CallToolRequestParams>(serde_json::Value::Object(params.clone())).ok()?;
        Some((id, params))
    }

    /// Runs a call [`Self::direct_call`] accepted and answers it as rmcp's JSON mode does:
    /// `200`, `application/json`, the result shaped for a peer before `2026-07-28`.
    async fn answer_directly(
        &self,
        identity: Identity,
        id: RequestId,
        params: CallToolRequestParams,
    ) -> http::Response<Bytes> {
        let message = match self.handler.call(Some(identity), params).await {
            Ok(response) => {
                let mut result = ServerResult::from(response);
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
                ServerJsonRpcMessage::Response(JsonRpcResponse { jsonrpc: JsonRpcVersion2_0, id, result })
            }
            Err(error) => ServerJsonRpcMessage::Error(JsonRpcError::new(Some(id), error)),
        };
        match serde_json::to_vec(&message) {
            Ok(body) => {
                let length = body.len().to_string();
                respond(
                    StatusCode::OK,
                    &[(header::CONTENT_TYPE, "application/json"), (header::CONTENT_LENGTH, &length)],
                    Bytes::from(body),
                )
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot serialize a tool result");
                respond(StatusCode::INTERNAL_SERVER_ERROR, &[], Bytes::from_static(b"Internal Server Error"))
            }
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// Answers one HTTP request to the MCP path.
    pub async fn handle(&self, req: http::Request<Bytes>) -> http::Response<Bytes> {
        if req.method() != Method::POST {
            return respond(
                StatusCode::METHOD_NOT_ALLOWED,
                &[(header::ALLOW, "POST")],
                Bytes::from_static(b"Method Not Allowed"),
            );
        }
        if req.body().len() > self.config.max_body_bytes {
            let body = jsonrpc_error(-32600, &format!("request body: at most {} bytes", self.config.max_body_bytes));
            return respond(StatusCode::PAYLOAD_TOO_LARGE, &[(header::CONTENT_TYPE, "application/json")], body);
        }
        let base = self.config.base_url(req.headers());
        let token = bearer(req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()));
        let identity = match token {
            None => Err(AuthError::Missing),
            Some(t) => self.identity(t).await,
        };
        let identity = match identity {
            Ok(id) => id,
            Err(AuthError::KeysUnavailable(e)) => {
                tracing::error!(error = %domain::errors::ErrorChain(&*e), "cannot fetch the token signing keys");
                return respond(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &[(header::RETRY_AFTER, "5")],
                    Bytes::from_static(b"Service Unavailable"),
                );
            }
            Err(e) => {
                tracing::info!(error = %e, "unauthenticated MCP request");
                let challenge = format!("Bearer resource_metadata=\"{}\"", self.config.metadata_url(&base));
                return respond(
                    StatusCode::UNAUTHORIZED,
                    &[(header::WWW_AUTHENTICATE, &challenge)],
                    Bytes::from_static(b"Unauthorized"),
                );
            }
        };
        // Tokens for the owner (the panel's client) or without any connector scope are not
        // for this resource, even from this deployment's issuer.
        let connector = identity.has_scope(SCOPE_READ) || identity.has_scope(SCOPE_RUN);
        if identity.has_scope(SCOPE_OWNER) || !connector {
            tracing::info!(agent = identity.agent.as_str(), "token without connector scopes, or with the owner's");
            let challenge = format!(
                "Bearer error=\"invalid_token\", error_description=\"not a connector token\", resource_metadata=\"{}\"",
                self.config.metadata_url(&base)
            );
            return respond(
                StatusCode::UNAUTHORIZED,
                &[(header::WWW_AUTHENTICATE, &challenge)],
                Bytes::from_static(b"Unauthorized"),
            );
        }
        let message: serde_json::Value = match serde_json::from_slice(req.body()) {
            Ok(m) => m,
            Err(e) => {
                let body = jsonrpc_error(-32700, &format!("Parse error: the body is not JSON ({e})"));
                return respond(StatusCode::BAD_REQUEST, &[(header::CONTENT_TYPE, "application/json")], body);
            }
        };
        let message = Some(message);
        let method = message.as_ref().and_then(|m| m.get("method")).and_then(|m| m.as_str()).map(str::to_owned);
        if method.as_deref() == Some("tools/call")
            && let Some(tool) = message
                .as_ref()
                .and_then(|m| m.pointer("/params/name"))
                .and_then(|n| n.as_str())
                .and_then(ToolName::parse)
            && !identity.has_scope(tool.spec().scope)
        {
            let challenge = format!(
                "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
                self.config.scopes.spell(tool.spec().scope),
                self.config.metadata_url(&base)
            );
            return respond(
                StatusCode::FORBIDDEN,
                &[(header::WWW_AUTHENTICATE, &challenge)],
                Bytes::from_static(b"Forbidden"),
            );
        }
        if self.direct
            && let Some(m) = message.as_ref()
            && let Some((id, params)) = self.direct_call(req.headers(), m)
        {
            return self.answer_directly(identity, id, params).await;
        }
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(identity);
        let response = self.service.handle(http::Request::from_parts(parts, Full::new(body))).await;
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        let bytes = if method.as_deref() == Some("tools/list") { with_security_schemes(bytes) } else { bytes };
        let mut out = http::Response::from_parts(parts, bytes.clone());
        out.headers_mut().remove(header::CONTENT_LENGTH);
        if let Ok(v) = HeaderValue::from_str(&bytes.len().to_string()) {
            out.headers_mut().insert(header::CONTENT_LENGTH, v);
        }
        out
    }
}

/// Copies each tool's `_meta.securitySchemes` to a top-level `securitySchemes` field.
fn with_security_schemes(body: Bytes) -> Bytes {
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&body) else { return body };
    let Some(tools) = v.pointer_mut("/result/tools").and_then(|t| t.as_array_mut()) else { return body };
    for t in tools {
        if let Some(schemes) = t.pointer("/_meta/securitySchemes").cloned()
            && let Some(o) = t.as_object_mut()
        {
            o.insert("securitySchemes".into(), schemes);
        }
    }
    serde_json::to_vec(&v).map(Bytes::from).unwrap_or(body)
}

fn jsonrpc_error(code: i64, message: &str) -> Bytes {
    let v = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    Bytes::from(v.to_string())
}

fn respond(status: StatusCode, headers: &[(header::HeaderName, &str)], body: Bytes) -> http::Response<Bytes> {
    let mut r = http::Response::new(body);
    *r.status_mut() = status;
    for (k, v) in headers {
        if let Ok(v) = HeaderValue::from_str(v) {
            r.headers_mut().insert(k.clone(), v);
        }
    }
    r
}

/// Answers `GET /.well-known/oauth-protected-resource[/<mcp path>]`.
pub fn resource_metadata_response(config: &EndpointConfig, headers: &http::HeaderMap) -> http::Response<Bytes> {
    respond(
        StatusCode::OK,
        &[(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "max-age=3600")],
        Bytes::from(config.resource_metadata(&config.base_url(headers)).to_string()),
    )
}
