//! What a tool served by an [`McpServer`](crate::McpServer) can use beyond
//! the plain tool context: [`ClientInput`], the MCP client that called it
//! (a question for its user, its model, its roots), found with
//! `ctx.extension::<ClientInput>()`.
//!
//! ```
//! use kinet_core::tool::{ToolCtx, ToolError, ToolOutput};
//! use kinet_mcp::served::{ClientInput, ElicitAction};
//!
//! async fn ask_name(ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
//!     let Some(client) = ctx.extension::<ClientInput>() else {
//!         return Ok(ToolOutput::text("not called over MCP"));
//!     };
//!     let schema = serde_json::json!({
//!         "type": "object",
//!         "properties": {"name": {"type": "string"}},
//!         "required": ["name"]
//!     });
//!     let answer = client
//!         .elicit("name", "What is your name?", schema)
//!         .await
//!         .map_err(|e| ToolError::failed(e.to_string()))?;
//!     Ok(ToolOutput::text(match (answer.action, answer.content) {
//!         (ElicitAction::Accept, Some(content)) => format!("Hello, {}!", content["name"]),
//!         _ => "no name given".to_owned(),
//!     }))
//! }
//! ```

pub use crate::server::input::{AskError, ClientInput, ElicitAction, Elicited};
