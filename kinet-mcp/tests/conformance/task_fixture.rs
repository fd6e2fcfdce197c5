//! The tools of the Tasks extension scenarios (SEP-2663), served by the
//! same `McpServer` as the other fixtures: `slow_compute`,
//! `protocol_error_job` and `confirm_delete`/`multi_input` run as tasks
//! for clients that declared the extension; `failing_job` and
//! `test_tool_with_task` only as tasks.

use std::sync::Arc;
use std::time::Duration;

use kinet_core::tool::DynTool;
use kinet_core::{ToolCtx, ToolError, ToolOutput};
use kinet_mcp::McpServerBuilder;
use serde_json::{Map, Value, json};

use crate::fixture::{asked, client, field, name_schema, string, tool};

/// Sleeps `seconds`, or less when the call is cancelled.
async fn sleep(ctx: &ToolCtx, seconds: f64) -> Result<(), ToolError> {
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 600.0))) => Ok(()),
        () = ctx.cancellation().cancelled() => Err(ToolError::cancelled("cancelled")),
    }
}

fn seconds(arguments: &Map<String, Value>) -> f64 {
    arguments
        .get("seconds")
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
}

fn confirm_schema() -> Value {
    json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]})
}

/// The task tools, and how the server runs each.
pub(crate) fn tools() -> Vec<Arc<dyn DynTool>> {
    vec![
        tool(
            "greet",
            "Greets someone (never a task)",
            name_schema(),
            |arguments, _| async move {
                Ok(ToolOutput::text(format!(
                    "Hello, {}!",
                    string(&arguments, "name")
                )))
            },
        ),
        tool(
            "slow_compute",
            "Waits `seconds`, then answers",
            json!({"type": "object", "properties": {
                "seconds": {"type": "number"}, "label": {"type": "string"}}}),
            |arguments, ctx| async move {
                let seconds = seconds(&arguments);
                sleep(&ctx, seconds).await?;
                Ok(ToolOutput::text(format!(
                    "Computed {} after {seconds}s",
                    string(&arguments, "label")
                )))
            },
        ),
        tool(
            "failing_job",
            "Fails after a second",
            json!({"type": "object", "properties": {}}),
            |_, ctx| async move {
                sleep(&ctx, 1.0).await?;
                Err(ToolError::failed("the job failed, as it always does"))
            },
        ),
        tool(
            "protocol_error_job",
            "Breaks (panics) after a moment",
            json!({"type": "object", "properties": {}}),
            |_, ctx| async move {
                sleep(&ctx, 0.2).await?;
                panic!("protocol_error_job broke, as it always does")
            },
        ),
        tool(
            "confirm_delete",
            "Asks, within its task, whether to delete a file",
            json!({"type": "object", "properties": {"filename": {"type": "string"}}}),
            |arguments, ctx| async move {
                let client = client(&ctx)?;
                client.escalate_to_task().await;
                let filename = string(&arguments, "filename");
                let answer = client
                    .elicit("confirm", format!("Delete {filename}?"), confirm_schema())
                    .await
                    .map_err(asked)?;
                Ok(ToolOutput::text(
                    if field(&answer, "confirm") == json!(true) {
                        format!("Deleted {filename}")
                    } else {
                        format!("Kept {filename}")
                    },
                ))
            },
        ),
        tool(
            "multi_input",
            "Asks, within its task, two questions at once",
            json!({"type": "object", "properties": {}}),
            |_, ctx| async move {
                let client = client(&ctx)?;
                client.escalate_to_task().await;
                let (name, colour) = futures::join!(
                    client.elicit("name", "What is your name?", name_schema()),
                    client.elicit(
                        "colour",
                        "Your favourite colour?",
                        json!({"type": "object", "properties": {"colour": {"type": "string"}}}),
                    ),
                );
                let (name, colour) = (name.map_err(asked)?, colour.map_err(asked)?);
                Ok(ToolOutput::text(format!(
                    "name={}, colour={}",
                    field(&name, "name"),
                    field(&colour, "colour")
                )))
            },
        ),
        tool(
            "test_tool_with_task",
            "Asks a name in rounds, then goes on as a task",
            json!({"type": "object", "properties": {}}),
            |_, ctx| async move {
                let client = client(&ctx)?;
                let answer = client
                    .elicit("user_name", "What is your name?", name_schema())
                    .await
                    .map_err(asked)?;
                client.escalate_to_task().await;
                sleep(&ctx, 0.1).await?;
                Ok(ToolOutput::text(format!(
                    "Hello, {}, from a task",
                    field(&answer, "name").as_str().unwrap_or("stranger")
                )))
            },
        ),
    ]
}

/// How the server runs the task tools.
pub(crate) fn configure(builder: McpServerBuilder) -> McpServerBuilder {
    builder
        .run_as_task("slow_compute")
        .run_as_task("protocol_error_job")
        .run_as_task("confirm_delete")
        .run_as_task("multi_input")
        .run_only_as_task("failing_job")
        .run_only_as_task("test_tool_with_task")
}
