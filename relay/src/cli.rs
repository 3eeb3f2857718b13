//! The command line: what the owner types, parsed ([`args`]), and the subcommands other than
//! `run` — `pair` ([`pair`]), `session add / list / remove` ([`sessions`]), `status`, `check`,
//! `install`, `uninstall`, `pause`, `resume`, `update` ([`commands`]), and the built-in hello Graph
//! ([`hello`]). Each prints what it did
//! for the owner and returns a [`CliError`] the binary prints.
//!
//! This folder is the top of the relay: it may use every other folder; nothing uses it.

use std::path::Path;

use crate::config::Config;

pub mod args;
pub mod commands;
pub mod hello;
pub mod pair;
pub mod sessions;
pub mod task;

/// A subcommand that failed: the message for the owner.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CliError(pub String);

impl CliError {
    pub(crate) fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        Self(e.to_string())
    }
}

/// Loads the config at `path`, naming the file in the error.
///
/// # Errors
/// The file's problems, all of them.
pub fn load(path: &Path) -> Result<Config, CliError> {
    if !path.exists() {
        return Err(missing_config(path));
    }
    Config::load(path).map_err(|e| CliError(format!("{}:\n{e}", path.display())))
}

/// A duration as `relay pause --for` takes it: a whole number and a unit (`s`, `m`, `h`, `d`).
///
/// # Errors
/// A message naming the option and the form.
pub fn parse_duration(text: &str) -> Result<u64, CliError> {
    let bad = || CliError::new(format!("--for {text}: a whole number and a unit s, m, h or d (e.g. 90m, 2h, 3d)"));
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(per).ok_or_else(bad)
}

/// What the config-reading commands say when there is no config yet.
pub(crate) fn missing_config(path: &Path) -> CliError {
    CliError(format!(
        "no config at {}: pair this desktop first with `relay pair SERVER_URL` (it writes the config), or pass --config PATH",
        path.display()
    ))
}
