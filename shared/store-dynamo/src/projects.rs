//! Projects, their device shares and chat links: [`ManageProjects`], [`SyncSessions`],
//! [`ManageLinks`].

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use domain::ids::{ChatLinkId, OwnerId, ProjectId};
use domain::projects::{ChatLink, Project, StoredShares, Subscription, SyncOutcome};
use domain::runs::SessionMeta;
use domain::store::{ManageLinks, ManageProjects, StoreError, StoreResult, SyncSessions};

use crate::DynamoStore;
use crate::codec::{Item, Read, b, link_from, live_link, n, opt_from, project_from, s, task_from, values};
use crate::error::{sdk, unexpected};
use crate::keys::{link_key, link_partition, owner_partition, project_key, task_key, ttl_at};
use crate::request::{Updated, check, failed, names, old_image, our_write_landed, put};
use crate::write::{Update, eq, exists, gt, is_in, missing};

#[async_trait]
impl ManageProjects for DynamoStore {
    async fn create_project(&self, owner: &OwnerId, name: &str) -> StoreResult<Project> {
        let p = Project::new(owner, name, self.clock.now());
        let mut item = project_key(owner, p.project_id);
        item.extend(values([
            ("project_id", s(p.project_id.to_string())),
            ("owner", s(owner.as_str())),
            ("name", s(name)),
            ("enabled", b(false)),
            ("sessions", s("[]")),
            ("created_at", n(p.created_at.as_millis())),
            // The duration summary's map exists from the start, so a completion records its
            // duration with one nested SET.
            ("durations", AttributeValue::M(HashMap::new())),
        ]));
        let put = self
            .db
            .client
            .put_item()
            .table_name(&self.db.table)
            .set_item(Some(item.clone()))
            .condition_expression("attribute_not_exists(#pk)")
            .set_expression_attribute_names(Some(names("#pk")))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match put {
            Ok(_) => Ok(p),
            // The SDK retried a put whose first attempt landed (its answer was lost).
            Err(SdkError::ServiceError(se)) if matches!(se.err(), PutItemError::ConditionalCheckFailedException(c) if our_write_landed(c.item(), &item)) => {
                Ok(p)
            }
            Err(e) => Err(sdk(e)),
        }
    }

    async fn set_project_enabled(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        enabled: bool,
    ) -> StoreResult<Option<Project>> {
        let out = self
            .db
            .update(Update::of(project_key(owner, project)).set("enabled", b(enabled)).when(exists("pk")))
            .send(true)
            .await?;
        match out {
            Updated::Applied(item) => opt_from(item.as_ref(), project_from),
            Updated::Rejected(_) => Ok(None),
        }
    }

    async fn get_project(&self, owner: &OwnerId, project: ProjectId) -> StoreResult<Option<Project>> {
        opt_from(self.db.get(project_key(owner, project)).await?.as_ref(), project_from)
    }

    async fn list_projects(&self, owner: &OwnerId) -> StoreResult<Vec<Project>> {
        self.db.query_all(owner_partition(owner), "PROJECT#").await?.iter().map(project_from).collect()
    }
}

/// Versioned writes of a project's shares retry this often when other devices' syncs keep
/// winning the race, then give up as retryable.
pub(crate) const SHARE_WRITE_ATTEMPTS: usize = 8;

#[async_trait]
impl SyncSessions for DynamoStore {
    async fn sync_sessions(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        device: uuid::Uuid,
        sessions: &[SessionMeta],
    ) -> StoreResult<SyncOutcome> {
        self.set_device_share(owner, project, device, sessions, true).await
    }
}

impl DynamoStore {
    /// Replaces `device`'s list in the project's shares and rewrites the union (`sessions`,
    /// `session_ids`) in one write conditioned on the version read (`share_ver`): a concurrent
    /// sync of another device makes the write fail and it is redone on the new state, so no
    /// device's list is ever overwritten by another's. `sync` also requires the project to be
    /// enabled and records the sync time; a revoke withdraws shares whatever the switch says.
    pub(crate) async fn set_device_share(
        &self,
        owner: &OwnerId,
        project: ProjectId,
        device: uuid::Uuid,
        sessions: &[SessionMeta],
        sync: bool,
    ) -> StoreResult<SyncOutcome> {
        for _ in 0..SHARE_WRITE_ATTEMPTS {
            let Some(item) = self.db.get(project_key(owner, project)).await? else { return Ok(SyncOutcome::NotFound) };
            if sync && !Read(&item).bool("enabled") {
                return Ok(SyncOutcome::Disabled);
            }
            let version = Read(&item).opt_n("share_ver")?.unwrap_or(0);
            let shares: domain::projects::DeviceShares =
                Read(&item).opt_parse("device_shares", |v| serde_json::from_str(v).ok())?.unwrap_or_default();
            let shares = if sync {
                let now = self.clock.now();
                match domain::projects::sync_write(&shares, device, sessions, Read(&item).opt_ts("last_sync_at")?, now)
                {
                    domain::projects::SyncWrite::Shares(shares) => shares,
                    domain::projects::SyncWrite::Nothing => return Ok(SyncOutcome::Synced(project_from(&item)?)),
                    domain::projects::SyncWrite::Stamp => return self.stamp_sync(owner, project).await,
                }
            } else {
                domain::projects::with_device_share(shares, device, sessions)
            };
            let stored = StoredShares::of(&shares).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if stored.bytes() > domain::limits::MAX_SHARES_BYTES {
                // The project item would pass DynamoDB's 400 KB: refused, nothing written.
                return Ok(SyncOutcome::TooLarge { bytes: stored.bytes() });
            }
            let StoredShares { union, union_json, shares_json } = stored;
            let ids: Vec<String> = union.iter().map(|m| m.graph_session_id.to_string()).collect();
            let mut write = Update::of(project_key(owner, project))
                .set("sessions", s(union_json))
                .set("device_shares", s(shares_json))
                .set("share_ver", n(version + 1));
            // The durations of sessions no longer shared go with them (a completion writing one
            // between the read and this write loses that one sample).
            let durations = project_from(&item)?.recent_durations;
            let kept = domain::projects::durations_kept(&durations, &union);
            if kept.len() != durations.len() {
                let map = kept.into_iter().map(|(k, v)| (k, n(i64::try_from(v).unwrap_or(i64::MAX)))).collect();
                write = write.set("durations", AttributeValue::M(map));
            }
            if sync {
                write = write.set("last_sync_at", n(self.clock.now().as_millis()));
            }
            // DynamoDB has no empty sets: an empty union removes the attribute.
            write = if ids.is_empty() {
                write.remove("session_ids")
            } else {
                write.set("session_ids", AttributeValue::Ss(ids))
            };
            // Only over the version read (another device's sync in between wins, and this one
            // is redone), and a sync only while the project is enabled.
            let mut when = exists("pk").and(missing("share_ver").or(eq("share_ver", n(version))));
            if sync {
                when = when.and(eq("enabled", b(true)));
            }
            match self.db.update(write.when(when)).send(true).await? {
                Updated::Applied(item) => {
                    return Ok(match opt_from(item.as_ref(), project_from)? {
                        Some(p) => SyncOutcome::Synced(p),
                        None => SyncOutcome::NotFound,
                    });
                }
                Updated::Rejected(Some(old)) if !old.is_empty() => {
                    if sync && !Read(&old).bool("enabled") {
                        return Ok(SyncOutcome::Disabled);
                    }
                    // Another device's sync won: redo on the new state.
                }
                Updated::Rejected(_) => return Ok(SyncOutcome::NotFound),
            }
        }
        Err(StoreError::unavailable(format!(
            "project {project}: {SHARE_WRITE_ATTEMPTS} versioned writes of its shares lost to concurrent syncs"
        )))
    }

    /// A sync that changed no list: only `last_sync_at` (`domain::projects::SyncWrite::Stamp`),
    /// while the project is enabled.
    async fn stamp_sync(&self, owner: &OwnerId, project: ProjectId) -> StoreResult<SyncOutcome> {
        let write = Update::of(project_key(owner, project))
            .set("last_sync_at", n(self.clock.now().as_millis()))
            .when(exists("pk").and(eq("enabled", b(true))));
        Ok(match self.db.update(write).send(true).await? {
            Updated::Applied(item) => match opt_from(item.as_ref(), project_from)? {
                Some(p) => SyncOutcome::Synced(p),
                None => SyncOutcome::NotFound,
            },
            Updated::Rejected(Some(old)) if !old.is_empty() => SyncOutcome::Disabled,
            Updated::Rejected(_) => SyncOutcome::NotFound,
        })
    }
}

#[async_trait]
impl ManageLinks for DynamoStore {
    async fn create_link(&self, owner: &OwnerId, project: ProjectId, name: &str) -> StoreResult<Option<ChatLink>> {
        let link = ChatLink::new(owner, project, name, self.clock.now());
        let mut item = link_key(owner, link.link_id);
        item.extend(values([
            ("link_id", s(link.link_id.to_string())),
            ("owner", s(owner.as_str())),
            ("project_id", s(project.to_string())),
            ("name", s(name)),
            ("created_at", n(link.created_at.as_millis())),
        ]));
        let items = vec![
            check(&self.db.table, project_key(owner, project), "attribute_exists(#pk)", Item::new())?,
            put(&self.db.table, item.clone(), "attribute_not_exists(#pk)", Item::new())?,
        ];
        match self.db.transact(items).await? {
            None => Ok(Some(link)),
            Some(reasons) if failed(&reasons, 0) => Ok(None),
            // The SDK retried a transaction whose first attempt committed (its answer was lost).
            Some(reasons) if failed(&reasons, 1) && our_write_landed(old_image(&reasons, 1), &item) => Ok(Some(link)),
            Some(reasons) => Err(unexpected("link transaction", &reasons)),
        }
    }

    async fn get_link(&self, owner: &OwnerId, link: ChatLinkId) -> StoreResult<Option<ChatLink>> {
        opt_from(self.db.get(link_key(owner, link)).await?.as_ref().filter(|i| live_link(i)), link_from)
    }

    async fn list_links(&self, owner: &OwnerId) -> StoreResult<Vec<ChatLink>> {
        let items = self.db.query_all(owner_partition(owner), "LINK#").await?;
        let mut links = items.iter().filter(|i| live_link(i)).map(link_from).collect::<StoreResult<Vec<_>>>()?;
        links.sort_by_key(|l| (l.created_at, l.link_id));
        Ok(links)
    }

    /// A tombstone on the link (one conditional write), then a sweep over its tasks (one query
    /// per page, one conditional write per task): open ones become `cancelled`, all are marked
    /// `link_deleted`. The tombstone expires with the retention period; until then a repeated
    /// delete finishes a sweep that was cut short.
    async fn delete_link(&self, owner: &OwnerId, link: ChatLinkId) -> StoreResult<Option<usize>> {
        let now = self.clock.now();
        let out = self
            .db
            .update(
                Update::of(link_key(owner, link))
                    .set_if_absent("deleted_at", n(now.as_millis()))
                    .set("ttl", ttl_at(now.plus(self.policy.retention)))
                    .remove("subscription")
                    .when(exists("pk")),
            )
            .send(false)
            .await?;
        if matches!(out, Updated::Rejected(_)) {
            return Ok(None);
        }
        let mut cancelled = 0;
        for item in self.db.query_all(link_partition(link), "TASK#").await? {
            let task = task_from(&item)?;
            if task.owner != *owner || task.link_deleted {
                continue;
            }
            let cancel = self
                .db
                .update(
                    Update::of(task_key(link, task.task_id))
                        .set("status", s("cancelled"))
                        .set("finished_at", n(now.as_millis()))
                        .set("link_deleted", b(true))
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
            match cancel {
                Updated::Applied(_) => cancelled += 1,
                // Finished (or expired) already: only hide it.
                Updated::Rejected(_) => {
                    self.db
                        .update(
                            Update::of(task_key(link, task.task_id))
                                .set("link_deleted", b(true))
                                .when(eq("owner", s(owner.as_str()))),
                        )
                        .send(false)
                        .await?;
                }
            }
        }
        Ok(Some(cancelled))
    }

    async fn set_subscription(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        subscription: Option<&Subscription>,
    ) -> StoreResult<Option<ChatLink>> {
        let write = match subscription {
            Some(sub) => {
                let json = serde_json::to_string(sub).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                Update::of(link_key(owner, link)).set("subscription", s(json))
            }
            None => Update::of(link_key(owner, link)).remove("subscription"),
        };
        let write = write.when(exists("pk").and(missing("deleted_at")));
        match self.db.update(write).send(true).await? {
            Updated::Applied(item) => opt_from(item.as_ref(), link_from),
            Updated::Rejected(_) => Ok(None),
        }
    }

    async fn set_desktop_tasks(
        &self,
        owner: &OwnerId,
        link: ChatLinkId,
        desktop_tasks: Option<&domain::dispatch::DesktopTasks>,
    ) -> StoreResult<Option<ChatLink>> {
        let write = match desktop_tasks {
            Some(d) => Update::of(link_key(owner, link)).set("desktop_tasks", s(d.encode())),
            None => Update::of(link_key(owner, link)).remove("desktop_tasks"),
        };
        let write = write.when(exists("pk").and(missing("deleted_at")));
        match self.db.update(write).send(true).await? {
            Updated::Applied(item) => opt_from(item.as_ref(), link_from),
            Updated::Rejected(_) => Ok(None),
        }
    }
}
