//! The `owner_api` Lambda: the owner API (projects, device tokens) with owner tokens. Wiring only: the handlers live in
//! `http-api`, the loop in `lambda::owner_api::run`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::owner_api::run().await
}
