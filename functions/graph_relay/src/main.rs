//! The `graph_relay` Lambda: the relay API (sync, start, control, complete) for desktop relays, with device tokens. Wiring only; the handlers live in
//! `shared`, the glue in `lambda_common::run_relay_api`.

#[tokio::main]
async fn main() -> Result<(), lambda_common::Error> {
    lambda_common::run_relay_api().await
}
