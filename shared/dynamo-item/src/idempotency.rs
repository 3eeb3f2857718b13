//! Idempotency records, and the one idempotent-create transaction every create with a key
//! goes through (a parent check, the key's record, the new item).
//!
//! A record is `IDEM#<sha256(scope, principal, key)>` holding the request's hash and the id of
//! what it created; it lives for the policy's idempotency TTL. An expired record counts as free
//! (TTL deletion is late, and never happens on emulators), so the condition on the key is
//! "absent or expired" and a live record is read back from the cancellation's old image.

use std::time::Duration;

use aws_sdk_dynamodb::types::{CancellationReason, TransactWriteItem};

use domain::clock::Timestamp;
use domain::store::StoreResult;

use crate::error::unexpected;
use crate::expiring::{TTL_ATTRIBUTE, ttl_at};
use crate::table::{Table, put};
use crate::transact::{failed, old_image};
use crate::{Item, Read, n, s, values};

/// The key of the record `record` names (`IDEM#<record>` / `IDEM`).
fn record_key(record: &str) -> Item {
    Item::from([("pk".to_owned(), s(format!("IDEM#{record}"))), ("sk".to_owned(), s("IDEM"))])
}

/// The condition on an idempotency record's key: no record, or an expired one.
const IDEM_FREE: &str = "attribute_not_exists(#pk) OR #expires_at <= :now";

/// A live idempotency record's (request hash, target id).
pub fn live_idem(item: Option<&Item>, now: Timestamp) -> StoreResult<Option<(String, String)>> {
    let Some(item) = item.filter(|i| !i.is_empty()) else { return Ok(None) };
    let r = Read(item);
    if r.ts("expires_at")? <= now {
        return Ok(None);
    }
    Ok(Some((r.s("request_hash")?.to_owned(), r.s("target_id")?.to_owned())))
}

/// What an idempotent create did.
pub enum Created {
    /// The parent held, the key was free: the key's record and the item were written together.
    New,
    /// The key is held by a live record, made by this request (`same_request`, the hashes
    /// agree) or by another one; `target` is the id of what it created.
    KeyInUse {
        /// The stored request hash equals this request's.
        same_request: bool,
        /// The id the record points at.
        target: String,
    },
    /// The key was free but the parent's condition failed: the parent as it was (`None` when
    /// the backend gave no image and the item is gone).
    ParentRefused(Option<Item>),
    /// The key was free but [`Create::also`]'s condition failed (classified before the
    /// parent's): that item as it was, if the backend gave its image.
    AlsoRefused(Option<Item>),
}

/// One idempotent create: what it writes and under which key.
pub struct Create<'a> {
    /// Which transaction, for errors.
    pub what: &'static str,
    /// The condition check on the parent (project or link).
    pub parent: TransactWriteItem,
    /// The parent's key, to read it when the backend gives no old image (`None`: the caller
    /// needs no image).
    pub parent_key: Option<Item>,
    /// The idempotency record's key (`idempotency_record_key`).
    pub record: &'a str,
    /// The request's hash.
    pub request_hash: &'a str,
    /// The id of the item created, stored in the record.
    pub target: String,
    /// The new item (written only if absent).
    pub item: Item,
    /// One more conditional write of the same transaction (a dispatch counts itself on its
    /// run), if any.
    pub also: Option<TransactWriteItem>,
}

impl Table {
    /// Writes the parent check, the key's record (kept for `ttl`) and the item in one
    /// transaction at `now`.
    /// The key is classified before the parent, so a retry replays even when the parent changed
    /// since the first call.
    ///
    /// # Errors
    /// [`domain::store::StoreError`] on an unexpected cancellation or a failed request.
    pub async fn create_idempotent(&self, c: Create<'_>, now: Timestamp, ttl: Duration) -> StoreResult<Created> {
        let expires = now.plus(ttl);
        let mut record = record_key(c.record);
        record.extend(values([
            ("request_hash", s(c.request_hash)),
            ("target_id", s(c.target)),
            ("expires_at", n(expires.as_millis())),
            (TTL_ATTRIBUTE, ttl_at(expires)),
        ]));
        let mut items = vec![
            c.parent,
            put(&self.table, record, IDEM_FREE, values([(":now", n(now.as_millis()))]))?,
            put(&self.table, c.item, "attribute_not_exists(#pk)", Item::new())?,
        ];
        items.extend(c.also);
        let Some(reasons) = self.transact(items).await? else { return Ok(Created::New) };
        if let Some((seen, target)) = self.key_in_use(&reasons, 1, c.record, now).await? {
            return Ok(Created::KeyInUse { same_request: seen == c.request_hash, target });
        }
        if failed(&reasons, 3) {
            return Ok(Created::AlsoRefused(old_image(&reasons, 3).cloned()));
        }
        if failed(&reasons, 0) {
            let old = match (old_image(&reasons, 0), c.parent_key) {
                (Some(i), _) => Some(i.clone()),
                (None, Some(key)) => self.get(key).await?,
                (None, None) => None,
            };
            return Ok(Created::ParentRefused(old));
        }
        Err(unexpected(c.what, &reasons))
    }

    /// The live record of `record` now, if any: a retry whose parent check fails before the
    /// transaction must still replay.
    pub async fn live_record(&self, record: &str, now: Timestamp) -> StoreResult<Option<(String, String)>> {
        live_idem(self.get(record_key(record)).await?.as_ref(), now)
    }

    /// The live idempotency record that made transaction item `i` fail, if that is why it
    /// failed: from the cancellation reason's old image, or read if the backend gave none.
    async fn key_in_use(
        &self,
        reasons: &[CancellationReason],
        i: usize,
        record: &str,
        now: Timestamp,
    ) -> StoreResult<Option<(String, String)>> {
        if !failed(reasons, i) {
            return Ok(None);
        }
        let old = match old_image(reasons, i) {
            Some(item) => Some(item.clone()),
            None => self.get(record_key(record)).await?,
        };
        live_idem(old.as_ref(), now)
    }
}
