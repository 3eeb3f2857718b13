//! # tools — the MCP tool catalogue and the tool handlers (SPEC §3, §6)
//!
//! What a tool function links: the nine tools, their wire types and catalogue, the artifact
//! byte store ([`blobs`]) and how scopes are spelled ([`scopes`]) — over the domain and serde,
//! with no MCP SDK, no token verification and no HTTP client (`cargo tree -p
//! list_graph_sessions` shows none).
//!
//!
//! **One tool, one place.** Each tool is a module holding everything about it: a unit type
//! implementing [`Tool`] — its [`ToolSpec`] (name, scope, description, annotations, the IAM
//! actions its function needs), its input and output types (the schema: `tools/list` is
//! generated from them and pinned by `tests/golden/tools_list.json`) — and one [`Handler`]
//! implementation generic over the single store capability it uses. The table at the bottom of
//! this file ([`ToolName`]) lists the modules; adding a tool is a new module and one line there.
//!
//! A tool's own Lambda runs [`run_tool`] for its type only (so a function links only its own
//! handler); the local server and tests dispatch by name with [`handle`].
//!
//! Outcomes are three-way ([`ToolReply`]): a structured result, a domain rejection (a tool
//! result with `isError: true` and the exact SPEC string), or invalid arguments (also an
//! `isError: true` result, naming the field and the rule: SEP-1303, so the model can read it). Infrastructure failures are [`ToolFault`]s:
//! retryable, logged with their causes, never shown with their details.
//!
//! | module | what |
//! |---|---|
//! | this one | [`Tool`], [`ToolSpec`], [`Handler`], [`ToolName`] and the by-name functions, the catalogue |
//! | [`list_graph_sessions`], [`run_graph_session`], [`get_graph_run`], [`cancel_graph_run`] | the Graph-run tools, one module each |
//! | [`list_linked_chat_tasks`], [`get_linked_chat_task`], [`claim_linked_chat_task`], [`submit_linked_chat_result`], [`upload_linked_chat_artifact`] | the linked-chat tools, one module each |
//! | `common` | inputs several tools share, and where artifact bytes go |
//! | [`blobs`] | the artifact byte store ([`blobs::BlobStore`]): S3 in the cloud, files locally |
//! | [`scopes`] | the scopes and how the authorization server spells them ([`scopes::ScopeSpelling`]) |

pub mod blobs;
mod common;
pub mod scopes;

pub mod cancel_graph_run;
pub mod claim_linked_chat_task;
pub mod get_graph_run;
pub mod get_linked_chat_task;
pub mod list_graph_sessions;
pub mod list_linked_chat_tasks;
pub mod run_graph_session;
pub mod submit_linked_chat_result;
pub mod upload_linked_chat_artifact;

use std::future::Future;
use std::sync::Arc;

use domain::clock::{SharedClock, Timestamp};
use domain::ids::{AgentId, OwnerId};
use domain::limits::Policy;
use domain::store::{
    CancelRuns, ClaimTasks, ManageDevices, ManageLinks, ManageProjects, QueueRuns, ReadRuns, ReadTasks,
    RecordArtifacts, StoreError,
};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use crate::blobs::{BlobError, BlobStore};
pub use cancel_graph_run::CancelGraphRun;
pub use claim_linked_chat_task::ClaimLinkedChatTask;
pub use get_graph_run::GetGraphRun;
pub use get_linked_chat_task::GetLinkedChatTask;
pub use list_graph_sessions::ListGraphSessions;
pub use list_linked_chat_tasks::ListLinkedChatTasks;
pub use run_graph_session::{Backlog, RunGraphSession, check_after};
pub use submit_linked_chat_result::SubmitLinkedChatResult;
pub use upload_linked_chat_artifact::UploadLinkedChatArtifact;

/// Scope for the read tools.
pub const SCOPE_READ: &str = "osfoundry:read";
/// Scope for the tools that change something.
pub const SCOPE_RUN: &str = "osfoundry:run";
/// Scope for the owner API.
pub const SCOPE_OWNER: &str = "osfoundry:owner";

/// The MCP tool annotations, set truthfully (clients decide on confirmations from them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Annotations {
    /// Changes nothing.
    pub read_only: bool,
    /// May cause effects that cannot be undone.
    pub destructive: bool,
    /// Repeating the same call has no further effect.
    pub idempotent: bool,
    /// Reaches beyond this service (the owner's desktop).
    pub open_world: bool,
}

impl Annotations {
    /// A read: read-only, idempotent, closed world.
    pub const READ: Self = Self { read_only: true, destructive: false, idempotent: true, open_world: false };
}

/// The facts of one tool, in one place.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    /// Which tool (also its wire name and its function's crate name).
    pub name: ToolName,
    /// A short human title (`title`, and `annotations.title`): what hosts show in their tool
    /// lists and directories.
    pub title: &'static str,
    /// The scope a token needs to call it.
    pub scope: &'static str,
    /// The description that teaches the model the protocol.
    pub description: &'static str,
    /// MCP annotations.
    pub annotations: Annotations,
    /// The IAM actions the tool's function needs on the table (its policy grants exactly
    /// these). Transactions need the actions of their parts (`PutItem`, `ConditionCheckItem`).
    /// The suite checks every request the tool makes on the emulator against this list, and
    /// the template test checks the template against it.
    pub dynamodb_actions: &'static [&'static str],
    /// Whether the tool queries a secondary index (its policy then names `table/index/*`).
    pub queries_index: bool,
    /// Whether the tool stores artifact bytes (its function then gets the bucket).
    pub stores_blobs: bool,
}

/// A tool input: the wire type (schema) and its check into typed arguments.
pub trait ToolInput: DeserializeOwned + JsonSchema {
    /// The validated arguments the handler gets.
    type Args: Send;

    /// Validates the parsed input.
    ///
    /// # Errors
    /// The message of the `isError` result, naming the field and the rule.
    fn check(self) -> Result<Self::Args, String>;
}

/// A tool: its facts and its wire types.
pub trait Tool: Send + Sync + 'static {
    /// Name, scope, description, annotations, IAM actions.
    const SPEC: ToolSpec;
    /// The arguments, as sent.
    type Input: ToolInput;
    /// The structured result (the output schema).
    type Output: Serialize + JsonSchema;
}

/// A domain rejection: a tool result with `isError: true` and this exact one-line message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected(pub String);

impl Rejected {
    /// A rejection with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// What a handler returns.
pub type Handled<O> = Result<Result<O, Rejected>, ToolFault>;

/// Who is calling and when.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The owner the agent acts for.
    pub owner: &'a OwnerId,
    /// The calling agent.
    pub agent: &'a AgentId,
    /// The time of the call.
    pub now: Timestamp,
}

/// A tool's handler over a store `S` that has the one capability the tool needs.
pub trait Handler<S: ?Sized>: Tool {
    /// Runs the tool with validated arguments.
    fn run(
        deps: &ToolDeps<S>,
        caller: Caller<'_>,
        args: <Self::Input as ToolInput>::Args,
    ) -> impl Future<Output = Handled<Self::Output>> + Send;
}

/// What the tool handlers need.
pub struct ToolDeps<S: ?Sized> {
    /// The store.
    pub store: Arc<S>,
    /// The clock (for hints and views).
    pub clock: SharedClock,
    /// The time policy.
    pub policy: Policy,
    /// Artifact bytes (only the upload tool uses them; `None` elsewhere).
    pub blobs: Option<Arc<dyn BlobStore>>,
    /// The owner's panel (`<base>/panel`): results with a page there carry its `url` (ChatGPT
    /// cites only results with one). `None`: no `url`.
    pub panel_url: Option<String>,
}

impl<S: ?Sized> ToolDeps<S> {
    /// A run's page in the panel: `<panel>?run=<command_id>` (the row among the recent runs).
    pub fn run_page(&self, run: domain::ids::CommandId) -> Option<String> {
        self.panel_url.as_ref().map(|p| format!("{p}?run={run}"))
    }

    /// A task's page in the panel: `<panel>?link=<chat_link_id>&task=<task_id>` (its detail).
    pub fn task_page(&self, link: domain::ids::ChatLinkId, task: domain::ids::TaskId) -> Option<String> {
        self.panel_url.as_ref().map(|p| format!("{p}?link={link}&task={task}"))
    }
}

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
    /// The id of the request that made the call ([`http_util::TraceId`]), for the tool's logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
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
    /// Invalid arguments: an `isError: true` result with this message (SEP-1303).
    Invalid {
        /// Names the field and the rule.
        message: String,
    },
}

/// Why a tool call could not be dispatched to its function.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// No function is configured for the tool.
    #[error("no function configured for {0}")]
    NoFunction(&'static str),
    /// A call reached the function of another tool.
    #[error("{call} reached the {function} function")]
    WrongFunction {
        /// The tool called.
        call: &'static str,
        /// The function that received it.
        function: &'static str,
    },
    /// The invoke itself failed (network, throttling, permissions).
    #[error("invoking {function}")]
    Invoke {
        /// The function.
        function: String,
        /// The cause.
        #[source]
        source: domain::store::BoxError,
    },
    /// The function ran and failed (`FunctionError`), or answered something that is not a
    /// [`ToolReply`].
    #[error("{function} answered with an error: {detail}")]
    Function {
        /// The function.
        function: String,
        /// What it said (logged only).
        detail: String,
    },
}

/// A failure that is not the caller's: retryable, details logged only.
#[derive(Debug, thiserror::Error)]
pub enum ToolFault {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The blob store failed.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// The dispatch to the tool's function failed.
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
}

/// Parses and checks a tool's arguments (`null` reads as `{}`), without copying them.
///
/// # Errors
/// The message of the `isError` result, naming the field (`arguments.week`) and the rule.
pub fn parse_args<I: ToolInput>(args: &serde_json::Value) -> Result<I::Args, String> {
    let empty;
    let args = if args.is_null() {
        empty = serde_json::Value::Object(serde_json::Map::new());
        &empty
    } else {
        args
    };
    let input: I = serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        if path == "." { format!("arguments: {}", e.inner()) } else { format!("{path}: {}", e.inner()) }
    })?;
    input.check()
}

/// Runs tool `T` for `call` against `deps` (the tool's function calls this for its own type):
/// parses the arguments, then `run_parsed`.
///
/// # Errors
/// [`ToolFault`] when the store or blob store fails (retryable; never the caller's fault).
pub async fn run_tool<T: Handler<S>, S: ?Sized>(deps: &ToolDeps<S>, call: &ToolCall) -> Result<ToolReply, ToolFault> {
    if call.tool != T::SPEC.name {
        return Err(DispatchError::WrongFunction { call: call.tool.as_str(), function: T::SPEC.name.as_str() }.into());
    }
    let args = match parse_args::<T::Input>(&call.arguments) {
        Ok(a) => a,
        Err(message) => return Ok(ToolReply::Invalid { message }),
    };
    run_parsed::<T, S>(deps, &call.owner, &call.agent, args).await
}

/// Runs tool `T` on arguments [`run_tool`] parsed, for the agent `agent` of `owner`.
///
/// # Errors
/// [`ToolFault`] when the store or blob store fails (retryable; never the caller's fault).
async fn run_parsed<T: Handler<S>, S: ?Sized>(
    deps: &ToolDeps<S>,
    owner: &OwnerId,
    agent: &AgentId,
    args: <T::Input as ToolInput>::Args,
) -> Result<ToolReply, ToolFault> {
    let caller = Caller { owner, agent, now: deps.clock.now() };
    Ok(match T::run(deps, caller, args).await? {
        Ok(out) => ToolReply::Ok { structured: serde_json::to_value(&out).unwrap_or_default() },
        Err(Rejected(message)) => ToolReply::Rejected { message },
    })
}

/// The JSON Schema of `T` as an MCP schema object (no `$schema`/`title` noise), with only JSON
/// Schema's own formats ([`json_schema_formats`]).
fn schema<T: JsonSchema>() -> serde_json::Map<String, serde_json::Value> {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    json_schema_formats(&mut v);
    match v {
        serde_json::Value::Object(o) => o,
        _ => serde_json::Map::new(),
    }
}

/// Replaces the integer formats schemars writes (`uint64`, `int32`, `uint`, …: OpenAPI's and
/// its own, not JSON Schema's — the TypeScript SDK's validator warns `unknown format "uint64"
/// ignored`) by the range they mean, `minimum` and `maximum` (bounds beyond 2^53 − 1, which
/// JSON numbers cannot hold exactly, are left out); `float`/`double` are dropped. JSON Schema's
/// own formats (`uuid`, `date-time`, `uri`, …) stay.
pub fn json_schema_formats(v: &mut serde_json::Value) {
    const SAFE: i128 = (1 << 53) - 1;
    match v {
        serde_json::Value::Object(o) => {
            let range = match o.get("format").and_then(serde_json::Value::as_str) {
                Some("float" | "double") => Some((None, None)),
                Some(f) => {
                    let (signed, bits) = match (f.strip_prefix("uint"), f.strip_prefix("int")) {
                        (Some(b), _) => (false, b),
                        (None, Some(b)) => (true, b),
                        _ => (true, "-"),
                    };
                    let bits: Option<u32> = if bits.is_empty() { Some(64) } else { bits.parse().ok() };
                    bits.filter(|b| [8, 16, 32, 64, 128].contains(b)).map(|b| {
                        let (lo, hi) =
                            if signed { (-(1i128 << (b - 1)), (1i128 << (b - 1)) - 1) } else { (0, (1i128 << b) - 1) };
                        (Some(lo).filter(|l| *l >= -SAFE), Some(hi).filter(|h| *h <= SAFE))
                    })
                }
                None => None,
            };
            if let Some((lo, hi)) = range {
                o.remove("format");
                for (key, bound) in [("minimum", lo), ("maximum", hi)] {
                    if let Some(b) = bound
                        && !o.contains_key(key)
                    {
                        o.insert(key.into(), serde_json::json!(b as i64));
                    }
                }
            }
            o.values_mut().for_each(json_schema_formats);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(json_schema_formats),
        _ => {}
    }
}

/// The capabilities the tools use together (what in-process dispatch needs).
pub trait ToolStore:
    ManageProjects
    + ManageLinks
    + ManageDevices
    + QueueRuns
    + ReadRuns
    + CancelRuns
    + ReadTasks
    + ClaimTasks
    + RecordArtifacts
{
}
impl<
    T: ManageProjects
        + ManageLinks
        + ManageDevices
        + QueueRuns
        + ReadRuns
        + CancelRuns
        + ReadTasks
        + ClaimTasks
        + RecordArtifacts
        + ?Sized,
> ToolStore for T
{
}

/// The table: every tool's type, in catalogue order. Generates [`ToolName`] and the by-name
/// functions, and checks at compile time that each tool's `SPEC.name` is its own entry.
macro_rules! tools {
    ($($variant:ident => $module:ident),+ $(,)?) => {
        /// The tools, in catalogue order. Serialized as the wire name (`claim_linked_chat_task`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum ToolName {
            $(
                #[doc = concat!("`", stringify!($module), "`")]
                $variant,
            )+
        }

        $(const _: () = assert!(matches!(<$variant as Tool>::SPEC.name, ToolName::$variant));)+

        impl ToolName {
            /// Every tool, in catalogue order.
            pub const ALL: &'static [ToolName] = &[$(Self::$variant),+];

            /// The wire name (also the Lambda function's crate name).
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => stringify!($module)),+ }
            }

            /// The tool's facts.
            pub fn spec(self) -> &'static ToolSpec {
                match self { $(Self::$variant => &<$variant as Tool>::SPEC),+ }
            }

            /// The input schema (from the input type).
            pub fn input_schema(self) -> serde_json::Map<String, serde_json::Value> {
                match self { $(Self::$variant => schema::<<$variant as Tool>::Input>()),+ }
            }

            /// The output schema (from the output type).
            pub fn output_schema(self) -> serde_json::Map<String, serde_json::Value> {
                match self { $(Self::$variant => schema::<<$variant as Tool>::Output>()),+ }
            }
        }

        /// Runs one tool call in process, by name (the local server and tests).
        ///
        /// # Errors
        /// [`ToolFault`] when the store or blob store fails (retryable; never the caller's fault).
        pub async fn handle<S: ToolStore + ?Sized>(deps: &ToolDeps<S>, call: &ToolCall) -> Result<ToolReply, ToolFault> {
            match call.tool { $(ToolName::$variant => run_tool::<$variant, S>(deps, call).await),+ }
        }
    };
}

tools! {
    ListGraphSessions => list_graph_sessions,
    RunGraphSession => run_graph_session,
    GetGraphRun => get_graph_run,
    CancelGraphRun => cancel_graph_run,
    ListLinkedChatTasks => list_linked_chat_tasks,
    GetLinkedChatTask => get_linked_chat_task,
    ClaimLinkedChatTask => claim_linked_chat_task,
    SubmitLinkedChatResult => submit_linked_chat_result,
    UploadLinkedChatArtifact => upload_linked_chat_artifact,
}

impl ToolName {
    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|t| t.as_str() == s)
    }
}

/// The `tools/list` entries, generated from the specs and types, with the scopes spelled the
/// way the authorization server issues them.
pub fn catalogue(scopes: &crate::scopes::ScopeSpelling) -> Vec<serde_json::Value> {
    ToolName::ALL
        .iter()
        .map(|&t| {
            let spec = t.spec();
            let a = spec.annotations;
            let schemes = serde_json::json!([{ "type": "oauth2", "scopes": [scopes.spell(spec.scope)] }]);
            serde_json::json!({
                "name": t.as_str(),
                "title": spec.title,
                "description": spec.description,
                "inputSchema": t.input_schema(),
                "outputSchema": t.output_schema(),
                "annotations": {
                    "title": spec.title,
                    "readOnlyHint": a.read_only,
                    "destructiveHint": a.destructive,
                    "idempotentHint": a.idempotent,
                    "openWorldHint": a.open_world,
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

    /// Every schema uses only JSON Schema's own formats (Draft 2020-12 §7.3), and an integer
    /// format's range survives as bounds.
    #[test]
    fn schemas_use_only_json_schemas_own_formats() {
        const OWN: &[&str] = &[
            "date-time",
            "date",
            "time",
            "duration",
            "email",
            "idn-email",
            "hostname",
            "idn-hostname",
            "ipv4",
            "ipv6",
            "uri",
            "uri-reference",
            "iri",
            "iri-reference",
            "uuid",
            "uri-template",
            "json-pointer",
            "relative-json-pointer",
            "regex",
        ];
        fn formats(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(o) => {
                    if let Some(f) = o.get("format").and_then(serde_json::Value::as_str) {
                        out.push(f.to_owned());
                    }
                    o.values().for_each(|x| formats(x, out));
                }
                serde_json::Value::Array(a) => a.iter().for_each(|x| formats(x, out)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        for &t in ToolName::ALL {
            formats(&serde_json::Value::Object(t.input_schema()), &mut found);
            formats(&serde_json::Value::Object(t.output_schema()), &mut found);
        }
        let foreign: Vec<_> = found.iter().filter(|f| !OWN.contains(&f.as_str())).collect();
        assert!(foreign.is_empty(), "formats JSON Schema does not define: {foreign:?}");
        let mut v = serde_json::json!({"a": {"type": "integer", "format": "uint64"}, "b": {"format": "int32"}, "c": {"format": "uint8", "minimum": 1}});
        json_schema_formats(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"a": {"type": "integer", "minimum": 0}, "b": {"minimum": -2147483648i64, "maximum": 2147483647}, "c": {"minimum": 1, "maximum": 255}})
        );
    }

    #[test]
    fn every_tool_has_a_closed_input_schema_and_a_scope() {
        assert!(ToolName::ALL.iter().all(|t| !t.spec().title.is_empty() && t.spec().title.len() <= 40));
        for &t in ToolName::ALL {
            assert_eq!(
                t.input_schema().get("additionalProperties"),
                Some(&serde_json::Value::Bool(false)),
                "{}",
                t.as_str()
            );
            assert!([SCOPE_READ, SCOPE_RUN].contains(&t.spec().scope));
            assert_eq!(ToolName::parse(t.as_str()), Some(t));
            assert_eq!(serde_json::to_value(t).unwrap(), serde_json::json!(t.as_str()));
            let read_only = t.spec().annotations.read_only;
            assert_eq!(
                read_only,
                t.spec().scope == SCOPE_READ,
                "{}: read-only tools are exactly the read-scope ones",
                t.as_str()
            );
        }
    }
}
