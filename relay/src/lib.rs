//! # relay — the desktop side of foundry-connect
//!
//! The server can never reach the owner's desktop, so the desktop pulls: this relay polls the
//! relay API outbound, runs the Graph sessions it is configured with (one at a time, or up to
//! `max_parallel` at once), and reports
//! each result through an on-disk outbox so that a crash or a lost response never loses one.
//!
//! The code is grouped by job; each folder's `//!` map lists its files:
//!
//! | folder or module | what | may use |
//! |---|---|---|
//! | [`cli`] | the command line: arguments, `pair`, `session …`, `status`, `check`, `install`, `pause`, `update` | everything |
//! | [`run`] | the run loop and what runs a Graph (the loop, one command's steps, the process, its live progress) | machine, server, config |
//! | [`machine`] | this computer: the on-disk outbox and journal, the status file, the login service, self-update, `relay check` | server, config |
//! | [`server`] | talking to the server: HTTP client, doorbell, proxies, network changes, backoff | config, identity |
//! | [`config`] | the TOML config file: server, device token, sessions and their commands | identity |
//! | [`identity`] | who this relay is: version, platform, host name, the last update check | nothing |
//! | `error` | the errors the library returns to its binary | |
//!
//! No module imports one that imports it back (`tests/tests/layout.rs` holds it).

pub mod cli;
pub mod config;
mod error;
pub mod identity;
pub mod machine;
pub mod run;
pub mod server;

pub use error::RelayError;
