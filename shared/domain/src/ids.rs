//! Validated identifiers.
//!
//! Each id is its own type, parsed once at the edge with an error naming the field, so a
//! malformed id never reaches a store (SPEC §4: "anything else is rejected before any write").
//! Ids that must sort by creation time (tasks, commands) are UUIDv7.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::errors::InputError;

/// The rule a UUID id must follow.
const UUID_RULE: &str = "must be a UUID like 0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b";
/// The rule a graph session id must follow.
const GRAPH_SESSION_RULE: &str = "must be gs_ followed by 32 lowercase hex characters";

/// The JSON Schema of an id written as text: a string with the id's pattern and its rule as the
/// description (the published API documents the same rule the parser enforces).
#[cfg(feature = "schema")]
fn text_id_schema(pattern: &str, rule: &str) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "pattern": pattern, "description": rule})
}

/// What [`Uuid::try_parse`] accepts in the 36-character hyphenated form.
#[cfg(feature = "schema")]
const UUID_PATTERN: &str = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";

/// A malformed id inside a JSON body. Only the rule: the JSON path names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IdRule(&'static str);

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $new:ident) => {
        $(#[$doc])*
        ///
        /// In JSON it is the canonical hyphenated string; any other spelling is refused with
        /// the rule (one spelling per id keeps keys unique).
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(Uuid);

        impl TryFrom<String> for $name {
            type Error = IdRule;
            fn try_from(s: String) -> Result<Self, IdRule> {
                Self::parse("id", &s).map_err(|_| IdRule(UUID_RULE))
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.to_string()
            }
        }

        impl $name {
            /// A fresh id.
            pub fn generate() -> Self {
                Self(Uuid::$new())
            }

            /// Parses the canonical hyphenated UUID form; `field` names the input in the error.
            ///
            /// # Errors
            /// [`InputError`] when `s` is not a UUID.
            pub fn parse(field: &'static str, s: &str) -> Result<Self, InputError> {
                // Only the 36-character hyphenated form: one spelling per id keeps keys unique.
                if s.len() != 36 {
                    return Err(InputError::new(field, UUID_RULE));
                }
                Uuid::try_parse(s).map(Self).map_err(|_| InputError::new(field, UUID_RULE))
            }

            /// The UUID inside.
            pub fn uuid(&self) -> Uuid {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.hyphenated().fmt(f)
            }
        }

        #[cfg(feature = "schema")]
        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                text_id_schema(UUID_PATTERN, UUID_RULE)
            }
        }
    };
}

uuid_id!(
    /// A graph run (a queued command). UUIDv7, so the queue sorts by creation.
    CommandId, now_v7
);
uuid_id!(
    /// A linked chat task. UUIDv7: tasks sort by the time they were assigned.
    TaskId, now_v7
);
uuid_id!(
    /// A claim on a task: the fencing token a submit must present.
    ClaimId, new_v4
);
uuid_id!(
    /// A chat link: one host conversation bound to one project.
    ChatLinkId, new_v4
);
uuid_id!(
    /// A project of an owner.
    ProjectId, new_v4
);

/// A graph session: the durable identity of a saved Graph on a device, `gs_` + 32 lowercase hex.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct GraphSessionId(String);

impl GraphSessionId {
    /// Parses `gs_` + 32 lowercase hex characters.
    ///
    /// # Errors
    /// [`InputError`] naming `field` otherwise.
    pub fn parse(field: &'static str, s: &str) -> Result<Self, InputError> {
        let ok = s.len() == 35
            && s.starts_with("gs_")
            && s[3..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok { Ok(Self(s.to_owned())) } else { Err(InputError::new(field, GRAPH_SESSION_RULE)) }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for GraphSessionId {
    type Error = IdRule;
    fn try_from(s: String) -> Result<Self, IdRule> {
        Self::parse("graph_session_id", &s).map_err(|_| IdRule(GRAPH_SESSION_RULE))
    }
}

impl From<GraphSessionId> for String {
    fn from(g: GraphSessionId) -> String {
        g.0
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for GraphSessionId {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GraphSessionId".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        text_id_schema("^gs_[0-9a-f]{32}$", GRAPH_SESSION_RULE)
    }
}

impl fmt::Display for GraphSessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The owner of a deployment's data (the OAuth subject of the owner's account).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OwnerId(String);

impl OwnerId {
    /// Wraps an owner id taken from a verified token or device record.
    ///
    /// # Errors
    /// [`InputError`] when empty or longer than 256 characters.
    pub fn new(s: impl Into<String>) -> Result<Self, InputError> {
        let s = s.into();
        if s.is_empty() || s.chars().count() > 256 {
            return Err(InputError::new("owner", "must be 1 to 256 characters"));
        }
        Ok(Self(s))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A connected agent: the OAuth client of its token plus the subject, `client:subject`.
///
/// `%` and `:` in the client id are percent-encoded so two different (client, subject) pairs
/// never produce the same agent id.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AgentId(String);

impl AgentId {
    /// The agent for a token's client (`azp`/`client_id`) and subject (`sub`).
    ///
    /// # Errors
    /// [`InputError`] when either part is empty.
    pub fn new(client: &str, subject: &str) -> Result<Self, InputError> {
        if client.is_empty() {
            return Err(InputError::new("client_id", "must not be empty"));
        }
        if subject.is_empty() {
            return Err(InputError::new("sub", "must not be empty"));
        }
        let client = client.replace('%', "%25").replace(':', "%3A");
        Ok(Self(format!("{client}:{subject}")))
    }

    /// The token's client id this agent was made from (the part before the first `:`, decoded).
    pub fn client(&self) -> String {
        let encoded = self.0.split(':').next().unwrap_or_default();
        encoded.replace("%3A", ":").replace("%25", "%")
    }

    /// An agent id exactly as a store wrote it.
    pub fn from_stored(s: &str) -> Self {
        Self(s.to_owned())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An idempotency key chosen by the caller: 8 to 128 characters (characters, not bytes).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Shortest key accepted.
    pub const MIN_CHARS: usize = 8;
    /// Longest key accepted.
    pub const MAX_CHARS: usize = 128;

    /// Checks the length rule.
    ///
    /// # Errors
    /// [`InputError`] on `idempotency_key` otherwise.
    pub fn parse(s: &str) -> Result<Self, InputError> {
        let n = s.chars().count();
        if !(Self::MIN_CHARS..=Self::MAX_CHARS).contains(&n) {
            return Err(InputError::new(
                "idempotency_key",
                format!("must be {} to {} characters (got {n})", Self::MIN_CHARS, Self::MAX_CHARS),
            ));
        }
        Ok(Self(s.to_owned()))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_session_ids() {
        let ok = format!("gs_{}", "0123456789abcdef".repeat(2));
        assert!(GraphSessionId::parse("graph_session_id", &ok).is_ok());
        for bad in [
            format!("gs_{}", "0123456789ABCDEF".repeat(2)),
            format!("gs_{}", "0".repeat(31)),
            format!("gs_{}", "0".repeat(33)),
            format!("gx_{}", "0".repeat(32)),
            format!("gs_{}g", "0".repeat(31)),
            String::new(),
        ] {
            let e = GraphSessionId::parse("graph_session_id", &bad).unwrap_err();
            assert_eq!(e.to_string(), "graph_session_id: must be gs_ followed by 32 lowercase hex characters");
        }
    }

    #[test]
    fn uuid_ids_accept_only_the_hyphenated_form() {
        let id = CommandId::generate();
        assert_eq!(CommandId::parse("command_id", &id.to_string()).unwrap(), id);
        assert!(CommandId::parse("command_id", &id.uuid().simple().to_string()).is_err());
        let e = CommandId::parse("command_id", "not-a-uuid").unwrap_err();
        assert_eq!(e.field, "command_id");
    }

    #[test]
    fn ids_in_json_are_strict_and_errors_name_only_the_rule() {
        let id = ProjectId::generate();
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{id}\""));
        assert_eq!(serde_json::from_str::<ProjectId>(&json).unwrap(), id);
        let simple = format!("\"{}\"", id.uuid().simple());
        let e = serde_json::from_str::<ProjectId>(&simple).unwrap_err();
        assert!(e.to_string().starts_with(UUID_RULE), "{e}");
        let e = serde_json::from_str::<GraphSessionId>("\"gs_x\"").unwrap_err();
        assert!(e.to_string().starts_with(GRAPH_SESSION_RULE), "{e}");
    }

    #[test]
    fn task_ids_sort_by_creation() {
        let a = TaskId::generate();
        let b = TaskId::generate();
        assert!(a.to_string() < b.to_string());
        assert_eq!(a.uuid().get_version_num(), 7);
    }

    #[test]
    fn idempotency_key_counts_characters() {
        assert!(IdempotencyKey::parse("1234567").is_err());
        assert!(IdempotencyKey::parse("12345678").is_ok());
        assert!(IdempotencyKey::parse(&"x".repeat(128)).is_ok());
        assert!(IdempotencyKey::parse(&"x".repeat(129)).is_err());
        // 8 Japanese characters are 24 bytes but 8 characters.
        assert!(IdempotencyKey::parse("日本語のキーです").is_ok());
        assert!(IdempotencyKey::parse(&"日".repeat(129)).is_err());
    }

    #[test]
    fn agent_ids_are_unambiguous() {
        for client in ["https://claude.ai/oauth/claude-code-client-metadata", "a%3Ab:c%", "plain"] {
            assert_eq!(AgentId::new(client, "sub:with:colons").unwrap().client(), client, "the client comes back");
        }
        let a = AgentId::new("a:b", "c").unwrap();
        let b = AgentId::new("a", "b:c").unwrap();
        assert_ne!(a, b);
        // `%` is encoded too: a client id that spells `%3A` is not one holding `:`.
        assert_ne!(AgentId::new("a%3Ab", "c").unwrap(), AgentId::new("a:b", "c").unwrap());
    }
}
