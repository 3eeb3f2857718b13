//! One queued command, in the steps the relay takes with it (SPEC §5):
//!
//! 1. **consent** — on this desktop, right before running: the session must still be in the
//!    config, marked for the project, with the slug the command was queued with; otherwise the
//!    run is completed `cancelled` with `Graph session is no longer shared with this project`;
//! 2. **journaled start** — the command goes to the start journal before `start` is sent, with
//!    the execution id a retry reuses (so a lost answer replays instead of starting twice), and
//!    is marked running before the process is spawned (so it is never spawned twice);
//! 3. **supervise** — while the graph runs: check `control` (a cancel stops the process group),
//!    forwarding the Graph's newest progress on a check at most every 10 s;
//! 4. **complete** — the bounded completion goes to the outbox (fsynced) before it is posted;
//!    a completion the server refuses is reported `failed` with the reason instead.

use std::sync::{Arc, Mutex};

use domain::errors::SESSION_NO_LONGER_SHARED;
use domain::ids::{CommandId, ProjectId};
use domain::progress::FORWARD_EVERY;
use domain::runs::{Completion, FinalStatus};

use super::{PassError, Relay};

/// The Graph's environment: its run's id (the `command_id` a chat's `get_graph_run` reads).
pub const RUN_ID_ENV: &str = "FOUNDRY_RUN_ID";
/// The Graph's environment: the `gs_…` id of the session it runs as.
pub const SESSION_ID_ENV: &str = "FOUNDRY_GRAPH_SESSION_ID";
use crate::config::{Config, Session};
use crate::machine::disk;
use crate::run::executor;
use crate::server::client::{ClientError, Command, Completed, Control, RelayServer, Started};

impl<S: RelayServer, E: executor::Execute> Relay<S, E> {
    /// Takes one command through consent, the journaled start, supervision and completion.
    pub(crate) async fn handle(&self, project: ProjectId, command: Command) -> Result<(), PassError> {
        let id = command.command_id;
        let config = self.config();
        let Some(session) = consent(&config, project, &command) else {
            tracing::warn!(command = %id, session = %command.graph_session_id, "session no longer shared here; refusing the run");
            return self.complete(id, no_longer_shared()).await;
        };
        // Its folder went after the sync that offered it (a disk pulled, a grant lost): the
        // run is refused with the reason, never started in the wrong folder.
        if let Some(dir) = &session.launch.working_dir
            && let Err(e) = std::fs::read_dir(dir)
        {
            let platform = crate::machine::service::Platform::current();
            let why = crate::machine::folders::reason(dir, &e, platform, &self.exe());
            tracing::warn!(command = %id, session = %session.meta.slug, reason = %why, "session unavailable; refusing the run");
            return self.complete(id, unavailable(&session.meta.slug, &why)).await;
        }
        // Listening before the start is sent: a cancel asked the moment the server has the run
        // running rings before this slot would otherwise listen, and must not wait for a poll.
        let rings = self.bell.control_rings();
        let Some(execution_id) = self.journaled_start(project, &command, &session.meta.slug).await? else {
            return Ok(());
        };
        let live = Arc::new(crate::run::live::Live::default());
        // Set when the run stopped because the server gave up on it while the computer slept.
        let slept = Mutex::new(None);
        let stop = async {
            let why = supervise(&self.client, id, &execution_id, &config, rings, &live, &self.clocks, &self.bell).await;
            *slept.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = why;
        };
        // The Graph may ask a linked chat while it runs (crate::run::ask): its capability
        // lives exactly as long as the run.
        let mut launch = session.launch.clone();
        // The owner's login shell environment under the session's own `env`, which wins.
        for (k, v) in self.shell_vars() {
            launch.env.entry(k).or_insert(v);
        }
        // Which run this is (the `command_id` a chat's get_graph_run reads) and of which
        // session, over anything of the same name: a Graph makes its keys unique per run with it.
        launch.env.insert(RUN_ID_ENV.to_owned(), id.to_string());
        launch.env.insert(SESSION_ID_ENV.to_owned(), session.meta.graph_session_id.to_string());
        let asking = match self.askers.register() {
            Ok((registration, inbox)) => {
                launch.env.extend(crate::run::ask::environment(&self.state.root, &registration.capability));
                Some((registration, inbox))
            }
            Err(e) => {
                tracing::warn!(command = %id, error = %e, "no capability for the run's asks (no randomness)");
                None
            }
        };
        let run = self.executor.execute(&launch, &command.arguments, stop, config.cancel_grace, Arc::clone(&live));
        let outcome = match asking {
            Some((_registration, inbox)) => {
                let asker = crate::run::ask::Asker {
                    client: &self.client,
                    bell: &self.bell,
                    root: &self.state.root,
                    command: id,
                    poll: config.poll,
                    live: &live,
                };
                crate::run::ask::while_answering(&asker, inbox, run).await
            }
            None => run.await,
        };
        tracing::info!(command = %id, status = ?outcome.status, "run finished");
        let slept = slept.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (status, error) = match slept {
            // The server reads it `failed` (desktop stopped reporting) and takes this one
            // `failed` from the execution that ran it: the reason replaces the generic one.
            Some(why) => (FinalStatus::Failed, Some(why)),
            None => (outcome.status, outcome.error),
        };
        let completion = Completion {
            execution_id,
            status,
            result: outcome.result,
            result_truncated: outcome.truncated,
            error,
            total_tokens: outcome.total_tokens,
            reported_cost: outcome.reported_cost,
        };
        self.complete(id, completion).await
    }

    /// Journals the command, sends `start`, and marks it running: the execution id to run it
    /// under, or `None` when it must not run here (the server refused, or it was spawned once
    /// already). A start without an answer stays in the journal for the next pass.
    async fn journaled_start(
        &self,
        project: ProjectId,
        command: &Command,
        slug: &str,
    ) -> Result<Option<String>, PassError> {
        let id = command.command_id;
        let journaled = self.state.journal.list::<disk::Started>().into_iter().find(|(j, _)| *j == id);
        if journaled.as_ref().is_some_and(|(_, s)| s.running) {
            // Spawned once already (this process died or lost track): never run it twice.
            return Ok(None);
        }
        let execution_id = match journaled {
            // A start whose answer was lost: reuse its execution id, so the retry is a replay.
            Some((_, s)) if !self.forgets_lost_starts() => s.execution_id,
            _ => uuid::Uuid::new_v4().to_string(),
        };
        let mut entry = disk::Started {
            execution_id: execution_id.clone(),
            running: false,
            command: Some((project, command.clone())),
        };
        self.state.journal.put(id, &entry)?;
        match self.client.start(id, &execution_id).await {
            Ok(Started::Refused(status)) => {
                tracing::info!(command = %id, %status, "not starting: the server refused");
                self.state.journal.remove(id)?;
                return Ok(None);
            }
            Err(ClientError::Refused { status, body }) => {
                tracing::warn!(command = %id, status, %body, "not starting: the server refused the start");
                self.state.journal.remove(id)?;
                return Ok(None);
            }
            // No answer: the journal keeps the command, the next pass asks again.
            Err(e) => return Err(e.into()),
            Ok(Started::Running) => tracing::info!(command = %id, session = %slug, "started"),
        }
        // Marked before spawning: from here on this command is never spawned again.
        entry.running = true;
        self.state.journal.put(id, &entry)?;
        Ok(Some(execution_id))
    }

    /// The test-only mutation of the lost-start fix: set only in this crate's tests.
    #[cfg(test)]
    fn forgets_lost_starts(&self) -> bool {
        self.forget_lost_starts
    }

    /// Never outside this crate's tests.
    #[cfg(not(test))]
    fn forgets_lost_starts(&self) -> bool {
        false
    }

    /// Writes the completion durably, forgets the journal entry, then posts it.
    /// When the outbox cannot be written (a full disk), the completion is kept in memory and
    /// posted directly, and again on every pass until the server has it: a finished result is
    /// never dropped (it is lost only if the relay also stops first, and then the journal makes
    /// the run read `relay restarted during run`).
    pub(crate) async fn complete(&self, id: CommandId, completion: Completion) -> Result<(), PassError> {
        let completion = completion.bounded();
        if let Err(e) = self.state.outbox.put(id, &completion) {
            tracing::error!(command = %id, error = %e, "the outbox cannot be written (a full disk?); delivering the completion from memory");
            if let Ok(mut unsaved) = self.unsaved.lock() {
                unsaved.push((id, completion));
            }
            self.set_status(|_| {});
            return self.flush_unsaved().await;
        }
        self.state.journal.remove(id)?;
        self.post_completion(id, &completion).await
    }

    /// Posts the completions kept in memory (see [`Self::complete`]); a delivered one leaves
    /// memory and its journal entry.
    pub(crate) async fn flush_unsaved(&self) -> Result<(), PassError> {
        let pending: Vec<(CommandId, Completion)> = self.unsaved.lock().map(|u| u.clone()).unwrap_or_default();
        for (id, completion) in pending {
            self.post_completion(id, &completion).await?;
            if let Ok(mut unsaved) = self.unsaved.lock() {
                unsaved.retain(|(u, _)| *u != id);
            }
            if let Err(e) = self.state.journal.remove(id) {
                tracing::warn!(command = %id, error = %e, "delivered, but its journal entry stays");
            }
            self.set_status(|_| {});
        }
        Ok(())
    }

    /// Removes the outbox file of a completion the server has answered for. A file that cannot
    /// be removed (a broken state folder) is logged, never a failed delivery: the server has
    /// the completion, so the completions after it must not wait on this one; the file left
    /// behind is posted again by a later pass, which the server answers the same way (a
    /// completion is idempotent under its execution id).
    fn forget_answered(&self, id: CommandId) {
        if let Err(e) = self.state.outbox.remove(id) {
            tracing::warn!(command = %id, error = %e, "delivered, but its outbox file stays (it is sent again later)");
        }
    }

    /// Posts a completion from the outbox and removes it once the server has an answer for it.
    pub(crate) async fn post_completion(&self, id: CommandId, completion: &Completion) -> Result<(), PassError> {
        match self.client.complete(id, completion).await {
            Ok(Completed::Recorded(status)) => {
                tracing::info!(command = %id, %status, "completion delivered");
                self.forget_answered(id);
            }
            Ok(Completed::Conflict(status)) => {
                tracing::warn!(command = %id, %status, "the server has this run ended otherwise; dropping the completion");
                self.forget_answered(id);
            }
            Err(ClientError::Refused { status, body }) if !completion.is_refusal_report() => {
                // Never lose a run to one bad field: report it failed, saying why.
                tracing::error!(command = %id, status, %body, "the server rejected the completion; reporting the run failed");
                let report = completion.refusal_report(&format!("HTTP {status} {body}"));
                if let Err(e) = self.state.outbox.put(id, &report) {
                    // Posted from memory all the same; the refused one stays on disk, if it is
                    // there, and a later pass reports it again.
                    tracing::error!(command = %id, error = %e, "the outbox cannot hold the failure report; posting it from memory");
                }
                return Box::pin(self.post_completion(id, &report)).await;
            }
            Err(ClientError::Refused { status, body }) => {
                tracing::error!(command = %id, status, %body, "the server refused even the failure report; dropping it");
                self.forget_answered(id);
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
}

/// The control check's period while the doorbell is proven alive (a cancel rings): a heartbeat
/// every 30 s, far inside the server's 10-minute wait, and a cancel still seen within 30 s if a
/// ring is lost.
pub(crate) const CONTROL_WHILE_RUNG: std::time::Duration = std::time::Duration::from_secs(30);

/// The consent re-check: the session the command names, if this desktop still shares it in
/// `project` with the slug it was queued with.
fn consent<'c>(config: &'c Config, project: ProjectId, command: &Command) -> Option<&'c Session> {
    config.session(&command.graph_session_id).filter(|s| s.projects.contains(&project) && s.meta.slug == command.slug)
}

/// The completion that refuses a command whose session is no longer shared here.
fn no_longer_shared() -> Completion {
    Completion {
        execution_id: uuid::Uuid::new_v4().to_string(),
        status: FinalStatus::Cancelled,
        result: None,
        result_truncated: false,
        error: Some(SESSION_NO_LONGER_SHARED.to_owned()),
        total_tokens: None,
        reported_cost: None,
    }
}

/// The completion that refuses a command whose session's folder cannot be used now.
fn unavailable(slug: &str, why: &str) -> Completion {
    Completion {
        status: FinalStatus::Failed,
        error: Some(format!("session {slug} is unavailable on this desktop: {why}")),
        ..no_longer_shared()
    }
}

/// While a run goes on: checks `control` every control interval and resolves when a cancel is
/// requested (a failed check lets the run go on). The run's newest progress rides on a check:
/// as soon as the Graph says something new, if the last forward is [`FORWARD_EVERY`] old (else
/// when it is), the check is a `POST` carrying it — one request and one server write either way,
/// and a Graph that prints a thousand lines a second still costs one forward per 10 s.
///
/// The doorbell cuts the wait short: a `control` ring for this run checks at once. `rings` was
/// subscribed before the start was sent, so a ring for a cancel asked right after the server
/// recorded the start is waiting here, not lost. (Syncing during a run is the loop's: it keeps
/// its schedule while slots run.)
///
/// Resolves with the run's error when the server stopped waiting for the run (`failed`: no
/// report for its heartbeat timeout) while the computer slept: the relay then reports the run
/// `failed` with [`domain::errors::MAC_SLEPT`] and how long, which the server records over its
/// generic `desktop stopped reporting`.
#[allow(clippy::too_many_arguments)]
async fn supervise<S: RelayServer>(
    client: &S,
    id: CommandId,
    execution_id: &str,
    config: &Config,
    mut rings: tokio::sync::broadcast::Receiver<CommandId>,
    live: &crate::run::live::Live,
    clocks: &super::wake::Clocks,
    bell: &crate::server::doorbell::Doorbell,
) -> Option<String> {
    let began = clocks.mark();
    // While the doorbell is proven alive a cancel comes by ring, so the check is only the
    // heartbeat (issue 59: every running Graph's 3 s poll filled the shared control route).
    let period = || {
        let proven = bell.alive_age().is_some_and(|age| age <= domain::doorbell::PROVEN_WITHIN);
        if proven { config.control_poll.max(CONTROL_WHILE_RUNG) } else { config.control_poll }
    };
    let mut up = bell.watch_up();
    let mut next = tokio::time::Instant::now() + period();
    let mut sent = 0;
    let mut forwarded: Option<tokio::time::Instant> = None;
    loop {
        let pending = live.version() != sent;
        let ready = forwarded.map_or_else(tokio::time::Instant::now, |t| t + FORWARD_EVERY);
        let answer = tokio::select! {
            ring = rings.recv() => {
                // Another run's ring is not ours; missed rings (lagging) may have been.
                if matches!(ring, Ok(r) if r != id) {
                    continue;
                }
                next = tokio::time::Instant::now();
                continue;
            }
            // The doorbell dropped (or came up): the period changes now, not after a long wait.
            Ok(()) = up.changed() => {
                next = next.min(tokio::time::Instant::now() + period());
                continue;
            }
            () = live.changed(), if !pending => continue,
            () = tokio::time::sleep_until(ready), if pending => {
                let (version, progress) = live.snapshot();
                forwarded = Some(tokio::time::Instant::now());
                next = tokio::time::Instant::now() + period();
                let answer = client.progress(id, execution_id, &progress).await;
                if answer.is_ok() {
                    sent = version;
                }
                answer
            }
            () = tokio::time::sleep_until(next) => {
                next = tokio::time::Instant::now() + period();
                client.control(id).await
            }
        };
        match answer {
            Ok(Control::Cancel) => {
                tracing::info!(command = %id, "cancel requested; stopping the run");
                return None;
            }
            Ok(Control::Ended(status)) => {
                let asleep = began.slept_until(&clocks.mark()).filter(|_| status == "failed");
                tracing::warn!(command = %id, %status, slept_s = asleep.map(|d| d.as_secs()), "the server has the run ended; stopping it");
                let platform = crate::machine::service::Platform::current();
                return asleep.map(|d| super::wake::slept_reason(d, platform));
            }
            Ok(Control::Go) => {}
            Err(e) => tracing::warn!(command = %id, error = %e, "control check failed; the run goes on"),
        }
    }
}
