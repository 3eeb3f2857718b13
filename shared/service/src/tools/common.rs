//! Inputs several tools share, and where artifact bytes go.

use domain::errors::InputError;
use domain::ids::{ChatLinkId, CommandId, TaskId};
use domain::store::BoxError;
use schemars::JsonSchema;
use serde::Deserialize;

use super::ToolInput;

/// An [`InputError`] as a `-32602` message.
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

/// Why artifact bytes could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// This function was deployed without an artifact bucket.
    #[error("no artifact storage is configured here")]
    NotConfigured,
    /// The backend failed.
    #[error("artifact storage failed for {key}")]
    Backend {
        /// The object key.
        key: String,
        /// The cause (S3's error, or the file system's).
        #[source]
        source: BoxError,
    },
}

/// Where artifact bytes go (S3 in the cloud, files locally).
#[async_trait::async_trait]
pub trait BlobStore: Send + Sync {
    /// Stores `bytes` under `key` (overwriting is fine: keys are content-addressed per artifact).
    ///
    /// # Errors
    /// [`BlobError`] when the backend fails (retryable).
    async fn put(&self, key: &str, bytes: Vec<u8>, content_type: &str) -> Result<(), BlobError>;
}

/// A blob store in a local folder.
#[derive(Debug, Clone)]
pub struct DirBlobStore(pub std::path::PathBuf);

#[async_trait::async_trait]
impl BlobStore for DirBlobStore {
    async fn put(&self, key: &str, bytes: Vec<u8>, _content_type: &str) -> Result<(), BlobError> {
        let path = self.0.join(key);
        let failed = |source: BoxError| BlobError::Backend { key: key.to_owned(), source };
        tokio::task::spawn_blocking(move || {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, bytes)
        })
        .await
        .map_err(|e| failed(e.into()))?
        .map_err(|e| failed(e.into()))
    }
}
