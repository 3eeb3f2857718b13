//! The `claim_linked_chat_task` Lambda: one MCP tool, invoked by the `mcp` function with the verified identity
//! and the arguments. Wiring only: the handler is `tools::claim_linked_chat_task`, the loop
//! `lambda::tool::run`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::tool::run::<tools::ClaimLinkedChatTask>().await
}
