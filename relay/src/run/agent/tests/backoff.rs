//! The loop's timing against an in-memory server on a paused clock: backoff, the server's
//! poll interval, missed ticks.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::time::Instant;

/// An in-memory server: records when each sync arrived (in virtual time) and answers
/// from a script — `fail_first` failed syncs, then empty queues with `poll_interval`.
struct FakeServer {
    syncs: Mutex<Vec<Instant>>,
    fail_first: usize,
    calls: AtomicUsize,
    poll_interval: Duration,
    /// How long each sync takes (a slow server or a long pass).
    sync_takes: Duration,
}

impl FakeServer {
    fn new(fail_first: usize, poll_interval: Duration) -> Self {
        Self {
            syncs: Mutex::new(Vec::new()),
            fail_first,
            calls: AtomicUsize::new(0),
            poll_interval,
            sync_takes: Duration::ZERO,
        }
    }

    /// Seconds (virtual) between consecutive syncs.
    fn gaps(&self) -> Vec<f64> {
        let at = self.syncs.lock().unwrap().clone();
        at.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect()
    }
}

impl RelayServer for FakeServer {
    async fn sync(&self, _project: ProjectId, _sessions: &[SessionMeta], _free: u32) -> Result<Synced, ClientError> {
        self.syncs.lock().unwrap().push(Instant::now());
        tokio::time::sleep(self.sync_takes).await;
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail_first {
            return Err(ClientError::Retryable("503 scripted".into()));
        }
        Ok(Synced::Commands {
            commands: Vec::new(),
            poll_interval: self.poll_interval,
            doorbell_url: None,
            paused: None,
        })
    }
    async fn start(&self, _id: CommandId, _execution_id: &str) -> Result<Started, ClientError> {
        Ok(Started::Refused("cancelled".into()))
    }
    async fn control(&self, _id: CommandId) -> Result<Control, ClientError> {
        Ok(Control::Go)
    }
    async fn complete(&self, _id: CommandId, _c: &Completion) -> Result<Completed, ClientError> {
        Ok(Completed::Recorded("completed".into()))
    }
}

fn config(poll: Duration) -> Config {
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "1".repeat(32))).unwrap();
    let meta = SessionMeta {
        graph_session_id: gs,
        name: "n".into(),
        description: String::new(),
        slug: "s".into(),
        version: "1".into(),
        status: "ready".into(),
    };
    Config {
        server_url: "http://unused.invalid".into(),
        device_token: "fcd_test".into(),
        device_token_file: None,
        warnings: Vec::new(),
        state_dir: std::env::temp_dir().join(format!("relay-loop-{}", uuid::Uuid::new_v4())),
        control_poll: Duration::from_secs(3),
        poll,
        cancel_grace: Duration::from_secs(1),
        doorbell: false,
        doorbell_timing: crate::server::doorbell::Timing::default(),
        auto_update: false,
        pin: None,
        max_parallel: 1,
        shell_environment: None,
        sessions: vec![Session { meta, projects: vec![ProjectId::generate()], launch: vec!["true".to_owned()].into() }],
    }
}

/// Runs the loop on `server` for `virtual_time`, then stops it.
async fn run_for(server: Arc<FakeServer>, poll: Duration, virtual_time: Duration) {
    let config = config(poll);
    let dir = config.state_dir.clone();
    let relay = Relay::with_server(config, ArcServer(server)).unwrap();
    relay.run(tokio::time::sleep(virtual_time)).await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

struct ArcServer(Arc<FakeServer>);

impl RelayServer for ArcServer {
    fn sync(
        &self,
        p: ProjectId,
        s: &[SessionMeta],
        free: u32,
    ) -> impl Future<Output = Result<Synced, ClientError>> + Send {
        self.0.sync(p, s, free)
    }
    fn start(&self, id: CommandId, e: &str) -> impl Future<Output = Result<Started, ClientError>> + Send {
        self.0.start(id, e)
    }
    fn control(&self, id: CommandId) -> impl Future<Output = Result<Control, ClientError>> + Send {
        self.0.control(id)
    }
    fn complete(&self, id: CommandId, c: &Completion) -> impl Future<Output = Result<Completed, ClientError>> + Send {
        self.0.complete(id, c)
    }
}

#[tokio::test(start_paused = true)]
async fn failed_passes_back_off_exponentially_and_a_success_resets_to_the_poll_interval() {
    let server = Arc::new(FakeServer::new(4, Duration::from_secs(20)));
    run_for(server.clone(), Duration::from_secs(20), Duration::from_secs(100)).await;
    let gaps = server.gaps();
    // Four failures: retries after ~1, 2, 4, 8 s (±25 % jitter); then the fifth sync
    // succeeds and the next ones follow the 20 s poll.
    assert!(gaps.len() >= 6, "{gaps:?}");
    for (gap, base) in gaps.iter().zip([1.0, 2.0, 4.0, 8.0]) {
        assert!(*gap >= base * 0.75 && *gap < base * 1.25 + 0.01, "backoff gap {gap} for base {base}: {gaps:?}");
    }
    for gap in &gaps[4..] {
        assert!((gap - 20.0).abs() < 0.01, "after a success the poll interval applies: {gaps:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_servers_poll_interval_replaces_the_configured_one() {
    let server = Arc::new(FakeServer::new(0, Duration::from_secs(5)));
    run_for(server.clone(), Duration::from_secs(20), Duration::from_secs(31)).await;
    let gaps = server.gaps();
    assert_eq!(gaps.len(), 6, "syncs at 0, 5, 10, 15, 20, 25, 30: {gaps:?}");
    assert!(gaps.iter().all(|g| (g - 5.0).abs() < 0.01), "{gaps:?}");
}

#[tokio::test(start_paused = true)]
async fn ticks_missed_during_a_long_pass_collapse_into_one_pass_right_after_it() {
    let mut fake = FakeServer::new(0, Duration::from_secs(20));
    fake.sync_takes = Duration::from_secs(50);
    let server = Arc::new(fake);
    run_for(server.clone(), Duration::from_secs(20), Duration::from_secs(115)).await;
    // Passes take 50 s. The ticks due at 20 and 40 s collapse into one pass at 50 s (work
    // queued meanwhile is picked up at once, and there is no burst of catch-up passes);
    // likewise the tick due at 60 s gives one pass at 100 s.
    let gaps = server.gaps();
    assert_eq!(gaps, vec![50.0, 50.0], "{gaps:?}");
}
