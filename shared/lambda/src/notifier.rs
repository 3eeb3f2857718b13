//! The `notify` function: SQS events queue → `events::Notifier` (signed webhooks to the
//! chat links' subscriptions), reporting partial batch failures.
//!
//! A failed message stays on the queue: it is reported in `batchItemFailures` and its
//! visibility is set to the backoff of its receive count (5 s doubling to 15 min), so the next
//! attempt comes later and later; after the queue's `maxReceiveCount` (20, like
//! `events::MAX_ATTEMPTS`) SQS moves it to the dead-letter queue. A message that is not
//! an event never will be: it fails the same way and ends in the DLQ, inspectable.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use domain::clock::{SharedClock, SystemClock};
use domain::events::QueueMessage;
use domain::store::{ManageDevices, ManageLinks, ManageProjects, ReadRuns, RecordDeliveries, WatchDesktops};
use events::webhook_url::UrlPolicy;
use events::{Delivery, Notifier, SystemResolver, backoff};
use lambda_runtime::{LambdaEvent, service_fn};

use crate::config::NotifierConfig;
use crate::{Error, aws_config, dynamo_store, env, init_tracing};

/// Changes a failed message's visibility (the backoff); tests use a no-op.
#[async_trait::async_trait]
pub trait Visibility: Send + Sync {
    /// Makes the message visible again after `seconds`.
    async fn delay(&self, receipt_handle: &str, seconds: i32);
}

/// The SQS events queue.
pub struct SqsVisibility {
    /// The client.
    pub client: aws_sdk_sqs::Client,
    /// The queue URL.
    pub queue_url: String,
}

#[async_trait::async_trait]
impl Visibility for SqsVisibility {
    async fn delay(&self, receipt_handle: &str, seconds: i32) {
        let res = self
            .client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(seconds)
            .send()
            .await;
        if let Err(e) = res {
            // The queue's own visibility timeout still brings the message back.
            tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "ChangeMessageVisibility failed");
        }
    }
}

/// How long one batch may take: below the function's 30 s timeout (`template.yaml`, checked by
/// the template test), so the partial-batch answer always gets back to Lambda. A message not
/// delivered by then counts as failed and comes back after its backoff; it is never held up
/// by another message's receiver.
pub const BATCH_DEADLINE: Duration = Duration::from_secs(20);

/// One SQS batch: the messages not delivered, as the partial-batch answer (each comes back after
/// its backoff, set through its visibility). Messages for different receivers are delivered side
/// by side (a batch is at most 10, and each attempt is bounded by the delivery timeout), those
/// for the same link (a task's events) or project (a run's) one after another in the queue's
/// order, all under [`BATCH_DEADLINE`]: one slow receiver costs no other message its delivery.
pub async fn handle<S>(notifier: &Notifier<S>, visibility: &dyn Visibility, event: &SqsEvent) -> SqsBatchResponse
where
    S: ManageLinks + RecordDeliveries + ReadRuns + ManageProjects + ManageDevices + WatchDesktops + ?Sized,
{
    let deadline = tokio::time::Instant::now() + BATCH_DEADLINE;
    let parsed: Vec<Result<QueueMessage, String>> = event
        .records
        .iter()
        .map(|m| {
            serde_json::from_str::<QueueMessage>(m.body.as_deref().unwrap_or_default())
                .map_err(|e| format!("not an event: {e}"))
        })
        .collect();
    // The receivers' order: messages grouped by where they go, each group in the batch's order
    // (a desktop watch goes on its own).
    let mut groups: Vec<(Option<String>, Vec<usize>)> = Vec::new();
    for (i, ev) in parsed.iter().enumerate() {
        let key = match ev {
            Ok(QueueMessage::Event(e)) => {
                Some(e.data.chat_link_id.clone().or_else(|| e.data.project_id.clone()).unwrap_or_default())
            }
            _ => None,
        };
        match groups.iter_mut().find(|(k, _)| key.is_some() && *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    let deliver_group = |members: Vec<usize>| {
        let parsed = &parsed;
        async move {
            let mut done = Vec::with_capacity(members.len());
            for i in members {
                let attempt = async {
                    match &parsed[i] {
                        Err(e) => Err(e.clone()),
                        Ok(QueueMessage::Watch { desktop_watch }) => {
                            let now = notifier.clock.now();
                            match events::watch::check(
                                notifier.store.as_ref(),
                                desktop_watch,
                                now,
                                notifier.poll_interval,
                            )
                            .await
                            {
                                Ok(marked) => {
                                    tracing::info!(
                                        command = desktop_watch.command_id.as_str(),
                                        marked,
                                        "desktop watch"
                                    );
                                    Ok(())
                                }
                                Err(e) => Err(domain::errors::ErrorChain(&e).to_string()),
                            }
                        }
                        Ok(QueueMessage::Event(ev)) => {
                            let outcome = match notifier.deliver(ev).await {
                                Ok(Delivery::Delivered { .. }) => Ok("delivered"),
                                Ok(Delivery::NoTarget) => Ok("no subscription"),
                                Ok(Delivery::Failed(e)) => Err(e),
                                Err(e) => Err(domain::errors::ErrorChain(&e).to_string()),
                            };
                            if let Ok(what) = outcome {
                                tracing::info!(
                                    event = ev.id.as_str(),
                                    event_type = ev.kind.as_str(),
                                    what,
                                    "event handled"
                                );
                            }
                            outcome.map(drop)
                        }
                    }
                };
                // Under the request that made the change (`publish_events` copied its id from
                // the item), so the delivery joins that request's log lines.
                let request_id = request_id_of(&event.records[i]);
                let span = tracing::info_span!("request", request_id = %request_id.unwrap_or_default());
                let attempt = tracing::Instrument::instrument(attempt, span);
                let outcome = tokio::time::timeout_at(deadline, attempt)
                    .await
                    .unwrap_or_else(|_| Err("not delivered within the batch's deadline".into()));
                done.push((i, outcome));
            }
            done
        }
    };
    let mut outcomes: Vec<Result<(), String>> = vec![Ok(()); parsed.len()];
    for (i, outcome) in
        futures_util::future::join_all(groups.into_iter().map(|(_, m)| deliver_group(m))).await.into_iter().flatten()
    {
        outcomes[i] = outcome;
    }
    let outcomes = event.records.iter().zip(outcomes).map(|(m, o)| (m.message_id.clone().unwrap_or_default(), o));
    let mut failures = Vec::new();
    for (msg, (id, outcome)) in event.records.iter().zip(outcomes) {
        let Err(error) = outcome else { continue };
        let received: u32 = msg.attributes.get("ApproximateReceiveCount").and_then(|c| c.parse().ok()).unwrap_or(1);
        let wait = i32::try_from(backoff(received).as_secs()).unwrap_or(900);
        log_delivery_failure(&id, received, wait, &error);
        if let Some(handle) = msg.receipt_handle.as_deref() {
            visibility.delay(handle, wait).await;
        }
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = id;
        failures.push(failure);
    }
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = failures;
    response
}

/// The request id `publish_events` attached to a message.
fn request_id_of(message: &aws_lambda_events::event::sqs::SqsMessage) -> Option<&str> {
    message.message_attributes.get(crate::EVENT_REQUEST_ID_ATTRIBUTE).and_then(|a| a.string_value.as_deref())
}

/// Runs the notifier until the runtime stops it.
///
/// # Errors
/// Bad configuration (every problem at once, before any work), or the runtime failing.
pub async fn run() -> Result<(), Error> {
    init_tracing();
    let config = NotifierConfig::from_env(env)?;
    let aws = aws_config().await;
    let clock: SharedClock = Arc::new(SystemClock);
    let urls = if config.allow_loopback { UrlPolicy::Local } else { UrlPolicy::Cloud };
    let notifier = Notifier::new(
        Arc::new(dynamo_store(&aws, &config.table, config.policy)),
        clock,
        urls,
        Arc::new(SystemResolver),
    )
    .polling_every(config.policy.poll_interval);
    let visibility = SqsVisibility { client: aws_sdk_sqs::Client::new(&aws), queue_url: config.queue_url.clone() };
    let state: Arc<(Notifier<store_dynamo::DynamoStore>, SqsVisibility)> = Arc::new((notifier, visibility));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let state = Arc::clone(&state);
        async move { Ok::<_, Error>(handle(&state.0, &state.1, &event.payload).await) }
    }))
    .await
}

/// The line a failed delivery leaves in the notifier's log: `EventsDeliveryFailuresFilter` in
/// template.yaml counts these lines (`$.fields.message`), and `EventsDeliveryFailingAlarm`
/// fires when they keep coming. (The SQS message's id is `message_id`: a field named
/// `message` would be a second `message` key beside the line's own text.)
fn log_delivery_failure(id: &str, received: u32, retry_in_s: i32, error: &str) {
    tracing::warn!(message_id = id, received, retry_in_s, error, "delivery failed; the message comes back");
}

#[cfg(test)]
mod log_tests {
    use std::sync::{Arc, Mutex};

    /// Where the JSON lines go in the test.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Whether a CloudWatch JSON filter pattern of the form `{ $.a.b = "text*" }` (the only
    /// form the template uses: one selector, `=`, a string with an optional trailing `*`)
    /// matches `line`.
    fn matches(pattern: &str, line: &serde_json::Value) -> bool {
        let inner = pattern.trim().trim_start_matches('{').trim_end_matches('}').trim();
        let Some((selector, value)) = inner.split_once('=') else { return false };
        let value = value.trim().trim_matches('"');
        let mut at = line;
        for part in selector.trim().trim_start_matches("$.").split('.') {
            at = &at[part];
        }
        let Some(text) = at.as_str() else { return false };
        match value.strip_suffix('*') {
            Some(prefix) => text.starts_with(prefix),
            None => text == value,
        }
    }

    /// The metric filter's pattern, as template.yaml states it.
    fn template_pattern() -> String {
        let template = include_str!("../../../template.yaml");
        let at = template.find("  EventsDeliveryFailuresFilter:").expect("the metric filter in template.yaml");
        let line = template[at..].lines().find(|l| l.trim_start().starts_with("FilterPattern:")).expect("its pattern");
        line.trim_start().trim_start_matches("FilterPattern:").trim().trim_matches('\'').to_owned()
    }

    #[test]
    fn the_metric_filter_counts_the_notifiers_failure_lines_and_no_other() {
        let lines = Lines::default();
        let writer = lines.clone();
        tracing::dispatcher::with_default(&logging::json_lines(move || writer.clone()), || {
            super::log_delivery_failure("5f1c", 3, 20, "the receiver answered 500");
            tracing::warn!(error = "throttled", "listing doorbell sockets failed; no ring");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let parsed: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(parsed.len(), 2, "{text}");
        let pattern = template_pattern();
        assert!(matches(&pattern, &parsed[0]), "{pattern} does not match the failure line {}", parsed[0]);
        assert!(!matches(&pattern, &parsed[1]), "{pattern} matches another line {}", parsed[1]);
        assert_eq!(parsed[0]["fields"]["message_id"], "5f1c");
    }
}
