//! `cancel_graph_run`: cancel a run the calling agent queued.

use domain::errors::RUN_NOT_FOUND;
use domain::ids::CommandId;
use domain::runs::{CancelRunOutcome, RunStatus};
use domain::store::CancelRuns;
use schemars::JsonSchema;
use serde::Serialize;

use super::common::CommandInput;
use super::{Annotations, Caller, Handled, Handler, Rejected, SCOPE_RUN, Tool, ToolDeps, ToolName, ToolSpec};

/// The tool.
pub struct CancelGraphRun;

impl Tool for CancelGraphRun {
    const SPEC: ToolSpec = ToolSpec {
        name: ToolName::CancelGraphRun,
        title: "Cancel a Graph run",
        scope: SCOPE_RUN,
        description: "Cancel a Graph run you queued. A queued run is cancelled at once and never starts. A running run gets a cancel request; the desktop stops it within a few seconds and it ends cancelled. A finished run is returned unchanged.",
        annotations: Annotations { read_only: false, destructive: true, idempotent: true, open_world: false },
        dynamodb_actions: &["dynamodb:UpdateItem"],
        queries_index: false,
        stores_blobs: false,
    };
    type Input = CommandInput;
    type Output = CancelOutput;
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

impl<S: CancelRuns + ?Sized> Handler<S> for CancelGraphRun {
    async fn run(deps: &ToolDeps<S>, caller: Caller<'_>, id: CommandId) -> Handled<CancelOutput> {
        let (status, cancel_requested) = match deps.store.cancel_run(caller.agent, id).await? {
            CancelRunOutcome::NotFound => return Ok(Err(Rejected::new(RUN_NOT_FOUND))),
            CancelRunOutcome::Cancelled => (RunStatus::Cancelled, None),
            CancelRunOutcome::CancelRequested => (RunStatus::Running, Some(true)),
            CancelRunOutcome::Unchanged(s) => (s, None),
        };
        Ok(Ok(CancelOutput { command_id: id.to_string(), status, cancel_requested }))
    }
}
