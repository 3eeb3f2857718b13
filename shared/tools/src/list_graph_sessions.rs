//! `list_graph_sessions`: the sessions the desktop shared in a connected project.

use domain::ids::ProjectId;
use domain::store::ManageProjects;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::field;
use super::{Annotations, Caller, Handled, Handler, SCOPE_READ, Tool, ToolDeps, ToolInput, ToolName, ToolSpec};

/// The tool.
pub struct ListGraphSessions;

impl Tool for ListGraphSessions {
    const SPEC: ToolSpec = ToolSpec {
        name: ToolName::ListGraphSessions,
        title: "List Graph sessions",
        scope: SCOPE_READ,
        description: "List the Graph sessions the owner's desktop has shared in a connected project, as of the desktop's last sync. An empty list is normal: nothing appears until the owner shares a session from the desktop.",
        annotations: Annotations::READ,
        dynamodb_actions: &["dynamodb:GetItem"],
        queries_index: false,
        stores_blobs: false,
    };
    type Input = ListGraphSessionsInput;
    type Output = GraphSessionsOutput;
}

/// Input of `list_graph_sessions`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListGraphSessionsInput {
    /// The connected project (UUID).
    #[schemars(extend("format" = "uuid"))]
    pub project_id: String,
    /// Most sessions to return, 1 to 50 (default 50).
    #[schemars(range(min = 1, max = 50))]
    #[serde(default)]
    pub limit: Option<i64>,
}

impl ToolInput for ListGraphSessionsInput {
    type Args = (ProjectId, usize);
    fn check(self) -> Result<(ProjectId, usize), String> {
        let p = field(ProjectId::parse("project_id", &self.project_id))?;
        let limit = self.limit.unwrap_or(50);
        if !(1..=50).contains(&limit) {
            return Err(format!("limit: must be 1 to 50 (got {limit})"));
        }
        Ok((p, limit as usize))
    }
}

/// One shared graph session.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GraphSessionOutput {
    /// gs_ + 32 hex.
    pub graph_session_id: String,
    /// Display name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Short stable name.
    pub slug: String,
    /// Version.
    pub version: String,
    /// Status on the desktop.
    pub status: String,
}

/// Output of `list_graph_sessions`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GraphSessionsOutput {
    /// The project.
    pub project_id: String,
    /// Shared sessions as of the desktop's last sync.
    pub sessions: Vec<GraphSessionOutput>,
}

impl<S: ManageProjects + ?Sized> Handler<S> for ListGraphSessions {
    async fn run(
        deps: &ToolDeps<S>,
        caller: Caller<'_>,
        (project, limit): (ProjectId, usize),
    ) -> Handled<GraphSessionsOutput> {
        let sessions = match deps.store.get_project(caller.owner, project).await? {
            Some(p) if p.enabled => p.sessions,
            // A disabled or unknown project shows nothing, like a project nothing is shared in.
            _ => Vec::new(),
        };
        Ok(Ok(GraphSessionsOutput {
            project_id: project.to_string(),
            sessions: sessions
                .into_iter()
                .take(limit)
                .map(|s| GraphSessionOutput {
                    graph_session_id: s.graph_session_id.to_string(),
                    name: s.name,
                    description: s.description,
                    slug: s.slug,
                    version: s.version,
                    status: s.status,
                })
                .collect(),
        }))
    }
}
