//! Requests of the MCP 2026-07-28 revision, as a client without a handshake sends them: the
//! protocol version and client capabilities in each request's `_meta`, `Mcp-Method` and
//! `Mcp-Name` headers beside them; a 2025-11-25 `tools/list`; and a session shared in the demo
//! project for them to run.

use serde_json::{Value, json};

/// The Tasks extension, as a client declares it in its capabilities.
pub fn tasks_capability() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
}

/// Sends `method` with `params` to the MCP endpoint `url` as `token`, declaring `capabilities`;
/// `name` is the `Mcp-Name` header (a tool's name, a task's id). The JSON-RPC answer; panics on
/// an HTTP failure without a JSON-RPC error.
pub async fn rpc_2026(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    method: &str,
    name: Option<&str>,
    mut params: Value,
    capabilities: Value,
) -> Value {
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities": capabilities});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut req = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("authorization", format!("Bearer {token}"));
    if let Some(n) = name {
        req = req.header("mcp-name", n);
    }
    let res = req.body(body.to_string()).send().await.unwrap_or_else(|e| panic!("{method}: {e}"));
    let status = res.status();
    let v: Value = res.json().await.unwrap_or(Value::Null);
    assert!(status == 200 || v.get("error").is_some(), "{method}: {status} {v}");
    v
}

/// A `tools/list` as a 2025-11-25 client sends it to the MCP endpoint `url` as `token`: the
/// answer as it came.
///
/// # Panics
/// When the request cannot be sent.
#[allow(clippy::unwrap_used)]
pub async fn tools_list_2025(http: &reqwest::Client, url: &str, token: &str) -> reqwest::Response {
    http.post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap()
}

/// Shares a session `gs_<32 × letter>` named "Weekly report" in the demo project of `running`,
/// as a desktop's sync would; its id.
///
/// # Panics
/// When the store refuses.
#[allow(clippy::unwrap_used)]
pub async fn share_demo_session(running: &local::Running, letter: &str) -> String {
    use domain::store::SyncSessions;
    let gs = format!("gs_{}", letter.repeat(32));
    let meta = domain::runs::SessionMeta {
        graph_session_id: domain::ids::GraphSessionId::parse("graph_session_id", &gs).unwrap(),
        name: "Weekly report".into(),
        description: "drafts the weekly report".into(),
        slug: "weekly-report".into(),
        version: "1".into(),
        status: "ready".into(),
    };
    let (owner, project) = (&running.demo.owner, running.demo.project_id);
    running.store.sync_sessions(owner, project, crate::TEST_DEVICE, &[meta]).await.unwrap();
    gs
}
