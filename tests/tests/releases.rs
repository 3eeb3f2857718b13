//! Releases and the compatibility promises kept across them (issue 60; docs/releasing.md).
//!
//! Each release freezes its contract under `tests/fixtures/releases/<version>/` (never edited
//! afterwards); this build is held to every frozen release it supports:
//!
//! - the MCP tool list: no tool removed, no input removed or newly required, no output field
//!   removed (a host's cached list, and the calls it makes from it, keep working);
//! - the template: no change that makes CloudFormation replace a stateful resource (the
//!   table, the user pool and its clients, the bucket, the queues): `infra/replacements.py`,
//!   from the create-only properties in the pinned cfn-lint's resource schemas;
//! - the table's point-in-time restore (docs/operations.md, "Restoring the table"): its script
//!   and the deploy it prints, run against the emulator.
//!
//! Each check is shown catching the breaking change it exists for.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

use serde_json::Value;

/// How many releases before this one a build promises to work with (docs/releasing.md).
const SUPPORTED_RELEASES: usize = 2;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The frozen releases, oldest first (by semantic version).
fn frozen() -> Vec<(semver_like::Version, PathBuf)> {
    let dir = root().join("tests/fixtures/releases");
    let mut all: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (semver_like::Version::parse(&name).unwrap_or_else(|| panic!("{name}: not a version")), e.path())
        })
        .collect();
    all.sort();
    all
}

/// The releases this build promises to work with: the last [`SUPPORTED_RELEASES`] frozen ones
/// before it, and its own when it is frozen.
fn supported() -> Vec<(semver_like::Version, PathBuf)> {
    let this = semver_like::Version::parse(env!("CARGO_PKG_VERSION")).unwrap();
    let all = frozen();
    let older: Vec<_> = all.iter().filter(|(v, _)| *v < this).cloned().collect();
    let mut kept: Vec<_> = older.into_iter().rev().take(SUPPORTED_RELEASES).collect();
    kept.extend(all.into_iter().filter(|(v, _)| *v == this));
    kept
}

/// The supported frozen releases' versions and folders, oldest first (for the other release
/// checks: `release_relay`, `release_store`).
pub(crate) fn supported_dirs() -> Vec<(String, PathBuf)> {
    supported().into_iter().map(|(_, d)| (d.file_name().unwrap().to_string_lossy().into_owned(), d)).collect()
}

mod semver_like {
    /// `major.minor.patch`, compared as numbers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    pub struct Version(pub u64, pub u64, pub u64);

    impl Version {
        pub fn parse(s: &str) -> Option<Self> {
            let mut parts = s.split('.').map(|p| p.parse::<u64>().ok());
            let v = Version(parts.next()??, parts.next()??, parts.next()??);
            parts.next().is_none().then_some(v)
        }
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

fn names(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|x| x.as_str().map(str::to_owned)).collect()
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

/// What `new` (a tools/list `tools` array) breaks of `old`'s promises, one line each.
fn tool_breaks(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let tools = |v: &Value| v.as_array().cloned().unwrap_or_default();
    for was in tools(old) {
        let name = was["name"].as_str().unwrap_or_default().to_owned();
        let Some(now) = tools(new).into_iter().find(|t| t["name"] == was["name"]) else {
            out.push(format!("tool {name} removed"));
            continue;
        };
        let (was_in, now_in) = (&was["inputSchema"], &now["inputSchema"]);
        for field in names(&now_in["required"]) {
            if !names(&was_in["required"]).contains(&field) {
                out.push(format!("tool {name}: input {field} is now required"));
            }
        }
        for field in keys(&was_in["properties"]) {
            if now_in["properties"].get(&field).is_none() {
                out.push(format!("tool {name}: input {field} removed (a host that sends it is refused)"));
            }
        }
        for field in keys(&was["outputSchema"]["properties"]) {
            if now["outputSchema"]["properties"].get(&field).is_none() {
                out.push(format!("tool {name}: output field {field} removed"));
            }
        }
    }
    out
}

/// This build's tool list (the golden file `mcp_http::tools_list_matches_the_golden_file`
/// holds to the server's answer) keeps the promises of every supported frozen release.
#[test]
fn the_tool_list_keeps_every_supported_releases_promises() {
    let now = read_json(&root().join("tests/golden/tools_list.json"));
    let releases = supported();
    assert!(!releases.is_empty(), "no frozen release: tests/fixtures/releases/<version>/ (docs/releasing.md)");
    for (version, dir) in releases {
        let frozen = read_json(&dir.join("tools_list.json"));
        assert_eq!(tool_breaks(&frozen, &now), Vec::<String>::new(), "against release {version:?}");
    }
}

/// Each kind of breaking change to the tool list is caught, named.
#[test]
fn the_tool_list_check_catches_each_breaking_change() {
    let now = read_json(&root().join("tests/golden/tools_list.json"));
    assert_eq!(tool_breaks(&now, &now), Vec::<String>::new());
    let mutate = |f: &dyn Fn(&mut Vec<Value>)| {
        let mut tools = now.as_array().unwrap().clone();
        f(&mut tools);
        tool_breaks(&now, &Value::Array(tools))
    };
    let removed = mutate(&|t| t.retain(|x| x["name"] != "cancel_graph_run"));
    assert_eq!(removed, ["tool cancel_graph_run removed"]);
    let required = mutate(&|t| {
        let get = t.iter_mut().find(|x| x["name"] == "get_graph_run").unwrap();
        get["inputSchema"]["required"].as_array_mut().unwrap().push("wait_s".into());
        get["inputSchema"]["properties"]["wait_s"] = serde_json::json!({"type": "integer"});
    });
    assert_eq!(required, ["tool get_graph_run: input wait_s is now required"]);
    let input_gone = mutate(&|t| {
        let run = t.iter_mut().find(|x| x["name"] == "run_graph_session").unwrap();
        run["inputSchema"]["properties"].as_object_mut().unwrap().remove("arguments");
    });
    assert_eq!(input_gone, ["tool run_graph_session: input arguments removed (a host that sends it is refused)"]);
    let output_gone = mutate(&|t| {
        let get = t.iter_mut().find(|x| x["name"] == "get_graph_run").unwrap();
        get["outputSchema"]["properties"].as_object_mut().unwrap().remove("progress");
    });
    assert_eq!(output_gone, ["tool get_graph_run: output field progress removed"]);
}

/// The version this build carries has its changelog entry, and every frozen release has the
/// files the checks read and an entry of its own.
#[test]
fn each_release_has_its_changelog_entry_and_its_frozen_contract() {
    let changelog = std::fs::read_to_string(root().join("CHANGELOG.md")).unwrap();
    let this = env!("CARGO_PKG_VERSION");
    assert!(changelog.contains(&format!("\n## {this}")), "CHANGELOG.md has no `## {this}` entry");
    for (_, dir) in frozen() {
        let version = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(changelog.contains(&format!("\n## {version}")), "CHANGELOG.md has no `## {version}` entry");
        for file in ["tools_list.json", "template.yaml", "README.md"] {
            assert!(dir.join(file).is_file(), "release {version} has no frozen {file}");
        }
    }
}

/// The template replaces no stateful resource of any supported frozen release, and the check
/// (`infra/replacements.py`, run on the deployed stack's template by `infra/preflight` too)
/// names the property of each replacing change it is shown.
#[test]
fn the_template_replaces_no_stateful_resource_of_a_supported_release() {
    let Some(python) = std::env::var_os("FOUNDRY_DEPLOY_VENV").map(|v| PathBuf::from(v).join("bin/python")) else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI sets FOUNDRY_DEPLOY_VENV (cfn-lint's schemas)");
        eprintln!("skipped: FOUNDRY_DEPLOY_VENV is unset (./infra/test.sh sets it)");
        return;
    };
    let run = |args: &[&str]| {
        let out =
            std::process::Command::new(&python).arg(root().join("infra/replacements.py")).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
    };
    let template = root().join("template.yaml");
    for (version, dir) in supported() {
        let (code, said) = run(&[dir.join("template.yaml").to_str().unwrap(), template.to_str().unwrap()]);
        assert_eq!(code, Some(0), "against release {version:?}: {said}");
    }
    let (code, said) = run(&["--self-test", template.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("mutations caught"), "{said}");
}

/// A point-in-time restore, rehearsed (docs/operations.md, "Restoring the table"):
/// `infra/restore-table.py` exports the table as it is at the restore point; deploying the
/// template with the two values it prints makes CloudFormation replace the table with one made
/// from that export (emulated by `cloud::deploy_table` from the template's own
/// `ImportSourceSpecification` and key schema), and the stack's functions then answer from the
/// new table: what was there at the export is, what came after is not, and new writes land
/// in it. An ordinary deploy of the template imports nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_point_in_time_restore_replaces_the_table_and_the_functions_answer_from_it() {
    use foundry_tests::cloud::{Emulator, Template, access_token, deploy_table};
    assert_eq!(Template::load().table_import_source(), None, "an ordinary deploy imports the table");
    let Some(python) = std::env::var_os("FOUNDRY_DEPLOY_VENV").map(|v| PathBuf::from(v).join("bin/python")) else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI sets FOUNDRY_DEPLOY_VENV (boto3)");
        eprintln!("skipped: FOUNDRY_DEPLOY_VENV is unset (./infra/test.sh sets it)");
        return;
    };
    let Some(mut acct) = foundry_tests::cloud::account().await else { return };
    let dynamodb = aws_sdk_dynamodb::Client::new(&acct.aws);
    // The template's table keeps point-in-time recovery on (an export needs it).
    dynamodb
        .update_continuous_backups()
        .table_name(&acct.resources.table)
        .point_in_time_recovery_specification(
            aws_sdk_dynamodb::types::PointInTimeRecoverySpecification::builder()
                .point_in_time_recovery_enabled(true)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let http = foundry_tests::http();
    let owner = access_token("owner-client-id", "openid osfoundry/owner");
    let call = |emu: std::sync::Arc<Emulator>, method: reqwest::Method, body: Option<Value>| {
        let (http, owner) = (http.clone(), owner.clone());
        async move {
            let mut req = http.request(method, format!("{}/owner/projects", emu.gateway)).bearer_auth(&owner);
            if let Some(b) = body {
                req = req.json(&b);
            }
            let res = req.send().await.unwrap();
            assert!(res.status().is_success(), "{}", res.status());
            res.json::<Value>().await.unwrap()
        }
    };
    let names = |v: Value| -> Vec<String> {
        let mut n: Vec<String> =
            v["projects"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_owned()).collect();
        n.sort();
        n
    };
    let before = Emulator::start(&Template::load(), &acct.resources, &acct.base_env).await;
    before.wait_ready().await;
    call(before.clone(), reqwest::Method::POST, Some(serde_json::json!({"name": "made before the restore point"})))
        .await;

    let out = std::process::Command::new(&python)
        .arg(root().join("infra/restore-table.py"))
        .args(["--at", "2026-12-06T09:30:00Z", "--table", &acct.resources.table, "--bucket", &acct.resources.bucket])
        .args(["--prefix", "restores/rehearsal"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let value = |key: &str| {
        said.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}: {said}"))
            .to_owned()
    };
    let (bucket, prefix) = (value("RestoreExportBucket"), value("RestoreExportPrefix"));
    assert!(prefix.starts_with("restores/rehearsal/AWSDynamoDB/") && prefix.ends_with("/data/"), "{prefix}");
    assert!(
        said.contains(&format!(
            "sam deploy --parameter-overrides RestoreExportBucket={bucket} RestoreExportPrefix={prefix}"
        )),
        "{said}"
    );
    // Written after the export: not in the restored table.
    call(before.clone(), reqwest::Method::POST, Some(serde_json::json!({"name": "made after the restore point"})))
        .await;

    let restoring =
        Template::load().with_parameter("RestoreExportBucket", &bucket).with_parameter("RestoreExportPrefix", &prefix);
    let old_table = acct.resources.table.clone();
    deploy_table(&restoring, &acct.aws, &mut acct.resources).await;
    assert_ne!(acct.resources.table, old_table, "the restore replaced the table");
    let after = Emulator::start(&restoring, &acct.resources, &acct.base_env).await;
    after.wait_ready().await;
    assert_eq!(
        names(call(after.clone(), reqwest::Method::GET, None).await),
        ["made before the restore point"],
        "the functions answer from the table as it was at the export"
    );
    call(after.clone(), reqwest::Method::POST, Some(serde_json::json!({"name": "made after the restore"}))).await;
    assert_eq!(
        names(call(after, reqwest::Method::GET, None).await),
        ["made after the restore", "made before the restore point"]
    );
    // The old table is kept as it was, the later project in it.
    assert_eq!(names(call(before, reqwest::Method::GET, None).await).len(), 2, "the old table was kept");
}

/// The one relay request a supported older server refuses unknown fields in: the pause body
/// (`POST /pause`, `deny_unknown_fields` since 0.2.0, shared with the owner API). So this
/// relay's pause body keeps exactly the fields 0.2.0 knows: a field added to it would make
/// `relay pause` fail against a 0.2.0 stack (a rollback, or a desktop ahead of its stack)
/// until 0.2.0 is no longer supported (docs/releasing.md, "Compatibility").
#[test]
fn the_relays_pause_body_carries_only_what_a_supported_server_accepts() {
    let full = domain::relay::PauseRequest { for_seconds: Some(60), note: Some("lunch".into()) };
    let sent = serde_json::to_value(&full).unwrap();
    let keys: Vec<&str> = sent.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["for_seconds", "note"], "the pause body's fields changed: a 0.2.0 server refuses new ones");
}

/// Every frozen file and its SHA-256, as it was frozen (0.1.0 at commit 2a0274f's contract,
/// 0.2.0 at 301f6fe). A release's fixtures are never edited afterwards: the checks above hold
/// this build to them, and an edited fixture would quietly move the goalposts. Freezing a
/// release adds its rows here (docs/releasing.md, "Cutting a release").
const FROZEN_FILES: &[(&str, &str)] = &[
    ("0.1.0/README.md", "b198ad94fae5cc629c311d964b59bc472c05a2380e41d8a7b0da76ebc9b63ebe"),
    ("0.1.0/template.yaml", "9396c5a4ef6a0a2ccb82023020c6b9f3dedcb5a8326343ee920c3107e7a0f2f3"),
    ("0.1.0/tools_list.json", "8e8b52a907d3a3c61b1817bc24d11edcc3115bfb13481d19313912771f0d6d08"),
    ("0.2.0/README.md", "4e309f130ad595a73f142c11ee3f29e20c6d1fa60e2d922cadacaad29db00e3b"),
    ("0.2.0/dynamodb_items.json", "5314a49e63207201cf38220e467aac193db74090220537264065cc01528284e2"),
    ("0.2.0/relay_requests.json", "2878ae104dce9f74997d3775ff9380d4dde680343caee93ffea1c38433026137"),
    ("0.2.0/sqlite.sql", "bcd912590aa73861101a753114909ec459d357df802fe989273d4c01d9b46c1c"),
    ("0.2.0/store_scenario.json", "41023d25a4b2e523eb20dfa6d8ed744bfad1753fc296a92d0e0588cb6f3f69b2"),
    ("0.2.0/template.yaml", "7061fde478a19560c540e2282be3447b23f7952a5279bd2df168a15c96dfd72f"),
    ("0.2.0/tools_list.json", "8e8b52a907d3a3c61b1817bc24d11edcc3115bfb13481d19313912771f0d6d08"),
];

/// The frozen fixtures are as they were frozen: each file's SHA-256 is the one recorded, and
/// no frozen release has a file that is not recorded.
#[test]
fn the_frozen_fixtures_are_as_they_were_frozen() {
    let dir = root().join("tests/fixtures/releases");
    let mut found = Vec::new();
    for (_, release) in frozen() {
        for f in std::fs::read_dir(&release).unwrap().filter_map(Result::ok) {
            let rel = f.path().strip_prefix(&dir).unwrap().to_string_lossy().into_owned();
            found.push((rel, foundry_tests::sha256_of(&f.path())));
        }
    }
    found.sort();
    let recorded: Vec<(String, String)> =
        FROZEN_FILES.iter().map(|(f, s)| ((*f).to_owned(), (*s).to_owned())).collect();
    assert_eq!(found, recorded, "a frozen fixture was edited, added or removed (or a new release's rows are missing)");
}

/// Every value an enumeration of the tool list takes (`$defs/<Name>/oneOf[*]/const`), by name,
/// from all tools.
fn enum_values(tools: &Value) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut all: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for t in tools.as_array().unwrap() {
        for schema in [&t["inputSchema"], &t["outputSchema"]] {
            for (name, def) in schema["$defs"].as_object().into_iter().flatten() {
                for v in def["oneOf"].as_array().into_iter().flatten().filter_map(|o| o["const"].as_str()) {
                    all.entry(name.clone()).or_default().insert(v.to_owned());
                }
            }
        }
    }
    all
}

/// Where `now`'s enumerations add a value `frozen`'s lack.
fn new_values(frozen: &Value, now: &Value) -> Vec<String> {
    let (was, is) = (enum_values(frozen), enum_values(now));
    let mut found = Vec::new();
    for (name, values) in &is {
        if let Some(old) = was.get(name) {
            found.extend(values.difference(old).map(|v| format!("{name}: {v:?} is new")));
        }
    }
    found
}

/// No new value in a field a supported release reads: a run's and a task's `status` (stored in
/// every run and task item and row, and answered by the tools) keep the values each supported
/// release's frozen tool list enumerates — an older server rolled back over this build's data,
/// or an older relay, would fail on one it does not know. Shown catching a run status added.
#[test]
fn no_enumeration_gains_a_value_a_supported_release_does_not_know() {
    let now = read_json(&root().join("tests/golden/tools_list.json"));
    let names = enum_values(&now);
    assert!(names.contains_key("RunStatus") && names.contains_key("TaskStatus"), "{names:?}");
    for (version, dir) in supported() {
        let frozen = read_json(&dir.join("tools_list.json"));
        assert_eq!(new_values(&frozen, &now), Vec::<String>::new(), "against release {version:?}");
    }
    let (_, dir) = supported().into_iter().next().unwrap();
    let mut added = now.clone();
    for t in added.as_array_mut().unwrap() {
        if let Some(d) = t["outputSchema"]["$defs"]["RunStatus"]["oneOf"].as_array_mut() {
            d.push(serde_json::json!({"const": "paused", "type": "string"}));
        }
    }
    assert_eq!(new_values(&read_json(&dir.join("tools_list.json")), &added)[0], "RunStatus: \"paused\" is new");
}
