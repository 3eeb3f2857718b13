//! The docs' pictures (`docs/pictures/*.svg`) are what their measured data draws
//! (`infra/pictures.py`): a picture older than its data fails here, and so does the planted
//! change of one figure in a copy of the data.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn check(docs: &Path) -> std::process::Output {
    Command::new("python3")
        .arg(root().join("infra/pictures.py"))
        .args(["--check", "--docs"])
        .arg(docs)
        .output()
        .expect("python3 runs infra/pictures.py")
}

#[test]
fn every_picture_is_what_its_data_draws() {
    let docs = root().join("docs");
    let out = check(&docs);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for name in ["doorbell.svg", "status-calls.svg", "slots.svg", "ci-phases.svg", "peer.svg"] {
        let svg = std::fs::read_to_string(docs.join("pictures").join(name)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("<title"), "{name} is not an accessible SVG");
    }
    // The check can fail: one figure of the doorbell benchmark changed in a copy of the data.
    let copy = std::env::temp_dir().join(format!("pictures-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(copy.join("pictures")).unwrap();
    for f in ["doorbell-figures.json", "sim-seed42.txt", "ci-phases.txt", "bench-figures.md"] {
        std::fs::copy(docs.join(f), copy.join(f)).unwrap();
    }
    for f in std::fs::read_dir(docs.join("pictures")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), copy.join("pictures").join(f.file_name())).unwrap();
    }
    let mut figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(copy.join("doorbell-figures.json")).unwrap()).unwrap();
    figures["benchmark"]["pickup"]["on"]["p50"] = serde_json::json!(0.5);
    std::fs::write(copy.join("doorbell-figures.json"), figures.to_string()).unwrap();
    let stale = check(&copy);
    assert!(!stale.status.success(), "a changed figure left its picture fresh");
    assert!(
        String::from_utf8_lossy(&stale.stderr).contains("doorbell.svg"),
        "{}",
        String::from_utf8_lossy(&stale.stderr)
    );
    assert!(!String::from_utf8_lossy(&stale.stderr).contains("slots.svg"), "an unchanged picture was called stale");
    let _ = std::fs::remove_dir_all(copy);
}

/// The peer benchmark's figures in docs/results.md are the ones its picture draws
/// (docs/bench-figures.md, as ./infra/bench.sh printed them): each benchmark row's local and
/// reconstruction cells, with the thousands separated as the docs write them.
#[test]
fn the_peer_benchmark_table_in_the_docs_is_its_figures_file() {
    let figures = std::fs::read_to_string(root().join("docs/bench-figures.md")).unwrap();
    let results = std::fs::read_to_string(root().join("docs/results.md")).unwrap();
    let thousands = |s: &str| foundry_tests::grouped(s.parse().unwrap_or_else(|_| panic!("not a count: {s}")));
    let mut rows = 0;
    let mut at_four = Vec::new();
    let mut cells_of: Vec<Vec<String>> = Vec::new();
    for line in figures.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() != 15 || !cells[1].chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        rows += 1;
        if cells[1] == "4" {
            at_four.push(cells[10].replace('x', "×"));
        }
        cells_of.push(cells.iter().map(|c| (*c).to_owned()).collect::<Vec<String>>());
        let want = format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | **{}** |",
            cells[1],
            thousands(cells[2]),
            cells[3],
            cells[4],
            cells[5],
            thousands(cells[6]),
            cells[7],
            cells[8],
            cells[9],
            cells[10].replace('x', "×")
        );
        assert!(results.contains(&want), "docs/results.md has no peer benchmark row {want}");
        // The same call through rmcp's serve loop, from the same row of the file.
        let call = if cells[0].starts_with("list") { "list" } else { "claim" };
        let rmcp = format!(
            "| {call} via rmcp's serve loop | {} | {} | {} | {} | {} |",
            cells[1],
            thousands(cells[11]),
            cells[12],
            cells[13],
            cells[14]
        );
        assert!(results.contains(&rmcp), "docs/results.md has no rmcp row {rmcp}");
    }
    assert_eq!(rows, 4, "docs/bench-figures.md: {rows} of the 4 benchmark rows");
    // The README quotes the two ratios at 4 connections (list, then claim).
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let said = format!("{} its requests/s on list and {} on claim", at_four[0], at_four[1]);
    assert!(foundry_tests::says(&readme, &said), "README.md does not say {said:?} (docs/bench-figures.md)");
    // The floor rows.
    let floors: Vec<Vec<&str>> = figures
        .lines()
        .filter(|l| l.starts_with("| GET /.well-known/oauth-protected-resource |"))
        .map(|l| l.trim().trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    assert_eq!(floors.len(), 2, "docs/bench-figures.md: the two floor rows");
    for (i, cells) in floors.iter().enumerate() {
        let name = if i == 0 { "floor: `GET /.well-known/oauth-protected-resource`" } else { "floor" };
        let want =
            format!("| {name} | {} | {} | {} | {} | {} |", cells[1], thousands(cells[2]), cells[3], cells[4], cells[5]);
        assert!(results.contains(&want), "docs/results.md has no floor row {want}");
    }
    // The prose "Against the goal" derives from the same rows.
    for said in peer_prose(&cells_of, floors[0][2]) {
        assert!(foundry_tests::says(&results, &said), "docs/results.md does not say {said:?} (docs/bench-figures.md)");
    }
}

/// The figures docs/results.md's "Against the goal" paragraph derives from the benchmark rows
/// (`| call | conn. | req/s | p50 | p99 | CPU | its req/s | p50 | p99 | CPU | ratio | …`, list
/// then claim, 1 then 4 connections) and the floor's requests/s at one connection.
fn peer_prose(rows: &[Vec<String>], floor: &str) -> Vec<String> {
    let n = |r: &Vec<String>, i: usize| r[i].parse::<f64>().unwrap_or_else(|_| panic!("not a number: {r:?}"));
    let cell = |call: &str, conn: &str| {
        rows.iter().find(|r| r[0].starts_with(call) && r[1] == conn).unwrap_or_else(|| panic!("no {call} at {conn}"))
    };
    let (l1, l4, c1, c4) = (cell("list", "1"), cell("list", "4"), cell("claim", "1"), cell("claim", "4"));
    for r in rows {
        assert!(n(r, 4) < n(r, 8), "a p99 not lower than the reconstruction's: {r:?}");
    }
    let ratio = |r: &Vec<String>| r[10].replace('x', "×");
    let cpu = |r: &Vec<String>| n(r, 9) / n(r, 5);
    let span = |a: f64, b: f64| format!("{:.1}–{:.1}×", a.min(b), a.max(b));
    let floor: f64 = floor.parse().unwrap();
    vec![
        format!("Met at 4 connections (list {}, claim {}), with a lower p99 in every cell", ratio(l4), ratio(c4)),
        format!("At 1 connection the cells are {} and {}:", ratio(l1), ratio(c1)),
        format!(
            "reaches only {} req/s through this client, {:.1}× the reconstruction's list",
            foundry_tests::grouped(floor as u64),
            floor / n(l1, 6)
        ),
        format!(
            "the local server uses {} less CPU than the reconstruction at 1 connection and {} less at 4",
            span(cpu(l1), cpu(c1)),
            span(cpu(l4), cpu(c4))
        ),
        format!("has a {:.0} ms p99 (still below the reconstruction's {:.1} ms)", n(l4, 4), n(l4, 8)),
    ]
}

/// docs/results.md's simulation tables ("Slots and progress", and the product column of "The
/// seed reports' figures, reproduced") are `docs/sim-seed42.txt`'s lines, the report `cargo run -p sim --profile server -- --seed 42 --runs 2000` prints (the
/// simulation is deterministic: the same seed, the same bytes).
#[test]
fn the_simulation_tables_in_the_docs_are_its_report_file() {
    let report = std::fs::read_to_string(root().join("docs/sim-seed42.txt")).unwrap();
    let results = std::fs::read_to_string(root().join("docs/results.md")).unwrap();
    let line = |start: &str| {
        report.lines().find(|l| l.trim_start().starts_with(start)).unwrap_or_else(|| panic!("no line {start:?}"))
    };
    let between = |l: &str, a: &str, b: &str| l.split(a).nth(1).and_then(|r| r.split(b).next()).unwrap().to_owned();
    let mut rows = Vec::new();
    for (slots, name) in [("1 slot,", "five 60 s runs queued at once, 1 slot"), ("5 slots,", "the same, 5 slots")] {
        let l = line(&format!("five 60 s runs queued at once, {slots} start"));
        let spans: Vec<String> = between(l, "after queueing: ", ";")
            .split("] ")
            .map(|s| s.replace(" s", "").replace(']', "") + "]")
            .collect();
        let (total, ratio) = (between(l, "all done after ", " s ="), between(l, "= ", "× one run"));
        let spans = if spans.iter().all(|s| *s == spans[0]) { format!("{} × 5", spans[0]) } else { spans.join(" ") };
        let ratio = if slots == "5 slots," { format!("**{ratio}×**") } else { format!("{ratio}×") };
        rows.push(format!("| {name} | {spans} | {total} s = {ratio} one run"));
    }
    for (start, name, bold) in [
        ("no progress:", "the Graph reports no progress (the hint can only say 15 s)", false),
        (
            "fraction every 30 s:",
            "the Graph reports its fraction every 30 s (the hint follows the end it points to)",
            true,
        ),
    ] {
        let l = line(start);
        let calls = between(l, start, " calls per run").trim().to_owned();
        let calls = if bold { format!("**{calls}**") } else { calls };
        rows.push(format!("| {name} | {calls} | {} s |", between(l, "the result seen mean ", " s")));
    }
    for (slots, name, bold) in [("1 slot,", "1 slot", true), ("5 slots,", "5 slots", false)] {
        let l = line(&format!("five 60 s runs queued at once (a session with history), {slots}"));
        let calls = between(l, "status calls per run [", "]");
        let all: u32 = calls.split(' ').map(|c| c.parse::<u32>().unwrap()).sum();
        let all = if bold { format!("**{all}**") } else { all.to_string() };
        rows.push(format!("| {name} | {calls} | {all} | {} s |", between(l, "finished mean ", " s")));
    }
    // "The seed reports' figures, reproduced": the product column's figures.
    let product = |start: &str| {
        let mut lines = report.lines().skip_while(|l| !l.starts_with(start));
        lines
            .find(|l| l.trim_start().starts_with("product:"))
            .unwrap_or_else(|| panic!("no product line after {start:?}"))
    };
    let pickup = product("pickup wait (queued -> started), 20 s poll");
    rows.push(format!("| {} |", pickup.trim_start().trim_start_matches("product:").trim()));
    let cancel = product("cancel at a random 0–40 s after queueing, 3 s control poll, n=");
    let running = format!("{} (n = ", cancel.split_once("running: ").map_or("", |(_, rest)| rest).trim());
    let counts = line("cancel at a random 0–40 s after queueing, 3 s control poll, n=");
    let (queued, ran) = (between(counts, "still queued ", ","), between(counts, "running ", ","));
    rows.push(format!("terminal after max 0.0 s (n = {queued})"));
    rows.push(format!("{running}{}) |", foundry_tests::grouped(ran.parse().unwrap())));
    let back = line("back online:");
    rows.push(format!(
        "first start {}, all 5 ended by {} |",
        between(back, "first start ", ","),
        between(back, "all 5 ended by ", ",")
    ));
    rows.push(format!(
        "| recorded {} after the start of a 20 s run |",
        between(line("completion POST lost once"), "recorded ", " after start")
    ));
    // The agent polling rows: `<mean> (<median>, p95 <n>)  <detection> s (p95 <p95> s)`.
    for (start, cell) in [
        ("fixed 2 s ", "{mean} calls (median {median}), detection {det} s |"),
        ("fixed 15 s ", "{mean} calls, detection {det} s (p95 {p95} s) |"),
        ("exponential 2 s doubling, cap 30 s ", "{mean} calls, detection {det} s (p95 {p95} s) |"),
        ("follow check_after_s ", "**{mean} calls (median {median}), detection {det} s** (p95 {p95} s) |"),
    ] {
        let l = line(start).trim_start().trim_start_matches(start.trim_end()).replace("( ", "(");
        let t: Vec<&str> = l.split_whitespace().collect();
        let (mean, median, det, p95) = (t[0], t[1].trim_matches(|c| c == '(' || c == ','), t[4], t[7]);
        rows.push(cell.replace("{mean}", mean).replace("{median}", median).replace("{det}", det).replace("{p95}", p95));
    }
    for row in &rows {
        assert!(results.contains(row.as_str()), "docs/results.md has no row {row:?} (docs/sim-seed42.txt)");
    }
    // docs/mcp.md's sentence of the hints against fixed 15 s polling.
    let agent = |start: &str| {
        let l = line(start).trim_start().trim_start_matches(start.trim_end()).replace("( ", "(");
        let t: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
        (t[0].clone(), t[1].trim_matches(|c| c == '(' || c == ',').to_owned(), t[4].clone())
    };
    let ((hm, hmed, hdet), (fm, _, fdet)) = (agent("follow check_after_s "), agent("fixed 15 s "));
    let said = format!(
        "makes {hm} status calls on average (median {hmed}) for a one-minute run and sees the result {hdet} s after it ends, where fixed 15 s polling makes {fm} calls and sees it after {fdet} s"
    );
    let mcp_md = std::fs::read_to_string(root().join("docs/mcp.md")).unwrap();
    assert!(foundry_tests::says(&mcp_md, &said), "docs/mcp.md does not say {said:?} (docs/sim-seed42.txt)");
    // The Doorbell section's simulation sentences: the doorbell's pickup and cancel against polling.
    for said in doorbell_simulation_texts(&report) {
        assert!(foundry_tests::says(&results, &said), "docs/results.md does not say {said:?} (docs/sim-seed42.txt)");
    }
    let moved = report.replacen(
        "product: mean 0.3 s, median 0.2 s, p95 0.7 s",
        "product: mean 0.4 s, median 0.2 s, p95 0.7 s",
        1,
    );
    assert_ne!(moved, report, "the mutation no longer applies");
    assert!(
        doorbell_simulation_texts(&moved).iter().any(|t| !foundry_tests::says(&results, t)),
        "a changed simulation figure passed"
    );
}

/// What docs/results.md ("Doorbell") says of the simulation's doorbell rows in `report`: pickup
/// and the cancel of a running run, each with the doorbell and by polling alone.
fn doorbell_simulation_texts(report: &str) -> Vec<String> {
    // The `product:` line after the line starting with `start`, its figures after `after`.
    let product = |start: &str, after: &str| -> String {
        let line = report
            .lines()
            .skip_while(|l| !l.starts_with(start))
            .find(|l| l.trim_start().starts_with("product:"))
            .unwrap_or_else(|| panic!("no product line after {start:?}"));
        let figures = line.split_once(after).map_or("", |(_, r)| r);
        // "mean 0.3 s, median 0.2 s, p95 0.7 s, max 1.5 s" → the mean, p95 and max.
        let pick = |k: &str| {
            figures.split(&format!("{k} ")).nth(1).and_then(|r| r.split(" s").next()).unwrap_or("?").to_owned()
        };
        format!("mean {} s, p95 {} s, max {} s", pick("mean"), pick("p95"), pick("max"))
    };
    let mean_p95 = |s: String| s.rsplit_once(", max").map(|(a, _)| a.to_owned()).unwrap_or(s);
    let pickup_bell = product("pickup wait with the doorbell", "product: ");
    let pickup_poll = mean_p95(product("pickup wait (queued -> started), 20 s poll", "product: "));
    let cancel_bell =
        product("cancel at a random 0–40 s after queueing, 3 s control poll, with the doorbell", "running: ");
    let cancel_poll = mean_p95(product("cancel at a random 0–40 s after queueing, 3 s control poll, n=", "running: "));
    vec![
        format!("pickup {pickup_bell} (polling: {pickup_poll});"),
        format!("cancel of a running run {cancel_bell} (polling: {cancel_poll})."),
        format!(
            "gives {}, against the seed's 2.0 / 3.3 / 3.5 s",
            product("cancel at a random 0–40 s after queueing, 3 s control poll, n=", "running: ")
        ),
    ]
}

/// The problems of docs/results.md's opening table: a `## ` section it does not list, a check it
/// names (`module::test_name` in back-quotes) that no test file defines, a figure labelled a
/// record (records belong in docs/history.md).
fn results_problems(results: &str, test_fns: &std::collections::BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let table = foundry_tests::markdown_tables(results)
        .into_iter()
        .find(|t| t[0].starts_with("| section | made by | held by |"))
        .map(|t| t[2..].to_vec())
        .unwrap_or_default();
    if table.is_empty() {
        problems.push("no table of sections and their checks".to_owned());
    }
    let listed: Vec<&str> = table.iter().filter_map(|row| row.split('|').nth(1).map(str::trim)).collect();
    for heading in results.lines().filter_map(|l| l.strip_prefix("## ")) {
        if !listed.iter().any(|s| heading.starts_with(s)) {
            problems.push(format!("section {heading:?} is not in the table of checks"));
        }
    }
    for row in &table {
        let held_by = row.split('|').nth(3).unwrap_or_default();
        for quoted in held_by.split('`').skip(1).step_by(2) {
            if let Some((_, name)) = quoted.rsplit_once("::")
                && !test_fns.contains(name)
            {
                problems.push(format!("{quoted}: no such test"));
            }
        }
        if !held_by.contains("::") && !held_by.contains("the tests named") {
            problems.push(format!("{row}: names no check"));
        }
    }
    if results.contains("A record") {
        problems.push("a figure is labelled a record: move it to docs/history.md".to_owned());
    }
    problems
}

/// Every section of docs/results.md is in its opening table with the checks that hold its
/// figures, and each check named exists; a new section, a renamed test and a record are caught.
#[test]
fn every_section_of_the_results_names_the_checks_that_hold_it() {
    let mut test_fns = std::collections::BTreeSet::new();
    for dir in ["tests/tests", "sim/tests", "local/src", "relay/src", "shared"] {
        let mut stack = vec![root().join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    for l in text.lines() {
                        let l = l.trim_start().trim_start_matches("async ");
                        if let Some(rest) = l.strip_prefix("fn ") {
                            test_fns.insert(rest.split(['(', '<']).next().unwrap().to_owned());
                        }
                    }
                }
            }
        }
    }
    let results = std::fs::read_to_string(root().join("docs/results.md")).unwrap();
    let problems = results_problems(&results, &test_fns);
    assert!(problems.is_empty(), "docs/results.md:\n{}", problems.join("\n"));
    // Each broken variant is caught.
    for (what, broken) in [
        ("a section nobody holds", format!("{results}\n## Something measured once\n\n42 ms.\n")),
        (
            "a renamed check",
            results.replacen("`conformance::the_documented_suite_size_is_the_lists`", "`conformance::a_test_gone`", 1),
        ),
        ("a record", format!("{results}\n*A record: measured once.*\n")),
    ] {
        assert_ne!(broken, results, "{what}: the mutation no longer applies");
        assert!(!results_problems(&broken, &test_fns).is_empty(), "{what}: not caught");
    }
    // The history is dated: each of its sections names the day it was measured.
    let history = std::fs::read_to_string(root().join("docs/history.md")).unwrap();
    for section in history.split("\n## ").skip(1) {
        let heading = section.lines().next().unwrap_or_default();
        assert!(
            section.contains("2026-") || section.contains("2025-"),
            "docs/history.md, {heading:?}: says no date it was measured"
        );
    }
}
