//! # http-api — the owner's and the relay's HTTP APIs, their contract, the panel, the installer
//!
//! HTTP handlers take and return plain `http` types with `Bytes` bodies, so the `lambda_http`
//! and axum adapters stay a few lines each.
//!
//! | module | what |
//! |---|---|
//! | [`owner_api`] | the owner's HTTP API: projects, devices, chat links, tasks, runs, subscriptions, pairings |
//! | [`relay_api`] | the desktop relay's HTTP API (sync, start, control, complete, pairing) |
//! | [`openapi`] | the published contract: OpenAPI 3.1 of both, built from their route tables and types |
//! | [`panel`] | the owner's web panel: static assets embedded in the binary, served with a strict CSP |
//! | [`relay_dist`] | `/relay/install.sh` and the relay downloads: the one-line installer, archives checked by SHA-256 |

pub mod openapi;
pub mod owner_api;
pub mod panel;
pub mod relay_api;
pub mod relay_dist;
