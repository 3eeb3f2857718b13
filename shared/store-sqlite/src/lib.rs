//! The embedded store: SQLite through rusqlite, in a file or in memory.
//!
//! Same semantics as DynamoDB, built from the same parts: each state change is a conditional
//! `UPDATE … WHERE` inside an `IMMEDIATE` transaction; when it matches no row, the row as it is
//! (read in the same transaction, so it is the image the condition saw) goes to the same pure
//! classifier the DynamoDB store feeds with `ALL_OLD`. Reads run in deferred (read-only)
//! transactions and never write.
//!
//! A file database gets a small pool of connections in WAL mode, so concurrent callers really
//! race (the conformance suite's claim race runs against it). An in-memory database lives in
//! exactly one connection, so its pool holds one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use async_trait::async_trait;
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use domain::clients::{ClientSummary, RegisterClients, RegisteredClient};
use domain::clock::{SharedClock, Timestamp};
use domain::devices::Device;
use domain::events::{DeliveryOutcome, Event, OutboxEntry, derive_run, derive_task};
use domain::ids::{AgentId, ChatLinkId, ClaimId, CommandId, GraphSessionId, OwnerId, ProjectId, TaskId};
use domain::limits::Policy;
use domain::projects::{ChatLink, Project, Subscription, SyncOutcome, check_named_project, resolve_project};
use domain::runs::{
    CancelRunOutcome, CancelStep, CompleteOutcome, CompleteStep, Completion, ControlOutcome, QueueOutcome,
    QueueRejection, QueueRun, Run, RunStatus, SessionMeta, StartOutcome, classify_cancel, classify_complete,
    classify_control, classify_start, idempotency_record_key,
};
use domain::store::{
    AssignTasks, AuthenticateDevices, CancelRuns, ClaimTasks, DEVICE_SEEN_GRANULARITY, EventOutbox, ManageDevices,
    ManageLinks, ManageProjects, OwnerRuns, QueueRuns, ReadRuns, ReadTasks, RecordArtifacts, RecordDeliveries,
    RelayRuns, StoreError, StoreResult, SyncSessions,
};
use domain::tasks::{
    ArtifactCheck, ArtifactOutcome, ArtifactRecord, AssignOutcome, AssignRejection, AssignTask, CancelTaskOutcome,
    ClaimOutcome, SubmitOutcome, SubmitTask, Task, TaskPage, TaskStatus, check_artifact, classify_cancel_task,
    classify_claim, classify_submit,
};

/// Schema migrations, numbered by position: `MIGRATIONS[i]` takes a database from schema
/// version `i` to `i + 1`, recorded in `PRAGMA user_version` in the same transaction. A new
/// build appends a migration and never edits an old one.
///
/// Version 1 is the layout the first builds wrote without a version number; its statements
/// use `IF NOT EXISTS`, so such a database (version 0 with tables) is adopted as it is.
const MIGRATIONS: &[&str] = &[SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6];

/// Version 6: each project keeps the recent durations of its sessions' completed runs
/// (`{"<session>#<slot>": ms}`), written by the completion in its own transaction.
const SCHEMA_V6: &str = r"
ALTER TABLE projects ADD COLUMN durations TEXT NOT NULL DEFAULT '{}';
";

/// Version 5: each device's shared sessions per project (`projects.sessions` stays, as their
/// union, rewritten in the same transaction as a device's list).
const SCHEMA_V5: &str = r"
CREATE TABLE device_sessions (
    project_id TEXT NOT NULL, device_id TEXT NOT NULL, sessions TEXT NOT NULL,
    PRIMARY KEY (project_id, device_id));
CREATE INDEX device_sessions_by_device ON device_sessions(device_id);
";

/// Version 4: OAuth clients that MCP clients registered for themselves (the local
/// authorization server's registry; Cognito keeps them in the cloud).
const SCHEMA_V4: &str = r"
CREATE TABLE oauth_clients (
    client_id TEXT PRIMARY KEY, name TEXT NOT NULL, redirect_uris TEXT NOT NULL, scopes TEXT NOT NULL,
    created_at INTEGER NOT NULL);
";

/// Version 3: tasks remember when their current claim was made, and every state change of a
/// task or a run leaves its events in an outbox, in the same transaction (delivered by the
/// local notifier, like the table's stream feeds the cloud's).
const SCHEMA_V3: &str = r"
ALTER TABLE tasks ADD COLUMN claimed_at INTEGER;
CREATE TABLE event_outbox (
    event_id TEXT PRIMARY KEY, owner TEXT NOT NULL, body TEXT NOT NULL, created_at INTEGER NOT NULL,
    state TEXT NOT NULL, attempts INTEGER NOT NULL, next_attempt_at INTEGER NOT NULL, last_error TEXT);
CREATE INDEX event_outbox_due ON event_outbox(next_attempt_at, event_id) WHERE state = 'pending';
CREATE TABLE deliveries (
    owner TEXT NOT NULL, link_id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (owner, link_id));
";

/// Version 2: chat links can be deleted (a tombstone; their tasks are marked) and carry an
/// event subscription; devices remember when they were last seen; the owner lists recent runs.
const SCHEMA_V2: &str = r"
ALTER TABLE links ADD COLUMN deleted_at INTEGER;
ALTER TABLE links ADD COLUMN subscription TEXT;
ALTER TABLE tasks ADD COLUMN link_deleted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE devices ADD COLUMN last_seen_at INTEGER;
CREATE INDEX runs_by_owner ON runs(owner, command_id);
";

const SCHEMA_V1: &str = r"
CREATE TABLE IF NOT EXISTS projects (
    project_id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL,
    enabled INTEGER NOT NULL, sessions TEXT NOT NULL, last_sync_at INTEGER, created_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS projects_by_owner ON projects(owner);
CREATE TABLE IF NOT EXISTS runs (
    command_id TEXT PRIMARY KEY, owner TEXT NOT NULL, agent TEXT NOT NULL, project_id TEXT NOT NULL,
    graph_session_id TEXT NOT NULL, slug TEXT NOT NULL, arguments TEXT NOT NULL, status TEXT NOT NULL,
    queued_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, started_at INTEGER, finished_at INTEGER,
    execution_id TEXT, cancel_requested INTEGER NOT NULL, last_heartbeat_at INTEGER,
    completion TEXT, completion_hash TEXT);
CREATE INDEX IF NOT EXISTS runs_queued ON runs(project_id, expires_at, command_id) WHERE status = 'queued';
CREATE TABLE IF NOT EXISTS idempotency (
    record_key TEXT PRIMARY KEY, request_hash TEXT NOT NULL, target_id TEXT NOT NULL, expires_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS links (
    link_id TEXT PRIMARY KEY, owner TEXT NOT NULL, project_id TEXT NOT NULL, name TEXT NOT NULL, created_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS links_by_owner ON links(owner);
CREATE TABLE IF NOT EXISTS tasks (
    task_id TEXT PRIMARY KEY, link_id TEXT NOT NULL, owner TEXT NOT NULL, objective TEXT NOT NULL,
    status TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
    claim_id TEXT, lease_until INTEGER, result TEXT, result_hash TEXT, finished_at INTEGER);
CREATE INDEX IF NOT EXISTS tasks_by_link ON tasks(link_id, task_id);
CREATE INDEX IF NOT EXISTS tasks_open ON tasks(link_id, expires_at, task_id) WHERE status IN ('queued', 'claimed');
CREATE TABLE IF NOT EXISTS artifacts (
    link_id TEXT NOT NULL, task_id TEXT NOT NULL, artifact_id TEXT NOT NULL, claim_id TEXT NOT NULL,
    name TEXT NOT NULL, content_type TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
    object_key TEXT NOT NULL, created_at INTEGER NOT NULL,
    PRIMARY KEY (link_id, task_id, artifact_id));
CREATE TABLE IF NOT EXISTS devices (
    device_id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, token_hash TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL, revoked_at INTEGER);
CREATE INDEX IF NOT EXISTS devices_by_owner ON devices(owner, created_at);
";

/// The schema version this build writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// Why a database could not be brought to this build's schema.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// Written by a newer build: opening it could lose data, so it is refused.
    #[error(
        "the database has schema version {found}, but this build knows versions up to {supported}: \
         it was written by a newer foundry-connect; upgrade, or use another data folder"
    )]
    TooNew {
        /// `PRAGMA user_version` of the file.
        found: i64,
        /// [`SCHEMA_VERSION`].
        supported: usize,
    },
    /// A migration failed; the transaction was rolled back and the file is unchanged.
    #[error("migrating the database from schema version {from} failed")]
    Migration {
        /// The version the failed migration started from.
        from: usize,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
}

/// Brings `conn`'s database to [`SCHEMA_VERSION`] in one `IMMEDIATE` transaction (two
/// processes opening the same new file do not both migrate it).
fn migrate(conn: &mut Connection) -> Result<(), SchemaError> {
    let failed = |from: usize| move |source| SchemaError::Migration { from, source };
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(failed(0))?;
    let found: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(failed(0))?;
    let from = usize::try_from(found).map_err(|_| SchemaError::TooNew { found, supported: SCHEMA_VERSION })?;
    if from > SCHEMA_VERSION {
        return Err(SchemaError::TooNew { found, supported: SCHEMA_VERSION });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from) {
        tx.execute_batch(sql).map_err(failed(i))?;
        tx.pragma_update(None, "user_version", i + 1).map_err(failed(i))?;
    }
    tx.commit().map_err(failed(from))
}

/// Most connections a file database opens (enough for 8-way races plus readers).
const MAX_FILE_CONNECTIONS: usize = 16;

/// The embedded store.
#[derive(Clone)]
pub struct SqliteStore {
    pool: Arc<Pool>,
    clock: SharedClock,
    policy: Policy,
    writes: Arc<AtomicU64>,
    /// Notified after every committed write (the local notifier wakes on it).
    write_signal: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.pool.path).finish_non_exhaustive()
    }
}

struct Pool {
    path: Option<PathBuf>,
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
    fn open_connection(path: Option<&Path>) -> rusqlite::Result<Connection> {
        let conn = match path {
            Some(p) => Connection::open(p)?,
            None => Connection::open_in_memory()?,
        };
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // Every statement is prepared through the cache (`prepare_cached`): parsing SQL was
        // the largest cost of a read in the profile (docs/results.md).
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

    fn get(&self) -> StoreResult<Connection> {
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
    fn try_get(&self) -> Option<Connection> {
        self.state.lock().ok()?.0.pop()
    }

    fn put(&self, c: Connection) {
        if let Ok(mut st) = self.state.lock() {
            st.0.push(c);
            self.ready.notify_one();
        }
    }
}

fn poisoned() -> StoreError {
    StoreError::Corrupt("connection pool lock poisoned".into())
}

fn sql_err(e: rusqlite::Error) -> StoreError {
    match e {
        rusqlite::Error::FromSqlConversionFailure(_, _, inner) => StoreError::Corrupt(inner.to_string()),
        other => StoreError::unavailable(other),
    }
}

fn corrupt(idx: usize, what: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, format!("bad {what}").into())
}

impl SqliteStore {
    /// Opens (creating if needed) a database file.
    ///
    /// # Errors
    /// [`StoreError`] when the file cannot be opened, or its schema cannot be brought to this
    /// build's ([`SchemaError`] inside [`StoreError::Refused`]: written by a newer build, or a
    /// migration failed and nothing changed).
    pub fn open(path: impl AsRef<Path>, clock: SharedClock, policy: Policy) -> StoreResult<Self> {
        Self::with_pool(Some(path.as_ref().to_path_buf()), MAX_FILE_CONNECTIONS, clock, policy)
    }

    /// A private in-memory database (one connection; gone when the store is dropped).
    ///
    /// # Errors
    /// [`StoreError`] when SQLite cannot start.
    pub fn in_memory(clock: SharedClock, policy: Policy) -> StoreResult<Self> {
        Self::with_pool(None, 1, clock, policy)
    }

    fn with_pool(path: Option<PathBuf>, max: usize, clock: SharedClock, policy: Policy) -> StoreResult<Self> {
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
        })
    }

    /// The file behind the store (`None` in memory).
    pub fn path(&self) -> Option<&Path> {
        self.pool.path.as_deref()
    }

    /// The time policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Notified after every committed write transaction: a consumer of the event outbox waits
    /// on it instead of polling often (a wake with nothing new costs one cheap query).
    pub fn write_signal(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.write_signal)
    }

    /// Transactions that changed at least one row since the store opened (the notifier's own
    /// bookkeeping of deliveries excluded). The suite uses it to prove that reads never write.
    pub fn write_transactions(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Runs `f` in a transaction on a pooled connection. `tracked` writes count in
    /// [`SqliteStore::write_transactions`] and wake the outbox's consumer; the notifier's own
    /// bookkeeping (delivered, failed, last outcome) is untracked: it changes no task or run.
    async fn run<T, F>(&self, behavior: TransactionBehavior, tracked: bool, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Timestamp) -> rusqlite::Result<T> + Send + 'static,
    {
        let pool = Arc::clone(&self.pool);
        let writes = Arc::clone(&self.writes);
        let signal = Arc::clone(&self.write_signal);
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
            let out = in_transaction(&conn, behavior, |c| f(c, now));
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

    async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Timestamp) -> rusqlite::Result<T> + Send + 'static,
    {
        self.run(TransactionBehavior::Deferred, true, f).await
    }

    async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Timestamp) -> rusqlite::Result<T> + Send + 'static,
    {
        self.run(TransactionBehavior::Immediate, true, f).await
    }

    /// A write of the notifier's bookkeeping (see [`SqliteStore::run`]).
    async fn bookkeeping<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Timestamp) -> rusqlite::Result<T> + Send + 'static,
    {
        self.run(TransactionBehavior::Immediate, false, f).await
    }
}

/// Runs `f` between `BEGIN` and `COMMIT`, both prepared once per connection (rusqlite's
/// `Transaction` parses `BEGIN …` and `COMMIT` on every call: 4.5 % of a read in the profile).
/// On any error the transaction is rolled back, and the connection always comes back in
/// autocommit mode, ready for the pool.
fn in_transaction<T>(
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

// ---- row mapping -------------------------------------------------------------------------

fn ts(v: i64) -> Timestamp {
    Timestamp::from_millis(v)
}

fn opt_ts(v: Option<i64>) -> Option<Timestamp> {
    v.map(Timestamp::from_millis)
}

fn col<T>(row: &Row<'_>, idx: usize, what: &str, parse: impl FnOnce(&str) -> Option<T>) -> rusqlite::Result<T> {
    let s: String = row.get(idx)?;
    parse(&s).ok_or_else(|| corrupt(idx, what))
}

fn opt_col<T>(
    row: &Row<'_>,
    idx: usize,
    what: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> rusqlite::Result<Option<T>> {
    let s: Option<String> = row.get(idx)?;
    s.map(|s| parse(&s).ok_or_else(|| corrupt(idx, what))).transpose()
}

const PROJECT_COLS: &str = "project_id, owner, name, enabled, sessions, last_sync_at, created_at, durations";

fn project_row(row: &Row<'_>) -> rusqlite::Result<Project> {
    Ok(Project {
        project_id: col(row, 0, "project_id", |s| ProjectId::parse("project_id", s).ok())?,
        owner: col(row, 1, "owner", |s| OwnerId::new(s).ok())?,
        name: row.get(2)?,
        enabled: row.get(3)?,
        sessions: col(row, 4, "sessions", |s| serde_json::from_str::<Vec<SessionMeta>>(s).ok())?,
        last_sync_at: opt_ts(row.get(5)?),
        created_at: ts(row.get(6)?),
        recent_durations: col(row, 7, "durations", |s| serde_json::from_str(s).ok())?,
    })
}

const RUN_COLS: &str = "command_id, owner, agent, project_id, graph_session_id, slug, arguments, status, \
     queued_at, expires_at, started_at, finished_at, execution_id, cancel_requested, last_heartbeat_at, completion, completion_hash";

fn run_row(row: &Row<'_>) -> rusqlite::Result<Run> {
    Ok(Run {
        command_id: col(row, 0, "command_id", |s| CommandId::parse("command_id", s).ok())?,
        owner: col(row, 1, "owner", |s| OwnerId::new(s).ok())?,
        agent: col(row, 2, "agent", |s| Some(AgentId::from_stored(s)))?,
        project_id: col(row, 3, "project_id", |s| ProjectId::parse("project_id", s).ok())?,
        graph_session_id: col(row, 4, "graph_session_id", |s| GraphSessionId::parse("graph_session_id", s).ok())?,
        slug: row.get(5)?,
        arguments: col(row, 6, "arguments", |s| serde_json::from_str(s).ok())?,
        status: col(row, 7, "status", RunStatus::parse)?,
        queued_at: ts(row.get(8)?),
        expires_at: ts(row.get(9)?),
        started_at: opt_ts(row.get(10)?),
        finished_at: opt_ts(row.get(11)?),
        execution_id: row.get(12)?,
        cancel_requested: row.get(13)?,
        last_heartbeat_at: opt_ts(row.get(14)?),
        completion: opt_col(row, 15, "completion", |s| serde_json::from_str(s).ok())?,
        completion_hash: row.get(16)?,
    })
}

const LINK_COLS: &str = "link_id, owner, project_id, name, created_at, subscription";

fn link_row(row: &Row<'_>) -> rusqlite::Result<ChatLink> {
    Ok(ChatLink {
        link_id: col(row, 0, "link_id", |s| ChatLinkId::parse("chat_link_id", s).ok())?,
        owner: col(row, 1, "owner", |s| OwnerId::new(s).ok())?,
        project_id: col(row, 2, "project_id", |s| ProjectId::parse("project_id", s).ok())?,
        name: row.get(3)?,
        created_at: ts(row.get(4)?),
        subscription: opt_col(row, 5, "subscription", |s| serde_json::from_str(s).ok())?,
    })
}

const TASK_COLS: &str = "task_id, link_id, owner, objective, status, created_at, expires_at, claim_id, \
     lease_until, result, result_hash, finished_at, link_deleted, claimed_at";

fn task_row(row: &Row<'_>) -> rusqlite::Result<Task> {
    Ok(Task {
        task_id: col(row, 0, "task_id", |s| TaskId::parse("task_id", s).ok())?,
        link_id: col(row, 1, "link_id", |s| ChatLinkId::parse("chat_link_id", s).ok())?,
        owner: col(row, 2, "owner", |s| OwnerId::new(s).ok())?,
        objective: row.get(3)?,
        status: col(row, 4, "status", TaskStatus::parse)?,
        created_at: ts(row.get(5)?),
        expires_at: ts(row.get(6)?),
        claim_id: opt_col(row, 7, "claim_id", |s| ClaimId::parse("claim_id", s).ok())?,
        lease_until: opt_ts(row.get(8)?),
        result: row.get(9)?,
        result_hash: row.get(10)?,
        finished_at: opt_ts(row.get(11)?),
        link_deleted: row.get(12)?,
        claimed_at: opt_ts(row.get(13)?),
    })
}

fn get_run_tx(tx: &Connection, id: &str) -> rusqlite::Result<Option<Run>> {
    tx.prepare_cached(&format!("SELECT {RUN_COLS} FROM runs WHERE command_id = ?1"))?
        .query_row([id], run_row)
        .optional()
}

fn get_task_tx(tx: &Connection, link: &str, task: &str) -> rusqlite::Result<Option<Task>> {
    tx.prepare_cached(&format!("SELECT {TASK_COLS} FROM tasks WHERE task_id = ?1 AND link_id = ?2"))?
        .query_row([task, link], task_row)
        .optional()
}

fn get_project_tx(tx: &Connection, owner: &str, project: &str) -> rusqlite::Result<Option<Project>> {
    tx.prepare_cached(&format!("SELECT {PROJECT_COLS} FROM projects WHERE project_id = ?1 AND owner = ?2"))?
        .query_row([project, owner], project_row)
        .optional()
}

/// Inserts events into the outbox (a redelivered id is ignored: same change, same event).
fn record_events(tx: &Connection, events: &[Event], now: Timestamp) -> rusqlite::Result<()> {
    for e in events {
        tx.prepare_cached(
            "INSERT OR IGNORE INTO event_outbox (event_id, owner, body, created_at, state, attempts, next_attempt_at) \
             VALUES (?1, ?2, ?3, ?4, 'pending', 0, ?4)",
        )?
        .execute(params![e.id, e.data.owner, e.to_json(), now.as_millis()])?;
    }
    Ok(())
}

/// Runs `f`, which may change the run `id`, and records the events the change means in the
/// same transaction: the outbox can never disagree with the data.
fn watch_run<T>(
    tx: &Connection,
    id: &str,
    now: Timestamp,
    f: impl FnOnce() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let old = get_run_tx(tx, id)?;
    let out = f()?;
    let new = get_run_tx(tx, id)?;
    if old != new {
        record_events(tx, &derive_run(old.as_ref(), new.as_ref()), now)?;
    }
    Ok(out)
}

/// Like [`watch_run`], for the task `task` of `link`.
fn watch_task<T>(
    tx: &Connection,
    link: &str,
    task: &str,
    now: Timestamp,
    f: impl FnOnce() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let old = get_task_tx(tx, link, task)?;
    let out = f()?;
    let new = get_task_tx(tx, link, task)?;
    if old != new {
        record_events(tx, &derive_task(old.as_ref(), new.as_ref()), now)?;
    }
    Ok(out)
}

/// Writes a just-completed run's duration into its project's summary slot (same transaction).
fn record_duration_tx(tx: &Connection, command: &str, now: Timestamp) -> rusqlite::Result<()> {
    let Some(run) = get_run_tx(tx, command)? else { return Ok(()) };
    let Some(started) = run.started_at else { return Ok(()) };
    let key = domain::runs::duration_key(&run.graph_session_id, now);
    tx.prepare_cached("UPDATE projects SET durations = json_set(durations, ?1, ?2) WHERE project_id = ?3")?
        .execute(params![format!("$.\"{key}\""), now.since(started).as_millis() as i64, run.project_id.to_string()])?;
    Ok(())
}

/// Replaces one device's shared sessions in a project (empty = none) and rewrites the
/// project's union from every device's list, in the caller's transaction.
fn set_device_share_tx(tx: &Connection, project: &str, device: &str, sessions: &[SessionMeta]) -> rusqlite::Result<()> {
    if sessions.is_empty() {
        tx.prepare_cached("DELETE FROM device_sessions WHERE project_id = ?1 AND device_id = ?2")?
            .execute(params![project, device])?;
    } else {
        tx.prepare_cached(
            "INSERT INTO device_sessions (project_id, device_id, sessions) VALUES (?1, ?2, ?3) \
             ON CONFLICT (project_id, device_id) DO UPDATE SET sessions = excluded.sessions",
        )?
        .execute(params![project, device, json(&sessions)])?;
    }
    let mut shares = domain::projects::DeviceShares::new();
    let mut st = tx.prepare_cached("SELECT device_id, sessions FROM device_sessions WHERE project_id = ?1")?;
    let rows = st.query_map([project], |r| {
        let id: String = r.get(0)?;
        let list: Vec<SessionMeta> = col(r, 1, "sessions", |s| serde_json::from_str(s).ok())?;
        Ok((id, list))
    })?;
    for row in rows {
        let (id, list) = row?;
        let id = uuid::Uuid::parse_str(&id).map_err(|_| corrupt(0, "device_id"))?;
        shares.insert(id, list);
    }
    tx.prepare_cached("UPDATE projects SET sessions = ?1 WHERE project_id = ?2")?
        .execute(params![json(&domain::projects::union_of(&shares)), project])?;
    Ok(())
}

/// A live idempotency record: (request hash, target id).
fn get_idempotency_tx(tx: &Connection, key: &str, now: Timestamp) -> rusqlite::Result<Option<(String, String)>> {
    tx.prepare_cached("SELECT request_hash, target_id FROM idempotency WHERE record_key = ?1 AND expires_at > ?2")?
        .query_row(params![key, now.as_millis()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
}

fn missing_target() -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, Type::Text, "idempotency record points at a missing item".into())
}

fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

// ---- capabilities ------------------------------------------------------------------------

#[async_trait]
impl RegisterClients for SqliteStore {
    async fn list_clients(&self) -> StoreResult<Vec<ClientSummary>> {
        self.read(|tx, _| {
            let mut st =
                tx.prepare_cached("SELECT client_id, name FROM oauth_clients ORDER BY created_at, client_id")?;
            st.query_map([], |r| Ok(ClientSummary { client_id: r.get(0)?, name: r.get(1)? }))?.collect()
        })
        .await
    }

    async fn get_client(&self, client_id: &str) -> StoreResult<Option<RegisteredClient>> {
        let id = client_id.to_owned();
        self.read(move |tx, _| {
            tx.prepare_cached("SELECT client_id, name, redirect_uris, scopes FROM oauth_clients WHERE client_id = ?1")?
                .query_row([id], |r| {
                    Ok(RegisteredClient {
                        client_id: r.get(0)?,
                        name: r.get(1)?,
                        redirect_uris: col(r, 2, "redirect_uris", |s| serde_json::from_str(s).ok())?,
                        scopes: col(r, 3, "scopes", |s| serde_json::from_str(s).ok())?,
                    })
                })
                .optional()
        })
        .await
    }

    async fn create_client(
        &self,
        name: &str,
        redirect_uris: &[String],
        scopes: &[String],
    ) -> StoreResult<RegisteredClient> {
        let client = RegisteredClient {
            client_id: format!("local-{}", uuid::Uuid::new_v4().simple()),
            name: name.to_owned(),
            redirect_uris: redirect_uris.to_vec(),
            scopes: scopes.to_vec(),
        };
        let row = client.clone();
        self.write(move |tx, now| {
            tx.prepare_cached("INSERT INTO oauth_clients (client_id, name, redirect_uris, scopes, created_at) VALUES (?1, ?2, ?3, ?4, ?5)")?.execute(params![row.client_id, row.name, json(&row.redirect_uris), json(&row.scopes), now.as_millis()],
            )
        })
        .await?;
        Ok(client)
    }
}

#[async_trait]
impl ManageProjects for SqliteStore {
    async fn create_project(&self, owner: &OwnerId, name: &str) -> StoreResult<Project> {
        let p = Project::new(owner, name, self.clock.now());
        let row = p.clone();
        self.write(move |tx, _| {
            tx.prepare_cached(&format!(
                "INSERT INTO projects ({PROJECT_COLS}) VALUES (?1, ?2, ?3, 0, '[]', NULL, ?4, '{{}}')"
            ))?
            .execute(params![
                row.project_id.to_string(),
                row.owner.as_str(),
                row.name,
                row.created_at.as_millis()
            ])
        })
        .await?;
        Ok(p)
    }

    async fn set_project_enabled(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        enabled: bool,
    ) -> StoreResult<Option<Project>> {
        let owner = owner.as_str().to_owned();
        self.write(move |tx, _| {
            tx.prepare_cached(&format!(
                "UPDATE projects SET enabled = ?1 WHERE project_id = ?2 AND owner = ?3 RETURNING {PROJECT_COLS}"
            ))?
            .query_row(params![enabled, project.to_string(), owner], project_row)
            .optional()
        })
        .await
    }

    async fn get_project(&self, owner: &OwnerId, project: ProjectId) -> StoreResult<Option<Project>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| get_project_tx(tx, &owner, &project.to_string())).await
    }

    async fn list_projects(&self, owner: &OwnerId) -> StoreResult<Vec<Project>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            let mut st = tx
                .prepare_cached(&format!("SELECT {PROJECT_COLS} FROM projects WHERE owner = ?1 ORDER BY project_id"))?;
            st.query_map([owner], project_row)?.collect()
        })
        .await
    }
}

#[async_trait]
impl SyncSessions for SqliteStore {
    async fn sync_sessions(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        device: uuid::Uuid,
        sessions: &[SessionMeta],
    ) -> StoreResult<SyncOutcome> {
        let owner = owner.as_str().to_owned();
        let sessions = sessions.to_vec();
        self.write(move |tx, now| {
            let enabled = tx
                .prepare_cached(
                    "UPDATE projects SET last_sync_at = ?1 WHERE project_id = ?2 AND owner = ?3 AND enabled = 1",
                )?
                .execute(params![now.as_millis(), project.to_string(), owner])?;
            if enabled == 0 {
                return Ok(if get_project_tx(tx, &owner, &project.to_string())?.is_some() {
                    SyncOutcome::Disabled
                } else {
                    SyncOutcome::NotFound
                });
            }
            set_device_share_tx(tx, &project.to_string(), &device.to_string(), &sessions)?;
            let p = get_project_tx(tx, &owner, &project.to_string())?.ok_or_else(missing_target)?;
            Ok(SyncOutcome::Synced(p))
        })
        .await
    }
}

#[async_trait]
impl QueueRuns for SqliteStore {
    async fn queue_run(&self, req: &QueueRun) -> StoreResult<QueueOutcome> {
        let req = req.clone();
        let policy = self.policy;
        self.write(move |tx, now| {
            let key = idempotency_record_key("run", req.agent.as_str(), &req.idempotency_key);
            let hash = req.request_hash();
            if let Some((seen, target)) = get_idempotency_tx(tx, &key, now)? {
                if seen != hash {
                    return Ok(QueueOutcome::Rejected(QueueRejection::IdempotencyMismatch));
                }
                return get_run_tx(tx, &target)?.map(QueueOutcome::Replayed).ok_or_else(missing_target);
            }
            let owner = req.owner.as_str();
            let target = match req.project_id {
                Some(p) => check_named_project(get_project_tx(tx, owner, &p.to_string())?.as_ref(), &req.graph_session_id),
                None => {
                    let mut st = tx.prepare_cached(&format!("SELECT {PROJECT_COLS} FROM projects WHERE owner = ?1"))?;
                    let projects = st.query_map([owner], project_row)?.collect::<rusqlite::Result<Vec<_>>>()?;
                    resolve_project(&projects, &req.graph_session_id)
                }
            };
            let target = match target {
                Ok(t) => t,
                Err(rejection) => return Ok(QueueOutcome::Rejected(rejection)),
            };
            let run = Run::queued(&req, target, now, &policy);
            tx.prepare_cached(&format!("INSERT INTO runs ({RUN_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', ?8, ?9, NULL, NULL, NULL, 0, NULL, NULL, NULL)"))?.execute(params![
                    run.command_id.to_string(),
                    run.owner.as_str(),
                    run.agent.as_str(),
                    run.project_id.to_string(),
                    run.graph_session_id.as_str(),
                    run.slug,
                    run.arguments.to_string(),
                    run.queued_at.as_millis(),
                    run.expires_at.as_millis(),
                ],
            )?;
            tx.prepare_cached("INSERT OR REPLACE INTO idempotency (record_key, request_hash, target_id, expires_at) VALUES (?1, ?2, ?3, ?4)")?.execute(params![key, hash, run.command_id.to_string(), now.plus(policy.idempotency_ttl).as_millis()],
            )?;
            record_events(tx, &derive_run(None, Some(&run)), now)?;
            Ok(QueueOutcome::Queued(run))
        })
        .await
    }
}

#[async_trait]
impl ReadRuns for SqliteStore {
    async fn get_run(&self, agent: &AgentId, command: CommandId) -> StoreResult<Option<Run>> {
        let agent = agent.clone();
        self.read(move |tx, _| Ok(get_run_tx(tx, &command.to_string())?.filter(|r| r.agent == agent))).await
    }
}

#[async_trait]
impl CancelRuns for SqliteStore {
    async fn cancel_run(&self, agent: &AgentId, command: CommandId) -> StoreResult<CancelRunOutcome> {
        let agent = agent.clone();
        let policy = self.policy;
        self.write(move |tx, now| {
            let id = command.to_string();
            watch_run(tx, &id, now, || {
                let n = tx
                    .prepare_cached(
                        "UPDATE runs SET status = 'cancelled', finished_at = ?1 \
                     WHERE command_id = ?2 AND agent = ?3 AND status = 'queued' AND expires_at > ?1",
                    )?
                    .execute(params![now.as_millis(), id, agent.as_str()])?;
                if n == 1 {
                    return Ok(CancelRunOutcome::Cancelled);
                }
                match classify_cancel(get_run_tx(tx, &id)?.as_ref(), &agent, now, &policy) {
                    CancelStep::Done(outcome) => Ok(outcome),
                    CancelStep::FlagRunning => {
                        let cutoff = now.minus(policy.heartbeat_timeout).as_millis();
                        let n = tx
                            .prepare_cached(
                                "UPDATE runs SET cancel_requested = 1 \
                             WHERE command_id = ?1 AND agent = ?2 AND status = 'running' AND last_heartbeat_at > ?3",
                            )?
                            .execute(params![id, agent.as_str(), cutoff])?;
                        if n == 1 {
                            return Ok(CancelRunOutcome::CancelRequested);
                        }
                        // Unreachable inside one IMMEDIATE transaction; classify again rather than guess.
                        Ok(match classify_cancel(get_run_tx(tx, &id)?.as_ref(), &agent, now, &policy) {
                            CancelStep::Done(outcome) => outcome,
                            CancelStep::FlagRunning => CancelRunOutcome::Unchanged(RunStatus::Running),
                        })
                    }
                }
            })
        })
        .await
    }
}

#[async_trait]
impl RelayRuns for SqliteStore {
    async fn list_queued(&self, owner: &OwnerId, project: ProjectId, limit: usize) -> StoreResult<Vec<Run>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, now| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {RUN_COLS} FROM runs WHERE project_id = ?1 AND owner = ?2 AND status = 'queued' \
                 AND expires_at > ?3 ORDER BY expires_at, command_id LIMIT ?4"
            ))?;
            st.query_map(params![project.to_string(), owner, now.as_millis(), limit as i64], run_row)?.collect()
        })
        .await
    }

    async fn start_run(&self, owner: &OwnerId, command: CommandId, execution_id: &str) -> StoreResult<StartOutcome> {
        let owner = owner.clone();
        let execution_id = execution_id.to_owned();
        let policy = self.policy;
        self.write(move |tx, now| {
            let id = command.to_string();
            watch_run(tx, &id, now, || {
                let n = tx.prepare_cached("UPDATE runs SET status = 'running', started_at = ?1, last_heartbeat_at = ?1, execution_id = ?2 \
                     WHERE command_id = ?3 AND owner = ?4 AND status = 'queued' AND expires_at > ?1")?.execute(params![now.as_millis(), execution_id, id, owner.as_str()],
                )?;
                if n == 1 {
                    return Ok(StartOutcome::Started);
                }
                Ok(classify_start(get_run_tx(tx, &id)?.as_ref(), &owner, &execution_id, now, &policy))
            })
        })
        .await
    }

    async fn control_run(&self, owner: &OwnerId, command: CommandId) -> StoreResult<ControlOutcome> {
        let owner = owner.clone();
        let policy = self.policy;
        self.write(move |tx, now| {
            let id = command.to_string();
            let cutoff = now.minus(policy.heartbeat_timeout).as_millis();
            let flag: Option<bool> = tx
                .query_row(
                    "UPDATE runs SET last_heartbeat_at = ?1 \
                     WHERE command_id = ?2 AND owner = ?3 AND status = 'running' AND last_heartbeat_at > ?4 \
                     RETURNING cancel_requested",
                    params![now.as_millis(), id, owner.as_str(), cutoff],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(match flag {
                Some(cancel_requested) => ControlOutcome::Running { cancel_requested },
                None => classify_control(get_run_tx(tx, &id)?.as_ref(), &owner, now, &policy),
            })
        })
        .await
    }

    async fn complete_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
        completion: &Completion,
    ) -> StoreResult<CompleteOutcome> {
        let owner = owner.clone();
        let completion = completion.clone();
        let policy = self.policy;
        self.write(move |tx, now| {
            let id = command.to_string();
            watch_run(tx, &id, now, || {
                let hash = completion.hash();
                let body = json(&completion);
                let cutoff = now.minus(policy.heartbeat_timeout).as_millis();
                let status = RunStatus::from(completion.status);
                // A queued command may only be refused (failed/cancelled), never completed unstarted.
                let allow_queued = status != RunStatus::Completed;
                let n = tx.prepare_cached("UPDATE runs SET status = ?1, finished_at = ?2, execution_id = ?3, completion = ?4, completion_hash = ?5 \
                     WHERE command_id = ?6 AND owner = ?7 AND ( \
                       (status = 'running' AND execution_id = ?3 AND last_heartbeat_at > ?8 AND cancel_requested = 0) \
                       OR (?9 AND status = 'queued' AND expires_at > ?2))")?.execute(params![status.as_str(), now.as_millis(), completion.execution_id, body, hash, id, owner.as_str(), cutoff, allow_queued],
                )?;
                if n == 1 {
                    if status == RunStatus::Completed {
                        record_duration_tx(tx, &id, now)?;
                    }
                    return Ok(CompleteOutcome::Recorded(status));
                }
                match classify_complete(get_run_tx(tx, &id)?.as_ref(), &owner, &completion, &hash, now, &policy) {
                    CompleteStep::Done(outcome) => Ok(outcome),
                    CompleteStep::RecordCancelled => {
                        let n = tx.prepare_cached("UPDATE runs SET status = 'cancelled', finished_at = ?1, completion = ?2, completion_hash = ?3 \
                             WHERE command_id = ?4 AND owner = ?5 AND status = 'running' AND execution_id = ?6 \
                             AND cancel_requested = 1 AND last_heartbeat_at > ?7")?.execute(params![now.as_millis(), body, hash, id, owner.as_str(), completion.execution_id, cutoff],
                        )?;
                        if n == 1 {
                            return Ok(CompleteOutcome::Recorded(RunStatus::Cancelled));
                        }
                        // Unreachable inside one IMMEDIATE transaction; classify again rather than guess.
                        let old = get_run_tx(tx, &id)?;
                        Ok(match classify_complete(old.as_ref(), &owner, &completion, &hash, now, &policy) {
                            CompleteStep::Done(outcome) => outcome,
                            CompleteStep::RecordCancelled => CompleteOutcome::Conflict(RunStatus::Running),
                        })
                    }
                }
            })
        })
        .await
    }
}

#[async_trait]
impl ManageLinks for SqliteStore {
    async fn create_link(&self, owner: &OwnerId, project: ProjectId, name: &str) -> StoreResult<Option<ChatLink>> {
        let link = ChatLink::new(owner, project, name, self.clock.now());
        self.write(move |tx, _| {
            if get_project_tx(tx, link.owner.as_str(), &project.to_string())?.is_none() {
                return Ok(None);
            }
            tx.prepare_cached(&format!("INSERT INTO links ({LINK_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, NULL)"))?.execute(
                params![
                    link.link_id.to_string(),
                    link.owner.as_str(),
                    project.to_string(),
                    link.name,
                    link.created_at.as_millis()
                ],
            )?;
            Ok(Some(link))
        })
        .await
    }

    async fn get_link(&self, owner: &OwnerId, link: ChatLinkId) -> StoreResult<Option<ChatLink>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            tx.prepare_cached(&format!(
                "SELECT {LINK_COLS} FROM links WHERE link_id = ?1 AND owner = ?2 AND deleted_at IS NULL"
            ))?
            .query_row([link.to_string(), owner], link_row)
            .optional()
        })
        .await
    }

    async fn list_links(&self, owner: &OwnerId) -> StoreResult<Vec<ChatLink>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {LINK_COLS} FROM links WHERE owner = ?1 AND deleted_at IS NULL ORDER BY created_at, link_id"
            ))?;
            st.query_map([owner], link_row)?.collect()
        })
        .await
    }

    async fn delete_link(&self, owner: &OwnerId, link: ChatLinkId) -> StoreResult<Option<usize>> {
        let owner = owner.as_str().to_owned();
        self.write(move |tx, now| {
            // A link already deleted (tombstone not yet expired) finishes its sweep again.
            let known: Option<i64> = tx
                .query_row("SELECT 1 FROM links WHERE link_id = ?1 AND owner = ?2", [link.to_string(), owner.clone()], |r| {
                    r.get(0)
                })
                .optional()?;
            if known.is_none() {
                return Ok(None);
            }
            tx.prepare_cached("UPDATE links SET deleted_at = COALESCE(deleted_at, ?1), subscription = NULL WHERE link_id = ?2 AND owner = ?3")?.execute(params![now.as_millis(), link.to_string(), owner],
            )?;
            let open: Vec<Task> = {
                let mut st = tx.prepare_cached(&format!(
                    "SELECT {TASK_COLS} FROM tasks WHERE link_id = ?1 AND owner = ?2 \
                     AND status IN ('queued', 'claimed') AND expires_at > ?3"
                ))?;
                st.query_map(params![link.to_string(), owner, now.as_millis()], task_row)?.collect::<rusqlite::Result<_>>()?
            };
            let cancelled = tx.prepare_cached("UPDATE tasks SET status = 'cancelled', finished_at = ?1, link_deleted = 1 \
                 WHERE link_id = ?2 AND owner = ?3 AND status IN ('queued', 'claimed') AND expires_at > ?1")?.execute(params![now.as_millis(), link.to_string(), owner],
            )?;
            for old in &open {
                let new = get_task_tx(tx, &link.to_string(), &old.task_id.to_string())?;
                record_events(tx, &derive_task(Some(old), new.as_ref()), now)?;
            }
            tx.prepare_cached("UPDATE tasks SET link_deleted = 1 WHERE link_id = ?1 AND owner = ?2 AND link_deleted = 0")?.execute(params![link.to_string(), owner],
            )?;
            Ok(Some(cancelled))
        })
        .await
    }

    async fn set_subscription(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        subscription: Option<&Subscription>,
    ) -> StoreResult<Option<ChatLink>> {
        let owner = owner.as_str().to_owned();
        let json = subscription.map(json);
        self.write(move |tx, _| {
            tx.prepare_cached(&format!(
                "UPDATE links SET subscription = ?1 WHERE link_id = ?2 AND owner = ?3 AND deleted_at IS NULL \
                     RETURNING {LINK_COLS}"
            ))?
            .query_row(params![json, link.to_string(), owner], link_row)
            .optional()
        })
        .await
    }
}

#[async_trait]
impl AssignTasks for SqliteStore {
    async fn assign_task(&self, req: &AssignTask) -> StoreResult<AssignOutcome> {
        let req = req.clone();
        let policy = self.policy;
        self.write(move |tx, now| {
            let key = idempotency_record_key("task", req.owner.as_str(), &req.idempotency_key);
            let hash = req.request_hash();
            if let Some((seen, target)) = get_idempotency_tx(tx, &key, now)? {
                if seen != hash {
                    return Ok(AssignOutcome::Rejected(AssignRejection::IdempotencyMismatch));
                }
                return get_task_tx(tx, &req.link_id.to_string(), &target)?
                    .map(AssignOutcome::Replayed)
                    .ok_or_else(missing_target);
            }
            let link_ok: Option<i64> = tx
                .query_row(
                    "SELECT 1 FROM links WHERE link_id = ?1 AND owner = ?2 AND deleted_at IS NULL",
                    [req.link_id.to_string(), req.owner.as_str().to_owned()],
                    |r| r.get(0),
                )
                .optional()?;
            if link_ok.is_none() {
                return Ok(AssignOutcome::Rejected(AssignRejection::LinkNotFound));
            }
            let task = Task::assigned(&req, now, &policy);
            tx.prepare_cached(&format!(
                    "INSERT INTO tasks ({TASK_COLS}) VALUES (?1, ?2, ?3, ?4, 'queued', ?5, ?6, NULL, NULL, NULL, NULL, NULL, 0, NULL)"
                ))?.execute(params![
                    task.task_id.to_string(),
                    task.link_id.to_string(),
                    task.owner.as_str(),
                    task.objective,
                    task.created_at.as_millis(),
                    task.expires_at.as_millis(),
                ],
            )?;
            tx.prepare_cached("INSERT OR REPLACE INTO idempotency (record_key, request_hash, target_id, expires_at) VALUES (?1, ?2, ?3, ?4)")?.execute(params![key, hash, task.task_id.to_string(), now.plus(policy.idempotency_ttl).as_millis()],
            )?;
            record_events(tx, &derive_task(None, Some(&task)), now)?;
            Ok(AssignOutcome::Assigned(task))
        })
        .await
    }

    async fn cancel_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<CancelTaskOutcome> {
        let owner = owner.clone();
        self.write(move |tx, now| {
            watch_task(tx, &link.to_string(), &task.to_string(), now, || {
                let n = tx.prepare_cached("UPDATE tasks SET status = 'cancelled', finished_at = ?1 \
                     WHERE task_id = ?2 AND link_id = ?3 AND owner = ?4 AND status IN ('queued', 'claimed') AND expires_at > ?1")?.execute(params![now.as_millis(), task.to_string(), link.to_string(), owner.as_str()],
                )?;
                if n == 1 {
                    return Ok(CancelTaskOutcome::Cancelled);
                }
                let old = get_task_tx(tx, &link.to_string(), &task.to_string())?;
                Ok(classify_cancel_task(old.as_ref(), &owner, &link, now))
            })
        })
        .await
    }

    async fn list_link_tasks(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        limit: usize,
        before: Option<TaskId>,
    ) -> StoreResult<TaskPage> {
        let owner = owner.as_str().to_owned();
        // UUIDv7 text sorts by creation; "~" sorts after every id (the first page).
        let before = before.map_or_else(|| "~".to_owned(), |t| t.to_string());
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {TASK_COLS} FROM tasks WHERE link_id = ?1 AND owner = ?2 AND task_id < ?3 \
                 ORDER BY task_id DESC LIMIT ?4"
            ))?;
            // One row more than asked tells whether there is a next page.
            let rows = st.query_map(params![link.to_string(), owner, before, limit as i64 + 1], task_row)?;
            let mut tasks = rows.collect::<rusqlite::Result<Vec<_>>>()?;
            let next = if tasks.len() > limit {
                tasks.truncate(limit);
                tasks.last().map(|t| t.task_id)
            } else {
                None
            };
            Ok(TaskPage { tasks, next })
        })
        .await
    }

    async fn list_artifacts(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        task: TaskId,
    ) -> StoreResult<Vec<ArtifactRecord>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(
                "SELECT a.link_id, a.task_id, a.claim_id, a.artifact_id, a.name, a.content_type, a.sha256, a.size, \
                 a.object_key FROM artifacts a JOIN tasks t ON t.task_id = a.task_id AND t.link_id = a.link_id \
                 WHERE a.link_id = ?1 AND a.task_id = ?2 AND t.owner = ?3 ORDER BY a.created_at, a.artifact_id",
            )?;
            st.query_map(params![link.to_string(), task.to_string(), owner], |row| {
                Ok(ArtifactRecord {
                    link_id: col(row, 0, "link_id", |s| ChatLinkId::parse("chat_link_id", s).ok())?,
                    task_id: col(row, 1, "task_id", |s| TaskId::parse("task_id", s).ok())?,
                    claim_id: col(row, 2, "claim_id", |s| ClaimId::parse("claim_id", s).ok())?,
                    artifact_id: row.get(3)?,
                    name: row.get(4)?,
                    content_type: row.get(5)?,
                    sha256: row.get(6)?,
                    size: u64::try_from(row.get::<_, i64>(7)?).unwrap_or(0),
                    object_key: row.get(8)?,
                })
            })?
            .collect()
        })
        .await
    }
}

/// A link's open tasks, oldest expiry first: the hot read of every agent's inbox.
fn list_open_sql() -> String {
    format!(
        "SELECT {TASK_COLS} FROM tasks WHERE link_id = ?1 AND owner = ?2 AND status IN ('queued', 'claimed') \
         AND expires_at > ?3 ORDER BY expires_at, task_id LIMIT ?4"
    )
}

#[async_trait]
impl ReadTasks for SqliteStore {
    async fn list_open_tasks(&self, owner: &OwnerId, link: ChatLinkId, limit: usize) -> StoreResult<Vec<Task>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, now| {
            let mut st = tx.prepare_cached(&list_open_sql())?;
            st.query_map(params![link.to_string(), owner, now.as_millis(), limit as i64], task_row)?.collect()
        })
        .await
    }

    async fn get_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<Option<Task>> {
        let owner = owner.clone();
        self.read(move |tx, _| {
            Ok(get_task_tx(tx, &link.to_string(), &task.to_string())?.filter(|t| t.visible_to(&owner, &link)))
        })
        .await
    }
}

#[async_trait]
impl ClaimTasks for SqliteStore {
    async fn claim_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<ClaimOutcome> {
        let owner = owner.clone();
        let lease = self.policy.lease;
        self.write(move |tx, now| {
            watch_task(tx, &link.to_string(), &task.to_string(), now, || {
                let claim_id = ClaimId::generate();
                let lease_until = now.plus(lease);
                let n = tx
                    .prepare_cached(
                        "UPDATE tasks SET status = 'claimed', claim_id = ?1, lease_until = ?2, claimed_at = ?6 \
                     WHERE task_id = ?3 AND link_id = ?4 AND owner = ?5 AND expires_at > ?6 \
                     AND (status = 'queued' OR (status = 'claimed' AND lease_until <= ?6))",
                    )?
                    .execute(params![
                        claim_id.to_string(),
                        lease_until.as_millis(),
                        task.to_string(),
                        link.to_string(),
                        owner.as_str(),
                        now.as_millis()
                    ])?;
                if n == 1 {
                    return Ok(ClaimOutcome::Claimed { claim_id, lease_until });
                }
                let old = get_task_tx(tx, &link.to_string(), &task.to_string())?;
                Ok(classify_claim(old.as_ref(), &owner, &link, now))
            })
        })
        .await
    }

    async fn submit_task(&self, req: &SubmitTask) -> StoreResult<SubmitOutcome> {
        let req = req.clone();
        self.write(move |tx, now| {
            let hash = req.result_hash();
            let SubmitTask { owner, link_id: link, task_id: task, claim_id: claim, status, result } = &req;
            watch_task(tx, &link.to_string(), &task.to_string(), now, || {
                let n = tx.prepare_cached("UPDATE tasks SET status = ?1, result = ?2, result_hash = ?3, finished_at = ?4 \
                     WHERE task_id = ?5 AND link_id = ?6 AND owner = ?7 AND status = 'claimed' AND claim_id = ?8 AND expires_at > ?4")?.execute(params![
                        TaskStatus::from(*status).as_str(),
                        result,
                        hash,
                        now.as_millis(),
                        task.to_string(),
                        link.to_string(),
                        owner.as_str(),
                        claim.to_string(),
                    ],
                )?;
                if n == 1 {
                    return Ok(SubmitOutcome::Accepted);
                }
                let old = get_task_tx(tx, &link.to_string(), &task.to_string())?;
                Ok(classify_submit(old.as_ref(), owner, link, claim, Some(&hash), now))
            })
        })
        .await
    }
}

#[async_trait]
impl RecordArtifacts for SqliteStore {
    async fn record_artifact(&self, owner: &OwnerId, record: &ArtifactRecord) -> StoreResult<ArtifactOutcome> {
        let owner = owner.clone();
        let r = record.clone();
        self.write(move |tx, now| {
            let (link, task) = (r.link_id.to_string(), r.task_id.to_string());
            let existing: Option<String> = tx
                .query_row(
                    "SELECT sha256 FROM artifacts WHERE link_id = ?1 AND task_id = ?2 AND artifact_id = ?3",
                    [&link, &task, &r.artifact_id],
                    |row| row.get(0),
                )
                .optional()?;
            let old = get_task_tx(tx, &link, &task)?;
            let owned = old.as_ref().is_some_and(|t| t.owner == owner);
            if let Some(sha) = existing.filter(|_| owned) {
                return Ok(if sha == r.sha256 { ArtifactOutcome::Replayed } else { ArtifactOutcome::DifferentContent });
            }
            let holds = old.as_ref().is_some_and(|t| {
                owned && t.status == TaskStatus::Claimed && t.claim_id == Some(r.claim_id) && now < t.expires_at
            });
            if !holds {
                return Ok(match classify_submit(old.as_ref(), &owner, &r.link_id, &r.claim_id, None, now) {
                    SubmitOutcome::Rejected(why) => ArtifactOutcome::Rejected(why),
                    // classify_submit never accepts without a hash; treat anything else as stale.
                    _ => ArtifactOutcome::Rejected(domain::tasks::SubmitRejection::StaleClaim),
                });
            }
            tx.prepare_cached("INSERT INTO artifacts (link_id, task_id, artifact_id, claim_id, name, content_type, sha256, size, object_key, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)")?.execute(params![link, task, r.artifact_id, r.claim_id.to_string(), r.name, r.content_type, r.sha256, r.size as i64, r.object_key, now.as_millis()],
            )?;
            Ok(ArtifactOutcome::Recorded)
        })
        .await
    }

    async fn check_artifact(&self, owner: &OwnerId, record: &ArtifactRecord) -> StoreResult<ArtifactCheck> {
        let (owner, r) = (owner.clone(), record.clone());
        self.read(move |tx, now| {
            let (link, task) = (r.link_id.to_string(), r.task_id.to_string());
            let existing: Option<String> = tx
                .query_row(
                    "SELECT sha256 FROM artifacts WHERE link_id = ?1 AND task_id = ?2 AND artifact_id = ?3",
                    [&link, &task, &r.artifact_id],
                    |row| row.get(0),
                )
                .optional()?;
            let t = get_task_tx(tx, &link, &task)?;
            Ok(check_artifact(existing.as_deref(), t.as_ref(), &owner, &r, now))
        })
        .await
    }
}

const DEVICE_COLS: &str = "device_id, owner, name, token_hash, created_at, revoked_at, last_seen_at";

fn device_row(row: &Row<'_>) -> rusqlite::Result<Device> {
    Ok(Device {
        device_id: col(row, 0, "device_id", |s| uuid::Uuid::try_parse(s).ok())?,
        owner: col(row, 1, "owner", |s| OwnerId::new(s).ok())?,
        name: row.get(2)?,
        token_hash: row.get(3)?,
        created_at: ts(row.get(4)?),
        revoked_at: opt_ts(row.get(5)?),
        last_seen_at: opt_ts(row.get(6)?),
    })
}

#[async_trait]
impl ManageDevices for SqliteStore {
    async fn create_device(&self, owner: &OwnerId, name: &str, token_hash: &str) -> StoreResult<Device> {
        let d = Device::new(owner, name, token_hash, self.clock.now());
        let row = d.clone();
        self.write(move |tx, _| {
            tx.prepare_cached(&format!("INSERT INTO devices ({DEVICE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL)"))?
                .execute(params![
                    row.device_id.to_string(),
                    row.owner.as_str(),
                    row.name,
                    row.token_hash,
                    row.created_at.as_millis()
                ])
        })
        .await?;
        Ok(d)
    }

    async fn list_devices(&self, owner: &OwnerId) -> StoreResult<Vec<Device>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {DEVICE_COLS} FROM devices WHERE owner = ?1 ORDER BY created_at, device_id"
            ))?;
            st.query_map([owner], device_row)?.collect()
        })
        .await
    }

    async fn revoke_device(&self, owner: &OwnerId, device: uuid::Uuid) -> StoreResult<bool> {
        let owner = owner.as_str().to_owned();
        self.write(move |tx, now| {
            let revoked = tx
                .prepare_cached(
                    "UPDATE devices SET revoked_at = COALESCE(revoked_at, ?1) WHERE device_id = ?2 AND owner = ?3",
                )?
                .execute(params![now.as_millis(), device.to_string(), owner])?
                == 1;
            if revoked {
                // Its shares go with it, in the same transaction.
                let projects: Vec<String> = tx
                    .prepare("SELECT project_id FROM device_sessions WHERE device_id = ?1")?
                    .query_map([device.to_string()], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                for p in projects {
                    set_device_share_tx(tx, &p, &device.to_string(), &[])?;
                }
            }
            Ok(revoked)
        })
        .await
    }
}

#[async_trait]
impl AuthenticateDevices for SqliteStore {
    async fn device_by_token_hash(&self, token_hash: &str) -> StoreResult<Option<Device>> {
        let hash = token_hash.to_owned();
        self.read(move |tx, _| {
            tx.prepare_cached(&format!(
                "SELECT {DEVICE_COLS} FROM devices WHERE token_hash = ?1 AND revoked_at IS NULL"
            ))?
            .query_row([hash], device_row)
            .optional()
        })
        .await
    }

    async fn record_device_seen(&self, device: &Device) -> StoreResult<()> {
        let id = device.device_id.to_string();
        let granularity = i64::try_from(DEVICE_SEEN_GRANULARITY.as_millis()).unwrap_or(i64::MAX);
        self.write(move |tx, now| {
            tx.prepare_cached("UPDATE devices SET last_seen_at = ?1 WHERE device_id = ?2 AND (last_seen_at IS NULL OR last_seen_at <= ?3)")?.execute(params![now.as_millis(), id, now.as_millis() - granularity],
            )
            .map(drop)
        })
        .await
    }
}

#[async_trait]
impl OwnerRuns for SqliteStore {
    async fn recent_runs(&self, owner: &OwnerId, limit: usize, before: Option<CommandId>) -> StoreResult<Vec<Run>> {
        let owner = owner.as_str().to_owned();
        let before = before.map_or_else(|| "~".to_owned(), |c| c.to_string());
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {RUN_COLS} FROM runs WHERE owner = ?1 AND command_id < ?2 ORDER BY command_id DESC LIMIT ?3"
            ))?;
            st.query_map(params![owner, before, limit as i64], run_row)?.collect()
        })
        .await
    }
}

#[async_trait]
impl RecordDeliveries for SqliteStore {
    async fn record_delivery(&self, owner: &OwnerId, link: ChatLinkId, outcome: &DeliveryOutcome) -> StoreResult<()> {
        let (owner, body) = (owner.as_str().to_owned(), json(outcome));
        self.bookkeeping(move |tx, _| {
            tx.prepare_cached(
                "INSERT INTO deliveries (owner, link_id, body) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (owner, link_id) DO UPDATE SET body = excluded.body",
            )?
            .execute(params![owner, link.to_string(), body])
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

fn outbox_row(row: &Row<'_>) -> rusqlite::Result<OutboxEntry> {
    Ok(OutboxEntry {
        event: col(row, 0, "body", |s| serde_json::from_str(s).ok())?,
        attempts: u32::try_from(row.get::<_, i64>(1)?).unwrap_or(u32::MAX),
    })
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
                "UPDATE event_outbox SET attempts = attempts + 1, last_error = ?1, \
                 state = CASE WHEN ?2 IS NULL THEN 'dead' ELSE 'pending' END, \
                 next_attempt_at = COALESCE(?2, next_attempt_at) WHERE event_id = ?3",
            )?
            .execute(params![error, retry_at.map(Timestamp::as_millis), id])
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

#[cfg(test)]
mod tests {
    use super::*;
    use domain::clock::ManualClock;

    #[tokio::test]
    async fn in_memory_store_keeps_its_data_in_its_one_connection() {
        let clock = Arc::new(ManualClock::starting_now());
        let store = SqliteStore::in_memory(clock, Policy::default()).unwrap();
        let owner = OwnerId::new("o").unwrap();
        let p = store.create_project(&owner, "P").await.unwrap();
        // Two calls at once share the single connection without deadlocking.
        let (a, b) = tokio::join!(store.list_projects(&owner), store.get_project(&owner, p.project_id));
        assert_eq!(a.unwrap(), vec![p.clone()]);
        assert_eq!(b.unwrap(), Some(p));
        assert_eq!(store.write_transactions(), 1);
        assert!(store.path().is_none());
    }

    #[test]
    fn a_cached_statement_bound_again_is_not_planned_again() {
        let mut conn = Pool::open_connection(None).unwrap();
        migrate(&mut conn).unwrap();
        for i in 0..5i64 {
            let mut st = conn.prepare_cached(&list_open_sql()).unwrap();
            let rows = st.query_map(params!["link", "owner", 1_000 + i, 10 + i], |_| Ok(())).unwrap().count();
            assert_eq!(rows, 0);
        }
        let st = conn.prepare_cached(&list_open_sql()).unwrap();
        assert_eq!(st.get_status(rusqlite::StatementStatus::RePrepare), 0, "re-prepared on a new binding");
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

    fn temp_db() -> PathBuf {
        std::env::temp_dir().join(format!("fc-migrate-{}.sqlite3", uuid::Uuid::new_v4()))
    }

    fn user_version(path: &Path) -> i64 {
        Connection::open(path).unwrap().pragma_query_value(None, "user_version", |r| r.get(0)).unwrap()
    }

    #[tokio::test]
    async fn a_database_from_before_schema_versions_is_adopted_with_its_data() {
        let path = temp_db();
        {
            // What the first builds wrote: the tables, no user_version.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA_V1).unwrap();
            conn.execute(
                "INSERT INTO projects (project_id, owner, name, enabled, sessions, last_sync_at, created_at) \
                 VALUES ('0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b', 'o', 'Old', 1, '[]', NULL, 1)",
                [],
            )
            .unwrap();
        }
        assert_eq!(user_version(&path), 0);
        let clock = Arc::new(ManualClock::starting_now());
        let store = SqliteStore::open(&path, clock, Policy::default()).unwrap();
        let projects = store.list_projects(&OwnerId::new("o").unwrap()).await.unwrap();
        assert_eq!(projects.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["Old"]);
        drop(store);
        assert_eq!(user_version(&path), SCHEMA_VERSION as i64);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_database_from_a_newer_build_is_refused_with_a_clear_message_and_left_alone() {
        let path = temp_db();
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA_V1).unwrap();
            conn.pragma_update(None, "user_version", 99).unwrap();
        }
        let clock = Arc::new(ManualClock::starting_now());
        let err = SqliteStore::open(&path, clock, Policy::default()).unwrap_err();
        let chain = domain::errors::ErrorChain(&err).to_string();
        assert!(chain.contains("schema version 99") && chain.contains("newer foundry-connect"), "{chain}");
        assert_eq!(user_version(&path), 99);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_new_database_gets_the_latest_version_and_reopening_is_a_no_op() {
        let path = temp_db();
        let clock: SharedClock = Arc::new(ManualClock::starting_now());
        drop(SqliteStore::open(&path, clock.clone(), Policy::default()).unwrap());
        assert_eq!(user_version(&path), SCHEMA_VERSION as i64);
        drop(SqliteStore::open(&path, clock, Policy::default()).unwrap());
        assert_eq!(user_version(&path), SCHEMA_VERSION as i64);
        let _ = std::fs::remove_file(&path);
    }
}
