//! # oauth — connecting with only the URL: the authorization servers (SPEC §1)
//!
//! | module | what |
//! |---|---|
//! | this one | the authorization-server metadata (RFC 8414), the redirect allowlist, the OAuth error answer |
//! | `registration` | dynamic client registration (RFC 7591): the request's checks and [`Registrar`] |
//! | [`cimd`] | Client ID Metadata Documents: validation, the guarded fetch and its cache, loopback redirects on any port |
//! | [`local`] | the local server's authorize, consent and token endpoints |
//! | [`facade`] | the cloud's `/authorize`, callback and `/token` in front of Cognito's hosted endpoints |
//!
//! Connecting is pasting the URL (SPEC §1): the stack's own OAuth authorization-server
//! metadata and dynamic client registration, in front of whichever server issues the tokens.
//!
//! An MCP client that is given only the connector URL does this (MCP authorization spec):
//!
//! 1. `POST /mcp` without a token → `401` with `WWW-Authenticate: Bearer resource_metadata=…`;
//! 2. the protected-resource metadata (RFC 9728) names an authorization server: **this stack's
//!    own base URL** (not Cognito's issuer — Cognito publishes only OpenID discovery, without
//!    `code_challenge_methods_supported`, and clients must then refuse to go on);
//! 3. [`metadata`] at `/.well-known/oauth-authorization-server` (RFC 8414; OpenID discovery is
//!    not served): issuer = the URL it is served from, the authorize and token endpoints
//!    ([`facade`]'s in front of Cognito in the cloud, [`local`]'s locally),
//!    `S256`, the scopes in the spelling the server issues, public clients only, and
//! 4. a `registration_endpoint` ([`Registrar`], RFC 7591): the client registers its redirect
//!    URIs — checked against a [`RedirectPolicy`] — and gets a public `client_id` (a Cognito
//!    app client in the cloud), reused when the same client registers again, created at most
//!    [`RegistrationLimits`] times an hour from one address, from everywhere, and in all;
//!    Clients of the 2026-07-28 revision skip registration: their `client_id` is the URL of a
//!    Client ID Metadata Document ([`cimd`]), fetched when they come — advertised with
//!    `client_id_metadata_document_supported`;
//! 5. then authorization code + PKCE at those endpoints (a listed loopback redirect on any
//!    port, RFC 8252 §7.3; `iss` in every authorization response, RFC 9207), and `tools/list`
//!    with the token.

pub mod cimd;
pub mod facade;
pub mod local;
mod registration;

pub use registration::{
    LISTING_TTL, Registrar, Registration, RegistrationError, RegistrationLimits, UNUSED_CLIENT_AGE,
    validate_registration,
};

use std::sync::Mutex;

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use auth::ScopeSpelling;
use tools::{SCOPE_READ, SCOPE_RUN};

/// RFC 8414 metadata location (issuer without a path).
pub const AS_METADATA_PATH: &str = "/.well-known/oauth-authorization-server";
/// Dynamic client registration (RFC 7591).
pub const REGISTER_PATH: &str = "/register";
/// Largest registration request body.
pub const MAX_REGISTRATION_BYTES: usize = 16 * 1024;
/// Most redirect URIs one client may register.
pub const MAX_REDIRECT_URIS: usize = 10;
/// Longest redirect URI.
pub const MAX_REDIRECT_URI_CHARS: usize = 2000;
/// Longest `client_name` (longer names are refused, not cut).
pub const MAX_CLIENT_NAME_CHARS: usize = 200;
/// Default registrations per UTC hour (new clients; reusing one is not counted).
pub const DEFAULT_REGISTRATIONS_PER_HOUR: usize = 20;
/// Default registrations per UTC hour from one source address.
pub const DEFAULT_REGISTRATIONS_PER_SOURCE: usize = 5;
/// Default most dynamically registered clients in all.
pub const DEFAULT_REGISTRATION_CAP: usize = 200;

/// Where the authorization server's endpoints are, for the metadata document.
#[derive(Debug, Clone)]
pub struct AuthServerConfig {
    /// Authorization endpoint: absolute (Cognito's `…/oauth2/authorize`) or a path of this
    /// stack (`/oauth/authorize`, local).
    pub authorization_endpoint: String,
    /// Token endpoint, absolute or a path.
    pub token_endpoint: String,
    /// Token revocation endpoint, if the server has one.
    pub revocation_endpoint: Option<String>,
    /// The issuer's key set (OpenID discovery requires one; local tokens are HS256, so none).
    pub jwks_uri: Option<String>,
    /// How the server spells the scopes it issues.
    pub scopes: ScopeSpelling,
    /// Whether authorization responses carry `iss` (RFC 9207): the local server's do;
    /// Cognito's do not.
    pub iss_in_response: bool,
    /// Whether a `client_id` may be a metadata document's URL ([`cimd`]).
    pub client_metadata_documents: bool,
}

impl AuthServerConfig {
    fn absolute(base: &str, endpoint: &str) -> String {
        if endpoint.starts_with('/') { format!("{base}{endpoint}") } else { endpoint.to_owned() }
    }
}

/// The RFC 8414 metadata document served at `base`.
///
/// OpenID discovery (`/.well-known/openid-configuration`) is not served: this issuer signs no ID
/// tokens (Cognito's carry Cognito's `iss`; the local server issues none), so claiming to be an
/// OpenID provider would be false. MCP clients read RFC 8414 first.
pub fn metadata(config: &AuthServerConfig, base: &str) -> Value {
    let mut m = json!({
        "issuer": base,
        "authorization_endpoint": AuthServerConfig::absolute(base, &config.authorization_endpoint),
        "token_endpoint": AuthServerConfig::absolute(base, &config.token_endpoint),
        "registration_endpoint": format!("{base}{REGISTER_PATH}"),
        "scopes_supported": [config.scopes.spell(SCOPE_READ), config.scopes.spell(SCOPE_RUN)],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": config.iss_in_response,
        "client_id_metadata_document_supported": config.client_metadata_documents,
    });
    if let Some(o) = m.as_object_mut() {
        if let Some(r) = &config.revocation_endpoint {
            o.insert("revocation_endpoint".into(), json!(AuthServerConfig::absolute(base, r)));
        }
        if let Some(j) = &config.jwks_uri {
            o.insert("jwks_uri".into(), json!(j));
        }
    }
    m
}

/// Answers `GET` of [`AS_METADATA_PATH`].
pub fn metadata_response(config: &AuthServerConfig, base: &str) -> http::Response<Bytes> {
    let mut r = json_response(StatusCode::OK, &metadata(config, base));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=3600"));
    r
}

/// Which redirect URIs a registering client may use.
///
/// - Claude: `https://claude.ai/api/mcp/auth_callback` (and the same on `claude.com`);
/// - ChatGPT: the legacy `https://chatgpt.com/connector_platform_oauth_redirect` and each
///   app's own `https://chatgpt.com/connector/oauth/<id>`;
/// - desktop clients (RFC 8252 loopback redirects): `http://<loopback host>:<any port>/<any
///   path>` for the hosts in [`RedirectPolicy::loopback_hosts`] — Cognito accepts plain HTTP
///   only for `localhost`, so the cloud allows only that one, the local server all three;
/// - any `https` URI on a host the deployer added.
///
/// Fragments and user-info are refused everywhere; so are private-use schemes (`cursor://`).
#[derive(Debug, Clone)]
pub struct RedirectPolicy {
    /// Loopback host names accepted over plain HTTP.
    pub loopback_hosts: Vec<String>,
    /// Extra hosts (exact, lower case) whose `https` URIs are accepted.
    pub extra_hosts: Vec<String>,
}

impl RedirectPolicy {
    /// The cloud's policy (Cognito: plain HTTP only for `localhost`), plus `extra_hosts`.
    pub fn cloud(extra_hosts: Vec<String>) -> Self {
        Self { loopback_hosts: vec!["localhost".into()], extra_hosts }
    }

    /// The local server's policy: every loopback spelling.
    pub fn local() -> Self {
        Self { loopback_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()], extra_hosts: Vec::new() }
    }

    /// Whether `uri` may be registered; the error says which rule it breaks.
    ///
    /// # Errors
    /// The rule, for an `invalid_redirect_uri` answer.
    pub fn check(&self, uri: &str) -> Result<(), String> {
        if uri.chars().count() > MAX_REDIRECT_URI_CHARS {
            return Err(format!("at most {MAX_REDIRECT_URI_CHARS} characters"));
        }
        let u = url::Url::parse(uri).map_err(|e| format!("not an absolute URI ({e})"))?;
        if u.fragment().is_some() {
            return Err("must not contain a fragment".into());
        }
        if !u.username().is_empty() || u.password().is_some() {
            return Err("must not contain user information".into());
        }
        let host = u.host_str().unwrap_or_default().to_ascii_lowercase();
        match u.scheme() {
            "http" if self.loopback_hosts.contains(&host) => Ok(()),
            "http" => Err(format!("plain http is allowed only for {}", self.loopback_hosts.join(", "))),
            "https" => {
                let path = u.path();
                let known = match host.as_str() {
                    "claude.ai" | "claude.com" => path == "/api/mcp/auth_callback",
                    "chatgpt.com" => {
                        path == "/connector_platform_oauth_redirect"
                            || path.strip_prefix("/connector/oauth/").is_some_and(|id| {
                                !id.is_empty()
                                    && id.len() <= 128
                                    && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                            })
                    }
                    _ => false,
                };
                if (known && u.query().is_none() && u.port().is_none()) || self.extra_hosts.contains(&host) {
                    Ok(())
                } else {
                    Err(format!(
                        "{host}{path} is not an allowed callback (Claude's, ChatGPT's, loopback, or a host the deployer added)"
                    ))
                }
            }
            other => Err(format!("scheme {other} is not allowed (use https, or http on loopback)")),
        }
    }
}

pub use http_util::ClientSource;

/// An authorization response's target: `redirect_uri` with `params`, the client's `state` and
/// `iss` (RFC 9207) appended to its query; `None` when it is not an absolute URI. Both servers
/// answer through it, so every authorization response carries `iss`.
pub(crate) fn authorization_response(
    redirect_uri: &str,
    params: &[(&str, &str)],
    state: Option<&str>,
    issuer: &str,
) -> Option<url::Url> {
    let mut u = url::Url::parse(redirect_uri).ok()?;
    {
        let mut q = u.query_pairs_mut();
        for (k, v) in params {
            q.append_pair(k, v);
        }
        if let Some(s) = state {
            q.append_pair("state", s);
        }
        q.append_pair("iss", issuer);
    }
    Some(u)
}
pub(crate) use http_util::media_type_is;

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `{"error": code, "error_description": description}` (RFC 6749 §5.2 / RFC 7591 §3.2.2).
pub fn oauth_error(status: StatusCode, code: &str, description: &str) -> http::Response<Bytes> {
    let mut r = json_response(status, &json!({ "error": code, "error_description": description }));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

pub(crate) fn json_response(status: StatusCode, v: &Value) -> http::Response<Bytes> {
    http_util::http_json::response(status, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_the_clients_callbacks_and_nothing_else() {
        let cloud = RedirectPolicy::cloud(vec!["mcp.example.com".into()]);
        for ok in [
            "https://claude.ai/api/mcp/auth_callback",
            "https://claude.com/api/mcp/auth_callback",
            "https://chatgpt.com/connector_platform_oauth_redirect",
            "https://chatgpt.com/connector/oauth/abc_DEF-123",
            "http://localhost:33418/callback",
            "http://localhost/",
            "https://mcp.example.com/any/path?x=1",
        ] {
            assert_eq!(cloud.check(ok), Ok(()), "{ok}");
        }
        for (bad, rule) in [
            ("https://evil.example/api/mcp/auth_callback", "not an allowed callback"),
            ("https://claude.ai/other", "not an allowed callback"),
            ("https://claude.ai.evil.example/api/mcp/auth_callback", "not an allowed callback"),
            ("https://chatgpt.com/connector/oauth/", "not an allowed callback"),
            ("https://chatgpt.com/connector/oauth/a/b", "not an allowed callback"),
            ("https://claude.ai:8443/api/mcp/auth_callback", "not an allowed callback"),
            ("https://claude.ai/api/mcp/auth_callback#x", "fragment"),
            ("https://user@claude.ai/api/mcp/auth_callback", "user information"),
            ("http://127.0.0.1:5000/cb", "plain http is allowed only for localhost"),
            ("http://claude.ai/api/mcp/auth_callback", "plain http"),
            ("cursor://anysphere/callback", "scheme cursor is not allowed"),
            ("/relative", "not an absolute URI"),
        ] {
            let e = cloud.check(bad).expect_err(bad);
            assert!(e.contains(rule), "{bad}: {e}");
        }
        assert_eq!(RedirectPolicy::local().check("http://127.0.0.1:5000/cb"), Ok(()));
        assert_eq!(RedirectPolicy::local().check("http://[::1]:5000/cb"), Ok(()));
    }

    #[test]
    fn metadata_points_at_the_real_endpoints_with_s256_and_issued_scopes() {
        let c = AuthServerConfig {
            authorization_endpoint: "https://x.auth.eu-west-1.amazoncognito.com/oauth2/authorize".into(),
            token_endpoint: "https://x.auth.eu-west-1.amazoncognito.com/oauth2/token".into(),
            revocation_endpoint: None,
            jwks_uri: Some("https://cognito-idp.eu-west-1.amazonaws.com/p/.well-known/jwks.json".into()),
            scopes: ScopeSpelling::with_prefix("osfoundry/"),
            iss_in_response: false,
            client_metadata_documents: true,
        };
        let m = metadata(&c, "https://api.example.com");
        assert_eq!(m["issuer"], "https://api.example.com");
        assert_eq!(m["registration_endpoint"], "https://api.example.com/register");
        assert_eq!(m["code_challenge_methods_supported"], json!(["S256"]));
        assert_eq!(m["scopes_supported"], json!(["osfoundry/read", "osfoundry/run"]));
        assert_eq!(m["token_endpoint"], "https://x.auth.eu-west-1.amazoncognito.com/oauth2/token");
        assert!(m.get("subject_types_supported").is_none(), "not an OpenID provider");
    }
}
