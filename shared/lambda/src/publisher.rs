//! The `publish_events` function: DynamoDB stream records (old and new images) → domain events
//! (`domain::events::derive_*`, through `store_dynamo::events_of_change`) → the SQS events queue.
//!
//! Records are handled in order. When sending a record's events fails, that record and every
//! later one are reported as batch item failures (`ReportBatchItemFailures`): Lambda checkpoints
//! before it and delivers it again, so nothing is lost and order is kept. A record whose images
//! cannot be decoded (an item this code did not write) means no event: it is logged and skipped,
//! never allowed to block the shard.

use std::sync::Arc;

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use domain::events::Event;
use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::{Value, json};
use store_dynamo::{events_of_change, item_from_stream_json};

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
    async fn send(&self, events: &[Event]) -> Result<(), PublishError>;
}

/// The SQS events queue.
pub struct SqsSink {
    /// The client.
    pub client: aws_sdk_sqs::Client,
    /// The queue URL.
    pub queue_url: String,
}

#[async_trait::async_trait]
impl EventSink for SqsSink {
    async fn send(&self, events: &[Event]) -> Result<(), PublishError> {
        let entries = events
            .iter()
            .enumerate()
            .map(|(i, e)| {
                SendMessageBatchRequestEntry::builder()
                    .id(format!("e{i}"))
                    .message_body(e.to_json())
                    .build()
                    .map_err(|b| PublishError::Send(b.into()))
            })
            .collect::<Result<Vec<_>, _>>()?;
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

/// One stream batch: the `batchItemFailures` answer.
pub async fn handle(sink: &dyn EventSink, event: &Value) -> Value {
    let records = event["Records"].as_array().cloned().unwrap_or_default();
    let mut failed_from = None;
    for (i, record) in records.iter().enumerate() {
        let change = &record["dynamodb"];
        let image = |name: &str| change.get(name).map(item_from_stream_json).transpose();
        let events = match (image("OldImage"), image("NewImage")) {
            (Ok(old), Ok(new)) => events_of_change(old.as_ref(), new.as_ref()),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let events = match events {
            Ok(events) => events,
            Err(e) => {
                tracing::error!(error = %domain::errors::ErrorChain(&e), keys = %change["Keys"], "undecodable stream record skipped");
                continue;
            }
        };
        let mut sent = Ok(());
        for chunk in events.chunks(10) {
            sent = sink.send(chunk).await;
            if sent.is_err() {
                break;
            }
        }
        if let Err(e) = sent {
            tracing::warn!(error = %domain::errors::ErrorChain(&e), "events not queued; the record comes again");
            failed_from = Some(i);
            break;
        }
    }
    let failures: Vec<Value> = failed_from
        .map(|i| records[i..].iter().map(|r| json!({"itemIdentifier": r["dynamodb"]["SequenceNumber"]})).collect())
        .unwrap_or_default();
    json!({ "batchItemFailures": failures })
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
        Arc::new(SqsSink { client: aws_sdk_sqs::Client::new(&aws), queue_url: config.queue_url.clone() });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let sink = Arc::clone(&sink);
        async move { Ok::<_, Error>(handle(sink.as_ref(), &event.payload).await) }
    }))
    .await
}
