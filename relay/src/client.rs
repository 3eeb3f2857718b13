//! The relay's HTTP client for the relay API (outbound HTTPS only; no listening port).

use std::time::Duration;

use serde::Deserialize;
use shared::ids::{CommandId, GraphSessionId, ProjectId};
use shared::runs::{Completion, SessionMeta};

/// A queued command as `sync` returns it.
#[derive(Debug, Clone, Deserialize)]
pub struct Command {
    /// The ticket.
    pub command_id: CommandId,
    /// The session to run.
    pub graph_session_id: GraphSessionId,
    /// The session's slug when the run was queued.
    pub slug: String,
    /// The run's arguments.
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// What `sync` answered.
#[derive(Debug, Clone)]
pub enum Synced {
    /// The project's queued commands, oldest first, and the server's poll interval.
    Commands {
        /// Queued commands.
        commands: Vec<Command>,
        /// Seconds between polls.
        poll_interval: Duration,
    },
    /// The owner disabled the project for connected agents.
    Disabled,
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Network trouble or a 5xx: retry later with backoff.
    #[error("server unreachable or failing: {0}")]
    Retryable(String),
    /// The server refused for good (4xx other than the documented conflicts).
    #[error("server refused: {status} {body}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// Response body.
        body: String,
    },
}

/// What `start` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// Running now (or already, with this execution id).
    Running,
    /// Not startable (e.g. cancelled meanwhile): the relay must not run it.
    Refused(String),
}

/// What `complete` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completed {
    /// Recorded (or replayed) with this status.
    Recorded(String),
    /// The server has it ended otherwise (409): final, drop from the outbox.
    Conflict(String),
}

/// The relay API client.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

#[derive(Deserialize)]
struct SyncResponse {
    commands: Vec<Command>,
    poll_interval_s: u64,
}

#[derive(Deserialize)]
struct StatusBody {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    cancel_requested: bool,
}

impl Client {
    /// A client for `server_url` with `token`.
    ///
    /// # Errors
    /// When the TLS stack cannot start.
    pub fn new(server_url: &str, token: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).connect_timeout(Duration::from_secs(10)).build()?;
        Ok(Self { http, base: format!("{server_url}{}", shared::relay_api::PREFIX), token: token.to_owned() })
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<(u16, String), ClientError> {
        let res = req.bearer_auth(&self.token).send().await.map_err(|e| ClientError::Retryable(e.to_string()))?;
        let status = res.status().as_u16();
        let body = res.text().await.map_err(|e| ClientError::Retryable(e.to_string()))?;
        if status >= 500 || status == 429 {
            return Err(ClientError::Retryable(format!("{status} {body}")));
        }
        // A rejected device token is the owner's to fix (a new token in the config); until
        // then keep every completion in the outbox and back off, never drop one.
        if status == 401 || status == 403 {
            return Err(ClientError::Retryable(format!("device token rejected ({status}): {body}")));
        }
        Ok((status, body))
    }

    fn refused(status: u16, body: String) -> ClientError {
        ClientError::Refused { status, body }
    }

    /// `POST /sync`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn sync(&self, project: ProjectId, sessions: &[SessionMeta]) -> Result<Synced, ClientError> {
        let body = serde_json::json!({"project_id": project.to_string(), "sessions": sessions});
        let (status, text) = self.send(self.http.post(format!("{}/sync", self.base)).json(&body)).await?;
        match status {
            200 => {
                let r: SyncResponse = serde_json::from_str(&text).map_err(|e| ClientError::Retryable(e.to_string()))?;
                Ok(Synced::Commands { commands: r.commands, poll_interval: Duration::from_secs(r.poll_interval_s.max(1)) })
            }
            409 => Ok(Synced::Disabled),
            _ => Err(Self::refused(status, text)),
        }
    }

    /// `POST /commands/{id}/start`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn start(&self, id: CommandId, execution_id: &str) -> Result<Started, ClientError> {
        let url = format!("{}/commands/{id}/start", self.base);
        let (status, text) = self.send(self.http.post(url).json(&serde_json::json!({"execution_id": execution_id}))).await?;
        match status {
            200 => Ok(Started::Running),
            409 | 404 => {
                let s: StatusBody = serde_json::from_str(&text).unwrap_or(StatusBody { status: None, cancel_requested: false });
                Ok(Started::Refused(s.status.unwrap_or_else(|| "missing".into())))
            }
            _ => Err(Self::refused(status, text)),
        }
    }

    /// `GET /commands/{id}/control`: whether to stop.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn control(&self, id: CommandId) -> Result<bool, ClientError> {
        let (status, text) = self.send(self.http.get(format!("{}/commands/{id}/control", self.base))).await?;
        match status {
            200 => Ok(serde_json::from_str::<StatusBody>(&text).map(|s| s.cancel_requested).unwrap_or(false)),
            404 => Ok(true),
            _ => Err(Self::refused(status, text)),
        }
    }

    /// `POST /commands/{id}/complete`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn complete(&self, id: CommandId, completion: &Completion) -> Result<Completed, ClientError> {
        let url = format!("{}/commands/{id}/complete", self.base);
        let (status, text) = self.send(self.http.post(url).json(completion)).await?;
        let s: StatusBody = serde_json::from_str(&text).unwrap_or(StatusBody { status: None, cancel_requested: false });
        match status {
            200 => Ok(Completed::Recorded(s.status.unwrap_or_default())),
            409 | 404 => Ok(Completed::Conflict(s.status.unwrap_or_else(|| "missing".into()))),
            _ => Err(Self::refused(status, text)),
        }
    }
}
