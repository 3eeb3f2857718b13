//! Side by side, in one run, on the same data (10,000 tasks over 500 links, 1 in 20 queued):
//! the local server (release build, auth on, the real MCP endpoint) and the seed-004
//! reconstruction (`../shared/bench/seed004_server.py`). `list_linked_chat_tasks` on link 7 and
//! `claim_linked_chat_task` replayed on a claimed task, at 1 and 4 connections; requests/s and
//! p50/p99 latency. Run by `infra/bench.sh` (which builds this and the local server in release).
//!
//! The local server is measured twice: as a client sends it (a plain `tools/call`, which the
//! endpoint answers on its direct path) and with `;q=1` on an `Accept` entry, which sends the
//! same call through rmcp's serve loop (the endpoint leaves anything unusual to rmcp): the gap
//! between the two is what the direct path saves.
//!
//! `peer_bench <local server binary> <bench folder> [seconds per cell]`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use domain::clock::{Clock, SystemClock};
use domain::ids::IdempotencyKey;
use domain::store::{AssignTasks, ClaimTasks, ManageLinks, ManageProjects};
use domain::tasks::{AssignOutcome, AssignTask, ClaimOutcome, SubmitStatus, SubmitTask};
use serde_json::{Value, json};

const TASKS: usize = 10_000;
const LINKS: usize = 500;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_up(url: &str) {
    let http = reqwest::Client::new();
    for _ in 0..300 {
        if http.get(url).send().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{url} never answered");
}

/// Fills the local server's data folder like `populate_seed004.py` fills the reconstruction's:
/// task i on link i % 500, queued when i % 20 == 0, else finished (completed or failed). Also
/// claims one more task on link 7 for the claim-replay cell. Returns (link 7, its claimed task).
async fn populate_local(dir: &Path) -> (String, String) {
    let running = local::start(local::LocalConfig::at(dir.to_path_buf())).await.unwrap();
    let store = running.store.clone();
    let owner = running.demo.owner.clone();
    let project = running.demo.project_id;
    store.set_project_enabled(&owner, project, true).await.unwrap();
    let mut links = Vec::new();
    for i in 0..LINKS {
        links.push(store.create_link(&owner, project, &format!("L{i}")).await.unwrap().unwrap().link_id);
    }
    for i in 0..TASKS {
        let req = AssignTask {
            owner: owner.clone(),
            link_id: links[i % LINKS],
            objective: format!("objective {i}"),
            idempotency_key: IdempotencyKey::parse(&format!("bench-task-{i:08}")).unwrap(),
        };
        let AssignOutcome::Assigned(t) = store.assign_task(&req).await.unwrap() else { panic!("assign") };
        if i % 20 != 0 {
            let ClaimOutcome::Claimed { claim_id, .. } =
                store.claim_task(&owner, links[i % LINKS], t.task_id).await.unwrap()
            else {
                panic!("claim")
            };
            let status = if i % 3 == 0 { SubmitStatus::Failed } else { SubmitStatus::Completed };
            let submit = SubmitTask {
                owner: owner.clone(),
                link_id: links[i % LINKS],
                task_id: t.task_id,
                claim_id,
                status,
                result: "done".into(),
            };
            store.submit_task(&submit).await.unwrap();
        }
    }
    let claimed = AssignTask {
        owner: owner.clone(),
        link_id: links[7],
        objective: "claimed for the replay cell".into(),
        idempotency_key: IdempotencyKey::parse("bench-claimed-task").unwrap(),
    };
    let AssignOutcome::Assigned(t) = store.assign_task(&claimed).await.unwrap() else { panic!() };
    store.claim_task(&owner, links[7], t.task_id).await.unwrap();
    running.stop().await;
    (links[7].to_string(), t.task_id.to_string())
}

/// CPU time (user + system, all threads) a process has used so far, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the file (11 and 12 after the name), in clock
    // ticks of 1/100 s on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

/// A cell measured with the server's CPU time: microseconds of server CPU per request.
async fn measured(pid: u32, url: &str, headers: &[(&str, String)], body: &str, c: usize, secs: u64) -> (Cell, f64) {
    let before = cpu_seconds(pid);
    let cell = load(url, headers, body, c, secs).await;
    let cpu = cpu_seconds(pid) - before;
    let per = cpu * 1e6 / (cell.rps * secs as f64).max(1.0);
    (cell, per)
}

struct Cell {
    rps: f64,
    p50: f64,
    p99: f64,
}

/// `connections` clients POSTing `body` to `url` for `secs` (an empty body: GET).
async fn load(url: &str, headers: &[(&str, String)], body: &str, connections: usize, secs: u64) -> Cell {
    let until = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (url, body) = (url.to_owned(), body.to_owned());
        let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::builder().pool_max_idle_per_host(1).tcp_nodelay(true).build().unwrap();
            let mut lat = Vec::new();
            while Instant::now() < until {
                let mut req = if body.is_empty() { http.get(&url) } else { http.post(&url).body(body.clone()) };
                for (k, v) in &headers {
                    req = req.header(k.as_str(), v.as_str());
                }
                let t = Instant::now();
                let res = req.send().await.unwrap();
                assert!(res.status().is_success(), "{}", res.status());
                let text = res.text().await.unwrap();
                lat.push(t.elapsed());
                assert!(!text.contains("\"error\":{"), "{text}");
            }
            lat
        }));
    }
    let mut all: Vec<Duration> = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_unstable();
    let q = |p: f64| all[((p * all.len() as f64).ceil() as usize).clamp(1, all.len()) - 1].as_secs_f64() * 1000.0;
    Cell { rps: all.len() as f64 / secs as f64, p50: q(0.5), p99: q(0.99) }
}

fn rpc(name: &str, args: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}).to_string()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // reqwest is built without a crypto provider (plain HTTP here, but a client needs one).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut args = std::env::args().skip(1);
    let local_bin = PathBuf::from(args.next().expect("usage: peer_bench <local binary> <bench folder> [seconds]"));
    let bench = PathBuf::from(args.next().expect("the folder with seed004_server.py"));
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let work = std::env::temp_dir().join(format!("peer-bench-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&work).unwrap();

    // The reconstruction, populated by its own script, plus one claimed task on L7.
    let db = work.join("seed004.sqlite");
    let py_port = free_port();
    let _py = Killed(
        Command::new("python3")
            .arg(bench.join("seed004_server.py"))
            .args(["--port", &py_port.to_string(), "--db", db.to_str().unwrap(), "--sweep", "guarded"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let py_url = format!("http://127.0.0.1:{py_port}/");
    wait_up(&py_url).await;
    let populated = Command::new("python3")
        .arg(bench.join("populate_seed004.py"))
        .args([db.to_str().unwrap(), &TASKS.to_string(), &LINKS.to_string()])
        .output()
        .unwrap();
    assert!(populated.status.success());
    let http = reqwest::Client::new();
    let assigned: Value = http
        .post(format!("{py_url}assign"))
        .body(json!({"chat_link_id": "L7", "objective": "claimed for the replay cell"}).to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let py_task = assigned["task_id"].as_str().unwrap().to_owned();
    let py_claim = rpc("claim_linked_chat_task", json!({"chat_link_id": "L7", "task_id": py_task}));
    http.post(&py_url).body(py_claim.clone()).send().await.unwrap();

    // The local server on the same data, as its own release process, with a token it accepts.
    let data = work.join("local");
    let (link7, task) = populate_local(&data).await;
    let port = free_port();
    let _local = Killed(
        Command::new(&local_bin)
            .env("FOUNDRY_DATA_DIR", &data)
            .env("FOUNDRY_PORT", port.to_string())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_up(&format!("{base}/panel")).await;
    let secret = std::fs::read(data.join("local-token-secret")).unwrap();
    let token = auth::Hs256Signer::new(&secret, &base, local::LOCAL_AUDIENCE)
        .mint(
            auth::Grant {
                subject: local::DEMO_OWNER,
                client: local::LOCAL_CLIENT,
                scopes: &[tools::SCOPE_READ, tools::SCOPE_RUN],
            },
            SystemClock.now(),
            Duration::from_secs(3600),
        )
        .unwrap();
    let ours_headers = vec![
        ("content-type", "application/json".to_owned()),
        ("accept", "application/json, text/event-stream".to_owned()),
        ("mcp-protocol-version", "2025-11-25".to_owned()),
        ("authorization", format!("Bearer {token}")),
    ];
    let mut rmcp_headers = ours_headers.clone();
    rmcp_headers[1].1 = "application/json;q=1, text/event-stream".to_owned();
    let theirs_headers = vec![("content-type", "application/json".to_owned())];
    let ours_list = rpc("list_linked_chat_tasks", json!({"chat_link_id": link7}));
    let ours_claim = rpc("claim_linked_chat_task", json!({"chat_link_id": link7, "task_id": task}));
    let theirs_list = rpc("list_linked_chat_tasks", json!({"chat_link_id": "L7"}));

    println!(
        "| call | connections | local server req/s | p50 ms | p99 ms | server CPU µs/req | reconstruction req/s | p50 ms | p99 ms | its CPU µs/req | ratio | via rmcp's serve loop req/s | p50 ms | p99 ms | CPU µs/req |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let (local_pid, py_pid) = (_local.0.id(), _py.0.id());
    // The goal docs/results.md reports against: at 4 connections at least 5× the
    // reconstruction's requests per second, and a lower p99 in every cell (at 1 connection the
    // floor below bounds what any server reaches through this client: not a goal there).
    let mut missed = Vec::new();
    for (name, ours, theirs) in [
        ("list_linked_chat_tasks", &ours_list, &theirs_list),
        ("claim_linked_chat_task (replay)", &ours_claim, &py_claim),
    ] {
        for c in [1usize, 4] {
            // Warm both for a second, then measure one after the other.
            load(&format!("{base}/mcp"), &ours_headers, ours, c, 1).await;
            load(&py_url, &theirs_headers, theirs, c, 1).await;
            let (o, o_cpu) = measured(local_pid, &format!("{base}/mcp"), &ours_headers, ours, c, secs).await;
            let (t, t_cpu) = measured(py_pid, &py_url, &theirs_headers, theirs, c, secs).await;
            let (r, r_cpu) = measured(local_pid, &format!("{base}/mcp"), &rmcp_headers, ours, c, secs).await;
            println!(
                "| {name} | {c} | {:.0} | {:.2} | {:.2} | {o_cpu:.0} | {:.0} | {:.2} | {:.2} | {t_cpu:.0} | {:.1}x | {:.0} | {:.2} | {:.2} | {r_cpu:.0} |",
                o.rps,
                o.p50,
                o.p99,
                t.rps,
                t.p50,
                t.p99,
                o.rps / t.rps,
                r.rps,
                r.p50,
                r.p99
            );
            if c == 4 && o.rps < 5.0 * t.rps {
                missed.push(format!("{name} at {c}: {:.1}× the reconstruction's req/s (goal 5×)", o.rps / t.rps));
            }
            if o.p99 >= t.p99 {
                missed.push(format!("{name} at {c}: p99 {:.2} ms, the reconstruction's {:.2} ms", o.p99, t.p99));
            }
        }
    }
    // The floor: what this client and loopback HTTP reach against the same server when the
    // server does nothing (a static document, no token, no store): no server answers a tool
    // call faster than this through this client.
    println!();
    println!(
        "| floor: static answer, no work | connections | local server req/s | p50 ms | p99 ms | server CPU µs/req |"
    );
    println!("|---|---|---|---|---|---|");
    for c in [1usize, 4] {
        let (f, f_cpu) =
            measured(local_pid, &format!("{base}/.well-known/oauth-protected-resource"), &[], "", c, secs).await;
        println!(
            "| GET /.well-known/oauth-protected-resource | {c} | {:.0} | {:.2} | {:.2} | {f_cpu:.0} |",
            f.rps, f.p50, f.p99
        );
    }
    let _ = std::fs::remove_dir_all(work);
    assert!(missed.is_empty(), "the goal was missed: {}", missed.join("; "));
}
