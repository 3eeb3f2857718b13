//! # relay — the desktop side of foundry-connect
//!
//! The server can never reach the owner's desktop, so the desktop pulls: this relay polls the
//! relay API outbound, runs the Graph sessions it is configured with (one at a time, or up to
//! `max_parallel` at once), and reports
//! each result through an on-disk outbox so that a crash or a lost response never loses one.
//!
//! | module | what |
//! |---|---|
//! | [`args`] | the command line (clap): `--config` anywhere, `--help` everywhere, `--version`, completions |
//! | [`config`] | the TOML config file: server, device token, sessions and their commands |
//! | [`client`] | the relay API client (sync, start, control, complete) |
//! | [`disk`] | the outbox and the start journal, fsynced |
//! | [`executor`] | runs one Graph in its own process group; cancel = SIGTERM, then SIGKILL; its stderr's progress lines go to [`live`] |
//! | [`live`] | one running Graph's newest progress and log tail, forwarded at most every 10 s |
//! | [`agent`] | the loop: outbox first, retried starts, sync per project, then each command |
//! | [`command`] | one command's steps: consent re-check, journaled start, supervised run, completion |
//! | [`backoff`] | retry delays after a failed pass (exponential, jittered, seedable) |
//! | [`status`] | what `relay status` shows (`status.json` in the state folder) |
//! | [`service`] | `install` / `uninstall`: a launchd agent on macOS, a systemd user unit on Linux |
//! | [`check`] | `relay check`: the setup as the login service sees it, each finding with its fix |
//! | [`cli`] | the subcommands behind `relay status`, `check`, `install`, `uninstall` |
//! | [`doorbell`] | the outbound WebSocket the server rings: `sync` wakes the loop, `control` the running command's check |
//! | [`proxy`] | `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`: one rule for the HTTPS calls and the doorbell (a `CONNECT` tunnel) |
//! | [`network`] | whether the computer's addresses changed (the doorbell is then replaced) |
//! | [`pair`] | `relay pair URL`: the device grant (RFC 8628) from the desktop side, the token kept 0600, the config pointed at it |
//! | `error` | the errors the library returns to its binary |
//! | [`sessions`] | `relay session add / list / remove`: `[[sessions]]` edited keeping comments, atomically |
//! | [`update`] | `relay update` and the daily check: the server's newest build, checked against `SHA256SUMS` and `--version`, renamed into place; the loop restarts into it between runs |

pub mod agent;
pub mod args;
pub mod backoff;
pub mod check;
pub mod cli;
pub mod client;
pub mod command;
pub mod config;
pub mod disk;
pub mod doorbell;
mod error;
pub mod executor;
pub mod live;
pub mod network;
pub mod pair;
pub mod proxy;
pub mod service;
pub mod sessions;
pub mod status;
pub mod update;

pub use error::RelayError;
