//! Least privilege, derived from the code: every tool runs through its real handler on
//! DynamoDB (the emulator), its requests are logged, and the IAM actions they need must equal
//! the tool's declared `dynamodb_actions()` — which the template test then holds the SAM
//! template to. A tool that starts making a new kind of request fails here until its
//! declaration (and so its IAM policy) says so; a declared action no path uses fails too.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use base64::Engine;
use foundry_tests::{Backend, Harness, test_policy};
use serde_json::json;
use shared::ids::{AgentId, GraphSessionId, IdempotencyKey, OwnerId};
use shared::runs::SessionMeta;
use shared::tasks::{AssignOutcome, AssignTask};
use shared::tools::{DirBlobStore, ToolCall, ToolDeps, ToolName, ToolReply, handle};

fn iam(op: &str) -> Vec<String> {
    match op {
        // Every transaction this code writes is made of Puts and ConditionChecks.
        "TransactWriteItems" => vec!["dynamodb:PutItem".into(), "dynamodb:ConditionCheckItem".into()],
        other => vec![format!("dynamodb:{other}")],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_uses_exactly_its_declared_dynamodb_actions() {
    let Some(h) = Harness::dynamo(test_policy()).await else { return };
    let Backend::Dynamo { log, .. } = &h.backend else { unreachable!() };
    let owner = OwnerId::new("perm-owner").unwrap();
    let agent = AgentId::new("perm-client", "perm-owner").unwrap();
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "c".repeat(32))).unwrap();
    let project = h.store.create_project(&owner, "P").await.unwrap();
    h.store.set_project_enabled(&owner, project.project_id, true).await.unwrap();
    let meta = SessionMeta {
        graph_session_id: gs.clone(),
        name: "G".into(),
        description: String::new(),
        slug: "g".into(),
        version: "1".into(),
        status: "ready".into(),
    };
    h.store.sync_sessions(&owner, project.project_id, &[meta]).await.unwrap();
    let link = h.store.create_link(&owner, project.project_id, "L").await.unwrap().unwrap().link_id;
    let assign = AssignTask { owner: owner.clone(), link_id: link, objective: "o".into(), idempotency_key: IdempotencyKey::parse("perm-task-1").unwrap() };
    let AssignOutcome::Assigned(task) = h.store.assign_task(&assign).await.unwrap() else { panic!() };
    let deps = ToolDeps { store: Arc::clone(&h.store), clock: h.clock.clone(), policy: h.policy, blobs: Arc::new(DirBlobStore(std::env::temp_dir().join("fc-perm-blobs"))) };

    let (p, l, t) = (project.project_id.to_string(), link.to_string(), task.task_id.to_string());
    let run_args = json!({"graph_session_id": gs.to_string(), "idempotency_key": "perm-run-1"});
    let mut seen: HashMap<ToolName, BTreeSet<String>> = HashMap::new();
    let mut command = String::new();
    let mut claim = String::new();
    // Every path that touches the store differently: first call, replay, rejection.
    let calls: Vec<(ToolName, serde_json::Value)> = vec![
        (ToolName::ListGraphSessions, json!({"project_id": p})),
        (ToolName::RunGraphSession, run_args.clone()),
        (ToolName::RunGraphSession, run_args.clone()),
        (ToolName::RunGraphSession, json!({"graph_session_id": gs.to_string(), "idempotency_key": "perm-run-2", "project_id": p})),
        (ToolName::RunGraphSession, json!({"graph_session_id": format!("gs_{}", "d".repeat(32)), "idempotency_key": "perm-run-3"})),
        (ToolName::GetGraphRun, json!({"command_id": "COMMAND"})),
        (ToolName::CancelGraphRun, json!({"command_id": "COMMAND"})),
        (ToolName::CancelGraphRun, json!({"command_id": "COMMAND"})),
        (ToolName::ListLinkedChatTasks, json!({"chat_link_id": l})),
        (ToolName::GetLinkedChatTask, json!({"chat_link_id": l, "task_id": t})),
        (ToolName::ClaimLinkedChatTask, json!({"chat_link_id": l, "task_id": t})),
        (ToolName::ClaimLinkedChatTask, json!({"chat_link_id": l, "task_id": t})),
        (ToolName::UploadLinkedChatArtifact, json!({"chat_link_id": l, "task_id": t, "claim_id": "CLAIM", "artifact_id": "a1", "name": "a.txt", "content_type": "text/plain", "content_base64": base64::engine::general_purpose::STANDARD.encode(b"x")})),
        (ToolName::UploadLinkedChatArtifact, json!({"chat_link_id": l, "task_id": t, "claim_id": "CLAIM", "artifact_id": "a1", "name": "a.txt", "content_type": "text/plain", "content_base64": base64::engine::general_purpose::STANDARD.encode(b"y")})),
        (ToolName::SubmitLinkedChatResult, json!({"chat_link_id": l, "task_id": t, "claim_id": "CLAIM", "status": "completed", "result": "r"})),
        (ToolName::SubmitLinkedChatResult, json!({"chat_link_id": l, "task_id": t, "claim_id": "CLAIM", "status": "completed", "result": "r"})),
    ];
    for (tool, args) in calls {
        let args: serde_json::Value =
            serde_json::from_str(&args.to_string().replace("COMMAND", &command).replace("CLAIM", &claim)).unwrap();
        log.take();
        let reply = handle(&deps, &ToolCall { tool, owner: owner.clone(), agent: agent.clone(), arguments: args }).await.unwrap();
        seen.entry(tool).or_default().extend(log.take().iter().flat_map(|op| iam(op)));
        if let ToolReply::Ok { structured } = &reply {
            if let Some(c) = structured.get("command_id").and_then(|v| v.as_str()) {
                command = c.to_owned();
            }
            if let Some(c) = structured.get("claim_id").and_then(|v| v.as_str()) {
                claim = c.to_owned();
            }
        }
        assert!(!matches!(reply, ToolReply::Invalid { .. }), "{tool:?}: {reply:?}");
    }
    for tool in ToolName::ALL {
        let declared: BTreeSet<String> = tool.dynamodb_actions().iter().map(|s| (*s).to_owned()).collect();
        let used = seen.remove(&tool).unwrap_or_default();
        eprintln!("{}: {:?}", tool.as_str(), used);
        assert_eq!(used, declared, "{}: IAM actions used vs declared", tool.as_str());
    }
}
