//! Uploads check the claim before storing bytes: a refused upload leaves no object behind, and
//! an artifact id can never be `.` or `..` (it is a path segment of the object key).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use base64::Engine;
use domain::clock::{ManualClock, SharedClock};
use domain::ids::{AgentId, IdempotencyKey, OwnerId};
use domain::store::{AssignTasks, ClaimTasks, ManageLinks, ManageProjects};
use domain::tasks::{AssignOutcome, AssignTask, ClaimOutcome};
use serde_json::json;
use store_sqlite::SqliteStore;
use tools::blobs::DirBlobStore;
use tools::{ToolCall, ToolDeps, ToolName, ToolReply, handle};

fn files(dir: &std::path::Path) -> usize {
    fn walk(p: &std::path::Path, n: &mut usize) {
        for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                walk(&e.path(), n);
            } else {
                *n += 1;
            }
        }
    }
    let mut n = 0;
    walk(dir, &mut n);
    n
}

#[tokio::test]
async fn a_refused_upload_stores_no_bytes_and_dot_ids_are_invalid() {
    let clock: SharedClock = Arc::new(ManualClock::starting_now());
    let store = Arc::new(SqliteStore::in_memory(clock.clone(), Default::default()).unwrap());
    let dir = std::env::temp_dir().join(format!("fc-uploads-{}", uuid::Uuid::new_v4()));
    let blobs = Arc::new(DirBlobStore::new(
        dir.clone(),
        "http://127.0.0.1:0",
        b"secret for upload test links....",
        clock.clone(),
    ));
    let deps =
        ToolDeps { store: store.clone(), clock, policy: Default::default(), blobs: Some(blobs), panel_url: None };
    let owner = OwnerId::new("o").unwrap();
    let p = store.create_project(&owner, "P").await.unwrap();
    let link = store.create_link(&owner, p.project_id, "L").await.unwrap().unwrap().link_id;
    let req = AssignTask {
        owner: owner.clone(),
        link_id: link,
        objective: "x".into(),
        idempotency_key: IdempotencyKey::parse("upload-key-1").unwrap(),
    };
    let AssignOutcome::Assigned(task) = store.assign_task(&req).await.unwrap() else { panic!() };
    let ClaimOutcome::Claimed { claim_id, .. } = store.claim_task(&owner, link, task.task_id).await.unwrap() else {
        panic!()
    };
    let upload = |artifact_id: &str, bytes: &[u8]| ToolCall {
        tool: ToolName::UploadLinkedChatArtifact,
        owner: owner.clone(),
        agent: AgentId::new("c", "o").unwrap(),
        arguments: json!({"chat_link_id": link.to_string(), "task_id": task.task_id.to_string(),
            "claim_id": claim_id.to_string(), "artifact_id": artifact_id, "name": "a.txt", "content_type": "text/plain",
            "content_base64": base64::engine::general_purpose::STANDARD.encode(bytes)}),
        request_id: None,
    };
    let ok = handle(&deps, &upload("first", b"one")).await.unwrap();
    assert!(matches!(ok, ToolReply::Ok { .. }), "{ok:?}");
    assert_eq!(files(&dir), 1);
    for bad in [".", "..", "..."] {
        let reply = handle(&deps, &upload(bad, b"x")).await.unwrap();
        assert!(
            matches!(&reply, ToolReply::Invalid { message } if message.starts_with("artifact_id:")),
            "{bad}: {reply:?}"
        );
    }
    store.cancel_task(&owner, link, task.task_id).await.unwrap();
    let refused = handle(&deps, &upload("second", b"two")).await.unwrap();
    assert_eq!(refused, ToolReply::Rejected { message: "rejected: task is cancelled".into() });
    assert_eq!(files(&dir), 1, "a refused upload stored its bytes");
    // The first upload's retry is still a replay (nothing stored again).
    let replay = handle(&deps, &upload("first", b"one")).await.unwrap();
    assert!(matches!(&replay, ToolReply::Ok { structured } if structured["replayed"] == true), "{replay:?}");
    let other = handle(&deps, &upload("first", b"changed")).await.unwrap();
    assert!(matches!(other, ToolReply::Rejected { .. }));
    assert_eq!(files(&dir), 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_local_token_secret_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let running = foundry_tests::LocalServer::default("fc-secret").await;
    let mode = std::fs::metadata(running.data_dir.join("local-token-secret")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the token secret is mode {mode:o}");
    running.stop().await;
}
