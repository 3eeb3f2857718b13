//! The `owner_api` Lambda: the owner API: projects and device tokens. Wiring only; the handlers live in
//! `shared`, the glue in `lambda_common::run_owner_api`.

#[tokio::main]
async fn main() -> Result<(), lambda_common::Error> {
    lambda_common::run_owner_api().await
}
