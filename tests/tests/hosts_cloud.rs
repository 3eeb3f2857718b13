//! The hosts' own programs without a model (mcp-remote, the Inspector CLI, Codex), at their
//! pinned versions, against the deployed shape (`cloud_world`: every function binary under the
//! Lambda emulator, behind the API Gateway shim, on moto): each is configured with the bearer
//! snippet `docs/hosts.md` gives for it, pointed at the gateway's MCP URL through the recording
//! proxy of `hosts_real`, and given a chat's Cognito-shaped access token; it lists the tools and
//! calls `list_graph_sessions` with no arguments. What each sent is compared with
//! `tests/fixtures/hosts/<host>/<version>/requests-bearer-cloud.json` (`FOUNDRY_UPDATE=1`
//! rewrites them).
//!
//! Each also signs in by itself against the cloud: its sign-in snippet pointed at the gateway
//! (no proxy: the stack's metadata names the gateway's own URLs, so past its first request a
//! signing-in host would not pass the proxy), it registers with the stack, opens the stack's `/authorize` through
//! its `BROWSER` script; the browser's part (the facade's page where it shows one, Cognito's
//! hosted sign-in, emulated, the facade's callback) leads to the host's loopback callback; it
//! lists the tools and calls `list_graph_sessions` on its own token. These runs are not recorded.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::cloud_world::{World, world};
use crate::hosts_real::{self, CODEX, INSPECTOR, MCP_REMOTE, Order, Recorded, pinned, tool, within};

/// The cloud world with one project switched on for chats, named as the local server's demo
/// project (the call's answer is checked the same way), and a recording proxy in front of its
/// gateway for a chat's access token.
async fn cloud() -> Option<(World, Recorded)> {
    let w = world().await?;
    w.enabled_project("Demo project").await;
    let s = Recorded::in_front_of(&w.emu.gateway, &w.agent, &w.dir).await;
    Some((w, s))
}

/// The host the owner's panel lists by `name` (its handshake, written by the `mcp` function
/// under the role the template gives it): its `sign_in`.
async fn listed(w: &World, name: &str) -> String {
    let res = w.http.get(format!("{}/owner/overview", w.emu.gateway)).bearer_auth(&w.owner).send().await.unwrap();
    let overview: serde_json::Value = res.json().await.unwrap();
    let hosts = overview["hosts"].as_array().unwrap_or_else(|| panic!("no hosts: {overview}"));
    let host = hosts.iter().find(|h| h["name"].as_str().is_some_and(|n| n.contains(name)));
    host.unwrap_or_else(|| panic!("the panel lists no {name}: {overview}"))["sign_in"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_remote_connects_to_the_cloud_shape_with_the_pages_bearer_header_and_calls_a_tool() {
    let (Some(node), Some(proxy)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_MCP_REMOTE")) else { return };
    let Some((w, s)) = cloud().await else { return };
    within("mcp-remote", hosts_real::mcp_remote_with_the_bearer_header(&s, &node, &proxy)).await;
    pinned(&MCP_REMOTE, "requests-bearer-cloud.json", &s.record(None));
    assert_eq!(listed(&w, "via mcp-remote").await, "token", "a token given to it, no sign-in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_inspector_cli_connects_to_the_cloud_shape_with_the_pages_bearer_header_and_calls_a_tool() {
    let (Some(node), Some(cli)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_INSPECTOR_CLI")) else { return };
    let Some((_w, s)) = cloud().await else { return };
    within("the Inspector", hosts_real::inspector_with_the_bearer_header(&s, &node, &cli)).await;
    pinned(&INSPECTOR, "requests-bearer-cloud.json", &s.record(None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn codex_connects_to_the_cloud_shape_with_the_pages_bearer_token_variable_and_calls_a_tool() {
    let (Some(node), Some(codex)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_CODEX")) else { return };
    let Some((_w, s)) = cloud().await else { return };
    within("codex", hosts_real::codex_with_the_bearer_token_variable(&s, &node, &codex)).await;
    pinned(&CODEX, "requests-bearer-cloud.json", &s.record_as(None, Order::Concurrent));
}

/// The cloud world with the demo-named project, its gateway given to the hosts as it is (no
/// proxy: see [`Recorded::direct`]).
async fn cloud_direct() -> Option<(World, Recorded)> {
    let w = world().await?;
    w.enabled_project("Demo project").await;
    let s = Recorded::direct(&w.emu.gateway, &w.dir);
    Some((w, s))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_remote_signs_in_to_the_cloud_shape_through_the_facade_and_calls_a_tool() {
    let (Some(node), Some(proxy)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_MCP_REMOTE")) else { return };
    let Some((_w, s)) = cloud_direct().await else { return };
    within("mcp-remote", hosts_real::mcp_remote_signs_in(&s, &node, &proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_inspector_cli_signs_in_to_the_cloud_shape_through_the_facade_and_calls_a_tool() {
    let (Some(node), Some(cli)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_INSPECTOR_CLI")) else { return };
    let Some((_w, s)) = cloud_direct().await else { return };
    within("the Inspector", hosts_real::inspector_signs_in(&s, &node, &cli)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn codex_signs_in_to_the_cloud_shape_through_the_facade_and_calls_a_tool() {
    let (Some(node), Some(codex)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_CODEX")) else { return };
    let Some((w, s)) = cloud_direct().await else { return };
    within("codex", hosts_real::codex_signs_in(&s, &node, &codex)).await;
    assert_eq!(listed(&w, "codex-mcp-client").await, "registration", "signed in with the client it registered");
}
