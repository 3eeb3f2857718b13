//! The doorbell end to end: the real relay binary against the local server.
//!
//! Every test sets the waits the doorbell must beat far above what it asserts (a 300 s relaxed
//! poll, a 10 s control poll), so a ring that did not arrive fails the test instead of being
//! covered by a lucky poll. Latencies are printed; the figures are the benchmark's
//! (`doorbell_benchmark`, ignored: `cargo nextest run --run-ignored only -E 'test(doorbell_benchmark)'`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use domain::clock::{Clock, SystemClock};
use domain::ids::{AgentId, CommandId, GraphSessionId, IdempotencyKey, OwnerId, ProjectId};
use domain::limits::Policy;
use domain::runs::{QueueOutcome, QueueRun, RunStatus};
use domain::store::{CancelRuns, ManageDevices, ManageProjects, QueueRuns, ReadRuns};
use foundry_tests::{built_binary, wait_until};
use local::LocalConfig;

fn gs(n: u32) -> GraphSessionId {
    GraphSessionId::parse("g", &format!("gs_{n:032x}")).unwrap()
}

struct Desk {
    child: std::process::Child,
    token: String,
    state: PathBuf,
    device: uuid::Uuid,
    project: ProjectId,
    session: GraphSessionId,
}

impl Drop for Desk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct World {
    running: foundry_tests::LocalServer,
    dir: PathBuf,
    owner: OwnerId,
    agent: AgentId,
    /// What a relay with its doorbell up is told to poll at.
    relaxed: Duration,
}

async fn world(policy: Policy, doorbell_poll: Duration) -> World {
    world_at(policy, doorbell_poll, None).await
}

/// [`world`] with the server's public URL (a forwarder in front of it).
async fn world_at(policy: Policy, doorbell_poll: Duration, public_url: Option<String>) -> World {
    let running = foundry_tests::LocalServer::start("relay-doorbell", |at| LocalConfig {
        policy,
        doorbell_poll_interval: doorbell_poll,
        public_url,
        ..at
    })
    .await;
    let dir = running.dir.clone();
    let owner = running.demo.owner.clone();
    World {
        running,
        dir,
        owner,
        agent: AgentId::new("doorbell-client", local::DEMO_OWNER).unwrap(),
        relaxed: doorbell_poll,
    }
}

impl World {
    /// A desktop: its own device, project and one session running `script`; the relay binary
    /// started with `extra` config lines.
    async fn desk(&self, n: u32, script: &str, extra: &str) -> Desk {
        self.desk_via(n, script, extra, &self.running.base_url, &[]).await
    }

    /// [`World::desk`] reaching the server at `server_url`, with `env` in the relay's
    /// environment (every proxy variable of the test's own is removed first).
    async fn desk_via(&self, n: u32, script: &str, extra: &str, server_url: &str, env: &[(&str, &str)]) -> Desk {
        let store = &self.running.store;
        let project = store.create_project(&self.owner, &format!("Desk {n}")).await.unwrap();
        store.set_project_enabled(&self.owner, project.project_id, true).await.unwrap();
        let (token, hash) = domain::devices::new_token().unwrap();
        let device = store.create_device(&self.owner, &format!("desk {n}"), &hash).await.unwrap();
        let state = self.dir.join(format!("desk-{n}"));
        std::fs::create_dir_all(&state).unwrap();
        let config = state.join("relay.toml");
        let text = format!(
            "server_url = \"{}\"\ndevice_token = \"{token}\"\nstate_dir = \"{}\"\ncancel_grace_ms = 1000\n{extra}\n\
             [[sessions]]\ngraph_session_id = \"{}\"\nname = \"desk {n}\"\nslug = \"desk-{n}\"\nversion = \"1\"\n\
             projects = [\"{}\"]\ncommand = [\"sh\", \"-c\", {}]\n",
            server_url,
            state.join("state").display(),
            gs(n),
            project.project_id,
            serde_json::to_string(script).unwrap()
        );
        std::fs::write(&config, text).unwrap();
        let mut command = std::process::Command::new(built_binary("relay", &["relay/src", "shared/domain/src"]));
        for v in relay::proxy::VARIABLES {
            command.env_remove(v).env_remove(v.to_ascii_lowercase());
        }
        let child = command
            .envs(env.iter().copied())
            .arg("--config")
            .arg(&config)
            .arg("run")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Desk {
            child,
            token,
            state: state.join("state"),
            device: device.device_id,
            project: project.project_id,
            session: gs(n),
        }
    }

    /// Waits until `desk` has synced its session (it can be queued) and, when `doorbell`, its
    /// doorbell is open.
    async fn ready(&self, desk: &Desk, doorbell: bool) {
        let hub = &self.running.doorbell;
        wait_until("the relay to sync and ring-ready", Duration::from_secs(30), || async {
            let synced = self
                .running
                .store
                .get_project(&self.owner, desk.project)
                .await
                .unwrap()
                .is_some_and(|p| p.sessions.iter().any(|s| s.graph_session_id == desk.session));
            (synced && (!doorbell || hub.connected(Some(desk.device)) == 1)).then_some(())
        })
        .await;
        if doorbell {
            // The sync after connecting carries the doorbell header: the relaxed interval.
            wait_until("the relaxed poll in status.json", Duration::from_secs(30), || async {
                let s = std::fs::read(desk.state.join("status.json")).ok()?;
                let v: serde_json::Value = serde_json::from_slice(&s).ok()?;
                (v["poll_interval_s"].as_u64()? == self.relaxed.as_secs()
                    && v["doorbell"].as_str()?.starts_with("connected"))
                .then_some(())
            })
            .await;
        }
    }

    async fn queue(&self, desk: &Desk) -> CommandId {
        let req = QueueRun {
            owner: self.owner.clone(),
            agent: self.agent.clone(),
            project_id: Some(desk.project),
            graph_session_id: desk.session.clone(),
            arguments: serde_json::json!({}),
            idempotency_key: IdempotencyKey::parse(&uuid::Uuid::new_v4().to_string()).unwrap(),
        };
        match self.running.store.queue_run(&req).await.unwrap() {
            QueueOutcome::Queued(r) => r.command_id,
            other => panic!("{other:?}"),
        }
    }

    /// Seconds from queued to started, once it started.
    async fn pickup(&self, id: CommandId, within: Duration) -> f64 {
        let run = wait_until("the run to start", within, || async {
            let r = self.running.store.get_run(&self.agent, id).await.unwrap()?;
            r.started_at.is_some().then_some(r)
        })
        .await;
        run.started_at.unwrap().since(run.queued_at).as_secs_f64()
    }

    async fn status_of(&self, id: CommandId, want: RunStatus, within: Duration) {
        wait_until(&format!("the run to be {want:?}"), within, || async {
            let r = self.running.store.get_run(&self.agent, id).await.unwrap()?;
            (r.status == want).then_some(())
        })
        .await;
    }

    /// Asks to cancel a running run; seconds until the relay reported it cancelled.
    async fn cancel(&self, id: CommandId, within: Duration) -> f64 {
        self.running.store.cancel_run(&self.agent, id).await.unwrap();
        let asked = Instant::now();
        self.status_of(id, RunStatus::Cancelled, within).await;
        asked.elapsed().as_secs_f64()
    }
}

fn cleanup(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

/// A queued run starts, and a cancel reaches the running graph, through the doorbell: the
/// relaxed poll is 300 s and the control poll 10 s, so neither could come from polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_starts_a_queued_run_and_a_cancel_at_once() {
    let w = world(Policy::default(), domain::doorbell::DOORBELL_POLL_INTERVAL).await;
    let desk = w.desk(1, "echo done; sleep 60", "control_poll_ms = 10000").await;
    w.ready(&desk, true).await;
    let id = w.queue(&desk).await;
    let pickup = w.pickup(id, Duration::from_secs(8)).await;
    w.status_of(id, RunStatus::Running, Duration::from_secs(5)).await;
    let cancel = w.cancel(id, Duration::from_secs(5)).await;
    eprintln!("doorbell: pickup {pickup:.3} s, cancel of a running graph with a child {cancel:.3} s");
    assert!(w.running.doorbell.rings_sent() >= 2, "a sync and a control ring");
    drop(desk);
    cleanup(&w.dir);
}

/// The doorbell server goes away mid-way: the relay is back to the server's normal poll (2 s
/// here, 300 s while the doorbell was up) at once, so a run queued then still starts within one
/// interval; when the doorbell returns, the relay reconnects and the poll relaxes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_doorbell_gone_the_poll_takes_over_and_it_reconnects() {
    let policy = Policy { poll_interval: Duration::from_secs(2), ..Policy::default() };
    let w = world(policy, domain::doorbell::DOORBELL_POLL_INTERVAL).await;
    let desk = w.desk(2, "echo done", "").await;
    w.ready(&desk, true).await;
    w.running.doorbell.set_enabled(false);
    wait_until("the socket to close", Duration::from_secs(10), || async {
        (w.running.doorbell.connected(Some(desk.device)) == 0).then_some(())
    })
    .await;
    let id = w.queue(&desk).await;
    let pickup = w.pickup(id, Duration::from_secs(8)).await;
    eprintln!("doorbell down: pickup {pickup:.3} s with a 2 s poll");
    w.running.doorbell.set_enabled(true);
    w.ready(&desk, true).await;
    drop(desk);
    cleanup(&w.dir);
}

/// A ring that is lost (the server's fault hook drops every ring) is covered by the safety
/// poll, relaxed to 3 s here: the run starts late, not never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_ring_is_covered_by_the_safety_poll() {
    let w = world(Policy::default(), Duration::from_secs(3)).await;
    let desk = w.desk(3, "echo done", "").await;
    w.ready(&desk, true).await;
    w.running.doorbell.drop_rings(true);
    let id = w.queue(&desk).await;
    let pickup = w.pickup(id, Duration::from_secs(10)).await;
    w.status_of(id, RunStatus::Completed, Duration::from_secs(10)).await;
    eprintln!("lost ring: pickup {pickup:.3} s with a 3 s safety poll");
    assert_eq!(w.running.doorbell.rings_sent(), 0, "the fault hook let a ring through");
    drop(desk);
    cleanup(&w.dir);
}

/// A socket cut silently — no close frame, no FIN: the forwarder in front of the server just
/// stops moving bytes, as a sleep or a Wi-Fi change does — is called dead when a ping goes
/// unanswered for the pong deadline (1.5 s here, pings every 0.5 s), and a new socket opens
/// through the forwarder; TCP keepalive alone would take 90 s, and without the deadline the
/// relay would go on believing the old one. The relay meanwhile stops claiming a live
/// doorbell, so the server no longer relaxes its poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_cut_silently_is_replaced_within_the_pong_deadline() {
    let fwd = foundry_tests::net::Forwarder::bind().await;
    let w = world_at(Policy::default(), domain::doorbell::DOORBELL_POLL_INTERVAL, Some(fwd.url())).await;
    fwd.set_target(w.running.addr);
    let desk =
        w.desk_via(5, "echo done", "doorbell_ping_ms = 500\ndoorbell_pong_deadline_ms = 1500", &fwd.url(), &[]).await;
    w.ready(&desk, true).await;
    let hub = &w.running.doorbell;
    assert_eq!(hub.connected(Some(desk.device)), 1);
    let accepted = fwd.accepted();
    fwd.freeze();
    let cut = Instant::now();
    // The server's end of the old socket never hears of it: a second socket of the device is
    // the new one.
    wait_until("a new doorbell socket", Duration::from_secs(10), || async {
        (hub.connected(Some(desk.device)) >= 2 && fwd.accepted() > accepted).then_some(())
    })
    .await;
    let replaced = cut.elapsed().as_secs_f64();
    eprintln!("silent cut: a new doorbell socket after {replaced:.2} s (ping 0.5 s, pong deadline 1.5 s)");
    assert!(
        replaced >= 1.5,
        "replaced before the deadline could have passed ({replaced:.2} s): not the deadline's doing"
    );
    // And it works: a queued run is rung through the new socket (the relaxed poll is 300 s).
    let id = w.queue(&desk).await;
    w.pickup(id, Duration::from_secs(40)).await;
    drop(desk);
    cleanup(&w.dir);
}

/// Through an HTTP proxy (`HTTP_PROXY`, the only route the relay is given here): the syncs
/// go as absolute-form requests and the doorbell through a `CONNECT` tunnel, and a queued run
/// is rung at once through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_syncs_and_the_doorbell_go_through_the_proxy() {
    let proxy = foundry_tests::net::HttpProxy::start().await;
    let w = world(Policy::default(), domain::doorbell::DOORBELL_POLL_INTERVAL).await;
    let base = w.running.base_url.clone();
    let desk = w.desk_via(6, "echo done", "control_poll_ms = 10000", &base, &[("HTTP_PROXY", &proxy.url())]).await;
    w.ready(&desk, true).await;
    let id = w.queue(&desk).await;
    let pickup = w.pickup(id, Duration::from_secs(8)).await;
    eprintln!("through the proxy: pickup {pickup:.3} s");
    let seen = proxy.seen();
    let host = base.trim_start_matches("http://");
    assert!(seen.iter().any(|l| l.starts_with(&format!("CONNECT {host} "))), "the doorbell did not tunnel: {seen:?}");
    assert!(seen.iter().any(|l| l.starts_with(&format!("POST {base}{}/sync ", domain::relay::PREFIX))), "{seen:?}");
    drop(desk);
    cleanup(&w.dir);
}

/// Revoking a device closes its open socket and refuses its next upgrade (401).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_device_is_disconnected_and_cannot_reconnect() {
    let w = world(Policy::default(), domain::doorbell::DOORBELL_POLL_INTERVAL).await;
    let desk = w.desk(4, "echo done", "").await;
    w.ready(&desk, true).await;
    let token = desk.token.clone();
    assert!(w.running.store.revoke_device(&w.owner, desk.device).await.unwrap());
    wait_until("the revoked socket to close", Duration::from_secs(10), || async {
        (w.running.doorbell.connected(Some(desk.device)) == 0).then_some(())
    })
    .await;
    let url = format!("{}{}{}", w.running.base_url, domain::relay::PREFIX, domain::doorbell::PATH);
    let res = reqwest::Client::new()
        .get(&url)
        .bearer_auth(&token)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    // Nor does the relay get back in on its own.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(w.running.doorbell.connected(Some(desk.device)), 0);
    drop(desk);
    cleanup(&w.dir);
}

fn percentiles(mut v: Vec<f64>) -> (f64, f64, f64, usize) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    (at(0.5), at(0.95), *v.last().unwrap(), v.len())
}

/// The benchmark behind docs/results.md ("Doorbell"), run outside nextest's 10-minute limit:
/// `target/debug/deps/suite-* --ignored --nocapture relay_doorbell::doorbell_benchmark`. `DESKS` relays at once, each chaining
/// `FOUNDRY_DOORBELL_RUNS / DESKS` runs (the next queued as soon as the previous finished), with
/// and without the doorbell at the default polls; then cancels of running graphs with and
/// without a child process.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: minutes of wall time"]
async fn doorbell_benchmark() {
    const DESKS: u32 = 10;
    let runs: u32 = std::env::var("FOUNDRY_DOORBELL_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let per_desk = runs.div_ceil(DESKS);
    let mut report = Vec::new();
    for doorbell in [true, false] {
        let w = world(Policy::default(), domain::doorbell::DOORBELL_POLL_INTERVAL).await;
        let extra = if doorbell { "" } else { "doorbell = false" };
        let mut desks = Vec::new();
        for n in 0..DESKS {
            desks.push(w.desk(100 + n, "echo done", extra).await);
        }
        for d in &desks {
            w.ready(d, doorbell).await;
        }
        let started = SystemClock.now();
        let waits = futures_util::future::join_all(desks.iter().map(|d| {
            let w = &w;
            async move {
                let mut waits = Vec::new();
                for _ in 0..per_desk {
                    let id = w.queue(d).await;
                    waits.push(w.pickup(id, Duration::from_secs(60)).await);
                    w.status_of(id, RunStatus::Completed, Duration::from_secs(30)).await;
                }
                waits
            }
        }))
        .await;
        let waits: Vec<f64> = waits.into_iter().flatten().collect();
        let (p50, p95, max, n) = percentiles(waits);
        report.push(format!(
            "pickup, doorbell {}: n={n} p50 {p50:.3} s, p95 {p95:.3} s, max {max:.3} s ({:.0} s wall)",
            if doorbell { "on" } else { "off" },
            SystemClock.now().since(started).as_secs_f64()
        ));
        eprintln!("{}", report.last().unwrap());
        drop(desks);
        for (label, script) in [("with a child", "sh -c 'sleep 60'; echo"), ("exec, no child", "exec sleep 60")] {
            let mut desks = Vec::new();
            for n in 0..DESKS {
                let n = n + if label.starts_with("with") { 200 } else { 300 };
                desks.push(w.desk(n, script, extra).await);
            }
            for d in &desks {
                w.ready(d, doorbell).await;
            }
            let times = futures_util::future::join_all(desks.iter().map(|d| {
                let w = &w;
                async move {
                    let mut times = Vec::new();
                    for _ in 0..per_desk {
                        let id = w.queue(d).await;
                        w.pickup(id, Duration::from_secs(60)).await;
                        w.status_of(id, RunStatus::Running, Duration::from_secs(10)).await;
                        // Let the graph's child come up (the case the regression was about).
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        times.push(w.cancel(id, Duration::from_secs(30)).await);
                    }
                    times
                }
            }))
            .await;
            let (p50, p95, max, n) = percentiles(times.into_iter().flatten().collect());
            report.push(format!(
                "cancel-running {label}, doorbell {}: n={n} p50 {p50:.3} s, p95 {p95:.3} s, max {max:.3} s",
                if doorbell { "on" } else { "off" }
            ));
            eprintln!("{}", report.last().unwrap());
        }
        cleanup(&w.dir);
    }
    for line in &report {
        eprintln!("{line}");
    }
}

/// Requests an idle desktop makes, both ways, counted by the server over
/// `FOUNDRY_DOORBELL_IDLE_S` (default 620 s: two relaxed polls), scaled to a day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: ten minutes of wall time"]
async fn doorbell_idle_requests() {
    let secs: u64 = std::env::var("FOUNDRY_DOORBELL_IDLE_S").ok().and_then(|v| v.parse().ok()).unwrap_or(620);
    let w = world(Policy::default(), domain::doorbell::DOORBELL_POLL_INTERVAL).await;
    let on = w.desk(500, "echo done", "").await;
    let off = w.desk(501, "echo done", "doorbell = false").await;
    w.ready(&on, true).await;
    w.ready(&off, false).await;
    let (a, b) = (w.running.relay_requests.of(&on.token), w.running.relay_requests.of(&off.token));
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let per_day = |n: u64| n as f64 * 86_400.0 / secs as f64;
    let (a, b) = (w.running.relay_requests.of(&on.token) - a, w.running.relay_requests.of(&off.token) - b);
    eprintln!(
        "idle {secs} s: doorbell on {a} requests ({:.0}/day), off {b} requests ({:.0}/day)",
        per_day(a),
        per_day(b)
    );
    drop((on, off));
    cleanup(&w.dir);
}
