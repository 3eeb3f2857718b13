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
//!    [`RegistrationLimits`] times an hour from one address (this machine's loopback
//!    addresses together, where they have their own limit), from everywhere, and in all;
//!    Clients of the 2026-07-28 revision skip registration: their `client_id` is the URL of a
//!    Client ID Metadata Document ([`cimd`]), fetched when they come — advertised with
//!    `client_id_metadata_document_supported`;
//! 5. then authorization code + PKCE at those endpoints (a listed loopback redirect on any
//!    port, RFC 8252 §7.3; `iss` in every authorization response, RFC 9207), and `tools/list`
//!    with the token.

/// Client ID Metadata Documents: their own crate, re-exported under the name the servers use.
pub use client_documents as cimd;
pub use client_documents::{LOOPBACK_HOSTS, MAX_CLIENT_NAME_CHARS, MAX_REDIRECT_URI_CHARS, MAX_REDIRECT_URIS};
pub mod facade;
pub mod local;
mod registration;

pub use registration::{
    FORWARDED_SOURCE, IDLE_CLIENT_AGE, LISTING_TTL, LimitSettings, Registrar, Registration, RegistrationError,
    RegistrationLimits, UNUSED_CLIENT_AGE, peer_source, validate_registration,
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
/// Default registrations per UTC hour (new clients; reusing one is not counted).
pub const DEFAULT_REGISTRATIONS_PER_HOUR: usize = 20;
/// Default registrations per UTC hour from one source address.
pub const DEFAULT_REGISTRATIONS_PER_SOURCE: usize = 5;
/// Default registrations per UTC hour from this machine's loopback addresses, where loopback
/// has its own limit (the local server): a person connecting every MCP client they have. The
/// seven hosts tried (Claude Code, Codex, Copilot CLI, Gemini CLI, opencode, mcp-remote, the
/// Inspector) register once each and reuse that client (the same name and redirect URIs, any
/// loopback port); a new client comes with a scratch profile, a reinstall, another client name
/// or a wiped token store, so 50 is each of them seven times over in one hour, and still a
/// quarter of [`DEFAULT_REGISTRATION_CAP`].
pub const DEFAULT_REGISTRATIONS_PER_LOOPBACK: usize = 50;
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

/// Which redirect URIs a registering client (or a metadata document) may use: what RFC 8252
/// and the hosts' own artifacts need, refusing only what is unsafe.
///
/// - `https` on any host;
/// - `http` only on loopback (`localhost`, `127.0.0.1`, `[::1]`), any port and path (RFC 8252
///   §7.3): a desktop client's own listener. Cognito never sees these (the facade owns the one
///   callback Cognito has), so the cloud accepts the same loopback spellings as the local server;
/// - private-use schemes (RFC 8252 §7.1: `cursor://anysphere.cursor-mcp/oauth/callback`,
///   `com.example.app:/cb`), except the ones a browser runs or reads itself (`javascript:`,
///   `data:`, `vbscript:`, `file:`, `blob:`, `about:`) and `ws`/`wss`/`ftp`;
/// - never a fragment, user information, white space, or a `*` in the host.
///
/// Where the code goes is shown before anyone signs in ([`RedirectPolicy::vouched`]): the local
/// consent page always names the redirect's host; in the cloud, where the sign-in page is
/// Cognito's and cannot, the facade shows its own page first for a redirect that is not
/// vouched for (an `https` host other than the hosts' published callbacks, [`KNOWN_CALLBACKS`],
/// and the deployer's `extra_hosts`), and binds that sign-in to the browser that saw it.
#[derive(Debug, Clone)]
pub struct RedirectPolicy {
    /// Hosts (exact, lower case) whose `https` redirects are vouched for, beside the known ones.
    pub extra_hosts: Vec<String>,
}

/// The `https` callbacks the hosts publish, as (host, path or path prefix ending in `/`): the
/// corpus in `tests/fixtures/hosts` holds each one's source.
pub const KNOWN_CALLBACKS: &[(&str, &str)] = &[
    ("claude.ai", "/api/mcp/auth_callback"),
    ("claude.com", "/api/mcp/auth_callback"),
    ("chatgpt.com", "/connector_platform_oauth_redirect"),
    ("chatgpt.com", "/connector/oauth/"),
    ("www.cursor.com", "/agents/mcp/oauth/callback"),
    ("cursor.com", "/agents/mcp/oauth/callback"),
    ("vscode.dev", "/redirect"),
    ("insiders.vscode.dev", "/redirect"),
];

/// Schemes never accepted for a redirect (a browser runs or reads them itself, or they are no
/// redirect at all).
const UNSAFE_SCHEMES: &[&str] = &["javascript", "data", "vbscript", "file", "blob", "about", "ws", "wss", "ftp"];

impl RedirectPolicy {
    /// The cloud's policy, vouching for `extra_hosts` too.
    pub fn cloud(extra_hosts: Vec<String>) -> Self {
        Self { extra_hosts }
    }

    /// The local server's policy (its consent page names every redirect's host).
    pub fn local() -> Self {
        Self { extra_hosts: Vec::new() }
    }

    /// Whether a code sent to `uri` can only reach a host's published callback, a host the
    /// deployer added, or the client's own computer (loopback, a private-use scheme): then the
    /// cloud goes straight to the sign-in page. Any other (allowed) redirect is named to the
    /// owner first.
    pub fn vouched(&self, uri: &str) -> bool {
        let Ok(u) = url::Url::parse(uri) else { return false };
        let host = u.host_str().unwrap_or_default().to_ascii_lowercase();
        match u.scheme() {
            "http" => LOOPBACK_HOSTS.contains(&host.as_str()),
            "https" => {
                let path = u.path();
                self.extra_hosts.contains(&host)
                    || (u.query().is_none()
                        && u.port().is_none()
                        && KNOWN_CALLBACKS.iter().any(|(h, p)| {
                            *h == host
                                && match p.strip_suffix('/') {
                                    // A prefix: one more segment of safe characters (ChatGPT's per-app id).
                                    Some(_) => path.strip_prefix(p).is_some_and(|id| {
                                        !id.is_empty()
                                            && id.len() <= 128
                                            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                                    }),
                                    None => path == *p,
                                }
                        }))
            }
            s => !UNSAFE_SCHEMES.contains(&s),
        }
    }

    /// Whether `uri` may be registered; the error says which rule it breaks.
    ///
    /// # Errors
    /// The rule, for an `invalid_redirect_uri` answer.
    pub fn check(&self, uri: &str) -> Result<(), String> {
        if uri.chars().count() > MAX_REDIRECT_URI_CHARS {
            return Err(format!("at most {MAX_REDIRECT_URI_CHARS} characters"));
        }
        if uri.chars().any(char::is_whitespace) {
            return Err("must not contain white space".into());
        }
        let u = url::Url::parse(uri).map_err(|e| format!("not an absolute URI ({e})"))?;
        if u.fragment().is_some() {
            return Err("must not contain a fragment".into());
        }
        if !u.username().is_empty() || u.password().is_some() {
            return Err("must not contain user information".into());
        }
        let host = u.host_str().unwrap_or_default().to_ascii_lowercase();
        if host.contains('*') || uri.contains("%2A") || uri.contains("%2a") {
            return Err("must not contain a wildcard".into());
        }
        match u.scheme() {
            "http" if LOOPBACK_HOSTS.contains(&host.as_str()) => Ok(()),
            "http" => Err(format!("plain http is allowed only for loopback ({})", LOOPBACK_HOSTS.join(", "))),
            "https" if host.is_empty() => Err("must name a host".into()),
            "https" => Ok(()),
            s if UNSAFE_SCHEMES.contains(&s) => Err(format!("scheme {s} is not allowed")),
            // A private-use scheme (RFC 8252 §7.1): the app that claimed it on the client's machine.
            _ => Ok(()),
        }
    }

    /// The host (or private-use scheme) a code sent to `uri` reaches, for the consent page.
    pub fn destination(uri: &str) -> String {
        match url::Url::parse(uri) {
            Ok(u) => match (u.scheme(), u.host_str()) {
                ("http" | "https", Some(h)) if LOOPBACK_HOSTS.contains(&h) => "this computer".to_owned(),
                ("http" | "https", Some(h)) => h.to_owned(),
                (s, Some(h)) => format!("{s}://{h} (an app on this computer)"),
                (s, None) => format!("{s}: (an app on this computer)"),
            },
            Err(_) => uri.to_owned(),
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
    fn allows_what_hosts_register_and_refuses_only_what_is_unsafe() {
        let cloud = RedirectPolicy::cloud(vec!["mcp.example.com".into()]);
        for (ok, vouched) in [
            ("https://claude.ai/api/mcp/auth_callback", true),
            ("https://claude.com/api/mcp/auth_callback", true),
            ("https://chatgpt.com/connector_platform_oauth_redirect", true),
            ("https://chatgpt.com/connector/oauth/abc_DEF-123", true),
            ("https://www.cursor.com/agents/mcp/oauth/callback", true),
            ("https://vscode.dev/redirect", true),
            ("https://insiders.vscode.dev/redirect", true),
            ("cursor://anysphere.cursor-mcp/oauth/callback", true),
            ("com.example.app:/oauth2redirect", true),
            ("http://localhost:33418/callback", true),
            ("http://localhost/", true),
            ("http://127.0.0.1:5000/cb", true),
            ("http://[::1]:5000/cb", true),
            ("https://mcp.example.com/any/path?x=1", true),
            // Allowed, but the owner is shown where the code goes before signing in.
            ("https://evil.example/api/mcp/auth_callback", false),
            ("https://claude.ai/other", false),
            ("https://claude.ai.evil.example/api/mcp/auth_callback", false),
            ("https://chatgpt.com/connector/oauth/a/b", false),
            ("https://claude.ai:8443/api/mcp/auth_callback", false),
        ] {
            assert_eq!(cloud.check(ok), Ok(()), "{ok}");
            assert_eq!(cloud.vouched(ok), vouched, "{ok}");
        }
        for (bad, rule) in [
            ("https://claude.ai/api/mcp/auth_callback#x", "fragment"),
            ("https://user@claude.ai/api/mcp/auth_callback", "user information"),
            ("http://claude.ai/api/mcp/auth_callback", "plain http is allowed only for loopback"),
            ("http://192.168.1.5:8080/cb", "plain http is allowed only for loopback"),
            ("javascript:alert(1)", "scheme javascript is not allowed"),
            ("data:text/html,hi", "scheme data is not allowed"),
            ("https://*.example.com/cb", "wildcard"),
            ("https://claude.ai/api/mcp/auth_callback x", "white space"),
            ("/relative", "not an absolute URI"),
        ] {
            for p in [&cloud, &RedirectPolicy::local()] {
                let e = p.check(bad).expect_err(bad);
                assert!(e.contains(rule), "{bad}: {e}");
                assert!(!p.vouched(bad) || bad.starts_with("https://"), "{bad} vouched");
            }
        }
    }

    #[test]
    fn the_consent_page_names_where_the_code_goes() {
        assert_eq!(RedirectPolicy::destination("https://chatgpt.com/connector/oauth/x"), "chatgpt.com");
        assert_eq!(RedirectPolicy::destination("http://127.0.0.1:33418/cb"), "this computer");
        assert_eq!(
            RedirectPolicy::destination("cursor://anysphere.cursor-mcp/oauth/callback"),
            "cursor://anysphere.cursor-mcp (an app on this computer)"
        );
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
