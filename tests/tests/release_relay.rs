//! A release's relay, kept working by this server (issue 60; docs/releasing.md).
//!
//! At a release's cut, [`freeze_this_releases_relay_requests`] (ignored; `infra/freeze-release.sh`)
//! records what the real relay binary asks in a full run (two runs queued, one reporting
//! progress and succeeding, one failing; a pause and a resume), through a recording proxy
//! ([`foundry_tests::recorder`]), into `tests/fixtures/releases/<version>/relay_requests.json`.
//! [`a_supported_releases_relay_requests_get_the_same_answers`] replays each supported
//! release's requests, in order, against this build's server, and checks the answers' meaning:
//! the same status, and every field the old relay was answered still there with the same
//! value (ids mapped, times and addresses only present), so the old relay reads them as it did.
//!
//! The same full run with an older relay binary (`FOUNDRY_OLD_RELAY`, built from its release
//! commit by `infra/release-check.sh`) is [`an_older_relay_completes_a_full_run`].

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::ids::{AgentId, CommandId, GraphSessionId, IdempotencyKey};
use domain::limits::Policy;
use domain::runs::{QueueOutcome, QueueRun, RunStatus};
use domain::store::{QueueRuns, ReadRuns};
use foundry_tests::recorder::{Exchange, Recorder};
use foundry_tests::{built_binary, wait_until};
use local::LocalConfig;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One step of a recorded full run: the test queued a run, or the relay asked something.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Step {
    /// A chat queued a run (while the relay was stopped, so no answer raced it).
    Queue { graph_session_id: String, arguments: Value },
    /// A request of the relay and the answer it got.
    Relay(Exchange),
}

/// `relay_requests.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Recording {
    /// How it was made.
    recorded: String,
    /// The demo project the relay synced (mapped to the replaying server's).
    project_id: String,
    /// The relay's sessions: (number, slug, script).
    sessions: Vec<(u8, String, String)>,
    steps: Vec<Step>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn gs(n: u8) -> GraphSessionId {
    GraphSessionId::parse("g", &format!("gs_{n:032x}")).unwrap()
}

/// The full run's Graphs: one reports progress and answers its arguments, one fails.
const SESSIONS: &[(u8, &str, &str)] = &[
    (1, "report", r#"read -r a; echo '{"progress": "halfway", "fraction": 0.5}' >&2; sleep 1; echo "$a""#),
    (2, "broken", "echo 'no such sheet' >&2; exit 3"),
];

async fn server(name: &str) -> foundry_tests::LocalServer {
    let policy = Policy {
        poll_interval: Duration::from_secs(1),
        heartbeat_timeout: Duration::from_secs(600),
        ..Policy::default()
    };
    foundry_tests::LocalServer::start(name, |at| LocalConfig { policy, ..at }).await
}

fn config(running: &foundry_tests::LocalServer, server_url: &str, sessions: &[(u8, String, String)]) -> PathBuf {
    let mut text = format!(
        "server_url = \"{server_url}\"\ndevice_token = \"{}\"\nstate_dir = \"{}\"\ncontrol_poll_ms = 200\npoll_s = 1\ncancel_grace_ms = 1000\ndoorbell = false\nmax_parallel = 1\n",
        running.device_token,
        running.dir.join("relay-state").display()
    );
    for (n, slug, script) in sessions {
        text += &format!(
            "[[sessions]]\ngraph_session_id = \"{}\"\nname = \"{slug}\"\nslug = \"{slug}\"\nversion = \"1\"\nprojects = [\"{}\"]\ncommand = [\"sh\", \"-c\", {}]\n",
            gs(*n),
            running.demo.project_id,
            serde_json::to_string(script).unwrap()
        );
    }
    std::fs::create_dir_all(&running.dir).unwrap();
    let path = running.dir.join("relay.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn queue(running: &foundry_tests::LocalServer, graph_session_id: &str, arguments: Value) -> CommandId {
    let req = QueueRun {
        owner: running.demo.owner.clone(),
        agent: AgentId::new("release-client", local::DEMO_OWNER).unwrap(),
        project_id: Some(running.demo.project_id),
        graph_session_id: GraphSessionId::parse("g", graph_session_id).unwrap(),
        arguments,
        idempotency_key: IdempotencyKey::parse(&uuid::Uuid::new_v4().to_string()).unwrap(),
    };
    match running.store.queue_run(&req).await.unwrap() {
        QueueOutcome::Queued(r) => r.command_id,
        other => panic!("{other:?}"),
    }
}

async fn status(running: &foundry_tests::LocalServer, id: CommandId) -> RunStatus {
    let agent = AgentId::new("release-client", local::DEMO_OWNER).unwrap();
    running.store.get_run(&agent, id).await.unwrap().unwrap().status
}

/// The full run with the relay binary `relay`, through a recorder: the steps, and the two runs'
/// ids. Checks the outcome a chat sees (the first completed with its arguments as the result,
/// the second failed; the desktop paused then resumed).
async fn full_run(running: &foundry_tests::LocalServer, relay: &Path) -> Vec<Step> {
    let recorder = Recorder::start(&running.base_url, domain::relay::PREFIX).await;
    let sessions: Vec<(u8, String, String)> =
        SESSIONS.iter().map(|(n, s, c)| (*n, (*s).to_owned(), (*c).to_owned())).collect();
    let path = config(running, &recorder.url, &sessions);
    let spawn = || {
        std::process::Command::new(relay)
            .args(["--config", path.to_str().unwrap(), "run"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut steps = Vec::new();
    let take = |steps: &mut Vec<Step>, from: &mut usize| {
        let all = recorder.exchanges();
        steps.extend(all[*from..].iter().cloned().map(Step::Relay));
        *from = all.len();
    };
    let mut seen = 0;
    // The relay's first sync shares its sessions; then it is stopped so the queueing races nothing.
    let mut child = spawn();
    let (owner, project) = (running.demo.owner.clone(), running.demo.project_id);
    wait_until("the relay's first sync", Duration::from_secs(20), || {
        let store = running.store.clone();
        let owner = owner.clone();
        async move {
            use domain::store::ManageProjects;
            store.get_project(&owner, project).await.unwrap().and_then(|p| p.last_sync_at)
        }
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    take(&mut steps, &mut seen);
    let mut ids = Vec::new();
    for (n, arguments) in [(1u8, json!({"week": 48, "region": "EMEA"})), (2, json!({"sheet": "Q4"}))] {
        let session = gs(n).to_string();
        ids.push(queue(running, &session, arguments.clone()).await);
        steps.push(Step::Queue { graph_session_id: session, arguments });
    }
    let mut child = spawn();
    for (id, want) in ids.iter().zip([RunStatus::Completed, RunStatus::Failed]) {
        wait_until(&format!("{id} to be {want:?}"), Duration::from_secs(60), || async move {
            (status(running, *id).await == want).then_some(())
        })
        .await;
    }
    // One idle sync after the runs (what a relay asks between runs).
    let syncs = |r: &Recorder| r.exchanges().iter().filter(|e| e.path == "/sync").count();
    let before = syncs(&recorder);
    wait_until("an idle sync", Duration::from_secs(10), || {
        let n = syncs(&recorder);
        async move { (n >= before + 2).then_some(()) }
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    for args in [&["pause", "--for", "2h", "--note", "travelling"][..], &["resume"]] {
        let out = std::process::Command::new(relay).arg("--config").arg(&path).args(args).output().unwrap();
        assert!(out.status.success(), "relay {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    take(&mut steps, &mut seen);
    let agent = AgentId::new("release-client", local::DEMO_OWNER).unwrap();
    let first = running.store.get_run(&agent, ids[0]).await.unwrap().unwrap();
    let result: Value = serde_json::from_str(first.completion.as_ref().unwrap().result.as_deref().unwrap()).unwrap();
    assert_eq!(result, json!({"week": 48, "region": "EMEA"}));
    assert_eq!(first.progress.as_ref().map(|p| p.progress.message.as_str()), Some("halfway"));
    steps
}

/// Answer fields whose value differs from run to run (times, addresses): only their presence
/// and JSON type are compared.
const VARYING: &[&str] = &["server_time", "queued_at", "until", "doorbell_url"];

/// `v` with the [`VARYING`] fields' values replaced by their JSON type.
fn normalized(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| {
                    let x = if VARYING.contains(&k.as_str()) { json!(format!("<{}>", kind(x))) } else { normalized(x) };
                    (k.clone(), x)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Drops an exchange equal (normalized) to the one before it: a relay's repeated polls.
fn deduplicated(steps: Vec<Step>) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    for step in steps {
        let same = match (out.last(), &step) {
            (Some(Step::Relay(a)), Step::Relay(b)) => {
                a.method == b.method
                    && a.path == b.path
                    && a.body == b.body
                    && a.status == b.status
                    && normalized(&a.answer) == normalized(&b.answer)
            }
            _ => false,
        };
        if !same {
            out.push(step);
        }
    }
    out
}

/// Where `was` (an old answer) is not in `now`: a field missing, or a different value (the
/// [`VARYING`] ones: a different JSON type). Fields `now` adds are fine: the relay ignores them.
fn missing(was: &Value, now: &Value, at: &str, out: &mut Vec<String>) {
    match (was, now) {
        (Value::Object(w), Value::Object(n)) => {
            for (k, x) in w {
                match n.get(k) {
                    None => out.push(format!("{at}.{k}: missing")),
                    Some(y) => missing(x, y, &format!("{at}.{k}"), out),
                }
            }
        }
        (Value::Array(w), Value::Array(n)) if w.len() == n.len() => {
            for (i, (x, y)) in w.iter().zip(n).enumerate() {
                missing(x, y, &format!("{at}[{i}]"), out);
            }
        }
        _ if was != now => out.push(format!("{at}: was {was}, now {now}")),
        _ => {}
    }
}

/// Replaces each mapped id (a recorded command id, the recorded project id) in `v`.
fn mapped(v: &Value, ids: &HashMap<String, String>) -> Value {
    match v {
        Value::String(s) => Value::String(ids.get(s).cloned().unwrap_or_else(|| s.clone())),
        Value::Array(a) => Value::Array(a.iter().map(|x| mapped(x, ids)).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), mapped(x, ids))).collect()),
        other => other.clone(),
    }
}

fn mapped_path(path: &str, ids: &HashMap<String, String>) -> String {
    path.split('/').map(|part| ids.get(part).map_or(part, String::as_str)).collect::<Vec<_>>().join("/")
}

/// Replays `recording` against `running` (a fresh server whose demo project stands for the
/// recorded one): the first exchange whose answer lost its meaning, or Ok.
async fn replay(running: &foundry_tests::LocalServer, recording: &Recording) -> Result<usize, String> {
    let mut ids = HashMap::from([(recording.project_id.clone(), running.demo.project_id.to_string())]);
    let http = foundry_tests::http();
    let base = format!("{}{}", running.base_url, domain::relay::PREFIX);
    let mut replayed = 0;
    for (i, step) in recording.steps.iter().enumerate() {
        let ex = match step {
            Step::Queue { graph_session_id, arguments } => {
                queue(running, graph_session_id, arguments.clone()).await;
                continue;
            }
            Step::Relay(ex) => ex,
        };
        let url = format!("{base}{}", mapped_path(&ex.path, &ids));
        let mut req = if ex.method == "GET" { http.get(url) } else { http.post(url) };
        for (name, value) in &ex.headers {
            req = req.header(name, value);
        }
        if let Some(body) = &ex.body {
            req = req.header("content-type", "application/json").body(mapped(body, &ids).to_string());
        }
        let res = req.bearer_auth(&running.device_token).send().await.map_err(|e| e.to_string())?;
        let status = res.status().as_u16();
        let answer: Value = serde_json::from_str(&res.text().await.unwrap_or_default()).unwrap_or(Value::Null);
        let what = format!("step {i}: {} {}", ex.method, ex.path);
        if status != ex.status {
            return Err(format!(
                "{what}: answered {status} ({answer}), the release's relay was answered {}",
                ex.status
            ));
        }
        // A sync hands out commands: learn the new ids of the recorded ones (same session and
        // arguments, in order).
        if ex.path == "/sync" {
            let (was, now) = (
                ex.answer["commands"].as_array().cloned().unwrap_or_default(),
                answer["commands"].as_array().cloned().unwrap_or_default(),
            );
            for (w, n) in was.iter().zip(&now) {
                if w["graph_session_id"] == n["graph_session_id"] && w["arguments"] == n["arguments"] {
                    ids.insert(
                        w["command_id"].as_str().unwrap_or_default().to_owned(),
                        n["command_id"].as_str().unwrap_or_default().to_owned(),
                    );
                }
            }
        }
        let mut lost = Vec::new();
        missing(&normalized(&mapped(&ex.answer, &ids)), &normalized(&answer), "answer", &mut lost);
        if !lost.is_empty() {
            return Err(format!("{what}: {}", lost.join("; ")));
        }
        replayed += 1;
    }
    Ok(replayed)
}

fn read_recording(dir: &Path) -> Option<Recording> {
    let text = std::fs::read_to_string(dir.join("relay_requests.json")).ok()?;
    Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", dir.display())))
}

/// Records this release's relay requests (run by `infra/freeze-release.sh` at a cut): refuses
/// to overwrite a frozen file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by infra/freeze-release.sh when a release is cut"]
async fn freeze_this_releases_relay_requests() {
    let dir = std::env::var_os("FOUNDRY_FREEZE_DIR")
        .map_or_else(|| root().join("tests/fixtures/releases").join(env!("CARGO_PKG_VERSION")), PathBuf::from);
    let file = dir.join("relay_requests.json");
    assert!(!file.exists(), "{} is frozen: a release's fixtures are never edited", file.display());
    let running = server("release-record").await;
    let steps = full_run(&running, &built_binary("relay", &["relay/src", "shared/domain/src"])).await;
    let recording = Recording {
        recorded: format!(
            "the real relay binary {} in a full run against the local server, through tests/src/recorder.rs (releases::release_relay::freeze_this_releases_relay_requests); consecutive identical polls kept once",
            env!("CARGO_PKG_VERSION")
        ),
        project_id: running.demo.project_id.to_string(),
        sessions: SESSIONS.iter().map(|(n, s, c)| (*n, (*s).to_owned(), (*c).to_owned())).collect(),
        steps: deduplicated(steps),
    };
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&file, serde_json::to_string_pretty(&recording).unwrap() + "\n").unwrap();
    println!("wrote {}", file.display());
    running.stop().await;
}

/// Each supported release's relay, replayed: its requests get answers of the same meaning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supported_releases_relay_requests_get_the_same_answers() {
    let mut replayed = 0;
    for (version, dir) in releases_with_recordings() {
        let recording = read_recording(&dir).unwrap();
        let running = server("release-replay").await;
        let n = replay(&running, &recording).await.unwrap_or_else(|e| panic!("release {version}'s relay: {e}"));
        assert!(n >= 8, "release {version}: only {n} exchanges replayed");
        running.stop().await;
        replayed += 1;
    }
    assert!(replayed > 0, "no supported release has relay_requests.json");
}

/// The replay catches what breaks an old relay: a field the server now requires that the old
/// relay never sends, and an answer field the old relay reads that is gone or changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_catches_a_required_request_field_and_a_lost_answer_field() {
    let (version, dir) = releases_with_recordings().pop().expect("a frozen relay_requests.json");
    let recording = read_recording(&dir).unwrap();
    let edit = |f: &dyn Fn(&mut Exchange) -> bool| {
        let mut r = recording.clone();
        let hit = r.steps.iter_mut().filter_map(|s| if let Step::Relay(e) = s { Some(e) } else { None }).any(f);
        assert!(hit, "release {version}: nothing to mutate");
        r
    };
    // The server requiring a field the old relay does not send is the same as the old relay's
    // start losing a field this server requires.
    let no_execution = edit(&|e| {
        e.path.ends_with("/start")
            && e.body.as_mut().and_then(Value::as_object_mut).and_then(|b| b.remove("execution_id")).is_some()
    });
    let running = server("release-mutant").await;
    let err = replay(&running, &no_execution).await.unwrap_err();
    assert!(err.contains("/start: answered 400"), "{err}");
    running.stop().await;
    // An answer field the old relay read, gone from this server's answers.
    let lost_field = edit(&|e| {
        e.path.ends_with("/complete")
            && e.answer.as_object_mut().map(|a| a.insert("accepted_by".into(), json!("server"))).is_some()
    });
    let running = server("release-mutant").await;
    let err = replay(&running, &lost_field).await.unwrap_err();
    assert!(err.contains("answer.accepted_by: missing"), "{err}");
    running.stop().await;
    // A changed meaning: the failed run now reported as completed.
    let changed = edit(&|e| {
        e.path.ends_with("/complete") && e.answer["status"] == "failed" && {
            e.answer["status"] = json!("completed");
            true
        }
    });
    let running = server("release-mutant").await;
    let err = replay(&running, &changed).await.unwrap_err();
    assert!(err.contains("answer.status: was \"completed\", now \"failed\""), "{err}");
    running.stop().await;
}

/// The supported frozen releases that recorded their relay's requests.
fn releases_with_recordings() -> Vec<(String, PathBuf)> {
    crate::releases::supported_dirs().into_iter().filter(|(_, d)| d.join("relay_requests.json").is_file()).collect()
}

/// An older relay binary (`FOUNDRY_OLD_RELAY`, built from its release commit by
/// `infra/release-check.sh`) completes the full run against this server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by infra/release-check.sh with an older relay binary"]
async fn an_older_relay_completes_a_full_run() {
    let relay =
        PathBuf::from(std::env::var_os("FOUNDRY_OLD_RELAY").expect("FOUNDRY_OLD_RELAY: the older relay binary"));
    let out = std::process::Command::new(&relay).arg("--version").output().unwrap();
    println!("older relay: {}", String::from_utf8_lossy(&out.stdout).trim());
    let running = server("release-old-relay").await;
    let steps = full_run(&running, &relay).await;
    println!(
        "this server ({}) answered {} requests of that relay; both runs ended as they should",
        env!("CARGO_PKG_VERSION"),
        steps.len()
    );
    running.stop().await;
}

/// This build's relay completes a full run against an older server: the `local` binary of an
/// earlier release (`FOUNDRY_OLD_LOCAL`, built from its commit by `infra/release-check.sh`),
/// driven as a chat drives it (MCP `run_graph_session`, `get_graph_run`). An older server
/// ignores what it does not know of this relay's requests, and this relay ignores what it does
/// not know of the answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by infra/release-check.sh with an older local server binary"]
async fn this_relay_completes_a_full_run_against_an_older_server() {
    use tokio::io::AsyncBufReadExt;
    let old = PathBuf::from(std::env::var_os("FOUNDRY_OLD_LOCAL").expect("FOUNDRY_OLD_LOCAL: the older local binary"));
    let dir = std::env::temp_dir().join(format!("release-old-server-{}", uuid::Uuid::new_v4()));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = tokio::process::Command::new(&old)
        .env("FOUNDRY_DATA_DIR", dir.join("server"))
        .env("FOUNDRY_PORT", port.to_string())
        .env("FOUNDRY_POLL_INTERVAL_SECONDS", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The banner: the values a user copies into a relay config and an MCP client.
    let mut banner = HashMap::new();
    let mut lines = tokio::io::BufReader::new(server.stdout.take().unwrap()).lines();
    while let Some(line) = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await.unwrap().unwrap() {
        if let Some((k, v)) = line.trim().split_once(':') {
            banner.insert(k.trim().to_owned(), v.trim().to_owned());
        }
        if line.trim_start().starts_with("Panel:") {
            break;
        }
    }
    let get = |k: &str| banner.get(k).cloned().unwrap_or_else(|| panic!("the banner has no {k}: {banner:?}"));
    let (mcp_url, token, project) = (get("MCP URL"), get("Bearer token"), get("Project id"));
    let (relay_server, device_token) = (get("Relay server"), get("Device token"));
    let mut text = format!(
        "server_url = \"{relay_server}\"\ndevice_token = \"{device_token}\"\nstate_dir = \"{}\"\ncontrol_poll_ms = 200\npoll_s = 1\ncancel_grace_ms = 1000\nmax_parallel = 1\n",
        dir.join("relay-state").display()
    );
    for (n, slug, script) in SESSIONS {
        text += &format!(
            "[[sessions]]\ngraph_session_id = \"{}\"\nname = \"{slug}\"\nslug = \"{slug}\"\nversion = \"1\"\nprojects = [\"{project}\"]\ncommand = [\"sh\", \"-c\", {}]\n",
            gs(*n),
            serde_json::to_string(script).unwrap()
        );
    }
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("relay.toml");
    std::fs::write(&path, text).unwrap();
    let relay = built_binary("relay", &["relay/src", "shared/domain/src"]);
    let mut child = std::process::Command::new(&relay)
        .args(["--config", path.to_str().unwrap(), "run"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let http = foundry_tests::http();
    let tool = |name: &'static str, arguments: Value| {
        let (http, url, token) = (http.clone(), mcp_url.clone(), token.clone());
        async move {
            let call = json!({"name": name, "arguments": arguments});
            let v = foundry_tests::mcp::rpc_2026(&http, &url, &token, "tools/call", Some(name), call, json!({})).await;
            v["result"].clone()
        }
    };
    // Queued as a chat does, once the relay's first sync has shared the sessions.
    let mut ids = Vec::new();
    for (n, arguments) in [(1u8, json!({"week": 48, "region": "EMEA"})), (2, json!({"sheet": "Q4"}))] {
        let id = wait_until("the session to be shared", Duration::from_secs(20), || {
            let args = json!({"graph_session_id": gs(n).to_string(), "idempotency_key": format!("old-server-{n}"), "arguments": arguments});
            let tool = &tool;
            async move { tool("run_graph_session", args).await["structuredContent"]["command_id"].as_str().map(str::to_owned) }
        })
        .await;
        ids.push(id);
    }
    let mut ended = Vec::new();
    for id in &ids {
        let run = wait_until(&format!("{id} to end"), Duration::from_secs(60), || {
            let tool = &tool;
            async move {
                let run = tool("get_graph_run", json!({"command_id": id})).await["structuredContent"].clone();
                (!matches!(run["status"].as_str(), Some("queued" | "running"))).then_some(run)
            }
        })
        .await;
        ended.push(run);
    }
    assert_eq!(ended[0]["status"], "completed", "{}", ended[0]);
    assert_eq!(
        serde_json::from_str::<Value>(ended[0]["result"].as_str().unwrap()).unwrap(),
        json!({"week": 48, "region": "EMEA"})
    );
    assert_eq!(ended[1]["status"], "failed", "{}", ended[1]);
    child.kill().unwrap();
    child.wait().unwrap();
    for args in [&["pause", "--for", "2h", "--note", "travelling"][..], &["resume"]] {
        let out = std::process::Command::new(&relay).arg("--config").arg(&path).args(args).output().unwrap();
        assert!(out.status.success(), "relay {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let version = std::process::Command::new(&old).arg("--version").output().unwrap();
    println!(
        "this relay ({}) completed a full run against {}",
        env!("CARGO_PKG_VERSION"),
        String::from_utf8_lossy(&version.stdout).trim()
    );
    server.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
