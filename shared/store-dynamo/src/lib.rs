//! The DynamoDB store: one table, every state change one conditional write or one transaction.
//!
//! # Table layout
//!
//! | item | `pk` | `sk` | sparse index keys |
//! |---|---|---|---|
//! | project | `OWNER#<owner>` | `PROJECT#<project_id>` | |
//! | chat link | `OWNER#<owner>` | `LINK#<link_id>` | |
//! | run (command) | `RUN#<command_id>` | `RUN` | `gsi1pk = QUEUE#<project_id>`, `gsi1sk = <expires_at>#<command_id>` while queued |
//! | (a run's tasks handed to chats: `dispatched`, a count, and `dispatched_tasks`, a string set of `<link_id>/<task_id>`, on the run item) | | | |
//! | task | `LINK#<link_id>` | `TASK#<task_id>` | `gsi2pk = OPEN#<link_id>`, `gsi2sk = <expires_at>#<task_id>` while open |
//! | artifact | `LINK#<link_id>` | `ARTIFACT#<task_id>#<artifact_id>` | |
//! | idempotency key | `IDEM#<sha256(scope, principal, key)>` | `IDEM` | |
//! | a registered OAuth client's first and last use | `CLIENT#<client_id>` | `USED` | |
//! | a chat issued a token for an owner (first and last time) | `CLIENT#CHATS#<owner>` | `CHAT#<sha256(client_id)>` | |
//! | the app client of a client metadata document | `CLIENT#DOC#<sha256(url)>` | `DOC` | |
//! | a facade authorization flow (a pending request, a bound code) | `CLIENT#FLOW#<key>` | `FLOW` | |
//!
//! Tasks live under their link, so a task id asked through another link is simply a missing
//! key: "not claimable: missing" comes from the data layout, not from an extra check. The
//! index sort keys start with the zero-padded expiry, so `gsi*sk > "<now>#~"` leaves expired
//! items out of the queue and the open-task list inside the key condition — DynamoDB TTL deletes
//! items late (and emulators never), so nothing relies on it.
//!
//! # Conditions and outcomes
//!
//! Every conditional write asks for `ReturnValuesOnConditionCheckFailure = ALL_OLD`; the old
//! image goes to the classifiers in [`domain::runs`] / [`domain::tasks`] to tell a replay from a
//! rejection without a second read. Transactions that lose a race with another transaction
//! (`TransactionConflict`) are retried a few times.
//!
//! # Modules
//!
//! The capabilities sit in files named like the embedded store's (`store-sqlite`), so the two
//! implementations of one capability are found under the same name:
//!
//! | module | what |
//! |---|---|
//! | `projects` | `ManageProjects`, `SyncSessions` (device shares), `ManageLinks` |
//! | `runs` | `QueueRuns`, `ReadRuns`, `CancelRuns`, `RelayRuns`, `OwnerRuns` |
//! | `tasks` | `AssignTasks`, `ReadTasks`, `ClaimTasks`, `RecordArtifacts` |
//! | `dispatch` | `DispatchTasks`: tasks a desktop's Graph hands to a chat, counted and listed on their run |
//! | `devices` | `ManageDevices`, `AuthenticateDevices` |
//! | `clients` | `ClientUse` (Cognito keeps the clients themselves), `MetadataClients`, `AuthorizationFlows` |
//! | `events` | stream images → domain events; `RecordDeliveries` |
//! | `schema` | the table's definition ([`create_table`]) |
//! | `pairing` | `PairDevices`: pairings, per-source counts, failed attempts |
//! | `doorbell` | the doorbell's open sockets (`DoorbellConnections`) and which stream records ring |
//! | `write` | the update builder every `UpdateItem` goes through: sets, removes, conditions, the request id |
//! | `keys`, `codec`, `request`, `error` | key layout; attribute values and decoding; the owner's filter on the expiring indexes' queries, over the request layer and the expiring query, idempotent creates and SDK errors of [`dynamo_item`] (`table`, `idempotency`, `error`) |

use aws_sdk_dynamodb::Client;
use dynamo_item::table::Table;

use domain::clock::SharedClock;
use domain::limits::Policy;

mod clients;
mod codec;
mod devices;
mod dispatch;
mod doorbell;
mod error;
mod events;
mod keys;
mod pairing;
mod projects;
mod request;
mod runs;
mod schema;
mod tasks;
mod write;

pub use codec::Item;
pub use doorbell::{revoked_device_of_change, ring_of_change};
pub use dynamo_item::item_from_stream_json;
pub use error::DynamoError;
pub use events::{events_of_change, watch_of_change};
pub use request::{REQUEST_ID_ATTR, request_id_of, with_request_id};
pub use schema::create_table;

/// Name of the queued-commands index.
pub const QUEUE_INDEX: &str = "gsi1";
/// Name of the open-tasks index.
pub const OPEN_TASKS_INDEX: &str = "gsi2";
/// Name of the owner's runs index (every run, newest first, on `gsi3pk`/`gsi3sk`). It holds
/// the keys only, so a run's heartbeats, progress lines and result copy nothing into it (they
/// change neither key); the panel reads the keys, then the runs (issue 59). It replaced `gsi3`
/// (the same keys, every attribute: each heartbeat written twice), which 0.1.0 kept beside it
/// for a rollback and 0.2.0 removed (docs/operations.md, "Replacing an index").
pub const OWNER_RUNS_INDEX: &str = "gsi4";
/// The TTL attribute (epoch seconds).
pub use dynamo_item::expiring::TTL_ATTRIBUTE;

/// The DynamoDB store.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    /// The table and its client: every request goes through it ([`dynamo_item::table`]).
    db: Table,
    clock: SharedClock,
    policy: Policy,
}

impl DynamoStore {
    /// A store on `table` through `client`.
    pub fn new(client: Client, table: impl Into<String>, clock: SharedClock, policy: Policy) -> Self {
        Self { db: Table { client, table: table.into() }, clock, policy }
    }

    /// The client (tests use it for the naive claim and raw reads).
    pub fn client(&self) -> &Client {
        &self.db.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.db.table
    }

    /// The time policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }
}
