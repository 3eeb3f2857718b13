//! Real MCP clients that were not written here: the official Python SDK, 2.x (auto mode →
//! 2026-07-28) and 1.x (2025-11-25 handshake), each listing the tools and calling every tool
//! against the local server. `infra/test.sh` installs both, pinned, and passes their
//! interpreters in `FOUNDRY_PYTHON_MCP2` / `FOUNDRY_PYTHON_MCP1`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use domain::ids::{AgentId, CommandId, GraphSessionId};
use domain::runs::{RunStatus, SessionMeta};
use domain::store::{ReadRuns, ReadTasks, SyncSessions};
use domain::tasks::TaskStatus;
use serde_json::Value;

async fn drive(python_var: &str, expected_protocol: &str) {
    let Some(python) = std::env::var_os(python_var) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{python_var} is not set under CI=true (use infra/test.sh)"
        );
        eprintln!(
            "\n*** SKIPPING: {python_var} is not set; ./infra/test.sh installs the pinned Python MCP SDKs. ***\n"
        );
        return;
    };
    let running = foundry_tests::LocalServer::default("foundry-py").await;
    let demo = running.demo.clone();
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "ab".repeat(16))).unwrap();
    let meta = SessionMeta {
        graph_session_id: gs.clone(),
        name: "Weekly report".into(),
        description: "Drafts the weekly report".into(),
        slug: "weekly-report".into(),
        version: "3".into(),
        status: "ready".into(),
    };
    running.store.sync_sessions(&demo.owner, demo.project_id, foundry_tests::TEST_DEVICE, &[meta]).await.unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/mcp_client_check.py");
    let out = tokio::process::Command::new(&python)
        .arg(script)
        .env("FC_URL", &running.mcp_url)
        .env("FC_TOKEN", &running.token)
        .env("FC_PROJECT", demo.project_id.to_string())
        .env("FC_LINK", demo.chat_link_id.to_string())
        .env("FC_TASK", demo.task_id.unwrap().to_string())
        .env("FC_SESSION", gs.to_string())
        .env("FC_KEY", format!("py-{}", uuid::Uuid::new_v4()))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{python_var} client failed:\n{stdout}\n{stderr}");
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    eprintln!("{python_var}: {seen}");
    assert_eq!(seen["protocol"], expected_protocol);
    assert_eq!(seen["tools"], 9);
    // What the client did is in the store.
    let agent = AgentId::new(local::LOCAL_CLIENT, local::DEMO_OWNER).unwrap();
    let id = CommandId::parse("command_id", seen["command_id"].as_str().unwrap()).unwrap();
    let run = running.store.get_run(&agent, id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    let task = running.store.get_task(&demo.owner, demo.chat_link_id, demo.task_id.unwrap()).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Completed);
    running.stop().await;
}

#[tokio::test]
async fn python_sdk_2x_auto_mode_speaks_2026_07_28() {
    drive("FOUNDRY_PYTHON_MCP2", "2026-07-28").await;
}

#[tokio::test]
async fn python_sdk_1x_speaks_2025_11_25() {
    drive("FOUNDRY_PYTHON_MCP1", "2025-11-25").await;
}
