//! OAuth app clients that chats register for themselves (RFC 7591 dynamic client registration).
//!
//! A chat (Claude, ChatGPT, a desktop MCP client) is connected by pasting the connector URL:
//! it discovers the authorization server and registers a public client with its redirect URIs.
//! Where the clients live is the registry's business — Cognito app clients in the cloud, a
//! table of the embedded store locally — so the registration rules (allow-listed redirects,
//! reuse, rate limit, cap; `oauth`) are written once over [`RegisterClients`](crate::store::RegisterClients).
//!
//! Reuse and the limits are read from client *names*: a registration's name is
//! `dcr-<16 hex of sha256(client name, redirect URIs)>-<UTC hour YYYYMMDDHH>-<8 hex of
//! sha256(source address)>`, so the registry needs no other state than the clients themselves
//! (Cognito has nothing else to keep it in) to count registrations per hour and per source.
//! Whether a client was ever used (got a token) is the one fact a name cannot hold: the
//! store records it when a token is issued ([`ClientUse`](crate::store::ClientUse)), the first and the latest time, so
//! registrations nobody completed, and ones nobody has used for longer than any refresh token
//! lives, can be removed. The same moment, for the owner the token is for, is a [`ChatConnection`]:
//! what the panel's "Connect a chat" step reads to say whether a chat has connected.

use sha2::{Digest, Sha256};

use crate::clock::Timestamp;

/// Prefix of the names of dynamically registered clients (pre-created clients never use it).
pub const NAME_PREFIX: &str = "dcr-";

/// A registered client, as the registry keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredClient {
    /// The OAuth `client_id`.
    pub client_id: String,
    /// The registry name (see [`registry_name`]).
    pub name: String,
    /// Exactly the redirect URIs it may use.
    pub redirect_uris: Vec<String>,
    /// The scopes it may ask for, in the authorization server's spelling.
    pub scopes: Vec<String>,
}

/// When a registered client was issued tokens ([`ClientUse`](crate::store::ClientUse)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientUseRecord {
    /// The first token.
    pub first_used_at: Timestamp,
    /// The latest token (a sign-in or a refresh); `None` for a record written by 0.2.0 or
    /// earlier, which kept the first time only: such a client's last use is unknown, and it
    /// is never counted idle until it is used again.
    pub last_used_at: Option<Timestamp>,
}

/// A client as a listing shows it (Cognito lists ids and names only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSummary {
    /// The OAuth `client_id`.
    pub client_id: String,
    /// The registry name.
    pub name: String,
}

/// What presenting a refresh token did (RFC 9700 §4.14: rotation with reuse detection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    /// It was its family's current token: the next one is current now.
    Rotated,
    /// It was an older token of the family, used again (stolen, or replayed): the whole family
    /// is revoked, the current token included.
    Reused,
    /// The family is revoked, or unknown.
    Revoked,
}

/// The stable part of a registration's name: the same client name and redirect URIs (in any
/// order) give the same fingerprint, so registering again finds the client made the first time.
pub fn fingerprint(client_name: &str, redirect_uris: &[String]) -> String {
    let mut uris: Vec<&str> = redirect_uris.iter().map(String::as_str).collect();
    uris.sort_unstable();
    uris.dedup();
    let mut h = Sha256::new();
    h.update(client_name.as_bytes());
    for u in uris {
        h.update([0u8]);
        h.update(u.as_bytes());
    }
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The UTC hour of `at` as `YYYYMMDDHH` (the rate limit's window).
pub fn hour_of(at: Timestamp) -> String {
    // `2026-11-29T10:18:26.000Z` → `2026112910`
    at.rfc3339().chars().take(13).filter(char::is_ascii_digit).collect()
}

/// The tag of a source address in registry names: 8 hex of its SHA-256 (the address itself is
/// not kept in the client's name).
pub fn source_tag(source: &str) -> String {
    Sha256::digest(source.as_bytes()).iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// The registry name of a registration made at `at` from `source` (an IP address, or empty
/// when the transport does not say).
pub fn registry_name(fingerprint: &str, at: Timestamp, source: &str) -> String {
    format!("{NAME_PREFIX}{fingerprint}-{}-{}", hour_of(at), source_tag(source))
}

/// A registration's name, read back ([`registry_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryName<'a> {
    /// [`fingerprint`] of the client name and redirect URIs.
    pub fingerprint: &'a str,
    /// The UTC hour it was made ([`hour_of`]).
    pub hour: &'a str,
    /// [`source_tag`] of the address it came from.
    pub source: &'a str,
}

/// The parts of a registry name, if it is a registration's.
pub fn parse_registry_name(name: &str) -> Option<RegistryName<'_>> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let mut parts = rest.split('-');
    let (fingerprint, hour, source) = (parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (parts.next().is_none()
        && hex(fingerprint, 16)
        && hex(source, 8)
        && hour.len() == 10
        && hour.bytes().all(|b| b.is_ascii_digit()))
    .then_some(RegistryName { fingerprint, hour, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_are_utc_calendar_hours() {
        assert_eq!(hour_of(Timestamp::from_millis(0)), "1970010100");
        // 2026-11-30T06:59:59Z and the next second.
        assert_eq!(hour_of(Timestamp::from_millis(1_796_021_999_000)), "2026113006");
        assert_eq!(hour_of(Timestamp::from_millis(1_796_022_000_000)), "2026113007");
        // A leap day.
        assert_eq!(hour_of(Timestamp::from_millis(1_709_164_800_000)), "2024022900");
    }

    #[test]
    fn fingerprints_ignore_order_and_depend_on_name_and_uris() {
        let a = vec!["https://a/cb".to_owned(), "https://b/cb".to_owned()];
        let b = vec!["https://b/cb".to_owned(), "https://a/cb".to_owned()];
        assert_eq!(fingerprint("Claude", &a), fingerprint("Claude", &b));
        assert_ne!(fingerprint("Claude", &a), fingerprint("ChatGPT", &a));
        assert_ne!(fingerprint("Claude", &a), fingerprint("Claude", &a[..1]));
        assert_eq!(fingerprint("Claude", &a).len(), 16);
    }

    #[test]
    fn names_round_trip_and_others_are_not_registrations() {
        let fp = fingerprint("x", &["https://a/cb".to_owned()]);
        let name = registry_name(&fp, Timestamp::from_millis(1_796_021_999_000), "203.0.113.7");
        let tag = source_tag("203.0.113.7");
        assert_eq!(
            parse_registry_name(&name),
            Some(RegistryName { fingerprint: fp.as_str(), hour: "2026113006", source: tag.as_str() })
        );
        assert_ne!(source_tag("203.0.113.7"), source_tag("203.0.113.8"));
        assert!(name.len() <= 128, "Cognito client names are at most 128 characters");
        assert_eq!(parse_registry_name("claude-connector"), None);
        assert_eq!(parse_registry_name(&format!("dcr-nothex-2026113006-{tag}")), None);
        assert_eq!(parse_registry_name(&format!("dcr-{fp}-2026-{tag}")), None);
        assert_eq!(parse_registry_name(&format!("dcr-{fp}-2026113006")), None);
        assert_eq!(parse_registry_name(&format!("{name}-x")), None);
    }
}

/// A chat (an MCP client) that was issued a token for an owner: when first and when last.
/// Recorded where tokens are issued (the local authorization server's code exchange, the
/// cloud facade's token answers), never on a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatConnection {
    /// The OAuth client: an app client id, or a client metadata document's URL.
    pub client_id: String,
    /// The client id its tokens carry, where it differs from `client_id`: the Cognito app client
    /// the cloud facade made for a document (the MCP endpoint sees only this one). `None` when
    /// they are the same, and for records written before it was kept.
    pub token_client: Option<String>,
    /// The first token issued to it for this owner.
    pub first_at: crate::clock::Timestamp,
    /// The latest.
    pub last_at: crate::clock::Timestamp,
}

impl ChatConnection {
    /// Whether tokens for `client` (the client id a token carries) were issued to this chat.
    pub fn issued_to(&self, client: &str) -> bool {
        self.token_client.as_deref().unwrap_or(&self.client_id) == client
    }

    /// How it signed in: a `client_id` that is a URL is a client metadata document.
    pub fn sign_in(&self) -> SignIn {
        if self.client_id.starts_with("https://") || self.client_id.starts_with("http://") {
            SignIn::Document
        } else {
            SignIn::Registration
        }
    }
}

/// At most this many chat connections are listed to an owner (the latest first).
pub const MAX_LISTED_CHAT_CONNECTIONS: usize = 20;

/// At most this many hosts are listed to an owner (the latest first).
pub const MAX_LISTED_HOSTS: usize = 20;

/// How a host got the token it connected with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignIn {
    /// A token given to it (the local server's printed bearer token, or one minted outside a
    /// sign-in): no token was issued to its client through the authorization server.
    Token,
    /// It signed in with a client it registered (or one the deployment made for it).
    Registration,
    /// It signed in naming its client metadata document.
    Document,
}

impl SignIn {
    /// The word the owner API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Token => "token",
            Self::Registration => "registration",
            Self::Document => "document",
        }
    }

    /// How the host whose tokens carry `client` signed in, from the owner's chat connections:
    /// the one its tokens were issued to, or none (a token given to it).
    pub fn of(client: &str, chats: &[ChatConnection]) -> Self {
        chats.iter().find(|c| c.issued_to(client)).map_or(Self::Token, ChatConnection::sign_in)
    }
}

/// A host program that connected for an owner, as it named itself in its handshake
/// (`initialize` in the 2025-11-25 era, `server/discover` in the 2026-07-28 era): recorded at
/// the handshake only, never on a tool call, so no read writes and one write per connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSeen {
    /// The client id its token carries (the agent's client part).
    pub client_id: String,
    /// What it said it is (cleaned).
    pub info: ClientInfo,
    /// The protocol version it asked for.
    pub protocol: String,
    /// Its latest handshake.
    pub seen_at: crate::clock::Timestamp,
}

/// The longest client name or version kept or logged, in characters: a real host's is a few
/// words (`claude-code`, `2.1.328`); anything longer is cut.
pub const MAX_CLIENT_INFO_CHARS: usize = 100;

/// What an MCP client says it is (its `clientInfo`: in `initialize` in the 2025-11-25 era, in
/// each request's `_meta["io.modelcontextprotocol/clientInfo"]` in the 2026-07-28 era), made safe
/// to log and to show: control and bidirectional-formatting characters dropped (no forged log
/// lines, no text reversed in the panel), each part cut to [`MAX_CLIENT_INFO_CHARS`]. The client
/// chooses these words: they say which host it claims to be, never who it is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientInfo {
    /// `clientInfo.name`, cleaned.
    pub name: String,
    /// `clientInfo.version`, cleaned.
    pub version: String,
}

impl ClientInfo {
    /// `name` and `version`, cleaned.
    pub fn new(name: &str, version: &str) -> Self {
        Self { name: clean_client_text(name), version: clean_client_text(version) }
    }

    /// A `clientInfo` object as JSON: its `name` and `version` (a missing or non-string version
    /// is empty); other fields (`title`, `icons`, unknown ones) are ignored. `None` when it is
    /// not an object with a string `name`.
    pub fn from_json(v: &serde_json::Value) -> Option<Self> {
        let name = v.get("name")?.as_str()?;
        let version = v.get("version").and_then(serde_json::Value::as_str).unwrap_or_default();
        Some(Self::new(name, version))
    }
}

/// `s` without control or bidirectional-formatting characters, and at most
/// [`MAX_CLIENT_INFO_CHARS`] characters (the last one `…` when it was cut).
fn clean_client_text(s: &str) -> String {
    let bidi = |c: char| matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
    let mut kept = s.trim().chars().filter(|&c| !c.is_control() && !bidi(c));
    let mut out: String = kept.by_ref().take(MAX_CLIENT_INFO_CHARS).collect();
    if kept.next().is_some() {
        out.pop();
        out.push('…');
    }
    out
}

#[cfg(test)]
mod client_info_tests {
    use super::*;

    #[test]
    fn client_info_is_cut_and_cleaned() {
        let v = serde_json::json!({"name": "claude-code", "version": "2.1.328", "title": "Claude Code", "x": [1]});
        assert_eq!(ClientInfo::from_json(&v), Some(ClientInfo::new("claude-code", "2.1.328")));
        let forged = ClientInfo::new("evil\n2026-12-07 INFO initialize client=claude\u{202E}gpj", "1\r\n\u{7}");
        assert_eq!(forged.name, "evil2026-12-07 INFO initialize client=claudegpj");
        assert_eq!(forged.version, "1");
        let long = ClientInfo::new(&"n".repeat(5_000), &"9".repeat(101));
        assert_eq!(long.name.chars().count(), MAX_CLIENT_INFO_CHARS);
        assert!(long.name.ends_with('…') && long.version.ends_with('…'));
        assert_eq!(ClientInfo::new(&"n".repeat(100), "").name, "n".repeat(100), "100 is not cut");
        assert_eq!(ClientInfo::from_json(&serde_json::json!({"name": 7})), None);
        assert_eq!(ClientInfo::from_json(&serde_json::json!("claude")), None);
        assert_eq!(ClientInfo::from_json(&serde_json::json!({"name": "x"})), Some(ClientInfo::new("x", "")));
    }
}

#[cfg(test)]
mod sign_in_tests {
    use super::*;

    fn chat(client_id: &str, token_client: Option<&str>) -> ChatConnection {
        let t = Timestamp::from_millis(1);
        ChatConnection {
            client_id: client_id.into(),
            token_client: token_client.map(Into::into),
            first_at: t,
            last_at: t,
        }
    }

    #[test]
    fn a_hosts_sign_in_is_read_from_the_chat_its_tokens_were_issued_to() {
        let doc = "https://claude.ai/oauth/claude-code-client-metadata";
        let chats = [chat(doc, Some("app-1")), chat("dcr-client", None), chat("https://legacy.example/doc", None)];
        assert_eq!(SignIn::of("app-1", &chats), SignIn::Document, "the app client made for a document");
        assert_eq!(SignIn::of(doc, &chats), SignIn::Token, "the URL is not what its tokens carry");
        assert_eq!(SignIn::of("dcr-client", &chats), SignIn::Registration);
        assert_eq!(SignIn::of("https://legacy.example/doc", &chats), SignIn::Document, "a local document client");
        assert_eq!(SignIn::of("local-token", &chats), SignIn::Token, "no token was issued to it");
        assert_eq!(
            [SignIn::Token, SignIn::Registration, SignIn::Document].map(SignIn::as_str),
            ["token", "registration", "document"]
        );
    }
}
