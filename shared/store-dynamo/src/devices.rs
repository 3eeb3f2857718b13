//! Relay devices and their tokens: [`ManageDevices`], [`AuthenticateDevices`].

use async_trait::async_trait;
use aws_sdk_dynamodb::types::TransactWriteItem;

use domain::clock::Timestamp;
use domain::devices::{Device, Pause};
use domain::fleet::RelayReport;
use domain::ids::OwnerId;
use domain::store::{
    AuthenticateDevices, DEVICE_SEEN_GRANULARITY, ManageDevices, PauseDevices, StoreResult, WatchDesktops,
};

use crate::DynamoStore;
use crate::codec::{Item, Read, device_from, n, opt_from, project_from, s, values};
use crate::error::unexpected;
use crate::keys::{device_key, owner_partition, token_key};
use crate::request::{failed, old_image, our_write_landed, put, update_item};
use crate::write::{Update, eq, exists, le, missing, ne};

/// A new device's two items: the owner's record (for listing) and the token record (for the
/// relay's one-read authentication), written together in one transaction.
pub(crate) fn device_items(d: &Device) -> (Item, Item) {
    let attrs = values([
        ("device_id", s(d.device_id.to_string())),
        ("owner", s(d.owner.as_str())),
        ("name", s(&d.name)),
        ("token_hash", s(&d.token_hash)),
        ("created_at", n(d.created_at.as_millis())),
    ]);
    let mut record = device_key(&d.owner, d.device_id);
    record.extend(attrs.clone());
    let mut token = token_key(&d.token_hash);
    token.extend(attrs);
    (record, token)
}

#[async_trait]
impl ManageDevices for DynamoStore {
    async fn create_device(&self, owner: &OwnerId, name: &str, token_hash: &str) -> StoreResult<Device> {
        let d = Device::new(owner, name, token_hash, self.clock.now());
        let (record, token) = device_items(&d);
        let items = vec![
            put(&self.db.table, record.clone(), "attribute_not_exists(#pk)", Item::new())?,
            put(&self.db.table, token, "attribute_not_exists(#pk)", Item::new())?,
        ];
        match self.db.transact(items).await? {
            None => Ok(d),
            // The SDK retried a transaction whose first attempt committed (its answer was lost).
            Some(reasons) if failed(&reasons, 0) && our_write_landed(old_image(&reasons, 0), &record) => Ok(d),
            Some(reasons) => Err(unexpected("device transaction (id or token collision)", &reasons)),
        }
    }

    async fn list_devices(&self, owner: &OwnerId) -> StoreResult<Vec<Device>> {
        let mut v: Vec<Device> = self
            .db
            .query_all(owner_partition(owner), "DEVICE#")
            .await?
            .iter()
            .map(device_from)
            .collect::<StoreResult<_>>()?;
        v.sort_by_key(|d| (d.created_at, d.device_id));
        Ok(v)
    }

    async fn get_device(&self, owner: &OwnerId, device: uuid::Uuid) -> StoreResult<Option<Device>> {
        opt_from(self.db.get(device_key(owner, device)).await?.as_ref(), device_from)
    }

    async fn revoke_device(&self, owner: &OwnerId, device: uuid::Uuid) -> StoreResult<bool> {
        let Some(d) = opt_from(self.db.get(device_key(owner, device)).await?.as_ref(), device_from)? else {
            return Ok(false);
        };
        let now = self.clock.now();
        // Both items, revoked once (a second revoke keeps the first time).
        let update = |k: Item| -> StoreResult<TransactWriteItem> {
            update_item(
                &self.db.table,
                Update::of(k).set_if_absent("revoked_at", n(now.as_millis())).when(exists("pk")),
            )
        };
        let items = vec![update(device_key(owner, device))?, update(token_key(&d.token_hash))?];
        if self.db.transact(items).await?.is_some() {
            return Ok(false);
        }
        // Its shares go with it: one versioned write per project it shared in.
        let needle = device.to_string();
        for item in self.db.query_all(owner_partition(owner), "PROJECT#").await? {
            let shares = Read(&item).opt_parse("device_shares", |v| Some(v.to_owned()))?.unwrap_or_default();
            if shares.contains(&needle) {
                let project = project_from(&item)?.project_id;
                self.set_device_share(owner, project, device, &[], false).await?;
            }
        }
        Ok(true)
    }

    /// Revokes it (withdrawing its shares, as [`ManageDevices::revoke_device`]), then one
    /// `TransactWriteItems` deletes both its items: nothing of it is listed or accepted again.
    async fn remove_device(&self, owner: &OwnerId, device: uuid::Uuid) -> StoreResult<bool> {
        let Some(d) = opt_from(self.db.get(device_key(owner, device)).await?.as_ref(), device_from)? else {
            return Ok(false);
        };
        if !self.revoke_device(owner, device).await? {
            return Ok(false);
        }
        let items = vec![self.delete_item(device_key(owner, device))?, self.delete_item(token_key(&d.token_hash))?];
        match self.db.transact(items).await? {
            None => Ok(true),
            Some(reasons) => Err(unexpected("removing a device (unconditional deletes)", &reasons)),
        }
    }
}

#[async_trait]
impl WatchDesktops for DynamoStore {
    /// One conditional `UpdateItem` of the device record (its stream record is the event).
    async fn mark_offline(
        &self,
        owner: &OwnerId,
        device: uuid::Uuid,
        last_seen: Option<Timestamp>,
    ) -> StoreResult<bool> {
        let now = self.clock.now();
        let seen = match last_seen {
            Some(t) => eq("last_seen_at", n(t.as_millis())),
            None => missing("last_seen_at"),
        };
        let update = Update::of(device_key(owner, device))
            .set("offline_since", n(now.as_millis()))
            .when(exists("pk").and(missing("revoked_at")).and(missing("offline_since")).and(seen));
        Ok(matches!(self.db.update(update).send(false).await?, crate::request::Updated::Applied(_)))
    }
}

#[async_trait]
impl PauseDevices for DynamoStore {
    /// One `GetItem` (the token's key) and one `TransactWriteItems` over both items, so the
    /// relay's token read sees the pause; refused once the device is revoked.
    async fn set_device_pause(&self, owner: &OwnerId, device: uuid::Uuid, pause: Option<&Pause>) -> StoreResult<bool> {
        let Some(d) = opt_from(self.db.get(device_key(owner, device)).await?.as_ref(), device_from)? else {
            return Ok(false);
        };
        if d.revoked_at.is_some() {
            return Ok(false);
        }
        let update = |k: Item| -> StoreResult<TransactWriteItem> {
            let mut u = Update::of(k);
            u = match pause {
                Some(p) => {
                    u = u.set("paused_at", n(p.at.as_millis())).set("pause_note", s(&p.note));
                    match p.until {
                        Some(until) => u.set("paused_until", n(until.as_millis())),
                        None => u.remove("paused_until"),
                    }
                }
                None => u.remove("paused_at").remove("paused_until").remove("pause_note"),
            };
            update_item(&self.db.table, u.when(exists("pk").and(missing("revoked_at"))))
        };
        let items = vec![update(device_key(owner, device))?, update(token_key(&d.token_hash))?];
        Ok(self.db.transact(items).await?.is_none())
    }
}

#[async_trait]
impl AuthenticateDevices for DynamoStore {
    async fn device_by_token_hash(&self, token_hash: &str) -> StoreResult<Option<Device>> {
        Ok(opt_from(self.db.get(token_key(token_hash)).await?.as_ref(), device_from)?
            .filter(|d| d.revoked_at.is_none()))
    }

    /// One conditional `UpdateItem` on the owner's device record, which fails (harmlessly) when
    /// the device was seen within the last minute and its report is unchanged: the report rides
    /// in the same write, as one string, so a changed one is one more alternative of the
    /// condition, not another request.
    async fn record_device_seen(&self, device: &Device, report: Option<&RelayReport>) -> StoreResult<()> {
        let now = self.clock.now();
        // A watch's mark is one more reason to write (and the write clears it).
        let stale = missing("last_seen_at")
            .or(le("last_seen_at", n(now.minus(DEVICE_SEEN_GRANULARITY).as_millis())))
            .or(exists("offline_since"));
        let mut update = Update::of(device_key(&device.owner, device.device_id))
            .set("last_seen_at", n(now.as_millis()))
            .remove("offline_since");
        let when = match report {
            None => stale,
            Some(r) => {
                let record = r.to_record();
                update = update.set("relay", s(&record));
                stale.or(missing("relay")).or(ne("relay", s(record)))
            }
        };
        self.db.update(update.when(exists("pk").and(when))).send(false).await.map(drop)
    }
}
