//! Connecting to the local server with only its URL, the way an MCP client does it: 401 →
//! protected-resource metadata → authorization-server metadata → registration → the consent
//! page → code + PKCE → tokens → `tools/list`; refresh; and everything that must be refused
//! (unlisted redirect hosts, the owner scope, a wrong verifier, a reused code, floods).
//! Then the official Python MCP SDK's own OAuth client does the whole flow by itself.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use domain::store::RegisterClients;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

struct Client {
    http: reqwest::Client,
    base: String,
    /// The owner's session cookie (`fc_owner=…`), opened with the owner's token.
    owner: String,
}

impl Client {
    async fn json(&self, res: reqwest::Response) -> (u16, Value) {
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.json(self.http.get(format!("{}{path}", self.base)).send().await.unwrap()).await
    }

    async fn register(&self, body: Value) -> (u16, Value) {
        self.json(self.http.post(format!("{}/register", self.base)).json(&body).send().await.unwrap()).await
    }

    /// Registers a client named Claude with the one `redirect`: its client id.
    async fn register_claude(&self, redirect: &str) -> String {
        let (_, reg) = self.register(json!({"client_name": "Claude", "redirect_uris": [redirect]})).await;
        reg["client_id"].as_str().unwrap().to_owned()
    }

    async fn token(&self, form: &[(&str, &str)]) -> (u16, Value) {
        self.json(self.http.post(format!("{}/oauth/token", self.base)).form(form).send().await.unwrap()).await
    }

    /// The authorization request, the consent page, and the owner's click: the redirect's query.
    async fn authorize(&self, query: &[(&str, &str)], decision: &str) -> HashMap<String, String> {
        let page = self
            .http
            .get(format!("{}/oauth/authorize", self.base))
            .header("cookie", &self.owner)
            .query(query)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200, "the consent page");
        let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
        assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"), "{csp}");
        let html = page.text().await.unwrap();
        assert!(!html.contains("<script"), "the consent page runs no script");
        let csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
        let res = self
            .http
            .post(format!("{}/oauth/authorize", self.base))
            .header("cookie", &self.owner)
            .form(&[("csrf", csrf.as_str()), ("decision", decision)])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 303);
        let location = url::Url::parse(res.headers()["location"].to_str().unwrap()).unwrap();
        // The same anti-forgery token cannot answer twice.
        let again = self
            .http
            .post(format!("{}/oauth/authorize", self.base))
            .header("cookie", &self.owner)
            .form(&[("csrf", csrf.as_str()), ("decision", "allow")])
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 400, "a consent answered twice");
        location.query_pairs().into_owned().collect()
    }

    async fn exchange(&self, code: &str, verifier: &str, redirect: &str, client_id: &str) -> (u16, Value) {
        self.token(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect),
            ("client_id", client_id),
            ("code_verifier", verifier),
        ])
        .await
    }

    async fn mcp(&self, token: &str, body: Value) -> reqwest::Response {
        self.http
            .post(format!("{}/mcp", self.base))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }
}

/// An authorization request's query: code flow, PKCE S256.
fn code_request<'a>(client_id: &'a str, redirect: &'a str, challenge: &'a str) -> [(&'static str, &'a str); 5] {
    [
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
    ]
}

fn pkce() -> (String, String) {
    let verifier = format!("v-{}-{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

/// Opens the owner's session the way the panel does (`POST /oauth/session` with the owner's
/// token): the `Cookie` header value.
async fn owner_session(http: &reqwest::Client, base: &str, owner_token: &str) -> String {
    let res = http.post(format!("{base}/oauth/session")).bearer_auth(owner_token).send().await.unwrap();
    assert_eq!(res.status(), 204, "the owner's session");
    let cookie = res.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Path=/oauth"),
        "{cookie}"
    );
    cookie.split(';').next().unwrap().to_owned()
}

async fn start() -> (foundry_tests::LocalServer, Client) {
    start_with(|c| c).await
}

async fn start_with(
    config: impl FnOnce(local::LocalConfig) -> local::LocalConfig,
) -> (foundry_tests::LocalServer, Client) {
    let running = foundry_tests::LocalServer::start("foundry-oauth", config).await;
    let http = foundry_tests::http_builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let owner = owner_session(&http, &running.base_url, &running.owner_token).await;
    let client = Client { http, base: running.base_url.clone(), owner };
    (running, client)
}

#[tokio::test]
async fn an_mcp_client_connects_to_the_local_server_from_nothing_but_the_url() {
    let (running, c) = start().await;
    let base = c.base.clone();
    // 1. An unauthenticated call: 401 pointing at the protected-resource metadata.
    let res = c
        .http
        .post(&running.mcp_url)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let challenge = res.headers()["www-authenticate"].to_str().unwrap().to_owned();
    let prm_url = challenge.split("resource_metadata=\"").nth(1).unwrap().trim_end_matches('"').to_owned();
    // 2. The protected-resource metadata names this server as the authorization server.
    let prm: Value = c.http.get(&prm_url).send().await.unwrap().json().await.unwrap();
    assert_eq!(prm["resource"], running.mcp_url);
    assert_eq!(prm["authorization_servers"], json!([base]));
    // 3. Its RFC 8414 metadata: S256, the scopes it issues, registration. It is not an OpenID
    // provider (it issues no ID tokens), so OpenID discovery is not there.
    let as_url = prm["authorization_servers"][0].as_str().unwrap();
    assert_eq!(c.get("/.well-known/openid-configuration").await.0, 404);
    for path in ["/.well-known/oauth-authorization-server"] {
        let (status, m) = c.get(path).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(m["issuer"], as_url);
        assert_eq!(m["code_challenge_methods_supported"], json!(["S256"]));
        assert_eq!(m["scopes_supported"], prm["scopes_supported"]);
        assert_eq!(m["token_endpoint_auth_methods_supported"], json!(["none"]));
        assert_eq!(m["registration_endpoint"], format!("{base}/register"));
    }
    // 4. Registration with a loopback redirect (a desktop client), reused when repeated.
    let redirect = "http://127.0.0.1:50123/callback";
    let reg = json!({"client_name": "Desktop client", "redirect_uris": [redirect], "token_endpoint_auth_method": "none",
                     "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]});
    let (status, client) = c.register(reg.clone()).await;
    assert_eq!(status, 201, "{client}");
    assert_eq!(client["token_endpoint_auth_method"], "none");
    assert_eq!(client["redirect_uris"], json!([redirect]));
    let client_id = client["client_id"].as_str().unwrap().to_owned();
    assert_eq!(c.register(reg).await.1["client_id"], client_id, "the same registration made a second client");
    let stored = running.store.get_client(&client_id).await.unwrap().unwrap();
    assert_eq!(stored.redirect_uris, vec![redirect]);
    assert_eq!(stored.scopes, vec!["osfoundry:read", "osfoundry:run"]);
    // 5. Authorization code with PKCE, through the consent page.
    let (verifier, challenge) = pkce();
    let query = [
        ("response_type", "code"),
        ("client_id", client_id.as_str()),
        ("redirect_uri", redirect),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("state", "st-1"),
        ("scope", "osfoundry:read osfoundry:run"),
        ("resource", running.mcp_url.as_str()),
    ];
    let back = c.authorize(&query, "allow").await;
    assert_eq!(back["state"], "st-1");
    assert_eq!(back["iss"], base, "RFC 9207 issuer in the response");
    let code = back["code"].clone();
    // A wrong verifier is refused, and spends the code.
    let (_, other) = pkce();
    let (status, err) = c.exchange(&code, &other, redirect, &client_id).await;
    assert_eq!((status, err["error"].as_str()), (400, Some("invalid_grant")), "{err}");
    let (_, err) = c.exchange(&code, &verifier, redirect, &client_id).await;
    assert_eq!(err["error"], "invalid_grant", "a code worked after a failed exchange");
    // No token yet: no chat has connected (the owner's panel says so).
    let owner = domain::ids::OwnerId::new(local::DEMO_OWNER).unwrap();
    use domain::store::ClientUse;
    assert!(running.store.chat_connections(&owner).await.unwrap().is_empty(), "a failed exchange counted");
    // Again, properly.
    let back = c.authorize(&query, "allow").await;
    let (status, tokens) = c.exchange(&back["code"], &verifier, redirect, &client_id).await;
    assert_eq!(status, 200, "{tokens}");
    // Now one has: the owner API's overview lists it for the panel.
    let overview = c
        .json(c.http.get(format!("{base}/owner/overview")).bearer_auth(&running.owner_token).send().await.unwrap())
        .await
        .1;
    assert_eq!(overview["chats"].as_array().map(Vec::len), Some(1), "{overview}");
    assert_eq!(overview["chats"][0]["client_id"], client_id.as_str());
    assert_eq!(tokens["token_type"], "Bearer");
    let (_, err) = c.exchange(&back["code"], &verifier, redirect, &client_id).await;
    assert_eq!(err["error"], "invalid_grant", "a code was used twice");
    // 6. The token works on the MCP endpoint, as this client.
    let access = tokens["access_token"].as_str().unwrap();
    let res = c.mcp(access, json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    assert_eq!(res.status(), 200);
    let listed: Value = res.json().await.unwrap();
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 9);
    // Its handshake names the host: the overview lists it as signed in with its registration.
    let hello = json!({"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
        "capabilities": {}, "clientInfo": {"name": "oauth-test-host", "version": "9.8.7"}}});
    assert_eq!(c.mcp(access, hello).await.status(), 200);
    let overview = c
        .json(c.http.get(format!("{base}/owner/overview")).bearer_auth(&running.owner_token).send().await.unwrap())
        .await
        .1;
    assert_eq!(overview["hosts"].as_array().map(Vec::len), Some(1), "{overview}");
    let host = &overview["hosts"][0];
    assert_eq!((&host["name"], &host["version"]), (&json!("oauth-test-host"), &json!("9.8.7")), "{host}");
    assert_eq!((&host["sign_in"], &host["client_id"]), (&json!("registration"), &json!(client_id)), "{host}");
    // The refresh token is not an access token…
    let refresh = tokens["refresh_token"].as_str().unwrap();
    assert_eq!(c.mcp(refresh, json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})).await.status(), 401);
    // …but gets a new one.
    let (status, renewed) =
        c.token(&[("grant_type", "refresh_token"), ("refresh_token", refresh), ("client_id", &client_id)]).await;
    assert_eq!(status, 200, "{renewed}");
    let res = c
        .mcp(renewed["access_token"].as_str().unwrap(), json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}))
        .await;
    assert_eq!(res.status(), 200);
    // Another client cannot use this client's refresh token.
    let (_, other_client) = c.register(json!({"redirect_uris": ["http://localhost:7777/cb"]})).await;
    let (status, _) = c
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh),
            ("client_id", other_client["client_id"].as_str().unwrap()),
        ])
        .await;
    assert_eq!(status, 400);
    // Deny sends the user back with access_denied; the owner scope is never granted.
    assert_eq!(c.authorize(&query, "deny").await["error"], "access_denied");
    let mut owner_query = query.to_vec();
    owner_query.retain(|(k, _)| *k != "scope");
    owner_query.push(("scope", "osfoundry:owner"));
    let res = c.http.get(format!("{base}/oauth/authorize")).query(&owner_query).send().await.unwrap();
    assert_eq!(res.status(), 303);
    assert!(res.headers()["location"].to_str().unwrap().contains("error=invalid_scope"));
    // Without PKCE: refused, back at the client.
    let no_pkce: Vec<(&str, &str)> = query.iter().copied().filter(|(k, _)| !k.starts_with("code_challenge")).collect();
    let res = c.http.get(format!("{base}/oauth/authorize")).query(&no_pkce).send().await.unwrap();
    assert!(res.headers()["location"].to_str().unwrap().contains("error=invalid_request"));
    // A redirect URI the client did not register: shown on a page, never followed.
    let mut foreign = query.to_vec();
    foreign.retain(|(k, _)| *k != "redirect_uri");
    foreign.push(("redirect_uri", "http://127.0.0.1:9/evil"));
    let res = c.http.get(format!("{base}/oauth/authorize")).query(&foreign).send().await.unwrap();
    assert_eq!(res.status(), 400);
    assert!(res.headers().get("location").is_none());
    running.stop().await;
}

#[tokio::test]
async fn registrations_are_checked_and_floods_are_refused() {
    let (running, c) = start().await;
    for (body, code, field) in [
        (json!({"redirect_uris": ["javascript:alert(1)"]}), "invalid_redirect_uri", "redirect_uris[0]"),
        (
            json!({"redirect_uris": ["https://claude.ai/api/mcp/auth_callback", "https://*.example.com/cb"]}),
            "invalid_redirect_uri",
            "redirect_uris[1]",
        ),
        (json!({"redirect_uris": ["http://192.168.1.5/cb"]}), "invalid_redirect_uri", "redirect_uris[0]"),
        (json!({"redirect_uris": []}), "invalid_redirect_uri", "redirect_uris"),
        (
            json!({"redirect_uris": ["http://localhost:1/cb"], "scope": "osfoundry:owner"}),
            "invalid_client_metadata",
            "scope",
        ),
        (
            json!({"redirect_uris": ["http://localhost:1/cb"], "grant_types": ["client_credentials"]}),
            "invalid_client_metadata",
            "grant_types",
        ),
    ] {
        let (status, err) = c.register(body.clone()).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(err["error"], code, "{body}");
        assert!(err["error_description"].as_str().unwrap().starts_with(field), "{err}");
    }
    assert!(running.store.list_clients().await.unwrap().is_empty(), "a refused registration left a client");
    // Claude's and ChatGPT's callbacks register (the local server accepts what the cloud does).
    for cb in ["https://claude.ai/api/mcp/auth_callback", "https://chatgpt.com/connector/oauth/abc123"] {
        assert_eq!(c.register(json!({"redirect_uris": [cb]})).await.0, 201, "{cb}");
    }
    // A desktop client that registers again on another loopback port is the same client (any
    // port is accepted on a listed loopback redirect); the answer lists what it asked for. A
    // host's own scope is ignored.
    let desk = |port: u16| {
        json!({"client_name": "Desk", "scope": "claudeai",
               "redirect_uris": [format!("http://127.0.0.1:{port}/cb"), "cursor://anysphere.cursor-mcp/oauth/callback"]})
    };
    let (s1, first) = c.register(desk(5001)).await;
    let (s2, again) = c.register(desk(5002)).await;
    assert_eq!((s1, s2), (201, 201), "{first} {again}");
    assert_eq!(first["client_id"], again["client_id"], "one client for both ports");
    assert_eq!(again["redirect_uris"][0], "http://127.0.0.1:5002/cb");
    // This machine's clients — every loopback address together — register up to loopback's
    // own limit (far above the 5 an address elsewhere gets); the next is refused naming the
    // setting and the number. Through a tunnel (its forwarding header) registrations share the
    // per-source limit, which loopback's did not spend. Registering an existing client still
    // works after both.
    let loopback = oauth::DEFAULT_REGISTRATIONS_PER_LOOPBACK;
    const { assert!(oauth::DEFAULT_REGISTRATIONS_PER_LOOPBACK > oauth::DEFAULT_REGISTRATIONS_PER_SOURCE) };
    let mut created = 3; // Claude's, ChatGPT's and Desk's
    for i in 0.. {
        let from = foundry_tests::registration::client_from(1 + u8::try_from(i % 3).unwrap());
        let (status, why, retry) = register_from(&from, &c.base, &format!("loop-{i}"), None).await;
        if created < loopback {
            assert_eq!(status, 201, "registration {created} from this machine: {why}");
            created += 1;
            continue;
        }
        assert_eq!(status, 429, "past loopback's limit");
        assert_eq!(
            why,
            format!(
                "too many new clients from this machine this hour (at most {loopback}); raise \
                 FOUNDRY_LOOPBACK_REGISTRATIONS_PER_HOUR or retry later"
            )
        );
        assert!(retry.is_some_and(|s| (1..=3600).contains(&s)), "Retry-After: {retry:?}");
        break;
    }
    let tunnel = Some("203.0.113.7");
    for i in 0..oauth::DEFAULT_REGISTRATIONS_PER_SOURCE {
        let (status, why, _) = register_from(&c.http, &c.base, &format!("tunnel-{i}"), tunnel).await;
        assert_eq!(status, 201, "registration {i} through the tunnel: {why}");
    }
    let (status, why, retry) = register_from(&c.http, &c.base, "tunnel-next", Some("203.0.113.8")).await;
    assert_eq!(status, 429, "past the tunnel's limit, whatever address it names");
    assert_eq!(
        why,
        "too many new clients from this address this hour (at most 5); raise \
         FOUNDRY_REGISTRATIONS_PER_SOURCE_PER_HOUR or retry later"
    );
    assert!(retry.is_some());
    assert_eq!(running.store.list_clients().await.unwrap().len(), loopback + oauth::DEFAULT_REGISTRATIONS_PER_SOURCE);
    let (status, _) = c.register(json!({"redirect_uris": ["https://claude.ai/api/mcp/auth_callback"]})).await;
    assert_eq!(status, 201, "reusing a client is not a new registration");
    running.stop().await;
}

/// Registers a client of its own (`path` in its redirect) through `http`, with
/// `X-Forwarded-For: forwarded_for` as a tunnel adds it: the status, the refusal's
/// description and `Retry-After`.
async fn register_from(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    forwarded_for: Option<&str>,
) -> (u16, String, Option<u64>) {
    let mut req =
        http.post(format!("{base}/register")).json(&json!({"redirect_uris": [format!("http://localhost/{path}")]}));
    if let Some(address) = forwarded_for {
        req = req.header("x-forwarded-for", address);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let retry = res.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok());
    let v: Value = res.json().await.unwrap_or(Value::Null);
    (status, v["error_description"].as_str().unwrap_or_default().to_owned(), retry)
}

/// The local registration limits are settings: started with
/// `FOUNDRY_LOOPBACK_REGISTRATIONS_PER_HOUR=2` and `FOUNDRY_REGISTRATIONS_PER_SOURCE_PER_HOUR=1`
/// (read as `main` reads the environment), the server takes two new clients from this machine
/// and one through a tunnel, and names each setting with its number when it refuses.
#[tokio::test]
async fn the_local_registration_limits_are_settings() {
    let env: HashMap<&str, &str> = [
        ("FOUNDRY_DATA_DIR", "/unused"),
        ("FOUNDRY_LOOPBACK_REGISTRATIONS_PER_HOUR", "2"),
        ("FOUNDRY_REGISTRATIONS_PER_SOURCE_PER_HOUR", "1"),
    ]
    .into();
    let from_env = local::LocalConfig::from_env(|k| env.get(k).map(|v| (*v).to_owned())).unwrap();
    let (running, c) = start_with(|c| local::LocalConfig { registrations: from_env.registrations, ..c }).await;
    for i in 0..2 {
        assert_eq!(register_from(&c.http, &c.base, &format!("a{i}"), None).await.0, 201, "{i}");
    }
    let (status, why, _) = register_from(&c.http, &c.base, "a2", None).await;
    assert_eq!(status, 429);
    assert!(
        why.contains("(at most 2); raise FOUNDRY_LOOPBACK_REGISTRATIONS_PER_HOUR"),
        "names the setting and the number: {why}"
    );
    let tunnel = Some("198.51.100.4");
    assert_eq!(register_from(&c.http, &c.base, "t0", tunnel).await.0, 201);
    let (status, why, _) = register_from(&c.http, &c.base, "t1", tunnel).await;
    assert_eq!(status, 429);
    assert!(why.contains("(at most 1); raise FOUNDRY_REGISTRATIONS_PER_SOURCE_PER_HOUR"), "{why}");
    running.stop().await;
}

async fn python_oauth(python_var: &str) {
    let Some(python) = foundry_tests::python::sdk(python_var) else { return };
    let (running, _) = start().await;
    let link = running.demo.chat_link_id.to_string();
    let envs = [
        ("FC_URL", running.mcp_url.as_str()),
        ("FC_LINK", link.as_str()),
        ("FC_OWNER_TOKEN", running.owner_token.as_str()),
    ];
    let seen = foundry_tests::python::oauth_connect(&python, python_var, &envs).await;
    assert_eq!(seen["resource"], running.mcp_url);
    assert!(seen["tasks"].as_u64().unwrap() >= 1, "the demo task is visible through the link");
    // The client it registered is in the registry, with exactly its redirect URI.
    let client = running.store.get_client(seen["client_id"].as_str().unwrap()).await.unwrap().unwrap();
    assert_eq!(client.redirect_uris, vec![seen["redirect_uri"].as_str().unwrap()]);
    running.stop().await;
}

#[tokio::test]
async fn the_python_sdk_2x_oauth_client_connects_with_only_the_url() {
    python_oauth("FOUNDRY_PYTHON_MCP2").await;
}

#[tokio::test]
async fn the_python_sdk_1x_oauth_client_connects_with_only_the_url() {
    python_oauth("FOUNDRY_PYTHON_MCP1").await;
}

/// A flood of authorization requests (unauthenticated, for the same client or others) never
/// evicts a pending consent: the owner's *Allow* on the page they opened first still works, and
/// past the bound for one client new requests are refused instead.
#[tokio::test]
async fn a_flood_of_authorization_requests_never_evicts_the_owners_pending_consent() {
    let (running, c) = start().await;
    let redirect = "http://127.0.0.1:33418/callback";
    let client_id = c.register_claude(redirect).await;
    let (_, challenge) = pkce();
    let query = [
        ("response_type", "code"),
        ("client_id", client_id.as_str()),
        ("redirect_uri", redirect),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("state", "owner"),
    ];
    // The owner opens the consent page…
    let page = c
        .http
        .get(format!("{}/oauth/authorize", c.base))
        .header("cookie", &c.owner)
        .query(&query)
        .send()
        .await
        .unwrap();
    let html = page.text().await.unwrap();
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    // …then 1,100 more requests for the same client arrive (here even with the owner's session,
    // the worst case: without it each is refused at once).
    let mut refused = 0;
    for _ in 0..1_100 {
        let r = c
            .http
            .get(format!("{}/oauth/authorize", c.base))
            .header("cookie", &c.owner)
            .query(&query)
            .send()
            .await
            .unwrap();
        if r.status() != 200 {
            refused += 1;
        }
    }
    assert!(refused > 0, "the flood was never bounded");
    let res = c
        .http
        .post(format!("{}/oauth/authorize", c.base))
        .header("cookie", &c.owner)
        .form(&[("csrf", csrf.as_str()), ("decision", "allow")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 303, "the owner's Allow after the flood");
    let location = res.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.contains("code=") && location.contains("state=owner"), "{location}");
    running.stop().await;
}

/// RFC 6749 §4.1.3 and RFC 8707 at the token endpoint: a code from a request that named its
/// `redirect_uri` is exchanged only with the same one repeated, a `resource` other than this
/// server's MCP URL is `invalid_target`, and the access token names the resource in `aud`.
#[tokio::test]
async fn the_code_exchange_is_bound_to_the_redirect_uri_and_the_token_to_the_resource() {
    let (running, c) = start().await;
    let redirect = "http://127.0.0.1:33419/callback";
    let client_id = c.register_claude(redirect).await;
    let new_code = |challenge: String| {
        let (c, client_id) = (&c, client_id.clone());
        async move {
            let query = code_request(&client_id, redirect, &challenge);
            c.authorize(&query, "allow").await["code"].clone()
        }
    };
    let (verifier, challenge) = pkce();
    let code = new_code(challenge).await;
    let without_redirect = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("client_id", client_id.as_str()),
        ("code_verifier", verifier.as_str()),
    ];
    let (status, e) = c.token(&without_redirect).await;
    assert_eq!((status, e["error"].as_str()), (400, Some("invalid_grant")), "{e}");
    assert!(e["error_description"].as_str().unwrap().contains("redirect_uri is required"), "{e}");

    let (verifier, challenge) = pkce();
    let code = new_code(challenge).await;
    let mut other_resource = vec![
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", redirect),
        ("client_id", client_id.as_str()),
        ("code_verifier", verifier.as_str()),
    ];
    other_resource.push(("resource", "https://elsewhere.example/mcp"));
    let (status, e) = c.token(&other_resource).await;
    assert_eq!((status, e["error"].as_str()), (400, Some("invalid_target")), "{e}");

    let (verifier, challenge) = pkce();
    let code = new_code(challenge).await;
    let (status, t) = c.exchange(&code, &verifier, redirect, &client_id).await;
    assert_eq!(status, 200, "{t}");
    let payload = t["access_token"].as_str().unwrap().split('.').nth(1).unwrap().to_owned();
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    assert!(claims["aud"].as_array().unwrap().iter().any(|a| a == running.mcp_url.as_str()), "{claims}");
    running.stop().await;
}

/// The attack the consent page must stop: whoever reaches the port (a local process, or anyone
/// through a tunnel) registers a client, opens the authorization request, and tries to press
/// Allow. Without the owner's session there is no form to answer and a forged answer is
/// refused; a foreign `Host` gets nothing at all; an owner token is what opens a session.
#[tokio::test]
async fn without_the_owners_session_nobody_can_approve_a_client() {
    let (running, c) = start().await;
    let redirect = "http://127.0.0.1:33420/callback";
    let (status, reg) = c.register(json!({"client_name": "Not Claude", "redirect_uris": [redirect]})).await;
    assert_eq!(status, 201, "{reg}");
    let client_id = reg["client_id"].as_str().unwrap().to_owned();
    let (_, challenge) = pkce();
    let query = code_request(&client_id, redirect, &challenge);
    let page = c.http.get(format!("{}/oauth/authorize", c.base)).query(&query).send().await.unwrap();
    assert_eq!(page.status(), 403, "a consent page without the owner's session");
    let html = page.text().await.unwrap();
    assert!(!html.contains("name=\"csrf\"") && html.contains("Panel"), "{html}");
    // A guessed or replayed answer, with no session or a forged one.
    for cookie in ["", "fc_owner=forged"] {
        let res = c
            .http
            .post(format!("{}/oauth/authorize", c.base))
            .header("cookie", cookie)
            .form(&[("csrf", "guessed"), ("decision", "allow")])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 403, "an answer with cookie {cookie:?}");
        assert!(res.headers().get("location").is_none());
    }
    // A session needs the owner's token: an agent's token (read and run) opens none.
    let res = c.http.post(format!("{}/oauth/session", c.base)).bearer_auth(&running.token).send().await.unwrap();
    assert_eq!(res.status(), 401, "an agent's token opened an owner session");
    // A foreign Host (DNS rebinding, a page on another origin): refused before any work.
    for path in ["/oauth/authorize", "/register"] {
        let res = c
            .http
            .post(format!("{}{path}", c.base))
            .header("host", "evil.example")
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 421, "{path} with a foreign Host");
    }
    running.stop().await;
}

/// Refresh tokens rotate on use, a used one coming back revokes its whole family (RFC 9700
/// §4.14), and the revocation endpoint (RFC 7009) ends a family. A refresh records the
/// client's last use (its rotated token lives from then).
#[tokio::test]
async fn refresh_tokens_rotate_and_a_reused_one_revokes_its_family() {
    use domain::store::ClientUse;
    let clock = Arc::new(domain::clock::ManualClock::starting_now());
    let server_clock = local::config::ServerClock(clock.clone());
    let (running, c) = start_with(move |c| local::LocalConfig { clock: server_clock, ..c }).await;
    let redirect = "http://127.0.0.1:33421/callback";
    let client_id = c.register_claude(redirect).await;
    let sign_in = || async {
        let (verifier, challenge) = pkce();
        let query = code_request(&client_id, redirect, &challenge);
        let code = c.authorize(&query, "allow").await["code"].clone();
        let (status, t) = c.exchange(&code, &verifier, redirect, &client_id).await;
        assert_eq!(status, 200, "{t}");
        t["refresh_token"].as_str().unwrap().to_owned()
    };
    let refresh = |token: String| {
        let (c, client_id) = (&c, client_id.clone());
        async move {
            c.token(&[("grant_type", "refresh_token"), ("refresh_token", &token), ("client_id", &client_id)]).await
        }
    };
    let first = sign_in().await;
    let signed_in = running.store.client_use(&client_id).await.unwrap().expect("used");
    clock.advance(std::time::Duration::from_secs(3600));
    let (status, t) = refresh(first.clone()).await;
    assert_eq!(status, 200, "{t}");
    let refreshed = running.store.client_use(&client_id).await.unwrap().expect("used");
    assert_eq!(
        (refreshed.first_used_at, refreshed.last_used_at),
        (signed_in.first_used_at, Some(signed_in.first_used_at.plus(std::time::Duration::from_secs(3600)))),
        "the refresh an hour later is the client's last use"
    );
    let second = t["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(second, first, "the refresh token rotates");
    // The first one again: refused, and the family with it (the second no longer works).
    let (status, e) = refresh(first).await;
    assert_eq!((status, e["error"].as_str()), (400, Some("invalid_grant")), "{e}");
    assert!(e["error_description"].as_str().unwrap().contains("used already"), "{e}");
    let (status, e) = refresh(second).await;
    assert_eq!((status, e["error"].as_str()), (400, Some("invalid_grant")), "the family was not revoked: {e}");
    // Revocation: a fresh sign-in's token revoked, then refused.
    let third = sign_in().await;
    let res = c.http.post(format!("{}/oauth/revoke", c.base)).form(&[("token", third.as_str())]).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let (status, _) = refresh(third).await;
    assert_eq!(status, 400, "a revoked refresh token still works");
    // The metadata names the revocation endpoint; revoking nonsense answers 200 too.
    let (_, m) = c.get("/.well-known/oauth-authorization-server").await;
    assert_eq!(m["revocation_endpoint"], format!("{}/oauth/revoke", c.base));
    let res = c.http.post(format!("{}/oauth/revoke", c.base)).form(&[("token", "nonsense")]).send().await.unwrap();
    assert_eq!(res.status(), 200);
    running.stop().await;
}

/// A registration is JSON: a `text/plain` or form post (which any web page can send
/// cross-origin without a preflight) is refused with 415 and registers nothing.
#[tokio::test]
async fn a_registration_that_is_not_json_is_refused_and_registers_nothing() {
    use domain::store::RegisterClients;
    let (running, c) = start().await;
    let before = running.store.list_clients().await.unwrap().len();
    let body = json!({"client_name": "Page", "redirect_uris": ["http://127.0.0.1:33422/cb"]}).to_string();
    for content_type in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
        let res = c
            .http
            .post(format!("{}/register", c.base))
            .header("content-type", content_type)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 415, "{content_type}");
        let e: Value = res.json().await.unwrap();
        assert_eq!(e["error_description"], "Content-Type: must be application/json", "{e}");
    }
    assert_eq!(running.store.list_clients().await.unwrap().len(), before, "a refused registration was stored");
    let (status, _) = c.register(serde_json::from_str(&body).unwrap()).await;
    assert_eq!(status, 201, "the same registration as JSON");
    running.stop().await;
}

/// The embedded registry behind a counter of its listings.
struct CountingRegistry {
    store: Arc<store_sqlite::SqliteStore>,
    listings: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl RegisterClients for CountingRegistry {
    async fn list_clients(&self) -> domain::store::StoreResult<Vec<domain::clients::ClientSummary>> {
        self.listings.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.store.list_clients().await
    }
    async fn get_client(&self, id: &str) -> domain::store::StoreResult<Option<domain::clients::RegisteredClient>> {
        self.store.get_client(id).await
    }
    async fn create_client(
        &self,
        name: &str,
        uris: &[String],
        scopes: &[String],
    ) -> domain::store::StoreResult<domain::clients::RegisteredClient> {
        self.store.create_client(name, uris, scopes).await
    }
    async fn delete_client(&self, id: &str) -> domain::store::StoreResult<()> {
        self.store.delete_client(id).await
    }
}

fn registration(port: u16, source: &str) -> http::Request<bytes::Bytes> {
    // A path of its own per registration: URIs that differ only in a loopback port are one client.
    let body = json!({"redirect_uris": [format!("http://localhost/cb/{port}")]}).to_string();
    let mut req = http::Request::post("/register")
        .header("content-type", "application/json")
        .body(bytes::Bytes::from(body))
        .unwrap();
    req.extensions_mut().insert(http_util::ClientSource(source.to_owned()));
    req
}

async fn status_and_id(r: &oauth::Registrar<CountingRegistry>, port: u16) -> (u16, String) {
    let res = r.handle(registration(port, "198.51.100.9")).await;
    let v: Value = serde_json::from_slice(res.body()).unwrap();
    (res.status().as_u16(), v["client_id"].as_str().unwrap_or_default().to_owned())
}

/// The local server's limits in the registrar: an address that is not loopback keeps the
/// per-source limit of 5 (refused naming its setting), and another address is not held by
/// it; this machine's loopback addresses (127.0.0.1, 127.0.0.2, `::1`, IPv4-mapped) share
/// their own 50, which the hourly limit everyone else shares does not count. Without a
/// loopback limit (the cloud) 127.0.0.1 is an address like any other.
#[tokio::test]
async fn a_non_loopback_source_keeps_its_limit_and_loopback_addresses_share_their_own() {
    use domain::clock::{ManualClock, SharedClock, Timestamp};
    use oauth::Registrar;
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_796_119_800_000)));
    let shared: SharedClock = clock.clone();
    let registrar = |limits| {
        let store = Arc::new(store_sqlite::SqliteStore::in_memory(shared.clone(), Default::default()).unwrap());
        let registry = Arc::new(CountingRegistry { store, listings: Default::default() });
        Registrar::new(
            registry,
            oauth::RedirectPolicy::local(),
            tools::scopes::ScopeSpelling::local(),
            shared.clone(),
            limits,
            None,
        )
        .with_settings(local::config::REGISTRATION_SETTINGS)
    };
    let answer = |res: http::Response<bytes::Bytes>| {
        let v: Value = serde_json::from_slice(res.body()).unwrap();
        (res.status().as_u16(), v["error_description"].as_str().unwrap_or_default().to_owned())
    };
    let limits = local::LocalConfig::at("/unused".into()).registrations;
    let r = registrar(limits);
    let mut port = 0;
    let mut next = |source: &str| {
        port += 1;
        r.handle(registration(port, source))
    };
    for i in 0..5 {
        assert_eq!(answer(next("198.51.100.9").await).0, 201, "{i}");
    }
    let (status, why) = answer(next("198.51.100.9").await);
    assert_eq!(status, 429, "the sixth from one address elsewhere");
    assert_eq!(
        why,
        "too many new clients from this address this hour (at most 5); raise \
         FOUNDRY_REGISTRATIONS_PER_SOURCE_PER_HOUR or retry later"
    );
    assert_eq!(answer(next("198.51.100.10").await).0, 201, "another address is not held by it");
    let loopback = ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"];
    for i in 0..50 {
        assert_eq!(answer(next(loopback[i % 4]).await).0, 201, "{i} from this machine");
    }
    let (status, why) = answer(next("127.0.0.3").await);
    assert_eq!(status, 429, "every loopback address is one machine");
    assert!(
        why.contains("this machine this hour (at most 50); raise FOUNDRY_LOOPBACK_REGISTRATIONS_PER_HOUR"),
        "{why}"
    );
    for (i, source) in ["198.51.100.11", "198.51.100.12", oauth::FORWARDED_SOURCE].into_iter().enumerate() {
        assert_eq!(answer(next(source).await).0, 201, "{i}: loopback's 50 are not in the hourly 20");
    }
    // The cloud's limits: loopback is counted as any other address.
    let r = registrar(oauth::RegistrationLimits::default());
    for port in 1..=5 {
        assert_eq!(answer(r.handle(registration(port, "127.0.0.1")).await).0, 201);
    }
    let (status, why) = answer(r.handle(registration(6, "127.0.0.1")).await);
    assert_eq!((status, why.contains("from this address")), (429, true), "{why}");
}

/// At the cap, registrations never used and older than two hours make room; used ones stay.
/// The registry is listed once a minute, not once per registration. The same test with the
/// sweep off (where nothing records use) shows the cap holding.
#[tokio::test]
async fn never_used_registrations_make_room_at_the_cap_and_the_registry_is_not_listed_every_call() {
    use domain::clock::{ManualClock, SharedClock, Timestamp};
    use oauth::{RedirectPolicy, Registrar, RegistrationLimits};
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Duration;
    for sweep in [true, false] {
        // 2026-12-01T10:10:00Z: the hour boundary is 50 minutes away.
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_796_119_800_000)));
        let shared: SharedClock = clock.clone();
        let store = Arc::new(store_sqlite::SqliteStore::in_memory(shared.clone(), Default::default()).unwrap());
        let registry = Arc::new(CountingRegistry { store: Arc::clone(&store), listings: Default::default() });
        let limits = RegistrationLimits { per_hour: 50, per_source: 50, per_loopback: None, cap: 3 };
        let r = Registrar::new(
            Arc::clone(&registry),
            RedirectPolicy::local(),
            tools::scopes::ScopeSpelling::local(),
            shared,
            limits,
            sweep.then(|| store.clone() as Arc<dyn domain::store::ClientUse>),
        );
        let mut ids = Vec::new();
        for port in 1..=3 {
            let (status, id) = status_and_id(&r, port).await;
            assert_eq!(status, 201);
            ids.push(id);
        }
        assert_eq!(registry.listings.load(SeqCst), 1, "three registrations in a minute listed the registry once");
        domain::store::ClientUse::mark_client_used(&*store, &ids[0]).await.unwrap();
        assert_eq!(status_and_id(&r, 4).await.0, 503, "the cap holds while every registration is fresh");
        clock.advance(Duration::from_secs(3600));
        assert_eq!(status_and_id(&r, 4).await.0, 503, "an hour old is not yet unused for long");
        assert_eq!(registry.listings.load(SeqCst), 2, "the listing was read again after its minute");
        clock.advance(Duration::from_secs(3600));
        let (status, new) = status_and_id(&r, 4).await;
        let left: std::collections::BTreeSet<String> =
            registry.store.list_clients().await.unwrap().into_iter().map(|c| c.client_id).collect();
        if sweep {
            assert_eq!(status, 201, "two never-used registrations made room");
            assert_eq!(left, [ids[0].clone(), new].into(), "the used client stays, the unused ones went");
        } else {
            assert_eq!(status, 503, "without a record of use nothing is removed");
            assert_eq!(left, ids.iter().cloned().collect());
        }
    }
}

/// The embedded store's record of use, with one client's last use unknown, as a release
/// before 0.3.0 recorded it (first use only).
struct UseBefore030 {
    store: Arc<store_sqlite::SqliteStore>,
    unknown: String,
}

#[async_trait::async_trait]
impl domain::store::ClientUse for UseBefore030 {
    async fn mark_client_used(&self, id: &str) -> domain::store::StoreResult<()> {
        self.store.mark_client_used(id).await
    }
    async fn client_use(&self, id: &str) -> domain::store::StoreResult<Option<domain::clients::ClientUseRecord>> {
        let found = self.store.client_use(id).await?;
        Ok(found
            .map(|u| if id == self.unknown { domain::clients::ClientUseRecord { last_used_at: None, ..u } } else { u }))
    }
    async fn mark_chat_connected(
        &self,
        o: &domain::ids::OwnerId,
        id: &str,
        token_client: Option<&str>,
    ) -> domain::store::StoreResult<()> {
        self.store.mark_chat_connected(o, id, token_client).await
    }
    async fn chat_connections(
        &self,
        o: &domain::ids::OwnerId,
    ) -> domain::store::StoreResult<Vec<domain::clients::ChatConnection>> {
        self.store.chat_connections(o).await
    }
    async fn mark_host_seen(
        &self,
        o: &domain::ids::OwnerId,
        host: &domain::clients::HostSeen,
    ) -> domain::store::StoreResult<()> {
        self.store.mark_host_seen(o, host).await
    }
    async fn hosts_seen(&self, o: &domain::ids::OwnerId) -> domain::store::StoreResult<Vec<domain::clients::HostSeen>> {
        self.store.hosts_seen(o).await
    }
}

/// At the cap, a registration last used longer ago than its refresh tokens live makes room:
/// one used since stays until its own last use is that old, and one whose last use is unknown
/// (recorded before 0.3.0) stays. The local server's refresh records the use too (a rotated
/// token lives from its refresh), so a chat that keeps refreshing is never idle.
#[tokio::test]
async fn registrations_idle_past_their_refresh_tokens_make_room_at_the_cap() {
    use domain::clock::{ManualClock, SharedClock, Timestamp};
    use domain::store::ClientUse;
    use oauth::{IDLE_CLIENT_AGE, RedirectPolicy, Registrar, RegistrationLimits};
    use std::time::Duration;
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_796_119_800_000)));
    let shared: SharedClock = clock.clone();
    let store = Arc::new(store_sqlite::SqliteStore::in_memory(shared.clone(), Default::default()).unwrap());
    let registry = Arc::new(CountingRegistry { store: Arc::clone(&store), listings: Default::default() });
    let limits = RegistrationLimits { per_hour: 50, per_source: 50, per_loopback: None, cap: 3 };
    let mut ids = Vec::new();
    let r = |unknown: &str| {
        Registrar::new(
            Arc::clone(&registry),
            RedirectPolicy::local(),
            tools::scopes::ScopeSpelling::local(),
            shared.clone(),
            limits,
            Some(
                Arc::new(UseBefore030 { store: Arc::clone(&store), unknown: unknown.to_owned() }) as Arc<dyn ClientUse>
            ),
        )
    };
    let first = r("");
    for port in 1..=3 {
        let (status, id) = status_and_id(&first, port).await;
        assert_eq!(status, 201);
        store.mark_client_used(&id).await.unwrap();
        ids.push(id);
    }
    // A registrar (a fresh instance: nothing remembered) that reads ids[2]'s use as 0.2.0 wrote it.
    let r = r(&ids[2]);
    clock.advance(IDLE_CLIENT_AGE - Duration::from_secs(86_400));
    store.mark_client_used(&ids[1]).await.unwrap();
    assert_eq!(status_and_id(&r, 4).await.0, 503, "every client was used within its refresh tokens' life");
    clock.advance(Duration::from_secs(86_400));
    assert_eq!(status_and_id(&r, 4).await.0, 503, "the oldest last use is exactly the tokens' life ago: not yet idle");
    clock.advance(Duration::from_secs(61));
    let (status, new) = status_and_id(&r, 4).await;
    assert_eq!(status, 201, "the client idle past its refresh tokens' life made room");
    let left: std::collections::BTreeSet<String> =
        registry.store.list_clients().await.unwrap().into_iter().map(|c| c.client_id).collect();
    assert_eq!(
        left,
        [ids[1].clone(), ids[2].clone(), new].into(),
        "the idle client went; the one used since, and the one of unknown last use, stayed"
    );
}
