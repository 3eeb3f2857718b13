//! # mcp-endpoint — the MCP endpoint: rmcp in stateless JSON mode behind a thin HTTP layer (SPEC §1, §2).
//!
//! [`McpEndpoint::handle`] takes a plain `http::Request<Bytes>` and returns a plain response,
//! so the `mcp` Lambda (through `lambda_http`) and the local server (through axum) run exactly
//! the same code. The layer around rmcp does what rmcp leaves to the application:
//!
//! 1. `GET`/`DELETE` → `405 Allow: POST` at once (clients hang or loop on anything slower);
//! 2. bodies over the limit → `413`; the body parsed **once**, straight into rmcp's message
//!    type: not JSON → `400` with `-32700`, JSON but no JSON-RPC message → `400` with `-32600`
//!    (rmcp would answer a plain-text 415);
//! 3. bearer token → [`Identity`](auth::Identity), or `401` with `WWW-Authenticate: Bearer resource_metadata=…`
//!    (also for a token carrying the owner scope, or neither connector scope);
//! 4. the tool a `tools/call` names parsed once into a [`ToolName`], which goes down with the
//!    call (on rmcp's path in the request's extensions, beside the identity); a tool whose scope
//!    the token lacks → `403 insufficient_scope` — the one scope check: every `tools/call`
//!    reaches the handler through here (rmcp 3 takes no batches, so a call is always the
//!    top-level object looked at);
//! 5. rmcp answers the protocol (both `2025-11-25` and `2026-07-28`), and [`McpHandler`] hands
//!    the call to a [`Dispatch`] with its arguments as they came: whoever runs the tool parses
//!    them once — the tool's own function in the cloud (a synchronous Lambda invoke), the tool
//!    in process locally ([`InProcess`]);
//! 6. the catalogue is built once with each tool's `securitySchemes` in place, and the direct
//!    path lists it as it is; on rmcp's path (whose `Tool` type cannot carry the field) the
//!    `tools/list` answer gets it copied from each tool's `_meta`.
//!
//! **The direct path.** A plain `tools/call` — the hot request of every agent — and a plain
//! `tools/list` are answered without rmcp's per-request machinery (a serve loop spawned per
//! request, the body parsed a second time, channels between tasks: measured in
//! `docs/results.md`, "Peer benchmark") when they are unmistakably ones rmcp would serve the
//! same way: a protocol version before `2026-07-28` in the header, no `_meta`, no session or
//! `Origin` header, an accepted `Host`, a plain `Accept` listing JSON and SSE, a JSON content
//! type, a request (not a notification), a listing without a cursor. The call runs the same
//! [`McpHandler::call`]; both serialize rmcp's own response types with the same legacy
//! shaping; everything else goes to rmcp. `tests/tests/mcp_direct.rs` sends the same requests
//! both ways and compares the answers.
//!
//! | module | what |
//! |---|---|
//! | this one | [`McpEndpoint`]: the HTTP guards above, then the direct path or rmcp |
//! | `handler` | [`McpHandler`] (rmcp's `ServerHandler`), [`Dispatch`], [`InProcess`] |
//! | `apps` | the run card (MCP Apps): offered only to clients that declare the extension |
//! | `direct` | the direct `tools/call` path and when it applies |
//! | `tokens` | verified tokens remembered for a short while ([`VERIFIED_FOR`], [`VERIFIED_MAX`]) |
//! | `metadata` | [`EndpointConfig`], the public URL and the RFC 9728 resource metadata |

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::{BodyExt, Full};
use rmcp::model::{ClientCapabilities, ClientJsonRpcMessage, ClientRequest, GetMeta, JsonRpcMessage};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use auth::{AuthError, Authenticator, bearer};
use domain::budget::{OwnerBudget, Surface};
use domain::clients::{ClientInfo, HostSeen};
use domain::clock::SharedClock;
use domain::store::{ClientUse, LimitAttempts};
use http_util::http_json::BudgetRefusal;
use tools::{SCOPE_OWNER, SCOPE_READ, SCOPE_RUN, ToolName};

pub mod apps;
mod direct;
mod handler;
mod metadata;
mod tokens;

pub use handler::{Dispatch, InProcess, McpHandler};
pub use metadata::{DEFAULT_MAX_BODY_BYTES, EndpointConfig, RESOURCE_METADATA_PATH, resource_metadata_response};
pub use tokens::{VERIFIED_FOR, VERIFIED_MAX};

/// The MCP endpoint: HTTP in, HTTP out.
pub struct McpEndpoint<D: ?Sized> {
    service: StreamableHttpService<McpHandler<D>, NeverSessionManager>,
    handler: McpHandler<D>,
    auth: Arc<Authenticator>,
    config: EndpointConfig,
    /// `Host` values rmcp accepts, normalized as rmcp does; `None` = no check.
    hosts: Option<Vec<(String, Option<u16>)>>,
    direct: bool,
    verified: tokens::VerifiedTokens,
    budget: Option<Budget>,
    seen: Option<(Arc<dyn ClientUse>, SharedClock)>,
}

/// Each owner's budget on this endpoint, the store it is counted in, and "now".
struct Budget {
    budget: OwnerBudget,
    counts: Arc<dyn LimitAttempts>,
    clock: SharedClock,
}

impl<D: Dispatch + ?Sized> McpEndpoint<D> {
    /// An endpoint dispatching to `dispatch`, verifying tokens with `auth`.
    pub fn new(dispatch: Arc<D>, auth: Arc<Authenticator>, config: EndpointConfig) -> Self {
        let handler = McpHandler::new(dispatch, &config.scopes);
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
            .then(|| rmcp_config.allowed_hosts.iter().filter_map(|h| direct::normalized_authority(h)).collect());
        let for_rmcp = handler.clone();
        let service = StreamableHttpService::new(
            move || Ok(for_rmcp.clone()),
            Arc::new(NeverSessionManager::default()),
            rmcp_config,
        );
        Self {
            service,
            handler,
            auth,
            config,
            hosts,
            direct: true,
            verified: tokens::VerifiedTokens::default(),
            budget: None,
            seen: None,
        }
    }

    /// Counts each owner's requests against `per_minute` (`domain::budget`, the MCP surface) in
    /// `counts`: an owner past it is answered `429` with `Retry-After` before its request is
    /// read. Without it every authenticated request is served.
    #[must_use]
    pub fn with_budget(mut self, per_minute: u32, counts: Arc<dyn LimitAttempts>, clock: SharedClock) -> Self {
        self.budget = Some(Budget { budget: OwnerBudget::new(Surface::Mcp, per_minute), counts, clock });
        self
    }

    /// Records each host's handshake (`initialize`, or `server/discover` in the 2026-07-28 era)
    /// for the token's owner in `store` ([`ClientUse::mark_host_seen`]): the owner's panel lists
    /// the hosts that connected. One write per handshake, none on any other request; a failed
    /// write is logged and the request served.
    #[must_use]
    pub fn with_hosts(mut self, store: Arc<dyn ClientUse>, clock: SharedClock) -> Self {
        self.seen = Some((store, clock));
        self
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
                // RFC 6750 §3.1: a presented token that failed is `invalid_token`, so the client
                // refreshes instead of starting over; no token gets no error code.
                let challenge = match token {
                    Some(_) => format!(
                        "Bearer error=\"invalid_token\", error_description=\"the access token is invalid or expired\", resource_metadata=\"{}\"",
                        self.config.metadata_url(&base)
                    ),
                    None => format!("Bearer resource_metadata=\"{}\"", self.config.metadata_url(&base)),
                };
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
        if let Some(b) = &self.budget {
            match http_util::http_json::budget_check(&b.budget, b.counts.as_ref(), &identity.owner, b.clock.now()).await
            {
                Ok(()) => {}
                Err(BudgetRefusal::Spent { retry_after_s, message }) => {
                    return respond(
                        StatusCode::TOO_MANY_REQUESTS,
                        &[
                            (header::CONTENT_TYPE, "application/json"),
                            (header::RETRY_AFTER, &retry_after_s.to_string()),
                        ],
                        jsonrpc_error(-32000, &message),
                    );
                }
                Err(BudgetRefusal::Unavailable) => {
                    return respond(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &[(header::RETRY_AFTER, "5")],
                        Bytes::from_static(b"Service Unavailable"),
                    );
                }
            }
        }
        // The one parse of the body: straight into rmcp's message type. Bytes that are no JSON
        // are a parse error; JSON that is no JSON-RPC message (a batch, a wrong `jsonrpc`, an
        // `id` that is an object) an invalid request, said as JSON-RPC (rmcp would answer an
        // empty 415).
        let message: ClientJsonRpcMessage = match serde_json::from_slice(req.body()) {
            Ok(m) => m,
            Err(e) if e.is_syntax() || e.is_eof() => {
                let body = jsonrpc_error(-32700, &format!("Parse error: the body is not JSON ({e})"));
                return respond(StatusCode::BAD_REQUEST, &[(header::CONTENT_TYPE, "application/json")], body);
            }
            Err(e) => {
                let body = jsonrpc_error(
                    -32600,
                    &format!("Invalid Request: the body is not one JSON-RPC 2.0 request or notification ({e})"),
                );
                return respond(StatusCode::BAD_REQUEST, &[(header::CONTENT_TYPE, "application/json")], body);
            }
        };
        let request = match &message {
            JsonRpcMessage::Request(r) => Some(&r.request),
            _ => None,
        };
        // The tool a `tools/call` names, parsed once and carried to the handler on either path.
        let called = request.and_then(called_tool);
        // The one scope check: a tool's own scope; `tasks/get` and `tasks/cancel` (a Graph run
        // as a task) need what get_graph_run and cancel_graph_run need.
        let scoped_tool = match request {
            Some(ClientRequest::GetTaskRequest(_)) => Some(ToolName::GetGraphRun),
            Some(ClientRequest::CancelTaskRequest(_)) => Some(ToolName::CancelGraphRun),
            _ => called,
        };
        if let Some(tool) = scoped_tool
            && !identity.has_scope(tool.spec().scope)
        {
            // Every connector scope, not only the missing one: a client that asks again for
            // exactly what the challenge names would otherwise lose the scope it had.
            let challenge = format!(
                "Bearer error=\"insufficient_scope\", scope=\"{} {}\", resource_metadata=\"{}\"",
                self.config.scopes.spell(SCOPE_READ),
                self.config.scopes.spell(SCOPE_RUN),
                self.config.metadata_url(&base)
            );
            return respond(
                StatusCode::FORBIDDEN,
                &[(header::WWW_AUTHENTICATE, &challenge)],
                Bytes::from_static(b"Forbidden"),
            );
        }
        if let Some(request) = request {
            log_client(request);
            if let (Some((store, clock)), Some((info, protocol))) = (&self.seen, handshake(request)) {
                let host = HostSeen { client_id: identity.agent.client(), info, protocol, seen_at: clock.now() };
                if let Err(e) = store.mark_host_seen(&identity.owner, &host).await {
                    tracing::error!(error = %domain::errors::ErrorChain(&e), "recording a host's handshake");
                }
            }
        }
        let listing = matches!(request, Some(ClientRequest::ListToolsRequest(_)));
        // MCP Apps in the 2025-11-25 era: declared in `initialize`, carried by the session id
        // (`apps::APPS_SESSION_PREFIX`).
        let apps_initialize = matches!(request, Some(ClientRequest::InitializeRequest(r))
            if apps::wants_apps(Some(&r.params.capabilities)));
        let apps_session =
            req.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).is_some_and(apps::is_apps_session);
        if self.direct && self.plain_headers(req.headers()) {
            match direct::plain(message) {
                Some(direct::Plain::Call(id, params)) => {
                    let trace = req.extensions().get::<http_util::TraceId>().map(|t| t.0.clone());
                    return self.answer_directly(identity, id, called, params, trace).await;
                }
                Some(direct::Plain::List(id)) => return self.list_directly(&id),
                None => {}
            }
        }
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(identity);
        if apps_session {
            parts.extensions.insert(apps::AppsSession);
        }
        if let Some(tool) = called {
            parts.extensions.insert(tool);
        }
        let response = self.service.handle(http::Request::from_parts(parts, Full::new(body))).await;
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        let bytes = if listing { handler::with_security_schemes(bytes) } else { bytes };
        let mut out = http::Response::from_parts(parts, bytes.clone());
        out.headers_mut().remove(header::CONTENT_LENGTH);
        if let Ok(v) = HeaderValue::from_str(&bytes.len().to_string()) {
            out.headers_mut().insert(header::CONTENT_LENGTH, v);
        }
        if apps_initialize
            && out.status() == StatusCode::OK
            && let Ok(v) = HeaderValue::from_str(&apps::new_apps_session())
        {
            out.headers_mut().insert("mcp-session-id", v);
        }
        out
    }
}

/// Which hosts connect, and which declare extensions (MCP Apps among them): a 2025-11-25
/// `initialize` is logged with its `clientInfo`; so is every request of the 2026-07-28 era,
/// which has no handshake and says who it is in each request's `_meta` (SEP-2575). The same
/// field names in both lines (`client`, `client_version`, `protocol`, `extensions`), the
/// client's words cleaned ([`ClientInfo`]). rmcp's own per-request line names a placeholder
/// (`rmcp 3.11.0`) for every stateless request: this is the line that says who it was.
fn log_client(request: &ClientRequest) {
    let keys = |c: &ClientCapabilities| -> Vec<String> {
        c.extensions.as_ref().map(|e| e.keys().cloned().collect()).unwrap_or_default()
    };
    if let ClientRequest::InitializeRequest(r) = request {
        let info = ClientInfo::new(&r.params.client_info.name, &r.params.client_info.version);
        tracing::info!(
            client = %info.name,
            client_version = %info.version,
            protocol = %r.params.protocol_version,
            extensions = ?keys(&r.params.capabilities),
            "initialize"
        );
        return;
    }
    let meta = request.get_meta();
    let info = meta.get(CLIENT_INFO_META).and_then(ClientInfo::from_json);
    let protocol = meta.protocol_version();
    if info.is_none() && protocol.is_none() {
        return; // a 2025-11-25 request after its `initialize`
    }
    let info = info.unwrap_or_default();
    tracing::info!(
        client = %info.name,
        client_version = %info.version,
        protocol = %protocol.map(|p| p.to_string()).unwrap_or_default(),
        extensions = ?meta.client_capabilities().as_ref().map(keys).unwrap_or_default(),
        method = request.method(),
        "client request"
    );
}

/// What a handshake says of the host: its `clientInfo` and protocol version — from
/// `initialize`, or from `server/discover`'s `_meta`. `None` for every other request (and a
/// discover naming no client).
fn handshake(request: &ClientRequest) -> Option<(ClientInfo, String)> {
    match request {
        ClientRequest::InitializeRequest(r) => Some((
            ClientInfo::new(&r.params.client_info.name, &r.params.client_info.version),
            r.params.protocol_version.to_string(),
        )),
        ClientRequest::DiscoverRequest(_) => {
            let meta = request.get_meta();
            let info = meta.get(CLIENT_INFO_META).and_then(ClientInfo::from_json)?;
            Some((info, meta.protocol_version().map(|p| p.to_string()).unwrap_or_default()))
        }
        _ => None,
    }
}

/// Where a 2026-07-28 request carries its `clientInfo` (SEP-2575).
const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";

/// The tool a `tools/call` names, if it is one of ours. A `tools/call` whose params are not a
/// call's shape lands in rmcp's catch-all variant: its name still decides the scope check.
fn called_tool(request: &ClientRequest) -> Option<ToolName> {
    match request {
        ClientRequest::CallToolRequest(c) => ToolName::parse(&c.params.name),
        ClientRequest::CustomRequest(c) if c.method == "tools/call" => {
            c.params.as_ref()?.get("name")?.as_str().and_then(ToolName::parse)
        }
        _ => None,
    }
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
