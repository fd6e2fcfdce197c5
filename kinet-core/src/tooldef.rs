//! The `Tool` trait and its object-safe form.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::command::CommandLine;
use crate::ctx::ToolCtx;
use crate::data::output::{ToolError, ToolOutput};
use crate::data::spec::{Scheduling, ToolAnnotations, ToolSpec};
use crate::data::truncate::TruncationPolicy;

/// A tool an agent can call: a struct with a typed, schema-derived `Args`.
///
/// Implement this trait for your own tools; the engine uses it through the
/// object-safe [`DynTool`], which every `Tool` gets for free.
///
/// ```
/// use kinet_core::{Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct AddArgs {
///     /// First addend.
///     a: i64,
///     /// Second addend.
///     b: i64,
/// }
///
/// struct Add;
///
/// #[async_trait::async_trait]
/// impl Tool for Add {
///     type Args = AddArgs;
///     fn name(&self) -> &str { "add" }
///     fn description(&self) -> &str { "Adds two integers." }
///     // Reads nothing, changes nothing: no approval, runs beside other calls.
///     fn annotations(&self) -> ToolAnnotations { ToolAnnotations::read_only() }
///     async fn call(&self, args: AddArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
///         Ok(ToolOutput::text((args.a + args.b).to_string()))
///     }
/// }
/// ```
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The arguments; their JSON schema (from schemars) is what the model sees.
    type Args: DeserializeOwned + JsonSchema + Send + Sync + 'static;

    /// The name the model calls the tool by: `[A-Za-z0-9_-]`, at most 64 chars.
    fn name(&self) -> &str;

    /// The description the model reads.
    fn description(&self) -> &str;

    /// What clients are told about the tool, and where the defaults of
    /// [`mutating`](Self::mutating) and [`scheduling`](Self::scheduling)
    /// come from. Default: [`ToolAnnotations::default`] (not read-only,
    /// destructive, not idempotent, open world).
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::default()
    }

    /// Whether this call needs the user's approval under an asking
    /// [`ApprovalPolicy`](crate::ApprovalPolicy). Default: `true` unless the
    /// annotations say read-only. A tool that changes only the agent's own
    /// state (its todo list, its memory) returns `false` here and keys its
    /// [`scheduling`](Self::scheduling).
    fn mutating(&self, _args: &Self::Args) -> bool {
        !self.annotations().read_only
    }

    /// When this call may run beside the other calls of its turn. Default:
    /// [`Scheduling::Parallel`] for a read-only tool whose call is not
    /// mutating, [`Scheduling::Exclusive`] otherwise.
    fn scheduling(&self, args: &Self::Args) -> Scheduling {
        default_scheduling(self.annotations(), self.mutating(args))
    }

    /// A human-readable summary shown when the user is asked to confirm the
    /// call (the shell command, the diff). `None` shows the JSON arguments.
    async fn confirm_summary(&self, _args: &Self::Args, _ctx: &ToolCtx) -> Option<String> {
        None
    }

    /// How this tool's output is truncated for the model; `None` uses the
    /// agent's policy.
    fn truncation(&self) -> Option<TruncationPolicy> {
        None
    }

    /// For a tool that runs a shell command line: the line and where it
    /// runs. The pipeline [plans](crate::command::plan) it once, at
    /// approval, checks that plan against the rules file, and hands the
    /// same plan to [`call`](Self::call) (and to
    /// [`confirm_summary`](Self::confirm_summary)) as the context's
    /// [`CheckedCommand`](crate::command::CheckedCommand) extension, so the
    /// tool runs exactly what was checked. Default: `None` (no command).
    fn command_line(&self, _args: &Self::Args, _ctx: &ToolCtx) -> Option<CommandLine> {
        None
    }

    /// The longest one call may run. The pipeline enforces the shorter of
    /// this and the agent's tool timeout through [`ToolCtx::deadline`].
    /// Default: `None` (only the agent's timeout).
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// The JSON schema of [`ToolOutput::structured`] when the tool returns
    /// one: declared to MCP clients as the tool's `outputSchema`, and a
    /// served call whose structured result does not match it is an error.
    /// Default: `None` (no declared shape).
    fn output_schema(&self) -> Option<serde_json::Value> {
        None
    }

    /// Runs the tool.
    async fn call(&self, args: Self::Args, ctx: &ToolCtx) -> Result<ToolOutput, ToolError>;
}

/// The object-safe form of a tool, used by the engine and by tool sources
/// that only know a raw JSON schema (MCP).
///
/// Every [`Tool`] implements it through a blanket impl.
pub trait DynTool: Send + Sync + 'static {
    /// The name the model calls the tool by.
    fn name(&self) -> &str;
    /// The description the model reads.
    fn description(&self) -> &str;
    /// The JSON schema of the arguments.
    fn parameters(&self) -> serde_json::Value;
    /// Static facts about the tool (see [`Tool::annotations`]).
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::default()
    }
    /// Per-tool truncation override.
    fn truncation(&self) -> Option<TruncationPolicy> {
        None
    }
    /// The longest one call may run (see [`Tool::timeout`]).
    fn timeout(&self) -> Option<Duration> {
        None
    }
    /// The schema of the structured output (see [`Tool::output_schema`]).
    fn output_schema(&self) -> Option<serde_json::Value> {
        None
    }
    /// Parses raw JSON arguments into a call ready to run. An empty string is
    /// read as `{}`. Arguments that do not fit the schema give
    /// [`ToolErrorKind::InvalidArguments`](crate::tool::ToolErrorKind::InvalidArguments).
    fn prepare(self: Arc<Self>, arguments: &str) -> Result<Box<dyn PreparedCall>, ToolError>;
}

/// A tool call whose arguments were parsed, ready for confirmation and
/// execution.
#[async_trait]
pub trait PreparedCall: Send + Sync {
    /// Whether this call needs approval (see [`Tool::mutating`]).
    fn mutating(&self) -> bool;
    /// When it may run beside other calls (see [`Tool::scheduling`]).
    fn scheduling(&self) -> Scheduling;
    /// The summary shown in a confirmation request.
    async fn confirm_summary(&self, ctx: &ToolCtx) -> Option<String>;
    /// The command line it runs, if it runs one (see
    /// [`Tool::command_line`]).
    fn command_line(&self, _ctx: &ToolCtx) -> Option<CommandLine> {
        None
    }
    /// Runs the call.
    async fn call(self: Box<Self>, ctx: ToolCtx) -> Result<ToolOutput, ToolError>;
}

/// The scheduling a tool gets unless it says otherwise: parallel for a
/// read-only tool's non-mutating call, exclusive for everything else.
pub fn default_scheduling(annotations: ToolAnnotations, mutating: bool) -> Scheduling {
    if annotations.read_only && !mutating {
        Scheduling::Parallel
    } else {
        Scheduling::Exclusive
    }
}

/// What the model is told about `tool`.
pub fn spec_of(tool: &dyn DynTool) -> ToolSpec {
    ToolSpec {
        name: tool.name().to_owned(),
        description: tool.description().to_owned(),
        parameters: tool.parameters(),
    }
}

/// Generates the JSON schema the model sees for `T`: draft 2020-12, with
/// subschemas inlined (many OpenAI-compatible servers reject `$ref`) and no
/// `$schema` key.
pub fn schema_for<T: JsonSchema>() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
        if !object.contains_key("type") && !object.contains_key("properties") {
            object.insert("type".into(), "object".into());
        }
        if object.get("type").and_then(|t| t.as_str()) == Some("object")
            && !object.contains_key("properties")
        {
            object.insert("properties".into(), serde_json::json!({}));
        }
    } else {
        // `true` or `{}`: any object.
        schema = serde_json::json!({"type": "object", "properties": {}});
    }
    // Recursive types keep a `$ref` schemars cannot inline.
    if schema.to_string().contains("\"$ref\"") {
        schema = crate::schema::sanitize(&schema, crate::schema::SchemaDialect::OpenAi);
    }
    schema
}

/// Parses raw model-produced JSON arguments into `T`; an empty string is `{}`.
pub fn parse_arguments<T: DeserializeOwned>(tool: &str, arguments: &str) -> Result<T, ToolError> {
    let text = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    serde_json::from_str(text).map_err(|e| {
        ToolError::invalid_arguments(format!(
            "invalid arguments for tool `{tool}`: {e}. Call it again with arguments that match its schema."
        ))
    })
}

impl<T: Tool> DynTool for T {
    fn name(&self) -> &str {
        Tool::name(self)
    }

    fn description(&self) -> &str {
        Tool::description(self)
    }

    fn parameters(&self) -> serde_json::Value {
        schema_for::<T::Args>()
    }

    fn annotations(&self) -> ToolAnnotations {
        Tool::annotations(self)
    }

    fn truncation(&self) -> Option<TruncationPolicy> {
        Tool::truncation(self)
    }

    fn timeout(&self) -> Option<Duration> {
        Tool::timeout(self)
    }

    fn output_schema(&self) -> Option<serde_json::Value> {
        Tool::output_schema(self)
    }

    fn prepare(self: Arc<Self>, arguments: &str) -> Result<Box<dyn PreparedCall>, ToolError> {
        let args = parse_arguments::<T::Args>(Tool::name(&*self), arguments)?;
        Ok(Box::new(TypedCall { tool: self, args }))
    }
}

struct TypedCall<T: Tool> {
    tool: Arc<T>,
    args: T::Args,
}

#[async_trait]
impl<T: Tool> PreparedCall for TypedCall<T> {
    fn mutating(&self) -> bool {
        self.tool.mutating(&self.args)
    }

    fn scheduling(&self) -> Scheduling {
        self.tool.scheduling(&self.args)
    }

    async fn confirm_summary(&self, ctx: &ToolCtx) -> Option<String> {
        self.tool.confirm_summary(&self.args, ctx).await
    }

    fn command_line(&self, ctx: &ToolCtx) -> Option<CommandLine> {
        self.tool.command_line(&self.args, ctx)
    }

    async fn call(self: Box<Self>, ctx: ToolCtx) -> Result<ToolOutput, ToolError> {
        let TypedCall { tool, args } = *self;
        tool.call(args, &ctx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Nested {
        /// Inner value.
        value: String,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// A path.
        path: String,
        /// Optional count.
        count: Option<u32>,
        nested: Nested,
    }

    #[derive(Deserialize, JsonSchema)]
    struct Empty {}

    #[test]
    fn schema_is_inlined_and_titleless() {
        let schema = schema_for::<Args>();
        let text = schema.to_string();
        assert!(!text.contains("$ref"), "{text}");
        assert!(!text.contains("$schema"), "{text}");
        assert!(schema.get("title").is_none());
        assert_eq!(
            schema["properties"]["nested"]["properties"]["value"]["type"],
            "string"
        );
    }

    #[test]
    fn empty_args_schema_is_an_object() {
        let schema = schema_for::<Empty>();
        assert_eq!(schema["type"], "object");
        assert!(schema["properties"].is_object());
        let parsed: Empty = parse_arguments("t", "").unwrap();
        let _ = parsed;
    }

    #[test]
    fn bad_arguments_name_the_tool() {
        let err = parse_arguments::<Args>("read", "{\"path\": 3}")
            .err()
            .unwrap();
        assert_eq!(
            err.kind(),
            crate::data::output::ToolErrorKind::InvalidArguments
        );
        assert!(err.message().contains("`read`"), "{}", err.message());
    }
}
