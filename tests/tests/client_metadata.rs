//! Client ID Metadata Documents (MCP 2026-07-28, SEP-991), as Claude and ChatGPT use them:
//!
//! - the fetch's rules on real connections to an HTTPS host on loopback: by default loopback,
//!   private, link-local and metadata-service addresses are never fetched (a name resolving to
//!   one included, nothing is even requested); with the development switch a loopback host is,
//!   but private addresses stay refused, redirects are never followed, the size cap and the
//!   timeout hold, and a document naming another `client_id` is refused;
//! - the cache follows the answer's `Cache-Control` within its bounds, on an injected clock;
//! - the local server: the official Python SDKs' OAuth clients (1.x and 2.x) connect with a
//!   document URL as their `client_id` and a port-less loopback redirect used on a random port,
//!   nothing is registered, the consent page names the client and the host behind it, and a
//!   redirect the document does not list is refused;
//! - the cloud shape: the same through the facade and the (emulated) Cognito, with one app client
//!   made for the document, and 10 connections with the same document making no other
//!   (docs/results.md, "Client metadata documents").

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use domain::clock::{ManualClock, SharedClock};
use foundry_tests::cloud::{Emulator, Template, account};
use foundry_tests::documents::{Answer, DocumentHost};
use oauth::cimd::{DocumentError, Documents, FETCH_TIMEOUT, MAX_DOCUMENT_BYTES};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Names the test chooses the addresses of; every other name through the system's resolver.
struct Names(HashMap<&'static str, IpAddr>);

#[async_trait::async_trait]
impl events::Resolve for Names {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        match self.0.get(host) {
            Some(ip) => Ok(vec![SocketAddr::new(*ip, port)]),
            None => events::SystemResolver.resolve(host, port).await,
        }
    }
}

fn names() -> Arc<Names> {
    Arc::new(Names(HashMap::from([
        ("inside.example", "10.0.0.5".parse().unwrap()),
        ("metadata.example", "169.254.169.254".parse().unwrap()),
        ("loop.example", "127.0.0.1".parse().unwrap()),
    ])))
}

/// Claude Code's shape: a public client with a port-less loopback redirect.
fn claude_code_document() -> Value {
    json!({
        "client_name": "Claude Code (test)",
        "redirect_uris": ["http://localhost/callback"],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    })
}

fn refusal(r: Result<Arc<oauth::cimd::ClientDocument>, DocumentError>) -> String {
    match r {
        Err(DocumentError::Invalid { rule, .. }) => rule,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn the_default_refuses_loopback_private_and_redirecting_document_urls() {
    let host = DocumentHost::start().await;
    let port = host.addr.port();
    let good = host.document("/good", claude_code_document(), None);
    let clock: SharedClock = Arc::new(ManualClock::starting_now());
    let default = Documents::new(names(), Arc::clone(&clock));
    for (url, rule) in [
        (good.clone(), "localhost resolves to a loopback address"),
        (format!("https://127.0.0.1:{port}/good"), "127.0.0.1 resolves to a loopback address"),
        (format!("https://loop.example:{port}/good"), "loop.example resolves to a loopback address"),
        ("https://inside.example/doc".to_owned(), "inside.example resolves to a private address"),
        ("https://metadata.example/doc".to_owned(), "metadata.example resolves to the instance metadata service"),
        ("https://10.1.2.3/doc".to_owned(), "10.1.2.3 resolves to a private address"),
        (format!("http://localhost:{port}/good"), "must use https"),
        ("https://claude.ai/".to_owned(), "must have a path"),
    ] {
        let got = refusal(default.get(&url).await);
        assert!(got.starts_with(rule), "{url}: {got}");
    }
    assert_eq!(host.hits(), 0, "a refused URL is never requested");

    // The development switch: a loopback host is fetched, and nothing else changes.
    let dev = Documents::new(names(), Arc::clone(&clock)).allowing_loopback(true);
    let doc = dev.get(&good).await.unwrap();
    assert_eq!((doc.client_name.as_str(), doc.host.as_str()), ("Claude Code (test)", "localhost"));
    assert_eq!(doc.redirect_uris, ["http://localhost/callback"]);
    let got = refusal(dev.get("https://inside.example/doc").await);
    assert!(got.contains("a private address"), "{got}");
    host.set("/moved", Answer::Redirect(good.clone()));
    let got = refusal(dev.get(&host.url("/moved")).await);
    assert!(got.contains("redirects are not followed"), "{got}");
    host.set("/big", Answer::Big(MAX_DOCUMENT_BYTES + 1));
    let got = refusal(dev.get(&host.url("/big")).await);
    assert!(got.starts_with(&format!("larger than {MAX_DOCUMENT_BYTES} bytes")), "{got}");
    // The same without a Content-Length (chunked): the cap on what is read refuses it.
    host.set("/chunked", Answer::Chunked(MAX_DOCUMENT_BYTES + 1));
    let got = refusal(dev.get(&host.url("/chunked")).await);
    assert!(got.starts_with(&format!("larger than {MAX_DOCUMENT_BYTES} bytes")), "chunked: {got}");
    // A document claiming to be another client's (here the good one's).
    let mut other = claude_code_document();
    other["client_id"] = json!(good);
    host.set("/impostor", Answer::Json(other, None));
    let got = refusal(dev.get(&host.url("/impostor")).await);
    assert!(got.starts_with("client_id: must be the document's own URL"), "{got}");
    let got = refusal(dev.get(&host.url("/missing")).await);
    assert_eq!(got, "answered 404 instead of 200");
    let mut secret = claude_code_document();
    secret["client_secret"] = json!("s3cr3t");
    let secret_url = host.document("/secret", secret, None);
    assert!(refusal(dev.get(&secret_url).await).starts_with("client_secret:"));
}

#[tokio::test]
async fn a_host_that_never_answers_is_given_up_on() {
    let host = DocumentHost::start().await;
    host.set("/slow", Answer::Hang(FETCH_TIMEOUT + Duration::from_secs(5)));
    let dev = Documents::new(names(), Arc::new(ManualClock::starting_now())).allowing_loopback(true);
    let started = Instant::now();
    match dev.get(&host.url("/slow")).await {
        Err(DocumentError::Unavailable { reason, .. }) => assert_eq!(reason, "timed out"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < FETCH_TIMEOUT + Duration::from_secs(3), "the timeout did not hold");
}

#[tokio::test]
async fn documents_are_kept_as_their_cache_headers_say_within_the_bounds() {
    let host = DocumentHost::start().await;
    let clock = Arc::new(ManualClock::starting_now());
    let dev = Documents::new(names(), Arc::clone(&clock) as SharedClock).allowing_loopback(true);
    let two_minutes = host.document("/two-minutes", claude_code_document(), Some("public, max-age=120"));
    dev.get(&two_minutes).await.unwrap();
    dev.get(&two_minutes).await.unwrap();
    assert_eq!(host.hits(), 1, "a fresh document is not fetched again");
    clock.advance(Duration::from_secs(100));
    dev.get(&two_minutes).await.unwrap();
    assert_eq!(host.hits(), 1);
    clock.advance(Duration::from_secs(30));
    dev.get(&two_minutes).await.unwrap();
    assert_eq!(host.hits(), 2, "past its max-age it is fetched again");
    // `no-store` still keeps it for the minimum (a flood of requests fetches once a minute).
    let no_store = host.document("/no-store", claude_code_document(), Some("no-store"));
    dev.get(&no_store).await.unwrap();
    dev.get(&no_store).await.unwrap();
    assert_eq!(host.hits(), 3);
    clock.advance(oauth::cimd::MIN_CACHE + Duration::from_secs(1));
    dev.get(&no_store).await.unwrap();
    assert_eq!(host.hits(), 4);
    assert_eq!(dev.fetches(), 4);
}

/// A port nothing listens on (the redirect's: the client reads the code from the 302).
fn random_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn python_cimd_local(python_var: &str) {
    let Some(python) = foundry_tests::python::sdk(python_var) else { return };
    let host = DocumentHost::start().await;
    let document = host.document("/oauth/claude-code-client-metadata", claude_code_document(), None);
    let running = foundry_tests::LocalServer::start("foundry-cimd", |c| local::LocalConfig {
        allow_loopback_client_metadata: true,
        ..c
    })
    .await;
    let link = running.demo.chat_link_id.to_string();
    let redirect = format!("http://localhost:{}/callback", random_port());
    let envs = [
        ("FC_URL", running.mcp_url.as_str()),
        ("FC_LINK", link.as_str()),
        ("FC_OWNER_TOKEN", running.owner_token.as_str()),
        ("FC_CIMD", document.as_str()),
        ("FC_REDIRECT", redirect.as_str()),
    ];
    let seen = foundry_tests::python::oauth_connect(&python, python_var, &envs).await;
    assert_eq!(seen["client_id"], document, "the client id is the document's URL");
    assert_eq!(seen["iss"], running.base_url, "RFC 9207 iss");
    assert!(seen["tasks"].as_u64().unwrap() >= 1, "the demo task is visible through the link");
    assert!(
        domain::store::RegisterClients::list_clients(&*running.store).await.unwrap().is_empty(),
        "nothing registered"
    );
    running.stop().await;
}

#[tokio::test]
async fn the_python_sdk_1x_connects_to_the_local_server_with_a_metadata_document() {
    python_cimd_local("FOUNDRY_PYTHON_MCP1").await;
}

#[tokio::test]
async fn the_python_sdk_2x_connects_to_the_local_server_with_a_metadata_document() {
    python_cimd_local("FOUNDRY_PYTHON_MCP2").await;
}

fn pkce() -> (String, String) {
    let verifier = format!("v-{}-{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

fn no_redirects() -> reqwest::Client {
    foundry_tests::http_builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// The local server's metadata advertises documents and `iss`; its consent page names a
/// document's client and the host behind it; a redirect the document does not list, and a
/// server without the switch, are refused on a page (nothing redirected).
#[tokio::test]
async fn the_local_consent_page_names_the_documents_client_and_refuses_unlisted_redirects() {
    let host = DocumentHost::start().await;
    let document = host.document("/client", claude_code_document(), None);
    let http = no_redirects();
    let running = foundry_tests::LocalServer::start("foundry-cimd-page", |c| local::LocalConfig {
        allow_loopback_client_metadata: true,
        ..c
    })
    .await;
    let base = running.base_url.clone();
    let meta: Value =
        http.get(format!("{base}/.well-known/oauth-authorization-server")).send().await.unwrap().json().await.unwrap();
    assert_eq!(meta["client_id_metadata_document_supported"], true);
    assert_eq!(meta["authorization_response_iss_parameter_supported"], true);
    assert!(meta["token_endpoint_auth_methods_supported"].as_array().unwrap().contains(&json!("none")));
    let session = http.post(format!("{base}/oauth/session")).bearer_auth(&running.owner_token).send().await.unwrap();
    let cookie = session.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let (_, challenge) = pkce();
    let authorize = |redirect: String| {
        let q = [
            ("response_type", "code".to_owned()),
            ("client_id", document.clone()),
            ("redirect_uri", redirect),
            ("code_challenge", challenge.clone()),
            ("code_challenge_method", "S256".to_owned()),
        ];
        http.get(format!("{base}/oauth/authorize")).header("cookie", &cookie).query(&q).send()
    };
    let page = authorize(format!("http://localhost:{}/callback", random_port())).await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("<strong>Claude Code (test)</strong> (described by <code>localhost</code>)"), "{html}");
    let page = authorize(format!("http://localhost:{}/elsewhere", random_port())).await.unwrap();
    assert_eq!(page.status(), 400);
    assert!(page.text().await.unwrap().contains("redirect_uri is not one this client registered"));
    running.stop().await;

    // Without the switch the same document is never fetched.
    let hits = host.hits();
    let strict = foundry_tests::LocalServer::default("foundry-cimd-strict").await;
    let q =
        [("response_type", "code"), ("client_id", document.as_str()), ("redirect_uri", "http://localhost:1/callback")];
    let page = http.get(format!("{}/oauth/authorize", strict.base_url)).query(&q).send().await.unwrap();
    assert_eq!(page.status(), 400);
    assert!(page.text().await.unwrap().contains("never fetched"));
    assert_eq!(host.hits(), hits, "the strict server requested nothing");
    strict.stop().await;
}

/// One scripted connection through the cloud facade with `document` as the client: authorize →
/// Cognito's page (emulated, signed in) → the facade's callback → back to `redirect` with the
/// code and `iss` → the token exchange. The access token.
async fn cloud_connect_once(http: &reqwest::Client, gateway: &str, connector: &str, document: &str) -> Value {
    let (verifier, challenge) = pkce();
    let redirect = format!("http://127.0.0.1:{}/callback", random_port());
    let q = [
        ("response_type", "code"),
        ("client_id", document),
        ("redirect_uri", redirect.as_str()),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("state", "s-1"),
        ("resource", connector),
        ("scope", "osfoundry:read osfoundry:run"),
    ];
    let mut res = http.get(format!("{gateway}/authorize")).query(&q).send().await.unwrap();
    for _ in 0..2 {
        assert!(res.status().is_redirection(), "{}", res.text().await.unwrap_or_default());
        let next = res.headers()["location"].to_str().unwrap().to_owned();
        res = http.get(next).send().await.unwrap();
    }
    assert_eq!(res.status(), 302);
    let back = url::Url::parse(res.headers()["location"].to_str().unwrap()).unwrap();
    assert!(back.as_str().starts_with(&redirect), "sent back to {back}");
    let got: HashMap<String, String> = back.query_pairs().into_owned().collect();
    assert_eq!(got.get("state").map(String::as_str), Some("s-1"));
    assert_eq!(got.get("iss").map(String::as_str), Some(gateway), "RFC 9207 iss");
    let form = [
        ("grant_type", "authorization_code"),
        ("code", got["code"].as_str()),
        ("client_id", document),
        ("redirect_uri", redirect.as_str()),
        ("code_verifier", verifier.as_str()),
        ("resource", connector),
    ];
    let token = http.post(format!("{gateway}/token")).form(&form).send().await.unwrap();
    assert_eq!(token.status(), 200);
    token.json().await.unwrap()
}

/// How many times [`ten_cloud_connections_with_one_document_make_one_app_client`] connects
/// (it was a hundred, 84–114 s of the test command for the same property).
const CONNECTIONS: usize = 10;

/// Through the facade: a document client connects, the code is bound to its client and
/// redirect, and [`CONNECTIONS`] connections with the same document (the first alone with a
/// cold cache, the second alone, then eight at once) make exactly one app client and one
/// document fetch. A connection that made its own app client or fetched the document again
/// would show with any count above two. These connections all reach one instance (the emulator
/// runs one process per function): "one fetch" is that instance's cache, and the race between
/// instances is [`two_cold_instances_racing_for_one_document_leave_one_app_client`]'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_cloud_connections_with_one_document_make_one_app_client() {
    let Some(acct) = account().await else { return };
    let host = DocumentHost::start().await;
    let mut doc = claude_code_document();
    doc["redirect_uris"] = json!(["http://127.0.0.1/callback"]);
    let document = host.document("/oauth/mcp-oauth-client-metadata", doc, Some("max-age=3600"));
    let template = Template::load();
    let emu = Emulator::start(&template, &acct.resources, &acct.base_env).await;
    emu.wait_ready().await;
    let connector = template.output("McpConnectorUrl", &acct.resources, &emu.gateway);
    let http = no_redirects();
    let meta: Value = http
        .get(format!("{}/.well-known/oauth-authorization-server", emu.gateway))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["client_id_metadata_document_supported"], true);
    assert_eq!(meta["authorization_response_iss_parameter_supported"], true);

    let started = Instant::now();
    let tokens = cloud_connect_once(&http, &emu.gateway, &connector, &document).await;
    let token = tokens["access_token"].as_str().unwrap().to_owned();
    let cold = started.elapsed();
    let started = Instant::now();
    cloud_connect_once(&http, &emu.gateway, &connector, &document).await;
    let warm = started.elapsed();
    // The rest eight at a time.
    let mut done = 2;
    while done < CONNECTIONS {
        let batch: Vec<_> = (0..8.min(CONNECTIONS - done))
            .map(|_| {
                let (http, gateway, connector, document) =
                    (http.clone(), emu.gateway.clone(), connector.clone(), document.clone());
                tokio::spawn(async move { cloud_connect_once(&http, &gateway, &connector, &document).await })
            })
            .collect();
        for b in batch {
            b.await.unwrap();
        }
        done += 8.min(CONNECTIONS - done);
    }
    let cognito = aws_sdk_cognitoidentityprovider::Client::new(&acct.aws);
    let listed =
        cognito.list_user_pool_clients().user_pool_id(&acct.resources.user_pool).max_results(60).send().await.unwrap();
    let made: Vec<_> = listed
        .user_pool_clients()
        .iter()
        .filter(|c| c.client_name().unwrap_or_default().starts_with(oauth::facade::DOCUMENT_CLIENT_PREFIX))
        .collect();
    assert_eq!(made.len(), 1, "one app client for one document, after {CONNECTIONS} connections");
    let described = cognito
        .describe_user_pool_client()
        .user_pool_id(&acct.resources.user_pool)
        .client_id(made[0].client_id().unwrap())
        .send()
        .await
        .unwrap();
    let facade_callback = format!("{}{}", emu.gateway, oauth::facade::CALLBACK_PATH);
    assert_eq!(described.user_pool_client().unwrap().callback_urls(), [facade_callback], "only the facade's callback");
    eprintln!(
        "client metadata documents: {CONNECTIONS} connections, {} app client(s), {} document fetch(es); first connect {} ms (cold document cache, app client made), second {} ms (warm)",
        made.len(),
        host.hits(),
        cold.as_millis(),
        warm.as_millis()
    );
    assert_eq!(host.hits(), 1, "the function fetched the document once (max-age=3600)");
    // A refresh and a revocation name the document; Cognito sees its app client.
    let app_client = made[0].client_id().unwrap().to_owned();
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let refreshed = http
        .post(format!("{}/token", emu.gateway))
        .form(&[("grant_type", "refresh_token"), ("refresh_token", refresh), ("client_id", document.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(refreshed.status(), 200, "{}", refreshed.text().await.unwrap_or_default());
    let refresh = refreshed.json::<Value>().await.unwrap()["refresh_token"].as_str().unwrap_or(refresh).to_owned();
    let revoked = http
        .post(format!("{}/revoke", emu.gateway))
        .form(&[("token", refresh.as_str()), ("client_id", document.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    let asked = acct.hosted_ui.seen.lock().unwrap().clone();
    let last = asked.iter().rev().find(|r| r.starts_with("revoke ")).unwrap();
    assert!(last.contains(&format!("client_id={app_client}")), "{last}");
    // The token works on the MCP endpoint.
    let res = foundry_tests::mcp::tools_list_2025(&http, &connector, &token).await;
    assert_eq!(res.status(), 200);
}

/// Two cold instances of the register function (two processes, each its own memory, as Lambda
/// runs concurrent requests) get the same document's first connection at the same moment: the
/// document host answers both fetches only once both have arrived, so both find no app client
/// recorded and both make one. The conditional write keeps one; the loser deletes its own and
/// sends its client to the winner's. Exactly one app client is left, both connections go to
/// Cognito with it, and each instance fetched the document (the honest count: one per cold
/// instance, not one per deployment). Without the loser's delete, two are left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_cold_instances_racing_for_one_document_leave_one_app_client() {
    let Some(acct) = account().await else { return };
    let host = DocumentHost::start().await;
    let mut doc = claude_code_document();
    doc["redirect_uris"] = json!(["http://127.0.0.1/callback"]);
    let document = host.document("/race/client.json", doc, Some("max-age=3600"));
    host.gather(2);
    let template = Template::load();
    let register = |d: &foundry_tests::cloud::FunctionDef| d.logical_id == "RegisterClientFunction";
    let (one, two) = tokio::join!(
        Emulator::start_only(&template, &acct.resources, &acct.base_env, register),
        Emulator::start_only(&template, &acct.resources, &acct.base_env, register),
    );
    let http = no_redirects();
    let authorize = |gateway: String| {
        let (http, document) = (http.clone(), document.clone());
        async move {
            let (_, challenge) = pkce();
            let q = [
                ("response_type", "code"),
                ("client_id", document.as_str()),
                ("redirect_uri", "http://127.0.0.1:4000/callback"),
                ("code_challenge", challenge.as_str()),
                ("code_challenge_method", "S256"),
                ("state", "s-1"),
            ];
            let res = http.get(format!("{gateway}/authorize")).query(&q).send().await.unwrap();
            assert_eq!(res.status(), 302, "{}", res.text().await.unwrap_or_default());
            let to = url::Url::parse(res.headers()["location"].to_str().unwrap()).unwrap();
            to.query_pairs().find(|(k, _)| k == "client_id").map(|(_, v)| v.into_owned()).unwrap()
        }
    };
    let (a, b) = tokio::join!(authorize(one.gateway.clone()), authorize(two.gateway.clone()));
    let cognito = aws_sdk_cognitoidentityprovider::Client::new(&acct.aws);
    let listed =
        cognito.list_user_pool_clients().user_pool_id(&acct.resources.user_pool).max_results(60).send().await.unwrap();
    let made: Vec<String> = listed
        .user_pool_clients()
        .iter()
        .filter(|c| c.client_name().unwrap_or_default().starts_with(oauth::facade::DOCUMENT_CLIENT_PREFIX))
        .filter_map(|c| c.client_id().map(str::to_owned))
        .collect();
    assert_eq!(made, std::slice::from_ref(&a), "exactly one app client left for one document, and it is the one used");
    assert_eq!(a, b, "both instances send their client to the recorded app client");
    assert_eq!(host.hits(), 2, "each cold instance fetched the document once");
}

/// A code handed on by the facade works once, for its own client and redirect only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_code_from_the_facade_cannot_be_replayed_or_sent_to_another_redirect() {
    let Some(acct) = account().await else { return };
    let host = DocumentHost::start().await;
    let document = host.document("/doc", claude_code_document(), None);
    let template = Template::load();
    let emu = Emulator::start(&template, &acct.resources, &acct.base_env).await;
    emu.wait_ready().await;
    let connector = template.output("McpConnectorUrl", &acct.resources, &emu.gateway);
    let http = no_redirects();
    let (verifier, challenge) = pkce();
    let redirect = format!("http://localhost:{}/callback", random_port());
    let q = [
        ("response_type", "code"),
        ("client_id", document.as_str()),
        ("redirect_uri", redirect.as_str()),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
    ];
    let mut res = http.get(format!("{}/authorize", emu.gateway)).query(&q).send().await.unwrap();
    for _ in 0..2 {
        let next = res.headers()["location"].to_str().unwrap().to_owned();
        res = http.get(next).send().await.unwrap();
    }
    let back = url::Url::parse(res.headers()["location"].to_str().unwrap()).unwrap();
    let code = back.query_pairs().find(|(k, _)| k == "code").unwrap().1.into_owned();
    let exchange = |redirect: String, client: String| {
        let form = vec![
            ("grant_type", "authorization_code".to_owned()),
            ("code", code.clone()),
            ("client_id", client),
            ("redirect_uri", redirect),
            ("code_verifier", verifier.clone()),
            ("resource", connector.clone()),
        ];
        http.post(format!("{}/token", emu.gateway)).form(&form).send()
    };
    let other_redirect = format!("http://localhost:{}/callback", random_port());
    let wrong = exchange(other_redirect, document.clone()).await.unwrap();
    assert_eq!(wrong.status(), 400);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["error"], "invalid_grant");
    assert_eq!(body["error_description"], "redirect_uri does not match the authorization request");
    // The failed attempt spent the code: the right redirect now fails too.
    let again = exchange(redirect.clone(), document.clone()).await.unwrap();
    assert_eq!(again.status(), 400);
    assert_eq!(again.json::<Value>().await.unwrap()["error_description"], "the code is unknown, used or expired");
    // A document that lists another redirect only: the facade refuses before Cognito.
    let listed_elsewhere = [
        ("response_type", "code"),
        ("client_id", document.as_str()),
        ("redirect_uri", "http://localhost:8080/other"),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
    ];
    let res = http.get(format!("{}/authorize", emu.gateway)).query(&listed_elsewhere).send().await.unwrap();
    assert_eq!(res.status(), 400);
    // Without PKCE: sent back to the (checked) redirect with the error and iss.
    let no_pkce = [("response_type", "code"), ("client_id", document.as_str()), ("redirect_uri", redirect.as_str())];
    let res = http.get(format!("{}/authorize", emu.gateway)).query(&no_pkce).send().await.unwrap();
    assert_eq!(res.status(), 302);
    let back = res.headers()["location"].to_str().unwrap().to_owned();
    assert!(back.starts_with(&redirect) && back.contains("error=invalid_request") && back.contains("iss="), "{back}");
}

async fn python_cimd_cloud(python_var: &str) {
    let Some(python) = foundry_tests::python::sdk(python_var) else { return };
    let Some(acct) = account().await else { return };
    let host = DocumentHost::start().await;
    let document = host.document("/oauth/claude-code-client-metadata", claude_code_document(), None);
    let template = Template::load();
    let emu = Emulator::start(&template, &acct.resources, &acct.base_env).await;
    emu.wait_ready().await;
    let connector = template.output("McpConnectorUrl", &acct.resources, &emu.gateway);
    let redirect = format!("http://localhost:{}/callback", random_port());
    let envs = [
        ("FC_URL", connector.as_str()),
        ("FC_FLOW", "cognito"),
        ("FC_REDIRECT", redirect.as_str()),
        ("FC_CIMD", document.as_str()),
    ];
    let seen = foundry_tests::python::oauth_connect(&python, python_var, &envs).await;
    assert_eq!(seen["client_id"], document);
    assert_eq!(seen["iss"], emu.gateway, "RFC 9207 iss");
    let asked = acct.hosted_ui.seen.lock().unwrap().clone();
    assert!(asked.iter().all(|r| !r.contains("localhost%3A")), "the client's redirect reached Cognito: {asked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_sdk_1x_connects_to_the_cloud_with_a_metadata_document() {
    python_cimd_cloud("FOUNDRY_PYTHON_MCP1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_sdk_2x_connects_to_the_cloud_with_a_metadata_document() {
    python_cimd_cloud("FOUNDRY_PYTHON_MCP2").await;
}

/// The DynamoDB store behind the facade, raced for real: of 8 concurrent takers of one flow
/// exactly one gets it (and an expired one nobody), and of 8 instances recording their own app
/// client for one document all end with the first writer's. The same race against a naive take
/// (read, then delete) lets several take one code, which is what the conditional delete rules
/// out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flows_are_taken_once_and_a_document_keeps_its_first_app_client() {
    use domain::store::{AuthorizationFlows, MetadataClients};
    let Some(h) = foundry_tests::Harness::dynamo(foundry_tests::test_policy()).await else { return };
    let foundry_tests::Backend::Dynamo { store, .. } = &h.backend else { unreachable!() };
    let store = Arc::new(store.clone());
    let later = h.now().plus(Duration::from_secs(60));
    let mut several = 0;
    for round in 0..20 {
        let key = format!("race-{round}");
        assert!(store.begin_flow(&key, "the record", later).await.unwrap());
        assert!(!store.begin_flow(&key, "another", later).await.unwrap(), "a key is never written twice");
        let takers: Vec<_> = (0..8)
            .map(|_| {
                let (store, key) = (Arc::clone(&store), key.clone());
                tokio::spawn(async move { store.take_flow(&key).await.unwrap() })
            })
            .collect();
        let mut got = 0;
        for t in takers {
            if let Some(r) = t.await.unwrap() {
                assert_eq!(r, "the record");
                got += 1;
            }
        }
        assert_eq!(got, 1, "round {round}: {got} takers got the flow");

        // The naive take on the same table: a read, then an unconditional delete.
        let naive = format!("naive-{round}");
        assert!(store.begin_flow(&naive, "the record", later).await.unwrap());
        let (client, table) = h.table_handle().unwrap();
        let takers: Vec<_> = (0..8)
            .map(|_| {
                let (client, table, naive) = (client.clone(), table.clone(), naive.clone());
                tokio::spawn(async move {
                    let key = HashMap::from([
                        ("pk".to_owned(), aws_sdk_dynamodb::types::AttributeValue::S(format!("CLIENT#FLOW#{naive}"))),
                        ("sk".to_owned(), aws_sdk_dynamodb::types::AttributeValue::S("FLOW".into())),
                    ]);
                    let read = client
                        .get_item()
                        .table_name(&table)
                        .set_key(Some(key.clone()))
                        .consistent_read(true)
                        .send()
                        .await
                        .unwrap();
                    client.delete_item().table_name(&table).set_key(Some(key)).send().await.unwrap();
                    read.item.is_some()
                })
            })
            .collect();
        let mut naive_got = 0;
        for t in takers {
            naive_got += usize::from(t.await.unwrap());
        }
        if naive_got > 1 {
            several += 1;
        }
    }
    assert!(several > 0, "the naive take never let two take one flow: the race did not run");

    // An expired flow is nobody's.
    assert!(store.begin_flow("old", "r", h.now().plus(Duration::from_secs(1))).await.unwrap());
    h.advance(Duration::from_secs(2));
    assert_eq!(store.take_flow("old").await.unwrap(), None);

    // Eight instances made eight app clients for one document at once: one is kept, by all.
    let url = "https://claude.ai/oauth/mcp-oauth-client-metadata";
    let writers: Vec<_> = (0..8)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.keep_metadata_client(url, &format!("app-{i}")).await.unwrap() })
        })
        .collect();
    let mut winners = std::collections::BTreeSet::new();
    for w in writers {
        winners.insert(w.await.unwrap());
    }
    assert_eq!(winners.len(), 1, "every writer ends with the same app client: {winners:?}");
    assert_eq!(store.metadata_client(url).await.unwrap().as_ref(), winners.iter().next());
}

/// A host that refuses a fetch for reasons that are not the document's — a bot wall's 403 page,
/// a 429, a 5xx, a challenge page answered 200 — signs the client in from the last good copy in
/// the store, for at most `MAX_COPY_AGE` after it was fetched; a document that is gone (404)
/// never does, and without a store nothing is used in its place.
#[tokio::test]
async fn a_refused_fetch_signs_in_from_the_last_good_copy_within_its_bound() {
    use oauth::cimd::{COPY_RETRY, DEFAULT_CACHE, MAX_COPY_AGE};
    let host = DocumentHost::start().await;
    let h = foundry_tests::Harness::embedded(foundry_tests::test_policy());
    let clock = Arc::clone(&h.clock);
    let copies: Arc<dyn domain::store::DocumentCopies> = h.store.clone();
    let docs = Documents::new(names(), Arc::clone(&clock) as SharedClock).allowing_loopback(true).with_copies(copies);
    let bare = Documents::new(names(), Arc::clone(&clock) as SharedClock).allowing_loopback(true);
    let url = host.document("/walled", claude_code_document(), None);
    let good = docs.get(&url).await.unwrap();
    let unavailable = |r: Result<Arc<oauth::cimd::ClientDocument>, DocumentError>| match r {
        Err(DocumentError::Unavailable { reason, .. }) => reason,
        other => panic!("expected the host's refusal, got {other:?}"),
    };
    for refusal in [Answer::Page(403), Answer::Status(429), Answer::Status(503), Answer::Page(200)] {
        host.set("/walled", refusal.clone());
        clock.advance(DEFAULT_CACHE + COPY_RETRY + Duration::from_secs(1));
        let hits = host.hits();
        assert_eq!(docs.get(&url).await.unwrap(), good, "{refusal:?}: the last good copy");
        assert_eq!(host.hits(), hits + 1, "{refusal:?}: the host was asked first");
        let why = unavailable(bare.get(&url).await);
        assert!(why.starts_with("answered"), "{refusal:?} without a store: {why}");
    }
    // Past the bound the copy is not used.
    clock.advance(MAX_COPY_AGE);
    let why = unavailable(docs.get(&url).await);
    assert_eq!(why, "answered a web page, not JSON (a bot challenge?)");
    // A document that is gone is the client's own answer: no copy, however fresh.
    host.document("/walled", claude_code_document(), None);
    docs.get(&url).await.unwrap();
    host.set("/walled", Answer::Status(404));
    clock.advance(DEFAULT_CACHE + Duration::from_secs(1));
    assert_eq!(refusal(docs.get(&url).await), "answered 404 instead of 200");
}
