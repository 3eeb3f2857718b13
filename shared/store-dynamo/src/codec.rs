//! Attribute values and items: building them, and decoding items into domain types.

use aws_sdk_dynamodb::types::AttributeValue;

use domain::devices::Device;
use domain::ids::{AgentId, ChatLinkId, ClaimId, CommandId, GraphSessionId, OwnerId, ProjectId, TaskId};
use domain::projects::{ChatLink, Project};
use domain::runs::{Completion, Run, RunStatus, SessionMeta};
use domain::store::StoreResult;
use domain::tasks::{Task, TaskStatus};

pub use dynamo_item::{Item, Read, b, bad, n, s, values};

pub(crate) fn project_from(item: &Item) -> StoreResult<Project> {
    let r = Read(item);
    Ok(Project {
        project_id: r.parse("project_id", |v| ProjectId::parse("project_id", v).ok())?,
        owner: r.parse("owner", |v| OwnerId::new(v).ok())?,
        name: r.s("name")?.to_owned(),
        enabled: r.bool("enabled"),
        sessions: r.parse("sessions", |v| serde_json::from_str::<Vec<SessionMeta>>(v).ok())?,
        last_sync_at: r.opt_ts("last_sync_at")?,
        created_at: r.ts("created_at")?,
        recent_durations: match item.get("durations") {
            Some(AttributeValue::M(m)) => m
                .iter()
                .filter_map(|(k, v)| match v {
                    AttributeValue::N(n) => n.parse().ok().map(|ms| (k.clone(), ms)),
                    _ => None,
                })
                .collect(),
            _ => std::collections::BTreeMap::new(),
        },
        shared_by: domain::projects::shared_by(
            &r.opt_parse("device_shares", |v| serde_json::from_str::<domain::projects::DeviceShares>(v).ok())?
                .unwrap_or_default(),
        ),
    })
}

pub(crate) fn link_from(item: &Item) -> StoreResult<ChatLink> {
    let r = Read(item);
    Ok(ChatLink {
        link_id: r.parse("link_id", |v| ChatLinkId::parse("chat_link_id", v).ok())?,
        owner: r.parse("owner", |v| OwnerId::new(v).ok())?,
        project_id: r.parse("project_id", |v| ProjectId::parse("project_id", v).ok())?,
        name: r.s("name")?.to_owned(),
        created_at: r.ts("created_at")?,
        subscription: r.opt_parse("subscription", |v| serde_json::from_str(v).ok())?,
        desktop_tasks: r.opt_parse("desktop_tasks", domain::dispatch::DesktopTasks::decode)?,
    })
}

/// A live (not deleted) link item.
pub(crate) fn live_link(item: &Item) -> bool {
    !item.contains_key("deleted_at")
}

pub(crate) fn run_from(item: &Item) -> StoreResult<Run> {
    let r = Read(item);
    // The result is stored as its own attribute (not inside the completion JSON, where
    // escaping could inflate it past the item size limit).
    let completion = r.opt_parse("completion", |v| serde_json::from_str::<Completion>(v).ok())?.map(|mut c| {
        c.result = r.opt_s("result").map(str::to_owned);
        c
    });
    Ok(Run {
        command_id: r.parse("command_id", |v| CommandId::parse("command_id", v).ok())?,
        owner: r.parse("owner", |v| OwnerId::new(v).ok())?,
        agent: AgentId::from_stored(r.s("agent")?),
        project_id: r.parse("project_id", |v| ProjectId::parse("project_id", v).ok())?,
        graph_session_id: r.parse("graph_session_id", |v| GraphSessionId::parse("graph_session_id", v).ok())?,
        slug: r.s("slug")?.to_owned(),
        arguments: r.parse("arguments", |v| serde_json::from_str(v).ok())?,
        status: r.parse("status", RunStatus::parse)?,
        queued_at: r.ts("queued_at")?,
        expires_at: r.ts("expires_at")?,
        started_at: r.opt_ts("started_at")?,
        finished_at: r.opt_ts("finished_at")?,
        execution_id: r.opt_s("execution_id").map(str::to_owned),
        device_id: r.opt_parse("device_id", |v| uuid::Uuid::parse_str(v).ok())?,
        cancel_requested: r.bool("cancel_requested"),
        last_heartbeat_at: r.opt_ts("last_heartbeat_at")?,
        completion,
        completion_hash: r.opt_s("completion_hash").map(str::to_owned),
        progress: r.opt_parse("progress", |v| serde_json::from_str(v).ok())?,
    })
}

pub(crate) fn task_from(item: &Item) -> StoreResult<Task> {
    let r = Read(item);
    Ok(Task {
        task_id: r.parse("task_id", |v| TaskId::parse("task_id", v).ok())?,
        link_id: r.parse("link_id", |v| ChatLinkId::parse("chat_link_id", v).ok())?,
        owner: r.parse("owner", |v| OwnerId::new(v).ok())?,
        objective: r.s("objective")?.to_owned(),
        status: r.parse("status", TaskStatus::parse)?,
        created_at: r.ts("created_at")?,
        expires_at: r.ts("expires_at")?,
        claim_id: r.opt_parse("claim_id", |v| ClaimId::parse("claim_id", v).ok())?,
        lease_until: r.opt_ts("lease_until")?,
        claimed_at: r.opt_ts("claimed_at")?,
        result: r.opt_s("result").map(str::to_owned),
        result_hash: r.opt_s("result_hash").map(str::to_owned),
        finished_at: r.opt_ts("finished_at")?,
        link_deleted: r.bool("link_deleted"),
        origin: r.opt_parse("origin", |v| serde_json::from_str(v).ok())?,
    })
}

pub(crate) fn opt_from<T>(item: Option<&Item>, f: impl FnOnce(&Item) -> StoreResult<T>) -> StoreResult<Option<T>> {
    item.filter(|i| !i.is_empty()).map(f).transpose()
}

pub(crate) fn device_from(item: &Item) -> StoreResult<Device> {
    let r = Read(item);
    Ok(Device {
        device_id: r.parse("device_id", |v| uuid::Uuid::try_parse(v).ok())?,
        owner: r.parse("owner", |v| OwnerId::new(v).ok())?,
        name: r.s("name")?.to_owned(),
        token_hash: r.s("token_hash")?.to_owned(),
        created_at: r.ts("created_at")?,
        revoked_at: r.opt_ts("revoked_at")?,
        last_seen_at: r.opt_ts("last_seen_at")?,
        relay: r.opt_s("relay").and_then(domain::fleet::RelayReport::from_record),
        paused: match r.opt_ts("paused_at")? {
            None => None,
            Some(at) => Some(domain::devices::Pause {
                at,
                until: r.opt_ts("paused_until")?,
                note: r.opt_s("pause_note").unwrap_or_default().to_owned(),
            }),
        },
        offline_since: r.opt_ts("offline_since")?,
    })
}
