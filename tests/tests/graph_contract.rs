//! The Graph contract (docs/graph.md, "Writing a Graph") held row by row: [`HELD_BY`] names, for
//! each row of the page's tables (by its first cell), the tests that exercise it, and
//! [`every_row_of_the_graph_page_is_held_by_tests`] fails when a row has no entry, an entry names
//! a row the page no longer has, or a named test is not in the source tree. The owner's page
//! names no test; this file is where its evidence lives.
//!
//! The tests here hold what no neighbour did: the page's two example Graphs run as written,
//! the run's own variables as the real relay binary sets them, and the relay stopped mid-run.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::clock::{Clock, SystemClock};
use domain::ids::{AgentId, CommandId, GraphSessionId, IdempotencyKey};
use domain::limits::Policy;
use domain::runs::{QueueOutcome, QueueRun, Run, RunStatus};
use domain::store::{ManageLinks, QueueRuns, ReadRuns, ReadTasks};
use foundry_tests::graphs::{kill_group, process_alive, recorded_pid};
use foundry_tests::{built_binary, wait_until};
use serde_json::{Value, json};

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Each row of docs/graph.md's tables (its first cell, as written) and the tests that hold it,
/// as `crate::module::path::function` ([`source_of`] says which file each path names).
const HELD_BY: &[(&str, &[&str])] = &[
    // What goes in and comes out.
    (
        "stdin",
        &[
            "relay::run::executor::tests::passes_arguments_on_stdin_and_reads_the_result",
            "suite::graph_contract::a_graph_knows_its_run_and_session",
        ],
    ),
    ("stdout: plain text", &["relay::run::executor::tests::what_stdout_may_be"]),
    (
        "stdout: the JSON object",
        &[
            "relay::run::executor::tests::what_stdout_may_be",
            "relay::run::executor::tests::passes_arguments_on_stdin_and_reads_the_result",
            "relay::run::agent::tests::one_bad_optional_field_never_loses_a_result",
        ],
    ),
    (
        "stdout: its size",
        &[
            "relay::run::executor::tests::stdout_is_bounded_and_an_oversized_result_is_reported_truncated",
            "suite::relay_e2e::results_are_bounded_all_or_nothing",
        ],
    ),
    (
        "stderr: progress lines",
        &[
            "relay::run::executor::tests::progress_lines_on_stderr_reach_live_and_stay_out_of_the_log",
            "domain::progress::tests::a_progress_line_is_a_json_object_with_a_string_progress",
            "relay::run::live::tests::only_the_newest_state_is_kept_and_it_is_bounded",
            "relay::run::agent::tests::slots::progress_is_forwarded_at_once_then_at_most_every_ten_seconds",
        ],
    ),
    (
        "stderr: the log",
        &[
            "relay::run::executor::tests::progress_lines_on_stderr_reach_live_and_stay_out_of_the_log",
            "relay::run::live::tests::only_the_newest_state_is_kept_and_it_is_bounded",
        ],
    ),
    (
        "stderr: a failed run's error",
        &[
            "relay::run::executor::tests::a_failed_runs_error_is_the_end_of_stderr",
            "relay::run::executor::tests::a_failing_command_reports_its_stderr",
            "relay::run::executor::tests::progress_lines_on_stderr_reach_live_and_stay_out_of_the_log",
        ],
    ),
    ("exit 0", &["relay::run::executor::tests::exit_codes_decide_the_status"]),
    ("exit non-zero", &["relay::run::executor::tests::exit_codes_decide_the_status"]),
    ("killed by a signal", &["relay::run::executor::tests::exit_codes_decide_the_status"]),
    ("a program that cannot start", &["relay::run::executor::tests::a_failing_command_reports_its_stderr"]),
    ("processes it leaves", &["relay::run::executor::tests::a_background_child_holding_stdout_does_not_hang_the_run"]),
    // What a Graph gets.
    (
        "the relay's environment",
        &[
            "suite::graph_contract::a_graph_knows_its_run_and_session",
            "relay::machine::service::tests::the_service_environment_round_trips",
        ],
    ),
    (
        "the owner's login shell",
        &[
            "relay::run::agent::tests::a_graph_sees_what_the_shell_exported_under_its_sessions_env",
            "suite::relay_install::the_login_shells_exported_variables_are_read_by_the_real_relay",
        ],
    ),
    (
        "the session's `env`",
        &[
            "relay::run::agent::tests::a_graph_sees_what_the_shell_exported_under_its_sessions_env",
            "relay::run::executor::tests::a_session_sets_the_graphs_environment_and_folder",
            "suite::graph_contract::a_graph_knows_its_run_and_session",
        ],
    ),
    ("`FOUNDRY_RUN_ID`", &["suite::graph_contract::a_graph_knows_its_run_and_session"]),
    ("`FOUNDRY_GRAPH_SESSION_ID`", &["suite::graph_contract::a_graph_knows_its_run_and_session"]),
    (
        "`FOUNDRY_RELAY`",
        &[
            "suite::graph_contract::a_graph_knows_its_run_and_session",
            "suite::desktop_asks::each_way_a_task_ends_is_printed_with_its_exit_code",
        ],
    ),
    ("`FOUNDRY_RELAY_SOCKET`", &["suite::graph_contract::a_graph_knows_its_run_and_session"]),
    (
        "`FOUNDRY_RUN_CAPABILITY`",
        &[
            "suite::graph_contract::a_graph_knows_its_run_and_session",
            "suite::desktop_asks::a_graph_that_outlives_the_cancel_hears_its_ask_end",
        ],
    ),
    (
        "the working folder",
        &[
            "relay::run::executor::tests::a_session_sets_the_graphs_environment_and_folder",
            "relay::config::tests::home_paths_token_file_modes_and_session_environments",
            "suite::graph_contract::a_graph_knows_its_run_and_session",
            "relay::machine::service::tests::the_launchd_agent_is_a_valid_property_list",
        ],
    ),
    (
        "a folder that is gone",
        &["relay::run::agent::tests::a_session_whose_folder_is_missing_leaves_the_other_running"],
    ),
    ("open files", &["relay::machine::environment::tests::a_low_open_file_limit_is_raised_and_a_graph_inherits_it"]),
    ("memory and CPU", &["relay::run::executor::tests::a_graph_gets_no_resource_limit_of_the_relays"]),
    (
        "its process group",
        &[
            "relay::run::executor::tests::cancel_stops_the_whole_process_group",
            "suite::graph_contract::a_relay_stopped_mid_run_takes_its_graph_with_it",
        ],
    ),
    // Cancel, time, sleep and restarts.
    (
        "a cancel",
        &[
            "suite::relay_e2e::cancel_while_running_stops_the_process_within_one_control_poll",
            "relay::run::agent::tests::rung::a_proven_doorbell_slows_the_control_check_and_a_ring_still_cancels_at_once",
        ],
    ),
    (
        "SIGTERM",
        &[
            "relay::run::executor::tests::a_cancelled_graph_gets_the_grace_then_sigkill",
            "relay::run::executor::tests::cancel_stops_the_whole_process_group",
        ],
    ),
    (
        "`cancel_grace_ms`",
        &[
            "relay::config::tests::the_cancel_grace_is_five_seconds_unless_set",
            "relay::run::executor::tests::a_cancelled_graph_gets_the_grace_then_sigkill",
        ],
    ),
    (
        "SIGKILL",
        &[
            "relay::run::executor::tests::a_cancelled_graph_gets_the_grace_then_sigkill",
            "relay::run::executor::tests::cancel_kills_children_that_ignore_sigterm_even_when_the_leader_obeys",
        ],
    ),
    (
        "run time",
        &[
            "suite::relay_e2e::a_relay_that_stops_polling_mid_run_reads_desktop_stopped_reporting",
            "relay::run::agent::tests::the_relay_keeps_syncing_while_a_graph_runs",
        ],
    ),
    (
        "runs at once",
        &[
            "suite::relay_e2e::five_runs_queued_at_once_finish_in_sequence",
            "suite::relay_e2e::five_slots_run_five_at_once_each_cancellable_and_a_kill_loses_none",
        ],
    ),
    ("sleep", &["relay::run::executor::tests::the_mac_stays_awake_until_a_cancelled_graph_is_gone"]),
    (
        "a Mac that sleeps anyway",
        &["relay::run::agent::tests::sleep::a_run_the_server_gave_up_on_while_the_computer_slept_fails_saying_so"],
    ),
    (
        "the relay stops mid-run",
        &[
            "suite::graph_contract::a_relay_stopped_mid_run_takes_its_graph_with_it",
            "relay::run::executor::tests::a_run_dropped_while_the_graph_runs_kills_its_whole_group",
        ],
    ),
    (
        "the relay is killed mid-run",
        &[
            "suite::relay_e2e::a_relay_killed_mid_run_reports_relay_restarted_and_loses_nothing_else",
            "suite::desktop_asks::killing_the_relay_while_its_graph_waits_neither_loses_nor_repeats_the_task",
        ],
    ),
    // `relay task ask`.
    (
        "completed",
        &[
            "suite::desktop_asks::each_way_a_task_ends_is_printed_with_its_exit_code",
            "relay::cli::task::tests::the_exit_code_says_how_the_ask_ended",
            "suite::graph_contract::the_asking_example_serves_two_runs_about_one_draft",
        ],
    ),
    (
        "failed",
        &[
            "suite::desktop_asks::each_way_a_task_ends_is_printed_with_its_exit_code",
            "relay::cli::task::tests::the_exit_code_says_how_the_ask_ended",
        ],
    ),
    (
        "cancelled",
        &[
            "suite::desktop_asks::each_way_a_task_ends_is_printed_with_its_exit_code",
            "relay::cli::task::tests::the_exit_code_says_how_the_ask_ended",
        ],
    ),
    (
        "expired",
        &[
            "suite::desktop_asks::an_unanswered_task_expires_at_thirty_minutes_and_the_graph_hears_it",
            "relay::cli::task::tests::the_exit_code_says_how_the_ask_ended",
        ],
    ),
    (
        "`--no-wait`",
        &[
            "suite::desktop_asks::refusals_print_an_error_and_exit_2",
            "relay::cli::task::tests::the_exit_code_says_how_the_ask_ended",
        ],
    ),
    (
        "the same key and objective again",
        &[
            "suite::desktop_asks::refusals_print_an_error_and_exit_2",
            "suite::desktop_asks::killing_the_relay_while_its_graph_waits_neither_loses_nor_repeats_the_task",
        ],
    ),
    ("the same key, another objective", &["suite::desktop_asks::refusals_print_an_error_and_exit_2"]),
    (
        "the same key in another run",
        &[
            "suite::desktop_asks::a_key_made_from_the_run_id_serves_every_run",
            "suite::graph_contract::the_asking_example_serves_two_runs_about_one_draft",
        ],
    ),
    (
        "a link that does not accept the Graph",
        &[
            "suite::desktop_asks::refusals_print_an_error_and_exit_2",
            "suite::desktop_asks::a_graph_asks_a_chat_and_finishes_with_its_answer",
            "suite::conformance::a_desktop_hands_a_task_only_to_a_link_that_allows_it",
        ],
    ),
    ("a key of the wrong length", &["suite::desktop_asks::refusals_print_an_error_and_exit_2"]),
    ("a bad `--expires-in`", &["suite::desktop_asks::refusals_print_an_error_and_exit_2"]),
    ("too many tasks", &["suite::conformance::a_runs_tasks_are_bounded_and_end_with_it"]),
    ("outside a Graph", &["suite::desktop_asks::outside_a_graph_relay_task_ask_is_refused"]),
    ("no socket", &["suite::desktop_asks::outside_a_graph_relay_task_ask_is_refused"]),
    ("the relay unreachable", &["relay::cli::task::tests::an_unreachable_relay_is_tried_for_ten_minutes_then_refused"]),
    (
        "the run cancelled while it waits",
        &[
            "suite::desktop_asks::a_graph_that_outlives_the_cancel_hears_its_ask_end",
            "suite::desktop_asks::cancelling_the_run_cancels_its_task",
        ],
    ),
    ("the run already ended", &["suite::desktop_asks::a_graph_that_outlives_the_cancel_hears_its_ask_end"]),
    ("a usage error", &["suite::desktop_asks::outside_a_graph_relay_task_ask_is_refused"]),
];

/// Where a path's first segment points: the crate's source folder.
const CRATES: &[(&str, &str)] = &[("relay", "relay/src"), ("domain", "shared/domain/src"), ("suite", "tests/tests")];

/// The file that holds `path`'s function, and the function's name. `crate::a::b::f` is in
/// `<crate folder>/a/b.rs` (or `a/b/mod.rs`); when no such file exists, the last segments are
/// modules written inline (`mod tests { … }`) in the file of the ones before.
fn source_of(path: &str) -> Result<(PathBuf, String), String> {
    let segments: Vec<&str> = path.split("::").collect();
    let [krate, modules @ .., name] = segments.as_slice() else { return Err(format!("{path}: not a path")) };
    let folder = CRATES.iter().find(|(c, _)| c == krate).ok_or(format!("{path}: no crate {krate}"))?.1;
    for k in (1..=modules.len()).rev() {
        let base = root().join(folder).join(modules[..k].join("/"));
        let file = [base.with_extension("rs"), base.join("mod.rs")].into_iter().find(|f| f.is_file());
        let Some(file) = file else { continue };
        let text = std::fs::read_to_string(&file).unwrap();
        if let Some(inline) = modules[k..].iter().find(|m| !text.contains(&format!("mod {m} {{"))) {
            return Err(format!("{path}: {} has no inline `mod {inline}`", file.display()));
        }
        return Ok((file, (*name).to_owned()));
    }
    Err(format!("{path}: no file for its module in {folder}"))
}

/// Whether `file` defines a function `name`.
fn defines(file: &Path, name: &str) -> bool {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines().any(|l| {
        let l = l.trim_start().trim_start_matches("pub ").trim_start_matches("async ");
        l.strip_prefix("fn ").is_some_and(|rest| rest.split(['(', '<']).next() == Some(name))
    })
}

/// The first cell of every body row of every table in `page`.
fn table_rows(page: &str) -> Vec<String> {
    let lines: Vec<&str> = page.lines().collect();
    let mut rows = Vec::new();
    let mut in_table = false;
    for (i, line) in lines.iter().enumerate() {
        let line = line.trim();
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        if line.starts_with("|---") || line.starts_with("| ---") {
            in_table = true;
            continue;
        }
        let header = lines.get(i + 1).is_some_and(|n| n.trim().starts_with("|---") || n.trim().starts_with("| ---"));
        if in_table && !header {
            rows.push(line.trim_matches('|').split(" | ").next().unwrap_or_default().trim().to_owned());
        }
    }
    rows
}

/// What is wrong with `page` against `held` (empty: nothing).
fn problems(page: &str, held: &[(&str, &[&str])]) -> Vec<String> {
    let rows = table_rows(page);
    let mut out = Vec::new();
    let named: BTreeMap<&str, &[&str]> = held.iter().copied().collect();
    for row in &rows {
        match named.get(row.as_str()) {
            None => out.push(format!("the row {row:?} names no test that holds it (graph_contract::HELD_BY)")),
            Some([]) => out.push(format!("the row {row:?} names no test")),
            Some(_) => {}
        }
    }
    for (row, tests) in held {
        if !rows.iter().any(|r| r == row) {
            out.push(format!("HELD_BY names the row {row:?}, which docs/graph.md no longer has"));
        }
        for t in *tests {
            match source_of(t) {
                Err(e) => out.push(e),
                Ok((file, name)) if !defines(&file, &name) => {
                    out.push(format!("{t}: no `fn {name}` in {}", file.display()));
                }
                Ok(_) => {}
            }
        }
    }
    if rows.len() != rows.iter().collect::<std::collections::BTreeSet<_>>().len() {
        out.push("two rows begin with the same words: a row is known by its first cell".into());
    }
    out
}

fn page() -> String {
    std::fs::read_to_string(root().join("docs/graph.md")).unwrap()
}

/// Every row of docs/graph.md's tables names the tests that hold it, and each of those is in
/// the source tree; a new row, a row gone, and a renamed test are each caught.
#[test]
fn every_row_of_the_graph_page_is_held_by_tests() {
    let page = page();
    assert!(table_rows(&page).len() >= 50, "the tables were not read: {:?}", table_rows(&page));
    let found = problems(&page, HELD_BY);
    assert!(found.is_empty(), "docs/graph.md:\n{}", found.join("\n"));
    let renamed: Vec<(&str, &[&str])> = HELD_BY
        .iter()
        .map(|(row, tests)| {
            (*row, if *row == "exit 0" { &["relay::run::executor::tests::a_test_gone"][..] } else { *tests })
        })
        .collect();
    let inline: Vec<(&str, &[&str])> = HELD_BY
        .iter()
        .map(|(row, tests)| {
            (*row, if *row == "open files" { &["relay::machine::environment::nope::x"][..] } else { *tests })
        })
        .collect();
    for (what, page, held) in [
        ("a new row", page.replace("| exit 0 |", "| exit 0 |\n| exit 42 | a row nobody holds |"), HELD_BY.to_vec()),
        ("a row gone", page.replace("| open files |", "| open file |"), HELD_BY.to_vec()),
        ("a renamed test", page.clone(), renamed),
        ("a module that is not there", page.clone(), inline),
    ] {
        assert!(!problems(&page, &held).is_empty(), "{what}: not caught");
    }
}

/// The fenced `sh` block of the page whose second line begins `# <name>:`.
fn example(name: &str) -> String {
    let page = page();
    let block = page
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("\n```").next().unwrap())
        .find(|b| b.lines().nth(1).is_some_and(|l| l.starts_with(&format!("# {name}:"))))
        .unwrap_or_else(|| panic!("docs/graph.md has no example {name}"));
    format!("{block}\n")
}

/// The page's first example, `greet.sh`, as written: it greets the name or the world, says its
/// progress and log on stderr, and fails with Python's complaint when it cannot read the
/// arguments.
#[tokio::test]
async fn the_greeting_example_runs_as_written() {
    let dir = std::env::temp_dir().join(format!("graph-greet-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("greet.sh");
    std::fs::write(&script, example("greet.sh")).unwrap();
    let launch = relay::config::Launch::from(vec!["/bin/sh".to_owned(), script.display().to_string()]);
    let greet = |args: Value| {
        let launch = launch.clone();
        async move {
            let live = std::sync::Arc::new(relay::run::live::Live::default());
            let o = relay::run::executor::run_live(
                &launch,
                &args,
                std::future::pending(),
                Duration::from_secs(1),
                std::sync::Arc::clone(&live),
            )
            .await;
            (o, live.snapshot().1)
        }
    };
    let (o, progress) = greet(json!({"name": "Ada"})).await;
    assert_eq!((o.status, o.result.as_deref()), (domain::runs::FinalStatus::Completed, Some("Hello, Ada!")), "{o:?}");
    assert_eq!((progress.message.as_str(), progress.fraction), ("Greeting", Some(0.5)));
    assert_eq!(progress.tail, ["greeting Ada"]);
    let (o, _) = greet(json!({})).await;
    assert_eq!(o.result.as_deref(), Some("Hello, world!"));
    let (o, _) = greet(json!("not an object")).await;
    assert_eq!(o.status, domain::runs::FinalStatus::Failed);
    let error = o.error.unwrap();
    assert!(error.starts_with("/bin/sh (exit status: 2): Traceback"), "{error}");
    assert!(error.ends_with("AttributeError: 'str' object has no attribute 'get'"), "{error}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A local server and the real relay binary sharing some sessions (shell commands).
struct Desk {
    server: foundry_tests::LocalServer,
    config: PathBuf,
    state: PathBuf,
    agent: AgentId,
    relay: Option<std::process::Child>,
}

fn gs(n: u8) -> GraphSessionId {
    GraphSessionId::parse("g", &format!("gs_{n:032x}")).unwrap()
}

impl Desk {
    /// Sessions `(number, slug, command, extra TOML lines)`.
    async fn new(name: &str, sessions: &[(u8, &str, Vec<String>, &str)]) -> Self {
        let policy = Policy { poll_interval: Duration::from_secs(1), ..Policy::default() };
        let server = foundry_tests::LocalServer::start(name, |c| local::LocalConfig {
            policy,
            doorbell_poll_interval: Duration::from_secs(1),
            ..c
        })
        .await;
        let state = server.dir.join("relay-state");
        let project = server.demo.project_id;
        let mut text = format!(
            "server_url = \"{}\"\ndevice_token = \"{}\"\nstate_dir = \"{}\"\ncontrol_poll_ms = 200\npoll_s = 1\n\
             cancel_grace_ms = 1000\n",
            server.base_url,
            server.device_token,
            state.display(),
        );
        for (n, slug, command, extra) in sessions {
            text += &format!(
                "[[sessions]]\ngraph_session_id = \"{}\"\nname = \"{slug}\"\nslug = \"{slug}\"\nversion = \"1\"\n\
                 projects = [\"{project}\"]\ncommand = {}\n{extra}\n",
                gs(*n),
                serde_json::to_string(command).unwrap(),
            );
        }
        let config = server.dir.join("relay.toml");
        std::fs::write(&config, text).unwrap();
        let agent = AgentId::new("graph-contract", local::DEMO_OWNER).unwrap();
        Self { server, config, state, agent, relay: None }
    }

    /// Starts the real relay in `dir` with `env` added to its environment.
    fn start_relay(&mut self, dir: &Path, env: &[(&str, &str)]) {
        let mut c = std::process::Command::new(built_binary("relay", &["relay/src", "shared/domain/src"]));
        c.args(["--config", self.config.to_str().unwrap(), "run"])
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        self.relay = Some(c.spawn().unwrap());
    }

    /// Queues session `n` with `arguments`, once the relay's sync shared it.
    async fn queue(&self, n: u8, key: &str, arguments: Value) -> CommandId {
        let req = QueueRun {
            owner: self.server.demo.owner.clone(),
            agent: self.agent.clone(),
            project_id: Some(self.server.demo.project_id),
            graph_session_id: gs(n),
            arguments,
            idempotency_key: IdempotencyKey::parse(key).unwrap(),
        };
        wait_until("the relay to share its sessions", Duration::from_secs(30), || async {
            match self.server.store.queue_run(&req).await.unwrap() {
                QueueOutcome::Queued(run) => Some(run.command_id),
                _ => None,
            }
        })
        .await
    }

    async fn ended(&self, id: CommandId) -> Run {
        wait_until("the run to end", Duration::from_secs(30), || async {
            let r = self.server.store.get_run(&self.agent, id).await.unwrap().unwrap();
            r.status.is_terminal().then_some(r)
        })
        .await
    }

    /// A tool call over MCP, as a chat makes it: the structured result.
    async fn tool(&self, name: &str, arguments: Value) -> Value {
        let call = json!({"name": name, "arguments": arguments});
        let http = foundry_tests::http();
        let (url, token) = (&self.server.mcp_url, &self.server.token);
        let v = foundry_tests::mcp::rpc_2026(&http, url, token, "tools/call", Some(name), call, json!({})).await;
        v["result"]["structuredContent"].clone()
    }
}

impl Drop for Desk {
    fn drop(&mut self) {
        if let Some(mut r) = self.relay.take() {
            let _ = r.kill();
            let _ = r.wait();
        }
    }
}

/// What the Graph gets, from the real relay binary: queued by a chat with no arguments, it
/// reads `{}` on stdin; `FOUNDRY_RUN_ID` is the `command_id` the chat got (over a session `env`
/// of that name), `FOUNDRY_GRAPH_SESSION_ID` its session; `FOUNDRY_RELAY` the relay binary,
/// `FOUNDRY_RELAY_SOCKET` its socket (0600), `FOUNDRY_RUN_CAPABILITY` a 256-bit secret; the
/// relay's own environment and the session's `env` reach it, and without a `working_dir` it
/// runs in the relay's folder. The chat reads the same run with `get_graph_run`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_graph_knows_its_run_and_session() {
    let names = [
        "FOUNDRY_RUN_ID",
        "FOUNDRY_GRAPH_SESSION_ID",
        "FOUNDRY_RELAY",
        "FOUNDRY_RELAY_SOCKET",
        "FOUNDRY_RUN_CAPABILITY",
        "GRAPH_CONTRACT_INHERITED",
        "GRAPH_MODE",
    ];
    let script = format!(
        "import json, os, sys; print(json.dumps({{'stdin': sys.stdin.read(), 'cwd': os.getcwd(), \
         'env': {{k: os.environ.get(k) for k in {names:?}}}}}))"
    );
    let command = vec!["python3".to_owned(), "-c".to_owned(), script];
    let mut desk = Desk::new(
        "graph-env",
        &[(1, "env", command, "env = { FOUNDRY_RUN_ID = \"set-by-the-session\", GRAPH_MODE = \"weekly\" }")],
    )
    .await;
    let folder = desk.server.dir.join("relay-folder");
    std::fs::create_dir_all(&folder).unwrap();
    desk.start_relay(&folder, &[("GRAPH_CONTRACT_INHERITED", "from-the-relay")]);
    // Queued as soon as the relay's sync shared the session (the same key: the same run).
    let queue = json!({"graph_session_id": gs(1).to_string(), "idempotency_key": "graph-env-run-1"});
    let id = wait_until("the relay to share its session", Duration::from_secs(30), || async {
        let queued = desk.tool("run_graph_session", queue.clone()).await;
        queued["command_id"].as_str().map(str::to_owned)
    })
    .await;
    let run = wait_until("the chat to read the run completed", Duration::from_secs(30), || async {
        let run = desk.tool("get_graph_run", json!({"command_id": id})).await;
        (run["status"] == "completed").then_some(run)
    })
    .await;
    let seen: Value = serde_json::from_str(run["result"].as_str().unwrap()).unwrap();
    let env = &seen["env"];
    assert_eq!(seen["stdin"], "{}", "no arguments: an empty object");
    assert_eq!(env["FOUNDRY_RUN_ID"].as_str(), Some(id.as_str()), "{seen}");
    assert_eq!(env["FOUNDRY_GRAPH_SESSION_ID"].as_str(), Some(gs(1).as_str()));
    let relay = built_binary("relay", &["relay/src", "shared/domain/src"]);
    assert_eq!(
        std::fs::canonicalize(env["FOUNDRY_RELAY"].as_str().unwrap()).unwrap(),
        std::fs::canonicalize(&relay).unwrap()
    );
    let socket = PathBuf::from(env["FOUNDRY_RELAY_SOCKET"].as_str().unwrap());
    assert_eq!(socket, desk.state.join(relay::run::ask::SOCKET_FILE));
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let meta = std::fs::metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket() && meta.permissions().mode() & 0o777 == 0o600, "{meta:?}");
    let capability = env["FOUNDRY_RUN_CAPABILITY"].as_str().unwrap();
    assert!(capability.len() == 64 && capability.bytes().all(|b| b.is_ascii_hexdigit()), "{capability}");
    assert_eq!(env["GRAPH_CONTRACT_INHERITED"], "from-the-relay");
    assert_eq!(env["GRAPH_MODE"], "weekly");
    assert_eq!(std::fs::canonicalize(seen["cwd"].as_str().unwrap()).unwrap(), std::fs::canonicalize(&folder).unwrap());
}

/// The relay stopped mid-run (SIGTERM, as at logout): the Graph's whole group goes with it —
/// the main process and the child it started — and the restarted relay reports the run failed
/// with `relay restarted during run`, never running it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_stopped_mid_run_takes_its_graph_with_it() {
    let dir = std::env::temp_dir().join(format!("graph-stop-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let (leader, child, starts) = (dir.join("leader.pid"), dir.join("child.pid"), dir.join("starts"));
    let script = format!(
        "echo x >> {}; sh -c 'echo $$ > {}; exec sleep 600' & echo $$ > {}; wait",
        starts.display(),
        child.display(),
        leader.display()
    );
    let mut desk = Desk::new("graph-stop", &[(1, "stop", vec!["sh".into(), "-c".into(), script], "")]).await;
    desk.start_relay(&dir, &[]);
    let id = desk.queue(1, "graph-stop-run-1", json!({})).await;
    let pids = [recorded_pid(&leader).await, recorded_pid(&child).await];
    let mut first = desk.relay.take().unwrap();
    let pid = i32::try_from(first.id()).unwrap();
    let term = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    assert!(term.success());
    let stopped = first.wait().unwrap();
    assert!(stopped.success(), "the relay's stop: {stopped}");
    for p in pids {
        wait_until(&format!("the Graph's process {p} to be gone"), Duration::from_secs(10), || async {
            (!process_alive(p)).then_some(())
        })
        .await;
    }
    desk.start_relay(&dir, &[]);
    let run = desk.ended(id).await;
    let view = run.view(SystemClock.now(), &Policy::default());
    assert_eq!((view.status, view.error.as_deref()), (RunStatus::Failed, Some(domain::errors::RELAY_RESTARTED)));
    assert_eq!(std::fs::read_to_string(&starts).unwrap(), "x\n", "started once");
    for p in pids {
        if process_alive(p) {
            kill_group(p);
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The page's asking example, `review.sh`, as written, run twice about the same draft: each
/// run asks the chat with a key of its own (`review-$FOUNDRY_RUN_ID`), so the second is not
/// refused, and each ends with the chat's answer as its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_asking_example_serves_two_runs_about_one_draft() {
    let dir = std::env::temp_dir().join(format!("graph-review-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("review.sh");
    std::fs::write(&script, example("review.sh")).unwrap();
    let command = vec!["/bin/sh".to_owned(), script.display().to_string()];
    let mut desk = Desk::new("graph-review", &[(1, "review", command, "")]).await;
    let (owner, link) = (desk.server.demo.owner.clone(), desk.server.demo.chat_link_id);
    let any = domain::dispatch::DesktopTasks::default();
    desk.server.store.set_desktop_tasks(&owner, link, Some(&any)).await.unwrap().unwrap();
    desk.start_relay(&dir, &[]);
    let draft = "We ship on Friday.";
    for (i, answer) in ["Ship on Thursday instead.", "Friday is fine."].iter().enumerate() {
        let id =
            desk.queue(1, &format!("graph-review-run-{i}"), json!({"link": link.to_string(), "draft": draft})).await;
        let objective = format!("Review this draft and answer with your edits: {draft}");
        let task = wait_until("the Graph's task to reach the chat", Duration::from_secs(30), || async {
            let open = desk.server.store.list_open_tasks(&owner, link, 50).await.unwrap();
            open.into_iter().find(|t| t.objective == objective && t.origin.as_ref().is_some_and(|o| o.command_id == id))
        })
        .await;
        use domain::store::ClaimTasks;
        let claim_id = match desk.server.store.claim_task(&owner, link, task.task_id).await.unwrap() {
            domain::tasks::ClaimOutcome::Claimed { claim_id, .. } => claim_id,
            other => panic!("{other:?}"),
        };
        let submit = domain::tasks::SubmitTask {
            owner: owner.clone(),
            link_id: link,
            task_id: task.task_id,
            claim_id,
            status: domain::tasks::SubmitStatus::Completed,
            result: (*answer).to_owned(),
        };
        assert_eq!(desk.server.store.submit_task(&submit).await.unwrap(), domain::tasks::SubmitOutcome::Accepted);
        let run = desk.ended(id).await;
        let c = run.completion.clone().unwrap();
        assert_eq!((run.status, c.result.as_deref()), (RunStatus::Completed, Some(*answer)), "run {i}: {c:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
