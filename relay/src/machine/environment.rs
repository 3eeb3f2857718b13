//! What a Graph inherits from the owner's machine, on purpose: the login shell's environment
//! and an open-file limit a real program can live with.
//!
//! launchd starts the agent with almost nothing: `PATH=/usr/bin:/bin:/usr/sbin:/sbin` (the
//! install-time `PATH` and proxies are written into the plist), no `SSH_AUTH_SOCK` of the
//! owner's agent (1Password, Secretive), none of the keys exported in `~/.zshrc`, no
//! `NODE_EXTRA_CA_CERTS` / `REQUESTS_CA_BUNDLE`, and a soft limit of 256 open files
//! (`launchctl limit maxfiles`). So:
//!
//! - **The login shell's environment** ([`login_shell`]): under the login service (or with
//!   `shell_environment = true`), the relay asks the owner's shell (`$SHELL`, else `/bin/zsh`
//!   on macOS and `/bin/sh` elsewhere) started as an interactive login shell (`-l -i`: zsh
//!   reads `~/.zprofile` and `~/.zshrc`, bash `~/.bash_profile`) to run `relay
//!   print-environment`, which prints its environment as JSON. That is what the owner's
//!   Terminal would give a program. It is read at start and again when older than
//!   [`REFRESH`] (before a pass), within [`CAPTURE_TIMEOUT`]; a shell that fails or hangs leaves
//!   the last good capture (or none), and says so in the log. Graphs get it under their
//!   session's own `env`, which wins; [`SKIPPED`] are left out. Only names ever reach a log.
//! - **Open files** ([`raise_open_files`]): the relay raises its own soft `RLIMIT_NOFILE` to
//!   [`OPEN_FILES`] (or the hard limit, if lower) at start, and every Graph inherits it; the
//!   plist also sets `SoftResourceLimits`.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The soft open-file limit the relay and its Graphs get (macOS's `OPEN_MAX`, which
/// `setrlimit` accepts for any process; launchd's default is 256).
pub const OPEN_FILES: u64 = 10_240;
/// How long the login shell may take to print its environment.
pub const CAPTURE_TIMEOUT: Duration = Duration::from_secs(15);
/// A capture older than this is taken again before the next pass.
pub const REFRESH: Duration = Duration::from_secs(600);
/// The hidden subcommand the shell runs: prints the environment as one JSON object.
pub const PRINT_COMMAND: &str = "print-environment";

/// Variables of the shell that mean nothing to a Graph, or that the relay sets itself.
pub const SKIPPED: [&str; 8] = ["PWD", "OLDPWD", "SHLVL", "_", "TERM", "PS1", "PS2", "PROMPT"];

/// Raises this process's soft open-file limit to [`OPEN_FILES`] (never above the hard
/// limit, never lowering it): the soft limit before and after.
///
/// # Errors
/// When the system refuses to say or to change it.
pub fn raise_open_files() -> Result<(u64, u64), String> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("getrlimit: {e}"))?;
    let want = OPEN_FILES.min(hard);
    if soft >= want {
        return Ok((soft, soft));
    }
    setrlimit(Resource::RLIMIT_NOFILE, want, hard).map_err(|e| format!("setrlimit({want}): {e}"))?;
    Ok((soft, want))
}

/// The owner's login shell: `$SHELL`, else the platform's default.
pub fn shell() -> PathBuf {
    std::env::var_os("SHELL")
        .filter(|s| !s.is_empty())
        .map_or_else(|| PathBuf::from(if cfg!(target_os = "macos") { "/bin/zsh" } else { "/bin/sh" }), PathBuf::from)
}

/// The environment `shell`, started as an interactive login shell in `home`, gives a
/// program: it runs `exe print-environment` (this relay) and reads the JSON it prints.
///
/// # Errors
/// The shell does not start, fails, takes longer than [`CAPTURE_TIMEOUT`], or prints no
/// environment: the reason (never a value).
pub fn login_shell(shell: &Path, exe: &Path, home: &Path) -> Result<BTreeMap<String, String>, String> {
    use std::process::{Command, Stdio};
    // `$0` is the relay's path, so no quoting of it reaches the shell's parser.
    let mut child = Command::new(shell)
        .args(["-l", "-i", "-c", &format!("exec \"$0\" {PRINT_COMMAND}")])
        .arg(exe)
        .current_dir(home)
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", shell.display()))?;
    let deadline = std::time::Instant::now() + CAPTURE_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                // The whole group: an interactive shell may have started helpers.
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = child.wait();
                return Err(format!("{} did not print its environment within {CAPTURE_TIMEOUT:?}", shell.display()));
            }
        }
    }
    let out = child.wait_with_output().map_err(|e| format!("{}: {e}", shell.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // Whatever `.zshrc` printed comes before the JSON, on its own lines.
    let json = text.lines().rev().find(|l| l.starts_with('{')).ok_or_else(|| {
        format!(
            "{} printed no environment (exit {}): a ~/.zshrc that exits or execs another program?",
            shell.display(),
            out.status
        )
    })?;
    let all: BTreeMap<String, String> = serde_json::from_str(json)
        .map_err(|_| format!("{} printed an environment that does not parse", shell.display()))?;
    Ok(all.into_iter().filter(|(k, _)| !SKIPPED.contains(&k.as_str()) && !k.starts_with("FOUNDRY_")).collect())
}

/// What `relay print-environment` prints: this process's environment, one JSON object on one
/// line (variables whose name or value is not Unicode are left out).
pub fn print_environment() -> String {
    let all: BTreeMap<String, String> =
        std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
    serde_json::to_string(&all).unwrap_or_else(|_| "{}".into())
}

/// The names `shell` has and `agent` lacks (what `relay check` lists: names, never values),
/// leaving out the terminal's own.
pub fn missing_names(shell: &BTreeMap<String, String>, agent: &BTreeMap<String, String>) -> Vec<String> {
    const TERMINAL: [&str; 12] = [
        "TERM_PROGRAM",
        "TERM_PROGRAM_VERSION",
        "TERM_SESSION_ID",
        "COLORTERM",
        "ITERM_SESSION_ID",
        "SSH_CLIENT",
        "SSH_CONNECTION",
        "SSH_TTY",
        "TMUX",
        "TMUX_PANE",
        "COLUMNS",
        "LINES",
    ];
    shell
        .keys()
        .filter(|k| !agent.contains_key(*k) && !TERMINAL.contains(&k.as_str()) && !SKIPPED.contains(&k.as_str()))
        .filter(|k| !k.starts_with("__CF") && !k.starts_with("XPC_") && !k.starts_with("FOUNDRY_"))
        .cloned()
        .collect()
}

/// `PATH` entries tied to one version of a tool or to one shell's session (nvm, fnm, mise,
/// asdf, pyenv, a virtualenv): they break when the owner upgrades or the session ends. With
/// why, for `relay install` and `relay check` to warn.
pub fn fragile_path_entries(path: &str) -> Vec<(String, &'static str)> {
    const TIED: [(&str, &str); 8] = [
        ("/.nvm/versions/", "one Node version of nvm"),
        ("/fnm_multishells/", "one shell's fnm session"),
        ("/.fnm/node-versions/", "one Node version of fnm"),
        ("/mise/installs/", "one version installed by mise"),
        ("/.asdf/installs/", "one version installed by asdf"),
        ("/.pyenv/versions/", "one Python version of pyenv"),
        ("/.volta/tools/image/", "one Node version of Volta"),
        ("/.rbenv/versions/", "one Ruby version of rbenv"),
    ];
    let venv = std::env::var("VIRTUAL_ENV").ok().filter(|v| !v.is_empty());
    path.split(':')
        .filter(|e| !e.is_empty())
        .filter_map(|e| {
            if let Some((_, why)) = TIED.iter().find(|(p, _)| e.contains(p)) {
                return Some((e.to_owned(), *why));
            }
            venv.as_deref().filter(|v| e.starts_with(v)).map(|_| (e.to_owned(), "the virtualenv active in this shell"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_entries_tied_to_one_version_or_one_shell_are_named() {
        let path = "/Users/ana/.nvm/versions/node/v20.11.1/bin:/opt/homebrew/bin:/Users/ana/.local/state/fnm_multishells/4521_1733/bin:/usr/bin:/Users/ana/.local/share/mise/installs/python/3.12/bin";
        let found: Vec<&str> = fragile_path_entries(path).iter().map(|(_, why)| *why).collect();
        assert_eq!(found, ["one Node version of nvm", "one shell's fnm session", "one version installed by mise"]);
        assert!(fragile_path_entries("/opt/homebrew/bin:/usr/bin:/bin").is_empty());
    }

    #[test]
    fn missing_names_leave_out_the_terminals_own() {
        let m = |k: &[&str]| k.iter().map(|k| ((*k).to_owned(), "v".to_owned())).collect::<BTreeMap<_, _>>();
        let shell = m(&["PATH", "OPENAI_API_KEY", "SSH_AUTH_SOCK", "TERM_PROGRAM", "PWD", "__CFBundleIdentifier"]);
        let agent = m(&["PATH"]);
        assert_eq!(missing_names(&shell, &agent), ["OPENAI_API_KEY", "SSH_AUTH_SOCK"]);
    }

    /// The soft limit launchd gives (256) is raised for the relay and what it starts (each
    /// nextest test is its own process, so lowering it here touches no other test).
    #[test]
    fn a_low_open_file_limit_is_raised_and_a_graph_inherits_it() {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, 256, hard).unwrap();
        let (before, after) = raise_open_files().unwrap();
        assert_eq!(before, 256);
        assert_eq!(after, OPEN_FILES.min(hard));
        let out = std::process::Command::new("sh").args(["-c", "ulimit -n"]).output().unwrap();
        let n: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert!(n > 256, "a Graph sees ulimit -n = {n}");
    }
}
