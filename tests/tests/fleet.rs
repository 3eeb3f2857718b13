//! What the owner sees of each desktop (issue 38's status): the relay API records what a relay
//! reports on its syncs, and the owner API's `GET /devices` shows the state that follows —
//! online with the doorbell, online polling, offline once it missed its window, revoked — with
//! the relay's version, platform and host. Run on both stores with the injected clock, through
//! the relay and owner APIs as the servers and functions run them; a second owner's desktop
//! never shows. Then busy (running a run, however long), stale (30 days offline) and removed,
//! and `get_graph_run` naming the pause that holds a queued run.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use auth::{Authenticator, Grant, Hs256Signer, Keys};
use bytes::Bytes;
use domain::fleet::{RELAY_HEADER, RelayReport};
use foundry_tests::Harness;
use http_api::owner_api::OwnerApi;
use http_api::relay_api::RelayApi;
use serde_json::{Value, json};

fn owner(name: &str) -> domain::ids::OwnerId {
    domain::ids::OwnerId::new(name).unwrap()
}

const SECRET: &[u8] = b"a fleet test secret of 32 bytes.";

struct Fleet {
    h: Harness,
    relay: RelayApi<dyn domain::store::Store>,
    owner: OwnerApi<dyn domain::store::Store>,
    project: String,
}

impl Fleet {
    async fn new(h: Harness) -> Self {
        let auth = Arc::new(Authenticator {
            issuer: "iss".into(),
            audience: auth::Audience::Only(vec!["aud".into()]),
            keys: Keys::Hs256(SECRET.to_vec()),
            clock: h.clock.clone(),
        });
        let project = h.store.create_project(&owner("alice"), "P").await.unwrap().project_id;
        h.store.set_project_enabled(&owner("alice"), project, true).await.unwrap();
        let project = project.to_string();
        Self {
            relay: RelayApi {
                store: Arc::clone(&h.store),
                clock: h.clock.clone(),
                policy: h.policy,
                public_url: "http://stack".into(),
                doorbell_url: None,
                doorbell_poll_interval: domain::doorbell::DOORBELL_POLL_INTERVAL,
                budget: Default::default(),
            },
            owner: OwnerApi {
                store: Arc::clone(&h.store),
                auth,
                clock: h.clock.clone(),
                policy: h.policy,
                blobs: None,
                urls: events::webhook_url::UrlPolicy::Local,
                budget: Default::default(),
            },
            project,
            h,
        }
    }

    async fn device(&self, who: &str, name: &str) -> String {
        let (token, hash) = domain::devices::new_token().unwrap();
        self.h.store.create_device(&owner(who), name, &hash).await.unwrap();
        token
    }

    /// One sync of `token` with these headers: the status and the error, if any.
    async fn sync(&self, token: &str, headers: &[(&str, String)]) -> (u16, Value) {
        self.sync_to(&self.project, token, headers).await
    }

    async fn sync_to(&self, project: &str, token: &str, headers: &[(&str, String)]) -> (u16, Value) {
        let mut req = http::Request::builder()
            .method("POST")
            .uri(format!("{}/sync", domain::relay::PREFIX))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let body = json!({"project_id": project, "sessions": []}).to_string();
        let res = self.relay.handle(req.body(Bytes::from(body)).unwrap()).await;
        (res.status().as_u16(), serde_json::from_slice(res.body()).unwrap_or(Value::Null))
    }

    /// The owner's `GET /devices`, by device name.
    async fn devices(&self, who: &str) -> Vec<Value> {
        let (status, v) = self.owner_call(who, "GET", "/owner/devices", None).await;
        assert_eq!(status, 200);
        v["devices"].as_array().unwrap().clone()
    }

    /// One owner API request of `who`.
    async fn owner_call(&self, who: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let token = Hs256Signer::new(SECRET, "iss", "aud")
            .mint(
                Grant { subject: who, client: "panel", scopes: &["osfoundry:owner"] },
                self.h.now(),
                Duration::from_secs(600),
            )
            .unwrap();
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(body.map(|b| Bytes::from(b.to_string())).unwrap_or_default())
            .unwrap();
        let res = self.owner.handle(req).await;
        (res.status().as_u16(), serde_json::from_slice(res.body()).unwrap_or(Value::Null))
    }

    async fn id_of(&self, name: &str) -> String {
        let d = self.devices("alice").await.into_iter().find(|d| d["name"] == name).unwrap();
        d["device_id"].as_str().unwrap().to_owned()
    }

    async fn state_of(&self, name: &str) -> (String, Value) {
        let d = self.devices("alice").await.into_iter().find(|d| d["name"] == name).unwrap();
        (d["state"].as_str().unwrap().to_owned(), d["relay"].clone())
    }
}

fn report(version: &str, host: &str) -> (&'static str, String) {
    report_behind(version, host, None)
}

/// A report of a relay whose last update check saw `update` published.
fn report_behind(version: &str, host: &str, update: Option<&str>) -> (&'static str, String) {
    let r = RelayReport {
        version: version.into(),
        platform: "macos-aarch64".into(),
        host: host.into(),
        doorbell: false,
        update: update.map(str::to_owned),
        slots: None,
        unavailable: None,
    };
    (RELAY_HEADER, r.header_value())
}

async fn desktop_states_follow_the_relays_syncs(h: Harness) {
    let f = Fleet::new(h).await;
    let laptop = f.device("alice", "Laptop").await;
    let tower = f.device("alice", "Tower").await;
    let bobs = f.device("bob", "Bob's PC").await;
    assert_eq!(f.state_of("Laptop").await, ("offline".into(), Value::Null), "never connected");

    // A polling relay, then one with its doorbell up (the header the relay sends while its socket
    // answers); an older relay says nothing of itself and is still online.
    assert_eq!(f.sync(&laptop, &[report("0.4.0", "José’s MacBook")]).await.0, 200);
    let doorbell = (domain::doorbell::DOORBELL_HEADER, domain::doorbell::alive_header(Duration::from_secs(3)));
    assert_eq!(f.sync(&tower, &[report("0.3.9", "tower"), doorbell.clone()]).await.0, 200);
    let bobs_project = f.h.store.create_project(&owner("bob"), "B").await.unwrap().project_id;
    f.h.store.set_project_enabled(&owner("bob"), bobs_project, true).await.unwrap();
    assert_eq!(f.sync_to(&bobs_project.to_string(), &bobs, &[report("9.9.9", "bob-host")]).await.0, 200);
    assert_eq!(f.sync(&bobs, &[]).await.0, 404, "bob's desktop syncs alice's project");
    let (state, relay) = f.state_of("Laptop").await;
    assert_eq!(state, "online_polling");
    assert_eq!(
        relay,
        json!({"version": "0.4.0", "platform": "macos-aarch64", "host": "José’s MacBook", "update": null, "slots": null, "unavailable": null})
    );
    assert_eq!(f.state_of("Tower").await.0, "online_doorbell");
    assert!(f.devices("alice").await.iter().all(|d| d["name"] != "Bob's PC"), "another owner's desktop shows");

    // An update shows at the next sync, within the same minute.
    f.h.advance(Duration::from_secs(5));
    assert_eq!(f.sync(&laptop, &[report("0.5.0", "José’s MacBook")]).await.0, 200);
    assert_eq!(f.state_of("Laptop").await.1["version"], "0.5.0");
    assert_eq!(f.state_of("Laptop").await.1["update"], Value::Null);
    // A relay that is behind says which build it saw published (a pinned one, say).
    assert_eq!(f.sync(&laptop, &[report_behind("0.5.0", "José’s MacBook", Some("0.6.0"))]).await.0, 200);
    assert_eq!(f.state_of("Laptop").await.1["update"], "0.6.0");
    assert_eq!(f.sync(&laptop, &[report("0.5.0", "José’s MacBook")]).await.0, 200);

    // A bad report is refused, naming the part and the rule, and changes nothing.
    let bad = [(RELAY_HEADER, "version=0.6.0; platform=MacOS; host=x".to_owned())];
    let (status, body) = f.sync(&laptop, &bad).await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().starts_with("x-foundry-relay: platform must be"), "{body}");
    assert_eq!(f.state_of("Laptop").await.1["version"], "0.5.0");

    // The polling relay stops: offline once its window passed; the doorbell one is still online
    // (it syncs only every five minutes), until its own window passes too.
    let polling = domain::fleet::online_window(false, f.h.policy.poll_interval);
    f.h.advance(polling);
    assert_eq!(f.state_of("Laptop").await.0, "offline");
    assert_eq!(f.state_of("Tower").await.0, "online_doorbell");
    f.h.advance(domain::fleet::online_window(true, f.h.policy.poll_interval));
    assert_eq!(f.state_of("Tower").await.0, "offline");
    // It comes back without its doorbell: polling.
    assert_eq!(f.sync(&tower, &[report("0.3.9", "tower")]).await.0, 200);
    assert_eq!(f.state_of("Tower").await.0, "online_polling");

    // Revoked: the state says so, and its syncs are refused.
    let id = f.id_of("Tower").await;
    f.h.store.revoke_device(&owner("alice"), id.parse().unwrap()).await.unwrap();
    assert_eq!(f.state_of("Tower").await.0, "revoked");
    assert_eq!(f.sync(&tower, &[report("0.3.9", "tower")]).await.0, 401);
}

/// A paused desktop finishes nothing new: its syncs say it is paused and hand it no command,
/// the queued run waits, and resuming (or the pause's end) releases it. Bad pauses are refused
/// with the field and the rule, and another owner cannot pause the desktop.
async fn a_paused_desktop_takes_no_run_until_resumed(h: Harness) {
    let f = Fleet::new(h).await;
    let laptop = f.device("alice", "Laptop").await;
    let gs = domain::ids::GraphSessionId::parse("g", &format!("gs_{}", "a".repeat(32))).unwrap();
    let share =
        json!({"project_id": f.project, "sessions": [{"graph_session_id": gs.to_string(), "name": "G", "slug": "g"}]});
    let sync = || async {
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("{}/sync", domain::relay::PREFIX))
            .header("authorization", format!("Bearer {laptop}"))
            .header("content-type", "application/json")
            .body(Bytes::from(share.to_string()))
            .unwrap();
        let res = f.relay.handle(req).await;
        assert_eq!(res.status(), 200);
        serde_json::from_slice::<Value>(res.body()).unwrap()
    };
    sync().await;
    let queued = domain::runs::QueueRun {
        owner: owner("alice"),
        agent: domain::ids::AgentId::new("c", "alice").unwrap(),
        project_id: None,
        graph_session_id: gs.clone(),
        arguments: json!({}),
        idempotency_key: domain::ids::IdempotencyKey::parse("fleet-pause-1").unwrap(),
    };
    let domain::runs::QueueOutcome::Queued(run) = f.h.store.queue_run(&queued).await.unwrap() else { panic!() };
    let id = f.id_of("Laptop").await;
    let pause = format!("/owner/devices/{id}/pause");

    for (body, want) in [
        (json!({"for_seconds": 0}), "for_seconds: 1 to 2592000"),
        (json!({"for_seconds": 2_592_001}), "for_seconds: 1 to 2592000"),
        (json!({"note": "n".repeat(201)}), "note: at most 200 characters"),
        (json!({"until": "later"}), "until"),
    ] {
        let (status, v) = f.owner_call("alice", "POST", &pause, Some(body)).await;
        assert_eq!(status, 400, "{v}");
        assert!(v["error"].as_str().unwrap().contains(want), "{v}");
    }
    assert_eq!(f.state_of("Laptop").await.0, "online_polling", "a refused pause changed the desktop");
    assert_eq!(f.owner_call("bob", "POST", &pause, None).await.0, 404, "another owner paused it");

    let (status, v) = f.owner_call("alice", "POST", &pause, Some(json!({"note": "travelling"}))).await;
    assert_eq!((status, v["state"].as_str()), (200, Some("paused")), "{v}");
    assert_eq!((v["paused"]["note"].as_str(), &v["paused"]["until"]), (Some("travelling"), &Value::Null));
    let held = sync().await;
    assert_eq!(commands(&held), Vec::<String>::new(), "a paused desktop was handed a run");
    assert_eq!(held["paused"]["note"], "travelling");
    let (status, v) = f.owner_call("alice", "POST", &format!("/owner/devices/{id}/resume"), None).await;
    assert_eq!((status, v["state"].as_str(), &v["paused"]), (200, Some("online_polling"), &Value::Null), "{v}");
    let released = sync().await;
    assert_eq!(commands(&released), vec![run.command_id.to_string()]);
    assert_eq!(released.get("paused"), None);

    // A pause with a duration ends by itself.
    let (status, v) = f.owner_call("alice", "POST", &pause, Some(json!({"for_seconds": 60}))).await;
    assert_eq!((status, v["state"].as_str()), (200, Some("paused")), "{v}");
    assert_eq!(commands(&sync().await), Vec::<String>::new());
    f.h.advance(Duration::from_secs(60));
    assert_eq!(commands(&sync().await), vec![run.command_id.to_string()], "the pause did not end by itself");

    // A revoked desktop cannot be paused.
    f.h.store.revoke_device(&owner("alice"), id.parse().unwrap()).await.unwrap();
    assert_eq!(f.owner_call("alice", "POST", &pause, None).await.0, 404);
}

/// One relay API request of `token` (a start or a control poll).
async fn relay_call(f: &Fleet, token: &str, method: &str, path: &str, body: Value) -> (u16, Value) {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("{}{path}", domain::relay::PREFIX))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(if body.is_null() { Bytes::new() } else { Bytes::from(body.to_string()) })
        .unwrap();
    let res = f.relay.handle(req).await;
    (res.status().as_u16(), serde_json::from_slice(res.body()).unwrap_or(Value::Null))
}

/// `get_graph_run` of `run` as the agent that queued it.
async fn graph_run(f: &Fleet, run: &domain::runs::Run) -> Value {
    let deps = tools::ToolDeps {
        store: Arc::clone(&f.h.store),
        clock: f.h.clock.clone(),
        policy: f.h.policy,
        blobs: None,
        panel_url: None,
    };
    let call = tools::ToolCall {
        tool: tools::ToolName::GetGraphRun,
        owner: run.owner.clone(),
        agent: run.agent.clone(),
        arguments: json!({"command_id": run.command_id.to_string()}),
        request_id: None,
    };
    match tools::handle(&deps, &call).await.unwrap() {
        tools::ToolReply::Ok { structured } => structured,
        other => panic!("{other:?}"),
    }
}

/// The rest of a desktop's life: `get_graph_run` names the pause that holds a queued run; a
/// desktop running a run is busy with it (past its sync window, as long as its control polls
/// come) and lists what it shares; after 30 days offline it is stale, and removing it revokes
/// its token and withdraws its sessions from what agents see.
async fn busy_stale_and_removed(h: Harness) {
    let f = Fleet::new(h).await;
    let laptop = f.device("alice", "Laptop").await;
    let gs = domain::ids::GraphSessionId::parse("g", &format!("gs_{}", "b".repeat(32))).unwrap();
    let share = json!({"project_id": f.project,
        "sessions": [{"graph_session_id": gs.to_string(), "name": "Weekly report", "slug": "weekly"}]});
    let (status, _) = relay_call(&f, &laptop, "POST", "/sync", share.clone()).await;
    assert_eq!(status, 200);
    let id = f.id_of("Laptop").await;
    let listed = f.devices("alice").await.into_iter().find(|d| d["name"] == "Laptop").unwrap();
    assert_eq!(
        listed["sessions"],
        json!([{"project_id": f.project, "graph_session_id": gs.to_string(), "name": "Weekly report"}])
    );
    let queue = |key: &str| domain::runs::QueueRun {
        owner: owner("alice"),
        agent: domain::ids::AgentId::new("c", "alice").unwrap(),
        project_id: None,
        graph_session_id: gs.clone(),
        arguments: json!({}),
        idempotency_key: domain::ids::IdempotencyKey::parse(key).unwrap(),
    };
    let domain::runs::QueueOutcome::Queued(run) = f.h.store.queue_run(&queue("fleet-busy-1")).await.unwrap() else {
        panic!()
    };

    // Held by the owner's pause: the model is told so, and when to look again.
    assert_eq!(graph_run(&f, &run).await.get("desktop_paused"), None, "a free desktop's run is held");
    let pause = format!("/owner/devices/{id}/pause");
    assert_eq!(f.owner_call("alice", "POST", &pause, Some(json!({"note": "travelling"}))).await.0, 200);
    let held = graph_run(&f, &run).await;
    assert_eq!(held["status"], "queued");
    assert_eq!(held["desktop_paused"], json!({"until": null, "note": "travelling"}));
    assert_eq!(held["check_after_s"], 900);
    assert_eq!(f.owner_call("alice", "POST", &pause, Some(json!({"for_seconds": 3600}))).await.0, 200);
    let held = graph_run(&f, &run).await;
    let until = f.h.now().plus(Duration::from_secs(3600)).rfc3339();
    assert_eq!(held["desktop_paused"], json!({"until": until}));
    assert_eq!(held["check_after_s"], 3600 + f.h.policy.poll_interval.as_secs());
    assert_eq!(f.owner_call("alice", "POST", &format!("/owner/devices/{id}/resume"), None).await.0, 200);
    assert_eq!(graph_run(&f, &run).await.get("desktop_paused"), None, "resumed, still held");

    // Busy: the relay starts the run and stops syncing; its control polls keep it busy.
    let (_, synced) = relay_call(&f, &laptop, "POST", "/sync", share.clone()).await;
    assert_eq!(commands(&synced), vec![run.command_id.to_string()]);
    let path = format!("/commands/{}", run.command_id);
    let (status, v) = relay_call(&f, &laptop, "POST", &format!("{path}/start"), json!({"execution_id": "x1"})).await;
    assert_eq!(status, 200, "{v}");
    let window = domain::fleet::online_window(false, f.h.policy.poll_interval);
    let beat = f.h.policy.heartbeat_timeout / 2;
    let mut waited = Duration::ZERO;
    while waited <= window * 2 {
        f.h.advance(beat);
        waited += beat;
        assert_eq!(relay_call(&f, &laptop, "GET", &format!("{path}/control"), Value::Null).await.0, 200);
        let d = f.devices("alice").await.into_iter().find(|d| d["name"] == "Laptop").unwrap();
        assert_eq!(d["state"], "busy", "{d}");
        assert_eq!(d["busy"]["command_id"], run.command_id.to_string());
    }
    // Its relay died mid-run: once the run reads as failed, the desktop is offline.
    f.h.advance(f.h.policy.heartbeat_timeout);
    assert_eq!(f.state_of("Laptop").await.0, "offline");
    let d = f.devices("alice").await.into_iter().find(|d| d["name"] == "Laptop").unwrap();
    assert_eq!((&d["busy"], &d["stale"]), (&Value::Null, &json!(false)));

    // Thirty days on it is stale; another owner cannot remove it; the owner can.
    f.h.advance(domain::fleet::STALE_AFTER);
    let d = f.devices("alice").await.into_iter().find(|d| d["name"] == "Laptop").unwrap();
    assert_eq!((&d["state"], &d["stale"]), (&json!("stale"), &json!(true)), "{d}");
    let remove = format!("/owner/devices/{id}/remove");
    assert_eq!(f.owner_call("bob", "POST", &remove, None).await.0, 404, "another owner removed it");
    assert_eq!(f.owner_call("alice", "POST", "/owner/devices/not-a-uuid/remove", None).await.0, 400);
    let (status, v) = f.owner_call("alice", "POST", &remove, None).await;
    assert_eq!((status, &v), (200, &json!({"removed": true})));
    assert!(f.devices("alice").await.is_empty(), "a removed desktop is still listed");
    assert_eq!(relay_call(&f, &laptop, "POST", "/sync", share).await.0, 401, "a removed desktop's token works");
    let p =
        f.h.store
            .get_project(&owner("alice"), domain::ids::ProjectId::parse("p", &f.project).unwrap())
            .await
            .unwrap()
            .unwrap();
    assert!(p.sessions.is_empty() && p.shared_by.is_empty(), "its sessions are still offered: {:?}", p.sessions);
    assert_eq!(f.owner_call("alice", "POST", &remove, None).await.0, 404, "removed twice");
}

#[tokio::test]
async fn busy_stale_and_removed_embedded() {
    busy_stale_and_removed(Harness::embedded(foundry_tests::test_policy())).await;
}

#[tokio::test]
async fn busy_stale_and_removed_dynamodb() {
    let Some(h) = Harness::dynamo(foundry_tests::test_policy()).await else { return };
    busy_stale_and_removed(h).await;
}

fn commands(v: &Value) -> Vec<String> {
    v["commands"].as_array().unwrap().iter().map(|c| c["command_id"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_paused_desktop_takes_no_run_until_resumed_embedded() {
    a_paused_desktop_takes_no_run_until_resumed(Harness::embedded(foundry_tests::test_policy())).await;
}

#[tokio::test]
async fn a_paused_desktop_takes_no_run_until_resumed_dynamodb() {
    let Some(h) = Harness::dynamo(foundry_tests::test_policy()).await else { return };
    a_paused_desktop_takes_no_run_until_resumed(h).await;
}

#[tokio::test]
async fn desktop_states_follow_the_relays_syncs_embedded() {
    desktop_states_follow_the_relays_syncs(Harness::embedded(foundry_tests::test_policy())).await;
}

#[tokio::test]
async fn desktop_states_follow_the_relays_syncs_dynamodb() {
    let Some(h) = Harness::dynamo(foundry_tests::test_policy()).await else { return };
    desktop_states_follow_the_relays_syncs(h).await;
}
