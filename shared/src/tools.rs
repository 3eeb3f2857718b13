//! The MCP tool catalogue and the tool handlers (SPEC §3, §6).
//!
//! The wire types are the schema: each tool's input and output are Rust types with doc
//! comments, and `tools/list` is generated from them ([`catalogue`]); a golden file in
//! `tests/golden/` pins the result. [`handle`] runs one tool call against a store — the same
//! function in the tool's own Lambda and in the local server's in-process dispatch.
//!
//! Outcomes are three-way ([`ToolReply`]): a structured result, a domain rejection (a tool
//! result with `isError: true` and the exact SPEC string), or invalid arguments (JSON-RPC
//! `-32602` naming the field and the rule). Store failures are [`ToolFault`]s: retryable,
//! logged, never shown with their details.

use std::time::Duration;

use base64::Engine;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::clock::{SharedClock, Timestamp};
use crate::errors::{InputError, RUN_NOT_FOUND};
use crate::ids::{AgentId, ChatLinkId, ClaimId, CommandId, GraphSessionId, IdempotencyKey, OwnerId, ProjectId, TaskId};
use crate::limits::{Policy, char_len};
use crate::projects::Project;
use crate::runs::{CancelRunOutcome, QueueOutcome, QueueRun, Run, RunStatus, sha256_hex};
use crate::store::{
    CancelRuns, ClaimTasks, ManageProjects, QueueRuns, ReadRuns, ReadTasks, RecordArtifacts, StoreError,
};
use crate::tasks::{
    ArtifactOutcome, ArtifactRecord, ClaimOutcome, SubmitOutcome, SubmitStatus, Task, TaskStatus,
    validate_task_result,
};

/// Scope for the read tools.
pub const SCOPE_READ: &str = "osfoundry:read";
/// Scope for the tools that change something.
pub const SCOPE_RUN: &str = "osfoundry:run";
/// Scope for the owner API.
pub const SCOPE_OWNER: &str = "osfoundry:owner";

/// Seconds added to the relay's next expected sync in `check_after_s`.
pub const CHECK_MARGIN: Duration = Duration::from_secs(2);
/// `check_after_s` while a run is running (no duration history yet: see docs).
pub const RUNNING_CHECK_AFTER: Duration = Duration::from_secs(15);
/// Most bytes of an artifact (decoded).
pub const MAX_ARTIFACT_BYTES: usize = 3 * 1024 * 1024;

/// The nine tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolName {
    /// Graph sessions shared in a project.
    ListGraphSessions,
    /// Queue a Graph run.
    RunGraphSession,
    /// Read a run.
    GetGraphRun,
    /// Cancel a run.
    CancelGraphRun,
    /// A chat link's open tasks.
    ListLinkedChatTasks,
    /// One task.
    GetLinkedChatTask,
    /// Claim a task.
    ClaimLinkedChatTask,
    /// Submit a task's result.
    SubmitLinkedChatResult,
    /// Attach a file to a claimed task.
    UploadLinkedChatArtifact,
}

impl ToolName {
    /// Every tool, in catalogue order.
    pub const ALL: [ToolName; 9] = [
        Self::ListGraphSessions,
        Self::RunGraphSession,
        Self::GetGraphRun,
        Self::CancelGraphRun,
        Self::ListLinkedChatTasks,
        Self::GetLinkedChatTask,
        Self::ClaimLinkedChatTask,
        Self::SubmitLinkedChatResult,
        Self::UploadLinkedChatArtifact,
    ];

    /// The wire name (also the Lambda function's crate name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ListGraphSessions => "list_graph_sessions",
            Self::RunGraphSession => "run_graph_session",
            Self::GetGraphRun => "get_graph_run",
            Self::CancelGraphRun => "cancel_graph_run",
            Self::ListLinkedChatTasks => "list_linked_chat_tasks",
            Self::GetLinkedChatTask => "get_linked_chat_task",
            Self::ClaimLinkedChatTask => "claim_linked_chat_task",
            Self::SubmitLinkedChatResult => "submit_linked_chat_result",
            Self::UploadLinkedChatArtifact => "upload_linked_chat_artifact",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The scope a token needs to call it.
    pub fn scope(self) -> &'static str {
        match self {
            Self::ListGraphSessions | Self::GetGraphRun | Self::ListLinkedChatTasks | Self::GetLinkedChatTask => {
                SCOPE_READ
            }
            _ => SCOPE_RUN,
        }
    }

    /// `(readOnly, destructive, idempotent, openWorld)` hints, set truthfully: reads change
    /// nothing; `run_graph_session` starts side effects on the desktop (destructive, and
    /// idempotent only through its key, so not declared idempotent); cancel, claim, submit and
    /// upload are safe to repeat with the same arguments.
    pub fn hints(self) -> (bool, bool, bool, bool) {
        match self {
            Self::ListGraphSessions | Self::GetGraphRun | Self::ListLinkedChatTasks | Self::GetLinkedChatTask => {
                (true, false, true, false)
            }
            Self::RunGraphSession => (false, true, false, true),
            Self::CancelGraphRun => (false, true, true, false),
            Self::ClaimLinkedChatTask => (false, false, true, false),
            Self::SubmitLinkedChatResult | Self::UploadLinkedChatArtifact => (false, false, true, false),
        }
    }

    /// The description that teaches the model the protocol.
    pub fn description(self) -> &'static str {
        match self {
            Self::ListGraphSessions => "List the Graph sessions the owner's desktop has shared in a connected project, as of the desktop's last sync. An empty list is normal: nothing appears until the owner shares a session from the desktop.",
            Self::RunGraphSession => "Queue a Graph run on the owner's desktop. This returns a ticket (command_id, status \"queued\") BEFORE the Graph starts: the desktop picks work up by polling, runs one Graph at a time, and may be offline. Read progress and the result with get_graph_run, first after check_after_s seconds (checking earlier cannot show anything new). idempotency_key is required: if a response is lost, call again with the SAME key and arguments to get the same run back instead of starting a second one; the same key with different arguments is rejected. project_id is needed only when the session is shared in more than one connected project.",
            Self::GetGraphRun => "Read a Graph run you queued: status (queued, running, completed, failed, cancelled, expired), result (or result_truncated when it exceeded 100,000 characters), error, tokens and cost. check_after_s says when another check can first show a change; follow it instead of polling quickly. Runs queued by other agents are not visible.",
            Self::CancelGraphRun => "Cancel a Graph run you queued. A queued run is cancelled at once and never starts. A running run gets a cancel request; the desktop stops it within a few seconds and it ends cancelled. A finished run is returned unchanged.",
            Self::ListLinkedChatTasks => "List the open tasks (queued or claimed) the owner assigned to this linked chat. Reading never changes anything. To work on a task, claim it with claim_linked_chat_task first.",
            Self::GetLinkedChatTask => "Read one task of this linked chat: status, objective, claim and result.",
            Self::ClaimLinkedChatTask => "Claim a queued task of this linked chat before working on it. Returns claim_id and lease_until. Claiming again while your claim is live returns the same claim, so a repeated call is safe. Keep the claim_id: submit_linked_chat_result needs it. After lease_until the task can be claimed again (a new claim_id) and the old claim's submit will be rejected. Tasks of other chats are not claimable.",
            Self::SubmitLinkedChatResult => "Submit the result of a task you claimed, with its claim_id and status completed or failed. Repeating the identical submit is safe and returns ok with replayed: true. Rejected, and not worth retrying: a different result for a task that is already finished; a claim that was taken over after its lease ran out; a task the owner cancelled (a cancelled claim can never be completed).",
            Self::UploadLinkedChatArtifact => "Attach a file (base64, at most 3 MiB) to a task you claimed, before submitting the result. artifact_id is yours to choose and must stay the same across retries: the same artifact_id with the same bytes is a safe replay, with different bytes it is rejected. The same claim rules as submit apply.",
        }
    }

    /// The input schema (from the input type).
    pub fn input_schema(self) -> serde_json::Map<String, serde_json::Value> {
        match self {
            Self::ListGraphSessions => schema::<ListGraphSessionsInput>(),
            Self::RunGraphSession => schema::<RunGraphSessionInput>(),
            Self::GetGraphRun | Self::CancelGraphRun => schema::<CommandInput>(),
            Self::ListLinkedChatTasks => schema::<LinkInput>(),
            Self::GetLinkedChatTask | Self::ClaimLinkedChatTask => schema::<TaskInput>(),
            Self::SubmitLinkedChatResult => schema::<SubmitInput>(),
            Self::UploadLinkedChatArtifact => schema::<UploadInput>(),
        }
    }

    /// The output schema (from the output type).
    pub fn output_schema(self) -> serde_json::Map<String, serde_json::Value> {
        match self {
            Self::ListGraphSessions => schema::<GraphSessionsOutput>(),
            Self::RunGraphSession => schema::<RunQueuedOutput>(),
            Self::GetGraphRun => schema::<GraphRunOutput>(),
            Self::CancelGraphRun => schema::<CancelOutput>(),
            Self::ListLinkedChatTasks => schema::<TaskListOutput>(),
            Self::GetLinkedChatTask => schema::<TaskOutput>(),
            Self::ClaimLinkedChatTask => schema::<ClaimOutput>(),
            Self::SubmitLinkedChatResult => schema::<OkOutput>(),
            Self::UploadLinkedChatArtifact => schema::<ArtifactOutput>(),
        }
    }

    /// The IAM actions the tool's function needs on the table (its policy grants exactly
    /// these). Transactions need the actions of their parts (`PutItem`, `ConditionCheckItem`).
    /// Declared next to the handler; the suite checks every request a tool makes against it
    /// on the emulator, and the template test checks the template against it.
    pub fn dynamodb_actions(self) -> &'static [&'static str] {
        match self {
            Self::ListGraphSessions | Self::GetGraphRun | Self::GetLinkedChatTask => &["dynamodb:GetItem"],
            // Reads the project (or lists the owner's projects), replays read the original run.
            Self::RunGraphSession => &["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:ConditionCheckItem"],
            Self::CancelGraphRun | Self::ClaimLinkedChatTask | Self::SubmitLinkedChatResult => &["dynamodb:UpdateItem"],
            Self::ListLinkedChatTasks => &["dynamodb:Query"],
            Self::UploadLinkedChatArtifact => &["dynamodb:PutItem", "dynamodb:ConditionCheckItem"],
        }
    }

    /// Whether the tool queries a secondary index (its policy then names `table/index/*`).
    pub fn queries_index(self) -> bool {
        matches!(self, Self::ListLinkedChatTasks)
    }

    /// Parses and validates arguments without running the tool (the `mcp` function does
    /// this before dispatching).
    ///
    /// # Errors
    /// The message for a `-32602` error, naming the field and the rule.
    pub fn validate(self, args: &serde_json::Value) -> Result<(), String> {
        match self {
            Self::ListGraphSessions => parse::<ListGraphSessionsInput>(args).and_then(|i| i.checked()).map(drop),
            Self::RunGraphSession => parse::<RunGraphSessionInput>(args).and_then(|i| i.checked()).map(drop),
            Self::GetGraphRun | Self::CancelGraphRun => parse::<CommandInput>(args).and_then(|i| i.checked()).map(drop),
            Self::ListLinkedChatTasks => parse::<LinkInput>(args).and_then(|i| i.checked()).map(drop),
            Self::GetLinkedChatTask | Self::ClaimLinkedChatTask => {
                parse::<TaskInput>(args).and_then(|i| i.checked()).map(drop)
            }
            Self::SubmitLinkedChatResult => parse::<SubmitInput>(args).and_then(|i| i.checked()).map(drop),
            Self::UploadLinkedChatArtifact => parse::<UploadInput>(args).and_then(|i| i.checked()).map(drop),
        }
    }
}

/// The JSON Schema of `T` as an MCP schema object (no `$schema`/`title` noise).
fn schema<T: JsonSchema>() -> serde_json::Map<String, serde_json::Value> {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    match v {
        serde_json::Value::Object(o) => o,
        _ => serde_json::Map::new(),
    }
}

fn parse<T: DeserializeOwned>(args: &serde_json::Value) -> Result<T, String> {
    let args = if args.is_null() { serde_json::Value::Object(Default::default()) } else { args.clone() };
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        if path == "." { format!("arguments: {}", e.inner()) } else { format!("{path}: {}", e.inner()) }
    })
}

fn field<T>(r: Result<T, InputError>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

// ---- inputs ------------------------------------------------------------------------------

/// Input of `list_graph_sessions`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListGraphSessionsInput {
    /// The connected project (UUID).
    #[schemars(extend("format" = "uuid"))]
    pub project_id: String,
    /// Most sessions to return, 1 to 50 (default 50).
    #[schemars(range(min = 1, max = 50))]
    #[serde(default)]
    pub limit: Option<i64>,
}

impl ListGraphSessionsInput {
    fn checked(self) -> Result<(ProjectId, usize), String> {
        let p = field(ProjectId::parse("project_id", &self.project_id))?;
        let limit = self.limit.unwrap_or(50);
        if !(1..=50).contains(&limit) {
            return Err(format!("limit: must be 1 to 50 (got {limit})"));
        }
        Ok((p, limit as usize))
    }
}

/// Input of `run_graph_session`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunGraphSessionInput {
    /// The graph session to run: gs_ followed by 32 lowercase hex characters.
    #[schemars(extend("pattern" = "^gs_[0-9a-f]{32}$"))]
    pub graph_session_id: String,
    /// Arguments passed to the Graph as JSON (an object, at most 32 KiB).
    #[serde(default)]
    pub arguments: Option<serde_json::Map<String, serde_json::Value>>,
    /// Your key for this run, 8 to 128 characters; reuse it when retrying after a lost response.
    #[schemars(length(min = 8, max = 128))]
    pub idempotency_key: String,
    /// The project (UUID); required only if the session is shared in more than one connected project.
    #[schemars(extend("format" = "uuid"))]
    #[serde(default)]
    pub project_id: Option<String>,
}

struct RunArgs {
    graph_session_id: GraphSessionId,
    arguments: serde_json::Value,
    key: IdempotencyKey,
    project_id: Option<ProjectId>,
}

impl RunGraphSessionInput {
    fn checked(self) -> Result<RunArgs, String> {
        let args = RunArgs {
            graph_session_id: field(GraphSessionId::parse("graph_session_id", &self.graph_session_id))?,
            arguments: serde_json::Value::Object(self.arguments.unwrap_or_default()),
            key: field(IdempotencyKey::parse(&self.idempotency_key))?,
            project_id: self.project_id.map(|p| field(ProjectId::parse("project_id", &p))).transpose()?,
        };
        let n = args.arguments.to_string().len();
        if n > crate::limits::MAX_ARGUMENTS_BYTES {
            return Err(format!("arguments: must be at most {} bytes of JSON (got {n})", crate::limits::MAX_ARGUMENTS_BYTES));
        }
        Ok(args)
    }
}

/// Input of `get_graph_run` and `cancel_graph_run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandInput {
    /// The run's command_id (UUID) from run_graph_session.
    #[schemars(extend("format" = "uuid"))]
    pub command_id: String,
}

impl CommandInput {
    fn checked(self) -> Result<CommandId, String> {
        field(CommandId::parse("command_id", &self.command_id))
    }
}

/// Input of `list_linked_chat_tasks`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkInput {
    /// This chat's link id (UUID).
    #[schemars(extend("format" = "uuid"))]
    pub chat_link_id: String,
}

impl LinkInput {
    fn checked(self) -> Result<ChatLinkId, String> {
        field(ChatLinkId::parse("chat_link_id", &self.chat_link_id))
    }
}

/// Input of `get_linked_chat_task` and `claim_linked_chat_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskInput {
    /// This chat's link id (UUID).
    #[schemars(extend("format" = "uuid"))]
    pub chat_link_id: String,
    /// The task (UUID).
    #[schemars(extend("format" = "uuid"))]
    pub task_id: String,
}

impl TaskInput {
    fn checked(self) -> Result<(ChatLinkId, TaskId), String> {
        Ok((field(ChatLinkId::parse("chat_link_id", &self.chat_link_id))?, field(TaskId::parse("task_id", &self.task_id))?))
    }
}

/// Input of `submit_linked_chat_result`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitInput {
    /// This chat's link id (UUID).
    #[schemars(extend("format" = "uuid"))]
    pub chat_link_id: String,
    /// The task (UUID).
    #[schemars(extend("format" = "uuid"))]
    pub task_id: String,
    /// The claim_id from claim_linked_chat_task.
    #[schemars(extend("format" = "uuid"))]
    pub claim_id: String,
    /// completed or failed.
    pub status: SubmitStatus,
    /// The result text (at most 100,000 characters).
    #[schemars(length(max = 100000))]
    pub result: String,
}

impl SubmitInput {
    fn checked(self) -> Result<(ChatLinkId, TaskId, ClaimId, SubmitStatus, String), String> {
        field(validate_task_result(&self.result))?;
        Ok((
            field(ChatLinkId::parse("chat_link_id", &self.chat_link_id))?,
            field(TaskId::parse("task_id", &self.task_id))?,
            field(ClaimId::parse("claim_id", &self.claim_id))?,
            self.status,
            self.result,
        ))
    }
}

/// Input of `upload_linked_chat_artifact`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadInput {
    /// This chat's link id (UUID).
    #[schemars(extend("format" = "uuid"))]
    pub chat_link_id: String,
    /// The task (UUID).
    #[schemars(extend("format" = "uuid"))]
    pub task_id: String,
    /// The claim_id from claim_linked_chat_task.
    #[schemars(extend("format" = "uuid"))]
    pub claim_id: String,
    /// Your id for this file, stable across retries: 1 to 128 of A-Z a-z 0-9 . _ -
    #[schemars(extend("pattern" = "^[A-Za-z0-9._-]{1,128}$"))]
    pub artifact_id: String,
    /// File name, 1 to 200 characters.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    /// MIME type, e.g. text/markdown.
    #[schemars(length(min = 1, max = 128))]
    pub content_type: String,
    /// The file's bytes, base64 (standard alphabet), at most 3 MiB decoded.
    pub content_base64: String,
}

struct UploadArgs {
    link: ChatLinkId,
    task: TaskId,
    claim: ClaimId,
    artifact_id: String,
    name: String,
    content_type: String,
    bytes: Vec<u8>,
}

impl UploadInput {
    fn checked(self) -> Result<UploadArgs, String> {
        let id_ok = (1..=128).contains(&self.artifact_id.len())
            && self.artifact_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !id_ok {
            return Err("artifact_id: must be 1 to 128 of A-Z a-z 0-9 . _ -".into());
        }
        let n = char_len(&self.name);
        if n == 0 || n > 200 || self.name.chars().any(char::is_control) {
            return Err(format!("name: must be 1 to 200 characters without control characters (got {n})"));
        }
        let ct = &self.content_type;
        if ct.is_empty() || ct.len() > 128 || !ct.contains('/') || ct.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err("content_type: must be a MIME type like text/markdown (at most 128 characters)".into());
        }
        if self.content_base64.len() > MAX_ARTIFACT_BYTES.div_ceil(3) * 4 + 4 {
            return Err(format!("content_base64: must decode to at most {MAX_ARTIFACT_BYTES} bytes"));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(self.content_base64.as_bytes())
            .map_err(|_| "content_base64: must be standard base64".to_owned())?;
        if bytes.len() > MAX_ARTIFACT_BYTES {
            return Err(format!("content_base64: must decode to at most {MAX_ARTIFACT_BYTES} bytes (got {})", bytes.len()));
        }
        Ok(UploadArgs {
            link: field(ChatLinkId::parse("chat_link_id", &self.chat_link_id))?,
            task: field(TaskId::parse("task_id", &self.task_id))?,
            claim: field(ClaimId::parse("claim_id", &self.claim_id))?,
            artifact_id: self.artifact_id,
            name: self.name,
            content_type: self.content_type,
            bytes,
        })
    }
}

// ---- outputs -----------------------------------------------------------------------------

/// One shared graph session.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GraphSessionOutput {
    /// gs_ + 32 hex.
    pub graph_session_id: String,
    /// Display name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Short stable name.
    pub slug: String,
    /// Version.
    pub version: String,
    /// Status on the desktop.
    pub status: String,
}

/// Output of `list_graph_sessions`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GraphSessionsOutput {
    /// The project.
    pub project_id: String,
    /// Shared sessions as of the desktop's last sync.
    pub sessions: Vec<GraphSessionOutput>,
}

/// Output of `run_graph_session`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RunQueuedOutput {
    /// The ticket: pass it to get_graph_run.
    pub command_id: String,
    /// queued (or the current status when a key is reused).
    pub status: RunStatus,
    /// When it was queued (RFC 3339).
    pub queued_at: String,
    /// Seconds until a status check can first show a change.
    pub check_after_s: u64,
    /// Seconds since the desktop last synced; null if it never did. Large values mean the desktop looks offline.
    pub desktop_last_seen_s: Option<u64>,
}

/// Output of `get_graph_run`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GraphRunOutput {
    /// The ticket.
    pub command_id: String,
    /// queued, running, completed, failed, cancelled or expired.
    pub status: RunStatus,
    /// The session it runs.
    pub graph_session_id: String,
    /// RFC 3339.
    pub queued_at: String,
    /// RFC 3339, once started.
    pub started_at: Option<String>,
    /// RFC 3339, once finished.
    pub finished_at: Option<String>,
    /// The Graph's output, when completed and small enough.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// True when the result exceeded 100,000 characters and was left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_truncated: Option<bool>,
    /// Why it failed or was cancelled by the desktop.
    pub error: Option<String>,
    /// Tokens the Graph reported.
    pub total_tokens: Option<u64>,
    /// Cost the Graph reported.
    pub reported_cost: Option<f64>,
    /// Seconds until another check can first show a change; null once finished.
    pub check_after_s: Option<u64>,
}

/// Output of `cancel_graph_run`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CancelOutput {
    /// The run.
    pub command_id: String,
    /// Its status now.
    pub status: RunStatus,
    /// True when it is running and the desktop was asked to stop it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_requested: Option<bool>,
}

/// One open task, compact.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TaskSummary {
    /// The task.
    pub task_id: String,
    /// queued or claimed.
    pub status: TaskStatus,
    /// What to do.
    pub objective: String,
    /// Until when the current claim holds it (RFC 3339), if claimed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<String>,
}

/// Output of `list_linked_chat_tasks`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TaskListOutput {
    /// The link.
    pub chat_link_id: String,
    /// Open tasks, oldest first.
    pub tasks: Vec<TaskSummary>,
}

/// Output of `get_linked_chat_task`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TaskOutput {
    /// The task.
    pub task_id: String,
    /// The link.
    pub chat_link_id: String,
    /// queued, claimed, completed, failed, cancelled or expired.
    pub status: TaskStatus,
    /// What to do.
    pub objective: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339: the task expires then if not finished.
    pub expires_at: String,
    /// The current claim's id, if any.
    pub claim_id: Option<String>,
    /// The current claim's lease (RFC 3339).
    pub lease_until: Option<String>,
    /// The submitted result.
    pub result: Option<String>,
    /// RFC 3339, once finished.
    pub finished_at: Option<String>,
}

/// Output of `claim_linked_chat_task`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ClaimOutput {
    /// The fencing token: pass it to submit_linked_chat_result.
    pub claim_id: String,
    /// The claim holds the task until then (RFC 3339).
    pub lease_until: String,
}

/// Output of `submit_linked_chat_result`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct OkOutput {
    /// Always true.
    pub ok: bool,
    /// True when this identical submit had already been accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed: Option<bool>,
}

/// Output of `upload_linked_chat_artifact`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ArtifactOutput {
    /// Always true.
    pub ok: bool,
    /// True when these identical bytes had already been stored under this artifact_id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed: Option<bool>,
    /// The artifact.
    pub artifact_id: String,
    /// sha256 of the bytes (hex).
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}

// ---- calls -------------------------------------------------------------------------------

/// One tool call, as the `mcp` function hands it to a tool function: the verified identity
/// and the arguments (never the token).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolCall {
    /// Which tool.
    pub tool: ToolName,
    /// The owner the agent acts for.
    pub owner: OwnerId,
    /// The calling agent.
    pub agent: AgentId,
    /// The raw arguments.
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// What a tool answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolReply {
    /// The structured result (matches the output schema).
    Ok {
        /// The result object.
        structured: serde_json::Value,
    },
    /// A domain rejection: `isError: true` with this one-line message.
    Rejected {
        /// The exact message.
        message: String,
    },
    /// Invalid arguments: JSON-RPC `-32602` with this message.
    Invalid {
        /// Names the field and the rule.
        message: String,
    },
}

/// A failure that is not the caller's: retryable, details logged only.
#[derive(Debug, thiserror::Error)]
pub enum ToolFault {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The blob store failed.
    #[error("blob store: {0}")]
    Blob(String),
    /// The dispatch to the tool's function failed.
    #[error("dispatch: {0}")]
    Dispatch(String),
}

/// Where artifact bytes go (S3 in the cloud, files locally).
#[async_trait::async_trait]
pub trait BlobStore: Send + Sync {
    /// Stores `bytes` under `key` (overwriting is fine: keys are content-addressed per artifact).
    async fn put(&self, key: &str, bytes: Vec<u8>, content_type: &str) -> Result<(), String>;
}

/// A blob store in a local folder.
#[derive(Debug, Clone)]
pub struct DirBlobStore(pub std::path::PathBuf);

#[async_trait::async_trait]
impl BlobStore for DirBlobStore {
    async fn put(&self, key: &str, bytes: Vec<u8>, _content_type: &str) -> Result<(), String> {
        let path = self.0.join(key);
        tokio::task::spawn_blocking(move || {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, bytes)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
    }
}

/// What the tool handlers need.
pub struct ToolDeps<S: ?Sized> {
    /// The store.
    pub store: std::sync::Arc<S>,
    /// The clock (for hints and views).
    pub clock: SharedClock,
    /// The time policy.
    pub policy: Policy,
    /// Artifact bytes.
    pub blobs: std::sync::Arc<dyn BlobStore>,
}

/// The capabilities the tools use.
pub trait ToolStore: ManageProjects + QueueRuns + ReadRuns + CancelRuns + ReadTasks + ClaimTasks + RecordArtifacts {}
impl<T: ManageProjects + QueueRuns + ReadRuns + CancelRuns + ReadTasks + ClaimTasks + RecordArtifacts + ?Sized> ToolStore for T {}

fn ok<T: Serialize>(v: &T) -> ToolReply {
    ToolReply::Ok { structured: serde_json::to_value(v).unwrap_or_default() }
}

fn rejected(message: impl Into<String>) -> ToolReply {
    ToolReply::Rejected { message: message.into() }
}

macro_rules! args {
    ($ty:ty, $call:expr) => {
        match parse::<$ty>(&$call.arguments).and_then(|i| i.checked()) {
            Ok(v) => v,
            Err(message) => return Ok(ToolReply::Invalid { message }),
        }
    };
}

/// Runs one tool call.
///
/// # Errors
/// [`ToolFault`] when the store or blob store fails (retryable; never the caller's fault).
pub async fn handle<S: ToolStore + ?Sized>(deps: &ToolDeps<S>, call: &ToolCall) -> Result<ToolReply, ToolFault> {
    let now = deps.clock.now();
    let store = &*deps.store;
    let (owner, agent) = (&call.owner, &call.agent);
    Ok(match call.tool {
        ToolName::ListGraphSessions => {
            let (project, limit) = args!(ListGraphSessionsInput, call);
            let sessions = match store.get_project(owner, project).await? {
                Some(p) if p.enabled => p.sessions,
                // A disabled or unknown project shows nothing, like a project nothing is shared in.
                _ => Vec::new(),
            };
            ok(&GraphSessionsOutput {
                project_id: project.to_string(),
                sessions: sessions
                    .into_iter()
                    .take(limit)
                    .map(|s| GraphSessionOutput {
                        graph_session_id: s.graph_session_id.to_string(),
                        name: s.name,
                        description: s.description,
                        slug: s.slug,
                        version: s.version,
                        status: s.status,
                    })
                    .collect(),
            })
        }
        ToolName::RunGraphSession => {
            let a = args!(RunGraphSessionInput, call);
            let req = QueueRun {
                owner: owner.clone(),
                agent: agent.clone(),
                project_id: a.project_id,
                graph_session_id: a.graph_session_id,
                arguments: a.arguments,
                idempotency_key: a.key,
            };
            let run = match store.queue_run(&req).await? {
                QueueOutcome::Queued(r) | QueueOutcome::Replayed(r) => r,
                QueueOutcome::Rejected(why) => return Ok(rejected(why.to_string())),
            };
            let project = store.get_project(owner, run.project_id).await?;
            let status = run.view(now, &deps.policy).status;
            ok(&RunQueuedOutput {
                command_id: run.command_id.to_string(),
                status,
                queued_at: run.queued_at.rfc3339(),
                check_after_s: check_after(status, project.as_ref(), now, &deps.policy).unwrap_or(0),
                desktop_last_seen_s: last_seen(project.as_ref(), now),
            })
        }
        ToolName::GetGraphRun => {
            let id = args!(CommandInput, call);
            let Some(run) = store.get_run(agent, id).await? else { return Ok(rejected(RUN_NOT_FOUND)) };
            let project = store.get_project(owner, run.project_id).await?;
            ok(&run_output(&run, project.as_ref(), now, &deps.policy))
        }
        ToolName::CancelGraphRun => {
            let id = args!(CommandInput, call);
            let (status, cancel_requested) = match store.cancel_run(agent, id).await? {
                CancelRunOutcome::NotFound => return Ok(rejected(RUN_NOT_FOUND)),
                CancelRunOutcome::Cancelled => (RunStatus::Cancelled, None),
                CancelRunOutcome::CancelRequested => (RunStatus::Running, Some(true)),
                CancelRunOutcome::Unchanged(s) => (s, None),
            };
            ok(&CancelOutput { command_id: id.to_string(), status, cancel_requested })
        }
        ToolName::ListLinkedChatTasks => {
            let link = args!(LinkInput, call);
            let tasks = store.list_open_tasks(owner, link, 50).await?;
            ok(&TaskListOutput {
                chat_link_id: link.to_string(),
                tasks: tasks
                    .into_iter()
                    .map(|t| TaskSummary {
                        task_id: t.task_id.to_string(),
                        status: t.status_at(now),
                        lease_until: t.lease_until.filter(|_| t.status == TaskStatus::Claimed).map(Timestamp::rfc3339),
                        objective: t.objective,
                    })
                    .collect(),
            })
        }
        ToolName::GetLinkedChatTask => {
            let (link, task) = args!(TaskInput, call);
            match store.get_task(owner, link, task).await? {
                Some(t) => ok(&task_output(&t, now)),
                None => rejected(crate::errors::TASK_NOT_FOUND),
            }
        }
        ToolName::ClaimLinkedChatTask => {
            let (link, task) = args!(TaskInput, call);
            match store.claim_task(owner, link, task).await? {
                ClaimOutcome::Claimed { claim_id, lease_until } | ClaimOutcome::Replayed { claim_id, lease_until } => {
                    ok(&ClaimOutput { claim_id: claim_id.to_string(), lease_until: lease_until.rfc3339() })
                }
                ClaimOutcome::Rejected(why) => rejected(why.to_string()),
            }
        }
        ToolName::SubmitLinkedChatResult => {
            let (link, task, claim, status, result) = args!(SubmitInput, call);
            match store.submit_task(owner, link, task, claim, status, &result).await? {
                SubmitOutcome::Accepted => ok(&OkOutput { ok: true, replayed: None }),
                SubmitOutcome::Replayed => ok(&OkOutput { ok: true, replayed: Some(true) }),
                SubmitOutcome::Rejected(why) => rejected(why.to_string()),
            }
        }
        ToolName::UploadLinkedChatArtifact => {
            let a = args!(UploadInput, call);
            let sha = sha256_hex(&a.bytes);
            let size = a.bytes.len() as u64;
            // Content-addressed key: a retry writes the same object; a rejected upload leaves
            // at most an unreferenced object (the bucket's lifecycle rule removes it).
            let object_key = format!("artifacts/{}/{}/{}/{sha}", a.link, a.task, a.artifact_id);
            deps.blobs.put(&object_key, a.bytes, &a.content_type).await.map_err(ToolFault::Blob)?;
            let record = ArtifactRecord {
                link_id: a.link,
                task_id: a.task,
                claim_id: a.claim,
                artifact_id: a.artifact_id.clone(),
                name: a.name,
                content_type: a.content_type,
                sha256: sha.clone(),
                size,
                object_key,
            };
            let out = |replayed| ok(&ArtifactOutput { ok: true, replayed, artifact_id: a.artifact_id.clone(), sha256: sha.clone(), size });
            match store.record_artifact(owner, &record).await? {
                ArtifactOutcome::Recorded => out(None),
                ArtifactOutcome::Replayed => out(Some(true)),
                ArtifactOutcome::DifferentContent => {
                    rejected("rejected: artifact_id was already used with different content")
                }
                ArtifactOutcome::Rejected(why) => rejected(why.to_string()),
            }
        }
    })
}

/// Seconds since the desktop last synced the run's project.
fn last_seen(project: Option<&Project>, now: Timestamp) -> Option<u64> {
    project.and_then(|p| p.last_sync_at).map(|t| now.since(t).as_secs())
}

/// When a check can first show a change: while queued, the relay's next expected sync (from
/// its last sync and the poll interval) plus a margin; while running, a fixed interval;
/// nothing once finished.
pub fn check_after(status: RunStatus, project: Option<&Project>, now: Timestamp, policy: &Policy) -> Option<u64> {
    let secs = |d: Duration| d.as_secs().max(1);
    match status {
        RunStatus::Queued => {
            let next_sync = project.and_then(|p| p.last_sync_at).map(|t| t.plus(policy.poll_interval));
            Some(match next_sync {
                Some(t) if t > now => secs(t.since(now) + CHECK_MARGIN),
                // Never synced or overdue: the desktop may be offline; one interval is the
                // earliest anything can change.
                _ => secs(policy.poll_interval + CHECK_MARGIN),
            })
        }
        RunStatus::Running => Some(secs(RUNNING_CHECK_AFTER)),
        _ => None,
    }
}

fn run_output(run: &Run, project: Option<&Project>, now: Timestamp, policy: &Policy) -> GraphRunOutput {
    let view = run.view(now, policy);
    let c = run.completion.as_ref().filter(|_| view.status.is_terminal());
    GraphRunOutput {
        command_id: run.command_id.to_string(),
        status: view.status,
        graph_session_id: run.graph_session_id.to_string(),
        queued_at: run.queued_at.rfc3339(),
        started_at: run.started_at.map(Timestamp::rfc3339),
        finished_at: run.finished_at.filter(|_| view.status.is_terminal()).map(Timestamp::rfc3339),
        result: c.and_then(|c| c.result.clone()),
        result_truncated: c.filter(|c| c.result_truncated).map(|_| true),
        error: view.error,
        total_tokens: c.and_then(|c| c.total_tokens),
        reported_cost: c.and_then(|c| c.reported_cost),
        check_after_s: check_after(view.status, project, now, policy),
    }
}

fn task_output(t: &Task, now: Timestamp) -> TaskOutput {
    TaskOutput {
        task_id: t.task_id.to_string(),
        chat_link_id: t.link_id.to_string(),
        status: t.status_at(now),
        objective: t.objective.clone(),
        created_at: t.created_at.rfc3339(),
        expires_at: t.expires_at.rfc3339(),
        claim_id: t.claim_id.map(|c| c.to_string()),
        lease_until: t.lease_until.map(Timestamp::rfc3339),
        result: t.result.clone(),
        finished_at: t.finished_at.map(Timestamp::rfc3339),
    }
}

/// The `tools/list` entries, generated from the types above.
pub fn catalogue() -> Vec<serde_json::Value> {
    ToolName::ALL
        .into_iter()
        .map(|t| {
            let (read_only, destructive, idempotent, open_world) = t.hints();
            let schemes = serde_json::json!([{ "type": "oauth2", "scopes": [t.scope()] }]);
            serde_json::json!({
                "name": t.as_str(),
                "description": t.description(),
                "inputSchema": t.input_schema(),
                "outputSchema": t.output_schema(),
                "annotations": {
                    "readOnlyHint": read_only,
                    "destructiveHint": destructive,
                    "idempotentHint": idempotent,
                    "openWorldHint": open_world,
                },
                "securitySchemes": schemes,
                "_meta": { "securitySchemes": schemes },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{OwnerId, ProjectId};

    fn project(last_sync: Option<Timestamp>) -> Project {
        Project {
            project_id: ProjectId::generate(),
            owner: OwnerId::new("o").unwrap(),
            name: "p".into(),
            enabled: true,
            sessions: Vec::new(),
            last_sync_at: last_sync,
            created_at: Timestamp::from_millis(0),
        }
    }

    #[test]
    fn check_after_follows_the_relays_next_sync() {
        let policy = Policy::default();
        let now = Timestamp::from_millis(1_000_000);
        // Synced 5 s ago with a 20 s interval: next sync in 15 s, plus the 2 s margin.
        let p = project(Some(now.minus(Duration::from_secs(5))));
        assert_eq!(check_after(RunStatus::Queued, Some(&p), now, &policy), Some(17));
        // Never synced, or overdue: one interval plus the margin.
        assert_eq!(check_after(RunStatus::Queued, Some(&project(None)), now, &policy), Some(22));
        let overdue = project(Some(now.minus(Duration::from_secs(600))));
        assert_eq!(check_after(RunStatus::Queued, Some(&overdue), now, &policy), Some(22));
        assert_eq!(last_seen(Some(&overdue), now), Some(600));
        assert_eq!(check_after(RunStatus::Running, Some(&p), now, &policy), Some(15));
        assert_eq!(check_after(RunStatus::Completed, Some(&p), now, &policy), None);
    }

    #[test]
    fn every_tool_has_a_closed_input_schema_and_a_scope() {
        for t in ToolName::ALL {
            assert_eq!(t.input_schema().get("additionalProperties"), Some(&serde_json::Value::Bool(false)), "{}", t.as_str());
            assert!([SCOPE_READ, SCOPE_RUN].contains(&t.scope()));
            assert_eq!(ToolName::parse(t.as_str()), Some(t));
        }
    }
}
