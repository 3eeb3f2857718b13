//! A run whose computer slept past the server's heartbeat timeout: reported as such, not as a
//! generic failure (issue 58).

use super::*;

/// A long run whose server stops waiting for it once it is running, after the computer slept
/// `asleep_s` seconds (0: no sleep): the completion the relay reports.
async fn given_up_after_sleeping(asleep_s: u64) -> Completion {
    let project = ProjectId::generate();
    let session = session_in(vec![project], "sleep 20; echo never");
    let dir = temp_state();
    let script = Arc::new(Script::default());
    let id = queue(&script, project, &session);
    let lost = Arc::clone(&script);
    let relay = Relay::with_server(fast_config(&dir, vec![session]), Arc::clone(&script)).unwrap();
    let c = run_with(Arc::clone(&script), relay, id, move |clocks| {
        // The wall clock ran on while the monotonic one did not, and the server stopped
        // waiting for a report after its 10 minutes.
        clocks.wall_ahead.store(asleep_s, Ordering::SeqCst);
        lost.heartbeat_lost.store(true, Ordering::SeqCst);
    })
    .await;
    let _ = std::fs::remove_dir_all(dir);
    c
}

#[tokio::test]
async fn a_run_the_server_gave_up_on_while_the_computer_slept_fails_saying_so() {
    // The lid closed for 25 minutes.
    let c = given_up_after_sleeping(25 * 60).await;
    assert_eq!(c.status, FinalStatus::Failed, "{c:?}");
    let error = c.error.unwrap_or_default();
    // This test runs on Linux; the Mac's wording is wake::tests' (domain::errors::MAC_SLEPT).
    assert!(error.starts_with("this computer slept during the run (asleep about 25 min"), "{error}");
}

#[tokio::test]
async fn a_run_the_server_gave_up_on_without_a_sleep_is_stopped_as_before() {
    let c = given_up_after_sleeping(0).await;
    // Stopped like a cancel (the server answers that completion 409 and keeps its own error).
    assert_eq!(c.status, FinalStatus::Cancelled, "{c:?}");
    assert!(!c.error.unwrap_or_default().contains("slept"));
}
