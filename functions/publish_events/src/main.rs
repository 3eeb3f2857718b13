//! The `publish_events` Lambda: turns the table's stream into domain events on the SQS events
//! queue. Wiring only: the events are derived in `domain::events`, the loop is
//! `lambda::publisher::run`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::publisher::run().await
}
