//! The control check while the doorbell is proven alive: a heartbeat every 30 s, with a cancel
//! coming by ring (issue 59).

use super::*;

/// Runs one 1.5 s Graph with control checks every 50 ms, the doorbell up or not; how many
/// checks the server saw, and the completion.
async fn checks_during_a_run(bell_up: bool, cancel_by_ring: bool) -> (usize, Completion) {
    let project = ProjectId::generate();
    let session = session_in(vec![project], "sleep 1.5; echo done");
    let dir = temp_state();
    let script = Arc::new(Script::default());
    let id = queue(&script, project, &session);
    let relay = Relay::with_server(fast_config(&dir, vec![session]), Arc::clone(&script)).unwrap();
    let bell = relay.doorbell();
    bell.set_up_for_tests(bell_up);
    if cancel_by_ring {
        *script.cancel_on_start.lock().unwrap() = Some(Arc::clone(&bell));
    }
    let done = run_with(Arc::clone(&script), relay, id, |_| {}).await;
    let _ = std::fs::remove_dir_all(dir);
    (script.control_calls.load(Ordering::SeqCst), done)
}

#[tokio::test]
async fn a_proven_doorbell_slows_the_control_check_and_a_ring_still_cancels_at_once() {
    let (polling, c) = checks_during_a_run(false, false).await;
    assert_eq!(c.status, FinalStatus::Completed);
    assert!(polling >= 15, "polling every 50 ms for 1.5 s: {polling} checks");
    let (rung, c) = checks_during_a_run(true, false).await;
    assert_eq!(c.status, FinalStatus::Completed);
    assert_eq!(rung, 0, "a proven doorbell: the next check is 30 s away");
    // A cancel rings: checked at once, whatever the period.
    let started = std::time::Instant::now();
    let (_, c) = checks_during_a_run(true, true).await;
    assert_eq!(c.status, FinalStatus::Cancelled, "{c:?}");
    assert!(started.elapsed() < Duration::from_millis(1_400), "{:?}", started.elapsed());
}
