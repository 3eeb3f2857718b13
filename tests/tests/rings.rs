//! The cloud doorbell's rings at the scale of a busy owner (issue 59): the stream filter lets
//! through exactly the records that ring (heartbeats, progress, syncs and starts invoke
//! nothing), and a ring goes only to the desktops it is for, posted concurrently — on the real
//! DynamoDB store (the emulator) and its real stream records.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use domain::clock::Clock as _;
use domain::ids::{AgentId, GraphSessionId, OwnerId};
use domain::runs::{Completion, QueueOutcome, QueueRun};
use domain::store::DoorbellConnections as _;
use foundry_tests::{Harness, passes_filters, session_meta, test_policy};
use lambda::doorbell::{SocketError, Sockets, ring_records};
use serde_json::{Value, json};

fn session(n: u8) -> GraphSessionId {
    GraphSessionId::parse("s", &format!("gs_{}", format!("{n:02x}").repeat(16))).unwrap()
}

/// The records of the table's stream so far.
async fn records_of(h: &Harness) -> Vec<Value> {
    let foundry_tests::Backend::Dynamo { store, .. } = &h.backend else { unreachable!() };
    let (client, _) = foundry_tests::dynamo_client_with_log().await.unwrap();
    let table = client.describe_table().table_name(store.table()).send().await.unwrap();
    let arn = table.table().and_then(|t| t.latest_stream_arn()).unwrap().to_owned();
    foundry_tests::stream_records(&arn).await
}

/// Whether the record rings anyone: the ring function's own decision over its images.
fn rings(record: &Value) -> bool {
    let image = |k: &str| {
        record["dynamodb"]
            .get(k)
            .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
            .map(|v| store_dynamo::item_from_stream_json(v).unwrap())
    };
    let (old, new) = (image("OldImage"), image("NewImage"));
    store_dynamo::ring_of_change(old.as_ref(), new.as_ref()).unwrap().is_some()
        || store_dynamo::revoked_device_of_change(old.as_ref(), new.as_ref()).unwrap().is_some()
}

fn ring_filters() -> Vec<Value> {
    foundry_tests::cloud::Template::load().stream_filters("RingDoorbellFunction")
}

/// The filter the ring function had before issue 59: every change of a run, every change of a
/// device.
fn broad_filters() -> Vec<Value> {
    [
        r#"{"dynamodb": {"Keys": {"sk": {"S": ["RUN"]}}}}"#,
        r#"{"eventName": ["MODIFY"], "dynamodb": {"Keys": {"sk": {"S": [{"prefix": "DEVICE#"}]}}}}"#,
    ]
    .iter()
    .map(|p| serde_json::from_str(p).unwrap())
    .collect()
}

/// A run of `session` queued by `agent` for `owner`, under `key`.
fn queue_req(owner: &OwnerId, agent: &AgentId, session: &GraphSessionId, key: &str) -> QueueRun {
    foundry_tests::queue_request(owner, agent, session, key, json!({}))
}

/// A project of `owner`, switched on for connected agents.
async fn enabled_project(h: &Harness, owner: &OwnerId) -> domain::projects::Project {
    let project = h.store.create_project(owner, "P").await.unwrap();
    h.store.set_project_enabled(owner, project.project_id, true).await.unwrap();
    project
}

/// A busy desktop's life on the store: queued, started, heartbeats with progress, syncs,
/// cancelled, completed; a second desktop paused and resumed, then revoked. The template's
/// filters let through exactly the records after which the ring function rings someone; the
/// filter the template had before (every change of a run or a device) lets through many that
/// ring nobody, which is what made every heartbeat and sync invoke the function.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ring_filters_pass_exactly_the_records_that_ring() {
    let Some(h) = Harness::dynamo(test_policy()).await else { return };
    let owner = OwnerId::new("ring-owner").unwrap();
    let project = enabled_project(&h, &owner).await;
    let a = h.store.create_device(&owner, "A", "hash-a").await.unwrap();
    let b = h.store.create_device(&owner, "B", "hash-b").await.unwrap();
    let gs = session(1);
    h.store.sync_sessions(&owner, project.project_id, a.device_id, &[session_meta(&gs)]).await.unwrap();
    let agent = AgentId::new("ring-client", "ring-owner").unwrap();
    let req = queue_req(&owner, &agent, &gs, "ring-run-0001");
    let QueueOutcome::Queued(run) = h.store.queue_run(&req).await.unwrap() else { panic!() };
    let id = run.command_id;
    h.store.start_run(&owner, id, "e1", a.device_id).await.unwrap();
    for n in 0..3 {
        let progress: domain::relay::ControlRequest =
            serde_json::from_value(json!({"execution_id": "e1", "progress": {"message": format!("step {n}")}}))
                .unwrap();
        h.clock.advance(Duration::from_secs(10));
        h.store.control_run(&owner, id, Some(&progress)).await.unwrap();
        h.clock.advance(Duration::from_secs(61));
        h.store.control_run(&owner, id, None).await.unwrap();
        h.store.record_device_seen(&a, None).await.unwrap();
    }
    h.store.cancel_run(&agent, id).await.unwrap();
    h.clock.advance(Duration::from_secs(5));
    h.store.control_run(&owner, id, None).await.unwrap();
    let done: Completion = serde_json::from_value(json!({"execution_id": "e1", "status": "cancelled"})).unwrap();
    h.store.complete_run(&owner, id, &done).await.unwrap();
    let pause = domain::devices::Pause::new(h.clock.now(), None, None).unwrap();
    h.store.set_device_pause(&owner, b.device_id, Some(&pause)).await.unwrap();
    h.store.set_device_pause(&owner, b.device_id, None).await.unwrap();
    h.store.revoke_device(&owner, b.device_id).await.unwrap();

    let records = records_of(&h).await;
    let filters = ring_filters();
    let ringing: Vec<&Value> = records.iter().filter(|r| rings(r)).collect();
    // The queue, the cancel, the resume and the revoke.
    assert_eq!(ringing.len(), 4, "records that ring: {ringing:#?}");
    for r in &records {
        assert_eq!(
            passes_filters(&filters, r),
            rings(r),
            "the ring filters {} a record that {}: {r:#}",
            if rings(r) { "drop" } else { "pass" },
            if rings(r) { "rings" } else { "rings nobody" }
        );
    }
    let broad = broad_filters();
    let wasted = records.iter().filter(|r| passes_filters(&broad, r) && !rings(r)).count();
    assert!(wasted >= 8, "the broad filter passed only {wasted} records that ring nobody");
}

/// Sockets that record each post and hold every post until `expected` are in flight at once:
/// one at a time, the first post never returns in time and the ring counts it failed.
struct Gate {
    posted: Mutex<Vec<String>>,
    barrier: tokio::sync::Barrier,
}

#[async_trait::async_trait]
impl Sockets for Gate {
    async fn post(&self, connection_id: &str, _text: &str) -> Result<(), SocketError> {
        self.posted.lock().unwrap().push(connection_id.to_owned());
        match tokio::time::timeout(Duration::from_secs(5), self.barrier.wait()).await {
            Ok(_) => Ok(()),
            Err(_) => Err(SocketError::Failed("posted one at a time".into())),
        }
    }

    async fn close(&self, _connection_id: &str) -> Result<(), SocketError> {
        Ok(())
    }
}

/// An owner with three desktops: two share the queued run's session (one with two sockets),
/// one shares another. The queue's ring reaches the three sockets of the two sharing desktops,
/// all three in flight at once, and not the third desktop; the cancel's ring reaches only the
/// desktop running the run. (Before: every socket of the owner, one post after another.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_reaches_only_the_desktops_it_is_for_posted_at_once() {
    let Some(h) = Harness::dynamo(test_policy()).await else { return };
    let foundry_tests::Backend::Dynamo { store, .. } = &h.backend else { unreachable!() };
    let owner = OwnerId::new("fanout-owner").unwrap();
    let project = enabled_project(&h, &owner).await;
    let (gs, other) = (session(1), session(2));
    let mut devices = Vec::new();
    for (name, shares) in [("A", &gs), ("B", &gs), ("C", &other)] {
        let d = h.store.create_device(&owner, name, &format!("hash-{name}")).await.unwrap();
        h.store.sync_sessions(&owner, project.project_id, d.device_id, &[session_meta(shares)]).await.unwrap();
        devices.push(d);
    }
    for (device, socket) in [(0, "a1"), (0, "a2"), (1, "b1"), (2, "c1")] {
        store.open_connection(&owner, devices[device].device_id, socket).await.unwrap();
    }
    let agent = AgentId::new("fanout-client", "fanout-owner").unwrap();
    let req = queue_req(&owner, &agent, &gs, "fanout-run-0001");
    let QueueOutcome::Queued(run) = h.store.queue_run(&req).await.unwrap() else { panic!() };
    let filters = ring_filters();
    let event = |records: Vec<Value>| -> aws_lambda_events::event::dynamodb::Event {
        serde_json::from_value(json!({"Records": records})).unwrap()
    };
    let queued: Vec<Value> = records_of(&h).await.into_iter().filter(|r| passes_filters(&filters, r)).collect();
    assert_eq!(queued.len(), 1, "{queued:#?}");
    let gate = Gate { posted: Mutex::new(Vec::new()), barrier: tokio::sync::Barrier::new(3) };
    let report = ring_records(store, &gate, &event(queued.clone()), h.clock.now()).await;
    let posted: BTreeSet<String> = gate.posted.lock().unwrap().iter().cloned().collect();
    assert_eq!(posted, ["a1", "a2", "b1"].map(String::from).into(), "the queue's ring");
    assert_eq!(report.posted, 3, "the three posts were not in flight at once: {report:?}");

    // The cancel of the run desktop B runs: B's socket alone.
    h.store.start_run(&owner, run.command_id, "e1", devices[1].device_id).await.unwrap();
    h.store.cancel_run(&agent, run.command_id).await.unwrap();
    let cancel: Vec<Value> =
        records_of(&h).await.into_iter().filter(|r| passes_filters(&filters, r)).skip(queued.len()).collect();
    let gate = Gate { posted: Mutex::new(Vec::new()), barrier: tokio::sync::Barrier::new(1) };
    let report = ring_records(store, &gate, &event(cancel), h.clock.now()).await;
    assert_eq!((gate.posted.lock().unwrap().clone(), report.posted), (vec!["b1".to_owned()], 1), "the cancel's ring");
}

/// Counts posts, as fast as they come.
#[derive(Default)]
struct Count(std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl Sockets for Count {
    async fn post(&self, _connection_id: &str, _text: &str) -> Result<(), SocketError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    async fn close(&self, _connection_id: &str) -> Result<(), SocketError> {
        Ok(())
    }
}

/// The load scenario of issue 59 for the doorbell, on the emulator: one owner with 500
/// desktops on the doorbell, 50 of them sharing the session that 10 runs are queued for (the
/// others share another). What the rings and the syncs they cause cost is pinned in
/// `docs/scale-figures.json` (docs/scale.md quotes it): the rings posted (the 50 sharers per run,
/// where every one of the 500 sockets was rung before), the stream records that invoke the ring
/// function (the 10 queued runs; the old filter also passed every rung desktop's last-seen
/// write), and the capacity units each partition key took for the whole wave as the emulator's
/// meter counts them — the owner's partition, against a partition's 1,000 write and 3,000 read
/// units a second, if the wave came within one second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owner_with_500_desktops_rings_only_the_desktops_that_share_the_run() {
    const DESKTOPS: usize = 500;
    const SHARERS: usize = 50;
    const RUNS: usize = 10;
    let Some(h) = Harness::dynamo(test_policy()).await else { return };
    let foundry_tests::Backend::Dynamo { store, .. } = &h.backend else { unreachable!() };
    let owner = OwnerId::new("busy-owner").unwrap();
    let project = enabled_project(&h, &owner).await;
    let (gs, other) = (session(1), session(2));
    let mut sharers = Vec::new();
    for i in 0..DESKTOPS {
        let d = h.store.create_device(&owner, &format!("desk-{i:03}"), &format!("hash-{i:03}")).await.unwrap();
        let shares = if i < SHARERS { &gs } else { &other };
        h.store.sync_sessions(&owner, project.project_id, d.device_id, &[session_meta(shares)]).await.unwrap();
        store.open_connection(&owner, d.device_id, &format!("socket-{i:03}")).await.unwrap();
        if i < SHARERS {
            sharers.push(d);
        }
    }
    let seen = records_of(&h).await.len();
    let meter = foundry_tests::capacity_report;
    let metered = meter(true).await.is_some();
    // The wave: the runs queued, their rings, and each rung desktop's sync (a minute on, so
    // the project's last sync moves once, and its desktop's last-seen time).
    let agent = AgentId::new("busy-client", "busy-owner").unwrap();
    for n in 0..RUNS {
        let req = queue_req(&owner, &agent, &gs, &format!("busy-run-{n:04}"));
        assert!(matches!(h.store.queue_run(&req).await.unwrap(), QueueOutcome::Queued(_)));
    }
    // What the queueing cost (read and reset), apart from the syncs' cost (read at the end).
    let queueing = if metered { meter(true).await } else { None };
    let queued: Vec<Value> = records_of(&h).await.into_iter().skip(seen).collect();
    let filters = ring_filters();
    let rung: Vec<Value> = queued.iter().filter(|r| passes_filters(&filters, r)).cloned().collect();
    let posts = Count::default();
    let event: aws_lambda_events::event::dynamodb::Event = serde_json::from_value(json!({"Records": rung})).unwrap();
    ring_records(store, &posts, &event, h.clock.now()).await;
    h.clock.advance(domain::projects::SYNC_STAMP_EVERY);
    for d in &sharers {
        h.store.record_device_seen(d, None).await.unwrap();
        h.store.sync_sessions(&owner, project.project_id, d.device_id, &[session_meta(&gs)]).await.unwrap();
    }
    let wave: Vec<Value> = records_of(&h).await.into_iter().skip(seen).collect();
    let broad = broad_filters();
    let posted = posts.0.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(posted, RUNS * SHARERS, "rings posted");
    let invoking = wave.iter().filter(|r| passes_filters(&filters, r)).count();
    assert_eq!(invoking, RUNS, "records that invoke the ring function");
    let mut figures = json!({
        "desktops": DESKTOPS,
        "sharing_the_session": SHARERS,
        "runs_queued": RUNS,
        "rings_posted": posted,
        "rings_posted_before": RUNS * DESKTOPS,
        "ring_invocations_records": invoking,
        "ring_invocations_records_before": wave.iter().filter(|r| passes_filters(&broad, r)).count(),
        "stream_records": wave.len(),
    });
    if let Some(queueing) = queueing {
        let syncing = meter(false).await.unwrap();
        let owner_key = format!("{}/OWNER#{owner}", store.table());
        let units = |report: &Value, k: &str| report["per_key"][owner_key.as_str()][k].as_f64().unwrap_or(0.0);
        figures["queue_owner_partition_write_units"] = json!(units(&queueing, "write"));
        figures["queue_owner_partition_read_units"] = json!(units(&queueing, "read"));
        figures["syncs_owner_partition_write_units"] = json!(units(&syncing, "write"));
        figures["syncs_owner_partition_read_units"] = json!(units(&syncing, "read"));
    }
    eprintln!("{}", serde_json::to_string_pretty(&figures).unwrap());
    if metered {
        foundry_tests::pinned("docs/scale-figures.json", &(serde_json::to_string_pretty(&figures).unwrap() + "\n"));
    }
    // docs/scale.md quotes these figures, row for row.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scale.md")).unwrap();
    for row in scale_rows(&figures) {
        assert!(doc.contains(&row), "docs/scale.md does not say {row:?} (docs/scale-figures.json)");
    }
    for sentence in scale_prose(&figures) {
        assert!(foundry_tests::says(&doc, &sentence), "docs/scale.md does not say {sentence:?}");
    }
}

/// The prose figures docs/scale.md derives from the queued runs' units: per run, the item's
/// size (a transactional check bills the whole item twice) and the runs a partition takes.
fn scale_prose(f: &Value) -> Vec<String> {
    let (Some(write), Some(read), Some(runs)) = (
        f["queue_owner_partition_write_units"].as_f64(),
        f["queue_owner_partition_read_units"].as_f64(),
        f["runs_queued"].as_f64(),
    ) else {
        return Vec::new();
    };
    let per_run = (write / runs).round();
    let words = ["none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"];
    let per_second = words.get((1000.0 / per_run).round() as usize).copied().unwrap_or("many");
    vec![
        format!("(about {} KB with these {} desktops)", per_run / 2.0, f["desktops"]),
        format!("so each run queued costs {per_run} write units on the owner's partition"),
        format!("about {per_second} runs a second for such an owner"),
        format!("(its consistent read: {} read units a run)", (read / runs).round()),
    ]
}

/// The rows of docs/scale.md's table for the doorbell scenario, from its figures.
fn scale_rows(f: &Value) -> Vec<String> {
    let n = |k: &str| foundry_tests::grouped(f[k].as_f64().unwrap_or(0.0).round() as u64);
    let mut rows = vec![
        format!(
            "| rings posted (one per desktop rung, each a sync) | {} | {} |",
            n("rings_posted_before"),
            n("rings_posted")
        ),
        format!(
            "| stream records that invoke `ring_doorbell` | {} | {} |",
            n("ring_invocations_records_before"),
            n("ring_invocations_records")
        ),
    ];
    if f.get("queue_owner_partition_write_units").is_some() {
        rows.push(format!(
            "| the 10 queued runs, on the owner's partition | {} write, {} read units |",
            n("queue_owner_partition_write_units"),
            n("queue_owner_partition_read_units")
        ));
        rows.push(format!(
            "| the 50 rung desktops' syncs, on the owner's partition | {} write, {} read units |",
            n("syncs_owner_partition_write_units"),
            n("syncs_owner_partition_read_units")
        ));
    }
    rows
}
