//! Cognito's hosted `/oauth2/authorize` and `/oauth2/token`, as the cloud shape meets them
//! (moto serves the user pool's API but not the hosted domain).
//!
//! It behaves as a user pool without managed login's resource indicators does, which is what
//! makes the stack's facade necessary: a `resource` parameter is refused (`400` on authorize,
//! `invalid_grant` on the token exchange). Otherwise it checks what Cognito checks — the client
//! exists in the pool (read from moto), the redirect URI is one of its callbacks, each scope is
//! allowed, PKCE S256 — signs the owner in without a page (the person's part is not emulated),
//! and issues access tokens signed with the test key, as [`crate::cloud::access_token`] does.
//! A refresh is answered as Cognito without rotation answers it: new access and ID tokens, no
//! refresh token. Every request it answers is kept in [`HostedUi::seen`] for tests to inspect.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;
use sha2::{Digest, Sha256};

/// A code waiting for its exchange.
struct Grant {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    scope: String,
}

/// The emulated hosted domain.
pub struct HostedUi {
    cognito: aws_sdk_cognitoidentityprovider::Client,
    pool: String,
    codes: Mutex<HashMap<String, Grant>>,
    refresh: Mutex<HashMap<String, (String, String)>>,
    /// Every request answered: `authorize ?query` or `token <form>`, in order.
    pub seen: Mutex<Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn oauth_error(status: StatusCode, code: &str, description: &str) -> Response {
    (status, axum::Json(json!({"error": code, "error_description": description}))).into_response()
}

fn random() -> String {
    URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes())
}

impl HostedUi {
    /// The hosted domain of `pool` on `cognito` (moto).
    pub fn new(cognito: aws_sdk_cognitoidentityprovider::Client, pool: &str) -> Arc<Self> {
        Arc::new(Self {
            cognito,
            pool: pool.to_owned(),
            codes: Mutex::default(),
            refresh: Mutex::default(),
            seen: Mutex::default(),
        })
    }

    /// Its routes.
    pub fn router(self: &Arc<Self>) -> axum::Router {
        axum::Router::new()
            .route("/oauth2/authorize", axum::routing::get(authorize))
            .route("/oauth2/token", axum::routing::post(token))
            .route("/oauth2/revoke", axum::routing::post(revoke))
            .with_state(Arc::clone(self))
    }

    /// The client's callbacks and allowed scopes, if the pool has it.
    async fn client(&self, client_id: &str) -> Option<(Vec<String>, Vec<String>)> {
        let out =
            self.cognito.describe_user_pool_client().user_pool_id(&self.pool).client_id(client_id).send().await.ok()?;
        let c = out.user_pool_client()?;
        Some((c.callback_urls().to_vec(), c.allowed_o_auth_scopes().to_vec()))
    }
}

async fn authorize(State(ui): State<Arc<HostedUi>>, uri: axum::http::Uri) -> Response {
    let q: Vec<(String, String)> =
        url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()).into_owned().collect();
    lock(&ui.seen)
        .push(format!("authorize {}", url::form_urlencoded::Serializer::new(String::new()).extend_pairs(&q).finish()));
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    if get("resource").is_some() {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "resource indicators need managed login");
    }
    let (Some(client_id), Some(redirect_uri)) = (get("client_id"), get("redirect_uri")) else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "client_id and redirect_uri are required");
    };
    let Some((callbacks, allowed)) = ui.client(&client_id).await else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_client", "unknown client");
    };
    if !callbacks.contains(&redirect_uri) {
        return oauth_error(StatusCode::BAD_REQUEST, "redirect_mismatch", "redirect_uri is not a callback");
    }
    let state = get("state").unwrap_or_default();
    let back = |params: &[(&str, &str)]| {
        let mut u = url::Url::parse(&redirect_uri)
            .unwrap_or_else(|_| url::Url::parse("http://invalid/").unwrap_or_else(|e| panic!("{e}")));
        u.query_pairs_mut().extend_pairs(params).append_pair("state", &state);
        Redirect::to(u.as_str()).into_response()
    };
    let scope = get("scope").unwrap_or_else(|| allowed.join(" "));
    if scope.split_whitespace().any(|s| !allowed.iter().any(|a| a == s)) {
        return back(&[("error", "invalid_scope")]);
    }
    if get("code_challenge_method").as_deref() != Some("S256") || get("code_challenge").is_none() {
        return back(&[("error", "invalid_request")]);
    }
    let code = random();
    lock(&ui.codes).insert(
        code.clone(),
        Grant {
            client_id,
            redirect_uri: redirect_uri.clone(),
            challenge: get("code_challenge").unwrap_or_default(),
            scope,
        },
    );
    back(&[("code", code.as_str())])
}

/// `/oauth2/revoke` as Cognito answers it: `200` for a refresh token of that client (revoked),
/// `400 invalid_client` for a client the pool does not have, `200` for any other token (RFC 7009).
async fn revoke(State(ui): State<Arc<HostedUi>>, body: axum::body::Bytes) -> Response {
    let form: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    lock(&ui.seen).push(format!("revoke {}", String::from_utf8_lossy(&body)));
    let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let client_id = get("client_id").unwrap_or_default();
    if ui.client(&client_id).await.is_none() {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_client", "unknown client");
    }
    let mut refresh = lock(&ui.refresh);
    if let Some(token) = get("token")
        && refresh.get(&token).is_some_and(|(c, _)| *c == client_id)
    {
        refresh.remove(&token);
    }
    StatusCode::OK.into_response()
}

async fn token(State(ui): State<Arc<HostedUi>>, body: axum::body::Bytes) -> Response {
    let form: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    lock(&ui.seen).push(format!("token {}", String::from_utf8_lossy(&body)));
    let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    if get("resource").is_some() {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "invalid_grant");
    }
    let client_id = get("client_id").unwrap_or_default();
    let scope = match get("grant_type").as_deref() {
        Some("authorization_code") => {
            let Some(g) = get("code").and_then(|c| lock(&ui.codes).remove(&c)) else {
                return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "unknown code");
            };
            let verifier = get("code_verifier").unwrap_or_default();
            if g.client_id != client_id
                || get("redirect_uri").as_deref() != Some(g.redirect_uri.as_str())
                || URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes())) != g.challenge
            {
                return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "code, client, redirect or verifier");
            }
            g.scope
        }
        Some("refresh_token") => {
            let Some((c, scope)) = get("refresh_token").and_then(|t| lock(&ui.refresh).get(&t).cloned()) else {
                return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "unknown refresh token");
            };
            if c != client_id {
                return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "another client's refresh token");
            }
            scope
        }
        _ => return oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type", "unsupported_grant_type"),
    };
    let access = crate::cloud::access_token(&client_id, &scope);
    let mut answer = json!({
        "access_token": access,
        "id_token": access,
        "token_type": "Bearer",
        "expires_in": 3600,
        "scope": scope,
    });
    // Cognito without rotation: "The token endpoint returns refresh_token only when the
    // grant_type is authorization_code" (token-endpoint.md); the refresh token presented stays
    // valid for its whole life.
    if get("grant_type").as_deref() == Some("authorization_code") {
        let refresh = random();
        lock(&ui.refresh).insert(refresh.clone(), (client_id.clone(), scope.clone()));
        answer["refresh_token"] = json!(refresh);
    }
    axum::Json(answer).into_response()
}
