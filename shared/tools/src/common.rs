//! Inputs several tools share, and where artifact bytes go.

use domain::errors::InputError;
use domain::ids::{ChatLinkId, CommandId, TaskId};
use schemars::JsonSchema;
use serde::Deserialize;

use super::ToolInput;

/// An [`InputError`] as the message of an `isError` result.
pub(super) fn field<T>(r: Result<T, InputError>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

/// Input of `get_graph_run` and `cancel_graph_run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandInput {
    /// The run's command_id (UUID) from run_graph_session.
    #[schemars(extend("format" = "uuid"))]
    pub command_id: String,
}

impl ToolInput for CommandInput {
    type Args = CommandId;
    fn check(self) -> Result<CommandId, String> {
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

impl ToolInput for LinkInput {
    type Args = ChatLinkId;
    fn check(self) -> Result<ChatLinkId, String> {
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

impl ToolInput for TaskInput {
    type Args = (ChatLinkId, TaskId);
    fn check(self) -> Result<(ChatLinkId, TaskId), String> {
        Ok((
            field(ChatLinkId::parse("chat_link_id", &self.chat_link_id))?,
            field(TaskId::parse("task_id", &self.task_id))?,
        ))
    }
}
