//! # client-documents — Client ID Metadata Documents (MCP 2026-07-28, SEP-991; draft-ietf-oauth-client-id-metadata-document):
//! a `client_id` that is an `https` URL names a JSON document, hosted by the client, that says
//! who the client is and where it may be sent back to. Nothing is registered: the authorization
//! server fetches the document when the client comes.
//!
//! - [`is_document_url`]: which client ids are documents (an `https` URL with a path);
//! - [`validate`]: what a document must say — its `client_id` is exactly its URL, at least one
//!   `redirect_uris`, a public client (`none` among its authentication methods; no secret), and
//!   the authorization-code grant if it lists grants;
//! - [`Documents`]: fetches a document with the webhook guard's address rules
//!   (`events::webhook_url::check_address`: no private, loopback, link-local or special ranges,
//!   on every address the name resolves to, the connection pinned to those addresses), no
//!   redirects followed, no proxy, at most [`MAX_DOCUMENT_BYTES`] within [`FETCH_TIMEOUT`], and
//!   keeps it as its `Cache-Control` says, between [`MIN_CACHE`] and [`MAX_CACHE`] (
//!   [`DEFAULT_CACHE`] when it says nothing), at most [`MAX_CACHED_DOCUMENTS`] at once;
//! - the last good copy of each document ([`DocumentCopies`], in the store: every instance
//!   shares it): when a fetch fails for a reason that is not the document's — the host answers
//!   401, 403, 407, 408, 425 or 429 (a bot wall: claude.ai and chatgpt.com sit behind one that
//!   refuses some cloud addresses), a 5xx, a page instead of JSON (a challenge), a timeout or no
//!   connection — the copy fetched at most [`MAX_COPY_AGE`] ago is used, and the log says so
//!   (`using the last good copy`). A document that is gone (404, 410), redirects or breaks a
//!   rule is the client's own answer: no copy is used for it;
//! - [`redirect_matches`]: a requested redirect URI against a listed one, any port allowed on a
//!   loopback one (RFC 8252 §7.3), so `http://localhost/callback` admits
//!   `http://localhost:53682/callback`.
//!
//! [`Documents::allow_loopback`] is the development switch (off by default): documents on a
//! loopback address are fetched, without certificate checks for those hosts only — the document
//! is on this machine, where TLS proves nothing — so tests and developers can host one. Private,
//! link-local and other special addresses stay refused with it on. With it, [`Documents::pinning`]
//! serves named hosts from loopback addresses (`FOUNDRY_DEV_DOCUMENT_HOSTS`), so a host's own
//! document, byte for byte and under its own URL, can be replayed on this machine.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::clock::{SharedClock, Timestamp};
use domain::store::DocumentCopies;
use events::Resolve;
use events::webhook_url::{UrlPolicy, check_address};
use serde_json::Value;

/// Most redirect URIs one client may list (a document) or register.
pub const MAX_REDIRECT_URIS: usize = 10;
/// Longest redirect URI.
pub const MAX_REDIRECT_URI_CHARS: usize = 2000;
/// Longest `client_name` (longer names are refused, not cut).
pub const MAX_CLIENT_NAME_CHARS: usize = 200;
/// The loopback host names accepted over plain `http`.
pub const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "[::1]"];

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Largest document fetched (the draft suggests 5 KB; Claude's is under 1 KB).
pub const MAX_DOCUMENT_BYTES: usize = 5 * 1024;
/// How long fetching a document may take in all.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Shortest time a document is kept (a `max-age` below it, `no-cache` and `no-store` included):
/// a flood of authorization requests naming one client fetches its document once a minute.
pub const MIN_CACHE: Duration = Duration::from_secs(60);
/// Longest time a document is kept, whatever its headers say: a client's changes (a new
/// redirect URI, a removed one) apply within it.
pub const MAX_CACHE: Duration = Duration::from_secs(24 * 3600);
/// How long a document is kept when its answer says nothing about caching.
pub const DEFAULT_CACHE: Duration = Duration::from_secs(300);
/// Most documents kept at once (the soonest to expire is dropped for a new one).
pub const MAX_CACHED_DOCUMENTS: usize = 256;
/// Oldest last good copy used when the host refuses a fetch ([`DocumentCopies`]): a week, so a
/// client whose host walls the server off for a while still connects, and a document the
/// client changed or withdrew stops applying within a week even if its host never answers
/// again.
pub const MAX_COPY_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long a copy used in place of a fetch is kept in memory before the host is tried again.
pub const COPY_RETRY: Duration = MIN_CACHE;
/// Longest document URL.
pub const MAX_URL_CHARS: usize = 2_000;

/// Whether `client_id` names a metadata document: an `https` URL with a path (the draft: "MUST
/// contain a path component"). Every other client id is a registered one.
pub fn is_document_url(client_id: &str) -> bool {
    client_id.starts_with("https://")
        && url::Url::parse(client_id).is_ok_and(|u| u.host_str().is_some() && u.path() != "/")
}

/// A validated document: the client as the consent page and the redirect checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientDocument {
    /// The document's URL, which is the `client_id`.
    pub client_id: String,
    /// `client_name`, or the host when it has none.
    pub client_name: String,
    /// The host that serves the document (what the owner should recognise).
    pub host: String,
    /// Where the client may be sent back to.
    pub redirect_uris: Vec<String>,
}

impl ClientDocument {
    /// The listed redirect URI `requested` matches ([`redirect_matches`]), if any.
    pub fn allows_redirect(&self, requested: &str) -> bool {
        self.redirect_uris.iter().any(|r| redirect_matches(r, requested))
    }
}

/// Why a document cannot be used; [`std::fmt::Display`] names the field or step and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// The URL, its addresses or the document breaks a rule (the client must fix it).
    #[error("client metadata document {url}: {rule}")]
    Invalid {
        /// The document's URL.
        url: String,
        /// What is wrong.
        rule: String,
    },
    /// The host did not answer in time or the connection failed: worth retrying.
    #[error("client metadata document {url}: {reason}")]
    Unavailable {
        /// The document's URL.
        url: String,
        /// What happened.
        reason: String,
    },
}

fn invalid(url: &str, rule: impl Into<String>) -> DocumentError {
    DocumentError::Invalid { url: url.to_owned(), rule: rule.into() }
}

/// Whether `requested` may be used where `listed` is registered or listed: the same URI, or —
/// for a plain-`http` loopback one (`localhost`, `127.0.0.1`, `[::1]`) — the same but for the
/// port (RFC 8252 §7.3: "MUST allow any port to be specified at the time of the request for
/// loopback IP redirect URIs").
pub fn redirect_matches(listed: &str, requested: &str) -> bool {
    if listed == requested {
        return true;
    }
    let (Ok(l), Ok(r)) = (url::Url::parse(listed), url::Url::parse(requested)) else {
        return false;
    };
    let loopback = |u: &url::Url| {
        u.scheme() == "http"
            && match u.host() {
                Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                None => false,
            }
    };
    loopback(&l)
        && loopback(&r)
        && l.host_str() == r.host_str()
        && l.path() == r.path()
        && l.query() == r.query()
        && r.fragment().is_none()
        && r.username().is_empty()
        && r.password().is_none()
}

/// `uri` without its port when it is a plain-`http` loopback one (the part [`redirect_matches`]
/// compares); any other URI unchanged.
pub fn loopback_without_port(uri: &str) -> String {
    match url::Url::parse(uri) {
        Ok(mut u)
            if u.scheme() == "http"
                && u.port().is_some()
                && LOOPBACK_HOSTS.contains(&u.host_str().unwrap_or_default()) =>
        {
            let _ = u.set_port(None);
            u.to_string()
        }
        _ => uri.to_owned(),
    }
}

/// Checks a fetched document (`body`) served at `url`.
///
/// # Errors
/// [`DocumentError::Invalid`] naming the field and the rule.
pub fn validate(url: &str, body: &[u8]) -> Result<ClientDocument, DocumentError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| invalid(url, format!("not JSON ({e})")))?;
    let o = v.as_object().ok_or_else(|| invalid(url, "must be a JSON object"))?;
    match o.get("client_id") {
        Some(Value::String(id)) if id == url => {}
        Some(Value::String(id)) => {
            return Err(invalid(url, format!("client_id: must be the document's own URL, not {id}")));
        }
        _ => return Err(invalid(url, "client_id: required, the document's own URL")),
    }
    // A document is public: a secret in it would be everyone's.
    for field in ["client_secret", "client_secret_expires_at"] {
        if o.contains_key(field) {
            return Err(invalid(url, format!("{field}: a metadata document must not carry a secret")));
        }
    }
    let redirect_uris: Vec<String> = match o.get("redirect_uris") {
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| invalid(url, format!("redirect_uris[{i}]: must be a string")))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(invalid(url, "redirect_uris: at least one is required")),
    };
    if redirect_uris.len() > MAX_REDIRECT_URIS {
        return Err(invalid(url, format!("redirect_uris: at most {MAX_REDIRECT_URIS}")));
    }
    for (i, r) in redirect_uris.iter().enumerate() {
        if r.chars().count() > MAX_REDIRECT_URI_CHARS {
            return Err(invalid(url, format!("redirect_uris[{i}]: at most {MAX_REDIRECT_URI_CHARS} characters")));
        }
        match url::Url::parse(r) {
            Ok(u) if u.fragment().is_none() => {}
            Ok(_) => return Err(invalid(url, format!("redirect_uris[{i}]: must not contain a fragment"))),
            Err(e) => return Err(invalid(url, format!("redirect_uris[{i}]: not an absolute URI ({e})"))),
        }
    }
    // The method a public client uses is `none`. `token_endpoint_auth_method` (RFC 7591) is the
    // client's preference; `token_endpoint_auth_methods_supported` (OpenID Connect RP Metadata
    // Choices) lists every method it can use. ChatGPT's document prefers `private_key_jwt` and
    // supports `none`: `none` among either is a public client, and `none` is what it gets.
    let mut methods: Vec<&str> = Vec::new();
    for field in ["token_endpoint_auth_method", "token_endpoint_auth_methods_supported"] {
        match o.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => methods.push(s.as_str()),
            Some(Value::Array(a)) => {
                for (i, m) in a.iter().enumerate() {
                    methods.push(m.as_str().ok_or_else(|| invalid(url, format!("{field}[{i}]: must be a string")))?);
                }
            }
            Some(_) => return Err(invalid(url, format!("{field}: must be a string or a list of strings"))),
        }
    }
    if !methods.is_empty() && !methods.contains(&"none") {
        let rule = match methods.iter().find(|m| m.starts_with("client_secret")) {
            Some(m) => format!(
                "token_endpoint_auth_method: {m} needs a shared secret, which a public document cannot hold, and none is not offered"
            ),
            None => format!(
                "token_endpoint_auth_method: {} — this server accepts public clients only (none), and none is not offered",
                methods.join(", ")
            ),
        };
        return Err(invalid(url, rule));
    }
    if let Some(g) = o.get("grant_types") {
        let grants: Vec<&str> = g.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        if !grants.contains(&"authorization_code") {
            return Err(invalid(url, "grant_types: must include authorization_code"));
        }
    }
    if let Some(t) = o.get("response_types") {
        let types: Vec<&str> = t.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        if !types.contains(&"code") {
            return Err(invalid(url, "response_types: must include code"));
        }
    }
    let host = url::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default();
    let client_name = match o.get("client_name") {
        None | Some(Value::Null) => host.clone(),
        Some(Value::String(s)) if s.trim().is_empty() => host.clone(),
        Some(Value::String(s)) if s.chars().count() <= MAX_CLIENT_NAME_CHARS => s.trim().to_owned(),
        Some(Value::String(_)) => {
            return Err(invalid(url, format!("client_name: at most {MAX_CLIENT_NAME_CHARS} characters")));
        }
        Some(_) => return Err(invalid(url, "client_name: must be a string")),
    };
    Ok(ClientDocument { client_id: url.to_owned(), client_name, host, redirect_uris })
}

/// How long an answer with `cache_control` may be kept ([`MIN_CACHE`]..=[`MAX_CACHE`]).
pub fn cache_lifetime(cache_control: Option<&str>) -> Duration {
    let Some(cc) = cache_control else { return DEFAULT_CACHE };
    let mut max_age: Option<u64> = None;
    for directive in cc.split(',').map(str::trim) {
        let lower = directive.to_ascii_lowercase();
        if lower == "no-store" || lower == "no-cache" {
            return MIN_CACHE;
        }
        if let Some(v) = lower.strip_prefix("max-age=") {
            max_age = v.trim_matches('"').parse().ok().or(Some(0));
        }
    }
    max_age.map_or(DEFAULT_CACHE, |s| Duration::from_secs(s).clamp(MIN_CACHE, MAX_CACHE))
}

/// Fetched documents, kept by URL.
pub struct Documents {
    resolver: Arc<dyn Resolve>,
    clock: SharedClock,
    /// The development switch (see the module documentation).
    pub allow_loopback: bool,
    cache: Mutex<HashMap<String, (Timestamp, Arc<ClientDocument>)>>,
    /// Fetches made (cache misses), for tests and the measurements.
    fetches: std::sync::atomic::AtomicU64,
    /// Where the last good copy of each document is kept.
    copies: Option<Arc<dyn DocumentCopies>>,
    /// Development: host names served from these loopback addresses (see the module doc).
    pinned: HashMap<String, SocketAddr>,
}

impl Documents {
    /// Documents fetched through `resolver`, timed by `clock`; loopback hosts refused.
    pub fn new(resolver: Arc<dyn Resolve>, clock: SharedClock) -> Self {
        Self {
            resolver,
            clock,
            allow_loopback: false,
            cache: Mutex::new(HashMap::new()),
            fetches: std::sync::atomic::AtomicU64::new(0),
            copies: None,
            pinned: HashMap::new(),
        }
    }

    /// The same, keeping the last good copy of each document in `copies` and using it when a
    /// fetch fails for a reason that is not the document's.
    #[must_use]
    pub fn with_copies(mut self, copies: Arc<dyn DocumentCopies>) -> Self {
        self.copies = Some(copies);
        self
    }

    /// Development (with [`Self::allowing_loopback`] only): each `(host, address)` is fetched
    /// from that loopback address instead of the host's own; others are ignored.
    #[must_use]
    pub fn pinning(mut self, hosts: impl IntoIterator<Item = (String, SocketAddr)>) -> Self {
        self.pinned =
            hosts.into_iter().filter(|(_, a)| a.ip().is_loopback()).map(|(h, a)| (h.to_ascii_lowercase(), a)).collect();
        self
    }

    /// Parses `FOUNDRY_DEV_DOCUMENT_HOSTS`'s form, `host=127.0.0.1:port,host2=…`; entries that
    /// are not a host and a loopback address are skipped.
    pub fn parse_pins(spec: &str) -> Vec<(String, SocketAddr)> {
        spec.split(',')
            .filter_map(|e| e.trim().split_once('='))
            .filter_map(|(h, a)| Some((h.trim().to_owned(), a.trim().parse::<SocketAddr>().ok()?)))
            .filter(|(h, a)| !h.is_empty() && a.ip().is_loopback())
            .collect()
    }

    /// The same, with the development switch set to `allow`.
    #[must_use]
    pub fn allowing_loopback(mut self, allow: bool) -> Self {
        self.allow_loopback = allow;
        self
    }

    /// How many documents were fetched (not served from the cache) so far.
    pub fn fetches(&self) -> u64 {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The document at `url`, from the cache while it is fresh.
    ///
    /// # Errors
    /// [`DocumentError`]: the URL, an address, the answer or the document breaks a rule, or the
    /// host could not be reached.
    pub async fn get(&self, url: &str) -> Result<Arc<ClientDocument>, DocumentError> {
        let now = self.clock.now();
        if let Some((until, doc)) = lock(&self.cache).get(url)
            && *until > now
        {
            return Ok(Arc::clone(doc));
        }
        let (doc, keep) = match self.fetch(url).await {
            Ok((doc, keep, body)) => {
                if let Some(copies) = &self.copies
                    && let Err(e) = copies.keep_document_copy(url, &body, now).await
                {
                    tracing::warn!(error = %domain::errors::ErrorChain(&e), document = url, "keeping a document's copy");
                }
                (doc, keep)
            }
            Err(e @ DocumentError::Unavailable { .. }) => match self.last_good_copy(url, now).await {
                Some(doc) => {
                    tracing::warn!(error = %e, document = url, "the host refused the fetch: using the last good copy");
                    (doc, COPY_RETRY)
                }
                None => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let doc = Arc::new(doc);
        let mut cache = lock(&self.cache);
        cache.retain(|_, (until, _)| *until > now);
        if cache.len() >= MAX_CACHED_DOCUMENTS
            && let Some(soonest) = cache.iter().min_by_key(|(_, (until, _))| *until).map(|(k, _)| k.clone())
        {
            cache.remove(&soonest);
        }
        cache.insert(url.to_owned(), (now.plus(keep), Arc::clone(&doc)));
        Ok(doc)
    }

    /// The kept copy of `url` if it was fetched at most [`MAX_COPY_AGE`] before `now` and still
    /// passes validation (the rules may have changed since), with when it was fetched logged.
    async fn last_good_copy(&self, url: &str, now: Timestamp) -> Option<ClientDocument> {
        let copies = self.copies.as_ref()?;
        let (body, fetched) = match copies.document_copy(url).await {
            Ok(Some(c)) => c,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(error = %domain::errors::ErrorChain(&e), document = url, "reading a document's copy");
                return None;
            }
        };
        if now.since(fetched) > MAX_COPY_AGE {
            tracing::warn!(document = url, fetched = %fetched.rfc3339(), "the last good copy is too old to use");
            return None;
        }
        let doc = validate(url, body.as_bytes()).ok()?;
        tracing::info!(document = url, fetched = %fetched.rfc3339(), "the copy used was fetched then");
        Some(doc)
    }

    /// Checks the URL and its addresses, fetches and validates the document; with the body.
    async fn fetch(&self, url: &str) -> Result<(ClientDocument, Duration, String), DocumentError> {
        let parsed = self.check_url(url)?;
        let host = parsed.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = parsed.port_or_known_default().unwrap_or(443);
        let pinned = self.pinned.get(&host.to_ascii_lowercase()).filter(|_| self.allow_loopback);
        let addrs = match pinned {
            Some(a) => vec![*a],
            None => self.resolver.resolve(&host, port).await.map_err(|e| DocumentError::Unavailable {
                url: url.to_owned(),
                reason: format!("cannot resolve {host} ({e})"),
            })?,
        };
        if addrs.is_empty() {
            return Err(DocumentError::Unavailable { url: url.to_owned(), reason: format!("cannot resolve {host}") });
        }
        let mut loopback = false;
        for a in &addrs {
            if a.ip().is_loopback() && self.allow_loopback {
                loopback = true;
                continue;
            }
            check_address(a.ip(), UrlPolicy::Cloud)
                .map_err(|why| invalid(url, format!("{host} resolves to {why}, which is never fetched")))?;
        }
        self.fetches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let client = pinned_client(&host, &addrs, loopback)
            .map_err(|e| DocumentError::Unavailable { url: url.to_owned(), reason: e })?;
        let unavailable = |e: reqwest::Error| DocumentError::Unavailable {
            url: url.to_owned(),
            reason: if e.is_timeout() { "timed out".to_owned() } else { "the request failed".to_owned() },
        };
        let work = async {
            let mut res = client
                .get(parsed.clone())
                .header("accept", "application/json")
                .header("user-agent", "foundry-connect-oauth/1")
                .send()
                .await
                .map_err(unavailable)?;
            let status = res.status();
            if status.is_redirection() {
                return Err(invalid(
                    url,
                    format!("answered {} (a redirect): redirects are not followed", status.as_u16()),
                ));
            }
            // Refusals of the fetcher, not of the document: a bot wall, a rate limit, an outage.
            if status.is_server_error() || [401, 403, 407, 408, 425, 429].contains(&status.as_u16()) {
                return Err(DocumentError::Unavailable {
                    url: url.to_owned(),
                    reason: format!("answered {}", status.as_u16()),
                });
            }
            if status != reqwest::StatusCode::OK {
                return Err(invalid(url, format!("answered {} instead of 200", status.as_u16())));
            }
            if res.content_length().is_some_and(|n| n > MAX_DOCUMENT_BYTES as u64) {
                return Err(invalid(url, format!("larger than {MAX_DOCUMENT_BYTES} bytes")));
            }
            let keep = cache_lifetime(res.headers().get("cache-control").and_then(|v| v.to_str().ok()));
            // A page where JSON was asked for is a challenge (a bot wall answering 200).
            if res
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("text/html"))
            {
                return Err(DocumentError::Unavailable {
                    url: url.to_owned(),
                    reason: "answered a web page, not JSON (a bot challenge?)".into(),
                });
            }
            let mut body = Vec::new();
            while let Some(chunk) = res.chunk().await.map_err(unavailable)? {
                body.extend_from_slice(&chunk);
                if body.len() > MAX_DOCUMENT_BYTES {
                    return Err(invalid(url, format!("larger than {MAX_DOCUMENT_BYTES} bytes")));
                }
            }
            let doc = validate(url, &body)?;
            // Validated JSON is UTF-8.
            Ok((doc, keep, String::from_utf8_lossy(&body).into_owned()))
        };
        match tokio::time::timeout(FETCH_TIMEOUT, work).await {
            Ok(r) => r,
            Err(_) => Err(DocumentError::Unavailable { url: url.to_owned(), reason: "timed out".into() }),
        }
    }

    /// The rules on the URL itself (an IP literal's address is checked with the resolved ones).
    fn check_url(&self, url: &str) -> Result<url::Url, DocumentError> {
        if url.chars().count() > MAX_URL_CHARS {
            return Err(invalid(url, format!("the URL is longer than {MAX_URL_CHARS} characters")));
        }
        let u = url::Url::parse(url).map_err(|e| invalid(url, format!("not an absolute URL ({e})")))?;
        if u.scheme() != "https" {
            return Err(invalid(url, "must use https"));
        }
        if !u.username().is_empty() || u.password().is_some() {
            return Err(invalid(url, "must not contain a user name or password"));
        }
        if u.fragment().is_some() {
            return Err(invalid(url, "must not contain a #fragment"));
        }
        if u.path() == "/" || u.path().is_empty() {
            return Err(invalid(url, "must have a path"));
        }
        match u.host() {
            Some(url::Host::Domain(d)) if d.eq_ignore_ascii_case("localhost") && !self.allow_loopback => {
                Err(invalid(url, "localhost resolves to a loopback address, which is never fetched"))
            }
            Some(_) => Ok(u),
            None => Err(invalid(url, "must name a host")),
        }
    }
}

/// A client that connects only to `addrs` for `host` (checked before), follows no redirect and
/// uses no proxy (one from the environment would connect by itself, past the checked addresses).
fn pinned_client(host: &str, addrs: &[SocketAddr], loopback: bool) -> Result<reqwest::Client, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(FETCH_TIMEOUT)
        .resolve_to_addrs(host, addrs)
        .tls_danger_accept_invalid_certs(loopback)
        .build()
        .map_err(|e| format!("cannot build an HTTP client ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://claude.ai/oauth/mcp-oauth-client-metadata";
    /// ChatGPT's document as published (the corpus in `tests/fixtures/hosts`).
    const CHATGPT_DOCUMENT: &str = include_str!("../../../tests/fixtures/hosts/documents/chatgpt-shared.json");

    fn doc(extra: Value) -> Vec<u8> {
        let mut v = serde_json::json!({
            "client_id": URL,
            "client_name": "Claude",
            "redirect_uris": ["https://claude.ai/api/mcp/auth_callback"],
            "token_endpoint_auth_method": "none",
        });
        if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
            for (k, x) in e {
                if x.is_null() {
                    o.remove(&k);
                } else {
                    o.insert(k, x);
                }
            }
        }
        serde_json::to_vec(&v).unwrap_or_default()
    }

    fn rule(r: Result<ClientDocument, DocumentError>) -> String {
        match r {
            Err(DocumentError::Invalid { rule, .. }) => rule,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_good_document_and_each_refusal_names_its_field() {
        let d = validate(URL, &doc(serde_json::json!({}))).unwrap();
        assert_eq!((d.client_name.as_str(), d.host.as_str()), ("Claude", "claude.ai"));
        assert!(
            rule(validate(URL, &doc(serde_json::json!({"client_id": "https://evil.example/doc"}))))
                .starts_with("client_id: must be the document's own URL")
        );
        assert!(rule(validate(URL, &doc(serde_json::json!({"client_id": null})))).starts_with("client_id: required"));
        assert!(rule(validate(URL, &doc(serde_json::json!({"redirect_uris": []})))).starts_with("redirect_uris:"));
        assert!(rule(validate(URL, &doc(serde_json::json!({"client_secret": "x"})))).starts_with("client_secret:"));
        assert!(
            rule(validate(URL, &doc(serde_json::json!({"token_endpoint_auth_method": "private_key_jwt"}))))
                .contains("public clients only")
        );
        assert!(
            rule(validate(URL, &doc(serde_json::json!({"token_endpoint_auth_method": "client_secret_basic"}))))
                .contains("shared secret")
        );
        assert!(
            rule(validate(URL, &doc(serde_json::json!({"grant_types": ["client_credentials"]}))))
                .starts_with("grant_types:")
        );
        assert!(rule(validate(URL, b"[1]")).starts_with("must be a JSON object"));
        // ChatGPT's published document (tests/fixtures/hosts): it prefers private_key_jwt and
        // lists none among the methods it supports.
        let chatgpt = CHATGPT_DOCUMENT.trim_end();
        let chatgpt_url = "https://chatgpt.com/oauth/client.json";
        let d = validate(chatgpt_url, chatgpt.as_bytes()).expect("ChatGPT's document");
        assert_eq!((d.client_name.as_str(), d.host.as_str()), ("ChatGPT", "chatgpt.com"));
        assert_eq!(d.redirect_uris, ["https://chatgpt.com/connector_platform_oauth_redirect"]);
        // The same preference without none among the supported methods cannot be used.
        let no_none = chatgpt.replace(r#"["none", "private_key_jwt"]"#, r#"["private_key_jwt"]"#);
        assert_ne!(no_none, chatgpt, "the fixture lists its supported methods as this test expects");
        assert!(rule(validate(chatgpt_url, no_none.as_bytes())).contains("none is not offered"));
        // A secret-based preference with none supported is a public client too.
        assert!(
            validate(
                URL,
                &doc(serde_json::json!({"token_endpoint_auth_method": "client_secret_basic",
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "none"]}))
            )
            .is_ok()
        );
        // No method at all: a public client.
        assert!(
            validate(URL, &doc(serde_json::json!({"token_endpoint_auth_method": null, "client_name": null})))
                .is_ok_and(|d| d.client_name == "claude.ai")
        );
    }

    #[test]
    fn loopback_redirects_match_on_any_port_and_nothing_else_does() {
        assert!(redirect_matches("http://localhost/callback", "http://localhost:53682/callback"));
        assert!(redirect_matches("http://127.0.0.1:1/cb", "http://127.0.0.1:9/cb"));
        assert!(redirect_matches("http://[::1]/cb", "http://[::1]:8080/cb"));
        assert!(!redirect_matches("http://localhost/callback", "http://localhost:53682/other"));
        assert!(!redirect_matches("http://localhost/callback", "http://127.0.0.1:53682/callback"));
        assert!(!redirect_matches("http://localhost/callback", "http://localhost:1/callback?x=1"));
        assert!(!redirect_matches(
            "https://claude.ai/api/mcp/auth_callback",
            "https://claude.ai:444/api/mcp/auth_callback"
        ));
        assert!(!redirect_matches("http://evil.example/cb", "http://evil.example:81/cb"));
    }

    #[test]
    fn cache_headers_decide_how_long_within_the_bounds() {
        assert_eq!(cache_lifetime(None), DEFAULT_CACHE);
        assert_eq!(cache_lifetime(Some("public, max-age=600")), Duration::from_secs(600));
        assert_eq!(cache_lifetime(Some("max-age=5")), MIN_CACHE);
        assert_eq!(cache_lifetime(Some("max-age=99999999")), MAX_CACHE);
        assert_eq!(cache_lifetime(Some("no-store")), MIN_CACHE);
    }

    #[test]
    fn document_urls_are_https_with_a_path() {
        assert!(is_document_url(URL));
        assert!(!is_document_url("https://claude.ai/"));
        assert!(!is_document_url("http://claude.ai/doc"));
        assert!(!is_document_url("3f2a9c0e-client"));
    }
}
