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
    /// Since when it counts as gone while work waited for it: set by the desktop watch
    /// (`desktop.offline`) when a run queued for it found it silent past its window, cleared
    /// by its next sync (`desktop.online`).
    pub offline_since: Option<Timestamp>,
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
            offline_since: None,
            relay: None,
            paused: None,
        }
    }
}

impl Device {
    /// What the owner sees of it at `now` ([`crate::fleet::state`]), `busy` when it is
    /// running a run ([`crate::fleet::busy_with`]); a pause in force shows over the rest (a
    /// revoked device has none).
    pub fn state(&self, now: Timestamp, poll_interval: std::time::Duration, busy: bool) -> crate::fleet::DesktopState {
        if self.pause_at(now).is_some() {
            return crate::fleet::DesktopState::Paused;
        }
        let seen = crate::fleet::Seen {
            revoked: self.revoked_at.is_some(),
            created_at: self.created_at,
            last_seen: self.last_seen_at,
            doorbell: self.relay.as_ref().is_some_and(|r| r.doorbell),
            busy,
        };
        crate::fleet::state(seen, now, poll_interval)
    }

    /// Whether the desktop watch should call it gone at `now` (`desktop.offline`), for a
    /// deployment whose relays poll every `poll_interval`: it synced before, is not revoked,
    /// not already marked, not paused (a paused desktop is expected to take nothing), and its
    /// last sync is older than its [`crate::fleet::online_window`]. A relay records itself on
    /// its control polls too, so a desktop busy with a long run is never overdue.
    pub fn overdue(&self, now: Timestamp, poll_interval: std::time::Duration) -> bool {
        let doorbell = self.relay.as_ref().is_some_and(|r| r.doorbell);
        self.revoked_at.is_none()
            && self.offline_since.is_none()
            && self.pause_at(now).is_none()
            && self
                .last_seen_at
                .is_some_and(|seen| now >= seen.plus(crate::fleet::online_window(doorbell, poll_interval)))
    }

    /// The pause in force at `now`: none when there is none, it has ended by itself, or the
    /// device is revoked.
    pub fn pause_at(&self, now: Timestamp) -> Option<&Pause> {
        self.paused.as_ref().filter(|p| self.revoked_at.is_none() && p.until.is_none_or(|u| now < u))
    }
}

/// The ring a device record's change makes: the owner (or the desktop itself) ended its pause,
/// so its runs should start now rather than at its next safety poll (up to five minutes with the
/// doorbell up). The owner's desktops all sync (rings go by owner); a pause that ends by its
/// own time changes no record and is picked up at the next sync.
pub fn ring_for_device(old: Option<&Device>, new: &Device) -> Option<crate::doorbell::RingFor> {
    let resumed = old.is_some_and(|o| o.paused.is_some()) && new.paused.is_none() && new.revoked_at.is_none();
    resumed.then(|| crate::doorbell::RingFor {
        owner: new.owner.clone(),
        to: crate::doorbell::Recipients::Device(new.device_id),
        ring: crate::doorbell::Ring::Sync,
    })
}

/// Why a queued run waits when it is the owner's pause: every desktop that can run it is
/// paused ([`held_by_pause`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// When the first of those pauses ends by itself (none: all last until resumed).
    pub until: Option<Timestamp>,
    /// The owner's note on one of them (the first that has one), or empty.
    pub note: String,
}

/// The hold on a queued run whose session `sharers` share (the unrevoked desktops that can run
/// it): some when there is at least one and every one is paused at `now`; none when any can
/// take it (a run waiting for an offline desktop is not held by a pause).
pub fn held_by_pause(sharers: &[Device], now: Timestamp) -> Option<Hold> {
    let pauses: Vec<&Pause> = sharers.iter().map(|d| d.pause_at(now)).collect::<Option<_>>()?;
    if pauses.is_empty() {
        return None;
    }
    Some(Hold {
        until: pauses.iter().filter_map(|p| p.until).min(),
        note: pauses.iter().map(|p| p.note.as_str()).find(|n| !n.is_empty()).unwrap_or_default().to_owned(),
    })
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
    fn ending_a_pause_rings_and_nothing_else_does() {
        let t0 = Timestamp::from_millis(1_000_000);
        let free = Device::new(&OwnerId::new("o").unwrap(), "a", "h", t0);
        let paused = Device { paused: Some(Pause::new(t0, None, None).unwrap()), ..free.clone() };
        let ring = ring_for_device(Some(&paused), &free).unwrap();
        assert_eq!(
            (ring.owner.as_str(), ring.to, ring.ring),
            ("o", crate::doorbell::Recipients::Device(free.device_id), crate::doorbell::Ring::Sync)
        );
        assert_eq!(ring_for_device(Some(&free), &paused), None, "a pause rang");
        assert_eq!(ring_for_device(Some(&free), &free), None);
        assert_eq!(ring_for_device(None, &free), None);
        let revoked = Device { revoked_at: Some(t0), ..free };
        assert_eq!(ring_for_device(Some(&paused), &revoked), None, "a revoke rang");
    }

    #[test]
    fn a_run_is_held_only_when_every_desktop_that_can_run_it_is_paused() {
        let t0 = Timestamp::from_millis(1_000_000);
        let owner = OwnerId::new("o").unwrap();
        let free = Device::new(&owner, "a", "h1", t0);
        let pause = |secs: Option<u64>, note: &str| {
            let mut d = Device::new(&owner, "b", "h2", t0);
            d.paused = Some(Pause::new(t0, secs, Some(note.to_owned())).unwrap());
            d
        };
        assert_eq!(held_by_pause(&[], t0), None, "nobody shares it: not a pause");
        assert_eq!(held_by_pause(std::slice::from_ref(&free), t0), None);
        let open = pause(None, "");
        let hour = pause(Some(3600), "travelling");
        assert_eq!(held_by_pause(&[open.clone(), free], t0), None, "one desktop can take it");
        assert_eq!(held_by_pause(std::slice::from_ref(&open), t0), Some(Hold { until: None, note: String::new() }));
        let both = held_by_pause(&[open, hour.clone()], t0).unwrap();
        assert_eq!(
            both,
            Hold { until: Some(t0.plus(std::time::Duration::from_secs(3600))), note: "travelling".into() }
        );
        assert_eq!(held_by_pause(&[hour], t0.plus(std::time::Duration::from_secs(3600))), None, "the pause ended");
    }

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
