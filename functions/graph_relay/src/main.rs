//! The `graph_relay` Lambda: the relay API (sync, start, control, complete) for desktop relays, with device tokens. Wiring only: the handlers live in
//! `http-api`, the loop in `lambda::relay_api::run`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::relay_api::run().await
}
