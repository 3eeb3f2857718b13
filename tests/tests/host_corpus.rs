//! The hosts' own artifacts (`tests/fixtures/hosts`, each with its source beside it), replayed
//! against the local server and the cloud shape, from the document or the registration to a
//! tool call. Adding a file adds a case:
//!
//! - `documents/*.json`: a client metadata document, served byte for byte at its own URL (the
//!   servers' development switch fetches the host's name from a loopback address,
//!   `FOUNDRY_DEV_DOCUMENT_HOSTS`); the client signs in with it through every redirect it lists
//!   (a loopback one on a port it does not list, as the hosts do), exchanges the code and calls a
//!   tool. Then its host walls the server off (403 with a challenge page) and a fresh server
//!   still signs it in from the last good copy in its store;
//! - `registrations/*.json`: a registration body, posted as it is (a port its recorder wrote as
//!   `{port}` filled in); `201`, then the same flow through each redirect it registered;
//! - `authorize/*.txt`: an authorization request (or its `redirect_uri`), replayed for the
//!   document whose redirects admit it, its parameters kept (`prompt=consent`,
//!   `scope=+offline_access`), only what its poster redacted and the server it was sent to
//!   replaced.
//!
//! A document its poster cut down to a placeholder id cannot be served under its own URL: it is
//! checked by the rules alone, and the one that lists no `none` (ChatGPT's of May 2026) is
//! refused as it must be.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use foundry_tests::cloud::{Emulator, Template, account};
use foundry_tests::documents::{Answer, DocumentHost};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn corpus(kind: &str, ext: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/hosts").join(kind);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    out
}

/// A document of the corpus: its file, bytes, URL and listed redirects.
struct Document {
    file: String,
    bytes: Vec<u8>,
    url: String,
    redirects: Vec<String>,
}

/// The documents that can be served under their own URL, and those their posters cut to a
/// placeholder (checked by the rules only).
fn documents() -> (Vec<Document>, Vec<(String, Vec<u8>)>) {
    let mut served = Vec::new();
    let mut placeholders = Vec::new();
    for (file, bytes) in corpus("documents", "json") {
        let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        let url = v["client_id"].as_str().unwrap().to_owned();
        if url.contains('<') {
            placeholders.push((file, bytes));
            continue;
        }
        let redirects = v["redirect_uris"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_owned()).collect();
        served.push(Document { file, bytes, url, redirects });
    }
    assert!(served.len() >= 5, "the corpus has the hosts' documents");
    (served, placeholders)
}

/// A port nothing listens on.
fn random_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The redirect a host uses for a listed one: a loopback one on a port of its own (Claude Code
/// lists none and uses one; Copilot CLI lists 33418 and uses another), others as listed.
fn as_used(listed: &str) -> String {
    let mut u = url::Url::parse(listed).unwrap();
    if u.scheme() == "http" && oauth::LOOPBACK_HOSTS.contains(&u.host_str().unwrap_or_default()) {
        u.set_port(Some(random_port())).unwrap();
        return u.to_string();
    }
    listed.to_owned()
}

fn pkce() -> (String, String) {
    let verifier = format!("v-{}-{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    (verifier.clone(), URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes())))
}

fn http() -> reqwest::Client {
    foundry_tests::http_builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// The hosts of the corpus, each serving its documents at their own paths (one loopback host
/// per name: two hosts may use one path); the pins for the servers, and a way to wall every
/// host off.
struct Hosts {
    by_name: BTreeMap<String, std::sync::Arc<DocumentHost>>,
}

impl Hosts {
    async fn serve(docs: &[Document]) -> Self {
        let mut by_name: BTreeMap<String, std::sync::Arc<DocumentHost>> = BTreeMap::new();
        for d in docs {
            let u = url::Url::parse(&d.url).unwrap();
            let name = u.host_str().unwrap().to_owned();
            if !by_name.contains_key(&name) {
                by_name.insert(name.clone(), DocumentHost::start().await);
            }
            by_name[&name].set(u.path(), Answer::Raw(d.bytes.clone()));
        }
        Self { by_name }
    }

    fn pins(&self) -> Vec<(String, SocketAddr)> {
        self.by_name.iter().map(|(n, h)| (n.clone(), h.addr)).collect()
    }

    fn hits(&self) -> usize {
        self.by_name.values().map(|h| h.hits()).sum()
    }

    /// Every document answers 403 with a challenge page, as a bot wall does.
    fn wall_off(&self, docs: &[Document]) {
        for d in docs {
            let u = url::Url::parse(&d.url).unwrap();
            self.by_name[u.host_str().unwrap()].set(u.path(), Answer::Page(403));
        }
    }
}

/// A browser on another origin asks before `POST /token` (and the others): each preflight is
/// answered with CORS headers and no credentials, and so is the answer itself.
async fn preflights_are_answered(base: &str, mcp: &str) {
    let http = http();
    let meta: Value =
        http.get(format!("{base}/.well-known/oauth-authorization-server")).send().await.unwrap().json().await.unwrap();
    let at = |k: &str| meta[k].as_str().unwrap().to_owned();
    for (url, method) in [
        (format!("{base}/token"), "POST"),
        (at("token_endpoint"), "POST"),
        (at("registration_endpoint"), "POST"),
        (at("revocation_endpoint"), "POST"),
        (format!("{base}/.well-known/oauth-authorization-server"), "GET"),
        (format!("{base}/.well-known/oauth-protected-resource"), "GET"),
        (mcp.to_owned(), "POST"),
    ] {
        let res = http
            .request(reqwest::Method::OPTIONS, &url)
            .header("origin", "https://inspector.example")
            .header("access-control-request-method", method)
            .header("access-control-request-headers", "content-type, authorization, mcp-protocol-version")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 204, "preflight of {url}");
        let h = res.headers();
        assert_eq!(h["access-control-allow-origin"], "*", "{url}");
        assert!(h["access-control-allow-methods"].to_str().unwrap().contains(method), "{url}");
        assert!(h.get("access-control-allow-credentials").is_none(), "{url}: never credentials");
    }
    let meta = http
        .get(format!("{base}/.well-known/oauth-authorization-server"))
        .header("origin", "https://inspector.example")
        .send()
        .await
        .unwrap();
    assert_eq!(meta.headers()["access-control-allow-origin"], "*");
    let unauth = http.post(mcp).header("origin", "https://inspector.example").json(&json!({})).send().await.unwrap();
    assert_eq!(unauth.status(), 401);
    let exposed = unauth.headers()["access-control-expose-headers"].to_str().unwrap().to_owned();
    assert!(exposed.contains("WWW-Authenticate"), "a browser client can read the challenge: {exposed}");
}

/// An authorization request: the artifact's own parameters when it has some (what its poster
/// redacted and the server it went to replaced), else the plain code request.
fn authorize_query(
    client_id: &str,
    redirect: &str,
    challenge: &str,
    resource: &str,
    artifact: Option<&str>,
) -> Vec<(String, String)> {
    let mut q: Vec<(String, String)> = match artifact {
        Some(a) => url::form_urlencoded::parse(a.split_once('?').map_or(a, |(_, q)| q).trim().as_bytes())
            .into_owned()
            .collect(),
        None => vec![("response_type".into(), "code".into())],
    };
    if !q.iter().any(|(k, _)| k == "response_type") {
        q.insert(0, ("response_type".into(), "code".into()));
    }
    let mut set = |k: &str, v: &str| match q.iter_mut().find(|(n, _)| n == k) {
        Some((_, old)) => *old = v.to_owned(),
        None => q.push((k.to_owned(), v.to_owned())),
    };
    set("client_id", client_id);
    set("redirect_uri", redirect);
    set("code_challenge", challenge);
    set("code_challenge_method", "S256");
    set("state", "corpus-state");
    set("resource", resource);
    q
}

/// The query of a `Location` that must go back to `redirect`.
fn back_at(location: &str, redirect: &str) -> HashMap<String, String> {
    assert!(location.starts_with(redirect), "sent back to {location}, not {redirect}");
    let u = url::Url::parse(location).unwrap();
    let q: HashMap<String, String> = u.query_pairs().into_owned().collect();
    assert_eq!(q.get("state").map(String::as_str), Some("corpus-state"), "{location}");
    assert!(q.contains_key("code"), "{location}");
    q
}

/// One connection to the local server: the consent page (naming where the code goes), Allow,
/// the exchange and a tool call through the demo chat link.
async fn local_connect(
    running: &foundry_tests::LocalServer,
    cookie: &str,
    client_id: &str,
    redirect: &str,
    artifact: Option<&str>,
) {
    let http = http();
    let base = &running.base_url;
    let (verifier, challenge) = pkce();
    let q = authorize_query(client_id, redirect, &challenge, &running.mcp_url, artifact);
    // The origin path Claude.ai has been seen calling whatever the metadata says, and ours.
    for path in ["/authorize", "/oauth/authorize"] {
        let page = http.get(format!("{base}{path}")).header("cookie", cookie).query(&q).send().await.unwrap();
        assert_eq!(page.status(), 200, "{client_id} via {redirect}: {}", page.text().await.unwrap_or_default());
        let html = page.text().await.unwrap();
        let host = url::Url::parse(redirect).unwrap().host_str().unwrap_or_default().to_owned();
        let shown = html.split("goes to <code>").nth(1).and_then(|r| r.split("</code>").next()).unwrap_or_default();
        assert!(shown.contains(&host), "the consent page names where the code goes ({host}): {html}");
        let csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
        let res = http
            .post(format!("{base}/oauth/authorize"))
            .header("cookie", cookie)
            .form(&[("csrf", csrf.as_str()), ("decision", "allow")])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 303);
        let back = back_at(res.headers()["location"].to_str().unwrap(), redirect);
        assert_eq!(back.get("iss"), Some(base), "RFC 9207 iss");
        if path == "/authorize" {
            continue; // one code is enough: the exchange below uses the second
        }
        let form = [
            ("grant_type", "authorization_code"),
            ("code", back["code"].as_str()),
            ("client_id", client_id),
            ("redirect_uri", redirect),
            ("code_verifier", verifier.as_str()),
            ("resource", running.mcp_url.as_str()),
        ];
        // `/token` on the origin too.
        let tokens = http.post(format!("{base}/token")).form(&form).send().await.unwrap();
        assert_eq!(tokens.status(), 200, "{client_id}: {}", tokens.text().await.unwrap_or_default());
        let tokens: Value = tokens.json().await.unwrap();
        assert!(tokens["refresh_token"].is_string(), "{tokens}");
        let link = running.demo.chat_link_id.to_string();
        call_tool(&running.mcp_url, &tokens, "list_linked_chat_tasks", json!({"chat_link_id": link}), client_id).await;
    }
}

/// A `tools/call` with the access token of `tokens`: answered by the tool, not an error.
async fn call_tool(mcp: &str, tokens: &Value, tool: &str, arguments: Value, client_id: &str) {
    let call =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
    let res = http()
        .post(mcp)
        .bearer_auth(tokens["access_token"].as_str().unwrap())
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&call)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{client_id}");
    let answer: Value = res.json().await.unwrap();
    assert!(answer["result"]["content"][0]["text"].is_string(), "{client_id}: the tool answered: {answer}");
    assert_ne!(answer["result"]["isError"], true, "{client_id}: {answer}");
}

/// One connection through the cloud facade: authorize → Cognito (emulated) → the facade's
/// callback → back to `redirect` with the code → the exchange → a tool call.
async fn cloud_connect(
    gateway: &str,
    connector: &str,
    client_id: &str,
    redirect: &str,
    artifact: Option<&str>,
) -> Value {
    let http = http();
    let (verifier, challenge) = pkce();
    let q = authorize_query(client_id, redirect, &challenge, connector, artifact);
    let mut res = http.get(format!("{gateway}/authorize")).query(&q).send().await.unwrap();
    // A redirect no host publishes: the facade's own page first (naming where the code goes),
    // whose cookie the callback needs.
    let mut cookie = None;
    if res.status() == 200 {
        assert!(
            !oauth::RedirectPolicy::cloud(Vec::new()).vouched(redirect),
            "{redirect}: a page for a vouched redirect"
        );
        cookie = Some(res.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned());
        let html = res.text().await.unwrap();
        let link = html.split("<a href=\"").nth(1).unwrap().split('"').next().unwrap().replace("&amp;", "&");
        res = http.get(link).send().await.unwrap();
        assert_eq!(res.status(), 302, "Cognito's sign-in");
        let callback = res.headers()["location"].to_str().unwrap().to_owned();
        res = http.get(callback).header("cookie", cookie.clone().unwrap()).send().await.unwrap();
    } else {
        for _ in 0..2 {
            assert!(
                res.status().is_redirection(),
                "{client_id} via {redirect}: {}",
                res.text().await.unwrap_or_default()
            );
            let next = res.headers()["location"].to_str().unwrap().to_owned();
            res = http.get(next).send().await.unwrap();
        }
    }
    assert_eq!(cookie.is_some(), !oauth::RedirectPolicy::cloud(Vec::new()).vouched(redirect), "{redirect}");
    assert_eq!(res.status(), 302);
    let back = back_at(res.headers()["location"].to_str().unwrap(), redirect);
    assert_eq!(back.get("iss").map(String::as_str), Some(gateway), "RFC 9207 iss");
    let form = [
        ("grant_type", "authorization_code"),
        ("code", back["code"].as_str()),
        ("client_id", client_id),
        ("redirect_uri", redirect),
        ("code_verifier", verifier.as_str()),
        ("resource", connector),
    ];
    let tokens = http.post(format!("{gateway}/token")).form(&form).send().await.unwrap();
    assert_eq!(tokens.status(), 200, "{client_id}: {}", tokens.text().await.unwrap_or_default());
    let tokens: Value = tokens.json().await.unwrap();
    let project = uuid::Uuid::now_v7().to_string();
    call_tool(connector, &tokens, "list_graph_sessions", json!({"project_id": project}), client_id).await;
    tokens
}

/// Posts each `registrations/` body as it is, from an address of its own (the per-address
/// limit is not what this tests): its file, the client id and the redirect URIs registered.
async fn register_corpus(register_url: &str) -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    for (i, (file, body)) in corpus("registrations", "json").into_iter().enumerate() {
        // A capture's port was replaced by its recorder (`{port}`): any port the client would
        // have opened.
        let body = String::from_utf8(body).unwrap().replace("{port}", &random_port().to_string()).into_bytes();
        let from = foundry_tests::registration::client_from(u8::try_from(100 + i).unwrap());
        let res =
            from.post(register_url).header("content-type", "application/json").body(body.clone()).send().await.unwrap();
        let status = res.status().as_u16();
        let answer: Value = res.json().await.unwrap_or(Value::Null);
        assert_eq!(status, 201, "{file}: {answer}");
        let asked: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["redirect_uris"], asked["redirect_uris"], "{file}: every URI it asked for is its");
        let uris = answer["redirect_uris"].as_array().unwrap().iter().map(|u| u.as_str().unwrap().to_owned()).collect();
        out.push((file, answer["client_id"].as_str().unwrap().to_owned(), uris));
    }
    out
}

/// Each `authorize/` artifact paired with the documents whose listed redirects admit it.
fn authorize_artifacts(docs: &[Document]) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    for (file, bytes) in corpus("authorize", "txt") {
        let text = String::from_utf8(bytes).unwrap();
        let query = text.split_once('?').map_or(text.as_str(), |(_, q)| q).trim().to_owned();
        let params: HashMap<String, String> = url::form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        let redirect = params["redirect_uri"].clone();
        let named = params.get("client_id");
        let matching: Vec<&Document> = docs
            .iter()
            .filter(|d| named.is_none_or(|c| *c == d.url))
            .filter(|d| d.redirects.iter().any(|l| oauth::cimd::redirect_matches(l, &redirect)))
            .collect();
        assert!(!matching.is_empty(), "{file}: no document of the corpus admits {redirect}");
        for d in matching {
            out.push((file.clone(), d.url.clone(), redirect.clone(), query.clone()));
        }
    }
    out
}

/// Every document and authorization request of the corpus, on the local server: sign-in, code,
/// tokens, a tool call; then a fresh server whose document host answers 403 signs each client
/// in from the last good copy.
#[tokio::test]
async fn every_hosts_document_and_request_connects_to_the_local_server() {
    let (docs, placeholders) = documents();
    for (file, bytes) in &placeholders {
        let url = serde_json::from_slice::<Value>(bytes).unwrap()["client_id"].as_str().unwrap().to_owned();
        match oauth::cimd::validate(&url, bytes) {
            Err(oauth::cimd::DocumentError::Invalid { rule, .. }) => {
                assert!(rule.contains("none is not offered"), "{file}: {rule}");
            }
            Ok(_) => {}
            Err(e) => panic!("{file}: {e}"),
        }
    }
    let host = Hosts::serve(&docs).await;
    let pins = host.pins();
    let config = |c: local::LocalConfig| local::LocalConfig {
        allow_loopback_client_metadata: true,
        dev_document_hosts: pins.clone(),
        ..c
    };
    let mut running = foundry_tests::LocalServer::start("foundry-corpus", &config).await;
    let http = http();
    let session = |base: String, token: String| {
        let http = http.clone();
        async move {
            let res = http.post(format!("{base}/oauth/session")).bearer_auth(token).send().await.unwrap();
            res.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned()
        }
    };
    preflights_are_answered(&running.base_url, &running.mcp_url).await;
    let cookie = session(running.base_url.clone(), running.owner_token.clone()).await;
    let mut cases = 0;
    for d in &docs {
        for listed in &d.redirects {
            local_connect(&running, &cookie, &d.url, &as_used(listed), None).await;
            cases += 1;
        }
    }
    for (file, client_id, redirect, query) in authorize_artifacts(&docs) {
        eprintln!("{file} with {client_id}");
        local_connect(&running, &cookie, &client_id, &redirect, Some(&query)).await;
        cases += 1;
    }
    for (file, client_id, uris) in register_corpus(&format!("{}/register", running.base_url)).await {
        for listed in &uris {
            eprintln!("{file} via {listed}");
            local_connect(&running, &cookie, &client_id, &as_used(listed), None).await;
            cases += 1;
        }
    }
    let fetched = host.hits();
    // The hosts wall the server off; a restarted server (nothing in memory) signs each client
    // in from the copy its store kept.
    host.wall_off(&docs);
    running.restart(&config).await;
    let cookie = session(running.base_url.clone(), running.owner_token.clone()).await;
    for d in &docs {
        local_connect(&running, &cookie, &d.url, &as_used(&d.redirects[0]), None).await;
    }
    assert!(host.hits() > fetched, "the restarted server asked the hosts first");
    eprintln!("host corpus on the local server: {} documents, {cases} connections", docs.len());
    // docs/results.md's count is this one.
    let results = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/results.md")).unwrap();
    let said = format!("3 registered redirects) | **{cases}**, all connect");
    assert!(foundry_tests::says(&results, &said), "docs/results.md does not say {said:?}");
    running.stop().await;
}

/// The same corpus through the cloud shape (the facade, the emulated Cognito, the function
/// binaries); then fresh function instances whose document hosts answer 403 sign each client in
/// from the copy in the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_hosts_document_and_request_connects_to_the_cloud_shape() {
    let Some(acct) = account().await else { return };
    let (docs, _) = documents();
    let host = Hosts::serve(&docs).await;
    let pins = host.pins().iter().map(|(h, a)| format!("{h}={a}")).collect::<Vec<_>>().join(",");
    let mut env = acct.base_env.clone();
    env.push((lambda::config::DEV_DOCUMENT_HOSTS.to_owned(), pins));
    let template = Template::load();
    let emu = Emulator::start(&template, &acct.resources, &env).await;
    emu.wait_ready().await;
    let connector = template.output("McpConnectorUrl", &acct.resources, &emu.gateway);
    preflights_are_answered(&emu.gateway, &connector).await;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let cloud = oauth::RedirectPolicy::cloud(Vec::new());
    for d in &docs {
        for listed in d.redirects.iter().filter(|r| cloud.check(r).is_ok()) {
            let tokens = cloud_connect(&emu.gateway, &connector, &d.url, &as_used(listed), None).await;
            assert!(tokens["refresh_token"].is_string(), "{tokens}");
            *seen.entry(format!("documents/{}", d.file)).or_default() += 1;
        }
        assert!(seen.contains_key(&format!("documents/{}", d.file)), "{}: none of its redirects connected", d.file);
    }
    for (file, client_id, redirect, query) in authorize_artifacts(&docs) {
        eprintln!("{file} with {client_id}");
        cloud_connect(&emu.gateway, &connector, &client_id, &redirect, Some(&query)).await;
        *seen.entry(format!("authorize/{file}")).or_default() += 1;
    }
    for (file, client_id, uris) in register_corpus(&format!("{}/register", emu.gateway)).await {
        for listed in &uris {
            eprintln!("{file} via {listed}");
            cloud_connect(&emu.gateway, &connector, &client_id, &as_used(listed), None).await;
            *seen.entry(format!("registrations/{file}")).or_default() += 1;
        }
    }
    host.wall_off(&docs);
    // A fresh instance of the function (a cold start: no document in its memory).
    emu.cold_start("RegisterClientFunction");
    emu.wait_ready().await;
    let hits = host.hits();
    for d in &docs {
        let redirect = d.redirects.iter().find(|r| cloud.check(r).is_ok()).unwrap();
        cloud_connect(&emu.gateway, &connector, &d.url, &as_used(redirect), None).await;
    }
    assert!(host.hits() > hits, "the fresh instance asked the hosts first");
    eprintln!("host corpus on the cloud shape: {seen:?}");
}

/// In the cloud, a redirect no host publishes (any `https` host may be registered) is named to
/// the owner before Cognito's sign-in, and the sign-in is bound to the browser that saw it: the
/// sign-in link taken from that page and opened elsewhere sends the code nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unpublished_redirect_is_named_before_sign_in_and_bound_to_its_browser() {
    let Some(acct) = account().await else { return };
    let template = Template::load();
    let emu = Emulator::start(&template, &acct.resources, &acct.base_env).await;
    emu.wait_ready().await;
    let connector = template.output("McpConnectorUrl", &acct.resources, &emu.gateway);
    let http = http();
    let redirect = "https://app.example.net/oauth/callback";
    let reg = http
        .post(format!("{}/register", emu.gateway))
        .json(&json!({"client_name": "Example app", "redirect_uris": [redirect]}))
        .send()
        .await
        .unwrap();
    assert_eq!(reg.status(), 201);
    let client_id = reg.json::<Value>().await.unwrap()["client_id"].as_str().unwrap().to_owned();
    let (_, challenge) = pkce();
    let start = || async {
        let q = authorize_query(&client_id, redirect, &challenge, &connector, None);
        let page = http.get(format!("{}/authorize", emu.gateway)).query(&q).send().await.unwrap();
        assert_eq!(page.status(), 200, "a page, not a redirect to the sign-in");
        let cookie = page.headers()["set-cookie"].to_str().unwrap().to_owned();
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Path=/oauth/callback"),
            "{cookie}"
        );
        let html = page.text().await.unwrap();
        assert!(html.contains("goes to <code>app.example.net</code>"), "{html}");
        let link = html.split("<a href=\"").nth(1).unwrap().split('"').next().unwrap().replace("&amp;", "&");
        (cookie.split(';').next().unwrap().to_owned(), link)
    };
    // Another browser (no cookie): Cognito signs in, the callback sends nothing to the client.
    let (_, link) = start().await;
    let cognito = http.get(&link).send().await.unwrap();
    let callback = cognito.headers()["location"].to_str().unwrap().to_owned();
    let res = http.get(&callback).send().await.unwrap();
    assert_eq!(res.status(), 400);
    assert!(res.headers().get("location").is_none());
    assert!(res.text().await.unwrap().contains("started in another browser"));
    // The browser that saw the page: sent back with the code.
    let (cookie, link) = start().await;
    let cognito = http.get(&link).send().await.unwrap();
    let callback = cognito.headers()["location"].to_str().unwrap().to_owned();
    let res = http.get(&callback).header("cookie", cookie).send().await.unwrap();
    assert_eq!(res.status(), 302);
    back_at(res.headers()["location"].to_str().unwrap(), redirect);

    // An app client made before the facade owned the callback (its redirect among Cognito's
    // callbacks, not the facade's): refused with what to do, never sent on without `iss`.
    let cognito = aws_sdk_cognitoidentityprovider::Client::new(&acct.aws);
    let old = cognito
        .create_user_pool_client()
        .user_pool_id(&acct.resources.user_pool)
        .client_name("dcr-0123456789abcdef-2026010100-01234567")
        .allowed_o_auth_flows_user_pool_client(true)
        .allowed_o_auth_flows(aws_sdk_cognitoidentityprovider::types::OAuthFlowType::Code)
        .callback_urls("https://claude.ai/api/mcp/auth_callback")
        .send()
        .await
        .unwrap();
    let old_id = old.user_pool_client().unwrap().client_id().unwrap().to_owned();
    let q = authorize_query(&old_id, "https://claude.ai/api/mcp/auth_callback", &challenge, &connector, None);
    let res = http.get(format!("{}/authorize", emu.gateway)).query(&q).send().await.unwrap();
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "invalid_client");
    assert!(body["error_description"].as_str().unwrap().contains("remove the connector and add it again"), "{body}");
    // A client id Cognito's API would refuse (`[\w+]+`) is never sent to it: 400, not 503.
    let q = authorize_query("not a cognito id!", redirect, &challenge, &connector, None);
    let res = http.get(format!("{}/authorize", emu.gateway)).query(&q).send().await.unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(res.json::<Value>().await.unwrap()["error"], "invalid_client");
}
