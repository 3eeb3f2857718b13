//! The soak: runs keep flowing while the real relay binary is killed with SIGKILL at random
//! moments and restarted, and a fault proxy between it and the server drops 20 % of requests
//! (never forwarded) and 20 % of responses (forwarded, the answer thrown away) — a desktop on a
//! bad network that keeps crashing. Then the faults stop and everything must settle.
//!
//! Counted: runs queued, completed, failed with a stated reason, lost (not ended, or ended with
//! no reason: must be 0), executed twice (a graph process that ran more than once for one
//! run: must be 0). Each graph appends its run's marker to a log, so executions are counted
//! from what really ran, not from what the relay believes.
//!
//! Bounded: `SOAK_SECONDS` of faults (default 40), then at most 90 s to settle; once with one
//! slot (the seed's serial desktop) and once with three (`max_parallel = 3`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use domain::ids::{AgentId, CommandId, GraphSessionId, IdempotencyKey};
use domain::limits::Policy;
use domain::runs::{QueueOutcome, QueueRun, RunStatus, SessionMeta};
use domain::store::{QueueRuns, ReadRuns, SyncSessions};
use foundry_tests::built_binary;
use local::LocalConfig;

/// The soak's one source of randomness: xorshift64 from a seed that is printed, so a failing
/// run's sequence of drops, kills and queue gaps can be asked for again with `SOAK_SEED` (the
/// timing still varies: a drop may land on another request).
static DICE: std::sync::Mutex<u64> = std::sync::Mutex::new(0x9e37_79b9_7f4a_7c15);

fn seed_dice() -> u64 {
    let seed = std::env::var("SOAK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    *DICE.lock().unwrap() = seed | 1;
    seed
}

fn roll() -> u64 {
    let mut x = DICE.lock().unwrap();
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn chance(percent: u8) -> bool {
    roll() % 100 < u64::from(percent)
}

fn random_ms(lo: u64, hi: u64) -> Duration {
    Duration::from_millis(lo + roll() % (hi - lo))
}

#[derive(Default)]
struct Faults {
    on: std::sync::atomic::AtomicBool,
    requests_dropped: AtomicU64,
    responses_dropped: AtomicU64,
    forwarded: AtomicU64,
}

/// A reverse proxy to `upstream` that loses 20 % of requests and 20 % of responses while on.
async fn fault_proxy(upstream: String, faults: Arc<Faults>) -> String {
    let client = foundry_tests::http();
    let app = axum::Router::new().fallback(move |req: axum::http::Request<Body>| {
        let (client, upstream, faults) = (client.clone(), upstream.clone(), Arc::clone(&faults));
        async move {
            let lossy = faults.on.load(Ordering::SeqCst);
            if lossy && chance(20) {
                faults.requests_dropped.fetch_add(1, Ordering::SeqCst);
                return axum::http::Response::builder().status(502).body(Body::from("request lost")).unwrap();
            }
            let (parts, body) = req.into_parts();
            let bytes = axum::body::to_bytes(body, 16 * 1024 * 1024).await.unwrap_or_default();
            let url = format!("{upstream}{}", parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
            let mut fwd = client.request(reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).unwrap(), url);
            for (k, v) in &parts.headers {
                if k != "host" {
                    fwd = fwd.header(k.as_str(), v.as_bytes());
                }
            }
            let res = match fwd.body(bytes).send().await {
                Ok(r) => r,
                Err(_) => return axum::http::Response::builder().status(502).body(Body::from("upstream")).unwrap(),
            };
            let status = res.status().as_u16();
            let ct = res.headers().get("content-type").cloned();
            let body: Bytes = res.bytes().await.unwrap_or_default();
            faults.forwarded.fetch_add(1, Ordering::SeqCst);
            if lossy && chance(20) {
                // The server did the work; the answer never arrives.
                faults.responses_dropped.fetch_add(1, Ordering::SeqCst);
                return axum::http::Response::builder().status(502).body(Body::from("response lost")).unwrap();
            }
            let mut b = axum::http::Response::builder().status(status);
            if let Some(ct) = ct {
                b = b.header("content-type", ct);
            }
            b.body(Body::from(body)).unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

fn spawn_relay(config: &std::path::Path, log: &std::path::Path) -> std::process::Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    std::process::Command::new(built_binary("relay", &["relay/src", "shared/domain/src"]))
        .args(["--config", config.to_str().unwrap(), "run"])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_survive_random_kills_and_a_lossy_network() {
    soak(1).await;
}

/// The same with three slots (`max_parallel = 3`): several runs in flight when the relay is
/// killed, each recovered on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_survive_random_kills_and_a_lossy_network_with_three_slots() {
    soak(3).await;
}

/// The most Graphs of `counted` runs (by marker) working at once, from their begin
/// (`<ns> 1 <marker>`) and end (`<ns> -1 <marker>`) lines. Only runs a relay reported completed
/// count: a Graph orphaned by a killed relay is not one the relay ran alongside another.
fn most_at_once(timeline: &str, counted: &std::collections::BTreeSet<&str>) -> i64 {
    let mut marks: Vec<(u128, i64)> = timeline
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let (t, d, m) = (parts.next()?, parts.next()?, parts.next()?);
            counted.contains(m).then_some((t.parse().ok()?, d.parse().ok()?))
        })
        .collect();
    // An end before a begin at the same instant: touching runs did not overlap.
    marks.sort();
    marks
        .iter()
        .scan(0, |now, (_, d)| {
            *now += d;
            Some(*now)
        })
        .max()
        .unwrap_or(0)
}

async fn soak(slots: usize) {
    let soak = Duration::from_secs(std::env::var("SOAK_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(40));
    let seed = seed_dice();
    println!("soak seed {seed}, {slots} slot(s) (SOAK_SEED={seed} asks for the same sequence of faults)");
    let policy = Policy { poll_interval: Duration::from_secs(1), ..Policy::default() };
    let running = foundry_tests::LocalServer::start("relay-soak", |at| LocalConfig { policy, ..at }).await;
    let dir = running.dir.clone();
    let faults = Arc::new(Faults::default());
    let proxy = fault_proxy(running.base_url.clone(), Arc::clone(&faults)).await;

    // The graph: records its run's marker (one line per execution) and when it began and
    // ended its work (the timeline: did runs overlap?), works a little, answers.
    let executions = dir.join("executions.log");
    let timeline = dir.join("timeline.log");
    let script = format!(
        "m=$(cat | sed 's/.*\"marker\":\"\\([^\"]*\\)\".*/\\1/'); echo \"$m\" >> {}; echo \"$(date +%s%N) 1 $m\" >> {t}; sleep 0.$(( $$ % 4 + 5 )); echo \"$(date +%s%N) -1 $m\" >> {t}; echo \"done $m\"",
        executions.display(),
        t = timeline.display()
    );
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "5".repeat(32))).unwrap();
    let project = running.demo.project_id;
    let config = dir.join("relay.toml");
    std::fs::write(
        &config,
        format!(
            "server_url = \"{proxy}\"\ndevice_token = \"{}\"\nstate_dir = \"{}\"\ncontrol_poll_ms = 200\npoll_s = 1\ncancel_grace_ms = 500\nmax_parallel = {slots}\n\
             [[sessions]]\ngraph_session_id = \"{gs}\"\nname = \"Soak\"\nslug = \"soak\"\nversion = \"1\"\nprojects = [\"{project}\"]\ncommand = [\"sh\", \"-c\", {}]\n",
            running.device_token,
            dir.join("relay-state").display(),
            serde_json::to_string(&script).unwrap()
        ),
    )
    .unwrap();
    let meta = SessionMeta {
        graph_session_id: gs.clone(),
        name: "Soak".into(),
        description: String::new(),
        slug: "soak".into(),
        version: "1".into(),
        status: "ready".into(),
    };
    running.store.sync_sessions(&running.demo.owner, project, foundry_tests::TEST_DEVICE, &[meta]).await.unwrap();

    let agent = AgentId::new("soak-client", local::DEMO_OWNER).unwrap();
    let relay_log = dir.join("relay.log");
    let mut relay = spawn_relay(&config, &relay_log);
    faults.on.store(true, Ordering::SeqCst);
    let mut queued: Vec<(CommandId, String)> = Vec::new();
    let (mut kills, started) = (0u32, Instant::now());
    let mut next_kill = Instant::now() + random_ms(500, 2500);
    let mut next_queue = Instant::now();
    while started.elapsed() < soak {
        if Instant::now() >= next_queue {
            let marker = format!("m{}", queued.len());
            let req = QueueRun {
                owner: running.demo.owner.clone(),
                agent: agent.clone(),
                project_id: Some(project),
                graph_session_id: gs.clone(),
                arguments: serde_json::json!({ "marker": marker }),
                idempotency_key: IdempotencyKey::parse(&uuid::Uuid::new_v4().to_string()).unwrap(),
            };
            match running.store.queue_run(&req).await.unwrap() {
                QueueOutcome::Queued(r) => queued.push((r.command_id, marker)),
                other => panic!("{other:?}"),
            }
            next_queue = Instant::now() + random_ms(300, 1500);
        }
        if Instant::now() >= next_kill {
            relay.kill().unwrap();
            relay.wait().unwrap();
            kills += 1;
            relay = spawn_relay(&config, &relay_log);
            next_kill = Instant::now() + random_ms(500, 2500);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Faults off: everything must settle.
    faults.on.store(false, Ordering::SeqCst);
    let settle_by = Instant::now() + Duration::from_secs(90);
    let mut statuses: BTreeMap<CommandId, (RunStatus, Option<String>)> = BTreeMap::new();
    let mut results: BTreeMap<CommandId, Option<String>> = BTreeMap::new();
    while Instant::now() < settle_by {
        statuses.clear();
        for (id, _) in &queued {
            let run = running.store.get_run(&agent, *id).await.unwrap().unwrap();
            let view = run.view(domain::clock::Clock::now(&domain::clock::SystemClock), &policy);
            statuses.insert(*id, (view.status, run.completion.as_ref().and_then(|c| c.error.clone())));
            results.insert(*id, run.completion.as_ref().and_then(|c| c.result.clone()));
        }
        if statuses.values().all(|(s, _)| !matches!(s, RunStatus::Queued | RunStatus::Running)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    relay.kill().unwrap();
    relay.wait().unwrap();

    let log = std::fs::read_to_string(&executions).unwrap_or_default();
    let mut runs_of: BTreeMap<&str, usize> = BTreeMap::new();
    for line in log.lines() {
        *runs_of.entry(line.trim()).or_default() += 1;
    }
    let completed = statuses.values().filter(|(s, _)| *s == RunStatus::Completed).count();
    let failed_with_reason = statuses
        .values()
        .filter(|(s, e)| *s != RunStatus::Completed && e.as_deref().is_some_and(|e| !e.is_empty()))
        .count();
    let lost: Vec<_> = statuses
        .iter()
        .filter(|(_, (s, e))| {
            matches!(s, RunStatus::Queued | RunStatus::Running)
                || (*s != RunStatus::Completed && e.as_deref().is_none_or(str::is_empty))
        })
        .collect();
    let twice: Vec<_> = runs_of.iter().filter(|(_, n)| **n > 1).collect();
    let reasons: BTreeMap<String, usize> =
        statuses.values().filter_map(|(_, e)| e.clone()).fold(BTreeMap::new(), |mut m, e| {
            *m.entry(e).or_default() += 1;
            m
        });
    println!(
        "soak {}s, {slots} slot(s): relay killed {kills} times; requests dropped {}, responses dropped {}, forwarded {}; \
         queued {}, completed {completed}, failed with a stated reason {failed_with_reason}, lost {}, executed twice {}; \
         reasons {reasons:?}",
        soak.as_secs(),
        faults.requests_dropped.load(Ordering::SeqCst),
        faults.responses_dropped.load(Ordering::SeqCst),
        faults.forwarded.load(Ordering::SeqCst),
        queued.len(),
        lost.len(),
        twice.len(),
    );
    // Every completed run carries the answer of its own execution (the graph echoes its marker).
    let wrong: Vec<_> = queued
        .iter()
        .filter(|(id, _)| statuses[id].0 == RunStatus::Completed)
        .filter(|(id, marker)| results[id].as_deref().map(str::trim) != Some(format!("done {marker}").as_str()))
        .map(|(id, marker)| (id, marker, results[id].clone()))
        .collect();
    assert!(kills >= 5 && queued.len() >= 10, "the soak did too little to prove anything (seed {seed})");
    assert!(wrong.is_empty(), "completed runs with another run's or no result: {wrong:?} (seed {seed})");
    assert!(lost.is_empty(), "runs lost: {lost:?} (relay log: {}, seed {seed})", relay_log.display());
    assert!(twice.is_empty(), "runs executed more than once: {twice:?} (seed {seed})");
    assert_eq!(completed + failed_with_reason, queued.len());
    // With three slots, runs ran at once (a relay that ran one at a time would pass the rest).
    let counted: std::collections::BTreeSet<&str> =
        queued.iter().filter(|(id, _)| statuses[id].0 == RunStatus::Completed).map(|(_, m)| m.as_str()).collect();
    let most = most_at_once(&std::fs::read_to_string(&timeline).unwrap_or_default(), &counted);
    println!("at most {most} Graph(s) working at once");
    if slots > 1 {
        assert!(most >= 2, "no two runs ever overlapped with {slots} slots (seed {seed})");
    }
    running.stop().await;
}
