//! OpenAI Chat Completions, and every server that speaks it: Zhipu GLM,
//! DeepSeek, Ollama, vLLM, llama.cpp server, LM Studio.

use std::collections::{HashSet, VecDeque};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

use super::http::{
    Flow, HttpClient, HttpSettings, SseDecoder, error_details, error_from_stream, insert_header,
    insert_sampling,
};
use super::sse::SseEvent;
use crate::backend::{Provider, ProviderStream};
use crate::data::model::{ChatRequest, ProviderError, StopReason, StreamEvent, Usage};
use crate::message::{ContentPart, ImagePart, Message};

/// Which field carries the output token limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokensField {
    /// `max_tokens`: compatible servers and older OpenAI models (default).
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: OpenAI reasoning models.
    MaxCompletionTokens,
}

/// Settings of an OpenAI-compatible provider. Every setter documents its
/// default.
///
/// ```
/// use kinet_core::provider::OpenAiConfig;
///
/// // A local Ollama server.
/// let config = OpenAiConfig::new()
///     .base_url("http://127.0.0.1:11434/v1")
///     .default_model("qwen3:8b");
/// assert_eq!(config.base_url, "http://127.0.0.1:11434/v1");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiConfig {
    /// The API root; `/chat/completions` (or `/responses`) is appended.
    /// Default `https://api.openai.com/v1`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer`. Default none (local servers).
    pub api_key: Option<String>,
    /// Extra headers. Default none.
    pub headers: Vec<(String, String)>,
    /// The model when the agent names none. Default `gpt-4.1-mini`.
    pub default_model: String,
    /// The token-limit field. Default `max_tokens`.
    pub max_tokens_field: MaxTokensField,
    /// Ask for usage in the stream (`stream_options.include_usage`); turn
    /// off for servers that reject the field. Default on.
    pub stream_usage: bool,
    /// The role of the system prompt (`system`, or `developer`). Default
    /// `system`.
    pub system_role: String,
    /// Retries and timeouts.
    pub http: HttpSettings,
    /// The schema rules tool parameters are rewritten to. Default
    /// [`SchemaDialect::OpenAi`](crate::schema::SchemaDialect::OpenAi)
    /// (refs already inlined, nothing else changed); set
    /// [`Gemini`](crate::schema::SchemaDialect::Gemini) for Google's
    /// OpenAI-compatible endpoint.
    pub schema_dialect: crate::schema::SchemaDialect,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".into(),
            api_key: None,
            headers: Vec::new(),
            default_model: "gpt-4.1-mini".into(),
            max_tokens_field: MaxTokensField::MaxTokens,
            stream_usage: true,
            system_role: "system".into(),
            http: HttpSettings::default(),
            schema_dialect: crate::schema::SchemaDialect::OpenAi,
        }
    }
}

impl OpenAiConfig {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
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
    /// Sets the schema rules tool parameters follow.
    pub fn schema_dialect(mut self, dialect: crate::schema::SchemaDialect) -> Self {
        self.schema_dialect = dialect;
        self
    }
    /// Sets the token-limit field.
    pub fn max_tokens_field(mut self, field: MaxTokensField) -> Self {
        self.max_tokens_field = field;
        self
    }
    /// Asks for usage in the stream, or not.
    pub fn stream_usage(mut self, on: bool) -> Self {
        self.stream_usage = on;
        self
    }
    /// Sets the system prompt's role.
    pub fn system_role(mut self, role: impl Into<String>) -> Self {
        self.system_role = role.into();
        self
    }
    /// Sets retries and timeouts.
    pub fn http(mut self, http: HttpSettings) -> Self {
        self.http = http;
        self
    }

    pub(crate) fn endpoint(&self, path: &str) -> String {
        format!("{}/{path}", self.base_url.trim_end_matches('/'))
    }

    pub(crate) fn header_map(&self) -> Result<HeaderMap, ProviderError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = &self.api_key {
            insert_header(&mut headers, "authorization", &format!("Bearer {key}"))?;
        }
        for (name, value) in &self.headers {
            insert_header(&mut headers, name, value)?;
        }
        Ok(headers)
    }
}

/// The OpenAI Chat Completions provider (streaming, tools, images).
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    config: OpenAiConfig,
    headers: HeaderMap,
    http: HttpClient,
}

impl OpenAiProvider {
    /// A provider with these settings.
    pub fn new(config: OpenAiConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            headers: config.header_map()?,
            http: HttpClient::new(config.http.clone())?,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let body = chat_body(&request, &self.config);
        let url = self.config.endpoint("chat/completions");
        self.http
            .stream_sse(&url, &self.headers, &body, ChatDecoder::default())
            .await
    }
}

/// The parts that carry a tool result's images as a user message (Chat
/// Completions and Responses cannot put images in tool results): a text
/// part naming the call, then the images, in the API's part shapes.
pub(crate) fn tool_result_images(
    tool_call_id: &str,
    content: &[ContentPart],
    text_part: impl Fn(String) -> Value,
    image_part: impl Fn(&ImagePart) -> Value,
) -> Vec<Value> {
    let images: Vec<&ImagePart> = content
        .iter()
        .filter_map(|p| match p {
            ContentPart::Image(image) => Some(image),
            ContentPart::Text { .. } => None,
        })
        .collect();
    if images.is_empty() {
        return Vec::new();
    }
    let mut parts = vec![text_part(format!(
        "Images returned by tool call {tool_call_id}:"
    ))];
    parts.extend(images.into_iter().map(image_part));
    parts
}

pub(crate) fn data_url(image: &ImagePart) -> String {
    format!("data:{};base64,{}", image.media_type, image.data)
}

fn chat_content(content: &[ContentPart]) -> Value {
    if content
        .iter()
        .all(|p| matches!(p, ContentPart::Text { .. }))
    {
        return Value::String(crate::message::join_text(content));
    }
    Value::Array(
        content
            .iter()
            .map(|part| match part {
                ContentPart::Text { text } => json!({"type": "text", "text": text}),
                ContentPart::Image(image) => {
                    json!({"type": "image_url", "image_url": {"url": data_url(image)}})
                }
            })
            .collect(),
    )
}

/// The request body. Tool results cannot carry images in this API, so the
/// images of a run of tool results follow it as one user message.
pub(crate) fn chat_body(request: &ChatRequest<'_>, config: &OpenAiConfig) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": config.system_role, "content": request.system}));
    }
    let mut pending_images: Vec<Value> = Vec::new();
    for message in request.messages.iter() {
        if !matches!(message, Message::Tool { .. }) && !pending_images.is_empty() {
            messages.push(json!({"role": "user", "content": std::mem::take(&mut pending_images)}));
        }
        match message {
            Message::System { text } => {
                messages.push(json!({"role": config.system_role, "content": text}));
            }
            Message::User { content } => {
                messages.push(json!({"role": "user", "content": chat_content(content)}));
            }
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => messages.push(assistant_message(content, tool_calls)),
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => {
                messages.push(json!({
                    "role": "tool",
                    "tool_call_id": tool_call_id,
                    "content": crate::message::join_text(content),
                }));
                pending_images.extend(tool_result_images(
                    tool_call_id,
                    content,
                    |text| json!({"type": "text", "text": text}),
                    |image| json!({"type": "image_url", "image_url": {"url": data_url(image)}}),
                ));
            }
        }
    }
    if !pending_images.is_empty() {
        messages.push(json!({"role": "user", "content": pending_images}));
    }

    let mut body = Map::new();
    body.insert(
        "model".into(),
        super::http::model_or(&request.model, &config.default_model).into(),
    );
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        body.insert(
            "tools".into(),
            request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": tool.name,
                            "description": tool.description,
                            "parameters": crate::schema::for_dialect(&tool.parameters, config.schema_dialect),
                        }
                    })
                })
                .collect(),
        );
    }
    body.insert("stream".into(), true.into());
    if config.stream_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    let params = &request.params;
    if let Some(max) = params.max_tokens {
        let field = match config.max_tokens_field {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        };
        body.insert(field.into(), max.into());
    }
    insert_sampling(&mut body, params);
    if let Some(output) = &params.output {
        body.insert(
            "response_format".into(),
            json!({
                "type": "json_schema",
                "json_schema": {"name": output.name, "schema": output.schema, "strict": true},
            }),
        );
    }
    Value::Object(body)
}

/// An assistant message: its text (`null` beside tool calls) and calls.
fn assistant_message(
    content: &[crate::message::ContentPart],
    tool_calls: &[crate::message::ToolCall],
) -> Value {
    let text = crate::message::join_text(content);
    let mut object = Map::new();
    object.insert("role".into(), "assistant".into());
    object.insert(
        "content".into(),
        if text.is_empty() && !tool_calls.is_empty() {
            Value::Null
        } else {
            Value::String(text)
        },
    );
    if !tool_calls.is_empty() {
        object.insert(
            "tool_calls".into(),
            tool_calls
                .iter()
                .map(|call| {
                    json!({
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    })
                })
                .collect(),
        );
    }
    Value::Object(object)
}

/// Maps a `finish_reason`, including the variants compatible servers use.
fn finish_reason(reason: &str) -> StopReason {
    match reason {
        "stop" | "eos" | "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "tool_calls" | "function_call" | "tool_use" => StopReason::ToolUse,
        "length" | "max_tokens" | "model_length" => StopReason::MaxTokens,
        "content_filter" | "sensitive" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_owned()),
    }
}

/// Decodes `chat.completion.chunk` events.
#[derive(Debug, Default)]
pub(crate) struct ChatDecoder {
    started: HashSet<usize>,
    calls_seen: bool,
    stop: Option<StopReason>,
    usage: Option<Usage>,
    /// llama.cpp's `timings.cache_n`: prompt tokens served from its cache.
    cached: Option<u64>,
    finished: bool,
    model_seen: bool,
}

impl ChatDecoder {
    fn finish(&mut self, out: &mut VecDeque<Result<StreamEvent, ProviderError>>) {
        if self.finished {
            return;
        }
        self.finished = true;
        if let Some(mut usage) = self.usage.take() {
            if usage.cache_read_tokens == 0
                && let Some(cached) = self.cached
            {
                usage.cache_read_tokens = cached;
            }
            out.push_back(Ok(StreamEvent::Usage(usage)));
        }
        let stop = self.stop.take().unwrap_or(if self.calls_seen {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        });
        out.push_back(Ok(StreamEvent::Finished(stop)));
    }

    fn tool_call_delta(
        &mut self,
        position: usize,
        call: &Value,
        out: &mut VecDeque<Result<StreamEvent, ProviderError>>,
    ) {
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .unwrap_or(position);
        let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
        let function = call.get("function");
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.calls_seen = true;
        if self.started.insert(index) || !id.is_empty() || !name.is_empty() {
            out.push_back(Ok(StreamEvent::ToolCallStart {
                index,
                id: id.to_owned(),
                name: name.to_owned(),
            }));
        }
        let arguments = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(text)) => text.clone(),
            // Some servers send the arguments as an object.
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        if !arguments.is_empty() {
            out.push_back(Ok(StreamEvent::ToolCallArgumentsDelta {
                index,
                delta: arguments,
            }));
        }
    }
}

impl SseDecoder for ChatDecoder {
    fn decode(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<Result<StreamEvent, ProviderError>>,
    ) -> Flow {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.finish(out);
            return Flow::Done;
        }
        if data.is_empty() {
            return Flow::Continue;
        }
        let chunk: Value = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(error) => {
                out.push_back(Err(ProviderError::Stream(format!(
                    "unparseable chunk ({error}): {}",
                    data.chars().take(200).collect::<String>()
                ))));
                return Flow::Done;
            }
        };
        if chunk.get("error").is_some() {
            let (message, code) = error_details(data);
            out.push_back(Err(error_from_stream(message, &code)));
            return Flow::Done;
        }
        if !self.model_seen
            && let Some(model) = chunk
                .get("model")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
        {
            self.model_seen = true;
            out.push_back(Ok(StreamEvent::Model(model.to_owned())));
        }
        if let Some(cached) = chunk.pointer("/timings/cache_n").and_then(Value::as_u64) {
            self.cached = Some(cached);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let read = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            self.usage = Some(Usage {
                input_tokens: read("prompt_tokens"),
                output_tokens: read("completion_tokens"),
                cache_read_tokens: usage
                    .pointer("/prompt_tokens_details/cached_tokens")
                    .and_then(Value::as_u64)
                    .or_else(|| usage.get("prompt_cache_hit_tokens").and_then(Value::as_u64))
                    .unwrap_or(0),
                cache_write_tokens: 0,
            });
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Flow::Continue;
        };
        if let Some(delta) = choice.get("delta") {
            for key in ["reasoning_content", "reasoning"] {
                if let Some(text) = delta.get(key).and_then(Value::as_str)
                    && !text.is_empty()
                {
                    out.push_back(Ok(StreamEvent::ReasoningDelta(text.to_owned())));
                }
            }
            if let Some(text) = delta.get("content").and_then(Value::as_str)
                && !text.is_empty()
            {
                out.push_back(Ok(StreamEvent::TextDelta(text.to_owned())));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (position, call) in calls.iter().enumerate() {
                    self.tool_call_delta(position, call, out);
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.stop = Some(finish_reason(reason));
        }
        Flow::Continue
    }

    fn end(&mut self, out: &mut VecDeque<Result<StreamEvent, ProviderError>>) {
        // Some compatible servers close without `[DONE]`; a finish reason
        // shows the response was complete.
        if self.stop.is_some() {
            self.finish(out);
        } else {
            out.push_back(Err(ProviderError::Stream(
                "the stream ended before the response was complete".into(),
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reason_variants_of_compatible_servers() {
        for (reason, expected) in [
            ("stop", StopReason::EndTurn),
            ("eos", StopReason::EndTurn),
            ("tool_calls", StopReason::ToolUse),
            ("function_call", StopReason::ToolUse),
            ("length", StopReason::MaxTokens),
            ("model_length", StopReason::MaxTokens),
            ("content_filter", StopReason::ContentFilter),
            ("sensitive", StopReason::ContentFilter),
            ("network_error", StopReason::Other("network_error".into())),
        ] {
            assert_eq!(finish_reason(reason), expected, "{reason}");
        }
    }

    #[test]
    fn max_tokens_field_and_extra_params() {
        let params = crate::data::model::GenerationParams {
            max_tokens: Some(300),
            extra: serde_json::from_value(json!({"reasoning_effort": "low"})).unwrap_or_default(),
            ..crate::data::model::GenerationParams::default()
        };
        let request = ChatRequest {
            model: "".into(),
            system: "".into(),
            messages: std::borrow::Cow::Owned(vec![Message::user("hi")]),
            tools: std::borrow::Cow::Owned(vec![]),
            params: std::borrow::Cow::Owned(params),
        };
        let config = OpenAiConfig::new()
            .max_tokens_field(MaxTokensField::MaxCompletionTokens)
            .stream_usage(false)
            .default_model("o4-mini");
        let body = chat_body(&request, &config);
        assert_eq!(body["model"], "o4-mini");
        assert_eq!(body["max_completion_tokens"], 300);
        assert!(body.get("max_tokens").is_none());
        assert!(body.get("stream_options").is_none());
        assert!(body.get("tools").is_none());
        assert_eq!(body["reasoning_effort"], "low");
        assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
    }
}
