//! The table's key layout, in one place: every item's `pk`/`sk`, every partition a query names,
//! every index key (the sort-key bound that leaves expired items out of an index query is
//! `dynamo_item::expiring`'s, with the query itself).
//! No other module of this crate formats a key; the idempotency records' (`IDEM#…`) are
//! `dynamo_item::idempotency`'s, which keeps those records.

use std::collections::HashMap;

use domain::clock::Timestamp;
use domain::ids::{ChatLinkId, CommandId, OwnerId, ProjectId, TaskId};
use domain::tasks::ArtifactRecord;

use crate::codec::{Item, s};
pub(crate) use dynamo_item::expiring::{expiring_sort_key, queued_up_to, ttl_at};

pub(crate) fn key(pk: String, sk: impl Into<String>) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

// ---- partitions (a `Query` names one) --------------------------------------------------------

/// The owner's items: projects, chat links, devices (`PROJECT#`, `LINK#`, `DEVICE#` sort keys).
pub(crate) fn owner_partition(owner: &OwnerId) -> String {
    format!("OWNER#{owner}")
}

/// A chat link's items: its tasks (`TASK#`) and their artifacts (`ARTIFACT#`).
pub(crate) fn link_partition(link: ChatLinkId) -> String {
    format!("LINK#{link}")
}

/// The owner's open doorbell sockets (`CONN#<id>` sort keys).
pub(crate) fn doorbell_partition(owner: &OwnerId) -> String {
    format!("DOORBELL#{owner}")
}

/// The owner's latest delivery per chat link (the link id as the sort key).
pub(crate) fn delivery_partition(owner: &OwnerId) -> String {
    format!("DELIVERY#{owner}")
}

/// The queue index's partition of a project (`gsi1pk`).
pub(crate) fn queue_partition(project: ProjectId) -> String {
    format!("QUEUE#{project}")
}

/// The open-tasks index's partition of a chat link (`gsi2pk`).
pub(crate) fn open_tasks_partition(link: ChatLinkId) -> String {
    format!("OPEN#{link}")
}

/// The owner-runs index's partition (`gsi3pk`).
pub(crate) fn owner_runs_partition(owner: &OwnerId) -> String {
    format!("RUNS#{owner}")
}

/// The sort keys of a task's artifacts begin with this.
pub(crate) fn artifacts_prefix(task: TaskId) -> String {
    format!("ARTIFACT#{task}#")
}

/// The upper bound of a page of a link's tasks, newest first: below `before`, or all of them.
pub(crate) fn tasks_before(before: Option<TaskId>) -> String {
    before.map_or_else(|| "TASK#~".to_owned(), |t| format!("TASK#{t}"))
}

// ---- items -----------------------------------------------------------------------------------

pub(crate) fn project_key(owner: &OwnerId, project: ProjectId) -> Item {
    key(owner_partition(owner), format!("PROJECT#{project}"))
}

pub(crate) fn link_key(owner: &OwnerId, link: ChatLinkId) -> Item {
    key(owner_partition(owner), format!("LINK#{link}"))
}

pub(crate) fn run_key(command: CommandId) -> Item {
    key(format!("RUN#{command}"), "RUN")
}

pub(crate) fn task_key(link: ChatLinkId, task: TaskId) -> Item {
    key(link_partition(link), format!("TASK#{task}"))
}

pub(crate) fn artifact_key(r: &ArtifactRecord) -> Item {
    key(link_partition(r.link_id), format!("ARTIFACT#{}#{}", r.task_id, r.artifact_id))
}

pub(crate) fn device_key(owner: &OwnerId, device: uuid::Uuid) -> Item {
    key(owner_partition(owner), format!("DEVICE#{device}"))
}

pub(crate) fn client_use_key(client_id: &str) -> Item {
    key(format!("CLIENT#{client_id}"), "USED")
}

/// The chats issued a token for an owner (`CHAT#<sha256(client_id)>`: ids may be long URLs),
/// under `CLIENT#`, where the token facade's function may write.
pub(crate) fn chat_connections_partition(owner: &OwnerId) -> String {
    format!("CLIENT#CHATS#{owner}")
}

pub(crate) fn chat_connection_key(owner: &OwnerId, client_id: &str) -> Item {
    key(chat_connections_partition(owner), format!("CHAT#{}", domain::runs::sha256_hex(client_id.as_bytes())))
}

/// A host seen for an owner, beside its chats (`HOST#<sha256(client_id, name)>`): the prefix
/// 0.2.0's chat listing queries (`CHAT#`) never holds one.
pub(crate) fn host_seen_key(owner: &OwnerId, client_id: &str, name: &str) -> Item {
    let id = domain::runs::sha256_hex(format!("{client_id}\n{name}").as_bytes());
    key(chat_connections_partition(owner), format!("HOST#{id}"))
}

/// A registered client's redirect URIs, beside its use (`CLIENT#<client_id>`).
pub(crate) fn client_redirects_key(client_id: &str) -> Item {
    key(format!("CLIENT#{client_id}"), "REDIRECTS")
}

/// The last good copy of a client metadata document, by the hash of its URL.
pub(crate) fn document_copy_key(url: &str) -> Item {
    key(format!("CLIENT#DOC#{}", domain::runs::sha256_hex(url.as_bytes())), "COPY")
}

/// An authorization flow of the cloud facade (under `CLIENT#`, where its function may write).
pub(crate) fn flow_key(flow: &str) -> Item {
    key(format!("CLIENT#FLOW#{flow}"), "FLOW")
}

/// The app client of a client metadata document, by the hash of its URL (URLs are long).
pub(crate) fn metadata_client_key(url: &str) -> Item {
    key(format!("CLIENT#DOC#{}", domain::runs::sha256_hex(url.as_bytes())), "DOC")
}

pub(crate) fn pairing_key(code: &str) -> Item {
    key(format!("PAIR#{code}"), "PAIR")
}

pub(crate) fn pairing_source_key(window: &str) -> Item {
    key(format!("PAIRSRC#{window}"), "PAIRSRC")
}

pub(crate) fn attempts_key(counter: &str, window_end: Timestamp) -> Item {
    key(format!("ATTEMPTS#{counter}#{}", window_end.as_millis()), "ATTEMPTS")
}

/// A doorbell socket under its owner (one query for a ring).
pub(crate) fn socket_of_owner_key(owner: &OwnerId, connection_id: &str) -> Item {
    key(doorbell_partition(owner), format!("CONN#{connection_id}"))
}

/// A doorbell socket by its id alone (`$disconnect` knows only the id).
pub(crate) fn socket_key(connection_id: &str) -> Item {
    key(format!("DBCONN#{connection_id}"), "DBCONN")
}

/// The latest delivery to a chat link.
pub(crate) fn delivery_key(owner: &OwnerId, link: ChatLinkId) -> Item {
    key(delivery_partition(owner), link.to_string())
}

pub(crate) fn token_key(hash: &str) -> Item {
    key(format!("DEVTOKEN#{hash}"), "DEVTOKEN")
}
