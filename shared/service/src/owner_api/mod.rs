//! The owner API (SPEC §7): everything the owner's web panel does, as JSON over HTTP.
//!
//! | route (under `/owner`) | does |
//! |---|---|
//! | `GET /projects`, `POST /projects {"name"}`, `PUT /projects/{id} {"enabled"}` | projects and their switch for connected agents |
//! | `GET /devices`, `POST /devices {"name"}`, `DELETE /devices/{id}` | device tokens (shown once, kept as sha256), last seen, revoke |
//! | `GET /links`, `POST /links {"project_id","name"}`, `GET /links/{id}`, `DELETE /links/{id}` | chat links; deleting cancels the link's open tasks |
//! | `PUT /links/{id}/subscription {"url"}`, `DELETE /links/{id}/subscription` | the link's event subscription (the secret is shown once) |
//! | `GET /links/{id}/tasks?limit=&cursor=` | the link's tasks, newest first, with status labels |
//! | `POST /links/{id}/tasks {"objective","idempotency_key"}` | assign: 201 new, 200 the same task again, 409 key reused |
//! | `GET /links/{id}/tasks/{task}` | one task: result, claim, artifacts with download links |
//! | `POST /links/{id}/tasks/{task}/cancel` | cancel an open task |
//! | `GET /runs?limit=&cursor=` | the recent graph runs of the owner's projects, any agent |
//! | `GET /pairings/{code}` | a desktop waiting to be paired with this code: its name, OS, architecture, expiry |
//! | `POST /pairings/{code}/approve {"name"?}`, `POST /pairings/{code}/refuse` | decide it (once, by one owner) |
//! | `GET /overview` | projects, devices, links and the 20 latest runs in one answer (the panel's refresh) |
//!
//! Bearer JWT with the `osfoundry:owner` scope; the owner is the token's subject. Every refusal
//! is `{"error": "<field>: <rule>"}` and writes nothing; another owner's ids answer exactly like
//! ids that do not exist.
//!
//! [`ROUTES`] is the table requests are dispatched through and [`crate::openapi`] publishes;
//! [`views`] holds every request and response body.

use std::sync::Arc;

use bytes::Bytes;
use domain::clock::{SharedClock, Timestamp};
use domain::devices::{Device, new_token};
use domain::errors::InputError;
use domain::events::DeliveryOutcome;
use domain::ids::{ChatLinkId, CommandId, IdempotencyKey, OwnerId, ProjectId, TaskId};
use domain::limits::{Policy, cut_chars};
use domain::pairing::{DecideOutcome, Decision, Pairing, PairingStatus, UserCode};
use domain::projects::{ChatLink, Project, Subscription, new_webhook_secret, validate_name};
use domain::runs::Run;
use domain::store::{
    AssignTasks, ManageDevices, ManageLinks, ManageProjects, OwnerRuns, PairDevices, ReadTasks, RecordDeliveries,
    StoreError,
};
use domain::tasks::{
    ArtifactRecord, AssignOutcome, AssignRejection, AssignTask, CancelTaskOutcome, Task, TaskStatus, validate_objective,
};
use http::{Method, StatusCode, header};

pub mod views;
use views::*;

use crate::openapi::{self, Answer, Auth, Body, Found, In, Param, Route, error_body};

use crate::auth::{AuthError, Authenticator, bearer};
use crate::blobs::{BlobError, BlobStore, Download};
use crate::http_json;
use crate::tools::SCOPE_OWNER;
use crate::webhook_url::{self, UrlPolicy};

/// Path prefix of the owner API.
pub const PREFIX: &str = "/owner";

/// Largest request body: a task objective at its character limit, a webhook subscription or a
/// name, with room to spare (the same 1 MiB the relay API allows, kept as its own setting).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Tasks per page unless `limit` says otherwise (also the most).
pub const DEFAULT_PAGE: usize = 50;
/// Largest `limit`.
pub const MAX_PAGE: usize = 100;
/// Runs in the overview.
pub const OVERVIEW_RUNS: usize = 20;
/// Characters of an objective shown in task lists (the detail has all of it).
pub const OBJECTIVE_PREVIEW_CHARS: usize = 200;

/// The IAM actions the `owner_api` function needs on the table (and its owner-runs index).
/// Proven against the emulator in the suite.
pub const DYNAMODB_ACTIONS: &[&str] =
    &["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"];

/// The store capabilities the owner API uses.
pub trait OwnerStore:
    ManageProjects + ManageDevices + ManageLinks + AssignTasks + ReadTasks + OwnerRuns + RecordDeliveries + PairDevices
{
}
impl<T> OwnerStore for T where
    T: ManageProjects
        + ManageDevices
        + ManageLinks
        + AssignTasks
        + ReadTasks
        + OwnerRuns
        + RecordDeliveries
        + PairDevices
        + ?Sized
{
}

/// The owner API over a store.
pub struct OwnerApi<S: ?Sized> {
    /// The store.
    pub store: Arc<S>,
    /// Verifies owner tokens.
    pub auth: Arc<Authenticator>,
    /// "Now" for status labels.
    pub clock: SharedClock,
    /// The time rules (task expiry, leases) the labels follow.
    pub policy: Policy,
    /// Artifact downloads (S3 presigned URLs in the cloud, signed local links locally).
    pub blobs: Option<Arc<dyn BlobStore>>,
    /// Which subscription URLs are accepted.
    pub urls: UrlPolicy,
}

/// Why a request was not answered with success.
enum Fail {
    /// A refusal for the caller: status and message.
    Refused(StatusCode, String),
    /// The store failed (logged; retryable 503).
    Store(StoreError),
    /// The blob store failed (logged; retryable 503).
    Blob(BlobError),
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<BlobError> for Fail {
    fn from(e: BlobError) -> Self {
        Self::Blob(e)
    }
}

impl From<InputError> for Fail {
    fn from(e: InputError) -> Self {
        Self::Refused(StatusCode::BAD_REQUEST, e.to_string())
    }
}

fn bad(message: impl Into<String>) -> Fail {
    Fail::Refused(StatusCode::BAD_REQUEST, message.into())
}

fn not_found(what: &str) -> Fail {
    Fail::Refused(StatusCode::NOT_FOUND, what.to_owned())
}

const NO_PROJECT: &str = "project_id: no such project";
const NO_LINK: &str = "chat_link_id: no such chat link";
const NO_TASK: &str = "task_id: no such task";
const NO_DEVICE: &str = "device_id: no such device";
/// Unknown, expired, or decided by someone else: deliberately one answer.
const NO_PAIRING: &str =
    "user_code: no desktop is waiting to be paired with this code (it may have expired: run `relay pair` again)";

type Reply = Result<http::Response<Bytes>, Fail>;

fn ok(status: StatusCode, v: impl serde::Serialize) -> Reply {
    Ok(http_json::response(status, v))
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Fail> {
    http_json::parse(body).map_err(bad)
}

fn time(t: Option<Timestamp>) -> Option<String> {
    t.map(Timestamp::rfc3339)
}

fn project_view(p: &Project) -> ProjectView {
    ProjectView {
        project_id: p.project_id,
        name: p.name.clone(),
        enabled: p.enabled,
        shared_sessions: p.sessions.len(),
        sessions: p
            .sessions
            .iter()
            .map(|s| SessionView {
                graph_session_id: s.graph_session_id.as_str().to_owned(),
                name: s.name.clone(),
                slug: s.slug.clone(),
            })
            .collect(),
        last_sync_at: time(p.last_sync_at),
        created_at: p.created_at.rfc3339(),
    }
}

fn device_view(d: &Device) -> DeviceView {
    DeviceView {
        device_id: d.device_id,
        name: d.name.clone(),
        created_at: d.created_at.rfc3339(),
        revoked_at: time(d.revoked_at),
        last_seen_at: time(d.last_seen_at),
    }
}

fn pairing_view(p: &Pairing) -> PairingView {
    let (status, device) = match &p.status {
        PairingStatus::Pending => (PairingState::Pending, None),
        PairingStatus::Refused => (PairingState::Refused, None),
        PairingStatus::Approved { device_id, device_name, .. } => {
            (PairingState::Approved, Some((*device_id, device_name.clone())))
        }
        PairingStatus::Redeemed { device_id, device_name, .. } => {
            (PairingState::Redeemed, Some((*device_id, device_name.clone())))
        }
    };
    let (device_id, device_name) = device.unzip();
    PairingView {
        user_code: p.user_code.display(),
        status,
        name: p.desktop.name.clone(),
        os: p.desktop.os.clone(),
        arch: p.desktop.arch.clone(),
        created_at: p.created_at.rfc3339(),
        expires_at: p.expires_at.rfc3339(),
        device_id,
        device_name,
    }
}

fn link_view(l: &ChatLink, last_delivery: Option<&DeliveryOutcome>) -> LinkView {
    LinkView {
        chat_link_id: l.link_id,
        project_id: l.project_id,
        name: l.name.clone(),
        created_at: l.created_at.rfc3339(),
        // Never the secret: it is shown once, when the subscription is made.
        subscription: l.subscription.as_ref().map(|s| SubscriptionView {
            url: s.url.clone(),
            created_at: s.created_at.rfc3339(),
            last_delivery: last_delivery.map(|d| DeliveryView {
                event_id: d.event_id.clone(),
                event_type: d.event_type.as_str().to_owned(),
                at: d.at.rfc3339(),
                ok: d.ok,
                detail: d.detail.clone(),
            }),
            secret: None,
        }),
    }
}

/// A task in a list: the label and a preview of the objective.
fn task_summary(t: &Task, now: Timestamp) -> TaskSummary {
    let status = t.status_at(now);
    let preview = cut_chars(&t.objective, OBJECTIVE_PREVIEW_CHARS);
    TaskSummary {
        task_id: t.task_id,
        status,
        label: status.label().to_owned(),
        objective: preview.to_owned(),
        objective_truncated: preview.len() < t.objective.len(),
        created_at: t.created_at.rfc3339(),
        finished_at: time(t.finished_at),
    }
}

fn run_view(r: &Run, now: Timestamp, policy: &Policy) -> RunView {
    let view = r.view(now, policy);
    let ended = r.finished_at.filter(|_| view.status.is_terminal());
    let secs = |a: Timestamp, b: Timestamp| b.since(a).as_secs_f64();
    RunView {
        command_id: r.command_id,
        status: view.status,
        project_id: r.project_id,
        graph_session_id: r.graph_session_id.as_str().to_owned(),
        slug: r.slug.clone(),
        agent: r.agent.as_str().to_owned(),
        queued_at: r.queued_at.rfc3339(),
        started_at: time(r.started_at),
        finished_at: time(ended),
        wait_s: r.started_at.map(|s| secs(r.queued_at, s)),
        run_s: r.started_at.zip(ended).map(|(s, e)| secs(s, e)),
        error: view.error,
        cancel_requested: r.cancel_requested,
    }
}

/// `?limit=&cursor=` of a list request.
fn page_params(query: Option<&str>) -> Result<(usize, Option<String>), Fail> {
    let mut limit = DEFAULT_PAGE;
    let mut cursor = None;
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match k.as_ref() {
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| bad(format!("limit: must be 1 to {MAX_PAGE} (got {v:?})")))?;
            }
            "cursor" => cursor = Some(v.into_owned()).filter(|c| !c.is_empty()),
            "" => return Err(bad("query: a parameter without a name (use limit, cursor)")),
            other => return Err(bad(format!("{other}: unknown query parameter (use limit, cursor)"))),
        }
    }
    Ok((limit, cursor))
}

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
    ListLinks,
    CreateLink,
    GetLink,
    DeleteLink,
    Subscribe,
    Unsubscribe,
    ListTasks,
    AssignTask,
    GetTask,
    CancelTask,
    ListRuns,
    Overview,
    GetPairing,
    ApprovePairing,
    RefusePairing,
}

const P_PROJECT: Param = Param::path_id("project_id", "A project's id.");
const P_DEVICE: Param = Param::path_id("device_id", "A device's id.");
const P_LINK: Param = Param::path_id("chat_link_id", "A chat link's id.");
const P_TASK: Param = Param::path_id("task_id", "A task's id.");
const P_CODE: Param = Param {
    name: "user_code",
    location: In::Path,
    description: "The 8-letter code `relay pair` printed (BCDF-GHJK; case and hyphens do not matter).",
    schema: openapi::text_param,
};
const P_LIMIT: Param =
    Param { name: "limit", location: In::Query, description: "Items per page (default 50).", schema: page_limit };
const P_CURSOR: Param = Param {
    name: "cursor",
    location: In::Query,
    description: "The `next_cursor` of the previous page.",
    schema: openapi::text_param,
};

/// `limit`: 1 to [`MAX_PAGE`].
fn page_limit(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "minimum": 1, "maximum": MAX_PAGE})
}

const BAD: Answer = openapi::BAD_INPUT;
const GONE: Answer = Answer {
    status: 404,
    description: "No such item of this owner (another owner's ids answer the same).",
    body: &[error_body],
};

macro_rules! ok {
    ($status:expr, $what:literal, $t:ty) => {
        Answer { status: $status, description: $what, body: &[openapi::schema::<$t>] }
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
    Some(Body { schema: openapi::schema::<T>, required: true })
}

/// The owner API's routes: what [`OwnerApi::handle`] dispatches through and what
/// [`openapi::document`] publishes.
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
        [ok!(200, "The pairing.", PairingView), BAD, GONE]
    ),
    route!(
        ApprovePairing,
        POST,
        "/pairings/{user_code}/approve",
        "Approve it (the relay's next poll gets its device)",
        [P_CODE],
        Some(Body { schema: openapi::schema::<ApproveBody>, required: false }),
        [ok!(200, "Approved.", PairingView), BAD, GONE]
    ),
    route!(
        RefusePairing,
        POST,
        "/pairings/{user_code}/refuse",
        "Refuse it",
        [P_CODE],
        None,
        [ok!(200, "Refused.", PairingView), BAD, GONE]
    ),
];

impl<S: OwnerStore + ?Sized> OwnerApi<S> {
    /// Answers one request whose path starts with [`PREFIX`].
    pub async fn handle(&self, req: http::Request<Bytes>) -> http::Response<Bytes> {
        if req.body().len() > MAX_BODY_BYTES {
            return http_json::error(StatusCode::PAYLOAD_TOO_LARGE, format!("body: at most {MAX_BODY_BYTES} bytes"));
        }
        let token = bearer(req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()));
        let identity = match token {
            None => Err(AuthError::Missing),
            Some(t) => self.auth.verify(t).await,
        };
        let owner = match identity {
            Ok(id) if id.has_scope(SCOPE_OWNER) => id.owner,
            Ok(_) => {
                return http_json::error(StatusCode::FORBIDDEN, format!("the token lacks the {SCOPE_OWNER} scope"));
            }
            Err(AuthError::KeysUnavailable(_)) => {
                return http_json::error(StatusCode::SERVICE_UNAVAILABLE, "temporarily unavailable; retry");
            }
            Err(_) => return http_json::error(StatusCode::UNAUTHORIZED, "a valid owner token is required"),
        };
        let (route, p) = match openapi::find(ROUTES, req.method(), req.uri().path()) {
            Found::Route(r, p) => (r, p),
            Found::WrongMethod(allow) => return http_json::method_not_allowed(&allow),
            Found::NoRoute => {
                let path = req.uri().path().strip_prefix(PREFIX).unwrap_or_default().trim_matches('/');
                return http_json::error(StatusCode::NOT_FOUND, format!("no route /owner/{path}"));
            }
        };
        let (query, body) = (req.uri().query(), req.body());
        let reply = match route.op {
            Op::ListProjects => self.list_projects(&owner).await,
            Op::CreateProject => self.create_project(&owner, body).await,
            Op::SetProjectEnabled => self.enable_project(&owner, p[0], body).await,
            Op::ListDevices => self.list_devices(&owner).await,
            Op::CreateDevice => self.create_device(&owner, body).await,
            Op::RevokeDevice => self.revoke_device(&owner, p[0]).await,
            Op::ListLinks => self.list_links(&owner).await,
            Op::CreateLink => self.create_link(&owner, body).await,
            Op::GetLink => self.get_link(&owner, p[0]).await,
            Op::DeleteLink => self.delete_link(&owner, p[0]).await,
            Op::Subscribe => self.subscribe(&owner, p[0], body).await,
            Op::Unsubscribe => self.unsubscribe(&owner, p[0]).await,
            Op::ListTasks => self.list_tasks(&owner, p[0], query).await,
            Op::AssignTask => self.assign(&owner, p[0], body).await,
            Op::GetTask => self.get_task(&owner, p[0], p[1]).await,
            Op::CancelTask => self.cancel_task(&owner, p[0], p[1]).await,
            Op::ListRuns => self.list_runs(&owner, query).await,
            Op::Overview => self.overview(&owner).await,
            Op::GetPairing => self.get_pairing(&owner, p[0]).await,
            Op::ApprovePairing => self.approve_pairing(&owner, p[0], body).await,
            Op::RefusePairing => self.decide_pairing(&owner, p[0], &Decision::Refuse).await,
        };
        match reply {
            Ok(r) => r,
            Err(Fail::Refused(status, message)) => http_json::error(status, message),
            Err(Fail::Store(e)) => http_json::unavailable("owner API", &e),
            Err(Fail::Blob(e)) => http_json::unavailable("owner API", &e),
        }
    }

    /// The owner's live link `id`, or the same 404 for a malformed, unknown or foreign id.
    async fn link(&self, owner: &OwnerId, id: &str) -> Result<ChatLink, Fail> {
        let id = ChatLinkId::parse("chat_link_id", id)?;
        self.store.get_link(owner, id).await?.ok_or_else(|| not_found(NO_LINK))
    }

    async fn list_projects(&self, owner: &OwnerId) -> Reply {
        let ps = self.store.list_projects(owner).await?;
        ok(StatusCode::OK, ProjectList { projects: ps.iter().map(project_view).collect() })
    }

    async fn create_project(&self, owner: &OwnerId, body: &[u8]) -> Reply {
        let b: NameBody = parse(body)?;
        validate_name(&b.name)?;
        let p = self.store.create_project(owner, &b.name).await?;
        ok(StatusCode::CREATED, project_view(&p))
    }

    async fn enable_project(&self, owner: &OwnerId, id: &str, body: &[u8]) -> Reply {
        let project = ProjectId::parse("project_id", id)?;
        let b: EnableBody = parse(body)?;
        let p =
            self.store.set_project_enabled(owner, project, b.enabled).await?.ok_or_else(|| not_found(NO_PROJECT))?;
        ok(StatusCode::OK, project_view(&p))
    }

    async fn list_devices(&self, owner: &OwnerId) -> Reply {
        let ds = self.store.list_devices(owner).await?;
        ok(StatusCode::OK, DeviceList { devices: ds.iter().map(device_view).collect() })
    }

    async fn create_device(&self, owner: &OwnerId, body: &[u8]) -> Reply {
        let b: NameBody = parse(body)?;
        validate_name(&b.name)?;
        let (token, hash) = new_token().map_err(|e| Fail::Store(StoreError::unavailable(e)))?;
        let d = self.store.create_device(owner, &b.name, &hash).await?;
        let note = "The token is shown only now; the server keeps only its sha256.".to_owned();
        ok(StatusCode::CREATED, NewDevice { device: device_view(&d), token, note })
    }

    async fn get_pairing(&self, owner: &OwnerId, code: &str) -> Reply {
        let code = UserCode::parse("user_code", code)?;
        let p = self.store.get_pairing(&code).await?;
        let p = p.filter(|p| p.visible_to(owner, self.clock.now())).ok_or_else(|| not_found(NO_PAIRING))?;
        ok(StatusCode::OK, pairing_view(&p))
    }

    async fn approve_pairing(&self, owner: &OwnerId, code: &str, body: &[u8]) -> Reply {
        let b: ApproveBody =
            if body.iter().all(u8::is_ascii_whitespace) { ApproveBody::default() } else { parse(body)? };
        if let Some(name) = &b.name {
            validate_name(name)?;
        }
        let parsed = UserCode::parse("user_code", code)?;
        let name = match b.name {
            Some(n) => n,
            None => match self.store.get_pairing(&parsed).await? {
                Some(p) => p.desktop.name,
                None => return Err(not_found(NO_PAIRING)),
            },
        };
        let decision = Decision::Approve { device_name: name, device_id: uuid::Uuid::new_v4() };
        self.decide_pairing(owner, code, &decision).await
    }

    async fn decide_pairing(&self, owner: &OwnerId, code: &str, decision: &Decision) -> Reply {
        let code = UserCode::parse("user_code", code)?;
        match self.store.decide_pairing(&code, owner, decision).await? {
            DecideOutcome::Decided(p) => ok(StatusCode::OK, pairing_view(&p)),
            DecideOutcome::NotPending => Err(not_found(NO_PAIRING)),
        }
    }

    async fn revoke_device(&self, owner: &OwnerId, id: &str) -> Reply {
        let id = uuid::Uuid::try_parse(id).map_err(|_| bad("device_id: must be a UUID"))?;
        if !self.store.revoke_device(owner, id).await? {
            return Err(not_found(NO_DEVICE));
        }
        ok(StatusCode::OK, DeviceRevoked { revoked: true })
    }

    async fn list_links(&self, owner: &OwnerId) -> Reply {
        let ls = self.store.list_links(owner).await?;
        ok(StatusCode::OK, LinkList { links: self.link_views(owner, &ls).await? })
    }

    async fn create_link(&self, owner: &OwnerId, body: &[u8]) -> Reply {
        let b: LinkBody = parse(body)?;
        validate_name(&b.name)?;
        let l = self.store.create_link(owner, b.project_id, &b.name).await?.ok_or_else(|| not_found(NO_PROJECT))?;
        ok(StatusCode::CREATED, link_view(&l, None))
    }

    async fn get_link(&self, owner: &OwnerId, id: &str) -> Reply {
        let link = self.link(owner, id).await?;
        let deliveries = self.store.last_deliveries(owner).await?;
        let last = deliveries.iter().find(|(l, _)| *l == link.link_id).map(|(_, d)| d);
        ok(StatusCode::OK, link_view(&link, last))
    }

    async fn delete_link(&self, owner: &OwnerId, id: &str) -> Reply {
        let id = ChatLinkId::parse("chat_link_id", id)?;
        let cancelled = self.store.delete_link(owner, id).await?.ok_or_else(|| not_found(NO_LINK))?;
        ok(StatusCode::OK, LinkDeleted { deleted: true, cancelled_tasks: cancelled })
    }

    async fn subscribe(&self, owner: &OwnerId, id: &str, body: &[u8]) -> Reply {
        let link = self.link(owner, id).await?;
        let b: SubscriptionBody = parse(body)?;
        webhook_url::check(&b.url, self.urls)?;
        let secret = new_webhook_secret().map_err(|e| Fail::Store(StoreError::unavailable(e)))?;
        let sub = Subscription { url: b.url, secret, created_at: self.clock.now() };
        let l =
            self.store.set_subscription(owner, link.link_id, Some(&sub)).await?.ok_or_else(|| not_found(NO_LINK))?;
        let mut link = link_view(&l, None);
        if let Some(s) = link.subscription.as_mut() {
            s.secret = Some(sub.secret);
        }
        let note =
            "The signing secret is shown only now. Events are signed per the Standard Webhooks convention.".to_owned();
        ok(StatusCode::OK, NewSubscription { link, note })
    }

    async fn unsubscribe(&self, owner: &OwnerId, id: &str) -> Reply {
        let link = self.link(owner, id).await?;
        let l = self.store.set_subscription(owner, link.link_id, None).await?.ok_or_else(|| not_found(NO_LINK))?;
        ok(StatusCode::OK, link_view(&l, None))
    }

    async fn list_tasks(&self, owner: &OwnerId, id: &str, query: Option<&str>) -> Reply {
        let link = self.link(owner, id).await?;
        let (limit, cursor) = page_params(query)?;
        let before = cursor
            .map(|c| TaskId::parse("cursor", &c).map_err(|_| bad("cursor: must be a next_cursor from a previous page")))
            .transpose()?;
        let page = self.store.list_link_tasks(owner, link.link_id, limit, before).await?;
        let now = self.clock.now();
        ok(
            StatusCode::OK,
            TaskPage {
                chat_link_id: link.link_id,
                tasks: page.tasks.iter().map(|t| task_summary(t, now)).collect(),
                next_cursor: page.next.map(|t| t.to_string()),
            },
        )
    }

    async fn assign(&self, owner: &OwnerId, id: &str, body: &[u8]) -> Reply {
        let link = self.link(owner, id).await?;
        let b: AssignBody = parse(body)?;
        validate_objective(&b.objective)?;
        let key = IdempotencyKey::parse(&b.idempotency_key)?;
        let req =
            AssignTask { owner: owner.clone(), link_id: link.link_id, objective: b.objective, idempotency_key: key };
        let now = self.clock.now();
        match self.store.assign_task(&req).await? {
            AssignOutcome::Assigned(t) => ok(StatusCode::CREATED, task_summary(&t, now)),
            AssignOutcome::Replayed(t) => ok(StatusCode::OK, task_summary(&t, now)),
            AssignOutcome::Rejected(AssignRejection::IdempotencyMismatch) => Err(Fail::Refused(
                StatusCode::CONFLICT,
                format!(
                    "{}: this key already assigned a task with another objective; a new objective needs a new key",
                    AssignRejection::IdempotencyMismatch
                ),
            )),
            AssignOutcome::Rejected(AssignRejection::LinkNotFound) => Err(not_found(NO_LINK)),
        }
    }

    async fn get_task(&self, owner: &OwnerId, id: &str, task: &str) -> Reply {
        let link = self.link(owner, id).await?;
        let task = TaskId::parse("task_id", task).map_err(|_| not_found(NO_TASK))?;
        let t = self.store.get_task(owner, link.link_id, task).await?.ok_or_else(|| not_found(NO_TASK))?;
        let artifacts = self.store.list_artifacts(owner, link.link_id, task).await?;
        let now = self.clock.now();
        let mut summary = task_summary(&t, now);
        summary.objective.clone_from(&t.objective);
        summary.objective_truncated = false;
        let status = t.status_at(now);
        let claim = t.claim_id.zip(t.lease_until).map(|(claim, lease)| ClaimView {
            claim_id: claim.to_string(),
            lease_until: lease.rfc3339(),
            live: status == TaskStatus::Claimed && lease > now,
        });
        let artifacts = self.artifact_views(&artifacts).await?;
        ok(
            StatusCode::OK,
            TaskDetail { summary, expires_at: t.expires_at.rfc3339(), result: t.result.clone(), claim, artifacts },
        )
    }

    async fn artifact_views(&self, artifacts: &[ArtifactRecord]) -> Result<Vec<ArtifactView>, Fail> {
        let mut out = Vec::with_capacity(artifacts.len());
        for a in artifacts {
            let url = match &self.blobs {
                Some(b) => {
                    let what = Download { key: &a.object_key, name: &a.name, content_type: &a.content_type };
                    Some(b.download_url(&what).await?)
                }
                None => None,
            };
            out.push(ArtifactView {
                artifact_id: a.artifact_id.clone(),
                name: a.name.clone(),
                content_type: a.content_type.clone(),
                size: a.size,
                sha256: a.sha256.clone(),
                download_url: url,
            });
        }
        Ok(out)
    }

    async fn cancel_task(&self, owner: &OwnerId, id: &str, task: &str) -> Reply {
        let link = self.link(owner, id).await?;
        let task = TaskId::parse("task_id", task).map_err(|_| not_found(NO_TASK))?;
        let status = match self.store.cancel_task(owner, link.link_id, task).await? {
            CancelTaskOutcome::Cancelled => TaskStatus::Cancelled,
            CancelTaskOutcome::Unchanged(s) => s,
            CancelTaskOutcome::NotFound => return Err(not_found(NO_TASK)),
        };
        ok(StatusCode::OK, TaskCancelled { task_id: task, status, label: status.label().to_owned() })
    }

    /// What the panel shows outside the selected link, in one request per refresh.
    async fn overview(&self, owner: &OwnerId) -> Reply {
        let (projects, devices, links, runs) = (
            self.store.list_projects(owner).await?,
            self.store.list_devices(owner).await?,
            self.store.list_links(owner).await?,
            self.store.recent_runs(owner, OVERVIEW_RUNS, None).await?,
        );
        let now = self.clock.now();
        ok(
            StatusCode::OK,
            Overview {
                projects: projects.iter().map(project_view).collect(),
                devices: devices.iter().map(device_view).collect(),
                links: self.link_views(owner, &links).await?,
                runs: runs.iter().map(|r| run_view(r, now, &self.policy)).collect(),
            },
        )
    }

    /// Links with the outcome of their latest delivery (one more query for all of them).
    async fn link_views(&self, owner: &OwnerId, links: &[ChatLink]) -> Result<Vec<LinkView>, Fail> {
        let deliveries = if links.iter().any(|l| l.subscription.is_some()) {
            self.store.last_deliveries(owner).await?
        } else {
            Vec::new()
        };
        Ok(links
            .iter()
            .map(|l| link_view(l, deliveries.iter().find(|(id, _)| *id == l.link_id).map(|(_, d)| d)))
            .collect())
    }

    async fn list_runs(&self, owner: &OwnerId, query: Option<&str>) -> Reply {
        let (limit, cursor) = page_params(query)?;
        let before = cursor
            .map(|c| {
                CommandId::parse("cursor", &c).map_err(|_| bad("cursor: must be a next_cursor from a previous page"))
            })
            .transpose()?;
        let runs = self.store.recent_runs(owner, limit, before).await?;
        let now = self.clock.now();
        let next = (runs.len() == limit).then(|| runs.last().map(|r| r.command_id.to_string())).flatten();
        ok(
            StatusCode::OK,
            RunPage { runs: runs.iter().map(|r| run_view(r, now, &self.policy)).collect(), next_cursor: next },
        )
    }
}
