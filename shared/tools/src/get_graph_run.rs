//! `get_graph_run`: read a run the calling agent queued.

use domain::clock::Timestamp;
use domain::devices::Hold;
use domain::errors::RUN_NOT_FOUND;
use domain::ids::CommandId;
use domain::runs::RunStatus;
use domain::store::{ManageDevices, ManageProjects, ReadRuns};
use schemars::JsonSchema;
use serde::Serialize;

use super::common::CommandInput;
use super::{
    Annotations, Backlog, Caller, Handled, Handler, Rejected, SCOPE_READ, Tool, ToolDeps, ToolName, ToolSpec,
    check_after, run_graph_session::waiting,
};

/// The tool.
pub struct GetGraphRun;

impl Tool for GetGraphRun {
    const SPEC: ToolSpec = ToolSpec {
        name: ToolName::GetGraphRun,
        title: "Check a Graph run",
        scope: SCOPE_READ,
        description: "Read a Graph run you queued: status (queued, running, completed, failed, cancelled, expired); a queued run with desktop_paused waits because the owner paused every desktop that can run it (tell the user: it starts when the pause ends or the owner resumes it); result (or result_truncated when it exceeded 100,000 characters), error, tokens and cost; while running, progress (the Graph's message, fraction 0–1 and its last log lines, updated at most every 10 s). check_after_s says when another check is worth it (the desktop's next pickup, later when your own runs queued ahead of it fill the desktop's slots, or the run's expected end from the session's recent runs); follow it instead of polling quickly. Runs queued by other agents are not visible.",
        annotations: Annotations::READ,
        dynamodb_actions: &["dynamodb:GetItem", "dynamodb:Query"],
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
    /// Present while the run is queued and every desktop that can run it is paused by the
    /// owner: nothing starts until a pause ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desktop_paused: Option<DesktopPaused>,
    /// While running, what the Graph last said of itself (when it reports progress or logs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressOutput>,
    /// Seconds until another check can first show a change; null once finished.
    pub check_after_s: Option<u64>,
    /// Its page in the owner's panel (the owner signs in to open it); absent when the server
    /// does not know its panel's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A running Graph's newest progress, as its desktop forwarded it (at most every 10 s).
#[derive(Debug, Serialize, JsonSchema)]
pub struct ProgressOutput {
    /// The Graph's own words (empty when it only logged).
    pub message: String,
    /// How far along, 0 to 1, when the Graph says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    /// RFC 3339: when the server received it.
    pub updated_at: String,
    /// The last lines of its log (at most 10).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tail: Vec<String>,
}

/// The owner's pause that holds a queued run.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DesktopPaused {
    /// RFC 3339: when the first of those pauses ends by itself; null: until the owner resumes.
    pub until: Option<String>,
    /// The owner's note, if any.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// How long a model is told to wait on a run held by a pause with no end (the owner resumes
/// by hand; checking sooner only costs calls).
const HELD_CHECK_AFTER: u64 = 900;
impl<S: ReadRuns + ManageProjects + ManageDevices + ?Sized> Handler<S> for GetGraphRun {
    async fn run(deps: &ToolDeps<S>, caller: Caller<'_>, id: CommandId) -> Handled<GraphRunOutput> {
        let Some(run) = deps.store.get_run(caller.agent, id).await? else {
            return Ok(Err(Rejected::new(RUN_NOT_FOUND)));
        };
        let project = deps.store.get_project(caller.owner, run.project_id).await?;
        let view = run.view(caller.now, &deps.policy);
        let c = run.completion.as_ref().filter(|_| view.status.is_terminal());
        let (held, backlog) = match view.status {
            RunStatus::Queued => waiting(deps.store.as_ref(), project.as_ref(), &run, caller.now).await?,
            _ => (None, Backlog::NONE),
        };
        let check_after_s = match &held {
            None => check_after(view.status, project.as_ref(), &run, caller.now, &deps.policy, backlog),
            Some(Hold { until: None, .. }) => Some(HELD_CHECK_AFTER),
            // When the pause ends, the desktop's next sync hands the run out.
            Some(Hold { until: Some(u), .. }) => {
                Some((u.since(caller.now) + deps.policy.poll_interval).as_secs().max(1))
            }
        };
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
            progress: run.progress.filter(|_| view.status == RunStatus::Running).map(|p| ProgressOutput {
                message: p.progress.message,
                fraction: p.progress.fraction,
                updated_at: p.updated_at.rfc3339(),
                tail: p.progress.tail,
            }),
            desktop_paused: held.map(|h| DesktopPaused { until: h.until.map(Timestamp::rfc3339), note: h.note }),
            check_after_s,
            url: deps.run_page(run.command_id),
        }))
    }
}
