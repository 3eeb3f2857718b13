//! The hosts that call a tool only through their model — Claude Code, GitHub Copilot CLI, Gemini
//! CLI, opencode — at their pinned versions (`infra/hosts-tui/package.json`), against the local
//! server behind the recording proxy of `hosts_real`. Each test runs the host's driver
//! (`infra/hosts-tui/drive.py <module>`): it configures the host with the snippet docs/hosts.md
//! gives for it, signs in through the host's own flow where asked (the consent page the host
//! opens through `BROWSER`, approved as the owner), then prompts it; the host's model is a
//! loopback stand-in for its vendor's API that answers with a call of `list_graph_sessions`, so
//! the host's own tool-calling path makes the MCP call, and the stand-in sees the tool's result
//! come back. Here the proxy's record must hold that call and its answer; it is compared with
//! `tests/fixtures/hosts/<host>/<version>/requests-<mode>.json` (`FOUNDRY_UPDATE=1` rewrites).
//!
//! Ignored by the test command (each host is a Node program in a terminal, most of a minute
//! each): `./infra/hosts-tui.sh` installs the pins and runs them, and writes what each run took
//! to `docs/hosts-tui-figures.json`, which docs/results.md quotes.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::hosts_real::{Host, Order, Recorded, pinned, tool};

/// How long one host's whole driven run may take (configure, sign in, prompt, the call).
pub(crate) const TUI_RUN: Duration = Duration::from_secs(150);

pub(crate) const CLAUDE_CODE: Host =
    Host { package: "@anthropic-ai/claude-code", pins: "hosts-tui", fixtures: "claude-code" };
pub(crate) const COPILOT: Host = Host { package: "@github/copilot", pins: "hosts-tui", fixtures: "copilot-cli" };
pub(crate) const GEMINI: Host = Host { package: "@google/gemini-cli", pins: "hosts-tui", fixtures: "gemini-cli" };
pub(crate) const OPENCODE: Host = Host { package: "opencode-ai", pins: "hosts-tui", fixtures: "opencode" };

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

/// The tool every driver asks its model to call.
const TOOL: &str = "list_graph_sessions";

/// Runs `module`'s driver against a fresh local server behind the recording proxy, with the
/// bearer token or (`sign_in`) through the host's own sign-in; checks the host made the call
/// and pins what it sent.
async fn drive(host: &Host, module: &str, sign_in: bool) {
    drive_expecting(host, module, sign_in, None).await;
}

/// [`drive`]; with `refused`, the run must instead fail with that refusal in its error, and no
/// tool call may pass.
async fn drive_expecting(host: &Host, module: &str, sign_in: bool, refused: Option<&str>) {
    let Some(tools) = tool("FOUNDRY_HOSTS_TUI") else { return };
    let mode = if sign_in { "sign-in" } else { "bearer" };
    // The vendors' client metadata documents, which the drivers serve from loopback (over TLS,
    // with the fixtures' loopback certificate): the server fetches them there.
    let documents = ["claude.ai", "github.com"]
        .map(|host| {
            format!(
                "{host}=127.0.0.1:{}",
                std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
            )
        })
        .join(",");
    let pins = oauth::cimd::Documents::parse_pins(&documents);
    let s = Recorded::start_with(&format!("tui-{module}-{mode}"), move |mut c| {
        c.allow_loopback_client_metadata = true;
        c.dev_document_hosts = pins;
        c
    })
    .await;
    let (addr, owner_token) = s.owner();
    let work = s.dir.join("drive");
    let mut cmd = tokio::process::Command::new("python3");
    cmd.arg(root().join("infra/hosts-tui/drive.py"))
        .arg(module)
        .arg("--tools")
        .arg(&tools)
        .args(["--mcp-url", &format!("{}/mcp", s.base), "--tool", TOOL])
        .arg("--work")
        .arg(&work)
        .env("FOUNDRY_DEV_DOCUMENT_HOSTS", &documents)
        .kill_on_drop(true);
    if sign_in {
        cmd.args(["--sign-in", "--server", &format!("http://{addr}"), "--owner-token", &owner_token]);
    } else {
        cmd.args(["--bearer", &s.token]);
    }
    let out = tokio::time::timeout(TUI_RUN, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{module} ({mode}) took more than {TUI_RUN:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = stdout.lines().last().and_then(|l| serde_json::from_str(l).ok()).unwrap_or_default();
    if let Some(refusal) = refused {
        let error = summary["error"].as_str().unwrap_or_default();
        assert!(
            !out.status.success() && error.contains(refusal),
            "{module} ({mode}) was not refused with {refusal:?}:\n{stdout}"
        );
        assert_eq!(s.calls_of(TOOL), 0, "a refused host made the call");
        figures(host, mode, &serde_json::json!({"refused": refusal}));
        return s.stop().await; // what it sends around the refusal varies (its retries): not pinned
    }
    assert!(
        out.status.success() && summary["ok"] == true,
        "{module} ({mode}) did not make the call:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The call reached the server through the host, and was answered.
    let calls = s.calls_of(TOOL);
    assert!(calls >= 1, "the proxy saw no tools/call of {TOOL} from {module}");
    figures(host, mode, &summary);
    let opened = summary["opened"].as_str();
    pinned(host, &format!("requests-{mode}.json"), &s.record_as(opened, Order::Concurrent));
    s.stop().await;
}

/// What a run took, for `infra/hosts-tui.sh` (`FOUNDRY_HOSTS_TUI_FIGURES` names the folder).
fn figures(host: &Host, mode: &str, summary: &Value) {
    let Some(dir) = std::env::var_os("FOUNDRY_HOSTS_TUI_FIGURES") else { return };
    let mut figures = summary.clone();
    figures["version"] = host.version().into();
    figures["package"] = host.package.into();
    figures["mode"] = mode.into();
    let file = Path::new(&dir).join(format!("{}-{mode}.json", host.fixtures));
    std::fs::write(file, serde_json::to_string_pretty(&figures).unwrap()).unwrap();
}

#[tokio::test]
#[ignore = "a host in a terminal: ./infra/hosts-tui.sh"]
async fn claude_code_calls_a_tool_through_its_model_with_the_bearer_token() {
    drive(&CLAUDE_CODE, "claude_code", false).await;
}

#[tokio::test]
#[ignore = "a host in a terminal: ./infra/hosts-tui.sh"]
async fn claude_code_signs_in_and_calls_a_tool_through_its_model() {
    drive(&CLAUDE_CODE, "claude_code", true).await;
}

#[tokio::test]
#[ignore = "a host in a terminal: ./infra/hosts-tui.sh"]
async fn copilot_calls_a_tool_through_its_model_with_the_bearer_token() {
    drive(&COPILOT, "copilot", false).await;
}

/// Copilot 1.0.102 signs in naming its published document (github/copilot-cli#4901's copy, kept
/// in the fixtures), which lists `http://127.0.0.1:33418/`, while it waits on
/// `http://127.0.0.1:<port>/callback`: a loopback redirect may take any port (RFC 8252 §7.3), not
/// another path, so the consent page refuses it — as every server that checks the document must
/// until GitHub's lists that path. docs/hosts.md says so and gives the token instead.
#[tokio::test]
#[ignore = "a host in a terminal: ./infra/hosts-tui.sh"]
async fn copilot_signs_in_with_its_document_and_is_refused_at_the_redirect_path_the_document_lacks() {
    drive_expecting(&COPILOT, "copilot", true, Some("redirect_uri is not one this client registered")).await;
}

#[tokio::test]
#[ignore = "a host in a terminal: ./infra/hosts-tui.sh"]
async fn gemini_cli_calls_a_tool_through_its_model_with_the_bearer_token() {
    drive(&GEMINI, "gemini_cli", false).await;
}

#[tokio::test]
#[ignore = "a host in a terminal: ./infra/hosts-tui.sh"]
async fn gemini_cli_signs_in_and_calls_a_tool_through_its_model() {
    drive(&GEMINI, "gemini_cli", true).await;
}

#[tokio::test]
#[ignore = "a host in a terminal: ./infra/hosts-tui.sh"]
async fn opencode_calls_a_tool_through_its_model_with_the_bearer_token() {
    drive(&OPENCODE, "opencode", false).await;
}

#[tokio::test]
#[ignore = "a host in a terminal: ./infra/hosts-tui.sh"]
async fn opencode_signs_in_and_calls_a_tool_through_its_model() {
    drive(&OPENCODE, "opencode", true).await;
}
