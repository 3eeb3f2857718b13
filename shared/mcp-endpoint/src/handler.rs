//! The rmcp server handler: the catalogue, the one `tools/call` both paths run (the tool the
//! endpoint parsed, dispatched with its arguments as they came), and the `tools/list` shaping
//! rmcp's types cannot carry.

use std::sync::Arc;

use bytes::Bytes;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock, CreateTaskResult,
    DetailedTask, GetTaskParams, GetTaskResult, Implementation, JsonObject, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig, Task,
    TaskPayload, TaskStatus, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde::Deserialize;

use auth::{Identity, ScopeSpelling};
use tools::{ToolCall, ToolDeps, ToolFault, ToolName, ToolReply, ToolStore, catalogue, handle};

/// Where a tool call goes after the `mcp` layer checked it.
#[async_trait::async_trait]
pub trait Dispatch: Send + Sync + 'static {
    /// Runs `call` in the tool's own function, or in process. Its arguments are still the
    /// request's JSON: whoever runs the tool parses them, once (in the cloud that is the tool's
    /// function, so the `mcp` function never parses what it only forwards).
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
    /// The catalogue as rmcp's type (no `securitySchemes`: see `with_security_schemes`).
    tools: Arc<Vec<Tool>>,
    /// The same, with the run card linked (`_meta.ui`): for clients that declare MCP Apps.
    tools_with_card: Arc<Vec<Tool>>,
    /// The catalogue as listed, built once with each tool's `securitySchemes` in place.
    listed: Arc<serde_json::Value>,
}

impl<D: ?Sized> Clone for McpHandler<D> {
    fn clone(&self) -> Self {
        Self {
            dispatch: Arc::clone(&self.dispatch),
            tools: Arc::clone(&self.tools),
            tools_with_card: Arc::clone(&self.tools_with_card),
            listed: Arc::clone(&self.listed),
        }
    }
}

impl<D: ?Sized> McpHandler<D> {
    /// A handler dispatching to `dispatch`, listing the catalogue with `scopes` spelled as the
    /// authorization server issues them.
    pub fn new(dispatch: Arc<D>, scopes: &ScopeSpelling) -> Self {
        let listed = catalogue(scopes);
        let rmcp_tools =
            |listed: &[serde_json::Value]| listed.iter().filter_map(|t| Tool::deserialize(t).ok()).collect();
        let tools = rmcp_tools(&listed);
        let tools_with_card = rmcp_tools(&crate::apps::with_card(&listed));
        Self {
            dispatch,
            tools: Arc::new(tools),
            tools_with_card: Arc::new(tools_with_card),
            listed: Arc::new(serde_json::Value::Array(listed)),
        }
    }

    /// The `tools` array of a `tools/list` result, schemes in place.
    pub(super) fn listed(&self) -> &serde_json::Value {
        &self.listed
    }
}

const INSTRUCTIONS: &str = "foundry-connect hands work to the owner's desktop and to linked chats. \
To begin, call list_graph_sessions without arguments: it lists the projects you may use, the Graph sessions their \
desktops share, and the owner's chat links, so you never need the user to paste an id. \
Graph runs are queued, not run inline: run_graph_session returns a ticket, get_graph_run reads it \
(first after check_after_s). When the user asks you to check their tasks, call list_linked_chat_tasks with the chat link \
named for this conversation (ask the user which one if several could be). Linked chat tasks are claimed, worked on, \
then submitted with the claim_id.";

impl<D: Dispatch + ?Sized> ServerHandler for McpHandler<D> {
    fn get_info(&self) -> ServerConfig {
        // The Tasks extension (SEP-2663) and MCP Apps (SEP-1865) are offered; each is used only
        // for clients that declare it. Resources are the run card's (listed only to those).
        let mut capabilities = ServerCapabilities::builder().enable_tools().enable_resources().enable_tasks().build();
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(crate::apps::UI_EXTENSION.into(), JsonObject::new());
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("foundry-connect", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = if apps_client(&context) { &self.tools_with_card } else { &self.tools };
        Ok(ListToolsResult { tools: tools.as_ref().clone(), ..Default::default() })
    }

    /// The run card, for a client that declared MCP Apps; an empty list for any other.
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(crate::apps::list(apps_client(&context)))
    }

    /// The run card by its URI, for a client that declared MCP Apps; anything else is not
    /// found (`-32602` with the URI, as SEP-2164 has it).
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        crate::apps::read(apps_client(&context), &request.uri).map(Into::into).ok_or_else(|| {
            McpError::invalid_params("Resource not found", Some(serde_json::json!({ "uri": request.uri })))
        })
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let as_task = context.client_capabilities().is_some_and(|c| c.supports_tasks());
        // The endpoint parsed the name once and put the tool beside the identity.
        let tool =
            context.extensions.get::<http::request::Parts>().and_then(|p| p.extensions.get::<ToolName>()).copied();
        self.call(identity_of(&context), tool, request, as_task, trace_of(&context)).await
    }

    /// `tasks/get`: the Graph run the task is, read through `get_graph_run` (so the same
    /// visibility: only the agent that started it).
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let run =
            self.run_tool(identity_of(&context), ToolName::GetGraphRun, &request.task_id, trace_of(&context)).await?;
        Ok(GetTaskResult::new(detailed_task(&run)))
    }

    /// `tasks/cancel`: `cancel_graph_run`.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.run_tool(identity_of(&context), ToolName::CancelGraphRun, &request.task_id, trace_of(&context))
            .await
            .map(drop)
    }
}

/// Whether this request's client declared MCP Apps: in the request's capabilities (the
/// 2026-07-28 era; see [`crate::apps::wants_apps`]), or in its `initialize`, as the apps
/// session id it sends says (the 2025-11-25 era; [`crate::apps::AppsSession`]).
fn apps_client(context: &RequestContext<RoleServer>) -> bool {
    crate::apps::wants_apps(context.client_capabilities().as_ref())
        || context
            .extensions
            .get::<http::request::Parts>()
            .is_some_and(|p| p.extensions.get::<crate::apps::AppsSession>().is_some())
}

fn identity_of(context: &RequestContext<RoleServer>) -> Option<Identity> {
    context.extensions.get::<http::request::Parts>().and_then(|p| p.extensions.get::<Identity>()).cloned()
}

/// The HTTP request's id, when the adapter gave one ([`http_util::TraceId`]).
fn trace_of(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<http_util::TraceId>())
        .map(|t| t.0.clone())
}

/// How long a Graph run lives as a task: a run expires 24 h after it was queued.
pub const TASK_TTL: std::time::Duration = domain::limits::DEFAULT_EXPIRY;

/// A Graph run (`run_graph_session`'s or `get_graph_run`'s structured output) as a task: the
/// task id is the command id; queued and running are `working` (the status message says
/// which), `completed` carries the run as the tool result, `failed` and `expired` too with
/// `isError: true` (a tool-level outcome, not a protocol error), `cancelled` is `cancelled`.
/// The poll interval is the run's own `check_after_s`.
pub fn run_task(run: &serde_json::Value) -> Task {
    let s = |k: &str| run.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    let status = match run.get("status").and_then(|v| v.as_str()) {
        Some("completed" | "failed" | "expired") => TaskStatus::Completed,
        Some("cancelled") => TaskStatus::Cancelled,
        _ => TaskStatus::Working,
    };
    let updated = ["finished_at", "started_at"].iter().map(|k| s(k)).find(|v| !v.is_empty()).unwrap_or(s("queued_at"));
    let mut task = Task::new(s("command_id"), status, s("queued_at"), updated)
        .with_ttl_ms(u64::try_from(TASK_TTL.as_millis()).unwrap_or(u64::MAX))
        .with_status_message(status_message(run));
    if let Some(after) = run.get("check_after_s").and_then(serde_json::Value::as_u64) {
        task = task.with_poll_interval_ms(after.max(1).saturating_mul(1000));
    }
    task
}

/// The task's status message: the run's status, and while running the Graph's own progress
/// (`running: Reading page 3 of 10 (30%)`).
fn status_message(run: &serde_json::Value) -> String {
    let status = run.get("status").and_then(|v| v.as_str()).unwrap_or_default();
    let Some(p) = run.get("progress").filter(|_| status == "running") else {
        return status.to_owned();
    };
    let message = p.get("message").and_then(|v| v.as_str()).unwrap_or_default();
    let percent = p.get("fraction").and_then(serde_json::Value::as_f64).map(|f| format!("{:.0}%", f * 100.0));
    match (message.is_empty(), percent) {
        (true, None) => status.to_owned(),
        (true, Some(pc)) => format!("{status}: {pc}"),
        (false, None) => format!("{status}: {message}"),
        (false, Some(pc)) => format!("{status}: {message} ({pc})"),
    }
}

fn detailed_task(run: &serde_json::Value) -> DetailedTask {
    let task = run_task(run);
    let status = run.get("status").and_then(|v| v.as_str()).unwrap_or_default();
    let payload = match task.status {
        TaskStatus::Completed => {
            // The result answers the `run_graph_session` call, so it follows that tool's output
            // schema: get_graph_run's fields (a superset), `check_after_s` 0 once finished.
            let mut structured = run.clone();
            if structured.get("check_after_s").is_none_or(serde_json::Value::is_null) {
                structured["check_after_s"] = serde_json::json!(0);
            }
            let result = if status == "completed" {
                CallToolResult::structured(structured)
            } else {
                CallToolResult::structured_error(structured)
            };
            match serde_json::to_value(result) {
                Ok(serde_json::Value::Object(result)) => TaskPayload::Completed { result },
                _ => TaskPayload::Working,
            }
        }
        TaskStatus::Cancelled => TaskPayload::Cancelled,
        _ => TaskPayload::Working,
    };
    DetailedTask::new(task, payload)
}

impl<D: Dispatch + ?Sized> McpHandler<D> {
    /// One `tools/call`, for rmcp's handler and the direct path alike: dispatch, and the
    /// mapping of the tool's reply to a result (`isError: true` for a refusal or invalid
    /// arguments) or a JSON-RPC error (an unknown tool, `-32602`; a fault).
    ///
    /// `tool` is the tool the endpoint parsed from `request.name` (`None`: not one of ours).
    /// `as_task`: the client declared the Tasks extension; `run_graph_session` then answers the
    /// run as a task (its id is the command id) instead of a ticket result.
    pub async fn call(
        &self,
        identity: Option<Identity>,
        tool: Option<ToolName>,
        request: CallToolRequestParams,
        as_task: bool,
        request_id: Option<String>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(tool) = tool else {
            return Err(McpError::invalid_params(format!("Unknown tool: {}", request.name), None));
        };
        let identity = identity.ok_or_else(|| McpError::internal_error("request without identity", None))?;
        // The scope was checked once, by `McpEndpoint::handle`, before either path.
        let arguments = request.arguments.map(serde_json::Value::Object).unwrap_or(serde_json::Value::Null);
        // Arguments that fail validation are a tool execution error (SEP-1303, since 2025-11-25):
        // hosts pass tool results back to the model, protocol errors they keep, so only a result
        // lets the model read "idempotency_key: must be 8 to 128 characters" and correct its call.
        let invalid = |message: String| Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into());
        let call = ToolCall { tool, owner: identity.owner, agent: identity.agent, arguments, request_id };
        match self.dispatch.dispatch(call).await {
            Ok(ToolReply::Ok { structured }) if as_task && tool == ToolName::RunGraphSession => {
                Ok(CallToolResponse::Task(CreateTaskResult::new(run_task(&structured))))
            }
            Ok(ToolReply::Ok { structured }) => Ok(CallToolResult::structured(structured).into()),
            Ok(ToolReply::Rejected { message }) => Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into()),
            Ok(ToolReply::Invalid { message }) => invalid(message),
            Err(fault) => {
                tracing::error!(tool = tool.as_str(), error = %domain::errors::ErrorChain(&fault), "tool call failed");
                Err(McpError::internal_error("temporarily unavailable; retry with the same arguments", None))
            }
        }
    }
}

impl<D: Dispatch + ?Sized> McpHandler<D> {
    /// Runs `tool` on `{"command_id": task_id}` for a `tasks/*` request: its structured output,
    /// or the tool's refusal as `-32602` with the tool's text (an id that is not a run's id:
    /// `run not found`, as for a run of someone else's).
    async fn run_tool(
        &self,
        identity: Option<Identity>,
        tool: ToolName,
        task_id: &str,
        request_id: Option<String>,
    ) -> Result<serde_json::Value, McpError> {
        let identity = identity.ok_or_else(|| McpError::internal_error("request without identity", None))?;
        let arguments = serde_json::json!({ "command_id": task_id });
        let call = ToolCall { tool, owner: identity.owner, agent: identity.agent, arguments, request_id };
        match self.dispatch.dispatch(call).await {
            Ok(ToolReply::Ok { structured }) => Ok(structured),
            Ok(ToolReply::Rejected { message }) => Err(McpError::invalid_params(message, None)),
            Ok(ToolReply::Invalid { .. }) => Err(McpError::invalid_params(domain::errors::RUN_NOT_FOUND, None)),
            Err(fault) => {
                tracing::error!(tool = tool.as_str(), error = %domain::errors::ErrorChain(&fault), "task request failed");
                Err(McpError::internal_error("temporarily unavailable; retry with the same arguments", None))
            }
        }
    }
}

/// Copies each tool's `_meta.securitySchemes` to a top-level `securitySchemes` field.
pub(super) fn with_security_schemes(body: Bytes) -> Bytes {
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
