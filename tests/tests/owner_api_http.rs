//! The owner API over HTTP against the local server: chat links, subscriptions, tasks (assign,
//! pages, detail with a working download link, cancel), runs; every refusal names the field
//! and the rule, writes nothing, and another owner's ids answer exactly like unknown ids.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use base64::Engine;

use local::Running;
use serde_json::{Value, json};

struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    async fn call(&self, method: &str, path: &str, body: Value) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(method, format!("{}/owner{path}", self.base)).bearer_auth(&self.token);
        if !body.is_null() {
            req = req.json(&body);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }
}

async fn start() -> (foundry_tests::LocalServer, Api) {
    let running = foundry_tests::LocalServer::default("foundry-owner").await;
    let api = Api { http: foundry_tests::http(), base: running.base_url.clone(), token: running.owner_token.clone() };
    (running, api)
}

/// A token for another owner of the same local deployment.
fn other_owner(running: &Running) -> String {
    foundry_tests::other_owner_token(running, "mallory")
}

#[tokio::test]
async fn links_tasks_and_downloads_work_end_to_end() {
    let (running, api) = start().await;
    let project = running.demo.project_id.to_string();
    let (s, link) = api.call("POST", "/links", json!({"project_id": project, "name": "Pricing chat"})).await;
    assert_eq!(s, 201, "{link}");
    let l = link["chat_link_id"].as_str().unwrap().to_owned();
    assert_eq!(link["subscription"], Value::Null);

    // Assign: 201, the same key and objective again 200 with the same task, another objective 409.
    let body = json!({"objective": "Compare the three offers", "idempotency_key": "panel-key-0001"});
    let (s1, first) = api.call("POST", &format!("/links/{l}/tasks"), body.clone()).await;
    let (s2, again) = api.call("POST", &format!("/links/{l}/tasks"), body).await;
    assert_eq!((s1, s2), (201, 200));
    assert_eq!(first["task_id"], again["task_id"]);
    assert_eq!(first["label"], "Waiting for host chat");
    let (s3, clash) = api
        .call(
            "POST",
            &format!("/links/{l}/tasks"),
            json!({"objective": "Something else", "idempotency_key": "panel-key-0001"}),
        )
        .await;
    assert_eq!(s3, 409);
    assert!(clash["error"].as_str().unwrap().starts_with("idempotency_key was already used with different arguments"));

    // A chat claims it and uploads an artifact (through the store, as the MCP tools do).
    let t: domain::ids::TaskId = serde_json::from_value(first["task_id"].clone()).unwrap();
    let link_id: domain::ids::ChatLinkId = serde_json::from_str(&format!("\"{l}\"")).unwrap();
    let owner = running.demo.owner.clone();
    use domain::store::ClaimTasks;
    let domain::tasks::ClaimOutcome::Claimed { claim_id, .. } =
        running.store.claim_task(&owner, link_id, t).await.unwrap()
    else {
        panic!()
    };
    let deps = tools::ToolDeps {
        store: running.store.clone(),
        clock: std::sync::Arc::new(domain::clock::SystemClock),
        policy: Default::default(),
        blobs: Some(std::sync::Arc::new(tools::blobs::DirBlobStore::new(
            running.data_dir.join("blobs"),
            &running.base_url,
            &std::fs::read(running.data_dir.join("local-token-secret")).unwrap(),
            std::sync::Arc::new(domain::clock::SystemClock),
        ))),
        panel_url: None,
    };
    let call = tools::ToolCall {
        tool: tools::ToolName::UploadLinkedChatArtifact,
        owner: owner.clone(),
        agent: domain::ids::AgentId::new("c", owner.as_str()).unwrap(),
        arguments: json!({"chat_link_id": l, "task_id": t.to_string(), "claim_id": claim_id.to_string(),
            "artifact_id": "offers", "name": "offers é.csv", "content_type": "text/csv",
            "content_base64": base64::engine::general_purpose::STANDARD.encode(b"a,b\n1,2\n")}),
        request_id: None,
    };
    let reply = tools::handle(&deps, &call).await.unwrap();
    assert!(matches!(reply, tools::ToolReply::Ok { .. }), "{reply:?}");

    let (s, detail) = api.call("GET", &format!("/links/{l}/tasks/{t}"), Value::Null).await;
    assert_eq!(s, 200);
    assert_eq!(detail["label"], "Claimed by host chat");
    assert_eq!(detail["claim"]["live"], true);
    let url = detail["artifacts"][0]["download_url"].as_str().unwrap();
    let got = reqwest::get(url).await.unwrap();
    assert_eq!(got.status(), 200);
    assert!(got.headers()["content-disposition"].to_str().unwrap().contains("offers"));
    assert_eq!(got.bytes().await.unwrap().as_ref(), b"a,b\n1,2\n");
    let tampered = url.replace("offers", "other");
    assert_eq!(reqwest::get(&tampered).await.unwrap().status(), 403);

    // Pages: newest first, with a cursor.
    for i in 0..3 {
        let b = json!({"objective": format!("task {i}"), "idempotency_key": format!("panel-key-10{i}")});
        assert_eq!(api.call("POST", &format!("/links/{l}/tasks"), b).await.0, 201);
    }
    let (_, p1) = api.call("GET", &format!("/links/{l}/tasks?limit=2"), Value::Null).await;
    assert_eq!(p1["tasks"].as_array().unwrap().len(), 2);
    assert_eq!(p1["tasks"][0]["objective"], "task 2");
    let cursor = p1["next_cursor"].as_str().unwrap();
    let (_, p2) = api.call("GET", &format!("/links/{l}/tasks?limit=2&cursor={cursor}"), Value::Null).await;
    assert_eq!(p2["tasks"][0]["objective"], "task 0");
    assert_eq!(p2["tasks"][1]["task_id"], first["task_id"]);
    assert_eq!(p2["next_cursor"], Value::Null);

    // Subscriptions: the secret is shown once.
    let (s, sub) =
        api.call("PUT", &format!("/links/{l}/subscription"), json!({"url": "http://127.0.0.1:9/hook"})).await;
    assert_eq!(s, 200, "{sub}");
    assert!(sub["subscription"]["secret"].as_str().unwrap().starts_with("whsec_"));
    let (_, shown) = api.call("GET", &format!("/links/{l}"), Value::Null).await;
    assert_eq!(shown["subscription"]["url"], "http://127.0.0.1:9/hook");
    assert_eq!(shown["subscription"].get("secret"), None, "the secret is shown again");

    // Cancel, then delete the link: its open tasks are cancelled and it is gone.
    let (s, cancelled) = api.call("POST", &format!("/links/{l}/tasks/{t}/cancel"), Value::Null).await;
    assert_eq!((s, cancelled["label"].as_str()), (200, Some("Cancelled")));
    let (s, deleted) = api.call("DELETE", &format!("/links/{l}"), Value::Null).await;
    assert_eq!((s, deleted["cancelled_tasks"].as_u64()), (200, Some(3)));
    assert_eq!(api.call("GET", &format!("/links/{l}"), Value::Null).await.0, 404);
    use domain::store::ReadTasks;
    assert_eq!(running.store.get_task(&owner, link_id, t).await.unwrap(), None, "MCP still sees the task");

    let (s, overview) = api.call("GET", "/overview", Value::Null).await;
    assert_eq!(s, 200);
    assert!(overview["projects"].as_array().unwrap().iter().any(|p| p["project_id"] == project.as_str()));
    running.stop().await;
}

#[tokio::test]
async fn refusals_name_the_field_and_the_rule_and_write_nothing() {
    let (running, api) = start().await;
    let project = running.demo.project_id.to_string();
    let l = running.demo.chat_link_id.to_string();
    let t = running.demo.task_id.unwrap().to_string();
    let unknown = uuid::Uuid::new_v4().to_string();
    let writes = running.store.write_transactions();
    let cases: Vec<(&str, String, Value, u16, &str)> = vec![
        ("POST", "/projects".into(), json!({"name": "  "}), 400, "name: must be 1 to 200 characters and not blank"),
        ("POST", "/projects".into(), json!({"name": "x".repeat(201)}), 400, "name: must be 1 to 200 characters"),
        ("POST", "/projects".into(), json!({"name": "p", "extra": 1}), 400, "extra: unknown field"),
        ("PUT", "/projects/nope".into(), json!({"enabled": true}), 400, "project_id: must be a UUID"),
        ("PUT", format!("/projects/{unknown}"), json!({"enabled": true}), 404, "project_id: no such project"),
        ("POST", "/links".into(), json!({"project_id": "p", "name": "n"}), 400, "project_id: must be a UUID"),
        ("POST", "/links".into(), json!({"project_id": unknown, "name": "n"}), 404, "project_id: no such project"),
        ("POST", "/links".into(), json!({"project_id": project, "name": ""}), 400, "name: must be 1 to 200"),
        ("GET", "/links/nope".into(), Value::Null, 400, "chat_link_id: must be a UUID"),
        ("GET", format!("/links/{unknown}"), Value::Null, 404, "chat_link_id: no such chat link"),
        ("DELETE", format!("/links/{unknown}"), Value::Null, 404, "chat_link_id: no such chat link"),
        (
            "POST",
            format!("/links/{l}/tasks"),
            json!({"objective": "", "idempotency_key": "12345678"}),
            400,
            "objective: must be 1 to 10000 characters and not blank",
        ),
        (
            "POST",
            format!("/links/{l}/tasks"),
            json!({"objective": "x".repeat(10_001), "idempotency_key": "12345678"}),
            400,
            "objective: must be 1 to 10000 characters",
        ),
        (
            "POST",
            format!("/links/{l}/tasks"),
            json!({"objective": "ok", "idempotency_key": "short"}),
            400,
            "idempotency_key: must be 8 to 128 characters (got 5)",
        ),
        ("POST", format!("/links/{l}/tasks"), json!({"objective": "ok"}), 400, "body: missing field `idempotency_key`"),
        (
            "POST",
            format!("/links/{unknown}/tasks"),
            json!({"objective": "ok", "idempotency_key": "12345678"}),
            404,
            "chat_link_id: no such chat link",
        ),
        ("GET", format!("/links/{l}/tasks?limit=0"), Value::Null, 400, "limit: must be 1 to 100"),
        ("GET", format!("/links/{l}/tasks?cursor=x"), Value::Null, 400, "cursor: must be a next_cursor"),
        ("GET", format!("/links/{l}/tasks?page=2"), Value::Null, 400, "page: unknown query parameter"),
        ("GET", format!("/links/{l}/tasks/{unknown}"), Value::Null, 404, "task_id: no such task"),
        ("POST", format!("/links/{l}/tasks/{unknown}/cancel"), Value::Null, 404, "task_id: no such task"),
        (
            "PUT",
            format!("/links/{l}/subscription"),
            json!({"url": "http://hooks.example.com/x"}),
            400,
            "url: must use https (http only to a loopback receiver)",
        ),
        (
            "PUT",
            format!("/links/{l}/subscription"),
            json!({"url": "https://10.0.0.8/x"}),
            400,
            "url: must not point at a private address",
        ),
        (
            "PUT",
            format!("/links/{l}/subscription"),
            json!({"url": "https://169.254.169.254/"}),
            400,
            "url: must not point at the instance metadata service",
        ),
        ("DELETE", "/devices/nope".into(), Value::Null, 400, "device_id: must be a UUID"),
        ("DELETE", format!("/devices/{unknown}"), Value::Null, 404, "device_id: no such device"),
        ("GET", "/nothing".into(), Value::Null, 404, "no route /owner/nothing"),
        ("PATCH", "/links".into(), Value::Null, 405, "method not allowed"),
    ];
    for (method, path, body, status, message) in cases {
        let (s, v) = api.call(method, &path, body).await;
        let error = v["error"].as_str().unwrap_or_default();
        assert_eq!(s, status, "{method} {path}: {v}");
        assert!(error.starts_with(message), "{method} {path}: {error:?} should start with {message:?}");
    }
    assert_eq!(running.store.write_transactions(), writes, "a refusal wrote");

    // Another owner: the first owner's ids answer exactly like ids that never existed.
    let mallory = Api { token: other_owner(&running), ..api };
    for (method, path, body) in [
        ("GET", format!("/links/{l}"), Value::Null),
        ("GET", format!("/links/{l}/tasks"), Value::Null),
        ("GET", format!("/links/{l}/tasks/{t}"), Value::Null),
        ("POST", format!("/links/{l}/tasks/{t}/cancel"), Value::Null),
        ("POST", format!("/links/{l}/tasks"), json!({"objective": "x", "idempotency_key": "mallory-key-1"})),
        ("DELETE", format!("/links/{l}"), Value::Null),
        ("PUT", format!("/links/{l}/subscription"), json!({"url": "https://hooks.example.com/x"})),
    ] {
        let (s, v) = mallory.call(method, &path, body.clone()).await;
        let unknown_path = path.replace(&l, &unknown);
        let (s2, v2) = mallory.call(method, &unknown_path, body).await;
        assert_eq!((s, &v), (s2, &v2), "{method} {path}: another owner's link differs from an unknown one");
        assert_eq!(s, 404);
    }
    let (s, v) = mallory.call("POST", "/links", json!({"project_id": project, "name": "steal"})).await;
    assert_eq!((s, v["error"].as_str()), (404, Some("project_id: no such project")));
    assert_eq!(running.store.write_transactions(), writes, "another owner's request wrote");
    let no_scope = Api { token: running.token.clone(), ..mallory };
    assert_eq!(no_scope.call("GET", "/links", Value::Null).await.0, 403, "an MCP token opened the owner API");
    running.stop().await;
}

/// A tool call through MCP, as a chat makes it: the structured answer.
async fn chat_tool(running: &Running, tool: &str, arguments: Value) -> Value {
    let args = json!({"name": tool, "arguments": arguments});
    let http = foundry_tests::http();
    let v = foundry_tests::mcp::rpc_2026(
        &http,
        &running.mcp_url,
        &running.token,
        "tools/call",
        Some(tool),
        args,
        json!({}),
    )
    .await;
    v["result"]["structuredContent"].clone()
}

/// The owner cancels a run from the owner API, whichever agent queued it, by the chat's own
/// `cancel_graph_run` rule: a queued run reads `cancelled` at once (the chat's `get_graph_run`
/// agrees), a running one `cancel_requested` (the relay's next control poll is told to stop).
/// A second owner's cancel of either answers the same 404 as an unknown run and changes
/// nothing; a malformed id is a 400 naming the field.
#[tokio::test]
async fn the_owner_cancels_a_run_as_the_chats_cancel_would() {
    let (running, api) = start().await;
    let project = running.demo.project_id.to_string();
    let http = foundry_tests::http();
    let relay = format!("{}{}", running.base_url, domain::relay::PREFIX);
    let gs = format!("gs_{}", "7".repeat(32));
    let sync =
        json!({"project_id": project, "sessions": [{"graph_session_id": gs, "name": "Weekly", "slug": "weekly"}]});
    let res = http.post(format!("{relay}/sync")).bearer_auth(&running.device_token).json(&sync).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let mut ids = Vec::new();
    for key in ["owner-cancel-queued", "owner-cancel-running"] {
        let queued = chat_tool(
            &running,
            "run_graph_session",
            json!({"graph_session_id": gs, "idempotency_key": key, "project_id": project}),
        )
        .await;
        ids.push(queued["command_id"].as_str().unwrap_or_else(|| panic!("{queued}")).to_owned());
    }
    let (queued, started) = (ids[0].clone(), ids[1].clone());
    let res = http
        .post(format!("{relay}/commands/{started}/start"))
        .bearer_auth(&running.device_token)
        .json(&json!({"execution_id": "owner-cancel-exec"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    // A second owner: the same 404 as a run that never existed, and nothing changes.
    let writes = running.store.write_transactions();
    let mallory = Api { token: other_owner(&running), http: foundry_tests::http(), base: api.base.clone() };
    let unknown = uuid::Uuid::now_v7().to_string();
    let (s_unknown, v_unknown) = mallory.call("POST", &format!("/runs/{unknown}/cancel"), Value::Null).await;
    assert_eq!((s_unknown, v_unknown["error"].as_str()), (404, Some("command_id: no such run")));
    for id in [&queued, &started] {
        let (s, v) = mallory.call("POST", &format!("/runs/{id}/cancel"), Value::Null).await;
        assert_eq!((s, &v), (s_unknown, &v_unknown), "another owner's run differs from an unknown one");
    }
    let (s, v) = api.call("POST", "/runs/not-a-run/cancel", Value::Null).await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().starts_with("command_id: must be a UUID"), "{v}");
    assert_eq!(running.store.write_transactions(), writes, "a refused cancel wrote");
    let (_, page) = api.call("GET", "/runs", Value::Null).await;
    let listed =
        |page: &Value, id: &str| page["runs"].as_array().unwrap().iter().find(|r| r["command_id"] == id).cloned();
    assert_eq!(listed(&page, &queued).unwrap()["status"], "queued");
    assert_eq!(listed(&page, &started).unwrap()["cancel_requested"], false);

    // The owner cancels the queued run: cancelled at once, and the chat reads the same.
    let (s, v) = api.call("POST", &format!("/runs/{queued}/cancel"), Value::Null).await;
    assert_eq!(
        (s, v["status"].as_str(), v["cancel_requested"].as_bool()),
        (200, Some("cancelled"), Some(false)),
        "{v}"
    );
    let (_, page) = api.call("GET", "/runs", Value::Null).await;
    assert_eq!(listed(&page, &queued).unwrap(), v, "the answer is the run as GET /runs shows it");
    let read = chat_tool(&running, "get_graph_run", json!({"command_id": queued})).await;
    assert_eq!(read["status"], "cancelled", "{read}");

    // The running one: cancel requested, and the relay's control poll is told to stop it.
    let (s, v) = api.call("POST", &format!("/runs/{started}/cancel"), Value::Null).await;
    assert_eq!((s, v["status"].as_str(), v["cancel_requested"].as_bool()), (200, Some("running"), Some(true)), "{v}");
    let control: Value = http
        .get(format!("{relay}/commands/{started}/control"))
        .bearer_auth(&running.device_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(control["cancel_requested"], true, "{control}");
    // Again: the same answer (nothing more to do), as the chat's cancel would say.
    let (s, again) = api.call("POST", &format!("/runs/{started}/cancel"), Value::Null).await;
    assert_eq!((s, again["cancel_requested"].as_bool()), (200, Some(true)));
    let chat = chat_tool(&running, "cancel_graph_run", json!({"command_id": started})).await;
    assert_eq!((chat["status"].as_str(), chat["cancel_requested"].as_bool()), (Some("running"), Some(true)), "{chat}");
    running.stop().await;
}
