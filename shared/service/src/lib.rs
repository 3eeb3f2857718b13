//! # service — foundry-connect's behaviour over any store
//!
//! The layer between the wire and the [`domain`]: every Lambda function, the local server and
//! the tests call into this crate, over any implementation of the store capabilities
//! (`store-dynamo` in the cloud, `store-sqlite` locally).
//!
//! | module | what |
//! |---|---|
//! | [`auth`] | bearer tokens: RS256 against a cached JWKS, HS256 in local mode |
//! | [`blobs`] | artifact bytes: the blob store interface, the local folder store and its signed download links |
//! | [`tools`] | the nine MCP tools: one module per tool (spec, wire types, handler) and the catalogue |
//! | [`events`] | delivering events as signed webhooks (Standard Webhooks), with backoff; the local notifier loop |
//! | [`mcp`] | the MCP endpoint: rmcp (stateless JSON) behind auth, scope and size checks |
//! | [`oauth`] | connecting with only the URL: the stack's own authorization-server metadata, dynamic client registration, the local authorize/token endpoints |
//! | [`relay_api`] | the desktop relay's HTTP API (sync, start, control, complete) |
//! | [`relay_dist`] | `/relay/install.sh` and the relay downloads: the one-line installer, archives checked by SHA-256 |
//! | [`openapi`] | the published contract: OpenAPI 3.1 of the owner and relay APIs, built from their route tables and types |
//! | [`owner_api`] | the owner's HTTP API: projects, devices, chat links, tasks, runs, subscriptions |
//! | [`panel`] | the owner's web panel: static assets embedded in the binary, served with a strict CSP |
//! | [`settings`] | the one reader of settings from the environment, and its [`settings::ConfigError`] |
//! | [`webhook_url`] | which event-subscription URLs are allowed (checked when saved and at delivery) |
//! | [`http_json`] | the JSON helpers the two HTTP APIs share |
//!
//! HTTP handlers take and return plain `http` types with `Bytes` bodies, so `lambda_http`
//! and axum adapters stay a few lines each.

pub mod auth;
pub mod blobs;
pub mod events;
pub mod http_json;
pub mod mcp;
pub mod oauth;
pub mod openapi;
pub mod owner_api;
pub mod panel;
pub mod relay_api;
pub mod relay_dist;
pub mod settings;
pub mod tools;
pub mod webhook_url;

/// The id of the HTTP request being served (API Gateway's `requestContext.requestId` in the
/// cloud), put into the request's extensions by the adapter: the MCP endpoint hands it to the
/// tool functions in their invoke payload, so one call's log lines carry one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceId(pub String);
