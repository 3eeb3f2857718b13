//! A running Graph asks one of its owner's linked chats to do a step, and waits for the answer
//! (`domain::dispatch`; `docs/relay.md`, "A Graph asks a chat").
//!
//! ```text
//!  Graph ─ relay task ask ─► relay.sock (0600, in the state folder)
//!                              │ one JSON line: the run's capability + the ask
//!                              ▼
//!          accept task (serve) ── finds the run by its capability ──► the run's slot
//!                                                                     │ journal the ask on disk
//!                                                                     │ POST /tasks (device token; retried, same key)
//!                                                                     │ wait: a `task` ring, or the poll
//!          one JSON line: the task as it ended ◄──────────────────────┘
//! ```
//!
//! - **No token in the Graph.** The Graph gets the socket's path ([`SOCKET_ENV`]) and a
//!   capability valid for its own run ([`CAPABILITY_ENV`]): random, known only to the relay
//!   and the Graph's environment, and forgotten when the run ends. The relay sends the request
//!   with its device token; the server checks again that the run is running on this desktop.
//! - **Nothing lost, nothing twice.** An ask is journaled before it is sent and forgotten once
//!   it is answered. The Graph's key is the server's idempotency key: a retry (the relay's, or
//!   the Graph's after a broken connection) gets the same task. A relay that stops mid-run
//!   ends the run (its Graph is stopped with it, and the restarted relay reports the run
//!   `relay restarted during run`); the server then cancels the run's open tasks, so an ask cut
//!   short leaves no chat working for nobody, and the restarted relay drops the stale journal.
//! - **No polling delay.** The wait ends on the doorbell's `task` ring for this task; the poll
//!   (the relay's poll interval) is only the safety net for a lost ring.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::dispatch::{DispatchRequest, DispatchedTask};
use domain::ids::CommandId;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use crate::server::client::{ClientError, RelayServer};

/// The Graph's environment: the path of the relay's socket.
pub const SOCKET_ENV: &str = "FOUNDRY_RELAY_SOCKET";
/// The Graph's environment: its run's capability.
pub const CAPABILITY_ENV: &str = "FOUNDRY_RUN_CAPABILITY";
/// The Graph's environment: the relay binary (`"$FOUNDRY_RELAY" task ask …`).
pub const RELAY_ENV: &str = "FOUNDRY_RELAY";
/// The socket's file name in the state folder.
pub const SOCKET_FILE: &str = "relay.sock";
/// The journal folder of asks in flight, in the state folder.
pub const JOURNAL_DIR: &str = "asks";
/// Longest request line a Graph may send (an objective is at most 10,000 characters).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// Most asks of one run waiting at once (more are answered with an error at once).
pub const MAX_WAITING_PER_RUN: usize = 64;

/// What a Graph sends: one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskRequest {
    /// Its run's capability ([`CAPABILITY_ENV`]).
    pub capability: String,
    /// The chat link to ask.
    pub chat_link_id: String,
    /// What the chat should do.
    pub objective: String,
    /// The Graph's idempotency key (8 to 128 characters): asking again with it gets the same
    /// task.
    pub key: String,
    /// Seconds the chat has (default and most: the server's, 30 minutes unless configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<u64>,
    /// Wait until the task ends (the default); `false`: answer with the task as it is now.
    #[serde(default = "yes")]
    pub wait: bool,
}

fn yes() -> bool {
    true
}

/// What a Graph reads back: one JSON line, the task or an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskAnswer {
    /// The task: as it ended (a wait), or as it is (`wait: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<DispatchedTask>,
    /// Why there is no task: the server's refusal, or the relay's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl AskAnswer {
    fn error(e: impl Into<String>) -> Self {
        Self { task: None, error: Some(e.into()) }
    }
}

/// One ask handed to its run's slot, with where to answer.
pub(crate) struct Asked {
    request: AskRequest,
    reply: oneshot::Sender<AskAnswer>,
}

/// The runs that may ask now: capability → the run's inbox. Shared by the accept task and the
/// slots.
#[derive(Clone, Default)]
pub struct Askers(Arc<Mutex<HashMap<String, mpsc::Sender<Asked>>>>);

/// A run's capability, forgotten when dropped (the run ended).
pub(crate) struct Registration {
    askers: Askers,
    /// The capability, for the Graph's environment.
    pub(crate) capability: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut m) = self.askers.0.lock() {
            m.remove(&self.capability);
        }
    }
}

impl Askers {
    /// A fresh capability for a run, and its inbox.
    ///
    /// # Errors
    /// When the operating system cannot provide randomness.
    pub(crate) fn register(&self) -> Result<(Registration, mpsc::Receiver<Asked>), getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        let capability: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let (tx, rx) = mpsc::channel(MAX_WAITING_PER_RUN);
        if let Ok(mut m) = self.0.lock() {
            m.insert(capability.clone(), tx);
        }
        Ok((Registration { askers: self.clone(), capability }, rx))
    }

    fn inbox(&self, capability: &str) -> Option<mpsc::Sender<Asked>> {
        self.0.lock().ok()?.get(capability).cloned()
    }
}

/// Binds the socket at `path` (replacing a stale one: the state folder's lock makes this relay
/// its only user), readable and writable by this user alone.
///
/// # Errors
/// When the socket cannot be bound or narrowed.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    private_files::narrow(path, 0o600)?;
    Ok(listener)
}

/// Accepts Graphs' connections until aborted: each one's request goes to its run's slot, and
/// its answer back. A connection the Graph closes before the answer cancels nothing on the
/// server (asking again with the key picks the task up).
pub async fn serve(listener: UnixListener, askers: Askers) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let askers = askers.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, &askers).await {
                tracing::debug!(error = %e, "a Graph's ask connection failed");
            }
        });
    }
}

async fn connection(stream: UnixStream, askers: &Askers) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read.take(MAX_REQUEST_BYTES as u64 + 1));
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line).await?;
    let answer = match parse(&line) {
        Err(e) => AskAnswer::error(e),
        Ok(request) => match askers.inbox(&request.capability) {
            None => AskAnswer::error(format!("{CAPABILITY_ENV}: not a run of this relay that is still running")),
            Some(inbox) => {
                let (reply, answered) = oneshot::channel();
                if inbox.try_send(Asked { request, reply }).is_err() {
                    AskAnswer::error(format!("at most {MAX_WAITING_PER_RUN} asks of one run wait at once"))
                } else {
                    let mut rest = [0u8; 1];
                    tokio::select! {
                        a = answered => a.unwrap_or_else(|_| AskAnswer::error("the run ended before the task did")),
                        // The Graph hung up (or sent more than one request): stop waiting.
                        _ = reader.read(&mut rest) => return Ok(()),
                    }
                }
            }
        },
    };
    let mut out = serde_json::to_vec(&answer).unwrap_or_default();
    out.push(b'\n');
    write.write_all(&out).await?;
    write.shutdown().await
}

fn parse(line: &[u8]) -> Result<AskRequest, String> {
    if line.len() > MAX_REQUEST_BYTES {
        return Err(format!("request: at most {MAX_REQUEST_BYTES} bytes on one line"));
    }
    serde_json::from_slice(line).map_err(|e| format!("request: not an ask ({e})"))
}

/// The asks of runs in flight, on disk: `asks/<command>.<sha256(key)>.json`, written before the
/// request is sent and removed once the Graph has its answer.
#[derive(Debug, Serialize, Deserialize)]
struct Journaled {
    command_id: CommandId,
    request: DispatchRequest,
    /// Set once the server answered.
    #[serde(default)]
    task_id: Option<String>,
}

fn journal_path(root: &Path, command: CommandId, key: &str) -> PathBuf {
    let digest = domain::runs::sha256_hex(key.as_bytes());
    root.join(JOURNAL_DIR).join(format!("{command}.{}.json", &digest[..32]))
}

fn journal(path: &Path, entry: &Journaled) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        private_files::create_dir_all(dir)?;
    }
    private_files::write(path, &serde_json::to_vec(entry).unwrap_or_default())
}

/// Drops the asks journaled by runs a previous relay process left (their runs are reported
/// `relay restarted during run`, and the server cancels their open tasks): how many.
pub fn forget_stale(root: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(root.join(JOURNAL_DIR)) else { return 0 };
    entries.flatten().filter(|e| std::fs::remove_file(e.path()).is_ok()).count()
}

/// The environment a run's Graph gets to ask through this relay.
pub(crate) fn environment(root: &Path, capability: &str) -> Vec<(String, String)> {
    let mut env = vec![
        (SOCKET_ENV.to_owned(), root.join(SOCKET_FILE).display().to_string()),
        (CAPABILITY_ENV.to_owned(), capability.to_owned()),
    ];
    if let Ok(exe) = std::env::current_exe() {
        env.push((RELAY_ENV.to_owned(), exe.display().to_string()));
    }
    env
}

/// Runs `run` while answering its Graph's asks; the run's output.
pub(crate) async fn while_answering<S: RelayServer, F: Future>(
    asker: &Asker<'_, S>,
    mut inbox: mpsc::Receiver<Asked>,
    run: F,
) -> F::Output {
    use futures_util::StreamExt;
    tokio::pin!(run);
    let mut waiting = futures_util::stream::FuturesUnordered::new();
    loop {
        tokio::select! {
            out = &mut run => return out,
            Some(asked) = inbox.recv() => waiting.push(asker.answer(asked)),
            Some(()) = waiting.next(), if !waiting.is_empty() => {}
        }
    }
}

/// What answering one run's asks needs.
pub(crate) struct Asker<'a, S> {
    /// The server (the device token).
    pub client: &'a S,
    /// The doorbell's `task` rings.
    pub bell: &'a crate::server::doorbell::Doorbell,
    /// The state folder (the journal).
    pub root: &'a Path,
    /// The run asking.
    pub command: CommandId,
    /// The safety poll while waiting.
    pub poll: Duration,
    /// The run's progress: a wait says so there (`get_graph_run`'s and the panel's progress).
    pub live: &'a crate::run::live::Live,
}

impl<S: RelayServer> Asker<'_, S> {
    async fn answer(&self, asked: Asked) {
        let Asked { request, mut reply } = asked;
        tokio::select! {
            answer = self.ask(request) => { let _ = reply.send(answer); }
            // The Graph hung up: its wait ends (the task stays; asking again picks it up).
            () = reply.closed() => {}
        }
    }

    async fn ask(&self, r: AskRequest) -> AskAnswer {
        let request = DispatchRequest {
            command_id: self.command.to_string(),
            chat_link_id: r.chat_link_id,
            objective: r.objective,
            idempotency_key: r.key.clone(),
            expires_in_s: r.expires_in_s,
        };
        if let Err(e) = domain::ids::IdempotencyKey::parse(&r.key) {
            return AskAnswer::error(format!("key: {}", e.rule));
        }
        let path = journal_path(self.root, self.command, &r.key);
        let mut entry = Journaled { command_id: self.command, request, task_id: None };
        if let Err(e) = journal(&path, &entry) {
            return AskAnswer::error(format!("the relay cannot journal the ask ({e}); nothing was sent"));
        }
        let sent = self.send(&entry.request).await;
        let task = match sent {
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return AskAnswer::error(e);
            }
            Ok(task) => task,
        };
        entry.task_id = Some(task.task_id.clone());
        if let Err(e) = journal(&path, &entry) {
            tracing::warn!(error = %e, "the ask's journal entry cannot be updated");
        }
        let answer = if r.wait && !task.ended() {
            // What the run is doing now, for the chat that queued it and the owner.
            let preview = domain::limits::cut_chars(&entry.request.objective, 120);
            self.live.progress(&format!("waiting for a chat's answer (task {}): {preview}", task.task_id), None);
            let answer = self.wait(task).await;
            if let Some(t) = &answer.task {
                self.live.progress(&format!("the chat's task {} ended: {}", t.task_id, t.status.as_str()), None);
            }
            answer
        } else {
            AskAnswer { task: Some(task), error: None }
        };
        let _ = std::fs::remove_file(&path);
        answer
    }

    /// Sends the dispatch until the server answers (network failures are retried with the
    /// same key: the server replays); a refusal is the Graph's error.
    async fn send(&self, request: &DispatchRequest) -> Result<DispatchedTask, String> {
        let mut delay = Duration::from_millis(500);
        loop {
            match self.client.dispatch(request).await {
                Ok(answer) => return Ok(answer.task),
                Err(ClientError::Refused { body, .. }) => return Err(refusal(&body)),
                Err(ClientError::Retryable(e)) => {
                    tracing::warn!(command = %self.command, error = %e, "handing a task to a chat failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// Waits for `task` to end: reads it again at its ring, else every poll interval.
    async fn wait(&self, task: DispatchedTask) -> AskAnswer {
        let mut rings = self.bell.task_rings();
        let id = task.task_id.clone();
        loop {
            match self.client.read_dispatched(&task.chat_link_id, &id).await {
                Ok(now) if now.ended() => return AskAnswer { task: Some(now), error: None },
                Ok(_) => {}
                Err(ClientError::Refused { body, .. }) => return AskAnswer::error(refusal(&body)),
                Err(ClientError::Retryable(e)) => {
                    tracing::debug!(task = %id, error = %e, "reading a task handed to a chat failed; retrying");
                }
            }
            let poll = tokio::time::sleep(self.poll);
            tokio::pin!(poll);
            loop {
                tokio::select! {
                    () = &mut poll => break,
                    ring = rings.recv() => match ring {
                        Ok(t) if t.to_string() == id => break,
                        // Rings were missed: one may have been ours.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                            (&mut poll).await;
                            break;
                        }
                        Ok(_) => {}
                    },
                }
            }
        }
    }
}

/// The server's error text from a refusal's body (`{"error": …}`), or the body.
fn refusal(body: &str) -> String {
    serde_json::from_str::<domain::relay::ErrorResponse>(body).map(|e| e.error).unwrap_or_else(|_| body.to_owned())
}
