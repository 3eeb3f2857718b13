//! # relay — the desktop side of foundry-connect
//!
//! The server can never reach the owner's desktop, so the desktop pulls: this relay polls the
//! relay API outbound, runs the Graph sessions it is configured with one at a time, and reports
//! each result through an on-disk outbox so that a crash or a lost response never loses one.
//!
//! | module | what |
//! |---|---|
//! | [`config`] | the TOML config file: server, device token, sessions and their commands |
//! | [`client`] | the relay API client (sync, start, control, complete) |
//! | [`disk`] | the outbox and the start journal, fsynced |
//! | [`executor`] | runs one Graph in its own process group; cancel = SIGTERM, then SIGKILL |
//! | [`agent`] | the loop: outbox first, sync per project, consent re-check, start, run, complete |
//! | [`service`] | `install` / `uninstall`: a launchd agent on macOS, a systemd user unit on Linux |

pub mod agent;
pub mod client;
pub mod config;
pub mod disk;
pub mod executor;
pub mod service;
