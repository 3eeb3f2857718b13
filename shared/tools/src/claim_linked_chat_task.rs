//! `claim_linked_chat_task`: claim a task in one conditional write; the claim id fences.

use domain::ids::{ChatLinkId, TaskId};
use domain::store::ClaimTasks;
use domain::tasks::ClaimOutcome;
use schemars::JsonSchema;
use serde::Serialize;

use super::common::TaskInput;
use super::{Annotations, Caller, Handled, Handler, Rejected, SCOPE_RUN, Tool, ToolDeps, ToolName, ToolSpec};

/// The tool.
pub struct ClaimLinkedChatTask;

impl Tool for ClaimLinkedChatTask {
    const SPEC: ToolSpec = ToolSpec {
        name: ToolName::ClaimLinkedChatTask,
        title: "Claim a task from the owner",
        scope: SCOPE_RUN,
        description: "Claim a queued task of this linked chat before working on it. Returns claim_id and lease_until. Claiming again while your claim is live returns the same claim, so a repeated call is safe. Keep the claim_id: submit_linked_chat_result needs it. After lease_until the task can be claimed again (a new claim_id) and the old claim's submit will be rejected. Tasks of other chats are not claimable.",
        annotations: Annotations { read_only: false, destructive: false, idempotent: true, open_world: false },
        dynamodb_actions: &["dynamodb:UpdateItem"],
        queries_index: false,
        stores_blobs: false,
    };
    type Input = TaskInput;
    type Output = ClaimOutput;
}

/// Output of `claim_linked_chat_task`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ClaimOutput {
    /// The fencing token: pass it to submit_linked_chat_result.
    pub claim_id: String,
    /// The claim holds the task until then (RFC 3339).
    pub lease_until: String,
    /// Its page in the owner's panel (the owner signs in to open it); absent when the server
    /// does not know its panel's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl<S: ClaimTasks + ?Sized> Handler<S> for ClaimLinkedChatTask {
    async fn run(deps: &ToolDeps<S>, caller: Caller<'_>, (link, task): (ChatLinkId, TaskId)) -> Handled<ClaimOutput> {
        Ok(match deps.store.claim_task(caller.owner, link, task).await? {
            ClaimOutcome::Claimed { claim_id, lease_until } | ClaimOutcome::Replayed { claim_id, lease_until } => {
                Ok(ClaimOutput {
                    claim_id: claim_id.to_string(),
                    lease_until: lease_until.rfc3339(),
                    url: deps.task_page(link, task),
                })
            }
            ClaimOutcome::Rejected(why) => Err(Rejected::new(why.to_string())),
        })
    }
}
