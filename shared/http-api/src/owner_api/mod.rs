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
//! | `POST /runs/{id}/cancel` | cancel one of them, as the chat's `cancel_graph_run` does (queued → cancelled, running → cancel requested) |
//! | `GET /pairings/{code}` | a desktop waiting to be paired with this code: its name, OS, architecture, expiry |
//! | `POST /pairings/{code}/approve {"name"?}`, `POST /pairings/{code}/refuse` | decide it (once, by one owner) |
//! | `GET /overview` | projects, devices, links and the 20 latest runs in one answer (the panel's refresh) |
//!
//! Bearer JWT with the `osfoundry:owner` scope; the owner is the token's subject. Every refusal
//! is `{"error": "<field>: <rule>"}` and writes nothing; another owner's ids answer exactly like
//! ids that do not exist.
//!
//! | module | what |
//! |---|---|
//! | this one | [`OwnerApi::handle`] and one handler per operation |
//! | `routes` | [`ROUTES`]: the table requests are dispatched through and [`crate::openapi`] publishes |
//! | [`views`] | every request and response body, and how each view is made from its domain value |
//! | [`chat_views`] | the views of the chats and hosts that connected, re-exported by [`views`] |
//! | [`run_views`] | the views of Graph runs (a run, its progress, a page), re-exported by [`views`] |
//! | `runs` | the handlers of the owner's Graph runs: a page of them, and the cancel |

use std::sync::Arc;

use bytes::Bytes;
use domain::clock::SharedClock;
use domain::devices::new_token;
use domain::errors::InputError;
use domain::ids::{ChatLinkId, IdempotencyKey, OwnerId, ProjectId, TaskId};
use domain::limits::Policy;
use domain::pairing::{
    DecideOutcome, Decision, FAILED_LOOKUPS_PER_WINDOW, UserCode, lookup_window_end, owner_lookups_key,
    source_lookups_key,
};
use domain::projects::{ChatLink, Subscription, new_webhook_secret, validate_name};
use domain::store::{
    AssignTasks, ClientUse, LimitAttempts, ManageDevices, ManageLinks, ManageProjects, OwnerRuns, PairDevices,
    PauseDevices, ReadTasks, RecordDeliveries, StoreError,
};
use domain::tasks::{
    ArtifactRecord, AssignOutcome, AssignRejection, AssignTask, CancelTaskOutcome, TaskStatus, validate_objective,
};
use http::{StatusCode, header};

pub mod chat_views;
mod routes;
pub mod run_views;
mod runs;
pub mod views;
pub use routes::{Op, ROUTES};
use views::*;

use http_util::routes::{self as table, Found};

use auth::{AuthError, Authenticator, bearer};
use events::webhook_url::{self, UrlPolicy};
use http_util::ClientSource;
use http_util::http_json;
use tools::SCOPE_OWNER;
use tools::blobs::{BlobError, BlobStore, Download};

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
/// How many of the owner's newest runs are searched for the run each desktop is busy with (the
/// runs the overview reads anyway, so the panel's refresh pays no query for it). A desktop whose
/// run is older than this many newer ones shows its sync state instead of "busy": a bound of
/// the reads, said in docs/panel.md.
pub const FLEET_RUNS: usize = OVERVIEW_RUNS;
/// Characters of an objective shown in task lists (the detail has all of it).
pub const OBJECTIVE_PREVIEW_CHARS: usize = 200;

/// The IAM actions the `owner_api` function needs on the table (and its owner-runs index).
/// Proven against the emulator in the suite. `DeleteItem`: removing a desktop ends in a
/// transaction of two deletes, which AWS authorizes as `DeleteItem` (*Using IAM with
/// DynamoDB transactions*). `BatchGetItem`: the runs the panel lists, by the keys the owner's
/// runs index (keys only) gives.
pub const DYNAMODB_ACTIONS: &[&str] = &[
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
];

/// The store capabilities the owner API uses.
pub trait OwnerStore:
    ManageProjects
    + ManageDevices
    + PauseDevices
    + ManageLinks
    + AssignTasks
    + ReadTasks
    + OwnerRuns
    + RecordDeliveries
    + PairDevices
    + LimitAttempts
    + ClientUse
{
}
impl<T> OwnerStore for T where
    T: ManageProjects
        + ManageDevices
        + PauseDevices
        + ManageLinks
        + AssignTasks
        + ReadTasks
        + OwnerRuns
        + RecordDeliveries
        + PairDevices
        + LimitAttempts
        + ClientUse
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
    /// Each owner's panel requests a minute ([`domain::budget::Surface::Owner`]): built from
    /// `policy` on the first request, one per process (start it with `Default::default()`).
    pub budget: std::sync::OnceLock<domain::budget::OwnerBudget>,
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
const NO_RUN: &str = "command_id: no such run";
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

impl<S: OwnerStore + ?Sized> OwnerApi<S> {
    /// This process's count of each owner's requests, at `policy`'s limit.
    fn budget(&self) -> &domain::budget::OwnerBudget {
        self.budget.get_or_init(|| {
            domain::budget::OwnerBudget::new(domain::budget::Surface::Owner, self.policy.owner_requests_per_minute)
        })
    }

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
        if let Some(refused) =
            http_json::over_budget(self.budget(), self.store.as_ref(), &owner, self.clock.now()).await
        {
            return refused;
        }
        let (route, p) = match table::find(ROUTES, req.method(), req.uri().path()) {
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
            Op::RemoveDevice => self.remove_device(&owner, p[0]).await,
            Op::PauseDevice => self.pause_device(&owner, p[0], body).await,
            Op::ResumeDevice => self.resume_device(&owner, p[0]).await,
            Op::ListLinks => self.list_links(&owner).await,
            Op::CreateLink => self.create_link(&owner, body).await,
            Op::GetLink => self.get_link(&owner, p[0]).await,
            Op::DeleteLink => self.delete_link(&owner, p[0]).await,
            Op::Subscribe => self.subscribe(&owner, p[0], body).await,
            Op::Unsubscribe => self.unsubscribe(&owner, p[0]).await,
            Op::AllowDesktopTasks => self.desktop_tasks(&owner, p[0], Some(body)).await,
            Op::StopDesktopTasks => self.desktop_tasks(&owner, p[0], None).await,
            Op::ListTasks => self.list_tasks(&owner, p[0], query).await,
            Op::AssignTask => self.assign(&owner, p[0], body).await,
            Op::GetTask => self.get_task(&owner, p[0], p[1]).await,
            Op::CancelTask => self.cancel_task(&owner, p[0], p[1]).await,
            Op::ListRuns => self.list_runs(&owner, query).await,
            Op::CancelRun => self.cancel_run(&owner, p[0]).await,
            Op::Overview => self.overview(&owner).await,
            Op::GetPairing | Op::ApprovePairing | Op::RefusePairing => {
                let source = req.extensions().get::<ClientSource>().map(|s| s.0.clone());
                self.pairing_op(route.op, &owner, source.as_deref(), p[0], body).await
            }
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
        let fleet = self.fleet(owner).await?;
        let now = self.clock.now();
        ok(
            StatusCode::OK,
            DeviceList { devices: ds.iter().map(|d| device_view(d, now, &self.policy, &fleet)).collect() },
        )
    }

    /// Who is busy with what and who shares which session: from the owner's projects and
    /// newest [`FLEET_RUNS`] runs (two queries; `overview` has both already and reads none).
    async fn fleet(&self, owner: &OwnerId) -> Result<Fleet, Fail> {
        let runs = self.store.recent_runs(owner, FLEET_RUNS, None).await?;
        let projects = self.store.list_projects(owner).await?;
        Ok(Fleet::of(&projects, &runs, self.clock.now(), &self.policy))
    }

    async fn create_device(&self, owner: &OwnerId, body: &[u8]) -> Reply {
        let b: NameBody = parse(body)?;
        validate_name(&b.name)?;
        let (token, hash) = new_token().map_err(|e| Fail::Store(StoreError::unavailable(e)))?;
        let d = self.store.create_device(owner, &b.name, &hash).await?;
        let note = "The token is shown only now; the server keeps only its sha256.".to_owned();
        let device = device_view(&d, self.clock.now(), &self.policy, &Fleet::default());
        ok(StatusCode::CREATED, NewDevice { device, token, note })
    }

    /// A pairing lookup or decision, refused while the owner (or, in the cloud, the caller's
    /// address) has [`FAILED_LOOKUPS_PER_WINDOW`] codes that matched nothing in this window —
    /// before the lookup, so a guesser who is refused learns nothing, not even a right guess.
    /// A code that matched nothing counts one more.
    async fn pairing_op(&self, op: Op, owner: &OwnerId, source: Option<&str>, code: &str, body: &[u8]) -> Reply {
        let now = self.clock.now();
        let window_end = lookup_window_end(now);
        let mut keys = vec![owner_lookups_key(owner)];
        keys.extend(source.filter(|s| !s.is_empty()).map(source_lookups_key));
        for key in &keys {
            if self.store.failed_attempts(key, window_end).await? >= FAILED_LOOKUPS_PER_WINDOW {
                let minutes = (window_end.as_millis() - now.as_millis() + 59_999) / 60_000;
                return Err(Fail::Refused(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "user_code: too many codes that matched no waiting desktop; try again in {minutes} min (check the code the relay printed)"
                    ),
                ));
            }
        }
        let reply = match op {
            Op::ApprovePairing => self.approve_pairing(owner, code, body).await,
            Op::RefusePairing => self.decide_pairing(owner, code, &Decision::Refuse).await,
            _ => self.get_pairing(owner, code).await,
        };
        if let Err(Fail::Refused(StatusCode::NOT_FOUND, _)) = &reply {
            for key in &keys {
                self.store.record_failed_attempt(key, window_end).await?;
            }
        }
        reply
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
            DecideOutcome::TokenInUse => Err(Fail::Refused(
                StatusCode::CONFLICT,
                "user_code: this desktop's token already belongs to a device; have it run `relay pair` again".into(),
            )),
        }
    }

    async fn revoke_device(&self, owner: &OwnerId, id: &str) -> Reply {
        let id = uuid::Uuid::try_parse(id).map_err(|_| bad("device_id: must be a UUID"))?;
        if !self.store.revoke_device(owner, id).await? {
            return Err(not_found(NO_DEVICE));
        }
        ok(StatusCode::OK, DeviceRevoked { revoked: true })
    }

    async fn remove_device(&self, owner: &OwnerId, id: &str) -> Reply {
        let id = uuid::Uuid::try_parse(id).map_err(|_| bad("device_id: must be a UUID"))?;
        if !self.store.remove_device(owner, id).await? {
            return Err(not_found(NO_DEVICE));
        }
        ok(StatusCode::OK, DeviceRemoved { removed: true })
    }

    /// A pause for `for_seconds` (1 s to 30 days) or until resumed, with an optional note.
    async fn pause_device(&self, owner: &OwnerId, id: &str, body: &[u8]) -> Reply {
        let id = uuid::Uuid::try_parse(id).map_err(|_| bad("device_id: must be a UUID"))?;
        let b: domain::relay::PauseRequest =
            if body.iter().all(u8::is_ascii_whitespace) { Default::default() } else { parse(body)? };
        let pause = domain::devices::Pause::new(self.clock.now(), b.for_seconds, b.note).map_err(bad)?;
        self.set_pause(owner, id, Some(&pause)).await
    }

    async fn resume_device(&self, owner: &OwnerId, id: &str) -> Reply {
        let id = uuid::Uuid::try_parse(id).map_err(|_| bad("device_id: must be a UUID"))?;
        self.set_pause(owner, id, None).await
    }

    async fn set_pause(&self, owner: &OwnerId, id: uuid::Uuid, pause: Option<&domain::devices::Pause>) -> Reply {
        if !self.store.set_device_pause(owner, id, pause).await? {
            return Err(not_found(NO_DEVICE));
        }
        let ds = self.store.list_devices(owner).await?;
        let d = ds.iter().find(|d| d.device_id == id).ok_or_else(|| not_found(NO_DEVICE))?;
        let fleet = self.fleet(owner).await?;
        ok(StatusCode::OK, device_view(d, self.clock.now(), &self.policy, &fleet))
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

    /// `PUT` (with a body) or `DELETE` `/links/{id}/desktop-tasks`.
    async fn desktop_tasks(&self, owner: &OwnerId, id: &str, body: Option<&[u8]>) -> Reply {
        let link = self.link(owner, id).await?;
        let setting = match body {
            None => None,
            Some(body) => {
                let b: DesktopTasksBody = parse(body)?;
                let sessions = b
                    .sessions
                    .iter()
                    .map(|s| domain::ids::GraphSessionId::parse("sessions", s))
                    .collect::<Result<Vec<_>, _>>()?;
                let d = domain::dispatch::DesktopTasks { sessions };
                d.validate()?;
                Some(d)
            }
        };
        let l = self
            .store
            .set_desktop_tasks(owner, link.link_id, setting.as_ref())
            .await?
            .ok_or_else(|| not_found(NO_LINK))?;
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
            claimed_at: time(t.claimed_at),
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
        let (projects, devices, links, runs, (chats, hosts)) = (
            self.store.list_projects(owner).await?,
            self.store.list_devices(owner).await?,
            self.store.list_links(owner).await?,
            self.store.recent_runs(owner, OVERVIEW_RUNS, None).await?,
            self.store.chats_and_hosts(owner).await?,
        );
        let now = self.clock.now();
        let fleet = Fleet::of(&projects, &runs, now, &self.policy);
        ok(
            StatusCode::OK,
            Overview {
                projects: projects.iter().map(project_view).collect(),
                devices: devices.iter().map(|d| device_view(d, now, &self.policy, &fleet)).collect(),
                links: self.link_views(owner, &links).await?,
                runs: runs.iter().map(|r| run_view(r, now, &self.policy)).collect(),
                hosts: hosts.iter().map(|h| host_view(h, &chats)).collect(),
                chats: chats.iter().map(chat_view).collect(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
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
}
