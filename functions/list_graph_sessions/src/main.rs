//! The `list_graph_sessions` Lambda: one MCP tool, invoked by the `mcp` function with the verified identity
//! and the arguments. Wiring only: the handler is `tools::list_graph_sessions`, the loop
//! `lambda::tool::run`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::tool::run::<tools::ListGraphSessions>().await
}
