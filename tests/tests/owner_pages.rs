//! The owner's pages say what to do and why; the evidence (test names, issue numbers, mutation
//! notes, "seen failing") lives in the engineering docs they link to (docs/results.md,
//! docs/history.md). This check reads each owner page and names every line that carries such
//! bookkeeping, and shows on planted lines that it would see each kind.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// The pages written for the owner: the tutorial, the how-to guides and the reference.
const OWNER_PAGES: &[&str] = &[
    "docs/quickstart.md",
    "docs/hosts.md",
    "docs/graph.md",
    "docs/troubleshooting.md",
    "docs/reference.md",
    "docs/upgrade.md",
];

/// What `line` carries of the project's bookkeeping, if anything: a Rust test path
/// (`module::test_name`), an issue number, a mutation note, a test file, "seen failing".
fn bookkeeping(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    let words: Vec<&str> = lower.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).collect();
    if words.iter().any(|w| {
        let mut parts = w.split("::");
        let (a, b) = (parts.next().unwrap_or(""), parts.next());
        b.is_some_and(|b| !a.is_empty() && !b.is_empty() && a.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
    }) {
        return Some("a test's path");
    }
    let issue = lower
        .match_indices("issue ")
        .any(|(i, m)| lower[i + m.len()..].trim_start_matches('#').starts_with(|c: char| c.is_ascii_digit()));
    if issue {
        return Some("an issue number");
    }
    if lower.contains("mutant") || lower.contains("mutation") {
        return Some("a mutation note");
    }
    if lower.contains("tests/tests/") || lower.contains("seen failing") {
        return Some("a test's file or record");
    }
    None
}

#[test]
fn the_owners_pages_carry_no_test_names_issue_numbers_or_mutation_notes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for page in OWNER_PAGES {
        let text = std::fs::read_to_string(root.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = bookkeeping(line) {
                found.push(format!("{page}:{}: {what}: {line}", n + 1));
            }
        }
    }
    assert!(found.is_empty(), "move these to the engineering docs and link there:\n{}", found.join("\n"));
    // The check sees each kind, and lets an owner's own words be.
    for planted in [
        "Held by `quickstart::the_quickstart_runs_as_written_from_a_clean_home`.",
        "Fixed in issue 73.",
        "See issue #74.",
        "Two mutants survived.",
        "A mutation of the bound is caught.",
        "tests/tests/hosts_tui.rs runs it.",
        "This was seen failing once.",
    ] {
        assert!(bookkeeping(planted).is_some(), "not seen: {planted}");
    }
    for fine in [
        "Run `relay session add --hello --project <Project id>`.",
        "Open http://127.0.0.1:8787/panel in the browser: it signs you in.",
        "If the issue persists, check `relay status`.",
        "The relay runs 2 Graphs at once (`max_parallel`).",
    ] {
        assert_eq!(bookkeeping(fine), None, "{fine}");
    }
}
