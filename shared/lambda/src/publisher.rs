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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A sink that records what it got and fails for chosen event types.
    #[derive(Default)]
    struct Sink {
        got: Mutex<Vec<String>>,
        fail_on: Option<&'static str>,
    }

    #[async_trait::async_trait]
    impl EventSink for Sink {
        async fn send(&self, events: &[Event]) -> Result<(), PublishError> {
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
        let mut change = json!({"SequenceNumber": seq, "Keys": {}, "NewImage": image(status)});
        if let Some(o) = old {
            change["OldImage"] = image(o);
        }
        json!({"eventName": if old.is_some() { "MODIFY" } else { "INSERT" }, "dynamodb": change})
    }

    const T1: &str = "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a71";
    const T2: &str = "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a72";
    const T3: &str = "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a73";

    #[tokio::test]
    async fn a_failed_send_reports_that_record_and_every_later_one() {
        let sink = Sink { fail_on: Some("task.cancelled"), ..Sink::default() };
        let batch = json!({"Records": [
            record("100", T1, None, "queued"),
            record("200", T2, Some("queued"), "cancelled"),
            record("300", T3, None, "queued"),
        ]});
        let out = handle(&sink, &batch).await;
        assert_eq!(out, json!({"batchItemFailures": [{"itemIdentifier": "200"}, {"itemIdentifier": "300"}]}));
        assert_eq!(*sink.got.lock().unwrap(), ["task.assigned"]);
    }

    #[tokio::test]
    async fn an_undecodable_record_is_skipped_and_never_blocks_the_others() {
        let sink = Sink::default();
        let mut broken = record("100", T1, None, "queued");
        broken["dynamodb"]["NewImage"]["status"] = json!({"S": "exploded"});
        let batch = json!({"Records": [
            broken,
            {"eventName": "MODIFY", "dynamodb": {"SequenceNumber": "150", "NewImage": {"pk": {"S": "OWNER#a"}, "sk": {"S": "PROJECT#p"}}}},
            record("200", T2, Some("queued"), "cancelled"),
        ]});
        let out = handle(&sink, &batch).await;
        assert_eq!(out, json!({"batchItemFailures": []}));
        assert_eq!(*sink.got.lock().unwrap(), ["task.cancelled"]);
    }
}
