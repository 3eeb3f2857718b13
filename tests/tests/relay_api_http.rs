//! The relay API's and owner API's refusals over HTTP: each a clear JSON error naming the
//! field and the rule, and no write.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use serde_json::{Value, json};

async fn call(http: &reqwest::Client, method: reqwest::Method, url: String, token: &str, body: Value) -> (u16, Value) {
    let res = http.request(method, url).bearer_auth(token).json(&body).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn relay_and_owner_apis_refuse_bad_input_clearly_and_write_nothing() {
    let running = foundry_tests::LocalServer::default("foundry-relayapi").await;
    let http = foundry_tests::http();
    let base = format!("{}{}", running.base_url, http_api::relay_api::PREFIX);
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
}

/// Two desktops on the demo project: the local server's device (A) and a second one (B).
struct TwoDesktops {
    running: foundry_tests::LocalServer,
    http: reqwest::Client,
    base: String,
    a: String,
    b: String,
}

impl TwoDesktops {
    async fn start(name: &str) -> Self {
        use domain::store::ManageDevices;
        let running = foundry_tests::LocalServer::default(&format!("foundry-{name}")).await;
        let base = format!("{}{}", running.base_url, http_api::relay_api::PREFIX);
        let (b, hash_b) = domain::devices::new_token().unwrap();
        running.store.create_device(&running.demo.owner, "second desktop", &hash_b).await.unwrap();
        let a = running.device_token.clone();
        Self { running, http: foundry_tests::http(), base, a, b }
    }

    fn gs(n: usize) -> String {
        format!("gs_{n:032x}")
    }

    fn session(n: usize) -> Value {
        json!({"graph_session_id": Self::gs(n), "name": "G", "slug": format!("g{n}")})
    }

    /// A sync by the desktop holding `token`, sharing sessions `shares`.
    async fn sync(&self, token: &str, shares: &[usize]) -> (u16, Value) {
        let sessions: Vec<Value> = shares.iter().map(|n| Self::session(*n)).collect();
        let body = json!({"project_id": self.running.demo.project_id, "sessions": sessions});
        call(&self.http, reqwest::Method::POST, format!("{}/sync", self.base), token, body).await
    }

    /// Queues a run of session `n` under `key`: its command id.
    async fn queue(&self, n: usize, key: &str) -> String {
        use domain::ids::{AgentId, GraphSessionId, IdempotencyKey};
        use domain::runs::{QueueOutcome, QueueRun};
        use domain::store::QueueRuns;
        let req = QueueRun {
            owner: self.running.demo.owner.clone(),
            agent: AgentId::new("c", local::DEMO_OWNER).unwrap(),
            project_id: Some(self.running.demo.project_id),
            graph_session_id: GraphSessionId::parse("g", &Self::gs(n)).unwrap(),
            arguments: json!({}),
            idempotency_key: IdempotencyKey::parse(key).unwrap(),
        };
        match self.running.store.queue_run(&req).await.unwrap() {
            QueueOutcome::Queued(r) => r.command_id.to_string(),
            other => panic!("session {n} was not queueable: {other:?}"),
        }
    }

    async fn stop(self) {
        self.running.stop().await;
    }
}

fn commands(v: &Value) -> Vec<String> {
    v["commands"].as_array().unwrap().iter().map(|c| c["command_id"].as_str().unwrap().to_owned()).collect()
}

/// Two desktops share one project: each sync replaces only that desktop's list, and each gets
/// only the commands for sessions it shares (a desktop is never handed — and so never refuses —
/// another desktop's run); a command whose session nobody shares any more goes to whoever
/// syncs, whose consent re-check ends it with the exact error.
#[tokio::test]
async fn two_desktops_on_one_project_get_only_their_own_runs() {
    let d = TwoDesktops::start("two-desktops").await;
    assert_eq!(d.sync(&d.a, &[1]).await.0, 200);
    assert_eq!(d.sync(&d.b, &[2]).await.0, 200);
    // Both lists are shared: runs of either session can be queued.
    let ids = vec![d.queue(1, "two-desktops-1").await, d.queue(2, "two-desktops-2").await];
    assert_eq!(commands(&d.sync(&d.a, &[1]).await.1), vec![ids[0].clone()]);
    assert_eq!(commands(&d.sync(&d.b, &[2]).await.1), vec![ids[1].clone()]);
    // The second desktop stops sharing session 2: nobody shares it, so its queued run goes to
    // whoever syncs next (to be ended with the exact error by the relay's re-check).
    assert_eq!(d.sync(&d.b, &[]).await.0, 200);
    let got = commands(&d.sync(&d.a, &[1]).await.1);
    assert_eq!(got, ids, "the orphaned run must be handed out to be ended");
    d.stop().await;
}

/// One desktop's queue never starves another's: 100 runs queued for the first desktop's session
/// (a full sync's worth), then one for the second's; the second desktop's sync still gets its
/// run, and the first gets a full page of its own.
#[tokio::test]
async fn a_full_queue_for_one_desktop_does_not_starve_another() {
    let d = TwoDesktops::start("starve").await;
    assert_eq!(d.sync(&d.a, &[1]).await.0, 200);
    assert_eq!(d.sync(&d.b, &[2]).await.0, 200);
    for i in 0..http_api::relay_api::MAX_COMMANDS_PER_SYNC {
        d.queue(1, &format!("first-desktop-{i:04}")).await;
    }
    let theirs = d.queue(2, "second-desktop-0001").await;
    assert_eq!(commands(&d.sync(&d.b, &[2]).await.1), vec![theirs], "the second desktop got none");
    assert_eq!(commands(&d.sync(&d.a, &[1]).await.1).len(), http_api::relay_api::MAX_COMMANDS_PER_SYNC);
    d.stop().await;
}

/// A sync hands out at most the relay's free slots (oldest first; none while every slot is
/// busy; an older relay that says nothing gets the whole page), and a bound past 16 is refused
/// naming the field. A progress report is recorded only under the run's own execution: bad
/// fields are refused naming them with nothing written, another execution is told to stop,
/// and another owner's desktop cannot see the run at all.
#[tokio::test]
async fn syncs_respect_free_slots_and_progress_is_fenced_and_bounded() {
    use domain::store::{ManageDevices, ReadRuns};
    let d = TwoDesktops::start("slots").await;
    assert_eq!(d.sync(&d.a, &[1]).await.0, 200);
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(d.queue(1, &format!("slots-run-{i:04}")).await);
    }
    let body = |free: Value| json!({"project_id": d.running.demo.project_id, "sessions": [TwoDesktops::session(1)], "free_slots": free});
    let sync = |free: Value| call(&d.http, reqwest::Method::POST, format!("{}/sync", d.base), &d.a, body(free));
    assert_eq!(commands(&sync(json!(2)).await.1), ids[..2].to_vec());
    assert_eq!(commands(&sync(json!(0)).await.1), Vec::<String>::new());
    assert_eq!(commands(&d.sync(&d.a, &[1]).await.1), ids, "an older relay (no free_slots) gets them all");
    let (status, refused) = sync(json!(17)).await;
    assert_eq!((status, refused["error"].as_str().unwrap()), (400, "free_slots: must be 0 to 16 (got 17)"));
    // Start the oldest, then report on it.
    let start = format!("{}/commands/{}/start", d.base, ids[0]);
    let (status, _) = call(&d.http, reqwest::Method::POST, start, &d.a, json!({"execution_id": "exec-a"})).await;
    assert_eq!(status, 200);
    let control = format!("{}/commands/{}/control", d.base, ids[0]);
    let report = |exec: &str, progress: Value| json!({"execution_id": exec, "progress": progress});
    let post = |token: String, body: Value| {
        let control = control.clone();
        let http = d.http.clone();
        async move { call(&http, reqwest::Method::POST, control, &token, body).await }
    };
    let refusals = [
        (
            report("exec-a", json!({"message": "x", "fraction": 2.0})),
            "progress.fraction: must be between 0 and 1 (got 2)",
        ),
        (
            report("exec-a", json!({"message": "m".repeat(201)})),
            "progress.message: must be at most 200 characters (got 201)",
        ),
        (report("exec-a", json!({"tail": vec!["line"; 11]})), "progress.tail: at most 10 lines (got 11)"),
        (report("", json!({"message": "x"})), "execution_id: must be 1 to 128 characters (got 0)"),
    ];
    for (body, want) in refusals {
        let (status, v) = post(d.a.clone(), body.clone()).await;
        assert_eq!(status, 400, "{body} → {v}");
        assert!(v["error"].as_str().unwrap().contains(want), "{body} → {v}");
    }
    let agent = domain::ids::AgentId::new("c", local::DEMO_OWNER).unwrap();
    let id = domain::ids::CommandId::parse("command_id", &ids[0]).unwrap();
    assert!(d.running.store.get_run(&agent, id).await.unwrap().unwrap().progress.is_none(), "a refusal wrote");
    // Another execution: told to stop, nothing recorded.
    let (status, v) = post(d.a.clone(), report("exec-other", json!({"message": "forged"}))).await;
    assert_eq!((status, &v["cancel_requested"], &v["status"]), (200, &json!(true), &json!("running")), "{v}");
    // Another owner's desktop: no such command.
    let (other_token, hash) = domain::devices::new_token().unwrap();
    let mallory = domain::ids::OwnerId::new("mallory").unwrap();
    d.running.store.create_device(&mallory, "mallory's desktop", &hash).await.unwrap();
    let (status, v) = post(other_token, report("exec-a", json!({"message": "forged"}))).await;
    assert_eq!(status, 404, "{v}");
    assert!(d.running.store.get_run(&agent, id).await.unwrap().unwrap().progress.is_none(), "a forged report was kept");
    // Its own execution: recorded, keep running.
    let (status, v) =
        post(d.a.clone(), report("exec-a", json!({"message": "step 1", "fraction": 0.1, "tail": ["ok"]}))).await;
    assert_eq!((status, &v["cancel_requested"]), (200, &json!(false)), "{v}");
    let kept = d.running.store.get_run(&agent, id).await.unwrap().unwrap().progress.unwrap();
    assert_eq!((kept.progress.message.as_str(), kept.progress.fraction), ("step 1", Some(0.1)));
    // A newer relay's fields this server does not know are ignored, not refused (issue 60: a
    // stack rolled back under relays that already updated keeps them working).
    let newer = json!({"execution_id": "exec-a", "eta_s": 30, "progress": {"message": "step 2", "colour": "red"}});
    let (status, v) = post(d.a.clone(), newer).await;
    assert_eq!((status, &v["cancel_requested"]), (200, &json!(false)), "{v}");
    let kept = d.running.store.get_run(&agent, id).await.unwrap().unwrap().progress.unwrap();
    assert_eq!(kept.progress.message.as_str(), "step 2");
    d.stop().await;
}
