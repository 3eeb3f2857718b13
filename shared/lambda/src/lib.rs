//! # lambda — the Lambda glue of foundry-connect
//!
//! Each `functions/<name>` crate's `main` is one call into this crate; what a function does
//! lives in the service crates (`tools`, `mcp-endpoint`, `http-api`, `events`, `auth`) over `store-dynamo`.
//! Cargo features keep each function's binary to what it uses: a tool function links neither
//! the S3 nor the Lambda client unless it stores artifacts, only `mcp` links the Lambda client,
//! and only the token-verifying functions link the JWKS fetcher.
//!
//! | item | feature | what |
//! |---|---|---|
//! | [`config`] | — | typed settings from the environment (read with `settings`), every key a constant, all problems reported at once |
//! | [`tool::run`] | `tool` | a tool function: `ToolCall` in, `ToolReply` out, for one tool type |
//! | [`s3::S3Blobs`] | `s3` | artifact bytes in S3 |
//! | [`jwks::HttpJwks`] | `jwks` | fetches the OAuth issuer's JWKS over HTTPS (cached by `auth::JwksCache`) |
//! | [`mcp::run`] | `mcp` | the `mcp` function: HTTP API events through `mcp_endpoint::McpEndpoint`, tools invoked as Lambdas |
//! | [`relay_api::run`] | `relay-api` | the `graph_relay` function |
//! | [`register::run`] | `register` | the `register_client` function: RFC 7591 registration as Cognito app clients |
//! | [`owner_api::run`] | `owner-api` | the `owner_api` function (and the owner's panel) |
//! | [`publisher::run`] | `publisher` | the `publish_events` function: table stream → events → SQS (`aws_lambda_events`' DynamoDB event in, its partial-batch response out) |
//! | [`notifier::run`] | `notifier` | the `notify` function: SQS → signed webhooks (`SqsEvent` in, `SqsBatchResponse` out) |
//! | [`doorbell::run_socket`], [`doorbell::run_ring`] | `doorbell` | the cloud doorbell: the WebSocket API's `$connect`/`$disconnect` function, and the ring function on the table's stream |
//! | `http_glue` | `http` | HTTP API (payload v2) events ↔ plain `http` types with `Bytes` bodies |
//!
//! Errors follow one rule: a domain rejection or invalid tool arguments are a tool result
//! (`isError: true`), other bad input a `-32602` or a 400,
//! and an infrastructure fault a Lambda error or a 503 (retryable, details only in the logs).

// The table above links every feature's item; a function's own build (one feature) documents
// only its part, and the links to the rest have nothing to point at there.
#![cfg_attr(
    not(all(
        feature = "tool",
        feature = "s3",
        feature = "relay-api",
        feature = "register",
        feature = "owner-api",
        feature = "publisher",
        feature = "notifier",
        feature = "doorbell",
        feature = "mcp"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

pub mod config;
#[cfg(feature = "doorbell")]
pub mod doorbell;
#[cfg(feature = "http")]
mod http_glue;
#[cfg(feature = "jwks")]
pub mod jwks;
#[cfg(feature = "mcp")]
pub mod mcp;
/// The SQS message attribute naming the request whose change made an event (API Gateway's id,
/// recorded on the item by the write): `publish_events` sets it, `notify` delivers under it.
pub const EVENT_REQUEST_ID_ATTRIBUTE: &str = "request_id";

#[cfg(feature = "notifier")]
pub mod notifier;
#[cfg(feature = "owner-api")]
pub mod owner_api;
#[cfg(feature = "publisher")]
pub mod publisher;
#[cfg(feature = "register")]
pub mod register;
#[cfg(feature = "relay-api")]
pub mod relay_api;
#[cfg(feature = "s3")]
pub mod s3;
#[cfg(feature = "tool")]
pub mod tool;

/// The error type Lambda entry points return.
pub type Error = lambda_runtime::Error;

/// JSON logs for CloudWatch, filtered by `RUST_LOG` (default `info`): [`logging::init_json`].
pub fn init_tracing() {
    logging::init_json();
}

/// Reads one environment variable; empty counts as unset.
pub fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// The AWS SDK configuration from the Lambda environment (region, credentials, endpoint).
pub async fn aws_config() -> aws_config::SdkConfig {
    aws_defaults().load().await
}

/// The AWS SDK's configuration loader (the environment's region, credentials and endpoint, as
/// `aws_config::defaults`) with the workspace's HTTPS client: hyper and rustls with the *ring*
/// provider. The SDK's own default client (`default-https-client`) would link aws-lc, a second
/// crypto library beside the *ring* the rest of the workspace uses, into every function; the
/// workspace turns that feature off, so every SDK configuration is made here.
pub fn aws_defaults() -> aws_config::ConfigLoader {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    let http = aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring)).build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http)
}

/// A stream record's old and new images (DynamoDB JSON, as the stream delivers them; an absent
/// image is empty) decoded as the store's items.
#[cfg(any(feature = "publisher", feature = "doorbell"))]
pub(crate) fn stream_images(
    record: &aws_lambda_events::event::dynamodb::EventRecord,
) -> domain::store::StoreResult<(Option<store_dynamo::Item>, Option<store_dynamo::Item>)> {
    fn image(item: &impl serde::Serialize) -> domain::store::StoreResult<Option<store_dynamo::Item>> {
        let json = serde_json::to_value(item).map_err(|e| domain::store::StoreError::Corrupt(e.to_string()))?;
        if json.as_object().is_none_or(serde_json::Map::is_empty) {
            return Ok(None);
        }
        store_dynamo::item_from_stream_json(&json).map(Some)
    }
    Ok((image(&record.change.old_image)?, image(&record.change.new_image)?))
}

/// The DynamoDB store on `table`, with the system clock.
#[cfg(feature = "dynamo")]
pub fn dynamo_store(
    aws: &aws_config::SdkConfig,
    table: &str,
    policy: domain::limits::Policy,
) -> store_dynamo::DynamoStore {
    let clock: domain::clock::SharedClock = std::sync::Arc::new(domain::clock::SystemClock);
    store_dynamo::DynamoStore::new(aws_sdk_dynamodb::Client::new(aws), table, clock, policy)
}
