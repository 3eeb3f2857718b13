//! Slots and progress (issue 39), on the helpers of the tests above.

use super::*;

type Running = (Arc<tokio::sync::Notify>, tokio::task::JoinHandle<Result<(), RelayError>>);

/// A relay running on `script` until `stop` is notified.
fn spawn_relay<E: executor::Execute + 'static>(config: Config, script: &Arc<Script>, executor: E) -> Running {
    spawn_with_bell(config, script, executor).1
}

/// [`spawn_relay`], with the relay's doorbell (to ring it as the socket would). On the paused
/// clock's one thread the relay starts only once the test next waits.
fn spawn_with_bell<E: executor::Execute + 'static>(
    config: Config,
    script: &Arc<Script>,
    executor: E,
) -> (Arc<crate::server::doorbell::Doorbell>, Running) {
    let relay = Relay::with_parts(config, Arc::clone(script), executor).unwrap();
    let bell = relay.doorbell();
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::clone(&stop);
    (bell, (stop, tokio::spawn(async move { relay.run(async move { stopped.notified().await }).await })))
}

/// Waits (real time, at most 30 s) until `done` holds.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A graph that marks itself started (`started-<n>`, `n` from its arguments), waits for its own
/// `go-<n>` file, and prints `done-<n>`.
fn waiting_graph(project: ProjectId, marks: &std::path::Path) -> Session {
    std::fs::create_dir_all(marks).unwrap();
    let m = marks.display();
    session_in(
        vec![project],
        &format!(
            "n=$(cat | tr -dc 0-9); echo x >> {m}/started-$n; while [ ! -e {m}/go-$n ]; do sleep 0.02; done; echo done-$n"
        ),
    )
}

fn completed(script: &Script, id: CommandId) -> Option<Completion> {
    script.completed.lock().unwrap().iter().find(|(c, _)| *c == id).map(|(_, c)| c.clone())
}

/// `n` queued commands of a real Graph that waits for its go (`waiting_graph`), on a relay
/// with three slots: the state folder, the marks folder, the script, the commands, the config.
fn three_slots_waiting(n: usize) -> (std::path::PathBuf, std::path::PathBuf, Arc<Script>, Vec<CommandId>, Config) {
    let dir = temp_state();
    let project = ProjectId::generate();
    let marks = dir.join("marks");
    let session = waiting_graph(project, &marks);
    let script = Arc::new(Script::default());
    let ids = (0..n).map(|k| queue_with(&script, project, &session, serde_json::json!({ "n": k }))).collect();
    let mut config = fast_config(&dir, vec![session]);
    config.max_parallel = 3;
    (dir, marks, script, ids, config)
}

/// Three slots, four queued commands: three run at once and the fourth waits (its syncs ask
/// for no command: no free slot); a cancel stops only its own run, and the fourth takes the
/// freed slot at once; the others finish with their own results.
#[tokio::test]
async fn three_slots_run_three_commands_at_once_each_cancellable_on_its_own() {
    let (dir, marks, script, ids, config) = three_slots_waiting(4);
    let (stop, task) = spawn_relay(config, &script, executor::Processes);
    let started = |n: usize| marks.join(format!("started-{n}")).exists();
    eventually("three runs in flight", || (0..3).all(started)).await;
    // Three more syncs while all three run: each said no slot was free, and nothing started.
    let seen = script.free_slots.lock().unwrap().len();
    eventually("syncs while busy", || script.free_slots.lock().unwrap().len() >= seen + 3).await;
    assert!(!started(3), "a fourth run started with every slot busy");
    assert_eq!(script.free_slots.lock().unwrap().last(), Some(&0));
    // Cancel the second: only it stops, and the fourth takes its slot.
    script.cancel.lock().unwrap().insert(ids[1]);
    eventually("the cancelled run reported", || completed(&script, ids[1]).is_some()).await;
    assert_eq!(completed(&script, ids[1]).unwrap().status, FinalStatus::Cancelled);
    eventually("the fourth run took the freed slot", || started(3)).await;
    assert!(
        completed(&script, ids[0]).is_none() && completed(&script, ids[2]).is_none(),
        "a cancel stopped another run"
    );
    for n in [0, 2, 3] {
        std::fs::write(marks.join(format!("go-{n}")), b"").unwrap();
    }
    eventually("all finished", || [0, 2, 3].iter().all(|&n| completed(&script, ids[n]).is_some())).await;
    for n in [0, 2, 3] {
        let c = completed(&script, ids[n]).unwrap();
        assert_eq!((c.status, c.result.as_deref()), (FinalStatus::Completed, Some(format!("done-{n}").as_str())));
    }
    assert!(script.free_slots.lock().unwrap().iter().all(|&f| f <= 3), "a sync claimed more slots than exist");
    assert_eq!(script.start_calls.load(Ordering::SeqCst), 4, "each run started once");
    stop.notify_one();
    task.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// The relay stopped with three runs in flight: on its next start each of the three is reported
/// `relay restarted during run`, and none runs again.
#[tokio::test]
async fn a_relay_stopped_with_several_runs_in_flight_reports_each_and_runs_none_twice() {
    let (dir, marks, script, ids, config) = three_slots_waiting(3);
    let (stop, task) = spawn_relay(config.clone(), &script, executor::Processes);
    eventually("three runs in flight", || (0..3).all(|n| marks.join(format!("started-{n}")).exists())).await;
    stop.notify_one();
    task.await.unwrap().unwrap();
    assert!(script.completed.lock().unwrap().is_empty(), "a run was reported before the restart");
    for n in 0..3 {
        std::fs::write(marks.join(format!("go-{n}")), b"").unwrap();
    }
    let (stop, task) = spawn_relay(config, &script, executor::Processes);
    eventually("each cut-short run reported", || ids.iter().all(|id| completed(&script, *id).is_some())).await;
    stop.notify_one();
    task.await.unwrap().unwrap();
    for id in &ids {
        let c = completed(&script, *id).unwrap();
        assert_eq!(c.status, FinalStatus::Failed);
        assert_eq!(c.error.as_deref(), Some(domain::errors::RELAY_RESTARTED));
    }
    for n in 0..3 {
        let runs = std::fs::read_to_string(marks.join(format!("started-{n}"))).unwrap();
        assert_eq!(runs.lines().count(), 1, "run {n} ran again after the restart");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// One queued command of a virtual Graph's session: the state folder, the script, the command,
/// and a config checking control every `control_poll`.
fn one_virtual_command(control_poll: Duration) -> (std::path::PathBuf, Arc<Script>, CommandId, Config) {
    let dir = temp_state();
    let project = ProjectId::generate();
    let session = session_in(vec![project], "unused: the graph is virtual");
    let script = Arc::new(Script::default());
    let id = queue(&script, project, &session);
    let mut config = fast_config(&dir, vec![session]);
    config.control_poll = control_poll;
    (dir, script, id, config)
}

/// A virtual graph that says something every `every` for `steps` steps (tokio's paused time).
struct Chatty {
    steps: u32,
    every: Duration,
}

impl executor::Execute for Chatty {
    async fn execute(
        &self,
        _launch: &executor::Launch,
        _arguments: &serde_json::Value,
        cancel: impl Future<Output = ()> + Send,
        _grace: Duration,
        live: Arc<crate::run::live::Live>,
    ) -> executor::Outcome {
        let talk = async {
            for i in 1..=self.steps {
                tokio::time::sleep(self.every).await;
                live.progress(&format!("step {i}"), Some(f64::from(i) / f64::from(self.steps)));
                live.log(&format!("log line {i}"));
            }
        };
        tokio::select! {
            () = talk => executor::Outcome::completed("done"),
            () = cancel => executor::Outcome::cancelled(),
        }
    }
}

/// A virtual graph that says nothing for its whole run (tokio's paused time), then completes.
struct Silent(Duration);

impl executor::Execute for Silent {
    async fn execute(
        &self,
        _launch: &executor::Launch,
        _arguments: &serde_json::Value,
        cancel: impl Future<Output = ()> + Send,
        _grace: Duration,
        _live: Arc<crate::run::live::Live>,
    ) -> executor::Outcome {
        tokio::select! {
            () = tokio::time::sleep(self.0) => executor::Outcome::completed("done"),
            () = cancel => executor::Outcome::cancelled(),
        }
    }
}

/// A Graph that reports progress ten times a second for 35 s: the newest state is forwarded
/// at once, then at most every 10 s (four forwards, not 350), each on a control check; a
/// silent Graph forwards nothing.
#[tokio::test(start_paused = true)]
async fn progress_is_forwarded_at_once_then_at_most_every_ten_seconds() {
    let (dir, script, id, config) = one_virtual_command(Duration::from_secs(3));
    let (stop, task) = spawn_relay(config, &script, Chatty { steps: 350, every: Duration::from_millis(100) });
    let start = Instant::now();
    while completed(&script, id).is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ended = Instant::now();
    stop.notify_one();
    task.await.unwrap().unwrap();
    let forwards = script.progress.lock().unwrap().clone();
    let at: Vec<f64> = forwards.iter().map(|(_, t, _)| (*t - start).as_secs_f64()).collect();
    assert_eq!(forwards.len(), 4, "forwards at {at:?}");
    assert!(at[0] < 0.5, "the first progress waits for nothing: {at:?}");
    assert!(at.windows(2).all(|w| w[1] - w[0] >= 10.0 - 1e-6), "two forwards within 10 s: {at:?}");
    let (_, last_at, last) = forwards.last().unwrap();
    // The newest state is never older than the coalescing window when it is sent.
    assert!((ended - *last_at).as_secs_f64() <= 10.5, "{at:?}");
    let step: u32 = last.message.trim_start_matches("step ").parse().unwrap();
    assert!(f64::from(step) >= (*last_at - start).as_secs_f64() * 10.0 - 2.0, "a stale state was sent: {last:?}");
    assert_eq!(last.tail.len(), domain::progress::MAX_TAIL_LINES);
    assert_eq!(last.tail.last().unwrap(), &format!("log line {step}"));

    // A Graph that says nothing for 2 s: control checks every 50 ms, none forwarding anything.
    let (dir2, quiet, id, config) = one_virtual_command(Duration::from_millis(50));
    let (stop, task) = spawn_relay(config, &quiet, Silent(Duration::from_secs(2)));
    while completed(&quiet, id).is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.notify_one();
    task.await.unwrap().unwrap();
    let checks = quiet.control_by.lock().unwrap().get(&id).copied().unwrap_or(0);
    assert!(checks >= 20, "the silent Graph's run had {checks} control checks: nothing was exercised");
    assert!(quiet.progress.lock().unwrap().is_empty(), "a silent Graph's control check forwarded progress");
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(dir2);
}

/// Control rings reach their own slot: two runs in flight with a control poll of a minute; a
/// cancel rung for the second stops it within the second (virtual time), and the first, rung
/// for nothing, runs on to its end.
#[tokio::test(start_paused = true)]
async fn a_control_ring_checks_only_its_own_slot() {
    let dir = temp_state();
    let project = ProjectId::generate();
    let session = session_in(vec![project], "unused: the graph is virtual");
    let script = Arc::new(Script::default());
    let ids = [queue(&script, project, &session), queue(&script, project, &session)];
    let mut config = fast_config(&dir, vec![session]);
    config.max_parallel = 2;
    config.control_poll = Duration::from_secs(60);
    let (bell, (stop, task)) = spawn_with_bell(config, &script, Chatty { steps: 30, every: Duration::from_secs(1) });
    while script.started.lock().unwrap().len() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let checks_of = |id: CommandId| script.control_by.lock().unwrap().get(&id).copied().unwrap_or(0);
    let first_before = checks_of(ids[0]);
    script.cancel.lock().unwrap().insert(ids[1]);
    let rung = Instant::now();
    bell.ring_control(ids[1]);
    while completed(&script, ids[1]).is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(checks_of(ids[0]), first_before, "the ring for the second run woke the first run's slot too");
    assert!(rung.elapsed() < Duration::from_secs(1), "the ring waited for the minute's poll: {:?}", rung.elapsed());
    assert_eq!(completed(&script, ids[1]).unwrap().status, FinalStatus::Cancelled);
    assert!(completed(&script, ids[0]).is_none(), "the other slot stopped too");
    while completed(&script, ids[0]).is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(completed(&script, ids[0]).unwrap().status, FinalStatus::Completed);
    stop.notify_one();
    task.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// A cancel asked the moment the server records the start rings before the start's answer
/// reaches the relay (and so before the slot's supervision begins): the slot listens from
/// before the start is sent, so the ring is not lost and the run stops at once, not at the
/// minute's control poll nor the Graph's first progress 10 s in (whose forward would also
/// learn of the cancel). The doorbell test caught this in CI; this is it in virtual time.
#[tokio::test(start_paused = true)]
async fn a_cancel_rung_before_the_start_is_answered_is_not_lost() {
    let (dir, script, id, config) = one_virtual_command(Duration::from_secs(60));
    let (bell, (stop, task)) = spawn_with_bell(config, &script, Chatty { steps: 6, every: Duration::from_secs(10) });
    *script.cancel_on_start.lock().unwrap() = Some(bell);
    let begun = Instant::now();
    while completed(&script, id).is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = begun.elapsed();
    assert_eq!(completed(&script, id).unwrap().status, FinalStatus::Cancelled, "the ring was lost (took {took:?})");
    assert!(took < Duration::from_secs(1), "the cancel waited for the poll: {took:?}");
    stop.notify_one();
    task.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// The lost-start fault with three slots: three commands start at once and the answer to the
/// first start is lost. The other two run on meanwhile; the lost one is retried (after the
/// backoff) under the execution id its journal holds, and every run executes once. The
/// mutation the journal prevents (`forget_lost_starts`) loses exactly that one run here too.
#[tokio::test]
async fn a_lost_start_in_one_slot_is_retried_while_the_others_run() {
    for forget in [false, true] {
        let (dir, marks, script, ids, config) = three_slots_waiting(3);
        script.lose_start_responses.store(1, Ordering::SeqCst);
        for n in 0..3 {
            std::fs::write(marks.join(format!("go-{n}")), b"").unwrap();
        }
        let all_done = |s: &Script| ids.iter().all(|id| s.completed.lock().unwrap().iter().any(|(c, _)| c == id));
        let retried_and_two_done =
            |s: &Script| s.start_calls.load(Ordering::SeqCst) >= 4 && s.completed.lock().unwrap().len() >= 2;
        let held = if forget {
            run_mutated_until(Arc::clone(&script), config, true, retried_and_two_done).await
        } else {
            run_until(Arc::clone(&script), config, all_done).await
        };
        let done: Vec<CommandId> = ids.iter().copied().filter(|id| completed(&script, *id).is_some()).collect();
        let ran: Vec<usize> = (0..3)
            .map(|n| std::fs::read_to_string(marks.join(format!("started-{n}"))).map_or(0, |s| s.lines().count()))
            .collect();
        if forget {
            assert!(held, "the mutated relay never retried the lost start");
            assert_eq!(done.len(), 2, "the mutation should lose exactly the run whose start answer was lost");
            assert_eq!(ran.iter().sum::<usize>(), 2, "the lost run still executed: {ran:?}");
        } else {
            assert!(held, "a run whose start answer was lost never completed ({} of 3)", done.len());
            assert_eq!(ran, vec![1, 1, 1], "each run executes once");
            let started = script.started.lock().unwrap().clone();
            for id in &ids {
                assert_eq!(
                    completed(&script, *id).unwrap().execution_id,
                    started[id],
                    "a retried start was not a replay"
                );
            }
            assert_eq!(script.start_calls.load(Ordering::SeqCst), 4, "three starts and one retry");
            // The other two ran on during the lost one's backoff: both were reported before
            // its start was retried (a relay that held every slot for the backoff would not).
            let journal = script.journal.lock().unwrap().clone();
            let lost =
                ids.iter().copied().find(|id| journal.iter().filter(|(k, c)| *k == "start" && c == id).count() == 2);
            let lost = lost.unwrap_or_else(|| panic!("no start was retried: {journal:?}"));
            let retry = journal.iter().rposition(|(k, c)| *k == "start" && *c == lost).unwrap();
            for id in ids.iter().filter(|id| **id != lost) {
                let done = journal.iter().position(|(k, c)| *k == "complete" && c == id).unwrap();
                assert!(done < retry, "a run waited for another's start retry: {journal:?}");
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A full disk with three runs in flight: the Graphs break the outbox while they run, and each
/// of the three results still reaches the server, from memory, with its own result.
#[tokio::test]
async fn three_results_the_outbox_cannot_hold_are_each_delivered_from_memory() {
    let dir = temp_state();
    let project = ProjectId::generate();
    let (marks, outbox) = (dir.join("marks"), dir.join("outbox"));
    std::fs::create_dir_all(&marks).unwrap();
    let session = session_in(
        vec![project],
        &format!(
            "n=$(cat | tr -dc 0-9); echo x >> {m}/started-$n; while [ ! -e {m}/go ]; do sleep 0.02; done; rm -rf {o}; touch {o}; echo done-$n",
            m = marks.display(),
            o = outbox.display()
        ),
    );
    let script = Arc::new(Script::default());
    let ids: Vec<CommandId> =
        (0..3).map(|k| queue_with(&script, project, &session, serde_json::json!({ "n": k }))).collect();
    let mut config = fast_config(&dir, vec![session]);
    config.max_parallel = 3;
    let (stop, task) = spawn_relay(config, &script, executor::Processes);
    eventually("three runs in flight", || (0..3).all(|n| marks.join(format!("started-{n}")).exists())).await;
    std::fs::write(marks.join("go"), b"").unwrap();
    eventually("each result delivered", || ids.iter().all(|id| completed(&script, *id).is_some())).await;
    stop.notify_one();
    task.await.unwrap().unwrap();
    assert!(outbox.is_file(), "the outbox was never broken: the test proves nothing");
    for (n, id) in ids.iter().enumerate() {
        let c = completed(&script, *id).unwrap();
        assert_eq!((c.status, c.result.as_deref()), (FinalStatus::Completed, Some(format!("done-{n}").as_str())));
    }
    let _ = std::fs::remove_dir_all(dir);
}
