//! `get_graph_run`: read a run the calling agent queued.

use domain::clock::Timestamp;
use domain::errors::RUN_NOT_FOUND;
use domain::ids::CommandId;
use domain::runs::RunStatus;
use domain::store::{ManageProjects, ReadRuns};
use schemars::JsonSchema;
use serde::Serialize;

use super::common::CommandInput;
use super::{
    Annotations, Caller, Handled, Handler, Rejected, SCOPE_READ, Tool, ToolDeps, ToolName, ToolSpec, check_after,
};

/// The tool.
pub struct GetGraphRun;

impl Tool for GetGraphRun {
    const SPEC: ToolSpec = ToolSpec {
        name: ToolName::GetGraphRun,
        title: "Check a Graph run",
        scope: SCOPE_READ,
        description: "Read a Graph run you queued: status (queued, running, completed, failed, cancelled, expired), result (or result_truncated when it exceeded 100,000 characters), error, tokens and cost. check_after_s says when another check is worth it (the desktop's next pickup, or the run's expected end from the session's recent runs); follow it instead of polling quickly. Runs queued by other agents are not visible.",
        annotations: Annotations::READ,
        dynamodb_actions: &["dynamodb:GetItem"],
        queries_index: false,
        stores_blobs: false,
    };
    type Input = CommandInput;
    type Output = GraphRunOutput;
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
    /// Its page in the owner's panel (the owner signs in to open it); absent when the server
    /// does not know its panel's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl<S: ReadRuns + ManageProjects + ?Sized> Handler<S> for GetGraphRun {
    async fn run(deps: &ToolDeps<S>, caller: Caller<'_>, id: CommandId) -> Handled<GraphRunOutput> {
        let Some(run) = deps.store.get_run(caller.agent, id).await? else {
            return Ok(Err(Rejected::new(RUN_NOT_FOUND)));
        };
        let project = deps.store.get_project(caller.owner, run.project_id).await?;
        let view = run.view(caller.now, &deps.policy);
        let c = run.completion.as_ref().filter(|_| view.status.is_terminal());
        Ok(Ok(GraphRunOutput {
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
            check_after_s: check_after(view.status, project.as_ref(), &run, caller.now, &deps.policy),
            url: deps.run_page(run.command_id),
        }))
    }
}
