//! `relay session add | list | remove`: the config's `[[sessions]]` edited from the command
//! line, so an owner never writes a `gs_` id, a slug or a TOML table by hand.
//!
//! The file is rewritten with `toml_edit`, which keeps the owner's comments, order and layout;
//! the new text must load as a whole config (every rule of [`Config::parse`]) before it replaces
//! the old, and it replaces it atomically (a temporary file beside it, synced, renamed over it),
//! keeping the old file's mode. A running relay picks the change up before its next pass (it
//! reloads the file when its modification time changes).

use std::io::Write;
use std::path::Path;

use toml_edit::{Array, ArrayOfTables, DocumentMut, Item, Table, value};

use crate::cli::CliError;
use crate::config::Config;

/// What `relay session add` was given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewSession {
    /// The name shown to agents.
    pub name: String,
    /// What it does, for agents (optional).
    pub description: String,
    /// The slug; derived from the name when empty.
    pub slug: String,
    /// The version label (default `1`).
    pub version: String,
    /// Projects it is shared in.
    pub projects: Vec<String>,
    /// The program and its arguments.
    pub command: Vec<String>,
}

/// `weekly-report` from `Weekly Report!`: lower-case letters and digits, other runs of
/// characters one `-`, none at the ends.
pub fn slug_of(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_owned()
}

/// A new session id: `gs_` and 32 random hex digits.
pub fn new_session_id() -> String {
    format!("gs_{}", uuid::Uuid::new_v4().simple())
}

fn parse(text: &str) -> Result<DocumentMut, CliError> {
    text.parse::<DocumentMut>().map_err(|e| CliError(format!("the config is not valid TOML: {e}")))
}

fn sessions_of(doc: &mut DocumentMut) -> Result<&mut ArrayOfTables, CliError> {
    let item = doc.entry("sessions").or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    item.as_array_of_tables_mut().ok_or_else(|| CliError::new("sessions: must be an array of tables ([[sessions]])"))
}

/// The config text with `new` appended as a `[[sessions]]` table; its generated id.
///
/// # Errors
/// The text is not TOML, or the result does not load as a config (naming the rule).
pub fn add_to(text: &str, new: &NewSession, base: &Path) -> Result<(String, String), CliError> {
    let mut doc = parse(text)?;
    let id = new_session_id();
    let mut t = Table::new();
    t["graph_session_id"] = value(id.as_str());
    t["name"] = value(new.name.as_str());
    if !new.description.is_empty() {
        t["description"] = value(new.description.as_str());
    }
    t["slug"] = value(if new.slug.is_empty() { slug_of(&new.name) } else { new.slug.clone() });
    t["version"] = value(if new.version.is_empty() { "1" } else { new.version.as_str() });
    t["projects"] = value(new.projects.iter().map(String::as_str).collect::<Array>());
    t["command"] = value(new.command.iter().map(String::as_str).collect::<Array>());
    sessions_of(&mut doc)?.push(t);
    let out = doc.to_string();
    Config::parse(&out, base).map_err(|e| CliError(format!("the session was not added:\n{e}")))?;
    Ok((out, id))
}

/// The config text without the session whose id or slug is `which`.
///
/// # Errors
/// No such session, or the text is not TOML.
pub fn remove_from(text: &str, which: &str) -> Result<String, CliError> {
    let mut doc = parse(text)?;
    let sessions = sessions_of(&mut doc)?;
    let found = sessions.iter().position(|t| {
        [t.get("graph_session_id"), t.get("slug")].into_iter().flatten().any(|v| v.as_str() == Some(which))
    });
    let Some(i) = found else {
        return Err(CliError(format!("no session with id or slug {which:?} (relay session list shows them)")));
    };
    sessions.remove(i);
    Ok(doc.to_string())
}

/// Replaces `path` with `text` atomically, keeping its mode.
///
/// # Errors
/// The folder cannot be written.
pub fn replace(path: &Path, text: &str) -> Result<(), CliError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode() & 0o777).unwrap_or(0o600);
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("relay.toml"),
        std::process::id()
    ));
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
    let written = f.write_all(text.as_bytes()).and_then(|()| crate::machine::disk::sync_file(&f));
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(CliError(format!("writing {}: {e}", path.display())));
    }
    Ok(())
}

/// Reads the config's text, naming the command that creates a missing one.
fn read(config_path: &Path) -> Result<String, CliError> {
    std::fs::read_to_string(config_path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => super::missing_config(config_path),
        _ => CliError(format!("{}: {e}", config_path.display())),
    })
}

/// The name, slug and description of the built-in hello Graph's session (`--hello`).
pub const HELLO: (&str, &str, &str) = (
    "Hello",
    "hello",
    "The relay's built-in hello Graph: answers \"Hello, <name>!\" for arguments {\"name\": \"…\"} (default \"world\"); \"seconds\" (0 to 60) makes it report progress once a second that long first.",
);

impl NewSession {
    /// The session `relay session add` asked for: with `--hello`, the built-in hello Graph run
    /// by `exe` (this relay), named "Hello" unless `--name` says otherwise.
    pub fn from_args(a: crate::cli::args::SessionAdd, exe: &Path) -> Self {
        let (name, slug, description, command) = if a.hello {
            let (name, slug, description) = HELLO;
            (
                a.name.unwrap_or_else(|| name.to_owned()),
                if a.slug.is_empty() { slug.to_owned() } else { a.slug },
                if a.description.is_empty() { description.to_owned() } else { a.description },
                vec![exe.display().to_string(), "hello".to_owned()],
            )
        } else {
            (a.name.unwrap_or_default(), a.slug, a.description, a.command)
        };
        Self { name, description, slug, version: a.version, projects: a.projects, command }
    }
}

/// `relay session …`.
///
/// # Errors
/// No config yet (naming `relay pair`), or the change was refused (nothing written).
pub fn command(config_path: &Path, which: crate::cli::args::Session) -> Result<(), CliError> {
    use crate::cli::args::Session;
    let base = config_path.parent().unwrap_or(Path::new("."));
    match which {
        Session::Add(add) => {
            let exe =
                std::env::current_exe().map_err(|e| CliError(format!("cannot find this relay's own path: {e}")))?;
            let new = NewSession::from_args(add, &exe);
            if new.name.trim().is_empty() {
                return Err(CliError::new("--name: must not be empty"));
            }
            let (text, id) = add_to(&read(config_path)?, &new, base)?;
            replace(config_path, &text)?;
            println!("added {id} ({}) to {}", new.name, config_path.display());
            println!("a running relay shares it at its next sync");
            Ok(())
        }
        Session::List => {
            let config = crate::cli::load(config_path)?;
            if config.sessions.is_empty() {
                println!("no sessions (add one: relay session add --name … --project … -- command …)");
            }
            for s in &config.sessions {
                let projects: Vec<String> = s.projects.iter().map(ToString::to_string).collect();
                println!(
                    "{}  {}  \"{}\"  v{}  projects: {}  command: {}",
                    s.meta.graph_session_id,
                    s.meta.slug,
                    s.meta.name,
                    s.meta.version,
                    if projects.is_empty() { "none".into() } else { projects.join(", ") },
                    s.launch.command.join(" ")
                );
            }
            Ok(())
        }
        Session::Remove { id_or_slug } => {
            let text = remove_from(&read(config_path)?, &id_or_slug)?;
            Config::parse(&text, base).map_err(|e| CliError(format!("the session was not removed:\n{e}")))?;
            replace(config_path, &text)?;
            println!("removed {id_or_slug} from {}", config_path.display());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"# my relay
server_url = "http://127.0.0.1:8787"   # the local server
device_token = "fcd_abc"

[[sessions]]
# the old one
graph_session_id = "gs_0123456789abcdef0123456789abcdef"
name = "Weekly"
slug = "weekly"
projects = ["0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b"]
command = ["sh", "-c", "cat"]
"#;

    fn new(name: &str) -> NewSession {
        NewSession {
            name: name.into(),
            projects: vec!["0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b".into()],
            command: vec!["/usr/local/bin/run-graph".into(), "weekly report".into()],
            ..NewSession::default()
        }
    }

    #[test]
    fn slugs_come_from_names() {
        assert_eq!(slug_of("Weekly Report!"), "weekly-report");
        assert_eq!(slug_of("  Q3 -- numbers  "), "q3-numbers");
        assert!(new_session_id().starts_with("gs_") && new_session_id().len() == 35);
    }

    /// Adding keeps every comment and the old session; the result loads; removing by slug or
    /// id takes exactly that session out.
    #[test]
    fn add_keeps_comments_and_remove_takes_out_one() {
        let (text, id) = add_to(CONFIG, &new("Monthly Report"), Path::new("/base")).unwrap();
        for kept in ["# my relay", "# the local server", "# the old one", "gs_0123456789abcdef0123456789abcdef"] {
            assert!(text.contains(kept), "{kept:?} lost:\n{text}");
        }
        let c = Config::parse(&text, Path::new("/base")).unwrap();
        assert_eq!(c.sessions.len(), 2);
        let added = &c.sessions[1];
        assert_eq!(added.meta.graph_session_id.to_string(), id);
        assert_eq!((added.meta.slug.as_str(), added.meta.version.as_str()), ("monthly-report", "1"));
        assert_eq!(added.launch.command, ["/usr/local/bin/run-graph", "weekly report"]);
        let without = remove_from(&text, "monthly-report").unwrap();
        assert_eq!(Config::parse(&without, Path::new("/base")).unwrap().sessions.len(), 1);
        assert!(without.contains("# the old one"));
        let without_old = remove_from(&text, "gs_0123456789abcdef0123456789abcdef").unwrap();
        let left = Config::parse(&without_old, Path::new("/base")).unwrap();
        assert_eq!(left.sessions[0].meta.graph_session_id.to_string(), id);
        assert!(remove_from(&text, "nope").unwrap_err().0.contains("no session with id or slug"));
    }

    /// A session the config would refuse is not added, naming the rule.
    #[test]
    fn an_invalid_session_is_refused_and_nothing_changes() {
        let long = new(&"x".repeat(10_000));
        let e = add_to(CONFIG, &long, Path::new("/base")).unwrap_err();
        assert!(e.0.starts_with("the session was not added:") && e.0.contains("name"), "{e}");
        let mut bad = new("X");
        bad.projects = vec!["not-a-uuid".into()];
        assert!(add_to(CONFIG, &bad, Path::new("/base")).unwrap_err().0.contains("projects"));
    }

    #[test]
    fn the_file_is_replaced_whole_with_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("relay-sessions-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("relay.toml");
        std::fs::write(&path, CONFIG).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let add = |name: &str, command: &[&str]| {
            crate::cli::args::Session::Add(crate::cli::args::SessionAdd {
                name: Some(name.into()),
                hello: false,
                projects: vec!["0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b".into()],
                slug: String::new(),
                version: "1".into(),
                description: String::new(),
                command: command.iter().map(|s| (*s).to_owned()).collect(),
            })
        };
        command(&path, add("Daily", &["true"])).unwrap();
        assert_eq!(Config::load(&path).unwrap().sessions.len(), 2);
        // `--hello`: the built-in hello Graph, run by this very program.
        let hello = crate::cli::args::SessionAdd {
            name: None,
            hello: true,
            projects: vec!["0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b".into()],
            slug: String::new(),
            version: "1".into(),
            description: String::new(),
            command: Vec::new(),
        };
        command(&path, crate::cli::args::Session::Add(hello)).unwrap();
        let c = Config::load(&path).unwrap();
        let added = c.sessions.last().unwrap();
        assert_eq!((added.meta.name.as_str(), added.meta.slug.as_str()), (HELLO.0, HELLO.1));
        let exe = std::env::current_exe().unwrap().display().to_string();
        assert_eq!(added.launch.command, [exe.as_str(), "hello"]);
        command(&path, crate::cli::args::Session::Remove { id_or_slug: "hello".into() }).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "a temporary file was left");
        command(&path, crate::cli::args::Session::Remove { id_or_slug: "daily".into() }).unwrap();
        assert_eq!(Config::load(&path).unwrap().sessions.len(), 1);
        // Before `relay pair` there is no config: the error names the command that writes it.
        let none = dir.join("none/relay.toml");
        for which in [
            add("X", &["true"]),
            crate::cli::args::Session::List,
            crate::cli::args::Session::Remove { id_or_slug: "x".into() },
        ] {
            let e = command(&none, which).unwrap_err().0;
            assert!(e.contains("relay pair SERVER_URL") && e.contains("none/relay.toml"), "{e}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
