//! The table's key layout: every item's `pk`/`sk`, and the sort-key bound that leaves expired
//! items out of an index query.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use domain::clock::Timestamp;
use domain::ids::{ChatLinkId, CommandId, OwnerId, ProjectId, TaskId};
use domain::tasks::ArtifactRecord;

use crate::codec::{Item, n, s};

pub(crate) fn key(pk: String, sk: impl Into<String>) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

pub(crate) fn project_key(owner: &OwnerId, project: ProjectId) -> Item {
    key(format!("OWNER#{owner}"), format!("PROJECT#{project}"))
}

pub(crate) fn link_key(owner: &OwnerId, link: ChatLinkId) -> Item {
    key(format!("OWNER#{owner}"), format!("LINK#{link}"))
}

pub(crate) fn run_key(command: CommandId) -> Item {
    key(format!("RUN#{command}"), "RUN")
}

pub(crate) fn task_key(link: ChatLinkId, task: TaskId) -> Item {
    key(format!("LINK#{link}"), format!("TASK#{task}"))
}

pub(crate) fn idem_key(record: &str) -> Item {
    key(format!("IDEM#{record}"), "IDEM")
}

/// Sort-key bound that excludes items expiring at or before `now`.
pub(crate) fn unexpired_after(now: Timestamp) -> String {
    format!("{}#~", now.sortable())
}

pub(crate) fn ttl_at(t: Timestamp) -> AttributeValue {
    n(t.as_epoch_seconds())
}

pub(crate) fn artifact_key(r: &ArtifactRecord) -> Item {
    key(format!("LINK#{}", r.link_id), format!("ARTIFACT#{}#{}", r.task_id, r.artifact_id))
}

pub(crate) fn device_key(owner: &OwnerId, device: uuid::Uuid) -> Item {
    key(format!("OWNER#{owner}"), format!("DEVICE#{device}"))
}

pub(crate) fn client_use_key(client_id: &str) -> Item {
    key(format!("CLIENT#{client_id}"), "USED")
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

pub(crate) fn token_key(hash: &str) -> Item {
    key(format!("DEVTOKEN#{hash}"), "DEVTOKEN")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use domain::ids::CommandId;

    use super::*;

    #[test]
    fn unexpired_bound_excludes_items_expiring_now() {
        let now = Timestamp::from_millis(1_000);
        let expiring_now = format!("{}#{}", now.sortable(), CommandId::generate());
        let later = format!("{}#{}", now.plus(Duration::from_millis(1)).sortable(), CommandId::generate());
        assert!(expiring_now.as_str() < unexpired_after(now).as_str());
        assert!(later.as_str() > unexpired_after(now).as_str());
    }
}
