//! Anthropic Messages (streaming, tools, images, thinking, prompt caching
//! usage).

use std::collections::{HashMap, VecDeque};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

use super::http::{
    Flow, HttpClient, HttpSettings, SseDecoder, error_details, error_from_stream, insert_header,
    typed_event,
};
use super::sse::SseEvent;
use crate::backend::{Provider, ProviderStream};
use crate::data::model::{ChatRequest, ProviderError, StopReason, StreamEvent, Usage};
use crate::message::{ContentPart, Message};

/// The `anthropic-version` header value sent.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Settings of the Anthropic provider. Every setter documents its default.
///
/// ```
/// use kinet_core::provider::AnthropicConfig;
///
/// let config = AnthropicConfig::new().api_key("sk-ant-...").default_max_tokens(4096);
/// assert_eq!(config.default_max_tokens, 4096);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AnthropicConfig {
    /// The API root; `/v1/messages` is appended. Default
    /// `https://api.anthropic.com`.
    pub base_url: String,
    /// Sent as `x-api-key`. Default none.
    pub api_key: Option<String>,
    /// Extra headers (e.g. `anthropic-beta`). Default none.
    pub headers: Vec<(String, String)>,
    /// The model when the agent names none. Default `claude-sonnet-4-5`.
    pub default_model: String,
    /// `max_tokens` when the agent sets none (the API requires it). Default
    /// 8192.
    pub default_max_tokens: u32,
    /// Prompt caching: `cache_control` breakpoints on the system prompt,
    /// the last tool, and the last block of the conversation (which moves
    /// forward each turn), three of the four Anthropic allows. Default on.
    pub prompt_caching: bool,
    /// Retries and timeouts.
    pub http: HttpSettings,
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.anthropic.com".into(),
            api_key: None,
            headers: Vec::new(),
            default_model: "claude-sonnet-4-5".into(),
            default_max_tokens: 8192,
            prompt_caching: true,
            http: HttpSettings::default(),
        }
    }
}

impl AnthropicConfig {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }
    /// Turns automatic prompt-caching breakpoints on or off.
    pub fn prompt_caching(mut self, on: bool) -> Self {
        self.prompt_caching = on;
        self
    }
    /// Sets the API root.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }
    /// Sets the API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }
    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
    /// Sets the model used when the agent names none.
    pub fn default_model(mut self, model: impl Into<String>) -> Self {
        self.default_model = model.into();
        self
    }
    /// Sets the default `max_tokens`.
    pub fn default_max_tokens(mut self, max: u32) -> Self {
        self.default_max_tokens = max;
        self
    }
    /// Sets retries and timeouts.
    pub fn http(mut self, http: HttpSettings) -> Self {
        self.http = http;
        self
    }
}

/// The Anthropic Messages provider.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    config: AnthropicConfig,
    headers: HeaderMap,
    http: HttpClient,
}

impl AnthropicProvider {
    /// A provider with these settings.
    pub fn new(config: AnthropicConfig) -> Result<Self, ProviderError> {
        let mut headers = HeaderMap::new();
        insert_header(&mut headers, "anthropic-version", ANTHROPIC_VERSION)?;
        if let Some(key) = &config.api_key {
            insert_header(&mut headers, "x-api-key", key)?;
        }
        for (name, value) in &config.headers {
            insert_header(&mut headers, name, value)?;
        }
        Ok(Self {
            headers,
            http: HttpClient::new(config.http.clone())?,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let body = messages_body(&request, &self.config);
        let url = format!("{}/v1/messages", self.config.base_url.trim_end_matches('/'));
        self.http
            .stream_sse(&url, &self.headers, &body, MessagesDecoder::default())
            .await
    }
}

fn blocks(content: &[ContentPart]) -> Vec<Value> {
    content
        .iter()
        .filter_map(|part| match part {
            ContentPart::Text { text } if text.is_empty() => None,
            ContentPart::Text { text } => Some(json!({"type": "text", "text": text})),
            ContentPart::Image(image) => Some(json!({
                "type": "image",
                "source": {"type": "base64", "media_type": image.media_type, "data": image.data},
            })),
        })
        .collect()
}

/// The request body. Consecutive messages of one role are merged (tool
/// results and a following user message share one user turn), history
/// system messages join the top-level `system`, and thinking blocks kept
/// in an assistant message's provider state are sent back before its text.
pub(crate) fn messages_body(request: &ChatRequest<'_>, config: &AnthropicConfig) -> Value {
    let cache = config.prompt_caching;
    let (system, messages) = conversation(request, cache);
    let mut body = Map::new();
    body.insert(
        "model".into(),
        super::http::model_or(&request.model, &config.default_model).into(),
    );
    body.insert(
        "max_tokens".into(),
        request
            .params
            .max_tokens
            .unwrap_or(config.default_max_tokens)
            .into(),
    );
    if !system.is_empty() {
        let system = if cache {
            json!([{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}])
        } else {
            system.into()
        };
        body.insert("system".into(), system);
    }
    body.insert("messages".into(), Value::Array(messages));
    insert_tools(&mut body, request, cache);
    body.insert("stream".into(), true.into());
    super::http::insert_sampling(&mut body, &request.params);
    Value::Object(body)
}

/// The system text (the request's and the history's system messages) and
/// the turns, one role each, opening with a user turn; with `cache`, the
/// last block carries the moving cache breakpoint.
fn conversation(request: &ChatRequest<'_>, cache: bool) -> (String, Vec<Value>) {
    let mut system = request.system.to_string();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, mut content: Vec<Value>| {
        if content.is_empty() {
            return;
        }
        match turns.last_mut() {
            Some((last, blocks)) if *last == role => blocks.append(&mut content),
            _ => turns.push((role, content)),
        }
    };
    for message in request.messages.iter() {
        match message {
            Message::System { text } => {
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(text);
            }
            Message::User { content } => push("user", blocks(content)),
            Message::Assistant {
                content,
                tool_calls,
                provider_state,
            } => {
                let mut out: Vec<Value> = provider_state
                    .as_ref()
                    .and_then(|s| s.pointer("/anthropic/thinking"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                out.extend(blocks(content));
                for call in tool_calls {
                    let input = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    out.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                }
                push("assistant", out);
            }
            Message::Tool {
                tool_call_id,
                content,
                is_error,
                ..
            } => {
                let mut result = Map::new();
                result.insert("type".into(), "tool_result".into());
                result.insert("tool_use_id".into(), tool_call_id.clone().into());
                result.insert("content".into(), Value::Array(blocks(content)));
                if *is_error {
                    result.insert("is_error".into(), true.into());
                }
                push("user", vec![Value::Object(result)]);
            }
        }
    }
    // Anthropic wants the conversation to open with a user turn.
    if turns.first().is_some_and(|(role, _)| *role == "assistant") {
        turns.insert(
            0,
            (
                "user",
                vec![json!({"type": "text", "text": "(the conversation continues)"})],
            ),
        );
    }
    let mut messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    if cache {
        // The moving breakpoint: the last block of the conversation, so the
        // next turn reads everything before it from the cache.
        if let Some(last) = messages
            .last_mut()
            .and_then(|m| m.get_mut("content"))
            .and_then(Value::as_array_mut)
            .and_then(|blocks| blocks.last_mut())
            .and_then(Value::as_object_mut)
        {
            last.insert("cache_control".into(), json!({"type": "ephemeral"}));
        }
    }
    (system, messages)
}

/// The tools, the last one a cache breakpoint with `cache`, and the
/// structured output's tool when the request asks for one.
fn insert_tools(body: &mut Map<String, Value>, request: &ChatRequest<'_>, cache: bool) {
    if !request.tools.is_empty() {
        let count = request.tools.len();
        body.insert(
            "tools".into(),
            request
                .tools
                .iter()
                .enumerate()
                .map(|(index, tool)| {
                    let mut tool = json!({
                        "name": tool.name,
                        "description": tool.description,
                        "input_schema": crate::schema::for_dialect(&tool.parameters, crate::schema::SchemaDialect::Anthropic),
                    });
                    if cache && index + 1 == count {
                        tool["cache_control"] = json!({"type": "ephemeral"});
                    }
                    tool
                })
                .collect(),
        );
    }
    if let Some(output) = &request.params.output {
        // Anthropic's structured output: one tool whose input is the
        // answer, and the model made to call it.
        let tools = body
            .entry("tools")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(tools) = tools.as_array_mut() {
            tools.push(json!({
                "name": output.name,
                "description": "Give the final answer in this shape.",
                "input_schema": output.schema,
            }));
        }
        body.insert(
            "tool_choice".into(),
            json!({"type": "tool", "name": output.name}),
        );
    }
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        "refusal" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_owned()),
    }
}

/// Decodes the Messages event stream.
#[derive(Debug, Default)]
pub(crate) struct MessagesDecoder {
    usage: Usage,
    stop: Option<StopReason>,
    /// Thinking blocks by content index, echoed back next turn.
    thinking: HashMap<usize, Value>,
}

impl MessagesDecoder {
    fn read_usage(&mut self, usage: &Value) {
        let read = |key: &str| usage.get(key).and_then(Value::as_u64);
        if let Some(n) = read("input_tokens") {
            self.usage.input_tokens = n;
        }
        if let Some(n) = read("output_tokens") {
            self.usage.output_tokens = n;
        }
        if let Some(n) = read("cache_read_input_tokens") {
            self.usage.cache_read_tokens = n;
        }
        if let Some(n) = read("cache_creation_input_tokens") {
            self.usage.cache_write_tokens = n;
        }
    }
}

fn index_of(data: &Value) -> usize {
    data.get("index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .unwrap_or(0)
}

impl SseDecoder for MessagesDecoder {
    fn decode(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<Result<StreamEvent, ProviderError>>,
    ) -> Flow {
        let (data, kind) = match typed_event(&event) {
            Ok(parsed) => parsed,
            Err(error) => {
                out.push_back(Err(error));
                return Flow::Done;
            }
        };
        match kind.as_str() {
            "message_start" => {
                if let Some(usage) = data.pointer("/message/usage") {
                    self.read_usage(usage);
                }
                if let Some(model) = data.pointer("/message/model").and_then(Value::as_str) {
                    out.push_back(Ok(StreamEvent::Model(model.to_owned())));
                }
            }
            "content_block_start" => {
                self.block_start(&data, out);
            }
            "content_block_delta" => {
                self.block_delta(&data, out);
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(stop_reason(reason));
                }
                if let Some(usage) = data.get("usage") {
                    self.read_usage(usage);
                }
            }
            "message_stop" => {
                self.message_stop(out);
                return Flow::Done;
            }
            "error" => {
                let (message, code) = error_details(&event.data);
                out.push_back(Err(error_from_stream(message, &code)));
                return Flow::Done;
            }
            _ => {} // ping, content_block_stop, future event types
        }
        Flow::Continue
    }

    fn end(&mut self, out: &mut VecDeque<Result<StreamEvent, ProviderError>>) {
        out.push_back(Err(ProviderError::Stream(
            "the stream ended before `message_stop`".into(),
        )));
    }
}

impl MessagesDecoder {
    /// A content block starts: text, a tool call, or thinking kept for the
    /// next request.
    fn block_start(
        &mut self,
        data: &Value,
        out: &mut VecDeque<Result<StreamEvent, ProviderError>>,
    ) {
        let index = index_of(data);
        let Some(block) = data.get("content_block") else {
            return;
        };
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = block.get("text").and_then(Value::as_str)
                    && !text.is_empty()
                {
                    out.push_back(Ok(StreamEvent::TextDelta(text.to_owned())));
                }
            }
            Some("tool_use") => {
                let field = |key: &str| {
                    block
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                out.push_back(Ok(StreamEvent::ToolCallStart {
                    index,
                    id: field("id"),
                    name: field("name"),
                }));
                // Input normally streams as deltas; a complete,
                // non-empty input in the start block is used as is.
                if let Some(input) = block
                    .get("input")
                    .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                {
                    out.push_back(Ok(StreamEvent::ToolCallArgumentsDelta {
                        index,
                        delta: input.to_string(),
                    }));
                }
            }
            Some("thinking") | Some("redacted_thinking") => {
                self.thinking.insert(index, block.clone());
            }
            _ => {}
        }
    }

    /// A piece of a content block.
    fn block_delta(
        &mut self,
        data: &Value,
        out: &mut VecDeque<Result<StreamEvent, ProviderError>>,
    ) {
        let index = index_of(data);
        let Some(delta) = data.get("delta") else {
            return;
        };
        let text = |key: &str| {
            delta
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => out.push_back(Ok(StreamEvent::TextDelta(text("text")))),
            Some("input_json_delta") => {
                let partial = text("partial_json");
                if !partial.is_empty() {
                    out.push_back(Ok(StreamEvent::ToolCallArgumentsDelta {
                        index,
                        delta: partial,
                    }));
                }
            }
            Some("thinking_delta") => {
                let piece = text("thinking");
                if let Some(block) = self.thinking.get_mut(&index) {
                    append(block, "thinking", &piece);
                }
                out.push_back(Ok(StreamEvent::ReasoningDelta(piece)));
            }
            Some("signature_delta") => {
                if let Some(block) = self.thinking.get_mut(&index) {
                    append(block, "signature", &text("signature"));
                }
            }
            _ => {}
        }
    }

    /// The message ends: the thinking blocks as provider state, the usage
    /// (the whole prompt as input tokens), the stop reason.
    fn message_stop(&mut self, out: &mut VecDeque<Result<StreamEvent, ProviderError>>) {
        if !self.thinking.is_empty() {
            let mut blocks: Vec<(usize, Value)> = self.thinking.drain().collect();
            blocks.sort_by_key(|(index, _)| *index);
            let blocks: Vec<Value> = blocks.into_iter().map(|(_, b)| b).collect();
            out.push_back(Ok(StreamEvent::ProviderState(
                json!({"anthropic": {"thinking": blocks}}),
            )));
        }
        // Anthropic counts cached prompt tokens apart from
        // `input_tokens`; `Usage::input_tokens` is the whole prompt.
        let mut usage = self.usage;
        usage.input_tokens = usage
            .input_tokens
            .saturating_add(usage.cache_read_tokens)
            .saturating_add(usage.cache_write_tokens);
        out.push_back(Ok(StreamEvent::Usage(usage)));
        let stop = self.stop.take().unwrap_or(StopReason::EndTurn);
        out.push_back(Ok(StreamEvent::Finished(stop)));
    }
}

fn append(block: &mut Value, key: &str, piece: &str) {
    if let Some(object) = block.as_object_mut() {
        let current = object
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        object.insert(key.into(), Value::String(current + piece));
    }
}
