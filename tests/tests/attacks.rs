//! Hardening, part two (issue 42): the doorbell, pairing and the local listener attacked over
//! real connections to the local server on 127.0.0.1, with one device token and a second
//! owner's token, as an attacker would. Each test failed on the code before the fix (the
//! closing note of issue 42 says how each one failed), and every bound it checks is asserted
//! from the outside: close frames, status codes, what the relay prints.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use domain::clock::Clock;
use local::{LocalConfig, Running};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DOORBELL: &str = "/external-assistants/graph-relays/doorbell";
const PAIRINGS: &str = "/external-assistants/graph-relays/pairings";

async fn start(config: impl FnOnce(LocalConfig) -> LocalConfig) -> foundry_tests::LocalServer {
    foundry_tests::LocalServer::start("foundry-attacks", config).await
}

fn host_of(running: &Running) -> String {
    running.addr.to_string()
}

/// A WebSocket upgrade of the doorbell by hand: its status, and the stream (the socket when 101).
async fn upgrade(running: &Running, token: &str, host: &str) -> (u16, TcpStream) {
    foundry_tests::ws_upgrade(&running.addr.to_string(), DOORBELL, host, Some(token)).await
}

/// A masked client frame header (RFC 6455 §5.2) announcing `len` bytes of `opcode`.
fn frame_header(opcode: u8, len: u64) -> Vec<u8> {
    let mut h = vec![0x80 | opcode];
    match len {
        0..=125 => h.push(0x80 | len as u8),
        126..=65_535 => {
            h.push(0x80 | 126);
            h.extend((len as u16).to_be_bytes());
        }
        _ => {
            h.push(0x80 | 127);
            h.extend(len.to_be_bytes());
        }
    }
    h.extend([0u8; 4]); // the mask key: zeros leave the payload as it is
    h
}

/// How a server socket ended: a close frame's code, or the connection dropped (`None`), or
/// still open after `within` (`Err`).
async fn ending(s: &mut TcpStream, within: Duration) -> Result<Option<u16>, ()> {
    let read = async {
        loop {
            let mut h = [0u8; 2];
            if s.read_exact(&mut h).await.is_err() {
                return None;
            }
            let mut len = u64::from(h[1] & 0x7f);
            if len == 126 {
                let mut b = [0u8; 2];
                s.read_exact(&mut b).await.ok()?;
                len = u64::from(u16::from_be_bytes(b));
            } else if len == 127 {
                let mut b = [0u8; 8];
                s.read_exact(&mut b).await.ok()?;
                len = u64::from_be_bytes(b);
            }
            let mut payload = vec![0u8; usize::try_from(len).ok()?];
            s.read_exact(&mut payload).await.ok()?;
            if h[0] & 0x0f == 8 {
                return Some(payload.get(..2).map_or(1005, |c| u16::from_be_bytes([c[0], c[1]])));
            }
        }
    };
    tokio::time::timeout(within, read).await.map_err(|_| ())
}

fn other_owner(running: &Running) -> String {
    foundry_tests::other_owner_token(running, "mallory")
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Starts a pairing for `token_hash`: (status, answer).
async fn start_pairing(http: &reqwest::Client, running: &Running, token_hash: &str) -> (u16, Value) {
    let res = http
        .post(format!("{}{PAIRINGS}", running.base_url))
        .json(&json!({"name": "Ana's MacBook", "os": "macos", "arch": "aarch64", "token_sha256": token_hash}))
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.json().await.unwrap_or(Value::Null))
}

async fn owner_call(http: &reqwest::Client, running: &Running, token: &str, method: &str, path: &str) -> (u16, Value) {
    let res = http
        .request(method.parse().unwrap(), format!("{}/owner{path}", running.base_url))
        .bearer_auth(token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.json().await.unwrap_or(Value::Null))
}

async fn poll(http: &reqwest::Client, running: &Running, device_code: &str) -> (u16, Value) {
    let res = http
        .post(format!("{}{PAIRINGS}/token", running.base_url))
        .json(&json!({"device_code": device_code}))
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.json().await.unwrap_or(Value::Null))
}

/// One device token opening sockets one after another: the server keeps at most a few of them
/// (before: every one of 2,000 upgrades was accepted and kept, 26 → 282 MB).
#[tokio::test]
async fn one_device_token_cannot_pile_up_doorbell_sockets() {
    let running = start(|c| c).await;
    let host = host_of(&running);
    let mut sockets = Vec::new();
    for _ in 0..12 {
        let (status, s) = upgrade(&running, &running.device_token, &host).await;
        assert_eq!(status, 101);
        sockets.push(s);
    }
    let mut replaced = 0;
    for s in sockets.iter_mut().take(8) {
        match ending(s, Duration::from_secs(10)).await {
            Ok(Some(code)) => {
                assert_eq!(code, domain::doorbell::CLOSE_REPLACED);
                replaced += 1;
            }
            other => panic!("an older socket of the device must be closed as replaced: {other:?}"),
        }
    }
    assert_eq!(replaced, 8);
    assert_eq!(running.doorbell.connected(Some(running.device_id)), domain::doorbell::MAX_SOCKETS_PER_DEVICE);
    for s in sockets.iter_mut().skip(8) {
        assert!(ending(s, Duration::from_millis(300)).await.is_err(), "the newest sockets stay open");
    }
}

/// A frame that announces more than a relay ever sends is refused when its header arrives,
/// before anything is buffered (before: axum buffered anything under 64 MiB; 8 sockets sending
/// 60 MiB messages in 15 MiB fragments took the server to 832 MB). A data message of any size
/// ends the socket too: a relay sends only pings. So does a message of small frames that adds
/// up past the limit (each frame passes the frame limit; only the message limit stops it).
#[tokio::test]
async fn oversized_and_data_messages_end_the_doorbell_socket() {
    let running = start(|c| c).await;
    let host = host_of(&running);
    for announced in [15 * 1024 * 1024_u64, 60 * 1024] {
        let (status, mut s) = upgrade(&running, &running.device_token, &host).await;
        assert_eq!(status, 101);
        let mut frame = frame_header(0x2, announced);
        frame.extend(vec![0u8; 16 * 1024]);
        let _ = s.write_all(&frame).await;
        let end = ending(&mut s, Duration::from_secs(5)).await;
        assert!(end.is_ok(), "a {announced}-byte frame must end the socket at once, it is still open");
    }
    // A message of small frames that adds up past the limit and is never finished: each frame
    // is small, so only the message's limit ends it (without it the server buffers frame after
    // frame, up to 64 MiB a socket).
    let (_, mut s) = upgrade(&running, &running.device_token, &host).await;
    let chunk = 1024_u64;
    for i in 0..=(domain::doorbell::MAX_CLIENT_MESSAGE_BYTES as u64 / chunk + 1) {
        let mut frame = frame_header(if i == 0 { 0x2 } else { 0x0 }, chunk);
        frame[0] &= 0x7f; // not the last frame
        frame.extend(vec![0u8; chunk as usize]);
        if s.write_all(&frame).await.is_err() {
            break;
        }
    }
    let end = ending(&mut s, Duration::from_secs(5)).await;
    assert!(end.is_ok(), "a message of small frames past the limit must end the socket, it is still open");
    let (_, mut s) = upgrade(&running, &running.device_token, &host).await;
    let mut text = frame_header(0x1, 5);
    text.extend(b"hello");
    s.write_all(&text).await.unwrap();
    assert_eq!(ending(&mut s, Duration::from_secs(5)).await, Ok(Some(1008)));
    // A ping is what a relay sends: answered, the socket stays.
    let (_, mut s) = upgrade(&running, &running.device_token, &host).await;
    s.write_all(&frame_header(0x9, 0)).await.unwrap();
    let mut pong = [0u8; 2];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut pong)).await.unwrap().unwrap();
    assert_eq!(pong[0] & 0x0f, 0xA, "a pong");
}

/// A second owner guessing codes is stopped after a few misses: even the right code is then
/// refused (before: ~870 lookups a second, all 404, and a right guess answered 200 and could be
/// approved into the guesser's account). The real owner is not locked out by it.
#[tokio::test]
async fn a_second_owner_cannot_guess_a_pairing_code() {
    let running = start(|c| c).await;
    let http = foundry_tests::http();
    let (s, started) = start_pairing(&http, &running, &"ab".repeat(32)).await;
    assert_eq!(s, 200, "{started}");
    let code = started["user_code"].as_str().unwrap().to_owned();
    let mallory = other_owner(&running);
    let alphabet = domain::pairing::USER_CODE_ALPHABET;
    let mut misses = 0;
    let mut refused_at = None;
    for i in 0..40 {
        let guess: String = (0..8).map(|k| char::from(alphabet[(i * 7 + k * 3) % alphabet.len()])).collect();
        if guess == code.replace('-', "") {
            continue;
        }
        let (status, body) = owner_call(&http, &running, &mallory, "GET", &format!("/pairings/{guess}")).await;
        match status {
            404 => misses += 1,
            429 => {
                refused_at = Some(i);
                assert!(body["error"].as_str().unwrap().starts_with("user_code: too many"), "{body}");
                break;
            }
            other => panic!("a guess answered {other}: {body}"),
        }
    }
    assert!(refused_at.is_some(), "40 guesses in a row were all answered ({misses} misses)");
    assert!(misses <= 10, "{misses} misses before the lookups were refused");
    for (method, path) in [("GET", format!("/pairings/{code}")), ("POST", format!("/pairings/{code}/approve"))] {
        let (status, body) = owner_call(&http, &running, &mallory, method, &path).await;
        assert_eq!(status, 429, "the guesser must not learn or take the real code: {method} {path} {body}");
    }
    let (status, view) = owner_call(&http, &running, &running.owner_token, "GET", &format!("/pairings/{code}")).await;
    assert_eq!(status, 200, "the owner still sees it: {view}");
    assert_eq!(view["requested_from"], "127.0.0.1", "the approve page shows where the request came from: {view}");
}

/// The pairing routes and the doorbell keep the rules `/register` keeps: only this server's
/// host names (a DNS-rebinding page reaches 127.0.0.1 under its own) and only JSON bodies (a
/// `text/plain` post needs no preflight: any web page could spend the hourly pairing budget).
#[tokio::test]
async fn pairing_routes_and_the_doorbell_refuse_foreign_hosts_and_non_json_bodies() {
    let running = start(|c| c).await;
    let http = foundry_tests::http();
    let body = json!({"name": "x", "os": "linux", "arch": "x86_64", "token_sha256": "cd".repeat(32)}).to_string();
    // Counted before the first refusal, so the 415 is covered too.
    let writes = running.store.write_transactions();
    let plain = http
        .post(format!("{}{PAIRINGS}", running.base_url))
        .header("content-type", "text/plain")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 415, "{:?}", plain.text().await);
    let foreign = http
        .post(format!("{}{PAIRINGS}", running.base_url))
        .header("host", "rebound.attacker.example")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 421);
    let code_poll = http
        .post(format!("{}{PAIRINGS}/token", running.base_url))
        .header("host", "rebound.attacker.example")
        .json(&json!({"device_code": "fcp_x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(code_poll.status(), 421);
    assert_eq!(running.store.write_transactions(), writes, "refusals write nothing");
    let (status, _) = upgrade(&running, &running.device_token, "rebound.attacker.example").await;
    assert_eq!(status, 421, "the doorbell refuses a foreign host too");
    let (status, _) = upgrade(&running, &running.device_token, &host_of(&running)).await;
    assert_eq!(status, 101, "and still upgrades for its own");
}

/// A connection that never finishes its request line is cut off after the header timeout, and
/// the listener holds a bounded number of connections (before: a half request line stayed open
/// for good, and anyone reaching the port could hold every file handle).
#[tokio::test]
async fn slow_requests_are_cut_off_and_connections_are_capped() {
    let env: HashMap<&str, &str> = [
        ("FOUNDRY_HEADER_TIMEOUT_SECONDS", "2"),
        ("FOUNDRY_MAX_CONNECTIONS", "8"),
        ("FOUNDRY_PORT", "0"),
        ("FOUNDRY_DATA_DIR", "/unused"),
    ]
    .into();
    let from_env = LocalConfig::from_env(|k| env.get(k).map(|v| (*v).to_owned())).unwrap();
    let running = start(|c| LocalConfig { data_dir: c.data_dir, ..from_env }).await;
    let mut half = TcpStream::connect(running.addr).await.unwrap();
    half.write_all(b"GET /openapi.json HT").await.unwrap();
    let mut idle = Vec::new();
    for _ in 0..7 {
        idle.push(TcpStream::connect(running.addr).await.unwrap());
    }
    // The cap is taken: the next request waits until the silent ones are cut off.
    let asked = Instant::now();
    let mut late = TcpStream::connect(running.addr).await.unwrap();
    late.write_all(format!("GET /openapi.json HTTP/1.1\r\nHost: {}\r\n\r\n", running.addr).as_bytes()).await.unwrap();
    let (status, _) =
        tokio::time::timeout(Duration::from_secs(20), foundry_tests::read_http_head(&mut late)).await.unwrap();
    let waited = asked.elapsed();
    assert_eq!(status, 200);
    assert!(waited >= Duration::from_millis(1500), "answered after {waited:?}: the cap of 8 did not hold");
    let mut rest = Vec::new();
    let cut = tokio::time::timeout(Duration::from_secs(10), half.read_to_end(&mut rest)).await;
    assert!(cut.is_ok(), "the half request was not cut off");
    for mut s in idle {
        let cut = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await;
        assert!(cut.is_ok(), "an idle connection was not cut off");
    }
}

/// A pairing whose token already belongs to a device could never be redeemed: it is refused
/// when it starts; and of two pairings of one token, the second ends at its first poll after
/// the other is redeemed (before: it stayed `approved` and every poll was a 503 and an error
/// log line, with no interval enforced).
#[tokio::test]
async fn a_pairing_that_could_never_finish_is_refused() {
    let running = start(|c| c).await;
    let http = foundry_tests::http();
    let taken = sha256_hex(&running.device_token);
    let (status, body) = start_pairing(&http, &running, &taken).await;
    assert_eq!(status, 409, "a token hash in use must be refused at the start: {body}");
    assert!(body["error"].as_str().unwrap().starts_with("token_sha256:"), "{body}");

    let hash = "ef".repeat(32);
    let (_, a) = start_pairing(&http, &running, &hash).await;
    let (_, b) = start_pairing(&http, &running, &hash).await;
    for p in [&a, &b] {
        let path = format!("/pairings/{}/approve", p["user_code"].as_str().unwrap());
        let (status, body) = owner_call(&http, &running, &running.owner_token, "POST", &path).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, paired) = poll(&http, &running, a["device_code"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{paired}");
    assert_eq!(paired["account"], local::DEMO_OWNER, "the token answer names the account joined");
    for _ in 0..2 {
        let (status, body) = poll(&http, &running, b["device_code"].as_str().unwrap()).await;
        assert_eq!((status, body["error"].as_str()), (400, Some("access_denied")), "{body}");
    }
    // A third pairing of the same token is refused when it starts (it could never finish: the
    // token is in use now), not at an approval where it would get stuck.
    let (status, body) = start_pairing(&http, &running, &hash).await;
    assert_eq!(status, 409, "{body}");
}

/// A public URL with a newline would flow into the banner, the token issuer and the installer
/// script: refused at start (before: the server started with it).
#[test]
fn a_public_url_with_control_characters_is_refused_at_start() {
    for bad in
        ["http://127.0.0.1:8787\n  Device token:  fcd_forged", "https://tunnel.example/\r", "https://a b.example"]
    {
        let env: HashMap<&str, &str> = [("FOUNDRY_PUBLIC_URL", bad), ("FOUNDRY_DATA_DIR", "/tmp/x")].into();
        let e = LocalConfig::from_env(|k| env.get(k).map(|v| (*v).to_owned())).unwrap_err();
        assert!(e.to_string().contains("FOUNDRY_PUBLIC_URL"), "{bad:?}: {e}");
    }
}

/// Runs `relay pair URL` on a pseudo-terminal (Python's `pty`), prints the code it shows on
/// this process's stdout line `CODE <code>`, answers `answer` to its question, and returns
/// (exit status, everything it printed).
const PTY_PAIR: &str = r#"
import os, pty, sys, select
relay, config, url, answer = sys.argv[1:5]
pid, fd = pty.fork()
if pid == 0:
    os.execv(relay, [relay, "--config", config, "pair", url])
out = b""
told = asked = False
while True:
    r, _, _ = select.select([fd], [], [], 60)
    if not r:
        break
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
    text = out.decode(errors="replace")
    if not told and "?pair=" in text:
        line = text.split("?pair=", 1)[1].split()[0]
        print("CODE " + line, flush=True)
        told = True
    if not asked and "[y/N]" in text:
        os.write(fd, (answer + "\n").encode())
        asked = True
_, status = os.waitpid(pid, 0)
print("EXIT %d" % os.waitstatus_to_exitcode(status), flush=True)
print(out.decode(errors="replace"), flush=True)
"#;

/// What `relay pair` does when `approver` approves its code and the desktop's owner answers
/// `answer`: (exit code, output, the config written?).
async fn pair_on_a_terminal(running: &Running, approver: &str, answer: &str) -> (i32, String, bool) {
    use tokio::io::AsyncBufReadExt;
    let relay = foundry_tests::built_binary("relay", &["relay/src", "shared/domain/src"]);
    let dir = std::env::temp_dir().join(format!("relay-pty-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("relay.toml");
    std::fs::write(&config, format!("state_dir = \"{}\"\n", dir.join("state").display())).unwrap();
    let mut child = tokio::process::Command::new("python3")
        .args(["-c", PTY_PAIR])
        .arg(&relay)
        .arg(&config)
        .arg(&running.base_url)
        .arg(answer)
        .env(relay::cli::commands::ALLOW_ROOT_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let code = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await.unwrap().unwrap().unwrap();
        if let Some(code) = line.strip_prefix("CODE ") {
            break code.to_owned();
        }
    };
    let http = foundry_tests::http();
    let (status, body) = owner_call(&http, running, approver, "POST", &format!("/pairings/{code}/approve")).await;
    assert_eq!(status, 200, "{body}");
    let mut exit = -1;
    let mut out = String::new();
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await.unwrap() {
        if let Some(code) = line.strip_prefix("EXIT ") {
            exit = code.parse().unwrap();
        } else {
            out.push_str(&line);
            out.push('\n');
        }
    }
    let _ = child.wait().await;
    let written = std::fs::read_to_string(&config).unwrap().contains("device_token_file");
    let token = dir.join("state/device-token").exists();
    assert_eq!(written, token, "the config and the token are written together or not at all");
    let _ = std::fs::remove_dir_all(&dir);
    (exit, out, written)
}

/// `relay pair` names the account the desktop joined and asks before keeping it: a desktop
/// whose code another owner approved is not silently paired into that account (before: it
/// printed only the device's name and wrote the token and config).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_pair_shows_the_account_joined_and_keeps_nothing_when_declined() {
    let running = start(|c| c).await;
    let mallory = other_owner(&running);
    let (exit, out, written) = pair_on_a_terminal(&running, &mallory, "n").await;
    assert!(out.contains("joins account mallory"), "{out}");
    assert_ne!(exit, 0, "{out}");
    assert!(!written, "declined: nothing may be written\n{out}");
    let (exit, out, written) = pair_on_a_terminal(&running, &running.owner_token, "y").await;
    assert!(out.contains(&format!("joins account {}", local::DEMO_OWNER)), "{out}");
    assert_eq!(exit, 0, "{out}");
    assert!(written, "{out}");
}

/// In the cloud the owner function also counts misses per source address (API Gateway's
/// `sourceIp`): a guesser who spreads guesses over several owner accounts from one address is
/// stopped all the same, while another address is not held back. On DynamoDB, through the owner
/// API as the `owner_api` function runs it.
#[tokio::test]
async fn in_the_cloud_misses_are_also_counted_per_source_address() {
    use auth::{Authenticator, Grant, Hs256Signer, Keys};
    use http_util::ClientSource;
    let Some(h) = foundry_tests::Harness::dynamo(foundry_tests::test_policy()).await else { return };
    let secret = b"an owner-api test secret of 32 b".to_vec();
    let auth = std::sync::Arc::new(Authenticator {
        issuer: "iss".into(),
        audience: auth::Audience::Only(vec!["aud".into()]),
        keys: Keys::Hs256(secret.clone()),
        clock: h.clock.clone(),
    });
    let api = http_api::owner_api::OwnerApi {
        store: std::sync::Arc::clone(&h.store),
        auth,
        clock: h.clock.clone(),
        policy: h.policy,
        blobs: None,
        urls: events::webhook_url::UrlPolicy::Cloud,
        budget: Default::default(),
    };
    let token = |subject: &str| {
        Hs256Signer::new(&secret, "iss", "aud")
            .mint(
                Grant { subject, client: "panel", scopes: &["osfoundry:owner"] },
                h.clock.now(),
                Duration::from_secs(600),
            )
            .unwrap()
    };
    let lookup = |who: &str, source: &str, code: &str| {
        let mut req = http::Request::builder()
            .method("GET")
            .uri(format!("/owner/pairings/{code}"))
            .header("authorization", format!("Bearer {}", token(who)))
            .body(bytes::Bytes::new())
            .unwrap();
        req.extensions_mut().insert(ClientSource(source.to_owned()));
        api.handle(req)
    };
    let limit = domain::pairing::FAILED_LOOKUPS_PER_WINDOW as usize;
    for i in 0..limit {
        // Every guess from another owner account, all from one address.
        let status = lookup(&format!("sock-puppet-{i}"), "198.51.100.66", "BCDFGHJK").await.status();
        assert_eq!(status, 404, "guess {i}");
    }
    assert_eq!(lookup("sock-puppet-new", "198.51.100.66", "BCDFGHJK").await.status(), 429, "the address is stopped");
    assert_eq!(lookup("sock-puppet-new", "203.0.113.1", "BCDFGHJK").await.status(), 404, "another address is not");
}

/// The same through the owner function as deployed (the real binary under the Lambda
/// emulator, behind the API Gateway shim, whose events carry the TCP peer as
/// `requestContext.http.sourceIp`): the function's glue (`lambda::http_glue::source_ip`) hands
/// the address API Gateway saw to the owner API. Guesses from 127.0.0.1 over many owner
/// accounts stop that address; 127.0.0.2 is not held back. Glue that lost the address (every
/// request from "") would stop both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_function_counts_misses_per_the_address_api_gateway_saw() {
    use foundry_tests::cloud::{Emulator, Template, access_token_of};
    let Some(acct) = foundry_tests::cloud::account().await else { return };
    let emu = Emulator::start_only(&Template::load(), &acct.resources, &acct.base_env, |d| {
        d.logical_id == "OwnerApiFunction"
    })
    .await;
    emu.wait_ready().await;
    let from = |ip: [u8; 4]| foundry_tests::http_builder().local_address(std::net::IpAddr::from(ip)).build().unwrap();
    let (here, there) = (from([127, 0, 0, 1]), from([127, 0, 0, 2]));
    let lookup = |client: &reqwest::Client, owner: String| {
        let req = client.get(format!("{}/owner/pairings/BCDFGHJK", emu.gateway)).bearer_auth(access_token_of(
            &owner,
            "owner-client-id",
            "openid osfoundry/owner",
        ));
        async move { req.send().await.unwrap().status().as_u16() }
    };
    for i in 0..domain::pairing::FAILED_LOOKUPS_PER_WINDOW {
        assert_eq!(lookup(&here, format!("glue-puppet-{i}")).await, 404, "guess {i}");
    }
    assert_eq!(lookup(&here, "glue-puppet-new".into()).await, 429, "the address is stopped");
    assert_eq!(lookup(&there, "glue-puppet-other".into()).await, 404, "another address is not");
}

/// docs/results.md's flood rows (Hardening, part two) quote what `infra/doorbell-flood.py`
/// measured, from the file it writes (`docs/flood-figures.json`; the script asserts its goals:
/// with the message and frame caps lifted it fails at a 228 MB peak).
#[test]
fn the_flood_figures_in_the_docs_are_the_script() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{root}/docs/flood-figures.json")).unwrap()).unwrap();
    let doc = std::fs::read_to_string(format!("{root}/docs/results.md")).unwrap();
    let mb = |k: &str| f[k].as_u64().unwrap_or_else(|| panic!("{k} in docs/flood-figures.json"));
    assert_eq!(f["upgrades_answered"], f["upgrades"], "the script's own goal");
    for said in [
        format!("the server keeps 4 (older ones closed 4409): {} → {} MB,", mb("start_mb"), mb("after_upgrades_mb")),
        format!("refused at the first frame header (over 4 KiB): peak {} MB |", mb("fragment_peak_mb")),
    ] {
        assert!(doc.contains(&said), "docs/results.md does not say {said:?} (docs/flood-figures.json)");
    }
}
