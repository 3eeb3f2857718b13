//! The `submit_linked_chat_result` Lambda: one MCP tool, invoked by the `mcp` function with the verified identity
//! and the arguments. Wiring only: the handler is `tools::submit_linked_chat_result`, the loop
//! `lambda::tool::run`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::tool::run::<tools::SubmitLinkedChatResult>().await
}
