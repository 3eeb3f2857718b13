//! The `doorbell` Lambda: the doorbell WebSocket API's `$connect` (device token checked, socket
//! recorded) and `$disconnect`. Wiring only: `lambda::doorbell::socket_event`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::doorbell::run_socket().await
}
