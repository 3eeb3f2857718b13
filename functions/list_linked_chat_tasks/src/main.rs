//! The `list_linked_chat_tasks` Lambda: one MCP tool, invoked by the `mcp` function with the verified identity
//! and the arguments. Wiring only: the handler is `tools::list_linked_chat_tasks`, the loop
//! `lambda::tool::run`.

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::tool::run::<tools::ListLinkedChatTasks>().await
}
