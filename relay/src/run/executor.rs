//! Runs one Graph: the session's command gets the run's arguments as JSON on stdin and prints
//! its result on stdout. It runs in its own process group, so a cancel stops everything it
//! started: SIGTERM to the group, then SIGKILL after a grace period.
//!
//! stdout may be plain text (the result) or a JSON object
//! `{"result": …, "total_tokens": n, "reported_cost": x}`. A non-zero exit is a failure whose
//! error is the end of stderr (what fits in an error's 2,000 characters). The whole contract,
//! for an owner writing a Graph: docs/graph.md.
//!
//! Bounded in memory and in time: at most [`MAX_STDOUT_BYTES`] of stdout are kept (the rest is
//! read and dropped, so the graph never blocks on a full pipe, and the result is reported
//! truncated); once the main process exits, its output readers get [`DRAIN`] to see the end,
//! then the whole process group is killed (a background child holding stdout open must not hang
//! the relay). A cancel sends SIGTERM to the group and, after the grace period, SIGKILL to the
//! group — always, even when the leader already exited.

use std::future::Future;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::runs::FinalStatus;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Most stdout bytes kept: a 100,000-character result is at most 400,000 UTF-8 bytes, twice
/// that leaves room for a JSON envelope with escapes.
pub const MAX_STDOUT_BYTES: usize = 800_000;
/// How long output readers may take to reach the end once the main process exited.
pub const DRAIN: Duration = Duration::from_secs(2);

/// How a run ended, before bounding.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// completed, failed or cancelled.
    pub status: FinalStatus,
    /// The output.
    pub result: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// Reported tokens.
    pub total_tokens: Option<u64>,
    /// Reported cost.
    pub reported_cost: Option<f64>,
    /// stdout went past [`MAX_STDOUT_BYTES`]: the result is not sent.
    pub truncated: bool,
}

impl Outcome {
    fn failed(error: String) -> Self {
        Self {
            status: FinalStatus::Failed,
            result: None,
            error: Some(error),
            total_tokens: None,
            reported_cost: None,
            truncated: false,
        }
    }
}

/// Reads `from` to its end, keeping at most `keep` bytes in `into` (the rest is read and
/// dropped); returns whether anything was dropped. The buffer is shared, so what was read so
/// far survives if the reader is abandoned.
async fn read_bounded<R: tokio::io::AsyncRead + Unpin>(mut from: R, into: Arc<Mutex<Vec<u8>>>, keep: usize) -> bool {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut dropped = false;
    loop {
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return dropped,
            Ok(n) => {
                let mut buf = into.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > keep {
                    dropped = true;
                    buf.truncate(keep);
                }
            }
        }
    }
}

/// Most bytes of stderr kept for the error message (of which [`failure`] keeps the end).
const STDERR_TAIL: usize = 16 * 1024;
/// Longest stderr line read as one line; a longer one is taken in pieces of this size.
const MAX_LINE_BYTES: usize = 8 * 1024;

/// Reads a Graph's stderr line by line: progress lines (`domain::progress::parse_line`) go to
/// `live` only; every other line is its log, kept in `live`'s tail and at the end of `into`
/// (at most `keep` bytes: a failed run's error).
async fn read_stderr<R: tokio::io::AsyncRead + Unpin>(
    mut from: R,
    into: Arc<Mutex<Vec<u8>>>,
    keep: usize,
    live: Arc<crate::run::live::Live>,
) -> bool {
    let mut chunk = vec![0u8; 16 * 1024];
    let mut line: Vec<u8> = Vec::new();
    let take = |line: &[u8]| {
        let text = String::from_utf8_lossy(line);
        if let Some((message, fraction)) = domain::progress::parse_line(&text) {
            live.progress(&message, fraction);
            return;
        }
        live.log(&text);
        let mut buf = into.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        buf.extend_from_slice(line);
        buf.push(b'\n');
        if buf.len() > keep {
            let cut = buf.len() - keep;
            buf.drain(..cut);
        }
    };
    loop {
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                if !line.is_empty() {
                    take(&line);
                }
                return false;
            }
            Ok(n) => {
                for &byte in &chunk[..n] {
                    if byte == b'\n' {
                        take(&line);
                        line.clear();
                    } else {
                        line.push(byte);
                        if line.len() == MAX_LINE_BYTES {
                            take(&line);
                            line.clear();
                        }
                    }
                }
            }
        }
    }
}

pub use crate::config::Launch;

/// How the relay runs a graph. [`Processes`] is the product; the simulation substitutes runs
/// that take virtual time.
pub trait Execute: Send + Sync {
    /// Runs `launch` with `arguments` until it ends or `cancel` resolves; what the Graph says
    /// of itself meanwhile goes to `live`.
    fn execute(
        &self,
        launch: &Launch,
        arguments: &serde_json::Value,
        cancel: impl Future<Output = ()> + Send,
        grace: Duration,
        live: Arc<crate::run::live::Live>,
    ) -> impl Future<Output = Outcome> + Send;
}

/// Runs graphs as processes ([`run`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Processes;

impl Execute for Processes {
    fn execute(
        &self,
        launch: &Launch,
        arguments: &serde_json::Value,
        cancel: impl Future<Output = ()> + Send,
        grace: Duration,
        live: Arc<crate::run::live::Live>,
    ) -> impl Future<Output = Outcome> + Send {
        run_live(launch, arguments, cancel, grace, live)
    }
}

/// Keeps a Mac from idle-sleeping while the graph runs: `caffeinate -i -w <relay pid>` holds
/// the assertion until it is dropped (`kill_on_drop`) or the relay itself exits. A laptop that
/// slept mid-run would miss its control polls and the server would fail the run after 10
/// minutes. It watches the relay, not the graph: a cancelled graph's leader often exits at
/// SIGTERM while the rest of its group is still in its grace period, and the Mac must stay
/// awake until the group is gone, so the holder is dropped only when the stop is over.
/// Elsewhere nothing (Linux desktops rarely idle-sleep with a user session busy; a
/// `systemd-inhibit` wrapper in the session's command does it where needed).
const CAFFEINATE: Option<&str> = if cfg!(target_os = "macos") { Some("/usr/bin/caffeinate") } else { None };

fn keep_awake(program: Option<&str>) -> Option<tokio::process::Child> {
    tokio::process::Command::new(program?)
        .args(["-i", "-w", &std::process::id().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| tracing::warn!(error = %e, "cannot hold a sleep assertion (caffeinate)"))
        .ok()
}

/// The graph's process group, killed (SIGKILL) when the run is dropped while its leader runs —
/// the relay stopping (SIGTERM at logout, uninstall) drops its pass, and the graph's children
/// must not outlive it (`kill_on_drop` alone kills only the leader). Disarmed once the leader
/// was reaped, after which its id could name another group.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0, Signal::SIGKILL);
    }
}

impl Outcome {
    /// A completed run with `result` (the simulation's virtual graphs).
    pub fn completed(result: &str) -> Self {
        Self {
            status: FinalStatus::Completed,
            result: Some(result.to_owned()),
            error: None,
            total_tokens: None,
            reported_cost: None,
            truncated: false,
        }
    }

    /// A run stopped on request.
    pub fn cancelled() -> Self {
        Self {
            status: FinalStatus::Cancelled,
            result: None,
            error: Some("cancelled on request; the process was stopped".into()),
            total_tokens: None,
            reported_cost: None,
            truncated: false,
        }
    }
}

/// Runs `launch` with `arguments` on stdin until it exits or `cancel` resolves.
pub async fn run(
    launch: &Launch,
    arguments: &serde_json::Value,
    cancel: impl Future<Output = ()>,
    grace: Duration,
) -> Outcome {
    run_live(launch, arguments, cancel, grace, Arc::default()).await
}

/// [`run`], its progress and log going to `live`.
pub async fn run_live(
    launch: &Launch,
    arguments: &serde_json::Value,
    cancel: impl Future<Output = ()>,
    grace: Duration,
    live: Arc<crate::run::live::Live>,
) -> Outcome {
    run_awake(launch, arguments, cancel, grace, CAFFEINATE, live).await
}

/// [`run`], holding the sleep assertion with `awake` (a stand-in for `caffeinate` in tests).
async fn run_awake(
    launch: &Launch,
    arguments: &serde_json::Value,
    cancel: impl Future<Output = ()>,
    grace: Duration,
    awake: Option<&str>,
    live: Arc<crate::run::live::Live>,
) -> Outcome {
    let Some((program, args)) = launch.command.split_first() else {
        return Outcome::failed("the session has no command configured".into());
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).envs(&launch.env);
    if let Some(dir) = &launch.working_dir {
        cmd.current_dir(dir);
    }
    let mut child = match cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Outcome::failed(format!("cannot start {program}: {e}")),
    };
    let pid = child.id();
    // Armed only while the leader is unreaped: its pid is the group's id and cannot be reused
    // until it is reaped.
    let mut guard = GroupGuard(pid);
    let awake = keep_awake(awake);
    let input = serde_json::to_vec(arguments).unwrap_or_default();
    if let Some(mut stdin) = child.stdin.take() {
        tokio::spawn(async move {
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
    }
    let (out_buf, err_buf) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let mut readers = tokio::task::JoinSet::new();
    if let Some(s) = child.stdout.take() {
        readers.spawn(read_bounded(s, Arc::clone(&out_buf), MAX_STDOUT_BYTES));
    }
    if let Some(s) = child.stderr.take() {
        readers.spawn(read_stderr(s, Arc::clone(&err_buf), STDERR_TAIL, live));
    }
    tokio::pin!(cancel);
    let status = tokio::select! {
        s = child.wait() => s,
        () = &mut cancel => {
            // `cancelled` is reported now, not when the last member of the group is reaped
            // (a killed grandchild lingers until its parent waits for it): SIGTERM goes out
            // here, and the rest of the stop — the grace, then SIGKILL to the whole group —
            // runs on in the background, holding the guard, so a relay that exits meanwhile
            // still kills the group. The next run may start during that grace.
            kill_group(pid, Signal::SIGTERM);
            let stopping = GroupGuard(guard.0.take());
            tokio::spawn(async move {
                // Moved in whole (a closure that only touched `.0` would capture the field and
                // drop the guard, killing the group, right here).
                let mut stopping = stopping;
                // The output is still read (and dropped) while the group cleans up: a Graph
                // that logs at SIGTERM must not die of SIGPIPE on a pipe closed under it.
                let mut readers = readers;
                stop_group(pid, &mut child, grace).await;
                stopping.0 = None;
                readers.abort_all();
                // Awake until the whole group is gone.
                drop(awake);
            });
            return Outcome::cancelled();
        }
    };
    guard.0 = None;
    // The main process is gone. Its output ends when every holder of the pipes is gone too; a
    // background child that keeps them open gets DRAIN, then the group is killed.
    let mut truncated = false;
    let drained = tokio::time::timeout(DRAIN, async {
        while let Some(r) = readers.join_next().await {
            truncated |= r.unwrap_or(false);
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!("the graph exited but a process it started still holds its output; stopping its process group");
        kill_group(pid, Signal::SIGKILL);
        if tokio::time::timeout(DRAIN, async {
            while let Some(r) = readers.join_next().await {
                truncated |= r.unwrap_or(false);
            }
        })
        .await
        .is_err()
        {
            // A process that left the group (setsid) still holds the pipe: stop reading.
            readers.abort_all();
        }
    }
    let out = std::mem::take(&mut *out_buf.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    let err = std::mem::take(&mut *err_buf.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    drop(awake);
    match status {
        Ok(s) if s.success() && truncated => Outcome {
            status: FinalStatus::Completed,
            result: None,
            error: None,
            total_tokens: None,
            reported_cost: None,
            truncated: true,
        },
        Ok(s) if s.success() => parse_output(&out),
        Ok(s) => {
            let tail = &err[err.len().saturating_sub(STDERR_TAIL)..];
            Outcome::failed(failure(program, &s, &String::from_utf8_lossy(tail)))
        }
        Err(e) => Outcome::failed(format!("waiting for {program}: {e}")),
    }
}

/// A failed run's error: `<program> (<exit status or signal>): <the end of stderr>`, at most
/// [`MAX_ERROR_CHARS`](domain::limits::MAX_ERROR_CHARS) characters in all. The end is what is
/// kept (`…` marks the cut): the completion would keep an error's first characters, and a
/// Graph's reason for failing is its last words, after however much log.
fn failure(program: &str, status: &std::process::ExitStatus, stderr: &str) -> String {
    use domain::limits::{MAX_ERROR_CHARS, char_len};
    let head = format!("{program} ({status})");
    let text = stderr.trim();
    if text.is_empty() {
        return head;
    }
    // ": " and, when cut, "…".
    let room = MAX_ERROR_CHARS.saturating_sub(char_len(&head) + 3);
    let n = char_len(text);
    if n <= room + 1 {
        return format!("{head}: {text}");
    }
    let start = text.char_indices().nth(n - room).map_or(0, |(i, _)| i);
    format!("{head}: …{}", &text[start..])
}

fn kill_group(pid: Option<u32>, signal: Signal) {
    if let Some(g) = pid.and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw) {
        // ESRCH (the group is already gone) is fine.
        let _ = killpg(g, signal);
    }
}

/// SIGTERM to the group; after `grace` (or as soon as the leader exits, plus what is left of
/// `grace` for the rest of the group), SIGKILL to the group — always: children that ignored
/// SIGTERM must not outlive a cancel just because the leader obeyed it.
async fn stop_group(pid: Option<u32>, child: &mut tokio::process::Child, grace: Duration) {
    kill_group(pid, Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    // The leader is gone (or the grace is over): wait out the grace only while other members
    // of the group live, then SIGKILL whatever is left.
    while group_alive(pid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kill_group(pid, Signal::SIGKILL);
    let _ = child.kill().await;
    let _ = child.wait().await;
}

/// Whether any process of the group is left (signal 0 probes without signalling).
fn group_alive(pid: Option<u32>) -> bool {
    pid.and_then(|p| i32::try_from(p).ok()).is_some_and(|g| killpg(Pid::from_raw(g), None).is_ok())
}

/// Plain text, or `{"result", "total_tokens", "reported_cost"}`.
fn parse_output(out: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(out).trim_end().to_owned();
    if let Ok(serde_json::Value::Object(o)) = serde_json::from_str::<serde_json::Value>(&text)
        && let Some(result) = o.get("result")
    {
        return Outcome {
            status: FinalStatus::Completed,
            result: Some(match result {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
            error: None,
            total_tokens: o.get("total_tokens").and_then(serde_json::Value::as_u64),
            reported_cost: o.get("reported_cost").and_then(serde_json::Value::as_f64),
            truncated: false,
        };
    }
    Outcome {
        status: FinalStatus::Completed,
        result: Some(text),
        error: None,
        total_tokens: None,
        reported_cost: None,
        truncated: false,
    }
}

#[cfg(test)]
mod tests;
