//! Test harness for the cross-crate suites.
//!
//! A [`Harness`] is one store (embedded SQLite or DynamoDB), a [`ManualClock`] the test moves
//! by hand, and the instruments the suite needs: a write counter (to prove reads never
//! write), the DynamoDB request log (to assert request counts per operation), and a
//! deliberately naive read-then-write claim — used only here — to prove the race test can
//! fail.
//!
//! DynamoDB comes from `AWS_ENDPOINT_URL` (the test script starts moto behind a serializing
//! wrapper when it is unset; point it at LocalStack or leave it to a real account's endpoint).
//! Without it the DynamoDB half skips loudly, except under `CI=true`, where it fails.
//!
//! | module | what |
//! |---|---|
//! | this one | [`Harness`], the one [`LocalServer`] fixture, `FOUNDRY_UPDATE=1` for pinned outputs |
//! | [`cloud`] | the deployed shape on one machine: the real function binaries behind a small Lambda emulator |
//! | [`documents`] | an HTTPS host of client metadata documents on loopback (the fixture certificate) |
//! | [`doorbell_shim`] | API Gateway's WebSocket API, emulated for the cloud shape |
//! | [`faults`] | a DynamoDB endpoint that fails on purpose (a proxy in front of the emulator) |
//! | [`graphs`] | the slot tests' Graph (records its pid and starts, reports progress, waits); is a process alive, kill a group |
//! | [`hosted_ui`] | Cognito's hosted `/oauth2/authorize` and `/oauth2/token`, as the cloud shape meets them |
//! | [`net`] | a TCP forwarder that cuts connections silently, and an HTTP forward proxy |
//! | [`mutants`] | pairing steps without their conditions: right one at a time, wrong only in a race |
//! | [`mcp`] | requests of the MCP 2026-07-28 revision, as a client without a handshake sends them; a session to run |
//! | [`python`] | the pinned Python MCP SDKs, the OAuth client script, and the browser scenarios' runner |
//! | [`receiver`] | a webhook receiver that verifies every request's signature |
//! | [`recorder`] | a reverse proxy that keeps a relay's relay API exchanges (a release's frozen requests) |
//! | [`registration`] | a registration flood both the local server and the cloud shape must survive |

pub mod cloud;
pub mod documents;
pub mod doorbell_shim;
pub mod faults;
pub mod graphs;
pub mod hosted_ui;
pub mod mcp;
pub mod mutants;
pub mod net;
pub mod python;
pub mod receiver;
pub mod recorder;
pub mod registration;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use domain::clock::{Clock, ManualClock, Timestamp};
use domain::ids::{ChatLinkId, ClaimId, OwnerId, TaskId};
use domain::limits::Policy;
use domain::store::Store;
use store_dynamo::{DynamoStore, create_table};
use store_sqlite::SqliteStore;

/// Records the name of every DynamoDB operation the client executes (retries excluded), and
/// the capacity units the emulator counted for them (`infra/moto_capacity.py`'s
/// `x-foundry-capacity` answer header, every attempt included: DynamoDB bills a retried
/// request too).
#[derive(Debug, Clone, Default)]
pub struct RequestLog {
    ops: Arc<Mutex<Vec<String>>>,
    capacity: Arc<Mutex<Capacity>>,
    writes: Arc<AtomicU64>,
}

/// Capacity units DynamoDB bills for some requests, as the emulator counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Capacity {
    /// Read units (an eventually consistent read of up to 4 KB is half of one).
    pub read: f64,
    /// Write units (transactional items count twice, index writes once each).
    pub write: f64,
    /// Whether every answer carried the emulator's count (`false` on an endpoint without the
    /// meter: LocalStack or a real account, where nothing may be concluded from the zeros).
    pub measured: bool,
    /// Answers counted.
    pub answers: u64,
}

impl RequestLog {
    /// Operations since the last [`RequestLog::take`], in order. A transaction is logged as
    /// `TransactWriteItems:<kinds of its items>`, e.g. `TransactWriteItems:ConditionCheck,Put`.
    /// The capacity counted since then is dropped with them.
    pub fn take(&self) -> Vec<String> {
        self.take_with_capacity().0
    }

    /// [`RequestLog::take`], with the capacity units their answers counted.
    pub fn take_with_capacity(&self) -> (Vec<String>, Capacity) {
        let ops = self.ops.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default();
        let capacity = self.capacity.lock().map(|mut c| std::mem::take(&mut *c)).unwrap_or_default();
        let measured = capacity.measured || capacity.answers == 0;
        (ops, Capacity { measured, ..capacity })
    }

    /// Write operations since the client was built.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }
}

/// Whether a DynamoDB operation writes.
pub fn is_write(op: &str) -> bool {
    matches!(
        op.split(':').next(),
        Some("PutItem" | "UpdateItem" | "DeleteItem" | "TransactWriteItems" | "BatchWriteItem")
    )
}

impl Intercept for RequestLog {
    fn name(&self) -> &'static str {
        "RequestLog"
    }

    // Serialization happens once per operation, before the retry loop: one entry per call.
    fn read_after_serialization(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let (Some(m), Ok(mut log)) = (cfg.load::<Metadata>(), self.ops.lock()) {
            if is_write(m.name()) {
                self.writes.fetch_add(1, Ordering::SeqCst);
            }
            let mut entry = m.name().to_owned();
            // A transaction's IAM needs are those of its parts: record them from the body.
            if entry == "TransactWriteItems"
                && let Some(body) = context.request().body().bytes()
                && let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
            {
                let mut kinds: Vec<String> = v["TransactItems"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i.as_object().and_then(|o| o.keys().next().cloned()))
                    .collect();
                kinds.sort();
                kinds.dedup();
                entry = format!("{entry}:{}", kinds.join(","));
            }
            log.push(entry);
        }
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        context: &aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let counted = context
            .response()
            .headers()
            .get("x-foundry-capacity")
            .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok());
        if let Ok(mut c) = self.capacity.lock() {
            // `measured` holds only while every answer carried the count.
            c.measured = counted.is_some() && (c.measured || c.answers == 0);
            c.answers += 1;
            if let Some(v) = counted {
                c.read += v["read"].as_f64().unwrap_or(0.0);
                c.write += v["write"].as_f64().unwrap_or(0.0);
            }
        }
        Ok(())
    }
}

/// Which store a harness drives.
pub enum Backend {
    /// SQLite in a temporary file (several connections, so races are real).
    Embedded {
        /// The store.
        store: SqliteStore,
        /// Removed on drop.
        path: PathBuf,
    },
    /// DynamoDB on a fresh table.
    Dynamo {
        /// The store.
        store: DynamoStore,
        /// Every request the store's client made.
        log: RequestLog,
    },
}

/// A store under test with its clock and instruments.
pub struct Harness {
    /// The store, through every capability.
    pub store: Arc<dyn Store>,
    /// The clock the store reads; tests move it.
    pub clock: Arc<ManualClock>,
    /// The policy the store was built with.
    pub policy: Policy,
    /// The concrete backend.
    pub backend: Backend,
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Backend::Embedded { path, .. } = &self.backend {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
        }
    }
}

/// The policy the suite uses unless a test needs another.
pub fn test_policy() -> Policy {
    Policy::default()
}

impl Harness {
    /// The embedded store in a fresh temporary file.
    ///
    /// # Panics
    /// When SQLite cannot open the file (a broken machine, not a test outcome).
    pub fn embedded(policy: Policy) -> Harness {
        let clock = Arc::new(ManualClock::starting_now());
        let path = std::env::temp_dir().join(format!("foundry-test-{}.sqlite3", uuid::Uuid::new_v4()));
        #[allow(clippy::expect_used)]
        let store = SqliteStore::open(&path, clock.clone(), policy).expect("open sqlite");
        Harness { store: Arc::new(store.clone()), clock, policy, backend: Backend::Embedded { store, path } }
    }

    /// DynamoDB at `AWS_ENDPOINT_URL` on a fresh table, or `None` (skipped loudly) when the
    /// variable is unset outside CI.
    ///
    /// # Panics
    /// Under `CI=true` without an endpoint, or when the table cannot be created.
    pub async fn dynamo(policy: Policy) -> Option<Harness> {
        let (client, log) = dynamo_client_with_log().await?;
        Some(Self::on_fresh_table(client, log, policy).await)
    }

    async fn on_fresh_table(client: aws_sdk_dynamodb::Client, log: RequestLog, policy: Policy) -> Harness {
        let table = format!("fc-test-{}", uuid::Uuid::new_v4().simple());
        #[allow(clippy::expect_used)]
        create_table(&client, &table).await.expect("create test table");
        log.take();
        let clock = Arc::new(ManualClock::starting_now());
        let store = DynamoStore::new(client, table, clock.clone(), policy);
        Harness { store: Arc::new(store.clone()), clock, policy, backend: Backend::Dynamo { store, log } }
    }

    /// DynamoDB through `endpoint` (the fault proxy in front of the emulator) on a fresh table,
    /// with `retry` as the SDK's retry policy.
    ///
    /// # Panics
    /// When the table cannot be created.
    pub async fn dynamo_at(endpoint: &str, policy: Policy, retry: aws_config::retry::RetryConfig) -> Harness {
        let config = lambda::aws_defaults().endpoint_url(endpoint).retry_config(retry).load().await;
        let log = RequestLog::default();
        let conf = aws_sdk_dynamodb::config::Builder::from(&config).interceptor(log.clone()).build();
        Self::on_fresh_table(aws_sdk_dynamodb::Client::from_conf(conf), log, policy).await
    }

    /// The DynamoDB client and table name, to delete the table after a test that consumed
    /// the harness (moto forgets tables anyway; a real account would keep them).
    pub fn table_handle(&self) -> Option<(aws_sdk_dynamodb::Client, String)> {
        match &self.backend {
            Backend::Dynamo { store, .. } => Some((store.client().clone(), store.table().to_owned())),
            Backend::Embedded { .. } => None,
        }
    }

    /// Name of the backend, for messages.
    pub fn name(&self) -> &'static str {
        match self.backend {
            Backend::Embedded { .. } => "embedded",
            Backend::Dynamo { .. } => "dynamodb",
        }
    }

    /// Writes so far: committed write transactions (embedded) or write requests (DynamoDB).
    pub fn writes(&self) -> u64 {
        match &self.backend {
            Backend::Embedded { store, .. } => store.write_transactions(),
            Backend::Dynamo { log, .. } => log.writes(),
        }
    }

    /// DynamoDB operations since the last call (`None` on the embedded store).
    pub fn take_requests(&self) -> Option<Vec<String>> {
        match &self.backend {
            Backend::Embedded { .. } => None,
            Backend::Dynamo { log, .. } => Some(log.take()),
        }
    }

    /// DynamoDB operations since the last call and the capacity the emulator billed them
    /// (`None` on the embedded store).
    pub fn take_requests_with_capacity(&self) -> Option<(Vec<String>, Capacity)> {
        match &self.backend {
            Backend::Embedded { .. } => None,
            Backend::Dynamo { log, .. } => Some(log.take_with_capacity()),
        }
    }

    /// Moves the store's clock forward.
    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    /// The store's current time.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The handler the reconstruction in the report had behind `--naive 1`: read the task,
    /// check `queued`, then write `claimed` without a condition. A short gap stands for the
    /// network hop or ORM between the two statements. Used only to prove that the race test
    /// catches double claims.
    ///
    /// # Errors
    /// Backend errors.
    pub async fn naive_claim(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        task: TaskId,
    ) -> anyhow::Result<Option<ClaimId>> {
        let claim = ClaimId::generate();
        let lease_until = self.now().plus(self.policy.lease).as_millis();
        match &self.backend {
            Backend::Embedded { path, .. } => {
                let path = path.clone();
                let owner = owner.as_str().to_owned();
                let claimed = tokio::task::spawn_blocking(move || -> anyhow::Result<bool> {
                    let conn = raw_sqlite(&path)?;
                    let status: Option<String> = conn
                        .query_row(
                            "SELECT status FROM tasks WHERE task_id = ?1 AND link_id = ?2 AND owner = ?3",
                            [task.to_string(), link.to_string(), owner],
                            |r| r.get(0),
                        )
                        .ok();
                    if status.as_deref() != Some("queued") {
                        return Ok(false);
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    conn.execute(
                        "UPDATE tasks SET status = 'claimed', claim_id = ?1, lease_until = ?2 WHERE task_id = ?3",
                        rusqlite::params![claim.to_string(), lease_until, task.to_string()],
                    )?;
                    Ok(true)
                })
                .await??;
                Ok(claimed.then_some(claim))
            }
            Backend::Dynamo { store, .. } => {
                let key = std::collections::HashMap::from([
                    ("pk".to_owned(), AttributeValue::S(format!("LINK#{link}"))),
                    ("sk".to_owned(), AttributeValue::S(format!("TASK#{task}"))),
                ]);
                let item = store
                    .client()
                    .get_item()
                    .table_name(store.table())
                    .set_key(Some(key.clone()))
                    .consistent_read(true)
                    .send()
                    .await?
                    .item;
                let queued =
                    item.as_ref().and_then(|i| i.get("status")).and_then(|v| v.as_s().ok()).map(String::as_str)
                        == Some("queued");
                if !queued {
                    return Ok(None);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                store
                    .client()
                    .update_item()
                    .table_name(store.table())
                    .set_key(Some(key))
                    .update_expression("SET #s = :c, claim_id = :id, lease_until = :l")
                    .expression_attribute_names("#s", "status")
                    .expression_attribute_values(":c", AttributeValue::S("claimed".into()))
                    .expression_attribute_values(":id", AttributeValue::S(claim.to_string()))
                    .expression_attribute_values(":l", AttributeValue::N(lease_until.to_string()))
                    .send()
                    .await?;
                Ok(Some(claim))
            }
        }
    }
}

/// A DynamoDB client for `AWS_ENDPOINT_URL` that logs every request, or `None` when the
/// variable is unset (skip), with a loud message. Under `CI=true` a missing endpoint panics.
///
/// # Panics
/// Under `CI=true` without `AWS_ENDPOINT_URL`.
pub async fn dynamo_client_with_log() -> Option<(aws_sdk_dynamodb::Client, RequestLog)> {
    if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "AWS_ENDPOINT_URL is not set under CI=true: the DynamoDB half of the suite must run (use infra/test.sh)"
        );
        eprintln!(
            "\n*** SKIPPING the DynamoDB half of this test: AWS_ENDPOINT_URL is not set. ***\n\
             *** Run ./infra/test.sh (starts moto) or set AWS_ENDPOINT_URL.            ***\n"
        );
        return None;
    }
    let config = lambda::aws_defaults().load().await;
    let log = RequestLog::default();
    let conf = aws_sdk_dynamodb::config::Builder::from(&config).interceptor(log.clone()).build();
    Some((aws_sdk_dynamodb::Client::from_conf(conf), log))
}

/// The path of a workspace binary built into this target directory (`relay`, a Lambda
/// function, …), for tests that must run the real executable as its own process.
///
/// Cargo only exposes `CARGO_BIN_EXE_*` for a package's own binaries, so this finds
/// `target/<profile>/<name>` next to the test executable. `infra/test.sh` builds every binary
/// (`cargo build --workspace --bins`) before the tests; run that after changing a binary's
/// code, or the check below stops the test with the command to run.
///
/// # Panics
/// When the binary is missing, or older than a source file of `crates` (paths relative to the
/// workspace root; test-only `tests.rs` modules aside) — a stale binary would test old code.
pub fn built_binary(name: &str, crates: &[&str]) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test binary>, or FOUNDRY_BIN_DIR (e.g. target/release for the
    // cold-start benchmark).
    let chosen = std::env::var_os("FOUNDRY_BIN_DIR").map(PathBuf::from);
    let dir =
        chosen.clone().unwrap_or_else(|| exe.parent().and_then(|d| d.parent()).map(PathBuf::from).unwrap_or_default());
    let bin = dir.join(name);
    if chosen.is_some() {
        // A folder chosen on purpose (the release binaries a benchmark measures): used as is.
        assert!(bin.exists(), "{} is not built", bin.display());
        return bin;
    }
    let build = "cargo build --workspace --bins --locked (infra/test.sh does this) and run the test again";
    let built = std::fs::metadata(&bin).and_then(|m| m.modified());
    let Ok(built) = built else { panic!("{} is not built: {build}", bin.display()) };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut stack: Vec<PathBuf> = crates.iter().map(|c| root.join(c)).collect();
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&p) else { continue };
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).into_iter().flatten().flatten().map(|e| e.path()));
        } else if p.file_name().is_some_and(|n| n == "tests.rs") {
            // A `#[cfg(test)] mod tests;` file is not part of the binary (cargo rightly does not
            // rebuild it for one), so it cannot make the binary stale.
        } else if meta.modified().is_ok_and(|m| m > built) {
            panic!("{} is older than {}: {build}", bin.display(), p.display());
        }
    }
    bin
}

/// Polls `f` until it gives a value or `within` passes (then panics naming `what`): waiting
/// for a condition with a deadline, never for a guessed delay.
///
/// # Panics
/// When the deadline passes.
pub async fn wait_until<T, F, Fut>(what: &str, within: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Artifact storage in a fresh temporary folder (local-style signed download links).
pub fn temp_blobs(clock: domain::clock::SharedClock) -> Arc<dyn tools::blobs::BlobStore> {
    let dir = std::env::temp_dir().join(format!("fc-blobs-{}", uuid::Uuid::new_v4()));
    Arc::new(tools::blobs::DirBlobStore::new(dir, "http://127.0.0.1:0", b"test blob-link secret, 32 bytes.", clock))
}

/// One DynamoDB Streams call on the emulator (moto serves the streams API on its endpoint).
///
/// # Panics
/// When the emulator cannot be reached.
pub async fn streams_call(target: &str, body: serde_json::Value) -> serde_json::Value {
    #[allow(clippy::expect_used)]
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL");
    let res = crate::http()
        .post(endpoint)
        .header("x-amz-target", format!("DynamoDBStreams_20120810.{target}"))
        .header("content-type", "application/x-amz-json-1.0")
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0",
        )
        .body(body.to_string())
        .send()
        .await;
    #[allow(clippy::expect_used)]
    let res = res.expect("DynamoDB Streams request");
    res.json().await.unwrap_or_default()
}

/// Every record of the stream so far, from the start of each shard (every page).
pub async fn stream_records(stream_arn: &str) -> Vec<serde_json::Value> {
    let desc = streams_call("DescribeStream", serde_json::json!({"StreamArn": stream_arn})).await;
    let mut records = Vec::new();
    for shard in desc["StreamDescription"]["Shards"].as_array().into_iter().flatten() {
        let it = streams_call(
            "GetShardIterator",
            serde_json::json!({"StreamArn": stream_arn, "ShardId": shard["ShardId"], "ShardIteratorType": "TRIM_HORIZON"}),
        )
        .await;
        // GetRecords answers at most 1,000 records: read on until a call brings none.
        let mut iterator = it["ShardIterator"].clone();
        loop {
            let out = streams_call("GetRecords", serde_json::json!({"ShardIterator": iterator})).await;
            let page = out["Records"].as_array().cloned().unwrap_or_default();
            if page.is_empty() || out["NextShardIterator"].is_null() {
                records.extend(page);
                break;
            }
            records.extend(page);
            iterator = out["NextShardIterator"].clone();
        }
    }
    records
}

/// Whether Lambda's event filtering lets `record` through any of `filters` (the patterns of an
/// event source's `FilterCriteria`; an empty list lets everything through). The emulator feeds
/// stream records to functions unfiltered, so tests pass them through this first. The subset
/// of the pattern syntax the template uses: nested objects, lists of exact strings, numbers or
/// Booleans,
/// `{"prefix": …}` and `{"exists": true|false}` (AWS Lambda Developer Guide, *Lambda event
/// filtering*: a record matches when every field of the pattern matches; a list matches when
/// any of its entries does).
pub fn passes_filters(filters: &[serde_json::Value], record: &serde_json::Value) -> bool {
    fn matches(pattern: &serde_json::Value, value: Option<&serde_json::Value>) -> bool {
        use serde_json::Value;
        match pattern {
            Value::Object(fields) => fields.iter().all(|(k, p)| {
                let inner = value.and_then(|v| v.get(k));
                matches(p, inner)
            }),
            Value::Array(options) => options.iter().any(|o| match (o, value) {
                (Value::Object(rule), v) if rule.contains_key("exists") => {
                    rule["exists"].as_bool() == Some(v.is_some())
                }
                (Value::Object(rule), Some(Value::String(s))) if rule.contains_key("prefix") => {
                    rule["prefix"].as_str().is_some_and(|p| s.starts_with(p))
                }
                (Value::String(want), Some(Value::String(got))) => want == got,
                (Value::Number(want), Some(Value::Number(got))) => want == got,
                (Value::Bool(want), Some(Value::Bool(got))) => want == got,
                _ => false,
            }),
            _ => false,
        }
    }
    filters.is_empty() || filters.iter().any(|f| matches(f, Some(record)))
}

/// A ready session named "G" (slug `g`, version 1) with the id `gs`: what a test shares when
/// only the id matters.
pub fn session_meta(gs: &domain::ids::GraphSessionId) -> domain::runs::SessionMeta {
    domain::runs::SessionMeta {
        graph_session_id: gs.clone(),
        name: "G".into(),
        description: String::new(),
        slug: "g".into(),
        version: "1".into(),
        status: "ready".into(),
    }
}

/// The device tests share sessions as when they play the relay's sync through the store.
pub const TEST_DEVICE: uuid::Uuid = uuid::Uuid::from_u128(0x00000000_0000_4000_8000_0000000000d1);

/// An owner token for `subject`, another owner of the same local deployment as `running`
/// (minted with its signing secret): what a second account's panel holds.
///
/// # Panics
/// When the data folder has no signing secret.
pub fn other_owner_token(running: &local::Running, subject: &str) -> String {
    #[allow(clippy::expect_used)]
    let secret = std::fs::read(running.data_dir.join("local-token-secret")).expect("the local signing secret");
    #[allow(clippy::expect_used)]
    auth::Hs256Signer::new(&secret, &running.base_url, local::LOCAL_AUDIENCE)
        .mint(
            auth::Grant { subject, client: local::LOCAL_CLIENT, scopes: &[tools::SCOPE_OWNER] },
            domain::clock::SystemClock.now(),
            Duration::from_secs(600),
        )
        .expect("mint")
}

/// Every string inside a YAML value, looking through CloudFormation tags (`!Ref X` → "X").
pub fn yaml_strings(v: &serde_norway::Value, out: &mut Vec<String>) {
    use serde_norway::Value;
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Sequence(seq) => seq.iter().for_each(|x| yaml_strings(x, out)),
        Value::Mapping(m) => m.values().for_each(|x| yaml_strings(x, out)),
        Value::Tagged(t) => yaml_strings(&t.value, out),
        _ => {}
    }
}

/// A WebSocket upgrade by hand (`GET path` on `addr` with `Host: host` and, when given, the
/// bearer `token`): the status of the answer and the stream, which is the open socket after a
/// 101. Tests write frames on it as an attacker would.
///
/// # Panics
/// When `addr` cannot be reached.
pub async fn ws_upgrade(addr: &str, path: &str, host: &str, token: Option<&str>) -> (u16, tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    #[allow(clippy::expect_used)]
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{auth}\r\n"
    );
    #[allow(clippy::expect_used)]
    s.write_all(req.as_bytes()).await.expect("write the upgrade");
    let (status, _) = read_http_head(&mut s).await;
    (status, s)
}

/// Reads an HTTP response head (up to the blank line) from `s`: its status (0 when the
/// connection closed first) and its text.
pub async fn read_http_head(s: &mut tokio::net::TcpStream) -> (u16, String) {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text)
}

/// Whether this run rewrites the pinned outputs (the golden tool list, `docs/openapi.json`, the
/// cost inputs) instead of comparing them: `FOUNDRY_UPDATE=1`, the one switch for all of them.
///
/// # Panics
/// When `FOUNDRY_UPDATE` is set under `CI=true` (CI compares, it never rewrites), or set to
/// anything but `1` (so `FOUNDRY_UPDATE=0` cannot rewrite a file by accident).
pub fn update_requested() -> bool {
    match std::env::var("FOUNDRY_UPDATE") {
        Err(_) => false,
        Ok(_) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("FOUNDRY_UPDATE is refused under CI=true: CI compares the pinned files, it never rewrites them")
        }
        Ok(v) if v == "1" => true,
        Ok(v) => panic!("FOUNDRY_UPDATE={v:?}: set it to 1 to rewrite the pinned files, or leave it unset"),
    }
}

/// Compares `now` with the pinned file at `path` (relative to the repository), or rewrites it
/// under [`update_requested`].
///
/// # Panics
/// When they differ (naming the file and the switch), or the file cannot be written.
pub fn pinned(path: &str, now: &str) {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    if update_requested() {
        #[allow(clippy::expect_used)]
        std::fs::write(&file, now).expect("rewrite the pinned file");
        return;
    }
    let was = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(was == now, "{path} is not what the code makes now: review the change, then run with FOUNDRY_UPDATE=1");
}

/// The emulator's capacity report (`GET /_foundry/capacity`, `?reset=1` clearing it after the
/// answer: `infra/moto_capacity.py`), or `None` on an endpoint without the meter.
pub async fn capacity_report(reset: bool) -> Option<serde_json::Value> {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").ok()?;
    let url = format!("{endpoint}/_foundry/capacity{}", if reset { "?reset=1" } else { "" });
    let answer = http().get(url).send().await.ok()?;
    answer.status().is_success().then_some(())?;
    answer.json().await.ok()
}

/// A run of `session` queued by `agent` for `owner` under idempotency `key`, in its project
/// (`project_id: None`), with `arguments`.
///
/// # Panics
/// When `key` is not a valid idempotency key.
pub fn queue_request(
    owner: &domain::ids::OwnerId,
    agent: &domain::ids::AgentId,
    session: &domain::ids::GraphSessionId,
    key: &str,
    arguments: serde_json::Value,
) -> domain::runs::QueueRun {
    domain::runs::QueueRun {
        owner: owner.clone(),
        agent: agent.clone(),
        project_id: None,
        graph_session_id: session.clone(),
        arguments,
        #[allow(clippy::expect_used)]
        idempotency_key: domain::ids::IdempotencyKey::parse(key).expect("a valid idempotency key"),
    }
}

/// Where the load scenarios of issue 59 (`./infra/bench-scale.sh`) write what they measured,
/// relative to the repository; docs/scale.md quotes it (`scale::docs_quote_…`).
pub const SCALE_FIGURES: &str = "docs/scale-bench.json";

/// Writes one load scenario's `figures` under `name` in [`SCALE_FIGURES`], keeping the other
/// scenarios' (a benchmark's output, not a pinned file: a run measures anew).
///
/// # Panics
/// When the file cannot be written.
pub fn record_scale_figures(name: &str, figures: &serde_json::Value) {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(SCALE_FIGURES);
    let mut all: serde_json::Value = std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    all[name] = figures.clone();
    #[allow(clippy::expect_used)]
    let text = serde_json::to_string_pretty(&all).expect("JSON") + "\n";
    #[allow(clippy::expect_used)]
    std::fs::write(&file, text).expect("write the scale figures");
}

/// The Markdown tables of `text`: runs of lines starting with `|`, in order.
pub fn markdown_tables(text: &str) -> Vec<Vec<&str>> {
    let mut out: Vec<Vec<&str>> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.starts_with('|') {
            current.push(line);
        } else if !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Each table `printed` has is in `doc` whole: the doc's table with the same header has exactly
/// the printed rows, in order — a stale row left beside a new one, or a row missing, fails.
///
/// # Errors
/// Naming the first table that is missing or differs, with both versions.
pub fn tables_match(printed: &str, doc: &str) -> Result<(), String> {
    let in_doc = markdown_tables(doc);
    for t in markdown_tables(printed) {
        let Some(d) = in_doc.iter().find(|d| d.first() == t.first()) else {
            return Err(format!("no table headed `{}`", t[0]));
        };
        if *d != t {
            return Err(format!(
                "the table headed `{}` is\n{}\nbut the command prints\n{}",
                t[0],
                d.join("\n"),
                t.join("\n")
            ));
        }
    }
    Ok(())
}

/// A connection of its own to the embedded store's file, outside the store's writer lane: what the
/// broken variants use, so their read and their write are two statements another caller can
/// come between.
///
/// # Errors
/// SQLite's.
pub fn raw_sqlite(path: &std::path::Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    Ok(conn)
}

/// The SHA-256 of the file at `path`, in lower-case hex.
///
/// # Panics
/// When the file cannot be read.
#[allow(clippy::unwrap_used)]
pub fn sha256_of(path: &Path) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(std::fs::read(path).unwrap()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `doc` says `sentence`, line breaks in the doc counting as spaces (Markdown prose is
/// wrapped anywhere).
pub fn says(doc: &str, sentence: &str) -> bool {
    doc.split_whitespace().collect::<Vec<_>>().join(" ").contains(sentence)
}

/// The local server on a fresh temporary folder, for a test: [`LocalServer::start`] makes the
/// folder and starts the server with its data in `<folder>/server`; the folder goes when the
/// fixture does ([`LocalServer::stop`], or drop). It dereferences to the [`local::Running`]
/// server, so `server.base_url`, `server.store`, … read as before.
pub struct LocalServer {
    running: Option<local::Running>,
    /// The test's own folder (the server's data is in `server/` under it; relays and files of
    /// the test go beside it).
    pub dir: PathBuf,
}

impl LocalServer {
    /// Starts the server with `config` applied to the defaults (data in `<dir>/server`, any
    /// free port); `name` prefixes the folder's name.
    ///
    /// # Panics
    /// When the server cannot start.
    pub async fn start(name: &str, config: impl FnOnce(local::LocalConfig) -> local::LocalConfig) -> Self {
        let dir = std::env::temp_dir().join(format!("{name}-{}", uuid::Uuid::new_v4()));
        #[allow(clippy::expect_used)]
        let running =
            local::start(config(local::LocalConfig::at(dir.join("server")))).await.expect("start the local server");
        Self { running: Some(running), dir }
    }

    /// The defaults ([`Self::start`] with no change).
    pub async fn default(name: &str) -> Self {
        Self::start(name, |c| c).await
    }

    /// Stops the server and starts it again on the same data folder, with `config` applied to
    /// the defaults (a restart keeps the data and the signing secret).
    ///
    /// # Panics
    /// When the server cannot start again.
    pub async fn restart(&mut self, config: impl FnOnce(local::LocalConfig) -> local::LocalConfig) {
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
        #[allow(clippy::expect_used)]
        let running = local::start(config(local::LocalConfig::at(self.dir.join("server"))))
            .await
            .expect("restart the local server");
        self.running = Some(running);
    }

    /// Stops the server (in-flight requests finish) and removes the folder.
    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
    }
}

impl std::ops::Deref for LocalServer {
    type Target = local::Running;
    fn deref(&self) -> &local::Running {
        #[allow(clippy::expect_used)]
        self.running.as_ref().expect("the server is running until the fixture stops")
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An HTTP client for a test (`reqwest::Client::new()`, after [`http_builder`]'s set-up).
///
/// # Panics
/// When the client cannot be built.
#[allow(clippy::expect_used)]
pub fn http() -> reqwest::Client {
    http_builder().build().expect("an HTTP client")
}

/// `reqwest::Client::builder()` once rustls' *ring* provider is the process default: the
/// workspace's one crypto library (tests/tests/layout.rs), and reqwest's `rustls-no-provider`
/// feature builds no client without one. Installing it twice is a no-op.
pub fn http_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// `n` with thousands separators, as the docs write counts.
pub fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
