//! # sim — the seed reports' figures, reproduced by the real code under a virtual clock
//!
//! Everything here is the product's own code except time and the graphs:
//!
//! - the **store** is the real embedded store (`store-sqlite`, in memory), on a [`VirtualClock`]
//!   that reads tokio's paused clock, so leases, expiry and hints run on virtual time;
//! - the **server** is the real relay API handler (`http_api::relay_api`) and the real tool
//!   handlers (`tools`), called in process;
//! - the **desktop** is the real relay loop (`relay::run::agent::Relay`) with its real HTTP client
//!   logic over an in-process [`Transport`] (which can lose requests), backoff jitter from the
//!   seed, and [`VirtualGraphs`] instead of processes: a run takes the virtual time in its
//!   arguments;
//! - the **agents** are scripted callers of the tools (polling strategies, cancels, claims).
//!
//! One tokio runtime on one thread with paused time: the same seed gives the same output, byte
//! for byte ([`report`] is checked by a test). Randomness (graph durations, phases, cancel
//! moments) comes from [`Rng`], seeded.
//!
//! | module | what |
//! |---|---|
//! | this one | the virtual clock, the transport, the graphs and [`report`], shared by the scenarios |
//! | `seed000` | seed 000 (Graph runs on the desktop): pickup wait, polling strategies, cancel, the desktop offline, a lost completion |
//! | `seed004` | seed 004 (tasks for a linked chat): lease takeover, the claim race, polling a big inbox, bytes per inbox |

mod seed000;
mod seed004;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use domain::clock::{Clock, SharedClock, Timestamp};
use domain::ids::{AgentId, CommandId, GraphSessionId, OwnerId, ProjectId};
use domain::limits::Policy;
use domain::runs::{Run, SessionMeta};
use domain::store::{ManageDevices, ManageProjects, ReadRuns};
use http_api::relay_api::RelayApi;
use relay::config::{Config, Session};
use relay::run::agent::Relay;
use relay::run::executor::{Execute, Outcome};
use relay::server::client::{Client, ClientError, Transport};
use store_sqlite::SqliteStore;
use tools::{ToolCall, ToolDeps, ToolName, ToolReply};

/// The whole report for `seed`, `n` runs per row: every table, as text.
///
/// # Errors
/// When the simulated world cannot be set up (a bug, not an outcome).
pub fn report(seed: u64, n: usize) -> anyhow::Result<String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build()?;
    rt.block_on(async move {
        let mut out = String::new();
        out += &format!("foundry-connect simulation — seed {seed}, {n} runs per row, virtual time\n");
        out += &seed000::tables(seed, n).await?;
        out += &seed004::tables(seed, n).await?;
        Ok(out)
    })
}

/// xorshift64* — small, seedable, the same everywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value; zero is mapped away).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform duration in [lo, hi).
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        lo + (hi - lo).mul_f64(self.unit())
    }

    /// Log-normal with this median and σ of the log, at least `min` (the reports' graph
    /// durations: median 60 s, minimum 5 s).
    pub fn lognormal(&mut self, median: Duration, sigma: f64, min: Duration) -> Duration {
        // Box–Muller.
        let (u1, u2) = (self.unit().max(f64::MIN_POSITIVE), self.unit());
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        median.mul_f64((sigma * z).exp()).max(min)
    }
}

/// The domain's clock over tokio's (paused) clock: virtual time for the store and the tools.
#[derive(Debug)]
pub struct VirtualClock {
    base: Timestamp,
    start: tokio::time::Instant,
}

impl VirtualClock {
    /// A clock at 2026-11-30T00:00:00Z now.
    pub fn new() -> Self {
        Self { base: Timestamp::from_millis(1_795_996_800_000), start: tokio::time::Instant::now() }
    }
}

impl Default for VirtualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Timestamp {
        self.base.plus(self.start.elapsed())
    }
}

/// Network faults between the simulated desktop and the server.
#[derive(Debug, Default)]
pub struct Faults {
    /// Every request fails (the desktop is offline).
    pub offline: AtomicBool,
    /// The next completion POST is lost before it reaches the server.
    pub lose_next_complete: AtomicBool,
}

/// The relay client's requests, answered in process by the real relay API handler.
pub struct InProcess {
    api: Arc<RelayApi<SqliteStore>>,
    token: String,
    faults: Arc<Faults>,
    /// The relay's slots, which its syncs report as the real client's do.
    slots: std::sync::atomic::AtomicU32,
}

impl Transport for InProcess {
    async fn request(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, String), ClientError> {
        if self.faults.offline.load(Ordering::SeqCst) {
            return Err(ClientError::Retryable("offline".into()));
        }
        if path.ends_with("/complete") && self.faults.lose_next_complete.swap(false, Ordering::SeqCst) {
            return Err(ClientError::Retryable("the completion POST was lost".into()));
        }
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", domain::relay::PREFIX))
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json");
        if path == "/sync" {
            let report = domain::fleet::RelayReport {
                version: "0.0.0-sim".into(),
                platform: "linux-x86_64".into(),
                host: "sim".into(),
                doorbell: false,
                update: None,
                slots: Some(self.slots.load(Ordering::SeqCst)),
                unavailable: None,
            };
            req = req.header(domain::fleet::RELAY_HEADER, report.header_value());
        }
        let req = req.body(Bytes::from(body.unwrap_or_default())).map_err(|e| ClientError::Retryable(e.to_string()))?;
        let res = self.api.handle(req).await;
        Ok((res.status().as_u16(), String::from_utf8_lossy(res.body()).into_owned()))
    }

    fn set_slots(&self, slots: usize) {
        self.slots.store(u32::try_from(slots).unwrap_or(u32::MAX), Ordering::SeqCst);
    }
}

/// Graphs that take virtual time: `duration_ms` from the run's arguments (default 1 s); a
/// cancel stops them at once. With `progress_every_ms` a graph reports how far along it is
/// that often (its fraction of the duration), as a real Graph's stderr progress lines would.
pub struct VirtualGraphs;

impl Execute for VirtualGraphs {
    async fn execute(
        &self,
        _launch: &relay::run::executor::Launch,
        arguments: &serde_json::Value,
        cancel: impl std::future::Future<Output = ()> + Send,
        _grace: Duration,
        live: Arc<relay::run::live::Live>,
    ) -> Outcome {
        let d = Duration::from_millis(arguments["duration_ms"].as_u64().unwrap_or(1000));
        let every = arguments["progress_every_ms"].as_u64().map(Duration::from_millis).filter(|e| !e.is_zero());
        let run = async {
            let start = tokio::time::Instant::now();
            if let Some(every) = every {
                while start.elapsed() + every < d {
                    tokio::time::sleep(every).await;
                    let f = start.elapsed().as_secs_f64() / d.as_secs_f64();
                    live.progress(&format!("{:.0}% done", f * 100.0), Some(f));
                }
            }
            tokio::time::sleep(d.saturating_sub(start.elapsed())).await;
        };
        tokio::select! {
            () = run => Outcome::completed("done"),
            () = cancel => Outcome::cancelled(),
        }
    }
}

/// The graph session every simulated run uses.
pub fn session_id() -> GraphSessionId {
    GraphSessionId::parse("graph_session_id", &format!("gs_{}", "5".repeat(32))).unwrap_or_else(|_| unreachable!())
}

/// One simulated deployment: store, server, one owner with an enabled project, a device, an
/// agent; the relay started and stopped on demand.
pub struct World {
    /// Virtual time.
    pub clock: SharedClock,
    /// The real embedded store.
    pub store: Arc<SqliteStore>,
    /// What the tool handlers get.
    pub deps: ToolDeps<SqliteStore>,
    /// The owner.
    pub owner: OwnerId,
    /// The calling agent.
    pub agent: AgentId,
    /// The project runs are queued in.
    pub project: ProjectId,
    /// The time rules (the server's poll interval is 20 s).
    pub policy: Policy,
    /// Network faults of the desktop.
    pub faults: Arc<Faults>,
    api: Arc<RelayApi<SqliteStore>>,
    device_token: String,
    state_dir: PathBuf,
    seed: u64,
    relay: Option<(tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
    /// Doorbell mode ([`World::with_doorbell`]).
    doorbell: bool,
    bells: Option<tokio::task::JoinHandle<()>>,
}

/// The doorbell's latency in the simulation: stream → `ring_doorbell` → `@connections` →
/// socket, log-normal with median 250 ms and σ 0.6 (p95 ≈ 670 ms), at least 50 ms. A stated
/// assumption, not a measurement of AWS: the local benchmark measures the rest of the path.
pub const RING_MEDIAN: Duration = Duration::from_millis(250);
/// σ of the ring latency's logarithm.
pub const RING_SIGMA: f64 = 0.6;

impl World {
    /// A fresh world.
    ///
    /// # Errors
    /// Store set-up failures.
    pub async fn new(seed: u64, policy: Policy) -> anyhow::Result<Self> {
        let clock: SharedClock = Arc::new(VirtualClock::new());
        let store = Arc::new(SqliteStore::in_memory(clock.clone(), policy)?);
        let owner = OwnerId::new("sim-owner")?;
        let project = store.create_project(&owner, "Simulated").await?;
        store.set_project_enabled(&owner, project.project_id, true).await?;
        let (device_token, hash) = domain::devices::new_token()?;
        store.create_device(&owner, "simulated desktop", &hash).await?;
        let api = Arc::new(RelayApi {
            store: Arc::clone(&store),
            clock: clock.clone(),
            policy,
            public_url: String::new(),
            doorbell_url: None,
            doorbell_poll_interval: domain::doorbell::DOORBELL_POLL_INTERVAL,
            budget: Default::default(),
        });
        let deps = ToolDeps { store: Arc::clone(&store), clock: clock.clone(), policy, blobs: None, panel_url: None };
        let shm = PathBuf::from("/dev/shm");
        let tmp = if shm.is_dir() { shm } else { std::env::temp_dir() };
        Ok(Self {
            clock,
            store,
            deps,
            agent: AgentId::new("sim-agent", owner.as_str())?,
            owner,
            project: project.project_id,
            policy,
            faults: Arc::new(Faults::default()),
            api,
            device_token,
            state_dir: tmp.join(format!("foundry-sim-{}", uuid::Uuid::new_v4())),
            seed,
            relay: None,
            doorbell: false,
            bells: None,
        })
    }

    /// Doorbell mode: every ring the store's changes make reaches the relay after a latency
    /// drawn from [`RING_MEDIAN`] / [`RING_SIGMA`] (the poll stays the safety net).
    #[must_use]
    pub fn with_doorbell(mut self) -> Self {
        self.doorbell = true;
        self
    }

    /// Starts the relay (first pass at once), with this control poll.
    ///
    /// # Errors
    /// When the relay's state folder cannot be set up.
    pub fn start_relay(&mut self, control_poll: Duration) -> anyhow::Result<()> {
        self.start_relay_with(control_poll, 1)
    }

    /// Starts the relay with `slots` parallel slots (`max_parallel`).
    ///
    /// # Errors
    /// When the relay's state folder cannot be set up.
    pub fn start_relay_with(&mut self, control_poll: Duration, slots: usize) -> anyhow::Result<()> {
        let meta = SessionMeta {
            graph_session_id: session_id(),
            name: "Simulated graph".into(),
            description: String::new(),
            slug: "simulated".into(),
            version: "1".into(),
            status: "ready".into(),
        };
        let config = Config {
            server_url: "http://in-process".into(),
            device_token: self.device_token.clone(),
            device_token_file: None,
            warnings: Vec::new(),
            state_dir: self.state_dir.clone(),
            control_poll,
            poll: self.policy.poll_interval,
            cancel_grace: Duration::from_secs(1),
            doorbell: false,
            doorbell_timing: relay::server::doorbell::Timing::default(),
            auto_update: false,
            pin: None,
            max_parallel: slots,
            shell_environment: None,
            sessions: vec![Session { meta, projects: vec![self.project], launch: vec!["virtual".to_owned()].into() }],
        };
        let transport = InProcess {
            api: Arc::clone(&self.api),
            token: self.device_token.clone(),
            faults: Arc::clone(&self.faults),
            slots: std::sync::atomic::AtomicU32::new(1),
        };
        let relay = Relay::with_parts(config, Client::over(transport), VirtualGraphs)?.with_jitter_seed(self.seed);
        if self.doorbell {
            let (bell, mut rings) = (relay.doorbell(), self.store.rings());
            let mut rng = Rng::new(self.seed ^ 0xd00b);
            self.bells = Some(tokio::spawn(async move {
                while let Ok(r) = rings.recv().await {
                    let latency = rng.lognormal(RING_MEDIAN, RING_SIGMA, Duration::from_millis(50));
                    let bell = Arc::clone(&bell);
                    tokio::spawn(async move {
                        tokio::time::sleep(latency).await;
                        match r.ring {
                            domain::doorbell::Ring::Sync => bell.sync.notify_one(),
                            domain::doorbell::Ring::Control { command_id } => bell.ring_control(command_id),
                            domain::doorbell::Ring::Task { task_id, .. } => bell.ring_task(task_id),
                        }
                    });
                }
            }));
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = relay
                .run(async move {
                    let _ = rx.await;
                })
                .await;
        });
        self.relay = Some((tx, task));
        Ok(())
    }

    /// Stops the relay (it finishes nothing: a run in progress is cut short).
    pub async fn stop_relay(&mut self) {
        if let Some(b) = self.bells.take() {
            b.abort();
        }
        if let Some((tx, task)) = self.relay.take() {
            let _ = tx.send(());
            let _ = task.await;
        }
    }

    /// Calls a tool as the agent; the structured result, or `{"error": message}`.
    ///
    /// # Errors
    /// Infrastructure faults (never expected here).
    pub async fn tool(&self, tool: ToolName, arguments: serde_json::Value) -> anyhow::Result<serde_json::Value> {
        self.tool_as(&self.agent, tool, arguments).await
    }

    /// Calls a tool as `agent`.
    ///
    /// # Errors
    /// Infrastructure faults.
    pub async fn tool_as(
        &self,
        agent: &AgentId,
        tool: ToolName,
        arguments: serde_json::Value,
    ) -> anyhow::Result<serde_json::Value> {
        let call = ToolCall { tool, owner: self.owner.clone(), agent: agent.clone(), arguments, request_id: None };
        Ok(match tools::handle(&self.deps, &call).await.map_err(|e| anyhow::anyhow!("{e}"))? {
            ToolReply::Ok { structured } => structured,
            ToolReply::Rejected { message } | ToolReply::Invalid { message } => serde_json::json!({ "error": message }),
        })
    }

    /// The run as the store has it.
    ///
    /// # Errors
    /// Store failures, or an unknown run.
    pub async fn run(&self, id: CommandId) -> anyhow::Result<Run> {
        self.store.get_run(&self.agent, id).await?.ok_or_else(|| anyhow::anyhow!("no run {id}"))
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

/// Summary statistics of a sample, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// 95th percentile (nearest rank).
    pub p95: f64,
    /// Maximum.
    pub max: f64,
}

impl Stats {
    /// Of `xs` (not empty).
    pub fn of(xs: &[f64]) -> Self {
        let mut s = xs.to_vec();
        s.sort_by(f64::total_cmp);
        let rank = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Self { mean: s.iter().sum::<f64>() / s.len() as f64, median: rank(0.5), p95: rank(0.95), max: s[s.len() - 1] }
    }

    /// `mean 9.8 s, median 9.8 s, p95 18.9 s, max 20.0 s`.
    pub fn line(&self) -> String {
        format!("mean {:.1} s, median {:.1} s, p95 {:.1} s, max {:.1} s", self.mean, self.median, self.p95, self.max)
    }
}

/// Waits (virtual time, `step` at a time) until `f` gives a value.
///
/// # Errors
/// When `f` fails, or nothing came within `limit`.
pub async fn wait_for<T, F, Fut>(step: Duration, limit: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "nothing after {limit:?} (virtual)");
        tokio::time::sleep(step).await;
    }
}

/// Seconds between two timestamps.
pub fn secs(from: Timestamp, to: Timestamp) -> f64 {
    (to.as_millis() - from.as_millis()) as f64 / 1000.0
}

/// Shared mutable note-taking for scenarios (e.g. what a background agent saw).
pub type Notes<T> = Arc<Mutex<Vec<T>>>;
