//! Tests of the module above.

use super::*;
use crate::config::Session;
use crate::server::client::{Command, Completed, Control, Started};
use domain::ids::CommandId;
use domain::ids::GraphSessionId;
use domain::runs::FinalStatus;
use domain::runs::SessionMeta;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::time::Instant;

// ---- the hardening cases: a scripted server, real processes, real time (short polls) ----

/// A server that keeps queued commands per project and can lose start responses, refuse a
/// project's sync, and refuse completions the way the real server does (validate).
#[derive(Default)]
struct Script {
    queued: Mutex<Vec<(ProjectId, Command)>>,
    started: Mutex<std::collections::HashMap<CommandId, String>>,
    lose_start_responses: AtomicUsize,
    start_calls: AtomicUsize,
    refused_projects: Mutex<Vec<ProjectId>>,
    refuse_results_containing: Mutex<Option<String>>,
    completed: Mutex<Vec<(CommandId, Completion)>>,
    syncs: Mutex<Vec<(ProjectId, usize)>>,
    /// The free slots each sync said it had.
    free_slots: Mutex<Vec<u32>>,
    /// Runs whose agent asked to cancel.
    cancel: Mutex<std::collections::HashSet<CommandId>>,
    /// Every progress forwarded, with the (tokio) time it arrived.
    progress: Mutex<Vec<(CommandId, Instant, domain::progress::Progress)>>,
    /// When set, the owner cancels each run the moment its start is recorded, and the ring
    /// reaches the relay before the start's answer does.
    cancel_on_start: Mutex<Option<Arc<crate::server::doorbell::Doorbell>>>,
    /// When set, every control check answers that the server has the run ended `failed`
    /// (what it answers once no report came for its heartbeat timeout).
    heartbeat_lost: std::sync::atomic::AtomicBool,
    /// Control checks without progress (`GET …/control`).
    control_calls: AtomicUsize,
    /// The same, per run.
    control_by: Mutex<std::collections::HashMap<CommandId, usize>>,
    /// Starts asked and completions recorded, in the order the server saw them.
    journal: Mutex<Vec<(&'static str, CommandId)>>,
}

impl Script {
    fn control_of(&self, id: CommandId) -> Control {
        if self.heartbeat_lost.load(Ordering::SeqCst) {
            Control::Ended("failed".into())
        } else if self.cancel.lock().unwrap().contains(&id) {
            Control::Cancel
        } else {
            Control::Go
        }
    }
}

impl RelayServer for Arc<Script> {
    async fn sync(&self, project: ProjectId, sessions: &[SessionMeta], free: u32) -> Result<Synced, ClientError> {
        self.syncs.lock().unwrap().push((project, sessions.len()));
        self.free_slots.lock().unwrap().push(free);
        if self.refused_projects.lock().unwrap().contains(&project) {
            return Err(ClientError::Refused { status: 404, body: "project not found".into() });
        }
        let started = self.started.lock().unwrap().clone();
        // A run completed unstarted (refused by the relay) is not queued any more.
        let completed: Vec<CommandId> = self.completed.lock().unwrap().iter().map(|(i, _)| *i).collect();
        let commands = self
            .queued
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, c)| {
                *p == project && !started.contains_key(&c.command_id) && !completed.contains(&c.command_id)
            })
            .map(|(_, c)| c.clone())
            .take(free as usize)
            .collect();
        Ok(Synced::Commands { commands, poll_interval: Duration::from_millis(100), doorbell_url: None, paused: None })
    }
    async fn start(&self, id: CommandId, execution_id: &str) -> Result<Started, ClientError> {
        self.start_calls.fetch_add(1, Ordering::SeqCst);
        self.journal.lock().unwrap().push(("start", id));
        let mut started = self.started.lock().unwrap();
        match started.get(&id) {
            Some(e) if e == execution_id => return Ok(Started::Running),
            Some(_) => return Ok(Started::Refused("running".into())),
            None => {}
        }
        started.insert(id, execution_id.to_owned());
        if let Some(bell) = self.cancel_on_start.lock().unwrap().as_ref() {
            self.cancel.lock().unwrap().insert(id);
            bell.ring_control(id);
        }
        if self.lose_start_responses.load(Ordering::SeqCst) > 0 {
            self.lose_start_responses.fetch_sub(1, Ordering::SeqCst);
            return Err(ClientError::Retryable("the response was lost".into()));
        }
        Ok(Started::Running)
    }
    async fn control(&self, id: CommandId) -> Result<Control, ClientError> {
        self.control_calls.fetch_add(1, Ordering::SeqCst);
        *self.control_by.lock().unwrap().entry(id).or_default() += 1;
        Ok(self.control_of(id))
    }
    async fn progress(
        &self,
        id: CommandId,
        execution_id: &str,
        progress: &domain::progress::Progress,
    ) -> Result<Control, ClientError> {
        assert_eq!(self.started.lock().unwrap().get(&id).map(String::as_str), Some(execution_id));
        progress.validate().expect("the relay sends bounded progress");
        self.progress.lock().unwrap().push((id, Instant::now(), progress.clone()));
        Ok(self.control_of(id))
    }
    async fn complete(&self, id: CommandId, c: &Completion) -> Result<Completed, ClientError> {
        if let Err(e) = c.validate() {
            return Err(ClientError::Refused { status: 400, body: e.to_string() });
        }
        if let Some(bad) = self.refuse_results_containing.lock().unwrap().as_deref()
            && c.result.as_deref().is_some_and(|r| r.contains(bad))
        {
            return Err(ClientError::Refused { status: 400, body: "result: not accepted".into() });
        }
        self.completed.lock().unwrap().push((id, c.clone()));
        self.journal.lock().unwrap().push(("complete", id));
        Ok(Completed::Recorded("completed".into()))
    }
}

fn session_in(projects: Vec<ProjectId>, script: &str) -> Session {
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "2".repeat(32))).unwrap();
    let meta = SessionMeta {
        graph_session_id: gs,
        name: "n".into(),
        description: String::new(),
        slug: "s".into(),
        version: "1".into(),
        status: "ready".into(),
    };
    Session { meta, projects, launch: vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()].into() }
}

fn fast_config(state_dir: &std::path::Path, sessions: Vec<Session>) -> Config {
    Config {
        server_url: "http://unused.invalid".into(),
        device_token: "fcd_test".into(),
        device_token_file: None,
        warnings: Vec::new(),
        state_dir: state_dir.to_path_buf(),
        control_poll: Duration::from_millis(50),
        poll: Duration::from_millis(100),
        cancel_grace: Duration::from_millis(500),
        doorbell: false,
        doorbell_timing: crate::server::doorbell::Timing::default(),
        auto_update: false,
        pin: None,
        max_parallel: 1,
        shell_environment: None,
        sessions,
    }
}

fn queue(script: &Script, project: ProjectId, session: &Session) -> CommandId {
    queue_with(script, project, session, serde_json::json!({}))
}

fn queue_with(script: &Script, project: ProjectId, session: &Session, arguments: serde_json::Value) -> CommandId {
    let id = CommandId::generate();
    let command = Command {
        command_id: id,
        graph_session_id: session.meta.graph_session_id.clone(),
        slug: session.meta.slug.clone(),
        arguments,
        queued_at: "2026-11-30T00:00:00.000Z".into(),
    };
    script.queued.lock().unwrap().push((project, command));
    id
}

/// Runs the relay (real time) until `done` holds, at most 30 s; returns whether it held.
async fn run_until(script: Arc<Script>, config: Config, done: impl Fn(&Script) -> bool) -> bool {
    run_mutated_until(script, config, false, done).await
}

/// [`run_until`], with the relay's test-only mutation `forget_lost_starts` set as asked.
async fn run_mutated_until(
    script: Arc<Script>,
    config: Config,
    forget_lost_starts: bool,
    done: impl Fn(&Script) -> bool,
) -> bool {
    let mut relay = Relay::with_server(config, Arc::clone(&script)).unwrap();
    relay.forget_lost_starts = forget_lost_starts;
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(async move { relay.run(async move { stopped.notified().await }).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut held = false;
    while std::time::Instant::now() < deadline {
        if done(&script) {
            held = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.notify_one();
    task.await.unwrap().unwrap();
    held
}

/// Runs `relay` until the command completes (at most 30 s); `during` is called once the run is running.
async fn run_with(
    script: Arc<Script>,
    relay: Relay<Arc<Script>>,
    id: CommandId,
    during: impl FnOnce(&wake::Clocks),
) -> Completion {
    let clocks = Arc::clone(&relay.clocks);
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(async move { relay.run(async move { stopped.notified().await }).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut during = Some(during);
    let mut done = None;
    while std::time::Instant::now() < deadline {
        if script.started.lock().unwrap().contains_key(&id)
            && let Some(f) = during.take()
        {
            f(&clocks);
        }
        done = script.completed.lock().unwrap().iter().find(|(c, _)| *c == id).map(|(_, c)| c.clone());
        if done.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.notify_one();
    task.await.unwrap().unwrap();
    done.expect("the run was completed within 30 s")
}

fn temp_state() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("relay-hard-{}", uuid::Uuid::new_v4()))
}

#[tokio::test]
async fn a_lost_start_response_is_retried_and_the_run_executes_once() {
    let dir = temp_state();
    let project = ProjectId::generate();
    let count = dir.join("executions");
    let session = session_in(vec![project], &format!("echo x >> {}; echo ran", count.display()));
    let script = Arc::new(Script::default());
    script.lose_start_responses.store(1, Ordering::SeqCst);
    let id = queue(&script, project, &session);
    let done = run_until(Arc::clone(&script), fast_config(&dir, vec![session]), |s| {
        s.completed.lock().unwrap().iter().any(|(c, _)| *c == id)
    })
    .await;
    assert!(done, "the run whose start response was lost never completed");
    let completed = script.completed.lock().unwrap().clone();
    assert_eq!(completed[0].1.result.as_deref(), Some("ran"));
    assert_eq!(completed[0].1.execution_id, script.started.lock().unwrap()[&id], "the retried start was a replay");
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1, "executed more than once");
    let _ = std::fs::remove_dir_all(dir);
}

/// The mutation the test above guards against, planted in this test build only: a relay
/// that forgets the execution id of a start whose answer was lost asks again with a new
/// one, the server refuses it (the run is running under the first), and the run is lost —
/// the soak's "lost" count (docs/relay.md).
#[tokio::test]
async fn without_the_journaled_execution_id_a_lost_start_loses_the_run() {
    let dir = temp_state();
    let project = ProjectId::generate();
    let count = dir.join("executions");
    let session = session_in(vec![project], &format!("echo x >> {}; echo ran", count.display()));
    let script = Arc::new(Script::default());
    script.lose_start_responses.store(1, Ordering::SeqCst);
    queue(&script, project, &session);
    let retried = run_mutated_until(Arc::clone(&script), fast_config(&dir, vec![session]), true, |s| {
        s.start_calls.load(Ordering::SeqCst) >= 2
    })
    .await;
    assert!(retried, "the relay never retried the start");
    assert!(script.completed.lock().unwrap().is_empty(), "the mutated relay still completed the run");
    assert!(!count.exists(), "the mutated relay still ran the graph");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_refused_project_does_not_stall_the_others() {
    let dir = temp_state();
    let (bad, good) = (ProjectId::generate(), ProjectId::generate());
    let session = session_in(vec![bad, good], "echo ok");
    let script = Arc::new(Script::default());
    script.refused_projects.lock().unwrap().push(bad);
    let id = queue(&script, good, &session);
    let done = run_until(Arc::clone(&script), fast_config(&dir, vec![session]), |s| {
        s.completed.lock().unwrap().iter().any(|(c, _)| *c == id)
    })
    .await;
    assert!(done, "one refused project stalled the others");
    let status: Status = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert!(status.projects[&bad.to_string()].outcome.starts_with("refused: HTTP 404"), "{status:?}");
    assert_eq!(status.projects[&good.to_string()].outcome, "ok");
    assert_eq!(status.last_error, None, "a project's refusal is not a failed pass");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_project_dropped_from_the_config_gets_one_empty_sync() {
    let dir = temp_state();
    let (kept, dropped) = (ProjectId::generate(), ProjectId::generate());
    let script = Arc::new(Script::default());
    let first = fast_config(&dir, vec![session_in(vec![kept, dropped], "true")]);
    assert!(run_until(Arc::clone(&script), first, |s| s.syncs.lock().unwrap().len() >= 2).await);
    // Restarted with the session no longer shared in `dropped`.
    script.syncs.lock().unwrap().clear();
    let second = fast_config(&dir, vec![session_in(vec![kept], "true")]);
    let told = run_until(Arc::clone(&script), second, |s| s.syncs.lock().unwrap().contains(&(dropped, 0))).await;
    assert!(told, "the server was never told the project has no shared session: {:?}", script.syncs.lock().unwrap());
    // Once: later passes sync only the kept project.
    let before = script.syncs.lock().unwrap().iter().filter(|(p, _)| *p == dropped).count();
    let third = fast_config(&dir, vec![session_in(vec![kept], "true")]);
    script.syncs.lock().unwrap().clear();
    assert!(run_until(Arc::clone(&script), third, |s| s.syncs.lock().unwrap().len() >= 3).await);
    assert!(script.syncs.lock().unwrap().iter().all(|(p, _)| *p == kept), "dropped project synced again");
    assert_eq!(before, 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn one_bad_optional_field_never_loses_a_result() {
    let dir = temp_state();
    let project = ProjectId::generate();
    let script = Arc::new(Script::default());
    // A negative cost: dropped by the relay, the result arrives.
    let costly = session_in(vec![project], r#"echo '{"result":"r1","reported_cost":-1}'"#);
    let id = queue(&script, project, &costly);
    let done = run_until(Arc::clone(&script), fast_config(&dir, vec![costly]), |s| {
        s.completed.lock().unwrap().iter().any(|(c, _)| *c == id)
    })
    .await;
    assert!(done, "a negative reported_cost lost the result");
    let c = script.completed.lock().unwrap()[0].1.clone();
    assert_eq!((c.result.as_deref(), c.reported_cost), (Some("r1"), None));
    // A completion the server refuses anyway: reported failed with the reason, not dropped.
    *script.refuse_results_containing.lock().unwrap() = Some("poison".into());
    let poisoned = session_in(vec![project], "echo poison");
    let id = queue(&script, project, &poisoned);
    let done = run_until(Arc::clone(&script), fast_config(&dir, vec![poisoned]), |s| {
        s.completed.lock().unwrap().iter().any(|(c, _)| *c == id)
    })
    .await;
    assert!(done, "a refused completion was dropped");
    let c = script.completed.lock().unwrap().iter().find(|(c, _)| *c == id).unwrap().1.clone();
    assert_eq!(c.status, FinalStatus::Failed);
    assert!(c.error.as_deref().unwrap().contains("result: not accepted"), "{c:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A graph that takes `took` of tokio's (paused) time and counts the syncs the server saw
/// while it ran.
struct Timed {
    took: Duration,
    script: Arc<Script>,
    syncs_during: Arc<Mutex<Option<usize>>>,
}

impl executor::Execute for Timed {
    async fn execute(
        &self,
        _launch: &executor::Launch,
        _arguments: &serde_json::Value,
        cancel: impl Future<Output = ()> + Send,
        _grace: Duration,
        _live: Arc<crate::run::live::Live>,
    ) -> executor::Outcome {
        let before = self.script.syncs.lock().unwrap().len();
        // The relay's supervision (control polls, syncs) runs inside `cancel`, as with a
        // real process: it is polled for as long as the graph runs.
        tokio::select! {
            () = tokio::time::sleep(self.took) => {}
            () = cancel => panic!("nobody asked to cancel"),
        }
        *self.syncs_during.lock().unwrap() = Some(self.script.syncs.lock().unwrap().len() - before);
        executor::Outcome {
            status: FinalStatus::Completed,
            result: Some("done".into()),
            error: None,
            total_tokens: None,
            reported_cost: None,
            truncated: false,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_relay_keeps_syncing_while_a_graph_runs() {
    let dir = temp_state();
    let project = ProjectId::generate();
    let session = session_in(vec![project], "unused: the graph is virtual");
    let script = Arc::new(Script::default());
    let id = queue(&script, project, &session);
    let syncs_during = Arc::new(Mutex::new(None));
    let graph =
        Timed { took: Duration::from_secs(2), script: Arc::clone(&script), syncs_during: Arc::clone(&syncs_during) };
    let relay = Relay::with_parts(fast_config(&dir, vec![session]), Arc::clone(&script), graph).unwrap();
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(async move { relay.run(async move { stopped.notified().await }).await });
    // Virtual time: each wait here lets the relay's timers run, nothing waits on the wall clock.
    while !script.completed.lock().unwrap().iter().any(|(c, _)| *c == id) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.notify_one();
    task.await.unwrap().unwrap();
    let during = syncs_during.lock().unwrap().expect("the graph ran");
    // A 2 s run at a 100 ms poll interval: the sync schedule goes on during the run.
    assert!(during >= 15, "{during} syncs during a 2 s run at a 100 ms poll interval");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn sessions_added_or_moved_in_the_config_file_take_effect_without_a_restart() {
    let dir = temp_state();
    let (first, second) = (ProjectId::generate(), ProjectId::generate());
    let file = dir.join("relay.toml");
    // Each save gets its own modification time, set explicitly (as an editor's save would
    // move it), so nothing waits for a coarse file-system clock to tick.
    let saved_at = std::time::SystemTime::now();
    let write = |project: ProjectId, version: u64| {
        std::fs::create_dir_all(&dir).unwrap();
        let text = format!(
            "server_url = \"http://127.0.0.1:9\"\ndevice_token = \"fcd_test\"\nstate_dir = \"{}\"\npoll_s = 1\n\
             [[sessions]]\ngraph_session_id = \"gs_{}\"\nname = \"n\"\nslug = \"s\"\nprojects = [\"{project}\"]\ncommand = [\"true\"]\n",
            dir.join("state").display(),
            "3".repeat(32)
        );
        // A new inode and a later mtime, as editors save.
        let tmp = dir.join("relay.toml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&tmp)
            .unwrap()
            .set_modified(saved_at + Duration::from_secs(version))
            .unwrap();
        std::fs::rename(&tmp, &file).unwrap();
    };
    write(first, 0);
    let script = Arc::new(Script::default());
    let relay = Relay::with_server(Config::load(&file).unwrap(), Arc::clone(&script)).unwrap().watching(file.clone());
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(async move { relay.run(async move { stopped.notified().await }).await });
    let wait = |want: (ProjectId, usize)| {
        let script = Arc::clone(&script);
        async move {
            for _ in 0..500 {
                if script.syncs.lock().unwrap().contains(&want) {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            false
        }
    };
    assert!(wait((first, 1)).await, "the first project was never synced");
    write(second, 1);
    assert!(wait((second, 1)).await, "a session moved to another project never reached the server");
    assert!(wait((first, 0)).await, "the project it left was never told");
    stop.notify_one();
    task.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// A full disk at the end of a run: the outbox cannot be written (here the graph itself puts a
/// file where the outbox folder was), and the finished result still reaches the server, from
/// memory.
#[tokio::test]
async fn a_result_the_outbox_cannot_hold_is_delivered_from_memory() {
    let dir = temp_state();
    let project = ProjectId::generate();
    let outbox = dir.join("outbox");
    let sabotage = format!("rm -rf {o}; touch {o}; echo ran", o = outbox.display());
    let session = session_in(vec![project], &sabotage);
    let script = Arc::new(Script::default());
    let id = queue(&script, project, &session);
    let done = run_until(Arc::clone(&script), fast_config(&dir, vec![session]), |s| {
        s.completed.lock().unwrap().iter().any(|(c, _)| *c == id)
    })
    .await;
    assert!(done, "the result was lost when the outbox could not be written");
    let completed = script.completed.lock().unwrap().clone();
    assert_eq!(completed[0].1.result.as_deref(), Some("ran"));
    let _ = std::fs::remove_dir_all(dir);
}

/// An unreadable file in the outbox (cut short, written by something else) is moved to
/// `quarantine/` and shown in `relay status`, and never holds up the completions after it.
#[tokio::test]
async fn an_unreadable_outbox_file_is_moved_aside_and_shown() {
    let dir = temp_state();
    std::fs::create_dir_all(dir.join("outbox")).unwrap();
    let bad = CommandId::generate();
    std::fs::write(dir.join("outbox").join(format!("{bad}.json")), b"{\"execution_id\": \"cut sh").unwrap();
    let project = ProjectId::generate();
    let session = session_in(vec![project], "echo ran");
    let script = Arc::new(Script::default());
    let id = queue(&script, project, &session);
    let done = run_until(Arc::clone(&script), fast_config(&dir, vec![session]), |s| {
        s.completed.lock().unwrap().iter().any(|(c, _)| *c == id)
    })
    .await;
    assert!(done, "the run after the unreadable file never completed");
    assert!(!dir.join("outbox").join(format!("{bad}.json")).exists(), "the unreadable file stayed in the outbox");
    let moved = dir.join("quarantine").join(format!("outbox-{bad}.json"));
    assert!(moved.exists(), "the unreadable file is not in quarantine/");
    let status: Status = serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap();
    assert_eq!(status.quarantined, vec![format!("outbox-{bad}.json")]);
    let _ = std::fs::remove_dir_all(dir);
}

/// One session whose folder is missing (a disk not mounted yet) never stops another: the
/// other session's run completes; the missing one is not offered in the sync, its run handed
/// over anyway is refused `failed` with the folder and the real errno, and `relay status`
/// names it; once the folder is back, the next pass offers it again with no restart.
#[tokio::test]
async fn a_session_whose_folder_is_missing_leaves_the_other_running() {
    let dir = temp_state();
    let project = ProjectId::generate();
    let good = session_in(vec![project], "echo ran");
    let mut gone = session_in(vec![project], "echo never");
    gone.meta.graph_session_id = GraphSessionId::parse("g", &format!("gs_{}", "4".repeat(32))).unwrap();
    gone.meta.slug = "on-the-disk".into();
    let disk = dir.join("Volumes/Work");
    gone.launch.working_dir = Some(disk.clone());
    let script = Arc::new(Script::default());
    let refused = queue(&script, project, &gone);
    let ran = queue(&script, project, &good);
    let both = |s: &Script| {
        let c = s.completed.lock().unwrap();
        c.iter().any(|(i, _)| *i == ran) && c.iter().any(|(i, _)| *i == refused)
    };
    let state = dir.join("state");
    assert!(run_until(Arc::clone(&script), fast_config(&state, vec![good.clone(), gone.clone()]), both).await);
    let completed = script.completed.lock().unwrap().clone();
    let of = |id: CommandId| completed.iter().find(|(i, _)| *i == id).unwrap().1.clone();
    assert_eq!((of(ran).status, of(ran).result.as_deref()), (FinalStatus::Completed, Some("ran")));
    let r = of(refused);
    assert_eq!(r.status, FinalStatus::Failed);
    let error = r.error.unwrap();
    assert!(
        error.starts_with(&format!(
            "session on-the-disk is unavailable on this desktop: folder {}: No such file or directory (os error 2)",
            disk.display()
        )),
        "{error}"
    );
    assert!(script.syncs.lock().unwrap().iter().all(|(_, n)| *n == 1), "the missing session was offered");
    let status: Status = serde_json::from_slice(&std::fs::read(state.join("status.json")).unwrap()).unwrap();
    assert!(
        status.unavailable.get("on-the-disk").is_some_and(|w| w.contains("os error 2")),
        "{:?}",
        status.unavailable
    );
    // The disk is back: offered again at the next pass, and the status clears.
    std::fs::create_dir_all(&disk).unwrap();
    script.syncs.lock().unwrap().clear();
    let offered = |s: &Script| s.syncs.lock().unwrap().iter().any(|(_, n)| *n == 2);
    assert!(
        run_until(Arc::clone(&script), fast_config(&state, vec![good, gone]), offered).await,
        "never offered again"
    );
    let status: Status = serde_json::from_slice(&std::fs::read(state.join("status.json")).unwrap()).unwrap();
    assert!(status.unavailable.is_empty(), "{:?}", status.unavailable);
    let _ = std::fs::remove_dir_all(dir);
}

/// The login shell's environment (as read by `relay::machine::environment::login_shell`,
/// tested with the real binary in `relay_install`) reaches the Graph under its session's own
/// `env`, which wins.
#[tokio::test]
async fn a_graph_sees_what_the_shell_exported_under_its_sessions_env() {
    let dir = temp_state();
    let project = ProjectId::generate();
    let mut session = session_in(vec![project], "printf '%s %s' \"$OWNER_API_KEY\" \"$REGION\"");
    session.launch.env.insert("REGION".into(), "from-the-session".into());
    let script = Arc::new(Script::default());
    let id = queue(&script, project, &session);
    let relay =
        Relay::with_server(fast_config(&dir, vec![session]), Arc::clone(&script)).unwrap().with_shell_environment();
    if let Some(h) = &relay.shell_env {
        let mut h = h.lock().unwrap();
        h.at = Some(std::time::Instant::now());
        h.vars = [("OWNER_API_KEY", "sk-shell"), ("REGION", "from-the-shell")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    }
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(async move { relay.run(async move { stopped.notified().await }).await });
    for _ in 0..1500 {
        if script.completed.lock().unwrap().iter().any(|(c, _)| *c == id) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.notify_one();
    task.await.unwrap().unwrap();
    let completed = script.completed.lock().unwrap().clone();
    assert_eq!(completed[0].1.result.as_deref(), Some("sk-shell from-the-session"));
    let _ = std::fs::remove_dir_all(dir);
}

/// Slots and progress (issue 39): several commands at once, a Graph's progress forwarded.
mod backoff;
mod rung;
mod sleep;
mod slots;
