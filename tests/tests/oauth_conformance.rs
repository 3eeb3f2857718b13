//! The official MCP conformance runner's authorization-server scenarios (0.2 line:
//! `authorization-server-metadata-endpoint`, `authorization-code-grant`), against the local
//! server and the cloud shape, with a Client ID Metadata Document as the client and the runner's
//! loopback callback on a port it picks — the person's part (the consent page locally,
//! Cognito's page in the cloud) scripted. The runner's summary (checks passed and failed per
//! scenario) is compared with an exact baseline, so a check that appears, disappears or stops
//! passing fails the test. The metadata scenario checks RFC 8414 and
//! `client_id_metadata_document_supported`; the code grant checks the redirect, `state`, `iss`
//! (against the metadata's issuer) and the token answer.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use foundry_tests::cloud::{Emulator, Template, account};
use foundry_tests::documents::DocumentHost;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Each scenario's checks passed and failed: the runner's summary must be exactly this.
const EXPECTED: &[(&str, u32, u32)] =
    &[("authorization-server-metadata-endpoint", 2, 0), ("authorization-code-grant", 1, 0), ("Total", 3, 0)];

fn runner() -> Option<(std::ffi::OsString, std::ffi::OsString)> {
    match (std::env::var_os("FOUNDRY_CONFORMANCE_NODE"), std::env::var_os("FOUNDRY_CONFORMANCE2_CLI")) {
        (Some(n), Some(c)) => Some((n, c)),
        _ => {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "FOUNDRY_CONFORMANCE_* not set under CI=true");
            eprintln!(
                "\n*** SKIPPING: FOUNDRY_CONFORMANCE_NODE/CONFORMANCE2_CLI not set (infra/test.sh sets them) ***\n"
            );
            None
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The summary lines `✓ <scenario>: <n> passed, <m> failed` of the runner's output.
fn checks(text: &str) -> Vec<(String, u32, u32)> {
    text.lines()
        .filter_map(|l| {
            let (name, counts) = l.trim().trim_start_matches(['✓', '✗', ' ']).split_once(": ")?;
            let (passed, failed) = counts.split_once(" passed, ")?;
            Some((name.to_owned(), passed.parse().ok()?, failed.trim_end_matches(" failed").parse().ok()?))
        })
        .collect()
}

/// Runs both scenarios against `issuer`; `person` gets the authorization URL the runner prints
/// and returns where the browser is sent back (the runner's callback, which it then reads).
async fn run<F, Fut>(issuer: &str, resource: &str, client_id: &str, person: F) -> Vec<(String, u32, u32)>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let (node, cli) = runner().unwrap();
    let mut found = Vec::new();
    // Without --scenario the runner runs every authorization-server scenario in order, the
    // code grant reading the metadata the first one fetched.
    let port = free_port().to_string();
    let mut child = tokio::process::Command::new(&node)
        .arg(&cli)
        .args(["authorization", "--url", issuer, "--verbose"])
        .args(["--client-id", client_id, "--resource", resource, "--port", &port])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut text = String::new();
    let url = loop {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .expect("the runner printed no authorization URL")
            .unwrap()
            .unwrap_or_else(|| panic!("the runner ended before asking for a sign-in:\n{text}"));
        text.push_str(&line);
        text.push('\n');
        if line.starts_with("http") && line.contains("code_challenge=") {
            break line;
        }
    };
    let back = person(url).await;
    assert!(back.starts_with(&format!("http://127.0.0.1:{port}/callback")), "sent back to {back}");
    reqwest::get(&back).await.unwrap();
    while let Some(line) = lines.next_line().await.unwrap() {
        text.push_str(&line);
        text.push('\n');
    }
    let status = child.wait().await.unwrap();
    eprintln!("{}", text.lines().find(|l| l.contains("Passed:")).unwrap_or("(no summary)"));
    assert!(status.success(), "the authorization-server scenarios:\n{text}");
    found.extend(checks(&text));
    assert!(!found.is_empty(), "no checks in the runner's output:\n{text}");
    found
}

fn assert_exact(found: &[(String, u32, u32)]) {
    let found: Vec<(&str, u32, u32)> = found.iter().map(|(n, p, f)| (n.as_str(), *p, *f)).collect();
    assert_eq!(found, EXPECTED, "the runner's checks differ from the baseline");
}

fn document(host: &DocumentHost) -> String {
    host.document(
        "/oauth/conformance-client",
        json!({"client_name": "MCP conformance runner", "redirect_uris": ["http://127.0.0.1/callback"],
               "token_endpoint_auth_method": "none"}),
        None,
    )
}

fn no_redirects() -> reqwest::Client {
    foundry_tests::http_builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_authorization_server_passes_the_runners_scenarios() {
    if runner().is_none() {
        return;
    }
    let host = DocumentHost::start().await;
    let client = document(&host);
    let running = foundry_tests::LocalServer::start("foundry-as-conf", |c| local::LocalConfig {
        allow_loopback_client_metadata: true,
        ..c
    })
    .await;
    let (base, owner) = (running.base_url.clone(), running.owner_token.clone());
    let person = |url: String| async move {
        let http = no_redirects();
        let session = http.post(format!("{base}/oauth/session")).bearer_auth(&owner).send().await.unwrap();
        let cookie = session.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
        let html = http.get(&url).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
        let csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
        let res = http
            .post(format!("{base}/oauth/authorize"))
            .header("cookie", &cookie)
            .form(&[("csrf", csrf.as_str()), ("decision", "allow")])
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 303);
        res.headers()["location"].to_str().unwrap().to_owned()
    };
    let found = run(&running.base_url, &running.mcp_url, &client, person).await;
    assert_exact(&found);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cloud_facade_passes_the_runners_scenarios() {
    if runner().is_none() {
        return;
    }
    let Some(acct) = account().await else { return };
    let host = DocumentHost::start().await;
    let client = document(&host);
    let template = Template::load();
    let emu = Emulator::start(&template, &acct.resources, &acct.base_env).await;
    emu.wait_ready().await;
    let connector = template.output("McpConnectorUrl", &acct.resources, &emu.gateway);
    // Cognito's page (emulated: the owner is signed in at once), then the facade's callback.
    let person = |url: String| async move {
        let http = no_redirects();
        let mut res = http.get(&url).send().await.unwrap();
        for _ in 0..2 {
            assert!(res.status().is_redirection(), "{}", res.status());
            let next = res.headers()["location"].to_str().unwrap().to_owned();
            res = http.get(next).send().await.unwrap();
        }
        assert!(res.status().is_redirection());
        res.headers()["location"].to_str().unwrap().to_owned()
    };
    let found = run(&emu.gateway, &connector, &client, person).await;
    assert_exact(&found);
}
