//! The cloud's events pipeline on the emulator (moto's DynamoDB Streams and SQS), with the real
//! handlers of the two functions: table changes → the stream → `lambda::publisher::handle` →
//! SQS → `lambda::notifier::handle` → a webhook receiver on 127.0.0.1 that verifies signatures.
//! The test plays the Lambda event source mappings: it reads the stream and the queue, builds
//! the events Lambda would, and deletes the messages the notifier did not report as failed.
//! A failed message is made visible again at once (the backoff itself is unit-tested), so the
//! queue's redrive policy moves it to the DLQ after its receive count, as in the cloud.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use aws_sdk_sqs::types::QueueAttributeName;
use domain::clock::SharedClock;
use domain::events::{derive_run, derive_task};
use domain::ids::{AgentId, ChatLinkId, GraphSessionId, IdempotencyKey, OwnerId};
use domain::projects::{ChatLink, Subscription, new_webhook_secret};
use domain::runs::{Completion, FinalStatus, QueueOutcome, QueueRun};
use domain::store::Store;
use domain::tasks::{AssignOutcome, AssignTask, ClaimOutcome, SubmitStatus, SubmitTask};
use events::webhook_url::UrlPolicy;
use events::{MAX_ATTEMPTS, Notifier, SystemResolver};
use foundry_tests::receiver::Receiver;
use foundry_tests::{Backend, Harness, test_policy};
use lambda::notifier::Visibility;
use lambda::publisher::SqsSink;
use serde_json::{Value, json};

/// Makes a failed message visible again at once, through the real API call, and keeps the
/// delay the notifier asked for (the backoff a real queue would apply).
struct Immediately(aws_sdk_sqs::Client, String, Arc<std::sync::Mutex<Vec<i32>>>);

#[async_trait::async_trait]
impl Visibility for Immediately {
    async fn delay(&self, receipt_handle: &str, seconds: i32) {
        self.2.lock().unwrap().push(seconds);
        self.0
            .change_message_visibility()
            .queue_url(&self.1)
            .receipt_handle(receipt_handle)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
}

struct Cloud {
    h: Harness,
    sqs: aws_sdk_sqs::Client,
    queue: String,
    dlq: String,
    stream: String,
    iterators: Vec<String>,
    owner: OwnerId,
    /// Every visibility delay the notifier asked for, in order.
    asked: Arc<std::sync::Mutex<Vec<i32>>>,
}

/// One DynamoDB Streams call (moto serves the streams API on the same endpoint).
async fn streams(target: &str, body: Value) -> Value {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap();
    foundry_tests::http()
        .post(endpoint)
        .header("x-amz-target", format!("DynamoDBStreams_20120810.{target}"))
        .header("content-type", "application/x-amz-json-1.0")
        .header("authorization", "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn cloud() -> Option<Cloud> {
    let h = Harness::dynamo(test_policy()).await?;
    let Backend::Dynamo { store, .. } = &h.backend else { unreachable!() };
    let table = store.client().describe_table().table_name(store.table()).send().await.unwrap();
    let stream = table.table().and_then(|t| t.latest_stream_arn()).expect("the table has a stream").to_owned();
    let aws = lambda::aws_defaults().load().await;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let name = format!("fc-events-{}", uuid::Uuid::new_v4().simple());
    let dlq = sqs.create_queue().queue_name(format!("{name}-dlq")).send().await.unwrap().queue_url.unwrap();
    let dlq_arn = sqs
        .get_queue_attributes()
        .queue_url(&dlq)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone();
    let redrive = json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": MAX_ATTEMPTS.to_string()}).to_string();
    let queue = sqs
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::RedrivePolicy, redrive)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    Some(Cloud {
        h,
        sqs,
        queue,
        dlq,
        stream,
        iterators: Vec::new(),
        owner: OwnerId::new("alice").unwrap(),
        asked: Arc::default(),
    })
}

impl Cloud {
    fn notifier(&self) -> Notifier<dyn Store> {
        let clock: SharedClock = self.h.clock.clone();
        Notifier::new(self.h.store.clone(), clock, UrlPolicy::Local, Arc::new(SystemResolver))
    }

    async fn link(&self, receiver: &Receiver) -> ChatLink {
        self.link_of(&self.owner, receiver).await
    }

    /// A link of `owner` whose events go to `receiver`.
    async fn link_of(&self, owner: &OwnerId, receiver: &Receiver) -> ChatLink {
        let p = self.h.store.create_project(owner, "P").await.unwrap();
        self.h.store.set_project_enabled(owner, p.project_id, true).await.unwrap();
        let l = self.h.store.create_link(owner, p.project_id, "chat").await.unwrap().unwrap();
        let secret = new_webhook_secret().unwrap();
        let sub = Subscription { url: receiver.url.clone(), secret: secret.clone(), created_at: self.h.now() };
        receiver.set_secret(&secret);
        self.h.store.set_subscription(owner, l.link_id, Some(&sub)).await.unwrap().unwrap()
    }

    /// The stream's new records through the publisher (as the DynamoDB event source would),
    /// its desktop watches queued without their delay.
    async fn pump_stream(&mut self) -> usize {
        let sink = SqsSink {
            client: self.sqs.clone(),
            queue_url: self.queue.clone(),
            watch_after: vec![std::time::Duration::ZERO],
        };
        self.pump_stream_into(&sink).await
    }

    /// [`Cloud::pump_stream`] through `sink`.
    async fn pump_stream_into(&mut self, sink: &SqsSink) -> usize {
        if self.iterators.is_empty() {
            let desc = streams("DescribeStream", json!({"StreamArn": self.stream})).await;
            for shard in desc["StreamDescription"]["Shards"].as_array().unwrap() {
                let it = streams(
                    "GetShardIterator",
                    json!({"StreamArn": self.stream, "ShardId": shard["ShardId"], "ShardIteratorType": "TRIM_HORIZON"}),
                )
                .await;
                self.iterators.push(it["ShardIterator"].as_str().unwrap().to_owned());
            }
        }
        let mut records = Vec::new();
        for it in &mut self.iterators {
            let out = streams("GetRecords", json!({"ShardIterator": it})).await;
            records.extend(out["Records"].as_array().cloned().unwrap_or_default());
            *it = out["NextShardIterator"].as_str().unwrap().to_owned();
        }
        // The records exactly as the stream gave them, parsed as Lambda's DynamoDB event type.
        let batch = serde_json::from_value(json!({ "Records": records })).expect("a stream batch");
        let answer =
            serde_json::to_value(lambda::publisher::handle(sink, Some(self.h.store.as_ref()), &batch).await).unwrap();
        assert_eq!(answer, json!({"batchItemFailures": []}), "the publisher failed records");
        records.len()
    }

    /// A delayed message's `body` handed to the notifier now (SQS delivering it when its delay
    /// ends), then what it caused through the stream and the queue.
    async fn look(&mut self, body: &str) {
        let batch = serde_json::from_value(json!({"Records": [{
            "messageId": uuid::Uuid::new_v4().to_string(), "receiptHandle": "r", "body": body,
            "attributes": {"ApproximateReceiveCount": "1"}}]}))
        .expect("an SQS batch");
        let visibility = Immediately(self.sqs.clone(), self.queue.clone(), Arc::clone(&self.asked));
        let answer = lambda::notifier::handle(&self.notifier(), &visibility, &batch).await;
        assert!(answer.batch_item_failures.is_empty(), "the look failed");
        self.pump_stream().await;
        while self.pump_queue().await.0 > 0 {}
    }

    /// The desktop's offline mark.
    async fn offline_since(&self, device: uuid::Uuid) -> Option<domain::clock::Timestamp> {
        let listed = self.h.store.list_devices(&self.owner).await.unwrap();
        listed.into_iter().find(|d| d.device_id == device).unwrap().offline_since
    }

    /// Queues a run of session `gs` on `link`'s project, as Claude, under `key`.
    async fn queue_run(&self, link: &ChatLink, gs: GraphSessionId, key: &str) -> domain::runs::Run {
        let req = QueueRun {
            owner: self.owner.clone(),
            agent: AgentId::new("claude", "alice").unwrap(),
            project_id: Some(link.project_id),
            graph_session_id: gs,
            arguments: json!({}),
            idempotency_key: IdempotencyKey::parse(key).unwrap(),
        };
        let QueueOutcome::Queued(run) = self.h.store.queue_run(&req).await.unwrap() else { panic!("not queued") };
        run
    }

    /// One receive from the events queue through the notifier (as the SQS event source would):
    /// the messages it did not report failed are deleted. Returns (handled, failed).
    async fn pump_queue(&self) -> (usize, usize) {
        let visibility = Immediately(self.sqs.clone(), self.queue.clone(), Arc::clone(&self.asked));
        self.pump_queue_with(&self.notifier(), &visibility).await
    }

    /// [`Cloud::pump_queue`] through `notifier` (one warm `notify` instance: its parked
    /// receivers kept), failed messages handed to `visibility`.
    async fn pump_queue_with(&self, notifier: &Notifier<dyn Store>, visibility: &dyn Visibility) -> (usize, usize) {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.queue)
            .max_number_of_messages(10)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .unwrap();
        let msgs = out.messages.unwrap_or_default();
        let records: Vec<Value> = msgs
            .iter()
            .map(|m| {
                let count = m
                    .attributes()
                    .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount))
                    .cloned()
                    .unwrap_or_else(|| "1".into());
                json!({"messageId": m.message_id(), "receiptHandle": m.receipt_handle(), "body": m.body(),
                       "attributes": {"ApproximateReceiveCount": count}})
            })
            .collect();
        let batch = serde_json::from_value(json!({ "Records": records })).expect("an SQS batch");
        let answer = lambda::notifier::handle(notifier, visibility, &batch).await;
        let failed: HashSet<String> = answer.batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
        for m in &msgs {
            if !failed.contains(m.message_id().unwrap_or_default()) {
                self.sqs
                    .delete_message()
                    .queue_url(&self.queue)
                    .receipt_handle(m.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
        }
        (msgs.len(), failed.len())
    }

    async fn assign(&self, link: ChatLinkId, objective: &str) -> domain::tasks::Task {
        assign_on(self.h.store.as_ref(), &self.owner, link, objective).await
    }
}

/// Assigns a task to `link` of `owner`.
async fn assign_on(store: &dyn Store, owner: &OwnerId, link: ChatLinkId, objective: &str) -> domain::tasks::Task {
    let req = AssignTask {
        owner: owner.clone(),
        link_id: link,
        objective: objective.into(),
        idempotency_key: IdempotencyKey::parse(&uuid::Uuid::new_v4().to_string()).unwrap(),
    };
    let AssignOutcome::Assigned(t) = store.assign_task(&req).await.unwrap() else { panic!() };
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_and_submit_reach_the_webhook_once_each_signed_through_stream_and_queue() {
    let Some(mut c) = cloud().await else { return };
    let receiver = Receiver::start().await;
    let link = c.link(&receiver).await;
    let task = c.assign(link.link_id, "Summarize the quarter").await;
    let ClaimOutcome::Claimed { claim_id, .. } =
        c.h.store.claim_task(&c.owner, link.link_id, task.task_id).await.unwrap()
    else {
        panic!()
    };
    let submit = SubmitTask {
        owner: c.owner.clone(),
        link_id: link.link_id,
        task_id: task.task_id,
        claim_id,
        status: SubmitStatus::Completed,
        result: "secret result text".into(),
    };
    c.h.store.submit_task(&submit).await.unwrap();
    c.h.store.submit_task(&submit).await.unwrap(); // a replay writes nothing: no stream record
    let records = c.pump_stream().await;
    assert!(records >= 3, "{records} stream records");
    let Backend::Dynamo { log, .. } = &c.h.backend else { unreachable!() };
    let log = log.clone();
    log.take();
    while c.pump_queue().await.0 > 0 {}
    let used: BTreeSet<String> =
        log.take().iter().map(|op| format!("dynamodb:{}", op.split(':').next().unwrap())).collect();
    let got = receiver.accepted();
    assert_eq!(
        got.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(),
        ["task.assigned", "task.claimed", "task.completed"]
    );
    assert!(got.iter().all(|r| r.signature_ok), "a signature did not verify");
    assert!(
        !got.iter().any(|r| r.body.to_string().contains("secret result") || r.body.to_string().contains("quarter"))
    );
    // The ids are the domain's for these changes: the local outbox gives the same ones.
    let done = c.h.store.get_task(&c.owner, link.link_id, task.task_id).await.unwrap().unwrap();
    let claimed = domain::tasks::Task { status: domain::tasks::TaskStatus::Claimed, finished_at: None, ..done.clone() };
    assert_eq!(got[0].id, derive_task(None, Some(&task))[0].id);
    assert_eq!(got[1].id, derive_task(Some(&task), Some(&claimed))[0].id);
    assert_eq!(got[2].id, derive_task(Some(&claimed), Some(&done))[0].id);
    // What the notifier needed on the table is what its IAM policy grants.
    let declared: BTreeSet<String> = events::NOTIFIER_DYNAMODB_ACTIONS.iter().map(|s| (*s).to_owned()).collect();
    assert!(used.is_subset(&declared), "the notifier used {used:?}, its policy grants {declared:?}");
    let last = c.h.store.last_deliveries(&c.owner).await.unwrap();
    assert_eq!(last.len(), 1);
    assert!(last[0].1.ok);

    // Runs: to every subscribed link of the run's project.
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "c".repeat(32))).unwrap();
    let meta = foundry_tests::session_meta(&gs);
    c.h.store.sync_sessions(&c.owner, link.project_id, foundry_tests::TEST_DEVICE, &[meta]).await.unwrap();
    let run = c.queue_run(&link, gs, "cloud-run-1").await;
    c.h.store.start_run(&c.owner, run.command_id, "e1", uuid::Uuid::nil()).await.unwrap();
    c.h.store.control_run(&c.owner, run.command_id, None).await.unwrap();
    let completion = Completion {
        execution_id: "e1".into(),
        status: FinalStatus::Completed,
        result: Some("r".into()),
        result_truncated: false,
        error: None,
        total_tokens: None,
        reported_cost: None,
    };
    c.h.store.complete_run(&c.owner, run.command_id, &completion).await.unwrap();
    c.pump_stream().await;
    log.take();
    while c.pump_queue().await.0 > 0 {}
    let used: BTreeSet<String> =
        log.take().iter().map(|op| format!("dynamodb:{}", op.split(':').next().unwrap())).collect();
    let kinds: Vec<String> = receiver.accepted().iter().skip(3).map(|r| r.kind.clone()).collect();
    assert_eq!(kinds, ["run.queued", "run.started", "run.completed"]);
    assert_eq!(receiver.accepted()[3].id, derive_run(None, Some(&run))[0].id);
    let all_used: BTreeSet<String> = used.union(&declared).cloned().collect();
    assert_eq!(all_used, declared, "the notifier used more than its policy grants");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_down_at_first_gets_the_event_later_with_one_webhook_id() {
    let Some(mut c) = cloud().await else { return };
    let receiver = Receiver::start().await;
    let link = c.link(&receiver).await;
    receiver.fail_first(2);
    let task = c.assign(link.link_id, "x").await;
    c.pump_stream().await;
    assert_eq!(c.pump_queue().await, (1, 1));
    assert_eq!(c.pump_queue().await, (1, 1));
    assert_eq!(c.pump_queue().await, (1, 0));
    assert_eq!(c.pump_queue().await, (0, 0), "the delivered message came back");
    let got = receiver.accepted();
    assert_eq!(got.len(), 1);
    assert_eq!(receiver.hits(), 3, "the same event, three attempts");
    assert!(got[0].signature_ok);
    // Every attempt carried the event's own id (a receiver deduplicates by it), and each failed
    // receive was put back for the backoff of its receive count: 5 s, then 10 s.
    let event_id = derive_task(None, Some(&task))[0].id.clone();
    assert_eq!(receiver.ids(), [event_id.clone(), event_id.clone(), event_id], "the webhook-id of each attempt");
    assert_eq!(*c.asked.lock().unwrap(), [5, 10], "the visibility delays asked for");
}

/// Issue 59: an owner's events that no subscription wants are never queued (no message, no
/// `notify` invocation): a link without a webhook's tasks, and anything of an owner with none;
/// a subscribed link of the same owner still gets its own. What the publisher reads for it is
/// what its IAM policy grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_no_subscription_wants_are_never_queued() {
    let Some(mut c) = cloud().await else { return };
    let receiver = Receiver::start().await;
    let quiet = c.h.store.create_project(&c.owner, "Q").await.unwrap();
    let unsubscribed = c.h.store.create_link(&c.owner, quiet.project_id, "no webhook").await.unwrap().unwrap();
    c.assign(unsubscribed.link_id, "nobody listens").await;
    let Backend::Dynamo { log, .. } = &c.h.backend else { unreachable!() };
    let log = log.clone();
    log.take();
    assert!(c.pump_stream().await >= 1);
    let used: BTreeSet<String> =
        log.take().iter().map(|op| format!("dynamodb:{}", op.split(':').next().unwrap())).collect();
    let declared: BTreeSet<String> = events::PUBLISHER_DYNAMODB_ACTIONS.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(used, declared, "the publisher's reads and its policy");
    assert_eq!(c.pump_queue().await, (0, 0), "an event nobody wants was queued");
    // The same owner with a webhook on another link: that link's task is queued, the other not.
    let subscribed = c.link(&receiver).await;
    c.assign(unsubscribed.link_id, "still nobody").await;
    c.assign(subscribed.link_id, "someone listens").await;
    c.pump_stream().await;
    assert_eq!(c.pump_queue().await, (1, 0), "only the subscribed link's event");
    assert_eq!(receiver.accepted().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_always_fails_ends_in_the_dlq_and_holds_nothing_up() {
    let Some(mut c) = cloud().await else { return };
    let (broken, good) = (Receiver::start().await, Receiver::start().await);
    broken.fail_first(usize::MAX);
    let bad_link = c.link(&broken).await;
    let good_link = c.link(&good).await;
    let doomed = c.assign(bad_link.link_id, "to the broken receiver").await;
    c.pump_stream().await;
    for i in 0..(MAX_ATTEMPTS + 2) {
        if i % 3 == 0 {
            c.assign(good_link.link_id, &format!("good {i}")).await;
            c.pump_stream().await;
        }
        c.pump_queue().await;
    }
    while c.pump_queue().await.0 > 0 {}
    let good_events = (0..MAX_ATTEMPTS + 2).filter(|i| i % 3 == 0).count();
    assert_eq!(good.accepted().len(), good_events, "the good receiver was held up");
    assert_eq!(broken.hits(), MAX_ATTEMPTS as usize, "attempts before the DLQ");
    let dead = c.sqs.receive_message().queue_url(&c.dlq).max_number_of_messages(10).send().await.unwrap();
    let dead = dead.messages.unwrap_or_default();
    assert_eq!(dead.len(), 1, "the DLQ holds the undeliverable event");
    let event: domain::events::Event = serde_json::from_str(dead[0].body().unwrap()).unwrap();
    assert_eq!(event.id, derive_task(None, Some(&doomed))[0].id);
}

/// One batch with eight events for receivers that hang (accept, never answer) and one for a good
/// receiver: the good one is delivered, the eight are reported failed, and the batch answers
/// well inside the function's timeout (one after another it took eight delivery timeouts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_receivers_cost_no_other_event_its_delivery_and_the_batch_answers_in_time() {
    let Some(mut c) = cloud().await else { return };
    let stuck = Receiver { url: Receiver::hanging().await, state: Default::default() };
    let good = Receiver::start().await;
    for i in 0..8 {
        let l = c.link(&stuck).await;
        c.assign(l.link_id, &format!("to a hanging receiver {i}")).await;
    }
    let good_link = c.link(&good).await;
    c.assign(good_link.link_id, "to the good receiver").await;
    c.pump_stream().await;
    let started = std::time::Instant::now();
    let (handled, failed) = c.pump_queue().await;
    let took = started.elapsed();
    assert_eq!((handled, failed), (9, 8), "one batch of nine, the eight hanging ones failed");
    assert_eq!(good.accepted().len(), 1, "the good receiver's event waited for the hanging ones");
    // Within the batch deadline (20 s) and room for the answer; one after another: 40 s.
    assert!(
        took < std::time::Duration::from_secs(23),
        "the batch took {took:?}: past its deadline, the function would time out without an answer"
    );
}

/// The delayed messages of a `SendMessageBatch` as they go on the wire: (DelaySeconds, body).
#[derive(Debug, Default, Clone)]
struct DelayedSends(Arc<std::sync::Mutex<Vec<(u64, String)>>>);

impl aws_sdk_sqs::config::Intercept for DelayedSends {
    fn name(&self) -> &'static str {
        "DelayedSends"
    }

    fn read_after_serialization(
        &self,
        context: &aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &aws_sdk_sqs::config::RuntimeComponents,
        _cfg: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        let body: Value =
            context.request().body().bytes().and_then(|b| serde_json::from_slice(b).ok()).unwrap_or_default();
        for e in body["Entries"].as_array().into_iter().flatten() {
            if let (Some(delay), Some(text)) = (e["DelaySeconds"].as_u64(), e["MessageBody"].as_str()) {
                self.0.lock().unwrap().push((delay, text.to_owned()));
            }
        }
        Ok(())
    }
}

/// The deployed publisher's two looks, on virtual time: the sink `run()` builds
/// (`SqsSink::deployed`) queues each run's watch twice, delayed by `WATCH_AFTER` as SQS is
/// told on the wire, and each look, handed to the notifier at its own moment, marks the
/// desktops its window has passed: at 2 minutes the silent polling desktop and not the silent
/// doorbell desktop (whose window is 2 × 300 s + 60 s), at 12 minutes that one too. A publisher
/// that queued one look, or the looks with other delays, or a watch that ignored the doorbell's
/// window fails here (the test beside it plays the queue with no delay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_publishers_two_looks_mark_a_polling_then_a_doorbell_desktop() {
    let Some(mut c) = cloud().await else { return };
    let receiver = Receiver::start().await;
    let link = c.link(&receiver).await;
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "d".repeat(32))).unwrap();
    let meta = foundry_tests::session_meta(&gs);
    let polling = c.h.store.create_device(&c.owner, "Laptop", "hash-polling").await.unwrap();
    let doorbell = c.h.store.create_device(&c.owner, "Tower", "hash-doorbell").await.unwrap();
    let report = |doorbell: bool| domain::fleet::RelayReport {
        version: "0.2.0".into(),
        platform: "macos-aarch64".into(),
        host: "mac".into(),
        doorbell,
        update: None,
        slots: Some(1),
        unavailable: None,
    };
    for (d, bell) in [(&polling, false), (&doorbell, true)] {
        c.h.store.sync_sessions(&c.owner, link.project_id, d.device_id, std::slice::from_ref(&meta)).await.unwrap();
        c.h.store.record_device_seen(d, Some(&report(bell))).await.unwrap();
    }
    // Both go silent at once; the run is queued then.
    let queued_at = c.h.now();
    c.queue_run(&link, gs, "two-looks-1").await;
    let sent = DelayedSends::default();
    let aws = lambda::aws_defaults().load().await;
    let sqs =
        aws_sdk_sqs::Client::from_conf(aws_sdk_sqs::config::Builder::from(&aws).interceptor(sent.clone()).build());
    let deployed = SqsSink::deployed(sqs, c.queue.clone());
    c.pump_stream_into(&deployed).await;
    while c.pump_queue().await.0 > 0 {}
    let looks = std::mem::take(&mut *sent.0.lock().unwrap());
    let delays: Vec<u64> = looks.iter().map(|(d, _)| *d).collect();
    assert_eq!(delays, [120, 720], "the looks SQS is asked to delay");
    let kinds = || receiver.accepted().iter().map(|r| r.kind.clone()).collect::<Vec<_>>();
    assert_eq!(kinds(), ["run.queued"], "no look came back before its delay");
    // The first look, two minutes after the run was queued.
    c.h.clock.set(queued_at.plus(std::time::Duration::from_secs(looks[0].0)));
    c.look(&looks[0].1).await;
    assert!(
        c.offline_since(polling.device_id).await.is_some(),
        "the polling desktop is past its 100 s window at 2 min"
    );
    assert!(
        c.offline_since(doorbell.device_id).await.is_none(),
        "the doorbell desktop is within its 660 s window at 2 min"
    );
    // The second, twelve minutes after.
    c.h.clock.set(queued_at.plus(std::time::Duration::from_secs(looks[1].0)));
    c.look(&looks[1].1).await;
    assert!(c.offline_since(doorbell.device_id).await.is_some(), "the doorbell desktop is past its window at 12 min");
    let offline: Vec<Value> = receiver
        .accepted()
        .iter()
        .filter(|r| r.kind == "desktop.offline")
        .map(|r| r.body["data"]["device_id"].clone())
        .collect();
    assert_eq!(offline, [json!(polling.device_id.to_string()), json!(doorbell.device_id.to_string())]);
}

/// `desktop.offline` and `desktop.online` through the stream and the queue: a desktop that
/// synced, then went silent past its window while a run waits for it, is marked by the watch the
/// publisher queued beside `run.queued` (here without its delay); its next sync clears the mark.
/// A desktop that synced within its window is left alone, and the notifier stays within its
/// IAM actions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_silent_while_a_run_waits_is_offline_then_online_at_its_next_sync() {
    let Some(mut c) = cloud().await else { return };
    let receiver = Receiver::start().await;
    let link = c.link(&receiver).await;
    let gs = GraphSessionId::parse("g", &format!("gs_{}", "e".repeat(32))).unwrap();
    let meta = foundry_tests::session_meta(&gs);
    let gone = c.h.store.create_device(&c.owner, "Laptop", "hash-gone").await.unwrap();
    let here = c.h.store.create_device(&c.owner, "Tower", "hash-here").await.unwrap();
    for d in [&gone, &here] {
        c.h.store.sync_sessions(&c.owner, link.project_id, d.device_id, std::slice::from_ref(&meta)).await.unwrap();
        c.h.store.record_device_seen(d, None).await.unwrap();
    }
    // The laptop's lid closes; the tower keeps syncing.
    c.h.advance(domain::fleet::online_window(false, c.h.policy.poll_interval));
    c.h.store.record_device_seen(&here, None).await.unwrap();
    c.queue_run(&link, gs, "watch-run-1").await;
    let Backend::Dynamo { log, .. } = &c.h.backend else { unreachable!() };
    let log = log.clone();
    let mut used = BTreeSet::new();
    for _ in 0..3 {
        c.pump_stream().await;
        log.take();
        while c.pump_queue().await.0 > 0 {}
        used.extend(log.take().iter().map(|op| format!("dynamodb:{}", op.split(':').next().unwrap())));
    }
    let kinds: Vec<String> = receiver.accepted().iter().map(|r| r.kind.clone()).collect();
    assert_eq!(kinds, ["run.queued", "desktop.offline"], "{kinds:?}");
    let offline = &receiver.accepted()[1];
    assert_eq!(offline.body["data"]["device_id"], gone.device_id.to_string());
    assert_eq!(offline.body["data"]["status"], "offline");
    assert!(offline.signature_ok);
    let listed = c.h.store.list_devices(&c.owner).await.unwrap();
    let mark = |id: uuid::Uuid| listed.iter().find(|d| d.device_id == id).unwrap().offline_since;
    assert!(mark(gone.device_id).is_some() && mark(here.device_id).is_none(), "{listed:?}");
    let declared: BTreeSet<String> = events::NOTIFIER_DYNAMODB_ACTIONS.iter().map(|s| (*s).to_owned()).collect();
    assert!(used.is_subset(&declared), "the notifier used {used:?}, its policy grants {declared:?}");

    // The laptop comes back: its sync clears the mark, once.
    c.h.advance(std::time::Duration::from_secs(5));
    c.h.store.record_device_seen(&gone, None).await.unwrap();
    c.h.store.record_device_seen(&gone, None).await.unwrap();
    for _ in 0..2 {
        c.pump_stream().await;
        while c.pump_queue().await.0 > 0 {}
    }
    let kinds: Vec<String> = receiver.accepted().iter().map(|r| r.kind.clone()).collect();
    assert_eq!(kinds, ["run.queued", "desktop.offline", "desktop.online"], "{kinds:?}");
    let online = &receiver.accepted()[2];
    assert_eq!(
        (&online.body["data"]["device_id"], &online.body["data"]["status"]),
        (&json!(gone.device_id.to_string()), &json!("online"))
    );
    assert_ne!(online.id, offline.id);
}

/// Each event is queued with its owner as the message's tenant (`MessageGroupId`), which is
/// what makes the standard events queue a fair queue: SQS then hands a quiet owner's events to
/// the notifier ahead of another owner's backlog (the emulator keeps the attribute but does
/// not reorder; docs/scale.md cites AWS's description).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_owners_events_are_queued_as_that_owners_tenant() {
    let Some(mut c) = cloud().await else { return };
    let (one, two) = (Receiver::start().await, Receiver::start().await);
    let alice_link = c.link(&one).await;
    let bob = OwnerId::new("bob").unwrap();
    let bob_link = c.link_of(&bob, &two).await;
    c.assign(alice_link.link_id, "alice's task").await;
    assign_on(c.h.store.as_ref(), &bob, bob_link.link_id, "bob's task").await;
    c.pump_stream().await;
    let out = c
        .sqs
        .receive_message()
        .queue_url(&c.queue)
        .max_number_of_messages(10)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId)
        .send()
        .await
        .unwrap();
    let mut tenants: Vec<(String, Option<String>)> = out
        .messages
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let event: domain::events::Event = serde_json::from_str(m.body().unwrap()).unwrap();
            let group = m
                .attributes()
                .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId))
                .cloned();
            (event.data.owner, group)
        })
        .collect();
    tenants.sort();
    assert_eq!(
        tenants,
        vec![("alice".to_owned(), Some("alice".to_owned())), ("bob".to_owned(), Some("bob".to_owned()))]
    );
}

/// Leaves a failed message invisible for the rest of the queue's visibility timeout (set long
/// by the scenario): one pass through a backlog, each failed event out of the way as its
/// backoff would keep it.
struct LeftHidden;

#[async_trait::async_trait]
impl Visibility for LeftHidden {
    async fn delay(&self, _receipt_handle: &str, _seconds: i32) {}
}

/// Issue 59's third scenario: one owner's link with 10,000 queued tasks whose webhook receiver
/// is dead (it answers 503), and another owner whose one event is queued behind all of theirs.
/// Played through the real publisher and notifier on the emulator's stream and queue, with ten
/// warm `notify` instances (the deployed `MaximumConcurrency`) taking the batches in turn, and
/// the clock moved by each batch's time over ten (the instances run at once). Measured: how
/// many times the dead receiver was called in one pass through the backlog (every event called
/// it before the park: 10,000), the batches and the time at that concurrency until the other
/// owner's event arrived, the busy link's and the other owner's task reads, and the units the
/// assignments took on the busy owner's partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a load scenario (minutes on the emulator): ./infra/bench-scale.sh"]
async fn a_link_with_10000_queued_tasks_and_a_dead_receiver_holds_up_no_other_owner() {
    use futures_util::StreamExt as _;
    const INSTANCES: usize = 10;
    let tasks: usize = if std::env::var("FOUNDRY_SCALE_QUICK").is_ok() { 500 } else { 10_000 };
    let Some(mut c) = cloud().await else { return };
    c.sqs
        .set_queue_attributes()
        .queue_url(&c.queue)
        .attributes(QueueAttributeName::VisibilityTimeout, "43200")
        .send()
        .await
        .unwrap();
    let (dead, good) = (Receiver::start().await, Receiver::start().await);
    dead.fail_first(usize::MAX);
    let busy = c.link(&dead).await;
    let other = OwnerId::new("bob").unwrap();
    let other_link = c.link_of(&other, &good).await;
    let meter = foundry_tests::capacity_report;
    let metered = meter(true).await.is_some();
    let started = std::time::Instant::now();
    let store = c.h.store.clone();
    let (owner, busy_id) = (c.owner.clone(), busy.link_id);
    let assigned = futures_util::stream::iter(0..tasks)
        .map(|i| {
            let (store, owner) = (store.clone(), owner.clone());
            async move { assign_on(store.as_ref(), &owner, busy_id, &format!("task {i}")).await }
        })
        .buffer_unordered(8)
        .count()
        .await;
    assert_eq!(assigned, tasks);
    let seeding = started.elapsed();
    let assigning = if metered { meter(true).await } else { None };
    while c.pump_stream().await > 0 {}
    let theirs = assign_on(c.h.store.as_ref(), &other, other_link.link_id, "the other owner's task").await;
    while c.pump_stream().await > 0 {}
    // The busy link's chat lists and claims its oldest task; the other owner's lists theirs.
    let Backend::Dynamo { log, .. } = &c.h.backend else { unreachable!() };
    log.take_with_capacity();
    let open = c.h.store.list_open_tasks(&c.owner, busy.link_id, 20).await.unwrap();
    assert_eq!(open.len(), 20);
    let ClaimOutcome::Claimed { .. } = c.h.store.claim_task(&c.owner, busy.link_id, open[0].task_id).await.unwrap()
    else {
        panic!("not claimed")
    };
    let (busy_requests, busy_units) = log.take_with_capacity();
    let open = c.h.store.list_open_tasks(&other, other_link.link_id, 20).await.unwrap();
    assert_eq!(open.iter().map(|t| t.task_id).collect::<Vec<_>>(), vec![theirs.task_id]);
    let (other_requests, other_units) = log.take_with_capacity();
    // One pass through the queue: ten warm instances in turn, the clock at their pace.
    let clock: SharedClock = c.h.clock.clone();
    let instances: Vec<Notifier<dyn Store>> = (0..INSTANCES)
        .map(|_| Notifier::new(c.h.store.clone(), clock.clone(), UrlPolicy::Local, Arc::new(SystemResolver)))
        .collect();
    let (mut batches, mut busy_time, mut longest) = (0usize, std::time::Duration::ZERO, std::time::Duration::ZERO);
    let mut arrived_after = None;
    loop {
        let started = std::time::Instant::now();
        let (handled, _) = c.pump_queue_with(&instances[batches % INSTANCES], &LeftHidden).await;
        if handled == 0 {
            break;
        }
        let took = started.elapsed();
        batches += 1;
        busy_time += took;
        longest = longest.max(took);
        c.h.clock.advance(took / INSTANCES as u32);
        if arrived_after.is_none() && !good.accepted().is_empty() {
            arrived_after = Some((batches, busy_time / INSTANCES as u32));
        }
    }
    let (other_batches, other_waited) = arrived_after.expect("the other owner's event never arrived");
    let dead_calls = dead.hits();
    // The goals: the dead receiver called at most once per instance per first backoff (5 s)
    // of the pass, not once per event; the other owner's event in the pass, not after retries.
    let backoffs = (busy_time / INSTANCES as u32).as_secs_f64() / events::backoff(1).as_secs_f64();
    let bound = INSTANCES * (backoffs.ceil() as usize + 1);
    assert!(
        dead_calls <= bound,
        "the dead receiver was called {dead_calls} times for {tasks} events (at most {bound})"
    );
    assert_eq!(good.accepted().len(), 1);
    let mut figures = json!({
        "tasks": tasks,
        "notify_instances": INSTANCES,
        "seeding_seconds": (seeding.as_secs_f64() * 10.0).round() / 10.0,
        "dead_receiver_calls": dead_calls,
        "dead_receiver_calls_before": tasks,
        "batches": batches,
        "mean_batch_ms_on_the_emulator": (busy_time.as_secs_f64() * 1000.0 / batches as f64).round(),
        "longest_batch_ms_on_the_emulator": (longest.as_secs_f64() * 1000.0).round(),
        "other_owner_event_after_batches": other_batches,
        "other_owner_event_after_seconds": (other_waited.as_secs_f64() * 10.0).round() / 10.0,
        "busy_list_and_claim_requests": busy_requests.len(),
        "busy_list_and_claim_read_units": busy_units.read,
        "busy_list_and_claim_write_units": busy_units.write,
        "other_owner_list_requests": other_requests.len(),
        "other_owner_list_read_units": other_units.read,
        "measured": metered && busy_units.measured,
    });
    if let Some(report) = assigning {
        let Backend::Dynamo { store, .. } = &c.h.backend else { unreachable!() };
        let key = format!("{}/OWNER#{}", store.table(), c.owner);
        let write = report["per_key"][key.as_str()]["write"].as_f64().unwrap_or(0.0);
        figures["assign_owner_partition_write_units_per_task"] = json!(write / tasks as f64);
        figures["assign_owner_partition_busiest_second_write_units"] =
            report["busiest_second"][key.as_str()]["write"].clone();
    }
    eprintln!("{}", serde_json::to_string_pretty(&figures).unwrap());
    if std::env::var("FOUNDRY_SCALE_QUICK").is_err() {
        foundry_tests::record_scale_figures("dead_receiver", &figures);
    }
}
