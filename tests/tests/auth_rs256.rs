//! RS256 tokens against a JWKS (the deployment path), with the key set cached and refreshed,
//! and the `mcp` Lambda's router fed a real API Gateway HTTP API event.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use auth::{
    Audience, AuthError, Authenticator, Claims, FetchJwks, Grant, Hs256Signer, JWKS_MIN_REFETCH, JwksCache, Keys,
};
use domain::clock::{Clock, ManualClock};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

const ISSUER: &str = "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_TEST";

struct Fixture {
    fetches: AtomicUsize,
    set: JwkSet,
    /// Fetches after the first one fail (the issuer is down).
    down: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl FetchJwks for Fixture {
    async fn fetch(&self) -> Result<JwkSet, auth::JwksError> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(auth::JwksError::Status { url: "https://issuer/jwks.json".into(), status: 503 });
        }
        Ok(self.set.clone())
    }
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// A Cognito-style access token: no `aud`, `client_id` instead.
fn cognito_token(kid: &str, iss: &str, client: &str, now: i64) -> String {
    cognito_token_of(kid, iss, client, now, "access")
}

fn cognito_token_of(kid: &str, iss: &str, client: &str, now: i64, token_use: &str) -> String {
    // Cognito's spelling of custom scopes.
    let claims = Claims {
        iss: iss.into(),
        token_use: Some(token_use.into()),
        ..claims_of(client, "osfoundry/read osfoundry/run", now)
    };
    rs256(kid, &claims)
}

/// The claims of a Cognito access token of `client` for `scope`, issued at `now` for an hour.
fn claims_of(client: &str, scope: &str, now: i64) -> Claims {
    Claims {
        iss: ISSUER.into(),
        sub: "owner-sub".into(),
        aud: None,
        client_id: Some(client.into()),
        azp: None,
        scope: Some(scope.into()),
        exp: now + 3600,
        nbf: None,
        token_use: Some("access".into()),
        jti: None,
    }
}

/// `claims` signed with the fixture's RSA key under `kid`.
fn rs256(kid: &str, claims: &Claims) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.into());
    let key = EncodingKey::from_rsa_pem(fixture("rs256-test-key.pem").as_bytes()).unwrap();
    auth::jwt_crypto::install();
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

fn setup() -> (Authenticator, Arc<Fixture>, Arc<ManualClock>) {
    let set: JwkSet = serde_json::from_str(&fixture("rs256-test-jwks.json")).unwrap();
    let f = Arc::new(Fixture { fetches: AtomicUsize::new(0), set, down: Default::default() });
    let clock = Arc::new(ManualClock::starting_now());
    let auth = Authenticator {
        issuer: ISSUER.into(),
        audience: Audience::Only(vec!["claude-client".into()]),
        keys: Keys::Jwks(JwksCache::new(f.clone())),
        clock: clock.clone(),
    };
    (auth, f, clock)
}

#[tokio::test]
async fn cognito_access_tokens_verify_and_the_key_set_is_cached() {
    let (auth, f, clock) = setup();
    let now = clock.now().as_epoch_seconds();
    let id = auth.verify(&cognito_token("test-key-1", ISSUER, "claude-client", now)).await.unwrap();
    assert_eq!(id.agent.as_str(), "claude-client:owner-sub");
    assert!(id.has_scope("osfoundry:run"));
    auth.verify(&cognito_token("test-key-1", ISSUER, "claude-client", now)).await.unwrap();
    assert_eq!(f.fetches.load(Ordering::SeqCst), 1, "the key set is cached");
    // An unknown key id forces a refetch, but not more often than once a minute (docs/mcp.md:
    // the documented figure, not the constant, so a changed constant fails here).
    assert!(auth.verify(&cognito_token("rotated-key", ISSUER, "claude-client", now)).await.is_err());
    assert_eq!(f.fetches.load(Ordering::SeqCst), 1);
    clock.advance(Duration::from_secs(59));
    assert!(auth.verify(&cognito_token("rotated-key", ISSUER, "claude-client", now)).await.is_err());
    assert_eq!(f.fetches.load(Ordering::SeqCst), 1, "refetched within the minute");
    clock.advance(Duration::from_secs(1));
    assert!(auth.verify(&cognito_token("rotated-key", ISSUER, "claude-client", now)).await.is_err());
    assert_eq!(f.fetches.load(Ordering::SeqCst), 2);
    assert_eq!(JWKS_MIN_REFETCH, Duration::from_secs(60));
}

#[tokio::test]
async fn id_tokens_are_refused() {
    let (auth, _, clock) = setup();
    let now = clock.now().as_epoch_seconds();
    let id_token = cognito_token_of("test-key-1", ISSUER, "claude-client", now, "id");
    assert!(
        matches!(auth.verify(&id_token).await, Err(AuthError::Invalid(m)) if m.contains("only access tokens")),
        "an ID token was accepted"
    );
}

#[tokio::test]
async fn an_issuer_outage_keeps_verifying_with_cached_keys_for_a_bounded_time() {
    let (auth, f, clock) = setup();
    let token =
        |clock: &ManualClock| cognito_token("test-key-1", ISSUER, "claude-client", clock.now().as_epoch_seconds());
    auth.verify(&token(&clock)).await.unwrap();
    let fetched_at = clock.now();
    f.down.store(true, Ordering::SeqCst);
    // The cache lifetime (an hour, as documented) passes and every refresh fails: the cached
    // keys still verify…
    clock.advance(Duration::from_secs(3600));
    auth.verify(&token(&clock)).await.expect("an issuer outage locked clients out");
    let fetches = f.fetches.load(Ordering::SeqCst);
    assert_eq!(fetches, 2, "the hour-old key set was not refreshed");
    // …without a refetch on every request, but again a minute later…
    auth.verify(&token(&clock)).await.unwrap();
    assert_eq!(f.fetches.load(Ordering::SeqCst), fetches, "a failed refresh is retried on every request");
    clock.advance(Duration::from_secs(60));
    auth.verify(&token(&clock)).await.unwrap();
    assert_eq!(f.fetches.load(Ordering::SeqCst), fetches + 1, "a failed refresh was not retried after a minute");
    // …and for 24 hours after the last good fetch, not a second more.
    clock.set(fetched_at.plus(Duration::from_secs(24 * 3600 - 1)));
    auth.verify(&token(&clock)).await.expect("keys under a day old were refused during an outage");
    clock.set(fetched_at.plus(Duration::from_secs(24 * 3600)));
    assert!(
        matches!(auth.verify(&token(&clock)).await, Err(AuthError::KeysUnavailable(_))),
        "day-old keys still verify during an outage (or the refusal is not a retryable 503)"
    );
    // The issuer is back: fresh keys, verification resumes.
    f.down.store(false, Ordering::SeqCst);
    clock.advance(JWKS_MIN_REFETCH);
    auth.verify(&token(&clock)).await.unwrap();
}

#[tokio::test]
async fn wrong_issuer_client_and_algorithm_confusion_are_refused() {
    let (auth, _, clock) = setup();
    let now = clock.now().as_epoch_seconds();
    assert!(auth.verify(&cognito_token("test-key-1", "https://evil.example", "claude-client", now)).await.is_err());
    assert!(auth.verify(&cognito_token("test-key-1", ISSUER, "some-other-app", now)).await.is_err());
    // An HS256 token "signed" with the public key material must not pass an RS256 verifier.
    let hs = Hs256Signer::new(b"public-key-bytes-as-a-secret....", ISSUER, "claude-client")
        .mint(Grant { subject: "s", client: "claude-client", scopes: &[] }, clock.now(), Duration::from_secs(60))
        .unwrap();
    assert!(matches!(auth.verify(&hs).await, Err(AuthError::Invalid(_))));
    // The classic confusion: HS256 under the real key's id, keyed with its public modulus, so
    // the key is found and only the algorithm check stands in the way.
    let set: serde_json::Value = serde_json::from_str(&fixture("rs256-test-jwks.json")).unwrap();
    let public = set["keys"][0]["n"].as_str().unwrap().to_owned();
    let claims = claims_of("claude-client", "osfoundry/read osfoundry/run", now);
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(set["keys"][0]["kid"].as_str().unwrap().into());
    let confused = jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(public.as_bytes())).unwrap();
    let refused = auth.verify(&confused).await;
    assert!(
        matches!(&refused, Err(AuthError::Invalid(m)) if m.contains("is not accepted")),
        "HS256 under the RSA key's id: {refused:?}"
    );
}

#[tokio::test]
async fn the_mcp_lambda_router_answers_http_api_events() {
    use mcp_endpoint::{InProcess, McpEndpoint};
    use store_sqlite::SqliteStore;
    use tools::ToolDeps;
    let (mut auth, jwks, clock) = setup();
    // As the mcp function verifies: any app client of the pool.
    auth.audience = Audience::AnyClient;
    let store = Arc::new(SqliteStore::in_memory(clock.clone(), Default::default()).unwrap());
    let deps = ToolDeps {
        store,
        clock: clock.clone(),
        policy: Default::default(),
        blobs: Some(foundry_tests::temp_blobs(clock.clone())),
        panel_url: None,
    };
    // As the mcp function configures itself from the template's environment.
    let config = lambda::config::McpConfig::from_env(|k| {
        let v = match k {
            "OAUTH_ISSUER" => ISSUER.to_owned(),
            "JWKS_URL" => format!("{ISSUER}/.well-known/jwks.json"),
            "HOSTED_AUTH_URL" => "https://fc.auth.eu-west-1.amazoncognito.com".into(),
            "PUBLIC_URL" => "https://abc.execute-api.eu-west-1.amazonaws.com".into(),
            "OAUTH_SCOPE_PREFIX" => "osfoundry/".into(),
            "TABLE_NAME" => "unused".into(),
            k if k.starts_with("TOOL_FUNCTION_") => "unused".into(),
            _ => return None,
        };
        Some(v)
    })
    .unwrap();
    let auth_server = config.auth_server.clone();
    let endpoint = McpEndpoint::new(Arc::new(InProcess(deps)), Arc::new(auth), config.endpoint);
    let token = cognito_token("test-key-1", ISSUER, "claude-client", clock.now().as_epoch_seconds());
    let event = serde_json::json!({
        "version": "2.0", "routeKey": "POST /mcp", "rawPath": "/mcp", "rawQueryString": "",
        "headers": {
            "host": "abc.execute-api.eu-west-1.amazonaws.com",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-11-25",
            "authorization": format!("Bearer {token}")
        },
        "requestContext": {
            "accountId": "123456789012", "apiId": "abc", "domainName": "abc.execute-api.eu-west-1.amazonaws.com",
            "domainPrefix": "abc", "http": {"method": "POST", "path": "/mcp", "protocol": "HTTP/1.1", "sourceIp": "192.0.2.1", "userAgent": "test"},
            "requestId": "r1", "routeKey": "POST /mcp", "stage": "$default", "time": "29/Nov/2026:10:00:00 +0000", "timeEpoch": 1795947600000u64
        },
        "body": "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}",
        "isBase64Encoded": false
    });
    let req = lambda_http::request::from_str(&event.to_string()).unwrap();
    let res = lambda::mcp::route(&endpoint, &auth_server, req).await;
    assert_eq!(res.status(), 200);
    let body: serde_json::Value = serde_json::from_slice(res.body().as_ref()).unwrap();
    assert_eq!(body["result"]["tools"].as_array().unwrap().len(), 9);
    // Without a token: 401 pointing at the metadata.
    let mut unauth = event.clone();
    unauth["headers"].as_object_mut().unwrap().remove("authorization");
    let res =
        lambda::mcp::route(&endpoint, &auth_server, lambda_http::request::from_str(&unauth.to_string()).unwrap()).await;
    assert_eq!(res.status(), 401);
    assert_eq!(
        res.headers()["www-authenticate"],
        "Bearer resource_metadata=\"https://abc.execute-api.eu-west-1.amazonaws.com/.well-known/oauth-protected-resource\""
    );
    // The metadata and the 403 challenge name the scopes the way Cognito issues them.
    let mut meta = event.clone();
    meta["rawPath"] = serde_json::json!("/.well-known/oauth-protected-resource");
    meta["requestContext"]["http"]["method"] = serde_json::json!("GET");
    meta["requestContext"]["http"]["path"] = serde_json::json!("/.well-known/oauth-protected-resource");
    meta["body"] = serde_json::Value::Null;
    let res =
        lambda::mcp::route(&endpoint, &auth_server, lambda_http::request::from_str(&meta.to_string()).unwrap()).await;
    let doc: serde_json::Value = serde_json::from_slice(res.body().as_ref()).unwrap();
    assert_eq!(doc["scopes_supported"], serde_json::json!(["osfoundry/read", "osfoundry/run"]));
    let read_only = rs256("test-key-1", &claims_of("claude-client", "osfoundry/read", clock.now().as_epoch_seconds()));
    let mut call = event.clone();
    call["headers"]["authorization"] = serde_json::json!(format!("Bearer {read_only}"));
    call["body"] = serde_json::json!(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "claim_linked_chat_task", "arguments": {}}})
        .to_string()
    );
    let res =
        lambda::mcp::route(&endpoint, &auth_server, lambda_http::request::from_str(&call.to_string()).unwrap()).await;
    assert_eq!(res.status(), 403);
    let challenge = res.headers()["www-authenticate"].to_str().unwrap();
    // Every connector scope, in Cognito's spelling (a client asking for exactly these keeps what it had).
    assert!(challenge.contains("scope=\"osfoundry/read osfoundry/run\""), "{challenge}");
    let listed: serde_json::Value = serde_json::from_slice(
        lambda::mcp::route(&endpoint, &auth_server, lambda_http::request::from_str(&event.to_string()).unwrap())
            .await
            .body()
            .as_ref(),
    )
    .unwrap();
    assert_eq!(listed["result"]["tools"][0]["securitySchemes"][0]["scopes"], serde_json::json!(["osfoundry/read"]));
    // The Host check is on by default: a request for another host is refused.
    let mut foreign = event.clone();
    foreign["headers"]["host"] = serde_json::json!("evil.example");
    let res =
        lambda::mcp::route(&endpoint, &auth_server, lambda_http::request::from_str(&foreign.to_string()).unwrap())
            .await;
    assert_eq!(res.status(), 403, "a foreign Host was served");
    // A token of another app client of the pool (a chat that registered itself) is accepted…
    let mut registered = event.clone();
    let other = cognito_token("test-key-1", ISSUER, "dcr-client-7", clock.now().as_epoch_seconds());
    registered["headers"]["authorization"] = serde_json::json!(format!("Bearer {other}"));
    let res =
        lambda::mcp::route(&endpoint, &auth_server, lambda_http::request::from_str(&registered.to_string()).unwrap())
            .await;
    assert_eq!(res.status(), 200);
    // …but not the owner's token (the panel's client), even from the same pool.
    let owner =
        rs256("test-key-1", &claims_of("owner-client", "openid osfoundry/owner", clock.now().as_epoch_seconds()));
    registered["headers"]["authorization"] = serde_json::json!(format!("Bearer {owner}"));
    let res =
        lambda::mcp::route(&endpoint, &auth_server, lambda_http::request::from_str(&registered.to_string()).unwrap())
            .await;
    assert_eq!(res.status(), 401, "an owner token reached the MCP endpoint");
    assert!(res.headers()["www-authenticate"].to_str().unwrap().contains("invalid_token"));
    // The stack's own authorization-server metadata (RFC 8414), naming its own facade.
    for path in ["/.well-known/oauth-authorization-server"] {
        let mut m = meta.clone();
        m["rawPath"] = serde_json::json!(path);
        m["requestContext"]["http"]["path"] = serde_json::json!(path);
        let res =
            lambda::mcp::route(&endpoint, &auth_server, lambda_http::request::from_str(&m.to_string()).unwrap()).await;
        assert_eq!(res.status(), 200, "{path}");
        let doc: serde_json::Value = serde_json::from_slice(res.body().as_ref()).unwrap();
        assert_eq!(doc["issuer"], "https://abc.execute-api.eu-west-1.amazonaws.com", "{path}");
        assert_eq!(doc["code_challenge_methods_supported"], serde_json::json!(["S256"]));
        assert_eq!(doc["authorization_endpoint"], "https://abc.execute-api.eu-west-1.amazonaws.com/authorize");
        assert_eq!(doc["token_endpoint"], "https://abc.execute-api.eu-west-1.amazonaws.com/token");
        assert_eq!(doc["revocation_endpoint"], "https://abc.execute-api.eu-west-1.amazonaws.com/revoke");
    }
    // The issuer has been down for a day: no key can be vouched for, and the answer is a
    // retryable 503, not a 401 that would tell the client to drop a good token.
    jwks.down.store(true, Ordering::SeqCst);
    clock.advance(Duration::from_secs(24 * 3600));
    let res =
        lambda::mcp::route(&endpoint, &auth_server, lambda_http::request::from_str(&event.to_string()).unwrap()).await;
    assert_eq!(res.status(), 503, "a key outage answered as a bad token");
    assert_eq!(res.headers()["retry-after"], "5");
    assert!(!res.headers().contains_key("www-authenticate"), "a 503 that asks for another token");
}
