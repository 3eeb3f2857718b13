//! The run card (MCP Apps, SEP-1865) over HTTP against the local server: offered only to a
//! client that declares `io.modelcontextprotocol/ui` in its request's capabilities; everyone
//! else sees the catalogue and results they always saw, byte for byte. And the card itself,
//! read as text: it reaches nothing but its host (each rule with the mutation it catches).
//! The card in a real browser, under the pinned ext-apps host bridge: `mcp_apps_browser`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use mcp_endpoint::apps::{APP_MIME_TYPE, RUN_CARD_HTML, RUN_CARD_URI, UI_EXTENSION};
use serde_json::{Value, json};

struct World {
    running: foundry_tests::LocalServer,
    http: reqwest::Client,
}

impl World {
    async fn new() -> Self {
        Self { running: foundry_tests::LocalServer::default("foundry-apps").await, http: foundry_tests::http() }
    }

    async fn rpc(&self, method: &str, name: Option<&str>, params: Value, capabilities: Value) -> Value {
        let (url, token) = (&self.running.mcp_url, &self.running.token);
        foundry_tests::mcp::rpc_2026(&self.http, url, token, method, name, params, capabilities).await
    }

    /// A 2025-11-25 request without `_meta` (the direct path for a listing or a call).
    async fn rpc_2025(&self, method: &str, params: Value) -> Value {
        self.rpc_2025_in(None, method, params).await.1
    }

    /// A 2025-11-25 request, in the session `session` if given: the answer's `Mcp-Session-Id`
    /// and its body.
    async fn rpc_2025_in(&self, session: Option<&str>, method: &str, params: Value) -> (Option<String>, Value) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut req = self
            .http
            .post(&self.running.mcp_url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .bearer_auth(&self.running.token);
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        let res = req.body(body.to_string()).send().await.unwrap();
        let session = res.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
        (session, res.json().await.unwrap())
    }
}

fn ui() -> Value {
    json!({"extensions": {UI_EXTENSION: {"mimeTypes": [APP_MIME_TYPE]}}})
}

fn golden() -> Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    serde_json::from_str(&std::fs::read_to_string(root.join("tests/golden/tools_list.json")).unwrap()).unwrap()
}

/// A client that did not declare the extension — either era, with or without other
/// extensions, or declaring it for other MIME types only — lists exactly the golden catalogue,
/// an empty resource list, and cannot read the card (not found, the URI in the error's data, as
/// SEP-2164 has it).
#[tokio::test]
async fn a_client_without_the_extension_sees_exactly_what_it_saw_before() {
    let w = World::new().await;
    let golden = golden();
    let listed = w.rpc_2025("tools/list", json!({})).await;
    assert_eq!(listed["result"]["tools"], golden, "2025-11-25, direct path");
    for caps in [
        json!({}),
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
        json!({"extensions": {UI_EXTENSION: {"mimeTypes": ["text/uri-list"]}}}),
        // The extension without its required `mimeTypes` setting (SEP-1865) is no declaration.
        json!({"extensions": {UI_EXTENSION: {}}}),
    ] {
        let listed = w.rpc("tools/list", Some("tools/list"), json!({}), caps.clone()).await;
        assert_eq!(listed["result"]["tools"], golden, "2026-07-28 with {caps}");
        let resources = w.rpc("resources/list", None, json!({}), caps.clone()).await;
        assert_eq!(resources["result"]["resources"], json!([]), "{caps}: {resources}");
        let read = w.rpc("resources/read", Some(RUN_CARD_URI), json!({"uri": RUN_CARD_URI}), caps.clone()).await;
        assert_eq!(read["error"]["code"], -32602, "{caps}: {read}");
        assert_eq!(read["error"]["data"]["uri"], RUN_CARD_URI, "{read}");
    }
    let read = w.rpc_2025("resources/read", json!({"uri": RUN_CARD_URI})).await;
    assert_eq!(read["error"]["code"], -32602, "2025-11-25: {read}");
    w.running.stop().await;
}

/// A client that declared it gets the golden catalogue with `_meta.ui.resourceUri` on exactly
/// run_graph_session and get_graph_run (nothing else differs), the card in `resources/list`,
/// and the card's HTML from `resources/read` with a CSP naming no outside origin. The tools'
/// results are the same bytes for it as for anyone: the card reads what the model reads.
#[tokio::test]
async fn a_declaring_client_gets_the_card_linked_listed_and_readable_and_the_same_results() {
    let w = World::new().await;
    let listed = w.rpc("tools/list", Some("tools/list"), json!({}), ui()).await["result"]["tools"].clone();
    let golden = golden();
    assert_eq!(listed.as_array().unwrap().len(), golden.as_array().unwrap().len());
    for (got, want) in listed.as_array().unwrap().iter().zip(golden.as_array().unwrap()) {
        let name = want["name"].as_str().unwrap();
        let mut expected = want.clone();
        if name == "run_graph_session" || name == "get_graph_run" {
            expected["_meta"]["ui"] = json!({"resourceUri": RUN_CARD_URI});
            expected["_meta"]["ui/resourceUri"] = json!(RUN_CARD_URI);
        }
        assert_eq!(got, &expected, "{name}");
    }
    // docs/mcp.md's sizes are these: the card's bytes, and what the links add to the list.
    let (apps, plain) = (serde_json::to_string(&listed).unwrap().len(), serde_json::to_string(&golden).unwrap().len());
    let doc = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/mcp.md")).unwrap();
    let grouped = |n: usize| foundry_tests::grouped(n as u64);
    for said in [
        format!("Sizes: the card is {} bytes of HTML", grouped(RUN_CARD_HTML.len())),
        format!(
            "is {} bytes longer than the plain one ({} vs {} bytes of compact JSON",
            apps - plain,
            grouped(apps),
            grouped(plain)
        ),
    ] {
        assert!(foundry_tests::says(&doc, &said), "docs/mcp.md does not say {said:?}");
    }

    let resources = w.rpc("resources/list", None, json!({}), ui()).await;
    let card = &resources["result"]["resources"];
    assert_eq!(card.as_array().unwrap().len(), 1, "{resources}");
    assert_eq!(card[0]["uri"], RUN_CARD_URI);
    assert_eq!(card[0]["mimeType"], APP_MIME_TYPE);
    let read = w.rpc("resources/read", Some(RUN_CARD_URI), json!({"uri": RUN_CARD_URI}), ui()).await;
    let contents = &read["result"]["contents"];
    assert_eq!(contents.as_array().unwrap().len(), 1, "{read}");
    assert_eq!(contents[0]["mimeType"], APP_MIME_TYPE);
    assert_eq!(contents[0]["text"], RUN_CARD_HTML);
    let csp = &contents[0]["_meta"]["ui"]["csp"];
    for key in ["connectDomains", "resourceDomains", "frameDomains", "baseUriDomains"] {
        assert_eq!(csp[key], json!([]), "{key}: {csp}");
    }
    assert_eq!(contents[0]["_meta"]["ui"].get("domain"), None, "no dedicated origin is asked for");
    let unknown = w
        .rpc(
            "resources/read",
            Some("ui://foundry-connect/other.html"),
            json!({"uri": "ui://foundry-connect/other.html"}),
            ui(),
        )
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // The same run read by a declaring and a plain client: the same result, byte for byte.
    let gs = foundry_tests::mcp::share_demo_session(&w.running, "e").await;
    let args = json!({"graph_session_id": gs, "idempotency_key": "apps-same-bytes"});
    let queued = w
        .rpc("tools/call", Some("run_graph_session"), json!({"name": "run_graph_session", "arguments": args}), ui())
        .await;
    let plain = w.rpc_2025("tools/call", json!({"name": "run_graph_session", "arguments": args})).await;
    // (The eras differ in `resultType`; everything else, the text for the model included, is
    // the same.)
    let without_era = |v: &Value| {
        let mut r = v["result"].clone();
        if let Some(o) = r.as_object_mut() {
            o.remove("resultType");
        }
        serde_json::to_string(&r).unwrap()
    };
    assert_eq!(without_era(&queued), without_era(&plain), "a replay for the plain client");
    let id = queued["result"]["structuredContent"]["command_id"].as_str().unwrap().to_owned();
    let get = json!({"name": "get_graph_run", "arguments": {"command_id": id}});
    let for_card = w.rpc("tools/call", Some("get_graph_run"), get.clone(), ui()).await;
    let for_plain = w.rpc("tools/call", Some("get_graph_run"), get.clone(), json!({})).await;
    assert_eq!(
        serde_json::to_string(&for_card["result"]).unwrap(),
        serde_json::to_string(&for_plain["result"]).unwrap()
    );
    w.running.stop().await;
}

/// The 2025-11-25 era declares capabilities once, in `initialize`: a client that declares MCP
/// Apps there gets a session id that carries the declaration, and in that session (only) the
/// card is linked, listed and readable. A client that declares nothing gets no session id and
/// the golden catalogue; a session id this server did not make counts for nothing.
#[tokio::test]
async fn in_the_2025_11_25_era_the_declaration_in_initialize_travels_in_the_session_id() {
    let w = World::new().await;
    let init = |caps: Value| json!({"protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": {"name": "host", "version": "1"}});
    let (none, plain) = w.rpc_2025_in(None, "initialize", init(json!({}))).await;
    assert_eq!(none, None, "a plain initialize got a session id: {plain}");
    let (none, _) =
        w.rpc_2025_in(None, "initialize", init(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}))).await;
    assert_eq!(none, None);
    let (session, declared) = w.rpc_2025_in(None, "initialize", init(ui())).await;
    let session = session.expect("an initialize declaring MCP Apps gets a session id");
    assert_eq!(declared["result"], plain["result"], "the initialize result itself is the same");
    let golden = golden();
    let (_, listed) = w.rpc_2025_in(Some(&session), "tools/list", json!({})).await;
    let linked: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["_meta"]["ui"]["resourceUri"] == RUN_CARD_URI)
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(linked, ["run_graph_session", "get_graph_run"], "{listed}");
    let (_, resources) = w.rpc_2025_in(Some(&session), "resources/list", json!({})).await;
    let uris: Vec<&str> =
        resources["result"]["resources"].as_array().into_iter().flatten().filter_map(|r| r["uri"].as_str()).collect();
    assert_eq!(uris, [RUN_CARD_URI], "the session lists the card: {resources}");
    let (_, unlisted) = w.rpc_2025_in(None, "resources/list", json!({})).await;
    assert!(
        !unlisted.to_string().contains(RUN_CARD_URI),
        "a client without the session sees the card listed: {unlisted}"
    );
    let (_, card) = w.rpc_2025_in(Some(&session), "resources/read", json!({"uri": RUN_CARD_URI})).await;
    assert_eq!(card["result"]["contents"][0]["text"], RUN_CARD_HTML, "{card}");
    // Without the session, or with one this server did not make: as before.
    assert_eq!(w.rpc_2025("tools/list", json!({})).await["result"]["tools"], golden);
    let (_, foreign) = w.rpc_2025_in(Some("0123456789abcdef"), "tools/list", json!({})).await;
    assert_eq!(foreign["result"]["tools"], golden);
    let (_, forged) = w.rpc_2025_in(Some("fc-apps-zz"), "resources/read", json!({"uri": RUN_CARD_URI})).await;
    assert_eq!(forged["error"]["code"], -32602, "{forged}");
    w.running.stop().await;
}

/// What makes the card reach beyond its host, found in its text (each rule: the text it looks
/// for, and why that is refused): a URL or a protocol-relative link, an element that loads or
/// frames something, any network API, HTML written from strings, code from strings, storage.
const RULES: [(&str, &str); 19] = [
    ("http://", "an http URL"),
    ("https://", "an https URL"),
    ("src=", "an element that loads something"),
    ("href=", "a link or a stylesheet"),
    ("<iframe", "a frame"),
    ("<form", "a form"),
    ("@import", "a stylesheet import"),
    ("url(", "a CSS url()"),
    ("fetch(", "fetch"),
    ("XMLHttpRequest", "XMLHttpRequest"),
    ("WebSocket", "a WebSocket"),
    ("EventSource", "an EventSource"),
    ("sendBeacon", "a beacon"),
    ("innerHTML", "HTML from a string"),
    ("insertAdjacentHTML", "HTML from a string"),
    ("document.write", "HTML from a string"),
    ("eval(", "code from a string"),
    ("new Function", "code from a string"),
    ("localStorage", "storage"),
];

/// The rules `html` breaks, each named by the text it looks for.
fn reaches_outside(html: &str) -> Vec<&'static str> {
    let lower = html.to_ascii_lowercase();
    RULES.iter().filter(|(needle, _)| lower.contains(&needle.to_ascii_lowercase())).map(|(needle, _)| *needle).collect()
}

/// The card as served breaks none of the rules, and each rule catches its own mutation (a copy
/// of the card with that one thing added): the rule that fires is named, so a rule that stopped
/// matching is not covered by another that happens to match the same mutation. The browser
/// test runs the card under the CSP a host builds from `_meta.ui.csp` and fails on any
/// violation report.
#[test]
fn the_card_reaches_nothing_but_its_host_and_each_rule_catches_its_mutation() {
    assert_eq!(reaches_outside(RUN_CARD_HTML), Vec::<&str>::new());
    assert!(RUN_CARD_HTML.contains("window.parent.postMessage("), "the card talks to its host");
    let mutations: [(&str, &str); 19] = [
        ("http://", "<p>http://example.com</p>"),
        ("https://", "<p>https://example.com</p>"),
        ("src=", "<img src=\"data:,\">"),
        ("href=", "<a href=\"#x\">x</a>"),
        ("<iframe", "<iframe></iframe>"),
        ("<form", "<form></form>"),
        ("@import", "<style>@import 'x.css';</style>"),
        ("url(", "<style>body { background: url(x.png) }</style>"),
        ("fetch(", "<script>fetch('/x')</script>"),
        ("XMLHttpRequest", "<script>new XMLHttpRequest()</script>"),
        ("WebSocket", "<script>new WebSocket('ws:x')</script>"),
        ("EventSource", "<script>new EventSource('/x')</script>"),
        ("sendBeacon", "<script>navigator.sendBeacon('/x')</script>"),
        ("innerHTML", "<script>document.body.innerHTML = run.result</script>"),
        ("insertAdjacentHTML", "<script>document.body.insertAdjacentHTML('beforeend', run.result)</script>"),
        ("document.write", "<script>document.write(run.result)</script>"),
        ("eval(", "<script>eval(run.result)</script>"),
        ("new Function", "<script>new Function(run.result)()</script>"),
        ("localStorage", "<script>localStorage.setItem('t', token)</script>"),
    ];
    for (needle, _) in RULES {
        assert!(mutations.iter().any(|(n, _)| *n == needle), "the rule {needle:?} has no mutation");
    }
    for (needle, m) in mutations {
        let mutated = RUN_CARD_HTML.replace("</body>", &format!("{m}</body>"));
        let fired = reaches_outside(&mutated);
        assert!(fired.contains(&needle), "{m}: the rule {needle:?} did not fire (fired: {fired:?})");
    }
}
