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
    match (&answer.task, &answer.error) {
        (Some(t), _) if t.status == domain::tasks::TaskStatus::Completed => ExitCode::SUCCESS,
        (Some(t), _) if t.ended() => ExitCode::from(ENDED_OTHERWISE),
        (Some(_), _) => ExitCode::SUCCESS,
        (None, e) => {
            eprintln!("relay task ask: {}", e.as_deref().unwrap_or("no answer"));
            ExitCode::from(REFUSED)
        }
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
    let mut line = serde_json::to_vec(r).unwrap_or_default();
    line.push(b'\n');
    let give_up = tokio::time::Instant::now() + RECONNECT_FOR;
    loop {
        match once(&path, &line).await {
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
