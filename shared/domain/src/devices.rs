//! Desktop relays authenticate with device tokens (SPEC §1): 32 random bytes created by the
//! owner, shown once, stored only as their sha256.

use base64::Engine;

use crate::clock::Timestamp;
use crate::ids::OwnerId;
use crate::runs::sha256_hex;

/// A device token's prefix: lets a leaked token be recognised (secret scanners, logs).
pub const TOKEN_PREFIX: &str = "fcd_";

/// A registered desktop relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Its id (UUID).
    pub device_id: uuid::Uuid,
    /// Whose it is.
    pub owner: OwnerId,
    /// The owner's name for it (e.g. "MacBook").
    pub name: String,
    /// sha256 (hex) of the token.
    pub token_hash: String,
    /// When it was created.
    pub created_at: Timestamp,
    /// When the owner revoked it.
    pub revoked_at: Option<Timestamp>,
    /// When its relay last synced (kept to the minute).
    pub last_seen_at: Option<Timestamp>,
    /// What its relay said of itself at that sync (none before its first, or from a relay
    /// older than the report).
    pub relay: Option<crate::fleet::RelayReport>,
    /// The owner's pause, if one was set (it may have ended: [`Device::pause_at`]).
    pub paused: Option<Pause>,
}

/// An owner's pause of a desktop: its relay finishes the run it has and is handed no new one;
/// runs queued for it stay queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    /// When the owner paused it.
    pub at: Timestamp,
    /// When the pause ends by itself (none: until resumed).
    pub until: Option<Timestamp>,
    /// The owner's note (why), at most [`crate::limits::MAX_NAME_CHARS`] characters; may be empty.
    pub note: String,
}

/// The longest pause with an end (a longer one is an open-ended pause).
pub const MAX_PAUSE: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

impl Pause {
    /// A pause from `now` for `for_seconds` (1 s to [`MAX_PAUSE`]; none: until resumed) with an
    /// optional note: the one rule the owner API and the relay's `relay pause` share.
    ///
    /// # Errors
    /// A message naming the field and the rule.
    pub fn new(now: Timestamp, for_seconds: Option<u64>, note: Option<String>) -> Result<Self, String> {
        let max = MAX_PAUSE.as_secs();
        let until = match for_seconds {
            None => None,
            Some(s) if (1..=max).contains(&s) => Some(now.plus(std::time::Duration::from_secs(s))),
            Some(_) => return Err(format!("for_seconds: 1 to {max} (30 days); leave it out to pause until resumed")),
        };
        let note = note.unwrap_or_default();
        if crate::limits::char_len(&note) > crate::limits::MAX_NAME_CHARS {
            return Err(format!("note: at most {} characters", crate::limits::MAX_NAME_CHARS));
        }
        Ok(Self { at: now, until, note })
    }
}

impl Device {
    /// A new, unrevoked device of `owner` whose token hashes to `token_hash`.
    pub fn new(owner: &OwnerId, name: &str, token_hash: &str, now: Timestamp) -> Self {
        Self {
            device_id: uuid::Uuid::new_v4(),
            owner: owner.clone(),
            name: name.to_owned(),
            token_hash: token_hash.to_owned(),
            created_at: now,
            revoked_at: None,
            last_seen_at: None,
            relay: None,
            paused: None,
        }
    }
}

impl Device {
    /// What the owner sees of it at `now` ([`crate::fleet::state`]); a pause in force shows
    /// over online/offline (a revoked device has none).
    pub fn state(&self, now: Timestamp, poll_interval: std::time::Duration) -> crate::fleet::DesktopState {
        if self.pause_at(now).is_some() {
            return crate::fleet::DesktopState::Paused;
        }
        let doorbell = self.relay.as_ref().is_some_and(|r| r.doorbell);
        crate::fleet::state(self.revoked_at.is_some(), self.last_seen_at, doorbell, now, poll_interval)
    }

    /// The pause in force at `now`: none when there is none, it has ended by itself, or the
    /// device is revoked.
    pub fn pause_at(&self, now: Timestamp) -> Option<&Pause> {
        self.paused.as_ref().filter(|p| self.revoked_at.is_none() && p.until.is_none_or(|u| now < u))
    }
}

/// A fresh device token and its hash: `fcd_` + 32 random bytes, base64url without padding.
///
/// # Errors
/// When the operating system cannot provide randomness.
pub fn new_token() -> Result<(String, String), getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    let token = format!("{TOKEN_PREFIX}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes));
    let hash = token_hash(&token);
    Ok((token, hash))
}

/// sha256 (hex) of a presented token: the only form a store keeps.
pub fn token_hash(token: &str) -> String {
    sha256_hex(token.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_only_their_hash_is_kept() {
        let (a, ha) = new_token().unwrap();
        let (b, hb) = new_token().unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX) && a.len() == 4 + 43);
        assert_eq!(ha, token_hash(&a));
        assert_ne!(ha, hb);
        assert!(!ha.contains(&a[4..]));
    }
}
