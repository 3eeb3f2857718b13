//! Rows: column lists, decoding rows into domain types, and the reads by key every write uses.

use rusqlite::{Connection, OptionalExtension, Row};

use domain::clock::Timestamp;
use domain::devices::Device;
use domain::events::OutboxEntry;
use domain::ids::{AgentId, ChatLinkId, ClaimId, CommandId, GraphSessionId, OwnerId, ProjectId, TaskId};
use domain::projects::{ChatLink, Project};
use domain::runs::{Run, RunStatus, SessionMeta};
use domain::tasks::{Task, TaskStatus};

use crate::error::corrupt;

// ---- row mapping -------------------------------------------------------------------------

pub(crate) fn ts(v: i64) -> Timestamp {
    Timestamp::from_millis(v)
}

pub(crate) fn opt_ts(v: Option<i64>) -> Option<Timestamp> {
    v.map(Timestamp::from_millis)
}

pub(crate) fn col<T>(
    row: &Row<'_>,
    idx: usize,
    what: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> rusqlite::Result<T> {
    let s: String = row.get(idx)?;
    parse(&s).ok_or_else(|| corrupt(idx, what))
}

pub(crate) fn opt_col<T>(
    row: &Row<'_>,
    idx: usize,
    what: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> rusqlite::Result<Option<T>> {
    let s: Option<String> = row.get(idx)?;
    s.map(|s| parse(&s).ok_or_else(|| corrupt(idx, what))).transpose()
}

pub(crate) const PROJECT_COLS: &str = "project_id, owner, name, enabled, sessions, last_sync_at, created_at, durations";

/// [`PROJECT_COLS`] and, last, every device's list as one JSON object (device id → sessions):
/// what [`project_row`] reads.
pub(crate) const PROJECT_SELECT: &str = "project_id, owner, name, enabled, sessions, last_sync_at, created_at, durations, \
     (SELECT json_group_object(device_id, json(sessions)) FROM device_sessions \
      WHERE device_sessions.project_id = projects.project_id)";

pub(crate) fn project_row(row: &Row<'_>) -> rusqlite::Result<Project> {
    Ok(Project {
        project_id: col(row, 0, "project_id", |s| ProjectId::parse("project_id", s).ok())?,
        owner: col(row, 1, "owner", |s| OwnerId::new(s).ok())?,
        name: row.get(2)?,
        enabled: row.get(3)?,
        sessions: col(row, 4, "sessions", |s| serde_json::from_str::<Vec<SessionMeta>>(s).ok())?,
        last_sync_at: opt_ts(row.get(5)?),
        created_at: ts(row.get(6)?),
        recent_durations: col(row, 7, "durations", |s| serde_json::from_str(s).ok())?,
        shared_by: domain::projects::shared_by(
            &opt_col(row, 8, "device_sessions", |s| serde_json::from_str::<domain::projects::DeviceShares>(s).ok())?
                .unwrap_or_default(),
        ),
    })
}

pub(crate) const RUN_COLS: &str = "command_id, owner, agent, project_id, graph_session_id, slug, arguments, status, \
     queued_at, expires_at, started_at, finished_at, execution_id, cancel_requested, last_heartbeat_at, completion, completion_hash, device_id, progress";

pub(crate) fn run_row(row: &Row<'_>) -> rusqlite::Result<Run> {
    Ok(Run {
        command_id: col(row, 0, "command_id", |s| CommandId::parse("command_id", s).ok())?,
        owner: col(row, 1, "owner", |s| OwnerId::new(s).ok())?,
        agent: col(row, 2, "agent", |s| Some(AgentId::from_stored(s)))?,
        project_id: col(row, 3, "project_id", |s| ProjectId::parse("project_id", s).ok())?,
        graph_session_id: col(row, 4, "graph_session_id", |s| GraphSessionId::parse("graph_session_id", s).ok())?,
        slug: row.get(5)?,
        arguments: col(row, 6, "arguments", |s| serde_json::from_str(s).ok())?,
        status: col(row, 7, "status", RunStatus::parse)?,
        queued_at: ts(row.get(8)?),
        expires_at: ts(row.get(9)?),
        started_at: opt_ts(row.get(10)?),
        finished_at: opt_ts(row.get(11)?),
        execution_id: row.get(12)?,
        cancel_requested: row.get(13)?,
        last_heartbeat_at: opt_ts(row.get(14)?),
        completion: opt_col(row, 15, "completion", |s| serde_json::from_str(s).ok())?,
        completion_hash: row.get(16)?,
        device_id: opt_col(row, 17, "device_id", |s| uuid::Uuid::parse_str(s).ok())?,
        progress: opt_col(row, 18, "progress", |s| serde_json::from_str(s).ok())?,
    })
}

pub(crate) const LINK_COLS: &str = "link_id, owner, project_id, name, created_at, subscription, desktop_tasks";

pub(crate) fn link_row(row: &Row<'_>) -> rusqlite::Result<ChatLink> {
    Ok(ChatLink {
        link_id: col(row, 0, "link_id", |s| ChatLinkId::parse("chat_link_id", s).ok())?,
        owner: col(row, 1, "owner", |s| OwnerId::new(s).ok())?,
        project_id: col(row, 2, "project_id", |s| ProjectId::parse("project_id", s).ok())?,
        name: row.get(3)?,
        created_at: ts(row.get(4)?),
        subscription: opt_col(row, 5, "subscription", |s| serde_json::from_str(s).ok())?,
        desktop_tasks: opt_col(row, 6, "desktop_tasks", domain::dispatch::DesktopTasks::decode)?,
    })
}

pub(crate) const TASK_COLS: &str = "task_id, link_id, owner, objective, status, created_at, expires_at, claim_id, \
     lease_until, result, result_hash, finished_at, link_deleted, claimed_at, origin";

pub(crate) fn task_row(row: &Row<'_>) -> rusqlite::Result<Task> {
    Ok(Task {
        task_id: col(row, 0, "task_id", |s| TaskId::parse("task_id", s).ok())?,
        link_id: col(row, 1, "link_id", |s| ChatLinkId::parse("chat_link_id", s).ok())?,
        owner: col(row, 2, "owner", |s| OwnerId::new(s).ok())?,
        objective: row.get(3)?,
        status: col(row, 4, "status", TaskStatus::parse)?,
        created_at: ts(row.get(5)?),
        expires_at: ts(row.get(6)?),
        claim_id: opt_col(row, 7, "claim_id", |s| ClaimId::parse("claim_id", s).ok())?,
        lease_until: opt_ts(row.get(8)?),
        result: row.get(9)?,
        result_hash: row.get(10)?,
        finished_at: opt_ts(row.get(11)?),
        link_deleted: row.get(12)?,
        claimed_at: opt_ts(row.get(13)?),
        origin: opt_col(row, 14, "origin", |s| serde_json::from_str(s).ok())?,
    })
}

pub(crate) fn get_run_tx(tx: &Connection, id: &str) -> rusqlite::Result<Option<Run>> {
    tx.prepare_cached(&format!("SELECT {RUN_COLS} FROM runs WHERE command_id = ?1"))?
        .query_row([id], run_row)
        .optional()
}

pub(crate) fn get_task_tx(tx: &Connection, link: &str, task: &str) -> rusqlite::Result<Option<Task>> {
    tx.prepare_cached(&format!("SELECT {TASK_COLS} FROM tasks WHERE task_id = ?1 AND link_id = ?2"))?
        .query_row([task, link], task_row)
        .optional()
}

pub(crate) fn get_project_tx(tx: &Connection, owner: &str, project: &str) -> rusqlite::Result<Option<Project>> {
    tx.prepare_cached(&format!("SELECT {PROJECT_SELECT} FROM projects WHERE project_id = ?1 AND owner = ?2"))?
        .query_row([project, owner], project_row)
        .optional()
}

pub(crate) fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

pub(crate) const DEVICE_COLS: &str = "device_id, owner, name, token_hash, created_at, revoked_at, last_seen_at, relay, paused_at, paused_until, pause_note, offline_since";

pub(crate) fn device_row(row: &Row<'_>) -> rusqlite::Result<Device> {
    Ok(Device {
        device_id: col(row, 0, "device_id", |s| uuid::Uuid::try_parse(s).ok())?,
        owner: col(row, 1, "owner", |s| OwnerId::new(s).ok())?,
        name: row.get(2)?,
        token_hash: row.get(3)?,
        created_at: ts(row.get(4)?),
        revoked_at: opt_ts(row.get(5)?),
        last_seen_at: opt_ts(row.get(6)?),
        relay: row.get::<_, Option<String>>(7)?.as_deref().and_then(domain::fleet::RelayReport::from_record),
        paused: match opt_ts(row.get(8)?) {
            None => None,
            Some(at) => Some(domain::devices::Pause {
                at,
                until: opt_ts(row.get(9)?),
                note: row.get::<_, Option<String>>(10)?.unwrap_or_default(),
            }),
        },
        offline_since: opt_ts(row.get(11)?),
    })
}

pub(crate) fn outbox_row(row: &Row<'_>) -> rusqlite::Result<OutboxEntry> {
    Ok(OutboxEntry {
        event: col(row, 0, "body", |s| serde_json::from_str(s).ok())?,
        attempts: u32::try_from(row.get::<_, i64>(1)?).unwrap_or(u32::MAX),
    })
}
