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
//!
//! # Modules
//!
//! The capabilities sit in files named like the DynamoDB store's (`store-dynamo`), so the two
//! implementations of one capability are found under the same name:
//!
//! | module | what |
//! |---|---|
//! | `projects` | `ManageProjects`, `SyncSessions` (device shares), `ManageLinks` |
//! | `runs` | `QueueRuns`, `ReadRuns`, `CancelRuns`, `RelayRuns`, `OwnerRuns` |
//! | `tasks` | `AssignTasks`, `ReadTasks`, `ClaimTasks`, `RecordArtifacts` |
//! | `dispatch` | `DispatchTasks`: tasks a desktop's Graph hands to a chat |
//! | `devices` | `ManageDevices`, `AuthenticateDevices` |
//! | `events` | the outbox written with every change (`EventOutbox`); `RecordDeliveries` |
//! | `idempotency` | idempotency records and the one idempotent create |
//! | `clients` | `RegisterClients` (the local authorization server's registry), `ClientUse`, `RefreshTokens` |
//! | `pairing` | `PairDevices`, `LimitAttempts` |
//! | `doorbell` | the rings a transaction's changes make, carried by the transaction, published after it commits |
//! | `schema` | the schema and its migrations ([`SCHEMA_VERSION`], [`SchemaError`]) |
//! | `pool`, `codec`, `error` | connections and transactions (`Tx`); columns and row decoding; SQLite errors |

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use domain::clock::SharedClock;
use domain::limits::Policy;
#[cfg(doc)]
use domain::store::StoreError;
use domain::store::StoreResult;

use crate::pool::{MAX_FILE_CONNECTIONS, Pool};

mod clients;
mod codec;
mod devices;
mod dispatch;
mod doorbell;
mod error;
mod events;
mod idempotency;
mod pairing;
mod pool;
mod projects;
mod runs;
mod schema;
mod tasks;

pub use schema::{SCHEMA_VERSION, SchemaError};

/// The embedded store.
#[derive(Clone)]
pub struct SqliteStore {
    pool: Arc<Pool>,
    clock: SharedClock,
    policy: Policy,
    writes: Arc<AtomicU64>,
    /// Notified after every committed write (the local notifier wakes on it).
    write_signal: Arc<tokio::sync::Notify>,
    /// The doorbell rings of committed changes (see [`SqliteStore::rings`]).
    rings: tokio::sync::broadcast::Sender<domain::doorbell::RingFor>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.pool.path).finish_non_exhaustive()
    }
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

    /// The doorbell rings (`domain::doorbell::ring_for_run`) of every change committed from
    /// now on: a new queued run, a cancel asked of a running one. The local server's doorbell
    /// forwards them to the relays' sockets.
    pub fn rings(&self) -> tokio::sync::broadcast::Receiver<domain::doorbell::RingFor> {
        self.rings.subscribe()
    }

    /// Transactions that changed at least one row since the store opened (the notifier's own
    /// bookkeeping of deliveries and the owners' budget counts excluded). The suite uses it to prove that reads never write.
    pub fn write_transactions(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use domain::clock::ManualClock;
    use domain::ids::OwnerId;
    use domain::store::ManageProjects;

    use super::*;

    #[tokio::test]
    async fn in_memory_store_keeps_its_data_in_its_one_connection() {
        let clock = Arc::new(ManualClock::starting_now());
        let store = SqliteStore::in_memory(clock, Policy::default()).unwrap();
        let owner = OwnerId::new("o").unwrap();
        let p = store.create_project(&owner, "P").await.unwrap();
        // Two calls at once share the single connection without deadlocking.
        let (a, b) = tokio::join!(store.list_projects(&owner), store.get_project(&owner, p.project_id));
        assert_eq!(a.unwrap(), vec![p.clone()]);
        assert_eq!(b.unwrap(), Some(p.clone()));
        assert_eq!(store.write_transactions(), 1);
        assert!(store.path().is_none());
        // A read while the one connection is busy waits for it: a second connection would be
        // another, empty database ("no such table"). (The wait is bounded: if the read could
        // not even start in 200 ms it proves nothing, but it never fails a correct store.)
        let store = Arc::new(store);
        let held = store.pool.try_get().expect("the idle connection");
        let reader = Arc::clone(&store);
        let who = owner.clone();
        let mut read = tokio::spawn(async move { reader.list_projects(&who).await });
        let waited = tokio::time::timeout(std::time::Duration::from_millis(200), &mut read).await;
        assert!(waited.is_err(), "the read did not wait for the one connection: {waited:?}");
        store.pool.put(held);
        assert_eq!(read.await.unwrap().unwrap(), vec![p]);
    }
}
