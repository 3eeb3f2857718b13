//! The webhook verifier example in docs/events.md, run as written (Python, standard library)
//! against requests signed by the notifier's own code: a good one passes; a forged body, a
//! replayed (old) request and another secret are refused.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use domain::clock::{Clock, SystemClock};
use serde_json::json;

#[test]
fn the_documented_verifier_accepts_good_requests_and_catches_forgeries_and_replays() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/events.md")).unwrap();
    let code = doc
        .split("```python\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or_default())
        .find(|b| b.starts_with("# verify a foundry-connect webhook"))
        .expect("docs/events.md has the verifier block");
    assert!(code.lines().count() <= 12, "the example is meant to be short");
    let secret = domain::projects::new_webhook_secret().unwrap();
    let now = SystemClock.now().as_epoch_seconds();
    let body = r#"{"data":{"status":"claimed"},"id":"evt_1","type":"task.claimed"}"#;
    let request = |secret: &str, ts: i64, body: &str, sent_body: &str| {
        let sig = events::sign(secret, "evt_1", ts, body).unwrap();
        json!({"headers": {"webhook-id": "evt_1", "webhook-timestamp": ts.to_string(), "webhook-signature": sig}, "body": sent_body})
    };
    let other = domain::projects::new_webhook_secret().unwrap();
    let cases = json!([
        request(&secret, now, body, body),
        request(&secret, now, body, &body.replace("claimed", "completed")),
        request(&secret, now - 3_600, body, body),
        request(&other, now, body, body),
    ]);
    let harness = format!(
        "{code}\nimport json, sys\nsecret, cases = sys.argv[1], json.loads(sys.stdin.read())\n\
         for c in cases:\n    try:\n        verify(secret, c['headers'], c['body'].encode())\n        print('ok')\n\
         \x20   except ValueError as e:\n        print(str(e).split(':')[0])\n"
    );
    let python = std::env::var("FOUNDRY_PYTHON_MCP2").unwrap_or_else(|_| "python3".into());
    let mut child = std::process::Command::new(python)
        .args(["-c", &harness, &secret])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(cases.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let verdicts: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(verdicts, ["ok", "forged", "stale", "forged"]);
}

/// The retry figures docs/events.md states are the code's: the attempts before the dead
/// letters (cloud and local), the backoff's doubling from 5 s and its 15-minute ceiling.
#[test]
fn the_documented_retry_figures_are_the_codes() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/events.md")).unwrap();
    let attempts = events::MAX_ATTEMPTS;
    for said in [
        format!("DLQ ({attempts} attempts)"),
        format!("after {attempts} receives"),
        format!("after {attempts} failed attempts"),
    ] {
        assert!(doc.contains(&said), "docs/events.md does not say {said:?}");
    }
    let doubling: Vec<String> = (2..=7).map(|n| events::backoff(n).as_secs().to_string()).collect();
    let said = format!("{} s doubling ({} s)", events::backoff(1).as_secs(), doubling.join(", "));
    assert!(doc.contains(&said), "docs/events.md does not say {said:?}");
    assert_eq!(events::backoff(30), std::time::Duration::from_secs(15 * 60), "at most 15 min");
    // A figure left over from an older count is caught.
    for stale in (1..attempts).map(|n| format!("after {n} receives")) {
        assert!(!doc.contains(&stale), "docs/events.md still says {stale:?}");
    }
}
