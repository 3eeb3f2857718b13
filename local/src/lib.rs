//! # local — foundry-connect in one process
//!
//! Every function of the stack on the embedded store (a SQLite file), bound to 127.0.0.1:
//! the MCP endpoint at `/mcp` with its protected-resource metadata, dispatching tool calls
//! in-process through the same [`mcp_endpoint::Dispatch`] interface the cloud `mcp` function
//! uses with Lambda invokes. No AWS account, no emulator.
//!
//! On first start it creates a demo owner, project (enabled) and chat link with one queued
//! task; every start prints the MCP URL, a bearer token with both scopes and the ids a user
//! needs. Tokens are HS256, signed with a secret generated once and kept in the data folder,
//! so a restart keeps both the data and the tokens already handed out.
//!
//! | module | what |
//! |---|---|
//! | [`config`] | typed configuration from the environment, parsed once |
//! | [`device`] | the relay device of this machine, whose token lasts across restarts |
//! | [`doorbell`] | the relays' WebSocket doorbell, with its bounds per device and in all |
//! | [`listener`] | HTTP/1.1 with a header-read timeout and a connection cap |
//! | this file | start-up ([`start`]), the demo data, the router |

pub mod config;
pub mod device;
pub mod doorbell;
pub mod listener;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use auth::{Audience, Authenticator, Grant, Hs256Signer, Keys, ScopeSpelling};
use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::response::IntoResponse;
use bytes::Bytes;
use domain::clock::SharedClock;
use domain::ids::{ChatLinkId, IdempotencyKey, OwnerId, ProjectId, TaskId};
use domain::store::{AssignTasks, AuthenticateDevices, ManageLinks, ManageProjects};
use domain::tasks::{AssignOutcome, AssignTask};
use events::webhook_url::UrlPolicy;
use events::{Notifier, SystemResolver};
use http_api::owner_api::OwnerApi;
use http_api::relay_api::RelayApi;
use http_body_util::{BodyExt, Limited};
use mcp_endpoint::{EndpointConfig, InProcess, McpEndpoint, resource_metadata_response};
use oauth::local::{AUTHORIZE_PATH, LocalAuthServer, TOKEN_PATH};
use oauth::{AuthServerConfig, ClientSource, RedirectPolicy, Registrar};
use panel::{PanelConfig, SignIn};
use store_sqlite::SqliteStore;
use tokio::sync::oneshot;
use tools::blobs::DirBlobStore;
use tools::{SCOPE_OWNER, SCOPE_READ, SCOPE_RUN, ToolDeps};

pub use config::LocalConfig;
pub use device::{DEVICE_TOKEN_FILE, LOCAL_DEVICE};

/// The demo owner's subject.
pub const DEMO_OWNER: &str = "local-owner";
/// The OAuth client id of tokens minted for MCP clients.
pub const LOCAL_CLIENT: &str = "local-mcp-client";
/// The audience of local tokens.
pub const LOCAL_AUDIENCE: &str = "foundry-connect-local";
/// How long a printed token is valid.
pub const TOKEN_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// What a user needs to connect.
#[derive(Debug, Clone)]
pub struct Demo {
    /// The demo owner.
    pub owner: OwnerId,
    /// The demo project (enabled for connected agents).
    pub project_id: ProjectId,
    /// The demo chat link.
    pub chat_link_id: ChatLinkId,
    /// The demo task, if it was created on this start.
    pub task_id: Option<TaskId>,
}

/// A running local server.
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The MCP URL.
    pub mcp_url: String,
    /// A bearer token with `osfoundry:read` and `osfoundry:run`.
    pub token: String,
    /// A bearer token with `osfoundry:owner` (owner API).
    pub owner_token: String,
    /// A device token for the relay: the same on every start (kept in [`DEVICE_TOKEN_FILE`]).
    pub device_token: String,
    /// That device's id.
    pub device_id: uuid::Uuid,
    /// The base URL (for the relay's `server_url`).
    pub base_url: String,
    /// The owner's panel, signed in: `<base>/panel#token=<owner token>` (the fragment never
    /// reaches the server).
    pub panel_url: String,
    /// The demo ids.
    pub demo: Demo,
    /// The store (tests inspect it).
    pub store: Arc<SqliteStore>,
    /// The data folder (database, token secret, artifact files).
    pub data_dir: std::path::PathBuf,
    /// The doorbell's open sockets (tests count them, or turn the doorbell off).
    pub doorbell: Arc<doorbell::Hub>,
    /// Relay API requests per device token (what an idle desktop costs, measured).
    pub relay_requests: Arc<RelayRequests>,
    /// The listener's open connections (bounded by [`LocalConfig::max_connections`]).
    pub connections: Arc<listener::Gauge>,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops accepting, finishes in-flight requests, and returns.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }

    /// Waits until the server stops (Ctrl-C or SIGTERM in `main`).
    pub async fn wait(self) {
        let _ = self.task.await;
    }

    /// The text printed at start-up.
    pub fn banner(&self) -> String {
        format!(
            "foundry-connect local server\n\
             \n  MCP URL:       {}\
             \n  Bearer token:  {}\
             \n  Owner:         {}\
             \n  Project id:    {}\
             \n  Chat link id:  {}{}\
             \n  Relay server:  {}\
             \n  Device token:  {}\
             \n  Owner token:   {}\
             \n  Panel:         {}\
             \n  Relay install: curl -fsSL {}/relay/install.sh | sh   (after ./infra/relay-dist.sh)\
             \n\nOpen the panel URL in a browser (it signs you in as the owner). Connect an MCP client with header \
             `Authorization: Bearer <token>`; give the relay the server URL and the device token, or pair it.",
            self.mcp_url,
            self.token,
            self.demo.owner,
            self.demo.project_id,
            self.demo.chat_link_id,
            self.demo.task_id.map(|t| format!("\n  Demo task id:  {t}")).unwrap_or_default(),
            self.base_url,
            self.device_token,
            self.owner_token,
            self.panel_url,
            self.base_url,
        )
    }
}

type Endpoint = McpEndpoint<InProcess<SqliteStore>>;

/// The MCP path of the local server.
pub const MCP_PATH: &str = "/mcp";

/// How often the local notifier looks for due events without a wake-up (retries come due with time).
pub const NOTIFIER_POLL: Duration = Duration::from_secs(1);

/// Relay API requests per device token, counted by the local server (the doorbell benchmark
/// measures what an idle desktop costs with it).
#[derive(Debug, Default)]
pub struct RelayRequests(std::sync::Mutex<std::collections::HashMap<String, u64>>);

impl RelayRequests {
    fn count(&self, headers: &http::HeaderMap) {
        let token = http_util::bearer(headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()));
        if let Some(t) = token {
            let mut m = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *m.entry(domain::devices::token_hash(t)).or_default() += 1;
        }
    }

    /// Requests made with `token` so far.
    pub fn of(&self, token: &str) -> u64 {
        let m = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.get(&domain::devices::token_hash(token)).copied().unwrap_or(0)
    }
}

/// How often an open doorbell socket's device token is checked again (a revoked desktop's
/// socket closes within this).
pub const DOORBELL_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// What every part of the server is built from.
struct Wiring {
    store: Arc<SqliteStore>,
    clock: SharedClock,
    policy: domain::limits::Policy,
    registrations: oauth::RegistrationLimits,
    /// The local signing secret (tokens, download links).
    secret: Vec<u8>,
    /// The base URL clients use.
    public_url: String,
    /// The data folder (database, token secret, artifact files).
    data_dir: std::path::PathBuf,
    panel_refresh_seconds: u32,
    /// The relay builds `/relay/install.sh` downloads.
    relay_dist: std::path::PathBuf,
    /// The doorbell's sockets.
    doorbell: Arc<doorbell::Hub>,
    /// What relays with a connected doorbell are told to poll at.
    doorbell_poll_interval: std::time::Duration,
    /// Relay API requests per device.
    relay_requests: Arc<RelayRequests>,
    /// `Host` values the OAuth endpoints and `/register` accept: the public URL's, and loopback
    /// with the bound port.
    hosts: Vec<String>,
    /// Client metadata documents may be fetched from loopback (the development switch).
    allow_loopback_client_metadata: bool,
    /// Hosts whose documents are fetched from loopback (with the switch only).
    dev_document_hosts: Vec<(String, std::net::SocketAddr)>,
}

/// Every handler the router serves.
struct AppState {
    endpoint: Endpoint,
    relay: RelayApi<SqliteStore>,
    owner: OwnerApi<SqliteStore>,
    panel: PanelConfig,
    doorbell: Arc<doorbell::Hub>,
    relay_requests: Arc<RelayRequests>,
    builds: relay_dist::DirBuilds,
    blobs: DirBlobStore,
    base_url: String,
    auth_server: AuthServerConfig,
    registrar: Registrar<SqliteStore>,
    authorize: LocalAuthServer<SqliteStore>,
}

impl AppState {
    /// The local server: the same handlers as the cloud's functions, on the embedded store,
    /// tokens signed with the local secret, tools dispatched in process.
    fn new(w: &Wiring) -> Self {
        let signer = Hs256Signer::new(&w.secret, &w.public_url, LOCAL_AUDIENCE);
        let auth = Arc::new(Authenticator {
            issuer: w.public_url.clone(),
            audience: Audience::Only(vec![LOCAL_AUDIENCE.to_owned()]),
            keys: Keys::Hs256(w.secret.clone()),
            clock: w.clock.clone(),
        });
        let blobs = DirBlobStore::new(w.data_dir.join("blobs"), &w.public_url, &w.secret, w.clock.clone());
        let deps = ToolDeps {
            store: Arc::clone(&w.store),
            clock: w.clock.clone(),
            policy: w.policy,
            blobs: Some(Arc::new(blobs.clone())),
            panel_url: Some(format!("{}{}", w.public_url, panel::PATH)),
        };
        let endpoint_config = EndpointConfig {
            public_url: Some(w.public_url.clone()),
            mcp_path: MCP_PATH.into(),
            allowed_hosts: Some(Vec::new()),
            max_body_bytes: mcp_endpoint::DEFAULT_MAX_BODY_BYTES,
            scopes: ScopeSpelling::local(),
        };
        // OAuth for clients that are given only the URL: the same metadata and registration as
        // the cloud, with a consent page of our own in front of the local tokens.
        let auth_server = AuthServerConfig {
            authorization_endpoint: AUTHORIZE_PATH.into(),
            token_endpoint: TOKEN_PATH.into(),
            revocation_endpoint: Some(oauth::local::REVOKE_PATH.into()),
            jwks_uri: None,
            scopes: ScopeSpelling::local(),
            iss_in_response: true,
            client_metadata_documents: true,
        };
        let per_minute = w.policy.owner_requests_per_minute;
        Self {
            endpoint: McpEndpoint::new(Arc::new(InProcess(deps)), Arc::clone(&auth), endpoint_config)
                .with_budget(per_minute, Arc::clone(&w.store) as _, w.clock.clone())
                .with_hosts(Arc::clone(&w.store) as _, w.clock.clone()),
            relay: RelayApi {
                store: Arc::clone(&w.store),
                clock: w.clock.clone(),
                policy: w.policy,
                public_url: w.public_url.clone(),
                doorbell_url: Some(format!(
                    "{}{}{}",
                    w.public_url.replacen("http", "ws", 1),
                    domain::relay::PREFIX,
                    domain::doorbell::PATH
                )),
                doorbell_poll_interval: w.doorbell_poll_interval,
                budget: Default::default(),
            },
            owner: OwnerApi {
                store: Arc::clone(&w.store),
                auth,
                clock: w.clock.clone(),
                policy: w.policy,
                blobs: Some(Arc::new(blobs.clone())),
                urls: UrlPolicy::Local,
                budget: Default::default(),
            },
            panel: PanelConfig { sign_in: SignIn::Local, refresh_seconds: w.panel_refresh_seconds },
            builds: relay_dist::DirBuilds { dir: w.relay_dist.clone() },
            doorbell: Arc::clone(&w.doorbell),
            relay_requests: Arc::clone(&w.relay_requests),
            blobs,
            base_url: w.public_url.clone(),
            auth_server,
            // The local server sees every token it issues, so never-used registrations can go.
            registrar: Registrar::new(
                Arc::clone(&w.store),
                RedirectPolicy::local(),
                ScopeSpelling::local(),
                w.clock.clone(),
                w.registrations,
                Some(Arc::clone(&w.store) as Arc<dyn domain::store::ClientUse>),
            )
            .with_settings(config::REGISTRATION_SETTINGS),
            authorize: LocalAuthServer::new(
                Arc::clone(&w.store),
                signer,
                DEMO_OWNER,
                &format!("{}{MCP_PATH}", w.public_url),
                w.clock.clone(),
            )
            .with_allowed_hosts(w.hosts.clone())
            .with_documents(Arc::new(
                oauth::cimd::Documents::new(Arc::new(events::SystemResolver), w.clock.clone())
                    .allowing_loopback(w.allow_loopback_client_metadata)
                    .pinning(w.dev_document_hosts.clone())
                    .with_copies(Arc::clone(&w.store) as Arc<dyn domain::store::DocumentCopies>),
            )),
        }
    }
}

/// Opens the store, creates the demo data on first start, binds and serves.
///
/// # Errors
/// When the data folder, the store or the port cannot be used.
pub async fn start(config: LocalConfig) -> anyhow::Result<Running> {
    // Folder 0700, files 0600: the database and its WAL hold webhook signing secrets and task
    // results in plain text, the secret file signs every token.
    private_files::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    let clock: SharedClock = config.clock.0.clone();
    let db = config.data_dir.join("foundry.sqlite3");
    private_db_files(&db)?;
    let store = Arc::new(
        SqliteStore::open(&db, clock.clone(), config.policy).with_context(|| format!("opening {}", db.display()))?,
    );
    let secret = load_or_create_secret(&config.data_dir.join("local-token-secret"))?;
    let demo = ensure_demo(&store).await?;
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], config.port)))
        .await
        .with_context(|| format!("binding 127.0.0.1:{}", config.port))?;
    let addr = listener.local_addr()?;
    let public_url = config.public_url.clone().unwrap_or_else(|| format!("http://{addr}"));
    let signer = Hs256Signer::new(&secret, &public_url, LOCAL_AUDIENCE);
    let grant = |scopes| Grant { subject: DEMO_OWNER, client: LOCAL_CLIENT, scopes };
    let token = signer.mint(grant(&[SCOPE_READ, SCOPE_RUN]), clock.now(), TOKEN_TTL)?;
    let owner_token = signer.mint(grant(&[SCOPE_OWNER]), clock.now(), TOKEN_TTL)?;
    let (device_token, device_id) = device::local_device_token(&store, &demo.owner, &config.data_dir).await?;
    let wiring = Wiring {
        store: Arc::clone(&store),
        clock: clock.clone(),
        policy: config.policy,
        registrations: config.registrations,
        secret,
        public_url: public_url.clone(),
        data_dir: config.data_dir.clone(),
        panel_refresh_seconds: config.panel_refresh_seconds,
        relay_dist: config.relay_dist.clone(),
        doorbell: Arc::new(doorbell::Hub::new(Arc::clone(&store) as Arc<dyn AuthenticateDevices>, DOORBELL_RECHECK)),
        doorbell_poll_interval: config.doorbell_poll_interval,
        relay_requests: Arc::new(RelayRequests::default()),
        hosts: config::accepted_hosts(&public_url, addr.port()),
        allow_loopback_client_metadata: config.allow_loopback_client_metadata,
        dev_document_hosts: config.dev_document_hosts.clone(),
    };
    let doorbell = Arc::clone(&wiring.doorbell);
    let relay_requests = Arc::clone(&wiring.relay_requests);
    doorbell::feed(&store, Arc::clone(&doorbell));
    let app = router(Arc::new(AppState::new(&wiring)));
    let connections = Arc::new(listener::Gauge::default());
    let limits = listener::Limits { header_timeout: config.header_timeout, max_connections: config.max_connections };
    let (shutdown, task) = serve(listener, app, &wiring, limits, Arc::clone(&connections));
    let panel_url = format!("{public_url}{}#token={owner_token}", panel::PATH);
    Ok(Running {
        addr,
        mcp_url: format!("{public_url}{MCP_PATH}"),
        token,
        owner_token,
        device_token,
        device_id,
        panel_url,
        base_url: public_url,
        demo,
        store,
        data_dir: config.data_dir.clone(),
        doorbell,
        relay_requests,
        connections,
        shutdown: Some(shutdown),
        task,
    })
}

/// How often the local server's desktop watch looks at the runs still queued.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(20);
/// How many waiting runs one look covers (the oldest).
const WATCH_RUNS: usize = 100;

/// One look of the local desktop watch at `now` (`events::watch`): every run queued at least
/// [`domain::fleet::WATCH_AFTER`]`[0]` ago and still queued has its silent desktops marked
/// offline (the cloud looks twice per run, from its queue; locally a timer looks at all of
/// them). How many desktops it marked.
///
/// # Errors
/// When the store fails.
pub async fn watch_once(
    store: &SqliteStore,
    now: domain::clock::Timestamp,
    poll_interval: std::time::Duration,
) -> Result<usize, domain::store::StoreError> {
    let mut marked = 0;
    for w in store.waiting_runs(now.minus(domain::fleet::WATCH_AFTER[0]), WATCH_RUNS).await? {
        marked += events::watch::check(store, &w, now, poll_interval).await?;
    }
    Ok(marked)
}

/// Serves `app` on `listener` until the returned sender fires, with the local notifier beside
/// it: it delivers the outbox the store fills in the same transactions as the changes (the
/// cloud's stream publisher and notify function do the same job), and stops after the server.
fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    w: &Wiring,
    limits: listener::Limits,
    connections: Arc<listener::Gauge>,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (notifier_stop, notifier_rx) = oneshot::channel::<()>();
    let notifier = Notifier::new(Arc::clone(&w.store), w.clock.clone(), UrlPolicy::Local, Arc::new(SystemResolver));
    let notifier_task = tokio::spawn(events::run_local(notifier, w.store.write_signal(), NOTIFIER_POLL, async move {
        let _ = notifier_rx.await;
    }));
    let (store, clock, poll) = (Arc::clone(&w.store), w.clock.clone(), w.policy.poll_interval);
    let watch_task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(WATCH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            if let Err(e) = watch_once(&store, clock.now(), poll).await {
                tracing::warn!(error = %domain::errors::ErrorChain(&e), "the desktop watch failed; it looks again later");
            }
        }
    });
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.await;
        };
        listener::serve(listener, app, limits, connections, shutdown).await;
        let _ = notifier_stop.send(());
        let _ = notifier_task.await;
        watch_task.abort();
    });
    (tx, task)
}

fn router(state: Arc<AppState>) -> Router {
    use axum::routing::{any, get};
    use mcp_endpoint::RESOURCE_METADATA_PATH;
    use oauth::{AS_METADATA_PATH, REGISTER_PATH};
    let relay_api = format!("{}/{{*rest}}", domain::relay::PREFIX);
    let owner_api = format!("{}/{{*rest}}", http_api::owner_api::PREFIX);
    let panel_pages = format!("{}/{{*rest}}", panel::PATH);
    let downloads = format!("{}{{*rest}}", tools::blobs::LOCAL_DOWNLOAD_PREFIX);
    Router::new()
        .route(MCP_PATH, any(mcp))
        .route(RESOURCE_METADATA_PATH, get(metadata))
        .route(&format!("{RESOURCE_METADATA_PATH}{MCP_PATH}"), get(metadata))
        .route(AS_METADATA_PATH, get(as_metadata))
        .route(REGISTER_PATH, any(register))
        .route(AUTHORIZE_PATH, any(oauth))
        .route(TOKEN_PATH, any(oauth))
        .route(oauth::local::ORIGIN_ALIASES[0].0, any(oauth))
        .route(oauth::local::ORIGIN_ALIASES[1].0, any(oauth))
        .route(oauth::local::SESSION_PATH, any(oauth))
        .route(oauth::local::REVOKE_PATH, any(oauth))
        .route(&format!("{}{}", domain::relay::PREFIX, domain::doorbell::PATH), get(ring))
        .route(&relay_api, any(relay))
        .route(&owner_api, any(owner))
        .route(http_api::openapi::PATH, any(openapi))
        .route(panel::PATH, any(panel))
        .route(&panel_pages, any(panel))
        .route(&downloads, get(blob))
        .route(relay_dist::INSTALL_PATH, any(relay_builds))
        .route(&format!("{}{{*file}}", relay_dist::DOWNLOAD_PREFIX), any(relay_builds))
        .layer(axum::middleware::from_fn(cors))
        .with_state(state)
}

/// CORS for the endpoints browser-based MCP clients call from another origin (`http_util::cors`):
/// their preflights answered here, their answers decorated.
async fn cors(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    http_util::cors::with_cors(&method, &path, || next.run(req)).await
}

/// Reads at most `max` + 1 bytes of a body (the handlers answer their own 413 past `max`).
async fn read_body(req: http::Request<Body>, max: usize) -> http::Request<Bytes> {
    let (parts, body) = req.into_parts();
    let bytes = match Limited::new(body, max + 1).collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => Bytes::from(vec![0u8; max + 1]),
    };
    http::Request::from_parts(parts, bytes)
}

/// What a request naming another host is told on the routes that need no token (the
/// pairing routes, `/register`, the OAuth endpoints) and on every relay route and the doorbell:
/// a DNS-rebinding page that reaches 127.0.0.1 under its own name gets nothing.
fn misdirected() -> axum::response::Response {
    http_util::http_json::error(
        http::StatusCode::MISDIRECTED_REQUEST,
        "host: this server answers only for its own host name (FOUNDRY_PUBLIC_URL) and loopback",
    )
    .map(Body::from)
    .into_response()
}

async fn relay(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: http::Request<Body>,
) -> axum::response::Response {
    if !state.authorize.host_allowed(req.headers()) {
        return misdirected();
    }
    let mut req = read_body(req, http_api::relay_api::MAX_BODY_BYTES).await;
    state.relay_requests.count(req.headers());
    // Pairing requests are counted per TCP peer, as registrations are.
    req.extensions_mut().insert(ClientSource(peer.ip().to_string()));
    state.relay.handle(req).await.map(Body::from).into_response()
}

async fn ring(
    State(state): State<Arc<AppState>>,
    slot: Option<axum::Extension<listener::Slot>>,
    headers: http::HeaderMap,
    ws: axum::extract::ws::WebSocketUpgrade,
) -> axum::response::Response {
    if !state.authorize.host_allowed(&headers) {
        return misdirected();
    }
    // The connection's slot under the listener's cap stays taken while the socket is open.
    doorbell::upgrade(Arc::clone(&state.doorbell), &headers, ws, slot).await
}

async fn relay_builds(State(state): State<Arc<AppState>>, req: http::Request<Body>) -> axum::response::Response {
    match state.builds.handle(req.method(), req.uri().path(), &state.base_url) {
        Some(r) => r.map(Body::from).into_response(),
        None => http::StatusCode::NOT_FOUND.into_response(),
    }
}

async fn panel(State(state): State<Arc<AppState>>, req: http::Request<Body>) -> axum::response::Response {
    match state.panel.handle(req.method(), req.uri().path(), &state.base_url) {
        Some(r) => r.map(Body::from).into_response(),
        None => http::StatusCode::NOT_FOUND.into_response(),
    }
}

async fn blob(State(state): State<Arc<AppState>>, req: http::Request<Body>) -> axum::response::Response {
    state.blobs.serve(req.uri().path(), req.uri().query()).await.map(Body::from).into_response()
}

async fn openapi(req: http::Request<Body>) -> axum::response::Response {
    http_api::openapi::response(req.method()).map(Body::from).into_response()
}

async fn owner(State(state): State<Arc<AppState>>, req: http::Request<Body>) -> axum::response::Response {
    let req = read_body(req, http_api::owner_api::MAX_BODY_BYTES).await;
    state.owner.handle(req).await.map(Body::from).into_response()
}

async fn mcp(State(state): State<Arc<AppState>>, req: http::Request<Body>) -> axum::response::Response {
    let req = read_body(req, state.endpoint.config().max_body_bytes).await;
    state.endpoint.handle(req).await.map(Body::from).into_response()
}

async fn metadata(State(state): State<Arc<AppState>>, headers: http::HeaderMap) -> axum::response::Response {
    resource_metadata_response(state.endpoint.config(), &headers).map(Body::from).into_response()
}

async fn as_metadata(State(state): State<Arc<AppState>>) -> axum::response::Response {
    oauth::metadata_response(&state.auth_server, &state.base_url).map(Body::from).into_response()
}

async fn register(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: http::Request<Body>,
) -> axum::response::Response {
    if !state.authorize.host_allowed(req.headers()) {
        return misdirected();
    }
    // The TCP peer, always loopback here: this machine's clients share the loopback limit; what
    // came through a tunnel (forwarding headers, the public host) shares the one per-source
    // limit, whatever address those headers claim (anyone could set them).
    let mut req = read_body(req, oauth::MAX_REGISTRATION_BYTES).await;
    let source = oauth::peer_source(peer.ip(), req.headers());
    req.extensions_mut().insert(source);
    state.registrar.handle(req).await.map(Body::from).into_response()
}

async fn oauth(State(state): State<Arc<AppState>>, req: http::Request<Body>) -> axum::response::Response {
    let req = read_body(req, oauth::MAX_REGISTRATION_BYTES).await;
    state.authorize.handle(req).await.map(Body::from).into_response()
}

/// Creates the database file as 0600 before SQLite opens it (SQLite makes its WAL and shared
/// memory files with the database file's mode), and narrows the files an older build left 0644.
fn private_db_files(db: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(private_files::FILE_MODE)
        .open(db)
        .with_context(|| format!("creating {}", db.display()))?;
    for suffix in ["", "-wal", "-shm"] {
        let file = std::path::PathBuf::from(format!("{}{suffix}", db.display()));
        private_files::narrow(&file, private_files::FILE_MODE)
            .with_context(|| format!("narrowing {}", file.display()))?;
    }
    Ok(())
}

/// The local signing secret (tokens, download links): 64 random bytes in a file only its
/// owner can read (mode 0600, set when the file is created, never widened later).
fn load_or_create_secret(path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    if let Ok(s) = std::fs::read(path)
        && s.len() >= 32
    {
        return Ok(s);
    }
    let mut secret = vec![0u8; 64];
    getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("no randomness for the token secret: {e}"))?;
    let mut file = private_files::options().open(path).with_context(|| format!("creating {}", path.display()))?;
    file.write_all(&secret).and_then(|()| file.sync_all()).with_context(|| format!("writing {}", path.display()))?;
    Ok(secret)
}

async fn ensure_demo(store: &SqliteStore) -> anyhow::Result<Demo> {
    let owner = OwnerId::new(DEMO_OWNER)?;
    if let (Some(p), Some(l)) = (store.list_projects(&owner).await?.first(), store.list_links(&owner).await?.first()) {
        return Ok(Demo { owner, project_id: p.project_id, chat_link_id: l.link_id, task_id: None });
    }
    let project = store.create_project(&owner, "Demo project").await?;
    store.set_project_enabled(&owner, project.project_id, true).await?;
    let link = store
        .create_link(&owner, project.project_id, "Demo chat")
        .await?
        .context("demo project vanished while creating its chat link")?;
    let assign = AssignTask {
        owner: owner.clone(),
        link_id: link.link_id,
        objective: "Say hello: submit a one-line greeting as the result.".into(),
        idempotency_key: IdempotencyKey::parse("local-demo-task")?,
    };
    let task_id = match store.assign_task(&assign).await? {
        AssignOutcome::Assigned(t) | AssignOutcome::Replayed(t) => Some(t.task_id),
        AssignOutcome::Rejected(r) => anyhow::bail!("creating the demo task: {r}"),
    };
    Ok(Demo { owner, project_id: project.project_id, chat_link_id: link.link_id, task_id })
}
