//! The `mcp` Lambda: MCP over the HTTP API, dispatching each tool call to the tool's own
//! function. Wiring only; the endpoint is `shared::mcp`, the glue `lambda_common::run_mcp`.

#[tokio::main]
async fn main() -> Result<(), lambda_common::Error> {
    lambda_common::run_mcp().await
}
