//! Tasks a desktop's Graph hands to a chat: [`DispatchTasks`] (`domain::dispatch`).
//!
//! One transaction per dispatch: the link's consent (a condition check), the key's record, the
//! task, and an update of the run item that both counts the dispatch (`dispatched` below
//! [`MAX_TASKS_PER_RUN`]) and lists it (`dispatched_tasks`, a string set of `<link>/<task>`),
//! conditional on the run running on the asking device. The list is how a run's open tasks are
//! found and cancelled when it ends, without an index.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use domain::dispatch::{
    DispatchOutcome, DispatchRejection, DispatchTask, MAX_TASKS_PER_RUN, run_admits, session_marker,
};
use domain::ids::{ChatLinkId, OwnerId, TaskId};
use domain::runs::idempotency_record_key;
use domain::store::{AssignTasks, DispatchTasks, StoreError, StoreResult};
use domain::tasks::{CancelTaskOutcome, Task, TaskStatus};

use crate::codec::{Item, bad, n, opt_from, run_from, s, task_from, values};
use crate::keys::{expiring_sort_key, link_key, open_tasks_partition, run_key, task_key, ttl_at};
use crate::request::{check, update_item};
use crate::write::{Update, eq, lt, missing};
use crate::{DynamoStore, TTL_ATTRIBUTE};
use dynamo_item::idempotency::{Create, Created};

/// The run item's list of the tasks it handed over.
const DISPATCHED_TASKS: &str = "dispatched_tasks";

impl DynamoStore {
    /// Why the run's update refused a dispatch, from its old image (read when the backend gave
    /// none).
    async fn classify_run(&self, old: Option<Item>, req: &DispatchTask) -> StoreResult<DispatchRejection> {
        let old = match old {
            Some(i) => Some(i),
            None => self.db.get(run_key(req.command_id)).await?,
        };
        Ok(match opt_from(old.as_ref(), run_from)? {
            Some(run) if run_admits(&run, &req.owner, req.device_id) => DispatchRejection::TooManyForRun,
            _ => DispatchRejection::RunNotRunning,
        })
    }
}

#[async_trait]
impl DispatchTasks for DynamoStore {
    async fn dispatch_task(&self, req: &DispatchTask) -> StoreResult<DispatchOutcome> {
        let now = self.clock.now();
        // The run's session goes into the task's origin and the consent check: read it first;
        // the transaction re-checks that the run is still running on this device.
        let Some(run) = opt_from(self.db.get(run_key(req.command_id)).await?.as_ref(), run_from)?
            .filter(|r| run_admits(r, &req.owner, req.device_id))
        else {
            // A retry after the run ended must still replay its task.
            let record = idempotency_record_key("dispatch", &req.record_principal(), &req.idempotency_key);
            return match self.db.live_record(&record, now).await? {
                Some((hash, target)) => self.replay_dispatch(hash == req.request_hash(), &target, req.link_id).await,
                None => Ok(DispatchOutcome::Rejected(DispatchRejection::RunNotRunning)),
            };
        };
        let record = idempotency_record_key("dispatch", &req.record_principal(), &req.idempotency_key);
        let hash = req.request_hash();
        let task = req.task(&run.graph_session_id, now);
        let origin = serde_json::to_string(&task.origin).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut item = task_key(task.link_id, task.task_id);
        item.extend(values([
            ("task_id", s(task.task_id.to_string())),
            ("link_id", s(task.link_id.to_string())),
            ("owner", s(task.owner.as_str())),
            ("objective", s(task.objective.clone())),
            ("status", s(TaskStatus::Queued.as_str())),
            ("created_at", n(now.as_millis())),
            ("expires_at", n(task.expires_at.as_millis())),
            ("origin", s(origin)),
            ("gsi2pk", s(open_tasks_partition(task.link_id))),
            ("gsi2sk", s(expiring_sort_key(task.expires_at, task.task_id))),
            (TTL_ATTRIBUTE, ttl_at(task.expires_at.plus(self.policy.retention))),
        ]));
        let count = Update::of(run_key(req.command_id))
            .add("dispatched", n(1))
            .add(DISPATCHED_TASKS, AttributeValue::Ss(vec![format!("{}/{}", task.link_id, task.task_id)]))
            .when(
                eq("owner", s(req.owner.as_str()))
                    .and(eq("status", s("running")))
                    .and(eq("device_id", s(req.device_id.to_string())))
                    .and(missing("dispatched").or(lt("dispatched", n(i64::from(MAX_TASKS_PER_RUN))))),
            );
        let create = Create {
            what: "dispatch transaction",
            parent: check(
                &self.db.table,
                link_key(&req.owner, req.link_id),
                "attribute_exists(#pk) AND attribute_not_exists(#deleted_at) \
                 AND (#desktop_tasks = :any OR contains(#desktop_tasks, :session))",
                values([
                    (":any", s(domain::dispatch::ANY_SESSION)),
                    (":session", s(session_marker(&run.graph_session_id))),
                ]),
            )?,
            parent_key: None,
            record: &record,
            request_hash: &hash,
            target: task.task_id.to_string(),
            item,
            also: Some(update_item(&self.db.table, count)?),
        };
        match self.db.create_idempotent(create, now, self.policy.idempotency_ttl).await? {
            Created::New => Ok(DispatchOutcome::Assigned(task)),
            Created::KeyInUse { same_request, target } => {
                self.replay_dispatch(same_request, &target, req.link_id).await
            }
            Created::AlsoRefused(old) => Ok(DispatchOutcome::Rejected(self.classify_run(old, req).await?)),
            Created::ParentRefused(_) => Ok(DispatchOutcome::Rejected(DispatchRejection::LinkRefuses)),
        }
    }

    async fn dispatched_task(
        &self,
        owner: &OwnerId,
        device: uuid::Uuid,
        link: ChatLinkId,
        task: TaskId,
    ) -> StoreResult<Option<Task>> {
        Ok(opt_from(self.db.get(task_key(link, task)).await?.as_ref(), task_from)?
            .filter(|t| t.dispatched_by(owner, device)))
    }
}

impl DynamoStore {
    /// The answer for a key seen before: the original task, or the mismatch rejection.
    async fn replay_dispatch(
        &self,
        same_request: bool,
        target: &str,
        link: ChatLinkId,
    ) -> StoreResult<DispatchOutcome> {
        if !same_request {
            return Ok(DispatchOutcome::Rejected(DispatchRejection::IdempotencyMismatch));
        }
        Ok(DispatchOutcome::Replayed(self.task_of_record(target, link).await?))
    }
}

impl DynamoStore {
    /// Cancels each open task a run's image lists as handed to chats (`dispatched_tasks`), as
    /// the owner's cancel does (`AssignTasks::cancel_task`: one conditional write each ; a repeat finds them cancelled and changes nothing): how many.
    /// The image is the one the run's completion wrote or was refused on, so a run that handed
    /// nothing over costs no request.
    pub(crate) async fn cancel_listed(&self, owner: &OwnerId, run: Option<&Item>) -> StoreResult<usize> {
        let Some(run) = run else { return Ok(0) };
        if run.get("owner").and_then(|v| v.as_s().ok()).map(String::as_str) != Some(owner.as_str()) {
            return Ok(0);
        }
        let listed: Vec<String> = run.get(DISPATCHED_TASKS).and_then(|v| v.as_ss().ok()).cloned().unwrap_or_default();
        let mut cancelled = 0;
        for entry in listed {
            let (link, task) = entry.split_once('/').ok_or_else(|| bad(DISPATCHED_TASKS))?;
            let link = ChatLinkId::parse("chat_link_id", link).map_err(|_| bad(DISPATCHED_TASKS))?;
            let task = TaskId::parse("task_id", task).map_err(|_| bad(DISPATCHED_TASKS))?;
            let out = self.cancel_task(owner, link, task).await?;
            if out == CancelTaskOutcome::Cancelled {
                cancelled += 1;
            }
        }
        Ok(cancelled)
    }
}
