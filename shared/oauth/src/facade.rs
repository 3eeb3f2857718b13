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
//! - `/authorize`: redirect (302) to Cognito's `/oauth2/authorize` with every other parameter
//!   unchanged; `/token`: post the form to Cognito's `/oauth2/token` and answer what it answers.
//!
//! Tokens stay Cognito's: nothing is issued, stored or signed here. A successful exchange
//! records that the client was used ([`ClientUse`]), so registrations nobody completed can be
//! removed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use domain::store::ClientUse;
use http::{HeaderValue, Method, StatusCode, header};

use crate::{media_type_is, oauth_error};
use auth::ScopeSpelling;
use tools::{SCOPE_READ, SCOPE_RUN};

/// The facade's authorization endpoint (a path of this stack).
pub const AUTHORIZE_PATH: &str = "/authorize";
/// The facade's token endpoint.
pub const TOKEN_PATH: &str = "/token";
/// Largest token request body.
pub const MAX_TOKEN_REQUEST_BYTES: usize = 16 * 1024;
/// How long a token request may wait for Cognito (under the function's timeout).
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(10);

/// Scopes dropped before Cognito sees them (see the module documentation).
const DROPPED_SCOPES: &[&str] = &["offline_access", "openid", "profile", "email"];

/// `scope` as Cognito should see it: read and run in `spelling`, `offline_access`, `openid`, `profile` and `email`
/// dropped, others unchanged (Cognito refuses them with `invalid_scope`).
/// `None` when nothing is left: Cognito then grants the client's allowed scopes.
pub fn forwarded_scope(scope: &str, spelling: &ScopeSpelling) -> Option<String> {
    let mut out: Vec<String> = Vec::new();
    for s in scope.split_whitespace() {
        // `osfoundry:read` (the product's spelling) and `osfoundry/read` (Cognito's) alike.
        let product = s.replacen("osfoundry/", "osfoundry:", 1);
        let forwarded = if product == SCOPE_READ || product == SCOPE_RUN {
            spelling.spell(&product)
        } else if DROPPED_SCOPES.contains(&s) {
            continue;
        } else {
            s.to_owned()
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

/// The facade in front of one Cognito domain.
pub struct Facade {
    /// Cognito's hosted domain, `https://<prefix>.auth.<region>.amazoncognito.com`.
    upstream: String,
    /// The MCP URLs a `resource` may name (the API's own, custom domains').
    resources: Vec<String>,
    scopes: ScopeSpelling,
    usage: Option<Arc<dyn ClientUse>>,
    http: reqwest::Client,
}

impl Facade {
    /// A facade forwarding to `upstream`, accepting `resources`, recording use in `usage`.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(
        upstream: &str,
        resources: Vec<String>,
        scopes: ScopeSpelling,
        usage: Option<Arc<dyn ClientUse>>,
    ) -> Result<Self, reqwest::Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http =
            reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).timeout(UPSTREAM_TIMEOUT).build()?;
        Ok(Self { upstream: upstream.trim_end_matches('/').to_owned(), resources, scopes, usage, http })
    }

    /// Answers `GET /authorize` or `POST /token`; `None` for any other path.
    pub async fn handle(&self, req: &http::Request<Bytes>) -> Option<http::Response<Bytes>> {
        match req.uri().path() {
            AUTHORIZE_PATH => Some(self.authorize(req)),
            TOKEN_PATH => Some(self.token(req).await),
            _ => None,
        }
    }

    fn authorize(&self, req: &http::Request<Bytes>) -> http::Response<Bytes> {
        if req.method() != Method::GET {
            return not_allowed("GET");
        }
        let pairs: Vec<(String, String)> =
            url::form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes()).into_owned().collect();
        // Errors are answered here, not redirected: the redirect URI is not checked yet (Cognito
        // checks it against the client's), and redirecting to an unchecked one is an open
        // redirect (RFC 6749 §4.1.2.1).
        let params = match forwarded_params(&pairs, &self.resources, &self.scopes) {
            Ok(p) => p,
            Err(r) => return oauth_error(StatusCode::BAD_REQUEST, r.code, &r.description),
        };
        let location = format!("{}/oauth2/authorize?{}", self.upstream, encode(&params));
        let mut r = http::Response::new(Bytes::new());
        *r.status_mut() = StatusCode::FOUND;
        match HeaderValue::from_str(&location) {
            Ok(v) => {
                r.headers_mut().insert(header::LOCATION, v);
            }
            Err(_) => return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "query: not a valid URL query"),
        }
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r
    }

    async fn token(&self, req: &http::Request<Bytes>) -> http::Response<Bytes> {
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
        let params = match forwarded_params(&pairs, &self.resources, &self.scopes) {
            Ok(p) => p,
            Err(r) => return oauth_error(StatusCode::BAD_REQUEST, r.code, &r.description),
        };
        let mut upstream = self
            .http
            .post(format!("{}/oauth2/token", self.upstream))
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
        if status.is_success() {
            self.record_use(&params).await;
        }
        let mut r = http::Response::new(body);
        *r.status_mut() = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        if let Some(ct) = content_type {
            r.headers_mut().insert(header::CONTENT_TYPE, ct);
        }
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r.headers_mut().insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
        r
    }

    /// A token was issued to the form's `client_id`: record it (on refreshes too, so a mark
    /// lost to a failed write is made again within the access token's life). A failure is
    /// logged, never turned into a failed answer: the tokens are already issued.
    async fn record_use(&self, params: &[(String, String)]) {
        let (Some(usage), Some((_, client))) = (&self.usage, params.iter().find(|(k, _)| k == "client_id")) else {
            return;
        };
        if let Err(e) = usage.mark_client_used(client).await {
            tracing::error!(error = %domain::errors::ErrorChain(&e), client_id = %client, "recording a client's use");
        }
    }
}

fn not_allowed(allow: &'static str) -> http::Response<Bytes> {
    let mut r = oauth_error(StatusCode::METHOD_NOT_ALLOWED, "invalid_request", &format!("use {allow}"));
    r.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &str) -> Vec<(String, String)> {
        url::form_urlencoded::parse(q.as_bytes()).into_owned().collect()
    }

    const MCP: &str = "https://abc.execute-api.eu-west-1.amazonaws.com/mcp";

    #[test]
    fn the_exact_parameters_cognito_receives() {
        let spelling = ScopeSpelling::with_prefix("osfoundry/");
        let resources = vec![MCP.to_owned()];
        let q = format!(
            "response_type=code&client_id=c1&redirect_uri=https%3A%2F%2Fclaude.ai%2Fapi%2Fmcp%2Fauth_callback\
             &state=s&code_challenge=x&code_challenge_method=S256&resource={}\
             &scope=osfoundry%3Aread+osfoundry%2Frun+openid+offline_access+profile",
            url::form_urlencoded::byte_serialize(MCP.as_bytes()).collect::<String>()
        );
        let out = forwarded_params(&pairs(&q), &resources, &spelling).unwrap();
        assert_eq!(
            encode(&out),
            "response_type=code&client_id=c1&redirect_uri=https%3A%2F%2Fclaude.ai%2Fapi%2Fmcp%2Fauth_callback\
             &state=s&code_challenge=x&code_challenge_method=S256&scope=osfoundry%2Fread+osfoundry%2Frun"
        );
        // A token request: resource with a trailing slash is the same URL; no scope left → none sent.
        let t = format!(
            "grant_type=authorization_code&code=k&client_id=c1&code_verifier=v&resource={MCP}/&scope=offline_access"
        );
        assert_eq!(
            encode(&forwarded_params(&pairs(&t), &resources, &spelling).unwrap()),
            "grant_type=authorization_code&code=k&client_id=c1&code_verifier=v"
        );
    }

    #[test]
    fn another_resource_or_a_repeated_parameter_is_refused() {
        let spelling = ScopeSpelling::with_prefix("osfoundry/");
        let resources = vec![MCP.to_owned()];
        let e = forwarded_params(&pairs("client_id=c&resource=https://evil.example/mcp"), &resources, &spelling)
            .unwrap_err();
        assert_eq!(e.code, "invalid_target");
        assert!(e.description.starts_with("resource: must be this server's MCP URL"), "{}", e.description);
        let e = forwarded_params(&pairs("client_id=c&client_id=d"), &resources, &spelling).unwrap_err();
        assert_eq!((e.code, e.description.as_str()), ("invalid_request", "client_id: given more than once"));
        // Unknown scopes go through for Cognito to refuse.
        assert_eq!(forwarded_scope("admin openid", &spelling).as_deref(), Some("admin"));
        assert_eq!(forwarded_scope("offline_access", &spelling), None);
    }
}
