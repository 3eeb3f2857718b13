//! Events: every change of a task or run leaves its events in the outbox in the same
//! transaction ([`EventOutbox`]), and the last webhook delivery per link ([`RecordDeliveries`]).

use async_trait::async_trait;
use rusqlite::{Connection, named_params, params};

use domain::clock::Timestamp;
use domain::events::{DeliveryOutcome, Event, OutboxEntry, derive_run, derive_task};
use domain::ids::{ChatLinkId, OwnerId};
use domain::runs::Run;
use domain::store::{EventOutbox, RecordDeliveries, StoreResult};
use domain::tasks::Task;

use crate::SqliteStore;
use crate::codec::{col, get_run_tx, get_task_tx, json, outbox_row};

/// Inserts events into the outbox (a redelivered id is ignored: same change, same event).
pub(crate) fn record_events(tx: &Connection, events: &[Event], now: Timestamp) -> rusqlite::Result<()> {
    for e in events {
        tx.prepare_cached(
            "INSERT OR IGNORE INTO event_outbox (event_id, owner, body, created_at, state, attempts, next_attempt_at) \
             VALUES (:id, :owner, :body, :now, 'pending', 0, :now)",
        )?
        .execute(named_params! {":id": e.id, ":owner": e.data.owner, ":body": e.to_json(), ":now": now.as_millis()})?;
    }
    Ok(())
}

/// A change to the run `id` in the caller's transaction. `f` gets the run as it is: inside one
/// `IMMEDIATE` transaction that is the image its write's conditions see, so a refusal is
/// classified on it without reading again. `f` answers with its outcome and the run as it became
/// (from the write's `RETURNING`; `None` when nothing changed), and the events that change means
/// go to the outbox in the same transaction: the outbox can never disagree with the data.
pub(crate) fn change_run<T>(
    tx: &crate::pool::Tx<'_>,
    id: &str,
    now: Timestamp,
    f: impl FnOnce(Option<&Run>) -> rusqlite::Result<(T, Option<Run>)>,
) -> rusqlite::Result<T> {
    let old = get_run_tx(tx, id)?;
    let (out, new) = f(old.as_ref())?;
    if let Some(new) = new.filter(|n| old.as_ref() != Some(n)) {
        record_events(tx, &derive_run(old.as_ref(), Some(&new)), now)?;
        tx.rings.note_run(old.as_ref(), &new);
    }
    Ok(out)
}

/// Like [`change_run`], for the task `task` of `link`.
pub(crate) fn change_task<T>(
    tx: &crate::pool::Tx<'_>,
    link: &str,
    task: &str,
    now: Timestamp,
    f: impl FnOnce(Option<&Task>) -> rusqlite::Result<(T, Option<Task>)>,
) -> rusqlite::Result<T> {
    let old = get_task_tx(tx, link, task)?;
    let (out, new) = f(old.as_ref())?;
    if let Some(new) = new.filter(|n| old.as_ref() != Some(n)) {
        note_task(tx, old.as_ref(), &new, now)?;
    }
    Ok(out)
}

/// What a task's change means, in the caller's transaction: its events to the outbox, and the
/// desktop's ring when a task a Graph handed over ended.
pub(crate) fn note_task(
    tx: &crate::pool::Tx<'_>,
    old: Option<&Task>,
    new: &Task,
    now: Timestamp,
) -> rusqlite::Result<()> {
    record_events(tx, &derive_task(old, Some(new)), now)?;
    tx.rings.note_task(old, new);
    Ok(())
}

#[async_trait]
impl RecordDeliveries for SqliteStore {
    async fn record_delivery(&self, owner: &OwnerId, link: ChatLinkId, outcome: &DeliveryOutcome) -> StoreResult<()> {
        let (owner, body, at) = (owner.as_str().to_owned(), json(outcome), outcome.at.as_millis());
        self.bookkeeping(move |tx, _| {
            // An older outcome than the one kept (racing deliveries) changes nothing.
            tx.prepare_cached(
                "INSERT INTO deliveries (owner, link_id, body, at) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (owner, link_id) DO UPDATE SET body = excluded.body, at = excluded.at \
                 WHERE excluded.at >= deliveries.at",
            )?
            .execute(params![owner, link.to_string(), body, at])
            .map(drop)
        })
        .await
    }

    async fn last_deliveries(&self, owner: &OwnerId) -> StoreResult<Vec<(ChatLinkId, DeliveryOutcome)>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached("SELECT link_id, body FROM deliveries WHERE owner = ?1")?;
            st.query_map([owner], |row| {
                Ok((
                    col(row, 0, "link_id", |s| ChatLinkId::parse("chat_link_id", s).ok())?,
                    col(row, 1, "body", |s| serde_json::from_str(s).ok())?,
                ))
            })?
            .collect()
        })
        .await
    }
}

#[async_trait]
impl EventOutbox for SqliteStore {
    async fn due_events(&self, limit: usize) -> StoreResult<Vec<OutboxEntry>> {
        self.read(move |tx, now| {
            let mut st = tx.prepare_cached(
                "SELECT body, attempts FROM event_outbox WHERE state = 'pending' AND next_attempt_at <= ?1 \
                 ORDER BY next_attempt_at, rowid LIMIT ?2",
            )?;
            st.query_map(params![now.as_millis(), limit as i64], outbox_row)?.collect()
        })
        .await
    }

    async fn event_delivered(&self, event_id: &str) -> StoreResult<()> {
        let id = event_id.to_owned();
        self.bookkeeping(move |tx, _| {
            tx.prepare_cached("DELETE FROM event_outbox WHERE event_id = ?1")?.execute([id]).map(drop)
        })
        .await
    }

    async fn event_failed(&self, event_id: &str, retry_at: Option<Timestamp>, error: &str) -> StoreResult<()> {
        let (id, error) = (event_id.to_owned(), error.to_owned());
        self.bookkeeping(move |tx, _| {
            tx.prepare_cached(
                "UPDATE event_outbox SET attempts = attempts + 1, last_error = :error, \
                 state = CASE WHEN :retry_at IS NULL THEN 'dead' ELSE 'pending' END, \
                 next_attempt_at = COALESCE(:retry_at, next_attempt_at) WHERE event_id = :id",
            )?
            .execute(named_params! {":error": error, ":retry_at": retry_at.map(Timestamp::as_millis), ":id": id})
            .map(drop)
        })
        .await
    }

    async fn dead_events(&self, limit: usize) -> StoreResult<Vec<OutboxEntry>> {
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(
                "SELECT body, attempts FROM event_outbox WHERE state = 'dead' ORDER BY created_at DESC LIMIT ?1",
            )?;
            st.query_map(params![limit as i64], outbox_row)?.collect()
        })
        .await
    }
}
