//! What goes to a model and what comes back: requests, stream events,
//! usage, stop reasons and provider errors.

use std::borrow::Cow;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::spec::ToolSpec;
use crate::message::Message;

/// Sampling parameters passed through to the provider.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationParams {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Upper bound on generated tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Provider-specific fields merged into the request body as they are.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// Asks for the answer as JSON matching a schema, through each API's
    /// native structured output (Chat Completions `response_format`,
    /// Responses `text.format`, Anthropic a forced tool). Set by
    /// [`Agent::run_typed`](crate::Agent::run_typed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSchema>,
}

/// A JSON schema the answer must match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSchema {
    /// A name for the schema (letters, digits, `_`, `-`).
    pub name: String,
    /// The JSON schema.
    pub schema: serde_json::Value,
}

/// One model call. Borrowed from the run where possible: the history is not
/// copied per turn unless a hook edits it.
#[derive(Debug, Clone)]
pub struct ChatRequest<'a> {
    /// The model name.
    pub model: Cow<'a, str>,
    /// The system prompt (may be empty).
    pub system: Cow<'a, str>,
    /// The conversation so far.
    pub messages: Cow<'a, [Message]>,
    /// The tools the model may call.
    pub tools: Cow<'a, [ToolSpec]>,
    /// Sampling parameters.
    pub params: Cow<'a, GenerationParams>,
}

/// Token counts reported by a provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, all of them: the cached ones below are part of this
    /// count (Anthropic's separate counts are summed into it).
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from a cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to a cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
    }
}

/// Why the model stopped generating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// A natural end of the answer.
    EndTurn,
    /// The model wants its tool calls run.
    ToolUse,
    /// The token limit was hit.
    MaxTokens,
    /// A content filter stopped it.
    ContentFilter,
    /// Anything else the provider said.
    Other(String),
}

/// One item of a provider's stream.
///
/// Tool calls arrive as a `ToolCallStart` followed by argument deltas with
/// the same `index`; the engine assembles them. Serialized (tagged by
/// `type`, with `value`), a model call's events can be recorded and
/// played back (a durable run's journal).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StreamEvent {
    /// Answer text.
    TextDelta(String),
    /// Reasoning text.
    ReasoningDelta(String),
    /// A new tool call. `id` may be empty when the server sends none (the
    /// engine then makes one up).
    ToolCallStart {
        /// Position of the call in this response.
        index: usize,
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
    },
    /// More argument JSON for the call at `index`.
    ToolCallArgumentsDelta {
        /// Position of the call in this response.
        index: usize,
        /// The JSON text fragment.
        delta: String,
    },
    /// Opaque state to store on the assistant message and echo back.
    ProviderState(serde_json::Value),
    /// Token usage (may come more than once; the last one counts).
    Usage(Usage),
    /// The model that answered, as the server names it (it may differ
    /// from the one asked for: a dated version, an alias resolved).
    Model(String),
    /// The end of the response.
    Finished(StopReason),
}

/// Errors from model providers.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The API key was missing or rejected.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// Too many requests, after retries.
    #[error("rate limited: {message}")]
    RateLimited {
        /// The server's message.
        message: String,
        /// How long the server asked to wait.
        retry_after: Option<Duration>,
    },
    /// The conversation no longer fits the model's context.
    #[error("context length exceeded: {message}")]
    ContextLengthExceeded {
        /// The server's message.
        message: String,
        /// The model's context window in tokens, when the server said.
        limit: Option<u64>,
        /// The size of the rejected prompt in tokens, when the server said.
        requested: Option<u64>,
    },
    /// The request was rejected.
    #[error("bad request ({status}): {message}")]
    BadRequest {
        /// HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The server failed, after retries.
    #[error("server error ({status}): {message}")]
    Server {
        /// HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The connection failed.
    #[error("transport error: {0}")]
    Transport(String),
    /// The stream broke or carried something unparseable.
    #[error("stream error: {0}")]
    Stream(String),
    /// No data within the idle timeout.
    #[error("the provider sent nothing for {0:?}")]
    IdleTimeout(Duration),
    /// The provider is misconfigured (an invalid header, an unknown
    /// provider name, a feature not compiled in).
    #[error("invalid provider configuration: {0}")]
    Config(String),
    /// A `ScriptedProvider` was asked something its script did not
    /// expect, or ran out of turns.
    #[error("script mismatch: {0}")]
    Script(String),
}
