//! Graph runs: [`QueueRuns`], [`ReadRuns`], [`CancelRuns`], [`RelayRuns`], [`OwnerRuns`].

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use domain::ids::{AgentId, CommandId, OwnerId, ProjectId};
use domain::projects::{check_named_project, resolve_project};
use domain::runs::{
    CancelRunOutcome, CancelStep, Canceller, CompleteOutcome, CompleteStep, Completion, ControlOutcome, QueueFilter,
    QueueOutcome, QueueRejection, QueueRun, QueueTarget, Run, RunStatus, StartOutcome, classify_cancel,
    classify_complete, classify_control, classify_start, idempotency_record_key,
};
use domain::store::{CancelRuns, ManageProjects, OwnerRuns, QueueRuns, ReadRuns, RelayRuns, StoreError, StoreResult};

use crate::codec::{Read, b, bad, n, opt_from, project_from, run_from, s, values};
use crate::keys::{expiring_sort_key, owner_runs_partition, project_key, queue_partition, run_key, ttl_at};
use crate::request::{Updated, check, names};
use crate::write::{Update, eq, exists, gt, le, missing};
use crate::{DynamoStore, OWNER_RUNS_INDEX, QUEUE_INDEX, TTL_ATTRIBUTE};
use dynamo_item::idempotency::{Create, Created};

impl DynamoStore {
    /// Writes a completed run's duration into its project's summary slot: one `UpdateItem`
    /// after the completion (two the first time, when the project has no summary map yet).
    /// Advisory: a failure is logged and the completion stands.
    pub(crate) async fn record_duration(&self, owner: &OwnerId, run: &Run) {
        let (Some(started), Some(finished)) = (run.started_at, run.finished_at) else { return };
        let key = domain::runs::duration_key(&run.graph_session_id, finished);
        let ms = n(finished.since(started).as_millis() as i64);
        for first in [true, false, true] {
            // The summary map exists: set one entry; else create the map with it.
            let write = if first {
                Update::of(project_key(owner, run.project_id))
                    .set_entry("durations", key.clone(), ms.clone())
                    .when(exists("pk").and(exists("durations")))
            } else {
                Update::of(project_key(owner, run.project_id))
                    .set("durations", AttributeValue::M([(key.clone(), ms.clone())].into()))
                    .when(exists("pk").and(missing("durations")))
            };
            match self.db.update(write).send(false).await {
                Ok(Updated::Applied(_)) => return,
                Ok(Updated::Rejected(_)) => {}
                Err(e) => {
                    tracing::warn!(error = %domain::errors::ErrorChain(&e), "recording a run's duration failed; hints fall back to 15 s");
                    return;
                }
            }
        }
    }
}

impl DynamoStore {
    pub(crate) async fn queue_target(&self, req: &QueueRun) -> StoreResult<Result<QueueTarget, QueueRejection>> {
        Ok(match req.project_id {
            Some(p) => check_named_project(self.get_project(&req.owner, p).await?.as_ref(), &req.graph_session_id),
            None => resolve_project(&self.list_projects(&req.owner).await?, &req.graph_session_id),
        })
    }

    /// The answer for a key seen before: the original run, or the mismatch rejection.
    async fn replay_run(&self, same_request: bool, target: &str) -> StoreResult<QueueOutcome> {
        if !same_request {
            return Ok(QueueOutcome::Rejected(QueueRejection::IdempotencyMismatch));
        }
        let id = CommandId::parse("command_id", target).map_err(|_| bad("target_id"))?;
        match opt_from(self.db.get(run_key(id)).await?.as_ref(), run_from)? {
            Some(run) => Ok(QueueOutcome::Replayed(run)),
            None => Err(StoreError::Corrupt("idempotency record points at a missing run".into())),
        }
    }
}

#[async_trait]
impl QueueRuns for DynamoStore {
    async fn queue_run(&self, req: &QueueRun) -> StoreResult<QueueOutcome> {
        let record = idempotency_record_key("run", req.agent.as_str(), &req.idempotency_key);
        let hash = req.request_hash();
        let target = match self.queue_target(req).await? {
            Ok(t) => t,
            Err(rejection) => {
                // A retry must still replay even if consent changed since the first call.
                return match self.db.live_record(&record, self.clock.now()).await? {
                    Some((seen, target)) => self.replay_run(seen == hash, &target).await,
                    None => Ok(QueueOutcome::Rejected(rejection)),
                };
            }
        };
        let now = self.clock.now();
        let run = Run::queued(req, target, now, &self.policy);
        let mut item = run_key(run.command_id);
        item.extend(values([
            ("command_id", s(run.command_id.to_string())),
            ("owner", s(run.owner.as_str())),
            ("agent", s(run.agent.as_str())),
            ("project_id", s(run.project_id.to_string())),
            ("graph_session_id", s(run.graph_session_id.as_str())),
            ("slug", s(run.slug.clone())),
            ("arguments", s(run.arguments.to_string())),
            ("status", s(RunStatus::Queued.as_str())),
            ("queued_at", n(now.as_millis())),
            ("expires_at", n(run.expires_at.as_millis())),
            ("cancel_requested", b(false)),
            ("gsi1pk", s(queue_partition(run.project_id))),
            ("gsi1sk", s(expiring_sort_key(run.expires_at, run.command_id))),
            ("gsi3pk", s(owner_runs_partition(&run.owner))),
            ("gsi3sk", s(run.command_id.to_string())),
            (TTL_ATTRIBUTE, ttl_at(run.expires_at.plus(self.policy.retention))),
        ]));
        let parent_key = project_key(&req.owner, run.project_id);
        let create = Create {
            what: "queue transaction",
            parent: check(
                &self.db.table,
                parent_key.clone(),
                "#enabled = :t AND contains(#session_ids, :gs)",
                values([(":t", b(true)), (":gs", s(req.graph_session_id.as_str()))]),
            )?,
            parent_key: Some(parent_key),
            record: &record,
            request_hash: &hash,
            target: run.command_id.to_string(),
            item,
            also: None,
        };
        match self.db.create_idempotent(create, now, self.policy.idempotency_ttl).await? {
            Created::New => Ok(QueueOutcome::Queued(run)),
            Created::KeyInUse { same_request, target } => self.replay_run(same_request, &target).await,
            Created::ParentRefused(old) | Created::AlsoRefused(old) => {
                // Consent changed between the read and the write: classify on the old image.
                let project = opt_from(old.as_ref(), project_from)?;
                let rejection = match check_named_project(project.as_ref(), &req.graph_session_id) {
                    Err(r) => r,
                    Ok(_) => QueueRejection::SessionNotShared(req.graph_session_id.clone()),
                };
                Ok(QueueOutcome::Rejected(rejection))
            }
        }
    }
}

#[async_trait]
impl ReadRuns for DynamoStore {
    async fn get_run(&self, agent: &AgentId, command: CommandId) -> StoreResult<Option<Run>> {
        Ok(opt_from(self.db.get(run_key(command)).await?.as_ref(), run_from)?.filter(|r| &r.agent == agent))
    }

    async fn own_runs_ahead(&self, run: &Run) -> StoreResult<usize> {
        // The queue index backwards from the run's own key (which it reads first, if it is
        // still queued: one more item than the bound), counting only the agent's own runs. A
        // page ends at 1 MB read before the filter (about 31 runs of 32 KB arguments), so the
        // count goes on page after page until the bound is read.
        let Some((now, me)) = crate::keys::queued_up_to(self.clock.now(), run.expires_at, run.command_id) else {
            return Ok(0); // Expired since it was read: nothing is ahead.
        };
        let (mut read, mut own, mut start) = (0usize, 0usize, None);
        loop {
            let out = self
                .db
                .client
                .query()
                .table_name(&self.db.table)
                .index_name(QUEUE_INDEX)
                .key_condition_expression("#gsi1pk = :p AND #gsi1sk BETWEEN :now AND :me")
                .filter_expression("#agent = :a AND #command_id <> :id")
                .set_expression_attribute_names(Some(names("#gsi1pk #gsi1sk #agent #command_id")))
                .expression_attribute_values(":p", s(queue_partition(run.project_id)))
                .expression_attribute_values(":now", s(now.clone()))
                .expression_attribute_values(":me", s(me.clone()))
                .expression_attribute_values(":a", s(run.agent.as_str()))
                .expression_attribute_values(":id", s(run.command_id.to_string()))
                .select(aws_sdk_dynamodb::types::Select::Count)
                .scan_index_forward(false)
                .limit(i32::try_from(domain::limits::MAX_RUNS_AHEAD + 1 - read).unwrap_or(1))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(crate::error::sdk)?;
            read += usize::try_from(out.scanned_count()).unwrap_or(0);
            own += usize::try_from(out.count()).unwrap_or(0);
            start = out.last_evaluated_key;
            if start.is_none() || read > domain::limits::MAX_RUNS_AHEAD {
                return Ok(own.min(domain::limits::MAX_RUNS_AHEAD));
            }
        }
    }
}

impl DynamoStore {
    /// A cancel by `by` (the agent's `cancel_graph_run` and the owner's cancel share it): at most
    /// two conditional `UpdateItem`s, queued → cancelled, else (running) the cancel flag. The
    /// outcome and, with `want_run`, the run as it is after it, from the writes' own answers
    /// (`ALL_NEW` when applied, `ALL_OLD` when refused): no read added.
    async fn cancel_as(
        &self,
        by: Canceller<'_>,
        command: CommandId,
        want_run: bool,
    ) -> StoreResult<(CancelRunOutcome, Option<Run>)> {
        let now = self.clock.now();
        let (attribute, who) = by.attribute();
        // What a refused write's old image says, unless the run is running and may be flagged.
        let settled = |old: Option<Run>| match classify_cancel(old.as_ref(), by, now, &self.policy) {
            CancelStep::Done(CancelRunOutcome::NotFound) => Some((CancelRunOutcome::NotFound, None)),
            CancelStep::Done(outcome) => Some((outcome, old)),
            CancelStep::FlagRunning => None,
        };
        let queued = Update::of(run_key(command))
            .set("status", s("cancelled"))
            .set("finished_at", n(now.as_millis()))
            .set("ttl", ttl_at(now.plus(self.policy.retention)))
            .remove("gsi1pk")
            .remove("gsi1sk")
            .when(eq(attribute, s(who)).and(eq("status", s("queued"))).and(gt("expires_at", n(now.as_millis()))));
        let old = match self.db.update(queued).send(want_run).await? {
            Updated::Applied(new) => return Ok((CancelRunOutcome::Cancelled, opt_from(new.as_ref(), run_from)?)),
            Updated::Rejected(old) => opt_from(old.as_ref(), run_from)?,
        };
        if let Some(done) = settled(old) {
            return Ok(done);
        }
        let running = Update::of(run_key(command)).set("cancel_requested", b(true)).when(
            eq(attribute, s(who))
                .and(eq("status", s("running")))
                .and(gt("last_heartbeat_at", n(now.minus(self.policy.heartbeat_timeout).as_millis()))),
        );
        Ok(match self.db.update(running).send(want_run).await? {
            Updated::Applied(new) => (CancelRunOutcome::CancelRequested, opt_from(new.as_ref(), run_from)?),
            // It finished between the two writes: report what it is now.
            Updated::Rejected(old) => {
                let old = opt_from(old.as_ref(), run_from)?;
                settled(old.clone()).unwrap_or((CancelRunOutcome::Unchanged(RunStatus::Running), old))
            }
        })
    }
}

#[async_trait]
impl CancelRuns for DynamoStore {
    async fn cancel_run(&self, agent: &AgentId, command: CommandId) -> StoreResult<CancelRunOutcome> {
        Ok(self.cancel_as(Canceller::Agent(agent), command, false).await?.0)
    }
}

#[async_trait]
impl RelayRuns for DynamoStore {
    async fn list_queued(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        limit: usize,
        filter: &QueueFilter,
    ) -> StoreResult<Vec<Run>> {
        // The session filter in the query too: runs of sessions another desktop runs are read
        // (and paid for) but not sent; pages grow while they are all another's.
        let more = session_filter(filter);
        self.query_unexpired_where(QUEUE_INDEX, queue_partition(project), owner, limit, more.as_ref(), |item| {
            let run = run_from(item)?;
            Ok(filter.keeps(&run).then_some(run))
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
        let now = self.clock.now();
        let out = self
            .db
            .update(
                Update::of(run_key(command))
                    .set("status", s("running"))
                    .set("started_at", n(now.as_millis()))
                    .set("last_heartbeat_at", n(now.as_millis()))
                    .set("execution_id", s(execution_id))
                    .set("device_id", s(device.to_string()))
                    .remove("gsi1pk")
                    .remove("gsi1sk")
                    .when(
                        eq("owner", s(owner.as_str()))
                            .and(eq("status", s("queued")))
                            .and(gt("expires_at", n(now.as_millis()))),
                    ),
            )
            .send(false)
            .await?;
        match out {
            Updated::Applied(_) => Ok(StartOutcome::Started),
            Updated::Rejected(old) => {
                Ok(classify_start(opt_from(old.as_ref(), run_from)?.as_ref(), owner, execution_id, now, &self.policy))
            }
        }
    }

    async fn control_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
        progress: Option<&domain::relay::ControlRequest>,
    ) -> StoreResult<ControlOutcome> {
        let now = self.clock.now();
        let mut when = eq("owner", s(owner.as_str()))
            .and(eq("status", s("running")))
            .and(gt("last_heartbeat_at", n(now.minus(self.policy.heartbeat_timeout).as_millis())));
        let mut write = Update::of(run_key(command)).set("last_heartbeat_at", n(now.as_millis()));
        if let Some(p) = progress {
            let kept = domain::progress::RunProgress { progress: p.progress.clone(), updated_at: now };
            let json = serde_json::to_string(&kept).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            write = write.set("progress", s(json));
            when = when.and(eq("execution_id", s(p.execution_id.clone())));
        }
        let out = self.db.update(write.when(when)).send(true).await?;
        match out {
            Updated::Applied(item) => Ok(ControlOutcome::Running {
                cancel_requested: item.as_ref().is_some_and(|i| Read(i).bool("cancel_requested")),
            }),
            Updated::Rejected(old) => {
                Ok(classify_control(opt_from(old.as_ref(), run_from)?.as_ref(), owner, now, &self.policy))
            }
        }
    }

    async fn complete_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
        completion: &Completion,
    ) -> StoreResult<CompleteOutcome> {
        let now = self.clock.now();
        let hash = completion.hash();
        let status = RunStatus::from(completion.status);
        let meta = Completion { result: None, ..completion.clone() };
        let meta = serde_json::to_string(&meta).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let cutoff = n(now.minus(self.policy.heartbeat_timeout).as_millis());
        let result_value = completion.result.as_ref().map(|r| s(r.clone()));
        // Running under this execution, still reporting, and no cancel asked.
        let running = eq("status", s("running"))
            .and(eq("execution_id", s(completion.execution_id.clone())))
            .and(gt("last_heartbeat_at", cutoff.clone()))
            .and(eq("cancel_requested", b(false)));
        // A queued command may only be refused (failed/cancelled), never completed unstarted.
        let refusal = eq("status", s("queued")).and(gt("expires_at", n(now.as_millis())));
        let allowed = match status {
            RunStatus::Completed => running,
            // A run that reads failed because its desktop stopped reporting takes the relay's
            // own `failed` from the execution that ran it: why it stopped.
            RunStatus::Failed => running.or(refusal).or(eq("status", s("running"))
                .and(eq("execution_id", s(completion.execution_id.clone())))
                .and(le("last_heartbeat_at", cutoff.clone()))),
            _ => running.or(refusal),
        };
        let mut write = Update::of(run_key(command))
            .set("status", s(status.as_str()))
            .set("finished_at", n(now.as_millis()))
            .set("execution_id", s(completion.execution_id.clone()))
            .set("completion", s(meta.clone()))
            .set("completion_hash", s(hash.clone()))
            .set("ttl", ttl_at(now.plus(self.policy.retention)));
        if let Some(v) = &result_value {
            write = write.set("result", v.clone());
        }
        let write = write.remove("gsi1pk").remove("gsi1sk").when(eq("owner", s(owner.as_str())).and(allowed));
        let old = match self.db.update(write).send(true).await? {
            Updated::Applied(new) => {
                if status == RunStatus::Completed
                    && let Some(run) = opt_from(new.as_ref(), run_from)?
                {
                    self.record_duration(owner, &run).await;
                }
                // The tasks it handed to chats end with it (`domain::dispatch`).
                self.cancel_listed(owner, new.as_ref()).await?;
                return Ok(CompleteOutcome::Recorded(status));
            }
            Updated::Rejected(old) => old,
        };
        // Ended before, or otherwise: its tasks end all the same (a retry finishes the cancels
        // a call cut short left).
        self.cancel_listed(owner, old.as_ref()).await?;
        let old = opt_from(old.as_ref(), run_from)?;
        match classify_complete(old.as_ref(), owner, completion, &hash, now, &self.policy) {
            CompleteStep::Done(outcome) => Ok(outcome),
            CompleteStep::RecordCancelled => {
                // The agent asked to cancel: recorded cancelled whatever the relay reports.
                let mut write = Update::of(run_key(command))
                    .set("status", s("cancelled"))
                    .set("finished_at", n(now.as_millis()))
                    .set("completion", s(meta))
                    .set("completion_hash", s(hash.clone()))
                    .set("ttl", ttl_at(now.plus(self.policy.retention)));
                if let Some(v) = result_value {
                    write = write.set("result", v);
                }
                let write = write.when(
                    eq("owner", s(owner.as_str()))
                        .and(eq("status", s("running")))
                        .and(eq("execution_id", s(completion.execution_id.clone())))
                        .and(eq("cancel_requested", b(true)))
                        .and(gt("last_heartbeat_at", cutoff)),
                );
                let out = self.db.update(write).send(false).await?;
                Ok(match out {
                    Updated::Applied(_) => CompleteOutcome::Recorded(RunStatus::Cancelled),
                    Updated::Rejected(old) => {
                        let old = opt_from(old.as_ref(), run_from)?;
                        match classify_complete(old.as_ref(), owner, completion, &hash, now, &self.policy) {
                            CompleteStep::Done(outcome) => outcome,
                            CompleteStep::RecordCancelled => CompleteOutcome::Conflict(RunStatus::Running),
                        }
                    }
                })
            }
        }
    }
}

#[async_trait]
impl OwnerRuns for DynamoStore {
    /// `Query` pages on the owner-runs index (keys only), newest first (command ids are
    /// UUIDv7), until `limit` keys are read; then the runs themselves (`BatchGetItem`), a run
    /// gone meanwhile (its TTL) left out.
    async fn recent_runs(&self, owner: &OwnerId, limit: usize, before: Option<CommandId>) -> StoreResult<Vec<Run>> {
        let before = before.map_or_else(|| "~".to_owned(), |c| c.to_string());
        let query = || {
            self.db
                .client
                .query()
                .table_name(&self.db.table)
                .index_name(OWNER_RUNS_INDEX)
                .key_condition_expression("#gsi3pk = :p AND #gsi3sk < :before")
                .set_expression_attribute_names(Some(names("#gsi3pk #gsi3sk")))
                .expression_attribute_values(":p", s(owner_runs_partition(owner)))
                .expression_attribute_values(":before", s(before.clone()))
                .scan_index_forward(false)
        };
        let keys = self
            .db
            .query_until(query, limit, 0, |item| {
                Ok(Some(
                    item.iter()
                        .filter(|(k, _)| matches!(k.as_str(), "pk" | "sk"))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ))
            })
            .await?;
        self.db.batch_get(&keys).await?.iter().map(run_from).collect()
    }

    /// [`CancelRuns::cancel_run`]'s writes with the owner in their conditions; the run comes
    /// back in the writes' answers.
    async fn cancel_owned_run(
        &self,
        owner: &OwnerId,
        command: CommandId,
    ) -> StoreResult<Option<(CancelRunOutcome, Run)>> {
        match self.cancel_as(Canceller::Owner(owner), command, true).await? {
            (CancelRunOutcome::NotFound, _) => Ok(None),
            (outcome, Some(run)) => Ok(Some((outcome, run))),
            // Every write here answers its item (ALL_NEW applied, ALL_OLD refused).
            (_, None) => Err(bad("the cancelled run's image")),
        }
    }
}

/// The most session ids one `IN` takes (DynamoDB's limit on its operands).
const IN_OPERANDS: usize = 100;
/// The longest filter put in a query (DynamoDB refuses an expression over 4 KB); past it the
/// filter is applied in code only, which is correct and only slower.
const MAX_FILTER_CHARS: usize = 3_500;

/// [`QueueFilter::keeps`] as a query filter: the run's session is one of `mine`, or none of
/// `shared`. `None` when it keeps everything, or would be too long to send.
fn session_filter(filter: &QueueFilter) -> Option<crate::request::Filter> {
    if filter.shared.is_empty() {
        return None;
    }
    let mut values = Vec::new();
    let mut any_of = |ids: &[domain::ids::GraphSessionId], tag: &str| -> String {
        let parts: Vec<String> = ids
            .chunks(IN_OPERANDS)
            .enumerate()
            .map(|(c, chunk)| {
                let keys: Vec<String> = chunk
                    .iter()
                    .enumerate()
                    .map(|(i, id)| {
                        let key = format!(":{tag}{c}_{i}");
                        values.push((key.clone(), s(id.as_str())));
                        key
                    })
                    .collect();
                format!("#graph_session_id IN ({})", keys.join(", "))
            })
            .collect();
        parts.join(" OR ")
    };
    let others = format!("NOT ({})", any_of(&filter.shared, "x"));
    let expression =
        if filter.mine.is_empty() { others } else { format!("({}) OR {others}", any_of(&filter.mine, "m")) };
    (expression.len() <= MAX_FILTER_CHARS).then_some(crate::request::Filter { expression, values })
}
