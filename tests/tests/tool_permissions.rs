//! Least privilege, derived from the code: every tool runs through its real handler on
//! DynamoDB (the emulator), its requests are logged, and the IAM actions they need must equal
//! the tool's declared `dynamodb_actions()` — which the template test then holds the SAM
//! template to. A tool that starts making a new kind of request fails here until its
//! declaration (and so its IAM policy) says so; a declared action no path uses fails too.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use base64::Engine;
use domain::ids::{AgentId, GraphSessionId, IdempotencyKey, OwnerId};
use domain::runs::SessionMeta;
use domain::tasks::{AssignOutcome, AssignTask};
use foundry_tests::{Backend, Capacity, Harness, test_policy};
use serde_json::json;
use tools::{ToolCall, ToolDeps, ToolName, ToolReply, handle};

/// IAM actions of one logged request; a transaction needs the actions of its parts.
fn iam(op: &str) -> Vec<String> {
    match op.split_once(':') {
        Some(("TransactWriteItems", kinds)) => kinds
            .split(',')
            .map(|k| match k {
                "ConditionCheck" => "dynamodb:ConditionCheckItem".to_owned(),
                other => format!("dynamodb:{other}Item"),
            })
            .collect(),
        // A transactional read needs GetItem on each item it reads.
        _ if op == "TransactGetItems" => vec!["dynamodb:GetItem".to_owned()],
        _ => vec![format!("dynamodb:{op}")],
    }
}

/// `docs/cost-inputs.json` holds the DynamoDB requests of each operation `infra/cost.py` prices,
/// as measured here: `section`'s must equal `measured` (with `FOUNDRY_UPDATE=1` the file is
/// rewritten instead, then `python3 infra/cost.py` prints the new table for docs/cost.md).
///
/// The capacity units of each operation, as the emulator's meter counted them by item size
/// (`infra/moto_capacity.py`), are held the same way under `dynamodb_capacity`: `infra/cost.py`
/// prices those, not the request count. On an endpoint without the meter they are not checked.
fn check_cost_inputs(section: &str, measured: &BTreeMap<String, (Vec<String>, Capacity)>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cost-inputs.json");
    let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let requests: BTreeMap<&String, &Vec<String>> = measured.iter().map(|(k, (ops, _))| (k, ops)).collect();
    let units: BTreeMap<&String, serde_json::Value> =
        measured.iter().map(|(k, (_, c))| (k, json!({"read": c.read, "write": c.write}))).collect();
    let metered = measured.values().all(|(_, c)| c.measured);
    if foundry_tests::update_requested() {
        doc["dynamodb_requests"][section] = json!(requests);
        if metered {
            doc["dynamodb_capacity"][section] = json!(units);
        }
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap() + "\n").unwrap();
        return;
    }
    assert_eq!(
        doc["dynamodb_requests"][section],
        json!(requests),
        "docs/cost-inputs.json: the {section} requests changed; rerun this test with FOUNDRY_UPDATE=1, then python3 infra/cost.py for docs/cost.md"
    );
    if !metered {
        // infra/test.sh names moto's interpreter exactly when it started the metered emulator.
        assert!(
            std::env::var_os("FOUNDRY_MOTO_PYTHON").is_none(),
            "the emulator infra/test.sh started counts capacity, yet an answer carried no x-foundry-capacity"
        );
        eprintln!(
            "*** the endpoint counts no capacity (no x-foundry-capacity header): {section}'s units not checked ***"
        );
        return;
    }
    assert_eq!(
        doc["dynamodb_capacity"][section],
        json!(units),
        "docs/cost-inputs.json: the {section} capacity units changed; rerun this test with FOUNDRY_UPDATE=1, then python3 infra/cost.py for docs/cost.md"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_uses_exactly_its_declared_dynamodb_actions() {
    let Some(h) = Harness::dynamo(test_policy()).await else { return };
    let Backend::Dynamo { log, .. } = &h.backend else { unreachable!() };
    let owner = OwnerId::new("perm-owner").unwrap();
    let agent = AgentId::new("perm-client", "perm-owner").unwrap();
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "c".repeat(32))).unwrap();
    let project = h.store.create_project(&owner, "P").await.unwrap();
    h.store.set_project_enabled(&owner, project.project_id, true).await.unwrap();
    let meta = SessionMeta {
        graph_session_id: gs.clone(),
        name: "G".into(),
        description: String::new(),
        slug: "g".into(),
        version: "1".into(),
        status: "ready".into(),
    };
    h.store.sync_sessions(&owner, project.project_id, foundry_tests::TEST_DEVICE, &[meta]).await.unwrap();
    let link = h.store.create_link(&owner, project.project_id, "L").await.unwrap().unwrap().link_id;
    let assign = AssignTask {
        owner: owner.clone(),
        link_id: link,
        objective: "o".into(),
        idempotency_key: IdempotencyKey::parse("perm-task-1").unwrap(),
    };
    let AssignOutcome::Assigned(task) = h.store.assign_task(&assign).await.unwrap() else { panic!() };
    let deps = ToolDeps {
        store: Arc::clone(&h.store),
        clock: h.clock.clone(),
        policy: h.policy,
        blobs: Some(foundry_tests::temp_blobs(h.clock.clone())),
        panel_url: None,
    };

    let (p, l, t) = (project.project_id.to_string(), link.to_string(), task.task_id.to_string());
    let run_args = json!({"graph_session_id": gs.to_string(), "idempotency_key": "perm-run-1"});
    let mut seen: HashMap<ToolName, BTreeSet<String>> = HashMap::new();
    // The first call of each tool is its common path: what docs/cost.md prices.
    let mut first: BTreeMap<String, (Vec<String>, Capacity)> = BTreeMap::new();
    let mut command = String::new();
    let mut claim = String::new();
    // Every path that touches the store differently: first call, replay, rejection.
    let calls: Vec<(ToolName, serde_json::Value)> = vec![
        (ToolName::ListGraphSessions, json!({"project_id": p})),
        // Without a project: the owner's projects and chat links (where a chat begins).
        (ToolName::ListGraphSessions, json!({})),
        (ToolName::RunGraphSession, run_args.clone()),
        (ToolName::RunGraphSession, run_args.clone()),
        (
            ToolName::RunGraphSession,
            json!({"graph_session_id": gs.to_string(), "idempotency_key": "perm-run-2", "project_id": p}),
        ),
        (
            ToolName::RunGraphSession,
            json!({"graph_session_id": format!("gs_{}", "d".repeat(32)), "idempotency_key": "perm-run-3"}),
        ),
        (ToolName::GetGraphRun, json!({"command_id": "COMMAND"})),
        (ToolName::CancelGraphRun, json!({"command_id": "COMMAND"})),
        (ToolName::CancelGraphRun, json!({"command_id": "COMMAND"})),
        (ToolName::ListLinkedChatTasks, json!({"chat_link_id": l})),
        (ToolName::GetLinkedChatTask, json!({"chat_link_id": l, "task_id": t})),
        (ToolName::ClaimLinkedChatTask, json!({"chat_link_id": l, "task_id": t})),
        (ToolName::ClaimLinkedChatTask, json!({"chat_link_id": l, "task_id": t})),
        (
            ToolName::UploadLinkedChatArtifact,
            json!({"chat_link_id": l, "task_id": t, "claim_id": "CLAIM", "artifact_id": "a1", "name": "a.txt", "content_type": "text/plain", "content_base64": base64::engine::general_purpose::STANDARD.encode(b"x")}),
        ),
        (
            ToolName::UploadLinkedChatArtifact,
            json!({"chat_link_id": l, "task_id": t, "claim_id": "CLAIM", "artifact_id": "a1", "name": "a.txt", "content_type": "text/plain", "content_base64": base64::engine::general_purpose::STANDARD.encode(b"y")}),
        ),
        (
            ToolName::SubmitLinkedChatResult,
            json!({"chat_link_id": l, "task_id": t, "claim_id": "CLAIM", "status": "completed", "result": "r"}),
        ),
        (
            ToolName::SubmitLinkedChatResult,
            json!({"chat_link_id": l, "task_id": t, "claim_id": "CLAIM", "status": "completed", "result": "r"}),
        ),
    ];
    for (tool, args) in calls {
        let args: serde_json::Value =
            serde_json::from_str(&args.to_string().replace("COMMAND", &command).replace("CLAIM", &claim)).unwrap();
        log.take();
        let reply = handle(
            &deps,
            &ToolCall { tool, owner: owner.clone(), agent: agent.clone(), arguments: args, request_id: None },
        )
        .await
        .unwrap();
        let (ops, units) = log.take_with_capacity();
        seen.entry(tool).or_default().extend(ops.iter().flat_map(|op| iam(op)));
        first.entry(tool.as_str().to_owned()).or_insert((ops, units));
        if let ToolReply::Ok { structured } = &reply {
            if let Some(c) = structured.get("command_id").and_then(|v| v.as_str()) {
                command = c.to_owned();
            }
            if let Some(c) = structured.get("claim_id").and_then(|v| v.as_str()) {
                claim = c.to_owned();
            }
        }
        assert!(!matches!(reply, ToolReply::Invalid { .. }), "{tool:?}: {reply:?}");
    }
    for &tool in ToolName::ALL {
        let declared: BTreeSet<String> = tool.spec().dynamodb_actions.iter().map(|s| (*s).to_owned()).collect();
        let used = seen.remove(&tool).unwrap_or_default();
        eprintln!("{}: {:?}", tool.as_str(), used);
        assert_eq!(used, declared, "{}: IAM actions used vs declared", tool.as_str());
    }
    check_cost_inputs("tools", &first);
}

/// Every request [`request`] made: the routes this file drives.
static DRIVEN: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// Requests for the relay and owner APIs, through their real HTTP handlers.
fn request(method: &str, path: &str, token: &str, body: serde_json::Value) -> http::Request<bytes::Bytes> {
    DRIVEN.lock().unwrap().push((method.to_owned(), path.split('?').next().unwrap_or(path).to_owned()));
    http::Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(bytes::Bytes::from(body.to_string()))
        .unwrap()
}

/// The routes of `routes` no request of [`DRIVEN`] reached.
fn undriven<Op>(routes: &'static [http_util::routes::Route<Op>]) -> Vec<String> {
    let driven = DRIVEN.lock().unwrap().clone();
    routes
        .iter()
        .filter(|r| {
            !driven.iter().any(|(m, p)| {
                let method: http::Method = m.parse().unwrap();
                matches!(http_util::routes::find(routes, &method, p), http_util::routes::Found::Route(found, _) if std::ptr::eq(found, *r))
            })
        })
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// Every route of the owner and relay route tables is driven here, so a route's DynamoDB
/// actions (and so its role's IAM) cannot go unchecked: a route added to a table fails this
/// test until the test drives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_and_owner_apis_use_exactly_their_declared_dynamodb_actions() {
    use auth::{Authenticator, Grant, Hs256Signer, Keys};
    use domain::clock::Clock;
    use http_api::owner_api::OwnerApi;
    use http_api::relay_api::RelayApi;
    let Some(h) = Harness::dynamo(test_policy()).await else { return };
    let Backend::Dynamo { log, .. } = &h.backend else { unreachable!() };
    let secret = b"an owner-api test secret of 32 b".to_vec();
    let auth = Arc::new(Authenticator {
        issuer: "iss".into(),
        audience: auth::Audience::Only(vec!["aud".into()]),
        keys: Keys::Hs256(secret.clone()),
        clock: h.clock.clone(),
    });
    let owner_token = Hs256Signer::new(&secret, "iss", "aud")
        .mint(
            Grant { subject: "api-owner", client: "panel", scopes: &["osfoundry:owner"] },
            h.clock.now(),
            std::time::Duration::from_secs(600),
        )
        .unwrap();
    let owner_api = OwnerApi {
        store: Arc::clone(&h.store),
        auth,
        clock: h.clock.clone(),
        policy: h.policy,
        blobs: Some(foundry_tests::temp_blobs(h.clock.clone())),
        urls: events::webhook_url::UrlPolicy::Cloud,
        budget: Default::default(),
    };
    let relay_api = RelayApi {
        store: Arc::clone(&h.store),
        clock: h.clock.clone(),
        policy: h.policy,
        public_url: "https://api.example".into(),
        doorbell_url: None,
        doorbell_poll_interval: domain::doorbell::DOORBELL_POLL_INTERVAL,
        budget: Default::default(),
    };
    let iam_of = |ops: Vec<String>| -> BTreeSet<String> { ops.iter().flat_map(|o| iam(o)).collect() };

    // A desktop asks to be paired (its actions are the relay's, counted below with the second).
    let pair_body = |tag: char| json!({"name": "Ana's Mac", "os": "macos", "arch": "aarch64", "token_sha256": tag.to_string().repeat(64)});
    let ask = |tag: char| {
        let req = request("POST", "/external-assistants/graph-relays/pairings", "", pair_body(tag));
        let relay_api = &relay_api;
        async move { serde_json::from_slice::<serde_json::Value>(relay_api.handle(req).await.body()).unwrap() }
    };
    let pairing = ask('a').await;
    let user_code = pairing["user_code"].as_str().unwrap().to_owned();
    // A second one, which the owner refuses.
    let refused = ask('c').await;
    let refused_code = refused["user_code"].as_str().unwrap().to_owned();

    // Owner API: every route.
    log.take();
    let seen =
        owner_api.handle(request("GET", &format!("/owner/pairings/{user_code}"), &owner_token, json!(null))).await;
    assert_eq!(seen.status(), 200, "{:?}", seen.body());
    let approved = owner_api
        .handle(request("POST", &format!("/owner/pairings/{user_code}/approve"), &owner_token, json!({"name": "Mac"})))
        .await;
    assert_eq!(approved.status(), 200, "{:?}", approved.body());
    let created: serde_json::Value = serde_json::from_slice(
        owner_api.handle(request("POST", "/owner/projects", &owner_token, json!({"name": "P"}))).await.body(),
    )
    .unwrap();
    let project = created["project_id"].as_str().unwrap().to_owned();
    owner_api
        .handle(request("PUT", &format!("/owner/projects/{project}"), &owner_token, json!({"enabled": true})))
        .await;
    owner_api.handle(request("GET", "/owner/projects", &owner_token, json!(null))).await;
    let device: serde_json::Value = serde_json::from_slice(
        owner_api.handle(request("POST", "/owner/devices", &owner_token, json!({"name": "Mac"}))).await.body(),
    )
    .unwrap();
    owner_api.handle(request("GET", "/owner/devices", &owner_token, json!(null))).await;
    let device_token = device["token"].as_str().unwrap().to_owned();
    let spare: serde_json::Value = serde_json::from_slice(
        owner_api.handle(request("POST", "/owner/devices", &owner_token, json!({"name": "Old"}))).await.body(),
    )
    .unwrap();
    let revoked = owner_api
        .handle(request(
            "DELETE",
            &format!("/owner/devices/{}", spare["device_id"].as_str().unwrap()),
            &owner_token,
            json!(null),
        ))
        .await;
    assert_eq!(revoked.status(), 200);
    let json_of = |r: http::Response<bytes::Bytes>| -> serde_json::Value {
        assert!(r.status().is_success(), "{:?}", r.body());
        serde_json::from_slice(r.body()).unwrap()
    };
    // A desktop paused, resumed, then removed as gone (a desktop of its own, so the one the
    // relay API uses below stays).
    let gone =
        json_of(owner_api.handle(request("POST", "/owner/devices", &owner_token, json!({"name": "Gone"}))).await);
    let gone = gone["device_id"].as_str().unwrap().to_owned();
    let pause = json!({"for_seconds": 3600, "note": "travelling"});
    json_of(owner_api.handle(request("POST", &format!("/owner/devices/{gone}/pause"), &owner_token, pause)).await);
    json_of(
        owner_api.handle(request("POST", &format!("/owner/devices/{gone}/resume"), &owner_token, json!(null))).await,
    );
    json_of(
        owner_api.handle(request("POST", &format!("/owner/devices/{gone}/remove"), &owner_token, json!(null))).await,
    );
    json_of(
        owner_api
            .handle(request("POST", &format!("/owner/pairings/{refused_code}/refuse"), &owner_token, json!(null)))
            .await,
    );
    let link = json_of(
        owner_api
            .handle(request("POST", "/owner/links", &owner_token, json!({"project_id": project, "name": "Chat"})))
            .await,
    )["chat_link_id"]
        .as_str()
        .unwrap()
        .to_owned();
    json_of(owner_api.handle(request("GET", "/owner/links", &owner_token, json!(null))).await);
    json_of(owner_api.handle(request("GET", &format!("/owner/links/{link}"), &owner_token, json!(null))).await);
    let sub = json!({"url": "https://hooks.example.com/fc"});
    json_of(owner_api.handle(request("PUT", &format!("/owner/links/{link}/subscription"), &owner_token, sub)).await);
    json_of(
        owner_api
            .handle(request("DELETE", &format!("/owner/links/{link}/subscription"), &owner_token, json!(null)))
            .await,
    );
    // The link's switch for tasks from desktops: on, off, and on again (the relay part below
    // hands it one).
    let switch = format!("/owner/links/{link}/desktop-tasks");
    json_of(owner_api.handle(request("PUT", &switch, &owner_token, json!({}))).await);
    json_of(owner_api.handle(request("DELETE", &switch, &owner_token, json!(null))).await);
    json_of(owner_api.handle(request("PUT", &switch, &owner_token, json!({"sessions": []}))).await);
    let assign = json!({"objective": "Summarize", "idempotency_key": "perm-assign-1"});
    let task = json_of(
        owner_api.handle(request("POST", &format!("/owner/links/{link}/tasks"), &owner_token, assign.clone())).await,
    )["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    json_of(owner_api.handle(request("POST", &format!("/owner/links/{link}/tasks"), &owner_token, assign)).await);
    json_of(
        owner_api
            .handle(request("GET", &format!("/owner/links/{link}/tasks?limit=10"), &owner_token, json!(null)))
            .await,
    );
    json_of(
        owner_api.handle(request("GET", &format!("/owner/links/{link}/tasks/{task}"), &owner_token, json!(null))).await,
    );
    json_of(
        owner_api
            .handle(request("POST", &format!("/owner/links/{link}/tasks/{task}/cancel"), &owner_token, json!(null)))
            .await,
    );
    json_of(owner_api.handle(request("GET", "/owner/runs", &owner_token, json!(null))).await);
    let mut owner_ops = log.take();
    json_of(owner_api.handle(request("GET", "/owner/overview", &owner_token, json!(null))).await);
    let mut costed: BTreeMap<String, (Vec<String>, Capacity)> = BTreeMap::new();
    owner_ops.extend(log.take());
    let doomed = json_of(
        owner_api
            .handle(request("POST", "/owner/links", &owner_token, json!({"project_id": project, "name": "Old"})))
            .await,
    )["chat_link_id"]
        .as_str()
        .unwrap()
        .to_owned();
    json_of(owner_api.handle(request("DELETE", &format!("/owner/links/{doomed}"), &owner_token, json!(null))).await);
    owner_ops.extend(log.take());
    let owner_used = iam_of(owner_ops);

    // Relay API: sync, start, control, complete, on a queued run.
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "e".repeat(32))).unwrap();
    let sync_body =
        json!({"project_id": project, "sessions": [{"graph_session_id": gs.to_string(), "name": "G", "slug": "g"}]});
    let res = relay_api
        .handle(request("POST", "/external-assistants/graph-relays/sync", &device_token, sync_body.clone()))
        .await;
    assert_eq!(res.status(), 200, "{:?}", res.body());
    let owner = OwnerId::new("api-owner").unwrap();
    let agent = AgentId::new("c", "api-owner").unwrap();
    let req = domain::runs::QueueRun {
        owner: owner.clone(),
        agent,
        project_id: None,
        graph_session_id: gs,
        arguments: json!({}),
        idempotency_key: IdempotencyKey::parse("relay-perm-1").unwrap(),
    };
    let domain::runs::QueueOutcome::Queued(run) = h.store.queue_run(&req).await.unwrap() else { panic!() };
    log.take();
    // Pairing: a second desktop asks, and the first one's poll redeems its approval.
    let second =
        relay_api.handle(request("POST", "/external-assistants/graph-relays/pairings", "", pair_body('b'))).await;
    assert_eq!(second.status(), 200, "{:?}", second.body());
    let poll = json!({"device_code": pairing["device_code"]});
    let redeemed =
        relay_api.handle(request("POST", "/external-assistants/graph-relays/pairings/token", "", poll)).await;
    assert_eq!(redeemed.status(), 200, "{:?}", redeemed.body());
    let mut relay_ops = log.take();
    // Each sync carries the relay's report of itself, as the relay sends it (domain::fleet): it
    // rides in the last-seen write, so it adds no request.
    let synced = |version: &str| {
        let mut req = request("POST", "/external-assistants/graph-relays/sync", &device_token, sync_body.clone());
        let report = domain::fleet::RelayReport {
            version: version.into(),
            platform: "linux-x86_64".into(),
            host: "ci".into(),
            doorbell: false,
            update: None,
            slots: None,
            unavailable: None,
        };
        req.headers_mut().insert(domain::fleet::RELAY_HEADER, report.header_value().parse().unwrap());
        relay_api.handle(req)
    };
    assert_eq!(synced("0.4.0").await.status(), 200);
    let sync_ops = log.take_with_capacity();
    relay_ops.extend(sync_ops.0.iter().cloned());
    costed.insert("relay_sync_with_work".into(), sync_ops);
    // The same desktop again within the minute, the same report: what an idle sync costs (the
    // last-seen write is conditional and does not happen, but DynamoDB counts the request).
    assert_eq!(synced("0.4.0").await.status(), 200);
    let idle = log.take_with_capacity();
    relay_ops.extend(idle.0.iter().cloned());
    costed.insert("relay_sync_idle_within_the_minute".into(), idle);
    // A new version within the minute: the same requests (that conditional write now happens).
    assert_eq!(synced("0.5.0").await.status(), 200);
    let changed = log.take_with_capacity();
    relay_ops.extend(changed.0.iter().cloned());
    costed.insert("relay_sync_report_changed".into(), changed);
    // A minute on, the same report and list: the project's `last_sync_at` is moved (the one
    // project write of an unchanged desktop, once a minute: domain::projects::SYNC_STAMP_EVERY)
    // and so is the desktop's last-seen time.
    h.clock.advance(domain::projects::SYNC_STAMP_EVERY);
    assert_eq!(synced("0.5.0").await.status(), 200);
    let stamped = log.take_with_capacity();
    relay_ops.extend(stamped.0.iter().cloned());
    costed.insert("relay_sync_a_minute_later".into(), stamped);
    let id = run.command_id;
    let start = relay_api
        .handle(request(
            "POST",
            &format!("/external-assistants/graph-relays/commands/{id}/start"),
            &device_token,
            json!({"execution_id": "e1"}),
        ))
        .await;
    assert_eq!(start.status(), 200);
    let mut step = |name: &str, relay_ops: &mut Vec<String>| {
        let ops = log.take_with_capacity();
        relay_ops.extend(ops.0.iter().cloned());
        costed.insert(name.to_owned(), ops);
    };
    step("relay_start", &mut relay_ops);
    relay_api
        .handle(request(
            "GET",
            &format!("/external-assistants/graph-relays/commands/{id}/control"),
            &device_token,
            json!(null),
        ))
        .await;
    step("relay_control", &mut relay_ops);
    // About once a minute of a run a control poll carries the relay's report: that one pays
    // the last-seen write (the desktop is there while it runs).
    let mut reporting =
        request("GET", &format!("/external-assistants/graph-relays/commands/{id}/control"), &device_token, json!(null));
    let report = domain::fleet::RelayReport {
        version: "0.5.0".into(),
        platform: "linux-x86_64".into(),
        host: "ci".into(),
        doorbell: false,
        update: None,
        slots: None,
        unavailable: None,
    };
    reporting.headers_mut().insert(domain::fleet::RELAY_HEADER, report.header_value().parse().unwrap());
    assert_eq!(relay_api.handle(reporting).await.status(), 200);
    step("relay_control_reporting", &mut relay_ops);
    // A control check forwarding the Graph's progress (at most one per 10 s of a run): the
    // heartbeat's own write carries it.
    let progress = relay_api
        .handle(request(
            "POST",
            &format!("/external-assistants/graph-relays/commands/{id}/control"),
            &device_token,
            json!({"execution_id": "e1", "progress": {"message": "step 2 of 4", "fraction": 0.5, "tail": ["fetched 200 rows"]}}),
        ))
        .await;
    assert_eq!(progress.status(), 200);
    step("relay_control_progress", &mut relay_ops);
    let done = relay_api
        .handle(request(
            "POST",
            &format!("/external-assistants/graph-relays/commands/{id}/complete"),
            &device_token,
            json!({"execution_id": "e1", "status": "completed", "result": "ok"}),
        ))
        .await;
    assert_eq!(done.status(), 200);
    step("relay_complete", &mut relay_ops);
    // A second run hands a task to the owner's chat and reads it back; its completion cancels
    // it (apart from the costed steps above: most runs hand nothing over).
    let req = domain::runs::QueueRun {
        idempotency_key: IdempotencyKey::parse("relay-perm-2").unwrap(),
        agent: AgentId::new("c", "api-owner").unwrap(),
        ..req
    };
    let domain::runs::QueueOutcome::Queued(second) = h.store.queue_run(&req).await.unwrap() else { panic!() };
    let id = second.command_id;
    let relay_path = |p: String| format!("/external-assistants/graph-relays{p}");
    let started = relay_api
        .handle(request(
            "POST",
            &relay_path(format!("/commands/{id}/start")),
            &device_token,
            json!({"execution_id": "e2"}),
        ))
        .await;
    assert_eq!(started.status(), 200);
    let ask = json!({"command_id": id.to_string(), "chat_link_id": link, "objective": "Check the figures", "idempotency_key": "perm-dispatch-1"});
    let asked = json_of(relay_api.handle(request("POST", &relay_path("/tasks".into()), &device_token, ask)).await);
    let handed = asked["task"]["task_id"].as_str().unwrap().to_owned();
    let read = relay_api
        .handle(request("GET", &relay_path(format!("/links/{link}/tasks/{handed}")), &device_token, json!(null)))
        .await;
    assert_eq!(read.status(), 200, "{:?}", read.body());
    let ended = relay_api
        .handle(request(
            "POST",
            &relay_path(format!("/commands/{id}/complete")),
            &device_token,
            json!({"execution_id": "e2", "status": "failed", "error": "gave up"}),
        ))
        .await;
    assert_eq!(ended.status(), 200);
    let read = json_of(
        relay_api
            .handle(request("GET", &relay_path(format!("/links/{link}/tasks/{handed}")), &device_token, json!(null)))
            .await,
    );
    assert_eq!(read["status"], "cancelled", "the run's end cancelled its task: {read}");
    relay_ops.extend(log.take());
    // The desktop pauses itself and resumes (the relay's `pause` command).
    for (path, body) in [("pause", json!({"for_seconds": 600, "note": "on battery"})), ("resume", json!({}))] {
        let answer = relay_api
            .handle(request("POST", &format!("/external-assistants/graph-relays/{path}"), &device_token, body))
            .await;
        assert_eq!(answer.status(), 200, "{path}: {:?}", answer.body());
    }
    relay_ops.extend(log.take());
    let relay_used = iam_of(relay_ops);
    // The panel again, with runs to list (the first refresh above had none): their keys from
    // the keys-only index, the runs by BatchGetItem. This is the refresh the cost model prices.
    json_of(owner_api.handle(request("GET", "/owner/runs", &owner_token, json!(null))).await);
    let mut owner_used = owner_used;
    owner_used.extend(iam_of(log.take()));
    json_of(owner_api.handle(request("GET", "/owner/overview", &owner_token, json!(null))).await);
    let overview = log.take_with_capacity();
    owner_used.extend(iam_of(overview.0.clone()));
    costed.insert("panel_refresh".into(), overview);
    // The owner cancels a run (queued by an agent: the store's own queueing, not counted).
    let req = domain::runs::QueueRun { idempotency_key: IdempotencyKey::parse("owner-cancel-1").unwrap(), ..req };
    let domain::runs::QueueOutcome::Queued(third) = h.store.queue_run(&req).await.unwrap() else { panic!() };
    log.take();
    let cancel = format!("/owner/runs/{}/cancel", third.command_id);
    let cancelled = json_of(owner_api.handle(request("POST", &cancel, &owner_token, json!(null))).await);
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    owner_used.extend(iam_of(log.take()));

    let mut missing = undriven(http_api::owner_api::ROUTES);
    missing.extend(undriven(http_api::relay_api::ROUTES));
    assert!(missing.is_empty(), "routes this test does not drive (their IAM goes unchecked): {missing:#?}");
    let declared = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<String>>();
    eprintln!("owner_api: {owner_used:?}\ngraph_relay: {relay_used:?}");
    assert_eq!(owner_used, declared(http_api::owner_api::DYNAMODB_ACTIONS));
    assert_eq!(relay_used, declared(http_api::relay_api::DYNAMODB_ACTIONS));
    check_cost_inputs("apis", &costed);
}

/// docs/cost.md shows what `infra/cost.py` prints from docs/cost-inputs.json (whose DynamoDB part
/// the tests above hold to the measured requests): the tables cannot drift from their inputs.
#[test]
fn the_cost_tables_are_the_output_of_the_cost_command() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new("python3").arg("infra/cost.py").current_dir(&root).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(foundry_tests::markdown_tables(&printed).len() >= 3, "the cost command printed no tables: {printed}");
    let doc = std::fs::read_to_string(root.join("docs/cost.md")).unwrap();
    if let Err(e) = foundry_tests::tables_match(&printed, &doc) {
        panic!("docs/cost.md: {e}\npaste `python3 infra/cost.py` into it");
    }
    // The broken variants the check must catch: a stale row kept beside the current one, and a
    // row dropped.
    let first = foundry_tests::markdown_tables(&printed)[0].clone();
    let row = first[2];
    let stale = doc.replacen(row, &format!("{row}\n{}", row.replace('$', "$9")), 1);
    assert!(foundry_tests::tables_match(&printed, &stale).is_err(), "a stale row beside the new one passed");
    let dropped = doc.replacen(&format!("{row}\n"), "", 1);
    assert!(foundry_tests::tables_match(&printed, &dropped).is_err(), "a dropped row passed");
    // docs/results.md quotes one figure of the tables in its prose: the cost of a sync.
    let results = std::fs::read_to_string(root.join("docs/results.md")).unwrap();
    if let Err(e) = sync_cost_quoted(&printed, &results) {
        panic!("docs/results.md (Doorbell): {e}");
    }
    let stale = results.replacen(" per million syncs**", "1 per million syncs**", 1);
    assert!(sync_cost_quoted(&printed, &stale).is_err(), "a changed sync cost passed");
    // The prose figures of cost.md, panel.md and scale.md: each from the printed tables or
    // the measured inputs, so a stale one fails (each was, before this check).
    let inputs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("docs/cost-inputs.json")).unwrap()).unwrap();
    let docs = |name: &str| std::fs::read_to_string(root.join("docs").join(name)).unwrap();
    for (name, said) in prose_figures(&printed, &inputs) {
        assert!(foundry_tests::says(&docs(name), &said), "docs/{name} does not say {said:?}");
    }
    // The idle syncs a day are the doorbell benchmark's, read from its file, not typed in: with
    // another count in a copy of the file, the command prints that count.
    let dir = std::env::temp_dir().join(format!("foundry-cost-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root.join("docs/cost-inputs.json"), dir.join("cost-inputs.json")).unwrap();
    std::fs::copy(root.join("docs/scale-figures.json"), dir.join("scale-figures.json")).unwrap();
    let mut figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("docs/doorbell-figures.json")).unwrap()).unwrap();
    figures["idle"]["on_per_day"] = json!(1234);
    std::fs::write(dir.join("doorbell-figures.json"), figures.to_string()).unwrap();
    // The durations priced are the cold-start benchmark's warm invocations (the file
    // docs/results.md's table of the deployed build is held to), read from its file too.
    let mut cold: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("docs/cold-start-figures.json")).unwrap()).unwrap();
    cold["functions"]["graph_relay"]["warm_ms"] = json!(400.0);
    std::fs::write(dir.join("cold-start-figures.json"), cold.to_string()).unwrap();
    let out = std::process::Command::new("python3")
        .arg("infra/cost.py")
        .arg(dir.join("cost-inputs.json"))
        .current_dir(&root)
        .output()
        .unwrap();
    let moved = String::from_utf8_lossy(&out.stdout);
    assert!(
        moved.contains("(1,234/day, measured)"),
        "the cost command does not read the idle syncs from the figures:\n{moved}"
    );
    let sync_row = |t: &str| t.lines().find(|l| l.starts_with("| one sync (")).map(str::to_owned);
    assert_ne!(
        sync_row(&moved),
        sync_row(&printed),
        "the cost command does not price graph_relay's warm duration from docs/cold-start-figures.json"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The fixed monthly floor docs/cost.md shows first is counted from the template, not typed in:
/// its alarm row names the alarms a YAML parser of the tests' own (`cloud::Template`) counts in
/// template.yaml, an alarm added to a copy of the template moves the floor (and the page then
/// disagrees), a resource type with a monthly price the command does not know stops it, and
/// the command's stdlib reader of the template (`infra/template_yaml.py`) reads what PyYAML reads.
#[test]
fn the_fixed_floor_is_counted_from_the_template() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cost = |template: Option<&std::path::Path>| {
        let mut cmd = std::process::Command::new("python3");
        cmd.arg("infra/cost.py").current_dir(&root);
        if let Some(t) = template {
            cmd.env("FOUNDRY_TEMPLATE", t);
        }
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, printed, err) = cost(None);
    assert!(ok, "{err}");
    let doc = std::fs::read_to_string(root.join("docs/cost.md")).unwrap();
    let floor_table = |printed: &str| {
        foundry_tests::markdown_tables(printed)
            .into_iter()
            .find(|t| t[0].starts_with("| fixed monthly cost |"))
            .map(|t| t.iter().map(|r| (*r).to_owned()).collect::<Vec<String>>())
            .unwrap_or_else(|| panic!("the cost command prints no floor table:\n{printed}"))
    };
    let floor = floor_table(&printed);
    // The floor comes first on the page, before the per-request tables.
    let first = foundry_tests::markdown_tables(&doc)[0][0].to_owned();
    assert_eq!(first, floor[0], "docs/cost.md does not show the floor first");
    let resources = foundry_tests::cloud::Template::load().value(&["Resources"]);
    let count =
        |kind: &str| resources.as_mapping().unwrap().values().filter(|r| r["Type"].as_str() == Some(kind)).count();
    let alarms = count("AWS::CloudWatch::Alarm");
    assert!(alarms > 0);
    let alarm_row = floor.iter().find(|r| r.starts_with("| CloudWatch alarms")).expect("an alarm row");
    assert!(
        alarm_row.contains(&format!("| {alarms} alarms: ")),
        "the floor counts other alarms than template.yaml has ({alarms}): {alarm_row}"
    );
    let groups = count("AWS::Logs::LogGroup");
    assert!(
        floor.iter().any(|r| r.contains(&format!("| {groups} log groups |"))),
        "the floor counts other log groups than {groups}"
    );
    // The page says the floor for one owner with one desktop in its prose too.
    let total = floor.iter().find(|r| r.starts_with("| **the floor** |")).unwrap();
    let small = total.split('|').nth(3).unwrap().trim().trim_matches('*').to_owned();
    assert!(
        foundry_tests::says(&doc, &format!("about {small} a month")),
        "docs/cost.md does not say the floor is about {small} a month"
    );

    let cell = |start: &str| {
        let row = floor.iter().find(|r| r.starts_with(start)).unwrap_or_else(|| panic!("no row {start:?}"));
        row.split('|').nth(3).unwrap().trim().to_owned()
    };
    for said in [
        format!("the template's alarms ({})", cell("| CloudWatch alarms")),
        format!("operations dashboard ({})", cell("| CloudWatch dashboard")),
    ] {
        assert!(foundry_tests::says(&doc, &said), "docs/cost.md does not say {said:?}");
    }

    let dir = std::env::temp_dir().join(format!("foundry-floor-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let template = std::fs::read_to_string(root.join("template.yaml")).unwrap();
    // One more alarm in a copy: the floor's alarm row and total move, and the page no longer matches.
    let added = template.replacen(
        "\nResources:\n",
        "\nResources:\n  ExtraAlarm:\n    Type: AWS::CloudWatch::Alarm\n    Properties:\n      Namespace: AWS/Lambda\n      MetricName: Errors\n      Statistic: Sum\n      Period: 300\n      EvaluationPeriods: 1\n      Threshold: 0\n      ComparisonOperator: GreaterThanThreshold\n",
        1,
    );
    assert_ne!(added, template);
    let copy = dir.join("template.yaml");
    std::fs::write(&copy, &added).unwrap();
    let (ok, moved, err) = cost(Some(&copy));
    assert!(ok, "{err}");
    let moved_floor = floor_table(&moved);
    assert!(
        moved_floor
            .iter()
            .any(|r| r.starts_with("| CloudWatch alarms") && r.contains(&format!("| {} alarms: ", alarms + 1))),
        "an alarm added to the template is not counted:\n{}",
        moved_floor.join("\n")
    );
    let moved_total = moved_floor.iter().find(|r| r.starts_with("| **the floor** |")).unwrap();
    assert_ne!(moved_total, total, "an alarm added to the template does not move the floor");
    assert!(
        foundry_tests::tables_match(&moved, &doc).is_err(),
        "docs/cost.md passed with the floor of another template"
    );
    // A resource with a monthly price the floor does not know (a KMS key) stops the command.
    let kms = template.replacen(
        "\nResources:\n",
        "\nResources:\n  ExtraKey:\n    Type: AWS::KMS::Key\n    Properties:\n      KeyPolicy: { Version: \"2012-10-17\", Statement: [] }\n",
        1,
    );
    std::fs::write(&copy, &kms).unwrap();
    let (ok, _, err) = cost(Some(&copy));
    assert!(!ok && err.contains("AWS::KMS::Key"), "a KMS key in the template went unpriced: {err}");
    std::fs::remove_dir_all(&dir).unwrap();

    // The command's reader of the template against PyYAML, where the Python on PATH has it.
    let out = std::process::Command::new("python3")
        .arg("infra/template_yaml.py")
        .arg("template.yaml")
        .current_dir(&root)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "infra/template_yaml.py: {said}");
    assert!(said.contains("template_yaml: same") || said.contains("not installed"), "{said}");
    eprintln!("{}", said.trim());
}

/// docs/results.md's "**$N per million syncs**" is the cost command's "one sync" row.
/// The figures the docs' prose quotes, as (file, sentence) built from the cost command's
/// output and the measured inputs.
fn prose_figures(printed: &str, inputs: &serde_json::Value) -> Vec<(&'static str, String)> {
    let cost_of = |start: &str| {
        let row = printed.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no row {start:?}"));
        row.rsplit('|').nth(1).map(|c| c.trim().trim_matches('*').to_owned()).unwrap()
    };
    let apis = &inputs["dynamodb_requests"]["apis"];
    let list = |k: &str| apis[k].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect::<Vec<_>>();
    let sync = list("relay_sync_with_work");
    for k in ["relay_sync_idle_within_the_minute", "relay_sync_report_changed"] {
        assert_eq!(list(k), sync, "{k}: docs/cost.md calls it the same requests as a sync with work");
    }
    let words = ["", "one", "two", "three", "four", "five", "six"];
    let minute = list("relay_sync_a_minute_later");
    let queued = inputs["dynamodb_capacity"]["tools"]["run_graph_session"]["write"].as_f64().unwrap();
    let capacity = |op: &str, kind: &str| inputs["dynamodb_capacity"]["apis"][op][kind].as_f64().unwrap();
    let cents = |cell: &str| {
        let dollars: f64 = cell.trim_start_matches('$').parse().unwrap_or_else(|_| panic!("not dollars: {cell}"));
        // Half a cent rounds up, as the docs write it (0.305 is 0.30499… in binary).
        format!("${:.2}", (dollars * 100.0 + 1e-6).round() / 100.0)
    };
    // A running hour's control checks and progress forwards, from the relay's own constants.
    let hour = 3600;
    let checks = foundry_tests::grouped(hour / relay::config::DEFAULT_CONTROL_POLL.as_secs());
    let forwards = hour / domain::progress::FORWARD_EVERY.as_secs();
    let panel_day = cost_of("| an open, visible panel-day");
    let panel_cents = cents(&panel_day);
    assert_eq!(panel_cents, "$0.01", "docs/cost.md calls an open panel-day ({panel_day}) about a cent");
    vec![
        (
            "cost.md",
            format!("so a running hour still makes {checks} checks, of which at most {forwards} carry progress"),
        ),
        (
            "results.md",
            format!(
                "Requests per running hour are unchanged: {checks} control checks at the {} s default, of which at most {forwards} are `POST`s carrying progress",
                relay::config::DEFAULT_CONTROL_POLL.as_secs()
            ),
        ),
        ("cost.md", "An open panel costs about a cent a day.".to_owned()),
        ("cost.md", format!("with the doorbell {}.", cost_of("| **idle desktop-month with the doorbell**"))),
        (
            "cost.md",
            format!(
                "An idle desktop costs {} a month polling every 20 s",
                cents(&cost_of("| idle desktop-month, polling"))
            ),
        ),
        (
            "cost.md",
            format!(
                "make at most about 9 KB of UTF-8, {} per running hour in all",
                cost_of("| ... with a progress making the run item 9 KB")
            ),
        ),
        ("cost.md", format!("are the same {} requests ({})", words[sync.len()], sync.join(", "))),
        ("cost.md", format!("adds the project's `UpdateItem` ({})", words[minute.len()])),
        ("panel.md", format!("a refresh is now {}", cost_of("| one refresh ("))),
        ("scale.md", format!("A queued run is {queued} write units")),
        (
            "results.md",
            format!(
                "`infra/cost.py`: {} per running hour with a small progress, {} with a progress at every bound",
                cost_of("| ... with progress forwarded every 10 s"),
                cost_of("| ... with a progress making the run item 9 KB")
            ),
        ),
        (
            "results.md",
            format!(
                "{} read and {} write units as the emulator's meter",
                capacity("relay_sync_idle_within_the_minute", "read"),
                capacity("relay_sync_idle_within_the_minute", "write")
            ),
        ),
        (
            "scale.md",
            format!(
                "The measured sync is {} read and {} write units ({} once a minute)",
                capacity("relay_sync_idle_within_the_minute", "read"),
                capacity("relay_sync_idle_within_the_minute", "write"),
                capacity("relay_sync_a_minute_later", "write")
            ),
        ),
    ]
}

fn sync_cost_quoted(printed: &str, results: &str) -> Result<(), String> {
    let row = printed.lines().find(|l| l.starts_with("| one sync (")).ok_or("the cost command prints no sync row")?;
    let cost = row.rsplit('|').nth(1).map(str::trim).and_then(|c| c.strip_suffix(" per million")).ok_or(row)?;
    let quoted = format!("**{cost} per million syncs**");
    if foundry_tests::says(results, &quoted) {
        Ok(())
    } else {
        Err(format!("it does not say {quoted} (the cost command's `{row}`)"))
    }
}
