//! Runs one Graph: the session's command gets the run's arguments as JSON on stdin and prints
//! its result on stdout. It runs in its own process group, so a cancel stops everything it
//! started: SIGTERM to the group, then SIGKILL after a grace period.
//!
//! stdout may be plain text (the result) or a JSON object
//! `{"result": …, "total_tokens": n, "reported_cost": x}`. A non-zero exit is a failure whose
//! error is the end of stderr.

use std::future::Future;
use std::process::Stdio;
use std::time::Duration;

use domain::runs::FinalStatus;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
}

impl Outcome {
    fn failed(error: String) -> Self {
        Self { status: FinalStatus::Failed, result: None, error: Some(error), total_tokens: None, reported_cost: None }
    }
}

/// Most bytes of stderr kept for the error message (the completion cuts it to 2,000 characters).
const STDERR_TAIL: usize = 16 * 1024;

/// Runs `command` with `arguments` on stdin until it exits or `cancel` resolves.
pub async fn run(
    command: &[String],
    arguments: &serde_json::Value,
    cancel: impl Future<Output = ()>,
    grace: Duration,
) -> Outcome {
    let Some((program, args)) = command.split_first() else {
        return Outcome::failed("the session has no command configured".into());
    };
    let mut child = match tokio::process::Command::new(program)
        .args(args)
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
    let input = serde_json::to_vec(arguments).unwrap_or_default();
    if let Some(mut stdin) = child.stdin.take() {
        tokio::spawn(async move {
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
    }
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out_task = tokio::spawn(async move {
        let mut buf = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_end(&mut buf).await;
        }
        buf
    });
    let err_task = tokio::spawn(async move {
        let mut buf = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_end(&mut buf).await;
        }
        buf
    });
    tokio::pin!(cancel);
    let status = tokio::select! {
        s = child.wait() => s,
        () = &mut cancel => {
            stop_group(pid, &mut child, grace).await;
            return Outcome {
                status: FinalStatus::Cancelled,
                result: None,
                error: Some("cancelled on request; the process was stopped".into()),
                total_tokens: None,
                reported_cost: None,
            };
        }
    };
    let out = out_task.await.unwrap_or_default();
    let err = err_task.await.unwrap_or_default();
    match status {
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

async fn stop_group(pid: Option<u32>, child: &mut tokio::process::Child, grace: Duration) {
    let group = pid.and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw);
    if let Some(g) = group {
        let _ = killpg(g, Signal::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        if let Some(g) = group {
            let _ = killpg(g, Signal::SIGKILL);
        }
        let _ = child.kill().await;
    }
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
        };
    }
    Outcome { status: FinalStatus::Completed, result: Some(text), error: None, total_tokens: None, reported_cost: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
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
            &["/nonexistent/graph".to_owned()],
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
}
