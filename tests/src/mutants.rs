//! Pairing mutants that are right one call at a time and wrong only when calls interleave:
//! each is the store's own step with its condition taken away, so only a real race — two
//! callers between the read and the write — can tell it from the store. The pairing race in
//! `tests/tests/conformance.rs` runs them one at a time (they must pass) and at once (they must
//! be caught), on both stores.

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use domain::clock::Clock;
use domain::ids::OwnerId;
use domain::pairing::{DecideOutcome, Pairing, PairingStatus, PollOutcome, PollStep, UserCode, classify_poll};

use crate::{Backend, Harness};

/// The gap between the read and the write: the network hop or ORM between two statements.
const GAP: Duration = Duration::from_millis(2);

fn attr(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn key(pk: String, sk: &str) -> std::collections::HashMap<String, AttributeValue> {
    std::collections::HashMap::from([("pk".to_owned(), attr(pk)), ("sk".to_owned(), attr(sk))])
}

impl Harness {
    /// Approval as the store does it, without its condition: read the pairing, see it pending
    /// (and unexpired), then write `approved` unconditionally. Alone it refuses a second
    /// approval (the read sees `approved`); two approvals between one read and its write both
    /// win.
    ///
    /// # Errors
    /// Backend errors.
    pub async fn approve_without_condition(
        &self,
        code: &UserCode,
        owner: &OwnerId,
        device_name: &str,
        device_id: uuid::Uuid,
    ) -> anyhow::Result<DecideOutcome> {
        let Some(p) = self.store.get_pairing(code).await? else { return Ok(DecideOutcome::NotPending) };
        if p.status != PairingStatus::Pending || p.expired(self.clock.now()) {
            return Ok(DecideOutcome::NotPending);
        }
        tokio::time::sleep(GAP).await;
        match &self.backend {
            Backend::Embedded { path, .. } => {
                let (path, code, owner, name) =
                    (path.clone(), code.as_str().to_owned(), owner.as_str().to_owned(), device_name.to_owned());
                tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
                    let conn = crate::raw_sqlite(&path)?;
                    conn.execute(
                        "UPDATE pairings SET status = 'approved', owner = ?1, device_name = ?2, device_id = ?3 WHERE user_code = ?4",
                        rusqlite::params![owner, name, device_id.to_string(), code],
                    )?;
                    Ok(())
                })
                .await??;
            }
            Backend::Dynamo { store, .. } => {
                store
                    .client()
                    .update_item()
                    .table_name(store.table())
                    .set_key(Some(key(format!("PAIR#{}", code.as_str()), "PAIR")))
                    .update_expression("SET #s = :a, #o = :o, device_name = :n, device_id = :d")
                    .expression_attribute_names("#s", "status")
                    .expression_attribute_names("#o", "owner")
                    .expression_attribute_values(":a", attr("approved"))
                    .expression_attribute_values(":o", attr(owner.as_str()))
                    .expression_attribute_values(":n", attr(device_name))
                    .expression_attribute_values(":d", attr(device_id.to_string()))
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
            }
        }
        let status = PairingStatus::Approved { owner: owner.clone(), device_name: device_name.to_owned(), device_id };
        Ok(DecideOutcome::Decided(Box::new(Pairing { status, ..p })))
    }

    /// Redemption as the store does it, without the pairing's `approved` condition: read the
    /// pairing, and when the domain says redeem, create the device and mark the pairing
    /// redeemed (the device's own "does not exist yet" conditions stay, as in the store). Alone
    /// it redeems once (a later poll reads `redeemed` and is answered by the store); two polls
    /// between one read and its write both create, and one of them fails.
    ///
    /// # Errors
    /// Backend errors, among them the second creation's.
    pub async fn redeem_without_condition(
        &self,
        code: &UserCode,
        device_code_hash: &str,
    ) -> anyhow::Result<PollOutcome> {
        let now = self.clock.now();
        let p = self.store.get_pairing(code).await?;
        let PollStep::Redeem { owner, device_name, device_id } = classify_poll(p.as_ref(), device_code_hash, now)
        else {
            return Ok(self.store.poll_pairing(code, device_code_hash).await?);
        };
        let token_hash = p.map(|p| p.token_hash).unwrap_or_default();
        tokio::time::sleep(GAP).await;
        match &self.backend {
            Backend::Embedded { path, .. } => {
                let (path, code, owner, name) =
                    (path.clone(), code.as_str().to_owned(), owner.as_str().to_owned(), device_name.clone());
                tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
                    let mut conn = crate::raw_sqlite(&path)?;
                    let tx = conn.transaction()?;
                    tx.execute(
                        "INSERT INTO devices (device_id, owner, name, token_hash, created_at, revoked_at, last_seen_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL)",
                        rusqlite::params![device_id.to_string(), owner, name, token_hash, now.as_millis()],
                    )?;
                    tx.execute(
                        "UPDATE pairings SET status = 'redeemed', last_poll_at = ?2 WHERE user_code = ?1",
                        rusqlite::params![code, now.as_millis()],
                    )?;
                    tx.commit()?;
                    Ok(())
                })
                .await??;
            }
            Backend::Dynamo { store, .. } => {
                let attrs = [
                    ("device_id", attr(device_id.to_string())),
                    ("owner", attr(owner.as_str())),
                    ("name", attr(&device_name)),
                    ("token_hash", attr(&token_hash)),
                    ("created_at", AttributeValue::N(now.as_millis().to_string())),
                ];
                let put =
                    |mut item: std::collections::HashMap<String, AttributeValue>| -> anyhow::Result<TransactWriteItem> {
                        item.extend(attrs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
                        let put = Put::builder()
                            .table_name(store.table())
                            .set_item(Some(item))
                            .condition_expression("attribute_not_exists(pk)")
                            .build()?;
                        Ok(TransactWriteItem::builder().put(put).build())
                    };
                let redeemed = Update::builder()
                    .table_name(store.table())
                    .set_key(Some(key(format!("PAIR#{}", code.as_str()), "PAIR")))
                    .update_expression("SET #s = :r, last_poll_at = :t")
                    .expression_attribute_names("#s", "status")
                    .expression_attribute_values(":r", attr("redeemed"))
                    .expression_attribute_values(":t", AttributeValue::N(now.as_millis().to_string()))
                    .build()?;
                store
                    .client()
                    .transact_write_items()
                    .transact_items(put(key(format!("OWNER#{owner}"), &format!("DEVICE#{device_id}")))?)
                    .transact_items(put(key(format!("DEVTOKEN#{token_hash}"), "DEVTOKEN"))?)
                    .transact_items(TransactWriteItem::builder().update(redeemed).build())
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
            }
        }
        Ok(PollOutcome::Paired { owner, device_id, device_name })
    }
}
