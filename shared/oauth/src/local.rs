//! The local server's own authorization endpoint and token endpoint, so OAuth-only MCP clients
//! connect to the local stack with nothing pasted but the URL.
//!
//! - `GET /oauth/authorize`: checks the client — registered, or a metadata document fetched
//!   by its URL ([`crate::cimd`]) — and its redirect URI (exactly one it listed, any port on a
//!   listed loopback one; errors before that are shown on a page, never redirected — RFC 6749
//!   §4.1.2.1), requires PKCE `S256`, and shows a one-click consent page for the local owner,
//!   naming a document's client and the host that serves it. The form carries a single-use
//!   anti-forgery token bound to this request (10 minutes).
//! - `POST /oauth/authorize`: Allow → `303` to the redirect URI with a code (single use, 60 s)
//!   plus `state` and `iss` (RFC 9207); Deny → `error=access_denied`.
//! - `POST /oauth/token`: `authorization_code` (client, redirect URI and the PKCE verifier
//!   checked; the code is spent even when a check fails) and `refresh_token`. Access tokens are
//!   the local HS256 tokens (1 hour) naming the registered client; refresh tokens are HS256 too
//!   (30 days), marked `token_use: refresh` so the MCP endpoint never accepts one.
//!
//! Codes and consent requests live in memory: the local server is one process, and losing
//! them on a restart only means clicking Connect again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use domain::clients::Rotation;
use domain::clock::{SharedClock, Timestamp};
use domain::store::{ClientUse, RefreshTokens, RegisterClients};
use http::{HeaderValue, Method, StatusCode, header};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::cimd::{self, Documents};
use crate::{RedirectPolicy, lock, oauth_error};
use auth::{Claims, Grant, Hs256Signer};
use tools::{SCOPE_OWNER, SCOPE_READ, SCOPE_RUN};

/// The authorization endpoint's path.
pub const AUTHORIZE_PATH: &str = "/oauth/authorize";
/// The token endpoint's path.
pub const TOKEN_PATH: &str = "/oauth/token";
/// Where the owner's panel opens an owner session (`POST` with the owner's bearer token): only
/// a browser holding one may answer a consent request.
pub const SESSION_PATH: &str = "/oauth/session";
/// The token revocation endpoint (RFC 7009): revokes a refresh token's whole family.
pub const REVOKE_PATH: &str = "/oauth/revoke";
/// Paths on the origin that answer as [`AUTHORIZE_PATH`] and [`TOKEN_PATH`]: Claude.ai has been
/// reported to call `/authorize` and `/token` on the server's origin whatever the metadata says
/// (anthropics/claude-ai-mcp#962), and they are the cloud facade's paths too.
pub const ORIGIN_ALIASES: &[(&str, &str)] = &[("/authorize", AUTHORIZE_PATH), ("/token", TOKEN_PATH)];
/// The owner-session cookie.
pub const SESSION_COOKIE: &str = "fc_owner";
/// How long an owner session lasts (the panel opens a new one whenever it loads).
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Most owner sessions kept at once.
pub const MAX_SESSIONS: usize = 64;

pub(crate) mod pages;
mod session;

use pages::{bad_page, consent_page, escape, page, redirect};

use session::not_the_owner;
/// How long a consent page stays usable.
pub const CONSENT_TTL: Duration = Duration::from_secs(600);
/// How long an authorization code is valid.
pub const CODE_TTL: Duration = Duration::from_secs(60);
/// Access token lifetime.
pub const ACCESS_TTL: Duration = Duration::from_secs(3600);
/// Refresh token lifetime.
pub const REFRESH_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Most consent requests (and, apart, codes) kept at once. A live one is never dropped to make
/// room: past the bound new requests are refused until some are answered or expire.
pub const MAX_PENDING: usize = 1000;
/// Most consent requests waiting at once for one client: a flood for one client (its id is
/// public) is refused past this, and cannot crowd out the owner's page or other clients'.
pub const MAX_PENDING_PER_CLIENT: usize = 20;

/// A consent request waiting for the owner's click.
#[derive(Debug, Clone)]
struct Pending {
    client_id: String,
    redirect_uri: String,
    /// The authorization request named `redirect_uri` (then the token request must repeat it,
    /// RFC 6749 §4.1.3).
    redirect_given: bool,
    challenge: String,
    scopes: Vec<String>,
    state: Option<String>,
    expires: Timestamp,
}

/// The client behind an authorization request, as the consent page shows it.
struct Asking {
    client_id: String,
    /// From a metadata document: its `client_name` and the host serving it.
    from_document: Option<(String, String)>,
    redirect_uris: Vec<String>,
}

/// The local authorization server.
pub struct LocalAuthServer<R: ?Sized> {
    /// Registered clients (the same registry `/register` writes).
    pub registry: Arc<R>,
    /// Signs local tokens: the secret, the issuer (the local base URL) and the audience of
    /// access tokens (what the local [`auth::Authenticator`] accepts).
    pub signer: Hs256Signer,
    /// The owner every consent is given as.
    pub owner: String,
    /// The MCP URL, the only `resource` (RFC 8707) tokens are issued for.
    pub resource: String,
    /// "Now".
    pub clock: SharedClock,
    /// `Host` values requests may carry (the issuer's, and loopback with the server's port):
    /// anything else is refused before any work, so a page on another origin that resolves to
    /// this machine (DNS rebinding) cannot drive the flow.
    pub allowed_hosts: Vec<String>,
    /// Where client metadata documents come from (`None`: only registered clients).
    pub documents: Option<Arc<Documents>>,
    /// The redirect URIs a metadata document's client may be sent back to (a registered
    /// client's were checked when it registered).
    pub redirects: RedirectPolicy,
    consents: Mutex<HashMap<String, Pending>>,
    codes: Mutex<HashMap<String, Pending>>,
    /// Owner sessions: the cookie's value → until when.
    sessions: Mutex<HashMap<String, Timestamp>>,
}

impl<R: RegisterClients + RefreshTokens + ClientUse + ?Sized> LocalAuthServer<R> {
    /// A server issuing tokens with `signer` for `owner`, only for `resource`.
    pub fn new(registry: Arc<R>, signer: Hs256Signer, owner: &str, resource: &str, clock: SharedClock) -> Self {
        Self {
            registry,
            signer,
            owner: owner.to_owned(),
            resource: resource.to_owned(),
            clock,
            allowed_hosts: Vec::new(),
            documents: None,
            redirects: RedirectPolicy::local(),
            consents: Mutex::new(HashMap::new()),
            codes: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Accepts requests whose `Host` is one of `hosts` only (an empty list accepts any).
    pub fn with_allowed_hosts(mut self, hosts: Vec<String>) -> Self {
        self.allowed_hosts = hosts;
        self
    }

    /// Accepts clients whose `client_id` is a metadata document, fetched through `documents`.
    #[must_use]
    pub fn with_documents(mut self, documents: Arc<Documents>) -> Self {
        self.documents = Some(documents);
        self
    }

    /// Whether `headers` carry an accepted `Host` (also used for `/register` by the local server).
    pub fn host_allowed(&self, headers: &http::HeaderMap) -> bool {
        if self.allowed_hosts.is_empty() {
            return true;
        }
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
        self.allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    /// Answers a request to [`AUTHORIZE_PATH`], [`TOKEN_PATH`] or [`SESSION_PATH`].
    pub async fn handle(&self, req: http::Request<Bytes>) -> http::Response<Bytes> {
        if !self.host_allowed(req.headers()) {
            return page(
                StatusCode::MISDIRECTED_REQUEST,
                "Wrong address",
                "This server does not answer for that host name.",
                None,
            );
        }
        let owner_session = self.owner_session(req.headers());
        let path = req.uri().path();
        let path = ORIGIN_ALIASES.iter().find(|(alias, _)| *alias == path).map_or(path, |(_, p)| *p);
        match (req.method(), path) {
            (&Method::GET, AUTHORIZE_PATH) => {
                self.authorize(req.uri().query().unwrap_or_default(), owner_session).await
            }
            (&Method::POST, AUTHORIZE_PATH) if owner_session => self.consent(req.body()),
            (&Method::POST, AUTHORIZE_PATH) => not_the_owner(),
            (&Method::POST, TOKEN_PATH) => self.token(req.body()).await,
            (&Method::POST, SESSION_PATH) => self.open_session(req.headers()),
            (&Method::POST, REVOKE_PATH) => self.revoke(req.body()).await,
            _ => page(StatusCode::METHOD_NOT_ALLOWED, "Not allowed", "This address does not answer that method.", None),
        }
    }

    /// The client `client_id` names: a metadata document (fetched, [`super::cimd`]) or a
    /// registered client. `Err` is the page to answer.
    async fn client(&self, client_id: &str) -> Result<Asking, http::Response<Bytes>> {
        if cimd::is_document_url(client_id) {
            let Some(documents) = &self.documents else {
                return Err(bad_page("This server does not accept client metadata documents."));
            };
            return match documents.get(client_id).await {
                Ok(d) => Ok(Asking {
                    client_id: d.client_id.clone(),
                    from_document: Some((d.client_name.clone(), d.host.clone())),
                    redirect_uris: d.redirect_uris.clone(),
                }),
                Err(e @ cimd::DocumentError::Invalid { .. }) => {
                    Err(bad_page(&format!("The client cannot be used: {e}.")))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "fetching a client metadata document");
                    Err(page(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "Try again",
                        &escape(&format!("The client's metadata could not be read: {e}.")),
                        None,
                    ))
                }
            };
        }
        match self.registry.get_client(client_id).await {
            Ok(Some(c)) => Ok(Asking { client_id: c.client_id, from_document: None, redirect_uris: c.redirect_uris }),
            Ok(None) => Err(bad_page("This client is not registered here. Remove the connector and add it again.")),
            Err(e) => {
                tracing::error!(error = %domain::errors::ErrorChain(&e), "reading a registered client");
                Err(page(StatusCode::SERVICE_UNAVAILABLE, "Try again", "The server could not read its clients.", None))
            }
        }
    }

    async fn authorize(&self, query: &str, owner_session: bool) -> http::Response<Bytes> {
        let q = form(query.as_bytes());
        let get = |k: &str| q.get(k).map(String::as_str);
        let Some(client_id) = get("client_id") else {
            return bad_page("The request names no client (client_id is missing).");
        };
        let client = match self.client(client_id).await {
            Ok(c) => c,
            Err(page) => return page,
        };
        // A listed loopback redirect admits any port (RFC 8252 §7.3); a document's must also be
        // one this server allows at all (as a registration's is when it registers).
        let redirect_uri = match get("redirect_uri") {
            Some(u) if client.redirect_uris.iter().any(|r| cimd::redirect_matches(r, u)) => {
                if client.from_document.is_some()
                    && let Err(rule) = self.redirects.check(u)
                {
                    return bad_page(&format!("redirect_uri: {rule}."));
                }
                u.to_owned()
            }
            Some(_) => return bad_page("redirect_uri is not one this client registered."),
            None if client.redirect_uris.len() == 1 => client.redirect_uris[0].clone(),
            None => return bad_page("redirect_uri is required: this client registered several."),
        };
        let state = get("state").map(str::to_owned);
        let fail = |code: &str, description: &str| {
            redirect(
                &redirect_uri,
                &[("error", code), ("error_description", description)],
                state.as_deref(),
                &self.signer.issuer,
            )
        };
        if get("response_type") != Some("code") {
            return fail("unsupported_response_type", "response_type must be code");
        }
        let challenge = match (get("code_challenge"), get("code_challenge_method")) {
            (Some(c), Some("S256")) if (43..=128).contains(&c.len()) => c.to_owned(),
            _ => return fail("invalid_request", "PKCE is required: code_challenge with code_challenge_method S256"),
        };
        if let Some(r) = get("resource")
            && r.trim_end_matches('/') != self.resource
        {
            return fail("invalid_target", "resource must be this server's MCP URL");
        }
        let scopes = match granted_scopes(get("scope")) {
            Ok(s) => s,
            Err(m) => return fail("invalid_scope", &m),
        };
        if !owner_session {
            return not_the_owner();
        }
        let now = self.clock.now();
        let pending = Pending {
            client_id: client.client_id.clone(),
            redirect_given: get("redirect_uri").is_some(),
            redirect_uri,
            challenge,
            scopes,
            state,
            expires: now.plus(CONSENT_TTL),
        };
        let csrf = random_token();
        if !insert_bounded(&self.consents, csrf.clone(), pending.clone(), now) {
            return page(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many sign-in requests",
                "Too many sign-in requests for this application are waiting. Answer one, or try again when they expire (10 minutes).",
                None,
            );
        }
        consent_page(&client, &pending, &csrf, &self.owner)
    }

    fn consent(&self, body: &[u8]) -> http::Response<Bytes> {
        let f = form(body);
        let now = self.clock.now();
        let pending = f.get("csrf").and_then(|c| lock(&self.consents).remove(c)).filter(|p| p.expires > now);
        let Some(p) = pending else {
            return bad_page(
                "This sign-in request has expired or was already answered. Start again from your MCP client.",
            );
        };
        if f.get("decision").map(String::as_str) != Some("allow") {
            return redirect(&p.redirect_uri, &[("error", "access_denied")], p.state.as_deref(), &self.signer.issuer);
        }
        let code = random_token();
        let mut granted = p.clone();
        granted.expires = now.plus(CODE_TTL);
        if !insert_bounded(&self.codes, code.clone(), granted, now) {
            return redirect(
                &p.redirect_uri,
                &[("error", "temporarily_unavailable")],
                p.state.as_deref(),
                &self.signer.issuer,
            );
        }
        redirect(&p.redirect_uri, &[("code", &code)], p.state.as_deref(), &self.signer.issuer)
    }

    async fn token(&self, body: &[u8]) -> http::Response<Bytes> {
        let f = form(body);
        let get = |k: &str| f.get(k).map(String::as_str);
        let Some(client_id) = get("client_id") else {
            return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "client_id is required");
        };
        // RFC 8707: a token is only ever for this server's MCP URL.
        if let Some(r) = get("resource")
            && r.trim_end_matches('/') != self.resource
        {
            return oauth_error(StatusCode::BAD_REQUEST, "invalid_target", "resource must be this server's MCP URL");
        }
        match get("grant_type") {
            Some("authorization_code") => {
                let spent = get("code").and_then(|c| lock(&self.codes).remove(c));
                let Some(p) = spent.filter(|p| p.expires > self.clock.now()) else {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_grant",
                        "the code is unknown, used or expired",
                    );
                };
                if p.client_id != client_id {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_grant",
                        "the code was issued to another client",
                    );
                }
                match get("redirect_uri") {
                    Some(u) if u != p.redirect_uri => {
                        return oauth_error(
                            StatusCode::BAD_REQUEST,
                            "invalid_grant",
                            "redirect_uri does not match the authorization request",
                        );
                    }
                    None if p.redirect_given => {
                        return oauth_error(
                            StatusCode::BAD_REQUEST,
                            "invalid_grant",
                            "redirect_uri is required: the authorization request had one",
                        );
                    }
                    _ => {}
                }
                let Some(verifier) = get("code_verifier").filter(|v| valid_verifier(v)) else {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_request",
                        "code_verifier is required (43-128 unreserved characters)",
                    );
                };
                if URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes())) != p.challenge {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_grant",
                        "code_verifier does not match the code_challenge",
                    );
                }
                // A new sign-in starts a new family of refresh tokens.
                let family = random_token();
                let token = random_token();
                let expires = self.clock.now().plus(REFRESH_TTL);
                if let Err(e) = self.registry.start_family(&family, &token, expires).await {
                    tracing::error!(error = %domain::errors::ErrorChain(&e), "starting a refresh-token family");
                    return oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later");
                }
                if let Err(e) = self.registry.mark_client_used(client_id).await {
                    tracing::error!(error = %domain::errors::ErrorChain(&e), "recording a client's use");
                    return oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later");
                }
                self.chat_connected(client_id).await;
                self.issue(client_id, &p.scopes, &format!("{family}.{token}"))
            }
            Some("refresh_token") => {
                let Some(claims) = get("refresh_token").and_then(|t| self.verify_refresh(t)) else {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_grant",
                        "the refresh token is invalid or expired",
                    );
                };
                if claims.client_id.as_deref() != Some(client_id) {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_grant",
                        "the refresh token was issued to another client",
                    );
                }
                let still_there = if cimd::is_document_url(client_id) {
                    self.client(client_id).await.map(|_| Some(())).map_err(|_| ())
                } else {
                    self.registry.get_client(client_id).await.map(|c| c.map(drop)).map_err(|e| {
                        tracing::error!(error = %domain::errors::ErrorChain(&e), "reading a registered client");
                    })
                };
                match still_there {
                    Ok(Some(())) => {}
                    Ok(None) => {
                        return oauth_error(
                            StatusCode::BAD_REQUEST,
                            "invalid_grant",
                            "the client is no longer registered",
                        );
                    }
                    Err(()) => {
                        return oauth_error(
                            StatusCode::BAD_REQUEST,
                            "invalid_grant",
                            "the client is no longer registered, or its metadata document cannot be read",
                        );
                    }
                }
                // Rotation with reuse detection (RFC 9700 §4.14): each refresh token works once;
                // one used again revokes its whole family.
                let Some((family, token)) = claims.jti.as_deref().and_then(|j| j.split_once('.')) else {
                    return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "the refresh token is revoked");
                };
                // The rotated token will live REFRESH_TTL from now: the client's last use moves with it
                // (or the registrar could count a client idle while its token works), recorded before
                // the rotation so a failure here leaves the presented token usable for a retry.
                if let Err(e) = self.registry.mark_client_used(client_id).await {
                    tracing::error!(error = %domain::errors::ErrorChain(&e), "recording a client's use");
                    return oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later");
                }
                let next = random_token();
                match self.registry.rotate(family, token, &next).await {
                    Ok(Rotation::Rotated) => {}
                    Ok(Rotation::Reused) => {
                        tracing::warn!(client = client_id, "a used refresh token came back: its family is revoked");
                        return oauth_error(
                            StatusCode::BAD_REQUEST,
                            "invalid_grant",
                            "the refresh token was used already: every token of this sign-in is revoked; sign in again",
                        );
                    }
                    Ok(Rotation::Revoked) => {
                        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "the refresh token is revoked");
                    }
                    Err(e) => {
                        tracing::error!(error = %domain::errors::ErrorChain(&e), "rotating a refresh token");
                        return oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later");
                    }
                }
                let scopes: Vec<String> =
                    claims.scope.unwrap_or_default().split_whitespace().map(str::to_owned).collect();
                self.chat_connected(client_id).await;
                self.issue(client_id, &scopes, &format!("{family}.{next}"))
            }
            _ => oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "grant_type must be authorization_code or refresh_token",
            ),
        }
    }

    /// RFC 7009: revokes the family of a refresh token; answers 200 whatever the token was (an
    /// unknown or invalid one included), so the endpoint tells nothing about tokens.
    async fn revoke(&self, body: &[u8]) -> http::Response<Bytes> {
        let f = form(body);
        if let Some(claims) = f.get("token").and_then(|t| self.verify_refresh(t))
            && let Some((family, _)) = claims.jti.as_deref().and_then(|j| j.split_once('.'))
            && let Err(e) = self.registry.revoke_family(family).await
        {
            tracing::error!(error = %domain::errors::ErrorChain(&e), "revoking a refresh-token family");
            return oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later");
        }
        let mut r = http::Response::new(Bytes::new());
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r
    }

    /// Records that a chat connected for the local owner (a sign-in or a refresh). Only a fact
    /// for the panel: a failure is logged, and the tokens are issued all the same.
    async fn chat_connected(&self, client_id: &str) {
        let Ok(owner) = domain::ids::OwnerId::new(self.owner.clone()) else { return };
        if let Err(e) = self.registry.mark_chat_connected(&owner, client_id, None).await {
            tracing::error!(error = %domain::errors::ErrorChain(&e), "recording a chat's connection");
        }
    }

    /// Tokens for `client_id`: an access token, and the refresh token `jti` (`<family>.<token>`).
    fn issue(&self, client_id: &str, scopes: &[String], jti: &str) -> http::Response<Bytes> {
        let now = self.clock.now();
        let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
        // The access token names the resource it is for (RFC 8707) beside the local audience.
        let access = self.signer.mint_for(
            Grant { subject: &self.owner, client: client_id, scopes: &scope_refs },
            Some(&self.resource),
            now,
            ACCESS_TTL,
        );
        let refresh_claims = Claims {
            iss: self.signer.issuer.clone(),
            sub: self.owner.clone(),
            aud: Some(json!(self.refresh_audience())),
            client_id: Some(client_id.to_owned()),
            azp: None,
            scope: Some(scopes.join(" ")),
            exp: now.plus(REFRESH_TTL).as_epoch_seconds(),
            nbf: None,
            token_use: Some("refresh".into()),
            jti: Some(jti.to_owned()),
        };
        auth::jwt_crypto::install();
        let refresh = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &refresh_claims,
            &EncodingKey::from_secret(&self.signer.secret),
        );
        match (access, refresh) {
            (Ok(access), Ok(refresh)) => {
                let mut r = http_util::http_json::response(
                    StatusCode::OK,
                    json!({
                        "access_token": access,
                        "token_type": "Bearer",
                        "expires_in": ACCESS_TTL.as_secs(),
                        "refresh_token": refresh,
                        "scope": scopes.join(" "),
                    }),
                );
                r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                r
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "signing a local token");
                oauth_error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "could not sign the token")
            }
        }
    }

    fn refresh_audience(&self) -> String {
        format!("{}#refresh", self.signer.audience)
    }

    fn verify_refresh(&self, token: &str) -> Option<Claims> {
        let mut v = Validation::new(Algorithm::HS256);
        v.validate_exp = false;
        v.set_issuer(&[&self.signer.issuer]);
        v.set_audience(&[self.refresh_audience()]);
        auth::jwt_crypto::install();
        let claims =
            jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_secret(&self.signer.secret), &v).ok()?.claims;
        (claims.token_use.as_deref() == Some("refresh") && claims.exp > self.clock.now().as_epoch_seconds())
            .then_some(claims)
    }
}

/// The scopes a request may be granted: read and run (either spelling) from `scope`, or both
/// when it asks for none; the owner scope and unknown scopes are refused, OpenID's ignored.
fn granted_scopes(scope: Option<&str>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for s in scope.unwrap_or_default().split_whitespace() {
        let product = s.replacen("osfoundry/", "osfoundry:", 1);
        if product == SCOPE_OWNER {
            return Err(format!("{s} is the owner's and cannot be granted to a connected client"));
        }
        // Any other scope (OpenID's, `offline_access`, a host's own) is ignored, never refused.
        if (product == SCOPE_READ || product == SCOPE_RUN) && !out.contains(&product) {
            out.push(product);
        }
    }
    if out.is_empty() {
        out = vec![SCOPE_READ.to_owned(), SCOPE_RUN.to_owned()];
    }
    Ok(out)
}

/// RFC 7636 §4.1: 43–128 characters of `[A-Za-z0-9-._~]`.
fn valid_verifier(v: &str) -> bool {
    (43..=128).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

fn form(body: &[u8]) -> HashMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

/// Inserts after dropping expired entries — never a live one: `false` (nothing inserted) when
/// [`MAX_PENDING`] live entries are kept, or [`MAX_PENDING_PER_CLIENT`] for this client.
fn insert_bounded(m: &Mutex<HashMap<String, Pending>>, key: String, value: Pending, now: Timestamp) -> bool {
    let mut m = lock(m);
    m.retain(|_, p| p.expires > now);
    let same_client = m.values().filter(|p| p.client_id == value.client_id).count();
    if m.len() >= MAX_PENDING || same_client >= MAX_PENDING_PER_CLIENT {
        return false;
    }
    m.insert(key, value);
    true
}

fn random_token() -> String {
    let mut b = [0u8; 32];
    if getrandom::fill(&mut b).is_err() {
        // No randomness: a UUIDv4 (also from the OS) is the fallback; it never happens on Linux.
        return uuid::Uuid::new_v4().simple().to_string();
    }
    URL_SAFE_NO_PAD.encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_default_to_read_and_run_and_never_include_owner() {
        assert_eq!(granted_scopes(None).unwrap(), vec![SCOPE_READ, SCOPE_RUN]);
        assert_eq!(granted_scopes(Some("osfoundry/read openid")).unwrap(), vec![SCOPE_READ]);
        assert!(granted_scopes(Some("osfoundry:owner")).unwrap_err().contains("owner"));
        // A host's own scope is ignored, never refused.
        assert_eq!(granted_scopes(Some("claudeai")).unwrap(), vec![SCOPE_READ, SCOPE_RUN]);
    }

    #[test]
    fn verifiers_follow_rfc_7636() {
        assert!(valid_verifier(&"a".repeat(43)));
        assert!(valid_verifier(&"a".repeat(128)), "128 characters is the upper bound, allowed");
        assert!(valid_verifier(&"A-._~9".repeat(20)));
        assert!(!valid_verifier(&"a".repeat(42)));
        assert!(!valid_verifier(&"a".repeat(129)));
        assert!(!valid_verifier(&format!("{}+", "a".repeat(43))));
    }
}
