//! The run card in a real browser: Debian's Chromium driven by Playwright (Python, pinned), the
//! card in a sandboxed frame of a test host built on the pinned `@modelcontextprotocol/ext-apps`
//! AppBridge (bundled by the pinned esbuild), against the local server and an in-process relay
//! running a real Graph process (`tests/browser/apps_check.py` holds the scenario).
//!
//! The card appears for `run_graph_session`, follows the run the relay completes (queued,
//! running with its progress, completed with the first lines of the result and "show all"),
//! refreshes only when `check_after_s` allows and not at all once finished or while hidden, and
//! its Cancel — a `cancel_graph_run` the host puts to its user — ends a running run. The
//! screenshots (light and dark) go to `FOUNDRY_APPS_SCREENSHOTS` (`FOUNDRY_APPS_SCREENSHOTS=docs`
//! re-makes `docs/run-card-*.png`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use domain::limits::Policy;
use local::LocalConfig;

/// The Graph: says where it is, waits for the test's go, then prints 40 lines and one that looks
/// like markup (the card shows it as text).
const GRAPH: &str = r#"printf '%s\n' '{"progress": "Reading page 1 of 3", "fraction": 0.33}' >&2
i=0; while [ ! -f "$FC_GO" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
i=1; while [ $i -le 40 ]; do echo "line $i of the quarterly report"; i=$((i+1)); done
echo '<img src=x onerror=alert(1)>'"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_card_follows_a_run_and_cancels_one_in_a_real_browser() {
    let Some(python) = std::env::var_os("FOUNDRY_PYTHON_BROWSER") else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "FOUNDRY_PYTHON_BROWSER is not set under CI=true");
        eprintln!("\n*** SKIPPING: FOUNDRY_PYTHON_BROWSER is not set; ./infra/test.sh installs Chromium. ***\n");
        return;
    };
    let (Some(modules), Some(axe)) = (std::env::var_os("FOUNDRY_NODE_MODULES"), std::env::var_os("FOUNDRY_AXE_JS"))
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "FOUNDRY_NODE_MODULES or FOUNDRY_AXE_JS not set under CI"
        );
        eprintln!("\n*** SKIPPING: FOUNDRY_NODE_MODULES is not set; ./infra/test.sh installs ext-apps. ***\n");
        return;
    };
    let chromium = std::env::var("FOUNDRY_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let policy = Policy { poll_interval: Duration::from_secs(1), ..Policy::default() };
    let running = foundry_tests::LocalServer::start("foundry-apps-browser", |at| LocalConfig { policy, ..at }).await;
    let dir = running.dir.clone();
    // A relative folder is the repository's (`docs` re-makes the pictures in docs/).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let shots = std::env::var("FOUNDRY_APPS_SCREENSHOTS")
        .map_or_else(|_| dir.join("shots"), |s| root.join(s))
        .display()
        .to_string();
    let go = dir.join("go");
    let session = format!("gs_{}", "a1".repeat(16));
    let project = running.demo.project_id;
    let config = format!(
        "server_url = \"{}\"\ndevice_token = \"{}\"\nstate_dir = \"{}\"\ncontrol_poll_ms = 200\npoll_s = 1\ncancel_grace_ms = 1000\n\
         [[sessions]]\ngraph_session_id = \"{session}\"\nname = \"Quarterly report\"\nslug = \"quarterly\"\nversion = \"1\"\n\
         projects = [\"{project}\"]\ncommand = [\"sh\", \"-c\", {}]\n",
        running.base_url,
        running.device_token,
        dir.join("relay").display(),
        serde_json::to_string(&GRAPH.replace("$FC_GO", &go.display().to_string())).unwrap(),
    );
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("relay.toml");
    std::fs::write(&path, config).unwrap();
    let relay = relay::run::agent::Relay::new(relay::config::Config::load(&path).unwrap()).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let relay = tokio::spawn(async move {
        relay
            .run(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    // The relay's first sync shares the session.
    foundry_tests::wait_until("the relay's first sync", Duration::from_secs(15), || {
        let (store, owner) = (running.store.clone(), running.demo.owner.clone());
        async move {
            use domain::store::ManageProjects;
            store.get_project(&owner, project).await.unwrap().and_then(|p| p.last_sync_at)
        }
    })
    .await;

    let mut scenario = tokio::process::Command::new(&python);
    scenario
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/browser/apps_check.py"))
        .env("FC_MCP_URL", &running.mcp_url)
        .env("FC_MCP_TOKEN", &running.token)
        .env("FC_PROJECT", project.to_string())
        .env("FC_SESSION", &session)
        .env("FC_GO", &go)
        .env("FC_NODE_MODULES", &modules)
        .env("FC_CHROMIUM", &chromium)
        .env("FC_SHOTS", &shots)
        .env("FC_AXE_JS", &axe);
    let m = foundry_tests::python::run_scenario(scenario).await;
    eprintln!("run card: {m}");
    for shot in ["run-card-light.png", "run-card-dark.png"] {
        let at = std::path::Path::new(&shots).join(shot);
        assert!(std::fs::metadata(&at).map(|f| f.len() > 5_000).unwrap_or(false), "no screenshot {}", at.display());
    }
    // Never sooner than check_after_s allowed (a quarter second for the browser's own hops).
    for key in ["slack_a", "slack_b"] {
        let slack: Vec<f64> = m[key].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert!(!slack.is_empty(), "{key}: the card never refreshed: {m}");
        assert!(slack.iter().all(|s| *s >= -0.25), "{key}: a refresh came before check_after_s: {slack:?}");
    }
    assert_eq!(m["calls_after_terminal"], 0, "the card went on checking a finished run: {m}");
    assert_eq!(m["calls_while_hidden"], 0, "the card checked while hidden: {m}");
    assert_eq!(m["calls_without_server_tools"], 0, "the card called a host that relays no tool calls: {m}");
    assert_eq!(m["asked_to_cancel"], 1, "{m}");
    assert_eq!(m["session_lookups"], 2, "one name lookup per card: {m}");
    assert_eq!(m["axe_serious_or_critical"], serde_json::json!([]), "{m}");
    assert_eq!(m["console_problems"], serde_json::json!([]), "{m}");
    assert_eq!(m["csp_enforced"], true, "{m}");
    assert_eq!(m["teardown_answer"], serde_json::json!({}), "{m}");
    let _ = stop.send(());
    relay.await.unwrap();
    running.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
