//! `submit_linked_chat_result`: finish a claimed task; only the current claim id is accepted.

use domain::ids::{ChatLinkId, ClaimId, TaskId};
use domain::store::ClaimTasks;
use domain::tasks::{SubmitOutcome, SubmitStatus, SubmitTask, validate_task_result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::field;
use super::{
    Annotations, Caller, Handled, Handler, Rejected, SCOPE_RUN, Tool, ToolDeps, ToolInput, ToolName, ToolSpec,
};

/// The tool.
pub struct SubmitLinkedChatResult;

impl Tool for SubmitLinkedChatResult {
    const SPEC: ToolSpec = ToolSpec {
        name: ToolName::SubmitLinkedChatResult,
        title: "Submit a task result",
        scope: SCOPE_RUN,
        description: "Submit the result of a task you claimed, with its claim_id and status completed or failed. Repeating the identical submit is safe and returns ok with replayed: true. Rejected, and not worth retrying: a different result for a task that is already finished; a claim that was taken over after its lease ran out; a task the owner cancelled (a cancelled claim can never be completed).",
        annotations: Annotations { read_only: false, destructive: false, idempotent: true, open_world: false },
        dynamodb_actions: &["dynamodb:UpdateItem"],
        queries_index: false,
        stores_blobs: false,
    };
    type Input = SubmitInput;
    type Output = OkOutput;
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

/// The validated submit, still without the caller (added by the handler).
pub struct SubmitArgs {
    link_id: ChatLinkId,
    task_id: TaskId,
    claim_id: ClaimId,
    status: SubmitStatus,
    result: String,
}

impl ToolInput for SubmitInput {
    type Args = SubmitArgs;
    fn check(self) -> Result<SubmitArgs, String> {
        field(validate_task_result(&self.result))?;
        Ok(SubmitArgs {
            link_id: field(ChatLinkId::parse("chat_link_id", &self.chat_link_id))?,
            task_id: field(TaskId::parse("task_id", &self.task_id))?,
            claim_id: field(ClaimId::parse("claim_id", &self.claim_id))?,
            status: self.status,
            result: self.result,
        })
    }
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

impl<S: ClaimTasks + ?Sized> Handler<S> for SubmitLinkedChatResult {
    async fn run(deps: &ToolDeps<S>, caller: Caller<'_>, a: SubmitArgs) -> Handled<OkOutput> {
        let req = SubmitTask {
            owner: caller.owner.clone(),
            link_id: a.link_id,
            task_id: a.task_id,
            claim_id: a.claim_id,
            status: a.status,
            result: a.result,
        };
        Ok(match deps.store.submit_task(&req).await? {
            SubmitOutcome::Accepted => Ok(OkOutput { ok: true, replayed: None }),
            SubmitOutcome::Replayed => Ok(OkOutput { ok: true, replayed: Some(true) }),
            SubmitOutcome::Rejected(why) => Err(Rejected::new(why.to_string())),
        })
    }
}
