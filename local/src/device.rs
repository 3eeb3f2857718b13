//! The relay device of this machine: the local server makes it once and keeps its token in
//! the data folder, so the token its banner prints lasts across restarts.

use std::path::Path;

use anyhow::Context;
use domain::ids::OwnerId;
use domain::store::{AuthenticateDevices, ManageDevices};
use store_sqlite::SqliteStore;

/// Name of the device the local server creates for a relay on this machine (once: its token is
/// kept in [`DEVICE_TOKEN_FILE`]).
pub const LOCAL_DEVICE: &str = "local relay";

/// The file in the data folder that keeps the local relay device's token (0600), so the token
/// the banner prints lasts across restarts.
pub const DEVICE_TOKEN_FILE: &str = "relay-device-token";

/// The local relay device's token: the one kept in [`DEVICE_TOKEN_FILE`] while the store still
/// accepts it (the same device on every start), else a new device whose token is kept there.
/// A new device revokes the earlier "local relay" devices, whose tokens nobody can see any more
/// (a removed file, a revoked device); a device the owner revoked in the panel stays revoked.
pub(crate) async fn local_device_token(
    store: &SqliteStore,
    owner: &OwnerId,
    data_dir: &Path,
) -> anyhow::Result<(String, uuid::Uuid)> {
    let file = data_dir.join(DEVICE_TOKEN_FILE);
    if let Ok(kept) = std::fs::read_to_string(&file) {
        let kept = kept.trim();
        if let Some(d) = store.device_by_token_hash(&domain::devices::token_hash(kept)).await?
            && &d.owner == owner
        {
            return Ok((kept.to_owned(), d.device_id));
        }
    }
    for d in store.list_devices(owner).await? {
        if d.name == LOCAL_DEVICE && d.revoked_at.is_none() {
            store.revoke_device(owner, d.device_id).await?;
        }
    }
    let (token, hash) = domain::devices::new_token()?;
    let device = store.create_device(owner, LOCAL_DEVICE, &hash).await?;
    private_files::write(&file, token.as_bytes()).with_context(|| format!("writing {}", file.display()))?;
    Ok((token, device.device_id))
}
