//! The `register_client` Lambda: dynamic client registration (RFC 7591) for MCP clients, as
//! Cognito app clients. Wiring only: the rules live in `oauth`, the loop in
//! `lambda::register::run`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::register::run().await
}
