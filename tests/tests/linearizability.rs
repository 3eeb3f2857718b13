//! Concurrent histories of one chat task, checked for linearizability (issue 26): several
//! threads claim, submit (with claim ids other threads learned), read, and one moves the clock
//! past the lease, all at once, on each store. Every operation is recorded with its real
//! invocation and response instants; the checker searches for one order of the operations that
//! respects real time (an operation that ended before another began comes first) and in which
//! the task model (SPEC §4: one live claim, takeover after the lease, fenced and idempotent
//! submits) gives exactly the answers the store gave. A deliberately broken claim — read, then
//! write without a condition (`Harness::naive_claim`) — must produce a history with no such
//! order.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use domain::ids::{ChatLinkId, ClaimId, IdempotencyKey, OwnerId, TaskId};
use domain::tasks::{
    AssignOutcome, AssignTask, ClaimOutcome, ClaimRejection, SubmitOutcome, SubmitRejection, SubmitStatus, SubmitTask,
    TaskStatus,
};
use foundry_tests::Harness;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Claim,
    Submit { claim: String, result: u8 },
    Read,
    Advance,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Claimed(String),
    Replayed(String),
    NotClaimable(TaskStatus),
    /// The naive claim's "not queued any more" (the real store never answers it).
    Busy,
    Submit(SubmitOutcome),
    Status(TaskStatus),
    Done,
}

#[derive(Debug, Clone)]
struct Event {
    call: Call,
    reply: Reply,
    start: Instant,
    end: Instant,
}

/// The task as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    status: TaskStatus,
    current: Option<String>,
    /// Clock moves so far, and the one at which the current claim was made.
    epoch: u32,
    claimed_epoch: u32,
    finished: Option<(String, u8)>,
}

/// The states the model may be in after `call` answered `reply` in `s`, none if it cannot.
///
/// A store reads the clock when a call starts and decides with that time, possibly after
/// waiting for a lock: a claim decides at some clock value between the moves that had ended
/// before it began (`epoch_at_start`) and the current one. Each is tried.
fn apply(s: &State, call: &Call, reply: &Reply, epoch_at_start: u32) -> Vec<State> {
    let mut n = s.clone();
    match (call, reply) {
        (Call::Claim, _) => (epoch_at_start..=s.epoch)
            .filter_map(|at| {
                let live = s.status == TaskStatus::Claimed && s.claimed_epoch == at;
                let mut n = s.clone();
                match reply {
                    Reply::Replayed(id) if live && s.current.as_ref() == Some(id) => Some(n),
                    Reply::Claimed(id)
                        if !live
                            && matches!(s.status, TaskStatus::Queued | TaskStatus::Claimed)
                            && s.current.as_ref() != Some(id) =>
                    {
                        n.status = TaskStatus::Claimed;
                        n.current = Some(id.clone());
                        n.claimed_epoch = at;
                        Some(n)
                    }
                    Reply::NotClaimable(st) if *st == s.status && *st == TaskStatus::Completed => Some(n),
                    Reply::Busy if s.status != TaskStatus::Queued => Some(n),
                    _ => None,
                }
            })
            .collect(),
        (Call::Submit { claim, result }, Reply::Submit(out)) => {
            let ours = s.current.as_ref() == Some(claim);
            let want = match (&s.finished, s.status) {
                (Some((_, r)), _) if ours => {
                    if r == result {
                        SubmitOutcome::Replayed
                    } else {
                        SubmitOutcome::Rejected(SubmitRejection::DifferentResult)
                    }
                }
                (_, TaskStatus::Queued) => SubmitOutcome::Rejected(SubmitRejection::NotClaimed),
                _ if !ours => SubmitOutcome::Rejected(SubmitRejection::StaleClaim),
                _ => {
                    n.status = TaskStatus::Completed;
                    n.finished = Some((claim.clone(), *result));
                    SubmitOutcome::Accepted
                }
            };
            if want == *out { vec![n] } else { Vec::new() }
        }
        (Call::Read, Reply::Status(st)) if *st == s.status => vec![n],
        (Call::Advance, Reply::Done) => {
            n.epoch += 1;
            vec![n]
        }
        _ => Vec::new(),
    }
}

/// Whether some real-time-respecting order of `history` is one the model allows (a depth-first
/// search over the operations that may come next, remembering dead ends).
fn linearizable(history: &[Event]) -> bool {
    fn go(h: &[Event], at_start: &[u32], done: u64, s: &State, seen: &mut HashSet<(u64, State)>) -> bool {
        if done.count_ones() as usize == h.len() {
            return true;
        }
        if !seen.insert((done, s.clone())) {
            return false;
        }
        for (i, e) in h.iter().enumerate() {
            if done & (1 << i) != 0 {
                continue;
            }
            // `e` may come next only if no other pending operation ended before it began.
            let blocked = h.iter().enumerate().any(|(j, o)| j != i && done & (1 << j) == 0 && o.end < e.start);
            if blocked {
                continue;
            }
            for next in apply(s, &e.call, &e.reply, at_start[i]) {
                if go(h, at_start, done | (1 << i), &next, seen) {
                    return true;
                }
            }
        }
        false
    }
    assert!(history.len() <= 64);
    let start = State { status: TaskStatus::Queued, current: None, epoch: 0, claimed_epoch: 0, finished: None };
    // For each call, the clock moves that had surely happened when it began.
    let at_start: Vec<u32> = history
        .iter()
        .map(|e| history.iter().filter(|o| o.call == Call::Advance && o.end < e.start).count() as u32)
        .collect();
    go(history, &at_start, 0, &start, &mut HashSet::new())
}

/// One concurrent history on a fresh task: `threads` workers doing `per_thread` random calls
/// each (worker 0 moves the clock once), with `naive` claims instead of the store's.
async fn history(h: &Arc<Harness>, threads: usize, per_thread: usize, naive: bool, seed: u64) -> Vec<Event> {
    let owner = OwnerId::new(format!("lin-{}", uuid::Uuid::new_v4().simple())).unwrap();
    let project = h.store.create_project(&owner, "Linearizability").await.unwrap();
    let link: ChatLinkId = h.store.create_link(&owner, project.project_id, "l").await.unwrap().unwrap().link_id;
    let req = AssignTask {
        owner: owner.clone(),
        link_id: link,
        objective: "race".into(),
        idempotency_key: IdempotencyKey::parse(&format!("linearizability-{seed}")).unwrap(),
    };
    let assigned = h.store.assign_task(&req).await.unwrap();
    let AssignOutcome::Assigned(task) = assigned else { panic!("assign: {assigned:?}") };
    let task: TaskId = task.task_id;
    let known: Arc<Mutex<Vec<String>>> = Arc::default();
    let events: Arc<Mutex<Vec<Event>>> = Arc::default();
    let barrier = Arc::new(tokio::sync::Barrier::new(threads));
    let mut workers = Vec::new();
    for w in 0..threads {
        let (h, owner, known, events, barrier) =
            (Arc::clone(h), owner.clone(), Arc::clone(&known), Arc::clone(&events), Arc::clone(&barrier));
        workers.push(tokio::spawn(async move {
            // A small xorshift per worker: the calls are random but replayable by seed.
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(w as u64 + 1) | 1;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            barrier.wait().await;
            for i in 0..per_thread {
                let call = match (naive, w, i, next() % 4) {
                    (true, ..) => Call::Claim,
                    (false, 0, 1, _) => Call::Advance,
                    (false, _, _, 0 | 1) => Call::Claim,
                    (false, _, _, 2) => {
                        let k = known.lock().unwrap().clone();
                        let claim = if k.is_empty() {
                            ClaimId::generate().to_string()
                        } else {
                            k[(next() as usize) % k.len()].clone()
                        };
                        Call::Submit { claim, result: (next() % 2) as u8 }
                    }
                    _ => Call::Read,
                };
                let start = Instant::now();
                let reply = match &call {
                    Call::Claim if naive => match h.naive_claim(&owner, link, task).await.unwrap() {
                        Some(id) => Reply::Claimed(id.to_string()),
                        None => Reply::Busy,
                    },
                    Call::Claim => match h.store.claim_task(&owner, link, task).await.unwrap() {
                        ClaimOutcome::Claimed { claim_id, .. } => Reply::Claimed(claim_id.to_string()),
                        ClaimOutcome::Replayed { claim_id, .. } => Reply::Replayed(claim_id.to_string()),
                        ClaimOutcome::Rejected(ClaimRejection::NotClaimable(s)) => Reply::NotClaimable(s),
                        ClaimOutcome::Rejected(r) => panic!("{r:?}"),
                    },
                    Call::Submit { claim, result } => {
                        let req = SubmitTask {
                            owner: owner.clone(),
                            link_id: link,
                            task_id: task,
                            claim_id: ClaimId::parse("claim_id", claim).unwrap(),
                            status: SubmitStatus::Completed,
                            result: format!("result {result}"),
                        };
                        Reply::Submit(h.store.submit_task(&req).await.unwrap())
                    }
                    Call::Read => {
                        let t = h.store.get_task(&owner, link, task).await.unwrap().unwrap();
                        Reply::Status(t.status_at(h.now()))
                    }
                    Call::Advance => {
                        h.advance(h.policy.lease + Duration::from_secs(1));
                        Reply::Done
                    }
                };
                let end = Instant::now();
                if let Reply::Claimed(id) | Reply::Replayed(id) = &reply {
                    known.lock().unwrap().push(id.clone());
                }
                events.lock().unwrap().push(Event { call, reply, start, end });
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    Arc::try_unwrap(events).unwrap().into_inner().unwrap()
}

/// Concurrent histories in the test command, on the embedded store and on DynamoDB; each has
/// `THREADS` callers making `CALLS_PER_THREAD` calls.
const EMBEDDED_HISTORIES: u64 = 200;
const DYNAMODB_HISTORIES: u64 = 20;
const THREADS: usize = 4;
const CALLS_PER_THREAD: usize = 3;

async fn every_history_is_linearizable(h: Harness, histories: u64) {
    let h = Arc::new(h);
    let seed0 = std::env::var("FOUNDRY_LIN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand_seed);
    let mut ops = 0;
    for k in 0..histories {
        let seed = seed0.wrapping_add(k);
        let events = history(&h, THREADS, CALLS_PER_THREAD, false, seed).await;
        ops += events.len();
        assert!(linearizable(&events), "{}: not linearizable (FOUNDRY_LIN_SEED={seed}):\n{}", h.name(), show(&events));
    }
    eprintln!("{}: {histories} concurrent histories, {ops} operations, all linearizable (seed {seed0})", h.name());
}

/// The history by start time, in milliseconds from its first call.
fn show(events: &[Event]) -> String {
    let mut v: Vec<&Event> = events.iter().collect();
    v.sort_by_key(|e| e.start);
    let t0 = v.first().map(|e| e.start).unwrap_or_else(Instant::now);
    v.iter()
        .map(|e| {
            let ms = |t: Instant| t.duration_since(t0).as_secs_f64() * 1000.0;
            format!("  [{:8.3} – {:8.3} ms] {:?} → {:?}", ms(e.start), ms(e.end), e.call, e.reply)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn rand_seed() -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).unwrap();
    u64::from_le_bytes(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_task_histories_are_linearizable() {
    every_history_is_linearizable(Harness::embedded(foundry_tests::test_policy()), EMBEDDED_HISTORIES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamodb_task_histories_are_linearizable() {
    let Some(h) = Harness::dynamo(foundry_tests::test_policy()).await else { return };
    every_history_is_linearizable(h, DYNAMODB_HISTORIES).await;
}

/// docs/results.md's counts of the histories are these tests' own.
#[test]
fn the_documented_histories_are_these() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/results.md")).unwrap();
    let ops = |n: u64| foundry_tests::grouped(n * (THREADS * CALLS_PER_THREAD) as u64);
    let said = format!(
        "Test command: {EMBEDDED_HISTORIES} histories ({} operations) on the embedded store, {DYNAMODB_HISTORIES} ({}) on DynamoDB",
        ops(EMBEDDED_HISTORIES),
        ops(DYNAMODB_HISTORIES)
    );
    assert!(foundry_tests::says(&doc, &said), "docs/results.md does not say {said:?}");
}

/// The checker is not vacuous: the read-then-write claim yields two claims in a history where
/// the clock never moved, which no order explains.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_catches_the_naive_claim() {
    let h = Arc::new(Harness::embedded(foundry_tests::test_policy()));
    for k in 0..20 {
        let events = history(&h, 4, 1, true, k).await;
        if !linearizable(&events) {
            eprintln!("caught in history {k}:\n{}", show(&events));
            return;
        }
    }
    panic!("20 histories of naive claims were all linearizable: the checker cannot see double claims");
}

/// Hand-made histories: a lost update is refused, the same calls in an order that works are
/// accepted.
#[test]
fn the_checker_orders_by_real_time() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let ev = |call: Call, reply: Reply, s: u64, e: u64| Event { call, reply, start: at(s), end: at(e) };
    // Two overlapping claims answering the same claim: one claims, the other replays.
    let ok = [ev(Call::Claim, Reply::Claimed("a".into()), 0, 10), ev(Call::Claim, Reply::Replayed("a".into()), 5, 15)];
    assert!(linearizable(&ok));
    // Two claims with different ids and no clock move: impossible in any order.
    let bad = [ev(Call::Claim, Reply::Claimed("a".into()), 0, 10), ev(Call::Claim, Reply::Claimed("b".into()), 5, 15)];
    assert!(!linearizable(&bad));
    // A replay that ended before the first claim began cannot be explained.
    let early = [ev(Call::Claim, Reply::Replayed("a".into()), 0, 1), ev(Call::Claim, Reply::Claimed("a".into()), 2, 3)];
    assert!(!linearizable(&early));
}
