//! The owner API's views of Graph runs: a run, its progress, a page of them.

use domain::clock::Timestamp;
use domain::ids::{CommandId, ProjectId};
use domain::limits::Policy;
use domain::runs::{Run, RunStatus};
use schemars::JsonSchema;
use serde::Serialize;

/// A time as the views show it (RFC 3339), or none (both view modules use it; the run views
/// are below the others, which re-export them).
pub(crate) fn time(t: Option<Timestamp>) -> Option<String> {
    t.map(Timestamp::rfc3339)
}

/// A graph run.
#[derive(Serialize, JsonSchema)]
pub struct RunView {
    /// Its command id.
    pub command_id: CommandId,
    /// Its status now.
    pub status: RunStatus,
    /// Its project.
    pub project_id: ProjectId,
    /// The session it runs.
    pub graph_session_id: String,
    /// The session's slug when queued.
    pub slug: String,
    /// The agent that queued it.
    pub agent: String,
    /// When it was queued.
    pub queued_at: String,
    /// When the desktop started it.
    pub started_at: Option<String>,
    /// When it ended.
    pub finished_at: Option<String>,
    /// Seconds from queued to started.
    pub wait_s: Option<f64>,
    /// Seconds from started to ended.
    pub run_s: Option<f64>,
    /// Why it failed.
    pub error: Option<String>,
    /// Whether the agent asked to cancel it.
    pub cancel_requested: bool,
    /// While running: what the Graph last said of itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<RunProgressView>,
}

/// A running Graph's newest progress (`domain::progress`).
#[derive(Serialize, JsonSchema)]
pub struct RunProgressView {
    /// The Graph's words (empty when it only logged).
    pub message: String,
    /// 0 to 1, when the Graph says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    /// When the server received it.
    pub updated_at: String,
    /// The last lines of its log.
    pub tail: Vec<String>,
}

/// `GET /runs`: a page, newest first.
#[derive(Serialize, JsonSchema)]
pub struct RunPage {
    /// The page.
    pub runs: Vec<RunView>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

pub(crate) fn run_view(r: &Run, now: Timestamp, policy: &Policy) -> RunView {
    let view = r.view(now, policy);
    let ended = r.finished_at.filter(|_| view.status.is_terminal());
    let secs = |a: Timestamp, b: Timestamp| b.since(a).as_secs_f64();
    RunView {
        command_id: r.command_id,
        status: view.status,
        project_id: r.project_id,
        graph_session_id: r.graph_session_id.as_str().to_owned(),
        slug: r.slug.clone(),
        agent: r.agent.as_str().to_owned(),
        queued_at: r.queued_at.rfc3339(),
        started_at: time(r.started_at),
        finished_at: time(ended),
        wait_s: r.started_at.map(|s| secs(r.queued_at, s)),
        run_s: r.started_at.zip(ended).map(|(s, e)| secs(s, e)),
        error: view.error,
        cancel_requested: r.cancel_requested,
        progress: r.progress.as_ref().filter(|_| view.status == RunStatus::Running).map(|p| RunProgressView {
            message: p.progress.message.clone(),
            fraction: p.progress.fraction,
            updated_at: p.updated_at.rfc3339(),
            tail: p.progress.tail.clone(),
        }),
    }
}
