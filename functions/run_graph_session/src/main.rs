//! The `run_graph_session` Lambda: one MCP tool, invoked by the `mcp` function with the verified identity
//! and the arguments. Wiring only: the handler is `tools::run_graph_session`, the loop
//! `lambda::tool::run`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::tool::run::<tools::RunGraphSession>().await
}
