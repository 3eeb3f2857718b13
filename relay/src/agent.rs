//! The relay loop (SPEC §5), one pass at a time:
//!
//! 1. every poll interval (20 s, or the server's `poll_interval_s`); a tick that comes while a
//!    pass is still busy is skipped (`MissedTickBehavior::Skip`);
//! 2. re-send completions from the outbox;
//! 3. for each project a session is shared in: `sync` with those sessions' metadata (≤ 100);
//! 4. for each returned command: re-check that the project is still enabled, the session still
//!    marked for it and its slug unchanged — otherwise complete it `cancelled` with
//!    `Graph session is no longer shared with this project`;
//! 5. otherwise journal → `start` → run it (one at a time) while polling `control`; stop the
//!    process group on cancel; write the bounded completion to the outbox, then post it.
//!
//! Network failures end the pass and the next one waits an exponentially growing, jittered
//! delay (reset by the next successful pass). Shutdown stops waiting at once; a run cut short
//! by it stays in the journal and is reported `relay restarted during run` on the next start.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use shared::clock::{Clock, SystemClock};
use shared::errors::SESSION_NO_LONGER_SHARED;
use shared::ids::{CommandId, ProjectId};
use shared::runs::{Completion, FinalStatus};
use tokio::time::MissedTickBehavior;

use crate::client::{Client, ClientError, Command, Completed, Started, Synced};
use crate::config::Config;
use crate::disk::{self, State};
use crate::executor;

/// First retry delay after a failed pass.
pub const BACKOFF_START: Duration = Duration::from_secs(1);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// What `relay status` shows (written to `status.json` after every change).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Status {
    /// When the last sync succeeded (RFC 3339).
    pub last_sync_at: Option<String>,
    /// The last failure, if the last pass failed.
    pub last_error: Option<String>,
    /// Completions waiting to be delivered.
    pub outbox: usize,
    /// The command running now.
    pub current_run: Option<String>,
    /// The poll interval in use.
    pub poll_interval_s: u64,
    /// Projects the owner has disabled (as of the last sync).
    pub disabled_projects: Vec<String>,
}

/// Exponential backoff with ±25 % jitter, reset on success.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: BACKOFF_START }
    }
}

impl Backoff {
    /// The delay before the next try (and doubles the one after, up to [`BACKOFF_MAX`]).
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        let mut b = [0u8; 2];
        let r = if getrandom::fill(&mut b).is_ok() { u16::from_le_bytes(b) } else { 32768 };
        // factor in [0.75, 1.25)
        base.mul_f64(0.75 + f64::from(r) / 131_072.0)
    }

    /// After a success.
    pub fn reset(&mut self) {
        self.next = BACKOFF_START;
    }
}

/// The relay.
pub struct Relay {
    config: Config,
    client: Client,
    state: State,
    status: Arc<Mutex<Status>>,
}

enum PassError {
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

impl Relay {
    /// A relay for `config` (opens the state directory).
    ///
    /// # Errors
    /// When the state directory or the HTTP client cannot be set up.
    pub fn new(config: Config) -> anyhow::Result<Self> {
        let client = Client::new(&config.server_url, &config.device_token)?;
        let state = State::open(&config.state_dir)?;
        let status = Status { poll_interval_s: config.poll.as_secs(), ..Status::default() };
        Ok(Self { config, client, state, status: Arc::new(Mutex::new(status)) })
    }

    fn set_status(&self, f: impl FnOnce(&mut Status)) {
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
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let recovered = self.state.recover()?;
        if recovered > 0 {
            tracing::warn!(count = recovered, "runs were cut short by a restart; reporting them as failed");
        }
        tokio::pin!(shutdown);
        let mut poll = self.config.poll;
        let mut backoff = Backoff::default();
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

    /// One pass; returns the server's poll interval.
    async fn pass(&self) -> Result<Duration, PassError> {
        self.flush_outbox().await?;
        let mut poll = self.config.poll;
        for project in self.config.projects() {
            let sessions = self.config.sessions_for(project);
            match self.client.sync(project, &sessions).await? {
                Synced::Disabled => {
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

    async fn post_completion(&self, id: CommandId, completion: &Completion) -> Result<(), PassError> {
        match self.client.complete(id, completion).await {
            Ok(Completed::Recorded(status)) => {
                tracing::info!(command = %id, %status, "completion delivered");
                self.state.outbox.remove(id)?;
            }
            Ok(Completed::Conflict(status)) => {
                tracing::warn!(command = %id, %status, "the server has this run ended otherwise; dropping the completion");
                self.state.outbox.remove(id)?;
            }
            Err(ClientError::Refused { status, body }) => {
                tracing::error!(command = %id, status, %body, "the server rejected the completion; dropping it");
                self.state.outbox.remove(id)?;
            }
            Err(e) => {
                tracing::warn!(command = %id, error = %e, "completion not delivered; it stays in the outbox");
                self.set_status(|_| {});
                return Err(e.into());
            }
        }
        self.set_status(|_| {});
        Ok(())
    }

    /// Writes the completion durably, forgets the journal entry, then posts it.
    async fn deliver(&self, id: CommandId, completion: Completion) -> Result<(), PassError> {
        let completion = completion.bounded();
        self.state.outbox.put(id, &completion)?;
        self.state.journal.remove(id)?;
        self.post_completion(id, &completion).await
    }

    async fn handle(&self, project: ProjectId, command: Command) -> Result<(), PassError> {
        let id = command.command_id;
        // Consent re-check, on this desktop, right before running.
        let session = self
            .config
            .session(&command.graph_session_id)
            .filter(|s| s.projects.contains(&project) && s.meta.slug == command.slug);
        let Some(session) = session else {
            tracing::warn!(command = %id, session = %command.graph_session_id, "session no longer shared here; refusing the run");
            let refusal = Completion {
                execution_id: uuid::Uuid::new_v4().to_string(),
                status: FinalStatus::Cancelled,
                result: None,
                result_truncated: false,
                error: Some(SESSION_NO_LONGER_SHARED.to_owned()),
                total_tokens: None,
                reported_cost: None,
            };
            return self.deliver(id, refusal).await;
        };
        let execution_id = match self.state.journal.list::<disk::Started>().into_iter().find(|(j, _)| *j == id) {
            // A start whose answer was lost: reuse its execution id, so the retry is a replay.
            Some((_, s)) => s.execution_id,
            None => uuid::Uuid::new_v4().to_string(),
        };
        self.state.journal.put(id, &disk::Started { execution_id: execution_id.clone() })?;
        match self.client.start(id, &execution_id).await? {
            Started::Refused(status) => {
                tracing::info!(command = %id, %status, "not starting: the server refused");
                self.state.journal.remove(id)?;
                return Ok(());
            }
            Started::Running => tracing::info!(command = %id, session = %session.meta.slug, "started"),
        }
        self.set_status(|s| s.current_run = Some(id.to_string()));
        let client = self.client.clone();
        let control_poll = self.config.control_poll;
        let cancelled = async move {
            let mut iv = tokio::time::interval(control_poll);
            iv.set_missed_tick_behavior(MissedTickBehavior::Skip);
            iv.tick().await;
            loop {
                iv.tick().await;
                match client.control(id).await {
                    Ok(true) => {
                        tracing::info!(command = %id, "cancel requested; stopping the run");
                        return;
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(command = %id, error = %e, "control poll failed; the run goes on"),
                }
            }
        };
        let outcome = executor::run(&session.command, &command.arguments, cancelled, self.config.cancel_grace).await;
        tracing::info!(command = %id, status = ?outcome.status, "run finished");
        self.set_status(|s| s.current_run = None);
        let completion = Completion {
            execution_id,
            status: outcome.status,
            result: outcome.result,
            result_truncated: false,
            error: outcome.error,
            total_tokens: outcome.total_tokens,
            reported_cost: outcome.reported_cost,
        };
        self.deliver(id, completion).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_resets() {
        let mut b = Backoff::default();
        let d1 = b.next_delay();
        let d2 = b.next_delay();
        assert!(d1 >= Duration::from_millis(750) && d1 < Duration::from_millis(1250), "{d1:?}");
        assert!(d2 >= Duration::from_millis(1500) && d2 < Duration::from_millis(2500), "{d2:?}");
        for _ in 0..20 {
            b.next_delay();
        }
        assert!(b.next_delay() < BACKOFF_MAX.mul_f64(1.25));
        b.reset();
        assert!(b.next_delay() < Duration::from_millis(1250));
    }
}
