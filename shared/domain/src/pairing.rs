//! Pairing a desktop relay with an owner's account, in the shape of the OAuth device
//! authorization grant (RFC 8628), as `gh auth login` and Tailscale do it.
//!
//! 1. The relay makes its own device token (`fcd_…`, [`crate::devices::new_token`]) and
//!    starts a pairing with the token's **hash**, its name, OS and architecture. The server
//!    answers a short **user code** (8 letters, [`USER_CODE_ALPHABET`]) and a long secret
//!    **device code** the relay polls with.
//! 2. The owner, signed in to the panel, opens the URL that carries the user code, sees the
//!    pending desktop and approves or refuses it ([`Decision`]: one conditional write from
//!    `pending`).
//! 3. The relay's next poll redeems the approval: the device is created from the pairing and
//!    the pairing becomes `redeemed`, in one transaction conditional on `approved`
//!    ([`PollStep::Redeem`]). A code is redeemed at most once; a poll that repeats a redemption
//!    whose answer was lost gets the same device back.
//!
//! The token never crosses the network — the server only ever sees its hash, as it would if
//! the owner had created it in the panel — so a lost answer costs nothing and the plaintext is
//! stored nowhere but the desktop. Creating a device token in the panel stays as the manual
//! fallback.
//!
//! Both stores decide every poll with [`classify_poll`] over the pairing as read (SQLite in its
//! transaction, DynamoDB from a consistent read or a failed condition's old image).

use std::time::Duration;

use base64::Engine;

use crate::clock::Timestamp;
use crate::errors::InputError;
use crate::ids::OwnerId;
use crate::limits::char_len;
use crate::runs::sha256_hex;

/// The letters a user code is made of: consonants only, as RFC 8628 §6.1 suggests (no words
/// spelled by accident, no `O`/`0` or `I`/`1` confusion), without `L` (read as `I` in many
/// fonts) and with `Y`.
pub const USER_CODE_ALPHABET: &[u8; 20] = b"BCDFGHJKMNPQRSTVWXYZ";
/// Letters in a user code: 20⁸ ≈ 2.6 × 10¹⁰ codes (34 bits).
pub const USER_CODE_LEN: usize = 8;
/// How long a pairing waits for the owner.
pub const PAIRING_TTL: Duration = Duration::from_secs(10 * 60);
/// How often the relay may poll (RFC 8628 `interval`).
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);
/// How much sooner than [`POLL_INTERVAL`] a poll may come (network jitter) before it is
/// answered `slow_down`.
pub const POLL_TOLERANCE: Duration = Duration::from_secs(1);
/// Pairings one source address may start per UTC hour, unless the deployment sets another
/// number ([`crate::limits::Policy::pairings_per_source_per_hour`]).
pub const PAIRINGS_PER_SOURCE_PER_HOUR: u32 = crate::limits::DEFAULT_PAIRINGS_PER_SOURCE_PER_HOUR;
/// Codes an owner (and, in the cloud, a source address) may look up or decide without a
/// match in one [`LOOKUP_WINDOW`] before every lookup is refused until the window ends: a
/// guesser gets 10 tries in 15 minutes out of 20⁸ codes (RFC 8628 §5.1), an owner who mistypes
/// a code a few times does not notice.
pub const FAILED_LOOKUPS_PER_WINDOW: u32 = 10;
/// The window [`FAILED_LOOKUPS_PER_WINDOW`] counts in (aligned to the UTC clock).
pub const LOOKUP_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Prefix of device codes (recognisable in a leak, like `fcd_` tokens).
pub const DEVICE_CODE_PREFIX: &str = "fcp_";
/// Longest desktop name a relay may send.
pub const MAX_DESKTOP_NAME_CHARS: usize = 100;
/// Longest OS or architecture name.
pub const MAX_PLATFORM_CHARS: usize = 32;
/// Longest source address kept with a pairing (an IPv6 address is at most 45 characters).
pub const MAX_SOURCE_ADDRESS_CHARS: usize = 64;

/// A user code, normalised: 8 letters of [`USER_CODE_ALPHABET`], upper case, no separator.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserCode(String);

impl UserCode {
    /// A fresh random code (rejection sampling: every letter equally likely).
    ///
    /// # Errors
    /// When the operating system cannot provide randomness.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut out = String::with_capacity(USER_CODE_LEN);
        let mut buf = [0u8; 32];
        while out.len() < USER_CODE_LEN {
            getrandom::fill(&mut buf)?;
            // 240 = 12 × 20: bytes at or above it would favour the first letters.
            for b in buf.iter().filter(|b| **b < 240) {
                if out.len() < USER_CODE_LEN {
                    out.push(char::from(USER_CODE_ALPHABET[usize::from(*b % 20)]));
                }
            }
        }
        Ok(Self(out))
    }

    /// Parses what an owner typed or a URL carried: case, spaces and hyphens are ignored.
    ///
    /// # Errors
    /// `field` names the input; the rule says what a code looks like.
    pub fn parse(field: &'static str, s: &str) -> Result<Self, InputError> {
        let code: String = s.chars().filter(|c| !matches!(c, '-' | ' ')).map(|c| c.to_ascii_uppercase()).collect();
        if code.len() == USER_CODE_LEN && code.bytes().all(|b| USER_CODE_ALPHABET.contains(&b)) {
            Ok(Self(code))
        } else {
            Err(InputError::new(field, "must be the 8-letter code the relay printed (like BCDF-GHJK)"))
        }
    }

    /// The normalised form (`BCDFGHJK`): what stores key on.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The form shown to people: `BCDF-GHJK`.
    pub fn display(&self) -> String {
        format!("{}-{}", &self.0[..4], &self.0[4..])
    }
}

/// A fresh device code for `code` and its hash (the only form a store keeps):
/// `fcp_<user code>_<32 random bytes, base64url>`. The user code inside lets a poll find its
/// pairing with one key read; the random part is the secret.
///
/// # Errors
/// When the operating system cannot provide randomness.
pub fn new_device_code(code: &UserCode) -> Result<(String, String), getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let device_code = format!("{DEVICE_CODE_PREFIX}{}_{secret}", code.as_str());
    let hash = sha256_hex(device_code.as_bytes());
    Ok((device_code, hash))
}

/// The user code a device code was made for, and the device code's hash; `None` when it is
/// not shaped like one (the caller answers as for an unknown code).
pub fn parse_device_code(device_code: &str) -> Option<(UserCode, String)> {
    let rest = device_code.strip_prefix(DEVICE_CODE_PREFIX)?;
    let (code, secret) = rest.split_once('_')?;
    let code = UserCode::parse("device_code", code).ok()?;
    (secret.len() == 43).then(|| (code, sha256_hex(device_code.as_bytes())))
}

/// What the relay says about the desktop it runs on (shown to the owner before approval).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Desktop {
    /// The desktop's name (its host name, or what the owner passed to `relay pair --name`).
    pub name: String,
    /// Its operating system (`macos`, `linux`).
    pub os: String,
    /// Its architecture (`aarch64`, `x86_64`).
    pub arch: String,
}

impl Desktop {
    /// Checks the lengths and characters.
    ///
    /// # Errors
    /// The first field that breaks its rule.
    pub fn validate(&self) -> Result<(), InputError> {
        let n = char_len(&self.name);
        if self.name.trim().is_empty() || n > MAX_DESKTOP_NAME_CHARS || self.name.chars().any(char::is_control) {
            return Err(InputError::new(
                "name",
                format!(
                    "must be 1 to {MAX_DESKTOP_NAME_CHARS} characters, not blank, without control characters (got {n})"
                ),
            ));
        }
        for (field, v) in [("os", &self.os), ("arch", &self.arch)] {
            let ok = !v.is_empty()
                && v.len() <= MAX_PLATFORM_CHARS
                && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
            if !ok {
                return Err(InputError::new(
                    field,
                    format!("must be 1 to {MAX_PLATFORM_CHARS} characters of a-z, 0-9, '_', '.', '-'"),
                ));
            }
        }
        Ok(())
    }
}

/// Checks a token hash a relay sent: 64 lowercase hex digits (sha256).
///
/// # Errors
/// `token_sha256` and the rule.
pub fn validate_token_hash(hash: &str) -> Result<(), InputError> {
    if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(InputError::new("token_sha256", "must be the sha256 of the device token, 64 lowercase hex digits"))
    }
}

/// Where a pairing is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingStatus {
    /// Waiting for the owner.
    Pending,
    /// An owner approved it; the relay's next poll creates the device.
    Approved {
        /// Whose the device will be.
        owner: OwnerId,
        /// The device's name (the desktop's, unless the owner renamed it).
        device_name: String,
        /// The device's id, chosen at approval so a retried redemption creates the same one.
        device_id: uuid::Uuid,
    },
    /// The owner refused it.
    Refused,
    /// The relay received its device.
    Redeemed {
        /// Whose it is.
        owner: OwnerId,
        /// The device created.
        device_id: uuid::Uuid,
        /// Its name.
        device_name: String,
    },
}

impl PairingStatus {
    /// The stored name of the state.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved { .. } => "approved",
            Self::Refused => "refused",
            Self::Redeemed { .. } => "redeemed",
        }
    }
}

/// A pairing, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairing {
    /// Its user code (the key).
    pub user_code: UserCode,
    /// sha256 (hex) of the device code.
    pub device_code_hash: String,
    /// sha256 (hex) of the device token the relay made.
    pub token_hash: String,
    /// What the relay said about its desktop.
    pub desktop: Desktop,
    /// [`crate::clients::source_tag`] of the address it came from (what the hourly count keys on).
    pub source: String,
    /// The address it came from, as the server saw it (shown to the owner before approval,
    /// RFC 8628 §5.4; empty when the transport does not say).
    pub source_address: String,
    /// When it was started.
    pub created_at: Timestamp,
    /// When it stops being approvable or redeemable.
    pub expires_at: Timestamp,
    /// The relay's latest poll.
    pub last_poll_at: Option<Timestamp>,
    /// Where it is.
    pub status: PairingStatus,
}

impl Pairing {
    /// A new pending pairing started at `now`.
    pub fn new(
        user_code: UserCode,
        device_code_hash: String,
        token_hash: String,
        desktop: Desktop,
        source: &str,
        now: Timestamp,
    ) -> Self {
        Self {
            user_code,
            device_code_hash,
            token_hash,
            desktop,
            source: crate::clients::source_tag(source),
            source_address: source.chars().take(MAX_SOURCE_ADDRESS_CHARS).collect(),
            created_at: now,
            expires_at: now.plus(PAIRING_TTL),
            last_poll_at: None,
            status: PairingStatus::Pending,
        }
    }

    /// Whether it can no longer be approved or redeemed at `now`.
    pub fn expired(&self, now: Timestamp) -> bool {
        now >= self.expires_at
    }

    /// Whether `owner` may see it: anyone signed in with its code while it is pending (they
    /// need to see the desktop to decide), afterwards only the owner who approved it.
    pub fn visible_to(&self, owner: &OwnerId, now: Timestamp) -> bool {
        match &self.status {
            PairingStatus::Pending => !self.expired(now),
            PairingStatus::Approved { owner: o, .. } | PairingStatus::Redeemed { owner: o, .. } => o == owner,
            PairingStatus::Refused => false,
        }
    }
}

/// What starting a pairing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartOutcome {
    /// Stored: the relay polls with its device code.
    Started,
    /// The user code is taken (the caller draws another).
    CodeTaken,
    /// The source address started its hour's pairings
    /// ([`crate::limits::Policy::pairings_per_source_per_hour`]).
    TooMany,
    /// The token hash already belongs to a device (revoked or not): redeeming it could never
    /// succeed, so the pairing is refused at once (the relay makes a new token and asks again).
    TokenInUse,
}

/// The owner's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Approve, naming the device.
    Approve {
        /// The device's name.
        device_name: String,
        /// The id the device will have (chosen now, so a retried redemption makes the same one).
        device_id: uuid::Uuid,
    },
    /// Refuse.
    Refuse,
}

/// What deciding did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecideOutcome {
    /// This call decided it: the pairing as it is now.
    Decided(Box<Pairing>),
    /// It is not pending any more, expired, or unknown: nothing was written. (Deliberately
    /// one answer: another owner learns nothing about a code someone else decided.)
    NotPending,
    /// An approval whose token hash already belongs to a device: nothing was written (the
    /// redemption could never succeed).
    TokenInUse,
}

/// What a poll answers (RFC 8628 §3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollOutcome {
    /// `authorization_pending`: the owner has not decided.
    Pending,
    /// `slow_down`: polled sooner than [`POLL_INTERVAL`] after the previous poll.
    SlowDown,
    /// `access_denied`: the owner refused.
    Refused,
    /// `expired_token`: not decided in time, or an unknown device code.
    Expired,
    /// `access_denied`, and the pairing is refused: by the time it was redeemed its token hash
    /// belonged to a device (another pairing of the same token was redeemed first).
    TokenInUse,
    /// Paired: the device exists (created by this poll or by an earlier one whose answer was
    /// lost).
    Paired {
        /// Whose it is.
        owner: OwnerId,
        /// Its id.
        device_id: uuid::Uuid,
        /// Its name.
        device_name: String,
    },
}

/// What a store does for a poll, decided from the pairing as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollStep {
    /// Answer this; write nothing.
    Answer(PollOutcome),
    /// Record the poll's time (conditional on the pairing still pending and the previous poll
    /// at least the interval ago) and answer `Pending`.
    Touch,
    /// Create the device and mark the pairing redeemed, conditional on `approved`.
    Redeem {
        /// Whose it will be.
        owner: OwnerId,
        /// Its name.
        device_name: String,
        /// Its id.
        device_id: uuid::Uuid,
    },
}

/// Decides a poll with `device_code_hash` at `now` over the stored pairing.
pub fn classify_poll(p: Option<&Pairing>, device_code_hash: &str, now: Timestamp) -> PollStep {
    let Some(p) = p.filter(|p| p.device_code_hash == device_code_hash) else {
        return PollStep::Answer(PollOutcome::Expired);
    };
    match &p.status {
        // A redemption is answered again whenever asked: the relay may have lost the answer.
        PairingStatus::Redeemed { owner, device_id, device_name } => PollStep::Answer(PollOutcome::Paired {
            owner: owner.clone(),
            device_id: *device_id,
            device_name: device_name.clone(),
        }),
        _ if p.expired(now) => PollStep::Answer(PollOutcome::Expired),
        PairingStatus::Refused => PollStep::Answer(PollOutcome::Refused),
        // The interval holds in every state that is not final (RFC 8628 §3.5).
        PairingStatus::Approved { .. } if polled_too_soon(p.last_poll_at, now) => {
            PollStep::Answer(PollOutcome::SlowDown)
        }
        PairingStatus::Approved { owner, device_name, device_id } => {
            PollStep::Redeem { owner: owner.clone(), device_name: device_name.clone(), device_id: *device_id }
        }
        PairingStatus::Pending if polled_too_soon(p.last_poll_at, now) => PollStep::Answer(PollOutcome::SlowDown),
        PairingStatus::Pending => PollStep::Touch,
    }
}

/// Whether a poll at `now` comes too soon after `last`.
pub fn polled_too_soon(last: Option<Timestamp>, now: Timestamp) -> bool {
    last.is_some_and(|l| l > slow_down_cutoff(now))
}

/// The latest previous poll that still allows a poll at `now`.
pub fn slow_down_cutoff(now: Timestamp) -> Timestamp {
    now.minus(POLL_INTERVAL - POLL_TOLERANCE)
}

/// The key of a source's hourly pairing count: its tag and the UTC hour.
pub fn source_window(source_tag: &str, now: Timestamp) -> String {
    format!("{source_tag}#{}", crate::clients::hour_of(now))
}

/// The end of the [`LOOKUP_WINDOW`] that `now` falls in (failed lookups count until then).
pub fn lookup_window_end(now: Timestamp) -> Timestamp {
    let w = i64::try_from(LOOKUP_WINDOW.as_millis()).unwrap_or(i64::MAX);
    Timestamp::from_millis((now.as_millis().div_euclid(w) + 1) * w)
}

/// The attempt counter of an owner's failed pairing lookups (`store::LimitAttempts`).
pub fn owner_lookups_key(owner: &OwnerId) -> String {
    format!("pairing-lookup#owner#{owner}")
}

/// The attempt counter of a source address's failed pairing lookups (the cloud's owner API,
/// which sees the caller's address).
pub fn source_lookups_key(source: &str) -> String {
    format!("pairing-lookup#source#{}", crate::clients::source_tag(source))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairing(now: Timestamp) -> (Pairing, String) {
        let code = UserCode::generate().unwrap();
        let (device_code, hash) = new_device_code(&code).unwrap();
        let desktop = Desktop { name: "MacBook".into(), os: "macos".into(), arch: "aarch64".into() };
        (Pairing::new(code, hash, "a".repeat(64), desktop, "203.0.113.7", now), device_code)
    }

    #[test]
    fn user_codes_are_eight_letters_of_the_alphabet_and_parse_loosely() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let c = UserCode::generate().unwrap();
            assert_eq!(c.as_str().len(), USER_CODE_LEN);
            assert!(c.as_str().bytes().all(|b| USER_CODE_ALPHABET.contains(&b)));
            assert_eq!(UserCode::parse("code", &c.display().to_lowercase()).unwrap(), c);
            seen.insert(c);
        }
        assert!(seen.len() > 195, "codes repeat too often: {}", seen.len());
        assert_eq!(UserCode::parse("code", "bcdf ghjk").unwrap().display(), "BCDF-GHJK");
        for bad in ["", "BCDFGHJ", "BCDFGHJKM", "BCDFGHJ0", "ABCDFGHJ", "BCDFGHJL", "ÄCDFGHJK"] {
            let e = UserCode::parse("user_code", bad).unwrap_err();
            assert_eq!(e.field, "user_code", "{bad}");
        }
    }

    #[test]
    fn letters_are_uniform_enough() {
        let mut counts = [0u32; 20];
        for _ in 0..2_000 {
            for b in UserCode::generate().unwrap().as_str().bytes() {
                let i = USER_CODE_ALPHABET.iter().position(|a| *a == b).unwrap();
                counts[i] += 1;
            }
        }
        // 16,000 letters, 800 expected each; a modulo bias (256 % 20) would put the first 16
        // letters near 820 and the last 4 near 720.
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*min > 680 && *max < 920, "{counts:?}");
    }

    #[test]
    fn device_codes_carry_their_user_code_and_only_their_hash_is_kept() {
        let code = UserCode::generate().unwrap();
        let (dc, hash) = new_device_code(&code).unwrap();
        assert_eq!(parse_device_code(&dc), Some((code, hash.clone())));
        assert!(!hash.contains(&dc[13..]));
        assert_eq!(parse_device_code("fcp_BCDFGHJK_short"), None);
        assert_eq!(parse_device_code(&dc.replacen("fcp_", "fcd_", 1)), None);
    }

    #[test]
    fn desktops_and_token_hashes_are_checked() {
        let ok = Desktop { name: "Ana's MacBook".into(), os: "macos".into(), arch: "aarch64".into() };
        assert!(ok.validate().is_ok());
        let bad_name = Desktop { name: "a\nb".into(), ..ok.clone() };
        assert_eq!(bad_name.validate().unwrap_err().field, "name");
        let long = Desktop { name: "x".repeat(MAX_DESKTOP_NAME_CHARS + 1), ..ok.clone() };
        assert_eq!(long.validate().unwrap_err().field, "name");
        let bad_os = Desktop { os: "Mac OS".into(), ..ok.clone() };
        assert_eq!(bad_os.validate().unwrap_err().field, "os");
        let bad_arch = Desktop { arch: String::new(), ..ok };
        assert_eq!(bad_arch.validate().unwrap_err().field, "arch");
        assert!(validate_token_hash(&"0f".repeat(32)).is_ok());
        assert!(validate_token_hash(&"0F".repeat(32)).is_err());
        assert!(validate_token_hash("abc").is_err());
    }

    #[test]
    fn polls_follow_the_grant() {
        let t0 = Timestamp::from_millis(1_800_000_000_000);
        let (mut p, dc) = pairing(t0);
        let hash = parse_device_code(&dc).unwrap().1;
        assert_eq!(classify_poll(Some(&p), &hash, t0), PollStep::Touch);
        assert_eq!(classify_poll(Some(&p), "wrong", t0), PollStep::Answer(PollOutcome::Expired));
        assert_eq!(classify_poll(None, &hash, t0), PollStep::Answer(PollOutcome::Expired));
        p.last_poll_at = Some(t0);
        let soon = t0.plus(POLL_INTERVAL - POLL_TOLERANCE - Duration::from_millis(1));
        assert_eq!(classify_poll(Some(&p), &hash, soon), PollStep::Answer(PollOutcome::SlowDown));
        assert_eq!(classify_poll(Some(&p), &hash, t0.plus(POLL_INTERVAL)), PollStep::Touch);
        let owner = OwnerId::new("owner-a").unwrap();
        let device_id = uuid::Uuid::new_v4();
        p.status = PairingStatus::Approved { owner: owner.clone(), device_name: "Mac".into(), device_id };
        // An approval waits for the interval like everything that is not final ...
        assert_eq!(classify_poll(Some(&p), &hash, soon), PollStep::Answer(PollOutcome::SlowDown));
        // ... and is redeemed by the next poll that keeps it.
        assert_eq!(
            classify_poll(Some(&p), &hash, t0.plus(POLL_INTERVAL)),
            PollStep::Redeem { owner: owner.clone(), device_name: "Mac".into(), device_id }
        );
        let late = t0.plus(PAIRING_TTL);
        assert_eq!(classify_poll(Some(&p), &hash, late), PollStep::Answer(PollOutcome::Expired));
        p.status = PairingStatus::Redeemed { owner: owner.clone(), device_id, device_name: "Mac".into() };
        let paired = PollStep::Answer(PollOutcome::Paired { owner, device_id, device_name: "Mac".into() });
        assert_eq!(classify_poll(Some(&p), &hash, late), paired, "a lost answer is answered again");
        p.status = PairingStatus::Refused;
        assert_eq!(classify_poll(Some(&p), &hash, t0), PollStep::Answer(PollOutcome::Refused));
    }

    #[test]
    fn lookup_windows_are_aligned_and_keys_keep_owners_and_sources_apart() {
        let t = Timestamp::from_millis(1_800_000_000_000);
        let end = lookup_window_end(t);
        let w = i64::try_from(LOOKUP_WINDOW.as_millis()).unwrap();
        assert!(end > t && end.as_millis() - t.as_millis() <= w && end.as_millis() % w == 0);
        assert_eq!(lookup_window_end(end.minus(Duration::from_millis(1))), end);
        assert_eq!(lookup_window_end(end).as_millis(), end.as_millis() + w);
        let a = OwnerId::new("owner-a").unwrap();
        assert_ne!(owner_lookups_key(&a), source_lookups_key("owner-a"));
        assert!(!source_lookups_key("203.0.113.7").contains("203.0.113.7"), "addresses are kept as tags");
    }

    #[test]
    fn only_pending_codes_and_their_approver_see_a_pairing() {
        let t0 = Timestamp::from_millis(1_800_000_000_000);
        let (mut p, _) = pairing(t0);
        let a = OwnerId::new("owner-a").unwrap();
        let b = OwnerId::new("owner-b").unwrap();
        assert!(p.visible_to(&a, t0) && p.visible_to(&b, t0));
        assert!(!p.visible_to(&a, t0.plus(PAIRING_TTL)));
        p.status = PairingStatus::Approved { owner: a.clone(), device_name: "x".into(), device_id: uuid::Uuid::nil() };
        assert!(p.visible_to(&a, t0) && !p.visible_to(&b, t0));
        p.status = PairingStatus::Refused;
        assert!(!p.visible_to(&a, t0));
    }
}
