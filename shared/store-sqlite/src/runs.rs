//! Graph runs: [`QueueRuns`], [`ReadRuns`], [`CancelRuns`], [`RelayRuns`], [`OwnerRuns`].

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, named_params, params};

use domain::clock::Timestamp;
use domain::events::derive_run;
use domain::ids::{AgentId, CommandId, OwnerId, ProjectId};
use domain::projects::{check_named_project, resolve_project};
use domain::runs::{
    CancelRunOutcome, CancelStep, Canceller, CompleteOutcome, CompleteStep, Completion, ControlOutcome, QueueFilter,
    QueueOutcome, QueueRejection, QueueRun, Run, RunStatus, StartOutcome, classify_cancel, classify_complete,
    classify_control, classify_start, idempotency_record_key,
};
use domain::store::{CancelRuns, OwnerRuns, QueueRuns, ReadRuns, RelayRuns, StoreResult};

use crate::SqliteStore;
use crate::codec::{PROJECT_SELECT, RUN_COLS, get_project_tx, get_run_tx, json, project_row, run_row};
use crate::events::{change_run, record_events};
use crate::idempotency::{Create, Created};

/// Writes a just-completed run's duration into its project's summary slot (same transaction).
fn record_duration_tx(tx: &Connection, run: &Run, now: Timestamp) -> rusqlite::Result<()> {
    let Some(started) = run.started_at else { return Ok(()) };
    let key = domain::runs::duration_key(&run.graph_session_id, now);
    tx.prepare_cached("UPDATE projects SET durations = json_set(durations, ?1, ?2) WHERE project_id = ?3")?
        .execute(params![format!("$.\"{key}\""), now.since(started).as_millis() as i64, run.project_id.to_string()])?;
    Ok(())
}

#[async_trait]
impl QueueRuns for SqliteStore {
    async fn queue_run(&self, req: &QueueRun) -> StoreResult<QueueOutcome> {
        let req = req.clone();
        let policy = self.policy;
        self.write(move |tx, now| {
            let record = idempotency_record_key("run", req.agent.as_str(), &req.idempotency_key);
            let hash = req.request_hash();
            let create = Create { record: &record, request_hash: &hash, ttl: policy.idempotency_ttl };
            let created = create.run(tx, now, |id| get_run_tx(tx, id), || {
                let owner = req.owner.as_str();
                let target = match req.project_id {
                    Some(p) => {
                        check_named_project(get_project_tx(tx, owner, &p.to_string())?.as_ref(), &req.graph_session_id)
                    }
                    None => {
                        let mut st =
                            tx.prepare_cached(&format!("SELECT {PROJECT_SELECT} FROM projects WHERE owner = ?1"))?;
                        let projects = st.query_map([owner], project_row)?.collect::<rusqlite::Result<Vec<_>>>()?;
                        resolve_project(&projects, &req.graph_session_id)
                    }
                };
                let target = match target {
                    Ok(t) => t,
                    Err(rejection) => return Ok(Err(rejection)),
                };
                let run = Run::queued(&req, target, now, &policy);
                tx.prepare_cached(&format!(
                    "INSERT INTO runs ({RUN_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL)"
                ))?
                .execute(params![
                    run.command_id.to_string(),
                    run.owner.as_str(),
                    run.agent.as_str(),
                    run.project_id.to_string(),
                    run.graph_session_id.as_str(),
                    run.slug,
                    run.arguments.to_string(),
                    RunStatus::Queued.as_str(),
                    run.queued_at.as_millis(),
                    run.expires_at.as_millis(),
                ])?;
                record_events(tx, &derive_run(None, Some(&run)), now)?;
                tx.rings.note_run(None, &run);
                Ok(Ok((run.command_id.to_string(), run)))
            })?;
            Ok(match created {
                Created::New(run) => QueueOutcome::Queued(run),
                Created::Replayed(run) => QueueOutcome::Replayed(run),
                Created::Mismatch => QueueOutcome::Rejected(QueueRejection::IdempotencyMismatch),
                Created::Refused(rejection) => QueueOutcome::Rejected(rejection),
            })
        })
        .await
    }
}

#[async_trait]
impl ReadRuns for SqliteStore {
    async fn get_run(&self, agent: &AgentId, command: CommandId) -> StoreResult<Option<Run>> {
        let agent = agent.clone();
        self.read(move |tx, _| Ok(get_run_tx(tx, &command.to_string())?.filter(|r| r.agent == agent))).await
    }

    async fn own_runs_ahead(&self, run: &Run) -> StoreResult<usize> {
        let (project, agent, id) =
            (run.project_id.to_string(), run.agent.as_str().to_owned(), run.command_id.to_string());
        let expires = run.expires_at.as_millis();
        self.read(move |tx, now| {
            // The queue's own order (`list_queued`'s): by expiry, which is queued time plus a
            // constant, then id.
            let n: i64 = tx
                .prepare_cached(
                    "SELECT COUNT(*) FROM (SELECT agent FROM runs WHERE project_id = ?1 AND status = 'queued' \
                     AND expires_at > ?3 AND (expires_at < ?4 OR (expires_at = ?4 AND command_id < ?5)) \
                     ORDER BY expires_at DESC, command_id DESC LIMIT ?6) WHERE agent = ?2",
                )?
                .query_row(
                    params![project, agent, now.as_millis(), expires, id, domain::limits::MAX_RUNS_AHEAD as i64],
                    |r| r.get(0),
                )?;
            Ok(usize::try_from(n).unwrap_or(0))
        })
        .await
    }
}

/// A cancel by `by` in the caller's transaction (the agent's `cancel_graph_run` and the owner's
/// cancel share it): the outcome and the run as it is after it (`None` when not found).
fn cancel_tx(
    tx: &crate::pool::Tx<'_>,
    by: Canceller<'_>,
    command: CommandId,
    now: Timestamp,
    policy: &domain::limits::Policy,
) -> rusqlite::Result<(CancelRunOutcome, Option<Run>)> {
    let id = command.to_string();
    // The canceller's column ("agent" or "owner"), a fixed name: no input reaches the SQL text.
    let (column, who) = by.attribute();
    change_run(tx, &id, now, |old| {
        let new = tx
            .prepare_cached(&format!(
                "UPDATE runs SET status = 'cancelled', finished_at = :now \
                 WHERE command_id = :id AND {column} = :who AND status = 'queued' AND expires_at > :now RETURNING {RUN_COLS}"
            ))?
            .query_row(named_params! {":now": now.as_millis(), ":id": id, ":who": who}, run_row)
            .optional()?;
        if let Some(run) = &new {
            return Ok(((CancelRunOutcome::Cancelled, Some(run.clone())), new));
        }
        let unchanged = old.cloned();
        match classify_cancel(old, by, now, policy) {
            CancelStep::Done(CancelRunOutcome::NotFound) => Ok(((CancelRunOutcome::NotFound, None), None)),
            CancelStep::Done(outcome) => Ok(((outcome, unchanged), None)),
            CancelStep::FlagRunning => {
                let cutoff = now.minus(policy.heartbeat_timeout).as_millis();
                let new = tx
                    .prepare_cached(&format!(
                        "UPDATE runs SET cancel_requested = 1 WHERE command_id = ?1 AND {column} = ?2 \
                         AND status = 'running' AND last_heartbeat_at > ?3 RETURNING {RUN_COLS}"
                    ))?
                    .query_row(params![id, who, cutoff], run_row)
                    .optional()?;
                // Inside one IMMEDIATE transaction the run is still the one classified,
                // so the flag holds; answer from the image rather than guess if not.
                Ok(match new {
                    Some(run) => ((CancelRunOutcome::CancelRequested, Some(run.clone())), Some(run)),
                    None => ((CancelRunOutcome::Unchanged(RunStatus::Running), unchanged), None),
                })
            }
        }
    })
}

#[async_trait]
impl CancelRuns for SqliteStore {
    async fn cancel_run(&self, agent: &AgentId, command: CommandId) -> StoreResult<CancelRunOutcome> {
        let agent = agent.clone();
        let policy = self.policy;
        self.write(move |tx, now| Ok(cancel_tx(tx, Canceller::Agent(&agent), command, now, &policy)?.0)).await
    }
}

#[async_trait]
impl RelayRuns for SqliteStore {
    async fn list_queued(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        limit: usize,
        filter: &QueueFilter,
    ) -> StoreResult<Vec<Run>> {
        let (owner, filter) = (owner.as_str().to_owned(), filter.clone());
        self.read(move |tx, now| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {RUN_COLS} FROM runs WHERE project_id = ?1 AND owner = ?2 AND status = 'queued' \
                 AND expires_at > ?3 ORDER BY expires_at, command_id"
            ))?;
            // The filter before the limit: rows are read until `limit` are kept.
            let mut kept = Vec::new();
            for run in st.query_map(params![project.to_string(), owner, now.as_millis()], run_row)? {
                let run = run?;
                if filter.keeps(&run) {
                    kept.push(run);
                    if kept.len() == limit {
                        break;
                    }
                }
            }
            Ok(kept)
        })
        .await
    }

    async fn start_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
        execution_id: &str,
        device: uuid::Uuid,
    ) -> StoreResult<StartOutcome> {
        let owner = owner.clone();
        let execution_id = execution_id.to_owned();
        let policy = self.policy;
        self.write(move |tx, now| {
            let id = command.to_string();
            change_run(tx, &id, now, |old| {
                let new = tx
                    .prepare_cached(&format!(
                        "UPDATE runs SET status = 'running', started_at = :now, last_heartbeat_at = :now, execution_id = :execution_id, \
                         device_id = :device WHERE command_id = :id AND owner = :owner AND status = 'queued' AND expires_at > :now RETURNING {RUN_COLS}"
                    ))?
                    .query_row(named_params! {
                        ":now": now.as_millis(),
                        ":execution_id": execution_id,
                        ":device": device.to_string(),
                        ":id": id,
                        ":owner": owner.as_str(),
                    }, run_row)
                    .optional()?;
                if new.is_some() {
                    return Ok((StartOutcome::Started, new));
                }
                Ok((classify_start(old, &owner, &execution_id, now, &policy), None))
            })
        })
        .await
    }

    async fn control_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
        progress: Option<&domain::relay::ControlRequest>,
    ) -> StoreResult<ControlOutcome> {
        let owner = owner.clone();
        let policy = self.policy;
        let progress = progress.cloned();
        self.write(move |tx, now| {
            let id = command.to_string();
            let cutoff = now.minus(policy.heartbeat_timeout).as_millis();
            // Neither a heartbeat nor progress changes anything an event reports: no outbox.
            let (execution, kept) = match &progress {
                None => (None, None),
                Some(p) => (
                    Some(p.execution_id.clone()),
                    Some(json(&domain::progress::RunProgress { progress: p.progress.clone(), updated_at: now })),
                ),
            };
            let flag: Option<bool> = tx
                .prepare_cached(
                    "UPDATE runs SET last_heartbeat_at = ?1, progress = COALESCE(?5, progress) \
                     WHERE command_id = ?2 AND owner = ?3 AND status = 'running' AND last_heartbeat_at > ?4 \
                     AND (?6 IS NULL OR execution_id = ?6) \
                     RETURNING cancel_requested",
                )?
                .query_row(params![now.as_millis(), id, owner.as_str(), cutoff, kept, execution], |r| r.get(0))
                .optional()?;
            Ok(match flag {
                Some(cancel_requested) => ControlOutcome::Running { cancel_requested },
                None => classify_control(get_run_tx(tx, &id)?.as_ref(), &owner, now, &policy),
            })
        })
        .await
    }

    async fn complete_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
        completion: &Completion,
    ) -> StoreResult<CompleteOutcome> {
        let owner = owner.clone();
        let completion = completion.clone();
        let policy = self.policy;
        self.write(move |tx, now| {
            let id = command.to_string();
            change_run(tx, &id, now, |old| {
                let hash = completion.hash();
                let body = json(&completion);
                let cutoff = now.minus(policy.heartbeat_timeout).as_millis();
                let status = RunStatus::from(completion.status);
                // A queued command may only be refused (failed/cancelled), never completed unstarted.
                let allow_queued = status != RunStatus::Completed;
                // A run that reads failed because its desktop stopped reporting takes the
                // relay's own `failed` from the execution that ran it: why it stopped.
                let says_why = status == RunStatus::Failed;
                let new = tx
                    .prepare_cached(&format!(
                        "UPDATE runs SET status = :status, finished_at = :now, execution_id = :execution_id, completion = :completion, completion_hash = :hash \
                         WHERE command_id = :id AND owner = :owner AND ( \
                           (status = 'running' AND execution_id = :execution_id AND last_heartbeat_at > :cutoff AND cancel_requested = 0) \
                           OR (:allow_queued AND status = 'queued' AND expires_at > :now) \
                           OR (:says_why AND status = 'running' AND execution_id = :execution_id AND last_heartbeat_at <= :cutoff)) \
                         RETURNING {RUN_COLS}"
                    ))?
                    .query_row(
                        named_params! {
                            ":status": status.as_str(),
                            ":now": now.as_millis(),
                            ":execution_id": completion.execution_id,
                            ":completion": body,
                            ":hash": hash,
                            ":id": id,
                            ":owner": owner.as_str(),
                            ":cutoff": cutoff,
                            ":allow_queued": allow_queued,
                            ":says_why": says_why,
                        },
                        run_row,
                    )
                    .optional()?;
                if let Some(run) = &new {
                    if status == RunStatus::Completed {
                        record_duration_tx(tx, run, now)?;
                    }
                    return Ok((CompleteOutcome::Recorded(status), new));
                }
                match classify_complete(old, &owner, &completion, &hash, now, &policy) {
                    CompleteStep::Done(outcome) => Ok((outcome, None)),
                    CompleteStep::RecordCancelled => {
                        let new = tx
                            .prepare_cached(&format!(
                                "UPDATE runs SET status = 'cancelled', finished_at = ?1, completion = ?2, completion_hash = ?3 \
                                 WHERE command_id = ?4 AND owner = ?5 AND status = 'running' AND execution_id = ?6 \
                                 AND cancel_requested = 1 AND last_heartbeat_at > ?7 RETURNING {RUN_COLS}"
                            ))?
                            .query_row(
                                params![now.as_millis(), body, hash, id, owner.as_str(), completion.execution_id, cutoff],
                                run_row,
                            )
                            .optional()?;
                        // Inside one IMMEDIATE transaction the run is still the one classified;
                        // answer from the image rather than guess if the write did not match.
                        let outcome = if new.is_some() {
                            CompleteOutcome::Recorded(RunStatus::Cancelled)
                        } else {
                            CompleteOutcome::Conflict(RunStatus::Running)
                        };
                        Ok((outcome, new))
                    }
                }
            })
            .and_then(|outcome| {
                // The run ended (now, before, or otherwise): the tasks it handed to chats and
                // still waits on are cancelled with it (`domain::dispatch`).
                if !matches!(outcome, CompleteOutcome::NotFound) {
                    crate::dispatch::cancel_run_tasks(tx, owner.as_str(), &id, now)?;
                }
                Ok(outcome)
            })
        })
        .await
    }
}

#[async_trait]
impl OwnerRuns for SqliteStore {
    async fn recent_runs(&self, owner: &OwnerId, limit: usize, before: Option<CommandId>) -> StoreResult<Vec<Run>> {
        let owner = owner.as_str().to_owned();
        let before = before.map_or_else(|| "~".to_owned(), |c| c.to_string());
        self.read(move |tx, _| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {RUN_COLS} FROM runs WHERE owner = ?1 AND command_id < ?2 ORDER BY command_id DESC LIMIT ?3"
            ))?;
            st.query_map(params![owner, before, limit as i64], run_row)?.collect()
        })
        .await
    }

    async fn cancel_owned_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
    ) -> StoreResult<Option<(CancelRunOutcome, Run)>> {
        let owner = owner.clone();
        let policy = self.policy;
        self.write(move |tx, now| {
            let (outcome, run) = cancel_tx(tx, Canceller::Owner(&owner), command, now, &policy)?;
            Ok(run.map(|r| (outcome, r)))
        })
        .await
    }
}

impl crate::SqliteStore {
    /// The desktop watches of every owner's runs still queued that were queued at or before
    /// `before` (oldest first, at most `limit`): what the local server's watch looks at on its
    /// timer (`events::watch`; the cloud queues one per run instead). One read.
    ///
    /// # Errors
    /// When the database cannot be read.
    pub async fn waiting_runs(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> StoreResult<Vec<domain::events::DesktopWatch>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |tx, now| {
            let mut st = tx.prepare_cached(&format!(
                "SELECT {RUN_COLS} FROM runs WHERE status = 'queued' AND queued_at <= ?1 AND expires_at > ?2 \
                 ORDER BY queued_at LIMIT ?3"
            ))?;
            let runs = st.query_map(params![before.as_millis(), now.as_millis(), limit], run_row)?;
            runs.map(|r| r.map(|r| domain::events::watch_of_run(None, Some(&r))))
                .filter_map(Result::transpose)
                .collect()
        })
        .await
    }
}
