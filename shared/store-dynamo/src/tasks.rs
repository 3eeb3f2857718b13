//! Linked-chat tasks and their artifacts: [`AssignTasks`], [`ReadTasks`], [`ClaimTasks`],
//! [`RecordArtifacts`].

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Get, TransactGetItem};

use domain::ids::{ChatLinkId, ClaimId, OwnerId, TaskId};
use domain::limits::{MAX_ARTIFACT_BYTES_PER_TASK, MAX_ARTIFACTS_PER_TASK};
use domain::runs::idempotency_record_key;
use domain::store::{AssignTasks, ClaimTasks, ReadTasks, RecordArtifacts, StoreError, StoreResult};
use domain::tasks::{
    ArtifactCap, ArtifactCheck, ArtifactOutcome, ArtifactRecord, ArtifactUsage, AssignOutcome, AssignRejection,
    AssignTask, CancelTaskOutcome, ClaimOutcome, SubmitOutcome, SubmitRejection, SubmitTask, Task, TaskPage,
    TaskStatus, check_artifact, classify_cancel_task, classify_claim, classify_submit,
};

use crate::codec::{Item, Read, bad, n, opt_from, s, task_from, values};
use crate::error::{build, sdk, unexpected};
use crate::keys::{
    artifact_key, artifacts_prefix, expiring_sort_key, link_key, link_partition, open_tasks_partition, task_key,
    tasks_before, ttl_at,
};
use crate::request::{Updated, check, failed, names, old_image, put, update_item};
use crate::write::{Update, eq, gt, is_in, le, lt, missing};
use crate::{DynamoStore, OPEN_TASKS_INDEX, TTL_ATTRIBUTE};
use dynamo_item::idempotency::{Create, Created};

impl DynamoStore {
    /// The answer for a key seen before: the original task, or the mismatch rejection.
    async fn replay_task(&self, same_request: bool, target: &str, link: ChatLinkId) -> StoreResult<AssignOutcome> {
        if !same_request {
            return Ok(AssignOutcome::Rejected(AssignRejection::IdempotencyMismatch));
        }
        Ok(AssignOutcome::Replayed(self.task_of_record(target, link).await?))
    }

    /// The task an idempotency record points at (`target`, under `link`).
    pub(crate) async fn task_of_record(&self, target: &str, link: ChatLinkId) -> StoreResult<Task> {
        let id = TaskId::parse("task_id", target).map_err(|_| bad("target_id"))?;
        opt_from(self.db.get(task_key(link, id)).await?.as_ref(), task_from)?
            .ok_or_else(|| StoreError::Corrupt("idempotency record points at a missing task".into()))
    }
}

#[async_trait]
impl AssignTasks for DynamoStore {
    async fn assign_task(&self, req: &AssignTask) -> StoreResult<AssignOutcome> {
        let now = self.clock.now();
        let record = idempotency_record_key("task", req.owner.as_str(), &req.idempotency_key);
        let hash = req.request_hash();
        let task = Task::assigned(req, now, &self.policy);
        let mut item = task_key(task.link_id, task.task_id);
        item.extend(values([
            ("task_id", s(task.task_id.to_string())),
            ("link_id", s(task.link_id.to_string())),
            ("owner", s(task.owner.as_str())),
            ("objective", s(task.objective.clone())),
            ("status", s(TaskStatus::Queued.as_str())),
            ("created_at", n(now.as_millis())),
            ("expires_at", n(task.expires_at.as_millis())),
            ("gsi2pk", s(open_tasks_partition(task.link_id))),
            ("gsi2sk", s(expiring_sort_key(task.expires_at, task.task_id))),
            (TTL_ATTRIBUTE, ttl_at(task.expires_at.plus(self.policy.retention))),
        ]));
        let create = Create {
            what: "assign transaction",
            parent: check(
                &self.db.table,
                link_key(&req.owner, req.link_id),
                "attribute_exists(#pk) AND attribute_not_exists(#deleted_at)",
                Item::new(),
            )?,
            parent_key: None,
            record: &record,
            request_hash: &hash,
            target: task.task_id.to_string(),
            item,
            also: None,
        };
        match self.db.create_idempotent(create, now, self.policy.idempotency_ttl).await? {
            Created::New => Ok(AssignOutcome::Assigned(task)),
            Created::KeyInUse { same_request, target } => self.replay_task(same_request, &target, req.link_id).await,
            Created::ParentRefused(_) | Created::AlsoRefused(_) => {
                Ok(AssignOutcome::Rejected(AssignRejection::LinkNotFound))
            }
        }
    }

    async fn cancel_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<CancelTaskOutcome> {
        let now = self.clock.now();
        let out = self
            .db
            .update(
                Update::of(task_key(link, task))
                    .set("status", s("cancelled"))
                    .set("finished_at", n(now.as_millis()))
                    .set("ttl", ttl_at(now.plus(self.policy.retention)))
                    .remove("gsi2pk")
                    .remove("gsi2sk")
                    .when(
                        eq("owner", s(owner.as_str()))
                            .and(is_in("status", vec![s("queued"), s("claimed")]))
                            .and(gt("expires_at", n(now.as_millis()))),
                    ),
            )
            .send(false)
            .await?;
        match out {
            Updated::Applied(_) => Ok(CancelTaskOutcome::Cancelled),
            Updated::Rejected(old) => {
                Ok(classify_cancel_task(opt_from(old.as_ref(), task_from)?.as_ref(), owner, &link, now))
            }
        }
    }

    /// A `Query` on the link's partition, newest first: `sk BETWEEN "TASK#" AND "TASK#<before>"`
    /// (inclusive, so the `before` task itself is skipped here), one task more than asked to know
    /// whether a next page exists, page after page until that many are read (tasks near the
    /// item size limit fit three to a 1 MB page).
    async fn list_link_tasks(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        limit: usize,
        before: Option<TaskId>,
    ) -> StoreResult<TaskPage> {
        let hi = tasks_before(before);
        let query = || {
            self.db
                .client
                .query()
                .table_name(&self.db.table)
                .key_condition_expression("#pk = :pk AND #sk BETWEEN :lo AND :hi")
                .set_expression_attribute_names(Some(names("#pk #sk")))
                .expression_attribute_values(":pk", s(link_partition(link)))
                .expression_attribute_values(":lo", s("TASK#"))
                .expression_attribute_values(":hi", s(hi.clone()))
                .scan_index_forward(false)
                .consistent_read(true)
        };
        // One task more than asked tells whether there is a next page.
        let mut tasks = self
            .db
            .query_until(query, limit + 1, usize::from(before.is_some()), |item| {
                let t = task_from(item)?;
                Ok((Some(t.task_id) != before && &t.owner == owner).then_some(t))
            })
            .await?;
        let next = if tasks.len() > limit {
            tasks.truncate(limit);
            tasks.last().map(|t| t.task_id)
        } else {
            None
        };
        Ok(TaskPage { tasks, next })
    }

    async fn list_artifacts(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        task: TaskId,
    ) -> StoreResult<Vec<ArtifactRecord>> {
        let items = self.db.query_all(link_partition(link), &artifacts_prefix(task)).await?;
        let mut out = Vec::with_capacity(items.len());
        for item in items.iter().filter(|i| Read(i).opt_s("owner") == Some(owner.as_str())) {
            let r = Read(item);
            out.push(ArtifactRecord {
                link_id: link,
                task_id: task,
                claim_id: r.parse("claim_id", |v| ClaimId::parse("claim_id", v).ok())?,
                artifact_id: r.s("artifact_id")?.to_owned(),
                name: r.s("name")?.to_owned(),
                content_type: r.s("content_type")?.to_owned(),
                sha256: r.s("sha256")?.to_owned(),
                size: u64::try_from(r.n("size")?).unwrap_or(0),
                object_key: r.s("object_key")?.to_owned(),
            });
        }
        Ok(out)
    }
}

#[async_trait]
impl ReadTasks for DynamoStore {
    async fn list_open_tasks(&self, owner: &OwnerId, link: ChatLinkId, limit: usize) -> StoreResult<Vec<Task>> {
        self.query_unexpired(OPEN_TASKS_INDEX, open_tasks_partition(link), owner, limit, |item| {
            task_from(item).map(Some)
        })
        .await
    }

    async fn get_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<Option<Task>> {
        Ok(opt_from(self.db.get(task_key(link, task)).await?.as_ref(), task_from)?
            .filter(|t| t.visible_to(owner, &link)))
    }
}

#[async_trait]
impl ClaimTasks for DynamoStore {
    async fn claim_task(&self, owner: &OwnerId, link: ChatLinkId, task: TaskId) -> StoreResult<ClaimOutcome> {
        let now = self.clock.now();
        let claim_id = ClaimId::generate();
        let lease_until = now.plus(self.policy.lease);
        let out = self
            .db
            .update(
                Update::of(task_key(link, task))
                    .set("status", s("claimed"))
                    .set("claim_id", s(claim_id.to_string()))
                    .set("lease_until", n(lease_until.as_millis()))
                    .set("claimed_at", n(now.as_millis()))
                    .when(
                        eq("owner", s(owner.as_str())).and(gt("expires_at", n(now.as_millis()))).and(
                            eq("status", s("queued"))
                                .or(eq("status", s("claimed")).and(le("lease_until", n(now.as_millis())))),
                        ),
                    ),
            )
            .send(false)
            .await?;
        match out {
            Updated::Applied(_) => Ok(ClaimOutcome::Claimed { claim_id, lease_until }),
            Updated::Rejected(old) => {
                Ok(classify_claim(opt_from(old.as_ref(), task_from)?.as_ref(), owner, &link, now))
            }
        }
    }

    async fn submit_task(&self, req: &SubmitTask) -> StoreResult<SubmitOutcome> {
        let now = self.clock.now();
        let hash = req.result_hash();
        let SubmitTask { owner, link_id: link, task_id: task, claim_id: claim, status, result } = req;
        let out = self
            .db
            .update(
                Update::of(task_key(*link, *task))
                    .set("status", s(TaskStatus::from(*status).as_str()))
                    .set("result", s(result.as_str()))
                    .set("result_hash", s(hash.clone()))
                    .set("finished_at", n(now.as_millis()))
                    .set("ttl", ttl_at(now.plus(self.policy.retention)))
                    .remove("gsi2pk")
                    .remove("gsi2sk")
                    .when(
                        eq("owner", s(owner.as_str()))
                            .and(eq("status", s("claimed")))
                            .and(eq("claim_id", s(claim.to_string())))
                            .and(gt("expires_at", n(now.as_millis()))),
                    ),
            )
            .send(false)
            .await?;
        match out {
            Updated::Applied(_) => Ok(SubmitOutcome::Accepted),
            Updated::Rejected(old) => {
                Ok(classify_submit(opt_from(old.as_ref(), task_from)?.as_ref(), owner, link, claim, Some(&hash), now))
            }
        }
    }
}

#[async_trait]
impl RecordArtifacts for DynamoStore {
    async fn record_artifact(&self, owner: &OwnerId, r: &ArtifactRecord) -> StoreResult<ArtifactOutcome> {
        let now = self.clock.now();
        let mut item = artifact_key(r);
        item.extend(values([
            ("owner", s(owner.as_str())),
            ("task_id", s(r.task_id.to_string())),
            ("artifact_id", s(r.artifact_id.clone())),
            ("claim_id", s(r.claim_id.to_string())),
            ("name", s(r.name.clone())),
            ("content_type", s(r.content_type.clone())),
            ("sha256", s(r.sha256.clone())),
            ("size", n(i64::try_from(r.size).unwrap_or(i64::MAX))),
            ("object_key", s(r.object_key.clone())),
            ("created_at", n(now.as_millis())),
            (TTL_ATTRIBUTE, ttl_at(now.plus(self.policy.task_ttl).plus(self.policy.retention))),
        ]));
        if r.size > MAX_ARTIFACT_BYTES_PER_TASK {
            return Ok(ArtifactOutcome::OverCap(ArtifactCap::Bytes));
        }
        let size = i64::try_from(r.size).unwrap_or(i64::MAX);
        let room = i64::try_from(MAX_ARTIFACT_BYTES_PER_TASK).unwrap_or(i64::MAX) - size;
        // The task counts its artifacts and their bytes in the same transaction as the record,
        // under the fencing condition and the caps.
        let items = vec![
            put(&self.db.table, item, "attribute_not_exists(#pk)", Item::new())?,
            update_item(
                &self.db.table,
                Update::of(task_key(r.link_id, r.task_id))
                    .increment("artifact_count", n(0), n(1))
                    .increment("artifact_bytes", n(0), n(size))
                    .when(
                        eq("owner", s(owner.as_str()))
                            .and(eq("status", s("claimed")))
                            .and(eq("claim_id", s(r.claim_id.to_string())))
                            .and(gt("expires_at", n(now.as_millis())))
                            .and(
                                missing("artifact_count")
                                    .or(lt("artifact_count", n(i64::from(MAX_ARTIFACTS_PER_TASK)))),
                            )
                            .and(missing("artifact_bytes").or(le("artifact_bytes", n(room)))),
                    ),
            )?,
        ];
        let Some(reasons) = self.db.transact(items).await? else { return Ok(ArtifactOutcome::Recorded) };
        if failed(&reasons, 0)
            && let Some(old) = old_image(&reasons, 0)
        {
            let old = Read(old);
            if old.opt_s("owner") == Some(owner.as_str()) {
                return Ok(if old.opt_s("sha256") == Some(r.sha256.as_str()) {
                    ArtifactOutcome::Replayed
                } else {
                    ArtifactOutcome::DifferentContent
                });
            }
            return Ok(ArtifactOutcome::Rejected(SubmitRejection::Missing));
        }
        if failed(&reasons, 1) {
            let image = old_image(&reasons, 1);
            let old = opt_from(image, task_from)?;
            let holds = old.as_ref().is_some_and(|t| {
                t.visible_to(owner, &r.link_id)
                    && t.status_at(now) == TaskStatus::Claimed
                    && t.claim_id == Some(r.claim_id)
            });
            if holds && let Err(cap) = usage_of(image)?.admits(r.size) {
                return Ok(ArtifactOutcome::OverCap(cap));
            }
            return Ok(match classify_submit(old.as_ref(), owner, &r.link_id, &r.claim_id, None, now) {
                SubmitOutcome::Rejected(why) => ArtifactOutcome::Rejected(why),
                _ => ArtifactOutcome::Rejected(SubmitRejection::StaleClaim),
            });
        }
        Err(unexpected("artifact transaction", &reasons))
    }

    /// One `TransactGetItems` (a consistent snapshot of the artifact's record and the task).
    async fn check_artifact(&self, owner: &OwnerId, record: &ArtifactRecord) -> StoreResult<ArtifactCheck> {
        let now = self.clock.now();
        let get = |k: Item| -> StoreResult<TransactGetItem> {
            let g = Get::builder().table_name(&self.db.table).set_key(Some(k)).build().map_err(build)?;
            Ok(TransactGetItem::builder().get(g).build())
        };
        let out = self
            .db
            .client
            .transact_get_items()
            .transact_items(get(artifact_key(record))?)
            .transact_items(get(task_key(record.link_id, record.task_id))?)
            .send()
            .await
            .map_err(sdk)?;
        let responses = out.responses();
        let item = |i: usize| responses.get(i).and_then(|r| r.item.as_ref()).filter(|i| !i.is_empty());
        let existing = item(0)
            .filter(|a| Read(a).opt_s("owner") == Some(owner.as_str()))
            .and_then(|a| Read(a).opt_s("sha256").map(str::to_owned));
        let task = opt_from(item(1), task_from)?;
        Ok(check_artifact(existing.as_deref(), task.as_ref(), owner, record, now, usage_of(item(1))?))
    }
}

/// What a task item's artifacts use (the counters the artifact transaction keeps).
fn usage_of(task: Option<&Item>) -> StoreResult<ArtifactUsage> {
    let Some(item) = task else { return Ok(ArtifactUsage::default()) };
    let r = Read(item);
    Ok(ArtifactUsage {
        count: u32::try_from(r.opt_n("artifact_count")?.unwrap_or(0)).unwrap_or(u32::MAX),
        bytes: u64::try_from(r.opt_n("artifact_bytes")?.unwrap_or(0)).unwrap_or(0),
    })
}
