//! Projects, their device shares and chat links: [`ManageProjects`], [`SyncSessions`],
//! [`ManageLinks`].

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, named_params, params};

use domain::ids::{ChatLinkId, OwnerId, ProjectId};
use domain::projects::{ChatLink, Project, Subscription, SyncOutcome};
use domain::runs::SessionMeta;
use domain::store::{ManageLinks, ManageProjects, StoreResult, SyncSessions};
use domain::tasks::Task;

use crate::SqliteStore;
use crate::codec::{
    LINK_COLS, PROJECT_COLS, PROJECT_SELECT, TASK_COLS, col, get_project_tx, json, link_row, project_row, task_row,
};
use crate::error::{corrupt, missing_target};

/// Every device's shared sessions in `project`.
fn load_shares(tx: &Connection, project: &str) -> rusqlite::Result<domain::projects::DeviceShares> {
    let mut shares = domain::projects::DeviceShares::new();
    let mut st = tx.prepare_cached("SELECT device_id, sessions FROM device_sessions WHERE project_id = ?1")?;
    let rows = st.query_map([project], |r| {
        let id: String = r.get(0)?;
        let list: Vec<SessionMeta> = col(r, 1, "sessions", |s| serde_json::from_str(s).ok())?;
        Ok((id, list))
    })?;
    for row in rows {
        let (id, list) = row?;
        let id = uuid::Uuid::parse_str(&id).map_err(|_| corrupt(0, "device_id"))?;
        shares.insert(id, list);
    }
    Ok(shares)
}

/// Replaces one device's shared sessions in a project (empty = none) and rewrites the
/// project's union from every device's list, in the caller's transaction.
pub(crate) fn set_device_share_tx(
    tx: &Connection,
    project: &str,
    device: &str,
    sessions: &[SessionMeta],
) -> rusqlite::Result<()> {
    if sessions.is_empty() {
        tx.prepare_cached("DELETE FROM device_sessions WHERE project_id = ?1 AND device_id = ?2")?
            .execute(params![project, device])?;
    } else {
        tx.prepare_cached(
            "INSERT INTO device_sessions (project_id, device_id, sessions) VALUES (?1, ?2, ?3) \
             ON CONFLICT (project_id, device_id) DO UPDATE SET sessions = excluded.sessions",
        )?
        .execute(params![project, device, json(&sessions)])?;
    }
    let shares = load_shares(tx, project)?;
    tx.prepare_cached("UPDATE projects SET sessions = ?1 WHERE project_id = ?2")?
        .execute(params![json(&domain::projects::union_of(&shares)), project])?;
    Ok(())
}

#[async_trait]
impl ManageProjects for SqliteStore {
    async fn create_project(&self, owner: &OwnerId, name: &str) -> StoreResult<Project> {
        let p = Project::new(owner, name, self.clock.now());
        let row = p.clone();
        self.write(move |tx, _| {
            tx.prepare_cached(&format!(
                "INSERT INTO projects ({PROJECT_COLS}) VALUES (?1, ?2, ?3, 0, '[]', NULL, ?4, '{{}}')"
            ))?
            .execute(params![
                row.project_id.to_string(),
                row.owner.as_str(),
                row.name,
                row.created_at.as_millis()
            ])
        })
        .await?;
        Ok(p)
    }

    async fn set_project_enabled(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        enabled: bool,
    ) -> StoreResult<Option<Project>> {
        let owner = owner.as_str().to_owned();
        self.write(move |tx, _| {
            tx.prepare_cached(&format!(
                "UPDATE projects SET enabled = ?1 WHERE project_id = ?2 AND owner = ?3 RETURNING {PROJECT_SELECT}"
            ))?
            .query_row(params![enabled, project.to_string(), owner], project_row)
            .optional()
        })
        .await
    }

    async fn get_project(&self, owner: &OwnerId, project: ProjectId) -> StoreResult<Option<Project>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| get_project_tx(tx, &owner, &project.to_string())).await
    }

    async fn list_projects(&self, owner: &OwnerId) -> StoreResult<Vec<Project>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {PROJECT_SELECT} FROM projects WHERE owner = ?1 ORDER BY project_id"
            ))?;
            st.query_map([owner], project_row)?.collect()
        })
        .await
    }
}

#[async_trait]
impl SyncSessions for SqliteStore {
    async fn sync_sessions(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        device: uuid::Uuid,
        sessions: &[SessionMeta],
    ) -> StoreResult<SyncOutcome> {
        let owner = owner.as_str().to_owned();
        let project = project.to_string();
        let sessions = sessions.to_vec();
        self.write(move |tx, now| {
            // What DynamoDB writes, this writes (`domain::projects::sync_write`): nothing when
            // the desktop's list is unchanged and the last sync recent, only the time when it is
            // older, the shares when they changed.
            let Some(current) = get_project_tx(tx, &owner, &project)? else { return Ok(SyncOutcome::NotFound) };
            if !current.enabled {
                return Ok(SyncOutcome::Disabled);
            }
            let shares = match domain::projects::sync_write(
                &load_shares(tx, &project)?,
                device,
                &sessions,
                current.last_sync_at,
                now,
            ) {
                domain::projects::SyncWrite::Nothing => return Ok(SyncOutcome::Synced(current)),
                domain::projects::SyncWrite::Stamp => {
                    tx.prepare_cached("UPDATE projects SET last_sync_at = ?1 WHERE project_id = ?2 AND owner = ?3")?
                        .execute(params![now.as_millis(), project, owner])?;
                    let p = get_project_tx(tx, &owner, &project)?.ok_or_else(missing_target)?;
                    return Ok(SyncOutcome::Synced(p));
                }
                domain::projects::SyncWrite::Shares(shares) => shares,
            };
            // The same bound as DynamoDB's (one project item): checked before anything is written.
            let bytes = domain::projects::StoredShares::of(&shares).map_err(|_| corrupt(0, "sessions"))?.bytes();
            if bytes > domain::limits::MAX_SHARES_BYTES {
                return Ok(match get_project_tx(tx, &owner, &project)? {
                    None => SyncOutcome::NotFound,
                    Some(p) if !p.enabled => SyncOutcome::Disabled,
                    Some(_) => SyncOutcome::TooLarge { bytes },
                });
            }
            let enabled = tx
                .prepare_cached(
                    "UPDATE projects SET last_sync_at = ?1 WHERE project_id = ?2 AND owner = ?3 AND enabled = 1",
                )?
                .execute(params![now.as_millis(), project, owner])?;
            if enabled == 0 {
                return Ok(if get_project_tx(tx, &owner, &project)?.is_some() {
                    SyncOutcome::Disabled
                } else {
                    SyncOutcome::NotFound
                });
            }
            set_device_share_tx(tx, &project, &device.to_string(), &sessions)?;
            // The durations of sessions no longer shared go with them.
            let kept =
                domain::projects::durations_kept(&current.recent_durations, &domain::projects::union_of(&shares));
            if kept.len() != current.recent_durations.len() {
                tx.prepare_cached("UPDATE projects SET durations = ?1 WHERE project_id = ?2")?
                    .execute(params![json(&kept), project])?;
            }
            let p = get_project_tx(tx, &owner, &project)?.ok_or_else(missing_target)?;
            Ok(SyncOutcome::Synced(p))
        })
        .await
    }
}

#[async_trait]
impl ManageLinks for SqliteStore {
    async fn create_link(&self, owner: &OwnerId, project: ProjectId, name: &str) -> StoreResult<Option<ChatLink>> {
        let link = ChatLink::new(owner, project, name, self.clock.now());
        self.write(move |tx, _| {
            if get_project_tx(tx, link.owner.as_str(), &project.to_string())?.is_none() {
                return Ok(None);
            }
            tx.prepare_cached(&format!("INSERT INTO links ({LINK_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL)"))?
                .execute(params![
                    link.link_id.to_string(),
                    link.owner.as_str(),
                    project.to_string(),
                    link.name,
                    link.created_at.as_millis()
                ])?;
            Ok(Some(link))
        })
        .await
    }

    async fn get_link(&self, owner: &OwnerId, link: ChatLinkId) -> StoreResult<Option<ChatLink>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            tx.prepare_cached(&format!(
                "SELECT {LINK_COLS} FROM links WHERE link_id = ?1 AND owner = ?2 AND deleted_at IS NULL"
            ))?
            .query_row([link.to_string(), owner], link_row)
            .optional()
        })
        .await
    }

    async fn list_links(&self, owner: &OwnerId) -> StoreResult<Vec<ChatLink>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {LINK_COLS} FROM links WHERE owner = ?1 AND deleted_at IS NULL ORDER BY created_at, link_id"
            ))?;
            st.query_map([owner], link_row)?.collect()
        })
        .await
    }

    async fn delete_link(&self, owner: &OwnerId, link: ChatLinkId) -> StoreResult<Option<usize>> {
        let owner = owner.as_str().to_owned();
        self.write(move |tx, now| {
            // A link already deleted (tombstone not yet expired) finishes its sweep again.
            let known: Option<i64> = tx
                .query_row("SELECT 1 FROM links WHERE link_id = ?1 AND owner = ?2", [link.to_string(), owner.clone()], |r| {
                    r.get(0)
                })
                .optional()?;
            if known.is_none() {
                return Ok(None);
            }
            tx.prepare_cached("UPDATE links SET deleted_at = COALESCE(deleted_at, ?1), subscription = NULL WHERE link_id = ?2 AND owner = ?3")?.execute(params![now.as_millis(), link.to_string(), owner],
            )?;
            let open: Vec<Task> = {
                let mut st = tx.prepare_cached(&format!(
                    "SELECT {TASK_COLS} FROM tasks WHERE link_id = ?1 AND owner = ?2 \
                     AND status IN ('queued', 'claimed') AND expires_at > ?3"
                ))?;
                st.query_map(params![link.to_string(), owner, now.as_millis()], task_row)?
                    .collect::<rusqlite::Result<_>>()?
            };
            // The open tasks become cancelled; `RETURNING` gives each one's new row, so the
            // events come from the write's own images.
            let cancelled: Vec<Task> = {
                let mut st = tx.prepare_cached(&format!(
                    "UPDATE tasks SET status = 'cancelled', finished_at = :now, link_deleted = 1 \
                     WHERE link_id = :link AND owner = :owner AND status IN ('queued', 'claimed') AND expires_at > :now \
                     RETURNING {TASK_COLS}"
                ))?;
                st.query_map(named_params! {
                    ":now": now.as_millis(),
                    ":link": link.to_string(),
                    ":owner": owner,
                }, task_row)?
                    .collect::<rusqlite::Result<_>>()?
            };
            for new in &cancelled {
                let old = open.iter().find(|t| t.task_id == new.task_id);
                crate::events::note_task(tx, old, new, now)?;
            }
            tx.prepare_cached("UPDATE tasks SET link_deleted = 1 WHERE link_id = ?1 AND owner = ?2 AND link_deleted = 0")?.execute(params![link.to_string(), owner],
            )?;
            Ok(Some(cancelled.len()))
        })
        .await
    }

    async fn set_subscription(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        subscription: Option<&Subscription>,
    ) -> StoreResult<Option<ChatLink>> {
        let owner = owner.as_str().to_owned();
        let json = subscription.map(json);
        self.write(move |tx, _| {
            tx.prepare_cached(&format!(
                "UPDATE links SET subscription = ?1 WHERE link_id = ?2 AND owner = ?3 AND deleted_at IS NULL \
                     RETURNING {LINK_COLS}"
            ))?
            .query_row(params![json, link.to_string(), owner], link_row)
            .optional()
        })
        .await
    }

    async fn set_desktop_tasks(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        desktop_tasks: Option<&domain::dispatch::DesktopTasks>,
    ) -> StoreResult<Option<ChatLink>> {
        let owner = owner.as_str().to_owned();
        let stored = desktop_tasks.map(domain::dispatch::DesktopTasks::encode);
        self.write(move |tx, _| {
            tx.prepare_cached(&format!(
                "UPDATE links SET desktop_tasks = ?1 WHERE link_id = ?2 AND owner = ?3 AND deleted_at IS NULL \
                     RETURNING {LINK_COLS}"
            ))?
            .query_row(params![stored, link.to_string(), owner], link_row)
            .optional()
        })
        .await
    }
}
