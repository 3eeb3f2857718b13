//! The DynamoDB store: one table, every state change one conditional write or one transaction.
//!
//! # Table layout
//!
//! | item | `pk` | `sk` | sparse index keys |
//! |---|---|---|---|
//! | project | `OWNER#<owner>` | `PROJECT#<project_id>` | |
//! | chat link | `OWNER#<owner>` | `LINK#<link_id>` | |
//! | run (command) | `RUN#<command_id>` | `RUN` | `gsi1pk = QUEUE#<project_id>`, `gsi1sk = <expires_at>#<command_id>` while queued |
//! | task | `LINK#<link_id>` | `TASK#<task_id>` | `gsi2pk = OPEN#<link_id>`, `gsi2sk = <expires_at>#<task_id>` while open |
//! | artifact | `LINK#<link_id>` | `ARTIFACT#<task_id>#<artifact_id>` | |
//! | idempotency key | `IDEM#<sha256(scope, principal, key)>` | `IDEM` | |
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

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, CancellationReason, ConditionCheck, Get, GlobalSecondaryIndex,
    KeySchemaElement, KeyType, Projection, ProjectionType, Put, ReturnValue, ReturnValuesOnConditionCheckFailure,
    ScalarAttributeType, StreamSpecification, StreamViewType, TimeToLiveSpecification, TransactGetItem,
    TransactWriteItem,
};

use domain::clock::{SharedClock, Timestamp};
use domain::devices::Device;
use domain::events::{DeliveryOutcome, Event, derive_run, derive_task};
use domain::ids::{AgentId, ChatLinkId, ClaimId, CommandId, GraphSessionId, OwnerId, ProjectId, TaskId};
use domain::limits::Policy;
use domain::projects::{
    ChatLink, Project, QueueTarget, Subscription, SyncOutcome, check_named_project, resolve_project,
};
use domain::runs::{
    CancelRunOutcome, CancelStep, CompleteOutcome, CompleteStep, Completion, ControlOutcome, QueueOutcome,
    QueueRejection, QueueRun, Run, RunStatus, SessionMeta, StartOutcome, classify_cancel, classify_complete,
    classify_control, classify_start, idempotency_record_key,
};
use domain::store::{
    AssignTasks, AuthenticateDevices, CancelRuns, ClaimTasks, DEVICE_SEEN_GRANULARITY, ManageDevices, ManageLinks,
    ManageProjects, OwnerRuns, QueueRuns, ReadRuns, ReadTasks, RecordArtifacts, RecordDeliveries, RelayRuns,
    StoreError, StoreResult, SyncSessions,
};
use domain::tasks::{
    ArtifactCheck, ArtifactOutcome, ArtifactRecord, AssignOutcome, AssignRejection, AssignTask, CancelTaskOutcome,
    ClaimOutcome, SubmitOutcome, SubmitRejection, SubmitTask, Task, TaskPage, TaskStatus, check_artifact,
    classify_cancel_task, classify_claim, classify_submit,
};

/// Name of the queued-commands index.
pub const QUEUE_INDEX: &str = "gsi1";
/// Name of the open-tasks index.
pub const OPEN_TASKS_INDEX: &str = "gsi2";
/// Name of the owner's runs index (every run, newest first).
pub const OWNER_RUNS_INDEX: &str = "gsi3";
/// The TTL attribute (epoch seconds).
pub const TTL_ATTRIBUTE: &str = "ttl";

/// How often a transaction that lost to a concurrent one is tried again.
const TRANSACTION_ATTEMPTS: u32 = 6;

type Item = HashMap<String, AttributeValue>;

/// The DynamoDB store.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    client: Client,
    table: String,
    clock: SharedClock,
    policy: Policy,
}

impl DynamoStore {
    /// A store on `table` through `client`.
    pub fn new(client: Client, table: impl Into<String>, clock: SharedClock, policy: Policy) -> Self {
        Self { client, table: table.into(), clock, policy }
    }

    /// The client (tests use it for the naive claim and raw reads).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The time policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    fn update(&self, key: Item, update: &str, condition: &str, values: Item) -> UpdateRequest<'_> {
        UpdateRequest { store: self, key, update: update.to_owned(), condition: condition.to_owned(), values }
    }

    async fn get(&self, key: Item) -> StoreResult<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk)?;
        Ok(out.item)
    }

    /// Every item of partition `pk` whose sort key starts with `sk_prefix` (all of them when
    /// the prefix is empty: DynamoDB refuses an empty key value).
    async fn query_all(&self, pk: String, sk_prefix: &str) -> StoreResult<Vec<Item>> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let mut q = self.client.query().table_name(&self.table).expression_attribute_values(":pk", s(pk.clone()));
            q = if sk_prefix.is_empty() {
                q.key_condition_expression("#pk = :pk").set_expression_attribute_names(Some(names("#pk")))
            } else {
                q.key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                    .set_expression_attribute_names(Some(names("#pk #sk")))
                    .expression_attribute_values(":prefix", s(sk_prefix))
            };
            let out = q.consistent_read(true).set_exclusive_start_key(start).send().await.map_err(sdk)?;
            items.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(items),
            }
        }
    }

    /// One `Query` on a sparse index whose sort keys start with the expiry: the owner's
    /// unexpired items under `partition`, in sort-key order.
    async fn query_unexpired(
        &self,
        index: &str,
        partition: String,
        owner: &OwnerId,
        limit: usize,
    ) -> StoreResult<Vec<Item>> {
        let (pk, sk) = if index == QUEUE_INDEX { ("#gsi1pk", "#gsi1sk") } else { ("#gsi2pk", "#gsi2sk") };
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(index)
            .key_condition_expression(format!("{pk} = :p AND {sk} > :now"))
            .filter_expression("#owner = :o")
            .set_expression_attribute_names(Some(names(&format!("{pk} {sk} #owner"))))
            .expression_attribute_values(":p", s(partition))
            .expression_attribute_values(":now", s(unexpired_after(self.clock.now())))
            .expression_attribute_values(":o", s(owner.as_str()))
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(sdk)?;
        Ok(out.items.unwrap_or_default())
    }

    /// The live idempotency record that made transaction item `i` fail, if that is why it
    /// failed: from the cancellation reason's old image, or read if the backend gave none.
    async fn key_in_use(
        &self,
        reasons: &[CancellationReason],
        i: usize,
        record: &str,
        now: Timestamp,
    ) -> StoreResult<Option<(String, String)>> {
        if !failed(reasons, i) {
            return Ok(None);
        }
        let old = match old_image(reasons, i) {
            Some(item) => Some(item.clone()),
            None => self.get(idem_key(record)).await?,
        };
        live_idem(old.as_ref(), now)
    }

    /// Runs a transaction, retrying on `TransactionConflict`. `Ok(None)` = committed;
    /// `Ok(Some(reasons))` = a condition failed (one reason per item, in order).
    async fn transact(&self, items: Vec<TransactWriteItem>) -> StoreResult<Option<Vec<CancellationReason>>> {
        let mut delay = Duration::from_millis(10);
        for attempt in 1..=TRANSACTION_ATTEMPTS {
            let result = self.client.transact_write_items().set_transact_items(Some(items.clone())).send().await;
            let err = match result {
                Ok(_) => return Ok(None),
                Err(e) => e,
            };
            if let SdkError::ServiceError(se) = &err
                && let TransactWriteItemsError::TransactionCanceledException(tc) = se.err()
            {
                let reasons = tc.cancellation_reasons().to_vec();
                if reasons.iter().any(|r| r.code() == Some("ConditionalCheckFailed")) {
                    return Ok(Some(reasons));
                }
                // Lost a race with another transaction, or throttled: both retryable.
                let transient = reasons.iter().all(|r| {
                    matches!(
                        r.code(),
                        None | Some(
                            "None" | "TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded"
                        )
                    )
                });
                if !transient {
                    return Err(StoreError::refused(DynamoError::Cancelled {
                        what: "transaction",
                        reasons: codes(&reasons),
                    }));
                }
                if attempt < TRANSACTION_ATTEMPTS {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    continue;
                }
                return Err(StoreError::unavailable(DynamoError::Contended {
                    attempts: TRANSACTION_ATTEMPTS,
                    reasons: codes(&reasons),
                }));
            }
            if is_transaction_conflict(&err) && attempt < TRANSACTION_ATTEMPTS {
                tokio::time::sleep(delay).await;
                delay *= 2;
                continue;
            }
            return Err(sdk(err));
        }
        Err(StoreError::unavailable(DynamoError::Contended { attempts: TRANSACTION_ATTEMPTS, reasons: String::new() }))
    }
}

/// One conditional `UpdateItem` with `ALL_OLD` on failure.
struct UpdateRequest<'a> {
    store: &'a DynamoStore,
    key: Item,
    update: String,
    condition: String,
    values: Item,
}

/// Result of a conditional update.
enum Updated {
    /// The condition held; the item as asked for in `ReturnValues`.
    Applied(Option<Item>),
    /// The condition failed; the item as it was (`None`: no such item).
    Rejected(Option<Item>),
}

impl UpdateRequest<'_> {
    async fn send(self, return_new: bool) -> StoreResult<Updated> {
        let names = names(&format!("{} {}", self.update, self.condition));
        let result = self
            .store
            .client
            .update_item()
            .table_name(&self.store.table)
            .set_key(Some(self.key))
            .update_expression(self.update)
            .condition_expression(self.condition)
            .set_expression_attribute_names(Some(names))
            // DynamoDB refuses an empty value map: send none when the expressions use no values.
            .set_expression_attribute_values(Some(self.values).filter(|v| !v.is_empty()))
            .return_values(if return_new { ReturnValue::AllNew } else { ReturnValue::None })
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(UpdateItemOutput { attributes, .. }) => Ok(Updated::Applied(attributes)),
            Err(SdkError::ServiceError(se))
                if matches!(se.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                match se.into_err() {
                    UpdateItemError::ConditionalCheckFailedException(c) => Ok(Updated::Rejected(c.item)),
                    other => Err(StoreError::refused(other)),
                }
            }
            Err(e) => Err(sdk(e)),
        }
    }
}

/// Failures this store reports beyond the SDK's own errors.
#[derive(Debug, thiserror::Error)]
pub enum DynamoError {
    /// A transaction kept losing to concurrent ones (or being throttled): retryable.
    #[error("transaction still cancelled after {attempts} attempts ({reasons})")]
    Contended {
        /// Attempts made.
        attempts: u32,
        /// The last cancellation reason codes.
        reasons: String,
    },
    /// A transaction was cancelled for a reason this code does not expect (validation, item
    /// collection size, a condition on an item that cannot fail): not retryable.
    #[error("{what} cancelled: {reasons}")]
    Cancelled {
        /// Which transaction.
        what: &'static str,
        /// The cancellation reason codes, one per item.
        reasons: String,
    },
    /// A request could not be built (a bug in this code).
    #[error("building the request")]
    Build(#[source] aws_sdk_dynamodb::error::BuildError),
}

fn codes(reasons: &[CancellationReason]) -> String {
    reasons.iter().map(|r| r.code().unwrap_or("None")).collect::<Vec<_>>().join(",")
}

fn unexpected(what: &'static str, reasons: &[CancellationReason]) -> StoreError {
    StoreError::refused(DynamoError::Cancelled { what, reasons: codes(reasons) })
}

fn build(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::refused(DynamoError::Build(e))
}

/// Service error codes that a later retry can get past.
const RETRYABLE_CODES: &[&str] = &[
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "TransactionConflictException",
    "TransactionInProgressException",
    "InternalServerError",
    "ServiceUnavailable",
];

fn is_transaction_conflict<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> bool {
    matches!(e, SdkError::ServiceError(se) if se.err().code() == Some("TransactionConflictException"))
}

/// An SDK failure as a [`StoreError`], keeping the SDK error as the cause: throttling,
/// transaction conflicts, 5xx, timeouts and network failures are retryable
/// ([`StoreError::Unavailable`]); anything else is a refusal a retry will not fix. Logged here
/// with the SDK's `DisplayErrorContext`, which names the service error and its code.
fn sdk<E>(e: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let retryable = match &e {
        SdkError::ServiceError(se) => {
            se.raw().status().is_server_error() || se.err().code().is_some_and(|c| RETRYABLE_CODES.contains(&c))
        }
        SdkError::ConstructionFailure(_) => false,
        // Timeouts, connection failures and unreadable responses.
        _ => true,
    };
    tracing::warn!(error = %DisplayErrorContext(&e), retryable, "DynamoDB request failed");
    if retryable { StoreError::unavailable(e) } else { StoreError::refused(e) }
}

/// Expression attribute names for every `#name` token in `expr` (each maps to `name`).
/// Every attribute goes through a placeholder: DynamoDB reserves words such as `status`,
/// `name`, `owner`, `result`, `size` and `ttl`, and rejects unused placeholders.
fn names(expr: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'#' {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
                end += 1;
            }
            if end > start {
                out.insert(format!("#{}", &expr[start..end]), expr[start..end].to_owned());
            }
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn b(v: bool) -> AttributeValue {
    AttributeValue::Bool(v)
}

fn key(pk: String, sk: impl Into<String>) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

fn values<const N: usize>(pairs: [(&str, AttributeValue); N]) -> Item {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn project_key(owner: &OwnerId, project: ProjectId) -> Item {
    key(format!("OWNER#{owner}"), format!("PROJECT#{project}"))
}

fn link_key(owner: &OwnerId, link: ChatLinkId) -> Item {
    key(format!("OWNER#{owner}"), format!("LINK#{link}"))
}

fn run_key(command: CommandId) -> Item {
    key(format!("RUN#{command}"), "RUN")
}

fn task_key(link: ChatLinkId, task: TaskId) -> Item {
    key(format!("LINK#{link}"), format!("TASK#{task}"))
}

fn idem_key(record: &str) -> Item {
    key(format!("IDEM#{record}"), "IDEM")
}

/// Sort-key bound that excludes items expiring at or before `now`.
fn unexpired_after(now: Timestamp) -> String {
    format!("{}#~", now.sortable())
}

fn ttl_at(t: Timestamp) -> AttributeValue {
    n(t.as_epoch_seconds())
}

// ---- item decoding -----------------------------------------------------------------------

struct Read<'a>(&'a Item);

impl Read<'_> {
    fn opt_s(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(AttributeValue::S(v)) => Some(v),
            _ => None,
        }
    }
    fn s(&self, name: &str) -> StoreResult<&str> {
        self.opt_s(name).ok_or_else(|| bad(name))
    }
    fn opt_n(&self, name: &str) -> StoreResult<Option<i64>> {
        match self.0.get(name) {
            Some(AttributeValue::N(v)) => v.parse().map(Some).map_err(|_| bad(name)),
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(_) => Err(bad(name)),
        }
    }
    fn n(&self, name: &str) -> StoreResult<i64> {
        self.opt_n(name)?.ok_or_else(|| bad(name))
    }
    fn ts(&self, name: &str) -> StoreResult<Timestamp> {
        self.n(name).map(Timestamp::from_millis)
    }
    fn opt_ts(&self, name: &str) -> StoreResult<Option<Timestamp>> {
        Ok(self.opt_n(name)?.map(Timestamp::from_millis))
    }
    fn bool(&self, name: &str) -> bool {
        matches!(self.0.get(name), Some(AttributeValue::Bool(true)))
    }
    fn parse<T>(&self, name: &str, f: impl FnOnce(&str) -> Option<T>) -> StoreResult<T> {
        f(self.s(name)?).ok_or_else(|| bad(name))
    }
    fn opt_parse<T>(&self, name: &str, f: impl FnOnce(&str) -> Option<T>) -> StoreResult<Option<T>> {
        self.opt_s(name).map(|v| f(v).ok_or_else(|| bad(name))).transpose()
    }
}

fn bad(name: &str) -> StoreError {
    StoreError::Corrupt(format!("attribute {name} missing or malformed"))
}

fn project_from(item: &Item) -> StoreResult<Project> {
    let r = Read(item);
    Ok(Project {
        project_id: r.parse("project_id", |v| ProjectId::parse("project_id", v).ok())?,
        owner: r.parse("owner", |v| OwnerId::new(v).ok())?,
        name: r.s("name")?.to_owned(),
        enabled: r.bool("enabled"),
        sessions: r.parse("sessions", |v| serde_json::from_str::<Vec<SessionMeta>>(v).ok())?,
        last_sync_at: r.opt_ts("last_sync_at")?,
        created_at: r.ts("created_at")?,
        recent_durations: match item.get("durations") {
            Some(AttributeValue::M(m)) => m
                .iter()
                .filter_map(|(k, v)| match v {
                    AttributeValue::N(n) => n.parse().ok().map(|ms| (k.clone(), ms)),
                    _ => None,
                })
                .collect(),
            _ => std::collections::BTreeMap::new(),
        },
    })
}

fn link_from(item: &Item) -> StoreResult<ChatLink> {
    let r = Read(item);
    Ok(ChatLink {
        link_id: r.parse("link_id", |v| ChatLinkId::parse("chat_link_id", v).ok())?,
        owner: r.parse("owner", |v| OwnerId::new(v).ok())?,
        project_id: r.parse("project_id", |v| ProjectId::parse("project_id", v).ok())?,
        name: r.s("name")?.to_owned(),
        created_at: r.ts("created_at")?,
        subscription: r.opt_parse("subscription", |v| serde_json::from_str(v).ok())?,
    })
}

/// A live (not deleted) link item.
fn live_link(item: &Item) -> bool {
    !item.contains_key("deleted_at")
}

fn run_from(item: &Item) -> StoreResult<Run> {
    let r = Read(item);
    // The result is stored as its own attribute (not inside the completion JSON, where
    // escaping could inflate it past the item size limit).
    let completion = r.opt_parse("completion", |v| serde_json::from_str::<Completion>(v).ok())?.map(|mut c| {
        c.result = r.opt_s("result").map(str::to_owned);
        c
    });
    Ok(Run {
        command_id: r.parse("command_id", |v| CommandId::parse("command_id", v).ok())?,
        owner: r.parse("owner", |v| OwnerId::new(v).ok())?,
        agent: AgentId::from_stored(r.s("agent")?),
        project_id: r.parse("project_id", |v| ProjectId::parse("project_id", v).ok())?,
        graph_session_id: r.parse("graph_session_id", |v| GraphSessionId::parse("graph_session_id", v).ok())?,
        slug: r.s("slug")?.to_owned(),
        arguments: r.parse("arguments", |v| serde_json::from_str(v).ok())?,
        status: r.parse("status", RunStatus::parse)?,
        queued_at: r.ts("queued_at")?,
        expires_at: r.ts("expires_at")?,
        started_at: r.opt_ts("started_at")?,
        finished_at: r.opt_ts("finished_at")?,
        execution_id: r.opt_s("execution_id").map(str::to_owned),
        cancel_requested: r.bool("cancel_requested"),
        last_heartbeat_at: r.opt_ts("last_heartbeat_at")?,
        completion,
        completion_hash: r.opt_s("completion_hash").map(str::to_owned),
    })
}

fn task_from(item: &Item) -> StoreResult<Task> {
    let r = Read(item);
    Ok(Task {
        task_id: r.parse("task_id", |v| TaskId::parse("task_id", v).ok())?,
        link_id: r.parse("link_id", |v| ChatLinkId::parse("chat_link_id", v).ok())?,
        owner: r.parse("owner", |v| OwnerId::new(v).ok())?,
        objective: r.s("objective")?.to_owned(),
        status: r.parse("status", TaskStatus::parse)?,
        created_at: r.ts("created_at")?,
        expires_at: r.ts("expires_at")?,
        claim_id: r.opt_parse("claim_id", |v| ClaimId::parse("claim_id", v).ok())?,
        lease_until: r.opt_ts("lease_until")?,
        claimed_at: r.opt_ts("claimed_at")?,
        result: r.opt_s("result").map(str::to_owned),
        result_hash: r.opt_s("result_hash").map(str::to_owned),
        finished_at: r.opt_ts("finished_at")?,
        link_deleted: r.bool("link_deleted"),
    })
}

fn opt_from<T>(item: Option<&Item>, f: impl FnOnce(&Item) -> StoreResult<T>) -> StoreResult<Option<T>> {
    item.filter(|i| !i.is_empty()).map(f).transpose()
}

fn put(table: &str, item: Item, condition: &str, condition_values: Item) -> StoreResult<TransactWriteItem> {
    let mut p = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression(condition)
        .set_expression_attribute_names(Some(names(condition)))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    if !condition_values.is_empty() {
        p = p.set_expression_attribute_values(Some(condition_values));
    }
    Ok(TransactWriteItem::builder().put(p.build().map_err(build)?).build())
}

fn check(table: &str, key: Item, condition: &str, condition_values: Item) -> StoreResult<TransactWriteItem> {
    let mut c = ConditionCheck::builder()
        .table_name(table)
        .set_key(Some(key))
        .condition_expression(condition)
        .set_expression_attribute_names(Some(names(condition)))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    if !condition_values.is_empty() {
        c = c.set_expression_attribute_values(Some(condition_values));
    }
    Ok(TransactWriteItem::builder().condition_check(c.build().map_err(build)?).build())
}

fn failed(reasons: &[CancellationReason], i: usize) -> bool {
    reasons.get(i).and_then(CancellationReason::code) == Some("ConditionalCheckFailed")
}

fn old_image(reasons: &[CancellationReason], i: usize) -> Option<&Item> {
    reasons.get(i).and_then(|r| r.item.as_ref()).filter(|i| !i.is_empty())
}

fn idem_item(record: &str, request_hash: &str, target: String, now: Timestamp, policy: &Policy) -> Item {
    let expires = now.plus(policy.idempotency_ttl);
    let mut item = idem_key(record);
    item.extend(values([
        ("request_hash", s(request_hash)),
        ("target_id", s(target)),
        ("expires_at", n(expires.as_millis())),
        (TTL_ATTRIBUTE, ttl_at(expires)),
    ]));
    item
}

/// A live idempotency record's (request hash, target id).
fn live_idem(item: Option<&Item>, now: Timestamp) -> StoreResult<Option<(String, String)>> {
    let Some(item) = item.filter(|i| !i.is_empty()) else { return Ok(None) };
    let r = Read(item);
    if r.ts("expires_at")? <= now {
        return Ok(None);
    }
    Ok(Some((r.s("request_hash")?.to_owned(), r.s("target_id")?.to_owned())))
}

const IDEM_FREE: &str = "attribute_not_exists(#pk) OR #expires_at <= :now";

// ---- capabilities ------------------------------------------------------------------------

#[async_trait]
impl ManageProjects for DynamoStore {
    async fn create_project(&self, owner: &OwnerId, name: &str) -> StoreResult<Project> {
        let p = Project::new(owner, name, self.clock.now());
        let mut item = project_key(owner, p.project_id);
        item.extend(values([
            ("project_id", s(p.project_id.to_string())),
            ("owner", s(owner.as_str())),
            ("name", s(name)),
            ("enabled", b(false)),
            ("sessions", s("[]")),
            ("created_at", n(p.created_at.as_millis())),
            // The duration summary's map exists from the start, so a completion records its
            // duration with one nested SET.
            ("durations", AttributeValue::M(HashMap::new())),
        ]));
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .set_expression_attribute_names(Some(names("#pk")))
            .send()
            .await
            .map_err(sdk)?;
        Ok(p)
    }

    async fn set_project_enabled(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        enabled: bool,
    ) -> StoreResult<Option<Project>> {
        let out = self
            .update(
                project_key(owner, project),
                "SET #enabled = :e",
                "attribute_exists(#pk)",
                values([(":e", b(enabled))]),
            )
            .send(true)
            .await?;
        match out {
            Updated::Applied(item) => opt_from(item.as_ref(), project_from),
            Updated::Rejected(_) => Ok(None),
        }
    }

    async fn get_project(&self, owner: &OwnerId, project: ProjectId) -> StoreResult<Option<Project>> {
        opt_from(self.get(project_key(owner, project)).await?.as_ref(), project_from)
    }

    async fn list_projects(&self, owner: &OwnerId) -> StoreResult<Vec<Project>> {
        self.query_all(format!("OWNER#{owner}"), "PROJECT#").await?.iter().map(project_from).collect()
    }
}

impl DynamoStore {
    /// Writes a completed run's duration into its project's summary slot: one `UpdateItem`
    /// after the completion (two the first time, when the project has no summary map yet).
    /// Advisory: a failure is logged and the completion stands.
    async fn record_duration(&self, owner: &OwnerId, run: &Run) {
        let (Some(started), Some(finished)) = (run.started_at, run.finished_at) else { return };
        let key = domain::runs::duration_key(&run.graph_session_id, finished);
        let ms = n(finished.since(started).as_millis() as i64);
        for first in [true, false, true] {
            let req = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(project_key(owner, run.project_id)))
                .expression_attribute_names("#pk", "pk")
                .expression_attribute_names("#durations", "durations");
            let req = if first {
                req.update_expression("SET #durations.#k = :ms")
                    .condition_expression("attribute_exists(#pk) AND attribute_exists(#durations)")
                    .expression_attribute_names("#k", key.clone())
                    .expression_attribute_values(":ms", ms.clone())
            } else {
                req.update_expression("SET #durations = :m")
                    .condition_expression("attribute_exists(#pk) AND attribute_not_exists(#durations)")
                    .expression_attribute_values(":m", AttributeValue::M([(key.clone(), ms.clone())].into()))
            };
            match req.send().await {
                Ok(_) => return,
                Err(SdkError::ServiceError(se))
                    if matches!(se.err(), UpdateItemError::ConditionalCheckFailedException(_)) => {}
                Err(e) => {
                    tracing::warn!(error = %DisplayErrorContext(&e), "recording a run's duration failed; hints fall back to 15 s");
                    return;
                }
            }
        }
    }
}

/// Versioned writes of a project's shares retry this often when other devices' syncs keep
/// winning the race, then give up as retryable.
const SHARE_WRITE_ATTEMPTS: usize = 8;

#[async_trait]
impl SyncSessions for DynamoStore {
    async fn sync_sessions(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        device: uuid::Uuid,
        sessions: &[SessionMeta],
    ) -> StoreResult<SyncOutcome> {
        self.set_device_share(owner, project, device, sessions, true).await
    }
}

impl DynamoStore {
    /// Replaces `device`'s list in the project's shares and rewrites the union (`sessions`,
    /// `session_ids`) in one write conditioned on the version read (`share_ver`): a concurrent
    /// sync of another device makes the write fail and it is redone on the new state, so no
    /// device's list is ever overwritten by another's. `sync` also requires the project to be
    /// enabled and records the sync time; a revoke withdraws shares whatever the switch says.
    async fn set_device_share(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        device: uuid::Uuid,
        sessions: &[SessionMeta],
        sync: bool,
    ) -> StoreResult<SyncOutcome> {
        for _ in 0..SHARE_WRITE_ATTEMPTS {
            let Some(item) = self.get(project_key(owner, project)).await? else { return Ok(SyncOutcome::NotFound) };
            if sync && !Read(&item).bool("enabled") {
                return Ok(SyncOutcome::Disabled);
            }
            let version = Read(&item).opt_n("share_ver")?.unwrap_or(0);
            let shares: domain::projects::DeviceShares =
                Read(&item).opt_parse("device_shares", |v| serde_json::from_str(v).ok())?.unwrap_or_default();
            let shares = domain::projects::with_device_share(shares, device, sessions);
            let union = domain::projects::union_of(&shares);
            let union_json = serde_json::to_string(&union).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let shares_json = serde_json::to_string(&shares).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let mut vals = values([
                (":s", s(union_json)),
                (":ds", s(shares_json)),
                (":v", n(version)),
                (":next", n(version + 1)),
                (":now", n(self.clock.now().as_millis())),
                (":t", b(true)),
            ]);
            let ids: Vec<String> = union.iter().map(|m| m.graph_session_id.to_string()).collect();
            let mut set = "SET #sessions = :s, #device_shares = :ds, #share_ver = :next".to_owned();
            if sync {
                set += ", #last_sync_at = :now";
            }
            // DynamoDB has no empty sets: an empty union removes the attribute.
            let update = if ids.is_empty() {
                format!("{set} REMOVE #session_ids")
            } else {
                vals.insert(":ids".into(), AttributeValue::Ss(ids));
                format!("{set}, #session_ids = :ids")
            };
            let mut condition =
                "attribute_exists(#pk) AND (attribute_not_exists(#share_ver) OR #share_ver = :v)".to_owned();
            if sync {
                condition += " AND #enabled = :t";
            } else {
                vals.remove(":t");
                vals.remove(":now");
            }
            match self.update(project_key(owner, project), &update, &condition, vals).send(true).await? {
                Updated::Applied(item) => {
                    return Ok(match opt_from(item.as_ref(), project_from)? {
                        Some(p) => SyncOutcome::Synced(p),
                        None => SyncOutcome::NotFound,
                    });
                }
                Updated::Rejected(Some(old)) if !old.is_empty() => {
                    if sync && !Read(&old).bool("enabled") {
                        return Ok(SyncOutcome::Disabled);
                    }
                    // Another device's sync won: redo on the new state.
                }
                Updated::Rejected(_) => return Ok(SyncOutcome::NotFound),
            }
        }
        Err(StoreError::unavailable(format!(
            "project {project}: {SHARE_WRITE_ATTEMPTS} versioned writes of its shares lost to concurrent syncs"
        )))
    }
}

impl DynamoStore {
    async fn queue_target(&self, req: &QueueRun) -> StoreResult<Result<QueueTarget, QueueRejection>> {
        Ok(match req.project_id {
            Some(p) => check_named_project(self.get_project(&req.owner, p).await?.as_ref(), &req.graph_session_id),
            None => resolve_project(&self.list_projects(&req.owner).await?, &req.graph_session_id),
        })
    }

    /// The answer for a key seen before: the original run, or the mismatch rejection.
    async fn replay_run(&self, seen_hash: &str, target: &str, req_hash: &str) -> StoreResult<QueueOutcome> {
        if seen_hash != req_hash {
            return Ok(QueueOutcome::Rejected(QueueRejection::IdempotencyMismatch));
        }
        let id = CommandId::parse("command_id", target).map_err(|_| bad("target_id"))?;
        match opt_from(self.get(run_key(id)).await?.as_ref(), run_from)? {
            Some(run) => Ok(QueueOutcome::Replayed(run)),
            None => Err(StoreError::Corrupt("idempotency record points at a missing run".into())),
        }
    }
}

#[async_trait]
impl QueueRuns for DynamoStore {
    async fn queue_run(&self, req: &QueueRun) -> StoreResult<QueueOutcome> {
        let record = idempotency_record_key("run", req.agent.as_str(), &req.idempotency_key);
        let hash = req.request_hash();
        let target = match self.queue_target(req).await? {
            Ok(t) => t,
            Err(rejection) => {
                // A retry must still replay even if consent changed since the first call.
                let now = self.clock.now();
                return match live_idem(self.get(idem_key(&record)).await?.as_ref(), now)? {
                    Some((seen, target)) => self.replay_run(&seen, &target, &hash).await,
                    None => Ok(QueueOutcome::Rejected(rejection)),
                };
            }
        };
        let now = self.clock.now();
        let run = Run::queued(req, target, now, &self.policy);
        let mut run_item = run_key(run.command_id);
        run_item.extend(values([
            ("command_id", s(run.command_id.to_string())),
            ("owner", s(run.owner.as_str())),
            ("agent", s(run.agent.as_str())),
            ("project_id", s(run.project_id.to_string())),
            ("graph_session_id", s(run.graph_session_id.as_str())),
            ("slug", s(run.slug.clone())),
            ("arguments", s(run.arguments.to_string())),
            ("status", s(RunStatus::Queued.as_str())),
            ("queued_at", n(now.as_millis())),
            ("expires_at", n(run.expires_at.as_millis())),
            ("cancel_requested", b(false)),
            ("gsi1pk", s(format!("QUEUE#{}", run.project_id))),
            ("gsi1sk", s(format!("{}#{}", run.expires_at.sortable(), run.command_id))),
            ("gsi3pk", s(format!("RUNS#{}", run.owner))),
            ("gsi3sk", s(run.command_id.to_string())),
            (TTL_ATTRIBUTE, ttl_at(run.expires_at.plus(self.policy.retention))),
        ]));
        let items = vec![
            check(
                &self.table,
                project_key(&req.owner, run.project_id),
                "#enabled = :t AND contains(#session_ids, :gs)",
                values([(":t", b(true)), (":gs", s(req.graph_session_id.as_str()))]),
            )?,
            put(
                &self.table,
                idem_item(&record, &hash, run.command_id.to_string(), now, &self.policy),
                IDEM_FREE,
                values([(":now", n(now.as_millis()))]),
            )?,
            put(&self.table, run_item, "attribute_not_exists(#pk)", Item::new())?,
        ];
        let Some(reasons) = self.transact(items).await? else {
            return Ok(QueueOutcome::Queued(run));
        };
        if let Some((seen, target)) = self.key_in_use(&reasons, 1, &record, now).await? {
            return self.replay_run(&seen, &target, &hash).await;
        }
        if failed(&reasons, 0) {
            // Consent changed between the read and the write: classify on the old image.
            let old = match old_image(&reasons, 0) {
                Some(i) => Some(i.clone()),
                None => self.get(project_key(&req.owner, run.project_id)).await?,
            };
            let project = opt_from(old.as_ref(), project_from)?;
            let rejection = match check_named_project(project.as_ref(), &req.graph_session_id) {
                Err(r) => r,
                Ok(_) => QueueRejection::SessionNotShared(req.graph_session_id.clone()),
            };
            return Ok(QueueOutcome::Rejected(rejection));
        }
        Err(unexpected("queue transaction", &reasons))
    }
}

#[async_trait]
impl ReadRuns for DynamoStore {
    async fn get_run(&self, agent: &AgentId, command: CommandId) -> StoreResult<Option<Run>> {
        Ok(opt_from(self.get(run_key(command)).await?.as_ref(), run_from)?.filter(|r| &r.agent == agent))
    }
}

#[async_trait]
impl CancelRuns for DynamoStore {
    async fn cancel_run(&self, agent: &AgentId, command: CommandId) -> StoreResult<CancelRunOutcome> {
        let now = self.clock.now();
        let out = self
            .update(
                run_key(command),
                "SET #status = :cancelled, #finished_at = :now, #ttl = :ttl REMOVE #gsi1pk, #gsi1sk",
                "#agent = :a AND #status = :queued AND #expires_at > :now",
                values([
                    (":cancelled", s("cancelled")),
                    (":queued", s("queued")),
                    (":now", n(now.as_millis())),
                    (":a", s(agent.as_str())),
                    (":ttl", ttl_at(now.plus(self.policy.retention))),
                ]),
            )
            .send(false)
            .await?;
        let Updated::Rejected(old) = out else { return Ok(CancelRunOutcome::Cancelled) };
        match classify_cancel(opt_from(old.as_ref(), run_from)?.as_ref(), agent, now, &self.policy) {
            CancelStep::Done(outcome) => Ok(outcome),
            CancelStep::FlagRunning => {
                let out = self
                    .update(
                        run_key(command),
                        "SET #cancel_requested = :t",
                        "#agent = :a AND #status = :running AND #last_heartbeat_at > :cutoff",
                        values([
                            (":t", b(true)),
                            (":a", s(agent.as_str())),
                            (":running", s("running")),
                            (":cutoff", n(now.minus(self.policy.heartbeat_timeout).as_millis())),
                        ]),
                    )
                    .send(false)
                    .await?;
                Ok(match out {
                    Updated::Applied(_) => CancelRunOutcome::CancelRequested,
                    // It finished between the two writes: report what it is now.
                    Updated::Rejected(old) => {
                        match classify_cancel(opt_from(old.as_ref(), run_from)?.as_ref(), agent, now, &self.policy) {
                            CancelStep::Done(outcome) => outcome,
                            CancelStep::FlagRunning => CancelRunOutcome::Unchanged(RunStatus::Running),
                        }
                    }
                })
            }
        }
    }
}

#[async_trait]
impl RelayRuns for DynamoStore {
    async fn list_queued(&self, owner: &OwnerId, project: ProjectId, limit: usize) -> StoreResult<Vec<Run>> {
        let items = self.query_unexpired(QUEUE_INDEX, format!("QUEUE#{project}"), owner, limit).await?;
        items.iter().map(run_from).collect()
    }

    async fn start_run(&self, owner: &OwnerId, command: CommandId, execution_id: &str) -> StoreResult<StartOutcome> {
        let now = self.clock.now();
        let out = self
            .update(
                run_key(command),
                "SET #status = :running, #started_at = :now, #last_heartbeat_at = :now, #execution_id = :e REMOVE #gsi1pk, #gsi1sk",
                "#owner = :o AND #status = :queued AND #expires_at > :now",
                values([
                    (":running", s("running")),
                    (":queued", s("queued")),
                    (":now", n(now.as_millis())),
                    (":e", s(execution_id)),
                    (":o", s(owner.as_str())),
                ]),
            )
            .send(false)
            .await?;
        match out {
            Updated::Applied(_) => Ok(StartOutcome::Started),
            Updated::Rejected(old) => {
                Ok(classify_start(opt_from(old.as_ref(), run_from)?.as_ref(), owner, execution_id, now, &self.policy))
            }
        }
    }

    async fn control_run(&self, owner: &OwnerId, command: CommandId) -> StoreResult<ControlOutcome> {
        let now = self.clock.now();
        let out = self
            .update(
                run_key(command),
                "SET #last_heartbeat_at = :now",
                "#owner = :o AND #status = :running AND #last_heartbeat_at > :cutoff",
                values([
                    (":now", n(now.as_millis())),
                    (":o", s(owner.as_str())),
                    (":running", s("running")),
                    (":cutoff", n(now.minus(self.policy.heartbeat_timeout).as_millis())),
                ]),
            )
            .send(true)
            .await?;
        match out {
            Updated::Applied(item) => Ok(ControlOutcome::Running {
                cancel_requested: item.as_ref().is_some_and(|i| Read(i).bool("cancel_requested")),
            }),
            Updated::Rejected(old) => {
                Ok(classify_control(opt_from(old.as_ref(), run_from)?.as_ref(), owner, now, &self.policy))
            }
        }
    }

    async fn complete_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
        completion: &Completion,
    ) -> StoreResult<CompleteOutcome> {
        let now = self.clock.now();
        let hash = completion.hash();
        let status = RunStatus::from(completion.status);
        let meta = Completion { result: None, ..completion.clone() };
        let meta = serde_json::to_string(&meta).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let cutoff = n(now.minus(self.policy.heartbeat_timeout).as_millis());
        let mut vals = values([
            (":status", s(status.as_str())),
            (":now", n(now.as_millis())),
            (":e", s(completion.execution_id.clone())),
            (":c", s(meta.clone())),
            (":h", s(hash.clone())),
            (":ttl", ttl_at(now.plus(self.policy.retention))),
            (":o", s(owner.as_str())),
            (":running", s("running")),
            (":cutoff", cutoff.clone()),
            (":f", b(false)),
        ]);
        let (set_result, result_value) = match &completion.result {
            Some(r) => (", #result = :r", Some(s(r.clone()))),
            None => ("", None),
        };
        if let Some(v) = &result_value {
            vals.insert(":r".into(), v.clone());
        }
        let update = format!(
            "SET #status = :status, #finished_at = :now, #execution_id = :e, #completion = :c, #completion_hash = :h, #ttl = :ttl{set_result} REMOVE #gsi1pk, #gsi1sk"
        );
        let running =
            "(#status = :running AND #execution_id = :e AND #last_heartbeat_at > :cutoff AND #cancel_requested = :f)";
        // A queued command may only be refused (failed/cancelled), never completed unstarted.
        let condition = if status == RunStatus::Completed {
            format!("#owner = :o AND {running}")
        } else {
            vals.insert(":queued".into(), s("queued"));
            format!("#owner = :o AND ({running} OR (#status = :queued AND #expires_at > :now))")
        };
        let old = match self.update(run_key(command), &update, &condition, vals).send(true).await? {
            Updated::Applied(new) => {
                if status == RunStatus::Completed
                    && let Some(run) = opt_from(new.as_ref(), run_from)?
                {
                    self.record_duration(owner, &run).await;
                }
                return Ok(CompleteOutcome::Recorded(status));
            }
            Updated::Rejected(old) => old,
        };
        let old = opt_from(old.as_ref(), run_from)?;
        match classify_complete(old.as_ref(), owner, completion, &hash, now, &self.policy) {
            CompleteStep::Done(outcome) => Ok(outcome),
            CompleteStep::RecordCancelled => {
                let mut vals = values([
                    (":cancelled", s("cancelled")),
                    (":now", n(now.as_millis())),
                    (":c", s(meta)),
                    (":h", s(hash.clone())),
                    (":ttl", ttl_at(now.plus(self.policy.retention))),
                    (":o", s(owner.as_str())),
                    (":running", s("running")),
                    (":e", s(completion.execution_id.clone())),
                    (":t", b(true)),
                    (":cutoff", cutoff),
                ]);
                if let Some(v) = result_value {
                    vals.insert(":r".into(), v);
                }
                let update = format!(
                    "SET #status = :cancelled, #finished_at = :now, #completion = :c, #completion_hash = :h, #ttl = :ttl{set_result}"
                );
                let out = self
                    .update(
                        run_key(command),
                        &update,
                        "#owner = :o AND #status = :running AND #execution_id = :e AND #cancel_requested = :t AND #last_heartbeat_at > :cutoff",
                        vals,
                    )
                    .send(false)
                    .await?;
                Ok(match out {
                    Updated::Applied(_) => CompleteOutcome::Recorded(RunStatus::Cancelled),
                    Updated::Rejected(old) => {
                        let old = opt_from(old.as_ref(), run_from)?;
                        match classify_complete(old.as_ref(), owner, completion, &hash, now, &self.policy) {
                            CompleteStep::Done(outcome) => outcome,
                            CompleteStep::RecordCancelled => CompleteOutcome::Conflict(RunStatus::Running),
                        }
                    }
                })
            }
        }
    }
}

#[async_trait]
impl ManageLinks for DynamoStore {
    async fn create_link(&self, owner: &OwnerId, project: ProjectId, name: &str) -> StoreResult<Option<ChatLink>> {
        let link = ChatLink::new(owner, project, name, self.clock.now());
        let mut item = link_key(owner, link.link_id);
        item.extend(values([
            ("link_id", s(link.link_id.to_string())),
            ("owner", s(owner.as_str())),
            ("project_id", s(project.to_string())),
            ("name", s(name)),
            ("created_at", n(link.created_at.as_millis())),
        ]));
        let items = vec![
            check(&self.table, project_key(owner, project), "attribute_exists(#pk)", Item::new())?,
            put(&self.table, item, "attribute_not_exists(#pk)", Item::new())?,
        ];
        match self.transact(items).await? {
            None => Ok(Some(link)),
            Some(reasons) if failed(&reasons, 0) => Ok(None),
            Some(reasons) => Err(unexpected("link transaction", &reasons)),
        }
    }

    async fn get_link(&self, owner: &OwnerId, link: ChatLinkId) -> StoreResult<Option<ChatLink>> {
        opt_from(self.get(link_key(owner, link)).await?.as_ref().filter(|i| live_link(i)), link_from)
    }

    async fn list_links(&self, owner: &OwnerId) -> StoreResult<Vec<ChatLink>> {
        let items = self.query_all(format!("OWNER#{owner}"), "LINK#").await?;
        let mut links = items.iter().filter(|i| live_link(i)).map(link_from).collect::<StoreResult<Vec<_>>>()?;
        links.sort_by_key(|l| (l.created_at, l.link_id));
        Ok(links)
    }

    /// A tombstone on the link (one conditional write), then a sweep over its tasks (one query
    /// per page, one conditional write per task): open ones become `cancelled`, all are marked
    /// `link_deleted`. The tombstone expires with the retention period; until then a repeated
    /// delete finishes a sweep that was cut short.
    async fn delete_link(&self, owner: &OwnerId, link: ChatLinkId) -> StoreResult<Option<usize>> {
        let now = self.clock.now();
        let out = self
            .update(
                link_key(owner, link),
                "SET #deleted_at = if_not_exists(#deleted_at, :now), #ttl = :ttl REMOVE #subscription",
                "attribute_exists(#pk)",
                values([(":now", n(now.as_millis())), (":ttl", ttl_at(now.plus(self.policy.retention)))]),
            )
            .send(false)
            .await?;
        if matches!(out, Updated::Rejected(_)) {
            return Ok(None);
        }
        let mut cancelled = 0;
        for item in self.query_all(format!("LINK#{link}"), "TASK#").await? {
            let task = task_from(&item)?;
            if task.owner != *owner || task.link_deleted {
                continue;
            }
            let cancel = self
                .update(
                    task_key(link, task.task_id),
                    "SET #status = :cancelled, #finished_at = :now, #link_deleted = :t, #ttl = :ttl REMOVE #gsi2pk, #gsi2sk",
                    "#owner = :o AND #status IN (:queued, :claimed) AND #expires_at > :now",
                    values([
                        (":cancelled", s("cancelled")),
                        (":queued", s("queued")),
                        (":claimed", s("claimed")),
                        (":now", n(now.as_millis())),
                        (":o", s(owner.as_str())),
                        (":t", b(true)),
                        (":ttl", ttl_at(now.plus(self.policy.retention))),
                    ]),
                )
                .send(false)
                .await?;
            match cancel {
                Updated::Applied(_) => cancelled += 1,
                // Finished (or expired) already: only hide it.
                Updated::Rejected(_) => {
                    self.update(
                        task_key(link, task.task_id),
                        "SET #link_deleted = :t",
                        "#owner = :o",
                        values([(":t", b(true)), (":o", s(owner.as_str()))]),
                    )
                    .send(false)
                    .await?;
                }
            }
        }
        Ok(Some(cancelled))
    }

    async fn set_subscription(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        subscription: Option<&Subscription>,
    ) -> StoreResult<Option<ChatLink>> {
        let (update, vals) = match subscription {
            Some(sub) => {
                let json = serde_json::to_string(sub).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                ("SET #subscription = :s", values([(":s", s(json))]))
            }
            None => ("REMOVE #subscription", Item::new()),
        };
        let condition = "attribute_exists(#pk) AND attribute_not_exists(#deleted_at)";
        match self.update(link_key(owner, link), update, condition, vals).send(true).await? {
            Updated::Applied(item) => opt_from(item.as_ref(), link_from),
            Updated::Rejected(_) => Ok(None),
        }
    }
}

impl DynamoStore {
    async fn replay_task(
        &self,
        seen_hash: &str,
        target: &str,
        req: &AssignTask,
        req_hash: &str,
    ) -> StoreResult<AssignOutcome> {
        if seen_hash != req_hash {
            return Ok(AssignOutcome::Rejected(AssignRejection::IdempotencyMismatch));
        }
        let id = TaskId::parse("task_id", target).map_err(|_| bad("target_id"))?;
        match opt_from(self.get(task_key(req.link_id, id)).await?.as_ref(), task_from)? {
            Some(task) => Ok(AssignOutcome::Replayed(task)),
            None => Err(StoreError::Corrupt("idempotency record points at a missing task".into())),
        }
    }
}

#[async_trait]
impl AssignTasks for DynamoStore {
    async fn assign_task(&self, req: &AssignTask) -> StoreResult<AssignOutcome> {
        let now = self.clock.now();
        let record = idempotency_record_key("task", req.owner.as_str(), &req.idempotency_key);
        let hash = req.request_hash();
        let task = Task::assigned(req, now, &self.policy);
        let mut item = task_key(task.link_id, task.task_id);
        item.extend(values([
            ("task_id", s(task.task_id.to_string())),
            ("link_id", s(task.link_id.to_string())),
            ("owner", s(task.owner.as_str())),
            ("objective", s(task.objective.clone())),
            ("status", s("queued")),
            ("created_at", n(now.as_millis())),
            ("expires_at", n(task.expires_at.as_millis())),
            ("gsi2pk", s(format!("OPEN#{}", task.link_id))),
            ("gsi2sk", s(format!("{}#{}", task.expires_at.sortable(), task.task_id))),
            (TTL_ATTRIBUTE, ttl_at(task.expires_at.plus(self.policy.retention))),
        ]));
        let items = vec![
            check(
                &self.table,
                link_key(&req.owner, req.link_id),
                "attribute_exists(#pk) AND attribute_not_exists(#deleted_at)",
                Item::new(),
            )?,
            put(
                &self.table,
                idem_item(&record, &hash, task.task_id.to_string(), now, &self.policy),
                IDEM_FREE,
                values([(":now", n(now.as_millis()))]),
            )?,
            put(&self.table, item, "attribute_not_exists(#pk)", Item::new())?,
        ];
        let Some(reasons) = self.transact(items).await? else {
            return Ok(AssignOutcome::Assigned(task));
        };
        if let Some((seen, target)) = self.key_in_use(&reasons, 1, &record, now).await? {
            return self.replay_task(&seen, &target, req, &hash).await;
        }
        if failed(&reasons, 0) {
            return Ok(AssignOutcome::Rejected(AssignRejection::LinkNotFound));
        }
        Err(unexpected("assign transaction", &reasons))
    }

    async fn cancel_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<CancelTaskOutcome> {
        let now = self.clock.now();
        let out = self
            .update(
                task_key(link, task),
                "SET #status = :cancelled, #finished_at = :now, #ttl = :ttl REMOVE #gsi2pk, #gsi2sk",
                "#owner = :o AND #status IN (:queued, :claimed) AND #expires_at > :now",
                values([
                    (":cancelled", s("cancelled")),
                    (":queued", s("queued")),
                    (":claimed", s("claimed")),
                    (":now", n(now.as_millis())),
                    (":o", s(owner.as_str())),
                    (":ttl", ttl_at(now.plus(self.policy.retention))),
                ]),
            )
            .send(false)
            .await?;
        match out {
            Updated::Applied(_) => Ok(CancelTaskOutcome::Cancelled),
            Updated::Rejected(old) => {
                Ok(classify_cancel_task(opt_from(old.as_ref(), task_from)?.as_ref(), owner, &link, now))
            }
        }
    }

    /// One `Query` on the link's partition, newest first: `sk BETWEEN "TASK#" AND "TASK#<before>"`
    /// (inclusive, so the `before` task itself is skipped here), one item more than asked to know
    /// whether a next page exists.
    async fn list_link_tasks(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        limit: usize,
        before: Option<TaskId>,
    ) -> StoreResult<TaskPage> {
        let hi = before.map_or_else(|| "TASK#~".to_owned(), |t| format!("TASK#{t}"));
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("#pk = :pk AND #sk BETWEEN :lo AND :hi")
            .set_expression_attribute_names(Some(names("#pk #sk")))
            .expression_attribute_values(":pk", s(format!("LINK#{link}")))
            .expression_attribute_values(":lo", s("TASK#"))
            .expression_attribute_values(":hi", s(hi))
            .scan_index_forward(false)
            .consistent_read(true)
            .limit(i32::try_from(limit + 2).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(sdk)?;
        let mut tasks = Vec::new();
        for item in out.items() {
            let t = task_from(item)?;
            if Some(t.task_id) != before && &t.owner == owner {
                tasks.push(t);
            }
        }
        let next = if tasks.len() > limit {
            tasks.truncate(limit);
            tasks.last().map(|t| t.task_id)
        } else {
            None
        };
        Ok(TaskPage { tasks, next })
    }

    async fn list_artifacts(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        task: TaskId,
    ) -> StoreResult<Vec<ArtifactRecord>> {
        let items = self.query_all(format!("LINK#{link}"), &format!("ARTIFACT#{task}#")).await?;
        let mut out = Vec::with_capacity(items.len());
        for item in items.iter().filter(|i| Read(i).opt_s("owner") == Some(owner.as_str())) {
            let r = Read(item);
            out.push(ArtifactRecord {
                link_id: link,
                task_id: task,
                claim_id: r.parse("claim_id", |v| ClaimId::parse("claim_id", v).ok())?,
                artifact_id: r.s("artifact_id")?.to_owned(),
                name: r.s("name")?.to_owned(),
                content_type: r.s("content_type")?.to_owned(),
                sha256: r.s("sha256")?.to_owned(),
                size: u64::try_from(r.n("size")?).unwrap_or(0),
                object_key: r.s("object_key")?.to_owned(),
            });
        }
        Ok(out)
    }
}

#[async_trait]
impl OwnerRuns for DynamoStore {
    /// One `Query` on the owner-runs index, newest first (command ids are UUIDv7).
    async fn recent_runs(&self, owner: &OwnerId, limit: usize, before: Option<CommandId>) -> StoreResult<Vec<Run>> {
        let before = before.map_or_else(|| "~".to_owned(), |c| c.to_string());
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(OWNER_RUNS_INDEX)
            .key_condition_expression("#gsi3pk = :p AND #gsi3sk < :before")
            .set_expression_attribute_names(Some(names("#gsi3pk #gsi3sk")))
            .expression_attribute_values(":p", s(format!("RUNS#{owner}")))
            .expression_attribute_values(":before", s(before))
            .scan_index_forward(false)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(sdk)?;
        out.items().iter().map(run_from).collect()
    }
}

#[async_trait]
impl ReadTasks for DynamoStore {
    async fn list_open_tasks(&self, owner: &OwnerId, link: ChatLinkId, limit: usize) -> StoreResult<Vec<Task>> {
        let items = self.query_unexpired(OPEN_TASKS_INDEX, format!("OPEN#{link}"), owner, limit).await?;
        items.iter().map(task_from).collect()
    }

    async fn get_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<Option<Task>> {
        Ok(opt_from(self.get(task_key(link, task)).await?.as_ref(), task_from)?.filter(|t| t.visible_to(owner, &link)))
    }
}

#[async_trait]
impl ClaimTasks for DynamoStore {
    async fn claim_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<ClaimOutcome> {
        let now = self.clock.now();
        let claim_id = ClaimId::generate();
        let lease_until = now.plus(self.policy.lease);
        let out = self
            .update(
                task_key(link, task),
                "SET #status = :claimed, #claim_id = :c, #lease_until = :lease, #claimed_at = :now",
                "#owner = :o AND #expires_at > :now AND (#status = :queued OR (#status = :claimed AND #lease_until <= :now))",
                values([
                    (":claimed", s("claimed")),
                    (":queued", s("queued")),
                    (":c", s(claim_id.to_string())),
                    (":lease", n(lease_until.as_millis())),
                    (":now", n(now.as_millis())),
                    (":o", s(owner.as_str())),
                ]),
            )
            .send(false)
            .await?;
        match out {
            Updated::Applied(_) => Ok(ClaimOutcome::Claimed { claim_id, lease_until }),
            Updated::Rejected(old) => {
                Ok(classify_claim(opt_from(old.as_ref(), task_from)?.as_ref(), owner, &link, now))
            }
        }
    }

    async fn submit_task(&self, req: &SubmitTask) -> StoreResult<SubmitOutcome> {
        let now = self.clock.now();
        let hash = req.result_hash();
        let SubmitTask { owner, link_id: link, task_id: task, claim_id: claim, status, result } = req;
        let out = self
            .update(
                task_key(*link, *task),
                "SET #status = :status, #result = :r, #result_hash = :h, #finished_at = :now, #ttl = :ttl REMOVE #gsi2pk, #gsi2sk",
                "#owner = :o AND #status = :claimed AND #claim_id = :c AND #expires_at > :now",
                values([
                    (":status", s(TaskStatus::from(*status).as_str())),
                    (":r", s(result.as_str())),
                    (":h", s(hash.clone())),
                    (":now", n(now.as_millis())),
                    (":ttl", ttl_at(now.plus(self.policy.retention))),
                    (":o", s(owner.as_str())),
                    (":claimed", s("claimed")),
                    (":c", s(claim.to_string())),
                ]),
            )
            .send(false)
            .await?;
        match out {
            Updated::Applied(_) => Ok(SubmitOutcome::Accepted),
            Updated::Rejected(old) => {
                Ok(classify_submit(opt_from(old.as_ref(), task_from)?.as_ref(), owner, link, claim, Some(&hash), now))
            }
        }
    }
}

#[async_trait]
impl RecordArtifacts for DynamoStore {
    async fn record_artifact(&self, owner: &OwnerId, r: &ArtifactRecord) -> StoreResult<ArtifactOutcome> {
        let now = self.clock.now();
        let mut item = artifact_key(r);
        item.extend(values([
            ("owner", s(owner.as_str())),
            ("task_id", s(r.task_id.to_string())),
            ("artifact_id", s(r.artifact_id.clone())),
            ("claim_id", s(r.claim_id.to_string())),
            ("name", s(r.name.clone())),
            ("content_type", s(r.content_type.clone())),
            ("sha256", s(r.sha256.clone())),
            ("size", n(i64::try_from(r.size).unwrap_or(i64::MAX))),
            ("object_key", s(r.object_key.clone())),
            ("created_at", n(now.as_millis())),
            (TTL_ATTRIBUTE, ttl_at(now.plus(self.policy.task_ttl).plus(self.policy.retention))),
        ]));
        let items = vec![
            put(&self.table, item, "attribute_not_exists(#pk)", Item::new())?,
            check(
                &self.table,
                task_key(r.link_id, r.task_id),
                "#owner = :o AND #status = :claimed AND #claim_id = :c AND #expires_at > :now",
                values([
                    (":o", s(owner.as_str())),
                    (":claimed", s("claimed")),
                    (":c", s(r.claim_id.to_string())),
                    (":now", n(now.as_millis())),
                ]),
            )?,
        ];
        let Some(reasons) = self.transact(items).await? else { return Ok(ArtifactOutcome::Recorded) };
        if failed(&reasons, 0)
            && let Some(old) = old_image(&reasons, 0)
        {
            let old = Read(old);
            if old.opt_s("owner") == Some(owner.as_str()) {
                return Ok(if old.opt_s("sha256") == Some(r.sha256.as_str()) {
                    ArtifactOutcome::Replayed
                } else {
                    ArtifactOutcome::DifferentContent
                });
            }
            return Ok(ArtifactOutcome::Rejected(SubmitRejection::Missing));
        }
        if failed(&reasons, 1) {
            let old = opt_from(old_image(&reasons, 1), task_from)?;
            return Ok(match classify_submit(old.as_ref(), owner, &r.link_id, &r.claim_id, None, now) {
                SubmitOutcome::Rejected(why) => ArtifactOutcome::Rejected(why),
                _ => ArtifactOutcome::Rejected(SubmitRejection::StaleClaim),
            });
        }
        Err(unexpected("artifact transaction", &reasons))
    }

    /// One `TransactGetItems` (a consistent snapshot of the artifact's record and the task).
    async fn check_artifact(&self, owner: &OwnerId, record: &ArtifactRecord) -> StoreResult<ArtifactCheck> {
        let now = self.clock.now();
        let get = |k: Item| -> StoreResult<TransactGetItem> {
            let g = Get::builder().table_name(&self.table).set_key(Some(k)).build().map_err(build)?;
            Ok(TransactGetItem::builder().get(g).build())
        };
        let out = self
            .client
            .transact_get_items()
            .transact_items(get(artifact_key(record))?)
            .transact_items(get(task_key(record.link_id, record.task_id))?)
            .send()
            .await
            .map_err(sdk)?;
        let responses = out.responses();
        let item = |i: usize| responses.get(i).and_then(|r| r.item.as_ref()).filter(|i| !i.is_empty());
        let existing = item(0)
            .filter(|a| Read(a).opt_s("owner") == Some(owner.as_str()))
            .and_then(|a| Read(a).opt_s("sha256").map(str::to_owned));
        let task = opt_from(item(1), task_from)?;
        Ok(check_artifact(existing.as_deref(), task.as_ref(), owner, record, now))
    }
}

fn artifact_key(r: &ArtifactRecord) -> Item {
    key(format!("LINK#{}", r.link_id), format!("ARTIFACT#{}#{}", r.task_id, r.artifact_id))
}

fn device_key(owner: &OwnerId, device: uuid::Uuid) -> Item {
    key(format!("OWNER#{owner}"), format!("DEVICE#{device}"))
}

fn token_key(hash: &str) -> Item {
    key(format!("DEVTOKEN#{hash}"), "DEVTOKEN")
}

fn device_from(item: &Item) -> StoreResult<Device> {
    let r = Read(item);
    Ok(Device {
        device_id: r.parse("device_id", |v| uuid::Uuid::try_parse(v).ok())?,
        owner: r.parse("owner", |v| OwnerId::new(v).ok())?,
        name: r.s("name")?.to_owned(),
        token_hash: r.s("token_hash")?.to_owned(),
        created_at: r.ts("created_at")?,
        revoked_at: r.opt_ts("revoked_at")?,
        last_seen_at: r.opt_ts("last_seen_at")?,
    })
}

#[async_trait]
impl ManageDevices for DynamoStore {
    /// Two items in one transaction: the owner's record (for listing) and the token record
    /// (for the relay's one-read authentication).
    async fn create_device(&self, owner: &OwnerId, name: &str, token_hash: &str) -> StoreResult<Device> {
        let d = Device::new(owner, name, token_hash, self.clock.now());
        let attrs = values([
            ("device_id", s(d.device_id.to_string())),
            ("owner", s(owner.as_str())),
            ("name", s(name)),
            ("token_hash", s(token_hash)),
            ("created_at", n(d.created_at.as_millis())),
        ]);
        let mut record = device_key(owner, d.device_id);
        record.extend(attrs.clone());
        let mut token = token_key(token_hash);
        token.extend(attrs);
        let items = vec![
            put(&self.table, record, "attribute_not_exists(#pk)", Item::new())?,
            put(&self.table, token, "attribute_not_exists(#pk)", Item::new())?,
        ];
        match self.transact(items).await? {
            None => Ok(d),
            Some(reasons) => Err(unexpected("device transaction (id or token collision)", &reasons)),
        }
    }

    async fn list_devices(&self, owner: &OwnerId) -> StoreResult<Vec<Device>> {
        let mut v: Vec<Device> = self
            .query_all(format!("OWNER#{owner}"), "DEVICE#")
            .await?
            .iter()
            .map(device_from)
            .collect::<StoreResult<_>>()?;
        v.sort_by_key(|d| (d.created_at, d.device_id));
        Ok(v)
    }

    async fn revoke_device(&self, owner: &OwnerId, device: uuid::Uuid) -> StoreResult<bool> {
        let Some(d) = opt_from(self.get(device_key(owner, device)).await?.as_ref(), device_from)? else {
            return Ok(false);
        };
        let now = self.clock.now();
        let update = |k: Item| -> StoreResult<TransactWriteItem> {
            let u = aws_sdk_dynamodb::types::Update::builder()
                .table_name(&self.table)
                .set_key(Some(k))
                .update_expression("SET #revoked_at = if_not_exists(#revoked_at, :now)")
                .condition_expression("attribute_exists(#pk)")
                .set_expression_attribute_names(Some(names("#revoked_at #pk")))
                .expression_attribute_values(":now", n(now.as_millis()))
                .build()
                .map_err(build)?;
            Ok(TransactWriteItem::builder().update(u).build())
        };
        let items = vec![update(device_key(owner, device))?, update(token_key(&d.token_hash))?];
        if self.transact(items).await?.is_some() {
            return Ok(false);
        }
        // Its shares go with it: one versioned write per project it shared in.
        let needle = device.to_string();
        for item in self.query_all(format!("OWNER#{owner}"), "PROJECT#").await? {
            let shares = Read(&item).opt_parse("device_shares", |v| Some(v.to_owned()))?.unwrap_or_default();
            if shares.contains(&needle) {
                let project = project_from(&item)?.project_id;
                self.set_device_share(owner, project, device, &[], false).await?;
            }
        }
        Ok(true)
    }
}

#[async_trait]
impl AuthenticateDevices for DynamoStore {
    async fn device_by_token_hash(&self, token_hash: &str) -> StoreResult<Option<Device>> {
        Ok(opt_from(self.get(token_key(token_hash)).await?.as_ref(), device_from)?.filter(|d| d.revoked_at.is_none()))
    }

    /// One conditional `UpdateItem` on the owner's device record, which fails (harmlessly) when
    /// the device was seen within the last minute.
    async fn record_device_seen(&self, device: &Device) -> StoreResult<()> {
        let now = self.clock.now();
        self.update(
            device_key(&device.owner, device.device_id),
            "SET #last_seen_at = :now",
            "attribute_exists(#pk) AND (attribute_not_exists(#last_seen_at) OR #last_seen_at <= :cutoff)",
            values([(":now", n(now.as_millis())), (":cutoff", n(now.minus(DEVICE_SEEN_GRANULARITY).as_millis()))]),
        )
        .send(false)
        .await
        .map(drop)
    }
}

#[async_trait]
impl RecordDeliveries for DynamoStore {
    /// One `PutItem` on `DELIVERY#<owner>` / `<link>` (the notifier's only write, which its IAM
    /// policy limits to `DELIVERY#` partitions).
    async fn record_delivery(&self, owner: &OwnerId, link: ChatLinkId, outcome: &DeliveryOutcome) -> StoreResult<()> {
        let body = serde_json::to_string(outcome).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut item = key(format!("DELIVERY#{owner}"), link.to_string());
        item.extend(values([
            ("outcome", s(body)),
            (TTL_ATTRIBUTE, ttl_at(self.clock.now().plus(self.policy.retention))),
        ]));
        self.client.put_item().table_name(&self.table).set_item(Some(item)).send().await.map_err(sdk)?;
        Ok(())
    }

    async fn last_deliveries(&self, owner: &OwnerId) -> StoreResult<Vec<(ChatLinkId, DeliveryOutcome)>> {
        let items = self.query_all(format!("DELIVERY#{owner}"), "").await?;
        items
            .iter()
            .map(|i| {
                let r = Read(i);
                Ok((
                    r.parse("sk", |v| ChatLinkId::parse("chat_link_id", v).ok())?,
                    r.parse("outcome", |v| serde_json::from_str(v).ok())?,
                ))
            })
            .collect()
    }
}

/// A DynamoDB-JSON image (as the table's stream delivers it, `{"pk":{"S":"…"},…}`) as an item.
///
/// # Errors
/// [`StoreError::Corrupt`] when the JSON is not an image.
pub fn item_from_stream_json(image: &serde_json::Value) -> StoreResult<Item> {
    fn value(v: &serde_json::Value) -> Option<AttributeValue> {
        let (kind, inner) = v.as_object()?.iter().next()?;
        Some(match kind.as_str() {
            "S" => AttributeValue::S(inner.as_str()?.to_owned()),
            "N" => AttributeValue::N(inner.as_str()?.to_owned()),
            "BOOL" => AttributeValue::Bool(inner.as_bool()?),
            "NULL" => AttributeValue::Null(true),
            "SS" => {
                AttributeValue::Ss(inner.as_array()?.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
            }
            "NS" => {
                AttributeValue::Ns(inner.as_array()?.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
            }
            "L" => AttributeValue::L(inner.as_array()?.iter().map(value).collect::<Option<_>>()?),
            "M" => AttributeValue::M(
                inner.as_object()?.iter().map(|(k, v)| Some((k.clone(), value(v)?))).collect::<Option<_>>()?,
            ),
            _ => return None,
        })
    }
    let map = image.as_object().ok_or_else(|| StoreError::Corrupt("stream image is not an object".into()))?;
    map.iter().map(|(k, v)| value(v).map(|v| (k.clone(), v)).ok_or_else(|| bad(k))).collect()
}

/// The events one stream record means: its old and new images (either may be absent) decoded
/// as a task or a run and handed to the domain's `derive_*`. Other items mean nothing.
///
/// # Errors
/// [`StoreError::Corrupt`] when a task or run image cannot be decoded.
pub fn events_of_change(old: Option<&Item>, new: Option<&Item>) -> StoreResult<Vec<Event>> {
    let sk = new.or(old).and_then(|i| Read(i).opt_s("sk").map(str::to_owned)).unwrap_or_default();
    if sk.starts_with("TASK#") {
        let (o, n) = (opt_from(old, task_from)?, opt_from(new, task_from)?);
        Ok(derive_task(o.as_ref(), n.as_ref()))
    } else if sk == "RUN" {
        let (o, n) = (opt_from(old, run_from)?, opt_from(new, run_from)?);
        Ok(derive_run(o.as_ref(), n.as_ref()))
    } else {
        Ok(Vec::new())
    }
}

/// Creates the table with its two sparse indexes and TTL, on demand billing; waits until it
/// is active. Used by tests and `infra/`; `template.yaml` declares the same table for deploys.
///
/// # Errors
/// [`StoreError`] when DynamoDB refuses.
pub async fn create_table(client: &Client, table: &str) -> StoreResult<()> {
    let attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(build)
    };
    let key = |name: &str, kind: KeyType| {
        KeySchemaElement::builder().attribute_name(name).key_type(kind).build().map_err(build)
    };
    let index = |name: &str, pk: &str, sk: &str| -> StoreResult<GlobalSecondaryIndex> {
        GlobalSecondaryIndex::builder()
            .index_name(name)
            .key_schema(key(pk, KeyType::Hash)?)
            .key_schema(key(sk, KeyType::Range)?)
            .projection(Projection::builder().projection_type(ProjectionType::All).build())
            .build()
            .map_err(build)
    };
    client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .set_attribute_definitions(Some(vec![
            attr("pk")?,
            attr("sk")?,
            attr("gsi1pk")?,
            attr("gsi1sk")?,
            attr("gsi2pk")?,
            attr("gsi2sk")?,
            attr("gsi3pk")?,
            attr("gsi3sk")?,
        ]))
        .key_schema(key("pk", KeyType::Hash)?)
        .key_schema(key("sk", KeyType::Range)?)
        .global_secondary_indexes(index(QUEUE_INDEX, "gsi1pk", "gsi1sk")?)
        .global_secondary_indexes(index(OPEN_TASKS_INDEX, "gsi2pk", "gsi2sk")?)
        .global_secondary_indexes(index(OWNER_RUNS_INDEX, "gsi3pk", "gsi3sk")?)
        // The events publisher reads the stream (SPEC §8).
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .map_err(build)?,
        )
        .send()
        .await
        .map_err(sdk)?;
    for _ in 0..120 {
        let out = client.describe_table().table_name(table).send().await.map_err(sdk)?;
        if out.table().and_then(|t| t.table_status()).map(|s| s.as_str()) == Some("ACTIVE") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder().attribute_name(TTL_ATTRIBUTE).enabled(true).build().map_err(build)?,
        )
        .send()
        .await
        .map_err(sdk)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cover_every_placeholder_once() {
        let m = names("SET #status = :s, #ttl = :t REMOVE #gsi1pk, #gsi1sk #status");
        assert_eq!(m.len(), 4);
        assert_eq!(m.get("#status").map(String::as_str), Some("status"));
        assert_eq!(m.get("#gsi1sk").map(String::as_str), Some("gsi1sk"));
    }

    #[test]
    fn unexpired_bound_excludes_items_expiring_now() {
        let now = Timestamp::from_millis(1_000);
        let expiring_now = format!("{}#{}", now.sortable(), CommandId::generate());
        let later = format!("{}#{}", now.plus(Duration::from_millis(1)).sortable(), CommandId::generate());
        assert!(expiring_now.as_str() < unexpired_after(now).as_str());
        assert!(later.as_str() > unexpired_after(now).as_str());
    }
}
