//! The cloud's `/authorize` and `/token`: a thin facade in front of Cognito's hosted endpoints
//! that speaks RFC 8707 for it.
//!
//! MCP clients send `resource=<the MCP URL>` on the authorization and the token request (MCP
//! authorization spec, RFC 8707). Cognito accepts resource indicators only with managed login on
//! the Essentials/Plus tiers and a resource server whose identifier is that URL; otherwise it
//! answers `400` on authorize and `invalid_grant` on the token exchange. So the stack's metadata
//! names these two endpoints, which:
//!
//! - check each `resource` given is this stack's MCP URL (`invalid_target` otherwise, RFC 8707
//!   §2) and drop it;
//! - rewrite `scope` to what Cognito grants ([`forwarded_scope`]): the read and run scopes in
//!   Cognito's spelling (either spelling accepted); `offline_access` dropped (refresh tokens are
//!   always issued); `openid`, `profile` and `email` dropped — this authorization server is not
//!   an OpenID provider (it serves no OpenID discovery, and an ID token from Cognito would name
//!   Cognito's issuer, not this one), and RFC 6749 §3.3 lets a server grant less than asked, so
//!   a client asking for them gets its access and refresh tokens instead of `invalid_scope`;
//!   anything else is passed on for Cognito to refuse;
//! - `/authorize`: check the client — a registered app client, or a Client ID Metadata Document
//!   fetched by its URL ([`crate::cimd`], with one app client per document, `clients`) — and
//!   its redirect URI (one it listed; any port on a listed loopback one, RFC 8252 §7.3), require
//!   PKCE `S256`, keep the request under a fresh `state` ([`AuthorizationFlows`], 10 minutes)
//!   and redirect (302) to Cognito's `/oauth2/authorize` with the app client and the facade's own
//!   callback ([`CALLBACK_PATH`]) in place of the client's: Cognito matches callbacks exactly,
//!   and could never take a loopback redirect on a port chosen at run time;
//! - [`CALLBACK_PATH`]: take the request back (once), bind Cognito's code to the client and the
//!   redirect URI it asked for, and send the client back there with the code, its own `state`
//!   and `iss` (RFC 9207) — errors too;
//! - `/token`: take the code's binding (once), check the same client and redirect URI come with
//!   it (so a code cannot be replayed to another redirect or client), put the app client and the
//!   callback back, post the form to Cognito's `/oauth2/token` and answer what it answers.
//!
//! App clients made before the facade owned the callback (without it among their callbacks)
//! are refused at `/authorize` with a message that says to remove the connector and add it
//! again (a new registration gets the facade's callback, and so `iss`); their refresh tokens
//! keep working until they expire.
//!
//! A refresh answer always carries a refresh token: Cognito (without rotation, which
//! `REFRESH_TOKEN_AUTH` rules out) answers a refresh with new access and ID tokens only, and
//! clients that replace their token set with the answer (the Python SDK 1.x) would drop their
//! refresh token and need a browser again an hour later. The facade hands back the one
//! presented, which stays valid for its whole life (30 days) — rotation would need Cognito's
//! rotation feature, which the refresh flow every app client must keep rules out.
//!
//! Tokens stay Cognito's: nothing is issued or signed here. A successful exchange records that
//! the client was used ([`ClientUse`]), so registrations nobody completed can be removed, and —
//! for a connector token — that a chat connected for the token's owner ([`connector_owner`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use domain::clock::SharedClock;
use domain::store::{AuthorizationFlows, ClientUse, MetadataClients, RegisterClients};
use http::{HeaderValue, Method, StatusCode, header};
use serde::{Deserialize, Serialize};

use crate::cimd::{Documents, is_document_url, redirect_matches};
use crate::{RedirectPolicy, media_type_is, oauth_error};
use auth::ScopeSpelling;
use tools::{SCOPE_READ, SCOPE_RUN};

mod clients;

use clients::Listed;

/// The facade's authorization endpoint (a path of this stack).
pub const AUTHORIZE_PATH: &str = "/authorize";
/// The facade's token endpoint.
pub const TOKEN_PATH: &str = "/token";
/// The facade's revocation endpoint (RFC 7009): Cognito's, with a document's app client.
pub const REVOKE_PATH: &str = "/revoke";
/// Largest token request body.
pub const MAX_TOKEN_REQUEST_BYTES: usize = 16 * 1024;
/// How long a token request may wait for Cognito (under the function's timeout).
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(10);

/// `scope` as Cognito should see it: read and run in `spelling`, every other scope dropped
/// (RFC 6749 §3.3: the server may grant less than asked; unknown scopes are never refused).
/// `None` when nothing is left: Cognito then grants the client's allowed scopes.
pub fn forwarded_scope(scope: &str, spelling: &ScopeSpelling) -> Option<String> {
    let mut out: Vec<String> = Vec::new();
    for s in scope.split_whitespace() {
        // `osfoundry:read` (the product's spelling) and `osfoundry/read` (Cognito's) alike.
        let product = s.replacen("osfoundry/", "osfoundry:", 1);
        let forwarded = if product == SCOPE_READ || product == SCOPE_RUN {
            spelling.spell(&product)
        } else {
            continue;
        };
        if !out.contains(&forwarded) {
            out.push(forwarded);
        }
    }
    (!out.is_empty()).then(|| out.join(" "))
}

/// Why a request is refused before anything is forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The OAuth error code (`invalid_target`, `invalid_request`).
    pub code: &'static str,
    /// What is wrong, naming the parameter.
    pub description: String,
}

/// The parameters to forward: every pair of `pairs` except `resource` (each checked against
/// `resources`), with `scope` rewritten by [`forwarded_scope`] (left out when nothing is left).
///
/// # Errors
/// A `resource` that is not one of `resources` (`invalid_target`), or a parameter given twice
/// that OAuth allows once (`invalid_request`, RFC 6749 §3.1).
pub fn forwarded_params(
    pairs: &[(String, String)],
    resources: &[String],
    spelling: &ScopeSpelling,
) -> Result<Vec<(String, String)>, Refused> {
    let mut out = Vec::with_capacity(pairs.len());
    let mut seen: Vec<&str> = Vec::new();
    for (k, v) in pairs {
        if k == "resource" {
            if !resources.iter().any(|r| r.trim_end_matches('/') == v.trim_end_matches('/')) {
                return Err(Refused {
                    code: "invalid_target",
                    description: format!("resource: must be this server's MCP URL ({})", resources.join(" or ")),
                });
            }
            continue;
        }
        if seen.contains(&k.as_str()) {
            return Err(Refused { code: "invalid_request", description: format!("{k}: given more than once") });
        }
        seen.push(k);
        if k == "scope" {
            if let Some(scope) = forwarded_scope(v, spelling) {
                out.push((k.clone(), scope));
            }
            continue;
        }
        out.push((k.clone(), v.clone()));
    }
    Ok(out)
}

fn encode(params: &[(String, String)]) -> String {
    url::form_urlencoded::Serializer::new(String::new()).extend_pairs(params).finish()
}

/// The callback the facade owns (a path of the stack's own URL): Cognito always returns here.
pub const CALLBACK_PATH: &str = "/oauth/callback";
/// The facade's callback under `public_url`: every app client it drives has it in Cognito.
pub fn callback_url(public_url: &str) -> String {
    format!("{}{CALLBACK_PATH}", public_url.trim_end_matches('/'))
}

/// How long an authorization request may wait for Cognito's answer (the person signing in).
pub const FLOW_TTL: Duration = Duration::from_secs(600);
/// How long a code handed on may wait for its exchange (Cognito's codes live 5 minutes).
pub const CODE_TTL: Duration = Duration::from_secs(300);
/// Default most app clients made for metadata documents.
pub const DEFAULT_DOCUMENT_CLIENT_CAP: usize = 200;
/// How app clients made for metadata documents are named (never a registration's `dcr-`).
pub const DOCUMENT_CLIENT_PREFIX: &str = "cimd ";

/// An authorization request waiting for Cognito's answer (kept under its own `state`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pending {
    /// The `client_id` the client sent (a registered id, or its document's URL).
    client_id: String,
    /// The app client Cognito saw.
    app_client: String,
    /// Where the client asked to be sent back.
    redirect_uri: String,
    /// The request named `redirect_uri` (then the token request must repeat it).
    redirect_given: bool,
    /// The client's own `state`.
    state: Option<String>,
    /// The issuer the client discovered (the API's URL or a custom domain's).
    issuer: String,
    /// The redirect is not vouched for ([`RedirectPolicy::vouched`]): the owner was shown where
    /// the code goes, and the callback must come back to the browser that saw it.
    #[serde(default)]
    confirm: bool,
}

/// What the facade holds, beside Cognito's hosted domain.
pub struct FacadeParts {
    /// Cognito's hosted domain, `https://<prefix>.auth.<region>.amazoncognito.com`.
    pub upstream: String,
    /// The stack's own URL: the callback is `{public_url}`[`CALLBACK_PATH`].
    pub public_url: String,
    /// The MCP URLs a `resource` may name (the API's own, custom domains').
    pub resources: Vec<String>,
    /// How Cognito spells the scopes.
    pub scopes: ScopeSpelling,
    /// Where each client's first token is recorded.
    pub usage: Option<Arc<dyn ClientUse>>,
    /// The pool's app clients.
    pub clients: Arc<dyn RegisterClients>,
    /// The pending requests and bound codes.
    pub flows: Arc<dyn AuthorizationFlows>,
    /// The app client of each metadata document.
    pub document_clients: Arc<dyn MetadataClients>,
    /// Where metadata documents are fetched (`None`: only registered clients).
    pub documents: Option<Arc<Documents>>,
    /// Where a metadata document's client may be sent back to.
    pub redirects: RedirectPolicy,
    /// Most app clients made for metadata documents.
    pub document_client_cap: usize,
    /// "Now".
    pub clock: SharedClock,
}

/// The facade in front of one Cognito domain.
pub struct Facade {
    parts: FacadeParts,
    callback: String,
    http: reqwest::Client,
    /// Document URL → app client, as recorded (never changes once recorded).
    known: Mutex<HashMap<String, String>>,
}

impl Facade {
    /// A facade over `parts`.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(mut parts: FacadeParts) -> Result<Self, reqwest::Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http =
            reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).timeout(UPSTREAM_TIMEOUT).build()?;
        parts.upstream = parts.upstream.trim_end_matches('/').to_owned();
        let callback = callback_url(&parts.public_url);
        Ok(Self { parts, callback, http, known: Mutex::new(HashMap::new()) })
    }

    /// The callback URL every app client the facade drives must have.
    pub fn callback(&self) -> &str {
        &self.callback
    }

    /// Answers `GET /authorize`, `GET` [`CALLBACK_PATH`] or `POST /token`; `None` for any
    /// other path.
    pub async fn handle(&self, req: &http::Request<Bytes>) -> Option<http::Response<Bytes>> {
        match req.uri().path() {
            AUTHORIZE_PATH => Some(self.authorize(req).await),
            CALLBACK_PATH => Some(self.callback_answer(req).await),
            TOKEN_PATH => Some(self.token(req, "/oauth2/token").await),
            REVOKE_PATH => Some(self.token(req, "/oauth2/revoke").await),
            _ => None,
        }
    }

    /// The issuer the client discovered: the base of the resource on the request's host, else
    /// the stack's own URL.
    fn issuer_for(&self, headers: &http::HeaderMap) -> String {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
        self.parts
            .resources
            .iter()
            .filter_map(|r| r.trim_end_matches('/').strip_suffix("/mcp"))
            .find(|base| base.split_once("://").is_some_and(|(_, h)| h.eq_ignore_ascii_case(host)))
            .map_or_else(|| self.parts.public_url.trim_end_matches('/').to_owned(), str::to_owned)
    }

    async fn authorize(&self, req: &http::Request<Bytes>) -> http::Response<Bytes> {
        if req.method() != Method::GET {
            return not_allowed("GET");
        }
        let pairs: Vec<(String, String)> =
            url::form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes()).into_owned().collect();
        // Errors before the redirect URI is checked are answered here, not redirected:
        // redirecting to an unchecked one is an open redirect (RFC 6749 §4.1.2.1).
        let mut params = match forwarded_params(&pairs, &self.parts.resources, &self.parts.scopes) {
            Ok(p) => p,
            Err(r) => return oauth_error(StatusCode::BAD_REQUEST, r.code, &r.description),
        };
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let Some(client_id) = get("client_id") else {
            return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "client_id: required");
        };
        let (listed, document) = match self.listed_redirects(&client_id).await {
            Ok(Listed::Owned(uris)) => (uris, None),
            Ok(Listed::Document(d)) => (d.redirect_uris.clone(), Some(d)),
            // An app client made before the facade owned the callback: its sign-ins would carry
            // no `iss` and Cognito's exact-port checks. A new registration fixes both.
            Ok(Listed::Legacy) => {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_client",
                    "client_id: this client was registered by an older version of this server; remove the connector and add it again",
                );
            }
            Err(answer) => return answer,
        };
        let given = get("redirect_uri");
        let redirect_uri = match &given {
            Some(u) if listed.iter().any(|l| redirect_matches(l, u)) => u.clone(),
            Some(_) => {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "redirect_uri: not one this client registered or its metadata document lists",
                );
            }
            None if listed.len() == 1 => listed[0].clone(),
            None => {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "redirect_uri: required (several are listed)",
                );
            }
        };
        if document.is_some()
            && let Err(rule) = self.parts.redirects.check(&redirect_uri)
        {
            return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", &format!("redirect_uri: {rule}"));
        }
        let issuer = self.issuer_for(req.headers());
        let state = get("state");
        // From here on the redirect URI is the client's own: errors go back to it, with `iss`.
        let fail = |code: &str, description: &str| {
            back_to(&redirect_uri, &[("error", code), ("error_description", description)], state.as_deref(), &issuer)
        };
        if get("response_type").as_deref() != Some("code") {
            return fail("unsupported_response_type", "response_type must be code");
        }
        if get("code_challenge_method").as_deref() != Some("S256") || get("code_challenge").is_none() {
            return fail("invalid_request", "PKCE is required: code_challenge with code_challenge_method S256");
        }
        let app_client = match &document {
            Some(d) => match self.app_client_for(d).await {
                Ok(id) => id,
                Err(answer) => return fail("temporarily_unavailable", &answer),
            },
            None => client_id.clone(),
        };
        let key = random_key();
        let confirm = !self.parts.redirects.vouched(&redirect_uri);
        let pending = Pending {
            client_id: client_id.clone(),
            app_client: app_client.clone(),
            redirect_uri: redirect_uri.clone(),
            redirect_given: given.is_some(),
            state: state.clone(),
            issuer: issuer.clone(),
            confirm,
        };
        let Ok(record) = serde_json::to_string(&pending) else {
            return fail("server_error", "could not record the request");
        };
        let expires = self.parts.clock.now().plus(FLOW_TTL);
        match self.parts.flows.begin_flow(&format!("a.{key}"), &record, expires).await {
            Ok(true) => {}
            Ok(false) | Err(_) => return fail("temporarily_unavailable", "retry later"),
        }
        for (k, v) in &mut params {
            match k.as_str() {
                "client_id" => v.clone_from(&app_client),
                "redirect_uri" => v.clone_from(&self.callback),
                "state" => v.clone_from(&key),
                _ => {}
            }
        }
        if given.is_none() {
            params.push(("redirect_uri".into(), self.callback.clone()));
        }
        if state.is_none() {
            params.push(("state".into(), key.clone()));
        }
        let sign_in = format!("{}/oauth2/authorize?{}", self.parts.upstream, encode(&params));
        if !confirm {
            return found(&sign_in);
        }
        let who = match &document {
            Some(d) => format!("{} (described by {})", d.client_name, d.host),
            None => format!("A registered MCP client ({client_id})"),
        };
        self.confirm_page(&who, &redirect_uri, &sign_in, &key)
    }

    /// The page shown before Cognito's sign-in when the redirect is not vouched for: it names
    /// the client and where the code will go, links to the sign-in, and sets a cookie that binds
    /// this sign-in to this browser (checked at the callback), so a sign-in link taken from
    /// this page and sent to someone else sends no code anywhere.
    fn confirm_page(&self, who: &str, redirect_uri: &str, sign_in: &str, key: &str) -> http::Response<Bytes> {
        use crate::local::pages::{escape, page};
        let destination = RedirectPolicy::destination(redirect_uri);
        let body = format!(
            "<p><strong>{who}</strong> asks to use your foundry-connect tools. After you sign in, \
             the sign-in code goes to <code>{destination}</code>.</p><p>Continue only if you \
             started this from that application.</p><p><a href=\"{sign_in}\">Continue to sign in</a></p>",
            who = escape(who),
            destination = escape(&destination),
            sign_in = escape(sign_in),
        );
        let mut r = page(StatusCode::OK, "Connect an MCP client", &body, None);
        let secure = if self.callback.starts_with("https://") { "; Secure" } else { "" };
        let cookie = format!(
            "{}={key}; Path={CALLBACK_PATH}; Max-Age={}; HttpOnly; SameSite=Lax{secure}",
            flow_cookie(key),
            FLOW_TTL.as_secs()
        );
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            r.headers_mut().insert(header::SET_COOKIE, v);
        }
        r
    }

    /// Cognito's answer: the pending request it belongs to is taken (once), and the client sent
    /// back to its own redirect URI with the code (bound to that URI), its `state` and `iss`.
    async fn callback_answer(&self, req: &http::Request<Bytes>) -> http::Response<Bytes> {
        if req.method() != Method::GET {
            return not_allowed("GET");
        }
        let q: HashMap<String, String> =
            url::form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes()).into_owned().collect();
        let taken = match q.get("state") {
            Some(key) => self.parts.flows.take_flow(&format!("a.{key}")).await,
            None => Ok(None),
        };
        let pending = match taken {
            Ok(Some(record)) => serde_json::from_str::<Pending>(&record).ok(),
            Ok(None) => None,
            Err(e) => {
                tracing::error!(error = %domain::errors::ErrorChain(&e), "taking an authorization flow");
                return oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later");
            }
        };
        let Some(p) = pending else {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "this sign-in expired or was already used: start again from the MCP client",
            );
        };
        if p.confirm {
            let key = q.get("state").map(String::as_str).unwrap_or_default();
            let bound = req.headers().get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).any(|c| {
                c.split(';').filter_map(|kv| kv.trim().split_once('=')).any(|(k, v)| k == flow_cookie(key) && v == key)
            });
            if !bound {
                // Nothing goes to the client: this sign-in was not started in this browser.
                tracing::warn!(client_id = %p.client_id, "a sign-in came back to a browser that did not start it");
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "this sign-in was started in another browser: start again from your MCP client",
                );
            }
        }
        if let Some(error) = q.get("error") {
            let mut params = vec![("error", error.as_str())];
            if let Some(d) = q.get("error_description") {
                params.push(("error_description", d));
            }
            return back_to(&p.redirect_uri, &params, p.state.as_deref(), &p.issuer);
        }
        let Some(code) = q.get("code") else {
            return back_to(&p.redirect_uri, &[("error", "server_error")], p.state.as_deref(), &p.issuer);
        };
        let bound = serde_json::to_string(&p).unwrap_or_default();
        let expires = self.parts.clock.now().plus(CODE_TTL);
        match self.parts.flows.begin_flow(&code_key(code), &bound, expires).await {
            Ok(true) => back_to(&p.redirect_uri, &[("code", code)], p.state.as_deref(), &p.issuer),
            Ok(false) | Err(_) => {
                back_to(&p.redirect_uri, &[("error", "temporarily_unavailable")], p.state.as_deref(), &p.issuer)
            }
        }
    }

    /// `POST /token` (to Cognito's `upstream_path` `/oauth2/token`) or `POST /revoke` (to
    /// `/oauth2/revoke`): the same checks and translation ([`Self::translate`]), Cognito's answer.
    async fn token(&self, req: &http::Request<Bytes>, upstream_path: &str) -> http::Response<Bytes> {
        if req.method() != Method::POST {
            return not_allowed("POST");
        }
        if !media_type_is(req.headers(), "application/x-www-form-urlencoded") {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "Content-Type: must be application/x-www-form-urlencoded",
            );
        }
        if req.body().len() > MAX_TOKEN_REQUEST_BYTES {
            return oauth_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request",
                &format!("body: at most {MAX_TOKEN_REQUEST_BYTES} bytes"),
            );
        }
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(req.body()).into_owned().collect();
        let mut params = match forwarded_params(&pairs, &self.parts.resources, &self.parts.scopes) {
            Ok(p) => p,
            Err(r) => return oauth_error(StatusCode::BAD_REQUEST, r.code, &r.description),
        };
        if let Err(answer) = self.translate(&mut params).await {
            return answer;
        }
        let mut upstream = self
            .http
            .post(format!("{}{upstream_path}", self.parts.upstream))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(encode(&params));
        // A confidential client authenticates with HTTP Basic; pass it on untouched.
        if let Some(auth) = req.headers().get(header::AUTHORIZATION) {
            upstream = upstream.header(header::AUTHORIZATION, auth.clone());
        }
        let answer = match upstream.send().await {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "the token request to Cognito failed");
                return oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later");
            }
        };
        let status = answer.status();
        let content_type = answer.headers().get(header::CONTENT_TYPE).cloned();
        let body = match answer.bytes().await {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "reading Cognito's token answer failed");
                return oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later");
            }
        };
        if status.is_success() && upstream_path == "/oauth2/token" {
            // The client as it named itself (a metadata document's URL, not its app client).
            let asked = pairs.iter().find(|(k, _)| k == "client_id").map(|(_, v)| v.as_str());
            self.record_use(&params, asked, &body).await;
        }
        let presented = pairs.iter().find(|(k, _)| k == "refresh_token").map(|(_, v)| v.as_str());
        let body = match presented {
            Some(t) if status.is_success() && upstream_path == "/oauth2/token" => with_refresh_token(body, t),
            _ => body,
        };
        let mut r = http::Response::new(body);
        *r.status_mut() = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        if let Some(ct) = content_type {
            r.headers_mut().insert(header::CONTENT_TYPE, ct);
        }
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r.headers_mut().insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
        r
    }

    /// A token request as Cognito must see it: a code the facade handed on is taken (once) and
    /// must come from the client it was issued to with the redirect URI it was sent to; then the
    /// app client and the facade's callback replace them. A document's refresh names its app
    /// client. Codes the facade never saw (app clients from before it owned the callback) go on
    /// unchanged, for Cognito to check.
    async fn translate(&self, params: &mut Vec<(String, String)>) -> Result<(), http::Response<Bytes>> {
        let get = |p: &[(String, String)], k: &str| p.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let invalid_grant = |d: &str| oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", d);
        let client_id = get(params, "client_id").unwrap_or_default();
        let set = |p: &mut Vec<(String, String)>, k: &str, v: &str| match p.iter_mut().find(|(n, _)| n == k) {
            Some((_, old)) => *old = v.to_owned(),
            None => p.push((k.to_owned(), v.to_owned())),
        };
        match get(params, "grant_type").as_deref() {
            Some("authorization_code") => {
                let Some(code) = get(params, "code") else { return Ok(()) };
                let taken = self.parts.flows.take_flow(&code_key(&code)).await.map_err(|e| {
                    tracing::error!(error = %domain::errors::ErrorChain(&e), "taking a bound code");
                    oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later")
                })?;
                let Some(p) = taken.and_then(|r| serde_json::from_str::<Pending>(&r).ok()) else {
                    return if is_document_url(&client_id) {
                        Err(invalid_grant("the code is unknown, used or expired"))
                    } else {
                        Ok(())
                    };
                };
                if p.client_id != client_id {
                    return Err(invalid_grant("the code was issued to another client"));
                }
                match get(params, "redirect_uri") {
                    Some(u) if u != p.redirect_uri => {
                        return Err(invalid_grant("redirect_uri does not match the authorization request"));
                    }
                    None if p.redirect_given => {
                        return Err(invalid_grant("redirect_uri is required: the authorization request had one"));
                    }
                    _ => {}
                }
                set(params, "client_id", &p.app_client);
                set(params, "redirect_uri", &self.callback);
            }
            Some("refresh_token") | None if is_document_url(&client_id) => {
                let Some(app) = self.known_app_client(&client_id).await? else {
                    return Err(invalid_grant("the client is unknown"));
                };
                set(params, "client_id", &app);
            }
            _ => {}
        }
        Ok(())
    }

    /// A token was issued to the app client: record it (on refreshes too, so a mark lost to a
    /// failed write is made again within the access token's life), and for the owner the token is
    /// for, that a chat connected — when it carries a connector scope (the owner's own panel client
    /// never comes here). A failure is logged, never a failed answer: the tokens are issued.
    async fn record_use(&self, params: &[(String, String)], asked: Option<&str>, answer: &[u8]) {
        let (Some(usage), Some((_, client))) = (&self.parts.usage, params.iter().find(|(k, _)| k == "client_id"))
        else {
            return;
        };
        if let Err(e) = usage.mark_client_used(client).await {
            tracing::error!(error = %domain::errors::ErrorChain(&e), client_id = %client, "recording a client's use");
        }
        let named = asked.unwrap_or(client);
        let token_client = (named != client.as_str()).then_some(client.as_str()); // a document's app client
        if let Some(owner) = connector_owner(answer)
            && let Err(e) = usage.mark_chat_connected(&owner, named, token_client).await
        {
            tracing::error!(error = %domain::errors::ErrorChain(&e), client_id = %named, "recording a chat's connection");
        }
    }
}

/// A refresh answer with `presented` added as its `refresh_token` when it has none (see the
/// module documentation); anything else unchanged.
pub fn with_refresh_token(answer: Bytes, presented: &str) -> Bytes {
    let Ok(serde_json::Value::Object(mut o)) = serde_json::from_slice::<serde_json::Value>(&answer) else {
        return answer;
    };
    if o.contains_key("refresh_token") || !o.contains_key("access_token") {
        return answer;
    }
    o.insert("refresh_token".into(), serde_json::Value::String(presented.to_owned()));
    serde_json::to_vec(&o).map_or(answer, Bytes::from)
}

/// The owner a token answer from Cognito is for, when its access token carries a connector
/// scope: the token's `sub`, read from its payload unverified — it came straight from Cognito
/// over TLS in answer to this request, and is only recorded as a fact for that owner's panel
/// (the MCP endpoint verifies every token it is shown).
pub fn connector_owner(answer: &[u8]) -> Option<domain::ids::OwnerId> {
    use base64::Engine as _;
    let answer: serde_json::Value = serde_json::from_slice(answer).ok()?;
    let payload = answer.get("access_token")?.as_str()?.split('.').nth(1)?;
    let claims: serde_json::Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    let connector = claims.get("scope")?.as_str()?.split_whitespace().any(|s| {
        let product = s.replacen("osfoundry/", "osfoundry:", 1);
        product == SCOPE_READ || product == SCOPE_RUN
    });
    connector.then(|| domain::ids::OwnerId::new(claims.get("sub")?.as_str()?.to_owned()).ok()).flatten()
}

/// The cookie that binds a confirmed sign-in to its browser (a prefix of the flow's key names
/// it, so several sign-ins in one browser do not collide).
fn flow_cookie(key: &str) -> String {
    format!("fc_flow_{}", key.get(..16).unwrap_or(key))
}

/// The key a handed-on code is bound under (the code itself is never stored).
fn code_key(code: &str) -> String {
    format!("c.{}", domain::runs::sha256_hex(code.as_bytes()))
}

fn random_key() -> String {
    let mut b = [0u8; 32];
    if getrandom::fill(&mut b).is_err() {
        return uuid::Uuid::new_v4().simple().to_string();
    }
    domain::runs::sha256_hex(&b)
}

/// `302` to `location`.
fn found(location: &str) -> http::Response<Bytes> {
    let mut r = http::Response::new(Bytes::new());
    *r.status_mut() = StatusCode::FOUND;
    match HeaderValue::from_str(location) {
        Ok(v) => {
            r.headers_mut().insert(header::LOCATION, v);
        }
        Err(_) => return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "query: not a valid URL query"),
    }
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `302` to the client's `redirect_uri` with `params`, its `state` and `iss` (RFC 9207).
fn back_to(redirect_uri: &str, params: &[(&str, &str)], state: Option<&str>, issuer: &str) -> http::Response<Bytes> {
    match crate::authorization_response(redirect_uri, params, state, issuer) {
        Some(u) => found(u.as_str()),
        None => oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "redirect_uri: not an absolute URI"),
    }
}

fn not_allowed(allow: &'static str) -> http::Response<Bytes> {
    let mut r = oauth_error(StatusCode::METHOD_NOT_ALLOWED, "invalid_request", &format!("use {allow}"));
    r.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

#[cfg(test)]
mod tests;
