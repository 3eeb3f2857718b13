//! The doorbell end to end: the real relay binary against the local server.
//!
//! Every test sets the waits the doorbell must beat far above what it asserts (a 300 s relaxed
//! poll, a 10 s control poll), so a ring that did not arrive fails the test instead of being
//! covered by a lucky poll. Latencies are printed; the figures are the benchmark's
//! (`doorbell_benchmark` and `doorbell_idle_requests`, ignored; run by [`BENCHMARK_COMMAND`], they
//! write docs/doorbell-figures.json, which the docs and `infra/cost.py` are held to). The test
//! command holds the promises themselves at small scale
//! (`the_doorbell_keeps_its_promises_and_a_broken_one_is_caught`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
        for v in relay::server::proxy::VARIABLES {
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
    crossed(&proxy, &base);
    drop(desk);
    cleanup(&w.dir);
}

/// The relay's syncs (absolute-form requests) and its doorbell (a `CONNECT` tunnel) to `base`
/// went through `proxy`.
fn crossed(proxy: &foundry_tests::net::HttpProxy, base: &str) {
    let seen = proxy.seen();
    let host = base.trim_start_matches("http://");
    assert!(seen.iter().any(|l| l.starts_with(&format!("CONNECT {host} "))), "the doorbell did not tunnel: {seen:?}");
    assert!(seen.iter().any(|l| l.starts_with(&format!("POST {base}{}/sync ", domain::relay::PREFIX))), "{seen:?}");
}

/// A Mac whose proxy is set in System Settings (or by MDM), not in the agent's variables: the
/// relay reads it from `scutil --proxy` (a stub printing that output's shape, as in
/// `tests/fixtures/macos/scutil-proxy-http.txt`, with the test proxy's port), and the syncs and
/// the doorbell go through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_mac_the_system_proxy_is_used_when_the_agent_has_none() {
    let proxy = foundry_tests::net::HttpProxy::start().await;
    let w = world(Policy::default(), domain::doorbell::DOORBELL_POLL_INTERVAL).await;
    let base = w.running.base_url.clone();
    let stubs = w.dir.join("stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    let url = proxy.url();
    let (host, port) = url.trim_start_matches("http://").trim_end_matches('/').rsplit_once(':').unwrap();
    let scutil = stubs.join("scutil");
    std::fs::write(
        &scutil,
        format!(
            "#!/bin/sh\ncat <<'EOF'\n<dictionary> {{\n  ExceptionsList : <array> {{\n    0 : *.local\n    1 : 169.254/16\n  }}\n  FTPPassive : 1\n  HTTPEnable : 1\n  HTTPPort : {port}\n  HTTPProxy : {host}\n}}\nEOF\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&scutil, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", stubs.display(), std::env::var("PATH").unwrap_or_default());
    let env = [("PATH", path.as_str()), (relay::machine::service::TEST_PLATFORM_ENV, "macos")];
    let desk = w.desk_via(7, "echo done", "control_poll_ms = 10000\nauto_update = false", &base, &env).await;
    w.ready(&desk, true).await;
    let id = w.queue(&desk).await;
    w.pickup(id, Duration::from_secs(8)).await;
    crossed(&proxy, &base);
    drop(desk);
    cleanup(&w.dir);
}

/// A session whose folder is missing is left out of the syncs, and the desktop's report says how
/// many it cannot use (what the owner's panel shows with "run relay check on this desktop");
/// the other session still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_reports_how_many_sessions_it_cannot_use() {
    let w = world(Policy::default(), domain::doorbell::DOORBELL_POLL_INTERVAL).await;
    let base = w.running.base_url.clone();
    let missing = w.dir.join("unplugged-disk/graphs");
    let extra = format!(
        "control_poll_ms = 10000\nauto_update = false\n[[sessions]]\ngraph_session_id = \"{}\"\nname = \"on the disk\"\n\
         slug = \"on-the-disk\"\nversion = \"1\"\nprojects = []\ncommand = [\"true\"]\nworking_dir = \"{}\"\n",
        gs(99),
        missing.display()
    );
    let desk = w.desk_via(8, "echo done", &extra, &base, &[]).await;
    w.ready(&desk, true).await;
    let id = w.queue(&desk).await;
    w.pickup(id, Duration::from_secs(8)).await;
    use domain::store::ManageDevices;
    let device = w.running.store.list_devices(&w.owner).await.unwrap().into_iter().find(|d| d.device_id == desk.device);
    let report = device.and_then(|d| d.relay).expect("the desktop reported itself");
    assert_eq!(report.unavailable, Some(1), "{report:?}");
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
    let res = foundry_tests::http()
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

/// A distribution of latencies in seconds: how many, the median, the 95th percentile, the worst.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Spread {
    n: usize,
    p50: f64,
    p95: f64,
    max: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Spread {
        assert!(!v.is_empty(), "no samples");
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
        Spread { n: v.len(), p50: at(0.5), p95: at(0.95), max: v[v.len() - 1] }
    }

    fn json(self) -> serde_json::Value {
        serde_json::json!({ "n": self.n, "p50": round3(self.p50), "p95": round3(self.p95), "max": round3(self.max) })
    }

    fn from_json(v: &serde_json::Value) -> Spread {
        let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("doorbell figures: `{k}` missing in {v}"));
        Spread { n: f("n") as usize, p50: f("p50"), p95: f("p95"), max: f("max") }
    }

    /// `p50 / p95 / max s`, as docs/results.md shows it.
    fn cell(self) -> String {
        format!("{:.3} / {:.3} / {:.3} s", self.p50, self.p95, self.max)
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl World {
    /// `per_desk` runs on each of `desks` at once, each queued as soon as the previous one
    /// completed: the seconds from queued to started of every run.
    async fn chained_pickups(&self, desks: &[Desk], per_desk: u32, within: Duration) -> Vec<f64> {
        let waits = futures_util::future::join_all(desks.iter().map(|d| async move {
            let mut waits = Vec::new();
            for _ in 0..per_desk {
                let id = self.queue(d).await;
                waits.push(self.pickup(id, within).await);
                self.status_of(id, RunStatus::Completed, Duration::from_secs(30)).await;
            }
            waits
        }))
        .await;
        waits.into_iter().flatten().collect()
    }

    /// `per_desk` runs on each of `desks` at once, each cancelled once running (0.1 s after
    /// it started, so the graph's child is up): the seconds from the cancel to `cancelled`.
    async fn chained_cancels(&self, desks: &[Desk], per_desk: u32, within: Duration) -> Vec<f64> {
        let times = futures_util::future::join_all(desks.iter().map(|d| async move {
            let mut times = Vec::new();
            for _ in 0..per_desk {
                let id = self.queue(d).await;
                self.pickup(id, within).await;
                self.status_of(id, RunStatus::Running, Duration::from_secs(10)).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                times.push(self.cancel(id, within).await);
            }
            times
        }))
        .await;
        times.into_iter().flatten().collect()
    }

    /// The requests the server counted from `on` and `off` over `window` of idleness.
    async fn idle_requests(&self, on: &Desk, off: &Desk, window: Duration) -> (u64, u64) {
        let count = |d: &Desk| self.running.relay_requests.of(&d.token);
        let (a, b) = (count(on), count(off));
        tokio::time::sleep(window).await;
        (count(on) - a, count(off) - b)
    }
}

/// What the doorbell must buy, whatever the intervals: a pickup and a cancel of a running graph
/// within a second at the 95th percentile, and an idle desktop making at least ten times fewer
/// requests than one that polls (while still polling: the safety net is there). Each broken
/// promise is one line of the answer.
fn doorbell_verdict(pickup: Spread, cancel: Spread, idle_on: u64, idle_off: u64) -> Vec<String> {
    let mut broken = Vec::new();
    if pickup.p95 >= 1.0 {
        broken.push(format!("pickup p95 {:.3} s is not under 1 s", pickup.p95));
    }
    if cancel.p95 >= 1.0 {
        broken.push(format!("cancel p95 {:.3} s is not under 1 s", cancel.p95));
    }
    if idle_on == 0 {
        broken.push("the idle desktop with the doorbell made no request: its safety poll is gone".to_owned());
    } else if idle_off < 10 * idle_on {
        broken.push(format!("idle requests off/on {idle_off}/{idle_on} is under 10"));
    }
    broken
}

/// The doorbell's promises, in the test command, at small scale and shortened intervals: three
/// desktops chaining pickups, three cancelling running graphs (with a child), and an idle pair
/// (doorbell on and off, on a server of their own) counted over 40 s, all at once. The server's poll is 1 s and the
/// relaxed poll 20 s: 20:1, where the real intervals (300 s and 20 s) are 15:1, in a fifteenth
/// of the time; the control poll is 10 s, so a fast cancel can only be the ring.
///
/// The same verdict is given to a server whose doorbell is broken (every ring dropped, the poll
/// not relaxed: 3 s both), measured at once beside it: it must find all three promises broken.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_doorbell_keeps_its_promises_and_a_broken_one_is_caught() {
    let relaxed = Duration::from_secs(20);
    let fast = Policy { poll_interval: Duration::from_secs(1), ..Policy::default() };
    let good = world(fast, relaxed).await;
    // The idle pair on a server of its own: a ring goes to every desktop of the owner, so the
    // busy desktops' rings would wake it.
    let quiet = world(fast, relaxed).await;
    let broken =
        world(Policy { poll_interval: Duration::from_secs(3), ..Policy::default() }, Duration::from_secs(3)).await;
    broken.running.doorbell.drop_rings(true);
    let control = "control_poll_ms = 10000";
    let child = "sh -c 'sleep 60'; echo";
    let mut g = Vec::new();
    for (n, script, extra) in [
        (600, "echo done", control),
        (601, "echo done", control),
        (602, "echo done", control),
        (603, child, control),
        (604, child, control),
        (605, child, control),
    ] {
        g.push(good.desk(n, script, extra).await);
    }
    let q = [quiet.desk(606, "echo done", "").await, quiet.desk(607, "echo done", "doorbell = false").await];
    let mut b = Vec::new();
    for (n, script, extra) in [
        (610, "echo done", "control_poll_ms = 3000"),
        (611, child, "control_poll_ms = 3000"),
        (612, "echo done", ""),
        (613, "echo done", "doorbell = false"),
    ] {
        b.push(broken.desk(n, script, extra).await);
    }
    for d in &g {
        good.ready(d, true).await;
    }
    quiet.ready(&q[0], true).await;
    quiet.ready(&q[1], false).await;
    for (i, d) in b.iter().enumerate() {
        broken.ready(d, i != 3).await;
    }
    let window = Duration::from_secs(40);
    let within = Duration::from_secs(30);
    let (gp, gc, (g_on, g_off), bp, bc, (b_on, b_off)) = tokio::join!(
        good.chained_pickups(&g[0..3], 4, within),
        good.chained_cancels(&g[3..6], 2, within),
        quiet.idle_requests(&q[0], &q[1], window),
        broken.chained_pickups(&b[0..1], 3, within),
        broken.chained_cancels(&b[1..2], 2, within),
        broken.idle_requests(&b[2], &b[3], window),
    );
    let (gp, gc, bp, bc) = (Spread::of(gp), Spread::of(gc), Spread::of(bp), Spread::of(bc));
    eprintln!(
        "doorbell: pickup {gp:?}, cancel {gc:?}, idle {window:?}: on {g_on}, off {g_off}\n\
         broken doorbell: pickup {bp:?}, cancel {bc:?}, idle: on {b_on}, off {b_off}"
    );
    let verdict = doorbell_verdict(gp, gc, g_on, g_off);
    assert!(verdict.is_empty(), "the doorbell broke its promises: {verdict:?}");
    let caught = doorbell_verdict(bp, bc, b_on, b_off);
    assert_eq!(caught.len(), 3, "a broken doorbell passed a promise: only {caught:?} were caught");
    drop((g, q, b));
    for w in [&good, &quiet, &broken] {
        cleanup(&w.dir);
    }
}

/// Where the benchmarks write their figures and docs/results.md, docs/cost.md and
/// `infra/cost.py` read them.
fn figures_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/doorbell-figures.json")
}

/// Replaces `section` of docs/doorbell-figures.json (the other benchmark's section stays).
fn write_figures(section: &str, value: serde_json::Value) {
    let path = figures_path();
    let mut doc: serde_json::Value = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    doc[section] = value;
    std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap() + "\n").unwrap();
    eprintln!("wrote {} ({section})", path.display());
}

/// The command that runs the benchmarks: nextest's `benchmark` profile, whose timeout is above
/// their wall time (the default one stops a test at 600 s; the idle one sleeps 620 s).
const BENCHMARK_COMMAND: &str =
    "cargo nextest run --workspace --profile benchmark --run-ignored only -E 'test(/relay_doorbell::doorbell_/)'";

/// The benchmark behind docs/results.md ("Doorbell"), writing docs/doorbell-figures.json's
/// `benchmark` section ([`BENCHMARK_COMMAND`]; `FOUNDRY_DOORBELL_RUNS` changes n, 200 by
/// default). `DESKS` relays at once, each chaining `runs / DESKS` runs, with and without the
/// doorbell at the default polls; then cancels of running graphs with and without a child
/// process.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: about 25 minutes of wall time"]
async fn doorbell_benchmark() {
    const DESKS: u32 = 10;
    let runs: u32 = std::env::var("FOUNDRY_DOORBELL_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let per_desk = runs.div_ceil(DESKS);
    let mut figures = serde_json::json!({ "command": BENCHMARK_COMMAND, "desks": DESKS });
    for doorbell in [true, false] {
        let mode = if doorbell { "on" } else { "off" };
        let w = world(Policy::default(), domain::doorbell::DOORBELL_POLL_INTERVAL).await;
        let extra = if doorbell { "" } else { "doorbell = false" };
        let mut desks = Vec::new();
        for n in 0..DESKS {
            desks.push(w.desk(100 + n, "echo done", extra).await);
        }
        for d in &desks {
            w.ready(d, doorbell).await;
        }
        let pickups = Spread::of(w.chained_pickups(&desks, per_desk, Duration::from_secs(60)).await);
        eprintln!("pickup, doorbell {mode}: {pickups:?}");
        figures["pickup"][mode] = pickups.json();
        drop(desks);
        for (key, base, script) in
            [("cancel_child", 200, "sh -c 'sleep 60'; echo"), ("cancel_exec", 300, "exec sleep 60")]
        {
            let mut desks = Vec::new();
            for n in 0..DESKS {
                desks.push(w.desk(base + n, script, extra).await);
            }
            for d in &desks {
                w.ready(d, doorbell).await;
            }
            let cancels = Spread::of(w.chained_cancels(&desks, per_desk, Duration::from_secs(60)).await);
            eprintln!("{key}, doorbell {mode}: {cancels:?}");
            figures[key][mode] = cancels.json();
        }
        cleanup(&w.dir);
    }
    write_figures("benchmark", figures);
}

/// Requests an idle desktop makes, both ways, counted by the server over
/// `FOUNDRY_DOORBELL_IDLE_S` (default 620 s: two relaxed polls), scaled to a day; writes
/// docs/doorbell-figures.json's `idle` section ([`BENCHMARK_COMMAND`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: ten minutes of wall time"]
async fn doorbell_idle_requests() {
    let secs: u64 = std::env::var("FOUNDRY_DOORBELL_IDLE_S").ok().and_then(|v| v.parse().ok()).unwrap_or(620);
    let w = world(Policy::default(), domain::doorbell::DOORBELL_POLL_INTERVAL).await;
    let on = w.desk(500, "echo done", "").await;
    let off = w.desk(501, "echo done", "doorbell = false").await;
    w.ready(&on, true).await;
    w.ready(&off, false).await;
    let (a, b) = w.idle_requests(&on, &off, Duration::from_secs(secs)).await;
    let per_day = |n: u64| (n as f64 * 86_400.0 / secs as f64).round() as u64;
    eprintln!("idle {secs} s: doorbell on {a} requests ({}/day), off {b} requests ({}/day)", per_day(a), per_day(b));
    write_figures(
        "idle",
        serde_json::json!({
            "command": BENCHMARK_COMMAND,
            "seconds": secs,
            "on": a,
            "off": b,
            "on_per_day": per_day(a),
            "off_per_day": per_day(b),
        }),
    );
    drop((on, off));
    cleanup(&w.dir);
}

/// What docs/results.md and docs/cost.md must say, made from docs/doorbell-figures.json: the
/// doorbell table whole, and the idle sentences.
fn figure_texts(figures: &serde_json::Value) -> (String, Vec<String>, Vec<String>) {
    let bench = &figures["benchmark"];
    let row = |label: &str, key: &str| {
        format!(
            "| {label} | {} | {} |",
            Spread::from_json(&bench[key]["on"]).cell(),
            Spread::from_json(&bench[key]["off"]).cell()
        )
    };
    let n = Spread::from_json(&bench["pickup"]["on"]).n;
    let table = [
        format!("| measure (n = {n} each) | doorbell on: p50 / p95 / max | doorbell off: p50 / p95 / max |"),
        "|---|---|---|".to_owned(),
        row("pickup (queued → started)", "pickup"),
        row("cancel-running, graph with a child (`sh -c 'sleep 60'; echo`)", "cancel_child"),
        row("cancel-running, no child (`exec sleep 60`)", "cancel_exec"),
    ]
    .join("\n");
    let idle = &figures["idle"];
    let get = |k: &str| idle[k].as_u64().unwrap_or_else(|| panic!("doorbell figures: idle `{k}` missing"));
    let (on, off) = (get("on"), get("off"));
    let ratio = off as f64 / on.max(1) as f64;
    let results = vec![
        format!("server per device token over {} s, scaled to a day): doorbell on {on} requests", get("seconds")),
        format!("(**{}/day**),", foundry_tests::grouped(get("on_per_day"))),
        format!("doorbell off {off} (**{}/day**) — {ratio:.1}× fewer.", foundry_tests::grouped(get("off_per_day"))),
    ];
    let cost = vec![format!(
        "({} a day polling, {} a day with the doorbell)",
        foundry_tests::grouped(get("off_per_day")),
        foundry_tests::grouped(get("on_per_day"))
    )];
    (table, results, cost)
}

/// The doc says what the figures say: the table whole (a stale row fails), each sentence
/// present (line breaks in the doc count as spaces).
fn figures_in(doc: &str, table: &str, sentences: &[String]) -> Result<(), String> {
    foundry_tests::tables_match(table, doc)?;
    for s in sentences {
        if !foundry_tests::says(doc, s) {
            return Err(format!("it does not say `{s}`"));
        }
    }
    Ok(())
}

/// docs/results.md's doorbell table and idle counts, and docs/cost.md's idle counts, are what
/// the benchmarks last wrote to docs/doorbell-figures.json (which `infra/cost.py` prices, held
/// to docs/cost.md by `tool_permissions::the_cost_tables_are_the_output_of_the_cost_command`).
/// Rerun [`BENCHMARK_COMMAND`], then fix the docs this names.
#[test]
fn the_doorbell_figures_in_the_docs_are_the_benchmarks() {
    let figures: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(figures_path()).unwrap()).unwrap();
    let (table, results, cost) = figure_texts(&figures);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let results_md = std::fs::read_to_string(root.join("results.md")).unwrap();
    let cost_md = std::fs::read_to_string(root.join("cost.md")).unwrap();
    if let Err(e) = figures_in(&results_md, &table, &results) {
        panic!("docs/results.md, Doorbell: {e}\nthe figures are in docs/doorbell-figures.json ({BENCHMARK_COMMAND})");
    }
    if let Err(e) = figures_in(&cost_md, "", &cost) {
        panic!("docs/cost.md: {e}\nthe figures are in docs/doorbell-figures.json");
    }
    // docs/relay.md quotes the polling pickup's median.
    let relay_md = std::fs::read_to_string(root.join("relay.md")).unwrap();
    let polled =
        format!("measured below, {:.1} s each", figures["benchmark"]["pickup"]["off"]["p50"].as_f64().unwrap());
    assert!(foundry_tests::says(&relay_md, &polled), "docs/relay.md does not say {polled:?}");
    // The broken variants: a figure the benchmark no longer gives, a stale row beside the
    // current one, an idle count changed.
    let p95 = Spread::from_json(&figures["benchmark"]["pickup"]["on"]).cell();
    let moved = results_md.replacen(&p95, &p95.replacen('0', "9", 1), 1);
    assert!(figures_in(&moved, &table, &results).is_err(), "a changed pickup figure passed");
    let row = table.lines().nth(2).unwrap();
    let stale = results_md.replacen(row, &format!("{row}\n{row}"), 1);
    assert!(figures_in(&stale, &table, &results).is_err(), "a repeated row passed");
    let day = format!("(**{}/day**)", foundry_tests::grouped(figures["idle"]["on_per_day"].as_u64().unwrap()));
    let idle = results_md.replacen(&day, "(**1/day**)", 1);
    assert!(figures_in(&idle, &table, &results).is_err(), "a changed idle count passed");
    // What the socket adds a day is arithmetic from the relay's constants: a reconnect before
    // API Gateway's 2 h limit, a keep-alive every PING_EVERY.
    let said = socket_day_text(domain::doorbell::PING_EVERY);
    assert!(foundry_tests::says(&results_md, &said), "docs/results.md (Doorbell) does not say {said:?}");
    let moved = socket_day_text(domain::doorbell::PING_EVERY * 2);
    assert!(!foundry_tests::says(&results_md, &moved), "a changed keep-alive interval passed");
}

/// docs/results.md's sentence of the doorbell socket's reconnects and keep-alives a day.
fn socket_day_text(ping_every: Duration) -> String {
    use domain::doorbell::{MAX_CONNECTION, RECONNECT_BEFORE_LIMIT};
    let day = 24 * 3600;
    let life = (MAX_CONNECTION - RECONNECT_BEFORE_LIMIT).as_secs();
    format!(
        "about {} reconnects (one `$connect` and one `$disconnect` each, every {} min) and {} keep-alives (a data message to the `ping` route every {} min",
        (day as f64 / life as f64).round(),
        life / 60,
        day / ping_every.as_secs(),
        ping_every.as_secs() / 60
    )
}
