//! The published contract, checked from outside (issue 25, items 1 and 2).
//!
//! - `/openapi.json` is what `docs/openapi.json` pins (`FOUNDRY_UPDATE=1` rewrites the
//!   file after a deliberate change), and openapi-spec-validator (PyPI, pinned) finds it valid.
//! - Schemathesis (PyPI, pinned in `infra/python-api.txt`) fuzzes every operation of both APIs
//!   from that document against the local server, with real owner and device tokens and real
//!   ids (links, tasks, queued and running commands, a waiting pairing) mixed into what it
//!   generates: no 5xx, every status and body as documented, invalid input refused, auth
//!   enforced, a deleted item gone. Its hooks (`tests/api/data_check.py`) add the data check:
//!   a refusal (4xx `{"error": "<field>: <rule>"}`) leaves every table as it was, events included.
//!   Seeded and bounded: `FOUNDRY_FUZZ_EXAMPLES` (default 40 per operation) and
//!   `FOUNDRY_FUZZ_SEED` (default 25) set the run; the soak (docs/api.md) uses more.
//! - The MCP endpoint's JSON-RPC envelope gets generated input from `proptest`: arbitrary JSON
//!   bodies (and bytes that are not JSON) under arbitrary header sets. Nothing panics, and no
//!   answer is a 5xx.
//!
//! Each fuzzer runs twice: from the fixed seed (the regression set: the same cases every run,
//! so a change that breaks one of them is caught at once) and from a rotating seed with a
//! smaller budget (new cases every run, so over many runs the fuzzing covers more than one
//! seed's cases). The rotating seed is printed before it is used; `FOUNDRY_FUZZ_ROTATING_SEED`
//! replays it.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

use foundry_tests::mcp::rpc_2026;
use local::Running;
use serde_json::{Value, json};

fn api_python() -> Option<PathBuf> {
    foundry_tests::python::sdk("FOUNDRY_PYTHON_API").map(PathBuf::from)
}

async fn start() -> (foundry_tests::LocalServer, PathBuf) {
    let running = foundry_tests::LocalServer::default("foundry-api-fuzz").await;
    let dir = running.dir.clone();
    (running, dir)
}

#[test]
fn the_published_document_is_the_golden_file() {
    let now = serde_json::to_string_pretty(&http_api::openapi::document()).unwrap() + "\n";
    foundry_tests::pinned("docs/openapi.json", &now);
}

/// docs/results.md's description of the contract is the document's: its paths, operations
/// (owner and relay), schemas and size.
#[test]
fn the_documented_contract_figures_are_the_documents() {
    let text = serde_json::to_string_pretty(&http_api::openapi::document()).unwrap() + "\n";
    let d: serde_json::Value = serde_json::from_str(&text).unwrap();
    let paths = d["paths"].as_object().unwrap();
    let ops: Vec<&str> = paths
        .iter()
        .flat_map(|(p, v)| {
            v.as_object()
                .unwrap()
                .keys()
                .filter(|m| ["get", "post", "put", "delete", "patch"].contains(&m.as_str()))
                .map(move |_| p.as_str())
        })
        .collect();
    let owner = ops.iter().filter(|p| p.starts_with("/owner")).count();
    let schemas = d["components"]["schemas"].as_object().unwrap().len();
    let kb = (text.len() + 512) / 1024;
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/results.md")).unwrap();
    for said in [
        format!(
            "It has {} paths and {} operations ({owner} owner, {} relay), and {schemas} component schemas.",
            paths.len(),
            ops.len(),
            ops.len() - owner
        ),
        format!("`docs/openapi.json`, {kb} KB, pins it."),
    ] {
        assert!(foundry_tests::says(&doc, &said), "docs/results.md does not say {said:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_is_valid_openapi_3_1_and_every_route_answers_as_routed() {
    let Some(python) = api_python() else { return };
    let (running, dir) = start().await;
    let http = foundry_tests::http();
    let res = http.get(format!("{}{}", running.base_url, http_api::openapi::PATH)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    let served: Value = res.json().await.unwrap();
    assert_eq!(served, http_api::openapi::document());
    let file = dir.join("openapi.json");
    std::fs::write(&file, served.to_string()).unwrap();
    let check = "import sys, json\nfrom openapi_spec_validator import validate\nfrom openapi_spec_validator.validation.validators import OpenAPIV31SpecValidator\nd = json.load(open(sys.argv[1]))\nvalidate(d, cls=OpenAPIV31SpecValidator)\nprint(len(d['paths']))";
    let out = std::process::Command::new(&python).args(["-c", check]).arg(&file).output().unwrap();
    assert!(out.status.success(), "openapi-spec-validator: {}", String::from_utf8_lossy(&out.stderr));
    eprintln!("openapi.json: valid OpenAPI 3.1, {} paths", String::from_utf8_lossy(&out.stdout).trim());
    let other = http.post(format!("{}{}", running.base_url, http_api::openapi::PATH)).send().await.unwrap();
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
    let http = foundry_tests::http();
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

/// The seed of this run's rotating half: `FOUNDRY_FUZZ_ROTATING_SEED`, or a fresh one. Printed
/// either way, with the variable that replays it.
fn rotating_seed(what: &str) -> u64 {
    let seed = std::env::var("FOUNDRY_FUZZ_ROTATING_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        let mut b = [0u8; 4];
        getrandom::fill(&mut b).expect("random seed");
        u64::from(u32::from_le_bytes(b))
    });
    eprintln!("{what}: rotating seed {seed} (replay: FOUNDRY_FUZZ_ROTATING_SEED={seed})");
    seed
}

/// The fixed seed's regression set: the same 40 examples of every operation each run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_failure_in_the_owner_and_relay_apis() {
    let examples: u32 = std::env::var("FOUNDRY_FUZZ_EXAMPLES").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let seed: u64 = std::env::var("FOUNDRY_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(25);
    let Some((cases, checked)) = schemathesis(seed, examples).await else { return };
    assert!(cases >= 1000, "only {cases} cases ran");
    assert!(checked >= 100, "the data check ran on only {checked} refusals");
    if (examples, seed) == (40, 25) {
        // The fixed seed makes the same cases each run: docs/results.md's row is this run's.
        let row = format!(
            "| Schemathesis, test command (seed 25, 40 examples per operation) | {} | 0 | {} |",
            foundry_tests::grouped(cases),
            foundry_tests::grouped(checked as u64)
        );
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/results.md")).unwrap();
        assert!(doc.contains(&row), "docs/results.md does not say {row:?}");
    }
}

/// New cases each run: a rotating seed, 8 examples of every operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_from_a_rotating_seed_finds_no_failure() {
    let seed = rotating_seed("schemathesis");
    let Some((cases, checked)) = schemathesis(seed, 8).await else { return };
    assert!(cases >= 200, "only {cases} cases ran (seed {seed})");
    assert!(checked >= 20, "the data check ran on only {checked} refusals (seed {seed})");
}

/// One Schemathesis run of `examples` per operation from `seed` against a fresh seeded
/// server, with the data check: the cases generated and the refusals checked (`None` when the
/// pinned Python is not installed).
async fn schemathesis(seed_value: u64, examples: u32) -> Option<(u64, usize)> {
    let python = api_python()?;
    let schemathesis = python.parent().unwrap().join("schemathesis");
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

# Every check runs (Schemathesis's default) but one: positive_data_acceptance. The checks are
# chosen here, not with `--checks` on the command line, which would override the per-operation
# setting below.
[checks.positive_data_acceptance]
enabled = false

# Schemathesis's default refusals and 413: a body past the 1 MB limit is refused for its size
# before anything else is looked at (a generated oversized body without credentials, seed
# 2524418929), and that is the right answer for it.
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]

# A desktop is removed by `POST /owner/devices/{{device_id}}/remove` (its DELETE revokes it and
# keeps it listed). Schemathesis counts only a DELETE, or a request to the same path, as a
# removal (`resource_was_deleted`), so create, remove, then any request to that device's paths
# answers the right 404 and reads as "created resource not found" (seed 3198438129: POST
# /owner/devices, POST …/remove, DELETE …). The check stays on for every other resource;
# fleet::busy_stale_and_removed_* holds what a removed desktop answers.
[[operations]]
include-path-regex = "^/owner/devices/\\{{device_id\\}}"
checks.ensure_resource_availability.enabled = false
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
        .args(["run", &format!("{}{}", running.base_url, http_api::openapi::PATH), "--url", &running.base_url])
        .args(["--max-examples", &examples.to_string(), "--workers", "1", "--request-timeout", "10"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout.lines().skip_while(|l| !l.contains("SUMMARY")).collect::<Vec<_>>().join("\n");
    eprintln!("{summary}");
    assert!(out.status.success(), "Schemathesis found failures (seed {seed_value}):\n{stdout}\n{stderr}");
    let cases = stdout
        .lines()
        .find_map(|l| l.trim().split_once(" generated, ").and_then(|(n, _)| n.trim().parse::<u64>().ok()))
        .unwrap_or_else(|| panic!("no case count in:\n{stdout}"));
    let checked = std::fs::read_to_string(&refusals).unwrap_or_default().lines().count();
    eprintln!(
        "schemathesis: {cases} cases over {} operations, seed {seed_value}, {examples} examples each; {checked} refusals checked to have written nothing",
        http_api::openapi::document()["paths"]
            .as_object()
            .map_or(0, |p| p.values().map(|m| m.as_object().map_or(0, serde_json::Map::len)).sum::<usize>())
    );
    running.stop().await;
    Some((cases, checked))
}

mod mcp_envelope {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use serde_json::{Value, json};

    /// A generated request to the MCP endpoint.
    #[derive(Debug, Clone)]
    pub struct Probe {
        method: &'static str,
        headers: Vec<(&'static str, String)>,
        pub body: Vec<u8>,
    }

    const METHODS: &[&str] = &[
        "initialize",
        "notifications/initialized",
        "ping",
        "tools/list",
        "tools/call",
        "tasks/get",
        "tasks/list",
        "tasks/result",
        "tasks/cancel",
        "resources/list",
        "prompts/list",
        "logging/setLevel",
        "completion/complete",
        "server/discover",
    ];
    const TOOLS: &[&str] = &[
        "list_graph_sessions",
        "run_graph_session",
        "get_graph_run",
        "cancel_graph_run",
        "list_linked_chat_tasks",
        "get_linked_chat_task",
        "claim_linked_chat_task",
        "submit_linked_chat_result",
        "upload_linked_chat_artifact",
    ];

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            ".{0,40}".prop_map(Value::from),
            prop::sample::select(TOOLS).prop_map(Value::from),
            "(gs_[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-8[0-9a-f]{3}-[0-9a-f]{12})".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        prop::sample::select(
                            &[
                                "name",
                                "arguments",
                                "_meta",
                                "cursor",
                                "taskId",
                                "task",
                                "protocolVersion",
                                "capabilities",
                                "clientInfo",
                                "graph_session_id",
                                "idempotency_key",
                                "chat_link_id",
                                "task_id",
                                "claim_id",
                                "command_id"
                            ][..]
                        )
                        .prop_map(str::to_owned),
                        "[a-zA-Z_/.]{0,12}",
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn envelope() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => one_message(),
            1 => prop::collection::vec(one_message(), 0..4).prop_map(Value::Array),
            1 => json_value(),
        ]
    }

    fn one_message() -> impl Strategy<Value = Value> {
        (
            prop_oneof![6 => Just(json!("2.0")), 1 => Just(json!("1.0")), 1 => json_value()],
            prop_oneof![4 => any::<u32>().prop_map(Value::from), 1 => ".{0,12}".prop_map(Value::from), 1 => json_value()],
            prop_oneof![4 => prop::sample::select(METHODS).prop_map(Value::from), 1 => json_value()],
            json_value(),
            (prop::sample::select(TOOLS), json_value()),
            0..4u8,
        )
            .prop_map(|(jsonrpc, id, method, params, (tool, args), shape)| match shape {
                0 => json!({"jsonrpc": jsonrpc, "id": id, "method": method, "params": if params.is_object() { params } else { json!({"cursor": params}) }}),
                1 => json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}}),
                2 => json!({"jsonrpc": "2.0", "method": method, "params": params}),
                _ => json!({"jsonrpc": "2.0", "id": id, "result": params}),
            })
    }

    fn header_value() -> impl Strategy<Value = String> {
        "[ -~]{0,40}"
    }

    /// `valid`, `owner`: tokens the server issued (the owner's lacks the MCP scopes).
    pub fn probe(valid: String, owner: String) -> impl Strategy<Value = Probe> {
        let accept = prop_oneof![
            Just("application/json, text/event-stream".to_owned()),
            Just("application/json".to_owned()),
            Just("text/event-stream".to_owned()),
            Just("*/*".to_owned()),
            header_value(),
        ];
        let content_type = prop_oneof![
            Just("application/json".to_owned()),
            Just("application/json; charset=utf-8".to_owned()),
            Just("text/plain".to_owned()),
            header_value(),
        ];
        let version = prop_oneof![
            Just("2025-11-25".to_owned()),
            Just("2026-07-28".to_owned()),
            Just("2025-06-18".to_owned()),
            header_value(),
        ];
        let auth = prop_oneof![
            3 => Just(format!("Bearer {valid}")),
            1 => Just(format!("Bearer {owner}")),
            1 => header_value(),
            1 => "Bearer [A-Za-z0-9._-]{0,60}",
        ];
        let body = prop_oneof![
            6 => envelope().prop_map(|v| serde_json::to_vec(&v).unwrap()),
            1 => prop::collection::vec(any::<u8>(), 0..200),
            1 => envelope().prop_map(|v| { let mut b = serde_json::to_vec(&v).unwrap(); b.truncate(b.len() / 2); b }),
        ];
        // Most probes pass the door (a valid token, the headers MCP asks for) so the body reaches
        // the JSON-RPC layer; the rest vary every header.
        let door = (
            Just(Some("application/json, text/event-stream".to_owned())),
            Just(Some("application/json".to_owned())),
            prop::option::of(prop_oneof![Just("2025-11-25".to_owned()), Just("2026-07-28".to_owned())]),
            Just(Some(format!("Bearer {valid}"))),
        );
        let any_door = (
            prop::option::of(accept),
            prop::option::of(content_type),
            prop::option::of(version),
            prop::option::of(auth),
        );
        (
            prop_oneof![8 => Just("POST"), 1 => Just("GET"), 1 => Just("DELETE"), 1 => Just("PUT")],
            prop_oneof![3 => door.prop_map(|d| (true, d)), 2 => any_door.prop_map(|d| (false, d))],
            prop::option::of(prop::sample::select(METHODS).prop_map(str::to_owned)),
            prop::option::of(header_value()),
            prop::option::of(header_value()),
            body,
        )
            .prop_map(|(method, (door, (accept, ct, version, auth)), mcp_method, mcp_name, session, body)| {
                // Through the door, the 2026 routing headers are the body's own (they must match).
                let (mcp_method, mcp_name, session) = if door {
                    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    // A method or name no header can carry (a control character) goes without
                    // its header, as no client could send it (rotating seed 1919209142 found
                    // a vertical tab that reqwest refused to send).
                    let own = |p: &str| {
                        v.pointer(p)
                            .and_then(Value::as_str)
                            .filter(|s| http::HeaderValue::from_str(s).is_ok())
                            .map(str::to_owned)
                    };
                    if version.as_deref() == Some("2026-07-28") {
                        (own("/method"), own("/params/name"), None)
                    } else {
                        (None, None, None)
                    }
                } else {
                    (mcp_method, mcp_name, session)
                };
                let mut headers = Vec::new();
                let pairs = [
                    ("accept", accept),
                    ("content-type", ct),
                    ("mcp-protocol-version", version),
                    ("authorization", auth),
                    ("mcp-method", mcp_method),
                    ("mcp-name", mcp_name),
                    ("mcp-session-id", session),
                ];
                for (k, v) in pairs {
                    if let Some(v) = v {
                        headers.push((k, v));
                    }
                }
                Probe { method, headers, body }
            })
    }

    pub fn runner(cases: u32, seed: u64) -> TestRunner {
        let mut s = [0u8; 32];
        s[..8].copy_from_slice(&seed.to_le_bytes());
        let config = Config { cases, failure_persistence: None, ..Config::default() };
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &s))
    }

    /// Sends `p`: the status, or why no HTTP answer came back.
    pub async fn send(http: &reqwest::Client, url: &str, p: &Probe) -> Result<(u16, String), String> {
        let method = reqwest::Method::from_bytes(p.method.as_bytes()).unwrap();
        let mut req = http.request(method, url).body(p.body.clone());
        for (k, v) in &p.headers {
            req = req.header(*k, v.as_str());
        }
        match req.send().await {
            Ok(res) => {
                let status = res.status().as_u16();
                let body = res.bytes().await.map_err(|e| format!("the body broke off: {e}"))?;
                Ok((status, String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned()))
            }
            Err(e) => Err(format!("no answer: {e:?}")),
        }
    }
}

/// The fixed seed's regression set: the same 400 probes each run.
#[test]
fn the_mcp_endpoint_answers_any_envelope_and_headers_without_a_5xx() {
    let cases: u32 = std::env::var("FOUNDRY_FUZZ_MCP_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    let seed: u64 = std::env::var("FOUNDRY_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(25);
    // The fixed seed's mix is what the generator is tuned by: at least 1 in 25 answered.
    let statuses = envelope_fuzz(cases, seed, cases / 25);
    if (cases, seed) != (400, 25) {
        return;
    }
    // docs/results.md's table of the test command's probes is this run's (the same each time).
    const COLUMNS: [u16; 7] = [200, 202, 400, 401, 405, 406, 415];
    assert!(statuses.keys().all(|s| COLUMNS.contains(s)), "a status the docs' table has no column for: {statuses:?}");
    let row = COLUMNS.iter().map(|s| statuses.get(s).copied().unwrap_or(0).to_string()).collect::<Vec<_>>();
    let row = format!("| test command | {} |", row.join(" | "));
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/results.md")).unwrap();
    assert!(doc.contains(&row), "docs/results.md does not say {row:?}");
}

/// New probes each run: a rotating seed, 200 probes. About 1 in 16 gets past the door, so at
/// least one must (all 200 stopped there has odds of about 1 in 400,000).
#[test]
fn the_mcp_endpoint_answers_envelopes_from_a_rotating_seed_without_a_5xx() {
    envelope_fuzz(200, rotating_seed("MCP envelope fuzz"), 1);
}

/// `cases` probes from `seed` against a fresh server: none gets a 5xx or no answer, the
/// server still serves, and at least `past_the_door` got past the checks at the door. The
/// statuses answered, with how many of each.
fn envelope_fuzz(cases: u32, seed: u64, past_the_door: u32) -> std::collections::BTreeMap<u16, u32> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (running, _dir) = rt.block_on(start());
    let http = foundry_tests::http();
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, u32>::new());
    let mut runner = mcp_envelope::runner(cases, seed);
    let strategy = mcp_envelope::probe(running.token.clone(), running.owner_token.clone());
    let outcome = runner.run(&strategy, |p| {
        let (status, answer) = rt
            .block_on(mcp_envelope::send(&http, &running.mcp_url, &p))
            .map_err(proptest::test_runner::TestCaseError::fail)?;
        *statuses.lock().unwrap().entry(status).or_default() += 1;
        // FOUNDRY_FUZZ_SHOW=<status> prints the probes answered with it.
        if std::env::var_os("FOUNDRY_FUZZ_SHOW").is_some_and(|v| v.to_str() == Some(&status.to_string())) {
            eprintln!("{status}: {answer} <- {}", String::from_utf8_lossy(&p.body));
        }
        proptest::prop_assert!(status < 500, "{status} for {p:?}");
        Ok(())
    });
    let statuses = statuses.into_inner().unwrap();
    eprintln!("MCP envelope fuzz: {cases} cases, seed {seed}; statuses {statuses:?}");
    if let Err(e) = outcome {
        panic!("seed {seed}: {e}");
    }
    // Still serving, and the mix reached past the checks at the door.
    let list = rt.block_on(rpc_2026(&http, &running.mcp_url, &running.token, "tools/list", None, json!({}), json!({})));
    assert_eq!(list["result"]["tools"].as_array().map(Vec::len), Some(9), "{list}");
    let answered = statuses.get(&200).copied().unwrap_or(0) + statuses.get(&202).copied().unwrap_or(0);
    assert!(answered >= past_the_door, "too few probes got past the checks at the door (seed {seed}): {statuses:?}");
    rt.block_on(running.stop());
    statuses
}
