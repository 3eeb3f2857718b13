//! # service — foundry-connect's behaviour over any store
//!
//! The layer between the wire and the [`domain`]: every Lambda function, the local server and
//! the tests call into this crate, over any implementation of the store capabilities
//! (`store-dynamo` in the cloud, `store-sqlite` locally).
//!
//! | module | what |
//! |---|---|
//! | [`auth`] | bearer tokens: RS256 against a cached JWKS, HS256 in local mode |
//! | [`tools`] | the nine MCP tools: one module per tool (spec, wire types, handler) and the catalogue |
//! | [`mcp`] | the MCP endpoint: rmcp (stateless JSON) behind auth, scope and size checks |
//! | [`relay_api`] | the desktop relay's HTTP API (sync, start, control, complete) |
//! | [`owner_api`] | the owner's HTTP API (projects, device tokens) |
//! | [`http_json`] | the JSON helpers the two HTTP APIs share |
//!
//! HTTP handlers take and return plain `http` types with `Bytes` bodies, so `lambda_http`
//! and axum adapters stay a few lines each.

pub mod auth;
pub mod http_json;
pub mod mcp;
pub mod owner_api;
pub mod relay_api;
pub mod tools;
