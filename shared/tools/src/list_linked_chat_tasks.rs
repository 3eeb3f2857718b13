//! `list_linked_chat_tasks`: the open tasks of this chat link (compact; reads never write).

use domain::clock::Timestamp;
use domain::ids::ChatLinkId;
use domain::store::ReadTasks;
use domain::tasks::TaskStatus;
use schemars::JsonSchema;
use serde::Serialize;

use super::common::LinkInput;
use super::{Annotations, Caller, Handled, Handler, SCOPE_READ, Tool, ToolDeps, ToolName, ToolSpec};

/// Most open tasks listed.
pub const MAX_LISTED: usize = 50;

/// The tool.
pub struct ListLinkedChatTasks;

impl Tool for ListLinkedChatTasks {
    const SPEC: ToolSpec = ToolSpec {
        name: ToolName::ListLinkedChatTasks,
        title: "List tasks from the owner",
        scope: SCOPE_READ,
        description: "List the open tasks (queued or claimed) the owner assigned to this linked chat. The chat_link_id is in the conversation when the owner pasted it, else list_graph_sessions without arguments lists the owner's chat links by name. Reading never changes anything. To work on a task, claim it with claim_linked_chat_task first.",
        annotations: Annotations::READ,
        dynamodb_actions: &["dynamodb:Query"],
        queries_index: true,
        stores_blobs: false,
    };
    type Input = LinkInput;
    type Output = TaskListOutput;
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
    /// Where it came from when a Graph on the owner's desktop asked (absent: the owner
    /// assigned it): that Graph waits for the result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<domain::dispatch::TaskOrigin>,
}

/// Output of `list_linked_chat_tasks`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TaskListOutput {
    /// The link.
    pub chat_link_id: String,
    /// Open tasks, oldest first.
    pub tasks: Vec<TaskSummary>,
}

impl<S: ReadTasks + ?Sized> Handler<S> for ListLinkedChatTasks {
    async fn run(deps: &ToolDeps<S>, caller: Caller<'_>, link: ChatLinkId) -> Handled<TaskListOutput> {
        let tasks = deps.store.list_open_tasks(caller.owner, link, MAX_LISTED).await?;
        Ok(Ok(TaskListOutput {
            chat_link_id: link.to_string(),
            tasks: tasks
                .into_iter()
                .map(|t| TaskSummary {
                    task_id: t.task_id.to_string(),
                    status: t.status_at(caller.now),
                    lease_until: t.lease_until.filter(|_| t.status == TaskStatus::Claimed).map(Timestamp::rfc3339),
                    objective: t.objective,
                    origin: t.origin,
                })
                .collect(),
        }))
    }
}
