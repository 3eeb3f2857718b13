//! The MCP endpoint's direct `tools/call` path against rmcp's own: the same requests sent to an
//! endpoint with the direct path and to one without it, over one store and one stopped clock.
//! Every answer must be the same (status, content type, JSON body), and the direct path must be
//! the one taken exactly where the endpoint says it is (`answers_directly`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use auth::{Audience, Authenticator, Grant, Hs256Signer, Keys, ScopeSpelling};
use bytes::Bytes;
use domain::clock::{ManualClock, SharedClock};
use domain::ids::{IdempotencyKey, OwnerId};
use domain::limits::Policy;
use domain::store::{AssignTasks, ClaimTasks, ManageLinks, ManageProjects};
use domain::tasks::{AssignOutcome, AssignTask};
use mcp_endpoint::{EndpointConfig, InProcess, McpEndpoint};
use serde_json::{Value, json};
use store_sqlite::SqliteStore;
use tools::{SCOPE_READ, SCOPE_RUN, ToolDeps};

const ISSUER: &str = "http://127.0.0.1:7777";
const AUDIENCE: &str = "direct-test";
const SECRET: &[u8] = b"direct-path-test-secret-32-bytes!";

type Endpoint = McpEndpoint<InProcess<SqliteStore>>;

struct Fixture {
    direct: Endpoint,
    rmcp: Endpoint,
    token: String,
    read_only: String,
    link: String,
    open_task: String,
    claimed_task: String,
    claim_id: String,
    project: String,
    clock: Arc<ManualClock>,
    _dir: tempdir::Dir,
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

async fn fixture() -> Fixture {
    let dir = std::env::temp_dir().join(format!("foundry-direct-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let manual = Arc::new(ManualClock::starting_now());
    let clock: SharedClock = manual.clone();
    let store = Arc::new(SqliteStore::open(dir.join("store.sqlite"), clock.clone(), Policy::default()).unwrap());
    let owner = OwnerId::new("owner-direct").unwrap();
    let project = store.create_project(&owner, "direct").await.unwrap();
    store.set_project_enabled(&owner, project.project_id, true).await.unwrap();
    let link = store.create_link(&owner, project.project_id, "direct link").await.unwrap().unwrap();
    let mut tasks = Vec::new();
    for i in 0..2 {
        let req = AssignTask {
            owner: owner.clone(),
            link_id: link.link_id,
            objective: format!("objective {i}"),
            idempotency_key: IdempotencyKey::parse(&format!("direct-{i}")).unwrap(),
        };
        let AssignOutcome::Assigned(t) = store.assign_task(&req).await.unwrap() else { panic!("assign") };
        tasks.push(t.task_id);
    }
    let domain::tasks::ClaimOutcome::Claimed { claim_id, .. } =
        store.claim_task(&owner, link.link_id, tasks[1]).await.unwrap()
    else {
        panic!("claim")
    };
    let endpoint = || {
        let auth = Arc::new(Authenticator {
            issuer: ISSUER.into(),
            audience: Audience::Only(vec![AUDIENCE.into()]),
            keys: Keys::Hs256(SECRET.to_vec()),
            clock: clock.clone(),
        });
        let deps = ToolDeps {
            store: Arc::clone(&store),
            clock: clock.clone(),
            policy: Policy::default(),
            blobs: None,
            panel_url: None,
        };
        let config = EndpointConfig {
            public_url: Some(ISSUER.into()),
            mcp_path: "/mcp".into(),
            allowed_hosts: Some(Vec::new()),
            max_body_bytes: mcp_endpoint::DEFAULT_MAX_BODY_BYTES,
            scopes: ScopeSpelling::local(),
        };
        McpEndpoint::new(Arc::new(InProcess(deps)), auth, config)
    };
    let mint = |scopes: &[&str]| {
        Hs256Signer::new(SECRET, ISSUER, AUDIENCE)
            .mint(Grant { subject: "owner-direct", client: "client-a", scopes }, clock.now(), Duration::from_secs(600))
            .unwrap()
    };
    Fixture {
        direct: endpoint(),
        rmcp: endpoint().without_direct_calls(),
        token: mint(&[SCOPE_READ, SCOPE_RUN]),
        read_only: mint(&[SCOPE_READ]),
        link: link.link_id.to_string(),
        open_task: tasks[0].to_string(),
        claimed_task: tasks[1].to_string(),
        claim_id: claim_id.to_string(),
        project: project.project_id.to_string(),
        clock: manual,
        _dir: tempdir::Dir(dir),
    }
}

fn request(headers: &[(&str, &str)], body: &str) -> http::Request<Bytes> {
    let mut r = http::Request::builder().method("POST").uri("/mcp");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(Bytes::from(body.to_owned())).unwrap()
}

fn standard<'a>(token: &'a str, bearer: &'a mut String) -> Vec<(&'static str, &'a str)> {
    *bearer = format!("Bearer {token}");
    vec![
        ("host", "127.0.0.1:7777"),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-11-25"),
        ("authorization", bearer.as_str()),
    ]
}

fn call(id: Value, tool: &str, args: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}}).to_string()
}

/// Sends `req` to both endpoints; asserts the same answer and returns it with whether the
/// direct path took it.
async fn both(f: &Fixture, headers: &[(&str, &str)], body: &str) -> (http::StatusCode, Value, bool) {
    let direct = f.direct.answers_directly(&request(headers, body));
    let a = f.direct.handle(request(headers, body)).await;
    let b = f.rmcp.handle(request(headers, body)).await;
    assert_eq!(a.status(), b.status(), "status for {body}");
    assert_eq!(a.headers().get("content-type"), b.headers().get("content-type"), "content type for {body}");
    for r in [&a, &b] {
        if let Some(v) = r.headers().get("content-length") {
            assert_eq!(v.to_str().unwrap().parse::<usize>().unwrap(), r.body().len(), "content length for {body}");
        }
    }
    let parse = |b: &Bytes| {
        serde_json::from_slice::<Value>(b).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(b).into()))
    };
    let (va, vb) = (parse(a.body()), parse(b.body()));
    assert_eq!(va, vb, "body for {body}");
    (a.status(), va, direct)
}

#[tokio::test]
async fn plain_tool_calls_are_answered_directly_and_exactly_as_rmcp_answers_them() {
    let f = fixture().await;
    let mut bearer = String::new();
    let h = standard(&f.token, &mut bearer);
    let cases = [
        // successes: lists, reads, a claim replay, a queued run replay
        call(json!(1), "list_linked_chat_tasks", json!({"chat_link_id": f.link})),
        call(json!("str-id"), "get_linked_chat_task", json!({"chat_link_id": f.link, "task_id": f.open_task})),
        call(json!(7), "claim_linked_chat_task", json!({"chat_link_id": f.link, "task_id": f.claimed_task})),
        call(json!(8), "list_graph_sessions", json!({"project_id": f.project})),
        // a tool's refusal (isError result), an unknown id, a stale claim
        call(
            json!(9),
            "get_linked_chat_task",
            json!({"chat_link_id": f.link, "task_id": uuid::Uuid::new_v4().to_string()}),
        ),
        call(
            json!(10),
            "submit_linked_chat_result",
            json!({"chat_link_id": f.link, "task_id": f.claimed_task, "claim_id": uuid::Uuid::new_v4().to_string(),
                   "status": "completed", "result": "x"}),
        ),
        // invalid arguments (isError results, SEP-1303), an unknown tool (-32602), no arguments
        call(json!(11), "list_linked_chat_tasks", json!({"chat_link_id": "not-a-uuid"})),
        call(json!(12), "list_linked_chat_tasks", json!({"chat_link_id": f.link, "extra": 1})),
        call(json!(13), "no_such_tool", json!({})),
        json!({"jsonrpc": "2.0", "id": 14, "method": "tools/call", "params": {"name": "list_linked_chat_tasks"}})
            .to_string(),
    ];
    for body in &cases {
        let (status, v, direct) = both(&f, &h, body).await;
        assert!(direct, "a plain tools/call goes the direct way: {body}");
        assert_eq!(status, 200, "{v}");
        assert!(v.get("result").is_some() || v.get("error").is_some(), "{v}");
    }
    // Invalid arguments reach the model as a result naming the field; an unknown tool is a
    // protocol error.
    for (case, needle) in [(6, "chat_link_id"), (7, "extra"), (9, "missing field")] {
        let (_, v, _) = both(&f, &h, &cases[case]).await;
        assert_eq!(v["result"]["isError"], true, "{v}");
        assert!(v["result"]["content"][0]["text"].as_str().unwrap().contains(needle), "{v}");
    }
    let (_, v, _) = both(&f, &h, &cases[8]).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    // A plain listing is answered directly too, from the catalogue built with its schemes in
    // place, exactly as rmcp's answer once its tools got them.
    for body in [
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": "l", "method": "tools/list", "params": {}}),
    ] {
        let (status, v, direct) = both(&f, &h, &body.to_string()).await;
        assert!(direct, "a plain tools/list goes the direct way: {body}");
        assert_eq!(status, 200, "{v}");
        let tools = v["result"]["tools"].as_array().unwrap();
        assert_eq!(tools.len(), tools::ToolName::ALL.len(), "{v}");
        for t in tools {
            assert!(t["securitySchemes"].is_array(), "{t}");
            assert_eq!(t["securitySchemes"], t["_meta"]["securitySchemes"], "{t}");
        }
    }
    // The claim replay really is the claim (both paths ran the tool).
    let (_, v, _) = both(&f, &h, &cases[2]).await;
    assert_eq!(v["result"]["structuredContent"]["claim_id"], f.claim_id.as_str(), "{v}");
}

#[tokio::test]
async fn anything_unusual_goes_to_rmcp_and_still_gets_the_same_answer() {
    let f = fixture().await;
    let mut bearer = String::new();
    let h = standard(&f.token, &mut bearer);
    let list = call(json!(1), "list_linked_chat_tasks", json!({"chat_link_id": f.link}));
    let with = |k: &'static str, v: &'static str| -> Vec<(&str, &str)> {
        let mut out: Vec<(&str, &str)> = h.iter().filter(|(n, _)| *n != k).copied().collect();
        out.push((k, v));
        out
    };
    let without = |k: &str| -> Vec<(&str, &str)> { h.iter().filter(|(n, _)| *n != k).copied().collect() };
    let header_cases: Vec<(Vec<(&str, &str)>, u16)> = vec![
        (with("host", "evil.example:7777"), 403),
        (with("host", "LOCALHOST:7777"), 200),
        (with("origin", "http://127.0.0.1:7777"), 200),
        (with("accept", "application/json;q=0, text/event-stream"), 406),
        (with("accept", "application/json"), 406),
        (with("content-type", "text/plain"), 415),
        (with("mcp-protocol-version", "1999-01-01"), 400),
        (without("mcp-protocol-version"), 200),
        (with("mcp-session-id", "abc"), 200),
    ];
    for (headers, expected) in &header_cases {
        let (status, _, direct) = both(&f, headers, &list).await;
        assert_eq!(status.as_u16(), *expected, "{headers:?}");
        let plain_variant = headers.iter().any(|(k, v)| *k == "host" && *v == "LOCALHOST:7777");
        assert_eq!(direct, plain_variant, "only a differently cased loopback Host stays direct: {headers:?}");
    }
    let body_cases = [
        json!({"jsonrpc": "2.0", "id": 1.5, "method": "tools/call", "params": {"name": "list_linked_chat_tasks", "arguments": {"chat_link_id": f.link}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_linked_chat_tasks", "arguments": {"chat_link_id": f.link}, "_meta": {"progressToken": 1}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_linked_chat_tasks", "arguments": "x"}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"cursor": "c"}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": {"progressToken": 1}}}),
        json!({"jsonrpc": "2.0", "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "list_linked_chat_tasks"}}),
        json!([{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "list_linked_chat_tasks"}}]),
    ];
    for body in &body_cases {
        let (_, _, direct) = both(&f, &h, &body.to_string()).await;
        assert!(!direct, "{body}");
    }
    // 2026-07-28 requests carry per-request metadata: rmcp's.
    let v2026 = with("mcp-protocol-version", "2026-07-28");
    let (_, _, direct) = both(&f, &v2026, &list).await;
    assert!(!direct);
    // A read-only token's run call is refused before either path (403 insufficient_scope).
    let mut ro_bearer = String::new();
    let ro = standard(&f.read_only, &mut ro_bearer);
    let run = call(json!(1), "run_graph_session", json!({"graph_session_id": "g", "idempotency_key": "k-1"}));
    let (status, _, _) = both(&f, &ro, &run).await;
    assert_eq!(status, 403);
    // So is one whose params are not a call's shape (rmcp's catch-all request): its name
    // still decides.
    let odd = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_graph_session", "arguments": "x"}});
    let (status, _, _) = both(&f, &ro, &odd.to_string()).await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn a_remembered_token_is_refused_once_it_expires() {
    let f = fixture().await;
    let mut bearer = String::new();
    let h = standard(&f.token, &mut bearer);
    let list = call(json!(1), "list_linked_chat_tasks", json!({"chat_link_id": f.link}));
    for endpoint in [&f.direct, &f.rmcp] {
        assert_eq!(endpoint.handle(request(&h, &list)).await.status(), 200);
    }
    // The token lives 600 s (plus the 60 s leeway): still good after 630 s, when every
    // remembered answer has been checked again at least once…
    for step in [300, 330] {
        f.clock.advance(Duration::from_secs(step));
        for endpoint in [&f.direct, &f.rmcp] {
            assert_eq!(endpoint.handle(request(&h, &list)).await.status(), 200, "after {step} s more");
        }
    }
    // …and refused the moment it expires, though both endpoints verified it a moment ago.
    f.clock.advance(Duration::from_secs(30));
    for endpoint in [&f.direct, &f.rmcp] {
        let r = endpoint.handle(request(&h, &list)).await;
        assert_eq!(r.status(), 401);
        assert!(r.headers().get("www-authenticate").is_some());
    }
}

/// The status of one `tools/list` on `endpoint` with `token`.
async fn listed_with(endpoint: &Endpoint, token: &str) -> u16 {
    let mut bearer = String::new();
    let h = standard(token, &mut bearer);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).to_string();
    endpoint.handle(request(&h, &body)).await.status().as_u16()
}

#[tokio::test]
async fn a_token_is_verified_once_then_remembered_for_at_most_60_s_and_at_most_1024_of_them() {
    let f = fixture().await;
    let mint = |subject: &str, clock: &ManualClock| {
        use domain::clock::Clock;
        Hs256Signer::new(SECRET, ISSUER, AUDIENCE)
            .mint(
                Grant { subject, client: "client-a", scopes: &[SCOPE_READ, SCOPE_RUN] },
                clock.now(),
                Duration::from_secs(3600),
            )
            .unwrap()
    };
    let (e, t) = (&f.direct, mint("owner-direct", &f.clock));
    for _ in 0..5 {
        assert_eq!(listed_with(e, &t).await, 200);
    }
    assert_eq!(e.token_verifications(), 1, "the same token is verified once, then remembered");
    // The control: the same calls on an endpoint without the memory are five verifications,
    // so the count above is the memory's doing.
    let forgetful = fixture().await.direct.without_token_memory();
    for _ in 0..5 {
        assert_eq!(listed_with(&forgetful, &t).await, 200);
    }
    assert_eq!(forgetful.token_verifications(), 5, "without the memory every call verifies");
    // Remembered at most VERIFIED_FOR (60 s), even though the token lives an hour.
    f.clock.advance(Duration::from_secs(59));
    assert_eq!(listed_with(e, &t).await, 200);
    assert_eq!(e.token_verifications(), 1, "still remembered 59 s later");
    f.clock.advance(Duration::from_secs(2));
    assert_eq!(listed_with(e, &t).await, 200);
    assert_eq!(e.token_verifications(), 2, "verified again after 60 s");
    // Another token is its own entry.
    let other = mint("owner-other", &f.clock);
    assert_eq!(listed_with(e, &other).await, 200);
    assert_eq!(listed_with(e, &t).await, 200);
    assert_eq!(e.token_verifications(), 3);
    // At most VERIFIED_MAX live entries: filling the memory with new tokens evicts the old ones.
    for i in 0..mcp_endpoint::VERIFIED_MAX {
        assert_eq!(listed_with(e, &mint(&format!("owner-{i}"), &f.clock)).await, 200);
    }
    let before = e.token_verifications();
    assert_eq!(listed_with(e, &t).await, 200);
    assert_eq!(e.token_verifications(), before + 1, "the first token was evicted and is verified again");
}
