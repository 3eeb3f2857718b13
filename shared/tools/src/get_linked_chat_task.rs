//! `get_linked_chat_task`: one task of this chat link.

use domain::clock::Timestamp;
use domain::errors::TASK_NOT_FOUND;
use domain::ids::{ChatLinkId, TaskId};
use domain::store::ReadTasks;
use domain::tasks::TaskStatus;
use schemars::JsonSchema;
use serde::Serialize;

use super::common::TaskInput;
use super::{Annotations, Caller, Handled, Handler, Rejected, SCOPE_READ, Tool, ToolDeps, ToolName, ToolSpec};

/// The tool.
pub struct GetLinkedChatTask;

impl Tool for GetLinkedChatTask {
    const SPEC: ToolSpec = ToolSpec {
        name: ToolName::GetLinkedChatTask,
        title: "Read a task from the owner",
        scope: SCOPE_READ,
        description: "Read one task of this linked chat: status, objective, claim and result.",
        annotations: Annotations::READ,
        dynamodb_actions: &["dynamodb:GetItem"],
        queries_index: false,
        stores_blobs: false,
    };
    type Input = TaskInput;
    type Output = TaskOutput;
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
    /// Its page in the owner's panel (the owner signs in to open it); absent when the server
    /// does not know its panel's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Where it came from when a Graph on the owner's desktop asked (absent: the owner
    /// assigned it): that Graph waits for the result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<domain::dispatch::TaskOrigin>,
}

impl<S: ReadTasks + ?Sized> Handler<S> for GetLinkedChatTask {
    async fn run(deps: &ToolDeps<S>, caller: Caller<'_>, (link, task): (ChatLinkId, TaskId)) -> Handled<TaskOutput> {
        let Some(t) = deps.store.get_task(caller.owner, link, task).await? else {
            return Ok(Err(Rejected::new(TASK_NOT_FOUND)));
        };
        Ok(Ok(TaskOutput {
            url: deps.task_page(t.link_id, t.task_id),
            task_id: t.task_id.to_string(),
            chat_link_id: t.link_id.to_string(),
            status: t.status_at(caller.now),
            created_at: t.created_at.rfc3339(),
            expires_at: t.expires_at.rfc3339(),
            claim_id: t.claim_id.map(|c| c.to_string()),
            lease_until: t.lease_until.map(Timestamp::rfc3339),
            finished_at: t.finished_at.map(Timestamp::rfc3339),
            objective: t.objective,
            result: t.result,
            origin: t.origin,
        }))
    }
}
