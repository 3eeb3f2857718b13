//! The relay API's and owner API's refusals over HTTP: each a clear JSON error naming the
//! field and the rule, and no write.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use local::LocalConfig;
use serde_json::{Value, json};

async fn call(http: &reqwest::Client, method: reqwest::Method, url: String, token: &str, body: Value) -> (u16, Value) {
    let res = http.request(method, url).bearer_auth(token).json(&body).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn relay_and_owner_apis_refuse_bad_input_clearly_and_write_nothing() {
    let dir = std::env::temp_dir().join(format!("foundry-relayapi-{}", uuid::Uuid::new_v4()));
    let running = local::start(LocalConfig::at(dir.clone())).await.unwrap();
    let http = reqwest::Client::new();
    let base = format!("{}{}", running.base_url, service::relay_api::PREFIX);
    let token = running.device_token.clone();
    let project = running.demo.project_id.to_string();
    let writes = running.store.write_transactions();
    let session = |n: usize| json!({"graph_session_id": format!("gs_{n:032x}"), "name": "G", "slug": "g"});
    let cases: Vec<(reqwest::Method, String, &str, Value, u16, &str)> = vec![
        (
            reqwest::Method::POST,
            format!("{base}/sync"),
            "fcd_not-a-real-token",
            json!({"project_id": project, "sessions": []}),
            401,
            "a valid device token",
        ),
        (
            reqwest::Method::POST,
            format!("{base}/sync"),
            &token,
            json!({"project_id": project, "sessions": (0..101).map(session).collect::<Vec<_>>()}),
            400,
            "sessions: at most 100 sessions per project (got 101)",
        ),
        (
            reqwest::Method::POST,
            format!("{base}/sync"),
            &token,
            json!({"project_id": project, "sessions": [{"graph_session_id": "gs_bad", "name": "G", "slug": "g"}]}),
            400,
            "sessions[0].graph_session_id",
        ),
        (
            reqwest::Method::POST,
            format!("{base}/sync"),
            &token,
            json!({"project_id": "nope"}),
            400,
            "project_id: must be a UUID",
        ),
        (
            reqwest::Method::POST,
            format!("{base}/commands/not-a-uuid/start"),
            &token,
            json!({"execution_id": "e"}),
            400,
            "command_id: must be a UUID",
        ),
        (
            reqwest::Method::GET,
            format!("{base}/commands/1234/control"),
            &token,
            json!(null),
            400,
            "command_id: must be a UUID",
        ),
        (
            reqwest::Method::POST,
            format!("{base}/commands/{}/complete", uuid::Uuid::new_v4()),
            &token,
            json!({"execution_id": "e", "status": "completed", "result": "a".repeat(100_001)}),
            400,
            "result: the completion JSON is",
        ),
        (
            reqwest::Method::POST,
            format!("{base}/commands/{}/complete", uuid::Uuid::new_v4()),
            &token,
            json!({"execution_id": "e", "status": "failed", "error": "é".repeat(2_001)}),
            400,
            "error: must be at most 2000 characters",
        ),
        (
            reqwest::Method::POST,
            format!("{base}/commands/{}/complete", uuid::Uuid::new_v4()),
            &token,
            json!({"execution_id": "e", "status": "done"}),
            400,
            "status: unknown variant",
        ),
        (
            reqwest::Method::POST,
            format!("{}/owner/devices", running.base_url),
            &running.token,
            json!({"name": "x"}),
            403,
            "osfoundry:owner",
        ),
        (
            reqwest::Method::POST,
            format!("{}/owner/devices", running.base_url),
            &running.owner_token,
            json!({"name": ""}),
            400,
            "name: must be 1 to 200 characters",
        ),
    ];
    for (method, url, token, body, status, needle) in cases {
        let (got, v) = call(&http, method.clone(), url.clone(), token, body).await;
        let msg = v["error"].as_str().unwrap_or_default().to_owned();
        assert_eq!(got, status, "{method} {url}: {v}");
        assert!(msg.contains(needle), "{method} {url}: {msg:?} should contain {needle:?}");
    }
    assert_eq!(running.store.write_transactions(), writes, "a refused request wrote");
    // And the happy path once: the sync answers the server-controlled poll interval.
    let (status, v) = call(
        &http,
        reqwest::Method::POST,
        format!("{base}/sync"),
        &token,
        json!({"project_id": project, "sessions": [session(1)]}),
    )
    .await;
    assert_eq!((status, v["poll_interval_s"].as_u64()), (200, Some(20)));
    // A device token created through the owner API works, and is shown only once.
    let (status, created) = call(
        &http,
        reqwest::Method::POST,
        format!("{}/owner/devices", running.base_url),
        &running.owner_token,
        json!({"name": "MacBook"}),
    )
    .await;
    assert_eq!(status, 201);
    let new_token = created["token"].as_str().unwrap().to_owned();
    let (_, listed) = call(
        &http,
        reqwest::Method::GET,
        format!("{}/owner/devices", running.base_url),
        &running.owner_token,
        json!(null),
    )
    .await;
    assert!(!listed.to_string().contains(&new_token), "a token was shown twice");
    let (status, _) = call(
        &http,
        reqwest::Method::POST,
        format!("{base}/sync"),
        &new_token,
        json!({"project_id": project, "sessions": []}),
    )
    .await;
    assert_eq!(status, 200);
    let id = created["device_id"].as_str().unwrap();
    let (status, _) = call(
        &http,
        reqwest::Method::DELETE,
        format!("{}/owner/devices/{id}", running.base_url),
        &running.owner_token,
        json!(null),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call(
        &http,
        reqwest::Method::POST,
        format!("{base}/sync"),
        &new_token,
        json!({"project_id": project, "sessions": []}),
    )
    .await;
    assert_eq!(status, 401, "a revoked token still works");
    running.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
