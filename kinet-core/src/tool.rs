//! The `Tool` trait, its object-safe form, outputs and errors.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ctx::ToolCtx;
use crate::message::ImagePart;
use crate::truncate::TruncationPolicy;

/// A tool an agent can call: a struct with a typed, schema-derived `Args`.
///
/// Implement this trait for your own tools; the engine uses it through the
/// object-safe [`DynTool`], which every `Tool` gets for free.
///
/// ```
/// use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
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
///     fn read_only(&self, _: &AddArgs) -> bool { true }
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

    /// Whether this call only reads. Read-only calls run concurrently with
    /// their read-only neighbours and need no confirmation. The default is
    /// `false` (mutating): be defensive.
    fn read_only(&self, _args: &Self::Args) -> bool {
        false
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
    /// Per-tool truncation override.
    fn truncation(&self) -> Option<TruncationPolicy> {
        None
    }
    /// Parses raw JSON arguments into a call ready to run. An empty string is
    /// read as `{}`. Arguments that do not fit the schema give
    /// [`ToolErrorKind::InvalidArguments`].
    fn prepare(self: Arc<Self>, arguments: &str) -> Result<Box<dyn PreparedCall>, ToolError>;
}

/// A tool call whose arguments were parsed, ready for confirmation and
/// execution.
#[async_trait]
pub trait PreparedCall: Send + Sync {
    /// Whether this call only reads.
    fn read_only(&self) -> bool;
    /// The summary shown in a confirmation request.
    async fn confirm_summary(&self, ctx: &ToolCtx) -> Option<String>;
    /// Runs the call.
    async fn call(self: Box<Self>, ctx: ToolCtx) -> Result<ToolOutput, ToolError>;
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

    fn truncation(&self) -> Option<TruncationPolicy> {
        Tool::truncation(self)
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
    fn read_only(&self) -> bool {
        self.tool.read_only(&self.args)
    }

    async fn confirm_summary(&self, ctx: &ToolCtx) -> Option<String> {
        self.tool.confirm_summary(&self.args, ctx).await
    }

    async fn call(self: Box<Self>, ctx: ToolCtx) -> Result<ToolOutput, ToolError> {
        let TypedCall { tool, args } = *self;
        tool.call(args, &ctx).await
    }
}

/// What a tool call produced: text, optional images, optional JSON.
///
/// The host receives it whole; the model sees `text` truncated by the
/// agent's [`TruncationPolicy`], plus the images.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolOutput {
    /// The text the model reads.
    pub text: String,
    /// Images (screenshots) shown to the model after the text.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePart>,
    /// Machine-readable data for the host (not sent to the model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
}

impl ToolOutput {
    /// A text-only output.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// Adds an image.
    pub fn with_image(mut self, image: ImagePart) -> Self {
        self.images.push(image);
        self
    }

    /// Attaches structured data for the host.
    pub fn with_structured(mut self, value: serde_json::Value) -> Self {
        self.structured = Some(value);
        self
    }
}

/// What went wrong in a tool call. All kinds but [`ToolErrorKind::Fatal`]
/// become an error result the model reads; `Fatal` ends the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// The arguments did not fit the schema or were not JSON.
    InvalidArguments,
    /// The model asked for a tool that does not exist.
    UnknownTool,
    /// A file, path, ref or record was not found.
    NotFound,
    /// A search-and-replace matched zero or several times.
    NoUniqueMatch,
    /// A path or action outside what the host allows (e.g. outside the
    /// workspace roots).
    PermissionDenied,
    /// The user (or policy) denied the call.
    Denied,
    /// The call ran out of time.
    Timeout,
    /// The run was cancelled while the call was pending or running.
    Cancelled,
    /// The tool panicked; the panic was caught.
    Panicked,
    /// The tool ran and failed.
    Failed,
    /// Unrecoverable: the run ends.
    Fatal,
}

/// A tool failure: a kind, a message written for the model, and the cause.
#[derive(Debug, Clone)]
pub struct ToolError {
    kind: ToolErrorKind,
    message: String,
    source: Option<Arc<dyn StdError + Send + Sync>>,
}

impl ToolError {
    /// An error of `kind` with a message for the model.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying cause (kept for the host, not sent to the model).
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// [`ToolErrorKind::InvalidArguments`].
    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::InvalidArguments, message)
    }

    /// [`ToolErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::NotFound, message)
    }

    /// [`ToolErrorKind::Failed`].
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Failed, message)
    }

    /// [`ToolErrorKind::PermissionDenied`].
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::PermissionDenied, message)
    }

    /// [`ToolErrorKind::Fatal`]: ends the run.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Fatal, message)
    }

    /// The kind.
    pub fn kind(&self) -> ToolErrorKind {
        self.kind
    }

    /// The message written for the model.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the run must end.
    pub fn is_fatal(&self) -> bool {
        self.kind == ToolErrorKind::Fatal
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for ToolError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

/// What a provider is told about a tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// The tool name.
    pub name: String,
    /// The description.
    pub description: String,
    /// The JSON schema of the arguments.
    pub parameters: serde_json::Value,
}

impl ToolSpec {
    /// The spec of a dynamic tool.
    pub fn of(tool: &dyn DynTool) -> Self {
        Self {
            name: tool.name().to_owned(),
            description: tool.description().to_owned(),
            parameters: tool.parameters(),
        }
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
        assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);
        assert!(err.message().contains("`read`"), "{}", err.message());
    }
}
