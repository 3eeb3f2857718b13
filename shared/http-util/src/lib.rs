//! # http-util — what every HTTP surface of foundry-connect shares
//!
//! The pieces the relay API, the owner API, the OAuth endpoints, the MCP endpoint and the
//! doorbells all use, below all of them (so none imports another for them):
//!
//! | item | what |
//! |---|---|
//! | [`cors`] | CORS for the endpoints browser-based MCP clients call cross-origin (any origin, no credentials) |
//! | [`http_json`] | JSON answers and the one body parser that names the field it refuses |
//! | [`routes`] | the route tables' types and [`routes::find`]; the OpenAPI document is built from the tables |
//! | [`bearer`], [`device_of`] | the bearer token of a request; the device a relay's token names |
//! | [`ClientSource`], [`TraceId`] | what the adapters put in a request's extensions: the caller's address, the request's id |
//! | [`media_type_is`] | the `Content-Type` check of the routes that take JSON only |

pub mod cors;
pub mod http_json;
pub mod routes;

use domain::devices::token_hash;
use domain::store::{AuthenticateDevices, StoreError};
use http::header;

/// Where a request came from: the client's IP address as the transport saw it (API Gateway's
/// `sourceIp`, the local server's peer address), put into the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSource(pub String);

/// The id of the HTTP request being served (API Gateway's `requestContext.requestId` in the
/// cloud), put into the request's extensions by the adapter: the MCP endpoint hands it to the
/// tool functions in their invoke payload, so one call's log lines carry one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceId(pub String);

/// Whether the request's `Content-Type` is `media_type` (parameters such as `charset` aside).
pub fn media_type_is(headers: &http::HeaderMap, media_type: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case(media_type))
}

/// The bearer token in an `Authorization` header value, if it is one.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let h = header?.trim();
    let (scheme, token) = h.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

/// What a request without a valid device token is told (the relay API, the doorbell's upgrade).
pub const DEVICE_TOKEN_REQUIRED: &str = "a valid device token is required (Authorization: Bearer fcd_…)";

/// The unrevoked device whose token `headers` present (`Authorization: Bearer fcd_…`), one read;
/// `None` without a token or for an unknown or revoked one. The relay API and both doorbells
/// (the local server's upgrade, the cloud's `$connect`) authenticate through this.
///
/// # Errors
/// The store failed.
pub async fn device_of<S: AuthenticateDevices + ?Sized>(
    store: &S,
    headers: &http::HeaderMap,
) -> Result<Option<domain::devices::Device>, StoreError> {
    match bearer(headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())) {
        None => Ok(None),
        Some(t) => store.device_by_token_hash(&token_hash(t)).await,
    }
}
