//! Connections and transactions: a small pool per file (one connection in memory), one writer
//! lane per process, reads inline on an idle connection, `BEGIN`/`COMMIT` prepared once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rusqlite::{Connection, TransactionBehavior};

use domain::clock::{SharedClock, Timestamp};
use domain::limits::Policy;
use domain::store::{StoreError, StoreResult};

use crate::SqliteStore;
use crate::doorbell::Rings;
use crate::error::{poisoned, sql_err};
use crate::schema::migrate;

/// Most connections a file database opens (enough for 8-way races plus readers).
pub(crate) const MAX_FILE_CONNECTIONS: usize = 16;
/// Rings kept for a receiver that has not read them yet (older ones are dropped for it).
pub(crate) const RING_BUFFER: usize = 1024;

pub(crate) struct Pool {
    pub(crate) path: Option<PathBuf>,
    max: usize,
    state: Mutex<(Vec<Connection>, usize)>,
    ready: Condvar,
    /// One write transaction at a time from this process. SQLite admits one writer anyway; a
    /// second `BEGIN IMMEDIATE` would sleep in SQLite's busy handler (1, 2, 5, 10 ms …) and
    /// retry, which made the tail of concurrent claims milliseconds long. Waiting here wakes
    /// the next writer the moment the last one commits. Other processes on the same file are
    /// still kept apart by SQLite's lock and the busy timeout.
    writer: Mutex<()>,
}

impl Pool {
    pub(crate) fn open_connection(path: Option<&Path>) -> rusqlite::Result<Connection> {
        let conn = match path {
            Some(p) => Connection::open(p)?,
            None => Connection::open_in_memory()?,
        };
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // Every statement is prepared through the cache (`prepare_cached`): parsing SQL was
        // the largest cost of a read in the profile (docs/history.md, "Peer benchmark, pinned
        // cores and the profile").
        conn.set_prepared_statement_cache_capacity(128);
        // The bundled SQLite is built with STAT4, which marks a statement expired whenever a
        // parameter the planner looked at (a `LIMIT ?`, a range bound) is bound again, so a
        // cached statement was parsed and planned anew on every call (the profile showed
        // `sqlite3Reprepare` under every step). The query planner stability guarantee keeps
        // each statement's first plan; the schema's indexes make that plan the right one.
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(conn)
    }

    pub(crate) fn get(&self) -> StoreResult<Connection> {
        let mut st = self.state.lock().map_err(|_| poisoned())?;
        loop {
            if let Some(c) = st.0.pop() {
                return Ok(c);
            }
            if st.1 < self.max {
                st.1 += 1;
                drop(st);
                return Self::open_connection(self.path.as_deref()).map_err(|e| {
                    if let Ok(mut st) = self.state.lock() {
                        st.1 -= 1;
                    }
                    StoreError::unavailable(e)
                });
            }
            st = self.ready.wait(st).map_err(|_| poisoned())?;
        }
    }

    /// An idle connection, if one is waiting (never opens one, never waits).
    pub(crate) fn try_get(&self) -> Option<Connection> {
        self.state.lock().ok()?.0.pop()
    }

    pub(crate) fn put(&self, c: Connection) {
        if let Ok(mut st) = self.state.lock() {
            st.0.push(c);
            self.ready.notify_one();
        }
    }
}

impl SqliteStore {
    pub(crate) fn with_pool(
        path: Option<PathBuf>,
        max: usize,
        clock: SharedClock,
        policy: Policy,
    ) -> StoreResult<Self> {
        let mut conn = Pool::open_connection(path.as_deref()).map_err(sql_err)?;
        migrate(&mut conn).map_err(StoreError::refused)?;
        let pool =
            Pool { path, max, state: Mutex::new((vec![conn], 1)), ready: Condvar::new(), writer: Mutex::new(()) };
        Ok(Self {
            pool: Arc::new(pool),
            clock,
            policy,
            writes: Arc::new(AtomicU64::new(0)),
            write_signal: Arc::new(tokio::sync::Notify::new()),
            rings: tokio::sync::broadcast::channel(RING_BUFFER).0,
        })
    }

    /// Runs `f` in a transaction on a pooled connection ([`Tx`]). `tracked` writes count in
    /// [`SqliteStore::write_transactions`] and wake the outbox's consumer; the notifier's own
    /// bookkeeping (delivered, failed, last outcome) is untracked: it changes no task or run.
    pub(crate) async fn run<T, F>(&self, behavior: TransactionBehavior, tracked: bool, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx<'_>, Timestamp) -> rusqlite::Result<T> + Send + 'static,
    {
        let pool = Arc::clone(&self.pool);
        let writes = Arc::clone(&self.writes);
        let signal = Arc::clone(&self.write_signal);
        let rings = self.rings.clone();
        let now = self.clock.now();
        // A read on an idle connection runs right here: in WAL mode readers never wait for a
        // writer, a read takes microseconds, and handing it to the blocking pool (two thread
        // switches) cost more than the query. Writes may wait on the write lock: they go to
        // the blocking pool, and so does a read when no connection is idle.
        // One transaction on a connection taken from the pool, given back after. A transaction
        // that changed rows counts when tracked (a "read" too: the suite proves reads never
        // write) and, once committed, wakes the outbox's consumer.
        let transact = move |pool: &Pool, conn: Connection| {
            let before = conn.total_changes();
            let tx = Tx { conn: &conn, rings: Rings::default() };
            let out = in_transaction(&conn, behavior, |_| f(&tx, now));
            if out.is_ok() {
                for r in tx.rings.into_vec() {
                    // No receiver (no doorbell server) is fine.
                    let _ = rings.send(r);
                }
            }
            if tracked && conn.total_changes() != before {
                writes.fetch_add(1, Ordering::SeqCst);
                if out.is_ok() {
                    signal.notify_one();
                }
            }
            pool.put(conn);
            out.map_err(sql_err)
        };
        if matches!(behavior, TransactionBehavior::Deferred)
            && let Some(conn) = pool.try_get()
        {
            return transact(&pool, conn);
        }
        tokio::task::spawn_blocking(move || {
            // The lane guards no data, so a panic of an earlier writer does not matter.
            let _lane = matches!(behavior, TransactionBehavior::Immediate)
                .then(|| pool.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
            let conn = pool.get()?;
            transact(&pool, conn)
        })
        .await
        .map_err(StoreError::unavailable)?
    }

    pub(crate) async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx<'_>, Timestamp) -> rusqlite::Result<T> + Send + 'static,
    {
        self.run(TransactionBehavior::Deferred, true, f).await
    }

    pub(crate) async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx<'_>, Timestamp) -> rusqlite::Result<T> + Send + 'static,
    {
        self.run(TransactionBehavior::Immediate, true, f).await
    }

    /// A write of bookkeeping: the notifier's deliveries, the owners' budgets (see [`SqliteStore::run`]).
    pub(crate) async fn bookkeeping<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx<'_>, Timestamp) -> rusqlite::Result<T> + Send + 'static,
    {
        self.run(TransactionBehavior::Immediate, false, f).await
    }
}

/// A transaction in progress: its connection (which it dereferences to), and what its changes
/// ring on the doorbell, published once it commits.
pub(crate) struct Tx<'c> {
    conn: &'c Connection,
    /// The doorbell rings of its changes so far.
    pub(crate) rings: Rings,
}

impl std::ops::Deref for Tx<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

/// Runs `f` between `BEGIN` and `COMMIT`, both prepared once per connection (rusqlite's
/// `Transaction` parses `BEGIN …` and `COMMIT` on every call: 4.5 % of a read in the profile).
/// On any error the transaction is rolled back, and the connection always comes back in
/// autocommit mode, ready for the pool.
pub(crate) fn in_transaction<T>(
    conn: &Connection,
    behavior: TransactionBehavior,
    f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let begin = match behavior {
        TransactionBehavior::Immediate => "BEGIN IMMEDIATE",
        TransactionBehavior::Exclusive => "BEGIN EXCLUSIVE",
        _ => "BEGIN DEFERRED",
    };
    conn.prepare_cached(begin)?.execute([])?;
    let out = f(conn).and_then(|v| conn.prepare_cached("COMMIT")?.execute([]).map(|_| v));
    if !conn.is_autocommit() {
        // `f` or `COMMIT` failed (a busy database, a constraint): nothing of it stays.
        let _ = conn.prepare_cached("ROLLBACK").and_then(|mut s| s.execute([]));
    }
    out
}

#[cfg(test)]
mod tests {
    use rusqlite::params;

    use super::*;
    use crate::schema::migrate;
    use crate::tasks::list_open_sql;

    /// Binds the open-task list 5 times with new values and returns how often SQLite
    /// re-prepared the cached statement.
    fn re_prepares(conn: &Connection) -> i32 {
        for i in 0..5i64 {
            let mut st = conn.prepare_cached(&list_open_sql()).unwrap();
            let rows = st.query_map(params!["link", "owner", 1_000 + i, 10 + i], |_| Ok(())).unwrap().count();
            assert_eq!(rows, 0);
        }
        let st = conn.prepare_cached(&list_open_sql()).unwrap();
        st.get_status(rusqlite::StatementStatus::RePrepare)
    }

    #[test]
    fn a_cached_statement_bound_again_is_not_planned_again() {
        let mut conn = Pool::open_connection(None).unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(re_prepares(&conn), 0, "re-prepared on a new binding");
    }

    /// The control of the test above: without the planner stability guarantee the same loop
    /// re-prepares (STAT4 expires the plan on every new `LIMIT`/range binding), so a 0 there
    /// is the guarantee's doing, not a loop that never re-prepares.
    #[test]
    fn without_the_planner_guarantee_a_new_binding_re_prepares() {
        let mut conn = Pool::open_connection(None).unwrap();
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, false).unwrap();
        migrate(&mut conn).unwrap();
        assert!(re_prepares(&conn) > 0, "without QPSG SQLite should re-plan on new bindings");
    }

    fn temp_store() -> (crate::SqliteStore, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("fc-pool-{}.sqlite3", uuid::Uuid::new_v4()));
        let clock = std::sync::Arc::new(domain::clock::ManualClock::starting_now());
        (crate::SqliteStore::open(&path, clock, domain::limits::Policy::default()).unwrap(), path)
    }

    /// Inline reads: with a connection idle, a read runs on the calling thread; with none idle
    /// it goes to the blocking pool (the control: the same read, another thread).
    #[tokio::test(flavor = "current_thread")]
    async fn a_read_runs_on_the_calling_thread_when_a_connection_is_idle() {
        let (store, path) = temp_store();
        let here = std::thread::current().id();
        let ran_on = store.read(|_, _| Ok(std::thread::current().id())).await.unwrap();
        assert_eq!(ran_on, here, "a read with an idle connection left the calling thread");
        let held = store.pool.try_get().expect("the store opened with an idle connection");
        let ran_on = store.read(|_, _| Ok(std::thread::current().id())).await.unwrap();
        assert_ne!(ran_on, here, "with no idle connection the read should wait on the blocking pool");
        store.pool.put(held);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    /// The writer lane: every write transaction of this process runs holding it, so a second
    /// writer waits on the lane, not in SQLite's busy handler.
    #[tokio::test]
    async fn every_write_transaction_holds_the_writer_lane() {
        let (store, path) = temp_store();
        let pool = Arc::clone(&store.pool);
        let lane_free = store
            .write(move |tx, _| {
                tx.execute_batch("CREATE TABLE IF NOT EXISTS lane (x INTEGER)")?;
                Ok(pool.writer.try_lock().is_ok())
            })
            .await
            .unwrap();
        assert!(!lane_free, "a write transaction ran outside the writer lane");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    #[test]
    fn a_failed_transaction_leaves_nothing_and_the_connection_ready() {
        let conn = Pool::open_connection(None).unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        let count = |c: &Connection| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)).unwrap();
        let failed = in_transaction(&conn, TransactionBehavior::Immediate, |c| {
            c.execute("INSERT INTO t VALUES (1)", [])?;
            Err::<(), _>(rusqlite::Error::QueryReturnedNoRows)
        });
        assert!(failed.is_err());
        assert!(conn.is_autocommit(), "the connection goes back to the pool outside any transaction");
        assert_eq!(count(&conn), 0, "the failed transaction's insert is rolled back");
        for behavior in [TransactionBehavior::Deferred, TransactionBehavior::Immediate] {
            in_transaction(&conn, behavior, |c| c.execute("INSERT INTO t VALUES (2)", [])).unwrap();
        }
        assert_eq!(count(&conn), 2);
        assert!(conn.is_autocommit());
    }
}
