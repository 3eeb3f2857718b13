//! Each owner's request budget: how many requests one owner's chats, desktops or panel may make
//! a minute, counted across every instance that serves them (issue 59, docs/scale.md, "Each owner
//! has a budget").
//!
//! The HTTP API's throttles are per route for everyone, so without this one owner's flood (a
//! chat stuck in a loop, a script with a leaked token, hundreds of desktops) spends the share of
//! every other owner on that route and in the table. With it, an owner past its budget is
//! answered `429` with `Retry-After` before any work, and the relay and well-behaved hosts wait.
//!
//! **How it counts.** A budget is per owner and per surface ([`Surface`]: the MCP endpoint, the
//! relay API, the owner API) over fixed one-minute windows aligned to the UTC clock. The count is
//! shared through the store ([`crate::store::LimitAttempts::take_attempts`], one conditional
//! write that never lets the count pass the limit), but an instance does not write for every
//! request: each instance serves an owner's first [`OwnerBudget::batch`] requests of a minute
//! without asking (a quiet owner costs no write at all), then takes tokens from the shared count
//! a batch at a time, paying for the ones it served first. So an owner is served at most its
//! limit plus one batch per instance that served it that minute, and a busy owner costs one write
//! per batch.
//!
//! **What it cannot do.** API Gateway counts a request against the route's throttle before any
//! function sees it, so a client that ignores `429` still spends the route's share (cheaply: the
//! refusal reads and writes nothing). Only a limit in front of the API can stop that (written in
//! docs/scale.md).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::clock::Timestamp;
use crate::ids::OwnerId;
use crate::store::{LimitAttempts, StoreResult, Taken};

/// The window a budget counts in, aligned to the UTC clock.
pub const BUDGET_WINDOW: Duration = Duration::from_secs(60);

pub use crate::limits::DEFAULT_OWNER_REQUESTS_PER_MINUTE;

/// Each instance's batch is this share of the limit: 20 at the default.
const BATCHES_PER_WINDOW: u32 = 300;

/// Owners an instance remembers before it forgets those of past windows.
const REMEMBERED_OWNERS: usize = 10_000;

/// The end of the budget window `now` is in ([`BUDGET_WINDOW`], aligned to the UTC clock).
pub fn window_end(now: Timestamp) -> Timestamp {
    let window = i64::try_from(BUDGET_WINDOW.as_millis()).unwrap_or(i64::MAX);
    Timestamp::from_millis(now.as_millis().div_euclid(window) * window + window)
}

/// What a budget counts requests to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Surface {
    /// `POST /mcp`: the owner's chats.
    Mcp,
    /// The relay API: the owner's desktops.
    Relay,
    /// The owner API: the owner's panel.
    Owner,
}

impl Surface {
    fn as_str(self) -> &'static str {
        match self {
            Surface::Mcp => "mcp",
            Surface::Relay => "relay",
            Surface::Owner => "owner",
        }
    }
}

/// The store key an owner's budget on a surface is counted under.
pub fn budget_key(surface: Surface, owner: &OwnerId) -> String {
    format!("budget:{}:{}", surface.as_str(), owner.as_str())
}

/// Whether a request is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Serve it.
    Serve,
    /// Refuse it: the owner's budget for this minute is spent; the next one starts in
    /// `retry_after_s` seconds (at least 1).
    Refuse {
        /// Seconds until the next window (the `Retry-After` header).
        retry_after_s: u64,
        /// This instance found the budget spent with this request (log it once, not per
        /// refusal: a flood would write a line per request).
        first: bool,
    },
}

/// What one surface's refusal says (the body of the `429`).
pub fn refusal_message(per_minute: u32, retry_after_s: u64) -> String {
    format!("too many requests for this account: at most {per_minute} a minute; try again in {retry_after_s} s")
}

/// What one instance knows of one owner's window.
#[derive(Debug, Clone, Copy, Default)]
struct Local {
    window_end: i64,
    /// Requests this instance served the owner in the window.
    served: u64,
    /// Tokens this instance took from the shared count in the window.
    paid: u64,
    /// The shared count had no token left for this instance.
    spent: bool,
}

/// What [`Local::step`] decided before any store call.
enum Step {
    Serve,
    Refuse,
    /// Take this many tokens from the shared count, then decide.
    Take(u32),
}

impl Local {
    fn step(&mut self, batch: u32) -> Step {
        if self.served < self.paid {
            self.served += 1;
            return Step::Serve;
        }
        if self.spent {
            return Step::Refuse;
        }
        if self.paid == 0 && self.served < u64::from(batch) {
            self.served += 1;
            return Step::Serve;
        }
        // Pay for every request served and not yet paid for, this one, and a batch ahead.
        let unpaid = self.served - self.paid;
        Step::Take(u32::try_from(unpaid).unwrap_or(u32::MAX).saturating_add(batch))
    }
}

/// One instance's view of every owner's budget on one surface (hold one per process: the
/// batches it serves before asking are per instance).
#[derive(Debug)]
pub struct OwnerBudget {
    surface: Surface,
    per_minute: u32,
    batch: u32,
    local: Mutex<Owners>,
}

/// The owners an instance served lately, and the window it last forgot the older ones in.
#[derive(Debug, Default)]
struct Owners {
    map: HashMap<OwnerId, Local>,
    pruned_for: i64,
}

impl OwnerBudget {
    /// A budget of `per_minute` requests for each owner on `surface` (at least 1).
    pub fn new(surface: Surface, per_minute: u32) -> Self {
        let per_minute = per_minute.max(1);
        Self { surface, per_minute, batch: (per_minute / BATCHES_PER_WINDOW).max(1), local: Mutex::default() }
    }

    /// What it counts requests to.
    pub fn surface(&self) -> Surface {
        self.surface
    }

    /// The limit.
    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Requests an instance serves an owner in a minute before it asks the shared count, and
    /// the tokens it takes at a time afterwards.
    pub fn batch(&self) -> u32 {
        self.batch
    }

    /// Whether `owner`'s request at `now` is served. Writes to `store` only when this instance
    /// has served the owner a batch this minute; a store failure is the caller's (answer 503:
    /// a budget that cannot be counted does not silently serve a flood).
    ///
    /// # Errors
    /// The store's, when it had to be asked.
    pub async fn admit(
        &self,
        store: &(impl LimitAttempts + ?Sized),
        owner: &OwnerId,
        now: Timestamp,
    ) -> StoreResult<Admission> {
        let window_end = window_end(now).as_millis();
        let refuse = |first| {
            let left_ms = u64::try_from(window_end - now.as_millis()).unwrap_or(0);
            Admission::Refuse { retry_after_s: left_ms.div_ceil(1000).max(1), first }
        };
        let step = {
            let mut owners = self.local.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // At most once a window: an instance serving more owners than that in one minute
            // keeps them all rather than scanning on every request.
            if owners.map.len() >= REMEMBERED_OWNERS && owners.pruned_for != window_end {
                owners.map.retain(|_, l| l.window_end == window_end);
                owners.pruned_for = window_end;
            }
            let entry = owners.map.entry(owner.clone()).or_default();
            if entry.window_end != window_end {
                *entry = Local { window_end, ..Local::default() };
            }
            entry.step(self.batch)
        };
        let n = match step {
            Step::Serve => return Ok(Admission::Serve),
            Step::Refuse => return Ok(refuse(false)),
            Step::Take(n) => n.min(self.per_minute),
        };
        let key = budget_key(self.surface, owner);
        let end = Timestamp::from_millis(window_end);
        let taken = match store.take_attempts(&key, end, n, self.per_minute).await? {
            Taken::Taken => n,
            // Take what is left, once: another instance may take it first (then this one is
            // spent, which errs on the side of the limit).
            Taken::Short { left } if left > 0 => match store.take_attempts(&key, end, left, self.per_minute).await? {
                Taken::Taken => left,
                Taken::Short { .. } => 0,
            },
            Taken::Short { .. } => 0,
        };
        let mut owners = self.local.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = owners.map.entry(owner.clone()).or_default();
        if entry.window_end != window_end {
            // Another request of a later window came meanwhile: what was taken counted in the
            // window it was taken for, and this request is served as that window's.
            return Ok(Admission::Serve);
        }
        entry.paid += u64::from(taken);
        if entry.served < entry.paid {
            entry.served += 1;
            Ok(Admission::Serve)
        } else {
            entry.spent = true;
            Ok(refuse(true))
        }
    }
}

#[cfg(test)]
mod tests;
