//! How the endpoint presents itself: its public URL (a custom domain or the configured one),
//! the resource identifier, and the RFC 9728 protected-resource metadata.

use bytes::Bytes;
use http::{StatusCode, header};

use auth::ScopeSpelling;

use super::respond;

/// Default largest request body: an artifact of 3 MiB is 4 MiB of base64 plus JSON.
pub const DEFAULT_MAX_BODY_BYTES: usize = 5 * 1024 * 1024;

/// Path of the protected-resource metadata document (RFC 9728).
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// How the endpoint presents itself.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// The public base URL, e.g. `https://mcp.example.com`; `None` = `https://<Host header>`
    /// (behind API Gateway, whose URL the function cannot know without a dependency cycle).
    pub public_url: Option<String>,
    /// The MCP path, e.g. `/mcp`.
    pub mcp_path: String,
    /// `Host` values accepted (rmcp's DNS-rebinding protection): `Some(empty)` = loopback only
    /// (the local server), `Some(list)` = those, `None` = no check (API Gateway routes only
    /// requests for its own domains, and every request needs a bearer token).
    pub allowed_hosts: Option<Vec<String>>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// How the authorization server spells the scopes (what the endpoint advertises).
    pub scopes: ScopeSpelling,
}

impl EndpointConfig {
    /// The base URL for a request: `https://` + its `Host` when that is one of the accepted
    /// hosts other than the configured URL's (a custom domain), else the configured URL, else
    /// `https://` + the `Host`.
    pub fn base_url(&self, headers: &http::HeaderMap) -> String {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let configured = self.public_url.as_deref().map(|u| u.trim_end_matches('/').to_owned());
        let configured_host = configured.as_deref().and_then(|u| u.split_once("://")).map(|(_, h)| h.to_owned());
        match (host, configured) {
            (Some(h), Some(_))
                if Some(h) != configured_host.as_deref()
                    && self.allowed_hosts.as_ref().is_some_and(|a| a.iter().any(|x| x == h)) =>
            {
                format!("https://{h}")
            }
            (_, Some(u)) => u,
            (h, None) => format!("https://{}", h.unwrap_or("localhost")),
        }
    }

    /// The resource identifier: the MCP URL.
    pub fn resource(&self, base: &str) -> String {
        format!("{base}{}", self.mcp_path)
    }

    /// The metadata URL announced in `WWW-Authenticate`.
    pub fn metadata_url(&self, base: &str) -> String {
        format!("{base}{RESOURCE_METADATA_PATH}")
    }

    /// The RFC 9728 protected-resource metadata document.
    pub fn resource_metadata(&self, base: &str) -> serde_json::Value {
        serde_json::json!({
            "resource": self.resource(base),
            // The stack's own authorization-server metadata (oauth), at the same base.
            "authorization_servers": [base],
            "scopes_supported": [self.scopes.spell(tools::SCOPE_READ), self.scopes.spell(tools::SCOPE_RUN)],
            "bearer_methods_supported": ["header"],
            "resource_name": "foundry-connect",
        })
    }
}

/// Answers `GET /.well-known/oauth-protected-resource[/<mcp path>]`.
pub fn resource_metadata_response(config: &EndpointConfig, headers: &http::HeaderMap) -> http::Response<Bytes> {
    respond(
        StatusCode::OK,
        &[(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "max-age=3600")],
        Bytes::from(config.resource_metadata(&config.base_url(headers)).to_string()),
    )
}
