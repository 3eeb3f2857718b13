//! The `notify` Lambda: delivers events from the SQS queue to chat links' subscriptions as signed
//! webhooks. Wiring only: the delivery lives in `events`, the loop in
//! `lambda::notifier::run`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::notifier::run().await
}
