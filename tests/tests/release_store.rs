//! Data a release wrote, read and changed by this build, on both stores (issue 60;
//! docs/releasing.md).
//!
//! At a release's cut, [`freeze_this_releases_stored_data`] (ignored; `infra/freeze-release.sh`)
//! drives one owner's life through the store on each store (a paired desktop, a paused one,
//! runs queued, running and finished, a chat link with a subscription, tasks open, claimed
//! and submitted with an artifact, a task a desktop handed over, a pending pairing, OAuth
//! clients, flows, documents and token families, a doorbell socket) and freezes what it
//! wrote: every DynamoDB item (`dynamodb_items.json`, in DynamoDB's JSON) and the SQLite file
//! as SQL (`sqlite.sql`, its `user_version` included), with the scenario's ids
//! (`store_scenario.json`).
//!
//! [`a_supported_releases_data_is_read_and_changed_by_this_build`] loads each supported
//! release's data into a fresh store of this build (a table this build creates; the SQLite
//! file opened by this build, so its migrations run) at the release's clock, and runs the
//! paths over it: a desktop authenticates and syncs, takes the queued run and finishes it and
//! the running one, a chat claims the open task and submits the claimed one, the owner's
//! views read everything back, a refresh token rotates, a flow is taken.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use domain::clock::{ManualClock, Timestamp};
use domain::ids::{
    AgentId, ChatLinkId, ClaimId, CommandId, GraphSessionId, IdempotencyKey, OwnerId, ProjectId, TaskId,
};
use domain::projects::{Subscription, SyncOutcome};
use domain::runs::{
    CompleteOutcome, Completion, ControlOutcome, FinalStatus, QueueFilter, QueueOutcome, QueueRun, RunStatus,
    SessionMeta, StartOutcome,
};
use domain::store::{
    AuthorizationFlows, ClientRedirects, DoorbellConnections, MetadataClients, RefreshTokens, RegisterClients,
};
use domain::tasks::{ArtifactRecord, AssignOutcome, AssignTask, ClaimOutcome, SubmitOutcome, SubmitStatus, TaskStatus};
use foundry_tests::{Backend, Harness, test_policy};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The ids of the frozen scenario on one store (its data holds them).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Scenario {
    /// The store's clock when the scenario ended (ms since the epoch): the loaded data is
    /// used a second after it, so nothing in it has expired or missed a heartbeat.
    frozen_at_ms: i64,
    owner: String,
    /// `AgentId::new(client, owner_sub)` of the chat that queued the runs.
    agent: (String, String),
    project_id: String,
    device_id: String,
    device_token_hash: String,
    paused_device_id: String,
    queued_run: String,
    running_run: String,
    running_execution: String,
    finished_run: String,
    link_id: String,
    open_task: String,
    claimed_task: String,
    claimed_claim: String,
    submitted_task: String,
    desktop_task: String,
    pairing_code: String,
    client_id: String,
    family: String,
    family_token: String,
    flow: String,
    document_url: String,
    connection_id: String,
    attempts_key: String,
    attempts_window_end_ms: i64,
}

fn gs(n: u8) -> GraphSessionId {
    GraphSessionId::parse("g", &format!("gs_{n:032x}")).unwrap()
}

fn session(n: u8) -> SessionMeta {
    SessionMeta {
        graph_session_id: gs(n),
        name: format!("Graph {n}"),
        description: "drafts the weekly report".into(),
        slug: format!("graph-{n}"),
        version: "1".into(),
        status: "ready".into(),
    }
}

fn key(s: &str) -> IdempotencyKey {
    IdempotencyKey::parse(s).unwrap()
}

fn completion(exec: &str, result: &str) -> Completion {
    Completion {
        execution_id: exec.into(),
        status: FinalStatus::Completed,
        result: Some(result.into()),
        result_truncated: false,
        error: None,
        total_tokens: Some(1200),
        reported_cost: Some(0.02),
    }
}

/// One owner's life through the store: what a release freezes.
async fn write_scenario(h: &Harness) -> Scenario {
    let o = OwnerId::new("release-owner").unwrap();
    let agent = AgentId::new("release-chat", "release-owner").unwrap();
    let (_, token_hash) = domain::devices::new_token().unwrap();
    let dev = h.store.create_device(&o, "Ana's MacBook", &token_hash).await.unwrap();
    let report = domain::fleet::RelayReport {
        version: env!("CARGO_PKG_VERSION").into(),
        platform: "macos-aarch64".into(),
        host: "Ana’s MacBook".into(),
        doorbell: true,
        update: None,
        slots: Some(2),
        unavailable: None,
    };
    h.store.record_device_seen(&dev, Some(&report)).await.unwrap();
    let paused = h.store.create_device(&o, "Studio PC", &domain::devices::new_token().unwrap().1).await.unwrap();
    let pause = domain::devices::Pause {
        at: h.now(),
        until: Some(h.now().plus(Duration::from_secs(86_400))),
        note: "travelling".into(),
    };
    assert!(h.store.set_device_pause(&o, paused.device_id, Some(&pause)).await.unwrap());
    let p = h.store.create_project(&o, "Reports").await.unwrap();
    h.store.set_project_enabled(&o, p.project_id, true).await.unwrap().unwrap();
    let synced = h.store.sync_sessions(&o, p.project_id, dev.device_id, &[session(1)]).await.unwrap();
    assert!(matches!(synced, SyncOutcome::Synced(_)), "{synced:?}");
    let queue = |k: &'static str, args: Value| {
        let req = QueueRun {
            owner: o.clone(),
            agent: agent.clone(),
            project_id: Some(p.project_id),
            graph_session_id: gs(1),
            arguments: args,
            idempotency_key: key(k),
        };
        let store = h.store.clone();
        async move {
            match store.queue_run(&req).await.unwrap() {
                QueueOutcome::Queued(r) => r.command_id,
                other => panic!("{other:?}"),
            }
        }
    };
    let finished = queue("release-finished", json!({"week": 47})).await;
    assert_eq!(h.store.start_run(&o, finished, "exec-finished", dev.device_id).await.unwrap(), StartOutcome::Started);
    let done = h.store.complete_run(&o, finished, &completion("exec-finished", r#"{"rows":12}"#)).await.unwrap();
    assert_eq!(done, CompleteOutcome::Recorded(RunStatus::Completed));
    let running = queue("release-running", json!({"week": 48})).await;
    assert_eq!(h.store.start_run(&o, running, "exec-running", dev.device_id).await.unwrap(), StartOutcome::Started);
    let progress = domain::relay::ControlRequest {
        execution_id: "exec-running".into(),
        progress: domain::progress::Progress {
            message: "halfway".into(),
            fraction: Some(0.5),
            tail: vec!["reading Q4".into()],
        },
    };
    let c = h.store.control_run(&o, running, Some(&progress)).await.unwrap();
    assert_eq!(c, ControlOutcome::Running { cancel_requested: false });
    let queued = queue("release-queued", json!({"week": 49})).await;

    let link = h.store.create_link(&o, p.project_id, "Pricing chat").await.unwrap().unwrap().link_id;
    let sub = Subscription {
        url: "https://hooks.example.com/fc".into(),
        secret: domain::projects::new_webhook_secret().unwrap(),
        created_at: h.now(),
    };
    h.store.set_subscription(&o, link, Some(&sub)).await.unwrap().unwrap();
    h.store
        .set_desktop_tasks(&o, link, Some(&domain::dispatch::DesktopTasks { sessions: vec![gs(1)] }))
        .await
        .unwrap()
        .unwrap();
    let assign = |objective: &'static str, k: &'static str| {
        let req = AssignTask { owner: o.clone(), link_id: link, objective: objective.into(), idempotency_key: key(k) };
        let store = h.store.clone();
        async move {
            match store.assign_task(&req).await.unwrap() {
                AssignOutcome::Assigned(t) => t.task_id,
                other => panic!("{other:?}"),
            }
        }
    };
    let claim = |t: TaskId| {
        let (store, o) = (h.store.clone(), o.clone());
        async move {
            match store.claim_task(&o, link, t).await.unwrap() {
                ClaimOutcome::Claimed { claim_id, .. } => claim_id,
                other => panic!("{other:?}"),
            }
        }
    };
    let submitted = assign("Price the Q4 sheet", "release-task-submitted").await;
    let submitted_claim = claim(submitted).await;
    let artifact = ArtifactRecord {
        link_id: link,
        task_id: submitted,
        claim_id: submitted_claim,
        artifact_id: "notes".into(),
        name: "notes.md".into(),
        content_type: "text/markdown".into(),
        sha256: "c".repeat(64),
        size: 7,
        object_key: format!("artifacts/{link}/{submitted}/notes"),
    };
    h.store.record_artifact(&o, &artifact).await.unwrap();
    let s = submit(h, &o, link, submitted, submitted_claim, "priced").await;
    assert_eq!(s, SubmitOutcome::Accepted);
    let claimed = assign("Check the discounts", "release-task-claimed").await;
    let claimed_claim = claim(claimed).await;
    let open = assign("Summarise the call", "release-task-open").await;
    let handed = domain::dispatch::DispatchTask {
        owner: o.clone(),
        device_id: dev.device_id,
        command_id: running,
        link_id: link,
        objective: "Approve the totals".into(),
        idempotency_key: key("release-dispatch"),
        ttl: domain::dispatch::DEFAULT_DISPATCH_TTL,
    };
    let desktop_task = match h.store.dispatch_task(&handed).await.unwrap() {
        domain::dispatch::DispatchOutcome::Assigned(t) => t.task_id,
        other => panic!("{other:?}"),
    };
    let delivered = domain::events::DeliveryOutcome {
        event_id: "evt-release".into(),
        event_type: domain::events::EventType::TaskClaimed,
        at: h.now(),
        ok: true,
        detail: "HTTP 204".into(),
    };
    h.store.record_delivery(&o, link, &delivered).await.unwrap();

    let code = domain::pairing::UserCode::generate().unwrap();
    let (_, device_code_hash) = domain::pairing::new_device_code(&code).unwrap();
    let desktop = domain::pairing::Desktop { name: "Ana's iMac".into(), os: "macos".into(), arch: "aarch64".into() };
    let pairing = domain::pairing::Pairing::new(
        code.clone(),
        device_code_hash,
        domain::devices::new_token().unwrap().1,
        desktop,
        "203.0.113.7",
        h.now(),
    );
    assert_eq!(h.store.start_pairing(&pairing).await.unwrap(), domain::pairing::StartOutcome::Started);
    let window_end = h.now().plus(Duration::from_secs(3600));
    h.store.record_failed_attempt("owner-code:203.0.113.7", window_end).await.unwrap();
    // What only one store keeps: the embedded server registers OAuth clients and keeps refresh
    // families itself (the cloud leaves both to Cognito); the cloud keeps doorbell sockets,
    // its facade's flows, client documents' app clients and registered redirects.
    let url = "https://client.example.com/oauth/metadata.json";
    let redirect = vec!["https://claude.ai/api/mcp/auth_callback".to_owned()];
    let client_id = match &h.backend {
        Backend::Embedded { store, .. } => {
            let client = store.create_client("Claude", &redirect, &["mcp".into()]).await.unwrap();
            store
                .start_family("family-release", "refresh-1", h.now().plus(Duration::from_secs(30 * 86_400)))
                .await
                .unwrap();
            client.client_id
        }
        Backend::Dynamo { store, .. } => {
            store.open_connection(&o, dev.device_id, "conn-release-1").await.unwrap();
            store.keep_client_redirects("dcr-client-release", &redirect).await.unwrap();
            assert!(
                store
                    .begin_flow("flow-release", r#"{"state":"s"}"#, h.now().plus(Duration::from_secs(600)))
                    .await
                    .unwrap()
            );
            store.keep_metadata_client(url, "metadata-client-1").await.unwrap();
            "dcr-client-release".to_owned()
        }
    };
    h.store.mark_client_used(&client_id).await.unwrap();
    h.store.mark_chat_connected(&o, &client_id, Some("app-client-of-the-chat")).await.unwrap();
    // A host's handshake, beside the owner's chats: a release that lists chats only never sees it.
    let host = domain::clients::HostSeen {
        client_id: client_id.clone(),
        info: domain::clients::ClientInfo::new("claude-code", "2.1.328"),
        protocol: "2026-07-28".into(),
        seen_at: h.now(),
    };
    h.store.mark_host_seen(&o, &host).await.unwrap();
    h.store.keep_document_copy(url, r#"{"client_name":"Example"}"#, h.now()).await.unwrap();

    Scenario {
        frozen_at_ms: h.now().as_millis(),
        owner: o.to_string(),
        agent: ("release-chat".into(), "release-owner".into()),
        project_id: p.project_id.to_string(),
        device_id: dev.device_id.to_string(),
        device_token_hash: token_hash,
        paused_device_id: paused.device_id.to_string(),
        queued_run: queued.to_string(),
        running_run: running.to_string(),
        running_execution: "exec-running".into(),
        finished_run: finished.to_string(),
        link_id: link.to_string(),
        open_task: open.to_string(),
        claimed_task: claimed.to_string(),
        claimed_claim: claimed_claim.to_string(),
        submitted_task: submitted.to_string(),
        desktop_task: desktop_task.to_string(),
        pairing_code: code.as_str().to_owned(),
        client_id,
        family: "family-release".into(),
        family_token: "refresh-1".into(),
        flow: "flow-release".into(),
        document_url: url.into(),
        connection_id: "conn-release-1".into(),
        attempts_key: "owner-code:203.0.113.7".into(),
        attempts_window_end_ms: window_end.as_millis(),
    }
}

async fn submit(
    h: &Harness,
    o: &OwnerId,
    link: ChatLinkId,
    task: TaskId,
    claim: ClaimId,
    result: &str,
) -> SubmitOutcome {
    let req = domain::tasks::SubmitTask {
        owner: o.clone(),
        link_id: link,
        task_id: task,
        claim_id: claim,
        status: SubmitStatus::Completed,
        result: result.into(),
    };
    h.store.submit_task(&req).await.unwrap()
}

/// The paths over data a release wrote: each mismatch, named (empty: it all worked).
async fn run_the_paths(h: &Harness, s: &Scenario) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            wrong.push(what);
        }
    };
    macro_rules! call {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => {
                    check(false, format!("{}: {e}", stringify!($e)));
                    return wrong;
                }
            }
        };
    }
    let o = OwnerId::new(&s.owner).unwrap();
    let agent = AgentId::new(&s.agent.0, &s.agent.1).unwrap();
    let project = ProjectId::parse("project_id", &s.project_id).unwrap();
    let device = uuid::Uuid::parse_str(&s.device_id).unwrap();
    let cmd = |id: &str| CommandId::parse("command_id", id).unwrap();
    let (queued, running, finished) = (cmd(&s.queued_run), cmd(&s.running_run), cmd(&s.finished_run));
    let link = ChatLinkId::parse("link_id", &s.link_id).unwrap();
    let task = |id: &str| TaskId::parse("task_id", id).unwrap();

    // A desktop: authenticates, syncs, takes the queued run, finishes both.
    let found = call!(h.store.device_by_token_hash(&s.device_token_hash).await);
    check(found.as_ref().map(|d| d.device_id) == Some(device), format!("device by token: {found:?}"));
    let devices = call!(h.store.list_devices(&o).await);
    check(devices.len() == 2, format!("devices: {devices:?}"));
    check(
        devices.iter().any(|d| d.paused.as_ref().is_some_and(|p| p.note == "travelling")),
        format!("the paused device: {devices:?}"),
    );
    let synced = call!(h.store.sync_sessions(&o, project, device, &[session(1)]).await);
    check(matches!(synced, SyncOutcome::Synced(_)), format!("sync: {synced:?}"));
    let q = call!(h.store.list_queued(&o, project, 10, &QueueFilter::all()).await);
    check(q.iter().map(|r| r.command_id).collect::<Vec<_>>() == vec![queued], format!("queue: {q:?}"));
    let started = call!(h.store.start_run(&o, queued, "exec-after-upgrade", device).await);
    check(started == StartOutcome::Started, format!("start the queued run: {started:?}"));
    let c = call!(h.store.control_run(&o, running, None).await);
    check(c == ControlOutcome::Running { cancel_requested: false }, format!("control the running run: {c:?}"));
    for (id, exec) in [(running, s.running_execution.as_str()), (queued, "exec-after-upgrade")] {
        let done = call!(h.store.complete_run(&o, id, &completion(exec, r#"{"rows":3}"#)).await);
        check(done == CompleteOutcome::Recorded(RunStatus::Completed), format!("complete {id}: {done:?}"));
    }
    let old = call!(h.store.get_run(&agent, finished).await);
    let old_result = old.as_ref().and_then(|r| r.completion.as_ref()).and_then(|c| c.result.clone());
    check(old_result.as_deref() == Some(r#"{"rows":12}"#), format!("the finished run: {old:?}"));
    let recent = call!(h.store.recent_runs(&o, 10, None).await);
    check(
        recent.len() == 3 && recent.iter().all(|r| r.status == RunStatus::Completed),
        format!("the owner's runs: {recent:?}"),
    );

    // A chat: claims the open task, submits the claimed one with the claim it holds.
    let claimed = call!(h.store.claim_task(&o, link, task(&s.open_task)).await);
    check(matches!(claimed, ClaimOutcome::Claimed { .. }), format!("claim the open task: {claimed:?}"));
    let claim = ClaimId::parse("claim_id", &s.claimed_claim).unwrap();
    let submitted = submit(h, &o, link, task(&s.claimed_task), claim, "checked").await;
    check(submitted == SubmitOutcome::Accepted, format!("submit the claimed task: {submitted:?}"));
    let t = call!(h.store.get_task(&o, link, task(&s.submitted_task)).await);
    check(t.as_ref().map(|t| t.status) == Some(TaskStatus::Completed), format!("the submitted task: {t:?}"));
    let arts = call!(h.store.list_artifacts(&o, link, task(&s.submitted_task)).await);
    check(arts.len() == 1 && arts[0].name == "notes.md", format!("its artifact: {arts:?}"));
    let handed = call!(h.store.dispatched_task(&o, device, link, task(&s.desktop_task)).await);
    check(
        handed.as_ref().map(|t| t.objective.as_str()) == Some("Approve the totals"),
        format!("the desktop's task: {handed:?}"),
    );
    let links = call!(h.store.list_links(&o).await);
    check(
        links.len() == 1 && links[0].subscription.is_some() && links[0].desktop_tasks.is_some(),
        format!("links: {links:?}"),
    );
    let deliveries = call!(h.store.last_deliveries(&o).await);
    check(deliveries.len() == 1, format!("deliveries: {deliveries:?}"));

    // Sign-in and pairing state.
    let code = domain::pairing::UserCode::parse("user_code", &s.pairing_code).unwrap();
    let pairing = call!(h.store.get_pairing(&code).await);
    check(pairing.is_some(), "the pending pairing".into());
    let window_end = Timestamp::from_millis(s.attempts_window_end_ms);
    let attempts = call!(h.store.failed_attempts(&s.attempts_key, window_end).await);
    check(attempts == 1, format!("failed attempts: {attempts}"));
    let used = call!(h.store.client_use(&s.client_id).await);
    check(used.is_some(), "the client's use".into());
    // Used again: the first use kept (a release before 0.3.0 kept no last use), the last set.
    call!(h.store.mark_client_used(&s.client_id).await);
    let again = call!(h.store.client_use(&s.client_id).await);
    check(
        again
            .is_some_and(|a| Some(a.first_used_at) == used.map(|u| u.first_used_at) && a.last_used_at == Some(h.now())),
        format!("the client's use, used again: {used:?} then {again:?}"),
    );
    let chats = call!(h.store.chat_connections(&o).await);
    check(chats.len() == 1, format!("chat connections: {chats:?}"));
    let copy = call!(h.store.document_copy(&s.document_url).await);
    check(copy.is_some(), "the document's copy".into());
    match &h.backend {
        Backend::Embedded { store, .. } => {
            let client = call!(store.get_client(&s.client_id).await);
            check(client.is_some(), "the registered client".into());
            let rotated = call!(store.rotate(&s.family, &s.family_token, "refresh-after-upgrade").await);
            check(rotated == domain::clients::Rotation::Rotated, format!("the refresh family: {rotated:?}"));
        }
        Backend::Dynamo { store, .. } => {
            let sockets = call!(store.connections_of(&o).await);
            check(sockets.len() == 1, format!("doorbell sockets: {sockets:?}"));
            let redirects = call!(store.client_redirects(&s.client_id).await);
            check(redirects.is_some(), "the client's redirects".into());
            let md = call!(store.metadata_client(&s.document_url).await);
            check(md.as_deref() == Some("metadata-client-1"), format!("the document's client: {md:?}"));
            let flow = call!(store.take_flow(&s.flow).await);
            check(flow.as_deref() == Some(r#"{"state":"s"}"#), format!("the flow: {flow:?}"));
        }
    }
    wrong
}

// ---- DynamoDB items as JSON ------------------------------------------------------------------

fn to_json(v: &AttributeValue) -> Value {
    use base64::Engine;
    let b64 = |b: &aws_smithy_types::Blob| base64::engine::general_purpose::STANDARD.encode(b.as_ref());
    match v {
        AttributeValue::S(s) => json!({"S": s}),
        AttributeValue::N(n) => json!({"N": n}),
        AttributeValue::Bool(b) => json!({"BOOL": b}),
        AttributeValue::Null(_) => json!({"NULL": true}),
        AttributeValue::B(b) => json!({"B": b64(b)}),
        AttributeValue::Ss(v) => json!({"SS": v}),
        AttributeValue::Ns(v) => json!({"NS": v}),
        AttributeValue::Bs(v) => json!({"BS": v.iter().map(b64).collect::<Vec<_>>()}),
        AttributeValue::L(l) => json!({"L": l.iter().map(to_json).collect::<Vec<_>>()}),
        AttributeValue::M(m) => json!({"M": item_json(m)}),
        other => panic!("an attribute type this test does not know: {other:?}"),
    }
}

fn item_json(m: &HashMap<String, AttributeValue>) -> Value {
    Value::Object(m.iter().map(|(k, v)| (k.clone(), to_json(v))).collect::<BTreeMap<_, _>>().into_iter().collect())
}

fn from_json(v: &Value) -> AttributeValue {
    use base64::Engine;
    let blob = |s: &Value| {
        aws_smithy_types::Blob::new(base64::engine::general_purpose::STANDARD.decode(s.as_str().unwrap()).unwrap())
    };
    let strings = |v: &Value| v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect::<Vec<_>>();
    let (tag, inner) = v.as_object().unwrap().iter().next().unwrap();
    match tag.as_str() {
        "S" => AttributeValue::S(inner.as_str().unwrap().into()),
        "N" => AttributeValue::N(inner.as_str().unwrap().into()),
        "BOOL" => AttributeValue::Bool(inner.as_bool().unwrap()),
        "NULL" => AttributeValue::Null(true),
        "B" => AttributeValue::B(blob(inner)),
        "SS" => AttributeValue::Ss(strings(inner)),
        "NS" => AttributeValue::Ns(strings(inner)),
        "BS" => AttributeValue::Bs(inner.as_array().unwrap().iter().map(blob).collect()),
        "L" => AttributeValue::L(inner.as_array().unwrap().iter().map(from_json).collect()),
        "M" => AttributeValue::M(inner.as_object().unwrap().iter().map(|(k, v)| (k.clone(), from_json(v))).collect()),
        other => panic!("{other}: not a DynamoDB JSON type"),
    }
}

/// Every item of the harness's table, sorted by key.
async fn scan(h: &Harness) -> Vec<Value> {
    let (client, table) = h.table_handle().unwrap();
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page =
            client.scan().table_name(&table).consistent_read(true).set_exclusive_start_key(start).send().await.unwrap();
        items.extend(page.items().iter().map(item_json));
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            break;
        }
    }
    items.sort_by_key(|i| {
        (i["pk"]["S"].as_str().unwrap_or_default().to_owned(), i["sk"]["S"].as_str().unwrap_or_default().to_owned())
    });
    items
}

async fn load_items(h: &Harness, items: &[Value]) {
    let (client, table) = h.table_handle().unwrap();
    for item in items {
        let item: HashMap<_, _> = item.as_object().unwrap().iter().map(|(k, v)| (k.clone(), from_json(v))).collect();
        client.put_item().table_name(&table).set_item(Some(item)).send().await.unwrap();
    }
}

/// An item's kind: its key's prefixes (`OWNER#…`/`PROJECT#…` is `OWNER/PROJECT`).
fn item_kind(item: &Value) -> String {
    let prefix = |k: &str| {
        let s = item[k]["S"].as_str().unwrap_or_default();
        let mut parts = s.split('#');
        let first = parts.next().unwrap_or_default().to_owned();
        // `CLIENT#CHATS#…`, `CLIENT#DOC#…`, `CLIENT#FLOW#…` are kinds of their own.
        match (first.as_str(), parts.next()) {
            ("CLIENT", Some(second @ ("CHATS" | "DOC" | "FLOW"))) => format!("{first}#{second}"),
            // A delivery's sort key is its link's id.
            _ if k == "sk" && item["pk"]["S"].as_str().is_some_and(|pk| pk.starts_with("DELIVERY#")) => "LINK".into(),
            _ => first,
        }
    };
    format!("{}/{}", prefix("pk"), prefix("sk"))
}

// ---- SQLite as SQL ---------------------------------------------------------------------------

fn sql_literal(v: rusqlite::types::ValueRef<'_>) -> String {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => format!("{f:?}"),
        ValueRef::Text(t) => format!("'{}'", String::from_utf8_lossy(t).replace('\'', "''")),
        ValueRef::Blob(b) => format!("X'{}'", b.iter().map(|x| format!("{x:02X}")).collect::<String>()),
    }
}

/// The file at `path` as SQL: its `user_version`, its schema, then every row (in rowid order).
fn dump(path: &Path) -> (String, BTreeMap<String, usize>) {
    let conn = foundry_tests::raw_sqlite(path).unwrap();
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    let mut out = format!("PRAGMA user_version = {version};\n");
    let mut stmt = conn
        .prepare("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type = 'table' DESC, rowid")
        .unwrap();
    let schema: Vec<(String, String, String)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect();
    let mut rows = BTreeMap::new();
    for (_, _, sql) in &schema {
        out += &format!("{sql};\n");
    }
    for (kind, name, _) in schema.iter().filter(|(k, _, _)| k == "table") {
        let _ = kind;
        let mut stmt = conn.prepare(&format!("SELECT * FROM \"{name}\"")).unwrap();
        let n = stmt.column_count();
        let mut q = stmt.query([]).unwrap();
        let mut count = 0;
        while let Some(row) = q.next().unwrap() {
            let values: Vec<String> = (0..n).map(|i| sql_literal(row.get_ref(i).unwrap())).collect();
            out += &format!("INSERT INTO \"{name}\" VALUES ({});\n", values.join(", "));
            count += 1;
        }
        rows.insert(name.clone(), count);
    }
    (out, rows)
}

/// A store of this build on the SQLite file made from `sql` (its migrations run at open).
fn embedded_from(sql: &str, at: Timestamp) -> Harness {
    let path = std::env::temp_dir().join(format!("foundry-release-{}.sqlite3", uuid::Uuid::new_v4()));
    rusqlite::Connection::open(&path).unwrap().execute_batch(sql).unwrap();
    let clock = Arc::new(ManualClock::new(at));
    let store = store_sqlite::SqliteStore::open(&path, clock.clone(), test_policy()).unwrap();
    Harness { store: Arc::new(store.clone()), clock, policy: test_policy(), backend: Backend::Embedded { store, path } }
}

/// Where a freeze writes: this release's folder, or `FOUNDRY_FREEZE_DIR` (to try a freeze).
fn release_dir() -> PathBuf {
    std::env::var_os("FOUNDRY_FREEZE_DIR")
        .map_or_else(|| root().join("tests/fixtures/releases").join(env!("CARGO_PKG_VERSION")), PathBuf::from)
}

/// Freezes what this release's stores write (run by `infra/freeze-release.sh` when a release
/// is cut): refuses to overwrite frozen files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by infra/freeze-release.sh when a release is cut"]
async fn freeze_this_releases_stored_data() {
    let dir = release_dir();
    for f in ["store_scenario.json", "sqlite.sql", "dynamodb_items.json"] {
        assert!(!dir.join(f).exists(), "{} is frozen: a release's fixtures are never edited", dir.join(f).display());
    }
    let Some(dynamo) = Harness::dynamo(test_policy()).await else {
        panic!("freezing needs DynamoDB: AWS_ENDPOINT_URL (infra/freeze-release.sh starts the emulator)");
    };
    let embedded = Harness::embedded(test_policy());
    let on_embedded = write_scenario(&embedded).await;
    let on_dynamo = write_scenario(&dynamo).await;
    let Backend::Embedded { path, .. } = &embedded.backend else { unreachable!() };
    let (sql, rows) = dump(path);
    let empty: Vec<_> = rows.iter().filter(|(_, n)| **n == 0).map(|(t, _)| t.clone()).collect();
    let items = scan(&dynamo).await;
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for i in &items {
        *kinds.entry(item_kind(i)).or_default() += 1;
    }
    assert!(empty.is_empty(), "the scenario writes no row into {empty:?}: every kind must be frozen");
    println!("SQLite rows per table: {rows:?}\nempty tables: {empty:?}\nDynamoDB items per kind: {kinds:?}");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("sqlite.sql"), sql).unwrap();
    std::fs::write(
        dir.join("dynamodb_items.json"),
        serde_json::to_string_pretty(&json!({"kinds": kinds, "items": items})).unwrap() + "\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("store_scenario.json"),
        serde_json::to_string_pretty(&json!({"embedded": on_embedded, "dynamodb": on_dynamo, "sqlite_rows": rows}))
            .unwrap()
            + "\n",
    )
    .unwrap();
    println!("wrote {}", dir.display());
}

struct Frozen {
    version: String,
    sql: String,
    items: Vec<Value>,
    embedded: Scenario,
    dynamodb: Scenario,
}

fn read_frozen(version: String, dir: &Path) -> Frozen {
    let read =
        |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{}: {e}", dir.join(f).display()));
    let scenario: Value = serde_json::from_str(&read("store_scenario.json")).unwrap();
    let items: Value = serde_json::from_str(&read("dynamodb_items.json")).unwrap();
    Frozen {
        version,
        sql: read("sqlite.sql"),
        items: items["items"].as_array().unwrap().clone(),
        embedded: serde_json::from_value(scenario["embedded"].clone()).unwrap(),
        dynamodb: serde_json::from_value(scenario["dynamodb"].clone()).unwrap(),
    }
}

/// The supported frozen releases that froze their stores' data.
fn releases_with_data() -> Vec<Frozen> {
    crate::releases::supported_dirs()
        .into_iter()
        .filter(|(_, d)| d.join("store_scenario.json").is_file())
        .map(|(v, d)| read_frozen(v, &d))
        .collect()
}

fn just_after(s: &Scenario) -> Timestamp {
    Timestamp::from_millis(s.frozen_at_ms).plus(Duration::from_secs(1))
}

/// Loads the frozen DynamoDB items into a fresh table of this build: `None` without DynamoDB.
async fn dynamo_from(items: &[Value], at: Timestamp) -> Option<Harness> {
    let h = Harness::dynamo(test_policy()).await?;
    h.clock.set(at);
    load_items(&h, items).await;
    Some(h)
}

/// Each supported release's stored data, on both stores, is read and changed by this build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supported_releases_data_is_read_and_changed_by_this_build() {
    let releases = releases_with_data();
    assert!(!releases.is_empty(), "no supported release froze its stores' data (store_scenario.json)");
    for f in releases {
        let h = embedded_from(&f.sql, just_after(&f.embedded));
        assert_eq!(run_the_paths(&h, &f.embedded).await, Vec::<String>::new(), "release {}'s SQLite data", f.version);
        if let Some(h) = dynamo_from(&f.items, just_after(&f.dynamodb)).await {
            assert_eq!(
                run_the_paths(&h, &f.dynamodb).await,
                Vec::<String>::new(),
                "release {}'s DynamoDB items",
                f.version
            );
        }
    }
}

/// `sql` as a release that named the runs' `status` column `state` would have written it (the
/// table, and the index on it).
fn rename_runs_status(sql: &str) -> String {
    let Some(start) = sql.find("CREATE TABLE runs (") else { return sql.to_owned() };
    let end = start + sql[start..].find(");").unwrap_or(0);
    let table = sql[start..end].replacen(" status TEXT", " state TEXT", 1);
    (sql[..start].to_owned() + &table + &sql[end..]).replace(
        "ON runs(project_id, expires_at, command_id) WHERE status",
        "ON runs(project_id, expires_at, command_id) WHERE state",
    )
}

/// A renamed attribute or column is caught: the run's status under another name, on each store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_attribute_or_column_is_caught() {
    let f = releases_with_data().pop().expect("a frozen store_scenario.json");
    // SQLite: the runs table's `status` column renamed (as a release that renamed it would
    // have written the file).
    let renamed = rename_runs_status(&f.sql);
    assert_ne!(renamed, f.sql, "release {}: no runs `status` column to rename", f.version);
    let h = embedded_from(&renamed, just_after(&f.embedded));
    let wrong = run_the_paths(&h, &f.embedded).await;
    assert!(!wrong.is_empty(), "a renamed column went unnoticed");
    println!("SQLite, renamed column: {wrong:?}");
    // DynamoDB: every run item's `status` attribute renamed.
    let items: Vec<Value> = f
        .items
        .iter()
        .cloned()
        .map(|mut i| {
            if item_kind(&i) == "RUN/RUN"
                && let Some(o) = i.as_object_mut()
                && let Some(s) = o.remove("status")
            {
                o.insert("state".into(), s);
            }
            i
        })
        .collect();
    assert_ne!(items, f.items, "release {}: no run item with a status", f.version);
    if let Some(h) = dynamo_from(&items, just_after(&f.dynamodb)).await {
        let wrong = run_the_paths(&h, &f.dynamodb).await;
        assert!(!wrong.is_empty(), "a renamed attribute went unnoticed");
        println!("DynamoDB, renamed attribute: {wrong:?}");
    }
}

/// What a reader finds in each kind of item: per kind, how many items, and per attribute its
/// DynamoDB type and in how many of them it is.
type Shapes = BTreeMap<String, (usize, BTreeMap<String, (String, usize)>)>;

fn shapes(items: &[Value]) -> Shapes {
    let mut all = Shapes::new();
    for i in items {
        let (count, attrs) = all.entry(item_kind(i)).or_default();
        *count += 1;
        for (name, v) in i.as_object().unwrap() {
            let tag = v.as_object().and_then(|o| o.keys().next()).cloned().unwrap_or_default();
            attrs.entry(name.clone()).or_insert((tag, 0)).1 += 1;
        }
    }
    all
}

/// Where items this build writes would break a reader of the release that wrote `frozen`: a
/// kind it wrote that this build no longer writes, an attribute every item of a kind had that
/// some item of that kind now lacks, an attribute whose type changed. New kinds and new
/// attributes are fine: the older reader ignores what it does not know (its codec reads by
/// name; its serde types take unknown fields).
fn breaks_for_an_older_reader(frozen: &[Value], now: &[Value]) -> Vec<String> {
    let (was, is) = (shapes(frozen), shapes(now));
    let mut found = Vec::new();
    for (kind, (count, attrs)) in &was {
        let Some((now_count, now_attrs)) = is.get(kind) else {
            found.push(format!("{kind}: this build writes no such item, which the older release reads"));
            continue;
        };
        for (name, (tag, seen)) in attrs {
            match now_attrs.get(name) {
                Some((now_tag, _)) if now_tag != tag => {
                    found.push(format!("{kind}.{name}: its type changed from {tag} to {now_tag}"));
                }
                Some((_, now_seen)) if seen == count && now_seen < now_count => {
                    found.push(format!("{kind}.{name}: in every item the older release wrote, missing from some now"));
                }
                None if seen == count => {
                    found.push(format!("{kind}.{name}: in every item the older release wrote, in none now"));
                }
                _ => {}
            }
        }
    }
    found
}

/// Data this build writes does not break a supported older release's reader, on DynamoDB
/// (the stack rolled back over the table this build wrote, docs/operations.md "Rolling back a
/// release"): the same owner's life played by this build keeps every kind of item the release
/// wrote, every attribute each of its kinds always had, with its type. Shown catching a
/// renamed attribute, a kind no longer written and a changed type. (An older local server
/// refuses a newer SQLite file by design, naming both schema versions:
/// `store_sqlite::schema::tests::a_database_from_a_newer_build_is_refused_with_a_clear_message_and_left_alone`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_builds_items_keep_what_a_supported_releases_reader_reads() {
    let releases = releases_with_data();
    assert!(!releases.is_empty(), "no supported release froze its stores' data");
    let Some(h) = Harness::dynamo(test_policy()).await else { return };
    write_scenario(&h).await;
    let now = scan(&h).await;
    for f in &releases {
        assert_eq!(breaks_for_an_older_reader(&f.items, &now), Vec::<String>::new(), "for release {}", f.version);
    }
    let f = releases.last().unwrap();
    let edited = |edit: &dyn Fn(&str, &mut serde_json::Map<String, Value>)| -> Vec<String> {
        let items: Vec<Value> = now
            .iter()
            .cloned()
            .map(|mut i| {
                let kind = item_kind(&i);
                edit(&kind, i.as_object_mut().unwrap());
                i
            })
            .filter(|i| !i.as_object().unwrap().is_empty())
            .collect();
        breaks_for_an_older_reader(&f.items, &items)
    };
    let renamed = edited(&|kind, o| {
        if kind == "RUN/RUN"
            && let Some(s) = o.remove("status")
        {
            o.insert("state".into(), s);
        }
    });
    assert!(
        renamed.contains(&"RUN/RUN.status: in every item the older release wrote, in none now".into()),
        "{renamed:?}"
    );
    let dropped = edited(&|kind, o| {
        if kind == "CLIENT/USED" {
            o.clear();
        }
    });
    assert!(dropped.iter().any(|l| l.starts_with("CLIENT/USED: this build writes no such item")), "{dropped:?}");
    let retyped = edited(&|kind, o| {
        if kind == "RUN/RUN"
            && let Some(v) = o.get_mut("queued_at")
        {
            *v = json!({"S": "2026-12-06"});
        }
    });
    assert!(retyped.contains(&"RUN/RUN.queued_at: its type changed from N to S".into()), "{retyped:?}");
}
