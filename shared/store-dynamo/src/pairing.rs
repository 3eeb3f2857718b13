//! Desktops pairing with an owner ([`PairDevices`]).
//!
//! Items: `PAIR#<user code>` / `PAIR` (the pairing, with a TTL a day past its expiry) and
//! `PAIRSRC#<source tag>#<UTC hour>` / `PAIRSRC` (how many pairings the source started that
//! hour). Starting is one transaction over both, with a check that no device has the token's
//! hash (`DEVTOKEN#…`, kept when a device is revoked); approving is one transaction from
//! `pending` with the same check (after a read for the pairing's token hash); a poll is a
//! consistent read decided by [`classify_poll`], then the one write the decision calls for —
//! recording the poll time, or redeeming: the device's two items and the pairing's
//! `approved → redeemed` in one transaction (a token taken meanwhile refuses the pairing
//! instead). A failed condition is classified again from the old image it returns, never from
//! a second read.
//!
//! Also [`LimitAttempts`]: `ATTEMPTS#<key>#<window end>` / `ATTEMPTS`, a count with a TTL a
//! day past the window.

use std::time::Duration;

use async_trait::async_trait;

use domain::clock::Timestamp;
use domain::devices::Device;
use domain::ids::OwnerId;
use domain::pairing::{
    DecideOutcome, Decision, Desktop, Pairing, PairingStatus, PollOutcome, PollStep, StartOutcome, UserCode,
    classify_poll, slow_down_cutoff, source_window,
};
use domain::store::{LimitAttempts, PairDevices, StoreResult, Taken};

use crate::codec::{Item, Read, bad, n, s, values};
use crate::devices::device_items;
use crate::error::unexpected;
use crate::keys::{attempts_key, pairing_key, pairing_source_key, token_key, ttl_at};
use crate::request::{Updated, check, failed, old_image, our_write_landed, put, update_item};
use crate::write::{Update, eq, gt, le, lt, missing};
use crate::{DynamoStore, TTL_ATTRIBUTE};

/// A user code whose pairing expired this long ago may be drawn again.
const REUSE_AFTER: Duration = Duration::from_secs(3600);
/// How long a pairing item outlives its expiry before TTL may delete it.
const KEEP_AFTER_EXPIRY: Duration = Duration::from_secs(24 * 3600);

fn pairing_from(item: &Item) -> StoreResult<Pairing> {
    let r = Read(item);
    let owner = r.opt_parse("owner", |v| OwnerId::new(v).ok())?;
    let device_id = r.opt_parse("device_id", |v| uuid::Uuid::try_parse(v).ok())?;
    let status = match (r.s("status")?, owner, device_id) {
        ("pending", _, _) => PairingStatus::Pending,
        ("refused", _, _) => PairingStatus::Refused,
        ("approved", Some(owner), Some(device_id)) => PairingStatus::Approved {
            owner,
            device_name: r.opt_s("device_name").unwrap_or_default().to_owned(),
            device_id,
        },
        ("redeemed", Some(owner), Some(device_id)) => PairingStatus::Redeemed {
            owner,
            device_id,
            device_name: r.opt_s("device_name").unwrap_or_default().to_owned(),
        },
        _ => return Err(bad("status")),
    };
    Ok(Pairing {
        user_code: r.parse("user_code", |v| UserCode::parse("user_code", v).ok())?,
        device_code_hash: r.s("device_code_hash")?.to_owned(),
        token_hash: r.s("token_hash")?.to_owned(),
        desktop: Desktop { name: r.s("name")?.to_owned(), os: r.s("os")?.to_owned(), arch: r.s("arch")?.to_owned() },
        source: r.s("source")?.to_owned(),
        source_address: r.opt_s("source_address").unwrap_or_default().to_owned(),
        created_at: r.ts("created_at")?,
        expires_at: r.ts("expires_at")?,
        last_poll_at: r.opt_ts("last_poll_at")?,
        status,
    })
}

fn pairing_item(p: &Pairing) -> Item {
    let mut item = pairing_key(p.user_code.as_str());
    item.extend(values([
        ("user_code", s(p.user_code.as_str())),
        ("device_code_hash", s(&p.device_code_hash)),
        ("token_hash", s(&p.token_hash)),
        ("name", s(&p.desktop.name)),
        ("os", s(&p.desktop.os)),
        ("arch", s(&p.desktop.arch)),
        ("source", s(&p.source)),
        ("source_address", s(&p.source_address)),
        ("created_at", n(p.created_at.as_millis())),
        ("expires_at", n(p.expires_at.as_millis())),
        ("status", s(p.status.as_str())),
        (TTL_ATTRIBUTE, ttl_at(p.expires_at.plus(KEEP_AFTER_EXPIRY))),
    ]));
    item
}

impl DynamoStore {
    /// Creates the approved device and marks the pairing redeemed, in one transaction.
    async fn redeem(
        &self,
        p: &Pairing,
        owner: OwnerId,
        device_name: String,
        device_id: uuid::Uuid,
    ) -> StoreResult<PollOutcome> {
        let now = self.clock.now();
        let device = Device {
            device_id,
            owner: owner.clone(),
            name: device_name.clone(),
            token_hash: p.token_hash.clone(),
            created_at: now,
            revoked_at: None,
            last_seen_at: None,
            relay: None,
            paused: None,
            offline_since: None,
        };
        let (record, token) = device_items(&device);
        let items = vec![
            put(&self.db.table, record, "attribute_not_exists(#pk)", Item::new())?,
            put(&self.db.table, token, "attribute_not_exists(#pk)", Item::new())?,
            update_item(
                &self.db.table,
                Update::of(pairing_key(p.user_code.as_str()))
                    .set("status", s("redeemed"))
                    .set("last_poll_at", n(now.as_millis()))
                    .when(
                        eq("status", s("approved"))
                            .and(eq("device_id", s(device_id.to_string())))
                            .and(eq("device_code_hash", s(&p.device_code_hash)))
                            .and(gt("expires_at", n(now.as_millis()))),
                    ),
            )?,
        ];
        match self.db.transact(items).await? {
            None => Ok(PollOutcome::Paired { owner, device_id, device_name }),
            // Redeemed meanwhile (a concurrent poll, or this one's first attempt whose answer
            // was lost), or expired: the pairing as it was decides.
            Some(reasons) if failed(&reasons, 2) => {
                let old = old_image(&reasons, 2).map(pairing_from).transpose()?;
                Ok(answer(classify_poll(old.as_ref(), &p.device_code_hash, now)))
            }
            // Another pairing of the same token was redeemed first: this one can never be, so
            // it ends now instead of failing every poll.
            Some(reasons) if failed(&reasons, 1) => {
                let refused = self
                    .db
                    .update(
                        Update::of(pairing_key(p.user_code.as_str()))
                            .set("status", s("refused"))
                            .set("last_poll_at", n(now.as_millis()))
                            .when(eq("status", s("approved")).and(eq("device_code_hash", s(&p.device_code_hash)))),
                    )
                    .send(false)
                    .await?;
                match refused {
                    Updated::Applied(_) => Ok(PollOutcome::TokenInUse),
                    Updated::Rejected(old) => {
                        let old = old.as_ref().map(pairing_from).transpose()?;
                        Ok(answer(classify_poll(old.as_ref(), &p.device_code_hash, now)))
                    }
                }
            }
            Some(reasons) => Err(unexpected("pairing redemption (device id collision)", &reasons)),
        }
    }
}

/// The answer for a step that needs no further write (a step that would write again after a
/// failed condition can only come from a state that changed under us; it answers as pending,
/// and the relay's next poll decides).
fn answer(step: PollStep) -> PollOutcome {
    match step {
        PollStep::Answer(a) => a,
        PollStep::Touch | PollStep::Redeem { .. } => PollOutcome::Pending,
    }
}

#[async_trait]
impl PairDevices for DynamoStore {
    async fn start_pairing(&self, pairing: &Pairing) -> StoreResult<StartOutcome> {
        let now = self.clock.now();
        let item = pairing_item(pairing);
        let hour_end = Timestamp::from_millis((now.as_millis() / 3_600_000 + 1) * 3_600_000);
        let items = vec![
            put(
                &self.db.table,
                item.clone(),
                "attribute_not_exists(#pk) OR #expires_at < :stale",
                values([(":stale", n(now.minus(REUSE_AFTER).as_millis()))]),
            )?,
            update_item(
                &self.db.table,
                Update::of(pairing_source_key(&source_window(&pairing.source, now)))
                    .add("count", n(1))
                    .set("ttl", ttl_at(hour_end.plus(KEEP_AFTER_EXPIRY)))
                    .when(missing("count").or(lt("count", n(i64::from(self.policy.pairings_per_source_per_hour))))),
            )?,
            check(&self.db.table, token_key(&pairing.token_hash), "attribute_not_exists(#pk)", Item::new())?,
        ];
        Ok(match self.db.transact(items).await? {
            None => StartOutcome::Started,
            Some(reasons) if failed(&reasons, 0) && our_write_landed(old_image(&reasons, 0), &item) => {
                StartOutcome::Started
            }
            Some(reasons) if failed(&reasons, 2) => StartOutcome::TokenInUse,
            Some(reasons) if failed(&reasons, 0) => StartOutcome::CodeTaken,
            Some(_) => StartOutcome::TooMany,
        })
    }

    async fn get_pairing(&self, code: &UserCode) -> StoreResult<Option<Pairing>> {
        self.db.get(pairing_key(code.as_str())).await?.as_ref().map(pairing_from).transpose()
    }

    async fn decide_pairing(
        &self,
        code: &UserCode,
        owner: &OwnerId,
        decision: &Decision,
    ) -> StoreResult<DecideOutcome> {
        let now = self.clock.now();
        // Only a pending, unexpired pairing is decided, once.
        let pending = || eq("status", s("pending")).and(gt("expires_at", n(now.as_millis())));
        match decision {
            Decision::Approve { device_name, device_id } => {
                // The token hash is the pairing's: read it, then approve only that pairing
                // (`#token_hash = :t`) and only while no device has the hash.
                let Some(p) = self.db.get(pairing_key(code.as_str())).await?.as_ref().map(pairing_from).transpose()?
                else {
                    return Ok(DecideOutcome::NotPending);
                };
                let items = vec![
                    update_item(
                        &self.db.table,
                        Update::of(pairing_key(code.as_str()))
                            .set("status", s("approved"))
                            .set("owner", s(owner.as_str()))
                            .set("device_name", s(device_name))
                            .set("device_id", s(device_id.to_string()))
                            .when(pending().and(eq("token_hash", s(&p.token_hash)))),
                    )?,
                    check(&self.db.table, token_key(&p.token_hash), "attribute_not_exists(#pk)", Item::new())?,
                ];
                match self.db.transact(items).await? {
                    None => {
                        let decided = Pairing {
                            status: PairingStatus::Approved {
                                owner: owner.clone(),
                                device_name: device_name.clone(),
                                device_id: *device_id,
                            },
                            ..p
                        };
                        Ok(DecideOutcome::Decided(Box::new(decided)))
                    }
                    Some(reasons) if failed(&reasons, 0) => Ok(DecideOutcome::NotPending),
                    Some(_) => Ok(DecideOutcome::TokenInUse),
                }
            }
            Decision::Refuse => {
                let request = self.db.update(
                    Update::of(pairing_key(code.as_str()))
                        .set("status", s("refused"))
                        .set("owner", s(owner.as_str()))
                        .when(pending()),
                );
                match request.send(true).await? {
                    Updated::Applied(Some(item)) => Ok(DecideOutcome::Decided(Box::new(pairing_from(&item)?))),
                    Updated::Applied(None) => Err(bad("pairing (no new image)")),
                    Updated::Rejected(_) => Ok(DecideOutcome::NotPending),
                }
            }
        }
    }

    async fn poll_pairing(&self, code: &UserCode, device_code_hash: &str) -> StoreResult<PollOutcome> {
        let now = self.clock.now();
        let p = self.db.get(pairing_key(code.as_str())).await?.as_ref().map(pairing_from).transpose()?;
        match classify_poll(p.as_ref(), device_code_hash, now) {
            PollStep::Answer(a) => Ok(a),
            PollStep::Redeem { owner, device_name, device_id } => {
                let p = p.ok_or_else(|| bad("pairing"))?;
                self.redeem(&p, owner, device_name, device_id).await
            }
            PollStep::Touch => {
                let touched =
                    self.db
                        .update(Update::of(pairing_key(code.as_str())).set("last_poll_at", n(now.as_millis())).when(
                            eq("status", s("pending")).and(eq("device_code_hash", s(device_code_hash))).and(
                                missing("last_poll_at").or(le("last_poll_at", n(slow_down_cutoff(now).as_millis()))),
                            ),
                        ))
                        .send(false)
                        .await?;
                match touched {
                    Updated::Applied(_) => Ok(PollOutcome::Pending),
                    Updated::Rejected(old) => {
                        let old = old.as_ref().map(pairing_from).transpose()?;
                        match classify_poll(old.as_ref(), device_code_hash, now) {
                            // Approved between the read and the write.
                            PollStep::Redeem { owner, device_name, device_id } => {
                                let p = old.ok_or_else(|| bad("pairing"))?;
                                self.redeem(&p, owner, device_name, device_id).await
                            }
                            // Another poll recorded its time between the read and the write.
                            PollStep::Touch => Ok(PollOutcome::SlowDown),
                            step @ PollStep::Answer(_) => Ok(answer(step)),
                        }
                    }
                }
            }
        }
    }
}

#[async_trait]
impl LimitAttempts for DynamoStore {
    async fn failed_attempts(&self, key: &str, window_end: Timestamp) -> StoreResult<u32> {
        match self.db.get(attempts_key(key, window_end)).await? {
            None => Ok(0),
            Some(item) => count_of(&item),
        }
    }

    async fn record_failed_attempt(&self, key: &str, window_end: Timestamp) -> StoreResult<u32> {
        let counted = self
            .db
            .update(
                count_more(key, window_end, 1)
                    .when(missing("window_end").or(eq("window_end", n(window_end.as_millis())))),
            )
            .send(true)
            .await?;
        match counted {
            Updated::Applied(Some(item)) => count_of(&item),
            Updated::Applied(None) | Updated::Rejected(_) => Err(bad("attempts (no new image)")),
        }
    }

    async fn take_attempts(&self, key: &str, window_end: Timestamp, take: u32, limit: u32) -> StoreResult<Taken> {
        let Some(at_most) = limit.checked_sub(take) else {
            // More than the limit is never taken; what is left is read.
            let count = self.failed_attempts(key, window_end).await?;
            return Ok(Taken::Short { left: limit.saturating_sub(count) });
        };
        let taken = self
            .db
            .update(count_more(key, window_end, take).when(missing("count").or(le("count", n(i64::from(at_most))))))
            .send(false)
            .await?;
        match taken {
            Updated::Applied(_) => Ok(Taken::Taken),
            Updated::Rejected(None) => Err(bad("attempts (refused without an image)")),
            Updated::Rejected(Some(item)) => Ok(Taken::Short { left: limit.saturating_sub(count_of(&item)?) }),
        }
    }
}

/// Adds `by` to `key`'s count in the window ending at `window_end` (kept until a while after
/// it ends); the caller adds its condition.
fn count_more(key: &str, window_end: Timestamp, by: u32) -> Update {
    Update::of(attempts_key(key, window_end))
        .add("count", n(i64::from(by)))
        .set("window_end", n(window_end.as_millis()))
        .set("ttl", ttl_at(window_end.plus(KEEP_AFTER_EXPIRY)))
}

/// An attempts item's count.
fn count_of(item: &Item) -> StoreResult<u32> {
    u32::try_from(Read(item).n("count")?).map_err(|_| bad("count"))
}
