//! The machine the relay runs on: its files, its login service, its own binary.
//!
//! | module | what |
//! |---|---|
//! | [`disk`] | the outbox and the start journal, fsynced; the free space they need |
//! | [`status`] | what `relay status` shows (`status.json` in the state folder) |
//! | [`service`] | `install` / `uninstall`: a launchd agent on macOS, a systemd user unit on Linux |
//! | [`update`] | `relay update` and the daily check: the server's newest build, checked against `SHA256SUMS` and `--version`, renamed into place; the loop restarts into it between runs |
//! | [`folders`] | each session's folder tried before every pass: a missing or refused one makes that session unavailable, not the relay |
//! | [`environment`] | what Graphs inherit on purpose: the login shell's environment, an open-file limit above launchd's 256 |
//! | [`system_proxy`] | a Mac's system proxy (`scutil --proxy`), read at start, after a wake or network change and once a minute |
//! | [`launchd`] | `relay check` on a Mac asks launchd whether the agent is loaded, running, crash-looping or switched off |
//! | [`check`] | `relay check`: the setup as the login service sees it, each finding with its fix |
//!
//! It uses [`crate::server`] (the update's downloads, the check's connection test); the server
//! folder does not use it.

pub mod check;
pub mod disk;
pub mod environment;
pub mod folders;
pub mod launchd;
pub mod service;
pub mod status;
pub mod system_proxy;
pub mod update;
