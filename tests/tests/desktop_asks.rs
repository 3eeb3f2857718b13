//! A Graph on the desktop hands a step to a linked chat and waits for it (issue 57), end to end
//! on the local server: the real relay binary runs a real Graph (`tests/python/graph_asks.py`,
//! Python) that asks through `relay task ask`, and a chat answers with the official Python MCP
//! SDK (`tests/python/chat_answers.py`). The server's clock is the test's: expiry is reached by
//! moving it, never by waiting.
//!
//! The latency benchmark (`submit` → the waiting Graph holds the result, with the doorbell and
//! with the safety poll only) is ignored here and run on purpose: docs/results.md.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use domain::clock::{Clock, ManualClock, SystemClock};
use domain::ids::{AgentId, ChatLinkId, CommandId, GraphSessionId, IdempotencyKey};
use domain::limits::Policy;
use domain::runs::{QueueOutcome, QueueRun, Run, RunStatus};
use domain::store::{AssignTasks, CancelRuns, ManageLinks, ManageProjects, QueueRuns, ReadRuns, ReadTasks};
use domain::tasks::TaskStatus;
use foundry_tests::{built_binary, wait_until};
use serde_json::{Value, json};

struct World {
    server: foundry_tests::LocalServer,
    clock: Arc<ManualClock>,
    agent: AgentId,
    relay: Option<std::process::Child>,
    config: PathBuf,
}

const SESSION: &str = "gs_57575757575757575757575757575757";

fn python_graph() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/python/graph_asks.py").to_owned()
}

/// The local server on the test's clock, its demo link accepting desktop tasks (through the
/// owner API), and a relay config sharing the asking Graph.
async fn world(name: &str, doorbell: bool, relay_poll_s: u64) -> World {
    let clock = Arc::new(ManualClock::new(SystemClock.now()));
    let policy = Policy {
        poll_interval: Duration::from_secs(relay_poll_s),
        // The clock moves 30 minutes in the expiry test: the run's heartbeat must not lapse.
        heartbeat_timeout: Duration::from_secs(3 * 3600),
        ..Policy::default()
    };
    let server_clock = local::config::ServerClock(clock.clone());
    let server = foundry_tests::LocalServer::start(name, move |c| local::LocalConfig {
        policy,
        clock: server_clock,
        doorbell_poll_interval: Duration::from_secs(relay_poll_s),
        ..c
    })
    .await;
    let allowed =
        owner_api(&server, "PUT", &format!("/links/{}/desktop-tasks", server.demo.chat_link_id), json!({})).await;
    assert_eq!(allowed["desktop_tasks"], json!({"sessions": []}), "{allowed}");
    let project = server.demo.project_id;
    let config = server.dir.join("relay.toml");
    std::fs::write(
        &config,
        format!(
            "server_url = \"{}\"\ndevice_token = \"{}\"\nstate_dir = \"{}\"\ncontrol_poll_ms = 200\npoll_s = {relay_poll_s}\n\
             cancel_grace_ms = 1000\ndoorbell = {doorbell}\n\
             [[sessions]]\ngraph_session_id = \"{SESSION}\"\nname = \"Asks\"\nslug = \"asks\"\nversion = \"1\"\n\
             projects = [\"{project}\"]\ncommand = [\"python3\", {}]\n",
            server.base_url,
            server.device_token,
            server.dir.join("relay-state").display(),
            serde_json::to_string(&python_graph()).unwrap(),
        ),
    )
    .unwrap();
    let agent = AgentId::new("asks-client", local::DEMO_OWNER).unwrap();
    World { server, clock, agent, relay: None, config }
}

async fn owner_api(server: &foundry_tests::LocalServer, method: &str, path: &str, body: Value) -> Value {
    let res = foundry_tests::http()
        .request(method.parse().unwrap(), format!("{}{}{path}", server.base_url, http_api::owner_api::PREFIX))
        .bearer_auth(&server.owner_token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{method} {path}: {}", res.status());
    res.json().await.unwrap()
}

impl World {
    fn start_relay(&mut self) {
        let child = std::process::Command::new(built_binary("relay", &["relay/src", "shared/domain/src"]))
            .args(["--config", self.config.to_str().unwrap(), "run"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        self.relay = Some(child);
    }

    fn kill_relay(&mut self) {
        if let Some(mut r) = self.relay.take() {
            let _ = r.kill();
            let _ = r.wait();
        }
    }

    /// Queues the Graph with these asks; waits until the relay started it.
    async fn queue(&self, key: &str, asks: Value) -> (CommandId, PathBuf) {
        self.queue_args(key, json!({"asks": asks})).await
    }

    /// Queues the Graph with these arguments (`asks` and the rest of `tests/python/graph_asks.py`'s;
    /// its `pid_file` is set here); waits until the relay started it.
    async fn queue_args(&self, key: &str, mut arguments: Value) -> (CommandId, PathBuf) {
        let pid_file = self.server.dir.join(format!("{key}.pid"));
        arguments["pid_file"] = json!(pid_file);
        let req = QueueRun {
            owner: self.server.demo.owner.clone(),
            agent: self.agent.clone(),
            project_id: Some(self.server.demo.project_id),
            graph_session_id: GraphSessionId::parse("g", SESSION).unwrap(),
            arguments,
            idempotency_key: IdempotencyKey::parse(key).unwrap(),
        };
        // Queued once the relay's first sync shared the session.
        let run = wait_until("the relay to share its session", Duration::from_secs(30), || async {
            match self.server.store.queue_run(&req).await.unwrap() {
                QueueOutcome::Queued(run) => Some(run),
                _ => None,
            }
        })
        .await;
        (run.command_id, pid_file)
    }

    async fn run(&self, id: CommandId) -> Run {
        self.server.store.get_run(&self.agent, id).await.unwrap().unwrap()
    }

    async fn ended(&self, id: CommandId, within: Duration) -> Run {
        wait_until("the run to end", within, || async {
            let r = self.run(id).await;
            r.status.is_terminal().then_some(r)
        })
        .await
    }

    /// The open task the Graph's ask made on `link`, once it is there.
    async fn asked(&self, link: ChatLinkId, objective: &str) -> domain::tasks::Task {
        wait_until("the Graph's task to reach the chat", Duration::from_secs(30), || async {
            let open = self.server.store.list_open_tasks(&self.server.demo.owner, link, 50).await.unwrap();
            open.into_iter().find(|t| t.objective == objective && t.origin.is_some())
        })
        .await
    }

    /// The chat answering with the official Python SDK: one JSON line per answer.
    async fn chat_answers(&self, objective: &str, result: &str, count: usize) -> Option<Vec<Value>> {
        let Some(python) = std::env::var_os("FOUNDRY_PYTHON_MCP2") else {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "FOUNDRY_PYTHON_MCP2 is not set under CI=true");
            eprintln!("\n*** SKIPPING the chat: FOUNDRY_PYTHON_MCP2 is not set (./infra/test.sh installs it). ***\n");
            return None;
        };
        let out = tokio::process::Command::new(&python)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/python/chat_answers.py"))
            .env("FC_URL", &self.server.mcp_url)
            .env("FC_TOKEN", &self.server.token)
            .env("FC_LINK", self.server.demo.chat_link_id.to_string())
            .env("FC_OBJECTIVE", objective)
            .env("FC_RESULT", result)
            .env("FC_COUNT", count.to_string())
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "the chat failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        Some(stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.kill_relay();
    }
}

fn answers(run: &Run) -> Vec<Value> {
    let result = run.completion.as_ref().and_then(|c| c.result.clone()).unwrap_or_else(|| panic!("no result: {run:?}"));
    let v: Value = serde_json::from_str(&result).unwrap_or_else(|e| panic!("{e}: {result}"));
    v["answers"].as_array().unwrap().clone()
}

fn kill_graph(pid_file: &std::path::Path) {
    if let Ok(pid) = std::fs::read_to_string(pid_file) {
        foundry_tests::graphs::kill_group(pid.trim().parse().unwrap());
    }
}

/// The whole hand-off: a Graph asks a link that does not allow it and another owner's link
/// (both refused, the same words, nothing written), then the demo link; the chat lists the task
/// with its origin, claims and submits; the Graph ends its run holding the chat's answer, and
/// the owner's API shows where the task came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_graph_asks_a_chat_and_finishes_with_its_answer() {
    let mut w = world("asks-e2e", true, 1).await;
    let owner = w.server.demo.owner.clone();
    let closed = w.server.store.create_link(&owner, w.server.demo.project_id, "Not asked").await.unwrap().unwrap();
    let stranger = domain::ids::OwnerId::new("someone-else").unwrap();
    let theirs = w.server.store.create_project(&stranger, "Theirs").await.unwrap();
    let theirs = w.server.store.create_link(&stranger, theirs.project_id, "Their chat").await.unwrap().unwrap();
    let any = domain::dispatch::DesktopTasks::default();
    w.server.store.set_desktop_tasks(&stranger, theirs.link_id, Some(&any)).await.unwrap().unwrap();
    w.start_relay();
    let objective = "Review the launch note and answer with your edits";
    let link = w.server.demo.chat_link_id;
    let (run, _pid) = w
        .queue(
            "asks-e2e-run-1",
            json!([
                {"link": closed.link_id.to_string(), "key": "ask-closed-01", "objective": "never"},
                {"link": theirs.link_id.to_string(), "key": "ask-theirs-01", "objective": "never"},
                {"link": link.to_string(), "key": "ask-review-01", "objective": objective},
            ]),
        )
        .await;
    let task = w.asked(link, objective).await;
    let waiting = wait_until("the run to say it waits for the chat", Duration::from_secs(10), || async {
        let message = w.run(run).await.progress.map(|p| p.progress.message).unwrap_or_default();
        message.starts_with("waiting for a chat's answer").then_some(message)
    })
    .await;
    assert!(waiting.contains(&task.task_id.to_string()) && waiting.contains(objective), "{waiting}");
    let origin = task.origin.clone().unwrap();
    assert_eq!(
        (origin.command_id, origin.device_id, origin.graph_session_id.as_str()),
        (run, w.server.device_id, SESSION)
    );
    let Some(chat) = w.chat_answers(objective, "Approved, with two edits", 1).await else { return };
    assert_eq!(chat[0]["task_id"], task.task_id.to_string());
    assert_eq!(chat[0]["origin"]["command_id"], run.to_string(), "the chat sees where the task came from");
    let done = w.ended(run, Duration::from_secs(30)).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let a = answers(&done);
    for refused in &a[..2] {
        assert_eq!(refused["exit"], 2, "{refused}");
        assert_eq!(refused["error"], domain::dispatch::LINK_REFUSES, "the same words for both: {refused}");
    }
    assert_eq!(a[2]["exit"], 0, "{a:?}");
    assert_eq!(
        (a[2]["status"].as_str(), a[2]["result"].as_str()),
        (Some("completed"), Some("Approved, with two edits"))
    );
    for l in [closed.link_id] {
        assert!(
            w.server.store.list_link_tasks(&owner, l, 10, None).await.unwrap().tasks.is_empty(),
            "refused: nothing"
        );
    }
    assert!(w.server.store.list_link_tasks(&stranger, theirs.link_id, 10, None).await.unwrap().tasks.is_empty());
    let shown = owner_api(&w.server, "GET", &format!("/links/{link}/tasks/{}", task.task_id), Value::Null).await;
    assert_eq!(shown["origin"]["command_id"], run.to_string(), "{shown}");
    eprintln!(
        "chat submit → Graph holds the answer: {:.3} s",
        a[2]["received"].as_f64().unwrap() - chat[0]["submitted"].as_f64().unwrap()
    );
}

/// Killing the relay while its Graph waits: the restarted relay reports the run `relay
/// restarted during run` (a run does not outlive its relay), the server cancels the run's task,
/// and there is exactly one task: the ask was neither lost nor made twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_relay_while_its_graph_waits_neither_loses_nor_repeats_the_task() {
    let mut w = world("asks-kill", true, 1).await;
    w.start_relay();
    let objective = "Fetch the signed contract";
    let link = w.server.demo.chat_link_id;
    let (run, pid) = w
        .queue("asks-kill-run-1", json!([{"link": link.to_string(), "key": "ask-contract-1", "objective": objective}]))
        .await;
    let task = w.asked(link, objective).await;
    w.kill_relay();
    w.start_relay();
    let done = w.ended(run, Duration::from_secs(30)).await;
    assert_eq!(done.view(w.clock.now(), &Policy::default()).error.as_deref(), Some(domain::errors::RELAY_RESTARTED));
    let after = wait_until("the run's task to be cancelled", Duration::from_secs(10), || async {
        let t = w.server.store.get_task(&w.server.demo.owner, link, task.task_id).await.unwrap().unwrap();
        (t.status == TaskStatus::Cancelled).then_some(t)
    })
    .await;
    assert_eq!(after.task_id, task.task_id);
    let all = w.server.store.list_link_tasks(&w.server.demo.owner, link, 50, None).await.unwrap().tasks;
    assert_eq!(all.iter().filter(|t| t.objective == objective).count(), 1, "one task, never two");
    let journal = w.server.dir.join("relay-state").join(relay::run::ask::JOURNAL_DIR);
    wait_until("the stale ask journal to be dropped", Duration::from_secs(10), || async {
        std::fs::read_dir(&journal).map_or(Some(()), |d| (d.count() == 0).then_some(()))
    })
    .await;
    kill_graph(&pid);
}

/// The agent cancels the run while its Graph waits: the Graph is stopped, the run ends
/// cancelled, its task is cancelled, and the chat can no longer claim it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_the_run_cancels_its_task() {
    let mut w = world("asks-cancel", true, 1).await;
    w.start_relay();
    let objective = "Answer the customer's question";
    let link = w.server.demo.chat_link_id;
    let (run, pid) = w
        .queue(
            "asks-cancel-run-1",
            json!([{"link": link.to_string(), "key": "ask-customer-1", "objective": objective}]),
        )
        .await;
    let task = w.asked(link, objective).await;
    w.server.store.cancel_run(&w.agent, run).await.unwrap();
    let done = w.ended(run, Duration::from_secs(30)).await;
    assert_eq!(done.status, RunStatus::Cancelled);
    let t = w.server.store.get_task(&w.server.demo.owner, link, task.task_id).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Cancelled, "the run's end cancelled its task");
    use domain::store::ClaimTasks;
    let claim = w.server.store.claim_task(&w.server.demo.owner, link, task.task_id).await.unwrap();
    assert_eq!(
        format!("{claim:?}"),
        format!(
            "{:?}",
            domain::tasks::ClaimOutcome::Rejected(domain::tasks::ClaimRejection::NotClaimable(TaskStatus::Cancelled))
        )
    );
    kill_graph(&pid);
}

/// Nobody answers: at 30 minutes on the server's clock the task expires, and the waiting Graph
/// gets `expired` (exit 3) at the relay's next look, then finishes its run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unanswered_task_expires_at_thirty_minutes_and_the_graph_hears_it() {
    let mut w = world("asks-expire", true, 1).await;
    w.start_relay();
    let objective = "Confirm the budget";
    let link = w.server.demo.chat_link_id;
    let (run, _pid) = w
        .queue("asks-expire-run1", json!([{"link": link.to_string(), "key": "ask-budget-01", "objective": objective}]))
        .await;
    let task = w.asked(link, objective).await;
    assert_eq!(task.expires_at, task.created_at.plus(domain::dispatch::DEFAULT_DISPATCH_TTL), "30 minutes");
    w.clock.advance(domain::dispatch::DEFAULT_DISPATCH_TTL - Duration::from_secs(1));
    assert_eq!(w.run(run).await.status, RunStatus::Running, "still waiting a second before");
    w.clock.advance(Duration::from_secs(1));
    let done = w.ended(run, Duration::from_secs(30)).await;
    let a = answers(&done);
    assert_eq!((a[0]["status"].as_str(), a[0]["exit"].as_i64()), (Some("expired"), Some(3)), "{a:?}");
    let stored = w.task(task.task_id).await;
    assert_eq!(a[0]["printed"].as_str(), Some(printed_task(&stored, w.clock.now()).as_str()), "{a:?}");
    eprintln!("exit 3: {}", a[0]["printed"].as_str().unwrap());
}

/// What `relay task ask` printed for the task `t` as the relay read it at `now`: the exact line.
fn printed_task(t: &domain::tasks::Task, now: domain::clock::Timestamp) -> String {
    let answer = relay::run::ask::AskAnswer { task: Some(domain::dispatch::DispatchedTask::of(t, now)), error: None };
    serde_json::to_string(&answer).unwrap()
}

/// What `relay task ask` printed for a refusal: the exact line.
fn printed_error(error: &str) -> String {
    serde_json::to_string(&relay::run::ask::AskAnswer { task: None, error: Some(error.to_owned()) }).unwrap()
}

impl World {
    /// The chat claims `task` and submits `status` with `result` (the store's calls, as the
    /// claim and submit tools make them).
    async fn chat_submits(&self, task: &domain::tasks::Task, status: domain::tasks::SubmitStatus, result: &str) {
        use domain::store::ClaimTasks;
        let (owner, link) = (&self.server.demo.owner, task.link_id);
        let claim_id = match self.server.store.claim_task(owner, link, task.task_id).await.unwrap() {
            domain::tasks::ClaimOutcome::Claimed { claim_id, .. } => claim_id,
            other => panic!("claim: {other:?}"),
        };
        let submit = domain::tasks::SubmitTask {
            owner: owner.clone(),
            link_id: link,
            task_id: task.task_id,
            claim_id,
            status,
            result: result.to_owned(),
        };
        let outcome = self.server.store.submit_task(&submit).await.unwrap();
        assert_eq!(outcome, domain::tasks::SubmitOutcome::Accepted);
    }

    /// The task `id` as stored now.
    async fn task(&self, id: domain::ids::TaskId) -> domain::tasks::Task {
        self.server.store.get_task(&self.server.demo.owner, self.server.demo.chat_link_id, id).await.unwrap().unwrap()
    }
}

/// Each way a task ends, as the waiting `relay task ask` prints it: the chat completes it
/// (exit 0), the chat fails it (exit 3), the owner cancels it (exit 3) — each the task as one
/// JSON line on stdout, nothing on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_way_a_task_ends_is_printed_with_its_exit_code() {
    let mut w = world("asks-ends", true, 1).await;
    w.start_relay();
    let link = w.server.demo.chat_link_id;
    let objectives = ["Approve the draft", "Open the attached file", "Book the room"];
    let asks: Vec<Value> = objectives
        .iter()
        .enumerate()
        .map(|(i, o)| json!({"link": link.to_string(), "key": format!("ask-ends-{i:02}"), "objective": o}))
        .collect();
    let (run, _pid) = w.queue("asks-ends-run-1", Value::Array(asks)).await;
    let completed = w.asked(link, objectives[0]).await;
    w.chat_submits(&completed, domain::tasks::SubmitStatus::Completed, "Approved, with two edits").await;
    let failed = w.asked(link, objectives[1]).await;
    w.chat_submits(&failed, domain::tasks::SubmitStatus::Failed, "The file is not attached").await;
    let cancelled = w.asked(link, objectives[2]).await;
    let outcome = w.server.store.cancel_task(&w.server.demo.owner, link, cancelled.task_id).await.unwrap();
    assert_eq!(outcome, domain::tasks::CancelTaskOutcome::Cancelled);
    let done = w.ended(run, Duration::from_secs(30)).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let a = answers(&done);
    let now = w.clock.now();
    for (answer, (task, exit)) in a.iter().zip([(&completed, 0), (&failed, 3), (&cancelled, 3)]) {
        let stored = w.task(task.task_id).await;
        assert_eq!(answer["printed"].as_str(), Some(printed_task(&stored, now).as_str()), "{answer}");
        assert_eq!((answer["exit"].as_i64(), answer["stderr"].as_str()), (Some(exit), Some("")), "{answer}");
    }
    let statuses: Vec<&str> = a.iter().map(|x| x["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["completed", "failed", "cancelled"]);
    assert_eq!(a[0]["result"], "Approved, with two edits");
    assert_eq!(a[1]["result"], "The file is not attached", "a failed task carries the chat's reason");
    for x in &a {
        eprintln!("exit {}: {}", x["exit"], x["printed"].as_str().unwrap());
    }
}

/// What `relay task ask` refuses, each printed as `{"error": …}` with exit 2 and the same words
/// on stderr: a key out of its length rule, a malformed `--expires-in`, an expiry the server
/// does not allow, a link that does not accept the Graph, and a key used again with another
/// objective. `--no-wait` prints the task as it is (queued, exit 0), and asking again with its
/// key and objective gets the same task.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusals_print_an_error_and_exit_2() {
    let mut w = world("asks-refused", true, 1).await;
    let closed =
        w.server.store.create_link(&w.server.demo.owner, w.server.demo.project_id, "Not asked").await.unwrap().unwrap();
    w.start_relay();
    let link = w.server.demo.chat_link_id.to_string();
    let ask = |key: &str, objective: &str| json!({"link": link, "key": key, "objective": objective});
    let with = |mut v: Value, k: &str, x: Value| {
        v[k] = x;
        v
    };
    let asks = json!([
        ask("short", "Review the draft"),
        with(ask("ask-refused-01", "Review the draft"), "expires_in", json!("10x")),
        with(ask("ask-refused-02", "Review the draft"), "expires_in", json!("30s")),
        json!({"link": closed.link_id.to_string(), "key": "ask-refused-03", "objective": "Review the draft"}),
        with(ask("ask-refused-04", "Review the draft"), "no_wait", json!(true)),
        with(ask("ask-refused-04", "Review the draft"), "no_wait", json!(true)),
        with(ask("ask-refused-04", "Review the other draft"), "no_wait", json!(true)),
    ]);
    let (run, _pid) = w.queue("asks-refused-run1", asks).await;
    let done = w.ended(run, Duration::from_secs(30)).await;
    let a = answers(&done);
    let refusals = [
        (0, "key: must be 8 to 128 characters (got 5)".to_owned()),
        (1, "--expires-in 10x: a whole number and a unit s, m, h or d (e.g. 10m)".to_owned()),
        (2, "expires_in_s: must be 60 to 1800 seconds (got 30)".to_owned()),
        (3, domain::dispatch::LINK_REFUSES.to_owned()),
        (6, domain::errors::IDEMPOTENCY_MISMATCH.to_owned()),
    ];
    for (i, error) in &refusals {
        let x = &a[*i];
        assert_eq!(x["printed"].as_str(), Some(printed_error(error).as_str()), "ask {i}: {x}");
        assert_eq!(x["exit"], 2, "ask {i}: {x}");
        assert_eq!(x["stderr"].as_str(), Some(format!("relay task ask: {error}").as_str()), "ask {i}: {x}");
    }
    // The task as it was when asked (the run's end has cancelled it since).
    let printed: Value = serde_json::from_str(a[4]["printed"].as_str().unwrap()).unwrap();
    let id = domain::ids::TaskId::parse("task_id", printed["task"]["task_id"].as_str().unwrap()).unwrap();
    let stored = w.task(id).await;
    assert_eq!(stored.objective, "Review the draft");
    let mut then = domain::dispatch::DispatchedTask::of(&stored, stored.created_at);
    (then.status, then.finished_at) = (TaskStatus::Queued, None);
    let open = serde_json::to_string(&relay::run::ask::AskAnswer { task: Some(then), error: None }).unwrap();
    for i in [4, 5] {
        assert_eq!((a[i]["printed"].as_str(), a[i]["exit"].as_i64()), (Some(open.as_str()), Some(0)), "{}", a[i]);
    }
    assert!(
        open.contains(r#""status":"queued""#) && !open.contains("result") && !open.contains("finished_at"),
        "{open}"
    );
    for x in &a {
        eprintln!("exit {}: {}", x["exit"], x["printed"].as_str().unwrap());
    }
}

/// A key is the desktop's for a day and names one request of one run: a second run asking
/// with the key of the first (`review-<draft>`) is refused even for the same objective, while
/// a key made unique per run with `$FOUNDRY_RUN_ID` gets each run its own task.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_made_from_the_run_id_serves_every_run() {
    let mut w = world("asks-keys", true, 1).await;
    w.start_relay();
    let link = w.server.demo.chat_link_id.to_string();
    let objective = "Review draft 42";
    let asks = json!([
        {"link": link, "key": "review-draft-42", "objective": objective, "no_wait": true},
        {"link": link, "key": "review-{run_id}", "objective": objective, "no_wait": true},
    ]);
    let (first, _) = w.queue("asks-keys-run-1", asks.clone()).await;
    let first_done = w.ended(first, Duration::from_secs(30)).await;
    let (second, _) = w.queue("asks-keys-run-2", asks).await;
    let second_done = w.ended(second, Duration::from_secs(30)).await;
    let (a, b) = (answers(&first_done), answers(&second_done));
    assert_eq!((a[0]["status"].as_str(), a[1]["status"].as_str()), (Some("queued"), Some("queued")), "{a:?}");
    assert_eq!(b[0]["printed"].as_str(), Some(printed_error(domain::errors::IDEMPOTENCY_MISMATCH).as_str()), "{b:?}");
    assert_eq!((b[0]["exit"].as_i64(), b[1]["status"].as_str()), (Some(2), Some("queued")), "{b:?}");
    let task_id =
        |x: &Value| serde_json::from_str::<Value>(x["printed"].as_str().unwrap()).unwrap()["task"]["task_id"].clone();
    assert_ne!(task_id(&a[1]), task_id(&b[1]), "each run its own task");
}

/// The run is cancelled while its Graph waits: the Graph is stopped with SIGTERM, and a Graph
/// that ignores it (and so its `relay task ask`) hears, within the grace, that the run ended
/// before the task did (exit 2); asking again then is refused, the run's capability being
/// dead. The run reads cancelled and its task is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_graph_that_outlives_the_cancel_hears_its_ask_end() {
    let mut w = world("asks-outlive", true, 1).await;
    let config =
        std::fs::read_to_string(&w.config).unwrap().replace("cancel_grace_ms = 1000", "cancel_grace_ms = 10000");
    std::fs::write(&w.config, config).unwrap();
    w.start_relay();
    let link = w.server.demo.chat_link_id;
    let objective = "Wait for the signature";
    let heard = w.server.dir.join("answers.jsonl");
    let args = json!({
        "asks": [{"link": link.to_string(), "key": "ask-outlive-1", "objective": objective},
                 {"link": link.to_string(), "key": "ask-outlive-2", "objective": "Too late"}],
        "answers_file": heard, "ignore_term": true,
    });
    let (run, pid) = w.queue_args("asks-outlive-run1", args).await;
    let task = w.asked(link, objective).await;
    w.server.store.cancel_run(&w.agent, run).await.unwrap();
    let lines = wait_until("both answers of the Graph that outlived SIGTERM", Duration::from_secs(9), || async {
        let text = std::fs::read_to_string(&heard).unwrap_or_default();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        (lines.len() == 2).then_some(lines)
    })
    .await;
    for (x, error) in lines.iter().zip([
        "the run ended before the task did".to_owned(),
        format!("{}: not a run of this relay that is still running", relay::run::ask::CAPABILITY_ENV),
    ]) {
        assert_eq!((x["printed"].as_str(), x["exit"].as_i64()), (Some(printed_error(&error).as_str()), Some(2)), "{x}");
    }
    let done = w.ended(run, Duration::from_secs(30)).await;
    assert_eq!(done.status, RunStatus::Cancelled);
    let t = wait_until("the run's task to be cancelled", Duration::from_secs(10), || async {
        let t = w.task(task.task_id).await;
        (t.status == TaskStatus::Cancelled).then_some(t)
    })
    .await;
    assert_eq!(t.task_id, task.task_id);
    kill_graph(&pid);
}

/// `relay task ask` outside a Graph the relay runs: without the run's capability, or without
/// the relay's socket, it is refused at once (exit 2, the reason as JSON on stdout and on
/// stderr); a usage error is clap's (exit 2, nothing on stdout).
#[test]
fn outside_a_graph_relay_task_ask_is_refused() {
    use relay::run::ask::{CAPABILITY_ENV, SOCKET_ENV};
    let ask = |env: &[(&str, &str)], args: &[&str]| {
        let mut c = std::process::Command::new(built_binary("relay", &["relay/src", "shared/domain/src"]));
        c.args(["task", "ask"]).args(args).env_remove(CAPABILITY_ENV).env_remove(SOCKET_ENV);
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let args = ["--link", "0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b", "--key", "review-0001", "Review the draft"];
    let no_capability = format!("{CAPABILITY_ENV} is not set: `relay task ask` works inside a Graph the relay runs");
    let no_socket = format!("{SOCKET_ENV} is not set");
    for (env, error) in [(&[][..], no_capability), (&[(CAPABILITY_ENV, "0123")][..], no_socket)] {
        let (code, stdout, stderr) = ask(env, &args);
        assert_eq!(code, Some(2), "{stdout}{stderr}");
        assert_eq!(stdout, format!("{}\n", printed_error(&error)));
        assert_eq!(stderr, format!("relay task ask: {error}\n"));
        eprint!("exit 2: {stdout}");
    }
    let (code, stdout, stderr) = ask(&[], &["--link", "x", "Review the draft"]);
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    assert!(stderr.contains("--key"), "{stderr}");
}

/// The benchmark behind docs/results.md's "A Graph asks a chat", writing docs/asks-figures.json.
const ASKS_COMMAND: &str = "cargo nextest run --profile benchmark -p foundry-tests --test suite --run-ignored only -E 'test(desktop_asks::latency)' --no-capture";

fn asks_figures_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/asks-figures.json")
}

/// docs/results.md's table rows for the figures in `f` (docs/asks-figures.json's shape).
fn asks_rows(f: &Value) -> Vec<String> {
    let ms = |row: &Value, k: &str| foundry_tests::grouped(row[k].as_f64().unwrap().round() as u64);
    let (d, p) = (&f["doorbell"], &f["poll"]);
    vec![
        format!(
            "| doorbell (task end rings the desktop) | {} | **{} ms** | **{} ms** | {} ms |",
            d["n"],
            ms(d, "p50"),
            ms(d, "p95"),
            ms(d, "max")
        ),
        format!(
            "| safety poll only ({} s interval) | {} | {} ms | {} ms | {} ms |",
            p["poll_interval_s"],
            p["n"],
            ms(p, "p50"),
            ms(p, "p95"),
            ms(p, "max")
        ),
    ]
}

/// docs/results.md's "A Graph asks a chat" table is docs/asks-figures.json's, which the
/// benchmark writes ([`ASKS_COMMAND`]); a figure changed in the page is caught.
#[test]
fn the_asks_figures_in_the_docs_are_the_benchmarks() {
    let figures: Value = serde_json::from_str(&std::fs::read_to_string(asks_figures_path()).unwrap()).unwrap();
    let results =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/results.md")).unwrap();
    for row in asks_rows(&figures) {
        assert!(
            results.contains(&row),
            "docs/results.md has no row {row:?}: the figures are docs/asks-figures.json's ({ASKS_COMMAND})"
        );
    }
    let mut moved = figures.clone();
    moved["doorbell"]["p95"] = json!(figures["doorbell"]["p95"].as_f64().unwrap() + 1.0);
    assert!(!results.contains(&asks_rows(&moved)[0]), "a changed figure would pass");
}

/// The latency from a chat's submit to the waiting Graph holding the result, in runs of 20
/// asks (a run's bound): with the doorbell (`ASKS`, default 50 asks), and with the safety poll
/// only (the relay's default 20 s poll; `ASKS_POLL`, default 5: one interval per ask, 50 would
/// take 18 minutes). Asserts the goals (p95 < 1 s with the doorbell; never more than one
/// interval and a second without it) and writes docs/asks-figures.json. Ignored: [`ASKS_COMMAND`].
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: docs/results.md"]
async fn latency_of_a_chat_answer_to_the_waiting_graph() {
    let count = |var: &str, default: usize| std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let per_run = domain::dispatch::MAX_TASKS_PER_RUN as usize;
    let poll = 20u64;
    let mut figures = json!({"measured": SystemClock.now().rfc3339(), "command": ASKS_COMMAND});
    for (key, doorbell, n) in [("doorbell", true, count("ASKS", 50)), ("poll", false, count("ASKS_POLL", 5))] {
        let mut w = world("asks-latency", doorbell, poll).await;
        w.start_relay();
        let objective = "Say ok";
        let link = w.server.demo.chat_link_id.to_string();
        let mut ms: Vec<f64> = Vec::new();
        // A run may hand out at most MAX_TASKS_PER_RUN tasks: n asks go in runs of that many.
        for (r, first) in (0..n).step_by(per_run).enumerate() {
            let count = per_run.min(n - first);
            let asks: Vec<Value> = (first..first + count)
                .map(|i| json!({"link": link, "key": format!("latency-{i:04}"), "objective": objective}))
                .collect();
            let (run, _pid) = w.queue(&format!("asks-latency-run-{r}"), Value::Array(asks)).await;
            let Some(chat) = w.chat_answers(objective, "ok", count).await else { return };
            let done = w.ended(run, Duration::from_secs(60 * count as u64)).await;
            let a = answers(&done);
            assert_eq!(a.len(), count, "{a:?}");
            ms.extend(
                a.iter()
                    .zip(&chat)
                    .map(|(g, c)| (g["received"].as_f64().unwrap() - c["submitted"].as_f64().unwrap()) * 1000.0),
            );
        }
        ms.sort_by(f64::total_cmp);
        let pct = |p: f64| ms[((ms.len() as f64 * p).ceil() as usize).saturating_sub(1)];
        let (p50, p95, max) = (pct(0.50), pct(0.95), ms[ms.len() - 1]);
        eprintln!("{key}: n={} p50={p50:.0} ms p95={p95:.0} ms max={max:.0} ms", ms.len());
        if doorbell {
            assert!(p95 < 1000.0, "goal: p95 < 1 s with the doorbell (issue 57)");
        } else {
            assert!(
                max <= (poll * 1000 + 1000) as f64,
                "without the doorbell an answer waits at most one poll interval"
            );
        }
        figures[key] = json!({"n": ms.len(), "p50": p50, "p95": p95, "max": max, "poll_interval_s": poll});
    }
    std::fs::write(asks_figures_path(), serde_json::to_string_pretty(&figures).unwrap() + "\n").unwrap();
    eprintln!("wrote docs/asks-figures.json; its rows:\n{}", asks_rows(&figures).join("\n"));
}
