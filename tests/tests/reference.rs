//! docs/reference.md is held to the code, in both directions:
//!
//! - the relay's command line: every command and every option or argument, as the built
//!   `relay` binary's clap help prints them (walked with `--help`, command by command), with
//!   each description starting with clap's help text, and nothing the parser lacks;
//! - the relay's config keys: the names the config type accepts (read from its own refusal of an
//!   unknown key), each key's type (a value of the documented type is never refused as the wrong
//!   type), whether it is required, and its default as `relay::config::Config` parses it;
//! - the local server's environment: the `FOUNDRY_*` variables `LocalConfig::from_env` reads and
//!   the defaults it gives them.
//!
//! Each check also runs on copies of the page with a mistake put in (a row removed, a default or
//! a help text changed, a key the code lacks added) and must report each one.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use foundry_tests::built_binary;

fn page() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/reference.md")).unwrap()
}

/// The cells of each row of the first table after the line `heading` (its header and
/// separator rows left out).
fn table(page: &str, heading: &str) -> Vec<Vec<String>> {
    let Some(start) = page.lines().position(|l| l == heading) else { return Vec::new() };
    page.lines()
        .skip(start + 1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.trim().trim_matches('|').split(" | ").map(|c| c.trim().to_owned()).collect())
        .collect()
}

/// The first `code span` of a cell.
fn code(cell: &str) -> Option<&str> {
    cell.split('`').nth(1).filter(|_| cell.matches('`').count() >= 2)
}

/// `page` with `from` replaced by `to` once; the mistake must land.
fn mutated(page: &str, from: &str, to: &str) -> String {
    assert!(page.contains(from), "the mutation's text {from:?} is not in the page");
    page.replacen(from, to, 1)
}

/// `page` without the line that starts with `row`.
fn without_row(page: &str, row: &str) -> String {
    let kept: Vec<&str> = page.lines().filter(|l| !l.starts_with(row)).collect();
    assert_eq!(kept.len() + 1, page.lines().count(), "exactly one row starts with {row:?}");
    kept.join("\n")
}

/// Asserts `check` finds nothing in the page, and then something in each of the page's
/// mutated copies.
fn holds(check: impl Fn(&str) -> Vec<String>, mutations: impl FnOnce(&str) -> Vec<(&'static str, String)>) {
    let page = page();
    let problems = check(&page);
    assert!(problems.is_empty(), "docs/reference.md differs from the code:\n{}", problems.join("\n"));
    for (what, bad) in mutations(&page) {
        assert!(!check(&bad).is_empty(), "the check missed a mutated page: {what}");
    }
}

// ---- the relay's command line ------------------------------------------------------------

const COMMANDS: &str = "### Commands";
const OPTIONS: &str = "### Options and arguments";

/// What the parser says: each command (`relay session add`) with its help text, and each
/// option or argument (`relay pause`, `--for <DURATION>`) with its help text.
#[derive(Debug, Default)]
struct Cli {
    commands: BTreeMap<String, String>,
    options: BTreeMap<(String, String), String>,
}

/// The entries of each section (`Commands:`, `Arguments:`, `Options:`) of a clap help text:
/// the name or flags, then two spaces or more, then the help.
fn help_sections(text: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut section: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') && !line.contains(' ') {
            section = Some(line.trim_end_matches(':').to_owned());
        } else if line.trim().is_empty() {
            section = None;
        } else if let Some(s) = &section {
            let entry = line.trim();
            let (name, help) = entry.split_once("  ").unwrap_or((entry, ""));
            assert!(!help.trim().is_empty(), "an entry without help text (clap's layout changed?): {line:?}");
            out.entry(s.clone()).or_default().push((name.to_owned(), help.trim().to_owned()));
        }
    }
    out
}

/// Walks the built relay's `--help`, command by command. `--config` and `--help`, which
/// every command repeats, are listed once, under `relay`; so is `help`.
fn relay_cli() -> Cli {
    let relay = built_binary("relay", &["relay/src", "shared/domain/src"]);
    let mut cli = Cli::default();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let out = std::process::Command::new(&relay).args(&path).arg("--help").output().unwrap();
        assert!(out.status.success(), "relay {path:?} --help: {}", String::from_utf8_lossy(&out.stderr));
        let name = std::iter::once("relay".to_owned()).chain(path.iter().cloned()).collect::<Vec<_>>().join(" ");
        let sections = help_sections(&String::from_utf8_lossy(&out.stdout));
        for section in ["Arguments", "Options"] {
            for (spec, help) in sections.get(section).into_iter().flatten() {
                if path.is_empty() || !["--config <PATH>", "-h, --help"].contains(&spec.as_str()) {
                    cli.options.insert((name.clone(), spec.clone()), help.clone());
                }
            }
        }
        for (command, help) in sections.get("Commands").into_iter().flatten() {
            if command == "help" && !path.is_empty() {
                continue;
            }
            cli.commands.insert(format!("{name} {command}"), help.clone());
            if command != "help" {
                todo.push(path.iter().cloned().chain([command.clone()]).collect());
            }
        }
    }
    assert!(cli.commands.contains_key("relay session add"), "the walk reached the nested commands: {cli:?}");
    cli
}

/// Where the page and the parser differ. A description may go on after clap's help text (the
/// page's notes for an owner); it must start with it.
fn cli_problems(page: &str, cli: &Cli) -> Vec<String> {
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for row in table(page, COMMANDS) {
        let (Some(command), Some(what)) = (row.first().and_then(|c| code(c)), row.get(1)) else {
            problems.push(format!("{COMMANDS}: a row without a command and a description: {row:?}"));
            continue;
        };
        documented.insert(command.to_owned());
        match cli.commands.get(command) {
            None => problems.push(format!("the page documents `{command}`; the relay has no such command")),
            Some(help) if !what.starts_with(help.as_str()) => {
                problems.push(format!("`{command}`: the page says {what:?}; its help says {help:?}"));
            }
            Some(_) => {}
        }
    }
    for command in cli.commands.keys().filter(|c| !documented.contains(*c)) {
        problems.push(format!("`{command}` is missing from {COMMANDS}"));
    }
    let mut documented = BTreeSet::new();
    for row in table(page, OPTIONS) {
        let (Some(command), Some(spec), Some(what)) =
            (row.first().and_then(|c| code(c)), row.get(1).and_then(|c| code(c)), row.get(2))
        else {
            problems.push(format!("{OPTIONS}: a row without a command, an option and a description: {row:?}"));
            continue;
        };
        let key = (command.to_owned(), spec.to_owned());
        match cli.options.get(&key) {
            None => problems.push(format!("the page documents `{command} {spec}`; the parser has no such option")),
            Some(help) if !what.starts_with(help.as_str()) => {
                problems.push(format!("`{command} {spec}`: the page says {what:?}; its help says {help:?}"));
            }
            Some(_) => {}
        }
        documented.insert(key);
    }
    for (command, spec) in cli.options.keys().filter(|k| !documented.contains(*k)) {
        problems.push(format!("`{command} {spec}` is missing from {OPTIONS}"));
    }
    problems
}

#[test]
fn the_relays_commands_and_options_are_its_parsers() {
    let cli = relay_cli();
    holds(
        |p| cli_problems(p, &cli),
        |page| {
            vec![
                ("a command's row removed", without_row(page, "| `relay pause` | Pause")),
                ("a nested command's row removed", without_row(page, "| `relay session remove` | Stop")),
                ("an option's row removed", without_row(page, "| `relay pair` | `-y, --yes` |")),
                ("a help text changed", mutated(page, "at most 200 characters", "at most 300 characters")),
                ("an option renamed", mutated(page, "`--note <NOTE>`", "`--reason <NOTE>`")),
                ("a value name changed", mutated(page, "`--for <DURATION>`", "`--for <TIME>`")),
                ("a default changed", mutated(page, "[default: 1]", "[default: 2]")),
                (
                    "a command the relay lacks",
                    mutated(page, "| `relay help` |", "| `relay logs` | Print the log |\n| `relay help` |"),
                ),
                ("a hidden option documented", mutated(page, "`-y, --yes`", "`--from-installer`")),
            ]
        },
    );
}

// ---- the relay's config file -------------------------------------------------------------

/// One table of keys: the file's top level, or a `[[sessions]]` table.
struct Scope {
    what: &'static str,
    heading: &'static str,
    /// The keys a valid file sets, as `key = value` lines.
    base: &'static [(&'static str, &'static str)],
    /// What comes before `base`'s lines.
    prefix: &'static str,
}

const TOP_BASE: &[(&str, &str)] = &[("server_url", "\"http://127.0.0.1:8787\""), ("device_token", "\"fcd_abc\"")];
const SESSION_BASE: &[(&str, &str)] = &[
    ("graph_session_id", "\"gs_0123456789abcdef0123456789abcdef\""),
    ("name", "\"Weekly\""),
    ("slug", "\"weekly\""),
    ("projects", "[\"0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b\"]"),
    ("command", "[\"sh\"]"),
];
const FILE: Scope = Scope { what: "relay.toml", heading: "## The relay's config file", base: TOP_BASE, prefix: "" };
const SESSION: Scope = Scope {
    what: "[[sessions]]",
    heading: "### Each shared session (`[[sessions]]`)",
    base: SESSION_BASE,
    prefix: "server_url = \"http://127.0.0.1:8787\"\ndevice_token = \"fcd_abc\"\n[[sessions]]\n",
};

impl Scope {
    /// A file with `base`, `key` left out, and then `key = value` when given.
    fn text(&self, key: &str, value: Option<&str>) -> String {
        let mut t = self.prefix.to_owned();
        for (k, v) in self.base.iter().filter(|(k, _)| *k != key) {
            t.push_str(&format!("{k} = {v}\n"));
        }
        if let Some(v) = value {
            t.push_str(&format!("{key} = {v}\n"));
        }
        t
    }

    /// The config's answer to that file: `Ok` or every problem.
    fn parse(&self, key: &str, value: Option<&str>) -> Result<relay::config::Config, String> {
        relay::config::Config::parse_in(&self.text(key, value), Path::new("/base"), Some(Path::new("/home/u")))
    }

    /// The keys the config type accepts here, from its refusal of an unknown one (serde names
    /// every field it expects).
    fn keys(&self) -> BTreeSet<String> {
        let e = self.parse("zz_not_a_key", Some("1")).expect_err("an unknown key is refused");
        let expected = e.split("expected one of").nth(1).unwrap_or_else(|| panic!("no key list in {e:?}"));
        let keys: BTreeSet<String> = expected.split('`').skip(1).step_by(2).map(str::to_owned).collect();
        assert!(keys.len() >= 5, "{e}");
        keys
    }

    /// Each key's default as the config parses a file without it, as the page writes it
    /// (`None`: unset, written "—"). Keys left out here (a platform's folder) are not compared.
    fn defaults(&self) -> BTreeMap<&'static str, Option<String>> {
        let c = self.parse("", None).expect("the base file is valid");
        if self.what == SESSION.what {
            let s = &c.sessions[0];
            let list = |v: &[domain::ids::ProjectId]| v.is_empty().then(|| "[]".to_owned());
            return BTreeMap::from([
                ("description", Some(format!("{:?}", s.meta.description))),
                ("version", Some(format!("{:?}", s.meta.version))),
                ("status", Some(format!("{:?}", s.meta.status))),
                ("env", s.launch.env.is_empty().then(|| "{}".to_owned())),
                ("working_dir", s.launch.working_dir.as_ref().map(|d| d.display().to_string())),
                ("projects", list(&self.parse("projects", None).unwrap().sessions[0].projects)),
            ]);
        }
        BTreeMap::from([
            ("device_token_file", c.device_token_file.as_ref().map(|f| f.display().to_string())),
            ("control_poll_ms", Some(c.control_poll.as_millis().to_string())),
            ("poll_s", Some(c.poll.as_secs().to_string())),
            ("cancel_grace_ms", Some(c.cancel_grace.as_millis().to_string())),
            ("doorbell", Some(c.doorbell.to_string())),
            ("doorbell_ping_ms", Some(c.doorbell_timing.ping.as_millis().to_string())),
            ("doorbell_pong_deadline_ms", Some(c.doorbell_timing.pong_deadline.as_millis().to_string())),
            ("auto_update", Some(c.auto_update.to_string())),
            ("pin", c.pin.clone()),
            ("max_parallel", Some(c.max_parallel.to_string())),
            ("shell_environment", c.shell_environment.map(|b| b.to_string())),
            ("sessions", c.sessions.is_empty().then(|| "[]".to_owned())),
            ("device_token", None),
        ])
    }
}

/// A value of each type the page may name.
fn sample(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "string" | "path" => "\"x\"",
        "integer" => "1",
        "boolean" => "true",
        "array of strings" => "[\"x\"]",
        "table of strings" => "{ X = \"y\" }",
        "array of tables" => "[]",
        _ => return None,
    })
}

fn scope_problems(page: &str, scope: &Scope) -> Vec<String> {
    let what = scope.what;
    let keys = scope.keys();
    let defaults = scope.defaults();
    for k in defaults.keys() {
        assert!(keys.contains(*k), "{what}: the test compares a default of `{k}`, which is no longer a key");
    }
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for row in table(page, scope.heading) {
        let [key, kind, default, _what] = row.as_slice() else {
            problems.push(format!("{what}: a row without key, type, default and description: {row:?}"));
            continue;
        };
        let Some(key) = code(key) else {
            problems.push(format!("{what}: a row without a key: {row:?}"));
            continue;
        };
        documented.insert(key.to_owned());
        if !keys.contains(key) {
            problems.push(format!("{what}: the page documents `{key}`; the config has no such key"));
            continue;
        }
        match sample(kind) {
            None => problems.push(format!("{what}: `{key}` has type {kind:?}, which is none the page uses")),
            Some(v) => {
                if let Err(e) = scope.parse(key, Some(v)).map(|_| ())
                    && e.contains("invalid type")
                {
                    problems.push(format!("{what}: `{key}` is documented as {kind}; the config refuses {v}: {e}"));
                }
            }
        }
        let required = scope.parse(key, None).is_err_and(|e| e.contains(&format!("missing field `{key}`")));
        let said = match (required, defaults.get(key)) {
            (true, _) => (default != "required").then(|| "required".to_owned()),
            (false, _) if default == "required" => Some("a default (it is not required)".to_owned()),
            (false, Some(None)) => (!default.starts_with('—')).then(|| "— (unset)".to_owned()),
            (false, Some(Some(v))) => (code(default) != Some(v.as_str())).then(|| format!("`{v}`")),
            (false, None) => None,
        };
        if let Some(said) = said {
            problems.push(format!("{what}: `{key}`'s default is {said} in the code; the page says {default:?}"));
        }
    }
    for key in keys.iter().filter(|k| !documented.contains(*k)) {
        problems.push(format!("{what}: `{key}` is missing from the page"));
    }
    problems
}

/// Where the page's two key tables (told apart by their headings) and the config differ.
fn config_problems(page: &str) -> Vec<String> {
    [FILE, SESSION].iter().flat_map(|s| scope_problems(page, s)).collect()
}

#[test]
fn the_relays_config_keys_types_and_defaults_are_its_config_types() {
    holds(config_problems, |page| {
        vec![
            ("a key's row removed", without_row(page, "| `cancel_grace_ms` |")),
            ("a session key's row removed", without_row(page, "| `working_dir` |")),
            ("a default changed", mutated(page, "| `poll_s` | integer | `20` |", "| `poll_s` | integer | `30` |")),
            (
                "a boolean default flipped",
                mutated(page, "| `auto_update` | boolean | `true` |", "| `auto_update` | boolean | `false` |"),
            ),
            (
                "a session default changed",
                mutated(page, "| `status` | string | `\"ready\"` |", "| `status` | string | `\"idle\"` |"),
            ),
            ("a type changed", mutated(page, "| `doorbell` | boolean |", "| `doorbell` | string |")),
            (
                "a session key's type changed",
                mutated(page, "| `env` | table of strings |", "| `env` | array of strings |"),
            ),
            (
                "an optional key called required",
                mutated(page, "| `pin` | string | — |", "| `pin` | string | required |"),
            ),
            (
                "a required key given a default",
                mutated(page, "| `slug` | string | required |", "| `slug` | string | `\"\"` |"),
            ),
            (
                "an unset key given a value",
                mutated(page, "| `device_token_file` | path | — |", "| `device_token_file` | path | `token` |"),
            ),
            (
                "a key the config lacks",
                mutated(page, "| `pin` |", "| `log_level` | string | — | The log level. |\n| `pin` |"),
            ),
        ]
    });
}

// ---- the local server's environment ------------------------------------------------------

const ENVIRONMENT: &str = "## The local server's environment";

/// The `FOUNDRY_*` variables the local server reads, and the default of each as the page writes
/// it (`None`: unset, written "—"), from a start with nothing set but `HOME=~`.
fn local_environment() -> BTreeMap<String, Option<String>> {
    use local::config::*;
    let asked = std::cell::RefCell::new(BTreeSet::new());
    let c = LocalConfig::from_env(|k| {
        asked.borrow_mut().insert(k.to_owned());
        (k == "HOME").then(|| "~".to_owned())
    })
    .expect("the defaults are valid");
    let secs = |d: std::time::Duration| Some(d.as_secs().to_string());
    let defaults: BTreeMap<&str, Option<String>> = BTreeMap::from([
        (DATA_DIR, Some(c.data_dir.display().to_string())),
        (PORT, Some(c.port.to_string())),
        (PUBLIC_URL, c.public_url.clone()),
        (POLL_INTERVAL_SECONDS, secs(c.policy.poll_interval)),
        (HEARTBEAT_TIMEOUT_SECONDS, secs(c.policy.heartbeat_timeout)),
        (PAIRINGS_PER_SOURCE_PER_HOUR, Some(c.policy.pairings_per_source_per_hour.to_string())),
        (LOOPBACK_REGISTRATIONS_PER_HOUR, c.registrations.per_loopback.map(|n| n.to_string())),
        (REGISTRATIONS_PER_SOURCE_PER_HOUR, Some(c.registrations.per_source.to_string())),
        (OWNER_REQUESTS_PER_MINUTE, Some(c.policy.owner_requests_per_minute.to_string())),
        (PANEL_REFRESH_SECONDS, Some(c.panel_refresh_seconds.to_string())),
        (RELAY_DIST, Some(c.relay_dist.display().to_string())),
        (HEADER_TIMEOUT_SECONDS, secs(c.header_timeout)),
        (MAX_CONNECTIONS, Some(c.max_connections.to_string())),
        (ALLOW_LOOPBACK_CLIENT_METADATA, Some(c.allow_loopback_client_metadata.to_string())),
        (DEV_DOCUMENT_HOSTS, (!c.dev_document_hosts.is_empty()).then(|| format!("{:?}", c.dev_document_hosts))),
    ]);
    let read: BTreeSet<String> = asked.into_inner().into_iter().filter(|k| k.starts_with("FOUNDRY_")).collect();
    for k in defaults.keys() {
        assert!(read.contains(*k), "the test compares a default of {k}, which the server no longer reads");
    }
    read.into_iter()
        .map(|k| {
            let d = defaults.get(k.as_str()).cloned().unwrap_or_else(|| panic!("{k}: add its default to this test"));
            (k, d)
        })
        .collect()
}

/// Where the page and the server differ. Rows of other variables (`RUST_LOG`) are not compared.
fn environment_problems(page: &str, read: &BTreeMap<String, Option<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for row in table(page, ENVIRONMENT) {
        let (Some(name), Some(default)) = (row.first().and_then(|c| code(c)), row.get(1)) else {
            problems.push(format!("{ENVIRONMENT}: a row without a variable and a default: {row:?}"));
            continue;
        };
        if !name.starts_with("FOUNDRY_") {
            continue;
        }
        documented.insert(name.to_owned());
        let differs = match read.get(name) {
            None => {
                problems.push(format!("the page documents {name}; the local server never reads it"));
                continue;
            }
            Some(None) => !default.starts_with('—'),
            // The data folder's cell names each platform's; this platform's must be one of them.
            Some(Some(v)) if name == local::config::DATA_DIR => !default.contains(&format!("`{v}`")),
            Some(Some(v)) => code(default) != Some(v.as_str()),
        };
        if differs {
            let code_says = read[name].as_deref().map_or("unset".to_owned(), |v| format!("`{v}`"));
            problems.push(format!("{name}: the default is {code_says}; the page says {default:?}"));
        }
    }
    for name in read.keys().filter(|k| !documented.contains(*k)) {
        problems.push(format!("{name} is missing from {ENVIRONMENT}"));
    }
    problems
}

#[test]
fn the_local_servers_environment_is_what_it_reads() {
    let read = local_environment();
    assert!(read.len() >= 15, "{read:?}");
    holds(
        |p| environment_problems(p, &read),
        |page| {
            vec![
                ("a variable's row removed", without_row(page, "| `FOUNDRY_MAX_CONNECTIONS` |")),
                (
                    "a default changed",
                    mutated(
                        page,
                        "| `FOUNDRY_HEARTBEAT_TIMEOUT_SECONDS` | `600` |",
                        "| `FOUNDRY_HEARTBEAT_TIMEOUT_SECONDS` | `60` |",
                    ),
                ),
                (
                    "the data folder moved",
                    mutated(
                        page,
                        "`~/.local/share/foundry-connect` (`$XDG_DATA_HOME/foundry-connect` when set; on a Mac `~/Library/Application Support/foundry-connect`)",
                        "`~/foundry`",
                    ),
                ),
                (
                    "an unset variable given a value",
                    mutated(page, "| `FOUNDRY_PUBLIC_URL` | — (", "| `FOUNDRY_PUBLIC_URL` | `http://127.0.0.1:8787` ("),
                ),
                (
                    "a switch documented on",
                    mutated(
                        page,
                        "| `FOUNDRY_ALLOW_LOOPBACK_CLIENT_METADATA` | `false` |",
                        "| `FOUNDRY_ALLOW_LOOPBACK_CLIENT_METADATA` | `true` |",
                    ),
                ),
                (
                    "a misspelt variable",
                    mutated(page, "| `FOUNDRY_PANEL_REFRESH_SECONDS` |", "| `FOUNDRY_PANEL_REFRESH_SECS` |"),
                ),
                (
                    "a variable the server lacks",
                    mutated(
                        page,
                        "| `RUST_LOG` |",
                        "| `FOUNDRY_LOG_LEVEL` | `info` | The log level. |\n| `RUST_LOG` |",
                    ),
                ),
            ]
        },
    );
}
