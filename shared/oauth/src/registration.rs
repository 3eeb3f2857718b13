//! Dynamic client registration (RFC 7591): the request's checks ([`validate_registration`])
//! and the [`Registrar`] that reuses, limits and sweeps registrations over any registry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use domain::clients::{
    ClientSummary, ClientUseRecord, RegisteredClient, RegistryName, fingerprint, hour_of, parse_registry_name,
    registry_name, source_tag,
};
use domain::clock::{SharedClock, Timestamp};
use domain::store::{ClientUse, RegisterClients};
use http::{HeaderValue, Method, StatusCode, header};
use serde_json::{Value, json};

use crate::{
    ClientSource, DEFAULT_REGISTRATION_CAP, DEFAULT_REGISTRATIONS_PER_HOUR, DEFAULT_REGISTRATIONS_PER_SOURCE,
    LOOPBACK_HOSTS, MAX_CLIENT_NAME_CHARS, MAX_REDIRECT_URIS, MAX_REGISTRATION_BYTES, RedirectPolicy, json_response,
    lock, media_type_is, oauth_error,
};
use auth::ScopeSpelling;
use tools::{SCOPE_OWNER, SCOPE_READ, SCOPE_RUN};

use crate::cimd::loopback_without_port;

/// A registration the request asks for, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// `client_name`, or `MCP client`.
    pub client_name: String,
    /// The redirect URIs, without duplicates, in the order given.
    pub redirect_uris: Vec<String>,
}

/// An RFC 7591 error answer: `error` code and a description naming the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationError {
    /// `invalid_redirect_uri` or `invalid_client_metadata`.
    pub code: &'static str,
    /// What is wrong, e.g. `redirect_uris[0]: plain http is allowed only for localhost`.
    pub description: String,
}

impl RegistrationError {
    fn metadata(description: impl Into<String>) -> Self {
        Self { code: "invalid_client_metadata", description: description.into() }
    }
}

/// Validates a registration request body (RFC 7591 §2): `redirect_uris` (required, each
/// allowed by `policy`, the first unsafe one named), `client_name`, `grant_types` (must include
/// `authorization_code`), `response_types` (must include `code`). What the server decides is
/// not refused (RFC 7591 §2 lets it replace what is asked): a public client is registered
/// whatever `token_endpoint_auth_method` asks, only the authorization-code and refresh grants
/// are granted, and scopes other than the read and run scopes are ignored (Claude registers
/// with `claudeai`) — except the owner's, which is refused by name. Other fields are ignored.
///
/// # Errors
/// The first problem found, as an RFC 7591 error.
pub fn validate_registration(body: &[u8], policy: &RedirectPolicy) -> Result<Registration, RegistrationError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| RegistrationError::metadata(format!("body: not JSON ({e})")))?;
    let o = v.as_object().ok_or_else(|| RegistrationError::metadata("body: must be a JSON object"))?;
    let strings = |field: &str| -> Result<Option<Vec<String>>, RegistrationError> {
        match o.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    x.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| RegistrationError::metadata(format!("{field}[{i}]: must be a string")))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(RegistrationError::metadata(format!("{field}: must be an array of strings"))),
        }
    };
    let uris = strings("redirect_uris")?.unwrap_or_default();
    if uris.is_empty() {
        return Err(RegistrationError {
            code: "invalid_redirect_uri",
            description: "redirect_uris: at least one is required".into(),
        });
    }
    if uris.len() > MAX_REDIRECT_URIS {
        return Err(RegistrationError {
            code: "invalid_redirect_uri",
            description: format!("redirect_uris: at most {MAX_REDIRECT_URIS}"),
        });
    }
    for (i, u) in uris.iter().enumerate() {
        policy.check(u).map_err(|rule| RegistrationError {
            code: "invalid_redirect_uri",
            description: format!("redirect_uris[{i}]: {rule}"),
        })?;
    }
    let mut redirect_uris: Vec<String> = Vec::new();
    for u in uris {
        if !redirect_uris.contains(&u) {
            redirect_uris.push(u);
        }
    }
    let client_name = match o.get("client_name") {
        None | Some(Value::Null) => "MCP client".to_owned(),
        Some(Value::String(s)) if s.trim().is_empty() => "MCP client".to_owned(),
        Some(Value::String(s)) if s.chars().count() <= MAX_CLIENT_NAME_CHARS => s.trim().to_owned(),
        Some(Value::String(_)) => {
            return Err(RegistrationError::metadata(format!(
                "client_name: at most {MAX_CLIENT_NAME_CHARS} characters"
            )));
        }
        Some(_) => return Err(RegistrationError::metadata("client_name: must be a string")),
    };
    if let Some(grants) = strings("grant_types")?
        && !grants.iter().any(|g| g == "authorization_code")
    {
        return Err(RegistrationError::metadata("grant_types: must include authorization_code"));
    }
    if let Some(types) = strings("response_types")?
        && !types.iter().any(|t| t == "code")
    {
        return Err(RegistrationError::metadata("response_types: must include code"));
    }
    match o.get("scope") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            if let Some(scope) =
                s.split_whitespace().find(|scope| scope.replacen("osfoundry/", "osfoundry:", 1) == SCOPE_OWNER)
            {
                return Err(RegistrationError::metadata(format!(
                    "scope: {scope} is the owner's and cannot be granted to a connected client"
                )));
            }
        }
        Some(_) => return Err(RegistrationError::metadata("scope: must be a space-separated string")),
    }
    Ok(Registration { client_name, redirect_uris })
}

/// How many registrations [`Registrar`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistrationLimits {
    /// New clients per UTC hour, from everywhere (loopback aside when [`Self::per_loopback`]
    /// is set).
    pub per_hour: usize,
    /// New clients per UTC hour from one source address.
    pub per_source: usize,
    /// New clients per UTC hour from this machine's loopback addresses (127.0.0.0/8, `::1`)
    /// together, counted apart from every other source and from [`Self::per_hour`]: the person
    /// at the machine connecting each of their clients, not a flood from the network. `None`:
    /// a loopback address is a source like any other (the cloud, where no caller is on the
    /// function's loopback — and where the cloud shape's tests send from 127.0.0.x as distinct
    /// addresses).
    pub per_loopback: Option<usize>,
    /// Most dynamically registered clients in all (unused old ones and idle ones are removed
    /// to make room).
    pub cap: usize,
}

impl Default for RegistrationLimits {
    fn default() -> Self {
        Self {
            per_hour: DEFAULT_REGISTRATIONS_PER_HOUR,
            per_source: DEFAULT_REGISTRATIONS_PER_SOURCE,
            per_loopback: None,
            cap: DEFAULT_REGISTRATION_CAP,
        }
    }
}

/// What raises each of [`RegistrationLimits`]' hourly limits where the server runs, named in
/// its `429` (an environment variable locally, a stack parameter in the cloud). Empty: not
/// named.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitSettings {
    /// Raises [`RegistrationLimits::per_hour`].
    pub per_hour: &'static str,
    /// Raises [`RegistrationLimits::per_source`].
    pub per_source: &'static str,
    /// Raises [`RegistrationLimits::per_loopback`].
    pub per_loopback: &'static str,
}

/// The source of a request that reached a loopback-only server through a proxy or tunnel on
/// this machine ([`peer_source`]): not an address, so never counted as loopback.
pub const FORWARDED_SOURCE: &str = "forwarded";

/// Request headers a proxy or tunnel adds (cloudflared, ngrok, Tailscale Funnel, VS Code and
/// other tunnels send at least `X-Forwarded-For`).
const FORWARDING_HEADERS: [&str; 4] = ["forwarded", "x-forwarded-for", "x-real-ip", "cf-connecting-ip"];

/// The [`ClientSource`] of a registration that came to a server listening on loopback from
/// the TCP `peer`: its address, unless the request came through a proxy or a tunnel — a
/// forwarding header (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`, `CF-Connecting-IP`) or a `Host` that is not a loopback name — then
/// [`FORWARDED_SOURCE`]. A tunnel's agent connects from this machine, so its requests arrive
/// from a loopback peer too; they share one source with the non-loopback limit (the address a
/// forwarding header names could be set by anyone, so it is not counted by). A request from
/// this machine that sends such a header only lowers its own limit.
pub fn peer_source(peer: std::net::IpAddr, headers: &http::HeaderMap) -> ClientSource {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !name.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let loopback_name = LOOPBACK_HOSTS.iter().any(|h| h.eq_ignore_ascii_case(name));
    if !loopback_name || FORWARDING_HEADERS.iter().any(|h| headers.contains_key(*h)) {
        return ClientSource(FORWARDED_SOURCE.to_owned());
    }
    ClientSource(peer.to_string())
}

/// Whether `source` is an address of this machine's loopback (an IPv4-mapped one too).
fn is_loopback(source: &str) -> bool {
    match source.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        Ok(ip) => ip.is_loopback(),
        Err(_) => false,
    }
}

/// The source every loopback address is counted as, when loopback has its own limit.
const LOOPBACK_SOURCE: &str = "loopback";

/// How long the registry's listing is reused before it is read again.
pub const LISTING_TTL: std::time::Duration = std::time::Duration::from_secs(60);
/// A registration never used this long after its hour began may be removed to make room.
pub const UNUSED_CLIENT_AGE: std::time::Duration = std::time::Duration::from_secs(2 * 3600);
/// A registration last used this long ago may be removed to make room: the refresh tokens
/// of its last sign-in have expired by then (both servers' refresh tokens live this long:
/// [`crate::local::REFRESH_TTL`], and the Cognito app clients' validity, held equal where
/// they are made), so its chat needs a browser sign-in in any case.
pub const IDLE_CLIENT_AGE: std::time::Duration = crate::local::REFRESH_TTL;

/// Dynamic client registration (RFC 7591) over any [`RegisterClients`] registry.
pub struct Registrar<R: ?Sized> {
    registry: Arc<R>,
    redirects: RedirectPolicy,
    scopes: ScopeSpelling,
    clock: SharedClock,
    limits: RegistrationLimits,
    /// What raises each limit, named in the refusals.
    settings: LimitSettings,
    /// Where use is recorded; with it, never-used old registrations, and ones idle for
    /// [`IDLE_CLIENT_AGE`], are removed at the cap.
    usage: Option<Arc<dyn ClientUse>>,
    /// The registry's listing and when it was read, kept up to date with this instance's own
    /// creations and deletions.
    listing: Mutex<Option<(Timestamp, Vec<ClientSummary>)>>,
    /// Clients known to be in use, each until when it cannot be idle (`None`: for good, its
    /// last use being unknown). Use only moves later, so a remembered time is never too late.
    kept: Mutex<BTreeMap<String, Option<Timestamp>>>,
    /// A callback every new client gets beside its own (the cloud facade's, which Cognito
    /// returns to), left out when clients are compared and shown.
    owned_callback: Option<String>,
}

impl<R: RegisterClients + ?Sized> Registrar<R> {
    /// A registrar over `registry`. `usage`: where the token endpoint records each client's
    /// tokens ([`ClientUse`]); without it no registration is ever removed as unused.
    pub fn new(
        registry: Arc<R>,
        redirects: RedirectPolicy,
        scopes: ScopeSpelling,
        clock: SharedClock,
        limits: RegistrationLimits,
        usage: Option<Arc<dyn ClientUse>>,
    ) -> Self {
        Self {
            registry,
            redirects,
            scopes,
            clock,
            limits,
            settings: LimitSettings::default(),
            usage,
            listing: Mutex::new(None),
            kept: Mutex::new(BTreeMap::new()),
            owned_callback: None,
        }
    }

    /// Gives every new client `callback` too (see [`crate::facade::CALLBACK_PATH`]).
    #[must_use]
    pub fn with_owned_callback(mut self, callback: String) -> Self {
        self.owned_callback = Some(callback);
        self
    }

    /// Names `settings` in each `429` as what raises its limit.
    #[must_use]
    pub fn with_settings(mut self, settings: LimitSettings) -> Self {
        self.settings = settings;
        self
    }

    /// `uris` without the owned callback.
    fn own<'a>(&self, uris: &'a [String]) -> impl Iterator<Item = &'a String> {
        let owned = self.owned_callback.clone();
        uris.iter().filter(move |u| owned.as_deref() != Some(u.as_str()))
    }

    /// Answers `POST /register`.
    ///
    /// The same `client_name` and redirect URIs get the client created the first time (found
    /// by the name's fingerprint, its redirect URIs compared). Otherwise a new client, unless
    /// this hour's registrations from this source ([`ClientSource`]; every loopback address
    /// together when loopback has its own limit) or from everywhere, or all registrations,
    /// reached their limit (`429` naming the limit and [`LimitSettings`]' setting that raises
    /// it, with `Retry-After` the end of the hour / `503`, `temporarily_unavailable`); at the
    /// cap, registrations never used and older than [`UNUSED_CLIENT_AGE`], and ones last used
    /// longer ago than [`IDLE_CLIENT_AGE`], are removed first.
    /// Limits are counted from the registry's names (listed at most once per [`LISTING_TTL`]
    /// per instance), so registrations racing, or arriving at another instance, can overshoot:
    /// the limits are a brake on floods, not an exact quota. A flood from one address is
    /// refused by its own limit long before it reaches the hourly one, so other clients keep
    /// registering.
    pub async fn handle(&self, req: http::Request<Bytes>) -> http::Response<Bytes> {
        if req.method() != Method::POST {
            let mut r = oauth_error(StatusCode::METHOD_NOT_ALLOWED, "invalid_request", "use POST");
            r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
            return r;
        }
        // A registration is a JSON document. Refusing other types also keeps any web page from
        // spending the registration quota cross-origin: a form or `text/plain` post needs no
        // preflight, `application/json` does.
        if !media_type_is(req.headers(), "application/json") {
            return oauth_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_client_metadata",
                "Content-Type: must be application/json",
            );
        }
        if req.body().len() > MAX_REGISTRATION_BYTES {
            return oauth_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_client_metadata",
                &format!("body: at most {MAX_REGISTRATION_BYTES} bytes"),
            );
        }
        let reg = match validate_registration(req.body(), &self.redirects) {
            Ok(r) => r,
            Err(e) => return oauth_error(StatusCode::BAD_REQUEST, e.code, &e.description),
        };
        let source = req.extensions().get::<ClientSource>().map(|s| s.0.as_str()).unwrap_or_default();
        match self.register(&reg, source).await {
            Ok(client) => {
                let mut r = json_response(StatusCode::CREATED, &self.client_document(&reg, &client));
                r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                r
            }
            Err(refusal @ (Refusal::Hourly | Refusal::Source | Refusal::Loopback)) => {
                let (whence, most, setting) = match refusal {
                    Refusal::Source => (" from this address", self.limits.per_source, self.settings.per_source),
                    Refusal::Loopback => {
                        (" from this machine", self.limits.per_loopback.unwrap_or_default(), self.settings.per_loopback)
                    }
                    _ => ("", self.limits.per_hour, self.settings.per_hour),
                };
                let description = if setting.is_empty() {
                    format!("too many new clients{whence} this hour (at most {most}); retry later")
                } else {
                    format!("too many new clients{whence} this hour (at most {most}); raise {setting} or retry later")
                };
                let mut r = oauth_error(StatusCode::TOO_MANY_REQUESTS, "temporarily_unavailable", &description);
                let now = self.clock.now().as_epoch_seconds();
                let to_next_hour = 3600 - now.rem_euclid(3600);
                if let Ok(v) = HeaderValue::from_str(&to_next_hour.to_string()) {
                    r.headers_mut().insert(header::RETRY_AFTER, v);
                }
                r
            }
            Err(Refusal::Cap) => oauth_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                &format!(
                    "this server has {} registered clients, its limit; its owner can remove unused ones",
                    self.limits.cap
                ),
            ),
            Err(Refusal::Store(e)) => {
                tracing::error!(error = %domain::errors::ErrorChain(&e), "client registration failed");
                oauth_error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "retry later")
            }
        }
    }

    /// The registry's clients, from the listing read at most [`LISTING_TTL`] ago.
    async fn listing(&self) -> Result<Vec<ClientSummary>, Refusal> {
        let now = self.clock.now();
        if let Some((at, clients)) = lock(&self.listing).as_ref()
            && now.since(*at) < LISTING_TTL
        {
            return Ok(clients.clone());
        }
        let clients = self.registry.list_clients().await.map_err(Refusal::Store)?;
        *lock(&self.listing) = Some((now, clients.clone()));
        Ok(clients)
    }

    fn remember(&self, change: impl FnOnce(&mut Vec<ClientSummary>)) {
        if let Some((_, clients)) = lock(&self.listing).as_mut() {
            change(clients);
        }
    }

    async fn register(&self, reg: &Registration, source: &str) -> Result<RegisteredClient, Refusal> {
        // A desktop client registers again with each new loopback port: those are one client
        // (any port is accepted on a listed loopback redirect, RFC 8252 §7.3).
        let same: Vec<String> = reg.redirect_uris.iter().map(|u| loopback_without_port(u)).collect();
        let fp = fingerprint(&reg.client_name, &same);
        let clients = self.listing().await?;
        let mut registered: Vec<(&str, RegistryName<'_>)> =
            clients.iter().filter_map(|c| parse_registry_name(&c.name).map(|n| (c.client_id.as_str(), n))).collect();
        let wanted: BTreeSet<String> = same.iter().cloned().collect();
        for (id, _) in registered.iter().filter(|(_, n)| n.fingerprint == fp) {
            if let Some(c) = self.registry.get_client(id).await.map_err(Refusal::Store)?
                && self.own(&c.redirect_uris).map(|u| loopback_without_port(u)).collect::<BTreeSet<_>>() == wanted
            {
                return Ok(c);
            }
        }
        let now = self.clock.now();
        let hour = hour_of(now);
        // Every loopback address is one source under its own limit, and not counted in the
        // hourly one (the person at this machine is not a flood from the network).
        let loopback = self.limits.per_loopback.filter(|_| is_loopback(source));
        let source = if loopback.is_some() { LOOPBACK_SOURCE } else { source };
        let tag = source_tag(source);
        let this_hour = registered.iter().filter(|(_, n)| n.hour == hour);
        let from_here = this_hour.clone().filter(|(_, n)| n.source == tag).count();
        match loopback {
            Some(most) if from_here >= most => return Err(Refusal::Loopback),
            None if from_here >= self.limits.per_source => return Err(Refusal::Source),
            _ => {}
        }
        let loopback_tag = self.limits.per_loopback.map(|_| source_tag(LOOPBACK_SOURCE));
        let hourly = this_hour.filter(|(_, n)| Some(n.source) != loopback_tag.as_deref()).count();
        if loopback.is_none() && hourly >= self.limits.per_hour {
            return Err(Refusal::Hourly);
        }
        if registered.len() >= self.limits.cap {
            let removed = self.sweep(&registered).await?;
            registered.retain(|(id, _)| !removed.contains(*id));
            if registered.len() >= self.limits.cap {
                return Err(Refusal::Cap);
            }
        }
        let scopes = [self.scopes.spell(SCOPE_READ), self.scopes.spell(SCOPE_RUN)];
        let mut callbacks = reg.redirect_uris.clone();
        callbacks.extend(self.owned_callback.clone());
        let client = self
            .registry
            .create_client(&registry_name(&fp, now, source), &callbacks, &scopes)
            .await
            .map_err(Refusal::Store)?;
        let summary = ClientSummary { client_id: client.client_id.clone(), name: client.name.clone() };
        self.remember(|clients| clients.push(summary));
        Ok(client)
    }

    /// Removes the registrations older than [`UNUSED_CLIENT_AGE`] that were never used, and
    /// those last used longer ago than [`IDLE_CLIENT_AGE`]; the ids removed. A client whose
    /// last use is unknown (recorded by 0.2.0 or earlier) stays.
    async fn sweep(&self, registered: &[(&str, RegistryName<'_>)]) -> Result<BTreeSet<String>, Refusal> {
        let mut removed = BTreeSet::new();
        let Some(usage) = &self.usage else {
            return Ok(removed);
        };
        let now = self.clock.now();
        // Hours compare as strings (`YYYYMMDDHH`); an hour at or before this one began at
        // least UNUSED_CLIENT_AGE ago.
        let old = hour_of(now.minus(UNUSED_CLIENT_AGE));
        for (id, n) in registered.iter().filter(|(_, n)| n.hour <= old.as_str()) {
            match lock(&self.kept).get(*id) {
                Some(None) => continue,
                Some(Some(until)) if now <= *until => continue,
                _ => {}
            }
            let why = match usage.client_use(id).await.map_err(Refusal::Store)? {
                None => "never used".to_owned(),
                Some(ClientUseRecord { last_used_at: Some(last), .. }) => {
                    let until = last.plus(IDLE_CLIENT_AGE);
                    if now <= until {
                        lock(&self.kept).insert((*id).to_owned(), Some(until));
                        continue;
                    }
                    format!("last used at {last}")
                }
                Some(ClientUseRecord { last_used_at: None, .. }) => {
                    lock(&self.kept).insert((*id).to_owned(), None);
                    continue;
                }
            };
            self.registry.delete_client(id).await.map_err(Refusal::Store)?;
            tracing::info!(client_id = id, hour = n.hour, why = %why, "removed a registration to make room");
            removed.insert((*id).to_owned());
        }
        self.remember(|clients| clients.retain(|c| !removed.contains(&c.client_id)));
        Ok(removed)
    }

    fn client_document(&self, reg: &Registration, c: &RegisteredClient) -> Value {
        json!({
            "client_id": c.client_id,
            "client_name": reg.client_name,
            // The URIs asked for: all of them are this client's (a loopback port may differ from
            // the first registration's, and any port is accepted).
            "redirect_uris": reg.redirect_uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "scope": c.scopes.join(" "),
        })
    }
}

enum Refusal {
    Hourly,
    Source,
    Loopback,
    Cap,
    Store(domain::store::StoreError),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request from this machine is its peer's address; one through a tunnel or proxy on this
    /// machine (a forwarding header, or a `Host` that is not a loopback name) is the one
    /// forwarded source, whatever address its headers claim.
    #[test]
    fn a_request_through_a_tunnel_is_the_forwarded_source_not_its_loopback_peer() {
        let source = |headers: &[(&str, &str)]| {
            let mut map = http::HeaderMap::new();
            for (k, v) in headers {
                map.insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
            }
            peer_source(std::net::Ipv4Addr::LOCALHOST.into(), &map).0
        };
        for host in ["127.0.0.1:8787", "localhost:8787", "LOCALHOST", "[::1]:8787", "[::1]"] {
            assert_eq!(source(&[("host", host)]), "127.0.0.1", "{host}");
        }
        for headers in [
            &[("host", "tunnel.example.com")][..],
            &[("host", "localhost.example.com:8787")],
            &[],
            &[("host", "127.0.0.1:8787"), ("x-forwarded-for", "127.0.0.1")],
            &[("host", "localhost:8787"), ("forwarded", "for=192.0.2.60")],
            &[("host", "localhost:8787"), ("x-real-ip", "192.0.2.60")],
            &[("host", "localhost:8787"), ("cf-connecting-ip", "192.0.2.60")],
        ] {
            assert_eq!(source(headers), FORWARDED_SOURCE, "{headers:?}");
        }
        assert!(is_loopback("127.0.0.1") && is_loopback("127.9.9.9") && is_loopback("::1"));
        assert!(is_loopback("::ffff:127.0.0.1"));
        assert!(!is_loopback("198.51.100.9") && !is_loopback(FORWARDED_SOURCE) && !is_loopback(""));
    }

    #[test]
    fn registration_errors_name_the_field_and_rule() {
        let p = RedirectPolicy::cloud(Vec::new());
        let err = |body: &str| validate_registration(body.as_bytes(), &p).expect_err(body);
        assert_eq!(err("[]").description, "body: must be a JSON object");
        assert_eq!(err("{}").code, "invalid_redirect_uri");
        let e = err(r#"{"redirect_uris":["https://claude.ai/api/mcp/auth_callback","javascript:alert(1)"]}"#);
        assert_eq!(e.code, "invalid_redirect_uri");
        assert!(e.description.starts_with("redirect_uris[1]: "), "{}", e.description);
        let cb = r#""redirect_uris":["https://claude.ai/api/mcp/auth_callback"]"#;
        let e = err(&format!(r#"{{{cb},"scope":"osfoundry/read osfoundry/owner"}}"#));
        assert_eq!(
            (e.code, e.description.as_str()),
            (
                "invalid_client_metadata",
                "scope: osfoundry/owner is the owner's and cannot be granted to a connected client"
            )
        );
        assert!(err(&format!(r#"{{{cb},"scope":"osfoundry:owner"}}"#)).description.contains("owner"));
        // A host's own scope is ignored, never refused (Claude registers with `claudeai`).
        assert!(validate_registration(format!(r#"{{{cb},"scope":"claudeai"}}"#).as_bytes(), &p).is_ok());
        assert!(
            err(&format!(r#"{{{cb},"grant_types":["client_credentials"]}}"#)).description.starts_with("grant_types:")
        );
        assert!(err(&format!(r#"{{{cb},"response_types":["token"]}}"#)).description.starts_with("response_types:"));
        // The server decides the authentication method: a public client whatever is asked.
        assert!(
            validate_registration(format!(r#"{{{cb},"token_endpoint_auth_method":"private_key_jwt"}}"#).as_bytes(), &p)
                .is_ok()
        );
        let ok = validate_registration(
            format!(r#"{{{cb},"client_name":"Claude","scope":"osfoundry/read osfoundry/run offline_access","token_endpoint_auth_method":"client_secret_post","grant_types":["authorization_code","refresh_token"]}}"#).as_bytes(),
            &p,
        )
        .expect("valid");
        assert_eq!(ok.client_name, "Claude");
        assert_eq!(ok.redirect_uris, vec!["https://claude.ai/api/mcp/auth_callback"]);
    }
}
