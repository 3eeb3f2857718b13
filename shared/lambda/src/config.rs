//! Function settings from the environment: parsed once, every key a constant, every bad value
//! reported together, and the function fails before doing any work.
//!
//! [`required_keys`] lists what each function needs, so the SAM template test can check that
//! the template sets every one of them (derived from this code, not copied).

#[cfg(any(feature = "mcp", test))]
use std::collections::HashMap;

use domain::limits::Policy;
#[cfg(feature = "mcp")]
use mcp_endpoint::{DEFAULT_MAX_BODY_BYTES, EndpointConfig};
#[cfg(feature = "mcp")]
use oauth::AuthServerConfig;
#[cfg(feature = "owner-api")]
use panel::{DEFAULT_REFRESH_SECONDS, PANEL_REFRESH_RANGE, PanelConfig, SignIn};
use settings::{PolicyKeys, Reader};
#[cfg(feature = "mcp")]
use tools::scopes::ScopeSpelling;
use tools::{ToolName, ToolSpec};

pub use settings::ConfigError;

/// The DynamoDB table.
pub const TABLE_NAME: &str = "TABLE_NAME";
/// The S3 bucket for artifacts (upload function only).
pub const ARTIFACT_BUCKET: &str = "ARTIFACT_BUCKET";
/// Optional: claim lease in seconds (default 900).
pub const LEASE_SECONDS: &str = "LEASE_SECONDS";
/// Optional: seconds without a control poll before a run reads `desktop stopped reporting` (default 600).
pub const HEARTBEAT_TIMEOUT_SECONDS: &str = "HEARTBEAT_TIMEOUT_SECONDS";
/// Optional: relay poll interval in seconds (default 20).
pub const POLL_INTERVAL_SECONDS: &str = "POLL_INTERVAL_SECONDS";
/// Pairings one source address may start per hour (`domain::limits::Policy`).
pub const PAIRINGS_PER_SOURCE_PER_HOUR: &str = "PAIRINGS_PER_SOURCE_PER_HOUR";
/// Requests one owner may make a minute on each surface (`domain::budget`; the template's
/// `OwnerRequestsPerMinute`).
pub const OWNER_REQUESTS_PER_MINUTE: &str = "OWNER_REQUESTS_PER_MINUTE";
/// The OAuth issuer (`iss`), e.g. the Cognito user pool URL.
pub const OAUTH_ISSUER: &str = "OAUTH_ISSUER";
/// The issuer's JWKS URL.
pub const JWKS_URL: &str = "JWKS_URL";
/// Accepted audiences / app client ids, comma-separated.
pub const OAUTH_AUDIENCES: &str = "OAUTH_AUDIENCES";
/// The stack's public base URL (the API's own `https://<id>.execute-api.<region>.amazonaws.com`;
/// the MCP URL is this + `/mcp`). Its host is always an accepted `Host`.
pub const PUBLIC_URL: &str = "PUBLIC_URL";
/// How the authorization server prefixes the product's scopes: `osfoundry/` with Cognito (the
/// resource server's identifier and a slash), `osfoundry:` locally. Everything advertised is
/// spelled with it.
pub const OAUTH_SCOPE_PREFIX: &str = "OAUTH_SCOPE_PREFIX";
/// The hosted sign-in domain of the user pool (the owner panel signs in there).
pub const HOSTED_AUTH_URL: &str = "HOSTED_AUTH_URL";
/// Optional: seconds between owner-panel refreshes (default 15).
pub const PANEL_REFRESH_SECONDS: &str = "PANEL_REFRESH_SECONDS";
/// The Cognito user pool id (the registration function creates app clients in it).
pub const USER_POOL_ID: &str = "USER_POOL_ID";
/// What the `register_client` function may do, on its own user pool only.
pub const REGISTER_COGNITO_ACTIONS: &[&str] = &[
    "cognito-idp:CreateUserPoolClient",
    "cognito-idp:ListUserPoolClients",
    "cognito-idp:DescribeUserPoolClient",
    "cognito-idp:DeleteUserPoolClient",
];
/// The doorbell's WebSocket URL the relay API hands to relays (optional).
pub const DOORBELL_URL: &str = "DOORBELL_URL";
/// The doorbell stage's `@connections` management endpoint (the ring function posts there).
pub const DOORBELL_ENDPOINT: &str = "DOORBELL_ENDPOINT";
/// What the `mcp` function may do on the table: count the owners' budgets
/// (`domain::budget`, one conditional update of a counter item) and record each host's
/// handshake (one unconditional update); the template limits it to those items' keys,
/// [`MCP_BUDGET_KEYS`] and [`MCP_HOST_KEYS`].
pub const MCP_DYNAMODB_ACTIONS: &[&str] = &["dynamodb:UpdateItem"];
/// The partition keys the `mcp` function may write: its budget counters…
pub const MCP_BUDGET_KEYS: &str = "ATTEMPTS#budget:mcp:*";
/// …and the owners' chats, beside which each host's handshake is kept.
pub const MCP_HOST_KEYS: &str = "CLIENT#CHATS#*";
/// What the `doorbell` function may do on the table: read device tokens and socket owners,
/// write and delete socket items (in transactions).
pub const DOORBELL_DYNAMODB_ACTIONS: &[&str] =
    &["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:Query"];
/// What the `ring_doorbell` function may do on the table: list an owner's sockets, read and
/// delete socket items of gone sockets.
pub const RING_DYNAMODB_ACTIONS: &[&str] = &["dynamodb:Query", "dynamodb:GetItem", "dynamodb:DeleteItem"];

/// What the `register_client` function may do on the table (`CLIENT#…` items only): read and
/// record clients' first use and each metadata document's app client, begin the facade's flows
/// and take them (a conditional delete).
pub const REGISTER_DYNAMODB_ACTIONS: &[&str] = &["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"];
/// Optional: extra hosts whose `https` redirect URIs clients may register, comma-separated.
pub const ALLOWED_REDIRECT_HOSTS: &str = "ALLOWED_REDIRECT_HOSTS";
/// Optional: new app clients per UTC hour (default 20).
pub const REGISTRATIONS_PER_HOUR: &str = "REGISTRATIONS_PER_HOUR";
/// Optional: new app clients per UTC hour from one source address (default 5).
pub const REGISTRATIONS_PER_SOURCE: &str = "REGISTRATIONS_PER_SOURCE";
/// What the registration refusals name as raising each limit: the template's parameters
/// (`template.yaml`) whose values these variables carry.
#[cfg(feature = "register")]
pub const REGISTRATION_SETTINGS: oauth::LimitSettings = oauth::LimitSettings {
    per_hour: "the stack parameter ClientRegistrationsPerHour",
    per_source: "the stack parameter ClientRegistrationsPerSource",
    per_loopback: "",
};
/// Optional: most dynamically registered app clients (default 200).
pub const REGISTRATION_CAP: &str = "REGISTRATION_CAP";
/// Development switch (`true`/`false`, default `false`): client metadata documents may be
/// fetched from a loopback address (`oauth::cimd`). Only the cloud-shape tests turn it on; in an
/// account nothing listens on the function's loopback.
pub const ALLOW_LOOPBACK_CLIENT_METADATA: &str = "ALLOW_LOOPBACK_CLIENT_METADATA";
/// Development, with [`ALLOW_LOOPBACK_CLIENT_METADATA`] only: `host=127.0.0.1:port,…`, hosts
/// whose client metadata documents are fetched from that loopback address
/// (`oauth::cimd::Documents::pinning`), so a host's own document is replayed under its own URL.
pub const DEV_DOCUMENT_HOSTS: &str = "FOUNDRY_DEV_DOCUMENT_HOSTS";
/// Cognito's quota of app clients per user pool.
pub const COGNITO_APP_CLIENTS_PER_POOL: usize = 1_000;
/// App clients the template itself makes (the panel's, and room for a deployer's few).
pub const TEMPLATE_APP_CLIENTS: usize = 10;
/// Optional: more accepted `Host` values (custom domains), comma-separated. The host of
/// [`PUBLIC_URL`] is always accepted; any other `Host` gets 403 (DNS-rebinding protection).
pub const ALLOWED_HOSTS: &str = "ALLOWED_HOSTS";

/// The environment key naming the Lambda function of `tool`, e.g. `TOOL_FUNCTION_CLAIM_LINKED_CHAT_TASK`.
pub fn tool_function_key(tool: ToolName) -> String {
    format!("TOOL_FUNCTION_{}", tool.as_str().to_ascii_uppercase())
}

/// The keys a function cannot start without, by function (crate) name.
pub fn required_keys(function: &str) -> Option<Vec<String>> {
    if function == "mcp" {
        let mut keys: Vec<String> =
            [OAUTH_ISSUER, JWKS_URL, PUBLIC_URL, OAUTH_SCOPE_PREFIX, TABLE_NAME].map(str::to_owned).to_vec();
        keys.extend(ToolName::ALL.iter().map(|&t| tool_function_key(t)));
        return Some(keys);
    }
    match function {
        "graph_relay" => return Some(vec![TABLE_NAME.to_owned(), PUBLIC_URL.to_owned()]),
        "register_client" => {
            return Some(
                [USER_POOL_ID, OAUTH_SCOPE_PREFIX, HOSTED_AUTH_URL, PUBLIC_URL, TABLE_NAME].map(str::to_owned).to_vec(),
            );
        }
        "publish_events" => return Some(vec![EVENTS_QUEUE_URL.to_owned(), TABLE_NAME.to_owned()]),
        "doorbell" => return Some(vec![TABLE_NAME.to_owned(), DOORBELL_ENDPOINT.to_owned()]),
        "ring_doorbell" => return Some(vec![TABLE_NAME.to_owned(), DOORBELL_ENDPOINT.to_owned()]),
        "notify" => return Some(vec![TABLE_NAME.to_owned(), EVENTS_QUEUE_URL.to_owned()]),
        "owner_api" => {
            return Some(
                [TABLE_NAME, OAUTH_ISSUER, JWKS_URL, OAUTH_AUDIENCES, ARTIFACT_BUCKET, PUBLIC_URL, HOSTED_AUTH_URL]
                    .map(str::to_owned)
                    .to_vec(),
            );
        }
        _ => {}
    }
    let tool = ToolName::parse(function)?;
    let mut keys = vec![TABLE_NAME.to_owned()];
    if tool.spec().stores_blobs {
        keys.push(ARTIFACT_BUCKET.to_owned());
    }
    Some(keys)
}

/// The time policy's keys in a function's environment.
const POLICY: PolicyKeys = PolicyKeys {
    lease: Some(LEASE_SECONDS),
    heartbeat_timeout: HEARTBEAT_TIMEOUT_SECONDS,
    poll_interval: POLL_INTERVAL_SECONDS,
    pairings_per_source: PAIRINGS_PER_SOURCE_PER_HOUR,
    owner_requests_per_minute: OWNER_REQUESTS_PER_MINUTE,
};

/// Settings of a tool function.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolConfig {
    /// The DynamoDB table.
    pub table: String,
    /// Time rules.
    pub policy: Policy,
    /// Artifact bucket (upload function only).
    pub bucket: Option<String>,
    /// The owner panel's URL (`PUBLIC_URL` + `/panel`), for the `url` of results with a page
    /// there; set for the tools whose results have one.
    pub panel_url: Option<String>,
}

impl ToolConfig {
    /// Reads the settings of the function of the tool `tool` describes, through `get`.
    ///
    /// # Errors
    /// [`ConfigError`] with every problem.
    pub fn from_env(tool: ToolSpec, get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut r = Reader::new(get);
        let table = r.required(TABLE_NAME);
        let policy = r.policy(POLICY);
        let bucket = tool.stores_blobs.then(|| r.required(ARTIFACT_BUCKET));
        let panel_url = r.optional_url(PUBLIC_URL).map(|u| format!("{u}/panel"));
        r.finish(Self { table, policy, bucket, panel_url })
    }
}

/// Settings of the `graph_relay` function.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayConfig {
    /// The DynamoDB table.
    pub table: String,
    /// Time rules (the poll interval it tells relays, the heartbeat timeout).
    pub policy: Policy,
    /// The stack's public URL: pairing answers point the owner at `{public_url}/panel`.
    pub public_url: String,
    /// The doorbell's WebSocket URL handed to relays (`DOORBELL_URL`; none: relays only poll).
    pub doorbell_url: Option<String>,
}

impl RelayConfig {
    /// Reads the settings through `get`.
    ///
    /// # Errors
    /// [`ConfigError`] with every problem.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut r = Reader::new(get);
        let table = r.required(TABLE_NAME);
        let policy = r.policy(POLICY);
        let public_url = r.url(PUBLIC_URL).unwrap_or_default();
        let doorbell_url = r.optional(DOORBELL_URL).filter(|u| !u.is_empty());
        r.finish(Self { table, policy, public_url, doorbell_url })
    }
}

#[cfg(feature = "owner-api")]
/// Settings of the `owner_api` function.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnerConfig {
    /// The DynamoDB table.
    pub table: String,
    /// Time rules.
    pub policy: Policy,
    /// Expected `iss`.
    pub issuer: String,
    /// JWKS URL.
    pub jwks_url: String,
    /// Accepted audiences (the owner's app client).
    pub audiences: Vec<String>,
    /// The artifact bucket (the task detail's download links).
    pub bucket: String,
    /// The stack's public base URL (the panel's callback is `<it>/panel`).
    pub public_url: String,
    /// The hosted sign-in domain, e.g. `https://<prefix>.auth.<region>.amazoncognito.com`.
    pub hosted_auth_url: String,
    /// The owner app client the panel signs in with.
    pub owner_client_id: String,
    /// Seconds between panel refreshes.
    pub panel_refresh_seconds: u32,
}

#[cfg(feature = "owner-api")]
impl OwnerConfig {
    /// Reads the settings through `get`.
    ///
    /// # Errors
    /// [`ConfigError`] with every problem.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut r = Reader::new(get);
        let table = r.required(TABLE_NAME);
        let policy = r.policy(POLICY);
        let issuer = r.required(OAUTH_ISSUER);
        let jwks_url = r.required(JWKS_URL);
        let audiences = list(&r.required(OAUTH_AUDIENCES));
        let bucket = r.required(ARTIFACT_BUCKET);
        let public_url = r.url(PUBLIC_URL).unwrap_or_default();
        let hosted_auth_url = r.url(HOSTED_AUTH_URL).unwrap_or_default();
        let owner_client_id = audiences.first().cloned().unwrap_or_default();
        let panel_refresh_seconds =
            r.seconds_within(PANEL_REFRESH_SECONDS, DEFAULT_REFRESH_SECONDS, PANEL_REFRESH_RANGE);
        r.finish(Self {
            table,
            policy,
            issuer,
            jwks_url,
            audiences,
            bucket,
            public_url,
            hosted_auth_url,
            owner_client_id,
            panel_refresh_seconds,
        })
    }

    /// The panel's sign-in: Cognito's hosted page on the owner client.
    pub fn panel(&self) -> PanelConfig {
        let base = &self.hosted_auth_url;
        PanelConfig {
            sign_in: SignIn::Cognito {
                authorize_url: format!("{base}/oauth2/authorize"),
                token_url: format!("{base}/oauth2/token"),
                logout_url: format!("{base}/logout"),
                client_id: self.owner_client_id.clone(),
                scope: "openid osfoundry/owner".into(),
                redirect_uri: format!("{}{}", self.public_url, panel::PATH),
            },
            refresh_seconds: self.panel_refresh_seconds,
        }
    }
}

/// The SQS events queue's URL.
pub const EVENTS_QUEUE_URL: &str = "EVENTS_QUEUE_URL";
/// Test harnesses only (the template never sets it): `true` lets the notifier call `http`
/// receivers on loopback, as the local server does.
pub const ALLOW_LOOPBACK_WEBHOOKS: &str = "ALLOW_LOOPBACK_WEBHOOKS";

/// Settings of the `publish_events` function.
#[derive(Debug, Clone, PartialEq)]
pub struct PublisherConfig {
    /// The events queue.
    pub queue_url: String,
    /// The table (the owners' links: only events a subscription wants are queued).
    pub table: String,
}

impl PublisherConfig {
    /// Reads the settings through `get`.
    ///
    /// # Errors
    /// [`ConfigError`] with every problem.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut r = Reader::new(get);
        let queue_url = r.required(EVENTS_QUEUE_URL);
        let table = r.required(TABLE_NAME);
        r.finish(Self { queue_url, table })
    }
}

/// Settings of the `doorbell` function (`$connect`, `$disconnect`).
#[derive(Debug, Clone, PartialEq)]
pub struct DoorbellConfig {
    /// The DynamoDB table (device tokens, open sockets).
    pub table: String,
    /// The doorbell stage's management endpoint: `$connect` closes the sockets a newer one
    /// replaces (`domain::doorbell::MAX_SOCKETS_PER_DEVICE`).
    pub endpoint: String,
}

impl DoorbellConfig {
    /// Reads the settings through `get`.
    ///
    /// # Errors
    /// [`ConfigError`] with every problem.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut r = Reader::new(get);
        let table = r.required(TABLE_NAME);
        let endpoint = r.url(DOORBELL_ENDPOINT).unwrap_or_default();
        r.finish(Self { table, endpoint })
    }
}

/// Settings of the `ring_doorbell` function (the table's stream → rings).
#[derive(Debug, Clone, PartialEq)]
pub struct RingConfig {
    /// The DynamoDB table (open sockets).
    pub table: String,
    /// The doorbell stage's management endpoint (`https://{api}.execute-api.{region}.amazonaws.com/{stage}`).
    pub endpoint: String,
}

impl RingConfig {
    /// Reads the settings through `get`.
    ///
    /// # Errors
    /// [`ConfigError`] with every problem.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut r = Reader::new(get);
        let table = r.required(TABLE_NAME);
        let endpoint = r.url(DOORBELL_ENDPOINT).unwrap_or_default();
        r.finish(Self { table, endpoint })
    }
}

/// Settings of the `notify` function.
#[derive(Debug, Clone, PartialEq)]
pub struct NotifierConfig {
    /// The DynamoDB table (subscriptions, delivery outcomes).
    pub table: String,
    /// Time rules.
    pub policy: Policy,
    /// The events queue (for the backoff of failed messages).
    pub queue_url: String,
    /// See [`ALLOW_LOOPBACK_WEBHOOKS`].
    pub allow_loopback: bool,
}

impl NotifierConfig {
    /// Reads the settings through `get`.
    ///
    /// # Errors
    /// [`ConfigError`] with every problem.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut r = Reader::new(get);
        let table = r.required(TABLE_NAME);
        let policy = r.policy(POLICY);
        let queue_url = r.required(EVENTS_QUEUE_URL);
        let allow_loopback = r.flag(ALLOW_LOOPBACK_WEBHOOKS, false);
        r.finish(Self { table, policy, queue_url, allow_loopback })
    }
}

#[cfg(feature = "mcp")]
/// Settings of the `mcp` function.
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// How the endpoint presents itself.
    pub endpoint: EndpointConfig,
    /// Expected `iss`.
    pub issuer: String,
    /// JWKS URL.
    pub jwks_url: String,
    /// The authorization server the stack's own metadata describes (Cognito's endpoints).
    pub auth_server: AuthServerConfig,
    /// Function name per tool.
    pub functions: HashMap<ToolName, String>,
    /// The DynamoDB table: the owners' budgets are counted there (`domain::budget`).
    pub table: String,
    /// The policy (the budget's requests a minute).
    pub policy: Policy,
}

#[cfg(any(feature = "owner-api", feature = "mcp", feature = "register"))]
fn list(v: &str) -> Vec<String> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

#[cfg(feature = "mcp")]
impl McpConfig {
    /// Reads the settings through `get`.
    ///
    /// # Errors
    /// [`ConfigError`] with every problem.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut r = Reader::new(get);
        let issuer = r.required(OAUTH_ISSUER);
        let jwks_url = r.required(JWKS_URL);
        let public_url = r.url(PUBLIC_URL);
        let scopes = ScopeSpelling::with_prefix(&r.required(OAUTH_SCOPE_PREFIX));
        let table = r.required(TABLE_NAME);
        let policy = r.policy(POLICY);
        // The stack's own facade in front of Cognito's (oauth::facade): Cognito
        // refuses the RFC 8707 `resource` that MCP clients send.
        let auth_server = AuthServerConfig {
            authorization_endpoint: oauth::facade::AUTHORIZE_PATH.to_owned(),
            token_endpoint: oauth::facade::TOKEN_PATH.to_owned(),
            // The facade's: a document's client id names its app client there.
            revocation_endpoint: Some(oauth::facade::REVOKE_PATH.to_owned()),
            jwks_uri: Some(jwks_url.clone()),
            scopes: scopes.clone(),
            // The facade sends every authorization response itself (its own callback).
            iss_in_response: true,
            client_metadata_documents: true,
        };
        // The API's own host always; custom domains when listed.
        let mut allowed_hosts: Vec<String> =
            public_url.as_deref().and_then(|u| u.split_once("://")).map(|(_, h)| h.to_owned()).into_iter().collect();
        allowed_hosts.extend(r.optional(ALLOWED_HOSTS).map(|v| list(&v)).unwrap_or_default());
        let mut functions = HashMap::new();
        for &tool in ToolName::ALL {
            if let Some(name) = r.get_required(&tool_function_key(tool)) {
                functions.insert(tool, name);
            }
        }
        let endpoint = EndpointConfig {
            public_url,
            mcp_path: "/mcp".into(),
            allowed_hosts: Some(allowed_hosts),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            scopes,
        };
        r.finish(Self { endpoint, issuer, jwks_url, auth_server, functions, table, policy })
    }
}

#[cfg(feature = "register")]
/// Settings of the `register_client` function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterConfig {
    /// The user pool whose app clients it creates.
    pub user_pool_id: String,
    /// How the pool spells the scopes (`osfoundry/`).
    pub scope_prefix: String,
    /// Extra redirect hosts.
    pub extra_redirect_hosts: Vec<String>,
    /// New clients per hour, per source, and in all.
    pub limits: oauth::RegistrationLimits,
    /// Cognito's hosted domain, which `/authorize` and `/token` front.
    pub hosted_auth_url: String,
    /// The MCP URLs a `resource` may name: the API's own, and each custom domain's.
    pub resources: Vec<String>,
    /// The table where each client's first token is recorded.
    pub table: String,
    /// The stack's own URL (the facade's callback is under it).
    pub public_url: String,
    /// [`ALLOW_LOOPBACK_CLIENT_METADATA`].
    pub allow_loopback_client_metadata: bool,
    /// [`DEV_DOCUMENT_HOSTS`] (empty unless the loopback switch is on).
    pub dev_document_hosts: Vec<(String, std::net::SocketAddr)>,
}

#[cfg(feature = "register")]
impl RegisterConfig {
    /// Reads the settings through `get`.
    ///
    /// # Errors
    /// [`ConfigError`] with every problem.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut r = Reader::new(get);
        let user_pool_id = r.required(USER_POOL_ID);
        let scope_prefix = r.required(OAUTH_SCOPE_PREFIX);
        let extra_redirect_hosts = r
            .optional(ALLOWED_REDIRECT_HOSTS)
            .map(|v| list(&v).into_iter().map(|h| h.to_ascii_lowercase()).collect())
            .unwrap_or_default();
        let limits = oauth::RegistrationLimits {
            per_hour: r.count(REGISTRATIONS_PER_HOUR, oauth::DEFAULT_REGISTRATIONS_PER_HOUR),
            per_source: r.count(REGISTRATIONS_PER_SOURCE, oauth::DEFAULT_REGISTRATIONS_PER_SOURCE),
            // No caller is on the function's loopback: every address is counted alike.
            per_loopback: None,
            cap: r.count(REGISTRATION_CAP, oauth::DEFAULT_REGISTRATION_CAP),
        };
        let hosted_auth_url = r.url(HOSTED_AUTH_URL).unwrap_or_default();
        let table = r.required(TABLE_NAME);
        let public_url = r.url(PUBLIC_URL).unwrap_or_default();
        let mut resources: Vec<String> = vec![format!("{public_url}/mcp")];
        resources.extend(
            r.optional(ALLOWED_HOSTS).map(|v| list(&v)).unwrap_or_default().iter().map(|h| format!("https://{h}/mcp")),
        );
        let allow_loopback_client_metadata = r.flag(ALLOW_LOOPBACK_CLIENT_METADATA, false);
        let dev_document_hosts = match r.optional(DEV_DOCUMENT_HOSTS) {
            Some(v) if allow_loopback_client_metadata => oauth::cimd::Documents::parse_pins(&v),
            _ => Vec::new(),
        };
        // Registrations and documents each make app clients: together with the template's own
        // they must stay under Cognito's quota, or CreateUserPoolClient fails with a
        // LimitExceededException that no owner can act on.
        let room = COGNITO_APP_CLIENTS_PER_POOL - TEMPLATE_APP_CLIENTS - oauth::facade::DEFAULT_DOCUMENT_CLIENT_CAP;
        if limits.cap > room {
            r.problem(
                REGISTRATION_CAP,
                format!(
                    "at most {room}: with {} clients for metadata documents and {TEMPLATE_APP_CLIENTS} of the template's, Cognito allows {COGNITO_APP_CLIENTS_PER_POOL} per user pool",
                    oauth::facade::DEFAULT_DOCUMENT_CLIENT_CAP
                ),
            );
        }
        r.finish(Self {
            user_pool_id,
            scope_prefix,
            extra_redirect_hosts,
            limits,
            hosted_auth_url,
            resources,
            table,
            public_url,
            allow_loopback_client_metadata,
            dev_document_hosts,
        })
    }
}

#[cfg(test)]
mod tests;
