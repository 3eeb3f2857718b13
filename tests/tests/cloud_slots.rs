//! A desktop's parallel slots and a running Graph's progress on the deployed shape: the real
//! relay binary with `max_parallel = 3` against the real function binaries on moto's
//! DynamoDB (the fixture is `cloud_world`'s). The same scenario runs on the local server and
//! its embedded store in `relay_e2e::five_slots_run_five_at_once_each_cancellable_and_a_kill_loses_none`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use foundry_tests::graphs::{self, kill_group, process_alive, recorded_pid};
use foundry_tests::mcp::{rpc_2026, tasks_capability};
use foundry_tests::wait_until;
use serde_json::{Value, json};

use crate::cloud_world::{World, relay_config_with, session_toml, start_relay, world};

/// A run's `get_graph_run` answer (`structuredContent`), through `mcp` → Lambda Invoke.
async fn read(w: &World, id: &str) -> Value {
    w.tool("get_graph_run", json!({"command_id": id})).await["structuredContent"].clone()
}

/// Three runs queued at once — two as tools, one as a task of a task-aware client — are all
/// running at once on a desktop with three slots. Each Graph's progress and log line reach
/// `get_graph_run`, `tasks/get`'s status message and the owner's runs (the panel's table)
/// while it runs. `cancel_graph_run` stops only its run (its process group ends, the other two
/// run on), and a SIGKILL of the relay with two in flight loses neither: the restarted relay
/// reports each `relay restarted during run` and starts none again. Then `relay pause` and
/// `relay resume` set and end the desktop's pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_slots_run_three_at_once_each_cancellable_with_progress_and_a_kill_loses_none() {
    let Some(w) = world().await else { return };
    let project = w.enabled_project("Slots").await;
    let device = w.owner("POST", "/devices", json!({"name": "Desktop"})).await["token"].as_str().unwrap().to_owned();
    let gs = format!("gs_{}", uuid::Uuid::new_v4().simple());
    let pids = w.dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let script = graphs::waiting(&pids);
    let sessions = session_toml(&gs, "Waiter", &project, &["sh", "-c", &script]);
    let config = relay_config_with(&w, &device, "max_parallel = 3\n", &sessions);

    // Its first sync shares the session; the runs are queued while it is stopped, so its next
    // start finds all three in one pass (its sync says three slots are free).
    w.share_once(&config).await;
    let mut ids = Vec::new();
    for n in 0..2 {
        let args = json!({"graph_session_id": gs, "idempotency_key": format!("cloud-slot-{n}"), "arguments": {"n": n}});
        let queued = w.tool("run_graph_session", args).await;
        ids.push(queued["structuredContent"]["command_id"].as_str().unwrap_or_else(|| panic!("{queued}")).to_owned());
    }
    let url = format!("{}/mcp", w.emu.gateway);
    let call = json!({"name": "run_graph_session",
                      "arguments": {"graph_session_id": gs, "idempotency_key": "cloud-slot-2", "arguments": {"n": 2}}});
    let created =
        rpc_2026(&w.http, &url, &w.agent, "tools/call", Some("run_graph_session"), call, tasks_capability()).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    ids.push(task.clone());
    let mut relay = start_relay(&config);

    // Three in flight at once, each with its own progress and log line.
    for (n, id) in ids.iter().enumerate() {
        let run = wait_until(&format!("run {n}'s progress in get_graph_run"), Duration::from_secs(60), || async {
            let run = read(&w, id).await;
            // The first change is forwarded at once, the next within the 10 s window: wait for
            // the state with both the log line and the progress line.
            let p = &run["progress"];
            (p["message"] == graphs::PROGRESS.0 && p["tail"] == json!([format!("log of {n}")])).then_some(run)
        })
        .await;
        assert_eq!(run["progress"]["fraction"], graphs::PROGRESS.1, "{run}");
        assert!(run["progress"]["updated_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{run}");
    }
    for id in &ids {
        assert_eq!(read(&w, id).await["status"], "running", "three slots, three runs at once");
    }
    let params = json!({"taskId": task});
    let seen = rpc_2026(&w.http, &url, &w.agent, "tasks/get", Some(&task), params, tasks_capability()).await;
    assert_eq!(seen["result"]["statusMessage"], format!("running: {} (50%)", graphs::PROGRESS.0), "{seen}");
    let runs = w.owner("GET", "/runs", Value::Null).await;
    let shown = runs["runs"].as_array().unwrap().iter().filter(|r| r["progress"]["message"] == graphs::PROGRESS.0);
    assert_eq!(shown.count(), 3, "the owner's runs: {runs}");

    // Cancel one: its group stops, the other two run on.
    let cancelled_pid = recorded_pid(&pids.join("1")).await;
    let cancel = w.tool("cancel_graph_run", json!({"command_id": ids[1]})).await;
    assert!(cancel["isError"] != true, "{cancel}");
    wait_until("the cancelled run to read cancelled", Duration::from_secs(30), || async {
        (read(&w, &ids[1]).await["status"] == "cancelled").then_some(())
    })
    .await;
    wait_until("the cancelled run's group to end", Duration::from_secs(20), || async {
        (!process_alive(cancelled_pid)).then_some(())
    })
    .await;
    for n in [0, 2] {
        assert_eq!(read(&w, &ids[n]).await["status"], "running", "a cancel stopped run {n}");
    }

    // SIGKILL with two in flight, then a new relay: each is reported, none runs again.
    let orphans = [recorded_pid(&pids.join("0")).await, recorded_pid(&pids.join("2")).await];
    relay.kill().unwrap();
    relay.wait().unwrap();
    let mut second = start_relay(&config);
    for n in [0, 2] {
        let run = wait_until(&format!("run {n} to be reported"), Duration::from_secs(60), || async {
            let run = read(&w, &ids[n]).await;
            (run["status"] == "failed").then_some(run)
        })
        .await;
        assert_eq!(run["error"], "relay restarted during run", "{run}");
    }
    for pid in orphans {
        kill_group(pid);
    }
    for n in 0..3 {
        assert_eq!(graphs::starts(&pids, n), 1, "run {n} started again");
    }
    second.kill().unwrap();
    second.wait().unwrap();

    // `relay pause` and `relay resume` reach the relay function too (their routes were once
    // missing from the template: API Gateway answered 404).
    let bin = foundry_tests::built_binary("relay", &["relay/src", "shared/domain/src"]);
    let relay_cli = |args: &[&str]| {
        let out = std::process::Command::new(&bin).arg("--config").arg(&config).args(args).output().unwrap();
        assert!(out.status.success(), "relay {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let pause_note = || async {
        let devices = w.owner("GET", "/devices", Value::Null).await;
        devices["devices"][0]["paused"]["note"].clone()
    };
    relay_cli(&["pause", "--for", "1h", "--note", "slots done"]);
    assert_eq!(pause_note().await, "slots done");
    relay_cli(&["resume"]);
    assert_eq!(pause_note().await, Value::Null);
    let _ = std::fs::remove_dir_all(&w.dir);
}
