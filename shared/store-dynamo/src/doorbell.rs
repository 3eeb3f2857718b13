//! The cloud doorbell's open sockets ([`DoorbellConnections`]), and what a stream record means
//! for it ([`ring_of_change`], [`revoked_device_of_change`]).
//!
//! Two items per socket, written and deleted together: `DOORBELL#<owner>` / `CONN#<id>` (the
//! owner's sockets, one query for a ring) and `DBCONN#<id>` / `DBCONN` (whose a socket is, for
//! `$disconnect`, which knows only the id). Both carry a TTL a little past API Gateway's
//! 2-hour limit, and reads leave expired ones out (TTL deletion is late, and emulators never
//! delete).

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Delete, TransactWriteItem};

use domain::doorbell::{Connection, MAX_CONNECTION, RingFor, ring_for_run};
use domain::ids::OwnerId;
use domain::store::{DoorbellConnections, StoreResult};

use crate::codec::{Item, Read, device_from, n, opt_from, run_from, s, values};
use crate::error::{build, unexpected};
use crate::keys::{doorbell_partition, socket_key, socket_of_owner_key, ttl_at};
use crate::request::put;
use crate::{DynamoStore, TTL_ATTRIBUTE};

/// How long past API Gateway's limit a socket's items are kept.
const KEEP: Duration = Duration::from_secs(10 * 60);

impl DynamoStore {
    /// A transaction's unconditional `Delete` of `key`.
    pub(crate) fn delete_item(&self, key: Item) -> StoreResult<TransactWriteItem> {
        let d = Delete::builder().table_name(&self.db.table).set_key(Some(key)).build().map_err(build)?;
        Ok(TransactWriteItem::builder().delete(d).build())
    }
}

#[async_trait]
impl DoorbellConnections for DynamoStore {
    async fn open_connection(&self, owner: &OwnerId, device: uuid::Uuid, connection_id: &str) -> StoreResult<()> {
        let now = self.clock.now();
        let expires = now.plus(MAX_CONNECTION + KEEP);
        let mut mine = socket_of_owner_key(owner, connection_id);
        mine.extend(values([
            ("connection_id", s(connection_id)),
            ("device_id", s(device.to_string())),
            ("connected_at", n(now.as_millis())),
            ("expires_at", n(expires.as_millis())),
            (TTL_ATTRIBUTE, ttl_at(expires)),
        ]));
        let mut socket = socket_key(connection_id);
        socket.extend(values([("owner", s(owner.as_str())), (TTL_ATTRIBUTE, ttl_at(expires))]));
        let items = vec![
            put(&self.db.table, mine, "attribute_not_exists(#pk)", Item::new())?,
            put(&self.db.table, socket, "attribute_not_exists(#pk)", Item::new())?,
        ];
        // Connection ids are API Gateway's and never reused: a condition that failed is this
        // call's own first attempt, whose answer was lost.
        self.db.transact(items).await?;
        Ok(())
    }

    async fn close_connection(&self, connection_id: &str) -> StoreResult<()> {
        let Some(socket) = self.db.get(socket_key(connection_id)).await? else { return Ok(()) };
        let owner = Read(&socket).parse("owner", |v| OwnerId::new(v).ok())?;
        let items = vec![
            self.delete_item(socket_of_owner_key(&owner, connection_id))?,
            self.delete_item(socket_key(connection_id))?,
        ];
        match self.db.transact(items).await? {
            None => Ok(()),
            Some(reasons) => Err(unexpected("doorbell disconnect", &reasons)),
        }
    }

    async fn connections_of(&self, owner: &OwnerId) -> StoreResult<Vec<Connection>> {
        let now = self.clock.now().as_millis();
        let mut out = Vec::new();
        for item in self.db.query_all(doorbell_partition(owner), "CONN#").await? {
            let r = Read(&item);
            if r.n("expires_at")? <= now {
                continue;
            }
            out.push(Connection {
                connection_id: r.s("connection_id")?.to_owned(),
                device_id: r.parse("device_id", |v| uuid::Uuid::try_parse(v).ok())?,
                connected_at: r.ts("connected_at")?,
            });
        }
        Ok(out)
    }
}

/// The ring a stream record means: of a run ([`ring_for_run`]) or of a desktop's record
/// (`domain::devices::ring_for_device`: its pause ended), over its decoded images.
///
/// # Errors
/// An image that is not a run or device this code wrote.
pub fn ring_of_change(old: Option<&Item>, new: Option<&Item>) -> StoreResult<Option<RingFor>> {
    let sk = new.and_then(|i| Read(i).opt_s("sk").map(str::to_owned)).unwrap_or_default();
    if sk.starts_with("DEVICE#") {
        let (o, n) = (opt_from(old, device_from)?, opt_from(new, device_from)?);
        return Ok(n.and_then(|n| domain::devices::ring_for_device(o.as_ref(), &n)));
    }
    if sk.starts_with("TASK#") {
        let (o, n) = (opt_from(old, crate::codec::task_from)?, opt_from(new, crate::codec::task_from)?);
        return Ok(n.and_then(|n| domain::dispatch::ring_for_task(o.as_ref(), &n)));
    }
    if sk != "RUN" {
        return Ok(None);
    }
    let (o, n) = (opt_from(old, run_from)?, opt_from(new, run_from)?);
    Ok(n.and_then(|n| ring_for_run(o.as_ref(), &n)))
}

/// The device a stream record revokes: its owner record (`DEVICE#…`) gained `revoked_at`.
///
/// # Errors
/// An image that is not a device this code wrote.
pub fn revoked_device_of_change(old: Option<&Item>, new: Option<&Item>) -> StoreResult<Option<(OwnerId, uuid::Uuid)>> {
    let sk = new.and_then(|i| Read(i).opt_s("sk").map(str::to_owned)).unwrap_or_default();
    if !sk.starts_with("DEVICE#") {
        return Ok(None);
    }
    let (o, n) = (opt_from(old, device_from)?, opt_from(new, device_from)?);
    Ok(n.filter(|n| n.revoked_at.is_some() && o.is_none_or(|o| o.revoked_at.is_none())).map(|d| (d.owner, d.device_id)))
}

#[cfg(test)]
mod tests {
    use domain::clock::Timestamp;
    use domain::devices::{Device, Pause};
    use domain::doorbell::Ring;

    use super::*;
    use crate::devices::device_items;

    #[test]
    fn a_resumed_desktops_record_rings_and_its_pause_does_not() {
        let t0 = Timestamp::from_millis(1_800_000_000_000);
        let free = Device::new(&domain::ids::OwnerId::new("o").unwrap(), "Laptop", "h", t0);
        let (free_item, token_item) = device_items(&free);
        let mut paused_item = free_item.clone();
        let pause = Pause::new(t0, None, Some("away".into())).unwrap();
        paused_item.insert("paused_at".into(), n(pause.at.as_millis()));
        paused_item.insert("pause_note".into(), s(&pause.note));
        let ring = ring_of_change(Some(&paused_item), Some(&free_item)).unwrap().unwrap();
        assert_eq!((ring.owner.as_str(), ring.ring), ("o", Ring::Sync));
        assert_eq!(ring_of_change(Some(&free_item), Some(&paused_item)).unwrap(), None, "a pause rang");
        // The token record changes in the same transaction, and rings nothing.
        let mut paused_token = token_item.clone();
        paused_token.insert("paused_at".into(), n(pause.at.as_millis()));
        assert_eq!(ring_of_change(Some(&paused_token), Some(&token_item)).unwrap(), None);
    }
}
