//! The relay loop (SPEC §5), one pass at a time:
//!
//! 1. every poll interval (20 s, or the server's `poll_interval_s`); ticks that come while a
//!    pass is still busy collapse into one pass right after it, never a burst
//!    (`MissedTickBehavior::Skip`);
//! 2. re-send completions from the outbox; retry every `start` that never got an answer (same
//!    execution id: the server replays it) in a free slot, and run the command if it is running
//!    for us;
//! 3. for each project a session is shared in: `sync` with those sessions' metadata (≤ 100);
//!    a project that dropped out of the config gets one empty sync (its sessions are no longer
//!    offered); a refusal (4xx) for one project is that project's state in `relay status`, not
//!    a failed pass;
//! 4. each returned command goes to a free slot (`max_parallel`, default 1), through the steps
//!    in [`crate::run::agent::command`]: consent re-check, journaled start, supervised run, completion
//!    through the outbox. The sync asks for at most as many commands as slots are free; with
//!    every slot busy a pass starts nothing and syncs only to stay seen. A slot that ends starts
//!    a pass at once.
//!
//! Network failures end the pass and the next one waits an exponentially growing, jittered
//! delay (reset by the next successful pass). Shutdown stops waiting at once; a run cut short
//! by it stays in the journal and is reported `relay restarted during run` on the next start.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use domain::clock::{Clock, SystemClock};
use domain::ids::{CommandId, ProjectId};
use domain::runs::{Completion, SessionMeta};
use tokio::time::MissedTickBehavior;

pub mod command;

use crate::RelayError;
use crate::config::Config;
use crate::machine::disk::{self, State};
use crate::machine::status::{ProjectStatus, Status};
use crate::run::executor;
use crate::server::backoff::Backoff;
use crate::server::client::{Client, ClientError, RelayServer, Synced};
use crate::server::doorbell::Doorbell;

/// The relay, over a [`RelayServer`] (the HTTPS [`Client`] unless a test gives another).
pub struct Relay<S = Client, E = executor::Processes> {
    pub(crate) executor: E,
    jitter_seed: Option<u64>,
    config: std::sync::RwLock<Arc<Config>>,
    /// The config file and its modification time when read, when it is watched for changes.
    source: Option<(std::path::PathBuf, Mutex<Option<std::time::SystemTime>>)>,
    pub(crate) client: S,
    pub(crate) state: State,
    /// Completions the outbox could not hold (a full disk), delivered from memory.
    pub(crate) unsaved: Mutex<Vec<(CommandId, Completion)>>,
    /// Test-only mutation: forget the journaled execution id of a start whose answer was lost
    /// (what the lost-start fix prevents), so the test that guards the fix can show it fails.
    #[cfg(test)]
    pub(crate) forget_lost_starts: bool,
    status: Arc<Mutex<Status>>,
    /// The doorbell (never connected unless [`Relay::new`] gave it a token).
    pub(crate) bell: Arc<Doorbell>,
    doorbell_token: Option<String>,
    /// The binary it runs from, when the loop should end once another file stands there
    /// ([`Relay::restart_when_replaced`]).
    binary: Option<crate::machine::update::Binary>,
    /// The runs whose Graphs may ask a chat now ([`crate::run::ask`]).
    pub(crate) askers: crate::run::ask::Askers,
    /// The owner's login shell environment and when it was read, when Graphs get it
    /// ([`Relay::with_shell_environment`]).
    shell_env: Option<Mutex<ShellEnv>>,
    /// The clocks a sleep shows between ([`wake`]).
    pub(crate) clocks: Arc<wake::Clocks>,
}

/// A running slot: its command and how its steps ended.
type Slot<'a> = Pin<Box<dyn Future<Output = (CommandId, Result<(), PassError>)> + Send + 'a>>;

/// Aborts the task when dropped (the doorbell socket ends with the loop).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
        let bell = Arc::new(Doorbell::default());
        let client = Client::new(&config.server_url, &config.device_token)?
            .with_doorbell(Arc::clone(&bell))
            .with_state_dir(config.state_dir.clone());
        let token = config.doorbell.then(|| config.device_token.clone());
        let mut relay = Self::with_server(config, client)?;
        relay.bell = bell;
        relay.doorbell_token = token;
        Ok(relay)
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
        let status = Status { poll_interval_s: config.poll.as_secs(), slots: config.max_parallel, ..Status::default() };
        server.set_slots(config.max_parallel);
        Ok(Self {
            executor,
            jitter_seed: None,
            #[cfg(test)]
            forget_lost_starts: false,
            config: std::sync::RwLock::new(Arc::new(config)),
            source: None,
            client: server,
            state,
            unsaved: Mutex::new(Vec::new()),
            status: Arc::new(Mutex::new(status)),
            bell: Arc::new(Doorbell::default()),
            doorbell_token: None,
            binary: None,
            askers: crate::run::ask::Askers::default(),
            shell_env: None,
            clocks: Arc::default(),
        })
    }

    /// The doorbell this relay listens to (the simulation rings it directly).
    pub fn doorbell(&self) -> Arc<Doorbell> {
        Arc::clone(&self.bell)
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

    /// Gives every Graph the owner's login shell environment under its session's `env`
    /// ([`crate::machine::environment`]): read before the first pass and again when older than
    /// [`crate::machine::environment::REFRESH`].
    pub fn with_shell_environment(mut self) -> Self {
        self.shell_env = Some(Mutex::new(ShellEnv::default()));
        self
    }

    /// Ends the loop between passes — never during a run, which happens inside a pass — once
    /// another file stands at `binary`'s path (`relay update` or the daily check renamed a new
    /// build there); the caller then restarts into it ([`crate::machine::update::Binary::restart`]).
    pub fn restart_when_replaced(mut self, binary: crate::machine::update::Binary) -> Self {
        self.binary = Some(binary);
        self
    }

    /// Whether the loop should end for a new build.
    fn replaced(&self) -> bool {
        let replaced = self.binary.as_ref().is_some_and(crate::machine::update::Binary::replaced);
        if replaced {
            tracing::info!("a new relay build was installed; restarting into it (no run is in progress)");
        }
        replaced
    }

    /// The settings in force (the daily update check reads its own copy at start).
    pub fn config_snapshot(&self) -> Arc<Config> {
        self.config()
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
                self.client.set_slots(merged.max_parallel);
                *self.config.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(merged);
            }
            Ok(new) => {
                tracing::info!(sessions = new.sessions.len(), "config changed; reloaded");
                self.client.set_slots(new.max_parallel);
                *self.config.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(new);
            }
            Err(e) => {
                tracing::error!(error = %e, "config changed but does not load; keeping the last good one");
                self.set_status(|s| s.last_error = Some(format!("config: {e}")));
            }
        }
    }

    /// Tries every session's folder ([`crate::machine::folders`]): the ones that cannot be
    /// used now, also in `relay status`, logged when a session becomes unavailable or
    /// available again.
    fn check_folders(&self, config: &Config) -> crate::machine::folders::Unavailable {
        let platform = crate::machine::service::Platform::current();
        let now = crate::machine::folders::unavailable(config, platform, &self.exe());
        self.set_status(|s| {
            for (slug, why) in &now {
                if !s.unavailable.contains_key(slug) {
                    tracing::warn!(session = %slug, reason = %why, "session unavailable: not offered until its folder is back");
                }
            }
            for slug in s.unavailable.keys().filter(|k| !now.contains_key(*k)) {
                tracing::info!(session = %slug, "session available again");
            }
            s.unavailable.clone_from(&now);
        });
        // The owner's panel shows how many (its syncs' report).
        self.client.set_unavailable(now.len());
        now
    }

    /// The relay's own binary (what a privacy grant must name).
    pub(crate) fn exe(&self) -> std::path::PathBuf {
        self.binary
            .as_ref()
            .map(|b| b.path().to_path_buf())
            .or_else(|| std::env::current_exe().ok())
            .unwrap_or_default()
    }

    /// Whether the last sync said the owner paused this desktop.
    fn status_paused(&self) -> bool {
        self.status.lock().is_ok_and(|s| s.paused.is_some())
    }

    pub(crate) fn set_status(&self, f: impl FnOnce(&mut Status)) {
        if let Ok(mut s) = self.status.lock() {
            f(&mut s);
            s.outbox = self.state.outbox.len();
            s.quarantined = self.state.quarantined();
            s.unsaved = self.unsaved.lock().map_or(0, |u| u.len());
            s.doorbell = self.bell.describe();
            if let Ok(json) = serde_json::to_vec_pretty(&*s) {
                let tmp = self.state.root.join(".status.tmp");
                if private_files::write(&tmp, &json).is_ok() {
                    let _ = std::fs::rename(tmp, self.state.root.join("status.json"));
                }
            }
        }
    }

    /// Runs until `shutdown` resolves.
    ///
    /// The loop owns the slots: each running command is a future it polls beside its timers
    /// (one task, so a slot never waits for a pass nor a pass for a slot). A pass starts the
    /// commands it is handed in free slots; a slot that ends triggers a pass at once, so what
    /// waits takes the slot without waiting for the next poll.
    ///
    /// # Errors
    /// When recovery of the state directory fails (nothing can be trusted then).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), RelayError> {
        let recovered =
            self.state.recover().map_err(|source| RelayError::State { path: self.state.root.clone(), source })?;
        if recovered > 0 {
            tracing::warn!(count = recovered, "runs were cut short by a restart; reporting them as failed");
        }
        let stale = crate::run::ask::forget_stale(&self.state.root);
        if stale > 0 {
            tracing::warn!(
                count = stale,
                "asks of runs cut short by a restart dropped (the server cancels their tasks)"
            );
        }
        // Graphs ask their chats through this socket; without it a run still runs, and its
        // asks fail with the reason.
        let _asks = match crate::run::ask::bind(&self.state.root.join(crate::run::ask::SOCKET_FILE)) {
            Ok(listener) => Some(AbortOnDrop(tokio::spawn(crate::run::ask::serve(listener, self.askers.clone())))),
            Err(e) => {
                tracing::warn!(error = %e, "the socket Graphs ask chats through cannot be opened");
                None
            }
        };
        tokio::pin!(shutdown);
        let mut poll = self.config().poll;
        let mut backoff = self.jitter_seed.map_or_else(Backoff::default, Backoff::seeded);
        let mut ticker = tokio::time::interval(poll);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut wake = WakeCheck::now(&self.clocks);
        let mut network = crate::server::network::Addresses::now();
        let mut proxy_ticks = 0u32;
        let mut wake_tick = tokio::time::interval(WAKE_CHECK);
        wake_tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let _socket = self.doorbell_token.clone().map(|token| {
            let backoff = self.jitter_seed.map_or_else(Backoff::default, |s| Backoff::seeded(s ^ 0xd00b));
            let timing = self.config().doorbell_timing;
            for p in &crate::server::system_proxy::live().unsupported {
                tracing::warn!("proxy setting ignored (connecting directly): {p}");
            }
            AbortOnDrop(tokio::spawn(crate::server::doorbell::keep_open(
                Arc::clone(&self.bell),
                token,
                backoff,
                timing,
            )))
        });
        let mut bell_up = self.bell.watch_up();
        let mut slots: FuturesUnordered<Slot<'_>> = FuturesUnordered::new();
        let mut busy: HashSet<CommandId> = HashSet::new();
        // After a failed pass: no pass before this, whatever wakes the loop.
        let mut hold_until: Option<tokio::time::Instant> = None;
        loop {
            // Biased: when several are ready at once (virtual time), the same one wins every
            // time, so a seeded simulation repeats itself byte for byte.
            let ticked = tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some((id, outcome)) = slots.next(), if !slots.is_empty() => {
                    if !self.slot_ended(&mut busy, id, outcome) {
                        // Its start or completion got no answer: retried after the backoff,
                        // as a failed pass is.
                        hold_until = Some(hold(&mut backoff, &mut ticker).1);
                        continue;
                    }
                    false
                }
                _ = ticker.tick() => true,
                () = self.bell.sync.notified() => false,
                Ok(()) = bell_up.changed() => {
                    let up = *bell_up.borrow_and_update();
                    self.set_status(|_| {});
                    if up {
                        continue;
                    }
                    // The doorbell dropped: back to the relay's own interval, from a sync now.
                    poll = self.config().poll;
                    ticker = tokio::time::interval(poll);
                    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
                    continue;
                }
                _ = wake_tick.tick() => {
                    // A laptop that slept, or moved to another network: sync at once (a run
                    // queued meanwhile waits no longer, and a running one's control poll is
                    // due), with the backoff forgotten, and replace the doorbell's socket,
                    // which is most likely dead without having closed.
                    if slots.is_empty() && self.replaced() {
                        break;
                    }
                    let woke = wake.woke(&self.clocks);
                    let moved = network.changed();
                    // The system proxy: after a wake or a network change, and once a minute
                    // (an owner switching it in System Settings changes no address).
                    proxy_ticks += 1;
                    let proxy_changed = (woke || moved || proxy_ticks.is_multiple_of(PROXY_EVERY_TICKS))
                        && tokio::task::spawn_blocking(crate::machine::system_proxy::refresh_proxies).await.unwrap_or(false);
                    if !woke && !moved && !proxy_changed {
                        continue;
                    }
                    tracing::info!(woke, network_changed = moved, proxy_changed, "the computer woke or its network changed; syncing now");
                    backoff.reset();
                    hold_until = None;
                    self.client.renew_connections();
                    self.bell.reconnect();
                    true
                }
            };
            if !ticked && hold_until.is_some_and(|t| tokio::time::Instant::now() < t) {
                continue;
            }
            hold_until = None;
            let free = self.config().max_parallel.saturating_sub(busy.len());
            let in_slots = busy.clone();
            let pass = self.pass(free, &in_slots);
            tokio::pin!(pass);
            // The slots keep running while the pass talks to the server.
            let mut ended = Vec::new();
            let outcome = loop {
                tokio::select! {
                    biased;
                    () = &mut shutdown => break None,
                    Some(done) = slots.next(), if !slots.is_empty() => ended.push(done),
                    r = &mut pass => break Some(r),
                }
            };
            let Some(outcome) = outcome else { break };
            let pass_failed = outcome.is_err();
            match outcome {
                Ok((server_poll, work)) => {
                    backoff.reset();
                    self.set_status(|s| s.last_error = None);
                    for (project, command) in work {
                        busy.insert(command.command_id);
                        slots.push(self.slot(project, command));
                    }
                    self.set_status(|s| s.running = running_list(&busy));
                    if server_poll != poll {
                        tracing::info!(seconds = server_poll.as_secs(), "poll interval set by the server");
                        poll = server_poll;
                        ticker = tokio::time::interval_at(tokio::time::Instant::now() + poll, poll);
                        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
                    }
                }
                Err(PassError::Network(e)) => {
                    let (delay, at) = hold(&mut backoff, &mut ticker);
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "pass failed; retrying");
                    self.set_status(|s| s.last_error = Some(e));
                    hold_until = Some(at);
                }
            }
            // Slots freed during the pass: another pass at once (or after the backoff when one
            // of them got no answer), not at the next tick. After the poll interval above, which
            // replaces the ticker; a failed pass keeps its own backoff.
            let freed = !ended.is_empty();
            let mut answered = true;
            for (id, o) in ended {
                answered &= self.slot_ended(&mut busy, id, o);
            }
            if freed && !pass_failed {
                if answered {
                    ticker.reset_immediately();
                } else {
                    hold_until = Some(hold(&mut backoff, &mut ticker).1);
                }
            }
            if slots.is_empty() && self.replaced() {
                break;
            }
        }
        tracing::info!("relay stopped");
        Ok(())
    }

    /// One slot: a command taken through [`Self::handle`].
    fn slot(&self, project: ProjectId, command: crate::server::client::Command) -> Slot<'_> {
        Box::pin(async move {
            let id = command.command_id;
            (id, self.handle(project, command).await)
        })
    }

    /// A slot is free again; whether the server answered its steps. A failure inside it (a
    /// start or completion without an answer) left its state on disk: a later pass retries it.
    fn slot_ended(&self, busy: &mut HashSet<CommandId>, id: CommandId, outcome: Result<(), PassError>) -> bool {
        busy.remove(&id);
        let answered = match outcome {
            Ok(()) => true,
            Err(PassError::Network(e)) => {
                tracing::warn!(command = %id, error = %e, "the server did not answer for this run; retrying after the backoff");
                self.set_status(|s| s.last_error = Some(e));
                false
            }
        };
        self.set_status(|s| s.running = running_list(busy));
        answered
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

    /// The `start`s that never got a definite answer (see [`disk`]), to retry in free slots
    /// (same execution id: the server replays them); none already in a slot.
    fn lost_starts(&self, free: usize, busy: &HashSet<CommandId>) -> Vec<(ProjectId, crate::server::client::Command)> {
        let mut out = Vec::new();
        for (id, started) in self.state.journal.list::<disk::Started>() {
            if out.len() >= free {
                break;
            }
            if started.running || busy.contains(&id) || self.state.outbox.contains(id) {
                continue;
            }
            if let Some((project, command)) = started.command {
                tracing::info!(command = %id, "retrying a start whose answer was lost");
                out.push((project, command));
            }
        }
        out
    }

    /// One empty sync for each project that was synced with sessions before but has none in
    /// the config now, then remembers the config's projects.
    async fn retire_projects(&self) -> Result<(), PassError> {
        let current = self.config().projects();
        let mut remembered = self.state.synced_projects();
        let gone: Vec<ProjectId> = remembered.iter().copied().filter(|p| !current.contains(p)).collect();
        for project in gone {
            match self.client.sync(project, &[], 0).await {
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

    /// One pass, with `free` slots (`busy`: the commands in the others): delivers the outbox,
    /// syncs every project (asking for at most the slots still free), and returns the server's
    /// poll interval and the commands to start. With every slot busy it starts nothing and
    /// syncs only to stay seen.
    async fn pass(
        &self,
        free: usize,
        busy: &HashSet<CommandId>,
    ) -> Result<(Duration, Vec<(ProjectId, crate::server::client::Command)>), PassError> {
        self.reload_if_changed();
        self.refresh_shell_environment().await;
        self.flush_outbox().await?;
        let mut work = self.lost_starts(free, busy);
        self.retire_projects().await?;
        let config = self.config();
        let unavailable = self.check_folders(&config);
        let mut poll = config.poll;
        for project in config.projects() {
            let mut sessions = config.sessions_for(project);
            sessions.retain(|m| !unavailable.contains_key(&m.slug));
            let open = u32::try_from(free.saturating_sub(work.len())).unwrap_or(u32::MAX);
            let synced = match self.client.sync(project, &sessions, open).await {
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
                    tracing::debug!(%project, "project is disabled for connected agents; skipping");
                    self.set_status(|s| {
                        if !s.disabled_projects.contains(&project.to_string()) {
                            s.disabled_projects.push(project.to_string());
                        }
                    });
                }
                Synced::Commands { commands, poll_interval, doorbell_url, paused } => {
                    poll = poll_interval;
                    if self.doorbell_token.is_some() {
                        self.bell.offer_url(doorbell_url.as_deref().map(crate::server::doorbell::websocket_url));
                    }
                    // A quiet sync every 20 s is noise in a log nobody rotates: debug; one that
                    // brings work is worth a line.
                    if commands.is_empty() {
                        tracing::debug!(%project, sessions = sessions.len(), "synced; nothing queued");
                    } else {
                        tracing::info!(%project, sessions = sessions.len(), queued = commands.len(), "synced");
                    }
                    self.project_status(project, "ok", &sessions, commands.len());
                    // The owner's pause: shown by `relay status`, logged when it starts or ends.
                    let pause = paused.map(|p| {
                        let until = p.until.map_or_else(|| "until resumed".to_owned(), |u| format!("until {u}"));
                        if p.note.is_empty() { until } else { format!("{until} ({})", p.note) }
                    });
                    if pause.is_some() != self.status_paused() {
                        match &pause {
                            Some(p) => tracing::info!(pause = %p, "the owner paused this desktop: no new runs"),
                            None => tracing::info!("the owner's pause ended: taking runs again"),
                        }
                    }
                    self.set_status(|s| {
                        s.paused = pause.clone();
                        s.last_sync_at = Some(SystemClock.now().rfc3339());
                        s.disabled_projects.retain(|p| p != &project.to_string());
                        s.poll_interval_s = poll_interval.as_secs();
                    });
                    // At most the free slots (an older server may hand out more: they stay
                    // queued for the next pass), never one already in a slot.
                    for command in commands {
                        if work.len() >= free {
                            break;
                        }
                        let id = command.command_id;
                        if !busy.contains(&id) && !work.iter().any(|(_, c)| c.command_id == id) {
                            work.push((project, command));
                        }
                    }
                }
            }
        }
        Ok((poll, work))
    }

    async fn flush_outbox(&self) -> Result<(), PassError> {
        self.flush_unsaved().await?;
        for (id, completion) in self.state.outbox.list::<Completion>() {
            self.post_completion(id, &completion).await?;
        }
        Ok(())
    }
}

mod shell;
#[cfg(test)]
mod tests;
mod wake;
use shell::ShellEnv;
use wake::{PROXY_EVERY_TICKS, WAKE_CHECK, WakeCheck};

/// The next backoff delay, and the instant it ends, to which the ticker's next pass moves.
fn hold(backoff: &mut Backoff, ticker: &mut tokio::time::Interval) -> (Duration, tokio::time::Instant) {
    let delay = backoff.next_delay();
    let at = tokio::time::Instant::now() + delay;
    ticker.reset_at(at);
    (delay, at)
}

/// The running commands, sorted (what `relay status` lists).
fn running_list(busy: &HashSet<CommandId>) -> Vec<String> {
    let mut ids: Vec<String> = busy.iter().map(ToString::to_string).collect();
    ids.sort();
    ids
}
