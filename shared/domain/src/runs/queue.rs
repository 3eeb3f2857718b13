//! Where a queued run goes, which queued runs a desktop is handed, and why a run was not
//! queued (re-exported from [`crate::runs`]).

use crate::ids::{GraphSessionId, ProjectId};

use super::Run;

/// Where a run goes: the project and the session's slug as of the last sync.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueTarget {
    /// The project.
    pub project_id: ProjectId,
    /// The session's slug when queued.
    pub slug: String,
}

/// Which of a project's queued runs a desktop is handed at its sync: those of the sessions it
/// shares (`mine`), and those of sessions nobody shares any more (not in `shared`, the project's
/// union), so its consent re-check ends them with the exact error instead of leaving them
/// queued for a day. Applied inside the store's listing, so a full page of another desktop's
/// runs never hides this one's.
#[derive(Debug, Clone, Default)]
pub struct QueueFilter {
    /// The sessions the syncing desktop shares.
    pub mine: Vec<GraphSessionId>,
    /// Every session shared in the project (all desktops).
    pub shared: Vec<GraphSessionId>,
}

impl QueueFilter {
    /// Every queued run.
    pub fn all() -> Self {
        Self::default()
    }

    /// Whether `run` is handed out.
    pub fn keeps(&self, run: &Run) -> bool {
        self.mine.contains(&run.graph_session_id) || !self.shared.contains(&run.graph_session_id)
    }
}

/// Why a run was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueRejection {
    /// The key was used with other arguments.
    #[error("{}", crate::errors::IDEMPOTENCY_MISMATCH)]
    IdempotencyMismatch,
    /// The project is not the owner's (or does not exist).
    #[error("project_id: no such project")]
    ProjectNotFound,
    /// The owner has not enabled the project for connected agents.
    #[error("project {0} is not enabled for connected agents")]
    ProjectDisabled(ProjectId),
    /// The session is not shared in the project as of the last sync.
    #[error("graph session {0} is not shared in any connected project (as of the desktop's last sync)")]
    SessionNotShared(GraphSessionId),
    /// The session is not shared in the named project.
    #[error("graph session {0} is not shared in project {1} (as of the desktop's last sync)")]
    SessionNotSharedInProject(GraphSessionId, ProjectId),
    /// `project_id` is needed because the session is shared in several connected projects.
    #[error("project_id: required because graph session {0} is shared in more than one connected project ({ids})", ids = join_ids(.1))]
    AmbiguousProject(GraphSessionId, Vec<ProjectId>),
}

fn join_ids(ids: &[ProjectId]) -> String {
    ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}
