//! Connecting Claude or ChatGPT to the deployed shape with nothing but the connector URL, step
//! by step as an MCP client does it, against the real binaries (`mcp`, `register_client`, the
//! tools) under the Lambda emulator, with moto's Cognito user-pool client API behind
//! registration — and every URL checked against the template's outputs:
//!
//! unauthenticated call → 401 → protected-resource metadata → the stack's authorization-server
//! metadata (RFC 8414's location; no OpenID discovery; S256; Cognito's scope spelling) → registration with
//! Claude's callback → the app client exists in the pool with exactly that callback and the
//! read/run scopes → a Cognito-shaped token for that client → `tools/list` and a tool call.
//! Also: ChatGPT's per-app callback registers, registering again reuses the client, and a
//! fragment, plain HTTP to a private address, a `javascript:` URI, the owner scope and a
//! registration flood are refused; an owner token never reaches the tools.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use foundry_tests::cloud::{Emulator, Template, access_token, account};
use serde_json::{Value, json};

const CLAUDE: &str = "https://claude.ai/api/mcp/auth_callback";

async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    let res = http.get(url).send().await.unwrap();
    assert_eq!(res.status(), 200, "GET {url}");
    res.json().await.unwrap()
}

async fn register(http: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
    let res = http.post(url).json(&body).send().await.unwrap();
    (res.status().as_u16(), res.json().await.unwrap_or(Value::Null))
}

async fn mcp(http: &reqwest::Client, url: &str, token: Option<&str>, body: Value) -> reqwest::Response {
    let mut req = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claude_and_chatgpt_connect_with_only_the_connector_url() {
    let Some(acct) = account().await else { return };
    let template = Template::load();
    let emu = Emulator::start(&template, &acct.resources, &acct.base_env).await;
    emu.wait_ready().await;
    let out = |name: &str| template.output(name, &acct.resources, &emu.gateway);
    let http = foundry_tests::http();
    let connector = out("McpConnectorUrl");

    // 1. From nothing: the connector URL answers 401 and names the resource metadata.
    let res = mcp(&http, &connector, None, json!({"jsonrpc": "2.0", "id": 1, "method": "initialize"})).await;
    assert_eq!(res.status(), 401);
    let challenge = res.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert_eq!(challenge, format!("Bearer resource_metadata=\"{}\"", out("ProtectedResourceMetadataUrl")));

    // 2. The protected-resource metadata: this resource, and the stack's own authorization
    // server (not Cognito's issuer, whose discovery lacks S256), with Cognito's scope spelling.
    let prm = get_json(&http, &out("ProtectedResourceMetadataUrl")).await;
    assert_eq!(prm["resource"], connector);
    let issued: Vec<String> = {
        let rs = template.value(&["Resources", "ResourceServer", "Properties"]);
        let id = rs["Identifier"].as_str().unwrap().to_owned();
        rs["Scopes"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|s| format!("{id}/{}", s["ScopeName"].as_str().unwrap()))
            .filter(|s| !s.ends_with("/owner"))
            .collect()
    };
    assert_eq!(prm["scopes_supported"], json!(issued), "advertised scopes must be the ones Cognito issues");
    let as_base = prm["authorization_servers"][0].as_str().unwrap().to_owned();
    assert_eq!(format!("{as_base}/.well-known/oauth-authorization-server"), out("AuthorizationServerMetadataUrl"));

    // 3. Its RFC 8414 metadata: the stack's own facade in front of Cognito's endpoints (which
    // refuse the `resource` MCP clients send). No OpenID discovery: it signs no ID tokens.
    let openid = http.get(format!("{as_base}/.well-known/openid-configuration")).send().await.unwrap();
    assert_eq!(openid.status(), 404, "not an OpenID provider");
    for path in ["/.well-known/oauth-authorization-server"] {
        let m = get_json(&http, &format!("{as_base}{path}")).await;
        assert_eq!(m["issuer"], as_base, "{path}: issuer must be the URL it is served from");
        assert_eq!(m["code_challenge_methods_supported"], json!(["S256"]), "{path}");
        assert_eq!(m["authorization_endpoint"], format!("{as_base}/authorize"), "{path}");
        assert_eq!(m["token_endpoint"], format!("{as_base}/token"), "{path}");
        assert_eq!(m["revocation_endpoint"], format!("{as_base}/revoke"), "{path}");
        assert_eq!(m["registration_endpoint"], out("RegistrationEndpoint"), "{path}");
        assert_eq!(m["scopes_supported"], json!(issued), "{path}");
        assert_eq!(m["token_endpoint_auth_methods_supported"], json!(["none"]), "{path}");
        assert_eq!(m["grant_types_supported"], json!(["authorization_code", "refresh_token"]), "{path}");
    }

    // 4. Registration with Claude's callback creates a public app client in the pool.
    let register_url = out("RegistrationEndpoint");
    let claude = json!({"client_name": "Claude", "redirect_uris": [CLAUDE], "token_endpoint_auth_method": "none",
                        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
                        "scope": "osfoundry/read osfoundry/run"});
    let (status, client) = register(&http, &register_url, claude.clone()).await;
    assert_eq!(status, 201, "{client}");
    let client_id = client["client_id"].as_str().unwrap().to_owned();
    assert_eq!(client["token_endpoint_auth_method"], "none");
    let cognito = aws_sdk_cognitoidentityprovider::Client::new(&acct.aws);
    let described = cognito
        .describe_user_pool_client()
        .user_pool_id(&acct.resources.user_pool)
        .client_id(&client_id)
        .send()
        .await
        .unwrap();
    let c = described.user_pool_client().unwrap();
    // Only the facade's callback, which Cognito returns every sign-in to: Claude's is kept in
    // the table (Cognito's callbacks refuse much of what hosts register, and never need it).
    let facade_callback = format!("{}{}", emu.gateway, oauth::facade::CALLBACK_PATH);
    assert_eq!(c.callback_urls(), std::slice::from_ref(&facade_callback));
    assert_eq!(c.allowed_o_auth_scopes(), issued.as_slice());
    assert_eq!(c.allowed_o_auth_flows().iter().map(|f| f.as_str()).collect::<Vec<_>>(), ["code"]);
    assert!(c.client_secret().is_none(), "a public client has no secret");
    // Registering again reuses it.
    assert_eq!(register(&http, &register_url, claude).await.1["client_id"], client_id);

    // 5. A token Cognito would issue to that client: tools/list and a tool call go through.
    let token = access_token(&client_id, &issued.join(" "));
    let res = mcp(&http, &connector, Some(&token), json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    assert_eq!(res.status(), 200);
    let listed: Value = res.json().await.unwrap();
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 9);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "list_graph_sessions", "arguments": {"project_id": uuid::Uuid::now_v7().to_string()}}});
    let res = mcp(&http, &connector, Some(&token), call.clone()).await;
    assert_eq!(res.status(), 200);
    let answer: Value = res.json().await.unwrap();
    assert!(answer["result"]["content"][0]["text"].is_string(), "the tool function answered: {answer}");
    // The owner's token is not a connector token, even from the same pool.
    let owner = access_token("owner-client-id", "openid osfoundry/owner");
    assert_eq!(mcp(&http, &connector, Some(&owner), call).await.status(), 401);

    // 6. ChatGPT's per-app callback registers; what is not allowed is refused with RFC 7591 errors.
    let (status, chatgpt) = register(
        &http,
        &register_url,
        json!({"client_name": "ChatGPT", "redirect_uris": ["https://chatgpt.com/connector/oauth/app_7Hq2"]}),
    )
    .await;
    assert_eq!(status, 201, "{chatgpt}");
    for (body, code) in [
        (json!({"redirect_uris": ["https://claude.ai/api/mcp/auth_callback#frag"]}), "invalid_redirect_uri"),
        (json!({"redirect_uris": ["http://192.168.1.5:5000/callback"]}), "invalid_redirect_uri"),
        (json!({"redirect_uris": ["javascript:alert(1)"]}), "invalid_redirect_uri"),
        (json!({"redirect_uris": [CLAUDE], "scope": "osfoundry/owner"}), "invalid_client_metadata"),
    ] {
        let (status, err) = register(&http, &register_url, body.clone()).await;
        assert_eq!((status, err["error"].as_str()), (400, Some(code)), "{body}: {err}");
    }
    // A desktop client on http://localhost is fine.
    assert_eq!(
        register(&http, &register_url, json!({"redirect_uris": ["http://localhost:33418/callback"]})).await.0,
        201
    );

    // 7. A flood from one address stops at the template's per-address limit; other addresses
    // keep registering until the hourly limit everyone shares.
    let param = |name: &str| -> usize {
        template.value(&["Parameters", name, "Default"]).as_u64().unwrap().try_into().unwrap()
    };
    let (per_source, limit) = (param("ClientRegistrationsPerSource"), param("ClientRegistrationsPerHour"));
    // Claude, ChatGPT and localhost came from 127.0.0.1 this hour.
    let created = foundry_tests::registration::flood_then_others(&register_url, per_source, limit, 3).await;
    assert_eq!(created + 3, limit, "new clients beyond this hour's limit");
    let listed =
        cognito.list_user_pool_clients().user_pool_id(&acct.resources.user_pool).max_results(60).send().await.unwrap();
    let registered =
        listed.user_pool_clients().iter().filter(|c| c.client_name().unwrap_or_default().starts_with("dcr-")).count();
    assert_eq!(registered, limit, "the pool holds exactly the allowed registrations");
}

/// The official Python SDK's OAuth client connects to the cloud shape with nothing but the
/// connector URL, sending RFC 8707 `resource` on both requests as MCP requires: the stack's
/// facade checks and drops it, so the (emulated) Cognito endpoints — which refuse `resource`, as
/// a pool without managed login's resource indicators does — sign the owner in and issue tokens.
/// The exchange records the client's first use in the table.
///
/// With `refreshes`, the client's own clock then moves two hours on that many times and each
/// tool call refreshes without a browser: Cognito answers a refresh without a refresh token,
/// and the 1.x client replaces its token set with the answer, so the facade must hand the one
/// presented back (or the second refresh would need a browser).
async fn python_oauth_through_the_facade(python_var: &str, refreshes: u32) {
    let Some(python) = foundry_tests::python::sdk(python_var) else { return };
    let Some(acct) = account().await else { return };
    let template = Template::load();
    let emu = Emulator::start(&template, &acct.resources, &acct.base_env).await;
    emu.wait_ready().await;
    let connector = template.output("McpConnectorUrl", &acct.resources, &emu.gateway);
    let redirect = "http://localhost:49151/callback";
    let refreshes = refreshes.to_string();
    let envs = [
        ("FC_URL", connector.as_str()),
        ("FC_FLOW", "cognito"),
        ("FC_REDIRECT", redirect),
        ("FC_REFRESHES", refreshes.as_str()),
    ];
    let seen = foundry_tests::python::oauth_connect(&python, python_var, &envs).await;
    if refreshes != "0" {
        assert_eq!(seen["refreshes"].to_string(), refreshes, "{seen}");
        let asked = acct.hosted_ui.seen.lock().unwrap().clone();
        let refreshed = asked.iter().filter(|r| r.contains("grant_type=refresh_token")).count();
        assert_eq!(refreshed.to_string(), refreshes, "each refresh reached Cognito: {asked:?}");
    }
    assert_eq!(seen["resource"], connector, "the SDK sent resource to the stack's /authorize");
    let hosted = template.output("HostedSignInDomain", &acct.resources, &emu.gateway);
    let callback = format!("{}{}", emu.gateway, oauth::facade::CALLBACK_PATH);
    assert_eq!(
        seen["hops"],
        json!([format!("{hosted}/oauth2/authorize"), callback, redirect]),
        "facade → Cognito → the facade's callback → client"
    );
    assert_eq!(
        seen["iss"],
        template.output("McpConnectorUrl", &acct.resources, &emu.gateway).trim_end_matches("/mcp"),
        "RFC 9207 iss"
    );
    // Cognito never saw `resource`, and it saw the authorization and the token request.
    let asked = acct.hosted_ui.seen.lock().unwrap().clone();
    assert!(
        asked.iter().any(|r| r.starts_with("authorize ")) && asked.iter().any(|r| r.starts_with("token ")),
        "{asked:?}"
    );
    assert!(asked.iter().all(|r| !r.contains("resource=")), "resource reached Cognito: {asked:?}");
    let client_id = seen["client_id"].as_str().unwrap();
    let store = store_dynamo::DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&acct.aws),
        &acct.resources.table,
        std::sync::Arc::new(domain::clock::SystemClock),
        Default::default(),
    );
    assert!(
        domain::store::ClientUse::client_use(&store, client_id).await.unwrap().is_some(),
        "the first token was not recorded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_sdk_2x_oauth_client_connects_to_the_cloud_through_the_facade() {
    python_oauth_through_the_facade("FOUNDRY_PYTHON_MCP2", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_sdk_1x_oauth_client_connects_to_the_cloud_through_the_facade_and_refreshes_twice() {
    python_oauth_through_the_facade("FOUNDRY_PYTHON_MCP1", 2).await;
}
