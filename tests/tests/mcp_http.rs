//! The MCP endpoint over real HTTP: the local server on a free 127.0.0.1 port, an HTTP
//! client, and the store underneath to prove that bad requests write nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use auth::{Grant, Hs256Signer};
use base64::Engine;
use domain::clock::{Clock, SystemClock};
use domain::store::{AuthenticateDevices, ManageDevices, ReadTasks};
use local::LocalConfig;
use serde_json::{Value, json};
use store_sqlite::SqliteStore;

const ACCEPT: &str = "application/json, text/event-stream";

struct Server {
    running: foundry_tests::LocalServer,
    http: reqwest::Client,
}

async fn server() -> Server {
    Server { running: foundry_tests::LocalServer::default("foundry-local").await, http: foundry_tests::http() }
}

impl Server {
    async fn finish(self) {
        self.running.stop().await;
    }

    fn url(&self) -> String {
        self.running.mcp_url.clone()
    }

    /// `body` posted with the printed token and the headers its protocol `version` wants (the
    /// 2026-07-28 era's `Mcp-Method` and `Mcp-Name`); it must be answered 200.
    async fn post_ok(&self, version: &str, body: Value) {
        let mut req = self
            .http
            .post(self.url())
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .header("mcp-protocol-version", version)
            .header("mcp-method", body["method"].as_str().unwrap())
            .header("authorization", format!("Bearer {}", self.running.token));
        if let Some(name) = body["params"]["name"].as_str() {
            req = req.header("mcp-name", name);
        }
        let res = req.body(body.to_string()).send().await.unwrap();
        let status = res.status();
        assert_eq!(status, 200, "{body}: {}", res.text().await.unwrap());
    }

    fn token_with(&self, scopes: &[&str]) -> String {
        let secret = std::fs::read(self.running.data_dir.join("local-token-secret")).unwrap();
        let issuer = format!("http://{}", self.running.addr);
        Hs256Signer::new(&secret, &issuer, local::LOCAL_AUDIENCE)
            .mint(
                Grant { subject: local::DEMO_OWNER, client: "test-client", scopes },
                SystemClock.now(),
                Duration::from_secs(600),
            )
            .unwrap()
    }

    async fn post_raw(&self, token: Option<&str>, body: impl Into<reqwest::Body>) -> reqwest::Response {
        let mut r = self
            .http
            .post(self.url())
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .header("mcp-protocol-version", "2025-11-25")
            .body(body);
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        r.send().await.unwrap()
    }

    async fn rpc(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let res = self.post_raw(Some(&self.running.token), body.to_string()).await;
        assert_eq!(res.status(), 200, "{method}");
        res.json().await.unwrap()
    }

    async fn call(&self, tool: &str, args: Value) -> Value {
        self.rpc("tools/call", json!({"name": tool, "arguments": args})).await
    }

    /// A `tools/call` of the 2026-07-28 revision (no handshake; metadata and headers per request).
    async fn call_2026(&self, tool: &str, args: Value) -> Value {
        self.rpc_2026("tools/call", Some(tool), json!({"name": tool, "arguments": args}), json!({}), None).await
    }

    /// A 2026-07-28 request declaring `capabilities`, with the run-and-read token or `token`.
    async fn rpc_2026(
        &self,
        method: &str,
        name: Option<&str>,
        params: Value,
        capabilities: Value,
        token: Option<&str>,
    ) -> Value {
        let token = token.unwrap_or(&self.running.token);
        foundry_tests::mcp::rpc_2026(&self.http, &self.url(), token, method, name, params, capabilities).await
    }

    /// Shares a session `gs_<32 × letter>` in the demo project, as a desktop's sync would; its id.
    async fn share_session(&self, letter: &str) -> String {
        foundry_tests::mcp::share_demo_session(&self.running, letter).await
    }

    fn store(&self) -> &SqliteStore {
        &self.running.store
    }
}

fn structured(v: &Value) -> &Value {
    assert_eq!(v["result"]["isError"], false, "{v}");
    &v["result"]["structuredContent"]
}

fn tool_error(v: &Value) -> String {
    assert_eq!(v["result"]["isError"], true, "{v}");
    v["result"]["content"][0]["text"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn tools_list_matches_the_golden_file() {
    let s = server().await;
    let listed = s.rpc("tools/list", json!({})).await["result"]["tools"].clone();
    let pretty = serde_json::to_string_pretty(&listed).unwrap() + "\n";
    foundry_tests::pinned("tests/golden/tools_list.json", &pretty);
    let compact = serde_json::to_string(&listed).unwrap();
    eprintln!(
        "tools/list: {} tools, {} bytes (compact JSON of the tools array)",
        listed.as_array().unwrap().len(),
        compact.len()
    );
    for t in listed.as_array().unwrap() {
        assert_eq!(t["inputSchema"]["additionalProperties"], false, "{}", t["name"]);
        assert!(t["outputSchema"].is_object());
        assert_eq!(t["securitySchemes"], t["_meta"]["securitySchemes"]);
        for hint in ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"] {
            assert!(t["annotations"][hint].is_boolean(), "{} {hint}", t["name"]);
        }
    }
    let run = listed.as_array().unwrap().iter().find(|t| t["name"] == "run_graph_session").unwrap();
    assert_eq!(run["annotations"]["destructiveHint"], true);
    assert_eq!(run["inputSchema"]["properties"]["idempotency_key"]["minLength"], 8);
    assert_eq!(run["inputSchema"]["properties"]["idempotency_key"]["maxLength"], 128);
    let list = listed.as_array().unwrap().iter().find(|t| t["name"] == "list_graph_sessions").unwrap();
    assert_eq!(list["inputSchema"]["properties"]["limit"]["minimum"], 1);
    assert_eq!(list["inputSchema"]["properties"]["limit"]["maximum"], 50);
    s.finish().await;
}

#[tokio::test]
async fn auth_errors_carry_the_right_headers() {
    let s = server().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    for token in [None, Some("garbage"), Some("eyJhbGciOiJIUzI1NiJ9.e30.x")] {
        let res = s.post_raw(token, body.clone()).await;
        assert_eq!(res.status(), 401);
        let challenge = res.headers()["www-authenticate"].to_str().unwrap().to_owned();
        let metadata = format!("resource_metadata=\"http://{}/.well-known/oauth-protected-resource\"", s.running.addr);
        // RFC 6750 §3.1: no token, no error code; a presented token that fails is invalid_token
        // (so the client refreshes instead of starting over).
        let want = match token {
            None => format!("Bearer {metadata}"),
            Some(_) => format!(
                "Bearer error=\"invalid_token\", error_description=\"the access token is invalid or expired\", {metadata}"
            ),
        };
        assert_eq!(challenge, want);
    }
    // The metadata document, plain and path-suffixed.
    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
        let doc: Value =
            s.http.get(format!("http://{}{path}", s.running.addr)).send().await.unwrap().json().await.unwrap();
        assert_eq!(doc["resource"], s.url());
        assert_eq!(doc["scopes_supported"], json!(["osfoundry:read", "osfoundry:run"]));
    }
    // A read-only token may read but not claim.
    let read_only = s.token_with(&["osfoundry:read"]);
    let link = s.running.demo.chat_link_id.to_string();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_linked_chat_tasks", "arguments": {"chat_link_id": link}}});
    assert_eq!(s.post_raw(Some(&read_only), list.to_string()).await.status(), 200);
    let task = s.running.demo.task_id.unwrap().to_string();
    let claim = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "claim_linked_chat_task", "arguments": {"chat_link_id": link, "task_id": task}}});
    let res = s.post_raw(Some(&read_only), claim.to_string()).await;
    assert_eq!(res.status(), 403);
    let challenge = res.headers()["www-authenticate"].to_str().unwrap();
    // Every connector scope: a client that asks for exactly the challenge's keeps what it had.
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"osfoundry:read osfoundry:run\""),
        "{challenge}"
    );
    let open = s.store().list_open_tasks(&s.running.demo.owner, s.running.demo.chat_link_id, 50).await.unwrap();
    assert_eq!(open[0].status, domain::tasks::TaskStatus::Queued, "a refused call wrote");
    s.finish().await;
}

#[tokio::test]
async fn get_and_delete_answer_405_at_once() {
    let s = server().await;
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let res = s.http.request(method, s.url()).header("accept", ACCEPT).send().await.unwrap();
        assert_eq!(res.status(), 405);
        assert_eq!(res.headers()["allow"], "POST");
    }
    s.finish().await;
}

#[tokio::test]
async fn bad_requests_get_clear_errors_and_write_nothing() {
    let s = server().await;
    let token = s.running.token.clone();
    let writes = s.store().write_transactions();
    // Malformed JSON → -32700.
    let v: Value = s.post_raw(Some(&token), "{not json").await.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    // Unknown method → -32601.
    let v = s.rpc("no/such/method", json!({})).await;
    assert_eq!(v["error"]["code"], -32601, "{v}");
    // Unknown tool → -32602.
    let v = s.call("no_such_tool", json!({})).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("no_such_tool"));
    let link = s.running.demo.chat_link_id.to_string();
    let task = s.running.demo.task_id.unwrap().to_string();
    let cases = [
        ("claim_linked_chat_task", json!({"chat_link_id": link, "task_id": 42}), "task_id"),
        ("claim_linked_chat_task", json!({"chat_link_id": link, "task_id": "nope"}), "task_id: must be a UUID"),
        ("claim_linked_chat_task", json!({"chat_link_id": link, "task_id": task, "extra": 1}), "unknown field `extra`"),
        ("claim_linked_chat_task", json!({"chat_link_id": link}), "missing field `task_id`"),
        (
            "run_graph_session",
            json!({"graph_session_id": "gs_x", "idempotency_key": "12345678"}),
            "graph_session_id: must be gs_",
        ),
        (
            "run_graph_session",
            json!({"graph_session_id": format!("gs_{}", "a".repeat(32)), "idempotency_key": "short"}),
            "idempotency_key: must be 8 to 128 characters",
        ),
        (
            "list_graph_sessions",
            json!({"project_id": s.running.demo.project_id.to_string(), "limit": 51}),
            "limit: must be 1 to 50",
        ),
        ("get_graph_run", json!({"command_id": "1234"}), "command_id: must be a UUID"),
    ];
    // Invalid arguments are a tool result the model reads (SEP-1303), in both eras: 2025-11-25
    // on the direct path, 2026-07-28 through rmcp.
    for (tool, args, needle) in cases {
        for v in [s.call(tool, args.clone()).await, s.call_2026(tool, args.clone()).await] {
            assert!(v.get("error").is_none(), "{tool} {args}: a protocol error: {v}");
            assert_eq!(v["result"]["isError"], true, "{tool} {args}: {v}");
            let msg = v["result"]["content"][0]["text"].as_str().unwrap();
            assert!(msg.contains(needle), "{tool} {args}: {msg:?} should mention {needle:?}");
        }
    }
    // Oversized body → 413 before anything is parsed.
    let big = vec![b' '; mcp_endpoint::DEFAULT_MAX_BODY_BYTES + 10];
    let res = s.post_raw(Some(&token), big).await;
    assert_eq!(res.status(), 413);
    let v: Value = res.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().starts_with("request body: at most"));
    // Nothing was written by any of it.
    assert_eq!(s.store().write_transactions(), writes, "a rejected request wrote");
    s.finish().await;
}

#[tokio::test]
async fn the_chat_task_round_trip_with_exact_strings() {
    let s = server().await;
    let link = s.running.demo.chat_link_id.to_string();
    let task = s.running.demo.task_id.unwrap().to_string();
    let inbox = s.call("list_linked_chat_tasks", json!({"chat_link_id": link})).await;
    assert_eq!(structured(&inbox)["tasks"][0]["task_id"], task);
    let c1 = s.call("claim_linked_chat_task", json!({"chat_link_id": link, "task_id": task})).await;
    let c2 = s.call("claim_linked_chat_task", json!({"chat_link_id": link, "task_id": task})).await;
    assert_eq!(structured(&c1)["claim_id"], structured(&c2)["claim_id"]);
    let claim = structured(&c1)["claim_id"].as_str().unwrap().to_owned();
    let other_link = uuid::Uuid::new_v4().to_string();
    let v = s.call("claim_linked_chat_task", json!({"chat_link_id": other_link, "task_id": task})).await;
    assert_eq!(tool_error(&v), "not claimable: missing");
    let upload = json!({"chat_link_id": link, "task_id": task, "claim_id": claim, "artifact_id": "notes-1",
        "name": "notes.md", "content_type": "text/markdown",
        "content_base64": base64::engine::general_purpose::STANDARD.encode(b"# hello")});
    assert_eq!(structured(&s.call("upload_linked_chat_artifact", upload.clone()).await)["ok"], true);
    assert_eq!(structured(&s.call("upload_linked_chat_artifact", upload).await)["replayed"], true);
    let submit =
        json!({"chat_link_id": link, "task_id": task, "claim_id": claim, "status": "completed", "result": "hello"});
    assert_eq!(structured(&s.call("submit_linked_chat_result", submit.clone()).await), &json!({"ok": true}));
    assert_eq!(structured(&s.call("submit_linked_chat_result", submit).await), &json!({"ok": true, "replayed": true}));
    let different =
        json!({"chat_link_id": link, "task_id": task, "claim_id": claim, "status": "completed", "result": "bye"});
    assert_eq!(
        tool_error(&s.call("submit_linked_chat_result", different).await),
        "rejected: task is already finished with a different result"
    );
    let empty = s.call("list_linked_chat_tasks", json!({"chat_link_id": link})).await;
    let text = empty["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(text).unwrap(), *structured(&empty), "text block carries the same JSON");
    eprintln!("empty list_linked_chat_tasks result: {} bytes of structured JSON", text.len());
    assert!(text.len() <= 87, "empty inbox is {} bytes", text.len());
    // Graph runs: nothing is shared yet, and an unknown run reads like another agent's.
    let unknown = s.call("get_graph_run", json!({"command_id": uuid::Uuid::new_v4().to_string()})).await;
    assert_eq!(tool_error(&unknown), "Graph run not found or access removed");
    let run = s
        .call(
            "run_graph_session",
            json!({"graph_session_id": format!("gs_{}", "a".repeat(32)), "idempotency_key": "first-run-key"}),
        )
        .await;
    assert!(tool_error(&run).contains("is not shared in any connected project"));
    s.finish().await;
}

#[tokio::test]
async fn the_2026_07_28_revision_discovers_without_a_handshake() {
    let s = server().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let res = s
        .http
        .post(s.url())
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "server/discover")
        .header("authorization", format!("Bearer {}", s.running.token))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    let text = v.to_string();
    assert!(text.contains("2026-07-28") && text.contains("2025-11-25"), "{v}");
    s.finish().await;
}

#[tokio::test]
async fn a_restart_keeps_data_and_tokens() {
    let s = server().await;
    let token = s.running.token.clone();
    let (device_token, device_id) = (s.running.device_token.clone(), s.running.device_id);
    let demo = s.running.demo.clone();
    let dir = s.running.data_dir.clone();
    let port = s.running.addr.port();
    let secret = std::fs::read(dir.join("local-token-secret")).unwrap();
    // The same folder and port (a token's issuer is the server's URL, port included).
    let Server { running: mut again, .. } = s;
    again.restart(|c| LocalConfig { port, ..c }).await;
    assert_eq!((again.demo.project_id, again.demo.chat_link_id), (demo.project_id, demo.chat_link_id));
    assert_eq!(again.demo.task_id, None, "the demo task is created once");
    let open = again.store.list_open_tasks(&demo.owner, demo.chat_link_id, 50).await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(std::fs::read(dir.join("local-token-secret")).unwrap(), secret, "the signing secret is kept");
    // The relay's device token the banner printed lasts too: the same device, still accepted.
    assert_eq!((again.device_token.as_str(), again.device_id), (device_token.as_str(), device_id));
    let hash = domain::devices::token_hash(&device_token);
    assert!(again.store.device_by_token_hash(&hash).await.unwrap().is_some(), "the kept device token is accepted");
    // A device the owner revoked is not brought back: the next start makes a new one.
    again.store.revoke_device(&demo.owner, device_id).await.unwrap();
    again.restart(|c| LocalConfig { port, ..c }).await;
    assert_ne!(again.device_id, device_id, "a revoked device stays revoked");
    assert!(again.store.device_by_token_hash(&hash).await.unwrap().is_none());
    // A token the first run printed still works after the restart.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "list_linked_chat_tasks", "arguments": {"chat_link_id": demo.chat_link_id.to_string()}}});
    let res = foundry_tests::http()
        .post(&again.mcp_url)
        .bearer_auth(&token)
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "the old token after a restart");
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["result"]["isError"], false, "{v}");
    again.stop().await;
}

/// The data folder holds the database and its WAL (webhook secrets, results in plain text) and
/// the token secret: the folder is 0700 and every file in it 0600.
#[tokio::test]
async fn the_data_folder_is_the_owners_only() {
    use std::os::unix::fs::PermissionsExt;
    let s = server().await;
    let v = s.rpc("tools/call", json!({"name": "list_linked_chat_tasks", "arguments": {"chat_link_id": s.running.demo.chat_link_id.to_string()}})).await;
    assert_eq!(v["result"]["isError"], false, "{v}");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let data = s.running.data_dir.clone();
    assert_eq!(mode(&data), 0o700, "the data folder");
    let mut files = 0;
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
            files += 1;
        }
    }
    assert!(data.join("foundry.sqlite3-wal").exists() && files >= 3, "the database, its WAL and the secret");
    s.running.stop().await;
}

#[tokio::test]
async fn ping_answers_and_a_foreign_host_is_refused() {
    let s = server().await;
    let v = s.rpc("ping", json!({})).await;
    assert_eq!(v["result"], json!({}), "{v}");
    // DNS-rebinding protection: a page on another origin resolving to 127.0.0.1 sends its own
    // Host header; rmcp refuses anything but the configured (here: loopback) hosts.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let res = s
        .http
        .post(s.url())
        .header("host", "evil.example")
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .header("authorization", format!("Bearer {}", s.running.token))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    s.finish().await;
}

/// A client that declares the Tasks extension (SEP-2663) gets `run_graph_session` as a task whose
/// id is the command id, reads it with `tasks/get` until it carries the run's result — without
/// calling `get_graph_run` — and cancels another with `tasks/cancel`. A client that does not
/// declare it gets the ticket as before; another agent cannot see the task.
#[tokio::test]
async fn a_task_aware_client_runs_a_graph_run_as_a_task() {
    use domain::runs::{Completion, FinalStatus, StartOutcome};
    use domain::store::RelayRuns;
    let s = server().await;
    let owner = s.running.demo.owner.clone();
    let gs = s.share_session("b").await;
    let tasks = foundry_tests::mcp::tasks_capability();
    let run =
        |key: &str| json!({"name": "run_graph_session", "arguments": {"graph_session_id": gs, "idempotency_key": key}});
    // Without the extension: today's ticket, unchanged.
    let plain = s.rpc_2026("tools/call", Some("run_graph_session"), run("plain-run-key"), json!({}), None).await;
    assert_eq!(plain["result"]["structuredContent"]["status"], "queued", "{plain}");
    assert!(plain["result"].get("taskId").is_none(), "{plain}");
    // With it: a task, its id the command id, polled at the run's own hint, kept the run's 24 h.
    let created = s.rpc_2026("tools/call", Some("run_graph_session"), run("task-run-key"), tasks.clone(), None).await;
    let task = &created["result"];
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    assert_eq!(task["status"], "working", "{created}");
    assert!(task["pollIntervalMs"].as_u64().unwrap() >= 1000, "{created}");
    assert_eq!(task["ttlMs"], 24 * 3600 * 1000);
    let id = task["taskId"].as_str().unwrap().to_owned();
    let command = domain::ids::CommandId::parse("taskId", &id).unwrap();
    let get = |token: Option<&'static str>| {
        let id = id.clone();
        let tasks = tasks.clone();
        let s = &s;
        async move { s.rpc_2026("tasks/get", Some(&id), json!({"taskId": id}), tasks, token).await }
    };
    let first = get(None).await;
    assert_eq!(first["result"]["status"], "working", "{first}");
    // The desktop runs it and reports a result.
    assert!(matches!(
        s.store().start_run(&owner, command, "exec-1", uuid::Uuid::nil()).await.unwrap(),
        StartOutcome::Started
    ));
    assert_eq!(get(None).await["result"]["statusMessage"], "running");
    // The Graph's progress, as its relay forwards it: in the task's status message, and in
    // get_graph_run with its log tail.
    let report = domain::relay::ControlRequest {
        execution_id: "exec-1".into(),
        progress: domain::progress::Progress {
            message: "step 2 of 4".into(),
            fraction: Some(0.5),
            tail: vec!["fetched 200 rows".into()],
        },
    };
    s.store().control_run(&owner, command, Some(&report)).await.unwrap();
    assert_eq!(get(None).await["result"]["statusMessage"], "running: step 2 of 4 (50%)");
    let read = json!({"name": "get_graph_run", "arguments": {"command_id": id}});
    let seen = s.rpc_2026("tools/call", Some("get_graph_run"), read, json!({}), None).await;
    let progress = &seen["result"]["structuredContent"]["progress"];
    assert_eq!((&progress["message"], &progress["fraction"]), (&json!("step 2 of 4"), &json!(0.5)), "{seen}");
    assert_eq!(progress["tail"], json!(["fetched 200 rows"]), "{seen}");
    assert!(progress["updated_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{seen}");
    let done = Completion {
        execution_id: "exec-1".into(),
        status: FinalStatus::Completed,
        result: Some("the weekly report".into()),
        result_truncated: false,
        error: None,
        total_tokens: Some(42),
        reported_cost: None,
    };
    s.store().complete_run(&owner, command, &done).await.unwrap();
    let finished = get(None).await;
    assert_eq!(finished["result"]["status"], "completed", "{finished}");
    assert_eq!(finished["result"]["result"]["structuredContent"]["result"], "the weekly report", "{finished}");
    assert!(finished["result"]["result"].get("isError").is_none_or(|e| e == false), "{finished}");
    // Another agent of the same owner does not see it.
    let other = s.token_with(&[tools::SCOPE_READ, tools::SCOPE_RUN]);
    let other: &'static str = Box::leak(other.into_boxed_str());
    let hidden = get(Some(other)).await;
    assert_eq!(hidden["error"]["message"], "Graph run not found or access removed", "{hidden}");
    // tasks/cancel is cancel_graph_run.
    let second = s.rpc_2026("tools/call", Some("run_graph_session"), run("task-run-key-2"), tasks.clone(), None).await;
    let second_id = second["result"]["taskId"].as_str().unwrap().to_owned();
    let ack = s.rpc_2026("tasks/cancel", Some(&second_id), json!({"taskId": second_id}), tasks.clone(), None).await;
    assert!(ack.get("error").is_none(), "{ack}");
    let cancelled = s.rpc_2026("tasks/get", Some(&second_id), json!({"taskId": second_id}), tasks.clone(), None).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    // tasks/* without declaring the extension is refused as the extension says.
    let undeclared = s.rpc_2026("tasks/get", Some(&id), json!({"taskId": id}), json!({}), None).await;
    assert!(undeclared.get("error").is_some(), "{undeclared}");
    s.finish().await;
}

/// The MCP Inspector's CLI, a task-aware client (it declares the Tasks extension and follows a
/// task to its end), gets a Graph run's *result* from one `tools/call run_graph_session`: it
/// waits through `tasks/get` while the desktop runs the Graph — it never calls get_graph_run.
#[tokio::test]
async fn the_inspector_cli_gets_a_graph_runs_result_as_a_task() {
    use domain::runs::{Completion, FinalStatus, QueueFilter};
    use domain::store::RelayRuns;
    let (Some(node), Some(cli)) =
        (std::env::var_os("FOUNDRY_CONFORMANCE_NODE"), std::env::var_os("FOUNDRY_INSPECTOR_CLI"))
    else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "FOUNDRY_INSPECTOR_CLI not set under CI=true");
        eprintln!(
            "\n*** SKIPPING: FOUNDRY_INSPECTOR_CLI not set; ./infra/test.sh installs the pinned Inspector. ***\n"
        );
        return;
    };
    let s = server().await;
    let (owner, project) = (s.running.demo.owner.clone(), s.running.demo.project_id);
    let gs = s.share_session("e").await;
    let args = json!({"graph_session_id": gs, "idempotency_key": "inspector-run-1"}).to_string();
    let home = s.running.dir.join("inspector-home");
    std::fs::create_dir_all(&home).unwrap();
    let inspector = tokio::process::Command::new(&node)
        .arg(&cli)
        .args(["--cli", "--server-url", &s.url(), "--transport", "http", "--protocol-era", "modern"])
        .args(["--header", &format!("Authorization: Bearer {}", s.running.token)])
        .args(["--method", "tools/call", "--tool-name", "run_graph_session", "--tool-args-json", &args])
        .args(["--format", "json", "-q"])
        .env("HOME", &home)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The desktop's part: the run appears in the queue, starts, completes.
    let run = foundry_tests::wait_until("the Inspector to queue the run", Duration::from_secs(30), || async {
        s.store().list_queued(&owner, project, 10, &QueueFilter::all()).await.unwrap().into_iter().next()
    })
    .await;
    s.store().start_run(&owner, run.command_id, "exec-inspector", uuid::Uuid::nil()).await.unwrap();
    let done = Completion {
        execution_id: "exec-inspector".into(),
        status: FinalStatus::Completed,
        result: Some("the weekly report, by task".into()),
        result_truncated: false,
        error: None,
        total_tokens: None,
        reported_cost: None,
    };
    s.store().complete_run(&owner, run.command_id, &done).await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), inspector.wait_with_output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "inspector: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["result"]["structuredContent"]["result"], "the weekly report, by task", "{v}");
    assert_eq!(v["result"]["structuredContent"]["command_id"], run.command_id.to_string());
    s.finish().await;
}

/// A chat that knows only the URL finds every id through `list_graph_sessions` without
/// arguments: the owner's enabled projects with their sessions, and the owner's chat links —
/// never a disabled project's sessions, never another owner's project or link. With a
/// `project_id` the answer is the frozen releases' shape, unchanged.
#[tokio::test]
async fn a_chat_with_no_id_finds_the_projects_sessions_and_links() {
    use domain::store::{ManageLinks, ManageProjects};
    let s = server().await;
    let demo = s.running.demo.clone();
    let gs = s.share_session("c").await;
    // The owner's second project, not enabled: listed nowhere, though it has a link.
    let off = s.store().create_project(&demo.owner, "Not for chats").await.unwrap();
    let off_link = s.store().create_link(&demo.owner, off.project_id, "Off chat").await.unwrap().unwrap();
    // Another owner's enabled project and link: never listed.
    let other = domain::ids::OwnerId::new("someone-else").unwrap();
    let theirs = s.store().create_project(&other, "Theirs").await.unwrap();
    s.store().set_project_enabled(&other, theirs.project_id, true).await.unwrap();
    let their_link = s.store().create_link(&other, theirs.project_id, "Their chat").await.unwrap().unwrap();

    for v in [s.call("list_graph_sessions", json!({})).await, s.call_2026("list_graph_sessions", json!({})).await] {
        let out = structured(&v);
        let projects = out["projects"].as_array().unwrap();
        assert_eq!(projects.len(), 1, "{out}");
        assert_eq!(projects[0]["project_id"], demo.project_id.to_string());
        assert_eq!(projects[0]["name"], "Demo project");
        assert_eq!(projects[0]["sessions"][0]["graph_session_id"], gs, "{out}");
        let links: Vec<&str> =
            out["chat_links"].as_array().unwrap().iter().map(|l| l["chat_link_id"].as_str().unwrap()).collect();
        // The owner's links, the disabled project's too (tasks assigned to it are the owner's
        // consent); never another owner's.
        assert_eq!(links, [demo.chat_link_id.to_string(), off_link.link_id.to_string()], "{out}");
        let text = out.to_string();
        for hidden in
            [theirs.project_id.to_string(), their_link.link_id.to_string(), "Theirs".into(), "Not for chats".into()]
        {
            assert!(!text.contains(&hidden), "{hidden} leaked: {out}");
        }
        assert!(out.get("project_id").is_none() && out.get("sessions").is_none(), "{out}");
    }
    // With a project: the shape every supported release knows, and nothing more.
    let one = s.call("list_graph_sessions", json!({"project_id": demo.project_id.to_string()})).await;
    let out = structured(&one);
    let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["project_id", "sessions"], "{out}");
    // Another owner's project by id: nothing, as an unknown one.
    let foreign = s.call("list_graph_sessions", json!({"project_id": theirs.project_id.to_string()})).await;
    assert_eq!(structured(&foreign)["sessions"], json!([]));
    s.finish().await;
}

/// Log lines as the JSON layer writes them (what CloudWatch gets), kept for a test to read.
#[derive(Clone, Default)]
struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn parsed(&self) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

#[tokio::test]
async fn each_client_is_logged_by_its_client_info_in_both_eras() {
    // The server runs on this test's thread (a current-thread runtime): its lines come here.
    let lines = Lines::default();
    let writer = lines.clone();
    let _log = tracing::dispatcher::set_default(&logging::json_lines(move || writer.clone()));
    let s = server().await;
    let post = |version: &'static str, body: Value| s.post_ok(version, body);
    let meta = |info: Value| {
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/ui": {}}},
               "io.modelcontextprotocol/clientInfo": info})
    };
    // Claude Code 2.1.328 as it speaks 2026-07-28: no handshake, its clientInfo in each `_meta`.
    let claude = meta(json!({"name": "claude-code", "version": "2.1.328", "title": "Claude Code", "extra": [1]}));
    post("2026-07-28", json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": claude}}))
        .await;
    // A client that forges a log line and floods the name.
    let hostile = format!("evil\nINFO initialize client=claude-code\u{202E}{}", "x".repeat(5_000));
    post(
        "2026-07-28",
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list",
               "params": {"_meta": meta(json!({"name": hostile, "version": "1\r\n\u{1b}[31m"}))}}),
    )
    .await;
    // A 2025-11-25 host says who it is once, in `initialize`.
    post(
        "2025-11-25",
        json!({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
               "capabilities": {}, "clientInfo": {"name": "mcp-remote", "version": "0.15.1"}}}),
    )
    .await;
    s.finish().await;
    let logged = lines.parsed();
    let by = |client: &str| {
        logged
            .iter()
            .find(|l| l["fields"]["client"].as_str().is_some_and(|c| c.starts_with(client)))
            .unwrap_or_else(|| panic!("no line names {client}: {logged:#?}"))
            .clone()
    };
    let claude = &by("claude-code")["fields"];
    assert_eq!(claude["message"], "client request");
    assert_eq!(claude["client_version"], "2.1.328");
    assert_eq!(claude["protocol"], "2026-07-28");
    assert_eq!(claude["method"], "server/discover");
    assert!(claude["extensions"].as_str().unwrap().contains("io.modelcontextprotocol/ui"), "{claude}");
    let evil = &by("evil")["fields"];
    let name = evil["client"].as_str().unwrap();
    assert_eq!(name.chars().count(), domain::clients::MAX_CLIENT_INFO_CHARS, "{name}");
    assert!(name.starts_with("evilINFO initialize client=claude-codexxx") && name.ends_with('…'), "{name}");
    assert_eq!(evil["client_version"], "1[31m");
    let remote = &by("mcp-remote")["fields"];
    assert_eq!((&remote["message"], &remote["client_version"]), (&json!("initialize"), &json!("0.15.1")));
    // Never rmcp's placeholder client for a stateless request.
    let text = logged.iter().map(Value::to_string).collect::<Vec<_>>().join("\n");
    assert!(!text.contains("rmcp") || !text.contains("3.11.0"), "the placeholder is logged:\n{text}");
}

/// The owner's panel lists each host from its handshake — `initialize`, or `server/discover` in
/// the 2026-07-28 era — with the name and version it gave, the protocol, and how it got its token
/// (here the server's printed token); any other request, a tool's read among them, writes nothing.
#[tokio::test]
async fn each_host_is_listed_to_its_owner_from_its_handshake_only() {
    let s = server().await;
    let post = |version: &'static str, body: Value| s.post_ok(version, body);
    let meta = |name: &str| {
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": name, "version": "2.1.328"}})
    };
    post(
        "2026-07-28",
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta("claude-code")}}),
    )
    .await;
    // Requests that are no handshake: a listing and a tool's read, each naming another host.
    post(
        "2026-07-28",
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta("not-a-handshake")}}),
    )
    .await;
    post(
        "2026-07-28",
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "list_graph_sessions", "arguments": {}, "_meta": meta("a-read")}}),
    )
    .await;
    post(
        "2025-11-25",
        json!({"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
               "capabilities": {}, "clientInfo": {"name": "mcp-remote", "version": "0.15.1"}}}),
    )
    .await;
    let overview: Value = s
        .http
        .get(format!("http://{}/owner/overview", s.running.addr))
        .bearer_auth(&s.running.owner_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let hosts = overview["hosts"].as_array().unwrap();
    let by = |name: &str| hosts.iter().find(|h| h["name"] == name).unwrap_or_else(|| panic!("no {name}: {overview}"));
    assert_eq!(hosts.len(), 2, "the handshakes only: {overview}");
    let claude = by("claude-code");
    assert_eq!((&claude["version"], &claude["protocol"]), (&json!("2.1.328"), &json!("2026-07-28")), "{claude}");
    let remote = by("mcp-remote");
    assert_eq!((&remote["protocol"], &remote["version"]), (&json!("2025-11-25"), &json!("0.15.1")), "{remote}");
    for h in hosts {
        assert_eq!((&h["sign_in"], &h["client_id"]), (&json!("token"), &json!(local::LOCAL_CLIENT)), "{h}");
    }
    s.finish().await;
}
