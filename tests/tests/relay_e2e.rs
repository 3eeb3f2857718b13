//! End to end: the local server, the relay (in process, or the real binary where a process must
//! die), and small scripted Graph commands. Each test checks the exact strings.
//!
//! The relay polls a real server over HTTP, so these tests wait for real events with a
//! deadline (`wait_until`), never for a guessed delay, with the server's poll interval at 1 s
//! and the control poll at 200 ms to keep them short. Graph scripts that must be stopped
//! record their pid (= their process group); the tests check and end those groups by id.
//! Latencies are printed, not asserted: they are measured in `docs/results.md`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use domain::clock::{Clock, SystemClock};
use domain::ids::{AgentId, CommandId, GraphSessionId, IdempotencyKey};
use domain::limits::Policy;
use domain::runs::{QueueOutcome, QueueRun, Run, RunStatus, SessionMeta};
use domain::store::{CancelRuns, ManageProjects, QueueRuns, ReadRuns, SyncSessions};
use foundry_tests::graphs::{kill_group, process_alive, recorded_pid};
use foundry_tests::{built_binary, wait_until};
use local::LocalConfig;
use relay::config::Config;
use relay::run::agent::Relay;

struct Env {
    running: foundry_tests::LocalServer,
    dir: PathBuf,
    agent: AgentId,
}

fn gs(n: u8) -> GraphSessionId {
    GraphSessionId::parse("g", &format!("gs_{n:032x}")).unwrap()
}

async fn env(heartbeat_timeout: Duration) -> Env {
    let policy = Policy { poll_interval: Duration::from_secs(1), heartbeat_timeout, ..Policy::default() };
    let running = foundry_tests::LocalServer::start("relay-e2e", |at| LocalConfig { policy, ..at }).await;
    let dir = running.dir.clone();
    Env { running, dir, agent: AgentId::new("e2e-client", local::DEMO_OWNER).unwrap() }
}

/// A session line for the relay config: (session number, slug, shell script).
type SessionSpec<'a> = (u8, &'a str, &'a str);

impl Env {
    fn config(&self, sessions: &[SessionSpec<'_>], state: &str) -> (String, PathBuf) {
        self.config_with(sessions, state, 200, "")
    }

    /// A config with a `control_poll_ms` control poll and more top-level settings (`extra`,
    /// TOML lines).
    fn config_with(
        &self,
        sessions: &[SessionSpec<'_>],
        state: &str,
        control_poll_ms: u64,
        extra: &str,
    ) -> (String, PathBuf) {
        let project = self.running.demo.project_id;
        let mut text = format!(
            "server_url = \"{}\"\ndevice_token = \"{}\"\nstate_dir = \"{}\"\ncontrol_poll_ms = {control_poll_ms}\npoll_s = 1\ncancel_grace_ms = 1000\n{extra}",
            self.running.base_url,
            self.running.device_token,
            self.dir.join(state).display()
        );
        for (n, slug, script) in sessions {
            text += &format!(
                "[[sessions]]\ngraph_session_id = \"{}\"\nname = \"{slug}\"\nslug = \"{slug}\"\nversion = \"1\"\nprojects = [\"{project}\"]\ncommand = [\"sh\", \"-c\", {}]\n",
                gs(*n),
                serde_json::to_string(script).unwrap()
            );
        }
        let path = self.dir.join(format!("{state}.toml"));
        std::fs::create_dir_all(&self.dir).unwrap();
        std::fs::write(&path, &text).unwrap();
        (text, path)
    }

    /// Starts an in-process relay; dropping the sender stops it.
    fn relay(
        &self,
        sessions: &[SessionSpec<'_>],
        state: &str,
    ) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let (_, path) = self.config(sessions, state);
        relay_in_process(&path)
    }

    /// What an earlier sync of this desktop's relay would have left: the sessions it shares in
    /// the demo project.
    async fn share(&self, sessions: &[(u8, &str)]) {
        let metas: Vec<SessionMeta> = sessions
            .iter()
            .map(|(n, slug)| SessionMeta {
                graph_session_id: gs(*n),
                name: (*slug).into(),
                description: String::new(),
                slug: (*slug).into(),
                version: "1".into(),
                status: "ready".into(),
            })
            .collect();
        self.running
            .store
            .sync_sessions(&self.running.demo.owner, self.running.demo.project_id, self.running.device_id, &metas)
            .await
            .unwrap();
    }

    async fn queue(&self, session: u8, args: serde_json::Value) -> CommandId {
        let req = QueueRun {
            owner: self.running.demo.owner.clone(),
            agent: self.agent.clone(),
            project_id: Some(self.running.demo.project_id),
            graph_session_id: gs(session),
            arguments: args,
            idempotency_key: IdempotencyKey::parse(&uuid::Uuid::new_v4().to_string()).unwrap(),
        };
        match self.running.store.queue_run(&req).await.unwrap() {
            QueueOutcome::Queued(r) => r.command_id,
            other => panic!("{other:?}"),
        }
    }

    async fn run(&self, id: CommandId) -> Run {
        self.running.store.get_run(&self.agent, id).await.unwrap().unwrap()
    }

    async fn status(&self, id: CommandId) -> (RunStatus, Option<String>) {
        let v = self.run(id).await.view(SystemClock.now(), &Policy::default());
        (v.status, v.error)
    }

    async fn wait_shared(&self) {
        let owner = self.running.demo.owner.clone();
        let project = self.running.demo.project_id;
        wait_until("the relay's first sync", Duration::from_secs(10), || {
            let store = self.running.store.clone();
            let owner = owner.clone();
            async move { store.get_project(&owner, project).await.unwrap().and_then(|p| p.last_sync_at) }
        })
        .await;
    }

    async fn wait_status(&self, id: CommandId, want: RunStatus, within: Duration) -> Run {
        wait_until(&format!("{id} to be {want:?}"), within, || async move {
            let run = self.run(id).await;
            (run.status == want).then_some(run)
        })
        .await
    }

    /// `GET /owner{path}` as the owner, over HTTP: its JSON.
    async fn owner_get(&self, path: &str) -> serde_json::Value {
        let url = format!("{}/owner{path}", self.running.base_url);
        let res = foundry_tests::http().get(url).bearer_auth(&self.running.owner_token).send().await.unwrap();
        res.json().await.unwrap()
    }

    async fn finish(self) {
        self.running.stop().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An in-process relay on the config at `path`; dropping the sender stops it.
fn relay_in_process(path: &Path) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let config = Config::load(path).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        Relay::new(config)
            .unwrap()
            .run(async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
    });
    (tx, handle)
}

/// The real relay binary on the config at `path` (its output dropped).
fn relay_process(path: &Path) -> std::process::Child {
    std::process::Command::new(built_binary("relay", &["relay/src", "shared/domain/src"]))
        .args(["--config", path.to_str().unwrap(), "run"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn marker(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}-{}", uuid::Uuid::new_v4()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_runs_queued_at_once_finish_in_sequence() {
    let e = env(Duration::from_secs(600)).await;
    e.share(&[(1, "report")]).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(e.queue(1, serde_json::json!({"n": i})).await);
    }
    let (stop, task) = e.relay(&[(1, "report", "sleep 0.2; cat")], "state");
    let mut runs = Vec::new();
    for id in &ids {
        runs.push(e.wait_status(*id, RunStatus::Completed, Duration::from_secs(30)).await);
    }
    for pair in runs.windows(2) {
        assert!(
            pair[1].started_at.unwrap() >= pair[0].finished_at.unwrap(),
            "runs overlapped: one desktop is one worker"
        );
    }
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r.completion.as_ref().unwrap().result.as_deref(), Some(format!("{{\"n\":{i}}}").as_str()));
    }
    drop(stop);
    task.await.unwrap();
    e.finish().await;
}

/// The real relay binary with `max_parallel = 5`: five runs queued at once are all running at
/// once, each Graph's progress and log tail reach the server (the store, and the owner's runs
/// over HTTP) while it runs, a cancel stops only its own run (its process group gone, the
/// others untouched), and a SIGKILL with four in flight loses none: the restarted relay reports
/// each `relay restarted during run` and runs none again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_slots_run_five_at_once_each_cancellable_and_a_kill_loses_none() {
    let e = env(Duration::from_secs(600)).await;
    let pids = e.dir.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let script = foundry_tests::graphs::waiting(&pids);
    let (_, path) = e.config_with(&[(1, "slot", &script)], "state", 200, "max_parallel = 5\n");
    let spawn = || relay_process(&path);
    let mut first = spawn();
    e.wait_shared().await;
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(e.queue(1, serde_json::json!({ "n": n })).await);
    }
    // Five in flight at once, each with its own progress and log.
    let env = &e;
    for (n, id) in ids.iter().enumerate() {
        let run = wait_until(&format!("run {n}'s progress"), Duration::from_secs(30), || async move {
            let run = env.run(*id).await;
            // The first change is forwarded at once, the next within the 10 s window: wait for
            // the state with both the log line and the progress line.
            run.progress
                .as_ref()
                .is_some_and(|p| !p.progress.tail.is_empty() && !p.progress.message.is_empty())
                .then_some(run)
        })
        .await;
        let p = run.progress.unwrap().progress;
        assert_eq!(
            (p.message.as_str(), p.fraction),
            (foundry_tests::graphs::PROGRESS.0, Some(foundry_tests::graphs::PROGRESS.1))
        );
        assert_eq!(p.tail, vec![format!("log of {n}")]);
    }
    for id in &ids {
        assert_eq!(e.status(*id).await.0, RunStatus::Running, "five slots, five runs at once");
    }
    let runs = e.owner_get("/runs").await;
    let shown = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["progress"]["message"] == foundry_tests::graphs::PROGRESS.0);
    assert_eq!(shown.count(), 5, "{runs}");
    // Cancel one: its group stops, the other four run on.
    let cancelled_pid = recorded_pid(&pids.join("1")).await;
    e.running.store.cancel_run(&e.agent, ids[1]).await.unwrap();
    e.wait_status(ids[1], RunStatus::Cancelled, Duration::from_secs(20)).await;
    wait_until("the cancelled run's group to end", Duration::from_secs(20), || async {
        (!process_alive(cancelled_pid)).then_some(())
    })
    .await;
    for n in [0, 2, 3, 4] {
        assert_eq!(e.status(ids[n]).await.0, RunStatus::Running, "a cancel stopped run {n}");
    }
    // SIGKILL with four in flight, then a new relay: each is reported, none runs again.
    let orphans: Vec<i32> =
        futures_util::future::join_all([0, 2, 3, 4].map(|n| recorded_pid_owned(pids.join(n.to_string())))).await;
    first.kill().unwrap();
    first.wait().unwrap();
    let mut second = spawn();
    for n in [0, 2, 3, 4] {
        let run = e.wait_status(ids[n], RunStatus::Failed, Duration::from_secs(20)).await;
        assert_eq!(run.completion.unwrap().error.as_deref(), Some("relay restarted during run"));
    }
    for pid in orphans {
        kill_group(pid);
    }
    for n in 0..5 {
        assert_eq!(foundry_tests::graphs::starts(&pids, n), 1, "run {n} ran again");
    }
    second.kill().unwrap();
    second.wait().unwrap();
    e.finish().await;
}

async fn recorded_pid_owned(path: PathBuf) -> i32 {
    recorded_pid(&path).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_queued_is_never_started() {
    let e = env(Duration::from_secs(600)).await;
    e.share(&[(1, "report")]).await;
    let ran = marker(&e.dir, "ran");
    let id = e.queue(1, serde_json::json!({})).await;
    e.running.store.cancel_run(&e.agent, id).await.unwrap();
    let other = e.queue(1, serde_json::json!({})).await;
    let script = format!("touch {}", ran.display());
    let (stop, task) = e.relay(&[(1, "report", &script)], "state");
    // The next run completes, so the relay has passed over the queue at least once.
    e.wait_status(other, RunStatus::Completed, Duration::from_secs(20)).await;
    assert_eq!(e.status(id).await.0, RunStatus::Cancelled);
    assert!(e.run(id).await.started_at.is_none(), "the desktop started a cancelled run");
    drop(stop);
    task.await.unwrap();
    e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_running_stops_the_process_within_one_control_poll() {
    let e = env(Duration::from_secs(600)).await;
    let (pid_file, grandchild_file) = (marker(&e.dir, "pid"), marker(&e.dir, "grandchild"));
    // The graph records its pid, starts a grandchild that records its own, and would run for
    // a minute.
    let script = format!(
        "echo $$ > {}; sh -c 'echo $$ > {}; exec sleep 60' & wait",
        pid_file.display(),
        grandchild_file.display()
    );
    let (stop, task) = e.relay(&[(1, "slow", &script)], "state");
    e.wait_shared().await;
    let id = e.queue(1, serde_json::json!({})).await;
    e.wait_status(id, RunStatus::Running, Duration::from_secs(20)).await;
    let pid = recorded_pid(&pid_file).await;
    let grandchild = recorded_pid(&grandchild_file).await;
    let asked = Instant::now();
    e.running.store.cancel_run(&e.agent, id).await.unwrap();
    let run = e.wait_status(id, RunStatus::Cancelled, Duration::from_secs(10)).await;
    eprintln!("cancel-running latency: {} ms (control poll 200 ms)", asked.elapsed().as_millis());
    assert!(run.completion.unwrap().error.unwrap().starts_with("cancelled"));
    // The whole process group goes: the leader and the grandchild it started. (The relay
    // reports `cancelled` once SIGTERM is sent, so their end is waited for, bounded.)
    for (who, pid) in [("the graph process", pid), ("its grandchild", grandchild)] {
        wait_until(&format!("{who} to end after the cancel"), Duration::from_secs(10), || async move {
            (!process_alive(pid)).then_some(())
        })
        .await;
    }
    drop(stop);
    task.await.unwrap();
    e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_unshared_between_queue_and_pickup_is_cancelled_with_the_exact_error() {
    let e = env(Duration::from_secs(600)).await;
    e.share(&[(1, "report"), (2, "old-slug")]).await;
    let gone = e.queue(1, serde_json::json!({})).await;
    let renamed = e.queue(2, serde_json::json!({})).await;
    // This desktop no longer shares session 1, and session 2's slug changed.
    let (stop, task) = e.relay(&[(2, "new-slug", "cat")], "state");
    for id in [gone, renamed] {
        e.wait_status(id, RunStatus::Cancelled, Duration::from_secs(20)).await;
        assert_eq!(e.status(id).await.1.as_deref(), Some("Graph session is no longer shared with this project"));
    }
    drop(stop);
    task.await.unwrap();
    e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_bounded_all_or_nothing() {
    let e = env(Duration::from_secs(600)).await;
    let japanese = e.dir.join("japanese.txt");
    std::fs::create_dir_all(&e.dir).unwrap();
    std::fs::write(&japanese, "日".repeat(99_899)).unwrap();
    let big = "head -c 100001 /dev/zero | tr '\\0' a";
    let fits = format!("cat {}", japanese.display());
    let fails = "head -c 5000 /dev/zero | tr '\\0' x >&2; exit 1";
    let (stop, task) = e.relay(&[(1, "big", big), (2, "japanese", &fits), (3, "fails", fails)], "state");
    e.wait_shared().await;
    let (a, b, c) = (
        e.queue(1, serde_json::json!({})).await,
        e.queue(2, serde_json::json!({})).await,
        e.queue(3, serde_json::json!({})).await,
    );
    let big_run = e.wait_status(a, RunStatus::Completed, Duration::from_secs(20)).await.completion.unwrap();
    assert!(big_run.result_truncated && big_run.result.is_none(), "100,001 characters must be truncated whole");
    let jp = e.wait_status(b, RunStatus::Completed, Duration::from_secs(20)).await.completion.unwrap();
    assert_eq!(jp.result.map(|r| r.chars().count()), Some(99_899));
    let failed = e.wait_status(c, RunStatus::Failed, Duration::from_secs(20)).await.completion.unwrap();
    assert_eq!(failed.error.unwrap().chars().count(), 2_000, "errors are cut to 2,000 characters");
    drop(stop);
    task.await.unwrap();
    e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_relay_is_offline_runs_stay_queued_then_all_complete() {
    let e = env(Duration::from_secs(600)).await;
    e.share(&[(1, "report")]).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(e.queue(1, serde_json::json!({})).await);
    }
    // Nobody polls: nothing moves (the queue lives on the server).
    for id in &ids {
        assert_eq!(e.status(*id).await.0, RunStatus::Queued);
    }
    let back = Instant::now();
    let (stop, task) = e.relay(&[(1, "report", "echo done")], "state");
    for id in &ids {
        e.wait_status(*id, RunStatus::Completed, Duration::from_secs(20)).await;
    }
    eprintln!("back online: 3 queued runs completed {} ms after the relay started", back.elapsed().as_millis());
    drop(stop);
    task.await.unwrap();
    e.finish().await;
}

/// The owner pauses a desktop while its relay runs a graph: that run finishes, the next queued
/// run stays queued while the relay says it is paused (`relay status`'s file), and resuming
/// releases it. The relay reported its own version on its syncs (the owner's Desktops table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_desktop_finishes_its_run_and_starts_no_new_one_until_resumed() {
    use domain::store::{ManageDevices, PauseDevices};
    let e = env(Duration::from_secs(600)).await;
    e.share(&[(1, "report")]).await;
    let (owner, device) = (e.running.demo.owner.clone(), e.running.device_id);
    let flag = e.dir.join("release");
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done; echo done", flag.display());
    let first = e.queue(1, serde_json::json!({})).await;
    let (stop, task) = e.relay(&[(1, "report", &script)], "state");
    e.wait_status(first, RunStatus::Running, Duration::from_secs(20)).await;
    // What the owner sees of this real relay: busy with that run; once paused, paused and still
    // finishing it.
    let desktop = || async {
        let v = e.owner_get("/devices").await;
        v["devices"].as_array().unwrap().iter().find(|d| d["device_id"] == device.to_string()).unwrap().clone()
    };
    let d = desktop().await;
    assert_eq!((&d["state"], &d["busy"]["command_id"]), (&serde_json::json!("busy"), &serde_json::json!(first)), "{d}");
    let pause = domain::devices::Pause { at: SystemClock.now(), until: None, note: "lid closed".into() };
    assert!(e.running.store.set_device_pause(&owner, device, Some(&pause)).await.unwrap());
    let d = desktop().await;
    assert_eq!(
        (&d["state"], &d["busy"]["command_id"]),
        (&serde_json::json!("paused"), &serde_json::json!(first)),
        "{d}"
    );
    std::fs::write(&flag, "").unwrap();
    e.wait_status(first, RunStatus::Completed, Duration::from_secs(20)).await;
    let status_file = e.dir.join("state").join("status.json");
    wait_until("the relay to say it is paused", Duration::from_secs(20), || {
        let status_file = status_file.clone();
        async move {
            let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&status_file).ok()?).ok()?;
            s["paused"].as_str().filter(|p| p.contains("lid closed")).map(str::to_owned)
        }
    })
    .await;
    // Each queued run rings the doorbell, so the relay syncs at once; a pass handles what its
    // sync was handed before the next pass syncs, so once the sync after the second ring has
    // arrived, a run handed by the first would have been started.
    let token = e.running.device_token.clone();
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let before = e.running.relay_requests.of(&token);
        waiting.push(e.queue(1, serde_json::json!({})).await);
        wait_until("the relay's sync after the ring", Duration::from_secs(20), || {
            let n = e.running.relay_requests.of(&token);
            async move { (n > before).then_some(()) }
        })
        .await;
    }
    for id in &waiting {
        assert_eq!(e.status(*id).await.0, RunStatus::Queued, "a paused desktop started a run");
    }
    let d = e.running.store.list_devices(&owner).await.unwrap().into_iter().find(|d| d.device_id == device).unwrap();
    assert_eq!(d.state(SystemClock.now(), Duration::from_secs(1), false), domain::fleet::DesktopState::Paused);
    assert_eq!(d.relay.map(|r| r.version), Some(relay::identity::this_relay().version), "the relay's report");
    // Resuming rings the doorbell: the held runs start now, not at the safety poll. That tells
    // a ring from a poll only while the doorbell is up and the server has relaxed the relay's
    // poll to the doorbell's safety interval (with the 1 s poll of this server any poll would
    // start them): both are checked first.
    assert_eq!(e.running.doorbell.connected(Some(device)), 1, "the relay's doorbell is not connected");
    let relaxed = domain::doorbell::DOORBELL_POLL_INTERVAL.as_secs();
    wait_until("the relay to poll at the doorbell's safety interval", Duration::from_secs(20), || {
        let status_file = status_file.clone();
        async move {
            let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&status_file).ok()?).ok()?;
            (s["poll_interval_s"].as_u64()? >= relaxed).then_some(())
        }
    })
    .await;
    assert!(e.running.store.set_device_pause(&owner, device, None).await.unwrap());
    for id in waiting {
        e.wait_status(id, RunStatus::Completed, Duration::from_secs(20)).await;
    }
    drop(stop);
    task.await.unwrap();
    e.finish().await;
}

/// `relay pause` and `relay resume` on the desktop itself: the same pause as the panel's
/// (the server's rule), a bad duration refused by the relay and a bad bound by the server, each
/// naming the option, with nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_pause_and_resume_set_the_desktops_pause() {
    use domain::store::ManageDevices;
    let e = env(Duration::from_secs(600)).await;
    let (_, path) = e.config(&[(1, "report", "true")], "state");
    let bin = built_binary("relay", &["relay/src", "shared/domain/src"]);
    let relay = |args: &[&str]| {
        let out = std::process::Command::new(&bin).arg("--config").arg(&path).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let pause_of = || async {
        let ds = e.running.store.list_devices(&e.running.demo.owner).await.unwrap();
        ds.into_iter().find(|d| d.device_id == e.running.device_id).unwrap().paused
    };
    for (args, want) in [
        (vec!["pause", "--for", "2x"], "--for 2x: a whole number and a unit"),
        (vec!["pause", "--for", "0s"], "the server refused: for_seconds: 1 to 2592000"),
        (vec!["pause", "--for", "31d"], "the server refused: for_seconds: 1 to 2592000"),
    ] {
        let (code, _, err) = relay(&args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    assert_eq!(pause_of().await, None, "a refused pause paused the desktop");
    let before = SystemClock.now();
    let (code, out, err) = relay(&["pause", "--for", "2h", "--note", "travelling"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("paused until "), "{out}");
    let p = pause_of().await.expect("paused");
    assert_eq!(p.note, "travelling");
    let until = p.until.unwrap().as_millis();
    assert!((before.as_millis() + 7_200_000..=SystemClock.now().as_millis() + 7_200_000).contains(&until), "{p:?}");
    let (code, out, err) = relay(&["resume"]);
    assert_eq!((code, out.trim()), (Some(0), "resumed: queued runs start at the next sync"), "{err}");
    assert_eq!(pause_of().await, None);
    e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_completion_post_is_delivered_by_the_next_pass() {
    use axum::body::Body;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let e = env(Duration::from_secs(600)).await;
    e.share(&[(1, "report")]).await;
    // A proxy in front of the server that loses the first completion POST (it never arrives).
    let target = e.running.base_url.clone();
    let dropped = Arc::new(AtomicUsize::new(0));
    let d = dropped.clone();
    let http = reqwest_like::client();
    let app = axum::Router::new().fallback(move |req: http::Request<Body>| {
        let (target, d, http) = (target.clone(), d.clone(), http.clone());
        async move {
            if req.uri().path().ends_with("/complete") && d.fetch_add(1, Ordering::SeqCst) == 0 {
                return http::Response::builder().status(502).body(Body::from("lost")).unwrap();
            }
            reqwest_like::forward(&http, &target, req).await
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let (text, _) = e.config(&[(1, "report", "echo ok")], "state");
    let path = e.dir.join("proxied.toml");
    std::fs::write(&path, text.replace(&e.running.base_url, &proxy)).unwrap();
    let config = Config::load(&path).unwrap();
    let outbox = config.state_dir.join("outbox");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        Relay::new(config)
            .unwrap()
            .run(async move {
                let _ = rx.await;
            })
            .await
            .unwrap()
    });
    let id = e.queue(1, serde_json::json!({})).await;
    e.wait_status(id, RunStatus::Completed, Duration::from_secs(20)).await;
    assert!(dropped.load(Ordering::SeqCst) >= 2, "the first completion POST was not the one lost");
    wait_until("the outbox to empty", Duration::from_secs(5), || async {
        (std::fs::read_dir(&outbox).unwrap().count() == 0).then_some(())
    })
    .await;
    drop(tx);
    task.await.unwrap();
    server.abort();
    e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_mid_run_reports_relay_restarted_and_loses_nothing_else() {
    let e = env(Duration::from_secs(600)).await;
    let pid_file = marker(&e.dir, "pid");
    let slow = format!("echo $$ > {}; exec sleep 600", pid_file.display());
    let (_, path) = e.config(&[(1, "slow", &slow), (2, "quick", "echo fine")], "state");
    let spawn = || relay_process(&path);
    let mut first = spawn();
    e.wait_shared().await;
    let slow = e.queue(1, serde_json::json!({})).await;
    e.wait_status(slow, RunStatus::Running, Duration::from_secs(20)).await;
    let orphan = recorded_pid(&pid_file).await;
    let quick = e.queue(2, serde_json::json!({})).await;
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let mut second = spawn();
    let run = e.wait_status(slow, RunStatus::Failed, Duration::from_secs(20)).await;
    assert_eq!(run.completion.unwrap().error.as_deref(), Some("relay restarted during run"));
    e.wait_status(quick, RunStatus::Completed, Duration::from_secs(20)).await;
    second.kill().unwrap();
    second.wait().unwrap();
    // The killed relay's graph is orphaned in its own process group (a relay restart does not
    // hunt it down): end exactly that group.
    kill_group(orphan);
    e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_stops_polling_mid_run_reads_desktop_stopped_reporting() {
    let timeout = Duration::from_secs(2);
    let e = env(timeout).await;
    let (stop, task) = e.relay(&[(1, "slow", "sleep 20")], "state");
    e.wait_shared().await;
    let id = e.queue(1, serde_json::json!({})).await;
    e.wait_status(id, RunStatus::Running, Duration::from_secs(20)).await;
    // The desktop goes silent mid-run (lid closed): no more control polls.
    task.abort();
    drop(stop);
    let policy = Policy { heartbeat_timeout: timeout, ..Policy::default() };
    let view = wait_until("the run to read failed", Duration::from_secs(10), || async {
        let v = e.run(id).await.view(SystemClock.now(), &policy);
        (v.status == RunStatus::Failed).then_some(v)
    })
    .await;
    assert_eq!(view.error.as_deref(), Some("desktop stopped reporting"));
    e.finish().await;
}

/// A tiny forwarding client for the fault-injecting proxy.
mod reqwest_like {
    use axum::body::Body;

    pub fn client() -> reqwest::Client {
        foundry_tests::http()
    }

    pub async fn forward(http: &reqwest::Client, target: &str, req: http::Request<Body>) -> http::Response<Body> {
        let (parts, body) = req.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let mut out = http.request(parts.method.clone(), format!("{target}{}", parts.uri.path())).body(body);
        for (k, v) in &parts.headers {
            if k != "host" {
                out = out.header(k, v);
            }
        }
        match out.send().await {
            Ok(res) => {
                let mut b = http::Response::builder().status(res.status());
                for (k, v) in res.headers() {
                    b = b.header(k, v);
                }
                b.body(Body::from(res.bytes().await.unwrap_or_default())).unwrap()
            }
            Err(_) => http::Response::builder().status(502).body(Body::empty()).unwrap(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_device_token_keeps_completions_in_the_outbox() {
    let e = env(Duration::from_secs(600)).await;
    let (text, _) = e.config(&[(1, "report", "echo ok")], "state");
    let path = e.dir.join("revoked.toml");
    std::fs::write(&path, text.replace(&e.running.device_token, "fcd_revoked-or-mistyped")).unwrap();
    let config = Config::load(&path).unwrap();
    let state = relay::machine::disk::State::open(&config.state_dir).unwrap();
    let pending = domain::runs::Completion {
        execution_id: "e".into(),
        status: domain::runs::FinalStatus::Completed,
        result: Some("finished while the token was being rotated".into()),
        result_truncated: false,
        error: None,
        total_tokens: None,
        reported_cost: None,
    };
    state.outbox.put(CommandId::generate(), &pending).unwrap();
    // The relay takes the state folder's lock: let go of it first.
    drop(state);
    let outbox = relay::machine::disk::Dir::open(config.state_dir.join("outbox")).unwrap();
    let status_file = config.state_dir.join("status.json");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        Relay::new(config)
            .unwrap()
            .run(async move {
                let _ = rx.await;
            })
            .await
            .unwrap()
    });
    let status: relay::machine::status::Status = wait_until("a failed pass", Duration::from_secs(10), || async {
        let s: relay::machine::status::Status = serde_json::from_slice(&std::fs::read(&status_file).ok()?).ok()?;
        s.last_error.is_some().then_some(s)
    })
    .await;
    assert!(status.last_error.unwrap().contains("device token rejected (401)"));
    assert_eq!(outbox.len(), 1, "a completion was dropped because the token was rejected");
    drop(tx);
    task.await.unwrap();
    e.finish().await;
}

/// The cancel benchmark's command; it writes docs/cancel-figures.json.
const CANCEL_COMMAND: &str =
    "cargo test -p foundry-tests --test suite relay_e2e::cancel_latency -- --ignored --nocapture";

fn cancel_figures_path() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/cancel-figures.json")
}

/// What docs/results.md says of docs/cancel-figures.json's figures: the "The relay: cancel and idle" lines
/// (the 3 s poll alone, and with the doorbell) and the seed table's note.
fn cancel_texts(f: &serde_json::Value) -> [String; 3] {
    let s = |row: &str, k: &str| format!("{:.2}", f[row][k].as_f64().unwrap() / 1000.0);
    let bold = |row: &str| {
        format!(
            "n = {}): **mean {} s, p95 {} s, max {} s**",
            f[row]["n"],
            s(row, "mean_ms"),
            s(row, "p95_ms"),
            s(row, "max_ms")
        )
    };
    [
        bold("poll"),
        bold("doorbell"),
        format!(
            "the real relay measures {} / {} / {} s",
            s("poll", "mean_ms"),
            s("poll", "p95_ms"),
            s("poll", "max_ms")
        ),
    ]
}

/// docs/results.md's cancel latency of the real relay is docs/cancel-figures.json's, which the
/// benchmark writes ([`CANCEL_COMMAND`]); a changed figure is caught.
#[test]
fn the_cancel_figures_in_the_docs_are_the_benchmarks() {
    let f: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(cancel_figures_path()).unwrap()).unwrap();
    let results =
        std::fs::read_to_string(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/results.md"))
            .unwrap();
    for text in cancel_texts(&f) {
        assert!(
            foundry_tests::says(&results, &text),
            "docs/results.md does not say {text:?} (docs/cancel-figures.json, {CANCEL_COMMAND})"
        );
    }
    let mut moved = f.clone();
    moved["poll"]["p95_ms"] = serde_json::json!(f["poll"]["p95_ms"].as_f64().unwrap() + 10.0);
    assert!(!foundry_tests::says(&results, &cancel_texts(&moved)[0]), "a changed figure would pass");
}

/// The sentences docs/results.md says of the relay's idle cost, from `infra/relay-idle.sh 300`'s
/// docs/relay-idle-figures.json.
fn relay_idle_texts(f: &serde_json::Value) -> Vec<String> {
    let n = |k: &str| f[k].as_u64().unwrap_or_else(|| panic!("{k} in docs/relay-idle-figures.json"));
    let mib = |kb: u64| format!("{:.1}", kb as f64 / 1024.0);
    let peak =
        if n("hwm_kb") == n("rss_kb") { "also the peak".to_owned() } else { format!("peak {} MiB", mib(n("hwm_kb"))) };
    vec![
        format!("the release relay ({} bytes, x86_64)", foundry_tests::grouped(n("relay_bytes"))),
        format!(
            "**{} MiB resident (`VmRSS`, {peak}) and {:.2} s of CPU in total**",
            mib(n("rss_kb")),
            n("cpu_ms") as f64 / 1000.0
        ),
    ]
}

/// docs/results.md's idle cost of the relay ("The relay: cancel and idle") is what `infra/relay-idle.sh 300`
/// measured on a release build, from the file the script writes (it asserts its goals: under
/// 16 MiB, under 1 s of CPU); a changed figure is caught.
#[test]
fn the_relay_idle_figures_in_the_docs_are_the_script() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("docs/relay-idle-figures.json")).unwrap()).unwrap();
    let results = std::fs::read_to_string(root.join("docs/results.md")).unwrap();
    for text in relay_idle_texts(&f) {
        assert!(
            foundry_tests::says(&results, &text),
            "docs/results.md does not say {text:?} (docs/relay-idle-figures.json)"
        );
    }
    let mut moved = f.clone();
    moved["rss_kb"] = serde_json::json!(f["rss_kb"].as_u64().unwrap() + 200);
    assert!(!foundry_tests::says(&results, &relay_idle_texts(&moved)[1]), "a changed figure would pass");
}

/// Cancel latency at the relay's default 3 s control poll: from the agent's cancel to the run
/// reading `cancelled` on the server (process stopped, completion recorded), cancelled at a
/// random moment of a running graph, n = 20. A benchmark: its goals asserted loosely, its
/// figures written to docs/cancel-figures.json ([`CANCEL_COMMAND`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: cargo test -p foundry-tests --test suite relay_e2e::cancel_latency -- --ignored --nocapture"]
async fn cancel_latency_at_the_default_control_poll() {
    let mut figures = serde_json::json!({
        "command": CANCEL_COMMAND,
        "measured": domain::clock::Clock::now(&domain::clock::SystemClock).rfc3339(),
    });
    // The 3 s control poll alone (`doorbell = false`), then the default, where the cancel rings.
    for (key, extra) in [("poll", "doorbell = false\n"), ("doorbell", "")] {
        let e = env(Duration::from_secs(600)).await;
        let (_, path) = e.config_with(&[(1, "slow", "sleep 60 & wait")], key, 3000, extra);
        assert_eq!(Config::load(&path).unwrap().control_poll, relay::config::DEFAULT_CONTROL_POLL);
        let (tx, task) = relay_in_process(&path);
        e.wait_shared().await;
        let mut ms = Vec::new();
        for _ in 0..20 {
            let id = e.queue(1, serde_json::json!({})).await;
            e.wait_status(id, RunStatus::Running, Duration::from_secs(30)).await;
            let wait = u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 3000 / 256;
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let asked = Instant::now();
            e.running.store.cancel_run(&e.agent, id).await.unwrap();
            e.wait_status(id, RunStatus::Cancelled, Duration::from_secs(30)).await;
            ms.push(asked.elapsed().as_millis() as u64);
        }
        let mut sorted = ms.clone();
        sorted.sort_unstable();
        let mean = ms.iter().sum::<u64>() as f64 / ms.len() as f64;
        let (p95, max) = (sorted[(sorted.len() * 95).div_ceil(100) - 1], sorted[sorted.len() - 1]);
        println!("cancel latency, {key}, n = {}: mean {mean:.0} ms, p95 {p95} ms, max {max} ms; all {ms:?}", ms.len());
        let poll = relay::config::DEFAULT_CONTROL_POLL.as_millis() as u64;
        if key == "poll" {
            // Within one control poll plus the stop and the completion on average, never two.
            assert!(mean < (poll + 1_000) as f64, "mean {mean:.0} ms: more than one poll and a second");
            assert!(max < 2 * poll, "max {max} ms: two polls");
        } else {
            assert!(p95 < 1_000, "p95 {p95} ms: the ring did not bring the cancel within a second");
        }
        figures[key] = serde_json::json!({"n": ms.len(), "mean_ms": mean, "p95_ms": p95, "max_ms": max});
        drop(tx);
        task.await.unwrap();
        e.finish().await;
    }
    std::fs::write(cancel_figures_path(), serde_json::to_string_pretty(&figures).unwrap() + "\n").unwrap();
    println!("wrote docs/cancel-figures.json: {}", cancel_texts(&figures).join("; "));
}

/// Two relay processes on one state folder (the login agent plus a manual `relay run`): the
/// second refuses to start, saying why, and the first keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_relay_on_the_same_state_folder_refuses_to_start() {
    let e = env(Duration::from_secs(600)).await;
    let (_, path) = e.config(&[(1, "report", "echo ok")], "state");
    let bin = built_binary("relay", &["relay/src", "shared/domain/src"]);
    let mut first = std::process::Command::new(&bin)
        .args(["--config", path.to_str().unwrap(), "run"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    e.wait_shared().await;
    let second =
        tokio::process::Command::new(&bin).args(["--config", path.to_str().unwrap(), "run"]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second relay started on the same state folder");
    assert!(stderr.contains("another relay is already running"), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", first.id())), "{stderr}");
    // Under launchd or systemd it does not exit (which would be a restart loop): it says why and
    // waits to retry.
    let log = e.dir.join("supervised.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let mut supervised = std::process::Command::new(&bin)
        .args(["--config", path.to_str().unwrap(), "run"])
        .env(relay::machine::service::SUPERVISED_ENV, "1")
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .unwrap();
    let said =
        foundry_tests::wait_until("the supervised relay to say why it waits", Duration::from_secs(10), || async {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains("cannot start yet").then_some(text)
        })
        .await;
    assert!(said.contains("another relay is already running"), "{said}");
    assert!(supervised.try_wait().unwrap().is_none(), "the supervised relay exited into a restart loop");
    supervised.kill().unwrap();
    supervised.wait().unwrap();
    let id = e.queue(1, serde_json::json!({})).await;
    e.wait_status(id, RunStatus::Completed, Duration::from_secs(20)).await;
    first.kill().unwrap();
    first.wait().unwrap();
    e.finish().await;
}

/// `relay install` writes the login service and loads it; `uninstall` unloads and removes it.
/// The service manager is a stub on `PATH` that records how it was called (this machine has
/// no user session manager); when loading fails, install says so and how to do it by hand.
/// (Multi-threaded: `install` ends with `relay check`, which calls the server this test runs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_loads_the_service_and_uninstall_unloads_it() {
    let e = env(Duration::from_secs(600)).await;
    let (_, config) = e.config(&[(1, "report", "echo ok")], "state");
    let home = e.dir.join("home");
    let stubs = e.dir.join("stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    let calls = e.dir.join("calls.log");
    // The session probe (`systemctl --user is-system-running`, `launchctl print gui/…`) finds a
    // session; every other call exits `exit`.
    let stub = |exit: u8| {
        let path = stubs.join(if cfg!(target_os = "macos") { "launchctl" } else { "systemctl" });
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho \"$*\" >> {}\ncase \"$*\" in *is-system-running*|print*) echo running; exit 0 ;; esac\nexit {exit}\n",
                calls.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let relay = |args: &[&str]| {
        std::process::Command::new(built_binary("relay", &["relay/src", "shared/domain/src"]))
            .args(["--config", config.to_str().unwrap()])
            .args(args)
            .env("HOME", &home)
            .env("PATH", format!("{}:{}", stubs.display(), std::env::var("PATH").unwrap_or_default()))
            .env(relay::cli::commands::ALLOW_ROOT_ENV, "1")
            .output()
            .unwrap()
    };
    stub(0);
    // As root (these machines run tests as root), install refuses unless told it is a test.
    let uid = std::process::Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() == "0" {
        let refused = std::process::Command::new(built_binary("relay", &["relay/src", "shared/domain/src"]))
            .args(["--config", config.to_str().unwrap(), "install"])
            .env("HOME", &home)
            .env_remove(relay::cli::commands::ALLOW_ROOT_ENV)
            .output()
            .unwrap();
        assert!(!refused.status.success(), "installed as root");
        assert!(String::from_utf8_lossy(&refused.stderr).contains("refusing to install as root"));
        assert!(!relay::machine::service::service_file(relay::machine::service::Platform::current(), &home).exists());
    }
    let out = relay(&["install"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // It ends with `relay check` under the unit's variables: the server answered.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("device token accepted") && said.contains("(its variables are used below)"), "{said}");
    let file = relay::machine::service::service_file(relay::machine::service::Platform::current(), &home);
    assert!(file.exists());
    let log = std::fs::read_to_string(&calls).unwrap();
    let expected = relay::machine::service::load_commands(relay::machine::service::Platform::current(), &file, "UID");
    for c in &expected {
        let args = c.command[1..].join(" ");
        let pattern = args.split("gui/UID").next().unwrap().to_owned();
        assert!(log.contains(pattern.trim()), "{pattern:?} was not run: {log}");
    }
    // The unit runs graphs with the install-time PATH, and the relay knows it is supervised.
    let unit = std::fs::read_to_string(&file).unwrap();
    assert!(unit.contains(&stubs.display().to_string()), "the install-time PATH is not in {unit}");
    assert!(unit.contains(relay::machine::service::SUPERVISED_ENV), "{unit}");
    // Installing again replaces the loaded service instead of failing.
    let out = relay(&["install"]);
    assert!(out.status.success(), "a second install: {}", String::from_utf8_lossy(&out.stderr));
    let out = relay(&["uninstall"]);
    assert!(out.status.success());
    assert!(!file.exists(), "uninstall left the service file");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("left in place: the state folder"), "{said}");
    let log = std::fs::read_to_string(&calls).unwrap();
    assert!(log.contains("disable --now") || log.contains("bootout"), "{log}");
    // With the file already gone, uninstall still unloads by name.
    std::fs::write(&calls, "").unwrap();
    assert!(relay(&["uninstall"]).status.success());
    let log = std::fs::read_to_string(&calls).unwrap();
    assert!(log.contains("disable --now") || log.contains("bootout"), "uninstall without a file did not unload: {log}");
    // A service manager that refuses: install fails and says what to run.
    stub(1);
    let out = relay(&["install"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("could not load it") && stderr.contains("load it yourself with"),
        "{stderr}"
    );
    e.finish().await;
}

/// `relay check` runs under the login service's environment, not the terminal's: a session's
/// command found on the shell's `PATH` but not on the unit's is a failure naming the unit's
/// `PATH`; a proxy variable present only in the unit is the proxy it tries (and here fails to
/// reach); a config others can read while it holds the token is flagged. Each failure comes
/// with its fix and makes the command exit non-zero; fixed, the same check passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_runs_under_the_login_services_environment() {
    use std::os::unix::fs::PermissionsExt;
    let e = env(Duration::from_secs(600)).await;
    let tools = e.dir.join("tools");
    let stubs = e.dir.join("stubs");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::create_dir_all(&stubs).unwrap();
    std::fs::write(tools.join("graphtool"), "#!/bin/sh\necho ok\n").unwrap();
    std::fs::set_permissions(tools.join("graphtool"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(stubs.join("systemctl"), "#!/bin/sh\ncase \"$*\" in *is-system-running*) echo running ;; esac\n")
        .unwrap();
    std::fs::set_permissions(stubs.join("systemctl"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (text, config) = e.config(&[(1, "report", "echo ok")], "state");
    let text = text.replace("command = [\"sh\", \"-c\", \"echo ok\"]", "command = [\"graphtool\"]");
    std::fs::write(&config, &text).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let home = e.dir.join("home");
    let relay = |args: &[&str], path: &str, proxy: Option<&str>| {
        let mut c = std::process::Command::new(built_binary("relay", &["relay/src", "shared/domain/src"]));
        for v in relay::server::proxy::VARIABLES {
            c.env_remove(v).env_remove(v.to_ascii_lowercase());
        }
        if let Some(p) = proxy {
            c.env("HTTP_PROXY", p);
        }
        c.args(args)
            .arg("--config")
            .arg(&config)
            .env("HOME", &home)
            .env("PATH", path)
            .env(relay::cli::commands::ALLOW_ROOT_ENV, "1")
            .env(relay::machine::service::TEST_PLATFORM_ENV, "linux")
            .output()
            .unwrap()
    };
    let narrow = format!("{}:/usr/bin:/bin", stubs.display());
    let wide = format!("{}:{narrow}", tools.display());
    // Installed from a shell without the tool on PATH and with a proxy nobody listens on.
    let installed = relay(&["install"], &narrow, Some("http://127.0.0.1:9"));
    assert!(installed.status.success(), "{}", String::from_utf8_lossy(&installed.stderr));
    // Checked from a shell that has the tool and no proxy: the unit's environment decides.
    let out = relay(&["check"], &wide, None);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(&format!("FAIL  session report: command graphtool is not found on the agent's PATH ({narrow})")),
        "{said}"
    );
    assert!(said.contains("fix: use its full path in the session"), "{said}");
    assert!(said.contains("FAIL  proxy 127.0.0.1:9"), "{said}");
    assert!(said.contains("FAIL  the config holds the device token and others can read it (mode 644)"), "{said}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("problem(s) found"));
    // Fixed: installed again from the shell that has the tool, without the proxy; the config 0600.
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(relay(&["install"], &wide, None).status.success());
    let out = relay(&["check"], &wide, None);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    for line in [
        format!("ok    session report: command graphtool is {}", tools.join("graphtool").display()),
        "device token accepted".to_owned(),
        "clock within".to_owned(),
        "doorbell ws://".to_owned(),
    ] {
        assert!(said.contains(&line), "{line:?} not in:\n{said}");
    }
    e.finish().await;
}

/// The command line's conventions, on the built binary: `--config` before or after the
/// subcommand, `--version`, `--help` on a subcommand, a usage error without a stack trace
/// even with `RUST_BACKTRACE=1` (exit 2), and a missing config naming `relay pair`.
#[test]
fn the_command_line_follows_the_conventions() {
    let bin = built_binary("relay", &["relay/src", "shared/domain/src"]);
    let run = |args: &[&str]| {
        std::process::Command::new(&bin)
            .args(args)
            .env("RUST_BACKTRACE", "1")
            .env("HOME", "/nonexistent")
            .output()
            .unwrap()
    };
    let version = run(&["--version"]);
    assert!(version.status.success());
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), format!("relay {}", env!("CARGO_PKG_VERSION")));
    let help = run(&["session", "add", "--help"]);
    assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("--project"), "{help:?}");
    let bad = run(&["run", "--bogus"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(err.contains("unexpected argument '--bogus'") && !err.contains("stack backtrace"), "{err}");
    let dir = std::env::temp_dir().join(format!("relay-cli-{}", uuid::Uuid::new_v4()));
    let missing = dir.join("relay.toml");
    for args in [
        vec!["run", "--config", missing.to_str().unwrap()],
        vec!["--config", missing.to_str().unwrap(), "status"],
        vec!["session", "add", "--name", "X", "--project", "p", "--config", missing.to_str().unwrap(), "--", "true"],
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("pair this desktop first with `relay pair SERVER_URL`") && !err.contains("stack backtrace"),
            "{args:?}: {err}"
        );
    }
}

/// The figures of docs/results.md ("Slots and progress"), on the real relay binary (over HTTP
/// to the local server, 1 s poll): five 2 s runs queued at once with 1 and with 5 slots against
/// one run alone, and the delay from a Graph's progress line to `get_graph_run` (over MCP, as a
/// chat reads it) showing it, at the default 3 s control poll, for lines every second (the 10 s
/// coalescing decides) and lines 12 s apart (forwarded at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: cargo nextest run --workspace --run-ignored only -E 'test(/slots_and_progress_figures/)' --no-capture"]
async fn slots_and_progress_figures() {
    let e = env(Duration::from_secs(600)).await;
    e.share(&[(1, "two-seconds"), (2, "talker")]).await;
    // The talker: `count` progress lines `gap` s apart, each its own wall-clock time in ms, each
    // also appended to a file (what was written, whether or not it was ever shown).
    let written_log = e.dir.join("written.log");
    let talker = format!(
        r#"read -r a; gap=$(echo "$a" | sed 's/.*"gap":\([0-9]*\).*/\1/'); n=$(echo "$a" | sed 's/.*"count":\([0-9]*\).*/\1/'); i=0; while [ $i -lt $n ]; do i=$((i+1)); t=$(date +%s%3N); echo "$t" >> {w}; echo "{{\"progress\": \"$t\"}}" >&2; sleep $gap; done; echo done"#,
        w = written_log.display()
    );
    let talker = talker.as_str();
    let sessions: &[SessionSpec<'_>] = &[(1, "two-seconds", "sleep 2; cat"), (2, "talker", talker)];
    let (mut slots_rows, mut progress_rows) = (Vec::new(), Vec::new());
    for slots in [1usize, 5] {
        let state = format!("state-{slots}");
        let (_, path) = e.config_with(sessions, &state, 200, &format!("max_parallel = {slots}\n"));
        let mut relay = relay_process(&path);
        e.wait_shared().await;
        let batch = |n: usize| {
            let e = &e;
            async move {
                let t0 = Instant::now();
                let mut ids = Vec::new();
                for i in 0..n {
                    ids.push(e.queue(1, serde_json::json!({ "n": i })).await);
                }
                for id in ids {
                    e.wait_status(id, RunStatus::Completed, Duration::from_secs(120)).await;
                }
                t0.elapsed().as_secs_f64()
            }
        };
        let one = batch(1).await;
        let five = batch(5).await;
        slots_rows.push(serde_json::json!({"slots": slots, "one_s": one, "five_s": five}));
        relay.kill().unwrap();
        relay.wait().unwrap();
    }
    for (gap, count, label) in [(1u64, 60u64, "a line every 1 s"), (12, 8, "a line every 12 s")] {
        let _ = std::fs::remove_file(&written_log);
        let (_, path) = e.config_with(sessions, &format!("talk-{gap}"), 3000, "");
        let mut relay = relay_process(&path);
        e.wait_shared().await;
        // Queued and read as a chat does: run_graph_session and get_graph_run over MCP.
        let (http, url, token) = (foundry_tests::http(), &e.running.mcp_url, &e.running.token);
        let tool = |name: &'static str, arguments: serde_json::Value| {
            let call = serde_json::json!({"name": name, "arguments": arguments});
            let http = http.clone();
            async move {
                let v = foundry_tests::mcp::rpc_2026(
                    &http,
                    url,
                    token,
                    "tools/call",
                    Some(name),
                    call,
                    serde_json::json!({}),
                )
                .await;
                v["result"]["structuredContent"].clone()
            }
        };
        let queued = tool(
            "run_graph_session",
            serde_json::json!({"graph_session_id": gs(2).to_string(),
            "idempotency_key": format!("talk-every-{gap}-s"), "arguments": {"gap": gap, "count": count}}),
        )
        .await;
        let id = queued["command_id"].as_str().unwrap_or_else(|| panic!("{queued}")).to_owned();
        // When get_graph_run first showed each newer state.
        let mut shown: Vec<(i64, i64)> = Vec::new();
        loop {
            let run = tool("get_graph_run", serde_json::json!({"command_id": id})).await;
            if !matches!(run["status"].as_str(), Some("queued" | "running")) {
                break;
            }
            if let Some(line) = run["progress"]["message"].as_str().and_then(|m| m.parse::<i64>().ok())
                && shown.last().is_none_or(|(_, l)| *l != line)
            {
                shown.push((SystemClock.now().as_millis(), line));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Each line written: how long until a state at least as new was shown (the last line
        // of the run may never be: the run ends first).
        let written: Vec<i64> =
            std::fs::read_to_string(&written_log).unwrap().lines().filter_map(|l| l.trim().parse().ok()).collect();
        let mut delays: Vec<f64> = written
            .iter()
            .filter_map(|t| shown.iter().find(|(_, l)| l >= t).map(|(at, _)| (at - t) as f64 / 1000.0))
            .collect();
        delays.sort_by(f64::total_cmp);
        let p95 = delays[((delays.len() * 95).div_ceil(100)).max(1) - 1];
        progress_rows.push(serde_json::json!({
            "gap_s": gap, "label": label, "lines": written.len(), "forwards": shown.len(),
            "median_s": delays[delays.len() / 2], "p95_s": p95, "max_s": delays[delays.len() - 1],
        }));
        relay.kill().unwrap();
        relay.wait().unwrap();
    }
    let figures = serde_json::json!({"slots": slots_rows, "progress": progress_rows});
    let tables = slots_tables(&figures);
    println!("{tables}");
    // The goals the tables state.
    let ratio = |s: u64| {
        figures["slots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["slots"] == s)
            .map(|r| r["five_s"].as_f64().unwrap() / r["one_s"].as_f64().unwrap())
            .unwrap()
    };
    assert!(ratio(5) <= 1.5, "five runs on five slots took {:.2}× one run (goal ≤ 1.5×)", ratio(5));
    assert!(ratio(1) >= 4.0, "five runs on one slot took {:.2}× one run: they did not run in sequence", ratio(1));
    for row in figures["progress"].as_array().unwrap() {
        let goal = if row["gap_s"] == 1 { 12.0 } else { 2.0 };
        assert!(row["p95_s"].as_f64().unwrap() <= goal, "progress p95 over its goal of {goal} s: {row}");
    }
    std::fs::write(slots_figures_path(), serde_json::to_string_pretty(&figures).unwrap() + "\n").unwrap();
    e.finish().await;
}

/// Where [`slots_and_progress_figures`] writes its figures, which docs/results.md is held to.
fn slots_figures_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/slots-figures.json")
}

/// docs/results.md's two tables ("Slots and progress"), made from the benchmark's figures.
fn slots_tables(f: &serde_json::Value) -> String {
    let mut out =
        String::from("| | one run alone | five queued at once | five ÷ one | goal |\n|---|---|---|---|---|\n");
    for r in f["slots"].as_array().unwrap() {
        let (one, five) = (r["one_s"].as_f64().unwrap(), r["five_s"].as_f64().unwrap());
        let (name, ratio, goal) = if r["slots"] == 1 {
            (
                "`max_parallel = 1` (the default, the seed's serial desktop)",
                format!("{:.2}×", five / one),
                "the seed's order kept",
            )
        } else {
            ("`max_parallel = 5`", format!("**{:.2}×**", five / one), "≤ 1.5×")
        };
        out += &format!("| {name} | {one:.2} s | {five:.2} s | {ratio} | {goal} |\n");
    }
    out += "\n| Graph | lines | forwards | delay median | p95 | max | goal |\n|---|---|---|---|---|---|---|\n";
    for r in f["progress"].as_array().unwrap() {
        let (name, goal) = if r["gap_s"] == 1 {
            ("a line every 1 s for 60 s (coalesced: one forward per 10 s)", "p95 ≤ 12 s")
        } else {
            ("a line every 12 s (each forwarded at once)", "p95 ≤ 2 s")
        };
        out += &format!(
            "| {name} | {} | {} | {:.2} s | **{:.2} s** | {:.2} s | {goal} |\n",
            r["lines"],
            r["forwards"],
            r["median_s"].as_f64().unwrap(),
            r["p95_s"].as_f64().unwrap(),
            r["max_s"].as_f64().unwrap()
        );
    }
    out
}

/// docs/results.md's slots and progress tables are what the benchmark last measured
/// (docs/slots-figures.json, written by [`slots_and_progress_figures`]).
#[test]
fn the_slots_figures_in_the_docs_are_the_benchmarks() {
    let figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(slots_figures_path()).unwrap()).unwrap();
    let doc = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/results.md")).unwrap();
    let tables = slots_tables(&figures);
    if let Err(e) = foundry_tests::tables_match(&tables, &doc) {
        panic!("docs/results.md: {e}\nrun the benchmark (slots_and_progress_figures) and paste its tables");
    }
    // A stale figure is caught.
    let mut stale = figures.clone();
    stale["slots"][1]["five_s"] = serde_json::json!(stale["slots"][1]["five_s"].as_f64().unwrap() + 1.0);
    assert!(foundry_tests::tables_match(&slots_tables(&stale), &doc).is_err());
}
