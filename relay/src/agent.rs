//! The relay loop (SPEC §5), one pass at a time:
//!
//! 1. every poll interval (20 s, or the server's `poll_interval_s`); ticks that come while a
//!    pass is still busy collapse into one pass right after it, never a burst
//!    (`MissedTickBehavior::Skip`);
//! 2. re-send completions from the outbox; retry every `start` that never got an answer (same
//!    execution id: the server replays it), and run the command if it is running for us;
//! 3. for each project a session is shared in: `sync` with those sessions' metadata (≤ 100);
//!    a project that dropped out of the config gets one empty sync (its sessions are no longer
//!    offered); a refusal (4xx) for one project is that project's state in `relay status`, not
//!    a failed pass;
//! 4. each returned command, one at a time, through the steps in [`crate::command`]: consent
//!    re-check, journaled start, supervised run, completion through the outbox.
//!
//! Network failures end the pass and the next one waits an exponentially growing, jittered
//! delay (reset by the next successful pass). Shutdown stops waiting at once; a run cut short
//! by it stays in the journal and is reported `relay restarted during run` on the next start.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::clock::{Clock, SystemClock};
use domain::ids::ProjectId;
use domain::runs::{Completion, SessionMeta};
use tokio::time::MissedTickBehavior;

use crate::RelayError;
use crate::backoff::Backoff;
use crate::client::{Client, ClientError, RelayServer, Synced};
use crate::config::Config;
use crate::disk::{self, State};
use crate::executor;
use crate::status::{ProjectStatus, Status};

/// The relay, over a [`RelayServer`] (the HTTPS [`Client`] unless a test gives another).
pub struct Relay<S = Client, E = executor::Processes> {
    pub(crate) executor: E,
    jitter_seed: Option<u64>,
    config: std::sync::RwLock<Arc<Config>>,
    /// The config file and its modification time when read, when it is watched for changes.
    source: Option<(std::path::PathBuf, Mutex<Option<std::time::SystemTime>>)>,
    pub(crate) client: S,
    pub(crate) state: State,
    /// Test-only mutation: forget the journaled execution id of a start whose answer was lost
    /// (what the lost-start fix prevents), so the test that guards the fix can show it fails.
    #[cfg(test)]
    pub(crate) forget_lost_starts: bool,
    status: Arc<Mutex<Status>>,
}

/// Why a pass ended early (the next one waits a backoff delay).
pub(crate) enum PassError {
    /// The server could not be reached or answered 5xx, or the state folder failed.
    Network(String),
}

impl From<ClientError> for PassError {
    fn from(e: ClientError) -> Self {
        PassError::Network(e.to_string())
    }
}

impl From<std::io::Error> for PassError {
    fn from(e: std::io::Error) -> Self {
        PassError::Network(format!("state directory: {e}"))
    }
}

impl Relay<Client> {
    /// A relay for `config` talking HTTPS to its server (opens the state directory).
    ///
    /// # Errors
    /// When the state directory or the HTTP client cannot be set up.
    pub fn new(config: Config) -> Result<Self, RelayError> {
        let client = Client::new(&config.server_url, &config.device_token)?;
        Self::with_server(config, client)
    }
}

impl<S: RelayServer> Relay<S> {
    /// A relay for `config` talking to `server`.
    ///
    /// # Errors
    /// When the state directory cannot be set up.
    pub fn with_server(config: Config, server: S) -> Result<Self, RelayError> {
        Relay::with_parts(config, server, executor::Processes)
    }
}

impl<S: RelayServer, E: executor::Execute> Relay<S, E> {
    /// A relay for `config` talking to `server`, running graphs with `executor` (the
    /// simulation's runs take virtual time instead of processes).
    ///
    /// # Errors
    /// When the state directory cannot be set up.
    pub fn with_parts(config: Config, server: S, executor: E) -> Result<Self, RelayError> {
        let state = State::open(&config.state_dir)
            .map_err(|source| RelayError::State { path: config.state_dir.clone(), source })?;
        let status = Status { poll_interval_s: config.poll.as_secs(), ..Status::default() };
        Ok(Self {
            executor,
            jitter_seed: None,
            #[cfg(test)]
            forget_lost_starts: false,
            config: std::sync::RwLock::new(Arc::new(config)),
            source: None,
            client: server,
            state,
            status: Arc::new(Mutex::new(status)),
        })
    }

    /// Backoff jitter from `seed` instead of the OS (a deterministic simulation).
    pub fn with_jitter_seed(mut self, seed: u64) -> Self {
        self.jitter_seed = Some(seed);
        self
    }

    /// Re-reads `path` before a pass whenever it changed: sessions added, removed or moved
    /// between projects take effect without a restart (a removed project gets its empty sync).
    /// A file that no longer parses keeps the last good config (the error is in `relay
    /// status`); the server, token and state folder are read at start only.
    pub fn watching(mut self, path: std::path::PathBuf) -> Self {
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        self.source = Some((path, Mutex::new(modified)));
        self
    }

    pub(crate) fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn reload_if_changed(&self) {
        let Some((path, seen)) = &self.source else { return };
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let mut seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if modified == *seen {
            return;
        }
        *seen = modified;
        let old = self.config();
        match Config::load(path) {
            Ok(new)
                if new.server_url != old.server_url
                    || new.device_token != old.device_token
                    || new.state_dir != old.state_dir =>
            {
                tracing::warn!("the server, device token or state folder changed: restart the relay to use them");
                let merged = Config {
                    server_url: old.server_url.clone(),
                    device_token: old.device_token.clone(),
                    state_dir: old.state_dir.clone(),
                    ..new
                };
                *self.config.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(merged);
            }
            Ok(new) => {
                tracing::info!(sessions = new.sessions.len(), "config changed; reloaded");
                *self.config.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(new);
            }
            Err(e) => {
                tracing::error!(error = %e, "config changed but does not load; keeping the last good one");
                self.set_status(|s| s.last_error = Some(format!("config: {e}")));
            }
        }
    }

    pub(crate) fn set_status(&self, f: impl FnOnce(&mut Status)) {
        if let Ok(mut s) = self.status.lock() {
            f(&mut s);
            s.outbox = self.state.outbox.len();
            if let Ok(json) = serde_json::to_vec_pretty(&*s) {
                let tmp = self.state.root.join(".status.tmp");
                if std::fs::write(&tmp, json).is_ok() {
                    let _ = std::fs::rename(tmp, self.state.root.join("status.json"));
                }
            }
        }
    }

    /// Runs until `shutdown` resolves.
    ///
    /// # Errors
    /// When recovery of the state directory fails (nothing can be trusted then).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), RelayError> {
        let recovered =
            self.state.recover().map_err(|source| RelayError::State { path: self.state.root.clone(), source })?;
        if recovered > 0 {
            tracing::warn!(count = recovered, "runs were cut short by a restart; reporting them as failed");
        }
        tokio::pin!(shutdown);
        let mut poll = self.config().poll;
        let mut backoff = self.jitter_seed.map_or_else(Backoff::default, Backoff::seeded);
        let mut ticker = tokio::time::interval(poll);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = &mut shutdown => break,
            }
            let outcome = tokio::select! {
                r = self.pass() => r,
                () = &mut shutdown => break,
            };
            match outcome {
                Ok(server_poll) => {
                    backoff.reset();
                    self.set_status(|s| s.last_error = None);
                    if server_poll != poll {
                        tracing::info!(seconds = server_poll.as_secs(), "poll interval set by the server");
                        poll = server_poll;
                        ticker = tokio::time::interval_at(tokio::time::Instant::now() + poll, poll);
                        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
                    }
                }
                Err(PassError::Network(e)) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "pass failed; retrying");
                    self.set_status(|s| s.last_error = Some(e));
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = &mut shutdown => break,
                    }
                    ticker.reset_immediately();
                }
            }
        }
        tracing::info!("relay stopped");
        Ok(())
    }

    fn project_status(&self, project: ProjectId, outcome: &str, sessions: &[SessionMeta], queued: usize) {
        self.set_status(|s| {
            s.projects.insert(
                project.to_string(),
                ProjectStatus {
                    last_sync_at: Some(SystemClock.now().rfc3339()),
                    outcome: outcome.to_owned(),
                    sessions: sessions.iter().map(|m| m.slug.clone()).collect(),
                    queued,
                },
            );
        });
    }

    /// Retries every `start` that never got a definite answer (see [`disk`]).
    async fn resume_starts(&self) -> Result<(), PassError> {
        for (id, started) in self.state.journal.list::<disk::Started>() {
            if started.running || self.state.outbox.contains(id) {
                continue;
            }
            if let Some((project, command)) = started.command {
                tracing::info!(command = %id, "retrying a start whose answer was lost");
                self.handle(project, command).await?;
            }
        }
        Ok(())
    }

    /// One empty sync for each project that was synced with sessions before but has none in
    /// the config now, then remembers the config's projects.
    async fn retire_projects(&self) -> Result<(), PassError> {
        let current = self.config().projects();
        let mut remembered = self.state.synced_projects();
        let gone: Vec<ProjectId> = remembered.iter().copied().filter(|p| !current.contains(p)).collect();
        for project in gone {
            match self.client.sync(project, &[]).await {
                Ok(_) | Err(ClientError::Refused { .. }) => {
                    tracing::info!(%project, "no session is shared in this project any more; told the server");
                    remembered.retain(|p| *p != project);
                    self.set_status(|s| {
                        s.projects.remove(&project.to_string());
                    });
                }
                Err(e) => {
                    self.state.set_synced_projects(&remembered)?;
                    return Err(e.into());
                }
            }
        }
        self.state.set_synced_projects(&current)?;
        Ok(())
    }

    /// One pass; returns the server's poll interval.
    async fn pass(&self) -> Result<Duration, PassError> {
        self.reload_if_changed();
        self.flush_outbox().await?;
        self.resume_starts().await?;
        self.retire_projects().await?;
        let config = self.config();
        let mut poll = config.poll;
        for project in config.projects() {
            let sessions = config.sessions_for(project);
            let synced = match self.client.sync(project, &sessions).await {
                Ok(s) => s,
                Err(ClientError::Refused { status, body }) => {
                    // This project's problem (deleted, not this owner's, a bad session): the
                    // other projects go on.
                    tracing::warn!(%project, status, %body, "the server refused this project's sync");
                    self.project_status(project, &format!("refused: HTTP {status} {body}"), &sessions, 0);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match synced {
                Synced::Disabled => {
                    self.project_status(project, "disabled by the owner", &sessions, 0);
                    tracing::info!(%project, "project is disabled for connected agents; skipping");
                    self.set_status(|s| {
                        if !s.disabled_projects.contains(&project.to_string()) {
                            s.disabled_projects.push(project.to_string());
                        }
                    });
                }
                Synced::Commands { commands, poll_interval } => {
                    poll = poll_interval;
                    tracing::info!(%project, sessions = sessions.len(), queued = commands.len(), "synced");
                    self.project_status(project, "ok", &sessions, commands.len());
                    self.set_status(|s| {
                        s.last_sync_at = Some(SystemClock.now().rfc3339());
                        s.disabled_projects.retain(|p| p != &project.to_string());
                        s.poll_interval_s = poll_interval.as_secs();
                    });
                    for command in commands {
                        self.handle(project, command).await?;
                    }
                }
            }
        }
        Ok(poll)
    }

    async fn flush_outbox(&self) -> Result<(), PassError> {
        for (id, completion) in self.state.outbox.list::<Completion>() {
            self.post_completion(id, &completion).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Command, Completed, Started};
    use crate::config::Session;
    use domain::ids::CommandId;
    use domain::ids::GraphSessionId;
    use domain::runs::FinalStatus;
    use domain::runs::SessionMeta;
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
        async fn sync(&self, _project: ProjectId, _sessions: &[SessionMeta]) -> Result<Synced, ClientError> {
            self.syncs.lock().unwrap().push(Instant::now());
            tokio::time::sleep(self.sync_takes).await;
            if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail_first {
                return Err(ClientError::Retryable("503 scripted".into()));
            }
            Ok(Synced::Commands { commands: Vec::new(), poll_interval: self.poll_interval })
        }
        async fn start(&self, _id: CommandId, _execution_id: &str) -> Result<Started, ClientError> {
            Ok(Started::Refused("cancelled".into()))
        }
        async fn control(&self, _id: CommandId) -> Result<bool, ClientError> {
            Ok(false)
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
            state_dir: std::env::temp_dir().join(format!("relay-loop-{}", uuid::Uuid::new_v4())),
            control_poll: Duration::from_secs(3),
            poll,
            cancel_grace: Duration::from_secs(1),
            sessions: vec![Session { meta, projects: vec![ProjectId::generate()], command: vec!["true".into()] }],
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
        fn sync(&self, p: ProjectId, s: &[SessionMeta]) -> impl Future<Output = Result<Synced, ClientError>> + Send {
            self.0.sync(p, s)
        }
        fn start(&self, id: CommandId, e: &str) -> impl Future<Output = Result<Started, ClientError>> + Send {
            self.0.start(id, e)
        }
        fn control(&self, id: CommandId) -> impl Future<Output = Result<bool, ClientError>> + Send {
            self.0.control(id)
        }
        fn complete(
            &self,
            id: CommandId,
            c: &Completion,
        ) -> impl Future<Output = Result<Completed, ClientError>> + Send {
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
    }

    impl RelayServer for Arc<Script> {
        async fn sync(&self, project: ProjectId, sessions: &[SessionMeta]) -> Result<Synced, ClientError> {
            self.syncs.lock().unwrap().push((project, sessions.len()));
            if self.refused_projects.lock().unwrap().contains(&project) {
                return Err(ClientError::Refused { status: 404, body: "project not found".into() });
            }
            let started = self.started.lock().unwrap().clone();
            let commands = self
                .queued
                .lock()
                .unwrap()
                .iter()
                .filter(|(p, c)| *p == project && !started.contains_key(&c.command_id))
                .map(|(_, c)| c.clone())
                .collect();
            Ok(Synced::Commands { commands, poll_interval: Duration::from_millis(100) })
        }
        async fn start(&self, id: CommandId, execution_id: &str) -> Result<Started, ClientError> {
            self.start_calls.fetch_add(1, Ordering::SeqCst);
            let mut started = self.started.lock().unwrap();
            match started.get(&id) {
                Some(e) if e == execution_id => return Ok(Started::Running),
                Some(_) => return Ok(Started::Refused("running".into())),
                None => {}
            }
            started.insert(id, execution_id.to_owned());
            if self.lose_start_responses.load(Ordering::SeqCst) > 0 {
                self.lose_start_responses.fetch_sub(1, Ordering::SeqCst);
                return Err(ClientError::Retryable("the response was lost".into()));
            }
            Ok(Started::Running)
        }
        async fn control(&self, _id: CommandId) -> Result<bool, ClientError> {
            Ok(false)
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
        Session { meta, projects, command: vec!["sh".into(), "-c".into(), script.into()] }
    }

    fn fast_config(state_dir: &std::path::Path, sessions: Vec<Session>) -> Config {
        Config {
            server_url: "http://unused.invalid".into(),
            device_token: "fcd_test".into(),
            state_dir: state_dir.to_path_buf(),
            control_poll: Duration::from_millis(50),
            poll: Duration::from_millis(100),
            cancel_grace: Duration::from_millis(500),
            sessions,
        }
    }

    fn queue(script: &Script, project: ProjectId, session: &Session) -> CommandId {
        let id = CommandId::generate();
        let command = Command {
            command_id: id,
            graph_session_id: session.meta.graph_session_id.clone(),
            slug: session.meta.slug.clone(),
            arguments: serde_json::json!({}),
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
        assert!(
            told,
            "the server was never told the project has no shared session: {:?}",
            script.syncs.lock().unwrap()
        );
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
            _command: &[String],
            _arguments: &serde_json::Value,
            cancel: impl Future<Output = ()> + Send,
            _grace: Duration,
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
        let graph = Timed {
            took: Duration::from_secs(2),
            script: Arc::clone(&script),
            syncs_during: Arc::clone(&syncs_during),
        };
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
                "server_url = \"http://unused.invalid\"\ndevice_token = \"fcd_test\"\nstate_dir = \"{}\"\npoll_s = 1\n\
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
        let relay =
            Relay::with_server(Config::load(&file).unwrap(), Arc::clone(&script)).unwrap().watching(file.clone());
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
}
