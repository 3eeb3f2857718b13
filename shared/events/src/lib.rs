//! # events — delivering events (SPEC §8) to chat links' subscriptions as signed webhooks — one code path
//! for the cloud's `notify` function (fed by SQS) and the local server (fed by its outbox).
//!
//! **Signing** follows the Standard Webhooks convention: headers `webhook-id` (the event id,
//! stable across redeliveries), `webhook-timestamp` (Unix seconds of this attempt) and
//! `webhook-signature: v1,<base64 HMAC-SHA256 over "<id>.<timestamp>.<body>">`, keyed with the
//! base64-decoded part of the subscription's `whsec_…` secret. A receiver checks the signature
//! and that the timestamp is recent ([`verify`]), so a forged or replayed request is detectable.
//!
//! **Targets.** A task event goes to its chat link's subscription; a run event to the
//! subscription of every chat link of the run's project (runs belong to projects, and those are
//! the project's chats); a desktop event to every subscribed chat link of the owner (a desktop
//! serves all the owner's projects). No subscription: nothing to do, the event is done.
//!
//! **Safety.** The URL is checked again at delivery time ([`crate::webhook_url`]): every address
//! its host resolves to must be allowed, and the request is pinned to those addresses (no second
//! lookup a rebinding DNS could answer differently). 5 s timeout, redirects never followed.
//!
//! **Failures** are retried with backoff ([`backoff`]) and given up after [`MAX_ATTEMPTS`] (the
//! DLQ in the cloud, `dead` in the local outbox); delivery is at least once, so a receiver
//! de-duplicates by `webhook-id`.
//!
//! | module | what |
//! |---|---|
//! | this one | signing, targets, delivery with backoff ([`Notifier`]), the local notifier loop |
//! | [`webhook_url`] | which subscription URLs are allowed (checked when saved and at delivery) |
//! | [`watch`] | the desktop watch: a queued run's silent desktops marked offline (`desktop.offline`) |

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use domain::clock::{SharedClock, Timestamp};
use domain::events::{DeliveryOutcome, Event};
use domain::ids::{ChatLinkId, OwnerId};
use domain::projects::ChatLink;
use domain::store::{EventOutbox, ManageLinks, RecordDeliveries, StoreError};
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub mod watch;
pub mod webhook_url;

use crate::webhook_url::UrlPolicy;

/// An HMAC-SHA256 keyed with `key` (any length is a valid HMAC key).
fn hmac_sha256(key: &[u8]) -> Hmac<Sha256> {
    <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| <Hmac<Sha256> as Mac>::new(&Default::default()))
}

/// The links among `links` (the event's owner's) whose subscriptions want `event`: a task's
/// event its own link's, a desktop's event every subscribed link's, a run's event the
/// subscribed links of its project. The one rule, for the notifier (who to post to) and the
/// cloud publisher (whether to queue the event at all).
pub fn targets_in<'a>(event: &Event, links: &'a [ChatLink]) -> Vec<&'a ChatLink> {
    let subscribed = links.iter().filter(|l| l.subscription.is_some() && l.owner.as_str() == event.data.owner);
    if event.kind.is_task() {
        let link = event.data.chat_link_id.as_deref().unwrap_or_default();
        return subscribed.filter(|l| l.link_id.to_string() == link).collect();
    }
    if event.kind.is_desktop() {
        return subscribed.collect();
    }
    let project = event.data.project_id.as_deref().unwrap_or_default();
    subscribed.filter(|l| l.project_id.to_string() == project).collect()
}

/// The IAM actions the cloud `publish_events` function needs on the table: the owner's links,
/// to queue only the events a subscription wants (`targets_in`). Proven against the emulator.
pub const PUBLISHER_DYNAMODB_ACTIONS: &[&str] = &["dynamodb:Query"];

/// The IAM actions the `notify` function needs on the table: read a link (task events) or the
/// owner's links (run and desktop events), put the delivery outcome, and for the desktop watch
/// read a run, its project and its desktops and mark one offline. Proven against the emulator.
pub const NOTIFIER_DYNAMODB_ACTIONS: &[&str] =
    &["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"];

/// How long one delivery may take.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts before an event is given up (the cloud queue's `maxReceiveCount` is the same):
/// with [`backoff`], about 3 hours of retries (the first eight in about 21 minutes, then one
/// every 15), so a receiver down for an afternoon's deploy still gets its events (issue 59; it
/// was 8, about 21 minutes).
pub const MAX_ATTEMPTS: u32 = 20;
/// How old a `webhook-timestamp` a receiver should accept (the convention's five minutes).
pub const TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(300);

/// The wait before attempt `failed + 1` after `failed` failures: 5 s doubling, at most 15 min
/// (5, 10, 20, 40, 80, 160, 320 s: about ten minutes over the first seven retries).
pub fn backoff(failed: u32) -> Duration {
    Duration::from_secs(5u64.saturating_mul(1u64 << failed.saturating_sub(1).min(20))).min(Duration::from_secs(900))
}

/// Most characters SQS takes in a `MessageGroupId`.
pub const MAX_TENANT_GROUP_CHARS: usize = 128;

/// The tenant an events queue message belongs to, sent as its `MessageGroupId` on the
/// standard events queue. With it, SQS's fair queues give a quiet owner's events to the
/// notifier ahead of another owner's backlog, where a standard queue hands out whatever is
/// oldest (issue 59; docs/scale.md, "Webhooks"). The owner id itself when SQS takes it as it
/// is (1 to [`MAX_TENANT_GROUP_CHARS`] characters, each one of `!` to `~`: a Cognito `sub`
/// always is); otherwise `sha256-` and the id's digest in hex, so every owner id, however
/// long or spelled, maps to one valid group of its own.
pub fn tenant_group(owner: &str) -> String {
    let as_is = !owner.is_empty()
        && owner.chars().count() <= MAX_TENANT_GROUP_CHARS
        && owner.chars().all(|c| ('!'..='~').contains(&c));
    if as_is {
        return owner.to_owned();
    }
    use sha2::Digest as _;
    let digest = Sha256::digest(owner.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256-");
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Why a signature could not be made or checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The secret is not `whsec_<base64>`.
    #[error("the secret is not whsec_ followed by base64")]
    BadSecret,
    /// A header is missing or malformed.
    #[error("missing or malformed webhook headers")]
    BadHeaders,
    /// The timestamp is outside the tolerance (a replay, or a clock far off).
    #[error("the webhook timestamp is too old or too far in the future")]
    Stale,
    /// No signature matches: the body, id or timestamp was changed, or another secret signed it.
    #[error("no signature matches")]
    Mismatch,
}

fn key(secret: &str) -> Result<Vec<u8>, SignatureError> {
    let b64 = secret.strip_prefix("whsec_").ok_or(SignatureError::BadSecret)?;
    base64::engine::general_purpose::STANDARD.decode(b64).map_err(|_| SignatureError::BadSecret)
}

/// `v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`.
///
/// # Errors
/// [`SignatureError::BadSecret`].
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &str) -> Result<String, SignatureError> {
    let mut mac = hmac_sha256(&key(secret)?);
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body.as_bytes());
    Ok(format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())))
}

/// What a receiver does: checks the timestamp is within [`TIMESTAMP_TOLERANCE`] of `now` (Unix
/// seconds) and that one of the space-separated `v1,…` signatures matches, in constant time.
///
/// # Errors
/// [`SignatureError`] saying which check failed.
pub fn verify(
    secret: &str,
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &str,
    now: i64,
) -> Result<(), SignatureError> {
    let ts: i64 = timestamp.parse().map_err(|_| SignatureError::BadHeaders)?;
    if (now - ts).unsigned_abs() > TIMESTAMP_TOLERANCE.as_secs() {
        return Err(SignatureError::Stale);
    }
    let key = key(secret)?;
    for sig in signatures.split(' ') {
        let Some(b64) = sig.strip_prefix("v1,") else { continue };
        let Ok(given) = base64::engine::general_purpose::STANDARD.decode(b64) else { continue };
        let mut mac = hmac_sha256(&key);
        mac.update(format!("{id}.{ts}.").as_bytes());
        mac.update(body.as_bytes());
        if mac.verify_slice(&given).is_ok() {
            return Ok(());
        }
    }
    Err(SignatureError::Mismatch)
}

/// Resolves a host name (the system's resolver; tests map names to chosen addresses).
#[async_trait::async_trait]
pub trait Resolve: Send + Sync {
    /// The addresses of `host:port`.
    ///
    /// # Errors
    /// When the name does not resolve.
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// The operating system's resolver.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

#[async_trait::async_trait]
impl Resolve for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// What became of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Every target answered 2xx.
    Delivered {
        /// How many subscriptions received it.
        targets: usize,
    },
    /// No subscription wants it: done.
    NoTarget,
    /// At least one target failed: try again later (every target gets it again; receivers
    /// de-duplicate by `webhook-id`).
    Failed(String),
}

/// Delivers events to subscriptions.
pub struct Notifier<S: ?Sized> {
    /// Subscriptions and delivery outcomes.
    pub store: Arc<S>,
    /// `webhook-timestamp` and outcome times.
    pub clock: SharedClock,
    /// Which URLs may be called.
    pub urls: UrlPolicy,
    /// Host names to addresses.
    pub resolver: Arc<dyn Resolve>,
    /// HTTP clients pinned to checked addresses, by (host, addresses): connections are reused
    /// across deliveries, and a host whose addresses change gets a fresh, re-checked client.
    pub clients: ClientCache,
    /// The relays' poll interval (the desktop watch's online windows: [`watch::check`]).
    pub poll_interval: Duration,
    /// Subscriptions whose receiver failed, parked ([`Parked`]).
    pub parked: Parked,
}

/// Subscriptions whose receiver just failed (issue 59): until its backoff has passed, only the
/// event that failed tries the receiver again; the link's other events fail at once ("parked"),
/// without waiting for a receiver known to be down — a dead receiver's many events no longer
/// each take a delivery timeout in the batch — and they come back after their own backoff. A
/// success, or the park's time passing, lets every event try again. Kept in memory: per
/// `notify` instance in the cloud, per process locally (a fresh instance tries once more).
#[derive(Default)]
pub struct Parked(std::sync::Mutex<std::collections::HashMap<ChatLinkId, Park>>);

/// One parked subscription.
#[derive(Debug, Clone)]
struct Park {
    /// Until when (the backoff of its failures in a row).
    until: Timestamp,
    /// Failures in a row.
    failures: u32,
    /// The event whose retries still try the receiver.
    probe: String,
}

impl Parked {
    /// Why `event` may not try `link`'s receiver now, if it may not.
    fn holds(&self, link: ChatLinkId, event: &str, now: Timestamp) -> Option<String> {
        let parks = self.0.lock().ok()?;
        let park = parks.get(&link)?;
        (now < park.until && park.probe != event).then(|| {
            format!(
                "parked: the receiver failed {} time(s) in a row; tried again from {} (by event {})",
                park.failures,
                park.until.rfc3339(),
                park.probe
            )
        })
    }

    /// Records a delivery's outcome to `link`'s receiver.
    fn record(&self, link: ChatLinkId, event: &str, ok: bool, now: Timestamp) {
        let Ok(mut parks) = self.0.lock() else { return };
        if ok {
            parks.remove(&link);
            return;
        }
        let failures = parks.get(&link).map_or(0, |p| p.failures).saturating_add(1);
        parks.insert(link, Park { until: now.plus(backoff(failures)), failures, probe: event.to_owned() });
    }
}

/// See [`Notifier::clients`].
#[derive(Default)]
pub struct ClientCache(std::sync::Mutex<std::collections::HashMap<(String, Vec<SocketAddr>), reqwest::Client>>);

impl ClientCache {
    /// The client for `host` pinned to `addrs` (built once).
    fn get(&self, host: &str, addrs: &[SocketAddr]) -> Result<reqwest::Client, String> {
        let key = (host.to_owned(), addrs.to_vec());
        if let Some(c) = self.0.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(c);
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            // A proxy from the environment (HTTPS_PROXY …) would connect to the URL's host by
            // itself, past the addresses checked and pinned here.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(DELIVERY_TIMEOUT)
            .resolve_to_addrs(host, addrs)
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        if let Ok(mut m) = self.0.lock() {
            if m.len() > 256 {
                m.clear();
            }
            m.insert(key, client.clone());
        }
        Ok(client)
    }
}

impl<S: ?Sized> Notifier<S> {
    /// A notifier over `store`.
    pub fn new(store: Arc<S>, clock: SharedClock, urls: UrlPolicy, resolver: Arc<dyn Resolve>) -> Self {
        Self {
            store,
            clock,
            urls,
            resolver,
            clients: ClientCache::default(),
            poll_interval: domain::limits::Policy::default().poll_interval,
            parked: Parked::default(),
        }
    }

    /// The same, for relays polling every `poll_interval` (the deployment's policy).
    #[must_use]
    pub fn polling_every(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }
}

impl<S: ManageLinks + RecordDeliveries + ?Sized> Notifier<S> {
    /// The links whose subscription wants `event`.
    async fn targets(&self, event: &Event) -> Result<Vec<ChatLink>, StoreError> {
        let Ok(owner) = OwnerId::new(event.data.owner.clone()) else { return Ok(Vec::new()) };
        // A task's event needs its one link (a read); the others the owner's links (a query).
        let links = if event.kind.is_task() {
            let Some(link) = event.data.chat_link_id.as_deref().and_then(|l| ChatLinkId::parse("chat_link_id", l).ok())
            else {
                return Ok(Vec::new());
            };
            self.store.get_link(&owner, link).await?.into_iter().collect()
        } else {
            self.store.list_links(&owner).await?
        };
        Ok(targets_in(event, &links).into_iter().cloned().collect())
    }

    /// Delivers `event` to every subscription that wants it and records each outcome.
    ///
    /// # Errors
    /// [`StoreError`] when the subscriptions cannot be read (the event is retried like a
    /// failed delivery).
    pub async fn deliver(&self, event: &Event) -> Result<Delivery, StoreError> {
        let targets = self.targets(event).await?;
        if targets.is_empty() {
            return Ok(Delivery::NoTarget);
        }
        let body = event.to_json();
        let mut failures = Vec::new();
        for link in &targets {
            let Some(sub) = &link.subscription else { continue };
            if let Some(why) = self.parked.holds(link.link_id, &event.id, self.clock.now()) {
                // Not recorded: the subscription's last outcome stays the receiver's own answer.
                failures.push(format!("{}: {why}", link.link_id));
                continue;
            }
            let result = self.post(&sub.url, &sub.secret, &event.id, &body).await;
            self.parked.record(link.link_id, &event.id, result.is_ok(), self.clock.now());
            let outcome = DeliveryOutcome {
                event_id: event.id.clone(),
                event_type: event.kind,
                at: self.clock.now(),
                ok: result.is_ok(),
                detail: match &result {
                    Ok(status) => format!("HTTP {status}"),
                    Err(e) => e.clone(),
                },
            };
            if let Err(e) = self.store.record_delivery(&link.owner, link.link_id, &outcome).await {
                tracing::warn!(error = %domain::errors::ErrorChain(&e), "recording a delivery outcome failed");
            }
            if let Err(e) = result {
                tracing::warn!(event = %event.id, link = %link.link_id, error = %e, "webhook delivery failed");
                failures.push(format!("{}: {e}", link.link_id));
            }
        }
        Ok(if failures.is_empty() {
            Delivery::Delivered { targets: targets.len() }
        } else {
            Delivery::Failed(failures.join("; "))
        })
    }

    /// One signed POST. `Ok(status)` for 2xx; `Err(detail)` otherwise (never the receiver's body).
    async fn post(&self, url: &str, secret: &str, id: &str, body: &str) -> Result<u16, String> {
        let parsed = webhook_url::check(url, self.urls).map_err(|e| format!("refused: {}", e.rule))?;
        let host = parsed.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = parsed.port_or_known_default().unwrap_or(443);
        let addrs = self.resolver.resolve(&host, port).await.map_err(|e| format!("cannot resolve {host}: {e}"))?;
        if addrs.is_empty() {
            return Err(format!("cannot resolve {host}"));
        }
        for a in &addrs {
            webhook_url::check_address(a.ip(), self.urls)
                .map_err(|why| format!("refused: {host} resolves to {why}"))?;
        }
        let mut addrs = addrs;
        addrs.sort();
        let client = self.clients.get(&host, &addrs)?;
        let timestamp = self.clock.now().as_epoch_seconds();
        let signature = sign(secret, id, timestamp, body).map_err(|e| e.to_string())?;
        let res = client
            .post(parsed)
            .header("content-type", "application/json")
            .header("user-agent", "foundry-connect-webhooks/1")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body.to_owned())
            .send()
            .await
            .map_err(
                |e| if e.is_timeout() { "timed out".to_owned() } else { format!("request failed: {}", short(&e)) },
            )?;
        let status = res.status().as_u16();
        if res.status().is_success() { Ok(status) } else { Err(format!("HTTP {status}")) }
    }
}

/// The innermost cause of a request error (reqwest's own message says only "error sending request").
fn short(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// The local notifier: delivers the embedded store's outbox until `shutdown` resolves — at once
/// when `wake` is notified (the store signals every committed write), and every `poll` anyway
/// (retries come due with time, not with writes). A pass that found a full batch due goes on
/// at once: the notifier's own writes (delivered, failed) signal nothing, so a backlog larger
/// than a batch would otherwise move one batch per `poll`.
pub async fn run_local<S>(
    notifier: Notifier<S>,
    wake: Arc<tokio::sync::Notify>,
    poll: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) where
    S: ManageLinks + RecordDeliveries + EventOutbox + ?Sized,
{
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = wake.notified() => {}
            () = &mut shutdown => return,
        }
        loop {
            match deliver_due(&notifier).await {
                Ok(n) if n >= DUE_BATCH => {}
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %domain::errors::ErrorChain(&e), "the local notifier could not read its outbox");
                    break;
                }
            }
        }
    }
}

/// Most events one pass over the local outbox takes.
pub const DUE_BATCH: usize = 100;

/// One pass over the outbox: every due event delivered, retried later, or given up.
///
/// # Errors
/// When the outbox cannot be read or updated.
pub async fn deliver_due<S>(notifier: &Notifier<S>) -> Result<usize, StoreError>
where
    S: ManageLinks + RecordDeliveries + EventOutbox + ?Sized,
{
    let due = notifier.store.due_events(DUE_BATCH).await?;
    for entry in &due {
        let outcome = notifier.deliver(&entry.event).await;
        match outcome {
            Ok(Delivery::Delivered { .. } | Delivery::NoTarget) => {
                notifier.store.event_delivered(&entry.event.id).await?
            }
            Ok(Delivery::Failed(error)) => fail(notifier, entry.attempts, &entry.event.id, &error).await?,
            Err(e) => fail(notifier, entry.attempts, &entry.event.id, &e.to_string()).await?,
        }
    }
    Ok(due.len())
}

async fn fail<S: EventOutbox + ?Sized>(
    n: &Notifier<S>,
    attempts: u32,
    id: &str,
    error: &str,
) -> Result<(), StoreError> {
    let failed = attempts + 1;
    let retry_at: Option<Timestamp> = (failed < MAX_ATTEMPTS).then(|| n.clock.now().plus(backoff(failed)));
    n.store.event_failed(id, retry_at, error).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_owner_is_one_valid_message_group() {
        let sub = "7c1e0a52-3f4b-4c1d-9e8f-0a1b2c3d4e5f";
        assert_eq!(super::tenant_group(sub), sub, "a Cognito sub is its own group");
        let longest = "a".repeat(super::MAX_TENANT_GROUP_CHARS);
        assert_eq!(super::tenant_group(&longest), longest);
        let valid = |g: &str| {
            (1..=super::MAX_TENANT_GROUP_CHARS).contains(&g.chars().count())
                && g.chars().all(|c| ('!'..='~').contains(&c))
        };
        let odd = ["a".repeat(129), "with space".into(), "ñandú".into(), "tab\there".into(), String::new()];
        let groups: std::collections::BTreeSet<String> = odd.iter().map(|o| super::tenant_group(o)).collect();
        assert_eq!(groups.len(), odd.len(), "two owners share a group: {groups:?}");
        for g in &groups {
            assert!(valid(g) && g.starts_with("sha256-"), "{g:?}");
        }
    }

    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn signatures_verify_and_forgeries_and_replays_do_not() {
        let (id, ts, body) = ("evt_0123", 1_800_000_000, r#"{"type":"task.claimed"}"#);
        let sig = sign(SECRET, id, ts, body).unwrap();
        assert!(sig.starts_with("v1,"));
        assert_eq!(verify(SECRET, id, &ts.to_string(), &sig, body, ts + 10), Ok(()));
        // Rotation: several signatures, one matches.
        assert_eq!(verify(SECRET, id, &ts.to_string(), &format!("v1,AAAA {sig}"), body, ts), Ok(()));
        let forged_body = verify(SECRET, id, &ts.to_string(), &sig, r#"{"type":"task.completed"}"#, ts);
        assert_eq!(forged_body, Err(SignatureError::Mismatch));
        let other_secret = sign("whsec_c2VjcmV0IG9mIHNvbWVvbmUgZWxzZQ==", id, ts, body).unwrap();
        assert_eq!(verify(SECRET, id, &ts.to_string(), &other_secret, body, ts), Err(SignatureError::Mismatch));
        // Replaying the captured request later: the timestamp gives it away (and it cannot be
        // changed without breaking the signature).
        assert_eq!(verify(SECRET, id, &ts.to_string(), &sig, body, ts + 301), Err(SignatureError::Stale));
        assert_eq!(verify(SECRET, id, &(ts + 400).to_string(), &sig, body, ts + 400), Err(SignatureError::Mismatch));
        assert_eq!(sign("not-a-secret", id, ts, body), Err(SignatureError::BadSecret));
    }

    #[test]
    fn backoff_doubles_from_five_seconds_to_at_most_fifteen_minutes() {
        let waits: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, vec![5, 10, 20, 40, 80, 160, 320, 640, 900]);
        assert_eq!(backoff(60), Duration::from_secs(900));
    }
}
