//! One behavioural suite for every store (SPEC §3, §4, §6, §10).
//!
//! Each test below is a plain `async fn(&Harness)`. The `suite!` macro at the bottom runs each
//! one twice: against the embedded SQLite store (a temporary file, several connections) and
//! against DynamoDB at `AWS_ENDPOINT_URL` on a fresh table.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use domain::clock::Clock;
use domain::errors::{
    DESKTOP_STOPPED_REPORTING, IDEMPOTENCY_MISMATCH, MAC_SLEPT, NOT_CLAIMABLE_MISSING, RELAY_RESTARTED,
    SESSION_NO_LONGER_SHARED, STALE_CLAIM, TASK_CANCELLED,
};
use domain::ids::{AgentId, ChatLinkId, ClaimId, CommandId, GraphSessionId, IdempotencyKey, OwnerId, TaskId};
use domain::limits::Policy;
use domain::pairing::{
    DecideOutcome, Decision, Desktop, PAIRING_TTL, PAIRINGS_PER_SOURCE_PER_HOUR, POLL_INTERVAL, Pairing, PairingStatus,
    PollOutcome, StartOutcome as PairingStart, UserCode, new_device_code,
};
use domain::projects::{Project, Subscription, SyncOutcome};
use domain::runs::{
    CancelRunOutcome, CompleteOutcome, Completion, ControlOutcome, FinalStatus, QueueFilter, QueueOutcome,
    QueueRejection, QueueRun, Run, RunStatus, SessionMeta, StartOutcome,
};
use domain::tasks::{
    ArtifactOutcome, ArtifactRecord, AssignOutcome, AssignRejection, AssignTask, CancelTaskOutcome, ClaimOutcome,
    ClaimRejection, SubmitOutcome, SubmitRejection, SubmitStatus, TaskStatus,
};
use foundry_tests::{Harness, test_policy};
use tokio::sync::Barrier;

// ---- fixtures ----------------------------------------------------------------------------

fn owner(name: &str) -> OwnerId {
    OwnerId::new(name).unwrap()
}

fn agent(client: &str) -> AgentId {
    AgentId::new(client, "owner-sub").unwrap()
}

fn gs(n: u8) -> GraphSessionId {
    GraphSessionId::parse("graph_session_id", &format!("gs_{:032x}", n)).unwrap()
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

/// An enabled project sharing the given sessions.
async fn project(h: &Harness, o: &OwnerId, sessions: &[u8]) -> Project {
    let p = h.store.create_project(o, "Reports").await.unwrap();
    h.store.set_project_enabled(o, p.project_id, true).await.unwrap().unwrap();
    let metas: Vec<_> = sessions.iter().map(|n| session(*n)).collect();
    match h.store.sync_sessions(o, p.project_id, foundry_tests::TEST_DEVICE, &metas).await.unwrap() {
        SyncOutcome::Synced(p) => p,
        other => panic!("sync failed: {other:?}"),
    }
}

fn queue_req(o: &OwnerId, a: &AgentId, session: u8, key: &str, args: serde_json::Value) -> QueueRun {
    QueueRun {
        owner: o.clone(),
        agent: a.clone(),
        project_id: None,
        graph_session_id: gs(session),
        arguments: args,
        idempotency_key: IdempotencyKey::parse(key).unwrap(),
    }
}

async fn queue(h: &Harness, o: &OwnerId, a: &AgentId, key: &str) -> Run {
    match h.store.queue_run(&queue_req(o, a, 1, key, serde_json::json!({"week": 48}))).await.unwrap() {
        QueueOutcome::Queued(r) => r,
        other => panic!("queue failed: {other:?}"),
    }
}

async fn link(h: &Harness, o: &OwnerId) -> ChatLinkId {
    let p = h.store.create_project(o, "Tasks").await.unwrap();
    h.store.create_link(o, p.project_id, "Pricing chat").await.unwrap().unwrap().link_id
}

async fn assign(h: &Harness, o: &OwnerId, l: ChatLinkId, objective: &str) -> TaskId {
    let req = AssignTask {
        owner: o.clone(),
        link_id: l,
        objective: objective.into(),
        idempotency_key: IdempotencyKey::parse(&uuid::Uuid::new_v4().to_string()).unwrap(),
    };
    match h.store.assign_task(&req).await.unwrap() {
        AssignOutcome::Assigned(t) => t.task_id,
        other => panic!("assign failed: {other:?}"),
    }
}

async fn claim(h: &Harness, o: &OwnerId, l: ChatLinkId, t: TaskId) -> ClaimId {
    match h.store.claim_task(o, l, t).await.unwrap() {
        ClaimOutcome::Claimed { claim_id, .. } => claim_id,
        other => panic!("claim failed: {other:?}"),
    }
}

fn completion(exec: &str, status: FinalStatus, result: Option<&str>) -> Completion {
    Completion {
        execution_id: exec.into(),
        status,
        result: result.map(str::to_owned),
        result_truncated: false,
        error: None,
        total_tokens: Some(1200),
        reported_cost: Some(0.02),
    }
}

async fn started(h: &Harness, o: &OwnerId, a: &AgentId, key: &str) -> (CommandId, String) {
    let run = queue(h, o, a, key).await;
    let exec = uuid::Uuid::new_v4().to_string();
    let device = uuid::Uuid::new_v4();
    assert_eq!(h.store.start_run(o, run.command_id, &exec, device).await.unwrap(), StartOutcome::Started);
    let stored = h.store.get_run(a, run.command_id).await.unwrap().and_then(|r| r.device_id);
    assert_eq!(stored, Some(device), "a started run names the desktop that started it");
    (run.command_id, exec)
}

async fn view(h: &Harness, a: &AgentId, id: CommandId) -> (RunStatus, Option<String>) {
    let run = h.store.get_run(a, id).await.unwrap().expect("run visible to its agent");
    let v = run.view(h.now(), &h.policy);
    (v.status, v.error)
}

fn claim_error(o: &ClaimOutcome) -> String {
    match o {
        ClaimOutcome::Rejected(r) => r.to_string(),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

fn submit_error(o: &SubmitOutcome) -> String {
    match o {
        SubmitOutcome::Rejected(r) => r.to_string(),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

// ---- the claim race ----------------------------------------------------------------------

const RACE_TASKS: usize = 200;
const RACE_CLAIMERS: usize = 8;
const RACE_PARALLEL_TASKS: usize = 10;

/// What a race produced: tasks that ended with more than one winner.
struct RaceReport {
    double_claimed: usize,
    fresh_claims: usize,
}

/// For each of `RACE_TASKS` tasks, `RACE_CLAIMERS` claimers released together by a barrier.
/// A claimer "wins" when it walks away holding a claim id; a task is double-claimed when two
/// claimers hold different claim ids for it.
async fn race<F, Fut>(h: &Arc<Harness>, claim_fn: F) -> RaceReport
where
    F: Fn(Arc<Harness>, OwnerId, ChatLinkId, TaskId) -> Fut + Send + Sync + Copy + 'static,
    Fut: std::future::Future<Output = (Option<ClaimId>, bool)> + Send,
{
    let o = owner("racer");
    let l = link(h, &o).await;
    let mut tasks = Vec::new();
    for i in 0..RACE_TASKS {
        tasks.push(assign(h, &o, l, &format!("task {i}")).await);
    }
    let mut double_claimed = 0;
    let mut fresh_claims = 0;
    // Rounds of RACE_PARALLEL_TASKS tasks at once, each with its own barrier: more requests in
    // flight make an emulator that does not serialize writes show it.
    for chunk in tasks.chunks(RACE_PARALLEL_TASKS) {
        let mut rounds = Vec::new();
        for &t in chunk {
            let barrier = Arc::new(Barrier::new(RACE_CLAIMERS));
            let handles: Vec<_> = (0..RACE_CLAIMERS)
                .map(|_| {
                    let (h, o, barrier) = (Arc::clone(h), o.clone(), Arc::clone(&barrier));
                    tokio::spawn(async move {
                        barrier.wait().await;
                        claim_fn(h, o, l, t).await
                    })
                })
                .collect();
            rounds.push(handles);
        }
        for handles in rounds {
            let mut ids = HashSet::new();
            for handle in handles {
                let (id, fresh) = handle.await.unwrap();
                ids.extend(id);
                fresh_claims += usize::from(fresh);
            }
            if ids.len() > 1 {
                double_claimed += 1;
            }
        }
    }
    RaceReport { double_claimed, fresh_claims }
}

async fn claim_race_conditional_write_never_double_claims(h: Harness) {
    let h = Arc::new(h);
    let report = race(&h, |h, o, l, t| async move {
        match h.store.claim_task(&o, l, t).await.unwrap() {
            ClaimOutcome::Claimed { claim_id, .. } => (Some(claim_id), true),
            ClaimOutcome::Replayed { claim_id, .. } => (Some(claim_id), false),
            ClaimOutcome::Rejected(r) => panic!("same link must get the claim back, got {r}"),
        }
    })
    .await;
    eprintln!(
        "[{}] conditional claim race: {RACE_TASKS} tasks x {RACE_CLAIMERS} claimers, {} double claims, {} fresh claims",
        h.name(),
        report.double_claimed,
        report.fresh_claims
    );
    assert_eq!(report.double_claimed, 0, "the conditional claim double-claimed");
    assert_eq!(report.fresh_claims, RACE_TASKS, "exactly one fresh claim per task");
}

async fn claim_race_catches_the_naive_read_then_write(h: Harness) {
    let h = Arc::new(h);
    let report = race(&h, |h, o, l, t| async move {
        let id = h.naive_claim(&o, l, t).await.unwrap();
        (id, id.is_some())
    })
    .await;
    eprintln!(
        "[{}] naive claim race: {RACE_TASKS} tasks x {RACE_CLAIMERS} claimers, {} double-claimed tasks",
        h.name(),
        report.double_claimed
    );
    assert!(report.double_claimed > 0, "the race test did not catch the naive read-then-write claim");
}

// ---- claims, leases, submits ---------------------------------------------------------------

async fn same_link_claiming_twice_gets_the_same_claim(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let other = link(&h, &o).await;
    let t = assign(&h, &o, l, "Ask who signs off the pricing copy").await;
    let first = h.store.claim_task(&o, l, t).await.unwrap();
    let ClaimOutcome::Claimed { claim_id, lease_until } = first else { panic!("{first:?}") };
    assert_eq!(lease_until, h.now().plus(h.policy.lease));
    h.advance(Duration::from_secs(5));
    let again = h.store.claim_task(&o, l, t).await.unwrap();
    assert_eq!(again, ClaimOutcome::Replayed { claim_id, lease_until });
    // Another link, an unknown task, and another owner all get the same answer.
    assert_eq!(claim_error(&h.store.claim_task(&o, other, t).await.unwrap()), NOT_CLAIMABLE_MISSING);
    assert_eq!(claim_error(&h.store.claim_task(&o, l, TaskId::generate()).await.unwrap()), NOT_CLAIMABLE_MISSING);
    assert_eq!(claim_error(&h.store.claim_task(&owner("mallory"), l, t).await.unwrap()), NOT_CLAIMABLE_MISSING);
    assert!(h.store.get_task(&o, other, t).await.unwrap().is_none());
    assert!(h.store.get_task(&owner("mallory"), l, t).await.unwrap().is_none());
}

async fn lease_takeover_fences_out_the_stale_claim(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let t = assign(&h, &o, l, "Summarise the thread").await;
    let a = claim(&h, &o, l, t).await;
    // Live lease: no takeover, the same claim comes back.
    h.advance(h.policy.lease - Duration::from_millis(1));
    assert!(
        matches!(h.store.claim_task(&o, l, t).await.unwrap(), ClaimOutcome::Replayed { claim_id, .. } if claim_id == a)
    );
    // Lease over: the next claim takes over with a new claim id.
    h.advance(Duration::from_millis(65));
    let b = claim(&h, &o, l, t).await;
    assert_ne!(a, b);
    let stale =
        h.store.submit_task(&submit_req(&o, l, t, a, SubmitStatus::Completed, "A's late answer")).await.unwrap();
    assert_eq!(submit_error(&stale), STALE_CLAIM);
    let ok = h.store.submit_task(&submit_req(&o, l, t, b, SubmitStatus::Completed, "B's answer")).await.unwrap();
    assert_eq!(ok, SubmitOutcome::Accepted);
    // A's retry after B finished is still stale, and B's result stands.
    let stale =
        h.store.submit_task(&submit_req(&o, l, t, a, SubmitStatus::Completed, "A's late answer")).await.unwrap();
    assert_eq!(submit_error(&stale), STALE_CLAIM);
    let task = h.store.get_task(&o, l, t).await.unwrap().unwrap();
    assert_eq!(task.result.as_deref(), Some("B's answer"));
    assert_eq!(task.status_at(h.now()), TaskStatus::Completed);
}

async fn late_submit_that_was_not_taken_over_is_accepted(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let t = assign(&h, &o, l, "Draft the reply").await;
    let c = claim(&h, &o, l, t).await;
    h.advance(h.policy.lease * 3);
    let late = h.store.submit_task(&submit_req(&o, l, t, c, SubmitStatus::Completed, "slow but alive")).await.unwrap();
    assert_eq!(late, SubmitOutcome::Accepted);
}

async fn identical_submit_replays_and_a_different_one_is_rejected(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let t = assign(&h, &o, l, "List open questions").await;
    let c = claim(&h, &o, l, t).await;
    let result = "1. Who signs off the pricing copy?";
    let mut outcomes = Vec::new();
    for _ in 0..4 {
        outcomes.push(h.store.submit_task(&submit_req(&o, l, t, c, SubmitStatus::Completed, result)).await.unwrap());
    }
    assert_eq!(outcomes[0], SubmitOutcome::Accepted);
    assert!(outcomes[1..].iter().all(|x| *x == SubmitOutcome::Replayed), "{outcomes:?}");
    let different =
        h.store.submit_task(&submit_req(&o, l, t, c, SubmitStatus::Completed, "something else")).await.unwrap();
    assert_eq!(different, SubmitOutcome::Rejected(SubmitRejection::DifferentResult));
    let other_status = h.store.submit_task(&submit_req(&o, l, t, c, SubmitStatus::Failed, result)).await.unwrap();
    assert_eq!(other_status, SubmitOutcome::Rejected(SubmitRejection::DifferentResult));
    // Claiming a finished task says what it is.
    assert_eq!(claim_error(&h.store.claim_task(&o, l, t).await.unwrap()), "not claimable: completed");
}

async fn submit_after_cancel_is_rejected(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let t = assign(&h, &o, l, "Research competitors").await;
    let c = claim(&h, &o, l, t).await;
    assert_eq!(h.store.cancel_task(&o, l, t).await.unwrap(), CancelTaskOutcome::Cancelled);
    let after = h.store.submit_task(&submit_req(&o, l, t, c, SubmitStatus::Completed, "done anyway")).await.unwrap();
    assert_eq!(submit_error(&after), TASK_CANCELLED);
    assert_eq!(claim_error(&h.store.claim_task(&o, l, t).await.unwrap()), "not claimable: cancelled");
    assert_eq!(h.store.cancel_task(&o, l, t).await.unwrap(), CancelTaskOutcome::Unchanged(TaskStatus::Cancelled));
    assert_eq!(h.store.cancel_task(&owner("mallory"), l, t).await.unwrap(), CancelTaskOutcome::NotFound);
}

async fn submit_with_a_claim_that_never_held_the_task_is_rejected(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let t = assign(&h, &o, l, "Check the invoice").await;
    let bogus = ClaimId::generate();
    let out = h.store.submit_task(&submit_req(&o, l, t, bogus, SubmitStatus::Completed, "x")).await.unwrap();
    assert_eq!(out, SubmitOutcome::Rejected(SubmitRejection::NotClaimed));
    let other = link(&h, &o).await;
    let out = h.store.submit_task(&submit_req(&o, other, t, bogus, SubmitStatus::Completed, "x")).await.unwrap();
    assert_eq!(out, SubmitOutcome::Rejected(SubmitRejection::Missing));
}

async fn expired_tasks_read_as_expired_and_reading_writes_nothing(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let queued = assign(&h, &o, l, "Will expire queued").await;
    let claimed = assign(&h, &o, l, "Will expire claimed").await;
    let c = claim(&h, &o, l, claimed).await;
    h.advance(h.policy.task_ttl);
    let writes = h.writes();
    for t in [queued, claimed] {
        let task = h.store.get_task(&o, l, t).await.unwrap().unwrap();
        assert_eq!(task.status_at(h.now()), TaskStatus::Expired);
    }
    assert!(h.store.list_open_tasks(&o, l, 50).await.unwrap().is_empty());
    assert_eq!(h.store.list_link_tasks(&o, l, 50, None).await.unwrap().tasks.len(), 2);
    assert_eq!(h.writes(), writes, "a read wrote");
    assert_eq!(claim_error(&h.store.claim_task(&o, l, queued).await.unwrap()), "not claimable: expired");
    assert_eq!(claim_error(&h.store.claim_task(&o, l, claimed).await.unwrap()), "not claimable: expired");
    let late = h.store.submit_task(&submit_req(&o, l, claimed, c, SubmitStatus::Completed, "too late")).await.unwrap();
    assert_eq!(late, SubmitOutcome::Rejected(SubmitRejection::Expired));
    assert_eq!(h.store.cancel_task(&o, l, queued).await.unwrap(), CancelTaskOutcome::Unchanged(TaskStatus::Expired));
    // A second before expiry everything still worked: expiry is exactly 24 h.
    let fresh = assign(&h, &o, l, "Fresh").await;
    h.advance(h.policy.task_ttl - Duration::from_millis(1));
    claim(&h, &o, l, fresh).await;
}

async fn open_task_list_is_the_links_open_tasks_oldest_first(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let other = link(&h, &o).await;
    let t1 = assign(&h, &o, l, "first").await;
    let t2 = assign(&h, &o, l, "second").await;
    let t3 = assign(&h, &o, l, "third").await;
    assign(&h, &o, other, "someone else's").await;
    let c = claim(&h, &o, l, t2).await;
    let writes = h.writes();
    let open: Vec<_> = h.store.list_open_tasks(&o, l, 50).await.unwrap().iter().map(|t| t.task_id).collect();
    assert_eq!(open, vec![t1, t2, t3]);
    // The limit holds: the oldest two of the three (a list that ignored it would give three).
    let two: Vec<_> = h.store.list_open_tasks(&o, l, 2).await.unwrap().iter().map(|t| t.task_id).collect();
    assert_eq!(two, vec![t1, t2], "the limit keeps the oldest");
    assert_eq!(h.writes(), writes, "listing wrote");
    h.store.submit_task(&submit_req(&o, l, t2, c, SubmitStatus::Completed, "ok")).await.unwrap();
    h.store.cancel_task(&o, l, t3).await.unwrap();
    let open: Vec<_> = h.store.list_open_tasks(&o, l, 50).await.unwrap().iter().map(|t| t.task_id).collect();
    assert_eq!(open, vec![t1]);
    assert!(h.store.list_open_tasks(&owner("mallory"), l, 50).await.unwrap().is_empty());
    let all: Vec<_> = h.store.list_link_tasks(&o, l, 50, None).await.unwrap().tasks.iter().map(|t| t.task_id).collect();
    assert_eq!(all, vec![t3, t2, t1], "owner list is newest first");
    let limited = h.store.list_open_tasks(&o, other, 1).await.unwrap();
    assert_eq!(limited.len(), 1, "the other link's own task");
}

async fn assign_is_idempotent_by_key_and_objective(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let req = AssignTask {
        owner: o.clone(),
        link_id: l,
        objective: "Prepare the agenda".into(),
        idempotency_key: IdempotencyKey::parse("panel-key-123").unwrap(),
    };
    let AssignOutcome::Assigned(first) = h.store.assign_task(&req).await.unwrap() else { panic!() };
    let AssignOutcome::Replayed(again) = h.store.assign_task(&req).await.unwrap() else { panic!() };
    assert_eq!(first.task_id, again.task_id);
    let changed = AssignTask { objective: "Prepare the agenda (v2)".into(), ..req.clone() };
    let out = h.store.assign_task(&changed).await.unwrap();
    assert_eq!(out, AssignOutcome::Rejected(AssignRejection::IdempotencyMismatch));
    assert_eq!(AssignRejection::IdempotencyMismatch.to_string(), IDEMPOTENCY_MISMATCH);
    let foreign =
        AssignTask { owner: owner("mallory"), idempotency_key: IdempotencyKey::parse("other-key-1").unwrap(), ..req };
    assert_eq!(h.store.assign_task(&foreign).await.unwrap(), AssignOutcome::Rejected(AssignRejection::LinkNotFound));
    assert_eq!(h.store.list_link_tasks(&o, l, 50, None).await.unwrap().tasks.len(), 1);
}

/// The panel's double click and its retry after a timeout, at once: eight concurrent assigns
/// with one key and one objective make exactly one task; the same key with another objective
/// is refused, also under concurrency.
async fn assign_idempotency_under_concurrent_retries(h: Harness) {
    let h = Arc::new(h);
    let o = owner("alice");
    let l = link(&h, &o).await;
    let req = AssignTask {
        owner: o.clone(),
        link_id: l,
        objective: "Draft the reply".into(),
        idempotency_key: IdempotencyKey::parse("panel-double-click").unwrap(),
    };
    let barrier = Arc::new(Barrier::new(8));
    let mut handles = Vec::new();
    for i in 0..8 {
        let (h, barrier) = (h.clone(), barrier.clone());
        let mut req = req.clone();
        if i == 7 {
            req.objective = "Draft the reply (edited)".into();
        }
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            h.store.assign_task(&req).await.unwrap()
        }));
    }
    let mut ids = HashSet::new();
    let mut mismatches = 0;
    for handle in handles {
        match handle.await.unwrap() {
            AssignOutcome::Assigned(t) | AssignOutcome::Replayed(t) => {
                ids.insert(t.task_id);
            }
            AssignOutcome::Rejected(AssignRejection::IdempotencyMismatch) => mismatches += 1,
            other => panic!("{other:?}"),
        }
    }
    let page = h.store.list_link_tasks(&o, l, 50, None).await.unwrap();
    assert_eq!(page.tasks.len(), 1, "one key made {} tasks", page.tasks.len());
    assert!(ids.len() == 1 && ids.contains(&page.tasks[0].task_id));
    // Whichever objective won, the other one was refused (the edited one, or all seven others).
    let edited_won = page.tasks[0].objective.ends_with("(edited)");
    assert_eq!(mismatches, if edited_won { 7 } else { 1 });
}

async fn link_task_pages_are_newest_first_with_a_cursor(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let mut made = Vec::new();
    for i in 0..5 {
        made.push(assign(&h, &o, l, &format!("task {i}")).await);
    }
    let t = made[1];
    let c = claim(&h, &o, l, t).await;
    // An artifact under the same partition must not show up as a task.
    let rec = ArtifactRecord {
        link_id: l,
        task_id: t,
        claim_id: c,
        artifact_id: "notes".into(),
        name: "notes.md".into(),
        content_type: "text/markdown".into(),
        sha256: "c".repeat(64),
        size: 7,
        object_key: "k".into(),
    };
    h.store.record_artifact(&o, &rec).await.unwrap();
    let writes = h.writes();
    let first = h.store.list_link_tasks(&o, l, 2, None).await.unwrap();
    assert_eq!(first.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![made[4], made[3]]);
    let second = h.store.list_link_tasks(&o, l, 2, first.next).await.unwrap();
    assert_eq!(second.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![made[2], made[1]]);
    let third = h.store.list_link_tasks(&o, l, 2, second.next).await.unwrap();
    assert_eq!(third.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![made[0]]);
    assert_eq!(third.next, None);
    assert_eq!(h.store.list_link_tasks(&o, l, 5, None).await.unwrap().next, None, "exactly one full page");
    assert!(h.store.list_link_tasks(&owner("mallory"), l, 5, None).await.unwrap().tasks.is_empty());
    let arts = h.store.list_artifacts(&o, l, t).await.unwrap();
    assert_eq!(arts, vec![rec]);
    assert!(h.store.list_artifacts(&owner("mallory"), l, t).await.unwrap().is_empty());
    assert_eq!(h.writes(), writes, "listing wrote");
}

async fn deleting_a_link_cancels_its_open_tasks_and_hides_all_of_them(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let queued = assign(&h, &o, l, "still queued").await;
    let claimed = assign(&h, &o, l, "being worked on").await;
    let c = claim(&h, &o, l, claimed).await;
    let done = assign(&h, &o, l, "finished").await;
    let dc = claim(&h, &o, l, done).await;
    h.store.submit_task(&submit_req(&o, l, done, dc, SubmitStatus::Completed, "ok")).await.unwrap();
    assert_eq!(h.store.delete_link(&owner("mallory"), l).await.unwrap(), None, "another owner cannot delete it");
    assert_eq!(h.store.delete_link(&o, l).await.unwrap(), Some(2));
    // For the owner the link is gone; assigning to it is refused.
    assert_eq!(h.store.get_link(&o, l).await.unwrap(), None);
    assert!(h.store.list_links(&o).await.unwrap().iter().all(|x| x.link_id != l));
    let req = AssignTask {
        owner: o.clone(),
        link_id: l,
        objective: "too late".into(),
        idempotency_key: IdempotencyKey::parse("after-delete").unwrap(),
    };
    assert_eq!(h.store.assign_task(&req).await.unwrap(), AssignOutcome::Rejected(AssignRejection::LinkNotFound));
    // Through MCP every task of the link reads exactly like an unknown one.
    assert!(h.store.list_open_tasks(&o, l, 50).await.unwrap().is_empty());
    for t in [queued, claimed, done] {
        assert_eq!(h.store.get_task(&o, l, t).await.unwrap(), None);
        let out = h.store.claim_task(&o, l, t).await.unwrap();
        assert_eq!(out, ClaimOutcome::Rejected(ClaimRejection::Missing));
        assert_eq!(ClaimRejection::Missing.to_string(), NOT_CLAIMABLE_MISSING);
    }
    let late = h.store.submit_task(&submit_req(&o, l, claimed, c, SubmitStatus::Completed, "late")).await.unwrap();
    assert_eq!(late, SubmitOutcome::Rejected(SubmitRejection::Missing));
    let replay = h.store.submit_task(&submit_req(&o, l, done, dc, SubmitStatus::Completed, "ok")).await.unwrap();
    assert_eq!(replay, SubmitOutcome::Rejected(SubmitRejection::Missing));
    // Deleting again finishes nothing new and is not an error.
    assert_eq!(h.store.delete_link(&o, l).await.unwrap(), Some(0));
}

async fn subscriptions_are_stored_on_the_link(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let sub = Subscription {
        url: "https://hooks.example.com/fc".into(),
        secret: domain::projects::new_webhook_secret().unwrap(),
        created_at: h.now(),
    };
    let set = h.store.set_subscription(&o, l, Some(&sub)).await.unwrap().unwrap();
    assert_eq!(set.subscription.as_ref(), Some(&sub));
    assert_eq!(h.store.get_link(&o, l).await.unwrap().unwrap().subscription, Some(sub.clone()));
    assert_eq!(h.store.set_subscription(&owner("mallory"), l, Some(&sub)).await.unwrap(), None);
    let cleared = h.store.set_subscription(&o, l, None).await.unwrap().unwrap();
    assert_eq!(cleared.subscription, None);
    h.store.delete_link(&o, l).await.unwrap();
    assert_eq!(h.store.set_subscription(&o, l, Some(&sub)).await.unwrap(), None, "a deleted link cannot subscribe");
}

async fn the_owner_sees_every_agents_runs_newest_first(h: Harness) {
    let o = owner("alice");
    project(&h, &o, &[1]).await;
    let (a, b) = (agent("claude"), agent("chatgpt"));
    let r1 = queue(&h, &o, &a, "owner-runs-1").await;
    let r2 = queue(&h, &o, &b, "owner-runs-2").await;
    let r3 = queue(&h, &o, &a, "owner-runs-3").await;
    let mallory = owner("mallory");
    project(&h, &mallory, &[1]).await;
    queue(&h, &mallory, &agent("claude"), "owner-runs-4").await;
    let writes = h.writes();
    let ids = |runs: Vec<Run>| runs.into_iter().map(|r| r.command_id).collect::<Vec<_>>();
    assert_eq!(
        ids(h.store.recent_runs(&o, 10, None).await.unwrap()),
        vec![r3.command_id, r2.command_id, r1.command_id]
    );
    assert_eq!(ids(h.store.recent_runs(&o, 1, Some(r3.command_id)).await.unwrap()), vec![r2.command_id]);
    assert_eq!(h.writes(), writes, "listing wrote");
}

async fn artifacts_are_idempotent_and_fenced(h: Harness) {
    let o = owner("alice");
    let l = link(&h, &o).await;
    let t = assign(&h, &o, l, "Make a chart").await;
    let c = claim(&h, &o, l, t).await;
    let rec = ArtifactRecord {
        link_id: l,
        task_id: t,
        claim_id: c,
        artifact_id: "chart-1".into(),
        name: "chart.png".into(),
        content_type: "image/png".into(),
        sha256: "a".repeat(64),
        size: 1234,
        object_key: format!("artifacts/{l}/{t}/chart-1"),
    };
    assert_eq!(h.store.record_artifact(&o, &rec).await.unwrap(), ArtifactOutcome::Recorded);
    assert_eq!(h.store.record_artifact(&o, &rec).await.unwrap(), ArtifactOutcome::Replayed);
    let changed = ArtifactRecord { sha256: "b".repeat(64), ..rec.clone() };
    assert_eq!(h.store.record_artifact(&o, &changed).await.unwrap(), ArtifactOutcome::DifferentContent);
    let stale = ArtifactRecord { artifact_id: "chart-2".into(), claim_id: ClaimId::generate(), ..rec.clone() };
    assert_eq!(
        h.store.record_artifact(&o, &stale).await.unwrap(),
        ArtifactOutcome::Rejected(SubmitRejection::StaleClaim)
    );
    h.store.cancel_task(&o, l, t).await.unwrap();
    let after_cancel = ArtifactRecord { artifact_id: "chart-3".into(), ..rec.clone() };
    assert_eq!(
        h.store.record_artifact(&o, &after_cancel).await.unwrap(),
        ArtifactOutcome::Rejected(SubmitRejection::Cancelled)
    );
    // The first artifact is still a replay after the cancel: a retry never turns into an error.
    assert_eq!(h.store.record_artifact(&o, &rec).await.unwrap(), ArtifactOutcome::Replayed);
}

// ---- graph runs ----------------------------------------------------------------------------

async fn run_idempotency_under_concurrent_retries(h: Harness) {
    let h = Arc::new(h);
    let o = owner("alice");
    let a = agent("claude");
    project(&h, &o, &[1]).await;
    let barrier = Arc::new(Barrier::new(8));
    let mut handles = Vec::new();
    for _ in 0..8 {
        let (h, o, a, barrier) = (Arc::clone(&h), o.clone(), a.clone(), Arc::clone(&barrier));
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            h.store.queue_run(&queue_req(&o, &a, 1, "retry-key-0001", serde_json::json!({"x": 1}))).await.unwrap()
        }));
    }
    let mut ids = HashSet::new();
    let mut queued = 0;
    for handle in handles {
        match handle.await.unwrap() {
            QueueOutcome::Queued(r) => {
                queued += 1;
                ids.insert(r.command_id);
            }
            QueueOutcome::Replayed(r) => {
                ids.insert(r.command_id);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((queued, ids.len()), (1, 1), "one key, one command");
    let p = h.store.list_projects(&o).await.unwrap().remove(0);
    assert_eq!(h.store.list_queued(&o, p.project_id, 50, &QueueFilter::all()).await.unwrap().len(), 1);
    // Same key, other arguments.
    let other = h.store.queue_run(&queue_req(&o, &a, 1, "retry-key-0001", serde_json::json!({"x": 2}))).await.unwrap();
    assert_eq!(other, QueueOutcome::Rejected(QueueRejection::IdempotencyMismatch));
    assert_eq!(QueueRejection::IdempotencyMismatch.to_string(), IDEMPOTENCY_MISMATCH);
    // The key is the agent's: another agent with the same key gets its own run.
    let b = agent("chatgpt");
    let theirs = h.store.queue_run(&queue_req(&o, &b, 1, "retry-key-0001", serde_json::json!({"x": 1}))).await.unwrap();
    assert!(matches!(theirs, QueueOutcome::Queued(r) if !ids.contains(&r.command_id)));
    // The key is remembered until the last millisecond of its 24 h, and forgotten after.
    h.advance(h.policy.idempotency_ttl - Duration::from_millis(1));
    let still = h.store.queue_run(&queue_req(&o, &a, 1, "retry-key-0001", serde_json::json!({"x": 2}))).await.unwrap();
    assert_eq!(still, QueueOutcome::Rejected(QueueRejection::IdempotencyMismatch), "the key was forgotten early");
    h.advance(Duration::from_millis(1));
    let later = h.store.queue_run(&queue_req(&o, &a, 1, "retry-key-0001", serde_json::json!({"x": 2}))).await.unwrap();
    assert!(matches!(later, QueueOutcome::Queued(_)), "{later:?}");
}

async fn replay_survives_a_consent_change(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    let p = project(&h, &o, &[1]).await;
    let first = queue(&h, &o, &a, "key-before-disable").await;
    h.store.set_project_enabled(&o, p.project_id, false).await.unwrap();
    let again =
        h.store.queue_run(&queue_req(&o, &a, 1, "key-before-disable", serde_json::json!({"week": 48}))).await.unwrap();
    assert!(matches!(&again, QueueOutcome::Replayed(r) if r.command_id == first.command_id), "{again:?}");
}

async fn runs_are_visible_only_to_their_agent(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    let b = agent("chatgpt");
    project(&h, &o, &[1]).await;
    let run = queue(&h, &o, &a, "visible-key-1").await;
    assert!(h.store.get_run(&a, run.command_id).await.unwrap().is_some());
    // Another agent and an unknown id are indistinguishable.
    assert_eq!(h.store.get_run(&b, run.command_id).await.unwrap(), None);
    assert_eq!(h.store.get_run(&a, CommandId::generate()).await.unwrap(), None);
    assert_eq!(h.store.cancel_run(&b, run.command_id).await.unwrap(), CancelRunOutcome::NotFound);
    assert_eq!(h.store.cancel_run(&a, CommandId::generate()).await.unwrap(), CancelRunOutcome::NotFound);
    // The relay of another owner cannot touch it either.
    let mallory = owner("mallory");
    assert_eq!(
        h.store.start_run(&mallory, run.command_id, "e", uuid::Uuid::nil()).await.unwrap(),
        StartOutcome::NotFound
    );
    assert_eq!(h.store.control_run(&mallory, run.command_id, None).await.unwrap(), ControlOutcome::NotFound);
    let c = completion("e", FinalStatus::Failed, None);
    assert_eq!(h.store.complete_run(&mallory, run.command_id, &c).await.unwrap(), CompleteOutcome::NotFound);
    assert_eq!(view(&h, &a, run.command_id).await.0, RunStatus::Queued);
}

async fn consent_is_checked_at_queue_time(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    let p1 = project(&h, &o, &[1, 2]).await;
    let req = |s: u8, key: &str| queue_req(&o, &a, s, key, serde_json::json!({}));
    // Not shared anywhere.
    let out = h.store.queue_run(&req(9, "consent-key-1")).await.unwrap();
    assert_eq!(out, QueueOutcome::Rejected(QueueRejection::SessionNotShared(gs(9))));
    // Shared in two enabled projects: project_id required.
    let p2 = project(&h, &o, &[2]).await;
    let out = h.store.queue_run(&req(2, "consent-key-2")).await.unwrap();
    let QueueOutcome::Rejected(QueueRejection::AmbiguousProject(_, ids)) = &out else { panic!("{out:?}") };
    assert_eq!(ids.len(), 2);
    assert!(out_text(&out).starts_with("project_id: required"));
    let named = QueueRun { project_id: Some(p2.project_id), ..req(2, "consent-key-3") };
    assert!(
        matches!(h.store.queue_run(&named).await.unwrap(), QueueOutcome::Queued(r) if r.project_id == p2.project_id)
    );
    // Named project that does not share it / is disabled / is not ours.
    let named = QueueRun { project_id: Some(p2.project_id), ..req(1, "consent-key-4") };
    assert_eq!(
        h.store.queue_run(&named).await.unwrap(),
        QueueOutcome::Rejected(QueueRejection::SessionNotSharedInProject(gs(1), p2.project_id))
    );
    h.store.set_project_enabled(&o, p1.project_id, false).await.unwrap();
    let named = QueueRun { project_id: Some(p1.project_id), ..req(1, "consent-key-5") };
    assert_eq!(
        h.store.queue_run(&named).await.unwrap(),
        QueueOutcome::Rejected(QueueRejection::ProjectDisabled(p1.project_id))
    );
    // With p1 disabled, session 2 is only shared in p2: no project_id needed now.
    assert!(matches!(h.store.queue_run(&req(2, "consent-key-6")).await.unwrap(), QueueOutcome::Queued(_)));
    let foreign = QueueRun { owner: owner("mallory"), project_id: Some(p2.project_id), ..req(2, "consent-key-7") };
    assert_eq!(h.store.queue_run(&foreign).await.unwrap(), QueueOutcome::Rejected(QueueRejection::ProjectNotFound));
}

fn out_text(o: &QueueOutcome) -> String {
    match o {
        QueueOutcome::Rejected(r) => r.to_string(),
        other => format!("{other:?}"),
    }
}

fn device(n: u128) -> uuid::Uuid {
    uuid::Uuid::from_u128(0x1000 + n)
}

async fn sync_as(h: &Harness, o: &OwnerId, p: &Project, d: uuid::Uuid, sessions: &[u8]) -> Project {
    let metas: Vec<_> = sessions.iter().map(|n| session(*n)).collect();
    match h.store.sync_sessions(o, p.project_id, d, &metas).await.unwrap() {
        SyncOutcome::Synced(p) => p,
        other => panic!("sync failed: {other:?}"),
    }
}

fn ids_of(p: &Project) -> Vec<GraphSessionId> {
    let mut v: Vec<_> = p.sessions.iter().map(|s| s.graph_session_id.clone()).collect();
    v.sort();
    v
}

async fn two_devices_sharing_one_project_keep_their_own_lists(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    let p = project(&h, &o, &[]).await;
    sync_as(&h, &o, &p, device(1), &[1, 2]).await;
    let both = sync_as(&h, &o, &p, device(2), &[3]).await;
    assert_eq!(ids_of(&both), vec![gs(1), gs(2), gs(3)], "one device's sync replaced the other's list");
    // Each device replaces only its own list.
    let after = sync_as(&h, &o, &p, device(1), &[2]).await;
    assert_eq!(ids_of(&after), vec![gs(2), gs(3)]);
    let ok = h.store.queue_run(&queue_req(&o, &a, 3, "key-three", serde_json::json!({}))).await.unwrap();
    assert!(matches!(ok, QueueOutcome::Queued(_)), "the other device's session must stay queueable: {ok:?}");
    let gone = sync_as(&h, &o, &p, device(2), &[]).await;
    assert_eq!(ids_of(&gone), vec![gs(2)]);
    let out = h.store.queue_run(&queue_req(&o, &a, 3, "key-three-b", serde_json::json!({}))).await.unwrap();
    assert_eq!(out, QueueOutcome::Rejected(QueueRejection::SessionNotShared(gs(3))));
    assert_eq!(ids_of(&h.store.get_project(&o, p.project_id).await.unwrap().unwrap()), vec![gs(2)]);
}

async fn revoking_a_device_withdraws_its_shares(h: Harness) {
    let o = owner("alice");
    let p = project(&h, &o, &[]).await;
    let (_, hash_a) = domain::devices::new_token().unwrap();
    let (_, hash_b) = domain::devices::new_token().unwrap();
    let da = h.store.create_device(&o, "Mac", &hash_a).await.unwrap();
    let db = h.store.create_device(&o, "Linux", &hash_b).await.unwrap();
    sync_as(&h, &o, &p, da.device_id, &[1]).await;
    sync_as(&h, &o, &p, db.device_id, &[2]).await;
    assert!(h.store.revoke_device(&o, db.device_id).await.unwrap());
    assert_eq!(ids_of(&h.store.get_project(&o, p.project_id).await.unwrap().unwrap()), vec![gs(1)]);
    // Even in a project the owner has switched off meanwhile.
    sync_as(&h, &o, &p, da.device_id, &[1, 3]).await;
    h.store.set_project_enabled(&o, p.project_id, false).await.unwrap();
    assert!(h.store.revoke_device(&o, da.device_id).await.unwrap());
    assert!(h.store.get_project(&o, p.project_id).await.unwrap().unwrap().sessions.is_empty());
}

/// A sync writes its project only when its desktop's list changed, or once a minute to move
/// `last_sync_at` (`domain::projects::sync_write`): a busy owner's desktops syncing every few
/// seconds no longer rewrite the whole project item each time (issue 59). A list that drops a
/// session drops that session's recent durations with it; a disabled project still refuses.
async fn a_sync_writes_its_project_only_when_something_changed(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    let p = project(&h, &o, &[1, 2]).await;
    let t0 = p.last_sync_at.expect("the first sync records its time");
    // A completed run of each session leaves a duration.
    for (i, n) in [1u8, 2].into_iter().enumerate() {
        let run =
            h.store.queue_run(&queue_req(&o, &a, n, &format!("sync-dur-{i}"), serde_json::json!({}))).await.unwrap();
        let QueueOutcome::Queued(run) = run else { panic!("{run:?}") };
        h.store.start_run(&o, run.command_id, "exec", uuid::Uuid::nil()).await.unwrap();
        h.store
            .complete_run(&o, run.command_id, &completion("exec", FinalStatus::Completed, Some("ok")))
            .await
            .unwrap();
    }
    let before = h.writes();
    h.advance(domain::projects::SYNC_STAMP_EVERY - Duration::from_secs(1));
    let same = sync_as(&h, &o, &p, foundry_tests::TEST_DEVICE, &[1, 2]).await;
    assert_eq!(h.writes(), before, "an unchanged sync within the minute wrote");
    assert_eq!((same.last_sync_at, ids_of(&same)), (Some(t0), vec![gs(1), gs(2)]));
    h.advance(Duration::from_secs(1));
    let stamped = sync_as(&h, &o, &p, foundry_tests::TEST_DEVICE, &[1, 2]).await;
    assert_eq!(h.writes(), before + 1, "a minute on, one write moves the time");
    assert_eq!(stamped.last_sync_at, Some(t0.plus(domain::projects::SYNC_STAMP_EVERY)));
    assert!(stamped.expected_duration(&gs(1)).is_some() && stamped.expected_duration(&gs(2)).is_some());
    // The list changes within the minute: written at once, and session 2's durations go.
    let changed = sync_as(&h, &o, &p, foundry_tests::TEST_DEVICE, &[1]).await;
    assert_eq!(h.writes(), before + 2);
    assert_eq!(ids_of(&changed), vec![gs(1)]);
    assert!(changed.expected_duration(&gs(1)).is_some(), "a shared session's durations were dropped");
    assert_eq!(changed.expected_duration(&gs(2)), None, "a withdrawn session's durations were kept");
    let read = h.store.get_project(&o, p.project_id).await.unwrap().unwrap();
    assert_eq!((ids_of(&read), read.recent_durations.len()), (vec![gs(1)], changed.recent_durations.len()));
    // Switched off: an unchanged sync is refused, not answered from what it read.
    h.store.set_project_enabled(&o, p.project_id, false).await.unwrap();
    let out = h.store.sync_sessions(&o, p.project_id, foundry_tests::TEST_DEVICE, &[session(1)]).await.unwrap();
    assert_eq!(out, SyncOutcome::Disabled);
}

/// Eight devices sync one project at the same moment, ten times each, each with its own list
/// (a barrier releases every round): at the end the union holds every device's last list.
async fn concurrent_syncs_of_many_devices_never_lose_a_list(h: Harness) {
    let o = owner("alice");
    let p = project(&h, &o, &[]).await;
    let store = h.store.clone();
    let devices = 8u8;
    let rounds = 10u8;
    let barrier = Arc::new(Barrier::new(usize::from(devices)));
    let mut tasks = Vec::new();
    for d in 0..devices {
        let (store, o, barrier) = (store.clone(), o.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            for r in 0..rounds {
                barrier.wait().await;
                // Device d shares session 10·d + round (its list changes every round).
                let metas = vec![session(10 * d + r + 1)];
                let out = store.sync_sessions(&o, p.project_id, device(u128::from(d)), &metas).await.unwrap();
                assert!(matches!(out, SyncOutcome::Synced(_)), "{out:?}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let want: Vec<GraphSessionId> = {
        let mut v: Vec<_> = (0..devices).map(|d| gs(10 * d + rounds)).collect();
        v.sort();
        v
    };
    let got = ids_of(&h.store.get_project(&o, p.project_id).await.unwrap().unwrap());
    assert_eq!(got, want, "a device's list was lost to a concurrent sync");
}

/// Completed runs leave their durations on the project (what `check_after_s` reads); failed
/// and cancelled ones do not.
async fn completed_runs_keep_the_sessions_recent_durations(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    let p = project(&h, &o, &[1]).await;
    for (i, secs) in [50u64, 70, 60].into_iter().enumerate() {
        let run = queue(&h, &o, &a, &format!("duration-key-{i}")).await;
        let exec = format!("exec-{i}");
        h.store.start_run(&o, run.command_id, &exec, uuid::Uuid::nil()).await.unwrap();
        // A millisecond more each: the three end in three different slots of the sample
        // (`finished_ms % 8`), so all three must be kept.
        h.advance(Duration::from_secs(secs) + Duration::from_millis(1));
        h.store.control_run(&o, run.command_id, None).await.unwrap();
        let out = h
            .store
            .complete_run(&o, run.command_id, &completion(&exec, FinalStatus::Completed, Some("ok")))
            .await
            .unwrap();
        assert_eq!(out, CompleteOutcome::Recorded(RunStatus::Completed));
    }
    let failed = queue(&h, &o, &a, "duration-key-failed").await;
    h.store.start_run(&o, failed.command_id, "exec-f", uuid::Uuid::nil()).await.unwrap();
    h.advance(Duration::from_secs(5));
    h.store.complete_run(&o, failed.command_id, &completion("exec-f", FinalStatus::Failed, None)).await.unwrap();
    let cancelled = queue(&h, &o, &a, "duration-key-cancelled").await;
    h.store.start_run(&o, cancelled.command_id, "exec-c", uuid::Uuid::nil()).await.unwrap();
    h.advance(Duration::from_secs(6) + Duration::from_millis(1));
    h.store.complete_run(&o, cancelled.command_id, &completion("exec-c", FinalStatus::Cancelled, None)).await.unwrap();
    let got = h.store.get_project(&o, p.project_id).await.unwrap().unwrap();
    let mut ms: Vec<u64> = got.recent_durations.values().copied().collect();
    ms.sort_unstable();
    // The three completed runs, each in its own slot; neither the failed nor the cancelled one.
    assert_eq!(ms, [50_001, 60_001, 70_001], "the kept durations");
    assert!(got.expected_duration(&gs(1)).is_some());
    assert_eq!(got.expected_duration(&gs(2)), None, "another session has no history");
}

async fn sync_replaces_the_shared_set(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    let p = project(&h, &o, &[1, 2]).await;
    assert_eq!(p.sessions.len(), 2);
    assert_eq!(p.last_sync_at, Some(h.now()));
    h.advance(Duration::from_secs(20));
    let SyncOutcome::Synced(p) =
        h.store.sync_sessions(&o, p.project_id, foundry_tests::TEST_DEVICE, &[session(2)]).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(p.sessions, vec![session(2)]);
    assert_eq!(p.last_sync_at, Some(h.now()));
    let out = h.store.queue_run(&queue_req(&o, &a, 1, "unshared-key", serde_json::json!({}))).await.unwrap();
    assert_eq!(out, QueueOutcome::Rejected(QueueRejection::SessionNotShared(gs(1))));
    // An empty set is a valid set.
    let SyncOutcome::Synced(p) =
        h.store.sync_sessions(&o, p.project_id, foundry_tests::TEST_DEVICE, &[]).await.unwrap()
    else {
        panic!()
    };
    assert!(p.sessions.is_empty());
    let out = h.store.queue_run(&queue_req(&o, &a, 2, "unshared-key-2", serde_json::json!({}))).await.unwrap();
    assert_eq!(out, QueueOutcome::Rejected(QueueRejection::SessionNotShared(gs(2))));
    // Disabled and foreign projects change nothing.
    h.store.set_project_enabled(&o, p.project_id, false).await.unwrap();
    assert_eq!(
        h.store.sync_sessions(&o, p.project_id, foundry_tests::TEST_DEVICE, &[session(1)]).await.unwrap(),
        SyncOutcome::Disabled
    );
    assert_eq!(
        h.store
            .sync_sessions(&owner("mallory"), p.project_id, foundry_tests::TEST_DEVICE, &[session(1)])
            .await
            .unwrap(),
        SyncOutcome::NotFound
    );
    assert!(h.store.get_project(&o, p.project_id).await.unwrap().unwrap().sessions.is_empty());
}

async fn queue_lists_oldest_first_and_only_queued(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    let p = project(&h, &o, &[1]).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(queue(&h, &o, &a, &format!("five-at-once-{i}")).await.command_id);
        h.advance(Duration::from_millis(10));
    }
    let queued = || async {
        let runs = h.store.list_queued(&o, p.project_id, 50, &QueueFilter::all()).await.unwrap();
        runs.iter().map(|r| r.command_id).collect::<Vec<_>>()
    };
    let writes = h.writes();
    assert_eq!(queued().await, ids);
    assert_eq!(h.writes(), writes);
    h.store.start_run(&o, ids[0], "exec-0", uuid::Uuid::nil()).await.unwrap();
    h.store.cancel_run(&a, ids[1]).await.unwrap();
    assert_eq!(queued().await, ids[2..].to_vec());
    assert!(h.store.list_queued(&owner("mallory"), p.project_id, 50, &QueueFilter::all()).await.unwrap().is_empty());
    let run = h.store.list_queued(&o, p.project_id, 1, &QueueFilter::all()).await.unwrap().remove(0);
    assert_eq!((run.slug.as_str(), run.arguments.clone()), ("graph-1", serde_json::json!({"week": 48})));
}

/// A queued run's backlog counts only its own agent's runs queued ahead of it in its project:
/// not another agent's, not another project's, not a started, cancelled or expired one, never
/// the run itself; and counting writes nothing.
async fn own_runs_ahead_are_the_agents_own_queued_runs_before_it(h: Harness) {
    let o = owner("alice");
    let (claude, gpt) = (agent("claude"), agent("gpt"));
    project(&h, &o, &[1]).await;
    project(&h, &o, &[2]).await;
    let mut mine = Vec::new();
    for i in 0..4 {
        mine.push(queue(&h, &o, &claude, &format!("ahead-claude-{i}")).await);
        h.advance(Duration::from_millis(10));
        queue(&h, &o, &gpt, &format!("ahead-gpt-{i}")).await;
        h.advance(Duration::from_millis(10));
        // The same agent's run in the other project is queued in between, and never counts.
        let other = queue_req(&o, &claude, 2, &format!("ahead-other-{i}"), serde_json::json!({}));
        assert!(matches!(h.store.queue_run(&other).await.unwrap(), QueueOutcome::Queued(_)));
        h.advance(Duration::from_millis(10));
    }
    let writes = h.writes();
    let ahead = |r: &Run| {
        let r = r.clone();
        let store = &h.store;
        async move { store.own_runs_ahead(&r).await }
    };
    for (i, r) in mine.iter().enumerate() {
        assert_eq!(ahead(r).await.unwrap(), i, "claude's run {i}");
    }
    let last_gpt = h.store.list_queued(&o, mine[0].project_id, 50, &QueueFilter::all()).await.unwrap();
    let last_gpt = last_gpt.iter().rev().find(|r| r.agent == gpt).unwrap();
    assert_eq!(ahead(last_gpt).await.unwrap(), 3, "gpt counts its own three, none of claude's");
    assert_eq!(h.writes(), writes, "counting wrote");
    h.store.start_run(&o, mine[0].command_id, "exec-0", uuid::Uuid::nil()).await.unwrap();
    h.store.cancel_run(&claude, mine[1].command_id).await.unwrap();
    assert_eq!(ahead(&mine[3]).await.unwrap(), 1, "started and cancelled runs are no longer ahead");
    h.advance(h.policy.queued_ttl);
    let fresh = queue(&h, &o, &claude, "ahead-after-expiry").await;
    assert_eq!(ahead(&fresh).await.unwrap(), 0, "expired runs are not ahead");
    // A run read as queued that expired since: nothing ahead, and no error.
    assert_eq!(ahead(&mine[3]).await.unwrap(), 0, "an expired run's own backlog");
    // At the limits: 40 runs ahead with the largest arguments (32 KB each; DynamoDB ends a
    // page at 1 MB read, about 31 of them) are all counted.
    let pad = "x".repeat(domain::limits::MAX_ARGUMENTS_BYTES - 100);
    for i in 0..40 {
        let big = queue_req(&o, &gpt, 1, &format!("ahead-big-{i}"), serde_json::json!({ "pad": pad }));
        assert!(matches!(h.store.queue_run(&big).await.unwrap(), QueueOutcome::Queued(_)));
    }
    let behind_big = queue(&h, &o, &gpt, "ahead-behind-big").await;
    let _ = h.take_requests();
    assert_eq!(ahead(&behind_big).await.unwrap(), 40, "runs past the first page were not counted");
    // On DynamoDB the count really went past a page (the emulator ends pages at 1 MB read as
    // DynamoDB does): otherwise the case above proves nothing about paging.
    if let Some(requests) = h.take_requests() {
        let queries = requests.iter().filter(|r| r.starts_with("Query")).count();
        assert!(queries >= 2, "the count read {queries} page(s): the 1 MB page end was never reached");
    }
}

async fn cancel_queued_is_immediate_and_the_desktop_never_starts_it(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    project(&h, &o, &[1]).await;
    let run = queue(&h, &o, &a, "cancel-queued-1").await;
    assert_eq!(h.store.cancel_run(&a, run.command_id).await.unwrap(), CancelRunOutcome::Cancelled);
    assert_eq!(view(&h, &a, run.command_id).await.0, RunStatus::Cancelled);
    assert_eq!(
        h.store.start_run(&o, run.command_id, "exec", uuid::Uuid::nil()).await.unwrap(),
        StartOutcome::Refused(RunStatus::Cancelled)
    );
    assert_eq!(
        h.store.cancel_run(&a, run.command_id).await.unwrap(),
        CancelRunOutcome::Unchanged(RunStatus::Cancelled)
    );
}

async fn cancel_running_sets_the_flag_and_cancel_wins_the_completion(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    project(&h, &o, &[1]).await;
    let (id, exec) = started(&h, &o, &a, "cancel-running-1").await;
    assert_eq!(h.store.control_run(&o, id, None).await.unwrap(), ControlOutcome::Running { cancel_requested: false });
    assert_eq!(h.store.cancel_run(&a, id).await.unwrap(), CancelRunOutcome::CancelRequested);
    assert_eq!(h.store.cancel_run(&a, id).await.unwrap(), CancelRunOutcome::CancelRequested);
    assert_eq!(view(&h, &a, id).await.0, RunStatus::Running);
    h.advance(Duration::from_secs(3));
    assert_eq!(h.store.control_run(&o, id, None).await.unwrap(), ControlOutcome::Running { cancel_requested: true });
    // The graph finished between the flag and the stop: still cancelled.
    let c = completion(&exec, FinalStatus::Completed, Some("finished anyway"));
    assert_eq!(h.store.complete_run(&o, id, &c).await.unwrap(), CompleteOutcome::Recorded(RunStatus::Cancelled));
    assert_eq!(h.store.complete_run(&o, id, &c).await.unwrap(), CompleteOutcome::Replayed(RunStatus::Cancelled));
    assert_eq!(view(&h, &a, id).await.0, RunStatus::Cancelled);
    assert_eq!(h.store.cancel_run(&a, id).await.unwrap(), CancelRunOutcome::Unchanged(RunStatus::Cancelled));
    assert_eq!(h.store.control_run(&o, id, None).await.unwrap(), ControlOutcome::NotRunning(RunStatus::Cancelled));
}

/// The owner cancels any of their runs, whichever agent queued it, by the agent's rule and
/// writes (`OwnerRuns::cancel_owned_run`): queued → cancelled at once (the desktop never starts
/// it, the agent reads it cancelled), running → the cancel flag (the next control poll says so;
/// cancel wins the completion), ended → unchanged; each answered with the run as it is now.
/// Another owner's run, or an unknown id, is missing, and the run is left as it was.
async fn the_owner_cancels_any_of_their_runs_by_the_agents_rule(h: Harness) {
    let o = owner("alice");
    let mallory = owner("mallory");
    let (a, b) = (agent("claude"), agent("chatgpt"));
    let p = project(&h, &o, &[1]).await;
    project(&h, &mallory, &[1]).await;
    let status = |run: &Run| run.view(h.now(), &h.policy).status;

    // Queued (by another agent than the running one below): cancelled at once.
    let queued = queue(&h, &o, &b, "owner-cancel-1").await;
    assert_eq!(h.store.cancel_owned_run(&mallory, queued.command_id).await.unwrap(), None);
    assert_eq!(h.store.cancel_owned_run(&o, CommandId::generate()).await.unwrap(), None);
    assert_eq!(view(&h, &b, queued.command_id).await.0, RunStatus::Queued, "another owner's cancel changed it");
    let (outcome, run) = h.store.cancel_owned_run(&o, queued.command_id).await.unwrap().unwrap();
    assert_eq!(outcome, CancelRunOutcome::Cancelled);
    assert_eq!(
        (run.command_id, status(&run), run.finished_at.is_some()),
        (queued.command_id, RunStatus::Cancelled, true)
    );
    assert_eq!(view(&h, &b, queued.command_id).await.0, RunStatus::Cancelled, "the agent reads it otherwise");
    assert!(h.store.list_queued(&o, p.project_id, 50, &QueueFilter::all()).await.unwrap().is_empty());
    assert_eq!(
        h.store.start_run(&o, queued.command_id, "exec", uuid::Uuid::nil()).await.unwrap(),
        StartOutcome::Refused(RunStatus::Cancelled)
    );
    let (again, run) = h.store.cancel_owned_run(&o, queued.command_id).await.unwrap().unwrap();
    assert_eq!((again, status(&run)), (CancelRunOutcome::Unchanged(RunStatus::Cancelled), RunStatus::Cancelled));
    assert_eq!(
        h.store.cancel_run(&b, queued.command_id).await.unwrap(),
        CancelRunOutcome::Unchanged(RunStatus::Cancelled)
    );

    // Running: the flag, which the relay's control poll reads; the completion then records cancelled.
    let (id, exec) = started(&h, &o, &a, "owner-cancel-2").await;
    assert_eq!(h.store.cancel_owned_run(&mallory, id).await.unwrap(), None);
    assert_eq!(h.store.control_run(&o, id, None).await.unwrap(), ControlOutcome::Running { cancel_requested: false });
    let (outcome, run) = h.store.cancel_owned_run(&o, id).await.unwrap().unwrap();
    assert_eq!(outcome, CancelRunOutcome::CancelRequested);
    assert_eq!((status(&run), run.cancel_requested), (RunStatus::Running, true));
    let (again, run) = h.store.cancel_owned_run(&o, id).await.unwrap().unwrap();
    assert_eq!((again, run.cancel_requested), (CancelRunOutcome::CancelRequested, true));
    assert_eq!(
        h.store.cancel_run(&a, id).await.unwrap(),
        CancelRunOutcome::CancelRequested,
        "the agent's cancel agrees"
    );
    assert_eq!(h.store.control_run(&o, id, None).await.unwrap(), ControlOutcome::Running { cancel_requested: true });
    let c = completion(&exec, FinalStatus::Completed, Some("finished anyway"));
    assert_eq!(h.store.complete_run(&o, id, &c).await.unwrap(), CompleteOutcome::Recorded(RunStatus::Cancelled));

    // Ended: unchanged, and answered as it is.
    let (outcome, run) = h.store.cancel_owned_run(&o, id).await.unwrap().unwrap();
    assert_eq!((outcome, status(&run)), (CancelRunOutcome::Unchanged(RunStatus::Cancelled), RunStatus::Cancelled));
    let (done, exec) = started(&h, &o, &a, "owner-cancel-3").await;
    let c = completion(&exec, FinalStatus::Completed, Some("done"));
    assert_eq!(h.store.complete_run(&o, done, &c).await.unwrap(), CompleteOutcome::Recorded(RunStatus::Completed));
    let (outcome, run) = h.store.cancel_owned_run(&o, done).await.unwrap().unwrap();
    assert_eq!((outcome, status(&run)), (CancelRunOutcome::Unchanged(RunStatus::Completed), RunStatus::Completed));
    assert_eq!(run.completion.and_then(|c| c.result).as_deref(), Some("done"));
}

/// A running Graph's progress rides on the heartbeat's write: recorded under the execution the
/// run was started with only, kept by plain heartbeats, never by another owner or after the
/// run ended, and at its largest (every bound full) stored whole.
async fn progress_rides_on_the_heartbeat_under_its_execution_only(h: Harness) {
    use domain::progress::{MAX_MESSAGE_CHARS, MAX_TAIL_LINES, Progress};
    use domain::relay::ControlRequest;
    let o = owner("alice");
    let a = agent("claude");
    project(&h, &o, &[1]).await;
    let (id, exec) = started(&h, &o, &a, "progress-1").await;
    let report = |execution: &str, message: &str| ControlRequest {
        execution_id: execution.to_owned(),
        progress: Progress { message: message.to_owned(), fraction: Some(0.25), tail: vec!["loading".into()] },
    };
    let progress = |run: Option<Run>| run.and_then(|r| r.progress).map(|p| (p.progress.message, p.updated_at));
    let running = ControlOutcome::Running { cancel_requested: false };
    assert_eq!(h.store.control_run(&o, id, Some(&report(&exec, "step 1"))).await.unwrap(), running);
    let first_at = h.clock.now();
    assert_eq!(progress(h.store.get_run(&a, id).await.unwrap()), Some(("step 1".into(), first_at)));
    h.advance(Duration::from_secs(3));
    // Another execution, another owner: refused, nothing changes.
    assert_eq!(
        h.store.control_run(&o, id, Some(&report("another-execution", "forged"))).await.unwrap(),
        ControlOutcome::NotRunning(RunStatus::Running)
    );
    assert_eq!(
        h.store.control_run(&owner("mallory"), id, Some(&report(&exec, "forged"))).await.unwrap(),
        ControlOutcome::NotFound
    );
    // A plain heartbeat keeps it.
    assert_eq!(h.store.control_run(&o, id, None).await.unwrap(), running);
    assert_eq!(progress(h.store.get_run(&a, id).await.unwrap()), Some(("step 1".into(), first_at)));
    // At every bound.
    let line = "ü".repeat(domain::progress::MAX_TAIL_CHARS / MAX_TAIL_LINES);
    let full = ControlRequest {
        execution_id: exec.clone(),
        progress: Progress {
            message: "é".repeat(MAX_MESSAGE_CHARS),
            fraction: Some(1.0),
            tail: vec![line; MAX_TAIL_LINES],
        },
    };
    full.progress.validate().unwrap();
    assert_eq!(h.store.control_run(&o, id, Some(&full)).await.unwrap(), running);
    let kept = h.store.get_run(&a, id).await.unwrap().unwrap().progress.unwrap();
    assert_eq!((kept.progress, kept.updated_at), (full.progress.clone(), h.clock.now()));
    // After the end, no more.
    let c = completion(&exec, FinalStatus::Completed, Some("done"));
    assert_eq!(h.store.complete_run(&o, id, &c).await.unwrap(), CompleteOutcome::Recorded(RunStatus::Completed));
    assert_eq!(
        h.store.control_run(&o, id, Some(&report(&exec, "late"))).await.unwrap(),
        ControlOutcome::NotRunning(RunStatus::Completed)
    );
    assert_eq!(h.store.get_run(&a, id).await.unwrap().unwrap().progress.unwrap().progress, full.progress);
    // A queued run takes none.
    let queued = queue(&h, &o, &a, "progress-2").await;
    assert_eq!(
        h.store.control_run(&o, queued.command_id, Some(&report(&exec, "early"))).await.unwrap(),
        ControlOutcome::NotRunning(RunStatus::Queued)
    );
    assert!(h.store.get_run(&a, queued.command_id).await.unwrap().unwrap().progress.is_none());
}

/// One desktop with parallel slots: three runs started by the same device are running at once,
/// a cancel reaches only its own run's control check, the others complete with their own
/// results, and the owner's fleet view counts what that desktop runs.
async fn one_desktop_runs_several_at_once_each_cancelled_on_its_own(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    project(&h, &o, &[1]).await;
    let device = uuid::Uuid::new_v4();
    let mut runs = Vec::new();
    for i in 0..3 {
        let run = queue(&h, &o, &a, &format!("parallel-slots-{i}")).await;
        let exec = format!("exec-slot-{i}");
        assert_eq!(h.store.start_run(&o, run.command_id, &exec, device).await.unwrap(), StartOutcome::Started);
        runs.push((run.command_id, exec));
        h.advance(Duration::from_secs(1));
    }
    assert_eq!(h.store.cancel_run(&a, runs[1].0).await.unwrap(), CancelRunOutcome::CancelRequested);
    for (i, (id, _)) in runs.iter().enumerate() {
        let want = ControlOutcome::Running { cancel_requested: i == 1 };
        assert_eq!(h.store.control_run(&o, *id, None).await.unwrap(), want, "slot {i}");
    }
    let recent = h.store.recent_runs(&o, 20, None).await.unwrap();
    let busy = domain::fleet::busy_with(&recent, h.now(), &h.policy);
    assert_eq!(busy.get(&device).map(|r| r.command_id), Some(runs[0].0), "the oldest of its runs");
    let running = recent.iter().filter(|r| r.device_id == Some(device) && r.status == RunStatus::Running).count();
    assert_eq!(running, 3);
    for (i, (id, exec)) in runs.iter().enumerate() {
        let c = completion(exec, FinalStatus::Completed, Some(&format!("result {i}")));
        let want = if i == 1 { RunStatus::Cancelled } else { RunStatus::Completed };
        assert_eq!(h.store.complete_run(&o, *id, &c).await.unwrap(), CompleteOutcome::Recorded(want), "slot {i}");
    }
    for (i, (id, _)) in runs.iter().enumerate() {
        let run = h.store.get_run(&a, *id).await.unwrap().unwrap();
        let result = run.completion.and_then(|c| c.result);
        if i == 1 {
            assert_eq!(run.status, RunStatus::Cancelled);
        } else {
            assert_eq!(result.as_deref(), Some(format!("result {i}").as_str()), "slot {i} got another's result");
        }
    }
}

async fn complete_is_idempotent_by_hash(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    project(&h, &o, &[1]).await;
    let (id, exec) = started(&h, &o, &a, "complete-key-1").await;
    let c = completion(&exec, FinalStatus::Completed, Some("the weekly report"));
    assert_eq!(h.store.complete_run(&o, id, &c).await.unwrap(), CompleteOutcome::Recorded(RunStatus::Completed));
    assert_eq!(h.store.complete_run(&o, id, &c).await.unwrap(), CompleteOutcome::Replayed(RunStatus::Completed));
    let different = completion(&exec, FinalStatus::Completed, Some("another report"));
    assert_eq!(
        h.store.complete_run(&o, id, &different).await.unwrap(),
        CompleteOutcome::Conflict(RunStatus::Completed)
    );
    let run = h.store.get_run(&a, id).await.unwrap().unwrap();
    let stored = run.completion.clone().unwrap();
    assert_eq!(stored.result.as_deref(), Some("the weekly report"));
    assert_eq!((stored.total_tokens, stored.reported_cost), (Some(1200), Some(0.02)));
    assert!(run.started_at.is_some() && run.finished_at.is_some());
    // A start retried with the same execution id is a replay; another is refused.
    let (id2, exec2) = started(&h, &o, &a, "complete-key-2").await;
    assert_eq!(h.store.start_run(&o, id2, &exec2, uuid::Uuid::nil()).await.unwrap(), StartOutcome::Replayed);
    assert_eq!(
        h.store.start_run(&o, id2, "other", uuid::Uuid::nil()).await.unwrap(),
        StartOutcome::Refused(RunStatus::Running)
    );
    // A completion from another execution is refused.
    let wrong = completion("other", FinalStatus::Completed, Some("x"));
    assert_eq!(h.store.complete_run(&o, id2, &wrong).await.unwrap(), CompleteOutcome::Conflict(RunStatus::Running));
}

async fn a_queued_command_can_be_refused_by_the_relay_but_not_completed_unstarted(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    project(&h, &o, &[1]).await;
    let run = queue(&h, &o, &a, "refuse-key-1").await;
    let unstarted = completion("exec", FinalStatus::Completed, Some("?"));
    assert_eq!(
        h.store.complete_run(&o, run.command_id, &unstarted).await.unwrap(),
        CompleteOutcome::Conflict(RunStatus::Queued)
    );
    let refuse =
        Completion { error: Some(SESSION_NO_LONGER_SHARED.into()), ..completion("exec", FinalStatus::Cancelled, None) };
    assert_eq!(
        h.store.complete_run(&o, run.command_id, &refuse).await.unwrap(),
        CompleteOutcome::Recorded(RunStatus::Cancelled)
    );
    assert_eq!(view(&h, &a, run.command_id).await, (RunStatus::Cancelled, Some(SESSION_NO_LONGER_SHARED.into())));
}

async fn relay_restart_failure_is_recorded(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    project(&h, &o, &[1]).await;
    let (id, exec) = started(&h, &o, &a, "restart-key-1").await;
    let failed = Completion { error: Some(RELAY_RESTARTED.into()), ..completion(&exec, FinalStatus::Failed, None) };
    assert_eq!(h.store.complete_run(&o, id, &failed).await.unwrap(), CompleteOutcome::Recorded(RunStatus::Failed));
    assert_eq!(view(&h, &a, id).await, (RunStatus::Failed, Some(RELAY_RESTARTED.into())));
}

async fn a_silent_relay_reads_as_desktop_stopped_reporting(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    project(&h, &o, &[1]).await;
    let (id, exec) = started(&h, &o, &a, "silent-key-1").await;
    h.advance(h.policy.heartbeat_timeout - Duration::from_secs(1));
    assert_eq!(h.store.control_run(&o, id, None).await.unwrap(), ControlOutcome::Running { cancel_requested: false });
    h.advance(h.policy.heartbeat_timeout - Duration::from_secs(1));
    assert_eq!(view(&h, &a, id).await.0, RunStatus::Running, "heartbeat renewed the deadline");
    h.advance(Duration::from_secs(1));
    let writes = h.writes();
    assert_eq!(view(&h, &a, id).await, (RunStatus::Failed, Some("desktop stopped reporting".into())));
    assert_eq!(h.writes(), writes, "reading a timed-out run wrote");
    assert_eq!(h.store.control_run(&o, id, None).await.unwrap(), ControlOutcome::NotRunning(RunStatus::Failed));
    let late = completion(&exec, FinalStatus::Completed, Some("late"));
    assert_eq!(h.store.complete_run(&o, id, &late).await.unwrap(), CompleteOutcome::Conflict(RunStatus::Failed));
    let cancelled = completion(&exec, FinalStatus::Cancelled, None);
    assert_eq!(h.store.complete_run(&o, id, &cancelled).await.unwrap(), CompleteOutcome::Conflict(RunStatus::Failed));
    assert_eq!(h.store.cancel_run(&a, id).await.unwrap(), CancelRunOutcome::Unchanged(RunStatus::Failed));
    // The relay that ran it says why it stopped reporting: only as `failed` (the status
    // everyone has seen), only from its execution, once.
    let why = format!("{MAC_SLEPT} (asleep about 25 min)");
    let slept = Completion { error: Some(why.clone()), ..completion(&exec, FinalStatus::Failed, None) };
    let stranger = Completion { execution_id: "another-execution".into(), ..slept.clone() };
    assert_eq!(h.store.complete_run(&o, id, &stranger).await.unwrap(), CompleteOutcome::Conflict(RunStatus::Failed));
    assert_eq!(view(&h, &a, id).await, (RunStatus::Failed, Some(DESKTOP_STOPPED_REPORTING.into())));
    assert_eq!(
        h.store.complete_run(&owner("mallory"), id, &slept).await.unwrap(),
        CompleteOutcome::NotFound,
        "another owner"
    );
    assert_eq!(h.store.complete_run(&o, id, &slept).await.unwrap(), CompleteOutcome::Recorded(RunStatus::Failed));
    assert_eq!(view(&h, &a, id).await, (RunStatus::Failed, Some(why)));
    assert_eq!(h.store.complete_run(&o, id, &slept).await.unwrap(), CompleteOutcome::Replayed(RunStatus::Failed));
    let other = Completion { error: Some("something else".into()), ..slept };
    assert_eq!(h.store.complete_run(&o, id, &other).await.unwrap(), CompleteOutcome::Conflict(RunStatus::Failed));
}

/// A desktop's own run is handed to it while many runs of a session another desktop runs wait
/// ahead of it in the project's queue (issue 59), and on DynamoDB in a few requests, not one
/// per run ahead (the session filter is in the query, and each short page asks for 8× more).
async fn a_desktops_own_run_is_found_behind_another_sessions_backlog(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    let p = project(&h, &o, &[1, 2]).await;
    const AHEAD: usize = 150;
    for i in 0..AHEAD {
        let req = queue_req(&o, &a, 1, &format!("backlog-{i:04}"), serde_json::json!({}));
        assert!(matches!(h.store.queue_run(&req).await.unwrap(), QueueOutcome::Queued(_)));
    }
    let QueueOutcome::Queued(mine) =
        h.store.queue_run(&queue_req(&o, &a, 2, "mine-0001", serde_json::json!({}))).await.unwrap()
    else {
        panic!("not queued")
    };
    // This desktop shares session 2; another shares session 1.
    let filter = QueueFilter { mine: vec![gs(2)], shared: vec![gs(1), gs(2)] };
    h.take_requests();
    let handed = h.store.list_queued(&o, p.project_id, 1, &filter).await.unwrap();
    assert_eq!(handed.iter().map(|r| r.command_id).collect::<Vec<_>>(), vec![mine.command_id]);
    if let Some(requests) = h.take_requests() {
        // Pages of 1, 8, 64, 512 items: four requests for 151 (one per item before).
        assert!(requests.len() <= 4, "{} requests: {requests:?}", requests.len());
    }
    // The other desktop still gets its runs first in, and everything when nobody else shares.
    let theirs = QueueFilter { mine: vec![gs(1)], shared: vec![gs(1), gs(2)] };
    assert_eq!(h.store.list_queued(&o, p.project_id, 3, &theirs).await.unwrap().len(), 3);
    let orphan = QueueFilter { mine: vec![], shared: vec![gs(1)] };
    let left = h.store.list_queued(&o, p.project_id, 5, &orphan).await.unwrap();
    assert_eq!(left.iter().map(|r| r.command_id).collect::<Vec<_>>(), vec![mine.command_id], "a session nobody shares");
}

async fn expired_commands_read_as_expired_and_cannot_start(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    let p = project(&h, &o, &[1]).await;
    let run = queue(&h, &o, &a, "expire-key-1").await;
    h.advance(h.policy.queued_ttl);
    let writes = h.writes();
    assert_eq!(view(&h, &a, run.command_id).await.0, RunStatus::Expired);
    assert!(h.store.list_queued(&o, p.project_id, 50, &QueueFilter::all()).await.unwrap().is_empty());
    assert_eq!(h.writes(), writes, "reading an expired command wrote");
    assert_eq!(
        h.store.start_run(&o, run.command_id, "exec", uuid::Uuid::nil()).await.unwrap(),
        StartOutcome::Refused(RunStatus::Expired)
    );
    assert_eq!(h.store.cancel_run(&a, run.command_id).await.unwrap(), CancelRunOutcome::Unchanged(RunStatus::Expired));
    let refuse = completion("exec", FinalStatus::Cancelled, None);
    assert_eq!(
        h.store.complete_run(&o, run.command_id, &refuse).await.unwrap(),
        CompleteOutcome::Conflict(RunStatus::Expired)
    );
}

async fn big_results_round_trip(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    project(&h, &o, &[1]).await;
    let (id, exec) = started(&h, &o, &a, "big-result-1").await;
    let text = "日".repeat(99_899);
    let c = Completion {
        total_tokens: None,
        reported_cost: None,
        ..completion(&exec, FinalStatus::Completed, Some(&text))
    }
    .bounded();
    assert!(!c.result_truncated);
    c.validate().unwrap();
    assert_eq!(h.store.complete_run(&o, id, &c).await.unwrap(), CompleteOutcome::Recorded(RunStatus::Completed));
    let run = h.store.get_run(&a, id).await.unwrap().unwrap();
    assert_eq!(run.completion.unwrap().result.map(|r| r.chars().count()), Some(99_899));
    assert_eq!(h.store.complete_run(&o, id, &c).await.unwrap(), CompleteOutcome::Replayed(RunStatus::Completed));
}

/// Lists read past DynamoDB's 1 MB query pages: with every item near the 400 KB item limit a page
/// holds about three, and a list of eight must still hold all eight (the owner's runs, a link's
/// tasks, through the cursor too), and the queue must hold every queued run whatever the size of
/// their arguments.
async fn lists_hold_every_item_whatever_their_size(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    project(&h, &o, &[1]).await;
    // 99,899 characters of three bytes each: about 300 KB per item.
    let big = "日".repeat(99_899);
    let mut runs = Vec::new();
    for i in 0..8 {
        let (id, exec) = started(&h, &o, &a, &format!("big-page-run-{i}")).await;
        let c = Completion {
            total_tokens: None,
            reported_cost: None,
            ..completion(&exec, FinalStatus::Completed, Some(&big))
        };
        assert_eq!(h.store.complete_run(&o, id, &c).await.unwrap(), CompleteOutcome::Recorded(RunStatus::Completed));
        runs.push(id);
    }
    runs.reverse();
    let listed: Vec<CommandId> =
        h.store.recent_runs(&o, 50, None).await.unwrap().into_iter().map(|r| r.command_id).collect();
    assert_eq!(listed, runs, "the owner's runs, newest first, all of them");

    let l = link(&h, &o).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let t = assign(&h, &o, l, &format!("big task {i}")).await;
        let c = claim(&h, &o, l, t).await;
        let done = h.store.submit_task(&submit_req(&o, l, t, c, SubmitStatus::Completed, &big)).await.unwrap();
        assert_eq!(done, SubmitOutcome::Accepted);
        tasks.push(t);
    }
    tasks.reverse();
    let page = h.store.list_link_tasks(&o, l, 50, None).await.unwrap();
    assert_eq!(page.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(), tasks, "every task of the link");
    assert_eq!(page.next, None);
    let first = h.store.list_link_tasks(&o, l, 5, None).await.unwrap();
    assert_eq!(first.tasks.len(), 5);
    let rest = h.store.list_link_tasks(&o, l, 5, first.next).await.unwrap();
    let paged: Vec<TaskId> = first.tasks.iter().chain(&rest.tasks).map(|t| t.task_id).collect();
    assert_eq!((paged, rest.next), (tasks, None), "the cursor reaches every task");

    // 40 queued runs with arguments of 30,000 characters: more than a page of the queue index.
    let p = project(&h, &o, &[2]).await;
    let mut queued = Vec::new();
    for i in 0..40 {
        let args = serde_json::json!({ "notes": "x".repeat(30_000) });
        match h.store.queue_run(&queue_req(&o, &a, 2, &format!("big-queue-{i}"), args)).await.unwrap() {
            QueueOutcome::Queued(r) => queued.push(r.command_id),
            other => panic!("queue failed: {other:?}"),
        }
    }
    let listed = h.store.list_queued(&o, p.project_id, 100, &QueueFilter::all()).await.unwrap();
    assert_eq!(listed.len(), 40, "every queued run of the project");
}

/// Racing deliveries: the last delivery a link shows is the latest by time, whatever order the
/// outcomes are written in.
async fn the_last_delivery_is_the_latest_whatever_the_order_of_the_writes(h: Harness) {
    use domain::events::{DeliveryOutcome, EventType};
    let o = owner("alice");
    let l = link(&h, &o).await;
    let at = domain::clock::Timestamp::from_millis(1_800_000_000_000);
    let outcome = |ms: i64, ok: bool| DeliveryOutcome {
        event_id: format!("evt-{ms}"),
        event_type: EventType::TaskClaimed,
        at: at.plus(Duration::from_millis(ms as u64)),
        ok,
        detail: if ok { "HTTP 204".into() } else { "timed out".into() },
    };
    h.store.record_delivery(&o, l, &outcome(2_000, true)).await.unwrap();
    h.store.record_delivery(&o, l, &outcome(1_000, false)).await.unwrap();
    let shown = h.store.last_deliveries(&o).await.unwrap();
    assert_eq!(shown, vec![(l, outcome(2_000, true))], "an older outcome replaced the newer one");
    h.store.record_delivery(&o, l, &outcome(3_000, false)).await.unwrap();
    assert_eq!(h.store.last_deliveries(&o).await.unwrap(), vec![(l, outcome(3_000, false))]);
}

/// A task holds at most 20 artifacts and 25 MiB of them together: the 21st, or the one that
/// would pass the bytes, is refused with the rule (before the bytes are stored, and at the
/// record), and a replay of one already there is still a replay.
async fn a_task_holds_a_bounded_number_and_size_of_artifacts(h: Harness) {
    use domain::limits::{MAX_ARTIFACT_BYTES_PER_TASK, MAX_ARTIFACTS_PER_TASK};
    use domain::tasks::{ArtifactCap, ArtifactCheck};
    let o = owner("alice");
    let l = link(&h, &o).await;
    let record = |t: TaskId, c: ClaimId, i: u32, size: u64| ArtifactRecord {
        link_id: l,
        task_id: t,
        claim_id: c,
        artifact_id: format!("a-{i}"),
        name: format!("file-{i}.txt"),
        content_type: "text/plain".into(),
        sha256: format!("{i:064}"),
        size,
        object_key: format!("artifacts/{l}/{t}/a-{i}"),
    };
    let t = assign(&h, &o, l, "Many files").await;
    let c = claim(&h, &o, l, t).await;
    for i in 0..MAX_ARTIFACTS_PER_TASK {
        assert_eq!(h.store.record_artifact(&o, &record(t, c, i, 10)).await.unwrap(), ArtifactOutcome::Recorded);
    }
    let one_more = record(t, c, MAX_ARTIFACTS_PER_TASK, 10);
    assert_eq!(h.store.check_artifact(&o, &one_more).await.unwrap(), ArtifactCheck::OverCap(ArtifactCap::Count));
    assert_eq!(h.store.record_artifact(&o, &one_more).await.unwrap(), ArtifactOutcome::OverCap(ArtifactCap::Count));
    assert_eq!(ArtifactCap::Count.to_string(), "rejected: a task holds at most 20 artifacts");
    assert_eq!(h.store.record_artifact(&o, &record(t, c, 0, 10)).await.unwrap(), ArtifactOutcome::Replayed);
    assert_eq!(h.store.list_artifacts(&o, l, t).await.unwrap().len(), MAX_ARTIFACTS_PER_TASK as usize);

    let t = assign(&h, &o, l, "Big files").await;
    let c = claim(&h, &o, l, t).await;
    let three_mib = 3 * 1024 * 1024;
    let fit = MAX_ARTIFACT_BYTES_PER_TASK / three_mib;
    for i in 0..u32::try_from(fit).unwrap() {
        assert_eq!(h.store.record_artifact(&o, &record(t, c, i, three_mib)).await.unwrap(), ArtifactOutcome::Recorded);
    }
    let too_big = record(t, c, 100, three_mib);
    assert_eq!(h.store.check_artifact(&o, &too_big).await.unwrap(), ArtifactCheck::OverCap(ArtifactCap::Bytes));
    assert_eq!(h.store.record_artifact(&o, &too_big).await.unwrap(), ArtifactOutcome::OverCap(ArtifactCap::Bytes));
    assert_eq!(ArtifactCap::Bytes.to_string(), "rejected: a task's artifacts hold at most 25 MiB together");
    // What still fits is still recorded.
    let rest = MAX_ARTIFACT_BYTES_PER_TASK - fit * three_mib;
    assert_eq!(h.store.record_artifact(&o, &record(t, c, 101, rest)).await.unwrap(), ArtifactOutcome::Recorded);
}

/// A project's shares are bounded as a whole (DynamoDB keeps a project in one item of at most
/// 400 KB): 100 sessions at every field's maximum are refused with `TooLarge`, nothing is
/// written, and a sync that fits still works.
async fn shares_past_the_items_size_are_refused_and_change_nothing(h: Harness) {
    use domain::limits::{
        MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS, MAX_SHARED_SESSIONS, MAX_SHARES_BYTES, MAX_SHORT_FIELD_CHARS,
    };
    let o = owner("alice");
    let p = project(&h, &o, &[1]).await;
    let wide = |n: usize, chars: usize| format!("{n:04}{}", "日".repeat(chars - 4));
    let big: Vec<SessionMeta> = (0..MAX_SHARED_SESSIONS)
        .map(|n| SessionMeta {
            graph_session_id: GraphSessionId::parse("g", &format!("gs_{n:032x}")).unwrap(),
            name: wide(n, MAX_NAME_CHARS),
            description: wide(n, MAX_DESCRIPTION_CHARS),
            slug: format!("s{n}"),
            version: wide(n, MAX_SHORT_FIELD_CHARS),
            status: wide(n, MAX_SHORT_FIELD_CHARS),
        })
        .collect();
    let writes = h.writes();
    match h.store.sync_sessions(&o, p.project_id, foundry_tests::TEST_DEVICE, &big).await.unwrap() {
        SyncOutcome::TooLarge { bytes } => assert!(bytes > MAX_SHARES_BYTES, "{bytes}"),
        other => panic!("100 sessions at the maxima: {other:?}"),
    }
    assert_eq!(h.writes(), writes, "a refused sync wrote");
    let kept = h.store.get_project(&o, p.project_id).await.unwrap().unwrap();
    assert_eq!(kept.sessions, vec![session(1)], "the shares before the refused sync are kept");
    let fits = &big[..10];
    assert!(matches!(
        h.store.sync_sessions(&o, p.project_id, foundry_tests::TEST_DEVICE, fits).await.unwrap(),
        SyncOutcome::Synced(_)
    ));
}

// ---- devices ---------------------------------------------------------------------------------

async fn device_tokens_authenticate_until_revoked(h: Harness) {
    let o = owner("alice");
    let (token, hash) = domain::devices::new_token().unwrap();
    let d = h.store.create_device(&o, "MacBook", &hash).await.unwrap();
    let (_, other_hash) = domain::devices::new_token().unwrap();
    h.store.create_device(&owner("bob"), "Bob's", &other_hash).await.unwrap();
    let writes = h.writes();
    let found = h.store.device_by_token_hash(&domain::devices::token_hash(&token)).await.unwrap().unwrap();
    assert_eq!((found.device_id, found.owner.clone()), (d.device_id, o.clone()));
    assert_eq!(h.store.device_by_token_hash(&domain::devices::token_hash("fcd_wrong")).await.unwrap(), None);
    assert_eq!(h.writes(), writes, "authenticating wrote");
    assert_eq!(h.store.list_devices(&o).await.unwrap().len(), 1);
    assert!(!h.store.revoke_device(&owner("bob"), d.device_id).await.unwrap(), "another owner cannot revoke it");
    assert!(h.store.revoke_device(&o, d.device_id).await.unwrap());
    assert_eq!(h.store.device_by_token_hash(&hash).await.unwrap(), None, "a revoked token still works");
    assert!(h.store.list_devices(&o).await.unwrap()[0].revoked_at.is_some());
    assert!(h.store.revoke_device(&o, d.device_id).await.unwrap(), "revoking twice is fine");
}

async fn device_last_seen_is_recorded_at_most_once_a_minute(h: Harness) {
    let o = owner("alice");
    let (_, hash) = domain::devices::new_token().unwrap();
    let d = h.store.create_device(&o, "MacBook", &hash).await.unwrap();
    assert_eq!(h.store.list_devices(&o).await.unwrap()[0].last_seen_at, None);
    h.store.record_device_seen(&d, None).await.unwrap();
    let first = h.now();
    h.advance(Duration::from_secs(30));
    h.store.record_device_seen(&d, None).await.unwrap();
    assert_eq!(h.store.list_devices(&o).await.unwrap()[0].last_seen_at, Some(first), "kept to the minute");
    h.advance(Duration::from_secs(31));
    h.store.record_device_seen(&d, None).await.unwrap();
    assert_eq!(h.store.list_devices(&o).await.unwrap()[0].last_seen_at, Some(h.now()));
}

/// The desktop watch's mark (`desktop.offline`): set once, only on the record as the watch
/// read it (a sync in between wins), never on a revoked or another owner's device; the next
/// sync clears it, even within the minute that otherwise writes nothing.
async fn a_desktops_offline_mark_holds_until_its_next_sync(h: Harness) {
    let o = owner("alice");
    let d = h.store.create_device(&o, "MacBook", &domain::devices::new_token().unwrap().1).await.unwrap();
    let mark = |h: &Harness| {
        let (store, o) = (h.store.clone(), o.clone());
        async move { store.get_device(&o, d.device_id).await.unwrap().unwrap().offline_since }
    };
    assert!(!h.store.mark_offline(&o, d.device_id, Some(h.now())).await.unwrap(), "never seen at that time");
    h.store.record_device_seen(&d, None).await.unwrap();
    let seen = h.now();
    h.advance(Duration::from_secs(200));
    assert!(!h.store.mark_offline(&owner("bob"), d.device_id, Some(seen)).await.unwrap(), "another owner marked it");
    assert!(!h.store.mark_offline(&o, d.device_id, Some(seen.minus(Duration::from_secs(1)))).await.unwrap());
    assert!(h.store.mark_offline(&o, d.device_id, Some(seen)).await.unwrap());
    assert_eq!(mark(&h).await, Some(h.now()));
    assert!(!h.store.mark_offline(&o, d.device_id, Some(seen)).await.unwrap(), "marked twice");
    h.store.record_device_seen(&d, None).await.unwrap();
    assert_eq!(mark(&h).await, None, "the sync kept the mark");
    // Within the minute of that sync, a new mark and a sync: the sync still clears it.
    let again = h.store.get_device(&o, d.device_id).await.unwrap().unwrap().last_seen_at;
    assert!(h.store.mark_offline(&o, d.device_id, again).await.unwrap());
    h.advance(Duration::from_secs(1));
    h.store.record_device_seen(&d, None).await.unwrap();
    assert_eq!(mark(&h).await, None, "a sync within the minute kept the mark");
    h.store.revoke_device(&o, d.device_id).await.unwrap();
    let last = h.store.get_device(&o, d.device_id).await.unwrap().unwrap().last_seen_at;
    assert!(!h.store.mark_offline(&o, d.device_id, last).await.unwrap(), "a revoked device was marked");
}

/// The relay's report rides in the last-seen write: a changed report is written at once (a
/// new version, the doorbell coming up), the same report within the minute is not, and a sync
/// without one (an older relay) keeps the last. Another owner's device is untouched.
async fn device_reports_are_kept_when_they_change(h: Harness) {
    use domain::fleet::RelayReport;
    let o = owner("alice");
    let d = h.store.create_device(&o, "MacBook", &domain::devices::new_token().unwrap().1).await.unwrap();
    let other = h.store.create_device(&owner("bob"), "PC", &domain::devices::new_token().unwrap().1).await.unwrap();
    let v1 = RelayReport {
        version: "0.4.0".into(),
        platform: "macos-aarch64".into(),
        host: "José’s Mac".into(),
        doorbell: false,
        update: None,
        slots: None,
        unavailable: None,
    };
    let seen = |h: &Harness, o: &domain::ids::OwnerId| {
        let (store, o) = (h.store.clone(), o.clone());
        async move { store.list_devices(&o).await.unwrap().remove(0) }
    };
    h.store.record_device_seen(&d, Some(&v1)).await.unwrap();
    assert_eq!(seen(&h, &o).await.relay.as_ref(), Some(&v1));
    h.advance(Duration::from_secs(10));
    let v2 = RelayReport { version: "0.5.0".into(), ..v1.clone() };
    h.store.record_device_seen(&d, Some(&v2)).await.unwrap();
    let after = seen(&h, &o).await;
    assert_eq!(
        (after.relay.as_ref(), after.last_seen_at),
        (Some(&v2), Some(h.now())),
        "a new version within the minute"
    );
    h.advance(Duration::from_secs(10));
    let rang = RelayReport { doorbell: true, ..v2.clone() };
    h.store.record_device_seen(&d, Some(&rang)).await.unwrap();
    assert_eq!(seen(&h, &o).await.relay.as_ref(), Some(&rang), "the doorbell came up");
    let at = h.now();
    h.advance(Duration::from_secs(10));
    h.store.record_device_seen(&d, Some(&rang)).await.unwrap();
    assert_eq!(seen(&h, &o).await.last_seen_at, Some(at), "the same report within the minute changed nothing");
    h.advance(Duration::from_secs(60));
    h.store.record_device_seen(&d, None).await.unwrap();
    let kept = seen(&h, &o).await;
    assert_eq!(
        (kept.relay.as_ref(), kept.last_seen_at),
        (Some(&rang), Some(h.now())),
        "an older relay keeps the report"
    );
    let bob = seen(&h, &owner("bob")).await;
    assert_eq!((bob.device_id, bob.relay, bob.last_seen_at), (other.device_id, None, None));
}

// ---- request counts --------------------------------------------------------------------------

/// The minimum on the common path (DynamoDB requests per operation). On the embedded store the
/// same operations are checked to commit exactly one write transaction (reads: none).
async fn request_counts_on_the_common_path(h: Harness) {
    let o = owner("alice");
    let a = agent("claude");
    let p = project(&h, &o, &[1]).await;
    let l = link(&h, &o).await;
    let t = assign(&h, &o, l, "Count me").await;
    h.take_requests();

    let mut log: HashMap<&str, (Vec<String>, u64)> = HashMap::new();
    macro_rules! measure {
        ($name:literal, $e:expr) => {{
            let w = h.writes();
            h.take_requests();
            let out = $e;
            let writes = h.writes() - w;
            log.insert($name, (h.take_requests().unwrap_or_default(), writes));
            out
        }};
    }
    let c = measure!("claim", claim(&h, &o, l, t).await);
    measure!("submit", h.store.submit_task(&submit_req(&o, l, t, c, SubmitStatus::Completed, "done")).await.unwrap());
    let t2 = assign(&h, &o, l, "Cancel me").await;
    measure!("cancel_task", h.store.cancel_task(&o, l, t2).await.unwrap());
    measure!("list_open_tasks", h.store.list_open_tasks(&o, l, 50).await.unwrap());
    measure!("get_task", h.store.get_task(&o, l, t).await.unwrap());
    let named =
        QueueRun { project_id: Some(p.project_id), ..queue_req(&o, &a, 1, "count-key-1", serde_json::json!({})) };
    let QueueOutcome::Queued(run) = measure!("queue_run", h.store.queue_run(&named).await.unwrap()) else { panic!() };
    measure!("list_queued", h.store.list_queued(&o, p.project_id, 50, &QueueFilter::all()).await.unwrap());
    measure!("get_run", h.store.get_run(&a, run.command_id).await.unwrap());
    measure!("start", h.store.start_run(&o, run.command_id, "exec-1", uuid::Uuid::nil()).await.unwrap());
    measure!("control", h.store.control_run(&o, run.command_id, None).await.unwrap());
    let done = completion("exec-1", FinalStatus::Completed, Some("ok"));
    measure!("complete", h.store.complete_run(&o, run.command_id, &done).await.unwrap());
    let QueueOutcome::Queued(run2) = h
        .store
        .queue_run(&QueueRun { idempotency_key: IdempotencyKey::parse("count-key-2").unwrap(), ..named.clone() })
        .await
        .unwrap()
    else {
        panic!()
    };
    measure!("cancel_run", h.store.cancel_run(&a, run2.command_id).await.unwrap());

    let expect: &[(&str, &[&str], u64)] = &[
        ("claim", &["UpdateItem"], 1),
        ("submit", &["UpdateItem"], 1),
        ("cancel_task", &["UpdateItem"], 1),
        ("list_open_tasks", &["Query"], 0),
        ("get_task", &["GetItem"], 0),
        // One read for the session's slug and the hints, then one transaction.
        ("queue_run", &["GetItem", "TransactWriteItems:ConditionCheck,Put"], 1),
        ("list_queued", &["Query"], 0),
        ("get_run", &["GetItem"], 0),
        ("start", &["UpdateItem"], 1),
        ("control", &["UpdateItem"], 1),
        // The run, then its duration into the project's summary (DynamoDB: a second request;
        // the embedded store writes both in the one transaction).
        ("complete", &["UpdateItem", "UpdateItem"], 1),
        ("cancel_run", &["UpdateItem"], 1),
    ];
    for (name, requests, writes) in expect {
        let (seen, w) = &log[name];
        eprintln!("[{}] {name}: {seen:?}, {w} write(s)", h.name());
        let writes = if h.name() == "dynamodb" {
            requests.iter().filter(|r| !matches!(**r, "GetItem" | "Query")).count() as u64
        } else {
            *writes
        };
        assert_eq!(*w, writes, "{name}: writes");
        if h.take_requests().is_some() {
            assert_eq!(seen, requests, "{name}: DynamoDB requests");
        }
    }
}

// ---- the matrix ------------------------------------------------------------------------------

/// A deployment that lets one address start 25 pairings an hour.
fn busy_pairing_policy() -> Policy {
    Policy { pairings_per_source_per_hour: 25, ..test_policy() }
}

fn lease_policy() -> Policy {
    Policy { lease: Duration::from_secs(1), ..test_policy() }
}

/// docs/results.md's count of the suite is the `suite!` list's.
#[test]
fn the_documented_suite_size_is_the_lists() {
    let source = include_str!("conformance.rs");
    let list = source.split("\nsuite! {\n").nth(1).and_then(|r| r.split("\n}\n").next()).expect("the suite! list");
    let n =
        list.lines().filter(|l| l.starts_with("    ") && l[4..].starts_with(|c: char| c.is_ascii_lowercase())).count();
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/results.md")).unwrap();
    for said in [
        format!("## Conformance suite ({n} behaviours × 2 stores)"),
        format!("{n} behaviours, each run on both stores ({} tests)", 2 * n),
    ] {
        assert!(foundry_tests::says(&doc, &said), "docs/results.md does not say {said:?}");
    }
}

macro_rules! suite {
    ($($name:ident $(with $policy:expr)?),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 8)]
                async fn $name() {
                    #[allow(unused_mut, unused_assignments)]
                    let mut policy = super::test_policy();
                    $( policy = $policy; )?
                    super::$name(foundry_tests::Harness::embedded(policy)).await;
                }
            )*
        }
        mod dynamodb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 8)]
                async fn $name() {
                    #[allow(unused_mut, unused_assignments)]
                    let mut policy = super::test_policy();
                    $( policy = $policy; )?
                    let Some(h) = foundry_tests::Harness::dynamo(policy).await else { return };
                    let table = h.table_handle();
                    super::$name(h).await;
                    if let Some((client, name)) = table {
                        let _ = client.delete_table().table_name(name).send().await;
                    }
                }
            )*
        }
    };
}

/// A client's first use is kept and its last replaced (marking again is harmless) and read
/// back; another client's is not affected.
async fn a_clients_use_is_recorded_once_and_read_back(h: Harness) {
    assert_eq!(h.store.client_use("dcr-client-a").await.unwrap(), None, "never used yet");
    let first = h.now();
    h.store.mark_client_used("dcr-client-a").await.unwrap();
    let once = h.store.client_use("dcr-client-a").await.unwrap().expect("used");
    assert_eq!((once.first_used_at, once.last_used_at), (first, Some(first)));
    h.clock.advance(Duration::from_secs(60));
    h.store.mark_client_used("dcr-client-a").await.unwrap();
    let twice = h.store.client_use("dcr-client-a").await.unwrap().expect("used");
    assert_eq!((twice.first_used_at, twice.last_used_at), (first, Some(h.now())), "the first use kept, the last moved");
    assert_eq!(h.store.client_use("dcr-client-b").await.unwrap(), None, "another client's use leaked");
}

/// The last good copy of a client metadata document: kept and read back; a copy fetched later
/// replaces it, one fetched earlier (an instance that was slower) never does; another URL's is
/// its own.
async fn a_documents_last_good_copy_is_the_latest_fetched(h: Harness) {
    let url = "https://chatgpt.com/oauth/client.json";
    assert_eq!(h.store.document_copy(url).await.unwrap(), None);
    let first = h.clock.now();
    h.store.keep_document_copy(url, r#"{"v":1}"#, first).await.unwrap();
    h.clock.advance(Duration::from_secs(60));
    let later = h.clock.now();
    h.store.keep_document_copy(url, r#"{"v":2}"#, later).await.unwrap();
    // The slower instance's older fetch lands last: it does not replace the newer copy.
    h.store.keep_document_copy(url, r#"{"v":1}"#, first).await.unwrap();
    assert_eq!(h.store.document_copy(url).await.unwrap(), Some((r#"{"v":2}"#.to_owned(), later)));
    let other = "https://claude.ai/oauth/mcp-oauth-client-metadata";
    assert_eq!(h.store.document_copy(other).await.unwrap(), None, "another document's copy leaked");
    // A document at the size cap round-trips.
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(oauth::cimd::MAX_DOCUMENT_BYTES - 10));
    h.clock.advance(Duration::from_secs(1));
    h.store.keep_document_copy(other, &big, h.clock.now()).await.unwrap();
    assert_eq!(h.store.document_copy(other).await.unwrap().map(|(b, _)| b), Some(big));
}

/// A chat's connection for an owner: the first time kept, the last replaced; the latest first,
/// at most the listing's bound; another owner sees none of them. A metadata document's URL (long,
/// with a path) is an id like any other.
async fn chat_connections_keep_first_and_last_per_owner(h: Harness) {
    let (ana, bob) = (owner("chat-owner-ana"), owner("chat-owner-bob"));
    assert!(h.store.chat_connections(&ana).await.unwrap().is_empty(), "no chat yet");
    let claude = format!("https://claude.ai/oauth/{}/metadata.json", "x".repeat(600));
    h.store.mark_chat_connected(&ana, &claude, Some("app-for-claude")).await.unwrap();
    let first = h.clock.now();
    h.clock.advance(Duration::from_secs(60));
    h.store.mark_chat_connected(&ana, "chatgpt-app-client", None).await.unwrap();
    h.clock.advance(Duration::from_secs(60));
    h.store.mark_chat_connected(&ana, &claude, None).await.unwrap();
    let chats = h.store.chat_connections(&ana).await.unwrap();
    assert_eq!(chats.len(), 2, "{chats:?}");
    assert_eq!(chats[0].client_id, claude, "the latest first");
    assert_eq!(chats[0].first_at, first, "the first time is kept");
    assert_eq!(chats[0].last_at, h.clock.now(), "the last time is replaced");
    assert_eq!(chats[0].token_client.as_deref(), Some("app-for-claude"), "a mark without it keeps it");
    assert_eq!(chats[1].client_id, "chatgpt-app-client");
    assert_eq!(chats[1].token_client, None);
    assert!(h.store.chat_connections(&bob).await.unwrap().is_empty(), "another owner's chats leaked");
    for i in 0..domain::clients::MAX_LISTED_CHAT_CONNECTIONS + 3 {
        h.clock.advance(Duration::from_secs(1));
        h.store.mark_chat_connected(&bob, &format!("client-{i:02}"), None).await.unwrap();
    }
    let listed = h.store.chat_connections(&bob).await.unwrap();
    assert_eq!(listed.len(), domain::clients::MAX_LISTED_CHAT_CONNECTIONS);
    let last = domain::clients::MAX_LISTED_CHAT_CONNECTIONS + 2;
    assert_eq!(listed[0].client_id, format!("client-{last:02}"), "the latest first");
}

/// A host's handshake for an owner: one record per client id and host name, the latest
/// replacing the version, protocol and time; the latest first, at most the listing's bound;
/// another owner sees none; a chat's listing never shows a host.
async fn hosts_seen_keep_the_latest_handshake_per_client_and_name(h: Harness) {
    use domain::clients::{ClientInfo, HostSeen, MAX_LISTED_HOSTS};
    let (ana, bob) = (owner("host-owner-ana"), owner("host-owner-bob"));
    assert!(h.store.hosts_seen(&ana).await.unwrap().is_empty(), "no host yet");
    let seen = |client: &str, name: &str, version: &str, at| HostSeen {
        client_id: client.into(),
        info: ClientInfo::new(name, version),
        protocol: "2025-11-25".into(),
        seen_at: at,
    };
    let long = format!("https://claude.ai/oauth/{}/metadata.json", "x".repeat(600));
    h.store.mark_host_seen(&ana, &seen(&long, "claude-code", "2.1.327", h.clock.now())).await.unwrap();
    h.clock.advance(Duration::from_secs(60));
    h.store.mark_host_seen(&ana, &seen("local", "codex-mcp-client", "0.171.0", h.clock.now())).await.unwrap();
    h.clock.advance(Duration::from_secs(60));
    let upgraded = HostSeen { protocol: "2026-07-28".into(), ..seen(&long, "claude-code", "2.1.328", h.clock.now()) };
    h.store.mark_host_seen(&ana, &upgraded).await.unwrap();
    // The same client naming another host (one printed token, two programs): two records.
    h.store.mark_host_seen(&ana, &seen("local", "mcp-remote", "0.15.1", h.clock.now())).await.unwrap();
    let hosts = h.store.hosts_seen(&ana).await.unwrap();
    assert_eq!(hosts.len(), 3, "{hosts:?}");
    assert_eq!(hosts[0], upgraded, "the latest handshake replaces the one before, and is first");
    assert_eq!((hosts[1].client_id.as_str(), hosts[1].info.name.as_str()), ("local", "mcp-remote"));
    assert_eq!(hosts[2].info.name, "codex-mcp-client");
    assert!(h.store.hosts_seen(&bob).await.unwrap().is_empty(), "another owner's hosts leaked");
    assert!(h.store.chat_connections(&ana).await.unwrap().is_empty(), "a host is not a chat's sign-in");
    // Read together with the chats (the overview's one read): the same lists.
    h.store.mark_chat_connected(&ana, "chat-of-ana", None).await.unwrap();
    let (chats, together) = h.store.chats_and_hosts(&ana).await.unwrap();
    assert_eq!((chats, together), (h.store.chat_connections(&ana).await.unwrap(), hosts.clone()));
    for i in 0..MAX_LISTED_HOSTS + 3 {
        h.clock.advance(Duration::from_secs(1));
        h.store.mark_host_seen(&bob, &seen("c", &format!("host-{i:02}"), "1", h.clock.now())).await.unwrap();
    }
    let listed = h.store.hosts_seen(&bob).await.unwrap();
    assert_eq!(listed.len(), MAX_LISTED_HOSTS);
    assert_eq!(listed[0].info.name, format!("host-{:02}", MAX_LISTED_HOSTS + 2), "the latest first");
}

// ---- pairing a desktop (RFC 8628's shape) ----------------------------------------------------

fn desktop() -> Desktop {
    Desktop { name: "Ana's MacBook".into(), os: "macos".into(), arch: "aarch64".into() }
}

/// A pairing from `source` with a fresh code, device code and token; the device code's hash.
fn new_pairing(h: &Harness, source: &str) -> (Pairing, String) {
    let code = UserCode::generate().unwrap();
    let (_, device_code_hash) = new_device_code(&code).unwrap();
    let (_, token_hash) = domain::devices::new_token().unwrap();
    let p = Pairing::new(code, device_code_hash.clone(), token_hash, desktop(), source, h.clock.now());
    (p, device_code_hash)
}

fn approve(name: &str) -> (Decision, uuid::Uuid) {
    let id = uuid::Uuid::new_v4();
    (Decision::Approve { device_name: name.into(), device_id: id }, id)
}

/// The grant end to end: pending polls (and `slow_down` for early ones), one owner's approval
/// (another owner's comes too late), the redemption that creates the device with the relay's
/// token, a repeated poll answered with the same device, refusal, expiry.
async fn pairing_follows_the_device_grant(h: Harness) {
    let (a, b) = (owner("pair-a"), owner("pair-b"));
    let (p, hash) = new_pairing(&h, "203.0.113.7");
    let code = p.user_code.clone();
    assert_eq!(h.store.start_pairing(&p).await.unwrap(), PairingStart::Started);
    assert_eq!(h.store.start_pairing(&p).await.unwrap(), PairingStart::Started, "a retried start is the same start");
    let (mut other, _) = new_pairing(&h, "203.0.113.8");
    other.user_code = code.clone();
    assert_eq!(h.store.start_pairing(&other).await.unwrap(), PairingStart::CodeTaken, "a live code is not drawn twice");
    assert_eq!(h.store.get_pairing(&code).await.unwrap().unwrap().status, PairingStatus::Pending);
    assert_eq!(h.store.poll_pairing(&code, &hash).await.unwrap(), PollOutcome::Pending);
    assert_eq!(h.store.poll_pairing(&code, &hash).await.unwrap(), PollOutcome::SlowDown);
    assert_eq!(h.store.poll_pairing(&code, "0".repeat(64).as_str()).await.unwrap(), PollOutcome::Expired);
    h.clock.advance(POLL_INTERVAL);
    assert_eq!(h.store.poll_pairing(&code, &hash).await.unwrap(), PollOutcome::Pending);

    let (decision, device_id) = approve("Ana's Mac");
    let DecideOutcome::Decided(decided) = h.store.decide_pairing(&code, &a, &decision).await.unwrap() else {
        panic!("the first approval decides");
    };
    assert_eq!(
        decided.status,
        PairingStatus::Approved { owner: a.clone(), device_name: "Ana's Mac".into(), device_id }
    );
    let (late, _) = approve("Bob's now");
    assert_eq!(h.store.decide_pairing(&code, &b, &late).await.unwrap(), DecideOutcome::NotPending);
    assert_eq!(h.store.decide_pairing(&code, &a, &Decision::Refuse).await.unwrap(), DecideOutcome::NotPending);
    assert!(h.store.list_devices(&a).await.unwrap().is_empty(), "the device is created when the relay redeems");

    // Approved is not final: the interval still holds (RFC 8628 §3.5), then the next poll redeems.
    let paired = PollOutcome::Paired { owner: a.clone(), device_id, device_name: "Ana's Mac".into() };
    assert_eq!(h.store.poll_pairing(&code, &hash).await.unwrap(), PollOutcome::SlowDown);
    h.clock.advance(POLL_INTERVAL);
    assert_eq!(h.store.poll_pairing(&code, &hash).await.unwrap(), paired);
    h.clock.advance(POLL_INTERVAL);
    assert_eq!(h.store.poll_pairing(&code, &hash).await.unwrap(), paired, "a lost answer is answered again");
    let devices = h.store.list_devices(&a).await.unwrap();
    assert_eq!(devices.len(), 1, "{devices:?}");
    assert_eq!((devices[0].device_id, devices[0].name.as_str()), (device_id, "Ana's Mac"));
    let by_token = h.store.device_by_token_hash(&p.token_hash).await.unwrap().unwrap();
    assert_eq!((by_token.owner, by_token.device_id), (a.clone(), device_id), "the relay's own token authenticates");
    assert!(h.store.list_devices(&b).await.unwrap().is_empty());

    // Refused.
    let (r, rhash) = new_pairing(&h, "203.0.113.7");
    h.store.start_pairing(&r).await.unwrap();
    assert!(matches!(
        h.store.decide_pairing(&r.user_code, &b, &Decision::Refuse).await.unwrap(),
        DecideOutcome::Decided(_)
    ));
    assert_eq!(h.store.poll_pairing(&r.user_code, &rhash).await.unwrap(), PollOutcome::Refused);
    assert_eq!(h.store.decide_pairing(&r.user_code, &a, &approve("x").0).await.unwrap(), DecideOutcome::NotPending);

    // Expired: neither approvable nor redeemable, and its code can be drawn again an hour on.
    let (e, ehash) = new_pairing(&h, "203.0.113.7");
    h.store.start_pairing(&e).await.unwrap();
    h.clock.advance(PAIRING_TTL);
    assert_eq!(h.store.decide_pairing(&e.user_code, &a, &approve("x").0).await.unwrap(), DecideOutcome::NotPending);
    assert_eq!(h.store.poll_pairing(&e.user_code, &ehash).await.unwrap(), PollOutcome::Expired);
    h.clock.advance(Duration::from_secs(3601));
    let (mut again, again_hash) = new_pairing(&h, "198.51.100.1");
    again.user_code = e.user_code.clone();
    assert_eq!(h.store.start_pairing(&again).await.unwrap(), PairingStart::Started);
    assert_eq!(
        h.store.poll_pairing(&e.user_code, &ehash).await.unwrap(),
        PollOutcome::Expired,
        "the old device code is dead"
    );
    assert_eq!(h.store.poll_pairing(&e.user_code, &again_hash).await.unwrap(), PollOutcome::Pending);
}

/// A token hash that belongs to a device can never be redeemed, so no pairing of it may wait
/// for that: refused at the start (writing nothing, not even the source's count), at approval,
/// and — two pairings of one token both approved — at the redemption of the second, which then
/// ends refused instead of failing every poll.
async fn a_token_that_belongs_to_a_device_can_never_be_paired(h: Harness) {
    let a = owner("pair-token");
    let (taken, _) = domain::devices::new_token().unwrap();
    let taken = domain::devices::token_hash(&taken);
    h.store.create_device(&a, "Mac", &taken).await.unwrap();
    let (mut p, _) = new_pairing(&h, "203.0.113.20");
    p.token_hash = taken;
    assert_eq!(h.store.start_pairing(&p).await.unwrap(), PairingStart::TokenInUse);
    assert!(h.store.get_pairing(&p.user_code).await.unwrap().is_none(), "a refused start writes nothing");
    for i in 0..PAIRINGS_PER_SOURCE_PER_HOUR {
        let (q, _) = new_pairing(&h, "203.0.113.20");
        assert_eq!(h.store.start_pairing(&q).await.unwrap(), PairingStart::Started, "{i}: the refusal was counted");
    }

    let (first, first_hash) = new_pairing(&h, "203.0.113.21");
    let (mut second, second_hash) = new_pairing(&h, "203.0.113.21");
    second.token_hash = first.token_hash.clone();
    let (mut third, _) = new_pairing(&h, "203.0.113.21");
    third.token_hash = first.token_hash.clone();
    for q in [&first, &second, &third] {
        assert_eq!(h.store.start_pairing(q).await.unwrap(), PairingStart::Started);
    }
    for q in [&first, &second] {
        assert!(matches!(
            h.store.decide_pairing(&q.user_code, &a, &approve("Mac").0).await.unwrap(),
            DecideOutcome::Decided(_)
        ));
    }
    h.clock.advance(POLL_INTERVAL);
    assert!(matches!(h.store.poll_pairing(&first.user_code, &first_hash).await.unwrap(), PollOutcome::Paired { .. }));
    assert_eq!(h.store.poll_pairing(&second.user_code, &second_hash).await.unwrap(), PollOutcome::TokenInUse);
    h.clock.advance(POLL_INTERVAL);
    assert_eq!(h.store.poll_pairing(&second.user_code, &second_hash).await.unwrap(), PollOutcome::Refused, "it ended");
    assert_eq!(h.store.get_pairing(&second.user_code).await.unwrap().unwrap().status, PairingStatus::Refused);
    assert_eq!(
        h.store.decide_pairing(&third.user_code, &a, &approve("Mac").0).await.unwrap(),
        DecideOutcome::TokenInUse,
        "an approval of a token in use is refused"
    );
    assert_eq!(h.store.get_pairing(&third.user_code).await.unwrap().unwrap().status, PairingStatus::Pending);
    assert_eq!(h.store.list_devices(&a).await.unwrap().len(), 2, "one device per token");
}

/// Failed attempts are counted per key and window, and a count belongs to its window only.
async fn failed_attempts_are_counted_per_key_and_window(h: Harness) {
    use domain::pairing::lookup_window_end;
    let end = lookup_window_end(h.clock.now());
    assert_eq!(h.store.failed_attempts("k", end).await.unwrap(), 0);
    for n in 1..=3 {
        assert_eq!(h.store.record_failed_attempt("k", end).await.unwrap(), n);
    }
    assert_eq!(h.store.failed_attempts("k", end).await.unwrap(), 3);
    assert_eq!(h.store.failed_attempts("other", end).await.unwrap(), 0, "another key's count leaked");
    h.clock.set(end);
    let next = lookup_window_end(h.clock.now());
    assert_ne!(next, end);
    assert_eq!(h.store.failed_attempts("k", next).await.unwrap(), 0, "the next window starts afresh");
    assert_eq!(h.store.record_failed_attempt("k", next).await.unwrap(), 1);
}

/// A source may start the policy's pairings an hour (`PAIRINGS_PER_SOURCE_PER_HOUR` unless the
/// deployment sets another number); another source is not held back by it, and the next hour
/// starts afresh.
async fn pairings_are_limited_per_source_and_hour(h: Harness) {
    assert_eq!(test_policy().pairings_per_source_per_hour, PAIRINGS_PER_SOURCE_PER_HOUR);
    // Start at the top of an hour, so the whole test stays inside it.
    let now = h.clock.now().as_millis();
    h.clock.set(domain::clock::Timestamp::from_millis((now / 3_600_000 + 1) * 3_600_000));
    for i in 0..h.policy.pairings_per_source_per_hour {
        let (p, _) = new_pairing(&h, "203.0.113.9");
        assert_eq!(h.store.start_pairing(&p).await.unwrap(), PairingStart::Started, "pairing {i}");
    }
    let (over, _) = new_pairing(&h, "203.0.113.9");
    assert_eq!(h.store.start_pairing(&over).await.unwrap(), PairingStart::TooMany);
    assert!(h.store.get_pairing(&over.user_code).await.unwrap().is_none(), "a refused start writes nothing");
    let (other, _) = new_pairing(&h, "203.0.113.10");
    assert_eq!(h.store.start_pairing(&other).await.unwrap(), PairingStart::Started);
    h.clock.advance(Duration::from_secs(3600));
    let (next_hour, _) = new_pairing(&h, "203.0.113.9");
    assert_eq!(h.store.start_pairing(&next_hour).await.unwrap(), PairingStart::Started);
}

/// Issue 59: a company pairing many desktops behind one address raises the number; the store
/// holds the deployment's, not the default.
async fn a_deployment_raises_the_pairings_per_source(h: Harness) {
    assert!(h.policy.pairings_per_source_per_hour > PAIRINGS_PER_SOURCE_PER_HOUR);
    pairings_are_limited_per_source_and_hour(h).await;
}

/// Issue 59: an owner's budget is counted with one conditional write: takers racing for the
/// last tokens of a window never pass the limit together, a refused take counts nothing and
/// says what is left, another key and the next window are untouched. Then instances sharing
/// the store serve one busy owner its limit, and at most a batch each more.
async fn budget_takes_never_pass_the_limit_together(h: Harness) {
    use domain::budget::{Admission, OwnerBudget, Surface};
    use domain::store::Taken;
    let h = Arc::new(h);
    let end = domain::budget::window_end(h.clock.now());
    let racers = 30;
    let barrier = Arc::new(Barrier::new(racers));
    let handles: Vec<_> = (0..racers)
        .map(|_| {
            let (h, barrier) = (Arc::clone(&h), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                h.store.take_attempts("budget:race", end, 7, 100).await.unwrap()
            })
        })
        .collect();
    let mut taken = 0;
    for handle in handles {
        match handle.await.unwrap() {
            Taken::Taken => taken += 1,
            Taken::Short { left } => assert!(left < 7, "refused with {left} left"),
        }
    }
    eprintln!("[{}] budget race: {racers} takes of 7 at once under 100, {taken} taken", h.name());
    assert_eq!(taken, 14, "the count passed the limit (or stopped short of it)");
    assert_eq!(h.store.take_attempts("budget:race", end, 3, 100).await.unwrap(), Taken::Short { left: 2 });
    assert_eq!(h.store.take_attempts("budget:race", end, 2, 100).await.unwrap(), Taken::Taken);
    assert_eq!(h.store.take_attempts("budget:race", end, 1, 100).await.unwrap(), Taken::Short { left: 0 });
    assert_eq!(h.store.take_attempts("budget:other", end, 100, 100).await.unwrap(), Taken::Taken);
    assert_eq!(h.store.take_attempts("budget:other", end, 101, 100).await.unwrap(), Taken::Short { left: 0 });
    let next = end.plus(Duration::from_secs(60));
    assert_eq!(h.store.take_attempts("budget:race", next, 100, 100).await.unwrap(), Taken::Taken);

    // Three instances, each a budget of 300 a minute (a batch of 1), serving one owner at once.
    h.clock.set(end);
    let busy = owner("budget-busy");
    let instances: Vec<_> = (0..3).map(|_| Arc::new(OwnerBudget::new(Surface::Mcp, 300))).collect();
    let handles: Vec<_> = instances
        .iter()
        .map(|b| {
            let (h, b, busy) = (Arc::clone(&h), Arc::clone(b), busy.clone());
            tokio::spawn(async move {
                let mut served = 0;
                for _ in 0..150 {
                    if b.admit(h.store.as_ref(), &busy, h.clock.now()).await.unwrap() == Admission::Serve {
                        served += 1;
                    }
                }
                served
            })
        })
        .collect();
    let mut served = 0;
    for handle in handles {
        served += handle.await.unwrap();
    }
    assert!((300..=303).contains(&served), "served {served} of 450 asked under a limit of 300");
}

const PAIR_RACES: usize = 20;
const PAIR_RACERS: usize = 8;
/// Pairings per mutant and pace (each mutant was caught in every one of 20 at once, on both
/// stores, when this was set).
const MUTANT_RACES: usize = 5;

/// What racing approvals and polls produced, over `PAIR_RACES` pairings.
#[derive(Debug, Default, PartialEq)]
struct PairRace {
    /// Pairings approved by more than one owner.
    double_approved: usize,
    /// Pairings whose pollers did not all end with the same one device (an error, two ids,
    /// or the owner holding other than one device).
    not_redeemed_once: usize,
    /// The first poll that did not end paired, and how it ended.
    first_failure: Option<String>,
}

/// Which steps a pairing race drives: the store's, or a mutant's.
#[derive(Clone, Copy, Debug)]
enum PairSteps {
    /// `decide_pairing` and `poll_pairing`.
    Store,
    /// [`Harness::approve_without_condition`], the store's polls.
    ApproveWithoutCondition,
    /// The store's approvals, [`Harness::redeem_without_condition`].
    RedeemWithoutCondition,
    /// The store's approvals; a poll reads the pairing and creates a fresh device when it says
    /// approved, never marking it redeemed (wrong even one at a time).
    NaiveRedemption,
}

/// Whether the racers of a pairing go at once (behind a barrier) or one after another.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pace {
    AtOnce,
    OneAtATime,
}

async fn approve_with(h: &Harness, steps: PairSteps, code: &UserCode, o: &OwnerId) -> bool {
    let outcome = match steps {
        PairSteps::ApproveWithoutCondition => {
            h.approve_without_condition(code, o, "racing", uuid::Uuid::new_v4()).await.unwrap()
        }
        _ => h.store.decide_pairing(code, o, &approve("racing").0).await.unwrap(),
    };
    matches!(outcome, DecideOutcome::Decided(_))
}

async fn poll_with(h: &Harness, steps: PairSteps, p: &Pairing, hash: &str) -> Result<PollOutcome, String> {
    match steps {
        PairSteps::RedeemWithoutCondition => {
            h.redeem_without_condition(&p.user_code, hash).await.map_err(|e| e.to_string())
        }
        PairSteps::NaiveRedemption => {
            let read = h.store.get_pairing(&p.user_code).await.map_err(|e| e.to_string())?;
            match read.map(|r| r.status) {
                Some(PairingStatus::Approved { owner, device_name, .. }) => {
                    let d =
                        h.store.create_device(&owner, &device_name, &p.token_hash).await.map_err(|e| e.to_string())?;
                    Ok(PollOutcome::Paired { owner, device_id: d.device_id, device_name })
                }
                _ => h.store.poll_pairing(&p.user_code, hash).await.map_err(|e| e.to_string()),
            }
        }
        _ => h.store.poll_pairing(&p.user_code, hash).await.map_err(|e| e.to_string()),
    }
}

/// Runs `run(i)` for `i` in `0..n`, at once behind a barrier or one after another.
async fn racers<T, F, Fut>(n: usize, pace: Pace, run: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let mut out = Vec::new();
    if pace == Pace::OneAtATime {
        for i in 0..n {
            out.push(run(i).await);
        }
        return out;
    }
    let barrier = Arc::new(Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (barrier, work) = (Arc::clone(&barrier), run(i));
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// For each of `races` pairings, `PAIR_RACERS` owners approve through `steps` at `pace`;
/// then `PAIR_RACERS` polls with the device code, the same way.
async fn pair_race(h: &Arc<Harness>, steps: PairSteps, pace: Pace, races: usize) -> PairRace {
    let mut report = PairRace::default();
    // Owners of this race only: a harness may run several.
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    for race in 0..races {
        let (p, hash) = new_pairing(h, &format!("192.0.2.{race}"));
        h.store.start_pairing(&p).await.unwrap();
        let winners: Vec<OwnerId> = racers(PAIR_RACERS, pace, |i| {
            let (h, code, run) = (Arc::clone(h), p.user_code.clone(), run.clone());
            async move {
                let o = owner(&format!("racer-{run}-{race}-{i}"));
                approve_with(&h, steps, &code, &o).await.then_some(o)
            }
        })
        .await
        .into_iter()
        .flatten()
        .collect();
        report.double_approved += usize::from(winners.len() != 1);
        let polls = racers(PAIR_RACERS, pace, |_| {
            let (h, p, hash) = (Arc::clone(h), p.clone(), hash.clone());
            async move { poll_with(&h, steps, &p, &hash).await }
        })
        .await;
        let mut ids = HashSet::new();
        let mut failures = 0;
        for poll in polls {
            match poll {
                Ok(PollOutcome::Paired { device_id, .. }) => drop(ids.insert(device_id)),
                other => {
                    failures += 1;
                    report.first_failure.get_or_insert_with(|| format!("{other:?}").chars().take(160).collect());
                }
            }
        }
        let mut devices = 0;
        for o in &winners {
            devices += h.store.list_devices(o).await.unwrap().len();
        }
        if failures == 0 && (ids.len() != 1 || devices != 1) {
            report.first_failure.get_or_insert_with(|| format!("{} device ids answered, {devices} devices", ids.len()));
        }
        report.not_redeemed_once += usize::from(failures > 0 || ids.len() != 1 || devices != 1);
    }
    report
}

async fn pairing_race_approves_and_redeems_once(h: Harness) {
    let h = Arc::new(h);
    let report = pair_race(&h, PairSteps::Store, Pace::AtOnce, PAIR_RACES).await;
    eprintln!(
        "[{}] pairing race: {PAIR_RACES} pairings x {PAIR_RACERS} owners, then x {PAIR_RACERS} polls: {report:?}",
        h.name()
    );
    assert_eq!(report.double_approved, 0, "a pairing was approved by two owners");
    assert_eq!(report.not_redeemed_once, 0, "a pairing was not redeemed exactly once");
}

/// The mutants that need the race: each is the store's step without its condition. One at a
/// time each must look right (so the race, not a plain bug, is what the at-once run catches);
/// with `PAIR_RACERS` at once the same race must catch each.
async fn pairing_race_catches_the_unconditional_approval_and_redemption_only_at_once(h: Harness) {
    let h = Arc::new(h);
    for (steps, caught) in [
        (PairSteps::ApproveWithoutCondition, (|r: &PairRace| r.double_approved) as fn(&PairRace) -> usize),
        (PairSteps::RedeemWithoutCondition, |r: &PairRace| r.not_redeemed_once),
    ] {
        let alone = pair_race(&h, steps, Pace::OneAtATime, MUTANT_RACES).await;
        let raced = pair_race(&h, steps, Pace::AtOnce, MUTANT_RACES).await;
        eprintln!("[{}] {steps:?}: one at a time {alone:?}, {PAIR_RACERS} at once {raced:?}", h.name());
        assert_eq!(alone, PairRace::default(), "{steps:?} is wrong even one at a time: not a race mutant");
        assert!(caught(&raced) > 0, "{PAIR_RACERS} racers at once did not catch {steps:?}");
    }
}

/// The plain broken variant: a redemption that never marks the pairing redeemed (wrong even
/// one at a time, as the one-at-a-time run shows).
async fn pairing_race_catches_the_naive_redemption(h: Harness) {
    let h = Arc::new(h);
    let alone = pair_race(&h, PairSteps::NaiveRedemption, Pace::OneAtATime, MUTANT_RACES).await;
    eprintln!("[{}] naive pairing redemption, one at a time: {alone:?}", h.name());
    assert!(alone.not_redeemed_once > 0, "the naive redemption was not caught");
}

// ---- tasks a desktop's Graph hands to a chat (domain::dispatch) -----------------------------

/// A run of session 1 of `o`, started on desktop `d`.
async fn running_on(h: &Harness, o: &OwnerId, d: uuid::Uuid, key: &str) -> CommandId {
    let run = queue(h, o, &agent("dispatcher"), key).await;
    assert_eq!(h.store.start_run(o, run.command_id, "exec-1", d).await.unwrap(), StartOutcome::Started);
    run.command_id
}

fn dispatch_req(
    o: &OwnerId,
    d: uuid::Uuid,
    run: CommandId,
    l: ChatLinkId,
    key: &str,
    objective: &str,
) -> domain::dispatch::DispatchTask {
    domain::dispatch::DispatchTask {
        owner: o.clone(),
        device_id: d,
        command_id: run,
        link_id: l,
        objective: objective.into(),
        idempotency_key: IdempotencyKey::parse(key).unwrap(),
        ttl: domain::dispatch::DEFAULT_DISPATCH_TTL,
    }
}

fn refused(o: &domain::dispatch::DispatchOutcome) -> Option<domain::dispatch::DispatchRejection> {
    match o {
        domain::dispatch::DispatchOutcome::Rejected(r) => Some(*r),
        _ => None,
    }
}

async fn allow(h: &Harness, o: &OwnerId, l: ChatLinkId, sessions: Vec<GraphSessionId>) {
    let d = domain::dispatch::DesktopTasks { sessions };
    h.store.set_desktop_tasks(o, l, Some(&d)).await.unwrap().expect("the owner's link");
}

/// A link takes tasks from desktops only once its owner allows it, and only from the sessions
/// named; a device reads only what it handed over; every refusal reads the same and writes
/// nothing.
async fn a_desktop_hands_a_task_only_to_a_link_that_allows_it(h: Harness) {
    use domain::dispatch::{DispatchOutcome, DispatchRejection};
    let (o, stranger) = (owner("dispatch-owner"), owner("dispatch-stranger"));
    project(&h, &o, &[1]).await;
    let (d, d2) = (device(71), device(72));
    let run = running_on(&h, &o, d, "dispatch-run-1").await;
    let l = link(&h, &o).await;
    let ask =
        |key: &str, objective: &str, l: ChatLinkId, dev: uuid::Uuid| dispatch_req(&o, dev, run, l, key, objective);

    let off = h.store.dispatch_task(&ask("dispatch-key-1", "review the draft", l, d)).await.unwrap();
    assert_eq!(refused(&off), Some(DispatchRejection::LinkRefuses), "off by default");
    allow(&h, &o, l, vec![gs(2)]).await;
    let other_session = h.store.dispatch_task(&ask("dispatch-key-1", "review the draft", l, d)).await.unwrap();
    assert_eq!(refused(&other_session), Some(DispatchRejection::LinkRefuses), "only the named sessions");
    let strangers_link = link(&h, &stranger).await;
    allow(&h, &stranger, strangers_link, Vec::new()).await;
    let theirs = h.store.dispatch_task(&ask("dispatch-key-1", "review the draft", strangers_link, d)).await.unwrap();
    assert_eq!(refused(&theirs), Some(DispatchRejection::LinkRefuses), "another owner's link reads as missing");
    let elsewhere = h.store.dispatch_task(&ask("dispatch-key-1", "review the draft", l, d2)).await.unwrap();
    assert_eq!(refused(&elsewhere), Some(DispatchRejection::RunNotRunning), "the run is another desktop's");
    assert!(h.store.list_open_tasks(&o, l, 10).await.unwrap().is_empty(), "refusals wrote nothing");

    allow(&h, &o, l, vec![gs(2), gs(1)]).await;
    let t = match h.store.dispatch_task(&ask("dispatch-key-1", "review the draft", l, d)).await.unwrap() {
        DispatchOutcome::Assigned(t) => t,
        other => panic!("dispatch failed: {other:?}"),
    };
    let origin = t.origin.clone().expect("a dispatched task keeps its origin");
    assert_eq!((origin.device_id, &origin.graph_session_id, origin.command_id), (d, &gs(1), run));
    assert_eq!(t.expires_at, h.now().plus(domain::dispatch::DEFAULT_DISPATCH_TTL));
    let listed = h.store.list_open_tasks(&o, l, 10).await.unwrap();
    assert_eq!(listed.iter().map(|t| t.task_id).collect::<Vec<_>>(), [t.task_id], "the chat lists it");
    assert_eq!(listed[0].origin.as_ref(), Some(&origin), "with its origin");

    let again = h.store.dispatch_task(&ask("dispatch-key-1", "review the draft", l, d)).await.unwrap();
    assert!(matches!(again, DispatchOutcome::Replayed(ref r) if r.task_id == t.task_id), "{again:?}");
    let changed = h.store.dispatch_task(&ask("dispatch-key-1", "another objective", l, d)).await.unwrap();
    assert_eq!(refused(&changed), Some(DispatchRejection::IdempotencyMismatch));
    assert_eq!(changed.clone(), DispatchOutcome::Rejected(DispatchRejection::IdempotencyMismatch));
    assert_eq!(DispatchRejection::IdempotencyMismatch.to_string(), IDEMPOTENCY_MISMATCH);

    assert!(h.store.dispatched_task(&o, d, l, t.task_id).await.unwrap().is_some());
    assert!(h.store.dispatched_task(&o, d2, l, t.task_id).await.unwrap().is_none(), "another desktop's");
    assert!(h.store.dispatched_task(&stranger, d, l, t.task_id).await.unwrap().is_none(), "another owner's");
    let owners = assign(&h, &o, l, "the owner's own").await;
    assert!(h.store.dispatched_task(&o, d, l, owners).await.unwrap().is_none(), "not handed over by it");

    h.store.set_desktop_tasks(&o, l, None).await.unwrap().unwrap();
    let stopped = h.store.dispatch_task(&ask("dispatch-key-2", "one more", l, d)).await.unwrap();
    assert_eq!(refused(&stopped), Some(DispatchRejection::LinkRefuses), "the owner stopped it");
    assert!(h.store.get_task(&o, l, t.task_id).await.unwrap().is_some(), "what was handed over stays");
    allow(&h, &o, l, Vec::new()).await;
    h.store.delete_link(&o, l).await.unwrap().unwrap();
    let deleted = h.store.dispatch_task(&ask("dispatch-key-3", "one more", l, d)).await.unwrap();
    assert_eq!(refused(&deleted), Some(DispatchRejection::LinkRefuses), "a deleted link");
    let read = h.store.dispatched_task(&o, d, l, t.task_id).await.unwrap().expect("still the desktop's");
    assert_eq!(read.status, TaskStatus::Cancelled, "the link's deletion cancelled it, and the desktop can tell");
}

/// A run hands out at most its share, the tasks are ordinary tasks (claim, submit, expiry),
/// and when the run ends its open tasks are cancelled (once); its key still replays after.
async fn a_runs_tasks_are_bounded_and_end_with_it(h: Harness) {
    use domain::dispatch::{DispatchOutcome, DispatchRejection, MAX_TASKS_PER_RUN};
    let o = owner("dispatch-bounds");
    project(&h, &o, &[1]).await;
    let d = device(73);
    let run = running_on(&h, &o, d, "dispatch-run-2").await;
    let l = link(&h, &o).await;
    allow(&h, &o, l, Vec::new()).await;
    let mut tasks = Vec::new();
    for i in 0..MAX_TASKS_PER_RUN {
        let mut req = dispatch_req(&o, d, run, l, &format!("bounded-key-{i:03}"), &format!("step {i}"));
        if i == 2 {
            req.ttl = domain::dispatch::MIN_DISPATCH_TTL;
        }
        match h.store.dispatch_task(&req).await.unwrap() {
            DispatchOutcome::Assigned(t) => tasks.push(t.task_id),
            other => panic!("dispatch {i} failed: {other:?}"),
        }
    }
    let over = h.store.dispatch_task(&dispatch_req(&o, d, run, l, "bounded-key-over", "one too many")).await.unwrap();
    assert_eq!(refused(&over), Some(DispatchRejection::TooManyForRun));
    assert_eq!(DispatchRejection::TooManyForRun.to_string(), domain::dispatch::TOO_MANY_FOR_RUN);

    // Task 0 is answered, task 1 is claimed, task 2 (one minute) expires.
    let c0 = claim(&h, &o, l, tasks[0]).await;
    let done = submit_req(&o, l, tasks[0], c0, SubmitStatus::Completed, "looks good");
    assert_eq!(h.store.submit_task(&done).await.unwrap(), SubmitOutcome::Accepted);
    claim(&h, &o, l, tasks[1]).await;
    h.clock.advance(Duration::from_secs(61));
    let read = h.store.dispatched_task(&o, d, l, tasks[2]).await.unwrap().unwrap();
    assert_eq!(read.status_at(h.now()), TaskStatus::Expired);

    let exec = "exec-1";
    let open_before = h.store.list_open_tasks(&o, l, 100).await.unwrap().len();
    assert_eq!(open_before, MAX_TASKS_PER_RUN as usize - 2, "open: all but the answered and the expired");
    let ended = h.store.complete_run(&o, run, &completion(exec, FinalStatus::Failed, None)).await.unwrap();
    assert!(matches!(ended, CompleteOutcome::Recorded(_)), "{ended:?}");
    assert!(h.store.list_open_tasks(&o, l, 100).await.unwrap().is_empty(), "the run's end cancelled them");
    let again = h.store.complete_run(&o, run, &completion(exec, FinalStatus::Failed, None)).await.unwrap();
    assert!(matches!(again, CompleteOutcome::Replayed(_)), "a repeat of the completion: {again:?}");
    let status = |t: TaskId| {
        let h = &h;
        let o = o.clone();
        async move { h.store.dispatched_task(&o, d, l, t).await.unwrap().unwrap().status_at(h.now()) }
    };
    assert_eq!(status(tasks[0]).await, TaskStatus::Completed);
    assert_eq!(status(tasks[1]).await, TaskStatus::Cancelled, "the claimed one too");
    assert_eq!(status(tasks[2]).await, TaskStatus::Expired);
    assert_eq!(status(tasks[3]).await, TaskStatus::Cancelled);

    let late = h.store.dispatch_task(&dispatch_req(&o, d, run, l, "bounded-key-late", "after the end")).await.unwrap();
    assert_eq!(refused(&late), Some(DispatchRejection::RunNotRunning), "the run's capability is dead");
    let retry = h.store.dispatch_task(&dispatch_req(&o, d, run, l, "bounded-key-000", "step 0")).await.unwrap();
    assert!(matches!(retry, DispatchOutcome::Replayed(ref t) if t.task_id == tasks[0]), "{retry:?}");
}

/// Dispatches of one run racing for its last places: exactly as many as it may hand out land,
/// however many ask at once.
async fn dispatch_race_never_passes_the_runs_count(h: Harness) {
    use domain::dispatch::{DispatchOutcome, DispatchRejection, MAX_TASKS_PER_RUN};
    let h = Arc::new(h);
    let o = owner("dispatch-race");
    project(&h, &o, &[1]).await;
    let d = device(74);
    let run = running_on(&h, &o, d, "dispatch-run-3").await;
    let l = link(&h, &o).await;
    allow(&h, &o, l, Vec::new()).await;
    let askers = MAX_TASKS_PER_RUN as usize + 10;
    let barrier = Arc::new(Barrier::new(askers));
    let handles: Vec<_> = (0..askers)
        .map(|i| {
            let (h, o, barrier) = (Arc::clone(&h), o.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                h.store.dispatch_task(&dispatch_req(&o, d, run, l, &format!("race-key-{i:03}"), "race")).await.unwrap()
            })
        })
        .collect();
    let (mut assigned, mut over) = (0, 0);
    for handle in handles {
        match handle.await.unwrap() {
            DispatchOutcome::Assigned(_) => assigned += 1,
            DispatchOutcome::Rejected(DispatchRejection::TooManyForRun) => over += 1,
            other => panic!("unexpected: {other:?}"),
        }
    }
    eprintln!("[{}] dispatch race: {askers} at once, {assigned} assigned, {over} refused", h.name());
    assert_eq!(assigned, MAX_TASKS_PER_RUN as usize, "the run's count held");
    assert_eq!(h.store.list_open_tasks(&o, l, 100).await.unwrap().len(), MAX_TASKS_PER_RUN as usize);
}

suite! {
    a_desktop_hands_a_task_only_to_a_link_that_allows_it,
    a_runs_tasks_are_bounded_and_end_with_it,
    dispatch_race_never_passes_the_runs_count,
    pairing_follows_the_device_grant,
    a_token_that_belongs_to_a_device_can_never_be_paired,
    failed_attempts_are_counted_per_key_and_window,
    budget_takes_never_pass_the_limit_together,
    pairings_are_limited_per_source_and_hour,
    a_deployment_raises_the_pairings_per_source with super::busy_pairing_policy(),
    pairing_race_approves_and_redeems_once,
    pairing_race_catches_the_unconditional_approval_and_redemption_only_at_once,
    pairing_race_catches_the_naive_redemption,
    a_clients_use_is_recorded_once_and_read_back,
    a_documents_last_good_copy_is_the_latest_fetched,
    chat_connections_keep_first_and_last_per_owner,
    hosts_seen_keep_the_latest_handshake_per_client_and_name,
    claim_race_conditional_write_never_double_claims,
    claim_race_catches_the_naive_read_then_write,
    same_link_claiming_twice_gets_the_same_claim,
    lease_takeover_fences_out_the_stale_claim with super::lease_policy(),
    late_submit_that_was_not_taken_over_is_accepted with super::lease_policy(),
    identical_submit_replays_and_a_different_one_is_rejected,
    submit_after_cancel_is_rejected,
    submit_with_a_claim_that_never_held_the_task_is_rejected,
    expired_tasks_read_as_expired_and_reading_writes_nothing,
    open_task_list_is_the_links_open_tasks_oldest_first,
    assign_is_idempotent_by_key_and_objective,
    artifacts_are_idempotent_and_fenced,
    run_idempotency_under_concurrent_retries,
    replay_survives_a_consent_change,
    runs_are_visible_only_to_their_agent,
    consent_is_checked_at_queue_time,
    sync_replaces_the_shared_set,
    queue_lists_oldest_first_and_only_queued,
    own_runs_ahead_are_the_agents_own_queued_runs_before_it,
    cancel_queued_is_immediate_and_the_desktop_never_starts_it,
    cancel_running_sets_the_flag_and_cancel_wins_the_completion,
    the_owner_cancels_any_of_their_runs_by_the_agents_rule,
    complete_is_idempotent_by_hash,
    progress_rides_on_the_heartbeat_under_its_execution_only,
    a_desktops_own_run_is_found_behind_another_sessions_backlog,
    one_desktop_runs_several_at_once_each_cancelled_on_its_own,
    a_queued_command_can_be_refused_by_the_relay_but_not_completed_unstarted,
    relay_restart_failure_is_recorded,
    a_silent_relay_reads_as_desktop_stopped_reporting,
    expired_commands_read_as_expired_and_cannot_start,
    big_results_round_trip,
    request_counts_on_the_common_path,
    device_tokens_authenticate_until_revoked,
    device_last_seen_is_recorded_at_most_once_a_minute,
    device_reports_are_kept_when_they_change,
    a_desktops_offline_mark_holds_until_its_next_sync,
    assign_idempotency_under_concurrent_retries,
    link_task_pages_are_newest_first_with_a_cursor,
    deleting_a_link_cancels_its_open_tasks_and_hides_all_of_them,
    subscriptions_are_stored_on_the_link,
    the_owner_sees_every_agents_runs_newest_first,
    two_devices_sharing_one_project_keep_their_own_lists,
    revoking_a_device_withdraws_its_shares,
    concurrent_syncs_of_many_devices_never_lose_a_list,
    a_sync_writes_its_project_only_when_something_changed,
    completed_runs_keep_the_sessions_recent_durations,
    lists_hold_every_item_whatever_their_size,
    the_last_delivery_is_the_latest_whatever_the_order_of_the_writes,
    a_task_holds_a_bounded_number_and_size_of_artifacts,
    shares_past_the_items_size_are_refused_and_change_nothing,
}

/// A submit request (the store takes one struct).
fn submit_req(
    owner: &domain::ids::OwnerId,
    link_id: domain::ids::ChatLinkId,
    task_id: domain::ids::TaskId,
    claim_id: domain::ids::ClaimId,
    status: domain::tasks::SubmitStatus,
    result: &str,
) -> domain::tasks::SubmitTask {
    domain::tasks::SubmitTask { owner: owner.clone(), link_id, task_id, claim_id, status, result: result.to_owned() }
}
