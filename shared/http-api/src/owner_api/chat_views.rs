//! The owner API's views of the chats and hosts that connected for the owner (the panel's
//! "Connect a chat" and its list of hosts), re-exported by [`super::views`].

use schemars::JsonSchema;
use serde::Serialize;

/// A chat that connected: an OAuth client issued a token for the owner.
#[derive(Serialize, JsonSchema)]
pub struct ChatView {
    /// The client: an app client id, or the URL of its client metadata document (which names
    /// the chat's host, e.g. `https://claude.ai/…`).
    pub client_id: String,
    /// RFC 3339: its first token for this owner.
    pub first_connected_at: String,
    /// RFC 3339: its latest (a sign-in, or a refresh of its tokens).
    pub last_connected_at: String,
}

pub(crate) fn chat_view(c: &domain::clients::ChatConnection) -> ChatView {
    ChatView {
        client_id: c.client_id.clone(),
        first_connected_at: c.first_at.rfc3339(),
        last_connected_at: c.last_at.rfc3339(),
    }
}

/// A host program that connected: what it said it is in its handshake, and how it got its token.
#[derive(Serialize, JsonSchema)]
pub struct HostView {
    /// Its `clientInfo.name` (`claude-code`, `codex-mcp-client`, …): the host's own words.
    pub name: String,
    /// Its `clientInfo.version`.
    pub version: String,
    /// The MCP protocol version it asked for.
    pub protocol: String,
    /// RFC 3339: its latest handshake (`initialize`, or `server/discover`).
    pub last_seen_at: String,
    /// How it got its token: `token` (one given to it: the local server's printed bearer
    /// token), `registration` (it signed in with a client it registered), `document` (it signed
    /// in naming its client metadata document).
    pub sign_in: String,
    /// The client id its token carries.
    pub client_id: String,
}

pub(crate) fn host_view(h: &domain::clients::HostSeen, chats: &[domain::clients::ChatConnection]) -> HostView {
    HostView {
        name: h.info.name.clone(),
        version: h.info.version.clone(),
        protocol: h.protocol.clone(),
        last_seen_at: h.seen_at.rfc3339(),
        sign_in: domain::clients::SignIn::of(&h.client_id, chats).as_str().to_owned(),
        client_id: h.client_id.clone(),
    }
}
