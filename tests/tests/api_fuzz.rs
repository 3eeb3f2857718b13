//! The published contract, checked from outside (issue 25, items 1 and 2).
//!
//! - `/openapi.json` is what `docs/openapi.json` pins (`FOUNDRY_OPENAPI_UPDATE=1` rewrites the
//!   file after a deliberate change), and openapi-spec-validator (PyPI, pinned) finds it valid.
//! - Schemathesis (PyPI, pinned in `infra/python-api.txt`) fuzzes every operation of both APIs
//!   from that document against the local server, with real owner and device tokens and real
//!   ids (links, tasks, queued and running commands, a waiting pairing) mixed into what it
//!   generates: no 5xx, every status and body as documented, invalid input refused, auth
//!   enforced, a deleted item gone. Its hooks (`tests/api/data_check.py`) add the data check:
//!   a refusal (4xx `{"error": "<field>: <rule>"}`) leaves every table as it was, events included.
//!   Seeded and bounded: `FOUNDRY_FUZZ_EXAMPLES` (default 40 per operation) and
//!   `FOUNDRY_FUZZ_SEED` (default 25) set the run; the soak in docs/results.md uses more.
//! - The MCP endpoint's JSON-RPC envelope gets generated input from `proptest`: arbitrary JSON
//!   bodies (and bytes that are not JSON) under arbitrary header sets. Nothing panics, and no
//!   answer is a 5xx.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

use foundry_tests::mcp::rpc_2026;
use local::{LocalConfig, Running};
use serde_json::{Value, json};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");

fn api_python() -> Option<PathBuf> {
    foundry_tests::python::sdk("FOUNDRY_PYTHON_API").map(PathBuf::from)
}

async fn start() -> (Running, PathBuf) {
    let dir = std::env::temp_dir().join(format!("foundry-api-fuzz-{}", uuid::Uuid::new_v4()));
    let running = local::start(LocalConfig::at(dir.clone())).await.unwrap();
    (running, dir)
}

#[test]
fn the_published_document_is_the_golden_file() {
    let now = serde_json::to_string_pretty(&service::openapi::document()).unwrap() + "\n";
    if std::env::var("FOUNDRY_OPENAPI_UPDATE").as_deref() == Ok("1") {
        std::fs::write(GOLDEN, &now).unwrap();
        return;
    }
    let pinned = std::fs::read_to_string(GOLDEN).unwrap_or_default();
    assert!(
        pinned == now,
        "docs/openapi.json is not the document the code builds: review the change, then run with FOUNDRY_OPENAPI_UPDATE=1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_is_valid_openapi_3_1_and_every_route_answers_as_routed() {
    let Some(python) = api_python() else { return };
    let (running, dir) = start().await;
    let http = reqwest::Client::new();
    let res = http.get(format!("{}{}", running.base_url, service::openapi::PATH)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    let served: Value = res.json().await.unwrap();
    assert_eq!(served, service::openapi::document());
    let file = dir.join("openapi.json");
    std::fs::write(&file, served.to_string()).unwrap();
    let check = "import sys, json\nfrom openapi_spec_validator import validate\nfrom openapi_spec_validator.validation.validators import OpenAPIV31SpecValidator\nd = json.load(open(sys.argv[1]))\nvalidate(d, cls=OpenAPIV31SpecValidator)\nprint(len(d['paths']))";
    let out = std::process::Command::new(&python).args(["-c", check]).arg(&file).output().unwrap();
    assert!(out.status.success(), "openapi-spec-validator: {}", String::from_utf8_lossy(&out.stderr));
    eprintln!("openapi.json: valid OpenAPI 3.1, {} paths", String::from_utf8_lossy(&out.stdout).trim());
    let other = http.post(format!("{}{}", running.base_url, service::openapi::PATH)).send().await.unwrap();
    assert_eq!(other.status(), 405);
    assert_eq!(other.headers()["allow"], "GET, HEAD");
    // A wrong method on a documented path is told which ones it has.
    let wrong = http
        .patch(format!("{}/owner/links/{}", running.base_url, running.demo.chat_link_id))
        .bearer_auth(&running.owner_token)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 405);
    assert_eq!(wrong.headers()["allow"], "GET, DELETE");
    running.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Real items for the fuzzer to find: ids it could never guess.
struct Seeded {
    links: Vec<String>,
    tasks: Vec<String>,
    commands: Vec<String>,
    projects: Vec<String>,
    devices: Vec<String>,
    user_codes: Vec<String>,
}

async fn seed(running: &Running) -> Seeded {
    let http = reqwest::Client::new();
    let base = &running.base_url;
    let owner = |r: reqwest::RequestBuilder| r.bearer_auth(&running.owner_token);
    let project = running.demo.project_id.to_string();
    // Two shared sessions on the demo project, then queued runs of them through MCP.
    let sessions: Vec<Value> = (0..2)
        .map(|i| json!({"graph_session_id": format!("gs_{:032x}", i + 1), "name": format!("Graph {i}"), "slug": format!("graph-{i}")}))
        .collect();
    let sync = json!({"project_id": project, "sessions": sessions});
    let relay = format!("{base}{}", domain::relay::PREFIX);
    let res = http.post(format!("{relay}/sync")).bearer_auth(&running.device_token).json(&sync).send().await.unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    let mut commands = Vec::new();
    for i in 0..8 {
        let args = json!({"name": "run_graph_session", "arguments": {
            "graph_session_id": format!("gs_{:032x}", i % 2 + 1), "idempotency_key": format!("fuzz-seed-run-{i:03}"),
            "project_id": project}});
        let v =
            rpc_2026(&http, &running.mcp_url, &running.token, "tools/call", Some("run_graph_session"), args, json!({}))
                .await;
        let id = v["result"]["structuredContent"]["command_id"].as_str().unwrap_or_else(|| panic!("{v}")).to_owned();
        commands.push(id);
    }
    // Half of them running (control and complete then reach their logic).
    for (i, c) in commands.iter().enumerate().take(4) {
        let start = json!({"execution_id": format!("exec-{i}")});
        let url = format!("{relay}/commands/{c}/start");
        let res = http.post(url).bearer_auth(&running.device_token).json(&start).send().await.unwrap();
        assert_eq!(res.status(), 200);
    }
    // Links (deletes take some; the rest stay for the others), each with tasks.
    let (mut links, mut tasks) = (vec![running.demo.chat_link_id.to_string()], Vec::new());
    for i in 0..6 {
        let body = json!({"project_id": project, "name": format!("Fuzz link {i}")});
        let v: Value =
            owner(http.post(format!("{base}/owner/links"))).json(&body).send().await.unwrap().json().await.unwrap();
        links.push(v["chat_link_id"].as_str().unwrap().to_owned());
    }
    for (i, l) in links.iter().enumerate() {
        for j in 0..2 {
            let body =
                json!({"objective": format!("Fuzz task {i}.{j}"), "idempotency_key": format!("fuzz-seed-{i}-{j}")});
            let res = owner(http.post(format!("{base}/owner/links/{l}/tasks"))).json(&body).send().await.unwrap();
            let v: Value = res.json().await.unwrap();
            tasks.push(v["task_id"].as_str().unwrap().to_owned());
        }
    }
    let mut devices = Vec::new();
    for i in 0..3 {
        let body = json!({"name": format!("Fuzz desktop {i}")});
        let v: Value =
            owner(http.post(format!("{base}/owner/devices"))).json(&body).send().await.unwrap().json().await.unwrap();
        devices.push(v["device_id"].as_str().unwrap().to_owned());
    }
    let mut user_codes = Vec::new();
    for i in 0..3 {
        let body = json!({"name": format!("Waiting desktop {i}"), "os": "linux", "arch": "x86_64", "token_sha256": format!("{i:064x}")});
        let v: Value = http.post(format!("{relay}/pairings")).json(&body).send().await.unwrap().json().await.unwrap();
        user_codes.push(v["user_code"].as_str().unwrap().to_owned());
    }
    Seeded { links, tasks, commands, projects: vec![project], devices, user_codes }
}

/// Every event the store ever writes, copied by a trigger (the notifier deletes delivered ones
/// from the outbox in the background, so the outbox itself cannot be compared).
fn log_events(db: &Path) {
    let c = rusqlite::Connection::open(db).unwrap();
    c.execute_batch(
        "CREATE TABLE fuzz_event_log (event_id TEXT NOT NULL, body TEXT NOT NULL);
         CREATE TRIGGER fuzz_event_logged AFTER INSERT ON event_outbox
         BEGIN INSERT INTO fuzz_event_log VALUES (new.event_id, new.body); END;",
    )
    .unwrap();
}

fn toml_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_failure_in_the_owner_and_relay_apis() {
    let Some(python) = api_python() else { return };
    let schemathesis = python.parent().unwrap().join("schemathesis");
    let examples: u32 = std::env::var("FOUNDRY_FUZZ_EXAMPLES").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let seed_value: u64 = std::env::var("FOUNDRY_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(25);
    let (running, dir) = start().await;
    let seeded = seed(&running).await;
    let db = running.data_dir.join("foundry.sqlite3");
    log_events(&db);
    let config = format!(
        r#"seed = {seed_value}
[auth.openapi.ownerToken]
bearer = "{owner}"
[auth.openapi.deviceToken]
bearer = "{device}"

[dictionaries.links]
values = {links}
[dictionaries.tasks]
values = {tasks}
[dictionaries.commands]
values = {commands}
[dictionaries.projects]
values = {projects}
[dictionaries.devices]
values = {devices}
[dictionaries.codes]
values = {codes}

[parameters]
"path.chat_link_id" = {{ dictionary = "links", probability = 0.8 }}
"path.task_id" = {{ dictionary = "tasks", probability = 0.8 }}
"path.command_id" = {{ dictionary = "commands", probability = 0.8 }}
"path.project_id" = {{ dictionary = "projects", probability = 0.8 }}
"path.device_id" = {{ dictionary = "devices", probability = 0.5 }}
"path.user_code" = {{ dictionary = "codes", probability = 0.5 }}
"body.project_id" = {{ dictionary = "projects", probability = 0.8 }}
"#,
        owner = running.owner_token,
        device = running.device_token,
        links = toml_list(&seeded.links),
        tasks = toml_list(&seeded.tasks),
        commands = toml_list(&seeded.commands),
        projects = toml_list(&seeded.projects),
        devices = toml_list(&seeded.devices),
        codes = toml_list(&seeded.user_codes),
    );
    let config_file = dir.join("schemathesis.toml");
    std::fs::write(&config_file, config).unwrap();
    let refusals = dir.join("refusals.log");
    let hooks = concat!(env!("CARGO_MANIFEST_DIR"), "/api");
    let out = tokio::process::Command::new(&schemathesis)
        .current_dir(&dir)
        .env("SCHEMATHESIS_HOOKS", "data_check")
        .env("PYTHONPATH", hooks)
        .env("FC_DB", &db)
        .env("FC_REFUSALS_LOG", &refusals)
        .env("NO_COLOR", "1")
        .arg("--config-file")
        .arg(&config_file)
        .args(["run", &format!("{}{}", running.base_url, service::openapi::PATH), "--url", &running.base_url])
        .args(["--max-examples", &examples.to_string(), "--workers", "1", "--checks", "all"])
        .args(["--exclude-checks", "positive_data_acceptance", "--request-timeout", "10"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout.lines().skip_while(|l| !l.contains("SUMMARY")).collect::<Vec<_>>().join("\n");
    eprintln!("{summary}");
    assert!(out.status.success(), "Schemathesis found failures:\n{stdout}\n{stderr}");
    let cases = stdout
        .lines()
        .find_map(|l| l.trim().split_once(" generated, ").and_then(|(n, _)| n.trim().parse::<u64>().ok()))
        .unwrap_or_else(|| panic!("no case count in:\n{stdout}"));
    let checked = std::fs::read_to_string(&refusals).unwrap_or_default().lines().count();
    eprintln!(
        "schemathesis: {cases} cases over {} operations, seed {seed_value}, {examples} examples each; {checked} refusals checked to have written nothing",
        service::openapi::document()["paths"]
            .as_object()
            .map_or(0, |p| p.values().map(|m| m.as_object().map_or(0, serde_json::Map::len)).sum::<usize>())
    );
    assert!(cases >= 1000, "only {cases} cases ran");
    assert!(checked >= 100, "the data check ran on only {checked} refusals");
    running.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
