//! Recipe: a custom tool. Its arguments are a struct; their JSON schema is
//! what the model sees. `cargo run --example recipe_custom_tool`
#![allow(clippy::print_stdout, missing_docs)]

use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use kinet::{Agent, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput, async_trait};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct LookupArgs {
    /// The ticket number, e.g. 42.
    id: u32,
}

/// Looks a ticket up in the host's own data.
struct TicketLookup;

#[async_trait]
impl Tool for TicketLookup {
    type Args = LookupArgs;
    fn name(&self) -> &str {
        "ticket_lookup"
    }
    fn description(&self) -> &str {
        "Returns the title and state of a support ticket."
    }
    // Read-only: runs beside other read-only calls and never asks approval.
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, args: LookupArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        ctx.progress(format!("looking up #{}\n", args.id)); // streamed to the host
        match args.id {
            42 => Ok(ToolOutput::text("#42 Login fails on Safari: open")),
            // The model reads the error and can try again.
            id => Err(ToolError::not_found(format!("no ticket #{id}"))),
        }
    }
}

#[tokio::main]
async fn main() {
    // A scripted model keeps this offline; see recipe_provider_env for a real one.
    let model = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("c1", "ticket_lookup", serde_json::json!({"id": 42})),
        ScriptedTurn::text("Ticket #42 (login fails on Safari) is still open."),
    ]);
    let agent = Agent::builder(model).tool(TicketLookup).build();
    let outcome = agent
        .run_to_completion("What is the state of ticket 42?")
        .await;
    println!("{}", outcome.final_text().unwrap_or_default());
}
