//! The command line (clap, derive): `relay [--config PATH] <command> …`, with `--config` and
//! `--help` accepted anywhere, `relay help <command>`, `--version`, and `relay completions
//! <shell>`. Usage errors print the usage and exit 2; they never print a stack trace.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The relay's arguments.
#[derive(Debug, Parser)]
#[command(
    name = "relay",
    version,
    about = "The foundry-connect desktop relay: runs the Graph sessions you share, for the chats you connect",
    after_help = "config: --config, else $FOUNDRY_RELAY_CONFIG, else the platform's config folder (relay.toml)"
)]
pub struct Cli {
    /// The config file (default: $FOUNDRY_RELAY_CONFIG, else relay.toml in the platform's
    /// config folder).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pair this desktop with the owner's account (approve it in the panel).
    Pair(Pair),
    /// Poll the server and run shared Graph sessions (Ctrl-C / SIGTERM stop it).
    Run,
    /// The config, last sync, outbox size, current run.
    Status,
    /// Find what stops the relay under its login service: the config, the files' modes, each
    /// session's folder and command, the proxy, the server, the doorbell, the clock.
    Check,
    /// Pause this desktop: the run in progress finishes, no new one starts (queued runs wait).
    Pause {
        /// How long, e.g. `90m`, `2h`, `3d` (s, m, h, d; at most 30 days); default: until resumed.
        #[arg(long = "for", value_name = "DURATION")]
        duration: Option<String>,
        /// Why (shown in the owner's panel), at most 200 characters.
        #[arg(long)]
        note: Option<String>,
    },
    /// End this desktop's pause (its queued runs start at its next sync).
    Resume,
    /// Install the server's newest relay build for this machine (checked against its
    /// SHA256SUMS and `--version`); a running relay restarts into it when its run ends.
    Update,
    /// Start the relay at every login: a launchd agent (macOS) or a systemd user unit (Linux).
    Install {
        /// The program the service starts (default: this one). The installer passes the path
        /// it installed to, so the service keeps starting that path even when this process was
        /// reached through a wrapper or a symlink into a versioned folder.
        #[arg(long, hide = true)]
        exe: Option<std::path::PathBuf>,
        /// Rewrite the installed service file with this build's text, keeping the program,
        /// PATH, LANG and proxies it records (`relay update` runs it through the new build).
        #[arg(long, hide = true)]
        refresh: bool,
    },
    /// Remove the login service (the state folder and the token stay).
    Uninstall,
    /// Add, list or remove the Graph sessions this desktop shares.
    #[command(subcommand)]
    Session(Session),
    /// From a running Graph: hand a step to one of the owner's linked chats and wait for its
    /// answer (printed as JSON). Reads its run's socket and capability from the environment.
    #[command(subcommand)]
    Task(Task),
    /// Internal: prints this process's environment as JSON (what the owner's login shell gives
    /// a program; `relay::machine::environment`).
    #[command(name = "print-environment", hide = true)]
    PrintEnvironment,
    /// The built-in hello Graph (what `relay session add --hello` shares): reads the run's
    /// arguments on stdin, `{"name": "…", "seconds": n}` (both optional), reports progress on
    /// stderr once a second for `seconds` (0 to 60, default 0), and prints
    /// `{"result": "Hello, <name>!"}`.
    #[command(hide = true)]
    Hello,
    /// Print a completion script for a shell (e.g. `relay completions zsh > ~/.zfunc/_relay`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `relay task …`.
#[derive(Debug, Subcommand)]
pub enum Task {
    /// Ask a linked chat (the owner must allow tasks from desktops on it) and wait: prints
    /// `{"task": {…, "status": …, "result": …}}` and exits 0 when the chat completed it, 3 when
    /// the task ended otherwise (failed, cancelled, expired), 2 on a refusal (`{"error": …}`).
    Ask(Ask),
}

/// `relay task ask`.
#[derive(Debug, Clone, Args, PartialEq, Eq)]
pub struct Ask {
    /// The chat link to ask (its `chat_link_id`, shown in the panel).
    #[arg(long = "link", value_name = "CHAT_LINK_ID")]
    pub chat_link_id: String,
    /// This step's key, 8 to 128 characters: asking again with it (after a crash, a retry)
    /// returns the same task instead of a second one.
    #[arg(long)]
    pub key: String,
    /// How long the chat has, e.g. `10m` (s, m, h, d); default and most: the server's (30 minutes).
    #[arg(long = "expires-in", value_name = "DURATION")]
    pub expires_in: Option<String>,
    /// Print the task as it is now instead of waiting for it to end.
    #[arg(long)]
    pub no_wait: bool,
    /// What the chat should do (1 to 10,000 characters); `-` reads it from stdin.
    pub objective: String,
}

/// `relay pair`.
#[derive(Debug, Clone, Args, PartialEq, Eq)]
pub struct Pair {
    /// The server's URL (the panel's "Add a desktop" shows it).
    pub server_url: String,
    /// This desktop's name in the panel (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Accept the account the approval names without asking (for scripts with no terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Set by the one-line installer, which runs `relay install` itself and prints the next
    /// steps: the closing "next:" line is left out.
    #[arg(long, hide = true)]
    pub from_installer: bool,
    /// Set by the one-line installer run again: when this config is already paired with this
    /// server and the server still accepts its token, keep that pairing (no second device).
    #[arg(long, hide = true)]
    pub keep_pairing: bool,
}

/// `relay session …`.
#[derive(Debug, Clone, Subcommand, PartialEq, Eq)]
pub enum Session {
    /// Share a Graph: `relay session add --name NAME --project ID -- COMMAND [ARGS…]`.
    Add(SessionAdd),
    /// The sessions in the config.
    List,
    /// Stop sharing a session (by its id or slug).
    Remove {
        /// Its `gs_…` id or its slug.
        id_or_slug: String,
    },
}

/// `relay session add`.
#[derive(Debug, Clone, Args, PartialEq, Eq)]
pub struct SessionAdd {
    /// The name shown to agents (with `--hello`: default "Hello").
    #[arg(long, required_unless_present = "hello")]
    pub name: Option<String>,
    /// Share the relay's built-in hello Graph (`relay hello`: greets `arguments.name`) instead
    /// of a command of your own: the first session to try a chat with.
    #[arg(long, conflicts_with = "command")]
    pub hello: bool,
    /// A project it is shared in (repeat for more).
    #[arg(long = "project", required = true, value_name = "PROJECT_ID")]
    pub projects: Vec<String>,
    /// The slug (default: from the name).
    #[arg(long, default_value = "")]
    pub slug: String,
    /// The version label.
    #[arg(long, default_value = "1", value_name = "V")]
    pub version: String,
    /// What it does, for agents.
    #[arg(long, default_value = "")]
    pub description: String,
    /// The program and its arguments, after `--` (not with `--hello`).
    #[arg(last = true, required_unless_present = "hello", value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("relay").chain(args.iter().copied()))
    }

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `--config` before or after the subcommand (the second is what launchd agents written by
    /// earlier relays run), and nowhere is required.
    #[test]
    fn config_goes_anywhere() {
        for args in [["--config", "/x.toml", "run"], ["run", "--config", "/x.toml"]] {
            let cli = parse(&args).unwrap();
            assert_eq!(cli.config.as_deref(), Some(std::path::Path::new("/x.toml")), "{args:?}");
            assert!(matches!(cli.command, Command::Run));
        }
        let cli = parse(&["session", "list", "--config", "/y.toml"]).unwrap();
        assert_eq!(cli.config.as_deref(), Some(std::path::Path::new("/y.toml")));
        assert!(parse(&["run"]).unwrap().config.is_none());
    }

    /// `--help` on every subcommand, `help <cmd>`, `--version`: each ends the parse with its
    /// own kind (printed by clap, exit 0), never "unexpected argument".
    #[test]
    fn help_and_version_everywhere() {
        use clap::error::ErrorKind;
        for args in [
            &["--help"][..],
            &["run", "--help"],
            &["session", "add", "--help"],
            &["session", "--help"],
            &["help", "pair"],
            &["help", "session", "add"],
        ] {
            let e = parse(args).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::DisplayHelp, "{args:?}: {e}");
        }
        assert_eq!(parse(&["--version"]).unwrap_err().kind(), ErrorKind::DisplayVersion);
        assert_eq!(parse(&["bogus"]).unwrap_err().kind(), ErrorKind::InvalidSubcommand);
    }

    #[test]
    fn session_add_takes_the_command_after_the_double_dash() {
        let cli = parse(&[
            "session",
            "add",
            "--name",
            "Weekly",
            "--project",
            "p1",
            "--project",
            "p2",
            "--version",
            "3",
            "--",
            "sh",
            "-c",
            "echo --name",
        ])
        .unwrap();
        let Command::Session(Session::Add(a)) = cli.command else { panic!() };
        assert_eq!(a.projects, ["p1", "p2"]);
        assert_eq!(a.command, ["sh", "-c", "echo --name"]);
        assert_eq!((a.version.as_str(), a.slug.as_str()), ("3", ""));
        let e = parse(&["session", "add", "--name", "X", "--project", "p"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{e}");
        // `--hello` needs neither a name nor a command, and takes no command.
        let cli = parse(&["session", "add", "--hello", "--project", "p"]).unwrap();
        let Command::Session(Session::Add(a)) = cli.command else { panic!() };
        assert!(a.hello && a.name.is_none() && a.command.is_empty());
        let e = parse(&["session", "add", "--hello", "--project", "p", "--", "sh"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{e}");
        let e = parse(&["session", "add", "--project", "p", "--", "sh"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{e}");
        let pair = parse(&["pair", "https://x.example", "--yes", "--name", "Mac"]).unwrap();
        assert!(
            matches!(pair.command, Command::Pair(Pair { yes: true, ref name, .. }) if name.as_deref() == Some("Mac"))
        );
    }

    #[test]
    fn completions_are_generated_for_each_shell() {
        for shell in [clap_complete::Shell::Zsh, clap_complete::Shell::Bash, clap_complete::Shell::Fish] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "relay", &mut out);
            let text = String::from_utf8(out).unwrap();
            assert!(
                text.contains("session") && text.contains("config") && text.contains("completions"),
                "{shell}: {text}"
            );
        }
    }
}
