//! The official MCP conformance runners (`@modelcontextprotocol/conformance`, npm: 0.1.16 and
//! the 0.2 line) against the local server, for the server scenarios that apply to a tools server
//! (whose one resource, the run card, only MCP Apps clients see): initialize, tools/list, ping and
//! DNS-rebinding protection with 0.1; with 0.2 those and the 2026-07-28 revision's (stateless
//! serving, caching hints, HTTP header validation, resource listing and not-found) in the
//! era each applies to, against the baseline `infra/conformance/expected-failures.yaml` of
//! checks that need the reference fixture's demo tools (docs/mcp.md says which do not apply).
//! The baseline stays exact both ways: the runner fails an entry that starts passing, and this
//! test fails one that no run reports as a `FAILURE` any more (gone, `INFO` or `SKIPPED`), read
//! from each run's `checks.json`; and every run must print its `Passed: n/m` summary with m > 0,
//! so a scenario the runner skipped (exit 0, no checks) fails instead of passing silently.
//!
//! The runner connects without credentials, so it talks to a small proxy here that adds the
//! bearer token and forwards everything else untouched (method, path, headers including `Host`,
//! body). `infra/test.sh` installs the runner pinned, with a Node 22 binary from the npm
//! registry, and passes `FOUNDRY_CONFORMANCE_NODE` and `FOUNDRY_CONFORMANCE_CLI`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;

struct Proxy {
    target: String,
    token: String,
    http: reqwest::Client,
}

async fn forward(State(p): State<Arc<Proxy>>, req: http::Request<Body>) -> http::Response<Body> {
    let (parts, body) = req.into_parts();
    let body: Bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let url = format!("{}{}", p.target, parts.uri.path());
    let mut out = p.http.request(parts.method.clone(), url).body(body);
    for (k, v) in &parts.headers {
        out = out.header(k, v);
    }
    out = out.header("authorization", format!("Bearer {}", p.token));
    let res = out.send().await.unwrap();
    let mut builder = http::Response::builder().status(res.status());
    for (k, v) in res.headers() {
        builder = builder.header(k, v);
    }
    builder.body(Body::from(res.bytes().await.unwrap())).unwrap()
}

/// The 0.2 runner's server scenarios that apply to this server, with the revision each is run
/// for (docs/mcp.md lists the ones that do not apply and why).
const SCENARIOS_0_2: &[(&str, &str)] = &[
    ("server-initialize", "2025-11-25"),
    ("ping", "2025-11-25"),
    ("tools-list", "2025-11-25"),
    ("dns-rebinding-protection", "2025-11-25"),
    ("json-schema-2020-12", "2025-11-25"),
    ("server-stateless", "2026-07-28"),
    ("tools-list", "2026-07-28"),
    ("dns-rebinding-protection", "2026-07-28"),
    ("json-schema-2020-12", "2026-07-28"),
    ("caching", "2026-07-28"),
    ("http-header-validation", "2026-07-28"),
    ("sep-2164-resource-not-found", "2026-07-28"),
    ("resources-list", "2026-07-28"),
    ("tasks-lifecycle", "extension"),
    ("tasks-capability-negotiation", "extension"),
    ("tasks-wire-fields", "extension"),
    ("tasks-request-state-removal", "extension"),
    ("tasks-mrtr-input", "extension"),
    ("tasks-request-headers", "extension"),
    ("tasks-dispatch-and-envelope", "extension"),
    ("tasks-required-task-error", "extension"),
    ("tasks-mrtr-composition", "extension"),
];

/// Whether the runner's output has its summary with at least one check (`Passed: n/m`, m > 0).
fn summary_ran(text: &str) -> Result<(), String> {
    let passed = passed_of(text).ok_or("no \"Passed:\" line: the scenario did not run")?;
    let total = passed
        .split('/')
        .nth(1)
        .and_then(|n| n.trim().parse::<u32>().ok())
        .ok_or_else(|| format!("unreadable summary: Passed: {passed}"))?;
    if total == 0 { Err(format!("no checks ran: Passed: {passed}")) } else { Ok(()) }
}

/// The `n/m` of the runner's `Passed: n/m` summary line.
fn passed_of(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains("Passed:"))?;
    Some(line.split("Passed:").nth(1)?.split(',').next()?.trim().to_owned())
}

/// docs/mcp.md's table of each run's passed checks, as the runs printed them.
fn passed_table(passed: &[(String, String)]) -> String {
    let mut t = String::from("| conformance run | checks passed |\n|---|---|\n");
    for (run, n) in passed {
        t.push_str(&format!("| {run} | {n} |\n"));
    }
    t
}

/// The checks a 0.2 run wrote under `dir` (`<dir>/<run>/checks.json`).
fn checks_of(dir: &std::path::Path) -> Option<serde_json::Value> {
    let run = std::fs::read_dir(dir).ok()?.filter_map(Result::ok).find(|e| e.path().join("checks.json").exists())?;
    serde_json::from_slice(&std::fs::read(run.path().join("checks.json")).ok()?).ok()
}

/// The `scenario:check` entries of the baseline file.
fn baseline_entries(yaml: &str) -> Vec<String> {
    yaml.lines().filter_map(|l| l.trim().strip_prefix("- ")).map(|e| e.trim().to_owned()).collect()
}

/// Baseline entries whose check no run of their scenario reports as `FAILURE`: gone, `INFO`,
/// `SKIPPED` (the runner flags `SUCCESS` itself).
fn stale_entries(entries: &[String], reported: &[(String, serde_json::Value)]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| {
            let Some((scenario, check)) = e.split_once(':') else { return true };
            !reported.iter().filter(|(s, _)| s == scenario).any(|(_, checks)| {
                checks.as_array().is_some_and(|a| a.iter().any(|c| c["id"] == check && c["status"] == "FAILURE"))
            })
        })
        .cloned()
        .collect()
}

#[tokio::test]
async fn official_conformance_server_scenarios() {
    let (Some(node), Some(cli)) =
        (std::env::var_os("FOUNDRY_CONFORMANCE_NODE"), std::env::var_os("FOUNDRY_CONFORMANCE_CLI"))
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "FOUNDRY_CONFORMANCE_* not set under CI=true (use infra/test.sh)"
        );
        eprintln!(
            "\n*** SKIPPING: FOUNDRY_CONFORMANCE_NODE/CLI not set; ./infra/test.sh installs the pinned runner. ***\n"
        );
        return;
    };
    let running = foundry_tests::LocalServer::default("foundry-conf").await;
    let proxy = Arc::new(Proxy {
        target: format!("http://{}", running.addr),
        token: running.token.clone(),
        http: foundry_tests::http(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(forward).with_state(proxy);
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let mut failures = Vec::new();
    let url = format!("http://localhost:{}/mcp", proxy_addr.port());
    let mut runs: Vec<(std::ffi::OsString, &str, Option<&str>)> =
        ["server-initialize", "tools-list", "ping", "dns-rebinding-protection"]
            .into_iter()
            .map(|s| (cli.clone(), s, None))
            .collect();
    let cli2 = std::env::var_os("FOUNDRY_CONFORMANCE2_CLI").expect("FOUNDRY_CONFORMANCE2_CLI (infra/test.sh sets it)");
    for (scenario, era) in SCENARIOS_0_2 {
        runs.push((cli2.clone(), scenario, Some(era)));
    }
    let baseline = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/conformance/expected-failures.yaml");
    // Every 0.2 run writes its checks (checks.json), read below against the baseline.
    let out_dir = std::env::var_os("FOUNDRY_CONFORMANCE_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| running.dir.join("conformance-out"));
    let mut reported: Vec<(String, serde_json::Value)> = Vec::new();
    let mut passed: Vec<(String, String)> = Vec::new();
    for (cli, scenario, era) in runs {
        let mut cmd = tokio::process::Command::new(&node);
        cmd.arg(&cli).args(["server", "--url", &url, "--scenario", scenario]);
        if let Some(era) = era {
            cmd.args(["--expected-failures", baseline]);
            // Extension scenarios are not on the spec timeline: run without a revision.
            if era != "extension" {
                cmd.args(["--spec-version", era]);
            }
            cmd.arg("-o").arg(out_dir.join(format!("{scenario}-{era}")));
        }
        let out = cmd.output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        let summary = text.lines().find(|l| l.contains("Passed:")).unwrap_or("(no summary)").to_owned();
        eprintln!("conformance {scenario} {}: {summary}", era.unwrap_or("(0.1)"));
        let run = match era {
            None => format!("`{scenario}`, 0.1"),
            Some("extension") => format!("`{scenario}`, 0.2, extension"),
            Some(era) => format!("`{scenario}`, 0.2 @ {era}"),
        };
        passed.push((run, passed_of(&text).unwrap_or_else(|| "(no summary)".to_owned())));
        if std::env::var_os("FOUNDRY_CONFORMANCE_VERBOSE").is_some() {
            eprintln!("{text}");
        }
        if !out.status.success() {
            failures.push(format!("{scenario}:\n{text}"));
        }
        // A scenario the runner skipped (or did not know) exits 0 without checks: require them.
        if let Err(e) = summary_ran(&text) {
            failures.push(format!("{scenario} {}: {e}", era.unwrap_or("(0.1)")));
        }
        if era.is_some() {
            match checks_of(&out_dir.join(format!("{scenario}-{}", era.unwrap_or_default()))) {
                Some(checks) => reported.push((scenario.to_owned(), checks)),
                None => failures.push(format!("{scenario}: the runner wrote no checks.json")),
            }
        }
    }
    let entries = baseline_entries(&std::fs::read_to_string(baseline).unwrap());
    assert!(entries.len() > 10, "the baseline did not parse: {entries:?}");
    let stale = stale_entries(&entries, &reported);
    if !stale.is_empty() {
        failures.push(format!(
            "infra/conformance/expected-failures.yaml has entries the runner no longer reports as failures (gone, INFO, SKIPPED or passing): remove them\n{}",
            stale.join("\n")
        ));
    }
    // The broken variants the guards must catch: a baseline entry for a check that is never
    // reported, one that comes back SKIPPED, and a run that printed no summary.
    let ghost = vec!["caching:no-such-check".to_owned()];
    assert_eq!(stale_entries(&ghost, &reported), ghost, "a stale entry went unnoticed");
    let skipped = serde_json::json!([{"id": "x", "status": "SKIPPED"}]);
    assert_eq!(stale_entries(&["s:x".to_owned()], &[("s".to_owned(), skipped)]).len(), 1, "SKIPPED counted as failing");
    assert!(summary_ran("Scenario s skipped: not applicable to this spec version").is_err());
    // docs/mcp.md's counts are these runs' (a changed count fails, as does a run gone or added).
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/mcp.md")).unwrap();
    let table = passed_table(&passed);
    if let Err(e) = foundry_tests::tables_match(&table, &doc) {
        failures.push(format!("docs/mcp.md's table of passed checks: {e}; the runs printed:\n{table}"));
    }
    let mut moved = passed.clone();
    moved[0].1 = format!("{}0", moved[0].1);
    assert!(foundry_tests::tables_match(&passed_table(&moved), &doc).is_err(), "a changed count passed");
    server.abort();
    running.stop().await;
    assert!(failures.is_empty(), "conformance failures:\n{}", failures.join("\n"));
}
