//! The `ring_doorbell` Lambda: the table's stream → rings to the owners' relay sockets (a run
//! queued, a cancel asked), and revoked devices' sockets closed. Wiring only:
//! `lambda::doorbell::ring_records`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::doorbell::run_ring().await
}
