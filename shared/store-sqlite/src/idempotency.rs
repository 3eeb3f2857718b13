//! Idempotency records, and the one idempotent create every create with a key goes through.
//!
//! A record maps `sha256(scope, principal, key)` to the request's hash and the id of what it
//! created, for the policy's idempotency TTL. The lookup, the create and the record's write all
//! happen in the caller's `IMMEDIATE` transaction, so two calls with one key cannot both create.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use domain::clock::Timestamp;

use crate::error::missing_target;

/// What an idempotent create did.
pub(crate) enum Created<T, R> {
    /// Created now.
    New(T),
    /// The key was used before with the same request: what that call created.
    Replayed(T),
    /// The key was used before with a different request.
    Mismatch,
    /// The key was free, but the create refused (no such parent, no consent).
    Refused(R),
}

/// One create under an idempotency key.
pub(crate) struct Create<'a> {
    /// The record's key (`idempotency_record_key`).
    pub record: &'a str,
    /// The request's hash.
    pub request_hash: &'a str,
    /// How long the record lives.
    pub ttl: Duration,
}

impl Create<'_> {
    /// In `tx` at `now`: a live record answers with what it points at (read by `existing`)
    /// or a mismatch; otherwise `create` runs and, if it creates, returns the new item's id,
    /// which the record is written to point at.
    pub(crate) fn run<T, R>(
        &self,
        tx: &Connection,
        now: Timestamp,
        existing: impl FnOnce(&str) -> rusqlite::Result<Option<T>>,
        create: impl FnOnce() -> rusqlite::Result<Result<(String, T), R>>,
    ) -> rusqlite::Result<Created<T, R>> {
        let seen: Option<(String, String)> = tx
            .prepare_cached(
                "SELECT request_hash, target_id FROM idempotency WHERE record_key = ?1 AND expires_at > ?2",
            )?
            .query_row(params![self.record, now.as_millis()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((hash, target)) = seen {
            if hash != self.request_hash {
                return Ok(Created::Mismatch);
            }
            return existing(&target)?.map(Created::Replayed).ok_or_else(missing_target);
        }
        let (target, created) = match create()? {
            Ok(created) => created,
            Err(refused) => return Ok(Created::Refused(refused)),
        };
        tx.prepare_cached(
            "INSERT OR REPLACE INTO idempotency (record_key, request_hash, target_id, expires_at) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![self.record, self.request_hash, target, now.plus(self.ttl).as_millis()])?;
        Ok(Created::New(created))
    }
}
