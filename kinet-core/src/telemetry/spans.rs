//! The spans, named and attributed after the OpenTelemetry GenAI semantic
//! conventions: `invoke_agent` for a run, `chat` for each model call and
//! `execute_tool` for each tool call. With no subscriber (or one that
//! filters out target `kinet`) each costs a check of the callsite. Run and
//! tool spans are of the default kind (internal); model calls are client
//! spans.

use tracing::Span;
use tracing::field::Empty;

use crate::data::error::AgentError;
use crate::data::model::{ProviderError, StopReason, Usage};
use crate::data::output::{ToolError, ToolErrorKind, ToolOutput};

/// The `tracing` target of every span: filter on it to keep or drop them.
pub const TARGET: &str = "kinet";

/// The span of one run.
pub(crate) fn run(agent: Option<&str>, provider: &str, model: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {}", agent.unwrap_or(model)),
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.agent.name = agent,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        kinet.cost = Empty,
        kinet.turns = Empty,
        kinet.stop = Empty,
        error.type = Empty,
    )
}

/// The span of one model call.
pub(crate) fn chat(provider: &str, model: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "chat",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        gen_ai.system_instructions = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        kinet.cost = Empty,
        error.type = Empty,
    )
}

/// The span of one tool call.
pub(crate) fn tool(name: &str, call_id: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = %format_args!("execute_tool {name}"),
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.type = "function",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
    )
}

/// Records token counts (and the cost, when known).
pub(crate) fn usage(span: &Span, usage: &Usage, cost: Option<f64>) {
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.usage.input_tokens", usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
    if usage.cache_read_tokens > 0 {
        span.record(
            "gen_ai.usage.cache_read.input_tokens",
            usage.cache_read_tokens,
        );
    }
    if usage.cache_write_tokens > 0 {
        span.record(
            "gen_ai.usage.cache_creation.input_tokens",
            usage.cache_write_tokens,
        );
    }
    if let Some(cost) = cost {
        span.record("kinet.cost", cost);
    }
}

/// Marks the span failed with a low-cardinality `error.type` and the
/// message as the status description.
pub(crate) fn error(span: &Span, kind: &str, message: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("error.type", kind);
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", message);
}

/// The outcome of a tool call.
pub(crate) fn tool_result(span: &Span, result: &Result<ToolOutput, ToolError>, content: bool) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(output) => {
            if content {
                span.record("gen_ai.tool.call.result", output.text.as_str());
            }
        }
        Err(failure) => {
            error(span, tool_error_type(failure.kind()), failure.message());
            if content {
                span.record("gen_ai.tool.call.result", failure.message());
            }
        }
    }
}

/// The convention's name of why a stream stopped.
pub(crate) fn finish_reason(stop: &StopReason) -> &'static str {
    match stop {
        StopReason::EndTurn => "stop",
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens => "length",
        StopReason::ContentFilter => "content_filter",
        _ => "other",
    }
}

/// `error.type` of a tool failure.
pub(crate) fn tool_error_type(kind: ToolErrorKind) -> &'static str {
    match kind {
        ToolErrorKind::InvalidArguments => "invalid_arguments",
        ToolErrorKind::UnknownTool => "unknown_tool",
        ToolErrorKind::NotFound => "not_found",
        ToolErrorKind::NoUniqueMatch => "no_unique_match",
        ToolErrorKind::PermissionDenied => "permission_denied",
        ToolErrorKind::Denied => "denied",
        ToolErrorKind::Timeout => "timeout",
        ToolErrorKind::Cancelled => "cancelled",
        ToolErrorKind::Panicked => "panicked",
        ToolErrorKind::Unavailable => "unavailable",
        ToolErrorKind::Fatal => "fatal",
        ToolErrorKind::Deferred => "deferred",
        _ => "failed",
    }
}

/// `error.type` of a provider failure.
pub(crate) fn provider_error_type(error: &ProviderError) -> &'static str {
    match error {
        ProviderError::Auth(_) => "auth",
        ProviderError::RateLimited { .. } => "rate_limited",
        ProviderError::ContextLengthExceeded { .. } => "context_length_exceeded",
        ProviderError::BadRequest { .. } => "bad_request",
        ProviderError::Server { .. } => "server_error",
        ProviderError::Transport(_) => "transport",
        ProviderError::Stream(_) => "stream",
        ProviderError::IdleTimeout(_) => "timeout",
        ProviderError::Config(_) => "config",
        _ => "provider_error",
    }
}

/// `error.type` of a failed run.
pub(crate) fn run_error_type(error: &AgentError) -> &'static str {
    match error {
        AgentError::Provider { source, .. } => provider_error_type(source),
        AgentError::Hook(_) => "hook",
        _ => "failed",
    }
}
