//! `upload_linked_chat_artifact`: attach a file to a claimed task (same fencing as submit).

use base64::Engine;
use domain::ids::{ChatLinkId, ClaimId, TaskId};
use domain::limits::char_len;
use domain::runs::sha256_hex;
use domain::store::RecordArtifacts;
use domain::tasks::{ArtifactCheck, ArtifactOutcome, ArtifactRecord};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::field;
use super::{
    Annotations, Caller, Handled, Handler, Rejected, SCOPE_RUN, Tool, ToolDeps, ToolInput, ToolName, ToolSpec,
};
use crate::blobs::BlobError;

/// Most bytes of an artifact (decoded).
pub const MAX_ARTIFACT_BYTES: usize = 3 * 1024 * 1024;

/// The tool.
pub struct UploadLinkedChatArtifact;

impl Tool for UploadLinkedChatArtifact {
    const SPEC: ToolSpec = ToolSpec {
        name: ToolName::UploadLinkedChatArtifact,
        title: "Attach a file to a task",
        scope: SCOPE_RUN,
        description: "Attach a file (base64, at most 3 MiB) to a task you claimed, before submitting the result. artifact_id is yours to choose and must stay the same across retries: the same artifact_id with the same bytes is a safe replay, with different bytes it is rejected. The same claim rules as submit apply.",
        annotations: Annotations { read_only: false, destructive: false, idempotent: true, open_world: false },
        // The check before storing bytes is a transactional read (GetItem on both items).
        dynamodb_actions: &["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
        queries_index: false,
        stores_blobs: true,
    };
    type Input = UploadInput;
    type Output = ArtifactOutput;
}

/// Input of `upload_linked_chat_artifact`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadInput {
    /// This chat's link id (UUID).
    #[schemars(extend("format" = "uuid"))]
    pub chat_link_id: String,
    /// The task (UUID).
    #[schemars(extend("format" = "uuid"))]
    pub task_id: String,
    /// The claim_id from claim_linked_chat_task.
    #[schemars(extend("format" = "uuid"))]
    pub claim_id: String,
    /// Your id for this file, stable across retries: 1 to 128 of A-Z a-z 0-9 . _ - (not only dots)
    #[schemars(extend("pattern" = "^[A-Za-z0-9._-]*[A-Za-z0-9_-][A-Za-z0-9._-]*$"), length(min = 1, max = 128))]
    pub artifact_id: String,
    /// File name, 1 to 200 characters.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    /// MIME type, e.g. text/markdown.
    #[schemars(length(min = 1, max = 128))]
    pub content_type: String,
    /// The file's bytes, base64 (standard alphabet), at most 3 MiB decoded.
    pub content_base64: String,
}

/// The validated upload.
pub struct UploadArgs {
    link: ChatLinkId,
    task: TaskId,
    claim: ClaimId,
    artifact_id: String,
    name: String,
    content_type: String,
    bytes: Vec<u8>,
}

impl ToolInput for UploadInput {
    type Args = UploadArgs;
    fn check(self) -> Result<UploadArgs, String> {
        // Part of the object key (a path segment locally): never `.` or `..`.
        let id_ok = (1..=128).contains(&self.artifact_id.len())
            && self.artifact_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            && !self.artifact_id.bytes().all(|b| b == b'.');
        if !id_ok {
            return Err("artifact_id: must be 1 to 128 of A-Z a-z 0-9 . _ - (and not only dots)".into());
        }
        let n = char_len(&self.name);
        if n == 0 || n > 200 || self.name.chars().any(char::is_control) {
            return Err(format!("name: must be 1 to 200 characters without control characters (got {n})"));
        }
        let ct = &self.content_type;
        if ct.is_empty()
            || ct.len() > 128
            || !ct.contains('/')
            || ct.chars().any(|c| c.is_control() || c.is_whitespace())
        {
            return Err("content_type: must be a MIME type like text/markdown (at most 128 characters)".into());
        }
        if self.content_base64.len() > MAX_ARTIFACT_BYTES.div_ceil(3) * 4 + 4 {
            return Err(format!("content_base64: must decode to at most {MAX_ARTIFACT_BYTES} bytes"));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(self.content_base64.as_bytes())
            .map_err(|_| "content_base64: must be standard base64".to_owned())?;
        if bytes.len() > MAX_ARTIFACT_BYTES {
            return Err(format!(
                "content_base64: must decode to at most {MAX_ARTIFACT_BYTES} bytes (got {})",
                bytes.len()
            ));
        }
        Ok(UploadArgs {
            link: field(ChatLinkId::parse("chat_link_id", &self.chat_link_id))?,
            task: field(TaskId::parse("task_id", &self.task_id))?,
            claim: field(ClaimId::parse("claim_id", &self.claim_id))?,
            artifact_id: self.artifact_id,
            name: self.name,
            content_type: self.content_type,
            bytes,
        })
    }
}

/// Output of `upload_linked_chat_artifact`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ArtifactOutput {
    /// Always true.
    pub ok: bool,
    /// True when these identical bytes had already been stored under this artifact_id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed: Option<bool>,
    /// The artifact.
    pub artifact_id: String,
    /// sha256 of the bytes (hex).
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}

impl<S: RecordArtifacts + ?Sized> Handler<S> for UploadLinkedChatArtifact {
    async fn run(deps: &ToolDeps<S>, caller: Caller<'_>, a: UploadArgs) -> Handled<ArtifactOutput> {
        let blobs = deps.blobs.as_ref().ok_or(BlobError::NotConfigured)?;
        let sha = sha256_hex(&a.bytes);
        let size = a.bytes.len() as u64;
        // Content-addressed key: a retry writes the same object.
        let object_key = format!("artifacts/{}/{}/{}/{sha}", a.link, a.task, a.artifact_id);
        let record = ArtifactRecord {
            link_id: a.link,
            task_id: a.task,
            claim_id: a.claim,
            artifact_id: a.artifact_id,
            name: a.name,
            content_type: a.content_type,
            sha256: sha,
            size,
            object_key,
        };
        // Fencing first, bytes second: a refused upload stores nothing. (Only a claim taken
        // over between this check and the record can leave an unreferenced object, which the
        // bucket's lifecycle rule removes.)
        let outcome = match deps.store.check_artifact(caller.owner, &record).await? {
            ArtifactCheck::Proceed => {
                blobs.put(&record.object_key, a.bytes, &record.content_type).await?;
                deps.store.record_artifact(caller.owner, &record).await?
            }
            ArtifactCheck::Replayed => ArtifactOutcome::Replayed,
            ArtifactCheck::DifferentContent => ArtifactOutcome::DifferentContent,
            ArtifactCheck::Rejected(why) => ArtifactOutcome::Rejected(why),
            ArtifactCheck::OverCap(cap) => ArtifactOutcome::OverCap(cap),
        };
        let out = |replayed| {
            Ok(ArtifactOutput {
                ok: true,
                replayed,
                artifact_id: record.artifact_id.clone(),
                sha256: record.sha256.clone(),
                size,
            })
        };
        Ok(match outcome {
            ArtifactOutcome::Recorded => out(None),
            ArtifactOutcome::Replayed => out(Some(true)),
            ArtifactOutcome::DifferentContent => {
                Err(Rejected::new("rejected: artifact_id was already used with different content"))
            }
            ArtifactOutcome::Rejected(why) => Err(Rejected::new(why.to_string())),
            ArtifactOutcome::OverCap(cap) => Err(Rejected::new(cap.to_string())),
        })
    }
}
