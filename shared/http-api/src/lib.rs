//! # http-api — the owner's and the relay's HTTP APIs and their contract
//!
//! (The panel's files are the `panel` crate's, the relay installer `relay-dist`'s: the stack
//! serves them beside these APIs.)
//!
//! HTTP handlers take and return plain `http` types with `Bytes` bodies, so the `lambda_http`
//! and axum adapters stay a few lines each.
//!
//! | module | what |
//! |---|---|
//! | [`owner_api`] | the owner's HTTP API: projects, devices, chat links, tasks, runs, subscriptions, pairings |
//! | [`relay_api`] | the desktop relay's HTTP API (sync, start, control, complete, pairing) |
//! | [`openapi`] | the published contract: OpenAPI 3.1 of both, built from their route tables and types |

pub mod openapi;
pub mod owner_api;
pub mod relay_api;
