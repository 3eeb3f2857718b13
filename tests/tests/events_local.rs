//! Events on the embedded store: written in the same transaction as each change (the outbox),
//! delivered by the local notifier as signed webhooks to a receiver on 127.0.0.1 that verifies
//! every signature. The notifier is driven pass by pass on a manual clock (no sleeps), except in
//! the end-to-end test through the running local server.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use domain::clock::{Clock, ManualClock, SharedClock, Timestamp};
use domain::events::{Event, derive_run, derive_task};
use domain::ids::{AgentId, ChatLinkId, GraphSessionId, IdempotencyKey, OwnerId};
use domain::limits::Policy;
use domain::projects::{ChatLink, Subscription, new_webhook_secret};
use domain::runs::{Completion, FinalStatus, QueueOutcome, QueueRun};
use domain::store::{
    AssignTasks, CancelRuns, ClaimTasks, EventOutbox, ManageLinks, ManageProjects, QueueRuns, ReadRuns, ReadTasks,
    RelayRuns, SyncSessions,
};
use domain::tasks::{AssignOutcome, AssignTask, ClaimOutcome, SubmitOutcome, SubmitStatus, SubmitTask};
use events::webhook_url::UrlPolicy;
use events::{MAX_ATTEMPTS, Notifier, Resolve, SystemResolver, deliver_due};
use foundry_tests::receiver::Receiver;
use foundry_tests::wait_until;
use store_sqlite::SqliteStore;

struct World {
    store: Arc<SqliteStore>,
    clock: Arc<ManualClock>,
    owner: OwnerId,
    path: std::path::PathBuf,
}

impl Drop for World {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
        }
    }
}

fn world() -> World {
    let clock = Arc::new(ManualClock::starting_now());
    let path = std::env::temp_dir().join(format!("fc-events-{}.sqlite3", uuid::Uuid::new_v4()));
    let store = Arc::new(SqliteStore::open(&path, clock.clone(), Policy::default()).unwrap());
    World { store, clock, owner: OwnerId::new("alice").unwrap(), path }
}

impl World {
    fn notifier(&self, urls: UrlPolicy, resolver: Arc<dyn Resolve>) -> Notifier<SqliteStore> {
        let clock: SharedClock = self.clock.clone();
        Notifier::new(self.store.clone(), clock, urls, resolver)
    }

    async fn link(&self, url: Option<&str>) -> (ChatLink, String) {
        let p = self.store.create_project(&self.owner, "P").await.unwrap();
        self.store.set_project_enabled(&self.owner, p.project_id, true).await.unwrap();
        let l = self.store.create_link(&self.owner, p.project_id, "chat").await.unwrap().unwrap();
        let secret = new_webhook_secret().unwrap();
        if let Some(url) = url {
            let sub = Subscription { url: url.into(), secret: secret.clone(), created_at: self.clock.now() };
            self.store.set_subscription(&self.owner, l.link_id, Some(&sub)).await.unwrap();
        }
        (l, secret)
    }

    async fn assign(&self, link: ChatLinkId, objective: &str) -> domain::ids::TaskId {
        let req = AssignTask {
            owner: self.owner.clone(),
            link_id: link,
            objective: objective.into(),
            idempotency_key: IdempotencyKey::parse(&uuid::Uuid::new_v4().to_string()).unwrap(),
        };
        match self.store.assign_task(&req).await.unwrap() {
            AssignOutcome::Assigned(t) => t.task_id,
            other => panic!("{other:?}"),
        }
    }

    /// Every pending event, in order (a pass of nothing but reading).
    async fn outbox(&self) -> Vec<Event> {
        self.store.due_events(1_000).await.unwrap().into_iter().map(|e| e.event).collect()
    }
}

fn kinds(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

#[tokio::test]
async fn every_change_leaves_exactly_its_events_in_the_outbox_and_reads_leave_none() {
    let w = world();
    let (link, _) = w.link(None).await;
    let t = w.assign(link.link_id, "Summarize").await;
    let ClaimOutcome::Claimed { claim_id, .. } = w.store.claim_task(&w.owner, link.link_id, t).await.unwrap() else {
        panic!()
    };
    // A replayed claim, reads and a failed submit change nothing and emit nothing.
    let again = w.store.claim_task(&w.owner, link.link_id, t).await.unwrap();
    assert!(matches!(again, ClaimOutcome::Replayed { claim_id: c, .. } if c == claim_id), "{again:?}");
    w.store.get_task(&w.owner, link.link_id, t).await.unwrap();
    w.store.list_open_tasks(&w.owner, link.link_id, 50).await.unwrap();
    let wrong = SubmitTask {
        owner: w.owner.clone(),
        link_id: link.link_id,
        task_id: t,
        claim_id: domain::ids::ClaimId::generate(),
        status: SubmitStatus::Completed,
        result: "x".into(),
    };
    let refused = w.store.submit_task(&wrong).await.unwrap();
    assert!(matches!(refused, SubmitOutcome::Rejected(_)), "a claim id that does not hold the task: {refused:?}");
    let submit = SubmitTask { claim_id, ..wrong };
    assert_eq!(w.store.submit_task(&submit).await.unwrap(), SubmitOutcome::Accepted);
    // The identical retry: a replay, no event.
    assert_eq!(w.store.submit_task(&submit).await.unwrap(), SubmitOutcome::Replayed);
    let t2 = w.assign(link.link_id, "Second").await;
    w.store.cancel_task(&w.owner, link.link_id, t2).await.unwrap();
    let t3 = w.assign(link.link_id, "Third").await;
    w.store.delete_link(&w.owner, link.link_id).await.unwrap();

    // Runs: queue, start, heartbeat, complete; queue and cancel.
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "b".repeat(32))).unwrap();
    let meta = foundry_tests::session_meta(&gs);
    w.store.sync_sessions(&w.owner, link.project_id, foundry_tests::TEST_DEVICE, &[meta]).await.unwrap();
    let agent = AgentId::new("claude", "alice").unwrap();
    let queue = |key: &str| QueueRun {
        owner: w.owner.clone(),
        agent: agent.clone(),
        project_id: None,
        graph_session_id: gs.clone(),
        arguments: serde_json::json!({}),
        idempotency_key: IdempotencyKey::parse(key).unwrap(),
    };
    let QueueOutcome::Queued(run) = w.store.queue_run(&queue("events-run-1")).await.unwrap() else { panic!() };
    w.store.queue_run(&queue("events-run-1")).await.unwrap(); // replay
    w.store.start_run(&w.owner, run.command_id, "exec-1", uuid::Uuid::nil()).await.unwrap();
    w.store.control_run(&w.owner, run.command_id, None).await.unwrap();
    w.store.get_run(&agent, run.command_id).await.unwrap();
    let done = Completion {
        execution_id: "exec-1".into(),
        status: FinalStatus::Completed,
        result: Some("r".into()),
        result_truncated: false,
        error: None,
        total_tokens: None,
        reported_cost: None,
    };
    w.store.complete_run(&w.owner, run.command_id, &done).await.unwrap();
    w.store.complete_run(&w.owner, run.command_id, &done).await.unwrap(); // replay
    let QueueOutcome::Queued(run2) = w.store.queue_run(&queue("events-run-2")).await.unwrap() else { panic!() };
    w.store.cancel_run(&agent, run2.command_id).await.unwrap();

    let events = w.outbox().await;
    assert_eq!(
        kinds(&events),
        [
            "task.assigned",
            "task.claimed",
            "task.completed",
            "task.assigned",
            "task.cancelled",
            "task.assigned",
            "task.cancelled",
            "run.queued",
            "run.started",
            "run.completed",
            "run.queued",
            "run.cancelled",
        ],
    );
    // Ids are the domain's, for exactly these changes (the cloud's publisher derives the same).
    let final_task = |id| {
        let store = w.store.clone();
        let owner = w.owner.clone();
        async move {
            store
                .list_link_tasks(&owner, link.link_id, 50, None)
                .await
                .unwrap()
                .tasks
                .into_iter()
                .find(|x| x.task_id == id)
        }
    };
    let t3_now = final_task(t3).await.unwrap();
    let cancelled = events.iter().filter(|e| e.kind.as_str() == "task.cancelled").nth(1).unwrap();
    let old = domain::tasks::Task {
        status: domain::tasks::TaskStatus::Queued,
        finished_at: None,
        link_deleted: false,
        ..t3_now.clone()
    };
    assert_eq!(derive_task(Some(&old), Some(&t3_now))[0].id, cancelled.id);
    let assigned_run = &events[7];
    assert_eq!(derive_run(None, Some(&run))[0].id, assigned_run.id);
}

/// A resolver that sends every name to fixed addresses (as a DNS record would).
struct Fixed(HashMap<String, Vec<std::net::IpAddr>>);

#[async_trait::async_trait]
impl Resolve for Fixed {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(self.0.get(host).into_iter().flatten().map(|ip| SocketAddr::new(*ip, port)).collect())
    }
}

/// A backlog larger than one pass's batch goes out on one wake-up: the notifier's own writes
/// signal nothing, so a loop that waited for the next wake (or the once-a-second poll) after
/// each batch moved 100 events a second (the events benchmark measured 143 events/s where it
/// had measured 962). Here the poll is an hour and the loop is woken once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_past_one_batch_is_delivered_on_one_wake() {
    let w = world();
    let receiver = Receiver::start().await;
    let (link, secret) = w.link(Some(&receiver.url)).await;
    receiver.set_secret(&secret);
    let backlog = events::DUE_BATCH * 2 + 50;
    for i in 0..backlog {
        w.assign(link.link_id, &format!("task {i}")).await;
    }
    let wake = Arc::new(tokio::sync::Notify::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let notifier = w.notifier(UrlPolicy::Local, Arc::new(SystemResolver));
    let task = tokio::spawn(events::run_local(notifier, Arc::clone(&wake), Duration::from_secs(3600), async {
        let _ = stopped.await;
    }));
    wake.notify_one();
    wait_until("the whole backlog on one wake", Duration::from_secs(30), || {
        let r = receiver.clone();
        async move { (r.accepted().len() >= backlog).then_some(()) }
    })
    .await;
    assert_eq!(receiver.accepted().len(), backlog, "each once");
    let _ = stop.send(());
    task.await.unwrap();
}

#[tokio::test]
async fn a_receiver_down_at_first_gets_each_event_later_exactly_once() {
    let w = world();
    let receiver = Receiver::start().await;
    let (link, secret) = w.link(Some(&receiver.url)).await;
    receiver.set_secret(&secret);
    let notifier = w.notifier(UrlPolicy::Local, Arc::new(SystemResolver));
    receiver.fail_first(3);
    let t = w.assign(link.link_id, "Summarize").await;
    let ClaimOutcome::Claimed { .. } = w.store.claim_task(&w.owner, link.link_id, t).await.unwrap() else { panic!() };
    let ids: Vec<String> = w.outbox().await.into_iter().map(|e| e.id).collect();
    // Pass 1: the first event fails (1 of the 3 failures) and parks the subscription, so the
    // second fails at once without calling the receiver (events::Parked); nothing is due until
    // the backoff passes.
    assert_eq!(deliver_due(&notifier).await.unwrap(), 2);
    assert_eq!((receiver.hits(), receiver.accepted().len()), (1, 0));
    assert_eq!(deliver_due(&notifier).await.unwrap(), 0, "an event came back before its backoff");
    // The first event's retries try the receiver (two more failures), each after the backoff of
    // its failures so far (5 s, 10 s, 20 s: due at that moment and not a millisecond before),
    // then it gets through and the park ends: the second gets through in the same pass.
    for backoff in [5u64, 10, 20] {
        w.clock.advance(Duration::from_millis(backoff * 1_000 - 1));
        assert_eq!(deliver_due(&notifier).await.unwrap(), 0, "due before its {backoff} s backoff");
        w.clock.advance(Duration::from_millis(1));
        assert_eq!(deliver_due(&notifier).await.unwrap(), 2, "not due after its {backoff} s backoff");
    }
    let got = receiver.accepted();
    assert_eq!(kinds_of(&got), ["task.assigned", "task.claimed"], "{got:?}");
    assert!(got.iter().all(|r| r.signature_ok), "a signature did not verify");
    // Every attempt carried its event's own id, the failed ones included.
    let (first, second) = (ids[0].clone(), ids[1].clone());
    assert_eq!(receiver.ids(), [first.clone(), first.clone(), first.clone(), first, second], "webhook-ids");
    assert!(w.outbox().await.is_empty());
    assert_eq!(receiver.hits(), 5, "3 refused + 2 accepted");
    // The outcome the panel shows.
    let last = service_last_delivery(&w, link.link_id).await;
    assert!(last.ok && last.detail == "HTTP 204", "{last:?}");
}

fn kinds_of(r: &[foundry_tests::receiver::Received]) -> Vec<String> {
    let mut v: Vec<String> = r.iter().map(|x| x.kind.clone()).collect();
    v.sort();
    v
}

async fn service_last_delivery(w: &World, link: ChatLinkId) -> domain::events::DeliveryOutcome {
    use domain::store::RecordDeliveries;
    w.store.last_deliveries(&w.owner).await.unwrap().into_iter().find(|(l, _)| *l == link).unwrap().1
}

/// Issue 59: a dead receiver is parked. Of its subscription's five events, one tries the
/// receiver per backoff and the others fail at once (a batch no longer waits a delivery timeout
/// per event for a receiver known to be down), while another link's events are delivered; once
/// the receiver answers again, the park ends and every event gets through, each once.
#[tokio::test]
async fn a_dead_receivers_events_wait_behind_one_probe_and_all_arrive_once_it_answers() {
    let w = world();
    let (down, good) = (Receiver::start().await, Receiver::start().await);
    let (down_link, down_secret) = w.link(Some(&down.url)).await;
    let (good_link, good_secret) = w.link(Some(&good.url)).await;
    down.set_secret(&down_secret);
    good.set_secret(&good_secret);
    down.fail_first(usize::MAX);
    let notifier = w.notifier(UrlPolicy::Local, Arc::new(SystemResolver));
    for i in 0..5 {
        w.assign(down_link.link_id, &format!("to the dead receiver {i}")).await;
    }
    w.assign(good_link.link_id, "to the good one").await;
    deliver_due(&notifier).await.unwrap();
    assert_eq!(down.hits(), 1, "a receiver that had just failed was tried again at once");
    assert_eq!(good.accepted().len(), 1, "another link's event waited");
    // Three backoffs later: one try each time, by the event that failed first.
    for _ in 0..3 {
        w.clock.advance(Duration::from_secs(1_000));
        deliver_due(&notifier).await.unwrap();
    }
    assert_eq!(down.hits(), 4, "one try per backoff while parked");
    // The receiver is back: its probe gets through, the park ends, the rest follow.
    down.fail_first(0);
    for _ in 0..3 {
        w.clock.advance(Duration::from_secs(1_000));
        deliver_due(&notifier).await.unwrap();
    }
    let got = down.accepted();
    let distinct: std::collections::HashSet<_> = got.iter().map(|r| r.id.clone()).collect();
    assert_eq!((got.len(), distinct.len()), (5, 5), "each of the five, once");
    assert!(w.outbox().await.is_empty());
}

#[tokio::test]
async fn a_receiver_that_always_fails_ends_in_the_dead_letters_and_holds_nothing_up() {
    let w = world();
    let (broken, good) = (Receiver::start().await, Receiver::start().await);
    broken.fail_first(usize::MAX);
    let (bad_link, _) = w.link(Some(&broken.url)).await;
    let (good_link, secret) = w.link(Some(&good.url)).await;
    good.set_secret(&secret);
    let notifier = w.notifier(UrlPolicy::Local, Arc::new(SystemResolver));
    w.assign(bad_link.link_id, "to the broken receiver").await;
    for i in 0..3 {
        w.assign(good_link.link_id, &format!("to the good one {i}")).await;
        deliver_due(&notifier).await.unwrap();
        // Each in the pass it was made in: the broken receiver's retries hold nothing up.
        assert_eq!(good.accepted().len(), i + 1, "the good receiver waited behind the broken one");
        w.clock.advance(Duration::from_secs(1_000));
    }
    for _ in 0..MAX_ATTEMPTS * 2 {
        deliver_due(&notifier).await.unwrap();
        w.clock.advance(Duration::from_secs(1_000));
    }
    assert_eq!(good.accepted().len(), 3, "the good receiver was held up");
    assert_eq!(broken.hits(), MAX_ATTEMPTS as usize, "attempts before giving up");
    let dead = w.store.dead_events(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].event.kind.as_str(), dead[0].attempts), ("task.assigned", MAX_ATTEMPTS));
    assert!(w.outbox().await.is_empty());
    let last = service_last_delivery(&w, bad_link.link_id).await;
    assert!(!last.ok && last.detail == "HTTP 503", "{last:?}");
}

#[tokio::test]
async fn subscriptions_pointing_inside_the_network_are_never_called() {
    let w = world();
    let receiver = Receiver::start().await;
    let port = receiver.url.split(':').nth(2).unwrap().split('/').next().unwrap().to_owned();
    // Names whose DNS answers point at loopback, a private network and the metadata service;
    // the cloud rules refuse them all at delivery time, though a name passes when it is saved.
    let resolver = Arc::new(Fixed(HashMap::from([
        ("loopback.example.test".to_owned(), vec!["127.0.0.1".parse().unwrap()]),
        ("private.example.test".to_owned(), vec!["10.0.0.7".parse().unwrap()]),
        ("metadata.example.test".to_owned(), vec!["169.254.169.254".parse().unwrap()]),
        ("mixed.example.test".to_owned(), vec!["93.184.216.34".parse().unwrap(), "192.168.1.9".parse().unwrap()]),
    ])));
    let notifier = w.notifier(UrlPolicy::Cloud, resolver);
    let mut links = Vec::new();
    for host in ["loopback", "private", "metadata", "mixed"] {
        let url = format!("https://{host}.example.test:{port}/hook");
        assert!(events::webhook_url::check(&url, UrlPolicy::Cloud).is_ok(), "{url} is refused already when saved");
        let (l, _) = w.link(Some(&url)).await;
        w.assign(l.link_id, "x").await;
        links.push((host, l.link_id));
    }
    deliver_due(&notifier).await.unwrap();
    assert_eq!(receiver.hits(), 0, "a subscription inside the network was called");
    for (host, link) in links {
        let last = service_last_delivery(&w, link).await;
        assert!(!last.ok && last.detail.starts_with(&format!("refused: {host}.example.test resolves to")), "{last:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_server_delivers_claimed_and_completed_once_each_signed() {
    let running = foundry_tests::LocalServer::default("foundry-events").await;
    let receiver = Receiver::start().await;
    let http = foundry_tests::http();
    let link = running.demo.chat_link_id;
    let sub: serde_json::Value = http
        .put(format!("{}/owner/links/{link}/subscription", running.base_url))
        .bearer_auth(&running.owner_token)
        .json(&serde_json::json!({"url": receiver.url}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    receiver.set_secret(sub["subscription"]["secret"].as_str().unwrap());
    let owner = running.demo.owner.clone();
    let t = running.demo.task_id.unwrap();
    let ClaimOutcome::Claimed { claim_id, .. } = running.store.claim_task(&owner, link, t).await.unwrap() else {
        panic!()
    };
    let submit = SubmitTask {
        owner: owner.clone(),
        link_id: link,
        task_id: t,
        claim_id,
        status: SubmitStatus::Completed,
        result: "done".into(),
    };
    running.store.submit_task(&submit).await.unwrap();
    let got = wait_until("task.claimed and task.completed", Duration::from_secs(10), || {
        let r = receiver.clone();
        async move { (r.accepted().len() >= 2).then(|| r.accepted()) }
    })
    .await;
    assert_eq!(got.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(), ["task.claimed", "task.completed"]);
    assert!(got.iter().all(|r| r.signature_ok));
    assert_eq!(got[0].body["data"]["task_id"], t.to_string());
    assert!(!got[1].body.to_string().contains("done"), "an event carried the result");
    // Nothing more arrives (no duplicates): the outbox empties once the notifier records the
    // second delivery, which it does just after the receiver's answer.
    wait_until("the outbox to empty", Duration::from_secs(10), || {
        let store = running.store.clone();
        async move { store.due_events(10).await.unwrap().is_empty().then_some(()) }
    })
    .await;
    assert_eq!(receiver.hits(), 2);
    let _: Timestamp = running.store.get_task(&owner, link, t).await.unwrap().unwrap().created_at;
    running.stop().await;
}

/// The local desktop watch: a desktop that synced, then stayed silent past its window while a
/// run waited for it, is marked by the server's timer look (`local::watch_once`) — once, and
/// not before the run waited `WATCH_AFTER[0]` — and its `desktop.offline` is in the outbox in
/// the same transaction; its next sync clears the mark (`desktop.online`). A paused desktop and
/// one that synced in time are left alone; a mark with a sync in between is refused.
#[tokio::test]
async fn a_silent_desktop_while_a_run_waits_goes_offline_then_online_in_the_outbox() {
    use domain::store::{AuthenticateDevices, ManageDevices, PauseDevices, WatchDesktops};
    let w = world();
    let (link, _) = w.link(None).await;
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "f".repeat(32))).unwrap();
    let meta = foundry_tests::session_meta(&gs);
    let poll = w.store.policy().poll_interval;
    let mut devices = Vec::new();
    for name in ["Laptop", "Tower", "Paused"] {
        let d = w.store.create_device(&w.owner, name, &format!("hash-{name}")).await.unwrap();
        w.store.sync_sessions(&w.owner, link.project_id, d.device_id, std::slice::from_ref(&meta)).await.unwrap();
        w.store.record_device_seen(&d, None).await.unwrap();
        devices.push(d);
    }
    let [laptop, tower, paused] = [&devices[0], &devices[1], &devices[2]];
    let pause = domain::devices::Pause::new(w.clock.now(), None, None).unwrap();
    w.store.set_device_pause(&w.owner, paused.device_id, Some(&pause)).await.unwrap();
    let req = QueueRun {
        owner: w.owner.clone(),
        agent: AgentId::new("claude", "alice").unwrap(),
        project_id: Some(link.project_id),
        graph_session_id: gs,
        arguments: serde_json::json!({}),
        idempotency_key: IdempotencyKey::parse("local-watch-1").unwrap(),
    };
    let QueueOutcome::Queued(_) = w.store.queue_run(&req).await.unwrap() else { panic!() };
    let before = w.outbox().await.len();
    // Silent past its window, but the run has not waited long enough for a look yet.
    let window = domain::fleet::online_window(false, poll);
    w.clock.advance(window);
    w.store.record_device_seen(tower, None).await.unwrap();
    assert_eq!(local::watch_once(&w.store, w.clock.now(), poll).await.unwrap(), 0, "looked too early");
    w.clock.advance(domain::fleet::WATCH_AFTER[0] - window);
    assert_eq!(local::watch_once(&w.store, w.clock.now(), poll).await.unwrap(), 1);
    assert_eq!(local::watch_once(&w.store, w.clock.now(), poll).await.unwrap(), 0, "marked twice");
    let events = w.outbox().await;
    assert_eq!(kinds(&events[before..]), ["desktop.offline"]);
    assert_eq!(events[before].data.device_id, Some(laptop.device_id.to_string()));
    let listed = w.store.list_devices(&w.owner).await.unwrap();
    let marked = |id: uuid::Uuid| listed.iter().find(|d| d.device_id == id).unwrap().offline_since.is_some();
    let marks = [marked(laptop.device_id), marked(tower.device_id), marked(paused.device_id)];
    assert_eq!(marks, [true, false, false], "only the silent, unpaused desktop is marked");
    // A mark made on what the watch saw before a sync is refused.
    let stale = listed
        .iter()
        .find(|d| d.device_id == tower.device_id)
        .unwrap()
        .last_seen_at
        .map(|t| t.minus(Duration::from_secs(1)));
    assert!(!w.store.mark_offline(&w.owner, tower.device_id, stale).await.unwrap(), "a sync in between lost");
    // The laptop syncs: online, once; its second sync within the minute writes nothing.
    w.clock.advance(Duration::from_secs(1));
    w.store.record_device_seen(laptop, None).await.unwrap();
    w.store.record_device_seen(laptop, None).await.unwrap();
    let events = w.outbox().await;
    assert_eq!(kinds(&events[before..]), ["desktop.offline", "desktop.online"]);
    assert_ne!(events[before].id, events[before + 1].id);
    assert!(w.store.list_devices(&w.owner).await.unwrap().iter().all(|d| d.offline_since.is_none()));
}
