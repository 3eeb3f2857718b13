//! The relay API's route table: what [`super::RelayApi::handle`] dispatches through and what
//! [`crate::openapi`] publishes.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Every operation of the relay API ([`ROUTES`] maps requests to these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Op {
    Sync,
    StartCommand,
    CommandControl,
    ReportProgress,
    CompleteCommand,
    StartPairing,
    PollPairing,
    Pause,
    Resume,
    DispatchTask,
    ReadDispatched,
}

const P_COMMAND: Param = Param::path_id("command_id", "A queued command's id (from a sync).");
const P_LINK: Param = Param::path_id("chat_link_id", "The chat link the task went to.");
const P_TASK: Param = Param::path_id("task_id", "A task this desktop handed to a chat.");
const BAD: Answer = table::BAD_INPUT;
/// Every relay POST carries JSON: refusing other types keeps a web page from posting here
/// cross-origin (a form or `text/plain` post needs no CORS preflight, `application/json` does),
/// e.g. from spending a desktop's hourly pairing allowance.
const NOT_JSON: Answer =
    Answer { status: 415, description: "The body is not `Content-Type: application/json`.", body: &[error_body] };
/// What a body of another type is told.
pub const JSON_REQUIRED: &str = "content-type: must be application/json";
const NO_COMMAND: Answer =
    Answer { status: 404, description: "No such command of this device's owner: stop.", body: &[error_body] };
const ENDED: Answer = Answer {
    status: 409,
    description: "The command is in a state that refuses this (cancelled, ended otherwise): its status.",
    body: &[table::schema::<StatusResponse>],
};

macro_rules! route {
    ($op:ident, $method:ident, $path:literal, $auth:ident, $summary:literal, [$($param:expr),*], $body:ty, [$($answer:expr),* $(,)?]) => {
        Route {
            op: Op::$op,
            method: Method::$method,
            path: concat!("/external-assistants/graph-relays", $path),
            summary: $summary,
            auth: Auth::$auth,
            params: &[$($param),*],
            body: Some(Body { schema: table::schema::<$body>, required: true }),
            answers: &[$($answer,)* NOT_JSON],
        }
    };
}

/// The relay API's routes: what [`RelayApi::handle`] dispatches through and what
/// [`openapi::document`](crate::openapi::document) publishes.
pub static ROUTES: &[Route<Op>] = &[
    route!(
        Sync,
        POST,
        "/sync",
        Device,
        "Replace this desktop's shared sessions of a project; get its queued commands",
        [],
        SyncRequest,
        [
            Answer {
                status: 200,
                description: "Queued commands for this desktop's sessions, oldest first, and the poll interval.",
                body: &[table::schema::<SyncResponse>]
            },
            BAD,
            Answer { status: 404, description: "No such project of this device's owner.", body: &[error_body] },
            Answer {
                status: 409,
                description: "The owner turned the project off for connected agents (`enabled: false`).",
                body: &[error_body]
            },
        ]
    ),
    route!(
        Pause,
        POST,
        "/pause",
        Device,
        "Pause this desktop (`relay pause`): it finishes its run and is handed no new one",
        [],
        domain::relay::PauseRequest,
        [
            Answer {
                status: 200,
                description: "Paused (a pause it had is replaced).",
                body: &[table::schema::<domain::relay::PauseResponse>]
            },
            BAD,
        ]
    ),
    route!(
        Resume,
        POST,
        "/resume",
        Device,
        "End this desktop's pause (`relay resume`)",
        [],
        domain::relay::ResumeRequest,
        [
            Answer { status: 200, description: "Not paused.", body: &[table::schema::<domain::relay::PauseResponse>] },
            BAD,
        ]
    ),
    route!(
        StartCommand,
        POST,
        "/commands/{command_id}/start",
        Device,
        "Queued → running (a retry with the same execution id is a replay)",
        [P_COMMAND],
        StartRequest,
        [
            Answer { status: 200, description: "Running: run it.", body: &[table::schema::<StartResponse>] },
            BAD,
            NO_COMMAND,
            ENDED,
        ]
    ),
    Route {
        op: Op::CommandControl,
        method: Method::GET,
        path: "/external-assistants/graph-relays/commands/{command_id}/control",
        summary: "Heartbeat while running: whether to stop",
        auth: Auth::Device,
        params: &[P_COMMAND],
        body: None,
        answers: &[
            Answer {
                status: 200,
                description: "Keep running, or stop (`cancel_requested`).",
                body: &[table::schema::<ControlResponse>],
            },
            BAD,
            NO_COMMAND,
        ],
    },
    route!(
        ReportProgress,
        POST,
        "/commands/{command_id}/control",
        Device,
        "A control check that also records the running Graph's newest progress (one write)",
        [P_COMMAND],
        domain::relay::ControlRequest,
        [
            Answer {
                status: 200,
                description: "Recorded; keep running, or stop (`cancel_requested`: also when another execution runs it).",
                body: &[table::schema::<ControlResponse>],
            },
            BAD,
            NO_COMMAND,
        ]
    ),
    route!(
        CompleteCommand,
        POST,
        "/commands/{command_id}/complete",
        Device,
        "Running → ended; the same completion again is a replay, and a requested cancel wins",
        [P_COMMAND],
        Completion,
        [
            Answer {
                status: 200,
                description: "Recorded (or recorded before).",
                body: &[table::schema::<CompleteResponse>]
            },
            BAD,
            NO_COMMAND,
            ENDED,
        ]
    ),
    route!(
        DispatchTask,
        POST,
        "/tasks",
        Device,
        "Hand a task to one of the owner's chat links from a run running here (the same key and request replay)",
        [],
        domain::dispatch::DispatchRequest,
        [
            Answer {
                status: 200,
                description: "Handed over (or handed over before, `replayed`).",
                body: &[table::schema::<domain::dispatch::DispatchResponse>]
            },
            BAD,
            Answer {
                status: 404,
                description: "No chat link of this owner accepts tasks from this run's Graph session (whatever the reason).",
                body: &[error_body]
            },
            Answer {
                status: 409,
                description: "The run is not running on this desktop, handed out its 20 tasks, or the key was used with another request.",
                body: &[error_body]
            },
            Answer {
                status: 429,
                description: "This desktop handed out as many tasks as it may this hour.",
                body: &[error_body]
            },
        ]
    ),
    Route {
        op: Op::ReadDispatched,
        method: Method::GET,
        path: "/external-assistants/graph-relays/links/{chat_link_id}/tasks/{task_id}",
        summary: "A task this desktop handed to a chat: its status and, once submitted, the result",
        auth: Auth::Device,
        params: &[P_LINK, P_TASK],
        body: None,
        answers: &[
            Answer {
                status: 200,
                description: "The task as it is now (an open task past its expiry reads `expired`).",
                body: &[table::schema::<domain::dispatch::DispatchedTask>],
            },
            BAD,
            Answer { status: 404, description: "No task this desktop handed over.", body: &[error_body] },
        ],
    },
    route!(
        StartPairing,
        POST,
        "/pairings",
        Public,
        "Ask to be paired: a code for the owner to approve in the panel (RFC 8628 §3.2)",
        [],
        PairRequest,
        [
            Answer { status: 200, description: "The codes.", body: &[table::schema::<PairResponse>] },
            BAD,
            Answer {
                status: 409,
                description: "The token's hash already belongs to a device: make a new token and ask again.",
                body: &[error_body]
            },
            Answer {
                status: 429,
                description: "Too many pairing requests from this address this hour.",
                body: &[error_body]
            },
        ]
    ),
    route!(
        PollPairing,
        POST,
        "/pairings/token",
        Public,
        "Poll: the device once the owner approved",
        [],
        PairTokenRequest,
        [
            Answer {
                status: 200,
                description: "Paired: the relay's own token now authenticates this device.",
                body: &[table::schema::<PairTokenResponse>]
            },
            Answer {
                status: 400,
                description: "RFC 8628 §3.5: authorization_pending, slow_down, access_denied, expired_token; or a malformed body.",
                body: &[table::schema::<PairError>, error_body]
            },
        ]
    ),
];
