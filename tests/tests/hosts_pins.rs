//! The hosts' pins and what is said about them: docs/results.md's "The hosts themselves" names
//! each host's pinned version (`infra/hosts/package.json`, the Inspector's
//! `infra/conformance/package.json`) and the bounds the host tests assert; `infra/hosts-bump.sh
//! --dry-run` names what a bump would change and changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

use crate::hosts_real::{CODEX, Host, INSPECTOR, MCP_REMOTE, RUN, STEP};
use crate::hosts_tui::{CLAUDE_CODE, COPILOT, GEMINI, OPENCODE};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What the results' hosts section gets wrong about `hosts` and the bounds.
fn section_problems(results: &str, hosts: &[(&Host, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(section) = results.split("\n## ").find(|s| s.starts_with("The hosts themselves")) else {
        return vec!["no section \"The hosts themselves\"".to_owned()];
    };
    let rows: Vec<Vec<String>> = foundry_tests::markdown_tables(section)
        .into_iter()
        .find(|t| t[0].starts_with("| host | npm package | version | pinned in |"))
        .map(|t| t[2..].iter().map(|r| r.split('|').map(|c| c.trim().to_owned()).collect()).collect())
        .unwrap_or_default();
    for (host, version) in hosts {
        let package = format!("`{}`", host.package);
        let pins = format!("`infra/{}/package.json`", host.pins);
        match rows.iter().find(|r| r.get(2) == Some(&package)) {
            None => problems.push(format!("no row for {package}")),
            Some(r) if r[3] != *version || r[4] != pins => {
                problems.push(format!("{package}: says {} in {}, {pins} pins {version}", r[3], r[4]));
            }
            Some(_) => {}
        }
    }
    for (what, bound) in [("each step", STEP), ("each host's whole run", RUN)] {
        let said = format!("**{} s**", bound.as_secs());
        if !section.contains(&said) {
            problems.push(format!("{what}: the tests assert {said}"));
        }
    }
    problems
}

/// docs/results.md's hosts section names each host at the version its pins install, where it is
/// pinned, and the bounds `hosts_real` asserts; a changed version, pin folder or bound is caught.
#[test]
fn the_results_name_each_hosts_pinned_version_and_the_bounds_its_tests_assert() {
    let results = std::fs::read_to_string(root().join("docs/results.md")).unwrap();
    let hosts: Vec<(&Host, String)> = [&MCP_REMOTE, &INSPECTOR, &CODEX].into_iter().map(|h| (h, h.version())).collect();
    let problems = section_problems(&results, &hosts);
    assert!(problems.is_empty(), "docs/results.md, \"The hosts themselves\":\n{}", problems.join("\n"));
    let mcp_remote = format!("| `mcp-remote` | {} |", hosts[0].1);
    let inspector = format!("| `{}` | {} |", INSPECTOR.package, hosts[1].1);
    for (what, broken) in [
        ("a version not the pin's", results.replacen(&mcp_remote, "| `mcp-remote` | 0.0.1 |", 1)),
        ("the Inspector's version", results.replacen(&inspector, &format!("| `{}` | 0.0.1 |", INSPECTOR.package), 1)),
        ("a pin folder", results.replacen("`infra/conformance/package.json` |", "`infra/hosts/package.json` |", 1)),
        ("a bound", results.replacen(&format!("**{} s**", RUN.as_secs()), "**60 s**", 1)),
    ] {
        assert_ne!(broken, results, "{what}: the mutation no longer applies");
        assert!(!section_problems(&broken, &hosts).is_empty(), "{what}: not caught");
    }
    // And a pin moved on (what a bump does before the section is updated).
    let mut bumped = hosts.clone();
    bumped[2].1.push_str("-next");
    assert!(!section_problems(&results, &bumped).is_empty(), "a bumped pin: not caught");
}

/// `infra/hosts-bump.sh --dry-run`, with an `npm` that answers a newer version for every
/// package: it names each pin, the snippets of docs/hosts.md and the fixtures' new folder, and
/// changes no file.
#[test]
fn the_bump_scripts_dry_run_names_what_it_would_change_and_changes_nothing() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::temp_dir().join(format!("hosts-bump-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut npm = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o700).open(dir.join("npm")).unwrap();
    writeln!(npm, "#!/bin/sh\n[ \"$1\" = view ] && [ \"$3\" = version ] && echo 99.0.0 && exit 0\nexit 1").unwrap();
    drop(npm);
    let watched = [
        "infra/hosts/package.json",
        "infra/hosts/package-lock.json",
        "infra/conformance/package.json",
        "infra/hosts-tui/package.json",
        "docs/hosts.md",
    ];
    let before: Vec<String> = watched.iter().map(|f| std::fs::read_to_string(root().join(f)).unwrap()).collect();
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let out = std::process::Command::new(root().join("infra/hosts-bump.sh"))
        .arg("--dry-run")
        .env("PATH", path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    for host in [&MCP_REMOTE, &INSPECTOR, &CODEX, &CLAUDE_CODE, &COPILOT, &GEMINI, &OPENCODE] {
        let v = host.version();
        for line in [
            format!("{} {v} -> 99.0.0", host.package),
            format!("infra/{}/package.json: \"{}\": \"{v}\" -> \"99.0.0\"", host.pins, host.package),
            format!("tests/fixtures/hosts/{}/99.0.0/ (beside {v}/)", host.fixtures),
        ] {
            assert!(said.contains(&line), "no {line:?} in:\n{said}");
        }
    }
    for pin in
        [format!("mcp-remote@{}", MCP_REMOTE.version()), format!("{}@{}", INSPECTOR.package, INSPECTOR.version())]
    {
        assert!(said.contains(&format!("docs/hosts.md: {pin} ->")), "the snippets' {pin}:\n{said}");
    }
    assert!(said.contains("(dry run: nothing changed)"), "{said}");
    let after: Vec<String> = watched.iter().map(|f| std::fs::read_to_string(root().join(f)).unwrap()).collect();
    assert!(before == after, "a dry run changed a file");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What the results' table of the hosts that need a model gets wrong: a row per host at the
/// version its pin names, and the time of the eight runs, all from `docs/hosts-tui-figures.json`
/// (written by `infra/hosts-tui.sh` only when every run passed), whose versions must be the pins'.
fn model_hosts_problems(results: &str, figures: &serde_json::Value, hosts: &[(&Host, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(section) = results.split("\n### ").find(|s| s.starts_with("The hosts that call a tool only through"))
    else {
        return vec!["no section \"The hosts that call a tool only through their model\"".to_owned()];
    };
    let section = section.split("\n## ").next().unwrap_or_default();
    let runs = figures["runs"].as_array().cloned().unwrap_or_default();
    for (host, version) in hosts {
        let row = format!("| `{}` | {version} | `infra/{}/package.json` |", host.package, host.pins);
        if !section.contains(&row) {
            problems.push(format!("no row {row}"));
        }
        let measured: Vec<&serde_json::Value> = runs.iter().filter(|r| r["package"] == host.package).collect();
        if measured.len() != 2 || measured.iter().any(|r| r["version"] != version.as_str()) {
            problems.push(format!("{}: docs/hosts-tui-figures.json holds no two runs at {version}", host.package));
        }
        for r in measured {
            let said = match (r["seconds"].as_f64(), r["refused"].as_str()) {
                (Some(s), _) => format!(" {s:.1}"),
                (None, Some(refused)) => format!("refused: {refused}"),
                _ => continue,
            };
            if !section.contains(&said) {
                problems.push(format!("{} ({}): the figures say {said:?}", host.package, r["mode"]));
            }
        }
    }
    let total = format!("**{} s**", figures["run_s"]);
    if !section.contains(&total) {
        problems.push(format!("the runs' time: the figures say {total}"));
    }
    problems
}

/// docs/results.md's table of the hosts that need a model names each at its pin and quotes what
/// `infra/hosts-tui.sh` measured; a changed figure, a version, or a pin bumped without a new run
/// is caught.
#[test]
fn the_results_quote_the_model_hosts_figures_at_their_pins() {
    let results = std::fs::read_to_string(root().join("docs/results.md")).unwrap();
    let figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("docs/hosts-tui-figures.json")).unwrap()).unwrap();
    let hosts: Vec<(&Host, String)> =
        [&CLAUDE_CODE, &COPILOT, &GEMINI, &OPENCODE].into_iter().map(|h| (h, h.version())).collect();
    let problems = model_hosts_problems(&results, &figures, &hosts);
    assert!(problems.is_empty(), "docs/results.md, the hosts that need a model:\n{}", problems.join("\n"));
    let total = format!("**{} s**", figures["run_s"]);
    for (what, broken) in [
        ("the total", results.replacen(&total, "**1 s**", 1)),
        ("a version", results.replacen("| `opencode-ai` | 1.18.33 |", "| `opencode-ai` | 1.0.0 |", 1)),
    ] {
        assert_ne!(broken, results, "{what}: the mutation no longer applies");
        assert!(!model_hosts_problems(&broken, &figures, &hosts).is_empty(), "{what}: not caught");
    }
    let mut bumped = hosts.clone();
    bumped[0].1.push_str("-next");
    assert!(!model_hosts_problems(&results, &figures, &bumped).is_empty(), "a bumped pin: not caught");
}
