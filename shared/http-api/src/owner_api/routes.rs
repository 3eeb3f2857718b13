//! The owner API's route table: every operation, its path, parameters, body and answers.
//! [`OwnerApi::handle`](super::OwnerApi::handle) dispatches through it and
//! [`openapi::document`](crate::openapi::document) publishes it.

use http::Method;

use super::MAX_PAGE;
use super::views::*;
use http_util::routes::{self as table, Answer, Auth, Body, In, Param, Route, error_body};

/// Every operation of the owner API: [`ROUTES`] maps requests to these, and the dispatcher's
/// `match` over them is exhaustive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Op {
    ListProjects,
    CreateProject,
    SetProjectEnabled,
    ListDevices,
    CreateDevice,
    RevokeDevice,
    RemoveDevice,
    PauseDevice,
    ResumeDevice,
    ListLinks,
    CreateLink,
    GetLink,
    DeleteLink,
    Subscribe,
    Unsubscribe,
    AllowDesktopTasks,
    StopDesktopTasks,
    ListTasks,
    AssignTask,
    GetTask,
    CancelTask,
    ListRuns,
    CancelRun,
    Overview,
    GetPairing,
    ApprovePairing,
    RefusePairing,
}

/// Too many pairing codes that matched nothing in a short while (guessing is bounded).
const GUESSING: Answer = Answer {
    status: 429,
    description: "Too many codes that matched no waiting desktop in the last minutes: every lookup is refused until the window ends.",
    body: &[error_body],
};

const P_PROJECT: Param = Param::path_id("project_id", "A project's id.");
const P_DEVICE: Param = Param::path_id("device_id", "A device's id.");
const P_LINK: Param = Param::path_id("chat_link_id", "A chat link's id.");
const P_TASK: Param = Param::path_id("task_id", "A task's id.");
const P_COMMAND: Param = Param::path_id("command_id", "A Graph run's id (its command id).");
const P_CODE: Param = Param {
    name: "user_code",
    location: In::Path,
    description: "The 8-letter code `relay pair` printed (BCDF-GHJK; case and hyphens do not matter).",
    schema: table::text_param,
};
const P_LIMIT: Param =
    Param { name: "limit", location: In::Query, description: "Items per page (default 50).", schema: page_limit };
const P_CURSOR: Param = Param {
    name: "cursor",
    location: In::Query,
    description: "The `next_cursor` of the previous page.",
    schema: table::text_param,
};

/// `limit`: 1 to [`MAX_PAGE`].
fn page_limit(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "minimum": 1, "maximum": MAX_PAGE})
}

const BAD: Answer = table::BAD_INPUT;
const GONE: Answer = Answer {
    status: 404,
    description: "No such item of this owner (another owner's ids answer the same).",
    body: &[error_body],
};

macro_rules! ok {
    ($status:expr, $what:literal, $t:ty) => {
        Answer { status: $status, description: $what, body: &[table::schema::<$t>] }
    };
}

macro_rules! route {
    ($op:ident, $method:ident, $path:literal, $summary:literal, [$($param:expr),*], $body:expr, [$($answer:expr),* $(,)?]) => {
        Route {
            op: Op::$op,
            method: Method::$method,
            path: concat!("/owner", $path),
            summary: $summary,
            auth: Auth::Owner,
            params: &[$($param),*],
            body: $body,
            answers: &[$($answer),*],
        }
    };
}

const fn body<T: schemars::JsonSchema>() -> Option<Body> {
    Some(Body { schema: table::schema::<T>, required: true })
}

/// The owner API's routes: what [`OwnerApi::handle`](super::OwnerApi::handle) dispatches
/// through and what [`openapi::document`](crate::openapi::document) publishes.
pub static ROUTES: &[Route<Op>] = &[
    route!(ListProjects, GET, "/projects", "The owner's projects", [], None, [ok!(200, "The projects.", ProjectList)]),
    route!(
        CreateProject,
        POST,
        "/projects",
        "Make a project",
        [],
        body::<NameBody>(),
        [ok!(201, "The new project.", ProjectView), BAD]
    ),
    route!(
        SetProjectEnabled,
        PUT,
        "/projects/{project_id}",
        "Turn a project on or off for connected agents",
        [P_PROJECT],
        body::<EnableBody>(),
        [ok!(200, "The project.", ProjectView), BAD, GONE]
    ),
    route!(ListDevices, GET, "/devices", "The owner's device tokens", [], None, [ok!(200, "The devices.", DeviceList)]),
    route!(
        CreateDevice,
        POST,
        "/devices",
        "Make a device token (shown once)",
        [],
        body::<NameBody>(),
        [ok!(201, "The device and its token.", NewDevice), BAD]
    ),
    route!(
        RevokeDevice,
        DELETE,
        "/devices/{device_id}",
        "Revoke a device token",
        [P_DEVICE],
        None,
        [ok!(200, "Revoked.", DeviceRevoked), BAD, GONE]
    ),
    route!(
        RemoveDevice,
        POST,
        "/devices/{device_id}/remove",
        "Remove a desktop that is gone: revoked if it is not, its shared sessions withdrawn, no longer listed",
        [P_DEVICE],
        None,
        [ok!(200, "Removed.", DeviceRemoved), BAD, GONE]
    ),
    route!(
        PauseDevice,
        POST,
        "/devices/{device_id}/pause",
        "Pause a desktop: it finishes its run and takes no new one (queued runs wait)",
        [P_DEVICE],
        Some(Body { schema: table::schema::<domain::relay::PauseRequest>, required: false }),
        [ok!(200, "Paused (a pause it had is replaced).", DeviceView), BAD, GONE]
    ),
    route!(
        ResumeDevice,
        POST,
        "/devices/{device_id}/resume",
        "End a desktop's pause (its queued runs start at its next sync)",
        [P_DEVICE],
        None,
        [ok!(200, "Resumed (also when it was not paused).", DeviceView), BAD, GONE]
    ),
    route!(ListLinks, GET, "/links", "The owner's chat links", [], None, [ok!(200, "The links.", LinkList)]),
    route!(
        CreateLink,
        POST,
        "/links",
        "Link a chat to a project",
        [],
        body::<LinkBody>(),
        [ok!(201, "The new link.", LinkView), BAD, GONE]
    ),
    route!(
        GetLink,
        GET,
        "/links/{chat_link_id}",
        "One chat link",
        [P_LINK],
        None,
        [ok!(200, "The link.", LinkView), BAD, GONE]
    ),
    route!(
        DeleteLink,
        DELETE,
        "/links/{chat_link_id}",
        "Delete a link (its open tasks are cancelled)",
        [P_LINK],
        None,
        [ok!(200, "Deleted.", LinkDeleted), BAD, GONE]
    ),
    route!(
        Subscribe,
        PUT,
        "/links/{chat_link_id}/subscription",
        "Send the link's events to a webhook (the secret is shown once)",
        [P_LINK],
        body::<SubscriptionBody>(),
        [ok!(200, "The link with the new subscription and its secret.", NewSubscription), BAD, GONE]
    ),
    route!(
        Unsubscribe,
        DELETE,
        "/links/{chat_link_id}/subscription",
        "Stop the link's events",
        [P_LINK],
        None,
        [ok!(200, "The link.", LinkView), BAD, GONE]
    ),
    route!(
        AllowDesktopTasks,
        PUT,
        "/links/{chat_link_id}/desktop-tasks",
        "Let the owner's desktops hand this link tasks (from the named Graph sessions, or any)",
        [P_LINK],
        body::<DesktopTasksBody>(),
        [ok!(200, "The link.", LinkView), BAD, GONE]
    ),
    route!(
        StopDesktopTasks,
        DELETE,
        "/links/{chat_link_id}/desktop-tasks",
        "Stop desktops handing this link tasks (tasks handed over already stay)",
        [P_LINK],
        None,
        [ok!(200, "The link.", LinkView), BAD, GONE]
    ),
    route!(
        ListTasks,
        GET,
        "/links/{chat_link_id}/tasks",
        "The link's tasks, newest first",
        [P_LINK, P_LIMIT, P_CURSOR],
        None,
        [ok!(200, "A page of tasks.", TaskPage), BAD, GONE]
    ),
    route!(
        AssignTask,
        POST,
        "/links/{chat_link_id}/tasks",
        "Assign a task to the chat",
        [P_LINK],
        body::<AssignBody>(),
        [
            ok!(201, "The new task.", TaskSummary),
            ok!(200, "The task this key assigned before, with the same objective.", TaskSummary),
            BAD,
            GONE,
            Answer { status: 409, description: "The key assigned a task with another objective.", body: &[error_body] },
        ]
    ),
    route!(
        GetTask,
        GET,
        "/links/{chat_link_id}/tasks/{task_id}",
        "One task: result, claim, artifacts",
        [P_LINK, P_TASK],
        None,
        [ok!(200, "The task.", TaskDetail), BAD, GONE]
    ),
    route!(
        CancelTask,
        POST,
        "/links/{chat_link_id}/tasks/{task_id}/cancel",
        "Cancel an open task",
        [P_LINK, P_TASK],
        None,
        [ok!(200, "Its status now (unchanged when it had ended).", TaskCancelled), BAD, GONE]
    ),
    route!(
        ListRuns,
        GET,
        "/runs",
        "The recent graph runs of the owner's projects",
        [P_LIMIT, P_CURSOR],
        None,
        [ok!(200, "A page of runs.", RunPage), BAD]
    ),
    route!(
        CancelRun,
        POST,
        "/runs/{command_id}/cancel",
        "Cancel a run, whichever agent queued it: a queued one at once, a running one within a control poll of its desktop",
        [P_COMMAND],
        None,
        [
            ok!(
                200,
                "The run as it is now: cancelled (it was queued), running with cancel_requested (its desktop stops it), or its end unchanged.",
                RunView
            ),
            BAD,
            GONE
        ]
    ),
    route!(
        Overview,
        GET,
        "/overview",
        "Projects, devices, links and the 20 latest runs",
        [],
        None,
        [ok!(200, "The overview.", Overview)]
    ),
    route!(
        GetPairing,
        GET,
        "/pairings/{user_code}",
        "A desktop waiting to be paired with this code",
        [P_CODE],
        None,
        [ok!(200, "The pairing.", PairingView), BAD, GONE, GUESSING]
    ),
    route!(
        ApprovePairing,
        POST,
        "/pairings/{user_code}/approve",
        "Approve it (the relay's next poll gets its device)",
        [P_CODE],
        Some(Body { schema: table::schema::<ApproveBody>, required: false }),
        [
            ok!(200, "Approved.", PairingView),
            BAD,
            GONE,
            Answer {
                status: 409,
                description: "The desktop's token already belongs to a device: it must run `relay pair` again.",
                body: &[error_body]
            },
            GUESSING,
        ]
    ),
    route!(
        RefusePairing,
        POST,
        "/pairings/{user_code}/refuse",
        "Refuse it",
        [P_CODE],
        None,
        [ok!(200, "Refused.", PairingView), BAD, GONE, GUESSING]
    ),
];
