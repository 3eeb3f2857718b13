//! CORS for what browser-based MCP clients (the MCP Inspector in direct mode, web IDEs) call
//! from another origin: the two well-known documents, `/register`, `/token`, `/revoke`, and
//! `/mcp`. Any origin, never credentials: every one of them is either public or takes a bearer
//! token the page must hold itself, so no cookie or ambient authority is ever exposed (the
//! owner's panel and the relay API get no CORS at all).
//!
//! Both the local server and the cloud's functions answer the `OPTIONS` preflight themselves
//! ([`preflight`]; the template routes `OPTIONS` of those paths to the functions) and add the
//! headers to every answer ([`decorate`]).

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};

/// Which headers an endpoint allows and exposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cors {
    /// The well-known documents and the OAuth endpoints.
    OAuth,
    /// The MCP endpoint.
    Mcp,
}

impl Cors {
    /// The CORS kind of `path`, if it has one.
    pub fn of(path: &str) -> Option<Self> {
        match path {
            "/mcp" => Some(Self::Mcp),
            "/register" | "/token" | "/revoke" | "/oauth/token" | "/oauth/revoke" => Some(Self::OAuth),
            p if p.starts_with("/.well-known/oauth-") => Some(Self::OAuth),
            _ => None,
        }
    }

    fn methods(self) -> &'static str {
        match self {
            Self::OAuth => "GET, POST, OPTIONS",
            Self::Mcp => "GET, POST, DELETE, OPTIONS",
        }
    }

    fn allowed_headers(self) -> &'static str {
        match self {
            Self::OAuth => "Authorization, Content-Type, MCP-Protocol-Version",
            Self::Mcp => "Authorization, Content-Type, MCP-Protocol-Version, Mcp-Session-Id, Last-Event-ID",
        }
    }
}

/// How long a browser may keep a preflight's answer (a day).
pub const MAX_AGE_SECONDS: &str = "86400";

/// Adds the CORS headers of `kind` to an answer.
pub fn decorate(kind: Cors, headers: &mut HeaderMap) {
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("WWW-Authenticate, Mcp-Session-Id, MCP-Protocol-Version"),
    );
    if kind == Cors::Mcp {
        // Answers differ by Authorization; a shared cache must not mix them.
        headers.append(header::VARY, HeaderValue::from_static("Authorization"));
    }
}

/// The answer to a preflight (`OPTIONS`) of a `kind` endpoint: `204` with what it allows.
pub fn preflight(kind: Cors) -> http::Response<Bytes> {
    let mut r = http::Response::new(Bytes::new());
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    decorate(kind, h);
    h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static(kind.methods()));
    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static(kind.allowed_headers()));
    h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(MAX_AGE_SECONDS));
    r
}

/// Serves `req` with CORS when its path has a kind: a preflight is answered here, any other
/// answer from `serve` gets the headers.
pub async fn with_cors<B, F, Fut>(method: &Method, path: &str, serve: F) -> http::Response<B>
where
    B: From<Bytes>,
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = http::Response<B>>,
{
    let Some(kind) = Cors::of(path) else { return serve().await };
    if method == Method::OPTIONS {
        return preflight(kind).map(B::from);
    }
    let mut r = serve().await;
    decorate(kind, r.headers_mut());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_preflight_from_another_origin_is_answered() {
        let r = preflight(Cors::of("/token").unwrap());
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert!(r.headers()[header::ACCESS_CONTROL_ALLOW_METHODS].to_str().unwrap().contains("POST"));
        assert!(r.headers().get(header::ACCESS_CONTROL_ALLOW_CREDENTIALS).is_none(), "never credentials");
        let mcp = preflight(Cors::Mcp);
        let allowed = mcp.headers()[header::ACCESS_CONTROL_ALLOW_HEADERS].to_str().unwrap().to_owned();
        for h in ["Authorization", "Content-Type", "MCP-Protocol-Version", "Mcp-Session-Id"] {
            assert!(allowed.contains(h), "{h} in {allowed}");
        }
        let exposed = mcp.headers()[header::ACCESS_CONTROL_EXPOSE_HEADERS].to_str().unwrap().to_owned();
        assert!(exposed.contains("WWW-Authenticate") && exposed.contains("Mcp-Session-Id"), "{exposed}");
        assert_eq!(Cors::of("/owner/devices"), None, "the owner's API gets no CORS");
        assert_eq!(Cors::of("/external-assistants/graph-relays/sync"), None);
        assert_eq!(Cors::of("/.well-known/oauth-protected-resource/mcp"), Some(Cors::OAuth));
    }
}
