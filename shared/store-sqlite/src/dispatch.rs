//! Tasks a desktop's Graph hands to a chat: [`DispatchTasks`] (`domain::dispatch`).

use async_trait::async_trait;
use rusqlite::{OptionalExtension, named_params, params};

use domain::dispatch::{DesktopTasks, DispatchOutcome, DispatchRejection, DispatchTask, MAX_TASKS_PER_RUN, run_admits};
use domain::ids::{ChatLinkId, OwnerId, TaskId};
use domain::runs::idempotency_record_key;
use domain::store::{DispatchTasks, StoreResult};
use domain::tasks::{Task, TaskStatus};

use crate::SqliteStore;
use crate::codec::{TASK_COLS, get_run_tx, get_task_tx, json, task_row};
use crate::events::note_task;
use crate::idempotency::{Create, Created};

#[async_trait]
impl DispatchTasks for SqliteStore {
    /// One IMMEDIATE transaction: the key, the run (running on the device, under its count),
    /// the link's consent, the count, the task.
    async fn dispatch_task(&self, req: &DispatchTask) -> StoreResult<DispatchOutcome> {
        let req = req.clone();
        let policy = self.policy;
        self.write(move |tx, now| {
            let record = idempotency_record_key("dispatch", &req.record_principal(), &req.idempotency_key);
            let hash = req.request_hash();
            let link = req.link_id.to_string();
            let command = req.command_id.to_string();
            let create = Create { record: &record, request_hash: &hash, ttl: policy.idempotency_ttl };
            let created = create.run(
                tx,
                now,
                |id| get_task_tx(tx, &link, id),
                || {
                    let Some(run) = get_run_tx(tx, &command)?.filter(|r| run_admits(r, &req.owner, req.device_id))
                    else {
                        return Ok(Err(DispatchRejection::RunNotRunning));
                    };
                    // Checked in the order the cloud's transaction classifies: the run's count
                    // before the link's consent (nothing is written unless every check holds).
                    let dispatched: u32 = tx
                        .prepare_cached("SELECT dispatched FROM runs WHERE command_id = ?1")?
                        .query_row([command.as_str()], |r| r.get(0))?;
                    if dispatched >= MAX_TASKS_PER_RUN {
                        return Ok(Err(DispatchRejection::TooManyForRun));
                    }
                    let consent: Option<Option<String>> = tx
                        .prepare_cached(
                            "SELECT desktop_tasks FROM links WHERE link_id = ?1 AND owner = ?2 AND deleted_at IS NULL",
                        )?
                        .query_row([link.as_str(), req.owner.as_str()], |r| r.get(0))
                        .optional()?;
                    let admits = consent
                        .flatten()
                        .and_then(|s| DesktopTasks::decode(&s))
                        .is_some_and(|d| d.admits(&run.graph_session_id));
                    if !admits {
                        return Ok(Err(DispatchRejection::LinkRefuses));
                    }
                    tx.prepare_cached("UPDATE runs SET dispatched = dispatched + 1 WHERE command_id = ?1")?
                        .execute([command.as_str()])?;
                    let task = req.task(&run.graph_session_id, now);
                    tx.prepare_cached(&format!(
                        "INSERT INTO tasks ({TASK_COLS}, origin_command) VALUES \
                     (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL, NULL, NULL, NULL, 0, NULL, ?8, ?9)"
                    ))?
                    .execute(params![
                        task.task_id.to_string(),
                        task.link_id.to_string(),
                        task.owner.as_str(),
                        task.objective,
                        TaskStatus::Queued.as_str(),
                        task.created_at.as_millis(),
                        task.expires_at.as_millis(),
                        task.origin.as_ref().map(json),
                        command,
                    ])?;
                    note_task(tx, None, &task, now)?;
                    Ok(Ok((task.task_id.to_string(), task)))
                },
            )?;
            Ok(match created {
                Created::New(task) => DispatchOutcome::Assigned(task),
                Created::Replayed(task) => DispatchOutcome::Replayed(task),
                Created::Mismatch => DispatchOutcome::Rejected(DispatchRejection::IdempotencyMismatch),
                Created::Refused(rejection) => DispatchOutcome::Rejected(rejection),
            })
        })
        .await
    }

    async fn dispatched_task(
        &self,
        owner: &OwnerId,
        device: uuid::Uuid,
        link: ChatLinkId,
        task: TaskId,
    ) -> StoreResult<Option<Task>> {
        let owner = owner.clone();
        self.read(move |tx, _| {
            Ok(get_task_tx(tx, &link.to_string(), &task.to_string())?.filter(|t| t.dispatched_by(&owner, device)))
        })
        .await
    }
}

/// Cancels the open tasks the run `command` of `owner` handed to chats, in the caller's
/// transaction (its completion's): how many.
pub(crate) fn cancel_run_tasks(
    tx: &crate::pool::Tx<'_>,
    owner: &str,
    command: &str,
    now: domain::clock::Timestamp,
) -> rusqlite::Result<usize> {
    let open: Vec<Task> = tx
        .prepare_cached(&format!(
            "SELECT {TASK_COLS} FROM tasks WHERE origin_command = ?1 AND owner = ?2 \
             AND status IN ('queued', 'claimed') AND expires_at > ?3"
        ))?
        .query_map(params![command, owner, now.as_millis()], task_row)?
        .collect::<rusqlite::Result<_>>()?;
    if open.is_empty() {
        return Ok(0);
    }
    let cancelled: Vec<Task> = tx
        .prepare_cached(&format!(
            "UPDATE tasks SET status = 'cancelled', finished_at = :now WHERE origin_command = :command \
             AND owner = :owner AND status IN ('queued', 'claimed') AND expires_at > :now RETURNING {TASK_COLS}"
        ))?
        .query_map(named_params! { ":now": now.as_millis(), ":command": command, ":owner": owner }, task_row)?
        .collect::<rusqlite::Result<_>>()?;
    for new in &cancelled {
        note_task(tx, open.iter().find(|t| t.task_id == new.task_id), new, now)?;
    }
    Ok(cancelled.len())
}
