//! The relay protocol (SPEC §4): the JSON bodies the desktop relay and the relay API exchange.
//!
//! One definition for both sides: the server (`http_api::relay_api`) deserializes the requests
//! and serializes the responses declared here, the relay (`relay::server::client`) does the opposite.
//! Both directions ignore fields they do not know: the relay reads responses leniently (an
//! older relay keeps working when the server adds a field), and the server reads requests
//! leniently (a stack rolled back under relays that already updated keeps them working: a
//! newer relay's new field is ignored, never refused; issue 60, docs/releasing.md). A field a
//! request adds is therefore never required by the server that introduces it.
//!
//! | route (under [`PREFIX`]) | request | 200 | other answers |
//! |---|---|---|---|
//! | `POST /sync` | [`SyncRequest`] | [`SyncResponse`] | 409 [`ErrorResponse`] with `enabled: false` |
//! | `POST /commands/{id}/start` | [`StartRequest`] | [`StartResponse`] | 409 [`StatusResponse`] (do not run it) |
//! | `GET /commands/{id}/control` | — | [`ControlResponse`] | 404: stop |
//! | `POST /commands/{id}/control` | [`ControlRequest`] (progress) | [`ControlResponse`] | 404: stop |
//! | `POST /commands/{id}/complete` | [`Completion`](crate::runs::Completion) | [`CompleteResponse`] | 409 [`StatusResponse`] (ended otherwise) |
//! | `POST /pairings` (no token) | [`PairRequest`] | [`PairResponse`] | 429: too many from this address |
//! | `POST /pairings/token` (no token) | [`PairTokenRequest`] | [`PairTokenResponse`] | 400 [`PairError`] (RFC 8628 §3.5) |
//!
//! Every refusal is an [`ErrorResponse`] whose `error` names the field and the rule, except a
//! pairing poll's, which are RFC 8628's codes ([`PairError`]).

use serde::{Deserialize, Serialize};

use crate::ids::{CommandId, GraphSessionId, ProjectId};
use crate::runs::{RunStatus, SessionMeta};

/// Path prefix of the relay API.
pub const PREFIX: &str = "/external-assistants/graph-relays";

/// `POST /sync`: this device's shared sessions for one project (at most 100).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SyncRequest {
    /// The project being synced.
    pub project_id: ProjectId,
    /// The sessions shared in it (the whole set: it replaces the previous one), each id once.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(length(max = crate::limits::MAX_SHARED_SESSIONS)))]
    pub sessions: Vec<SessionMeta>,
    /// How many more commands this relay can run now (`max_parallel` minus its running runs,
    /// at most [`MAX_PARALLEL`](crate::progress::MAX_PARALLEL)): the answer holds at most that
    /// many. Absent (an older relay): as many as one sync hands out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(max = crate::progress::MAX_PARALLEL)))]
    pub free_slots: Option<u32>,
}

impl SyncRequest {
    /// Checks `free_slots`.
    ///
    /// # Errors
    /// [`InputError`](crate::errors::InputError) on `free_slots`.
    pub fn validate_slots(&self) -> Result<(), crate::errors::InputError> {
        match self.free_slots {
            Some(n) if n > crate::progress::MAX_PARALLEL => Err(crate::errors::InputError::new(
                "free_slots",
                format!("must be 0 to {} (got {n})", crate::progress::MAX_PARALLEL),
            )),
            _ => Ok(()),
        }
    }
}

/// `POST /commands/{id}/control`: a control check that forwards the run's newest progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ControlRequest {
    /// The execution id the run was started under (only that execution reports on it).
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = crate::limits::MAX_EXECUTION_ID_CHARS)))]
    pub execution_id: String,
    /// The newest progress.
    pub progress: crate::progress::Progress,
}

impl ControlRequest {
    /// Checks the execution id and every bound of the progress.
    ///
    /// # Errors
    /// [`InputError`](crate::errors::InputError) naming `execution_id` or a `progress.` field.
    pub fn validate(&self) -> Result<(), crate::errors::InputError> {
        crate::limits::validate_execution_id(&self.execution_id)?;
        self.progress.validate()
    }
}

/// One queued command handed to the relay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct QueuedCommand {
    /// The ticket.
    pub command_id: CommandId,
    /// The session to run.
    pub graph_session_id: GraphSessionId,
    /// The session's slug when the run was queued (the relay re-checks it).
    pub slug: String,
    /// The run's arguments (a JSON object).
    #[serde(default)]
    pub arguments: serde_json::Value,
    /// When it was queued (RFC 3339).
    pub queued_at: String,
}

/// The answer to a sync: the project's queued commands, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SyncResponse {
    /// Queued, unexpired commands, oldest first.
    pub commands: Vec<QueuedCommand>,
    /// Seconds between polls the server asks for.
    pub poll_interval_s: u64,
    /// The server's clock (RFC 3339), for the relay's logs.
    pub server_time: String,
    /// Where the relay keeps its doorbell open (`wss://…`; [`crate::doorbell`]), when the
    /// server has one. Older servers leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doorbell_url: Option<String>,
    /// The owner paused this desktop: no commands are handed to it until the pause ends (runs
    /// queued for it stay queued). Older servers leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<PausedNotice>,
}

/// `POST /pause` (`relay pause`), and the owner API's `POST /devices/{id}/pause` (an empty body
/// there pauses until resumed): how long and why.
// Also the owner API's body (`POST /owner/devices/{id}/pause`), which refuses unknown fields
// like the rest of the owner API: kept strict (a relay sends it only on `relay pause`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    /// Seconds until it ends by itself, 1 to 2,592,000 (30 days); none: until resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 2_592_000)))]
    pub for_seconds: Option<u64>,
    /// Why (shown in the panel and to the relay), at most 200 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = crate::limits::MAX_NAME_CHARS)))]
    pub note: Option<String>,
}

/// `POST /resume` (`relay resume`): nothing to say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResumeRequest {}

/// The answer to `POST /pause` and `POST /resume`: the pause now in force, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PauseResponse {
    /// The pause (none after a resume).
    #[serde(default)]
    pub paused: Option<PausedNotice>,
}

/// Why a sync handed no commands: the owner's pause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PausedNotice {
    /// When it ends by itself (RFC 3339); none: until the owner resumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// The owner's note (may be empty).
    #[serde(default)]
    pub note: String,
}

/// `POST /commands/{id}/start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StartRequest {
    /// The relay's id for this execution; repeating it makes a lost response safe to retry.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = crate::limits::MAX_EXECUTION_ID_CHARS)))]
    pub execution_id: String,
}

/// A started command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StartResponse {
    /// `running`.
    pub status: RunStatus,
    /// The command was already running with this execution id (a retried start).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

/// The answer to a control poll (also a heartbeat).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ControlResponse {
    /// Stop the run: the agent cancelled it, or the server no longer considers it running.
    pub cancel_requested: bool,
    /// Present when the run is no longer running for the server: its status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
}

/// A recorded completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CompleteResponse {
    /// Always true.
    pub ok: bool,
    /// The identical completion had been recorded before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// The status recorded (`cancelled` when cancel was requested, whatever the relay sent).
    pub status: RunStatus,
}

/// A 409: the command is in a state that refuses the request; the status it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StatusResponse {
    /// The command's status.
    pub status: RunStatus,
}

/// Any refusal: the message names the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorResponse {
    /// What was wrong.
    pub error: String,
    /// On a sync of a project the owner disabled: `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_name_the_bad_field_and_ignore_unknown_ones() {
        let bad = r#"{"project_id":"p","sessions":[]}"#;
        let e = serde_json::from_str::<SyncRequest>(bad).unwrap_err().to_string();
        assert!(e.starts_with("must be a UUID"), "{e}");
        // A newer relay's field is ignored (issue 60: a rolled-back stack keeps it working).
        let extra = r#"{"execution_id":"e","extra":1}"#;
        assert_eq!(serde_json::from_str::<StartRequest>(extra).unwrap().execution_id, "e");
    }

    #[test]
    fn responses_round_trip_with_optional_fields_left_out() {
        let s = StartResponse { status: RunStatus::Running, replayed: false };
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"status":"running"}"#);
        let c = ControlResponse { cancel_requested: true, status: Some(RunStatus::Cancelled) };
        let back: ControlResponse = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let done = CompleteResponse { ok: true, replayed: true, status: RunStatus::Completed };
        assert_eq!(serde_json::to_string(&done).unwrap(), r#"{"ok":true,"replayed":true,"status":"completed"}"#);
    }
}

/// `POST /pairings`: a relay asks to be paired ([`crate::pairing`]). It made its device token
/// itself and sends only the token's sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PairRequest {
    /// The desktop's name, shown to the owner: not blank, no control characters.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = crate::pairing::MAX_DESKTOP_NAME_CHARS)))]
    pub name: String,
    /// Its operating system (`macos`, `linux`).
    #[cfg_attr(feature = "schema", schemars(regex(pattern = "^[a-z0-9_.-]{1,32}$")))]
    pub os: String,
    /// Its architecture (`aarch64`, `x86_64`).
    #[cfg_attr(feature = "schema", schemars(regex(pattern = "^[a-z0-9_.-]{1,32}$")))]
    pub arch: String,
    /// sha256 (hex) of the device token the relay will present once paired.
    #[cfg_attr(feature = "schema", schemars(regex(pattern = "^[0-9a-f]{64}$")))]
    pub token_sha256: String,
}

/// The answer to a pairing request (RFC 8628 §3.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PairResponse {
    /// The relay's secret to poll with.
    pub device_code: String,
    /// The code the owner checks in the panel (`BCDF-GHJK`).
    pub user_code: String,
    /// The panel page where pairings are approved.
    pub verification_uri: String,
    /// The same page with the code filled in.
    pub verification_uri_complete: String,
    /// Seconds until the codes expire.
    pub expires_in: u64,
    /// Seconds to wait between polls.
    pub interval: u64,
}

/// `POST /pairings/token`: the relay's poll.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PairTokenRequest {
    /// The device code from [`PairResponse`].
    pub device_code: String,
}

/// A successful poll: the device exists and the relay's token authenticates it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PairTokenResponse {
    /// The device's id (shown in the panel's Desktops list).
    pub device_id: uuid::Uuid,
    /// The name the owner gave it.
    pub device_name: String,
    /// The account the desktop joined: the id of the owner who approved it (the panel shows
    /// the same id). `relay pair` prints it and asks before keeping anything, so a desktop
    /// whose code someone else approved is not silently paired into their account. Empty from
    /// a server older than this field.
    #[serde(default)]
    pub account: String,
}

/// A poll that did not pair (HTTP 400, RFC 8628 §3.5): `authorization_pending`, `slow_down`,
/// `access_denied` or `expired_token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PairError {
    /// The RFC 8628 error code.
    pub error: String,
    /// What it means, for a person.
    pub error_description: String,
    /// With `slow_down`: the interval to use from now on (seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<u64>,
}
