//! The deployed shape's fixture, shared by the tests that run it (`cloud_shape`,
//! `cloud_slots`): every function binary of the template under the Lambda emulator
//! (`foundry_tests::cloud`), behind the API Gateway shim, on moto; an owner and an agent with
//! Cognito-shaped access tokens; and the real relay binary configured for it.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use foundry_tests::built_binary;
use foundry_tests::cloud::{Emulator, Template, access_token};
use serde_json::{Value, json};

/// One deployed shape: the emulator, clients for its HTTP APIs and the AWS resources behind it.
pub(crate) struct World {
    pub(crate) emu: std::sync::Arc<Emulator>,
    pub(crate) http: reqwest::Client,
    pub(crate) owner: String,
    pub(crate) agent: String,
    pub(crate) sqs: aws_sdk_sqs::Client,
    pub(crate) queue: String,
    pub(crate) table: String,
    pub(crate) dir: std::path::PathBuf,
    /// The emulated doorbell API (routed to the function only by tests that attach it).
    pub(crate) doorbell: std::sync::Arc<foundry_tests::doorbell_shim::DoorbellShim>,
    /// Where the emulated doorbell API listens (`host:port`).
    pub(crate) doorbell_addr: String,
    pub(crate) aws: aws_config::SdkConfig,
    pub(crate) bucket: String,
}

/// Everything every function logged in this test process.
pub(crate) fn all_logs() -> String {
    let dir = foundry_tests::cloud::log_path("x").parent().unwrap().to_path_buf();
    std::fs::read_dir(&dir).unwrap().flatten().map(|f| std::fs::read_to_string(f.path()).unwrap_or_default()).collect()
}

impl World {
    /// A new project of the owner, switched on for connected agents: its id.
    pub(crate) async fn enabled_project(&self, name: &str) -> String {
        let project =
            self.owner("POST", "/projects", json!({"name": name})).await["project_id"].as_str().unwrap().to_owned();
        self.owner("PUT", &format!("/projects/{project}"), json!({"enabled": true})).await;
        project
    }

    /// A new chat link to `project`: its id.
    pub(crate) async fn link(&self, project: &str, name: &str) -> String {
        let link = self.owner("POST", "/links", json!({"project_id": project, "name": name})).await;
        link["chat_link_id"].as_str().unwrap().to_owned()
    }

    /// A task assigned to `link` through the owner API: its id.
    pub(crate) async fn assign(&self, link: &str, objective: &str, key: &str) -> String {
        let body = json!({"objective": objective, "idempotency_key": key});
        let task = self.owner("POST", &format!("/links/{link}/tasks"), body).await;
        task["task_id"].as_str().unwrap().to_owned()
    }

    /// The JSON lines the function `logical` (its template name) logged in this process.
    pub(crate) fn log_lines(&self, logical: &str) -> Vec<Value> {
        let name = self.emu.name_of(logical).unwrap();
        std::fs::read_to_string(foundry_tests::cloud::log_path(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Runs the relay on `config` until its first sync has shared its session (the owner's
    /// first project shows it), then stops it: what the server knows of a desktop that was
    /// paired and ran once, before the runs a test queues for it.
    pub(crate) async fn share_once(&self, config: &std::path::Path) {
        let mut relay = start_relay(config);
        foundry_tests::wait_until("the relay's first sync", std::time::Duration::from_secs(30), || async {
            let v = self.owner("GET", "/projects", Value::Null).await;
            (v["projects"][0]["shared_sessions"] == 1).then_some(())
        })
        .await;
        relay.kill().unwrap();
        relay.wait().unwrap();
    }

    pub(crate) async fn owner(&self, method: &str, path: &str, body: Value) -> Value {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(m, format!("{}/owner{path}", self.emu.gateway)).bearer_auth(&self.owner);
        if !body.is_null() {
            req = req.json(&body);
        }
        let res = req.send().await.unwrap();
        let status = res.status();
        let v: Value = res.json().await.unwrap_or_default();
        assert!(status.is_success(), "{method} /owner{path}: {status} {v}");
        v
    }

    /// One `tools/call` through the gateway and the `mcp` function (2025-11-25).
    pub(crate) async fn tool(&self, name: &str, args: Value) -> Value {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}});
        let res = self
            .http
            .post(format!("{}/mcp", self.emu.gateway))
            .bearer_auth(&self.agent)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body)
            .send()
            .await
            .unwrap();
        let v: Value = res.json().await.unwrap();
        v["result"].clone()
    }
}

pub(crate) async fn world() -> Option<World> {
    world_of(&Template::load()).await
}

/// The deployed shape of `template` (a broken copy, to see what a broken stack answers).
pub(crate) async fn world_of(template: &Template) -> Option<World> {
    let account = foundry_tests::cloud::account().await?;
    let emu = Emulator::start(template, &account.resources, &account.base_env).await;
    emu.wait_ready().await;
    let dir = std::env::temp_dir().join(format!("fc-cloud-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    Some(World {
        emu,
        http: foundry_tests::http(),
        owner: access_token("owner-client-id", "openid osfoundry/owner"),
        agent: access_token("claude-client-id", "osfoundry/read osfoundry/run"),
        sqs: aws_sdk_sqs::Client::new(&account.aws),
        queue: account.resources.events_queue.clone(),
        table: account.resources.table.clone(),
        dir,
        doorbell: account.doorbell.clone(),
        doorbell_addr: account.resources.doorbell.clone(),
        aws: account.aws.clone(),
        bucket: account.resources.bucket.clone(),
    })
}

/// A relay config for `project` with one session, `gs` ("Echo": `cat`), a 300 ms control
/// poll and a 1 s poll.
pub(crate) fn relay_config(w: &World, project: &str, device_token: &str, gs: &str) -> std::path::PathBuf {
    relay_config_with(w, device_token, "", &session_toml(gs, "Echo", project, &["cat"]))
}

/// A relay config with `settings` (top-level TOML lines, e.g. `max_parallel = 3`) and
/// `sessions` (`[[sessions]]` tables, see [`session_toml`]).
pub(crate) fn relay_config_with(w: &World, device_token: &str, settings: &str, sessions: &str) -> std::path::PathBuf {
    let path = w.dir.join("relay.toml");
    let text = format!(
        "server_url = \"{}\"\ndevice_token = \"{device_token}\"\nstate_dir = \"{}\"\ncontrol_poll_ms = 300\npoll_s = 1\n{settings}{sessions}",
        w.emu.gateway,
        w.dir.join("relay-state").display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// One `[[sessions]]` table: `gs` shared in `project`, running `command`.
pub(crate) fn session_toml(gs: &str, name: &str, project: &str, command: &[&str]) -> String {
    let slug = name.to_lowercase();
    let command = serde_json::to_string(command).unwrap();
    format!(
        "[[sessions]]\ngraph_session_id = \"{gs}\"\nname = \"{name}\"\nslug = \"{slug}\"\nversion = \"1\"\nprojects = [\"{project}\"]\ncommand = {command}\n"
    )
}

/// The real relay binary running `config`, its log appended to `relay.log` beside it (kept
/// when a test fails: the test's folder is removed only at its end).
pub(crate) fn start_relay(config: &std::path::Path) -> std::process::Child {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(config.with_file_name("relay.log")).unwrap();
    std::process::Command::new(built_binary("relay", &["relay/src", "shared/domain/src"]))
        .args(["--config", config.to_str().unwrap(), "run"])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}
