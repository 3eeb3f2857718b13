//! The schema and its migrations, numbered by `PRAGMA user_version`.

use rusqlite::{Connection, TransactionBehavior};

/// Schema migrations, numbered by position: `MIGRATIONS[i]` takes a database from schema
/// version `i` to `i + 1`, recorded in `PRAGMA user_version` in the same transaction. A new
/// build appends a migration and never edits an old one.
///
/// Version 1 is the layout the first builds wrote without a version number; its statements
/// use `IF NOT EXISTS`, so such a database (version 0 with tables) is adopted as it is.
pub(crate) const MIGRATIONS: &[&str] = &[
    SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6, SCHEMA_V7, SCHEMA_V8, SCHEMA_V9, SCHEMA_V10,
    SCHEMA_V11, SCHEMA_V12, SCHEMA_V13, SCHEMA_V14, SCHEMA_V15, SCHEMA_V16, SCHEMA_V17, SCHEMA_V18, SCHEMA_V19,
    SCHEMA_V20,
];

/// Version 20: the client id a chat's tokens carry when it is not the one it signed in as, and
/// the hosts each owner's tokens connected (their handshakes: name, version, protocol, when).
pub(crate) const SCHEMA_V20: &str = r"
ALTER TABLE chat_connections ADD COLUMN token_client TEXT;
CREATE TABLE hosts_seen (
    owner TEXT NOT NULL,
    client_id TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    protocol TEXT NOT NULL,
    seen_at INTEGER NOT NULL,
    PRIMARY KEY (owner, client_id, name)
);
CREATE INDEX hosts_seen_by_time ON hosts_seen (owner, seen_at);
";

/// Version 19: when each registered client was last issued a token (a client unused for
/// longer than its refresh tokens live may be removed at the registration cap). Rows from
/// before have none: their last use is unknown, and they are never counted idle.
pub(crate) const SCHEMA_V19: &str = r"
ALTER TABLE client_use ADD COLUMN last_used_at INTEGER;
";

/// Version 18: tasks a desktop's Graph hands to a chat (`domain::dispatch`): a task's origin
/// (and its run, indexed, to cancel a run's open tasks), a link's consent, a run's count.
pub(crate) const SCHEMA_V18: &str = r"
ALTER TABLE tasks ADD COLUMN origin TEXT;
ALTER TABLE tasks ADD COLUMN origin_command TEXT;
CREATE INDEX tasks_by_origin ON tasks(origin_command) WHERE origin_command IS NOT NULL;
ALTER TABLE links ADD COLUMN desktop_tasks TEXT;
ALTER TABLE runs ADD COLUMN dispatched INTEGER NOT NULL DEFAULT 0;
";

/// Version 17: the last good copy of each client metadata document (signing in when the
/// document's host refuses a fetch).
pub(crate) const SCHEMA_V17: &str = r"
CREATE TABLE document_copies (url TEXT PRIMARY KEY, body TEXT NOT NULL, fetched_at INTEGER NOT NULL);
";

/// Version 16: the chats issued a token for each owner (the panel's "a chat has connected").
pub(crate) const SCHEMA_V16: &str = r"
CREATE TABLE chat_connections (
    owner TEXT NOT NULL,
    client_id TEXT NOT NULL,
    first_at INTEGER NOT NULL,
    last_at INTEGER NOT NULL,
    PRIMARY KEY (owner, client_id)
);
";

/// Version 15: a running Graph's newest progress, as its relay forwarded it (`domain::progress`).
pub(crate) const SCHEMA_V15: &str = r"
ALTER TABLE runs ADD COLUMN progress TEXT;
";

/// Version 14: since when the desktop watch counts a desktop gone (`desktop.offline`).
pub(crate) const SCHEMA_V14: &str = r"
ALTER TABLE devices ADD COLUMN offline_since INTEGER;
";

/// Version 13: which desktop started each run (the owner's "busy with").
pub(crate) const SCHEMA_V13: &str = r"
ALTER TABLE runs ADD COLUMN device_id TEXT;
";

/// Version 12: what each desktop's relay last reported of itself (`domain::fleet`), and the
/// owner's pause of it.
pub(crate) const SCHEMA_V12: &str = r"
ALTER TABLE devices ADD COLUMN relay TEXT;
ALTER TABLE devices ADD COLUMN paused_at INTEGER;
ALTER TABLE devices ADD COLUMN paused_until INTEGER;
ALTER TABLE devices ADD COLUMN pause_note TEXT;
";

/// Version 11: the address a pairing came from (shown to the owner who decides it), and the
/// failed attempts counted per key and window (pairing codes an owner looked up in vain).
pub(crate) const SCHEMA_V11: &str = r"
ALTER TABLE pairings ADD COLUMN source_address TEXT NOT NULL DEFAULT '';
CREATE TABLE attempts (key TEXT NOT NULL, window_end INTEGER NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (key, window_end));
";

/// Version 10: desktops pairing with an owner (RFC 8628's shape), and how many pairings each
/// source address started per UTC hour.
pub(crate) const SCHEMA_V10: &str = r"
CREATE TABLE pairings (
    user_code TEXT PRIMARY KEY, device_code_hash TEXT NOT NULL, token_hash TEXT NOT NULL,
    name TEXT NOT NULL, os TEXT NOT NULL, arch TEXT NOT NULL, source TEXT NOT NULL,
    created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, last_poll_at INTEGER,
    status TEXT NOT NULL, owner TEXT, device_name TEXT, device_id TEXT);
CREATE TABLE pairing_sources (window TEXT PRIMARY KEY, count INTEGER NOT NULL, hour_end INTEGER NOT NULL);
";

/// Version 9: when each registered client was first issued a token, so registrations nobody
/// completed can be removed.
pub(crate) const SCHEMA_V9: &str = r"
CREATE TABLE client_use (client_id TEXT PRIMARY KEY, first_used_at INTEGER NOT NULL);
";

/// Version 8: refresh-token families of the local authorization server (rotation with reuse
/// detection: the current token of each family, and whether it is revoked).
pub(crate) const SCHEMA_V8: &str = r"
CREATE TABLE refresh_families (
    family TEXT PRIMARY KEY, current TEXT NOT NULL, revoked INTEGER NOT NULL DEFAULT 0, expires_at INTEGER NOT NULL);
";

/// Version 7: the last delivery per link keeps its time, so an older outcome (racing
/// deliveries) never replaces a newer one.
pub(crate) const SCHEMA_V7: &str = r"
ALTER TABLE deliveries ADD COLUMN at INTEGER NOT NULL DEFAULT 0;
";

/// Version 6: each project keeps the recent durations of its sessions' completed runs
/// (`{"<session>#<slot>": ms}`), written by the completion in its own transaction.
pub(crate) const SCHEMA_V6: &str = r"
ALTER TABLE projects ADD COLUMN durations TEXT NOT NULL DEFAULT '{}';
";

/// Version 5: each device's shared sessions per project (`projects.sessions` stays, as their
/// union, rewritten in the same transaction as a device's list).
pub(crate) const SCHEMA_V5: &str = r"
CREATE TABLE device_sessions (
    project_id TEXT NOT NULL, device_id TEXT NOT NULL, sessions TEXT NOT NULL,
    PRIMARY KEY (project_id, device_id));
CREATE INDEX device_sessions_by_device ON device_sessions(device_id);
";

/// Version 4: OAuth clients that MCP clients registered for themselves (the local
/// authorization server's registry; Cognito keeps them in the cloud).
pub(crate) const SCHEMA_V4: &str = r"
CREATE TABLE oauth_clients (
    client_id TEXT PRIMARY KEY, name TEXT NOT NULL, redirect_uris TEXT NOT NULL, scopes TEXT NOT NULL,
    created_at INTEGER NOT NULL);
";

/// Version 3: tasks remember when their current claim was made, and every state change of a
/// task or a run leaves its events in an outbox, in the same transaction (delivered by the
/// local notifier, like the table's stream feeds the cloud's).
pub(crate) const SCHEMA_V3: &str = r"
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
pub(crate) const SCHEMA_V2: &str = r"
ALTER TABLE links ADD COLUMN deleted_at INTEGER;
ALTER TABLE links ADD COLUMN subscription TEXT;
ALTER TABLE tasks ADD COLUMN link_deleted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE devices ADD COLUMN last_seen_at INTEGER;
CREATE INDEX runs_by_owner ON runs(owner, command_id);
";

pub(crate) const SCHEMA_V1: &str = r"
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
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), SchemaError> {
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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use domain::clock::{ManualClock, SharedClock};
    use domain::ids::OwnerId;
    use domain::limits::Policy;
    use domain::store::ManageProjects;

    use super::*;
    use crate::SqliteStore;

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
