//! The `mcp` Lambda: the MCP endpoint: auth, protocol, validation, dispatch to the tool functions. Wiring only: the handlers live in
//! `mcp-endpoint`, the loop in `lambda::mcp::run`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::mcp::run().await
}
