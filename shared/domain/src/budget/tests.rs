use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;

use super::*;

/// The shared count as the stores keep it, with its writes counted.
#[derive(Default)]
struct Counts {
    counts: Mutex<HashMap<(String, i64), u32>>,
    writes: AtomicU32,
}

#[async_trait]
impl LimitAttempts for Counts {
    async fn failed_attempts(&self, _: &str, _: Timestamp) -> StoreResult<u32> {
        unreachable!("a budget never reads")
    }
    async fn record_failed_attempt(&self, _: &str, _: Timestamp) -> StoreResult<u32> {
        unreachable!("a budget takes")
    }
    async fn take_attempts(&self, key: &str, window_end: Timestamp, n: u32, limit: u32) -> StoreResult<Taken> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut counts = self.counts.lock().unwrap();
        let count = counts.entry((key.to_owned(), window_end.as_millis())).or_default();
        if *count + n <= limit {
            *count += n;
            Ok(Taken::Taken)
        } else {
            Ok(Taken::Short { left: limit - *count })
        }
    }
}

fn owner(s: &str) -> OwnerId {
    OwnerId::new(s).unwrap()
}

/// 12:00:00.000 UTC on some day: a window starts here.
const MINUTE: i64 = 1_780_000_020_000;

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(MINUTE + ms)
}

async fn serve_all(b: &OwnerBudget, store: &Counts, who: &OwnerId, n: u32, now: Timestamp) -> u32 {
    let mut served = 0;
    for _ in 0..n {
        if b.admit(store, who, now).await.unwrap() == Admission::Serve {
            served += 1;
        }
    }
    served
}

#[tokio::test]
async fn a_quiet_owner_costs_no_write() {
    assert_eq!(MINUTE % 60_000, 0);
    let (b, store) = (OwnerBudget::new(Surface::Mcp, 6_000), Counts::default());
    assert_eq!(b.batch(), 20);
    assert_eq!(serve_all(&b, &store, &owner("quiet"), 20, at(0)).await, 20);
    assert_eq!(store.writes.load(Ordering::Relaxed), 0, "a batch a minute is served without asking");
    // The next minute starts a fresh batch.
    assert_eq!(serve_all(&b, &store, &owner("quiet"), 20, at(60_000)).await, 20);
    assert_eq!(store.writes.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn one_instance_serves_exactly_the_limit_then_refuses_until_the_minute_ends() {
    let (b, store) = (OwnerBudget::new(Surface::Relay, 600), Counts::default());
    assert_eq!(b.batch(), 2);
    let busy = owner("busy");
    assert_eq!(serve_all(&b, &store, &busy, 600, at(12_300)).await, 600);
    assert_eq!(b.admit(&store, &busy, at(12_300)).await.unwrap(), Admission::Refuse { retry_after_s: 48, first: true });
    assert_eq!(serve_all(&b, &store, &busy, 400, at(12_300)).await, 0);
    // A batch at a time, the first batch paid with the second: a write per two requests.
    assert!(store.writes.load(Ordering::Relaxed) <= 300 + 2, "{:?}", store.writes);
    assert_eq!(
        b.admit(&store, &busy, at(12_300)).await.unwrap(),
        Admission::Refuse { retry_after_s: 48, first: false }
    );
    assert_eq!(b.admit(&store, &busy, at(59_001)).await.unwrap(), Admission::Refuse { retry_after_s: 1, first: false });
    // Another owner is not touched by the busy one's minute.
    assert_eq!(serve_all(&b, &store, &owner("other"), 600, at(12_300)).await, 600);
    // Nor the same owner on another surface.
    let panel = OwnerBudget::new(Surface::Owner, 600);
    assert_eq!(serve_all(&panel, &store, &busy, 600, at(12_300)).await, 600);
    // The next minute serves again.
    assert_eq!(b.admit(&store, &busy, at(60_000)).await.unwrap(), Admission::Serve);
}

#[tokio::test]
async fn many_instances_together_serve_the_limit_and_at_most_a_batch_each_more() {
    let store = Counts::default();
    let instances: Vec<_> = (0..10).map(|_| OwnerBudget::new(Surface::Mcp, 6_000)).collect();
    let busy = owner("busy");
    let mut served = 0;
    for i in 0..20_000 {
        if instances[i % 10].admit(&store, &busy, at(1_000)).await.unwrap() == Admission::Serve {
            served += 1;
        }
    }
    assert!((6_000..=6_000 + 10 * 20).contains(&served), "{served}");
    // Instances that each served fewer than a batch served it unasked: the bound's slack.
    let store = Counts::default();
    let many: Vec<_> = (0..400).map(|_| OwnerBudget::new(Surface::Mcp, 6_000)).collect();
    let mut served = 0;
    for b in &many {
        served += serve_all(b, &store, &busy, 19, at(1_000)).await;
    }
    assert_eq!((served, store.writes.load(Ordering::Relaxed)), (7_600, 0));
}

#[tokio::test]
async fn a_limit_below_a_batch_is_still_the_limit() {
    let (b, store) = (OwnerBudget::new(Surface::Mcp, 1), Counts::default());
    assert_eq!(serve_all(&b, &store, &owner("x"), 5, at(0)).await, 1);
    let (b, store) = (OwnerBudget::new(Surface::Mcp, 3), Counts::default());
    assert_eq!(serve_all(&b, &store, &owner("x"), 5, at(0)).await, 3);
    // The last tokens, fewer than a batch, are taken too.
    let (b, store) = (OwnerBudget::new(Surface::Mcp, 601), Counts::default());
    assert_eq!(serve_all(&b, &store, &owner("x"), 700, at(0)).await, 601);
}

#[test]
fn the_refusal_names_the_limit_and_the_wait() {
    assert_eq!(
        refusal_message(6_000, 17),
        "too many requests for this account: at most 6000 a minute; try again in 17 s"
    );
    assert_eq!(budget_key(Surface::Relay, &owner("o-1")), "budget:relay:o-1");
}

#[tokio::test]
async fn an_instance_forgets_the_owners_of_past_minutes() {
    let (b, store) = (OwnerBudget::new(Surface::Mcp, 6_000), Counts::default());
    for i in 0..REMEMBERED_OWNERS {
        assert_eq!(b.admit(&store, &owner(&format!("o{i}")), at(0)).await.unwrap(), Admission::Serve);
    }
    assert_eq!(b.local.lock().unwrap().map.len(), REMEMBERED_OWNERS);
    // The next minute's first new owner: those of the last minute are forgotten.
    assert_eq!(b.admit(&store, &owner("late"), at(60_000)).await.unwrap(), Admission::Serve);
    assert_eq!(b.local.lock().unwrap().map.len(), 1);
}
