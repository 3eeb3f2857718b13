//! The owner API (SPEC §7), the part the relay needs so far: projects and device tokens.
//!
//! | route | does |
//! |---|---|
//! | `GET /owner/projects` | the owner's projects |
//! | `POST /owner/projects` `{"name"}` | create one (disabled for connected agents) |
//! | `PUT /owner/projects/{id}` `{"enabled":bool}` | enable/disable it for connected agents |
//! | `POST /owner/devices` `{"name"}` | create a device token — in the response once, stored only as sha256 |
//! | `GET /owner/devices` | the owner's devices (no tokens) |
//! | `DELETE /owner/devices/{id}` | revoke a device |
//!
//! Bearer JWT with the `osfoundry:owner` scope; the owner is the token's subject.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, StatusCode, header};
use serde::Deserialize;
use serde_json::json;

use crate::auth::{AuthError, Authenticator, bearer};
use crate::http_json;
use crate::relay_api::MAX_BODY_BYTES;
use crate::tools::SCOPE_OWNER;
use domain::devices::{Device, new_token};
use domain::ids::{OwnerId, ProjectId};
use domain::projects::{Project, validate_name};
use domain::store::{ManageDevices, ManageProjects, StoreError};

/// Path prefix of the owner API.
pub const PREFIX: &str = "/owner";

/// The IAM actions the `owner_api` function needs on the table. Proven against the emulator in
/// the suite.
pub const DYNAMODB_ACTIONS: &[&str] =
    &["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"];

/// The store capabilities the owner API uses.
pub trait OwnerStore: ManageProjects + ManageDevices {}
impl<T: ManageProjects + ManageDevices + ?Sized> OwnerStore for T {}

/// The owner API over a store.
pub struct OwnerApi<S: ?Sized> {
    /// The store.
    pub store: Arc<S>,
    /// Verifies owner tokens.
    pub auth: Arc<Authenticator>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameBody {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnableBody {
    enabled: bool,
}

fn internal(e: &StoreError) -> http::Response<Bytes> {
    http_json::unavailable("owner API", e)
}

fn project_json(p: &Project) -> serde_json::Value {
    json!({
        "project_id": p.project_id.to_string(),
        "name": p.name,
        "enabled": p.enabled,
        "shared_sessions": p.sessions.len(),
        "last_sync_at": p.last_sync_at.map(|t| t.rfc3339()),
    })
}

fn device_json(d: &Device) -> serde_json::Value {
    json!({
        "device_id": d.device_id.to_string(),
        "name": d.name,
        "created_at": d.created_at.rfc3339(),
        "revoked_at": d.revoked_at.map(|t| t.rfc3339()),
    })
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
        match (req.method().clone(), segments.as_slice()) {
            (Method::GET, ["projects"]) => match self.store.list_projects(&owner).await {
                Ok(ps) => http_json::response(
                    StatusCode::OK,
                    json!({"projects": ps.iter().map(project_json).collect::<Vec<_>>()}),
                ),
                Err(e) => internal(&e),
            },
            (Method::POST, ["projects"]) => self.create_project(&owner, req.body()).await,
            (Method::PUT, ["projects", id]) => self.enable_project(&owner, id, req.body()).await,
            (Method::GET, ["devices"]) => match self.store.list_devices(&owner).await {
                Ok(ds) => http_json::response(
                    StatusCode::OK,
                    json!({"devices": ds.iter().map(device_json).collect::<Vec<_>>()}),
                ),
                Err(e) => internal(&e),
            },
            (Method::POST, ["devices"]) => self.create_device(&owner, req.body()).await,
            (Method::DELETE, ["devices", id]) => match uuid::Uuid::try_parse(id) {
                Err(_) => http_json::error(StatusCode::BAD_REQUEST, "device_id: must be a UUID"),
                Ok(id) => match self.store.revoke_device(&owner, id).await {
                    Ok(true) => http_json::response(StatusCode::OK, json!({"ok": true})),
                    Ok(false) => http_json::error(StatusCode::NOT_FOUND, "device_id: no such device"),
                    Err(e) => internal(&e),
                },
            },
            _ => http_json::error(StatusCode::NOT_FOUND, format!("no route {} {PREFIX}/{path}", req.method())),
        }
    }

    async fn create_project(&self, owner: &OwnerId, bytes: &[u8]) -> http::Response<Bytes> {
        let b: NameBody = match http_json::parse(bytes) {
            Ok(b) => b,
            Err(m) => return http_json::error(StatusCode::BAD_REQUEST, m),
        };
        if let Err(e) = validate_name(&b.name) {
            return http_json::error(StatusCode::BAD_REQUEST, e.to_string());
        }
        match self.store.create_project(owner, &b.name).await {
            Ok(p) => http_json::response(StatusCode::CREATED, project_json(&p)),
            Err(e) => internal(&e),
        }
    }

    async fn enable_project(&self, owner: &OwnerId, id: &str, bytes: &[u8]) -> http::Response<Bytes> {
        let project = match ProjectId::parse("project_id", id) {
            Ok(p) => p,
            Err(e) => return http_json::error(StatusCode::BAD_REQUEST, e.to_string()),
        };
        let b: EnableBody = match http_json::parse(bytes) {
            Ok(b) => b,
            Err(m) => return http_json::error(StatusCode::BAD_REQUEST, m),
        };
        match self.store.set_project_enabled(owner, project, b.enabled).await {
            Ok(Some(p)) => http_json::response(StatusCode::OK, project_json(&p)),
            Ok(None) => http_json::error(StatusCode::NOT_FOUND, "project_id: no such project"),
            Err(e) => internal(&e),
        }
    }

    async fn create_device(&self, owner: &OwnerId, bytes: &[u8]) -> http::Response<Bytes> {
        let b: NameBody = match http_json::parse(bytes) {
            Ok(b) => b,
            Err(m) => return http_json::error(StatusCode::BAD_REQUEST, m),
        };
        if let Err(e) = validate_name(&b.name) {
            return http_json::error(StatusCode::BAD_REQUEST, e.to_string());
        }
        let (token, hash) = match new_token() {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = %e, "no randomness for a device token");
                return http_json::error(StatusCode::SERVICE_UNAVAILABLE, "temporarily unavailable; retry");
            }
        };
        match self.store.create_device(owner, &b.name, &hash).await {
            Ok(d) => {
                let mut v = device_json(&d);
                v["token"] = json!(token);
                v["note"] = json!("The token is shown only now; the server keeps only its sha256.");
                http_json::response(StatusCode::CREATED, v)
            }
            Err(e) => internal(&e),
        }
    }
}
