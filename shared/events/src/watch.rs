//! The desktop watch (`desktop.offline`): a run that waits for a desktop that stopped syncing
//! makes that desktop's mark, and so its event.
//!
//! A look at one queued run ([`check`]): if it is still queued, every unrevoked desktop that
//! shares its session and is [`overdue`](domain::devices::Device::overdue) — synced before,
//! not paused, silent past its online window (a relay records itself on its control polls, so
//! a desktop busy with a long run is not silent) — is marked offline in one conditional write
//! that a sync in between wins (`WatchDesktops::mark_offline`). The mark's change is the
//! `desktop.offline` event (derived by the stores like every other); the desktop's next sync
//! clears it, which is `desktop.online`.
//!
//! When a run is looked at: the cloud's publisher queues a [`DesktopWatch`] beside each
//! `run.queued`, delayed by each of [`domain::fleet::WATCH_AFTER`] (past a polling relay's window and
//! past a doorbell relay's), and the notifier runs it; the local server looks at its queued runs
//! on a timer. A desktop that goes silent while a run has waited longer than both looks is
//! noticed by the next run queued for it.

use std::time::Duration;

use domain::clock::Timestamp;
use domain::events::DesktopWatch;
use domain::ids::{AgentId, CommandId, OwnerId};
use domain::limits::Policy;
use domain::runs::RunStatus;
use domain::store::{ManageDevices, ManageProjects, ReadRuns, StoreError, WatchDesktops};

/// At most this many desktops sharing one session are looked at (the rest: not marked).
pub const MAX_DESKTOPS: usize = 10;

/// Looks at the run `watch` names at `now`, for relays polling every `poll_interval`; how many
/// desktops it marked offline. A watch that names nothing readable (a malformed id, a run gone)
/// marks nothing.
///
/// # Errors
/// [`StoreError`] when a read or the mark fails (the watch is retried like a delivery).
pub async fn check<S>(
    store: &S,
    watch: &DesktopWatch,
    now: Timestamp,
    poll_interval: Duration,
) -> Result<usize, StoreError>
where
    S: ReadRuns + ManageProjects + ManageDevices + WatchDesktops + ?Sized,
{
    let (Ok(owner), Ok(command)) =
        (OwnerId::new(watch.owner.clone()), CommandId::parse("command_id", &watch.command_id))
    else {
        return Ok(0);
    };
    let agent = AgentId::from_stored(&watch.agent);
    let Some(run) = store.get_run(&agent, command).await? else { return Ok(0) };
    let policy = Policy { poll_interval, ..Policy::default() };
    if run.owner != owner || run.view(now, &policy).status != RunStatus::Queued {
        return Ok(0);
    }
    let Some(project) = store.get_project(&owner, run.project_id).await? else { return Ok(0) };
    let mut marked = 0;
    for id in project.devices_sharing(&run.graph_session_id).take(MAX_DESKTOPS).collect::<Vec<_>>() {
        let Some(device) = store.get_device(&owner, id).await? else { continue };
        if device.overdue(now, poll_interval) && store.mark_offline(&owner, id, device.last_seen_at).await? {
            tracing::info!(device = %id, command = %run.command_id, "a desktop stopped syncing while a run waits for it");
            marked += 1;
        }
    }
    Ok(marked)
}
