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
use serde::Deserialize;
use serde_json::json;

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

fn ok(status: StatusCode, v: serde_json::Value) -> Reply {
    Ok(http_json::response(status, v))
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Fail> {
    http_json::parse(body).map_err(bad)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameBody {
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ApproveBody {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnableBody {
    enabled: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkBody {
    project_id: ProjectId,
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AssignBody {
    objective: String,
    idempotency_key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubscriptionBody {
    url: String,
}

fn time(t: Option<Timestamp>) -> Option<String> {
    t.map(Timestamp::rfc3339)
}

fn project_json(p: &Project) -> serde_json::Value {
    json!({
        "project_id": p.project_id.to_string(),
        "name": p.name,
        "enabled": p.enabled,
        "shared_sessions": p.sessions.len(),
        "sessions": p.sessions.iter().map(|s| json!({"graph_session_id": s.graph_session_id.as_str(), "name": s.name, "slug": s.slug})).collect::<Vec<_>>(),
        "last_sync_at": time(p.last_sync_at),
        "created_at": p.created_at.rfc3339(),
    })
}

fn device_json(d: &Device) -> serde_json::Value {
    json!({
        "device_id": d.device_id.to_string(),
        "name": d.name,
        "created_at": d.created_at.rfc3339(),
        "revoked_at": time(d.revoked_at),
        "last_seen_at": time(d.last_seen_at),
    })
}

fn pairing_json(p: &Pairing) -> serde_json::Value {
    let (device_id, device_name) = match &p.status {
        PairingStatus::Approved { device_id, device_name, .. }
        | PairingStatus::Redeemed { device_id, device_name, .. } => (Some(device_id.to_string()), Some(device_name)),
        PairingStatus::Pending | PairingStatus::Refused => (None, None),
    };
    json!({
        "user_code": p.user_code.display(),
        "status": p.status.as_str(),
        "name": p.desktop.name,
        "os": p.desktop.os,
        "arch": p.desktop.arch,
        "created_at": p.created_at.rfc3339(),
        "expires_at": p.expires_at.rfc3339(),
        "device_id": device_id,
        "device_name": device_name,
    })
}

fn link_json(l: &ChatLink, last_delivery: Option<&DeliveryOutcome>) -> serde_json::Value {
    json!({
        "chat_link_id": l.link_id.to_string(),
        "project_id": l.project_id.to_string(),
        "name": l.name,
        "created_at": l.created_at.rfc3339(),
        // Never the secret: it is shown once, when the subscription is made.
        "subscription": l.subscription.as_ref().map(|s| json!({
            "url": s.url,
            "created_at": s.created_at.rfc3339(),
            "last_delivery": last_delivery.map(|d| json!({
                "event_id": d.event_id,
                "event_type": d.event_type.as_str(),
                "at": d.at.rfc3339(),
                "ok": d.ok,
                "detail": d.detail,
            })),
        })),
    })
}

/// A task in a list: the label and a preview of the objective.
fn task_summary(t: &Task, now: Timestamp) -> serde_json::Value {
    let status = t.status_at(now);
    let preview = cut_chars(&t.objective, OBJECTIVE_PREVIEW_CHARS);
    json!({
        "task_id": t.task_id.to_string(),
        "status": status,
        "label": status.label(),
        "objective": preview,
        "objective_truncated": preview.len() < t.objective.len(),
        "created_at": t.created_at.rfc3339(),
        "finished_at": time(t.finished_at),
    })
}

fn run_json(r: &Run, now: Timestamp, policy: &Policy) -> serde_json::Value {
    let view = r.view(now, policy);
    let ended = r.finished_at.filter(|_| view.status.is_terminal());
    let secs = |a: Timestamp, b: Timestamp| b.since(a).as_secs_f64();
    json!({
        "command_id": r.command_id.to_string(),
        "status": view.status,
        "project_id": r.project_id.to_string(),
        "graph_session_id": r.graph_session_id.as_str(),
        "slug": r.slug,
        "agent": r.agent.as_str(),
        "queued_at": r.queued_at.rfc3339(),
        "started_at": time(r.started_at),
        "finished_at": time(ended),
        "wait_s": r.started_at.map(|s| secs(r.queued_at, s)),
        "run_s": r.started_at.zip(ended).map(|(s, e)| secs(s, e)),
        "error": view.error,
        "cancel_requested": r.cancel_requested,
    })
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
            other => return Err(bad(format!("{other}: unknown query parameter (use limit, cursor)"))),
        }
    }
    Ok((limit, cursor))
}

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
        let path = req.uri().path().strip_prefix(PREFIX).unwrap_or_default().trim_matches('/').to_owned();
        let segments: Vec<&str> = path.split('/').collect();
        let (query, body) = (req.uri().query(), req.body());
        let reply = match (req.method().clone(), segments.as_slice()) {
            (Method::GET, ["projects"]) => self.list_projects(&owner).await,
            (Method::POST, ["projects"]) => self.create_project(&owner, body).await,
            (Method::PUT, ["projects", id]) => self.enable_project(&owner, id, body).await,
            (Method::GET, ["devices"]) => self.list_devices(&owner).await,
            (Method::POST, ["devices"]) => self.create_device(&owner, body).await,
            (Method::DELETE, ["devices", id]) => self.revoke_device(&owner, id).await,
            (Method::GET, ["links"]) => self.list_links(&owner).await,
            (Method::POST, ["links"]) => self.create_link(&owner, body).await,
            (Method::GET, ["links", id]) => self.get_link(&owner, id).await,
            (Method::DELETE, ["links", id]) => self.delete_link(&owner, id).await,
            (Method::PUT, ["links", id, "subscription"]) => self.subscribe(&owner, id, body).await,
            (Method::DELETE, ["links", id, "subscription"]) => self.unsubscribe(&owner, id).await,
            (Method::GET, ["links", id, "tasks"]) => self.list_tasks(&owner, id, query).await,
            (Method::POST, ["links", id, "tasks"]) => self.assign(&owner, id, body).await,
            (Method::GET, ["links", id, "tasks", task]) => self.get_task(&owner, id, task).await,
            (Method::POST, ["links", id, "tasks", task, "cancel"]) => self.cancel_task(&owner, id, task).await,
            (Method::GET, ["runs"]) => self.list_runs(&owner, query).await,
            (Method::GET, ["overview"]) => self.overview(&owner).await,
            (Method::GET, ["pairings", code]) => self.get_pairing(&owner, code).await,
            (Method::POST, ["pairings", code, "approve"]) => self.approve_pairing(&owner, code, body).await,
            (Method::POST, ["pairings", code, "refuse"]) => self.decide_pairing(&owner, code, &Decision::Refuse).await,
            (
                _,
                ["projects" | "devices" | "links" | "runs" | "overview"]
                | ["projects" | "devices" | "links" | "pairings", _]
                | ["pairings", _, "approve" | "refuse"]
                | ["links", _, "subscription" | "tasks"]
                | ["links", _, "tasks", _]
                | ["links", _, "tasks", _, "cancel"],
            ) => Err(Fail::Refused(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this route".into())),
            _ => Err(not_found(&format!("no route /owner/{path}"))),
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
        ok(StatusCode::OK, json!({"projects": ps.iter().map(project_json).collect::<Vec<_>>()}))
    }

    async fn create_project(&self, owner: &OwnerId, body: &[u8]) -> Reply {
        let b: NameBody = parse(body)?;
        validate_name(&b.name)?;
        let p = self.store.create_project(owner, &b.name).await?;
        ok(StatusCode::CREATED, project_json(&p))
    }

    async fn enable_project(&self, owner: &OwnerId, id: &str, body: &[u8]) -> Reply {
        let project = ProjectId::parse("project_id", id)?;
        let b: EnableBody = parse(body)?;
        let p =
            self.store.set_project_enabled(owner, project, b.enabled).await?.ok_or_else(|| not_found(NO_PROJECT))?;
        ok(StatusCode::OK, project_json(&p))
    }

    async fn list_devices(&self, owner: &OwnerId) -> Reply {
        let ds = self.store.list_devices(owner).await?;
        ok(StatusCode::OK, json!({"devices": ds.iter().map(device_json).collect::<Vec<_>>()}))
    }

    async fn create_device(&self, owner: &OwnerId, body: &[u8]) -> Reply {
        let b: NameBody = parse(body)?;
        validate_name(&b.name)?;
        let (token, hash) = new_token().map_err(|e| Fail::Store(StoreError::unavailable(e)))?;
        let d = self.store.create_device(owner, &b.name, &hash).await?;
        let mut v = device_json(&d);
        v["token"] = json!(token);
        v["note"] = json!("The token is shown only now; the server keeps only its sha256.");
        ok(StatusCode::CREATED, v)
    }

    async fn get_pairing(&self, owner: &OwnerId, code: &str) -> Reply {
        let code = UserCode::parse("user_code", code)?;
        let p = self.store.get_pairing(&code).await?;
        let p = p.filter(|p| p.visible_to(owner, self.clock.now())).ok_or_else(|| not_found(NO_PAIRING))?;
        ok(StatusCode::OK, pairing_json(&p))
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
            DecideOutcome::Decided(p) => ok(StatusCode::OK, pairing_json(&p)),
            DecideOutcome::NotPending => Err(not_found(NO_PAIRING)),
        }
    }

    async fn revoke_device(&self, owner: &OwnerId, id: &str) -> Reply {
        let id = uuid::Uuid::try_parse(id).map_err(|_| bad("device_id: must be a UUID"))?;
        if !self.store.revoke_device(owner, id).await? {
            return Err(not_found(NO_DEVICE));
        }
        ok(StatusCode::OK, json!({"revoked": true}))
    }

    async fn list_links(&self, owner: &OwnerId) -> Reply {
        let ls = self.store.list_links(owner).await?;
        ok(StatusCode::OK, json!({"links": self.links_json(owner, &ls).await?}))
    }

    async fn create_link(&self, owner: &OwnerId, body: &[u8]) -> Reply {
        let b: LinkBody = parse(body)?;
        validate_name(&b.name)?;
        let l = self.store.create_link(owner, b.project_id, &b.name).await?.ok_or_else(|| not_found(NO_PROJECT))?;
        ok(StatusCode::CREATED, link_json(&l, None))
    }

    async fn get_link(&self, owner: &OwnerId, id: &str) -> Reply {
        let link = self.link(owner, id).await?;
        let deliveries = self.store.last_deliveries(owner).await?;
        let last = deliveries.iter().find(|(l, _)| *l == link.link_id).map(|(_, d)| d);
        ok(StatusCode::OK, link_json(&link, last))
    }

    async fn delete_link(&self, owner: &OwnerId, id: &str) -> Reply {
        let id = ChatLinkId::parse("chat_link_id", id)?;
        let cancelled = self.store.delete_link(owner, id).await?.ok_or_else(|| not_found(NO_LINK))?;
        ok(StatusCode::OK, json!({"deleted": true, "cancelled_tasks": cancelled}))
    }

    async fn subscribe(&self, owner: &OwnerId, id: &str, body: &[u8]) -> Reply {
        let link = self.link(owner, id).await?;
        let b: SubscriptionBody = parse(body)?;
        webhook_url::check(&b.url, self.urls)?;
        let secret = new_webhook_secret().map_err(|e| Fail::Store(StoreError::unavailable(e)))?;
        let sub = Subscription { url: b.url, secret, created_at: self.clock.now() };
        let l =
            self.store.set_subscription(owner, link.link_id, Some(&sub)).await?.ok_or_else(|| not_found(NO_LINK))?;
        let mut v = link_json(&l, None);
        v["subscription"]["secret"] = json!(sub.secret);
        v["note"] =
            json!("The signing secret is shown only now. Events are signed per the Standard Webhooks convention.");
        ok(StatusCode::OK, v)
    }

    async fn unsubscribe(&self, owner: &OwnerId, id: &str) -> Reply {
        let link = self.link(owner, id).await?;
        let l = self.store.set_subscription(owner, link.link_id, None).await?.ok_or_else(|| not_found(NO_LINK))?;
        ok(StatusCode::OK, link_json(&l, None))
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
            json!({
                "chat_link_id": link.link_id.to_string(),
                "tasks": page.tasks.iter().map(|t| task_summary(t, now)).collect::<Vec<_>>(),
                "next_cursor": page.next.map(|t| t.to_string()),
            }),
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
        let mut v = task_summary(&t, now);
        let status = t.status_at(now);
        v["objective"] = json!(t.objective);
        v["objective_truncated"] = json!(false);
        v["expires_at"] = json!(t.expires_at.rfc3339());
        v["result"] = json!(t.result);
        v["claim"] = match (t.claim_id, t.lease_until) {
            (Some(claim), Some(lease)) => json!({
                "claim_id": claim.to_string(),
                "lease_until": lease.rfc3339(),
                "live": status == TaskStatus::Claimed && lease > now,
            }),
            _ => serde_json::Value::Null,
        };
        v["artifacts"] = json!(self.artifacts_json(&artifacts).await?);
        ok(StatusCode::OK, v)
    }

    async fn artifacts_json(&self, artifacts: &[ArtifactRecord]) -> Result<Vec<serde_json::Value>, Fail> {
        let mut out = Vec::with_capacity(artifacts.len());
        for a in artifacts {
            let url = match &self.blobs {
                Some(b) => {
                    let what = Download { key: &a.object_key, name: &a.name, content_type: &a.content_type };
                    Some(b.download_url(&what).await?)
                }
                None => None,
            };
            out.push(json!({
                "artifact_id": a.artifact_id,
                "name": a.name,
                "content_type": a.content_type,
                "size": a.size,
                "sha256": a.sha256,
                "download_url": url,
            }));
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
        ok(StatusCode::OK, json!({"task_id": task.to_string(), "status": status, "label": status.label()}))
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
            json!({
                "projects": projects.iter().map(project_json).collect::<Vec<_>>(),
                "devices": devices.iter().map(device_json).collect::<Vec<_>>(),
                "links": self.links_json(owner, &links).await?,
                "runs": runs.iter().map(|r| run_json(r, now, &self.policy)).collect::<Vec<_>>(),
            }),
        )
    }

    /// Links with the outcome of their latest delivery (one more query for all of them).
    async fn links_json(&self, owner: &OwnerId, links: &[ChatLink]) -> Result<Vec<serde_json::Value>, Fail> {
        let deliveries = if links.iter().any(|l| l.subscription.is_some()) {
            self.store.last_deliveries(owner).await?
        } else {
            Vec::new()
        };
        Ok(links
            .iter()
            .map(|l| link_json(l, deliveries.iter().find(|(id, _)| *id == l.link_id).map(|(_, d)| d)))
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
            json!({"runs": runs.iter().map(|r| run_json(r, now, &self.policy)).collect::<Vec<_>>(), "next_cursor": next}),
        )
    }
}
