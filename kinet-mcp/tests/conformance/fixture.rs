//! The tools the conformance suite calls, as served tools of an
//! `McpServer`: each is an ordinary kinet tool on the one call pipeline,
//! asking the client through `ClientInput` and reporting through the tool
//! context, as a host's tool would.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kinet_core::tool::{DynTool, PreparedCall, Scheduling, ToolAnnotations};
use kinet_core::{ToolCtx, ToolError, ToolOutput};
use kinet_mcp::served::{AskError, ClientInput, ElicitAction};
use serde_json::{Map, Value, json};

type Run = Arc<
    dyn Fn(Map<String, Value>, ToolCtx) -> BoxFuture<'static, Result<ToolOutput, ToolError>>
        + Send
        + Sync,
>;

/// One fixture tool: read-only, its arguments as a JSON object.
pub(crate) struct Fixture {
    name: &'static str,
    description: &'static str,
    schema: Value,
    run: Run,
}

struct Call {
    arguments: Map<String, Value>,
    run: Run,
}

impl DynTool for Fixture {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        self.description
    }
    fn parameters(&self) -> Value {
        self.schema.clone()
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    fn prepare(self: Arc<Self>, arguments: &str) -> Result<Box<dyn PreparedCall>, ToolError> {
        let arguments = if arguments.trim().is_empty() {
            Map::new()
        } else {
            serde_json::from_str(arguments)
                .map_err(|e| ToolError::invalid_arguments(format!("not a JSON object: {e}")))?
        };
        Ok(Box::new(Call {
            arguments,
            run: Arc::clone(&self.run),
        }))
    }
}

#[async_trait::async_trait]
impl PreparedCall for Call {
    fn mutating(&self) -> bool {
        false
    }
    fn scheduling(&self) -> Scheduling {
        Scheduling::Parallel
    }
    async fn confirm_summary(&self, _ctx: &ToolCtx) -> Option<String> {
        None
    }
    async fn call(self: Box<Self>, ctx: ToolCtx) -> Result<ToolOutput, ToolError> {
        (self.run)(self.arguments, ctx).await
    }
}

pub(crate) fn tool<F, Fut>(
    name: &'static str,
    description: &'static str,
    schema: Value,
    run: F,
) -> Arc<Fixture>
where
    F: Fn(Map<String, Value>, ToolCtx) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    Arc::new(Fixture {
        name,
        description,
        schema,
        run: Arc::new(move |arguments, ctx| Box::pin(run(arguments, ctx))),
    })
}

fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}})
}

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// The client, as the tool sees it.
pub(crate) fn client(ctx: &ToolCtx) -> Result<Arc<ClientInput>, ToolError> {
    ctx.extension::<ClientInput>()
        .ok_or_else(|| ToolError::failed("not called over MCP"))
}

pub(crate) fn asked(error: AskError) -> ToolError {
    ToolError::failed(error.to_string())
}

pub(crate) fn string(arguments: &Map<String, Value>, key: &str) -> String {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn action(action: ElicitAction) -> &'static str {
    match action {
        ElicitAction::Accept => "accept",
        ElicitAction::Decline => "decline",
        _ => "cancel",
    }
}

/// Elicits with `schema` and says what came back, as the reference
/// fixture does.
async fn elicit_and_tell(
    ctx: ToolCtx,
    key: &'static str,
    message: String,
    schema: Value,
    prefix: &'static str,
) -> Result<ToolOutput, ToolError> {
    let answer = client(&ctx)?
        .elicit(key, message, schema)
        .await
        .map_err(asked)?;
    Ok(ToolOutput::text(format!(
        "{prefix}: action={}, content={}",
        action(answer.action),
        Value::Object(answer.content.unwrap_or_default())
    )))
}

/// A field of an accepted answer.
pub(crate) fn field(answer: &kinet_mcp::served::Elicited, key: &str) -> Value {
    answer
        .content
        .as_ref()
        .and_then(|content| content.get(key))
        .cloned()
        .unwrap_or(Value::Null)
}

pub(crate) fn name_schema() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
}

/// The tools of the 2025-11-25 and 2026-07-28 server scenarios.
pub(crate) fn tools() -> Vec<Arc<dyn DynTool>> {
    let mut tools: Vec<Arc<dyn DynTool>> = vec![
        tool(
            "test_simple_text",
            "Tests simple text content response",
            no_arguments(),
            |_, _| async {
                Ok(ToolOutput::text(
                    "This is a simple text response for testing.",
                ))
            },
        ),
        tool(
            "test_image_content",
            "Tests image content response",
            no_arguments(),
            |_, _| async {
                Ok(
                    ToolOutput::text("").with_image(kinet_core::message::ImagePart {
                        media_type: "image/png".into(),
                        data: PNG.into(),
                    }),
                )
            },
        ),
        tool(
            "test_error_handling",
            "Tests error response handling",
            no_arguments(),
            |_, _| async {
                Err(ToolError::failed(
                    "This tool intentionally returns an error for testing",
                ))
            },
        ),
        tool(
            "test_tool_with_logging",
            "Tests tool that emits log messages during execution",
            no_arguments(),
            |_, ctx| async move {
                for (i, text) in [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ]
                .into_iter()
                .enumerate()
                {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    ctx.progress(text);
                }
                Ok(ToolOutput::text("Tool with logging executed successfully"))
            },
        ),
        tool(
            "test_tool_with_progress",
            "Tests tool that reports progress notifications",
            no_arguments(),
            |_, ctx| async move {
                for step in [0, 50, 100] {
                    if step > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    ctx.progress(format!("Completed step {step} of 100"));
                }
                Ok(ToolOutput::text("progress reported"))
            },
        ),
        tool(
            "test_reconnection",
            "Tests SSE stream disconnection and client reconnection",
            no_arguments(),
            |_, _| async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok(ToolOutput::text(
                    "Reconnection test completed successfully.",
                ))
            },
        ),
        tool(
            "test_sampling",
            "Tests server-initiated sampling (LLM completion request)",
            json!({"type": "object", "properties": {"prompt": {"type": "string", "description": "The prompt to send to the LLM"}}, "required": ["prompt"]}),
            |arguments, ctx| async move {
                let text = client(&ctx)?
                    .sample("sample", string(&arguments, "prompt"), 100)
                    .await
                    .map_err(asked)?;
                Ok(ToolOutput::text(format!("LLM response: {text}")))
            },
        ),
        tool(
            "test_elicitation",
            "Tests server-initiated elicitation (user input request)",
            json!({"type": "object", "properties": {"message": {"type": "string", "description": "The message to show the user"}}, "required": ["message"]}),
            |arguments, ctx| {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "username": {"type": "string", "description": "User's name"},
                        "email": {"type": "string", "description": "User's email"}
                    },
                    "required": ["username", "email"]
                });
                elicit_and_tell(
                    ctx,
                    "answer",
                    string(&arguments, "message"),
                    schema,
                    "User response",
                )
            },
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Tests elicitation with default values per SEP-1034",
            no_arguments(),
            |_, ctx| {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "User name", "default": "John Doe"},
                        "age": {"type": "integer", "description": "User age", "default": 30},
                        "score": {"type": "number", "description": "User score", "default": 95.5},
                        "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
                        "verified": {"type": "boolean", "description": "Verification status", "default": true}
                    },
                    "required": []
                });
                elicit_and_tell(
                    ctx,
                    "form",
                    "Please review and update the form fields with defaults".into(),
                    schema,
                    "Elicitation completed",
                )
            },
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Tests elicitation with enum schema improvements per SEP-1330",
            no_arguments(),
            |_, ctx| {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "untitledSingle": {"type": "string", "description": "Select one option", "enum": ["option1", "option2", "option3"]},
                        "titledSingle": {"type": "string", "description": "Select one option with titles", "oneOf": [
                            {"const": "value1", "title": "First Option"},
                            {"const": "value2", "title": "Second Option"},
                            {"const": "value3", "title": "Third Option"}
                        ]},
                        "legacyEnum": {"type": "string", "description": "Select one option (legacy)", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
                        "untitledMulti": {"type": "array", "description": "Select multiple options", "minItems": 1, "maxItems": 3, "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                        "titledMulti": {"type": "array", "description": "Select multiple options with titles", "minItems": 1, "maxItems": 3, "items": {"anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"}
                        ]}}
                    },
                    "required": []
                });
                elicit_and_tell(
                    ctx,
                    "form",
                    "Please select options from the enum fields".into(),
                    schema,
                    "Elicitation completed",
                )
            },
        ),
        tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"},
                    "email": {"type": "string"}
                },
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]},
                "else": {"required": ["email"]},
                "additionalProperties": false
            }),
            |arguments, _| async move {
                Ok(ToolOutput::text(format!(
                    "JSON Schema 2020-12 tool called with: {}",
                    Value::Object(arguments)
                )))
            },
        ),
    ];
    tools.extend(stateless_tools());
    tools
}

/// The tools of the 2026-07-28 scenarios: multi-round input and the
/// stateless probes.
fn stateless_tools() -> Vec<Arc<dyn DynTool>> {
    vec![
        tool(
            "test_missing_capability",
            "Needs the client's model (sampling), which the caller did not declare",
            no_arguments(),
            |_, ctx| async move {
                let text = client(&ctx)?
                    .sample("sample", "Say hello", 10)
                    .await
                    .map_err(asked)?;
                Ok(ToolOutput::text(text))
            },
        ),
        tool(
            "test_custom_header",
            "Echoes a message that is also sent as the Mcp-Param-Message header",
            json!({"type": "object", "properties": {"message": {"type": "string", "x-mcp-header": "Message"}}, "required": ["message"]}),
            |arguments, _| async move { Ok(ToolOutput::text(string(&arguments, "message"))) },
        ),
        tool(
            "test_streaming_elicitation",
            "Reports progress, then answers",
            no_arguments(),
            |_, ctx| async move {
                ctx.progress("working");
                Ok(ToolOutput::text("done"))
            },
        ),
        tool(
            "test_logging_tool",
            "Reports progress (logged only when the client asked for logs)",
            no_arguments(),
            |_, ctx| async move {
                ctx.progress("a log line");
                Ok(ToolOutput::text("logged"))
            },
        ),
        tool(
            "test_input_required_result_elicitation",
            "MRTR: asks the user's name",
            no_arguments(),
            |_, ctx| async move {
                let answer = client(&ctx)?
                    .elicit("user_name", "What is your name?", name_schema())
                    .await
                    .map_err(asked)?;
                Ok(ToolOutput::text(format!(
                    "Hello, {}!",
                    field(&answer, "name").as_str().unwrap_or("stranger")
                )))
            },
        ),
        tool(
            "test_input_required_result_sampling",
            "MRTR: asks the client's model",
            no_arguments(),
            |_, ctx| async move {
                let text = client(&ctx)?
                    .sample("capital_question", "What is the capital of France?", 100)
                    .await
                    .map_err(asked)?;
                Ok(ToolOutput::text(format!("The model said: {text}")))
            },
        ),
        tool(
            "test_input_required_result_list_roots",
            "MRTR: asks the client's roots",
            no_arguments(),
            |_, ctx| async move {
                let roots = client(&ctx)?.roots("client_roots").await.map_err(asked)?;
                Ok(ToolOutput::text(format!("Roots: {}", roots.join(", "))))
            },
        ),
        tool(
            "test_input_required_result_request_state",
            "MRTR: returns InputRequiredResult with requestState",
            no_arguments(),
            |_, ctx| async move {
                let answer = client(&ctx)?
                    .elicit(
                        "confirm",
                        "Continue?",
                        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
                    )
                    .await
                    .map_err(asked)?;
                Ok(ToolOutput::text(if field(&answer, "ok") == json!(true) {
                    "state-ok"
                } else {
                    "not confirmed"
                }))
            },
        ),
        tool(
            "test_input_required_result_multiple_inputs",
            "MRTR: asks three things at once",
            no_arguments(),
            |_, ctx| async move {
                let client = client(&ctx)?;
                let (name, greeting, roots) = futures::join!(
                    client.elicit("user_name", "What is your name?", name_schema()),
                    client.sample("greeting", "Write a greeting", 50),
                    client.roots("client_roots"),
                );
                let name = name.map_err(asked)?;
                Ok(ToolOutput::text(format!(
                    "{} {} ({} roots)",
                    greeting.map_err(asked)?,
                    field(&name, "name"),
                    roots.map_err(asked)?.len()
                )))
            },
        ),
        tool(
            "test_input_required_result_multi_round",
            "MRTR: asks a name, then a colour",
            no_arguments(),
            |_, ctx| async move {
                let client = client(&ctx)?;
                let name = client
                    .elicit("step1", "What is your name?", name_schema())
                    .await
                    .map_err(asked)?;
                let color = client
                    .elicit(
                        "step2",
                        "What is your favourite colour?",
                        json!({"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}),
                    )
                    .await
                    .map_err(asked)?;
                Ok(ToolOutput::text(format!(
                    "{} likes {}",
                    field(&name, "name"),
                    field(&color, "color")
                )))
            },
        ),
        tool(
            "test_input_required_result_tampered_state",
            "MRTR: sealed requestState integrity test",
            no_arguments(),
            |_, ctx| async move {
                client(&ctx)?
                    .elicit(
                        "confirm",
                        "Continue?",
                        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
                    )
                    .await
                    .map_err(asked)?;
                Ok(ToolOutput::text("state-ok"))
            },
        ),
        tool(
            "test_input_required_result_capabilities",
            "MRTR: respects client capabilities in inputRequests",
            no_arguments(),
            |_, ctx| async move {
                let client = client(&ctx)?;
                if client.can_elicit() {
                    let answer = client
                        .elicit("elicit_input", "What is your name?", name_schema())
                        .await
                        .map_err(asked)?;
                    return Ok(ToolOutput::text(format!(
                        "Hello, {}!",
                        field(&answer, "name")
                    )));
                }
                let text = client
                    .sample("sample_input", "Say hello", 50)
                    .await
                    .map_err(asked)?;
                Ok(ToolOutput::text(text))
            },
        ),
    ]
}
