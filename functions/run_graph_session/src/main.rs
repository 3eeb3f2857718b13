//! The `run_graph_session` Lambda: one MCP tool, called by the `mcp` function with the verified
//! identity and the arguments. Wiring only; the handler is `shared::tools::handle`.

#[tokio::main]
async fn main() -> Result<(), lambda_common::Error> {
    lambda_common::run_tool(shared::tools::ToolName::RunGraphSession).await
}
