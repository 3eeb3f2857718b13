//! The official MCP conformance runner (`@modelcontextprotocol/conformance`, npm) against the
//! local server, for the server scenarios that apply to a tools-only server: initialize,
//! tools/list, ping and DNS-rebinding protection.
//!
//! The runner connects without credentials, so it talks to a small proxy here that adds the
//! bearer token and forwards everything else untouched (method, path, headers including `Host`,
//! body). `infra/test.sh` installs the runner pinned, with a Node 22 binary from the npm
//! registry, and passes `FOUNDRY_CONFORMANCE_NODE` and `FOUNDRY_CONFORMANCE_CLI`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use local::LocalConfig;

struct Proxy {
    target: String,
    token: String,
    http: reqwest::Client,
}

async fn forward(State(p): State<Arc<Proxy>>, req: http::Request<Body>) -> http::Response<Body> {
    let (parts, body) = req.into_parts();
    let body: Bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let url = format!("{}{}", p.target, parts.uri.path());
    let mut out = p.http.request(parts.method.clone(), url).body(body);
    for (k, v) in &parts.headers {
        out = out.header(k, v);
    }
    out = out.header("authorization", format!("Bearer {}", p.token));
    let res = out.send().await.unwrap();
    let mut builder = http::Response::builder().status(res.status());
    for (k, v) in res.headers() {
        builder = builder.header(k, v);
    }
    builder.body(Body::from(res.bytes().await.unwrap())).unwrap()
}

#[tokio::test]
async fn official_conformance_server_scenarios() {
    let (Some(node), Some(cli)) =
        (std::env::var_os("FOUNDRY_CONFORMANCE_NODE"), std::env::var_os("FOUNDRY_CONFORMANCE_CLI"))
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "FOUNDRY_CONFORMANCE_* not set under CI=true (use infra/test.sh)"
        );
        eprintln!(
            "\n*** SKIPPING: FOUNDRY_CONFORMANCE_NODE/CLI not set; ./infra/test.sh installs the pinned runner. ***\n"
        );
        return;
    };
    let dir = std::env::temp_dir().join(format!("foundry-conf-{}", uuid::Uuid::new_v4()));
    let running = local::start(LocalConfig::at(dir.clone())).await.unwrap();
    let proxy = Arc::new(Proxy {
        target: format!("http://{}", running.addr),
        token: running.token.clone(),
        http: reqwest::Client::new(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(forward).with_state(proxy);
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let mut failures = Vec::new();
    for scenario in ["server-initialize", "tools-list", "ping", "dns-rebinding-protection"] {
        let out = tokio::process::Command::new(&node)
            .arg(&cli)
            .args(["server", "--url", &format!("http://localhost:{}/mcp", proxy_addr.port()), "--scenario", scenario])
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        let summary = text.lines().find(|l| l.contains("Passed:")).unwrap_or("(no summary)").to_owned();
        eprintln!("conformance {scenario}: {summary}");
        if !out.status.success() {
            failures.push(format!("{scenario}:\n{text}"));
        }
    }
    server.abort();
    running.stop().await;
    let _ = std::fs::remove_dir_all(dir);
    assert!(failures.is_empty(), "conformance failures:\n{}", failures.join("\n"));
}
