//! Relay devices and their tokens: [`ManageDevices`], [`AuthenticateDevices`].

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use domain::clock::Timestamp;
use domain::devices::{Device, Pause};
use domain::events::derive_device;
use domain::fleet::RelayReport;
use domain::ids::OwnerId;
use domain::store::{
    AuthenticateDevices, DEVICE_SEEN_GRANULARITY, ManageDevices, PauseDevices, StoreResult, WatchDesktops,
};

use crate::SqliteStore;
use crate::codec::{DEVICE_COLS, device_row};
use crate::events::record_events;
use crate::projects::set_device_share_tx;

/// The device row `id`, in the caller's transaction.
fn device_tx(tx: &rusqlite::Connection, id: &str) -> rusqlite::Result<Option<Device>> {
    tx.prepare_cached(&format!("SELECT {DEVICE_COLS} FROM devices WHERE device_id = ?1"))?
        .query_row([id], device_row)
        .optional()
}

#[async_trait]
impl ManageDevices for SqliteStore {
    async fn create_device(&self, owner: &OwnerId, name: &str, token_hash: &str) -> StoreResult<Device> {
        let d = Device::new(owner, name, token_hash, self.clock.now());
        let row = d.clone();
        self.write(move |tx, _| {
            tx.prepare_cached(&format!(
                "INSERT INTO devices ({DEVICE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
            ))?
            .execute(params![
                row.device_id.to_string(),
                row.owner.as_str(),
                row.name,
                row.token_hash,
                row.created_at.as_millis()
            ])
        })
        .await?;
        Ok(d)
    }

    async fn list_devices(&self, owner: &OwnerId) -> StoreResult<Vec<Device>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {DEVICE_COLS} FROM devices WHERE owner = ?1 ORDER BY created_at, device_id"
            ))?;
            st.query_map([owner], device_row)?.collect()
        })
        .await
    }

    async fn get_device(&self, owner: &OwnerId, device: uuid::Uuid) -> StoreResult<Option<Device>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            tx.prepare_cached(&format!("SELECT {DEVICE_COLS} FROM devices WHERE device_id = ?1 AND owner = ?2"))?
                .query_row(params![device.to_string(), owner], device_row)
                .optional()
        })
        .await
    }

    async fn revoke_device(&self, owner: &OwnerId, device: uuid::Uuid) -> StoreResult<bool> {
        let owner = owner.as_str().to_owned();
        self.write(move |tx, now| {
            let revoked = tx
                .prepare_cached(
                    "UPDATE devices SET revoked_at = COALESCE(revoked_at, ?1) WHERE device_id = ?2 AND owner = ?3",
                )?
                .execute(params![now.as_millis(), device.to_string(), owner])?
                == 1;
            if revoked {
                // Its shares go with it, in the same transaction.
                let projects: Vec<String> = tx
                    .prepare("SELECT project_id FROM device_sessions WHERE device_id = ?1")?
                    .query_map([device.to_string()], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                for p in projects {
                    set_device_share_tx(tx, &p, &device.to_string(), &[])?;
                }
            }
            Ok(revoked)
        })
        .await
    }

    async fn remove_device(&self, owner: &OwnerId, device: uuid::Uuid) -> StoreResult<bool> {
        if !self.revoke_device(owner, device).await? {
            return Ok(false);
        }
        let owner = owner.as_str().to_owned();
        self.write(move |tx, _| {
            Ok(tx
                .prepare_cached("DELETE FROM devices WHERE device_id = ?1 AND owner = ?2")?
                .execute(params![device.to_string(), owner])?
                == 1)
        })
        .await
    }
}

#[async_trait]
impl WatchDesktops for SqliteStore {
    async fn mark_offline(
        &self,
        owner: &OwnerId,
        device: uuid::Uuid,
        last_seen: Option<Timestamp>,
    ) -> StoreResult<bool> {
        let (owner, id) = (owner.as_str().to_owned(), device.to_string());
        self.write(move |tx, now| {
            let old = device_tx(tx, &id)?;
            let changed = tx
                .prepare_cached(
                    "UPDATE devices SET offline_since = ?1 WHERE device_id = ?2 AND owner = ?3
                     AND revoked_at IS NULL AND offline_since IS NULL AND last_seen_at IS ?4",
                )?
                .execute(params![now.as_millis(), id, owner, last_seen.map(Timestamp::as_millis)])?;
            if changed == 1 {
                record_events(tx, &derive_device(old.as_ref(), device_tx(tx, &id)?.as_ref()), now)?;
            }
            Ok(changed == 1)
        })
        .await
    }
}

#[async_trait]
impl PauseDevices for SqliteStore {
    async fn set_device_pause(&self, owner: &OwnerId, device: uuid::Uuid, pause: Option<&Pause>) -> StoreResult<bool> {
        let owner = owner.as_str().to_owned();
        let (at, until, note) = match pause {
            Some(p) => (Some(p.at.as_millis()), p.until.map(|u| u.as_millis()), Some(p.note.clone())),
            None => (None, None, None),
        };
        self.write(move |tx, _| {
            let id = device.to_string();
            let old = device_tx(tx, &id)?;
            let changed = tx
                .prepare_cached(
                    "UPDATE devices SET paused_at = ?1, paused_until = ?2, pause_note = ?3
                     WHERE device_id = ?4 AND owner = ?5 AND revoked_at IS NULL",
                )?
                .execute(params![at, until, note, id, owner])?
                == 1;
            if changed && let Some(new) = device_tx(tx, &id)? {
                // A resume rings the owner's desktops: the runs held start now.
                tx.rings.note_device(old.as_ref(), &new);
            }
            Ok(changed)
        })
        .await
    }
}

#[async_trait]
impl AuthenticateDevices for SqliteStore {
    async fn device_by_token_hash(&self, token_hash: &str) -> StoreResult<Option<Device>> {
        let hash = token_hash.to_owned();
        self.read(move |tx, _| {
            tx.prepare_cached(&format!(
                "SELECT {DEVICE_COLS} FROM devices WHERE token_hash = ?1 AND revoked_at IS NULL"
            ))?
            .query_row([hash], device_row)
            .optional()
        })
        .await
    }

    async fn record_device_seen(&self, device: &Device, report: Option<&RelayReport>) -> StoreResult<()> {
        let id = device.device_id.to_string();
        let granularity = i64::try_from(DEVICE_SEEN_GRANULARITY.as_millis()).unwrap_or(i64::MAX);
        let record = report.map(RelayReport::to_record);
        self.write(move |tx, now| {
            // A NULL report keeps the one recorded (an older relay says nothing of itself); a
            // watch's mark is one more reason to write, and the write clears it.
            let old = device_tx(tx, &id)?.filter(|d| d.offline_since.is_some());
            let changed = tx
                .prepare_cached(
                    "UPDATE devices SET last_seen_at = ?1, relay = COALESCE(?4, relay), offline_since = NULL
                     WHERE device_id = ?2 AND (last_seen_at IS NULL OR last_seen_at <= ?3
                       OR (?4 IS NOT NULL AND relay IS NOT ?4) OR offline_since IS NOT NULL)",
                )?
                .execute(params![now.as_millis(), id, now.as_millis() - granularity, record])?;
            if changed == 1 && old.is_some() {
                record_events(tx, &derive_device(old.as_ref(), device_tx(tx, &id)?.as_ref()), now)?;
            }
            Ok(())
        })
        .await
    }
}
