//! The `publish_events` function: DynamoDB stream records (old and new images) → domain events
//! (`domain::events::derive_*`, through `store_dynamo::events_of_change`) → the SQS events queue.
//!
//! Only the events some subscription of their owner wants are queued (`events::targets_in`,
//! the notifier's own rule, over the owner's links: one query per owner per batch, and on a
//! failed read every event is queued and the notifier decides): an owner without webhooks costs
//! no message and no `notify` invocation.
//!
//! Records are handled in order. When sending a record's events fails, that record and every
//! later one are reported as batch item failures (`ReportBatchItemFailures`): Lambda checkpoints
//! before it and delivers it again, so nothing is lost and order is kept. A record whose images
//! cannot be decoded (an item this code did not write) means no event: it is logged and skipped,
//! never allowed to block the shard.

use std::sync::Arc;

use aws_lambda_events::event::dynamodb::{Event as StreamEvent, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use domain::events::{DesktopWatch, Event, QueueMessage};
use domain::store::StoreResult;
use lambda_runtime::{LambdaEvent, service_fn};
use store_dynamo::events_of_change;

use crate::config::PublisherConfig;
use crate::{Error, aws_config, env, init_tracing};

/// Why a record's events could not be queued.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The request failed.
    #[error("SendMessageBatch failed")]
    Send(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// SQS refused some entries.
    #[error("SQS refused {0} of the batch")]
    Partial(usize),
}

/// Where events go.
#[async_trait::async_trait]
pub trait EventSink: Send + Sync {
    /// Queues `events` (at most 10), all or an error.
    ///
    /// # Errors
    /// [`PublishError`].
    async fn send(&self, events: &[Event], request_id: Option<&str>) -> Result<(), PublishError>;

    /// Queues `watch` to be run later (`events::watch`), once per delay of
    /// `domain::fleet::WATCH_AFTER` (a sink that keeps no watches ignores it).
    ///
    /// # Errors
    /// [`PublishError`].
    async fn watch(&self, _watch: &DesktopWatch) -> Result<(), PublishError> {
        Ok(())
    }
}

/// The SQS events queue.
pub struct SqsSink {
    /// The client.
    pub client: aws_sdk_sqs::Client,
    /// The queue URL.
    pub queue_url: String,
    /// How long after a run is queued its desktop watches come back (`WATCH_AFTER`; a test
    /// that plays the queue by hand asks for no delay).
    pub watch_after: Vec<std::time::Duration>,
}

impl SqsSink {
    /// The sink the deployed publisher uses: desktop watches come back after each of
    /// `domain::fleet::WATCH_AFTER`.
    pub fn deployed(client: aws_sdk_sqs::Client, queue_url: String) -> Self {
        Self { client, queue_url, watch_after: domain::fleet::WATCH_AFTER.to_vec() }
    }

    /// One `SendMessageBatch` of `entries` (at most 10), all or an error.
    async fn send_batch(&self, entries: Vec<SendMessageBatchRequestEntry>) -> Result<(), PublishError> {
        let out = self
            .client
            .send_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| {
            tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "SendMessageBatch failed");
            PublishError::Send(e.into())
        })?;
        if out.failed().is_empty() { Ok(()) } else { Err(PublishError::Partial(out.failed().len())) }
    }
}

#[async_trait::async_trait]
impl EventSink for SqsSink {
    async fn send(&self, events: &[Event], request_id: Option<&str>) -> Result<(), PublishError> {
        let attribute = request_id
            .map(|id| {
                aws_sdk_sqs::types::MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(id)
                    .build()
                    .map_err(|b| PublishError::Send(b.into()))
            })
            .transpose()?;
        let entries = events
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(format!("e{i}"))
                    .message_body(e.to_json())
                    .message_group_id(events::tenant_group(&e.data.owner));
                let entry = match &attribute {
                    Some(a) => entry.message_attributes(crate::EVENT_REQUEST_ID_ATTRIBUTE, a.clone()),
                    None => entry,
                };
                entry.build().map_err(|b| PublishError::Send(b.into()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.send_batch(entries).await
    }

    async fn watch(&self, watch: &DesktopWatch) -> Result<(), PublishError> {
        let body = serde_json::to_string(&QueueMessage::Watch { desktop_watch: watch.clone() })
            .map_err(|e| PublishError::Send(e.into()))?;
        let entries = self
            .watch_after
            .iter()
            .enumerate()
            .map(|(i, d)| {
                SendMessageBatchRequestEntry::builder()
                    .id(format!("w{i}"))
                    .message_body(body.clone())
                    .message_group_id(events::tenant_group(&watch.owner))
                    .delay_seconds(i32::try_from(d.as_secs()).unwrap_or(900).min(900))
                    .build()
                    .map_err(|b| PublishError::Send(b.into()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if entries.is_empty() {
            return Ok(());
        }
        self.send_batch(entries).await
    }
}

/// The events among `events` that a subscription of their owner wants, reading each owner's
/// links once per batch (`owners`); an owner whose links cannot be read keeps every event.
async fn wanted(
    links: &dyn domain::store::ManageLinks,
    owners: &mut std::collections::HashMap<String, Option<Vec<domain::projects::ChatLink>>>,
    events: Vec<Event>,
) -> Vec<Event> {
    let mut kept = Vec::with_capacity(events.len());
    for ev in events {
        if !owners.contains_key(&ev.data.owner) {
            let read = match domain::ids::OwnerId::new(ev.data.owner.clone()) {
                Ok(owner) => match links.list_links(&owner).await {
                    Ok(l) => Some(l),
                    Err(e) => {
                        tracing::warn!(error = %domain::errors::ErrorChain(&e), "links unreadable; events queued");
                        None
                    }
                },
                Err(_) => Some(Vec::new()),
            };
            owners.insert(ev.data.owner.clone(), read);
        }
        let keep = owners[&ev.data.owner].as_ref().is_none_or(|l| !events::targets_in(&ev, l).is_empty());
        if keep {
            kept.push(ev);
        } else {
            tracing::debug!(
                event = ev.id.as_str(),
                event_type = ev.kind.as_str(),
                "no subscription wants it; not queued"
            );
        }
    }
    kept
}

/// One stream batch: the records whose events could not be queued, as the partial-batch answer.
/// With `links`, only the events a subscription wants are queued; without, all of them.
pub async fn handle(
    sink: &dyn EventSink,
    links: Option<&dyn domain::store::ManageLinks>,
    event: &StreamEvent,
) -> DynamoDbEventResponse {
    let mut failed_from = None;
    let mut owners = std::collections::HashMap::new();
    for (i, record) in event.records.iter().enumerate() {
        let (events, request_id, watch) = match events_of_record(record) {
            Ok(events) => events,
            Err(e) => {
                let keys = serde_json::to_string(&record.change.keys).unwrap_or_default();
                tracing::error!(error = %domain::errors::ErrorChain(&e), %keys, "undecodable stream record skipped");
                continue;
            }
        };
        let events = match links {
            Some(links) if !events.is_empty() => wanted(links, &mut owners, events).await,
            _ => events,
        };
        let mut sent = Ok(());
        for chunk in events.chunks(10) {
            sent = sink.send(chunk, request_id.as_deref()).await;
            if sent.is_err() {
                break;
            }
        }
        if sent.is_ok()
            && let Some(w) = &watch
        {
            sent = sink.watch(w).await;
        }
        if let Err(e) = sent {
            tracing::warn!(error = %domain::errors::ErrorChain(&e), "events not queued; the record comes again");
            failed_from = Some(i);
            break;
        }
    }
    let mut response = DynamoDbEventResponse::default();
    response.batch_item_failures = failed_from
        .map(|i| {
            event.records[i..]
                .iter()
                .map(|r| {
                    let mut failure = DynamoDbBatchItemFailure::default();
                    failure.item_identifier = r.change.sequence_number.clone();
                    failure
                })
                .collect()
        })
        .unwrap_or_default();
    response
}

/// The events a stream record means ([`events_of_change`] over its decoded images), and the
/// request that made the change (recorded on the new image).
fn events_of_record(record: &EventRecord) -> StoreResult<(Vec<Event>, Option<String>, Option<DesktopWatch>)> {
    let (old, new) = crate::stream_images(record)?;
    let request_id = new.as_ref().and_then(store_dynamo::request_id_of).map(str::to_owned);
    let watch = store_dynamo::watch_of_change(old.as_ref(), new.as_ref())?;
    Ok((events_of_change(old.as_ref(), new.as_ref())?, request_id, watch))
}

/// Runs the publisher until the runtime stops it.
///
/// # Errors
/// Bad configuration (every problem at once, before any work), or the runtime failing.
pub async fn run() -> Result<(), Error> {
    init_tracing();
    let config = PublisherConfig::from_env(env)?;
    let aws = aws_config().await;
    let sink: Arc<dyn EventSink> =
        Arc::new(SqsSink::deployed(aws_sdk_sqs::Client::new(&aws), config.queue_url.clone()));
    let store = Arc::new(crate::dynamo_store(&aws, &config.table, Default::default()));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<StreamEvent>| {
        let (sink, store) = (Arc::clone(&sink), Arc::clone(&store));
        async move { Ok::<_, Error>(handle(sink.as_ref(), Some(store.as_ref()), &event.payload).await) }
    }))
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};

    use super::*;

    /// A batch as the stream delivers it.
    fn batch(records: Vec<Value>) -> StreamEvent {
        serde_json::from_value(json!({ "Records": records })).unwrap()
    }

    fn answer(response: &DynamoDbEventResponse) -> Value {
        serde_json::to_value(response).unwrap()
    }

    /// A sink that records what it got and fails for chosen event types.
    #[derive(Default)]
    struct Sink {
        got: Mutex<Vec<String>>,
        fail_on: Option<&'static str>,
    }

    #[async_trait::async_trait]
    impl EventSink for Sink {
        async fn send(&self, events: &[Event], _request_id: Option<&str>) -> Result<(), PublishError> {
            if events.iter().any(|e| Some(e.kind.as_str()) == self.fail_on) {
                return Err(PublishError::Partial(events.len()));
            }
            self.got.lock().unwrap().extend(events.iter().map(|e| e.kind.as_str().to_owned()));
            Ok(())
        }
    }

    /// A stream record for a task item of `status` (and, with `old`, the change from it).
    fn record(seq: &str, task: &str, old: Option<&str>, status: &str) -> Value {
        let image = |status: &str| {
            json!({
                "pk": {"S": "LINK#0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b"},
                "sk": {"S": format!("TASK#{task}")},
                "task_id": {"S": task},
                "link_id": {"S": "0190b3c4-5d6e-4f80-9a1b-2c3d4e5f6a7b"},
                "owner": {"S": "alice"},
                "objective": {"S": "o"},
                "status": {"S": status},
                "created_at": {"N": "1800000000000"},
                "expires_at": {"N": "1800086400000"},
                "finished_at": {"N": "1800000060000"},
            })
        };
        let mut change = json!({"SequenceNumber": seq, "Keys": {}, "NewImage": image(status), "SizeBytes": 300,
                                "ApproximateCreationDateTime": 1800000000.0, "StreamViewType": "NEW_AND_OLD_IMAGES"});
        if let Some(o) = old {
            change["OldImage"] = image(o);
        }
        json!({"eventID": format!("e{seq}"), "awsRegion": "us-east-1", "eventSource": "aws:dynamodb",
               "eventName": if old.is_some() { "MODIFY" } else { "INSERT" }, "dynamodb": change})
    }

    const T1: &str = "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a71";
    const T2: &str = "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a72";
    const T3: &str = "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a73";

    #[tokio::test]
    async fn a_failed_send_reports_that_record_and_every_later_one() {
        let sink = Sink { fail_on: Some("task.cancelled"), ..Sink::default() };
        let batch = batch(vec![
            record("100", T1, None, "queued"),
            record("200", T2, Some("queued"), "cancelled"),
            record("300", T3, None, "queued"),
        ]);
        let out = answer(&handle(&sink, None, &batch).await);
        assert_eq!(out, json!({"batchItemFailures": [{"itemIdentifier": "200"}, {"itemIdentifier": "300"}]}));
        assert_eq!(*sink.got.lock().unwrap(), ["task.assigned"]);
    }

    #[tokio::test]
    async fn an_undecodable_record_is_skipped_and_never_blocks_the_others() {
        let sink = Sink::default();
        let mut broken = record("100", T1, None, "queued");
        broken["dynamodb"]["NewImage"]["status"] = json!({"S": "exploded"});
        let mut project = record("150", T1, None, "queued");
        project["dynamodb"]["NewImage"] = json!({"pk": {"S": "OWNER#a"}, "sk": {"S": "PROJECT#p"}});
        let batch = batch(vec![broken, project, record("200", T2, Some("queued"), "cancelled")]);
        let out = answer(&handle(&sink, None, &batch).await);
        assert_eq!(out, json!({"batchItemFailures": []}));
        assert_eq!(*sink.got.lock().unwrap(), ["task.cancelled"]);
    }
}
