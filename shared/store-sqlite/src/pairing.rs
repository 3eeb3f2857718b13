//! Desktops pairing with an owner ([`PairDevices`]): one row per pairing, and a count per
//! source address and UTC hour. Each call is one transaction that reads the row and decides
//! with the domain's rules ([`classify_poll`]), so concurrent polls and approvals serialise on
//! the store's write lock. A token hash that already belongs to a device is refused when the
//! pairing starts, when it is approved and when it is redeemed, so no pairing can wait for a
//! redemption that would fail.
//!
//! Also the failed-attempt counts of [`LimitAttempts`] (table `attempts`, a row per key and
//! window; windows that ended are deleted on the next count).

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, named_params, params};

use domain::clock::Timestamp;
use domain::ids::OwnerId;
use domain::pairing::{
    DecideOutcome, Decision, Desktop, Pairing, PairingStatus, PollOutcome, PollStep, StartOutcome, UserCode,
    classify_poll, slow_down_cutoff, source_window,
};
use domain::store::{LimitAttempts, PairDevices, StoreResult, Taken};

use crate::SqliteStore;
use crate::codec::{DEVICE_COLS, col, opt_col, opt_ts, ts};
use crate::error::corrupt;

const COLS: &str = "user_code, device_code_hash, token_hash, name, os, arch, source, created_at, expires_at, \
                    last_poll_at, status, owner, device_name, device_id, source_address";

/// A user code whose pairing expired this long ago may be drawn again.
const REUSE_AFTER_MS: i64 = 3_600_000;

fn pairing_row(r: &Row<'_>) -> rusqlite::Result<Pairing> {
    let owner = opt_col(r, 11, "owner", |s| OwnerId::new(s).ok())?;
    let device_id = opt_col(r, 13, "device_id", |s| uuid::Uuid::try_parse(s).ok())?;
    let status: String = r.get(10)?;
    let status = match (status.as_str(), owner, device_id) {
        ("pending", _, _) => PairingStatus::Pending,
        ("refused", _, _) => PairingStatus::Refused,
        ("approved", Some(owner), Some(device_id)) => {
            let device_name: Option<String> = r.get(12)?;
            PairingStatus::Approved { owner, device_name: device_name.unwrap_or_default(), device_id }
        }
        ("redeemed", Some(owner), Some(device_id)) => {
            let device_name: Option<String> = r.get(12)?;
            PairingStatus::Redeemed { owner, device_id, device_name: device_name.unwrap_or_default() }
        }
        _ => return Err(corrupt(10, "pairing status")),
    };
    Ok(Pairing {
        user_code: col(r, 0, "user_code", |s| UserCode::parse("user_code", s).ok())?,
        device_code_hash: r.get(1)?,
        token_hash: r.get(2)?,
        desktop: Desktop { name: r.get(3)?, os: r.get(4)?, arch: r.get(5)? },
        source: r.get(6)?,
        source_address: r.get(14)?,
        created_at: ts(r.get(7)?),
        expires_at: ts(r.get(8)?),
        last_poll_at: opt_ts(r.get(9)?),
        status,
    })
}

/// Whether any device (revoked or not: the column is unique) has this token hash.
fn token_in_use(tx: &Connection, token_hash: &str) -> rusqlite::Result<bool> {
    tx.prepare_cached("SELECT 1 FROM devices WHERE token_hash = ?1")?.exists([token_hash])
}

fn read(tx: &Connection, code: &str) -> rusqlite::Result<Option<Pairing>> {
    tx.prepare_cached(&format!("SELECT {COLS} FROM pairings WHERE user_code = ?1"))?
        .query_row([code], pairing_row)
        .optional()
}

#[async_trait]
impl PairDevices for SqliteStore {
    async fn start_pairing(&self, pairing: &Pairing) -> StoreResult<StartOutcome> {
        let p = pairing.clone();
        let limit = self.policy.pairings_per_source_per_hour;
        self.write(move |tx, now| {
            // Old rows go first: the ones nobody can use any more, and past hours' counts.
            tx.prepare_cached("DELETE FROM pairings WHERE expires_at < ?1")?.execute([now.as_millis() - REUSE_AFTER_MS])?;
            tx.prepare_cached("DELETE FROM pairing_sources WHERE hour_end <= ?1")?.execute([now.as_millis()])?;
            if let Some(existing) = read(tx, p.user_code.as_str())? {
                // The same start again is a retry (its answer was lost); another is a collision.
                return Ok(if existing == p { StartOutcome::Started } else { StartOutcome::CodeTaken });
            }
            let window = source_window(&p.source, now);
            let count: u32 = tx
                .prepare_cached("SELECT count FROM pairing_sources WHERE window = ?1")?
                .query_row([&window], |r| r.get(0))
                .optional()?
                .unwrap_or(0);
            if count >= limit {
                return Ok(StartOutcome::TooMany);
            }
            if token_in_use(tx, &p.token_hash)? {
                return Ok(StartOutcome::TokenInUse);
            }
            let hour_end = (now.as_millis() / 3_600_000 + 1) * 3_600_000;
            tx.prepare_cached(
                "INSERT INTO pairing_sources (window, count, hour_end) VALUES (?1, 1, ?2)
                 ON CONFLICT (window) DO UPDATE SET count = count + 1",
            )?
            .execute(params![window, hour_end])?;
            tx.prepare_cached(&format!(
                "INSERT INTO pairings ({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL, 'pending', NULL, NULL, NULL, ?10)"
            ))?
            .execute(params![
                p.user_code.as_str(),
                p.device_code_hash,
                p.token_hash,
                p.desktop.name,
                p.desktop.os,
                p.desktop.arch,
                p.source,
                p.created_at.as_millis(),
                p.expires_at.as_millis(),
                p.source_address,
            ])?;
            Ok(StartOutcome::Started)
        })
        .await
    }

    async fn get_pairing(&self, code: &UserCode) -> StoreResult<Option<Pairing>> {
        let code = code.as_str().to_owned();
        self.read(move |tx, _| read(tx, &code)).await
    }

    async fn decide_pairing(
        &self,
        code: &UserCode,
        owner: &OwnerId,
        decision: &Decision,
    ) -> StoreResult<DecideOutcome> {
        let (code, owner, decision) = (code.as_str().to_owned(), owner.as_str().to_owned(), decision.clone());
        self.write(move |tx, now| {
            if matches!(decision, Decision::Approve { .. })
                && let Some(p) = read(tx, &code)?
                && p.status == PairingStatus::Pending
                && token_in_use(tx, &p.token_hash)?
            {
                return Ok(DecideOutcome::TokenInUse);
            }
            let changed = match &decision {
                Decision::Approve { device_name, device_id } => tx
                    .prepare_cached(
                        "UPDATE pairings SET status = 'approved', owner = :owner, device_name = :device_name, device_id = :device_id
                         WHERE user_code = :code AND status = 'pending' AND expires_at > :now",
                    )?
                    .execute(named_params! {
                        ":code": code,
                        ":owner": owner,
                        ":device_name": device_name,
                        ":device_id": device_id.to_string(),
                        ":now": now.as_millis(),
                    })?,
                Decision::Refuse => tx
                    .prepare_cached(
                        "UPDATE pairings SET status = 'refused', owner = :owner
                         WHERE user_code = :code AND status = 'pending' AND expires_at > :now",
                    )?
                    .execute(named_params! {":code": code, ":owner": owner, ":now": now.as_millis()})?,
            };
            Ok(match (changed, read(tx, &code)?) {
                (1, Some(p)) => DecideOutcome::Decided(Box::new(p)),
                _ => DecideOutcome::NotPending,
            })
        })
        .await
    }

    async fn poll_pairing(&self, code: &UserCode, device_code_hash: &str) -> StoreResult<PollOutcome> {
        let (code, hash) = (code.as_str().to_owned(), device_code_hash.to_owned());
        self.write(move |tx, now| {
            let p = read(tx, &code)?;
            match classify_poll(p.as_ref(), &hash, now) {
                PollStep::Answer(a) => Ok(a),
                PollStep::Touch => {
                    touch(tx, &code, now)?;
                    Ok(PollOutcome::Pending)
                }
                PollStep::Redeem { owner, device_name, device_id } => {
                    let token_hash = p.map(|p| p.token_hash).unwrap_or_default();
                    if token_in_use(tx, &token_hash)? {
                        // Another pairing of the same token was redeemed first: this one can
                        // never be, so it ends now instead of failing every poll.
                        tx.prepare_cached(
                            "UPDATE pairings SET status = 'refused', last_poll_at = ?2 WHERE user_code = ?1 AND status = 'approved'",
                        )?
                        .execute(params![code, now.as_millis()])?;
                        return Ok(PollOutcome::TokenInUse);
                    }
                    tx.prepare_cached(&format!(
                        "INSERT INTO devices ({DEVICE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
                    ))?
                    .execute(params![device_id.to_string(), owner.as_str(), &device_name, token_hash, now.as_millis()])?;
                    tx.prepare_cached(
                        "UPDATE pairings SET status = 'redeemed', last_poll_at = ?2 WHERE user_code = ?1 AND status = 'approved'",
                    )?
                    .execute(params![code, now.as_millis()])?;
                    Ok(PollOutcome::Paired { owner, device_id, device_name })
                }
            }
        })
        .await
    }
}

fn touch(tx: &Connection, code: &str, now: Timestamp) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "UPDATE pairings SET last_poll_at = :now WHERE user_code = :code AND status = 'pending'
         AND (last_poll_at IS NULL OR last_poll_at <= :cutoff)",
    )?
    .execute(named_params! {":code": code, ":now": now.as_millis(), ":cutoff": slow_down_cutoff(now).as_millis()})
    .map(drop)
}

#[async_trait]
impl LimitAttempts for SqliteStore {
    async fn failed_attempts(&self, key: &str, window_end: Timestamp) -> StoreResult<u32> {
        let key = key.to_owned();
        self.read(move |tx, _| {
            tx.prepare_cached("SELECT count FROM attempts WHERE key = ?1 AND window_end = ?2")?
                .query_row(params![key, window_end.as_millis()], |r| r.get(0))
                .optional()
                .map(Option::unwrap_or_default)
        })
        .await
    }

    async fn record_failed_attempt(&self, key: &str, window_end: Timestamp) -> StoreResult<u32> {
        let key = key.to_owned();
        self.write(move |tx, now| {
            tx.prepare_cached("DELETE FROM attempts WHERE window_end <= ?1")?.execute([now.as_millis()])?;
            tx.prepare_cached(
                "INSERT INTO attempts (key, window_end, count) VALUES (?1, ?2, 1)
                 ON CONFLICT (key, window_end) DO UPDATE SET count = count + 1 RETURNING count",
            )?
            .query_row(params![key, window_end.as_millis()], |r| r.get(0))
        })
        .await
    }

    async fn take_attempts(&self, key: &str, window_end: Timestamp, take: u32, limit: u32) -> StoreResult<Taken> {
        let key = key.to_owned();
        // The budget's count is bookkeeping, as the notifier's is: a read that counts against
        // its owner's budget changes nothing of the owner's.
        self.bookkeeping(move |tx, now| {
            tx.prepare_cached("DELETE FROM attempts WHERE window_end <= ?1")?.execute([now.as_millis()])?;
            let count: u32 = tx
                .prepare_cached("SELECT count FROM attempts WHERE key = ?1 AND window_end = ?2")?
                .query_row(params![key, window_end.as_millis()], |r| r.get(0))
                .optional()?
                .unwrap_or_default();
            if u64::from(count) + u64::from(take) > u64::from(limit) {
                return Ok(Taken::Short { left: limit.saturating_sub(count) });
            }
            tx.prepare_cached(
                "INSERT INTO attempts (key, window_end, count) VALUES (?1, ?2, ?3)
                 ON CONFLICT (key, window_end) DO UPDATE SET count = count + ?3",
            )?
            .execute(params![key, window_end.as_millis(), take])?;
            Ok(Taken::Taken)
        })
        .await
    }
}
