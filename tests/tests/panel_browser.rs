//! The owner's web panel in a real browser: Debian's Chromium driven by Playwright (Python,
//! pinned), against the local server, with the official Python MCP SDK as the chat on the other
//! side (`tests/browser/panel_check.py` holds the scenario). `infra/test.sh` installs Chromium
//! and the pinned packages (`infra/browser.sh`) and passes `FOUNDRY_PYTHON_BROWSER`.
//!
//! Also measured here (printed, not asserted): the bytes of a 50-task list response.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use local::LocalConfig;
use serde_json::{Value, json};

/// The first load's bounds docs/panel.md states: under this many KB, in exactly this many requests.
const FIRST_LOAD_KB: u64 = 56;
const FIRST_LOAD_REQUESTS: u64 = 6;
/// A 50-task list response is under this many KB (docs/panel.md).
const LIST_KB: u64 = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_panel_does_the_owners_work_in_a_real_browser() {
    let Some(python) = std::env::var_os("FOUNDRY_PYTHON_BROWSER") else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "FOUNDRY_PYTHON_BROWSER is not set under CI=true");
        eprintln!(
            "\n*** SKIPPING: FOUNDRY_PYTHON_BROWSER is not set; ./infra/test.sh installs Chromium and Playwright. ***\n"
        );
        return;
    };
    let chromium = std::env::var("FOUNDRY_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    // axe-core, pinned in infra/conformance (npm): the scenario scans every state it visits.
    let Some(axe) = std::env::var_os("FOUNDRY_AXE_JS") else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "FOUNDRY_AXE_JS is not set under CI=true");
        eprintln!("\n*** SKIPPING: FOUNDRY_AXE_JS is not set; ./infra/test.sh installs axe-core. ***\n");
        return;
    };
    let running =
        foundry_tests::LocalServer::start("foundry-panel", |at| LocalConfig { panel_refresh_seconds: 1, ..at }).await;
    let dir = running.dir.clone();
    let screenshot = std::env::var("FOUNDRY_PANEL_SCREENSHOT")
        .unwrap_or_else(|_| dir.join("panel.png").to_string_lossy().into_owned());
    // A desktop asks to be paired; the scenario approves it in the panel.
    let http = foundry_tests::http();
    let pairs = format!("{}{}/pairings", running.base_url, domain::relay::PREFIX);
    let body = json!({"name": "Browser desktop", "os": "linux", "arch": "x86_64", "token_sha256": "c".repeat(64)});
    let pairing: Value = http.post(&pairs).json(&body).send().await.unwrap().json().await.unwrap();
    // The server's own desktop syncs once, as a relay does (its report of itself in the header):
    // the scenario finds it online, with its version, platform and host, the newer build its
    // last update check saw published, and the two sessions it cannot use now.
    let report = domain::fleet::RelayReport {
        version: "0.4.0-ci".into(),
        platform: "linux-x86_64".into(),
        host: "ci-host".into(),
        doorbell: false,
        update: Some("0.5.0-ci".into()),
        slots: Some(3),
        unavailable: Some(2),
    };
    let synced = http
        .post(format!("{}{}/sync", running.base_url, domain::relay::PREFIX))
        .bearer_auth(&running.device_token)
        .header(domain::fleet::RELAY_HEADER, report.header_value())
        .json(&json!({"project_id": running.demo.project_id, "sessions": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(synced.status(), 200);
    // A desktop running a run: it shares a session, is handed the run and starts it (a relay
    // does not sync again until the run ends). The scenario finds it busy, with the session.
    use domain::store::{ManageDevices, QueueRuns};
    let owner = running.demo.owner.clone();
    let (busy_token, hash) = domain::devices::new_token().unwrap();
    running.store.create_device(&owner, "Busy desktop", &hash).await.unwrap();
    let gs = format!("gs_{}", "d".repeat(32));
    let monthly = format!("gs_{}", "e".repeat(32));
    let share = json!({"project_id": running.demo.project_id,
        "sessions": [{"graph_session_id": gs, "name": "Quarterly numbers", "slug": "quarterly"},
                     {"graph_session_id": monthly, "name": "Monthly digest", "slug": "monthly"}]});
    let relay = format!("{}{}", running.base_url, domain::relay::PREFIX);
    let synced = http.post(format!("{relay}/sync")).bearer_auth(&busy_token).json(&share).send().await.unwrap();
    assert_eq!(synced.status(), 200);
    let queued = domain::runs::QueueRun {
        owner: owner.clone(),
        agent: domain::ids::AgentId::new("panel-check", owner.as_str()).unwrap(),
        project_id: None,
        graph_session_id: domain::ids::GraphSessionId::parse("g", &gs).unwrap(),
        arguments: json!({}),
        idempotency_key: domain::ids::IdempotencyKey::parse("panel-busy-run").unwrap(),
    };
    let domain::runs::QueueOutcome::Queued(run) = running.store.queue_run(&queued).await.unwrap() else { panic!() };
    // A run of the other session waits, queued: the scenario cancels it from the runs table.
    let waiting = domain::runs::QueueRun {
        graph_session_id: domain::ids::GraphSessionId::parse("g", &monthly).unwrap(),
        idempotency_key: domain::ids::IdempotencyKey::parse("panel-queued-run").unwrap(),
        ..queued.clone()
    };
    let domain::runs::QueueOutcome::Queued(waiting) = running.store.queue_run(&waiting).await.unwrap() else {
        panic!()
    };
    let started = http
        .post(format!("{relay}/commands/{}/start", run.command_id))
        .bearer_auth(&busy_token)
        .json(&json!({"execution_id": "panel-exec"}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 200);
    // Its Graph's progress, as the relay forwards it, with a log line that looks like markup:
    // the runs table shows the words and a bar, and the line only as text.
    let progress = json!({"execution_id": "panel-exec", "progress": {"message": "Crunching Q3", "fraction": 0.4,
        "tail": ["loaded 1,204 rows", "<img src=x onerror=alert(1)>"]}});
    let reported = http
        .post(format!("{relay}/commands/{}/control", run.command_id))
        .bearer_auth(&busy_token)
        .json(&progress)
        .send()
        .await
        .unwrap();
    assert_eq!(reported.status(), 200);
    // A desktop made forty days ago and never connected since (its date set in the database,
    // as forty days of waiting would): the scenario finds it stale and removes it.
    let (_, hash) = domain::devices::new_token().unwrap();
    let gone = running.store.create_device(&owner, "Gone desktop", &hash).await.unwrap();
    let forty_days_ago =
        domain::clock::Clock::now(&domain::clock::SystemClock).minus(std::time::Duration::from_secs(40 * 24 * 3600));
    foundry_tests::raw_sqlite(&running.data_dir.join("foundry.sqlite3"))
        .unwrap()
        .execute(
            "UPDATE devices SET created_at = ?1 WHERE device_id = ?2",
            rusqlite::params![forty_days_ago.as_millis(), gone.device_id.to_string()],
        )
        .unwrap();
    let mut scenario = tokio::process::Command::new(&python);
    scenario
        .env("FC_PAIR_URL", pairing["verification_uri_complete"].as_str().unwrap())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/browser/panel_check.py"))
        .env("FC_PANEL_URL", &running.panel_url)
        .env("FC_MCP_URL", &running.mcp_url)
        .env("FC_MCP_TOKEN", &running.token)
        .env("FC_CHROMIUM", &chromium)
        .env("FC_SCREENSHOT", &screenshot)
        .env("FC_AXE_JS", &axe);
    let metrics = foundry_tests::python::run_scenario(scenario).await;
    eprintln!("panel: {metrics}");
    assert!(std::fs::metadata(&screenshot).map(|m| m.len() > 10_000).unwrap_or(false), "no screenshot");
    assert_eq!(metrics["paired_in_panel"], true, "{metrics}");
    assert_eq!(metrics["keyboard_journey"], true, "{metrics}");
    assert_eq!(metrics["axe_serious_or_critical"], 0, "{metrics}");
    assert_eq!(metrics["axe_minor_or_moderate"], json!([]), "{metrics}");
    // docs/panel.md's figures are the bounds and counts asserted here.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/panel.md")).unwrap();
    let states = metrics["axe_states_scanned"].as_u64().unwrap_or(0);
    let loaded = (metrics["first_load_bytes"].as_u64().unwrap_or(u64::MAX), metrics["first_load_requests"].as_u64());
    assert!(
        loaded.0 < FIRST_LOAD_KB * 1000 && loaded.1 == Some(FIRST_LOAD_REQUESTS),
        "first load {loaded:?}: {metrics}"
    );
    for said in [
        format!("experimental rules, in {states} states"),
        format!("| **under {FIRST_LOAD_KB} KB in {FIRST_LOAD_REQUESTS} requests** |"),
        format!("the whole first load is under {FIRST_LOAD_KB} KB"),
        format!("| **under {LIST_KB} KB**, about 300 bytes a task |"),
    ] {
        assert!(foundry_tests::says(&doc, &said), "docs/panel.md does not say {said:?} ({metrics})");
    }
    // "Connect a chat" said none had, then that one had, once a chat signed in on the consent page.
    assert_eq!(metrics["chat_connected_shown"], true, "{metrics}");
    // Ids with their Copy buttons (the project id copied is the API's), the "Add a desktop"
    // card with this server's commands, "Connect a chat" for a local server.
    for step in ["project_id_copied", "add_a_desktop", "connect_a_chat_local", "run_cancelled_in_panel"] {
        assert_eq!(metrics[step], true, "{step}: {metrics}");
    }
    // The run cancelled in the browser is cancelled for the chat that queued it.
    use domain::store::ReadRuns;
    let read = running.store.get_run(&queued.agent, waiting.command_id).await.unwrap().unwrap();
    assert_eq!(
        read.view(domain::clock::Clock::now(&domain::clock::SystemClock), &Default::default()).status,
        domain::runs::RunStatus::Cancelled
    );
    let chats = domain::store::ClientUse::chat_connections(&*running.store, &owner).await.unwrap();
    assert_eq!(chats.len(), 1, "{chats:?}");
    // The approval made in the browser is what the relay's poll redeems.
    let poll = json!({"device_code": pairing["device_code"]});
    let paired: Value = http.post(format!("{pairs}/token")).json(&poll).send().await.unwrap().json().await.unwrap();
    assert_eq!(paired["device_name"], "Browser desktop", "{paired}");
    // The removal made in the browser: the device is gone from the store.
    let left = running.store.list_devices(&owner).await.unwrap();
    assert!(left.iter().all(|d| d.device_id != gone.device_id), "the removed desktop is still stored");
    assert!(left.iter().any(|d| d.name == "Busy desktop"));

    // The bytes of a 50-task list page, with objectives of a realistic length.
    let link = running.demo.chat_link_id;
    for i in 0..50 {
        let body = json!({
            "objective": format!("Prepare the weekly summary of customer feedback for region {i:02} and flag urgent items"),
            "idempotency_key": format!("bytes-measure-{i:03}"),
        });
        let res = http
            .post(format!("{}/owner/links/{link}/tasks", running.base_url))
            .bearer_auth(&running.owner_token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success());
    }
    let page = http
        .get(format!("{}/owner/links/{link}/tasks?limit=50", running.base_url))
        .bearer_auth(&running.owner_token)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let parsed: Value = serde_json::from_slice(&page).unwrap();
    assert_eq!(parsed["tasks"].as_array().unwrap().len(), 50);
    eprintln!("a 50-task list response: {} bytes ({} per task)", page.len(), page.len() / 50);
    assert!(page.len() < LIST_KB as usize * 1000, "a 50-task list response of {} bytes", page.len());
    assert!((250..=350).contains(&(page.len() / 50)), "about 300 bytes a task: {}", page.len() / 50);
    running.stop().await;
}
