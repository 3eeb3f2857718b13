//! The hosts' own programs, at their pinned versions (`infra/hosts/`, `infra/conformance/`),
//! against the local server: each connects with the exact configuration `docs/hosts.md` gives
//! for it (the snippet in the page is the test's input), lists the tools and calls
//! `list_graph_sessions` — once with the bearer token, once through its own sign-in (it
//! registers, "opens" the consent page through a `BROWSER` script that records the URL, the
//! owner approves the page as its form asks, the redirect reaches the host's loopback listener).
//!
//! What each host sent goes through a recording proxy in front of the server (the server's
//! public URL is the proxy's, so discovery, registration and tokens pass it too) and is compared
//! with `tests/fixtures/hosts/<host>/<version>/*.json` (`FOUNDRY_UPDATE=1` rewrites them): a
//! later version that sends something new shows as a diff. Per-run values (ports, codes, PKCE,
//! state, client ids, tokens, session ids) are replaced by `{name}` before comparing;
//! Authorization values and cookies are never kept.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use foundry_tests::LocalServer;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const PAGE: &str = "docs/hosts.md";
/// The port the page's snippets name (the local server's default).
const PAGE_URL: &str = "http://127.0.0.1:8787";
pub(crate) const MCP_REMOTE: Host = Host { package: "mcp-remote", pins: "hosts", fixtures: "mcp-remote" };
pub(crate) const INSPECTOR: Host =
    Host { package: "@modelcontextprotocol/inspector", pins: "conformance", fixtures: "inspector-cli" };
pub(crate) const CODEX: Host = Host { package: "@openai/codex", pins: "hosts", fixtures: "codex" };
/// How long a host may take for one step (they take well under a second here).
pub(crate) const STEP: Duration = Duration::from_secs(30);
/// How long one host's whole run may take, from its start to the tool call's answer (sign-in
/// included): docs/results.md states it.
pub(crate) const RUN: Duration = Duration::from_secs(90);

/// `run` (one host's run), failing past [`RUN`].
pub(crate) async fn within<T>(host: &str, run: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(RUN, run).await.unwrap_or_else(|_| panic!("{host} took more than {RUN:?}"))
}

/// A host's npm package, the folder under `infra/` that pins it, and its fixtures' folder under
/// `tests/fixtures/hosts/`. Its version is read from the pins, so that after a bump
/// (`infra/hosts-bump.sh`) the tests record beside the old version's files.
#[derive(Clone, Copy)]
pub(crate) struct Host {
    pub(crate) package: &'static str,
    pub(crate) pins: &'static str,
    pub(crate) fixtures: &'static str,
}

impl Host {
    /// The version `infra/<pins>/package.json` pins.
    pub(crate) fn version(&self) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra").join(self.pins).join("package.json");
        let pins: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let version = pins["dependencies"][self.package].as_str();
        version.unwrap_or_else(|| panic!("{} pins no {}", path.display(), self.package)).to_owned()
    }

    /// `<fixtures>/<version>`.
    fn folder(&self) -> String {
        format!("{}/{}", self.fixtures, self.version())
    }
}

/// A tool path from the environment (`infra/test.sh` exports it), or `None` after a loud skip;
/// under `CI=true` a missing path fails the test.
pub(crate) fn tool(var: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(p) if Path::new(&p).exists() => Some(PathBuf::from(p)),
        _ => {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{var} not set under CI=true");
            eprintln!("\n*** SKIPPING: {var} not set; ./infra/test.sh installs the pinned hosts. ***\n");
            None
        }
    }
}

fn page() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(PAGE)).unwrap()
}

/// The fenced block of `docs/hosts.md` whose info string ends with `tag`.
fn snippet(tag: &str) -> String {
    let page = page();
    let mut lines = page.lines().skip_while(|l| !(l.starts_with("```") && l.split_whitespace().last() == Some(tag)));
    assert!(lines.next().is_some(), "{PAGE} has no block tagged {tag}");
    let body: Vec<&str> = lines.take_while(|l| !l.starts_with("```")).collect();
    body.join("\n")
}

/// A shell command line split into words the way `sh` splits this page's (double quotes
/// only), with `$FOUNDRY_TOKEN` expanded.
fn shell_words(line: &str, token: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '"' => (quoted, any) = (!quoted, true),
            c if c.is_whitespace() && !quoted => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            c => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    words.into_iter().map(|w| w.replace("$FOUNDRY_TOKEN", token)).collect()
}

/// A server behind a recording proxy: the local server (which announces the proxy's URL, so
/// every request a host makes passes it), or the cloud shape's gateway (`hosts_cloud`: only
/// what is sent to the proxy's URL, which is every request of a host given a bearer token).
pub(crate) struct Recorded {
    /// The local server, when it is the one behind the proxy.
    server: Option<LocalServer>,
    /// The proxy's base URL (what the host is given).
    pub(crate) base: String,
    /// A chat's bearer token for the server behind.
    pub(crate) token: String,
    /// The test's folder (the hosts' scratch `HOME`s go under it).
    pub(crate) dir: PathBuf,
    log: Arc<Mutex<Vec<Value>>>,
}

#[derive(Clone)]
struct Forward {
    target: String,
    http: reqwest::Client,
    log: Arc<Mutex<Vec<Value>>>,
}

/// A recording proxy to `target` on `listener`: its log.
fn proxy(listener: tokio::net::TcpListener, target: String) -> Arc<Mutex<Vec<Value>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let http = foundry_tests::http_builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let forward = Forward { target, http, log: log.clone() };
    let app = axum::Router::new().fallback(forward_one).with_state(forward);
    tokio::spawn(async move { axum::serve(listener, app).await });
    log
}

impl Recorded {
    pub(crate) async fn start(name: &str) -> Self {
        Self::start_with(name, |c| c).await
    }

    /// [`Self::start`] with the server's configuration changed by `config` first.
    pub(crate) async fn start_with(name: &str, config: impl FnOnce(local::LocalConfig) -> local::LocalConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let public = base.clone();
        let server = LocalServer::start(name, move |c| {
            let mut c = config(c);
            c.public_url = Some(public);
            c
        })
        .await;
        let log = proxy(listener, format!("http://{}", server.addr));
        let (token, dir) = (server.token.clone(), server.dir.clone());
        Self { server: Some(server), base, token, dir, log }
    }

    /// A recording proxy in front of `target` (a gateway's base URL) for hosts given `token`;
    /// their scratch folders in `dir`.
    pub(crate) async fn in_front_of(target: &str, token: &str, dir: &Path) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let log = proxy(listener, target.trim_end_matches('/').to_owned());
        Self { server: None, base, token: token.to_owned(), dir: dir.to_owned(), log }
    }

    /// No proxy: hosts are given `target` itself (the cloud shape's sign-in, whose metadata
    /// names the gateway's own URLs: past its first request a host would not pass a proxy).
    /// Nothing is recorded.
    pub(crate) fn direct(target: &str, dir: &Path) -> Self {
        let base = target.trim_end_matches('/').to_owned();
        Self { server: None, base, token: String::new(), dir: dir.to_owned(), log: Arc::default() }
    }

    /// The local server's own address and its owner's token (where the owner approves a
    /// consent page the host opened).
    pub(crate) fn owner(&self) -> (std::net::SocketAddr, String) {
        (self.local().addr, self.local().owner_token.clone())
    }

    /// How many `tools/call`s of `tool` passed the proxy and were answered 200.
    pub(crate) fn calls_of(&self, tool: &str) -> usize {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|e| {
                e["body"]["method"] == "tools/call" && e["body"]["params"]["name"] == tool && e["status"] == 200
            })
            .count()
    }

    /// The local server behind the proxy (the sign-in tests' consent page is its).
    fn local(&self) -> &LocalServer {
        self.server.as_ref().expect("the local server is behind this proxy")
    }

    /// Stops the local server, if it is the one behind.
    pub(crate) async fn stop(self) {
        if let Some(server) = self.server {
            server.stop().await;
        }
    }

    /// The snippet's text with the page's URL replaced by the proxy's.
    fn pointed(&self, text: &str) -> String {
        text.replace(PAGE_URL, &self.base)
    }

    /// The owner approves the consent page at `url` (what the host asked the browser to open)
    /// as a browser does: the panel's session cookie, the page, its form's POST; then the
    /// browser follows the redirect to the host's loopback callback. Straight to the server,
    /// not through the proxy: the record is the host's.
    async fn approve(&self, url: &str) {
        if self.server.is_none() {
            return through_the_facade(url).await;
        }
        let http = foundry_tests::http_builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let direct = url.replacen(&self.base, &format!("http://{}", self.local().addr), 1);
        assert_ne!(direct, url, "the consent page is the server's: {url}");
        let session = http
            .post(format!("http://{}/oauth/session", self.local().addr))
            .bearer_auth(&self.local().owner_token)
            .send()
            .await
            .unwrap();
        assert_eq!(session.status(), 204, "the owner's session");
        let cookie = session.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
        let page = http.get(&direct).header("cookie", &cookie).send().await.unwrap();
        assert_eq!(page.status(), 200, "the consent page for {url}");
        let html = page.text().await.unwrap();
        let csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
        let answer = http
            .post(format!("http://{}/oauth/authorize", self.local().addr))
            .header("cookie", &cookie)
            .form(&[("csrf", csrf.as_str()), ("decision", "allow")])
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 303, "the owner's Allow");
        let callback = answer.headers()["location"].to_str().unwrap().to_owned();
        at_the_callback(&http, &callback).await;
    }

    /// What the host sent: the consent URL it asked the browser to open (its query is what it
    /// sends to `/oauth/authorize`), its requests in the order they arrived, and apart from them
    /// its `GET`s of the MCP URL (the event stream a client may open beside its next request,
    /// so their place in the order varies from run to run; the server answers 405).
    pub(crate) fn record(&self, opened: Option<&str>) -> String {
        self.record_as(opened, Order::Arrival)
    }

    /// [`Self::record`] for a host that sends its requests at once: sorted, their JSON-RPC ids
    /// and progress tokens (numbered in the order the host's tasks ran) replaced by `{id}` and
    /// `{progressToken}`.
    pub(crate) fn record_as(&self, opened: Option<&str>, order: Order) -> String {
        let opened = opened.map(|url| {
            let u = url::Url::parse(url).unwrap();
            json!({"path": u.path(), "query": query_pairs(u.query())})
        });
        let (gets, mut requests): (Vec<Value>, Vec<Value>) =
            self.log.lock().unwrap().iter().cloned().partition(|e| e["method"] == "GET" && e["path"] == "/mcp");
        if order == Order::Concurrent {
            for e in &mut requests {
                if e["body"].get("id").is_some() {
                    e["body"]["id"] = json!("{id}");
                }
                if let Some(token) = e["body"].pointer_mut("/params/_meta/progressToken") {
                    *token = json!("{progressToken}");
                }
            }
            requests.sort_by_cached_key(Value::to_string);
        }
        let all = json!({"opened": opened, "requests": requests, "gets_of_the_mcp_url": gets});
        serde_json::to_string_pretty(&all).unwrap() + "\n"
    }
}

/// The browser at the redirect to the host's loopback `callback`. mcp-remote asks for the
/// browser before its callback listener is up (a person takes longer than that to click): the
/// redirect waits for the listener.
async fn at_the_callback(http: &reqwest::Client, callback: &str) {
    let landed = foundry_tests::wait_until("the host's callback listener", STEP, || async {
        match http.get(callback).send().await {
            Err(e) if e.is_connect() => None,
            answer => Some(answer.unwrap()),
        }
    })
    .await;
    assert!(landed.status().is_success(), "the host's callback {callback}: {}", landed.status());
}

/// The cloud shape's sign-in at `url` (the stack's `/authorize`, what the host asked the browser
/// to open) as a browser does it: the facade's page naming where the code goes when it shows one
/// (its cookie kept for the callback), Cognito's hosted sign-in (emulated: it signs the owner in
/// at once), the facade's callback, then the host's loopback callback.
async fn through_the_facade(url: &str) {
    let http = foundry_tests::http_builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let asked = url::Url::parse(url).unwrap();
    let redirect = asked.query_pairs().find(|(k, _)| k == "redirect_uri").expect("a redirect_uri").1.into_owned();
    let (mut next, mut cookie, mut cognito) = (url.to_owned(), None::<String>, false);
    for _ in 0..6 {
        cognito |= next.contains("/oauth2/authorize");
        let mut req = http.get(&next);
        if let Some(c) = &cookie {
            req = req.header("cookie", c);
        }
        let res = req.send().await.unwrap();
        if res.status() == 200 {
            // The facade's page for a redirect no host publishes: its link goes on to Cognito.
            let set = res.headers()["set-cookie"].to_str().unwrap();
            cookie = Some(set.split(';').next().unwrap().to_owned());
            let html = res.text().await.unwrap();
            next = html.split("<a href=\"").nth(1).unwrap().split('"').next().unwrap().replace("&amp;", "&");
            continue;
        }
        let status = res.status();
        assert!(status.is_redirection(), "{next}: {status} {}", res.text().await.unwrap_or_default());
        next = res.headers()["location"].to_str().unwrap().to_owned();
        if next.starts_with(&redirect) {
            assert!(cognito, "the sign-in went through Cognito's /oauth2/authorize");
            return at_the_callback(&http, &next).await;
        }
    }
    panic!("the sign-in did not reach {redirect}: last {next}");
}

/// How a host's requests are kept: as they arrived, or sorted (a host that sends at once).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    Arrival,
    Concurrent,
}

/// Forwards one request to the server and records it.
async fn forward_one(State(f): State<Forward>, req: axum::extract::Request) -> axum::response::Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 4 << 20).await.unwrap_or_default();
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let mut out = f.http.request(parts.method.clone(), format!("{}{path_and_query}", f.target));
    for (name, value) in &parts.headers {
        if !matches!(name.as_str(), "host" | "content-length" | "connection") {
            out = out.header(name, value);
        }
    }
    let answer = out.body(bytes.clone()).send().await.unwrap();
    let status = answer.status();
    let mut headers = Map::new();
    for (name, value) in &parts.headers {
        let v = value.to_str().unwrap_or("<not text>");
        let kept = match name.as_str() {
            "host" | "content-length" | "connection" => continue,
            "authorization" => format!("{} {{redacted}}", v.split(' ').next().unwrap_or("")),
            "cookie" => "{redacted}".to_owned(),
            // The product and version, not the machine's operating system after them.
            "user-agent" => v.split(" (").next().unwrap_or(v).to_owned(),
            n => normalise(n, v),
        };
        headers.insert(name.as_str().to_owned(), Value::String(kept));
    }
    let content_type = parts.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    let body = if bytes.is_empty() {
        Value::Null
    } else if content_type.starts_with("application/x-www-form-urlencoded") {
        query_pairs(Some(&String::from_utf8_lossy(&bytes)))
    } else {
        serde_json::from_slice(&bytes).map_or_else(|_| json!("<not JSON>"), normalise_json)
    };
    let mut entry = json!({"method": parts.method.as_str(), "path": parts.uri.path(), "headers": headers});
    if let Some(q) = parts.uri.query() {
        entry["query"] = query_pairs(Some(q));
    }
    entry["body"] = body;
    entry["status"] = json!(status.as_u16());
    f.log.lock().unwrap().push(entry);
    let mut res = axum::response::Response::builder().status(status);
    for (name, value) in answer.headers() {
        if !matches!(name.as_str(), "content-length" | "transfer-encoding" | "connection") {
            res = res.header(name, value);
        }
    }
    res.body(axum::body::Body::from(answer.bytes().await.unwrap())).unwrap()
}

/// A query or form as `[[name, value], …]` in the order sent, values normalised.
fn query_pairs(q: Option<&str>) -> Value {
    Value::Array(
        url::form_urlencoded::parse(q.unwrap_or("").as_bytes()).map(|(k, v)| json!([k, normalise(&k, &v)])).collect(),
    )
}

/// Names whose values differ on every run.
const PER_RUN: &[&str] = &[
    "code",
    "code_verifier",
    "code_challenge",
    "state",
    "access_token",
    "refresh_token",
    "token",
    "csrf",
    "client_secret",
    "mcp-session-id",
    "client_id_issued_at",
    "client_secret_expires_at",
    "threadId",
];

fn normalise(name: &str, value: &str) -> String {
    if PER_RUN.contains(&name) {
        return format!("{{{name}}}");
    }
    if name == "client_id" && value.starts_with("local-") {
        return "{client_id}".to_owned();
    }
    ports(value)
}

fn normalise_json(v: Value) -> Value {
    fn walk(key: &str, v: Value) -> Value {
        match v {
            Value::String(s) => Value::String(normalise(key, &s)),
            Value::Array(a) => Value::Array(a.into_iter().map(|x| walk(key, x)).collect()),
            Value::Object(o) => Value::Object(o.into_iter().map(|(k, x)| (k.clone(), walk(&k, x))).collect()),
            other => other,
        }
    }
    walk("", v)
}

/// Loopback ports (the proxy's, the host's callback listener) become `{port}`.
fn ports(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) =
        ["127.0.0.1:", "localhost:", "[::1]:"].iter().filter_map(|h| rest.find(h).map(|i| i + h.len())).min()
    {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("{port}");
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// Compares the record with `tests/fixtures/hosts/<host>/<version>/<file>` (or rewrites it).
pub(crate) fn pinned(host: &Host, file: &str, record: &str) {
    let path = format!("tests/fixtures/hosts/{}/{file}", host.folder());
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(&path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    if !foundry_tests::update_requested() {
        // The first line that differs, so the change reads from the failure itself.
        let was = std::fs::read_to_string(&file).unwrap_or_default();
        if let Some((n, (a, b))) = was.lines().zip(record.lines()).enumerate().find(|(_, (a, b))| a != b) {
            panic!("{path} line {}: pinned {a:?}, sent now {b:?}\nnow:\n{record}", n + 1);
        }
    }
    foundry_tests::pinned(&path, record);
}

/// A scratch `HOME` and a `BROWSER` script that records the URL it is asked to open into
/// `<dir>/opened`.
struct Desk {
    home: PathBuf,
    browser: PathBuf,
    opened: PathBuf,
}

impl Desk {
    fn new(dir: &Path) -> Self {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let home = dir.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let opened = dir.join("opened");
        let browser = dir.join("browser.sh");
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o700).open(&browser).unwrap();
        writeln!(f, "#!/bin/sh\nprintf '%s\\n' \"$1\" >> '{}'", opened.display()).unwrap();
        drop(f);
        Self { home, browser, opened }
    }

    /// The host's program with only this desk's environment (no display: the opener falls to
    /// `BROWSER`).
    fn command(&self, node: &Path) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(node);
        c.env_clear()
            .env("HOME", &self.home)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("BROWSER", &self.browser)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        c
    }

    /// The first URL the host asked the browser to open.
    async fn opened_url(&self, host: &str) -> String {
        foundry_tests::wait_until(&format!("{host} to open its sign-in page"), STEP, || async {
            let text = std::fs::read_to_string(&self.opened).ok()?;
            text.lines().next().map(str::to_owned)
        })
        .await
    }
}

/// A stdio MCP client's side of a host process: one JSON-RPC message a line.
struct Stdio {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Stdio {
    fn spawn(mut c: tokio::process::Command) -> Self {
        let mut child = c.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, stdin, lines }
    }

    async fn send(&mut self, v: Value) {
        self.stdin.write_all(format!("{v}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// The answer to request `id` (notifications before it are skipped).
    async fn answer(&mut self, id: u64) -> Value {
        let lines = &mut self.lines;
        tokio::time::timeout(STEP, async {
            loop {
                let line = lines.next_line().await.unwrap().expect("the host's stdout closed before its answer");
                let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                if v["id"] == json!(id) {
                    return v;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no answer to request {id} within {STEP:?}"))
    }

    /// Closes stdin (the host's end of the session) and waits for it to exit.
    async fn close(mut self) -> String {
        drop(self.stdin);
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = tokio::time::timeout(STEP, e.read_to_string(&mut err)).await;
        }
        let _ = tokio::time::timeout(STEP, self.child.wait()).await;
        err
    }
}

/// initialize → tools/list → tools/call list_graph_sessions over stdio, asserting each answer.
/// `before_answer` runs between sending initialize and reading its answer (the sign-in).
async fn stdio_session<F: std::future::Future<Output = ()>>(host: &mut Stdio, before_answer: F) {
    host.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "foundry-tests", "version": "1"}}}))
        .await;
    before_answer.await;
    let init = host.answer(1).await;
    assert_eq!(init["result"]["serverInfo"]["name"], "foundry-connect", "{init}");
    host.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    host.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    let list = host.answer(2).await;
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"list_graph_sessions"), "{list}");
    host.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "list_graph_sessions", "arguments": {}}}))
        .await;
    let call = host.answer(3).await;
    assert_demo_project(&call["result"]);
}

fn assert_demo_project(result: &Value) {
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["projects"][0]["name"], "Demo project", "{result}");
}

/// mcp-remote's `args` from the page's block `tag`, after the package itself.
fn mcp_remote_args(s: &Recorded, tag: &str) -> (Vec<String>, Map<String, Value>) {
    let config: Value = serde_json::from_str(&s.pointed(&snippet(tag))).unwrap();
    let server = &config["mcpServers"]["foundry-connect"];
    assert_eq!(server["command"], "npx", "{tag}");
    let args: Vec<String> = server["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
    let pin = format!("mcp-remote@{}", MCP_REMOTE.version());
    let at = args.iter().position(|a| *a == pin).unwrap_or_else(|| panic!("the page pins {pin}"));
    (args[at + 1..].to_vec(), server["env"].as_object().cloned().unwrap_or_default())
}

/// mcp-remote 0.15.1 started by the page's bearer configuration (pointed at `s`'s proxy):
/// it proxies initialize, tools/list and a `list_graph_sessions` call.
pub(crate) async fn mcp_remote_with_the_bearer_header(s: &Recorded, node: &Path, proxy: &Path) {
    let desk = Desk::new(&s.dir);
    let (args, env) = mcp_remote_args(s, "mcp-remote-bearer");
    let mut c = desk.command(node);
    c.arg(proxy).args(&args);
    for (k, v) in env {
        assert_eq!(v, "<the bearer token>", "the page's placeholder for {k}");
        c.env(k, &s.token);
    }
    let mut host = Stdio::spawn(c);
    stdio_session(&mut host, async {}).await;
    let err = host.close().await;
    assert!(!Path::new(&desk.opened).exists(), "with a token, no sign-in: {err}");
}

/// mcp-remote 0.15.1 as a stdio host's configuration starts it with the page's bearer header:
/// it proxies initialize, tools/list and a tool call.
#[tokio::test]
async fn mcp_remote_connects_with_the_pages_bearer_header_and_calls_a_tool() {
    let (Some(node), Some(proxy)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_MCP_REMOTE")) else { return };
    let s = Recorded::start("mcp-remote-bearer").await;
    within("mcp-remote", mcp_remote_with_the_bearer_header(&s, &node, &proxy)).await;
    pinned(&MCP_REMOTE, "requests-bearer.json", &s.record(None));
    s.stop().await;
}

/// mcp-remote 0.15.1 started by the page's sign-in configuration (pointed at `s`): it signs in
/// (discovery, registration, the consent page through `BROWSER`, the owner's approval, the code
/// at its loopback callback), then proxies initialize, tools/list and a call. The URL it opened.
pub(crate) async fn mcp_remote_signs_in(s: &Recorded, node: &Path, proxy: &Path) -> String {
    let desk = Desk::new(&s.dir);
    let (args, env) = mcp_remote_args(s, "mcp-remote-sign-in");
    assert!(env.is_empty() && !args.iter().any(|a| a.contains("Authorization")), "the sign-in snippet has no token");
    let mut c = desk.command(node);
    c.arg(proxy).args(&args);
    let mut host = Stdio::spawn(c);
    let opened = Arc::new(Mutex::new(String::new()));
    stdio_session(&mut host, async {
        let url = desk.opened_url("mcp-remote").await;
        s.approve(&url).await;
        *opened.lock().unwrap() = url;
    })
    .await;
    host.close().await;
    let tokens = std::fs::read_dir(desk.home.join(".mcp-auth")).map(|d| d.count()).unwrap_or(0);
    assert!(tokens > 0, "mcp-remote keeps its sign-in in ~/.mcp-auth");
    opened.lock().unwrap().clone()
}

/// mcp-remote 0.15.1 without a token signs in by itself: discovery, registration, the consent
/// page through `BROWSER`, the owner's Allow, the code at its loopback callback; then the call.
#[tokio::test]
async fn mcp_remote_signs_in_through_the_consent_page_and_calls_a_tool() {
    let (Some(node), Some(proxy)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_MCP_REMOTE")) else { return };
    let s = Recorded::start("mcp-remote-sign-in").await;
    let url = within("mcp-remote", mcp_remote_signs_in(&s, &node, &proxy)).await;
    pinned(&MCP_REMOTE, "requests-sign-in.json", &s.record(Some(&url)));
    s.stop().await;
}

/// The page's Inspector command lines (block `tag`), each one's `npx -y
/// @modelcontextprotocol/inspector@2.12.0` replaced by the pinned launcher: their JSON answers,
/// and the URL the first asked the browser to open when `sign_in`.
async fn inspector(
    s: &Recorded,
    desk: &Desk,
    node: &Path,
    cli: &Path,
    tag: &str,
    sign_in: bool,
) -> (Vec<Value>, Option<String>) {
    let (mut answers, mut opened) = (Vec::new(), None);
    for line in snippet(tag).lines() {
        let words = shell_words(&s.pointed(line), &s.token);
        let pin = format!("{}@{}", INSPECTOR.package, INSPECTOR.version());
        assert_eq!(words[..3], ["npx", "-y", pin.as_str()], "{tag}");
        let mut c = desk.command(node);
        c.arg(cli).args(&words[3..]).args(["--format", "json"]).stdin(std::process::Stdio::null());
        if sign_in {
            // In a terminal the CLI opens the browser itself; without a TTY it asks for this.
            c.env("MCP_AUTO_OPEN_ENABLED", "true");
            // A machine without a keychain, as the page says for one.
            assert!(foundry_tests::says(&page(), "`MCP_INSPECTOR_SECRET_STORE=file`"), "{PAGE} names the file store");
            c.env("MCP_INSPECTOR_SECRET_STORE", "file");
        }
        let child = c.spawn().unwrap();
        if sign_in && opened.is_none() {
            let url = desk.opened_url("the Inspector").await;
            s.approve(&url).await;
            opened = Some(url);
        }
        let out = tokio::time::timeout(STEP, child.wait_with_output()).await.expect("the Inspector finishes").unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "inspector: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        answers.push(serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}")));
    }
    (answers, opened)
}

/// The two answers of the page's Inspector lines: the tool list, then the call's result.
fn assert_lists_and_calls(answers: &[Value]) {
    let [list, call] = answers else { panic!("two commands, two answers: {answers:?}") };
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"list_graph_sessions"), "{list}");
    assert_demo_project(&call["result"]);
}

/// The Inspector CLI 2.12.0 (on Node 22) runs the page's bearer command lines (pointed at
/// `s`'s proxy): it lists the tools and calls `list_graph_sessions`.
pub(crate) async fn inspector_with_the_bearer_header(s: &Recorded, node: &Path, cli: &Path) {
    let desk = Desk::new(&s.dir);
    let (answers, _) = inspector(s, &desk, node, cli, "inspector-bearer", false).await;
    assert_lists_and_calls(&answers);
    assert!(!desk.opened.exists(), "with a token, no sign-in");
}

/// The Inspector CLI 2.12.0 (on Node 22) with the page's bearer command lines lists the tools
/// and calls `list_graph_sessions`.
#[tokio::test]
async fn the_inspector_cli_connects_with_the_pages_bearer_header_and_calls_a_tool() {
    let (Some(node), Some(cli)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_INSPECTOR_CLI")) else { return };
    let s = Recorded::start("inspector-bearer").await;
    within("the Inspector", inspector_with_the_bearer_header(&s, &node, &cli)).await;
    pinned(&INSPECTOR, "requests-bearer.json", &s.record(None));
    s.stop().await;
}

/// The Inspector CLI 2.12.0 runs the page's sign-in command lines (pointed at `s`): the first
/// signs in (registration, the consent page through `BROWSER`, the owner's approval, its
/// loopback callback) and lists the tools, the next calls one on the sign-in it kept. The URL
/// it opened.
pub(crate) async fn inspector_signs_in(s: &Recorded, node: &Path, cli: &Path) -> Option<String> {
    let desk = Desk::new(&s.dir);
    let (answers, opened) = inspector(s, &desk, node, cli, "inspector-sign-in", true).await;
    assert_lists_and_calls(&answers);
    assert_eq!(std::fs::read_to_string(&desk.opened).unwrap().lines().count(), 1, "one sign-in for both commands");
    opened
}

/// The Inspector CLI 2.12.0 without a token signs in by itself (registration, the consent page
/// through `BROWSER`, the owner's Allow, its loopback callback) and lists the tools; its next
/// command calls one with the sign-in it kept.
#[tokio::test]
async fn the_inspector_cli_signs_in_through_the_consent_page_and_calls_a_tool() {
    let (Some(node), Some(cli)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_INSPECTOR_CLI")) else { return };
    let s = Recorded::start("inspector-sign-in").await;
    let opened = within("the Inspector", inspector_signs_in(&s, &node, &cli)).await;
    pinned(&INSPECTOR, "requests-sign-in.json", &s.record(opened.as_deref()));
    s.stop().await;
}

/// `codex mcp add` from the page's block `tag` (the token in the variable it names, if any);
/// when it signs in, the owner approves the page it opened: that URL.
async fn codex_add(s: &Recorded, desk: &Desk, node: &Path, codex: &Path, tag: &str) -> Option<String> {
    let words = shell_words(&s.pointed(&snippet(tag)), &s.token);
    assert_eq!(words[..3], ["codex", "mcp", "add"], "{tag}");
    let mut add = desk.command(node);
    codex_env(&mut add, codex, s);
    if let Some(variable) = words.iter().skip_while(|w| *w != "--bearer-token-env-var").nth(1) {
        add.env(variable, &s.token);
    }
    let child = add.args(&words[1..]).stdin(std::process::Stdio::null()).spawn().unwrap();
    let opened = if words.iter().any(|w| w == "--oauth-client-registration") {
        let url = desk.opened_url("codex").await;
        s.approve(&url).await;
        Some(url)
    } else {
        None
    };
    let added = tokio::time::timeout(STEP, child.wait_with_output()).await.expect("codex mcp add finishes").unwrap();
    assert!(added.status.success(), "codex mcp add: {}", String::from_utf8_lossy(&added.stderr));
    opened
}

/// Codex's program with its model API at a closed loopback port (it would open a connection
/// to it when a thread starts), and the bearer variable of the page's bearer block set.
fn codex_env(c: &mut tokio::process::Command, codex: &Path, s: &Recorded) {
    c.arg(codex).env("OPENAI_BASE_URL", "http://127.0.0.1:1/v1").env("FOUNDRY_TOKEN", &s.token);
}

/// `codex app-server`: a thread, the MCP servers' status (with their tools), and
/// `mcpServer/tool/call list_graph_sessions` — a tool call without a model.
async fn codex_lists_and_calls(s: &Recorded, desk: &Desk, node: &Path, codex: &Path, env_token: bool) {
    let mut c = desk.command(node);
    codex_env(&mut c, codex, s);
    if !env_token {
        c.env_remove("FOUNDRY_TOKEN");
    }
    c.arg("app-server");
    let mut host = Stdio::spawn(c);
    host.send(
        json!({"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "foundry-tests", "version": "1"}}}),
    )
    .await;
    host.answer(1).await;
    host.send(json!({"method": "initialized"})).await;
    host.send(json!({"id": 2, "method": "thread/start", "params": {}})).await;
    let thread = host.answer(2).await;
    let thread_id = thread["result"]["thread"]["id"].as_str().unwrap_or_else(|| panic!("{thread}")).to_owned();
    host.send(json!({"id": 3, "method": "mcpServerStatus/list", "params": {}})).await;
    let status = host.answer(3).await;
    let server =
        status["result"]["data"].as_array().unwrap().iter().find(|d| d["name"] == "foundry-connect").unwrap().clone();
    assert_eq!(server["serverInfo"]["name"], "foundry-connect", "{status}");
    assert!(server["tools"]["list_graph_sessions"].is_object(), "{status}");
    host.send(json!({"id": 4, "method": "mcpServer/tool/call", "params": {
        "server": "foundry-connect", "threadId": thread_id, "tool": "list_graph_sessions", "arguments": {}}}))
        .await;
    let call = host.answer(4).await;
    assert_demo_project(&call["result"]);
    host.close().await;
}

/// Codex 0.171.0, configured with the page's `codex mcp add … --bearer-token-env-var` (pointed
/// at `s`'s proxy), lists the tools and calls `list_graph_sessions` through its app-server.
pub(crate) async fn codex_with_the_bearer_token_variable(s: &Recorded, node: &Path, codex: &Path) {
    let desk = Desk::new(&s.dir);
    assert_eq!(codex_add(s, &desk, node, codex, "codex-bearer").await, None, "with a token, no sign-in");
    codex_lists_and_calls(s, &desk, node, codex, true).await;
}

/// Codex 0.171.0, configured with the page's `codex mcp add … --bearer-token-env-var`, lists the
/// server's tools and calls `list_graph_sessions` through its app-server (`mcpServer/tool/call`:
/// a tool call without a model).
#[tokio::test]
async fn codex_connects_with_the_pages_bearer_token_variable_and_calls_a_tool() {
    let (Some(node), Some(codex)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_CODEX")) else { return };
    let s = Recorded::start("codex-bearer").await;
    within("codex", codex_with_the_bearer_token_variable(&s, &node, &codex)).await;
    // Codex's MCP client sends its lists at once, from two connections (the thread's and the
    // status list's).
    pinned(&CODEX, "requests-bearer.json", &s.record_as(None, Order::Concurrent));
    s.stop().await;
}

/// Codex 0.171.0 with the page's `codex mcp add … --oauth-client-registration dcr` (pointed at
/// `s`): it registers, opens the consent page through `BROWSER`, gets the owner's approval at its
/// loopback callback; then its app-server lists the tools and calls one on the sign-in it kept.
/// The URL it opened.
pub(crate) async fn codex_signs_in(s: &Recorded, node: &Path, codex: &Path) -> Option<String> {
    let desk = Desk::new(&s.dir);
    let opened = codex_add(s, &desk, node, codex, "codex-sign-in").await;
    assert!(opened.is_some(), "codex signs in");
    codex_lists_and_calls(s, &desk, node, codex, false).await;
    opened
}

/// Codex 0.171.0 without a token: the page's `codex mcp add … --oauth-client-registration dcr`
/// registers, opens the consent page through `BROWSER`, gets the owner's Allow at its loopback
/// callback; then its app-server lists the tools and calls one on the sign-in it kept.
#[tokio::test]
async fn codex_signs_in_through_the_consent_page_and_calls_a_tool() {
    let (Some(node), Some(codex)) = (tool("FOUNDRY_CONFORMANCE_NODE"), tool("FOUNDRY_CODEX")) else { return };
    let s = Recorded::start("codex-sign-in").await;
    let opened = within("codex", codex_signs_in(&s, &node, &codex)).await;
    pinned(&CODEX, "requests-sign-in.json", &s.record_as(opened.as_deref(), Order::Concurrent));
    s.stop().await;
}
