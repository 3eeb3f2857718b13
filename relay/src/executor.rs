//! Runs one Graph: the session's command gets the run's arguments as JSON on stdin and prints
//! its result on stdout. It runs in its own process group, so a cancel stops everything it
//! started: SIGTERM to the group, then SIGKILL after a grace period.
//!
//! stdout may be plain text (the result) or a JSON object
//! `{"result": …, "total_tokens": n, "reported_cost": x}`. A non-zero exit is a failure whose
//! error is the end of stderr.
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
async fn read_bounded<R: tokio::io::AsyncRead + Unpin>(
    mut from: R,
    into: Arc<Mutex<Vec<u8>>>,
    keep: usize,
    tail: bool,
) -> bool {
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
                    if tail {
                        let cut = buf.len() - keep;
                        buf.drain(..cut);
                    } else {
                        buf.truncate(keep);
                    }
                }
            }
        }
    }
}

/// Most bytes of stderr kept for the error message (the completion cuts it to 2,000 characters).
const STDERR_TAIL: usize = 16 * 1024;

/// What a session runs: the program and its arguments, the environment it adds, and where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launch {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Variables set for the graph on top of the relay's own environment (a session's `env`).
    pub env: std::collections::BTreeMap<String, String>,
    /// The graph's working directory; the relay's own when `None`.
    pub working_dir: Option<std::path::PathBuf>,
}

impl From<Vec<String>> for Launch {
    fn from(command: Vec<String>) -> Self {
        Self { command, ..Self::default() }
    }
}

/// How the relay runs a graph. [`Processes`] is the product; the simulation substitutes runs
/// that take virtual time.
pub trait Execute: Send + Sync {
    /// Runs `launch` with `arguments` until it ends or `cancel` resolves.
    fn execute(
        &self,
        launch: &Launch,
        arguments: &serde_json::Value,
        cancel: impl Future<Output = ()> + Send,
        grace: Duration,
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
    ) -> impl Future<Output = Outcome> + Send {
        run(launch, arguments, cancel, grace)
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
    run_awake(launch, arguments, cancel, grace, CAFFEINATE).await
}

/// [`run`], holding the sleep assertion with `awake` (a stand-in for `caffeinate` in tests).
async fn run_awake(
    launch: &Launch,
    arguments: &serde_json::Value,
    cancel: impl Future<Output = ()>,
    grace: Duration,
    awake: Option<&str>,
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
        readers.spawn(read_bounded(s, Arc::clone(&out_buf), MAX_STDOUT_BYTES, false));
    }
    if let Some(s) = child.stderr.take() {
        readers.spawn(read_bounded(s, Arc::clone(&err_buf), STDERR_TAIL, true));
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
            readers.abort_all();
            let stopping = GroupGuard(guard.0.take());
            tokio::spawn(async move {
                // Moved in whole (a closure that only touched `.0` would capture the field and
                // drop the guard, killing the group, right here).
                let mut stopping = stopping;
                stop_group(pid, &mut child, grace).await;
                stopping.0 = None;
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
            let text = String::from_utf8_lossy(tail).trim().to_owned();
            Outcome::failed(format!(
                "{} ({s}){}",
                program,
                if text.is_empty() { String::new() } else { format!(": {text}") }
            ))
        }
        Err(e) => Outcome::failed(format!("waiting for {program}: {e}")),
    }
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
mod tests {
    use super::*;

    fn sh(script: &str) -> Launch {
        Launch::from(vec!["sh".into(), "-c".into(), script.into()])
    }

    /// The sleep assertion outlives the cancelled graph's leader: a child that ignores SIGTERM
    /// keeps the group alive through the grace, and the stand-in `caffeinate` (a script that
    /// records its pid and waits) must still run then, and be gone once the group was killed.
    #[tokio::test]
    async fn the_mac_stays_awake_until_a_cancelled_graph_is_gone() {
        let dir = std::env::temp_dir().join(format!("relay-awake-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("caffeinate");
        std::fs::write(&fake, format!("#!/bin/sh\necho \"$$ $*\" > {}/awake\nexec sleep 600\n", dir.display()))
            .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = dir.join("started");
        // The leader exits at SIGTERM; its child ignores it and lives until SIGKILL.
        let script = format!("sh -c 'trap \"\" TERM; touch {}; sleep 600' & wait", started.display());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let grace = Duration::from_secs(3);
        let launch = sh(&script);
        let run = tokio::spawn(async move {
            run_awake(
                &launch,
                &serde_json::json!({}),
                async { rx.await.unwrap_or(()) },
                grace,
                Some(fake.to_str().unwrap()),
            )
            .await
        });
        let alive = |pid: i32| nix::sys::signal::kill(Pid::from_raw(pid), None).is_ok();
        let pid = loop {
            if started.exists()
                && let Some(line) = std::fs::read_to_string(dir.join("awake")).ok().filter(|l| l.ends_with('\n'))
            {
                assert!(line.contains(&format!("-i -w {}", std::process::id())), "it watches the relay: {line}");
                break line.split_whitespace().next().unwrap().parse::<i32>().unwrap();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        tx.send(()).unwrap();
        let cancelled = std::time::Instant::now();
        assert_eq!(run.await.unwrap().status, FinalStatus::Cancelled);
        // Reported cancelled at once; the group is in its grace, and the Mac is held awake.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(cancelled.elapsed() < grace, "the check must fall inside the grace");
        assert!(alive(pid), "caffeinate ended while the cancelled graph was still stopping");
        let gone = std::time::Instant::now();
        while alive(pid) && gone.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!alive(pid), "caffeinate outlived the graph's group");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn passes_arguments_on_stdin_and_reads_the_result() {
        let o = run(&sh("cat"), &serde_json::json!({"a": 1}), std::future::pending(), Duration::from_secs(1)).await;
        assert_eq!(o.result.as_deref(), Some(r#"{"a":1}"#));
        let o = run(
            &sh(r#"echo '{"result":"hi","total_tokens":12,"reported_cost":0.5}'"#),
            &serde_json::json!({}),
            std::future::pending(),
            Duration::from_secs(1),
        )
        .await;
        assert_eq!((o.result.as_deref(), o.total_tokens, o.reported_cost), (Some("hi"), Some(12), Some(0.5)));
    }

    #[tokio::test]
    async fn a_failing_command_reports_its_stderr() {
        let o =
            run(&sh("echo boom >&2; exit 3"), &serde_json::json!({}), std::future::pending(), Duration::from_secs(1))
                .await;
        assert_eq!(o.status, FinalStatus::Failed);
        assert!(o.error.as_deref().unwrap().ends_with(": boom"), "{o:?}");
        let o = run(
            &Launch::from(vec!["/nonexistent/graph".to_owned()]),
            &serde_json::json!({}),
            std::future::pending(),
            Duration::from_secs(1),
        )
        .await;
        assert!(o.error.as_deref().unwrap().starts_with("cannot start"));
    }

    /// Whether `pid` is a live process (a zombie waiting to be reaped counts as dead).
    fn alive(pid: i32) -> bool {
        if nix::sys::signal::kill(Pid::from_raw(pid), None).is_err() {
            return false;
        }
        let stat = std::process::Command::new("ps").args(["-o", "stat=", "-p", &pid.to_string()]).output();
        stat.map(|o| !String::from_utf8_lossy(&o.stdout).trim_start().starts_with('Z')).unwrap_or(true)
    }

    /// Waits (with a deadline) until `path` holds a pid.
    async fn pid_in(path: &std::path::Path) -> i32 {
        for _ in 0..500 {
            if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok()) {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no pid written to {}", path.display());
    }

    #[tokio::test]
    async fn cancel_stops_the_whole_process_group() {
        let dir = std::env::temp_dir().join(format!("relay-group-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let (child, grandchild) = (dir.join("child.pid"), dir.join("grandchild.pid"));
        // The child starts a grandchild in the background; both record their pids and sleep.
        let script =
            format!("sh -c 'echo $$ > {}; exec sleep 30' & echo $$ > {}; wait", grandchild.display(), child.display());
        // Cancel once both are up (not after a guessed delay).
        let (c, g) = (child.clone(), grandchild.clone());
        let cancel = async move {
            pid_in(&c).await;
            pid_in(&g).await;
        };
        let o = run(&sh(&script), &serde_json::json!({}), cancel, Duration::from_secs(1)).await;
        assert_eq!(o.status, FinalStatus::Cancelled);
        for pid in [pid_in(&child).await, pid_in(&grandchild).await] {
            // Signals are delivered asynchronously: wait for the condition, with a deadline.
            let mut tries = 0;
            while alive(pid) && tries < 500 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                tries += 1;
            }
            assert!(!alive(pid), "process {pid} survived the cancel");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_background_child_holding_stdout_does_not_hang_the_run() {
        let dir = std::env::temp_dir().join(format!("relay-bg-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let bg = dir.join("bg.pid");
        // The graph prints its result and exits, leaving a child that keeps stdout open.
        let script = format!("sh -c 'echo $$ > {}; exec sleep 300' & echo done", bg.display());
        let o = tokio::time::timeout(
            Duration::from_secs(60),
            run(&sh(&script), &serde_json::json!({}), std::future::pending(), Duration::from_secs(1)),
        )
        .await
        .expect("the run hung on a background child's open stdout");
        assert_eq!((o.status, o.result.as_deref()), (FinalStatus::Completed, Some("done")));
        let pid = pid_in(&bg).await;
        let mut tries = 0;
        while alive(pid) && tries < 500 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tries += 1;
        }
        assert!(!alive(pid), "the background child outlived the run");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn stdout_is_bounded_and_an_oversized_result_is_reported_truncated() {
        let o = run(
            &sh("head -c 5000000 /dev/zero | tr '\\0' a"),
            &serde_json::json!({}),
            std::future::pending(),
            Duration::from_secs(1),
        )
        .await;
        assert_eq!(o.status, FinalStatus::Completed);
        assert!(o.truncated && o.result.is_none(), "{:?}", (o.truncated, o.result.as_ref().map(String::len)));
    }

    #[tokio::test]
    async fn cancel_kills_children_that_ignore_sigterm_even_when_the_leader_obeys() {
        let dir = std::env::temp_dir().join(format!("relay-term-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let (child, grandchild) = (dir.join("child.pid"), dir.join("grandchild.pid"));
        // The grandchild ignores SIGTERM; the leader exits on it.
        let script = format!(
            "sh -c 'trap \"\" TERM; echo $$ > {}; while :; do sleep 1; done' & echo $$ > {}; wait",
            grandchild.display(),
            child.display()
        );
        let (c, g) = (child.clone(), grandchild.clone());
        let cancel = async move {
            pid_in(&c).await;
            pid_in(&g).await;
        };
        let o = run(&sh(&script), &serde_json::json!({}), cancel, Duration::from_millis(500)).await;
        assert_eq!(o.status, FinalStatus::Cancelled);
        let pid = pid_in(&grandchild).await;
        let mut tries = 0;
        while alive(pid) && tries < 500 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tries += 1;
        }
        assert!(!alive(pid), "a child that ignored SIGTERM survived the cancel");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The relay stopping mid-run (its pass dropped, as on SIGTERM) takes the graph's whole
    /// process group with it, not only the leader.
    #[tokio::test]
    async fn a_run_dropped_while_the_graph_runs_kills_its_whole_group() {
        let pidfile = std::env::temp_dir().join(format!("relay-drop-{}", uuid::Uuid::new_v4()));
        let script = format!("sleep 60 & echo $! > {}; sleep 60", pidfile.display());
        let launch = sh(&script);
        let args = serde_json::json!({});
        let running = run(&launch, &args, std::future::pending(), Duration::from_secs(1));
        // Let it start, then drop it.
        let _ = tokio::time::timeout(Duration::from_millis(500), running).await;
        let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        for _ in 0..50 {
            if !alive(pid) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive(pid), "the graph's child outlived the relay's run");
        let _ = std::fs::remove_file(pidfile);
    }

    /// A session's `env` and `working_dir` reach the graph.
    #[tokio::test]
    async fn a_session_sets_the_graphs_environment_and_folder() {
        let dir = std::env::temp_dir();
        let mut launch = sh("printf '%s %s' \"$GRAPH_MODE\" \"$(pwd)\"");
        launch.env.insert("GRAPH_MODE".into(), "weekly".into());
        launch.working_dir = Some(dir.clone());
        let o = run(&launch, &serde_json::json!({}), std::future::pending(), Duration::from_secs(1)).await;
        let want = format!("weekly {}", std::fs::canonicalize(&dir).unwrap().display());
        assert_eq!(o.result.as_deref(), Some(want.as_str()), "{o:?}");
    }
}
