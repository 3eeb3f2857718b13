//! `relay task ask`: the Graph's side of [`crate::run::ask`]. It reads the run's socket and
//! capability from the environment, sends one ask, and prints the answer as one JSON line.
//!
//! A connection that breaks before the answer (the relay restarting) is tried again with the
//! same key for up to [`RECONNECT_FOR`]: the server returns the same task, never a second one.

use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::cli::args::Ask;
use crate::run::ask::{AskAnswer, AskRequest, CAPABILITY_ENV, SOCKET_ENV};

/// How long a broken connection to the relay is retried.
pub const RECONNECT_FOR: Duration = Duration::from_secs(600);
/// Exit code: the task ended otherwise than completed.
pub const ENDED_OTHERWISE: u8 = 3;
/// Exit code: refused (bad input, no such link, not run by a relay).
pub const REFUSED: u8 = 2;

/// Runs `relay task ask`: prints the answer, returns the exit code.
pub async fn ask(a: &Ask) -> ExitCode {
    let answer = match request(a).await {
        Ok(r) => send(&r).await,
        Err(e) => AskAnswer { task: None, error: Some(e) },
    };
    println!("{}", serde_json::to_string(&answer).unwrap_or_default());
    if answer.task.is_none() {
        eprintln!("relay task ask: {}", answer.error.as_deref().unwrap_or("no answer"));
    }
    ExitCode::from(exit_code(&answer))
}

/// The exit code of an answer: 0 for a completed task (or one still open, `--no-wait`),
/// [`ENDED_OTHERWISE`] for a task that ended otherwise, [`REFUSED`] without a task.
pub fn exit_code(answer: &AskAnswer) -> u8 {
    match &answer.task {
        Some(t) if t.status == domain::tasks::TaskStatus::Completed => 0,
        Some(t) if t.ended() => ENDED_OTHERWISE,
        Some(_) => 0,
        None => REFUSED,
    }
}

async fn request(a: &Ask) -> Result<AskRequest, String> {
    let capability = std::env::var(CAPABILITY_ENV)
        .map_err(|_| format!("{CAPABILITY_ENV} is not set: `relay task ask` works inside a Graph the relay runs"))?;
    let objective = if a.objective == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| format!("objective: stdin ({e})"))?;
        text
    } else {
        a.objective.clone()
    };
    let expires_in_s = a
        .expires_in
        .as_deref()
        .map(|d| {
            crate::cli::parse_duration(d)
                .map_err(|_| format!("--expires-in {d}: a whole number and a unit s, m, h or d (e.g. 10m)"))
        })
        .transpose()?;
    Ok(AskRequest {
        capability,
        chat_link_id: a.chat_link_id.clone(),
        objective,
        key: a.key.clone(),
        expires_in_s,
        wait: !a.no_wait,
    })
}

/// Sends `r` to the relay's socket and reads the answer, reconnecting while the relay is away.
async fn send(r: &AskRequest) -> AskAnswer {
    let Ok(path) = std::env::var(SOCKET_ENV) else {
        return AskAnswer { task: None, error: Some(format!("{SOCKET_ENV} is not set")) };
    };
    send_to(&path, r).await
}

/// [`send`] to the socket at `path`.
async fn send_to(path: &str, r: &AskRequest) -> AskAnswer {
    let mut line = serde_json::to_vec(r).unwrap_or_default();
    line.push(b'\n');
    let give_up = tokio::time::Instant::now() + RECONNECT_FOR;
    loop {
        match once(path, &line).await {
            Ok(answer) => return answer,
            Err(e) if tokio::time::Instant::now() >= give_up => {
                return AskAnswer { task: None, error: Some(format!("the relay cannot be reached at {path}: {e}")) };
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(2)).await,
        }
    }
}

async fn once(path: &str, line: &[u8]) -> std::io::Result<AskAnswer> {
    let mut stream = tokio::net::UnixStream::connect(path).await?;
    stream.write_all(line).await?;
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    if reader.read_line(&mut answer).await? == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the relay closed the connection"));
    }
    serde_json::from_str(&answer).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::dispatch::DispatchedTask;
    use domain::tasks::TaskStatus;

    fn request() -> AskRequest {
        AskRequest {
            capability: "c".repeat(64),
            chat_link_id: "0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b".into(),
            objective: "Review the draft".into(),
            key: "review-0001".into(),
            expires_in_s: None,
            wait: true,
        }
    }

    /// A relay that cannot be reached — no socket at the path, or a socket nobody listens on
    /// (the relay stopped) — is tried again every 2 s for ten minutes (the tokio clock is
    /// paused: the minutes pass at once), then the ask is refused saying where it looked.
    #[tokio::test(start_paused = true)]
    async fn an_unreachable_relay_is_tried_for_ten_minutes_then_refused() {
        let dir = std::env::temp_dir().join(format!("relay-ask-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("relay.sock");
        let closed = dir.join("closed.sock");
        drop(std::os::unix::net::UnixListener::bind(&closed).unwrap());
        for (path, why) in [(&missing, "No such file or directory"), (&closed, "Connection refused")] {
            let path = path.display().to_string();
            let began = tokio::time::Instant::now();
            let answer = send_to(&path, &request()).await;
            let waited = began.elapsed();
            let error = answer.error.clone().unwrap_or_default();
            assert!(error.starts_with(&format!("the relay cannot be reached at {path}: {why}")), "{error}");
            assert!(answer.task.is_none() && exit_code(&answer) == REFUSED);
            assert!((RECONNECT_FOR..RECONNECT_FOR + Duration::from_secs(3)).contains(&waited), "{waited:?}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The exit code says how the ask ended: 0 completed (or, with `--no-wait`, still open),
    /// 3 failed, cancelled or expired, 2 refused.
    #[test]
    fn the_exit_code_says_how_the_ask_ended() {
        let task = |status| AskAnswer {
            task: Some(DispatchedTask {
                task_id: "t".into(),
                chat_link_id: "l".into(),
                status,
                result: None,
                expires_at: "2026-11-30T00:30:00.000Z".into(),
                finished_at: None,
            }),
            error: None,
        };
        for (status, code) in [
            (TaskStatus::Completed, 0),
            (TaskStatus::Queued, 0),
            (TaskStatus::Claimed, 0),
            (TaskStatus::Failed, ENDED_OTHERWISE),
            (TaskStatus::Cancelled, ENDED_OTHERWISE),
            (TaskStatus::Expired, ENDED_OTHERWISE),
        ] {
            assert_eq!(exit_code(&task(status)), code, "{status:?}");
        }
        assert_eq!(exit_code(&AskAnswer { task: None, error: Some("refused".into()) }), REFUSED);
        assert_eq!((REFUSED, ENDED_OTHERWISE), (2, 3));
    }
}
