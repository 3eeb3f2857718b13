//! Linked-chat tasks and their artifacts: [`AssignTasks`], [`ReadTasks`], [`ClaimTasks`],
//! [`RecordArtifacts`].

use async_trait::async_trait;
use rusqlite::{OptionalExtension, named_params, params};

use domain::ids::{ChatLinkId, ClaimId, OwnerId, TaskId};
use domain::runs::idempotency_record_key;
use domain::store::{AssignTasks, ClaimTasks, ReadTasks, RecordArtifacts, StoreResult};
use domain::tasks::{
    ArtifactCheck, ArtifactOutcome, ArtifactRecord, ArtifactUsage, AssignOutcome, AssignRejection, AssignTask,
    CancelTaskOutcome, ClaimOutcome, SubmitOutcome, SubmitTask, Task, TaskPage, TaskStatus, check_artifact,
    classify_cancel_task, classify_claim, classify_submit,
};

use crate::SqliteStore;
use crate::codec::{TASK_COLS, col, get_task_tx, task_row};
use crate::events::{change_task, note_task};
use crate::idempotency::{Create, Created};

#[async_trait]
impl AssignTasks for SqliteStore {
    async fn assign_task(&self, req: &AssignTask) -> StoreResult<AssignOutcome> {
        let req = req.clone();
        let policy = self.policy;
        self.write(move |tx, now| {
            let record = idempotency_record_key("task", req.owner.as_str(), &req.idempotency_key);
            let hash = req.request_hash();
            let link = req.link_id.to_string();
            let create = Create { record: &record, request_hash: &hash, ttl: policy.idempotency_ttl };
            let created = create.run(tx, now, |id| get_task_tx(tx, &link, id), || {
                let link_ok: Option<i64> = tx
                    .prepare_cached("SELECT 1 FROM links WHERE link_id = ?1 AND owner = ?2 AND deleted_at IS NULL")?
                    .query_row([link.as_str(), req.owner.as_str()], |r| r.get(0))
                    .optional()?;
                if link_ok.is_none() {
                    return Ok(Err(AssignRejection::LinkNotFound));
                }
                let task = Task::assigned(&req, now, &policy);
                tx.prepare_cached(&format!(
                    "INSERT INTO tasks ({TASK_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL)"
                ))?
                .execute(params![
                    task.task_id.to_string(),
                    task.link_id.to_string(),
                    task.owner.as_str(),
                    task.objective,
                    TaskStatus::Queued.as_str(),
                    task.created_at.as_millis(),
                    task.expires_at.as_millis(),
                ])?;
                note_task(tx, None, &task, now)?;
                Ok(Ok((task.task_id.to_string(), task)))
            })?;
            Ok(match created {
                Created::New(task) => AssignOutcome::Assigned(task),
                Created::Replayed(task) => AssignOutcome::Replayed(task),
                Created::Mismatch => AssignOutcome::Rejected(AssignRejection::IdempotencyMismatch),
                Created::Refused(rejection) => AssignOutcome::Rejected(rejection),
            })
        })
        .await
    }

    async fn cancel_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<CancelTaskOutcome> {
        let owner = owner.clone();
        self.write(move |tx, now| {
            change_task(tx, &link.to_string(), &task.to_string(), now, |old| {
                let new = tx
                    .prepare_cached(&format!(
                        "UPDATE tasks SET status = 'cancelled', finished_at = :now WHERE task_id = :task AND link_id = :link \
                         AND owner = :owner AND status IN ('queued', 'claimed') AND expires_at > :now RETURNING {TASK_COLS}"
                    ))?
                    .query_row(named_params! {
                        ":now": now.as_millis(),
                        ":task": task.to_string(),
                        ":link": link.to_string(),
                        ":owner": owner.as_str(),
                    }, task_row)
                    .optional()?;
                if new.is_some() {
                    return Ok((CancelTaskOutcome::Cancelled, new));
                }
                Ok((classify_cancel_task(old, &owner, &link, now), None))
            })
        })
        .await
    }

    async fn list_link_tasks(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        limit: usize,
        before: Option<TaskId>,
    ) -> StoreResult<TaskPage> {
        let owner = owner.as_str().to_owned();
        // UUIDv7 text sorts by creation; "~" sorts after every id (the first page).
        let before = before.map_or_else(|| "~".to_owned(), |t| t.to_string());
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {TASK_COLS} FROM tasks WHERE link_id = ?1 AND owner = ?2 AND task_id < ?3 \
                 ORDER BY task_id DESC LIMIT ?4"
            ))?;
            // One row more than asked tells whether there is a next page.
            let rows = st.query_map(params![link.to_string(), owner, before, limit as i64 + 1], task_row)?;
            let mut tasks = rows.collect::<rusqlite::Result<Vec<_>>>()?;
            let next = if tasks.len() > limit {
                tasks.truncate(limit);
                tasks.last().map(|t| t.task_id)
            } else {
                None
            };
            Ok(TaskPage { tasks, next })
        })
        .await
    }

    async fn list_artifacts(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        task: TaskId,
    ) -> StoreResult<Vec<ArtifactRecord>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(
                "SELECT a.link_id, a.task_id, a.claim_id, a.artifact_id, a.name, a.content_type, a.sha256, a.size, \
                 a.object_key FROM artifacts a JOIN tasks t ON t.task_id = a.task_id AND t.link_id = a.link_id \
                 WHERE a.link_id = ?1 AND a.task_id = ?2 AND t.owner = ?3 ORDER BY a.created_at, a.artifact_id",
            )?;
            st.query_map(params![link.to_string(), task.to_string(), owner], |row| {
                Ok(ArtifactRecord {
                    link_id: col(row, 0, "link_id", |s| ChatLinkId::parse("chat_link_id", s).ok())?,
                    task_id: col(row, 1, "task_id", |s| TaskId::parse("task_id", s).ok())?,
                    claim_id: col(row, 2, "claim_id", |s| ClaimId::parse("claim_id", s).ok())?,
                    artifact_id: row.get(3)?,
                    name: row.get(4)?,
                    content_type: row.get(5)?,
                    sha256: row.get(6)?,
                    size: u64::try_from(row.get::<_, i64>(7)?).unwrap_or(0),
                    object_key: row.get(8)?,
                })
            })?
            .collect()
        })
        .await
    }
}

/// A link's open tasks, oldest expiry first: the hot read of every agent's inbox.
pub(crate) fn list_open_sql() -> String {
    format!(
        "SELECT {TASK_COLS} FROM tasks WHERE link_id = ?1 AND owner = ?2 AND status IN ('queued', 'claimed') \
         AND expires_at > ?3 ORDER BY expires_at, task_id LIMIT ?4"
    )
}

#[async_trait]
impl ReadTasks for SqliteStore {
    async fn list_open_tasks(&self, owner: &OwnerId, link: ChatLinkId, limit: usize) -> StoreResult<Vec<Task>> {
        let owner = owner.as_str().to_owned();
        self.read(move |tx, now| {
            let mut st = tx.prepare_cached(&list_open_sql())?;
            st.query_map(params![link.to_string(), owner, now.as_millis(), limit as i64], task_row)?.collect()
        })
        .await
    }

    async fn get_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<Option<Task>> {
        let owner = owner.clone();
        self.read(move |tx, _| {
            Ok(get_task_tx(tx, &link.to_string(), &task.to_string())?.filter(|t| t.visible_to(&owner, &link)))
        })
        .await
    }
}

#[async_trait]
impl ClaimTasks for SqliteStore {
    async fn claim_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<ClaimOutcome> {
        let owner = owner.clone();
        let lease = self.policy.lease;
        self.write(move |tx, now| {
            change_task(tx, &link.to_string(), &task.to_string(), now, |old| {
                let claim_id = ClaimId::generate();
                let lease_until = now.plus(lease);
                let new = tx
                    .prepare_cached(&format!(
                        "UPDATE tasks SET status = 'claimed', claim_id = :claim_id, lease_until = :lease_until, claimed_at = :now \
                         WHERE task_id = :task AND link_id = :link AND owner = :owner AND expires_at > :now \
                         AND (status = 'queued' OR (status = 'claimed' AND lease_until <= :now)) RETURNING {TASK_COLS}"
                    ))?
                    .query_row(
                        named_params! {
                            ":claim_id": claim_id.to_string(),
                            ":lease_until": lease_until.as_millis(),
                            ":task": task.to_string(),
                            ":link": link.to_string(),
                            ":owner": owner.as_str(),
                            ":now": now.as_millis(),
                        },
                        task_row,
                    )
                    .optional()?;
                if new.is_some() {
                    return Ok((ClaimOutcome::Claimed { claim_id, lease_until }, new));
                }
                Ok((classify_claim(old, &owner, &link, now), None))
            })
        })
        .await
    }

    async fn submit_task(&self, req: &SubmitTask) -> StoreResult<SubmitOutcome> {
        let req = req.clone();
        self.write(move |tx, now| {
            let hash = req.result_hash();
            let SubmitTask { owner, link_id: link, task_id: task, claim_id: claim, status, result } = &req;
            change_task(tx, &link.to_string(), &task.to_string(), now, |old| {
                let new = tx
                    .prepare_cached(&format!(
                        "UPDATE tasks SET status = :status, result = :result, result_hash = :hash, finished_at = :now \
                         WHERE task_id = :task AND link_id = :link AND owner = :owner AND status = 'claimed' AND claim_id = :claim \
                         AND expires_at > :now RETURNING {TASK_COLS}"
                    ))?
                    .query_row(
                        named_params! {
                            ":status": TaskStatus::from(*status).as_str(),
                            ":result": result,
                            ":hash": hash,
                            ":now": now.as_millis(),
                            ":task": task.to_string(),
                            ":link": link.to_string(),
                            ":owner": owner.as_str(),
                            ":claim": claim.to_string(),
                        },
                        task_row,
                    )
                    .optional()?;
                if new.is_some() {
                    return Ok((SubmitOutcome::Accepted, new));
                }
                Ok((classify_submit(old, owner, link, claim, Some(&hash), now), None))
            })
        })
        .await
    }
}

#[async_trait]
impl RecordArtifacts for SqliteStore {
    /// The same decision as [`RecordArtifacts::check_artifact`], then the insert, in one
    /// IMMEDIATE transaction: the caps and the fencing hold at the record.
    async fn record_artifact(&self, owner: &OwnerId, record: &ArtifactRecord) -> StoreResult<ArtifactOutcome> {
        let (owner, r) = (owner.clone(), record.clone());
        self.write(move |tx, now| {
            Ok(match artifact_check_tx(tx, &owner, &r, now)? {
                ArtifactCheck::Proceed => {
                    tx.prepare_cached("INSERT INTO artifacts (link_id, task_id, artifact_id, claim_id, name, content_type, sha256, size, object_key, created_at) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)")?.execute(params![r.link_id.to_string(), r.task_id.to_string(), r.artifact_id, r.claim_id.to_string(), r.name, r.content_type, r.sha256, r.size as i64, r.object_key, now.as_millis()],
                    )?;
                    ArtifactOutcome::Recorded
                }
                ArtifactCheck::OverCap(cap) => ArtifactOutcome::OverCap(cap),
                ArtifactCheck::Replayed => ArtifactOutcome::Replayed,
                ArtifactCheck::DifferentContent => ArtifactOutcome::DifferentContent,
                ArtifactCheck::Rejected(why) => ArtifactOutcome::Rejected(why),
            })
        })
        .await
    }

    async fn check_artifact(&self, owner: &OwnerId, record: &ArtifactRecord) -> StoreResult<ArtifactCheck> {
        let (owner, r) = (owner.clone(), record.clone());
        self.read(move |tx, now| artifact_check_tx(tx, &owner, &r, now)).await
    }
}

/// Decides an upload of `r` ([`check_artifact`]) from the artifact's record, the task and its
/// artifacts' usage, read in the caller's transaction.
fn artifact_check_tx(
    tx: &rusqlite::Connection,
    owner: &OwnerId,
    r: &ArtifactRecord,
    now: domain::clock::Timestamp,
) -> rusqlite::Result<ArtifactCheck> {
    let (link, task) = (r.link_id.to_string(), r.task_id.to_string());
    let existing: Option<String> = tx
        .query_row(
            "SELECT sha256 FROM artifacts WHERE link_id = ?1 AND task_id = ?2 AND artifact_id = ?3",
            [&link, &task, &r.artifact_id],
            |row| row.get(0),
        )
        .optional()?;
    let t = get_task_tx(tx, &link, &task)?;
    let usage = artifact_usage(tx, &link, &task)?;
    Ok(check_artifact(existing.as_deref(), t.as_ref(), owner, r, now, usage))
}

/// What the artifacts of `task` of `link` use now.
fn artifact_usage(tx: &rusqlite::Connection, link: &str, task: &str) -> rusqlite::Result<ArtifactUsage> {
    tx.prepare_cached("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM artifacts WHERE link_id = ?1 AND task_id = ?2")?
        .query_row([link, task], |row| {
            let (count, bytes): (i64, i64) = (row.get(0)?, row.get(1)?);
            Ok(ArtifactUsage {
                count: u32::try_from(count).unwrap_or(u32::MAX),
                bytes: u64::try_from(bytes).unwrap_or(0),
            })
        })
}
