//! Events: the table stream's images decoded into domain events, and the last webhook
//! delivery per link ([`RecordDeliveries`]).

use async_trait::async_trait;

use domain::events::{DeliveryOutcome, Event, derive_run, derive_task};
use domain::ids::{ChatLinkId, OwnerId};
use domain::store::{RecordDeliveries, StoreError, StoreResult};

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;

use crate::codec::{Item, Read, device_from, n, opt_from, run_from, s, task_from, values};
use crate::error::sdk;
use crate::keys::{delivery_key, delivery_partition, ttl_at};
use crate::request::names;
use crate::{DynamoStore, TTL_ATTRIBUTE};

#[async_trait]
impl RecordDeliveries for DynamoStore {
    /// One conditional `PutItem` on `DELIVERY#<owner>` / `<link>` (the notifier's only write,
    /// which its IAM policy limits to `DELIVERY#` partitions), kept only if it is not older
    /// than the outcome stored (`at`).
    async fn record_delivery(&self, owner: &OwnerId, link: ChatLinkId, outcome: &DeliveryOutcome) -> StoreResult<()> {
        let body = serde_json::to_string(outcome).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let at = n(outcome.at.as_millis());
        let mut item = delivery_key(owner, link);
        item.extend(values([
            ("outcome", s(body)),
            ("at", at.clone()),
            (TTL_ATTRIBUTE, ttl_at(self.clock.now().plus(self.policy.retention))),
        ]));
        let result = self
            .db
            .client
            .put_item()
            .table_name(&self.db.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk) OR attribute_not_exists(#at) OR #at <= :at")
            .set_expression_attribute_names(Some(names("#pk #at")))
            .expression_attribute_values(":at", at)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // A later outcome is kept already: this one is older and changes nothing.
            Err(SdkError::ServiceError(se)) if matches!(se.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                Ok(())
            }
            Err(e) => Err(sdk(e)),
        }
    }

    async fn last_deliveries(&self, owner: &OwnerId) -> StoreResult<Vec<(ChatLinkId, DeliveryOutcome)>> {
        let items = self.db.query_all(delivery_partition(owner), "").await?;
        items
            .iter()
            .map(|i| {
                let r = Read(i);
                Ok((
                    r.parse("sk", |v| ChatLinkId::parse("chat_link_id", v).ok())?,
                    r.parse("outcome", |v| serde_json::from_str(v).ok())?,
                ))
            })
            .collect()
    }
}

/// The desktop watch a table change asks for (`domain::events::watch_of_run`): one for each
/// newly queued run.
///
/// # Errors
/// When a run image does not decode.
pub fn watch_of_change(old: Option<&Item>, new: Option<&Item>) -> StoreResult<Option<domain::events::DesktopWatch>> {
    let sk = new.or(old).and_then(|i| Read(i).opt_s("sk").map(str::to_owned)).unwrap_or_default();
    if sk != "RUN" || old.is_some() {
        return Ok(None);
    }
    let n = opt_from(new, run_from)?;
    Ok(domain::events::watch_of_run(None, n.as_ref()))
}

/// The events one stream record means: its old and new images (either may be absent) decoded
/// as a task, a run or a device and handed to the domain's `derive_*`. Other items mean nothing.
///
/// # Errors
/// [`StoreError::Corrupt`] when a task, run or device image cannot be decoded.
pub fn events_of_change(old: Option<&Item>, new: Option<&Item>) -> StoreResult<Vec<Event>> {
    let sk = new.or(old).and_then(|i| Read(i).opt_s("sk").map(str::to_owned)).unwrap_or_default();
    if sk.starts_with("TASK#") {
        let (o, n) = (opt_from(old, task_from)?, opt_from(new, task_from)?);
        Ok(derive_task(o.as_ref(), n.as_ref()))
    } else if sk == "RUN" {
        let (o, n) = (opt_from(old, run_from)?, opt_from(new, run_from)?);
        Ok(derive_run(o.as_ref(), n.as_ref()))
    } else if sk.starts_with("DEVICE#") {
        let (o, n) = (opt_from(old, device_from)?, opt_from(new, device_from)?);
        Ok(domain::events::derive_device(o.as_ref(), n.as_ref()))
    } else {
        Ok(Vec::new())
    }
}
