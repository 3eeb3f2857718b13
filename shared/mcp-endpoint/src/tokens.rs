//! Verified tokens, remembered for a short while: an agent sends the same token on every call.

use auth::{AuthError, Identity};

use super::{Dispatch, McpEndpoint};

/// Tokens this endpoint verified lately, each with the identity it carries: an agent sends
/// the same token on every call, and verifying it (parse, signature, claims) was 12 % of a
/// `list_linked_chat_tasks` in the profile. Keyed by the exact token text, so only the same
/// bytes hit; an entry lasts until the token expires and at most [`VERIFIED_FOR`] (a key
/// withdrawn from the issuer's set stops being honoured within that time); at most
/// [`VERIFIED_MAX`] entries (expired ones are dropped first, else all).
#[derive(Default)]
pub(super) struct VerifiedTokens {
    map: std::sync::Mutex<std::collections::HashMap<Box<str>, (Identity, domain::clock::Timestamp)>>,
    /// Full verifications made (a remembered answer is not one).
    verifications: std::sync::atomic::AtomicU64,
    /// Remembering switched off (diagnosis, and the control of the test that counts).
    pub(super) off: bool,
}

/// How long a verified token is remembered at most.
pub const VERIFIED_FOR: std::time::Duration = std::time::Duration::from_secs(60);
/// How many verified tokens are remembered at most.
pub const VERIFIED_MAX: usize = 1024;

impl VerifiedTokens {
    fn get(&self, token: &str, now: domain::clock::Timestamp) -> Option<Identity> {
        let map = self.map.lock().ok()?;
        map.get(token).filter(|(_, until)| now < *until).map(|(id, _)| id.clone())
    }

    fn put(&self, token: &str, identity: Identity, until: domain::clock::Timestamp, now: domain::clock::Timestamp) {
        let Ok(mut map) = self.map.lock() else { return };
        if map.len() >= VERIFIED_MAX {
            map.retain(|_, (_, u)| now < *u);
            if map.len() >= VERIFIED_MAX {
                map.clear();
            }
        }
        map.insert(token.into(), (identity, until.min(now.plus(VERIFIED_FOR))));
    }
}

impl<D: Dispatch + ?Sized> McpEndpoint<D> {
    /// Who `token` is: remembered from an earlier call while that answer holds, else verified.
    pub(super) async fn identity(&self, token: &str) -> Result<Identity, AuthError> {
        let now = self.auth.clock.now();
        if !self.verified.off
            && let Some(identity) = self.verified.get(token, now)
        {
            return Ok(identity);
        }
        self.verified.verifications.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (identity, until) = self.auth.verify_until(token).await?;
        self.verified.put(token, identity.clone(), until, now);
        Ok(identity)
    }

    /// Verifies every token on every call, remembering none: to measure what the memory saves,
    /// and for the test that shows its counting would catch an endpoint without it.
    pub fn without_token_memory(mut self) -> Self {
        self.verified.off = true;
        self
    }

    /// How many tokens this endpoint verified in full (parse, signature, claims) since it was
    /// made; a call answered from a remembered verification does not count. For the tests that
    /// prove the remembering, and for diagnosis.
    pub fn token_verifications(&self) -> u64 {
        self.verified.verifications.load(std::sync::atomic::Ordering::Relaxed)
    }
}
