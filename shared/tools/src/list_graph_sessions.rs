//! `list_graph_sessions`: the sessions the desktop shared in a connected project; without a
//! project, where a chat that knows only the connector URL begins: every project enabled for
//! connected agents with its sessions, and the owner's chat links (the ids every other tool takes).

use domain::ids::ProjectId;
use domain::store::{ManageLinks, ManageProjects};
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
        description: "Start here. Without project_id: every project the owner enabled for connected agents, each with the Graph sessions its desktops share (run one with run_graph_session), and the owner's chat links (the chat_link_id the task tools take; pick the link named for this conversation, or ask the user which). With project_id: that project's sessions. Sessions are as of the desktop's last sync: an empty list is normal until the owner shares a session from the desktop.",
        annotations: Annotations::READ,
        dynamodb_actions: &["dynamodb:GetItem", "dynamodb:Query"],
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
    /// The connected project (UUID); omit it to list every project, its sessions and the chat links.
    #[schemars(extend("format" = "uuid"))]
    #[serde(default)]
    pub project_id: Option<String>,
    /// Most sessions to return, 1 to 50 (default 50).
    #[schemars(range(min = 1, max = 50))]
    #[serde(default)]
    pub limit: Option<i64>,
}

impl ToolInput for ListGraphSessionsInput {
    type Args = (Option<ProjectId>, usize);
    fn check(self) -> Result<(Option<ProjectId>, usize), String> {
        let p = match self.project_id {
            Some(p) => Some(field(ProjectId::parse("project_id", &p))?),
            None => None,
        };
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

/// A project enabled for connected agents, with its shared sessions.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ProjectOutput {
    /// The project (the `project_id` other tools take).
    pub project_id: String,
    /// Its name, as the owner gave it.
    pub name: String,
    /// Shared sessions as of the desktops' last sync (at most `limit`).
    pub sessions: Vec<GraphSessionOutput>,
}

/// One of the owner's chat links.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ChatLinkOutput {
    /// The link (the `chat_link_id` the task tools take).
    pub chat_link_id: String,
    /// Its name, as the owner gave it (often the conversation's title).
    pub name: String,
    /// The project it belongs to.
    pub project_id: String,
}

/// Output of `list_graph_sessions`: with `project_id`, that project and its sessions; without,
/// the projects and the chat links.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GraphSessionsOutput {
    /// The project asked for (with `project_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Its shared sessions as of the desktop's last sync (with `project_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Vec<GraphSessionOutput>>,
    /// Every project enabled for connected agents, oldest first (without `project_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projects: Option<Vec<ProjectOutput>>,
    /// The owner's chat links, oldest first (without `project_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_links: Option<Vec<ChatLinkOutput>>,
}

/// Most projects and most chat links a listing without `project_id` names.
pub const MAX_LISTED: usize = 50;

fn sessions_out(sessions: Vec<domain::runs::SessionMeta>, limit: usize) -> Vec<GraphSessionOutput> {
    sessions
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
        .collect()
}

impl<S: ManageProjects + ManageLinks + ?Sized> Handler<S> for ListGraphSessions {
    async fn run(
        deps: &ToolDeps<S>,
        caller: Caller<'_>,
        (project, limit): (Option<ProjectId>, usize),
    ) -> Handled<GraphSessionsOutput> {
        if let Some(project) = project {
            let sessions = match deps.store.get_project(caller.owner, project).await? {
                Some(p) if p.enabled => p.sessions,
                // A disabled or unknown project shows nothing, like a project nothing is shared in.
                _ => Vec::new(),
            };
            return Ok(Ok(GraphSessionsOutput {
                project_id: Some(project.to_string()),
                sessions: Some(sessions_out(sessions, limit)),
                projects: None,
                chat_links: None,
            }));
        }
        let mut projects = deps.store.list_projects(caller.owner).await?;
        projects.retain(|p| p.enabled);
        projects.sort_by_key(|p| (p.created_at, p.project_id));
        let links = deps.store.list_links(caller.owner).await?;
        Ok(Ok(GraphSessionsOutput {
            project_id: None,
            sessions: None,
            projects: Some(
                projects
                    .into_iter()
                    .take(MAX_LISTED)
                    .map(|p| ProjectOutput {
                        project_id: p.project_id.to_string(),
                        name: p.name,
                        sessions: sessions_out(p.sessions, limit),
                    })
                    .collect(),
            ),
            chat_links: Some(
                links
                    .into_iter()
                    .take(MAX_LISTED)
                    .map(|l| ChatLinkOutput {
                        chat_link_id: l.link_id.to_string(),
                        name: l.name,
                        project_id: l.project_id.to_string(),
                    })
                    .collect(),
            ),
        }))
    }
}
