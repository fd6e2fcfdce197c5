//! OpenAI Responses API (`function_call` / `function_call_output` items),
//! streaming, stateless (`store: false`).

use std::collections::{HashMap, VecDeque};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

use super::http::insert_sampling;
use super::http::{Flow, HttpClient, SseDecoder, error_details, error_from_stream, typed_event};
use super::openai::{OpenAiConfig, data_url, tool_result_images};
use super::sse::SseEvent;
use crate::backend::{Provider, ProviderStream};
use crate::data::model::{ChatRequest, ProviderError, StopReason, StreamEvent, Usage};
use crate::message::{ContentPart, Message};

/// The OpenAI Responses provider. It shares [`OpenAiConfig`] with the Chat
/// Completions provider; `max_tokens` becomes `max_output_tokens`.
#[derive(Debug, Clone)]
pub struct OpenAiResponsesProvider {
    config: OpenAiConfig,
    headers: HeaderMap,
    http: HttpClient,
}

impl OpenAiResponsesProvider {
    /// A provider with these settings.
    pub fn new(config: OpenAiConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            headers: config.header_map()?,
            http: HttpClient::new(config.http.clone())?,
            config,
        })
    }
}

#[async_trait]
impl Provider for OpenAiResponsesProvider {
    fn name(&self) -> &str {
        "openai-responses"
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let body = responses_body(&request, &self.config);
        let url = self.config.endpoint("responses");
        self.http
            .stream_sse(&url, &self.headers, &body, ResponsesDecoder::default())
            .await
    }
}

fn input_content(content: &[ContentPart]) -> Vec<Value> {
    content
        .iter()
        .map(|part| match part {
            ContentPart::Text { text } => json!({"type": "input_text", "text": text}),
            ContentPart::Image(image) => {
                json!({"type": "input_image", "image_url": data_url(image)})
            }
        })
        .collect()
}

/// The request body: `instructions` plus a list of input items.
pub(crate) fn responses_body(request: &ChatRequest<'_>, config: &OpenAiConfig) -> Value {
    let mut input: Vec<Value> = Vec::with_capacity(request.messages.len());
    let mut pending_images: Vec<Value> = Vec::new();
    for message in request.messages.iter() {
        if !matches!(message, Message::Tool { .. }) && !pending_images.is_empty() {
            input.push(json!({"role": "user", "content": std::mem::take(&mut pending_images)}));
        }
        match message {
            Message::System { text } => {
                input.push(json!({"role": config.system_role, "content": text}));
            }
            Message::User { content } => {
                input.push(json!({"role": "user", "content": input_content(content)}));
            }
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let text = crate::message::join_text(content);
                if !text.is_empty() {
                    input.push(json!({
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text}],
                    }));
                }
                for call in tool_calls {
                    input.push(json!({
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    }));
                }
            }
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => {
                input.push(json!({
                    "type": "function_call_output",
                    "call_id": tool_call_id,
                    "output": crate::message::join_text(content),
                }));
                pending_images.extend(tool_result_images(
                    tool_call_id,
                    content,
                    |text| json!({"type": "input_text", "text": text}),
                    |image| json!({"type": "input_image", "image_url": data_url(image)}),
                ));
            }
        }
    }
    if !pending_images.is_empty() {
        input.push(json!({"role": "user", "content": pending_images}));
    }

    let mut body = Map::new();
    body.insert(
        "model".into(),
        super::http::model_or(&request.model, &config.default_model).into(),
    );
    if !request.system.is_empty() {
        body.insert("instructions".into(), request.system.to_string().into());
    }
    body.insert("input".into(), Value::Array(input));
    if !request.tools.is_empty() {
        body.insert(
            "tools".into(),
            request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "type": "function",
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": crate::schema::for_dialect(&tool.parameters, config.schema_dialect),
                        "strict": false,
                    })
                })
                .collect(),
        );
    }
    body.insert("stream".into(), true.into());
    body.insert("store".into(), false.into());
    let params = &request.params;
    if let Some(max) = params.max_tokens {
        body.insert("max_output_tokens".into(), max.into());
    }
    insert_sampling(&mut body, params);
    if let Some(output) = &params.output {
        body.insert(
            "text".into(),
            json!({"format": {
                "type": "json_schema",
                "name": output.name,
                "schema": output.schema,
                "strict": true,
            }}),
        );
    }
    Value::Object(body)
}

/// Decodes `response.*` events.
#[derive(Debug, Default)]
pub(crate) struct ResponsesDecoder {
    /// Argument bytes streamed so far, per output index.
    streamed: HashMap<usize, usize>,
    calls_seen: bool,
}

fn output_index(data: &Value) -> usize {
    data.get("output_index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .unwrap_or(0)
}

fn usage_of(response: &Value) -> Option<Usage> {
    let usage = response.get("usage").filter(|u| u.is_object())?;
    let read = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        input_tokens: read("/input_tokens"),
        output_tokens: read("/output_tokens"),
        cache_read_tokens: read("/input_tokens_details/cached_tokens"),
        cache_write_tokens: 0,
    })
}

impl SseDecoder for ResponsesDecoder {
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
        let text = |key: &str| {
            data.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match kind.as_str() {
            "response.output_text.delta" => {
                out.push_back(Ok(StreamEvent::TextDelta(text("delta"))))
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                out.push_back(Ok(StreamEvent::ReasoningDelta(text("delta"))));
            }
            "response.output_item.added" => {
                let Some(item) = data.get("item") else {
                    return Flow::Continue;
                };
                if item.get("type").and_then(Value::as_str) == Some("function_call") {
                    let index = output_index(&data);
                    let field = |key: &str| {
                        item.get(key)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    };
                    self.calls_seen = true;
                    out.push_back(Ok(StreamEvent::ToolCallStart {
                        index,
                        id: field("call_id"),
                        name: field("name"),
                    }));
                    let arguments = field("arguments");
                    if !arguments.is_empty() {
                        *self.streamed.entry(index).or_default() += arguments.len();
                        out.push_back(Ok(StreamEvent::ToolCallArgumentsDelta {
                            index,
                            delta: arguments,
                        }));
                    }
                }
            }
            "response.function_call_arguments.delta" => {
                let index = output_index(&data);
                let delta = text("delta");
                *self.streamed.entry(index).or_default() += delta.len();
                out.push_back(Ok(StreamEvent::ToolCallArgumentsDelta { index, delta }));
            }
            "response.function_call_arguments.done" => {
                // Servers that skip the deltas send the whole text here.
                let index = output_index(&data);
                if self.streamed.get(&index).copied().unwrap_or(0) == 0 {
                    let arguments = text("arguments");
                    if !arguments.is_empty() {
                        self.streamed.insert(index, arguments.len());
                        out.push_back(Ok(StreamEvent::ToolCallArgumentsDelta {
                            index,
                            delta: arguments,
                        }));
                    }
                }
            }
            "response.completed" | "response.incomplete" => {
                self.completed(&data, &kind, out);
                return Flow::Done;
            }
            "response.failed" => {
                let error = data
                    .pointer("/response/error")
                    .cloned()
                    .unwrap_or(Value::Null);
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("the response failed")
                    .to_owned();
                let code = error
                    .get("code")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                out.push_back(Err(error_from_stream(message, code)));
                return Flow::Done;
            }
            "error" => {
                let (message, code) = error_details(&event.data);
                out.push_back(Err(error_from_stream(message, &code)));
                return Flow::Done;
            }
            _ => {}
        }
        Flow::Continue
    }

    fn end(&mut self, out: &mut VecDeque<Result<StreamEvent, ProviderError>>) {
        out.push_back(Err(ProviderError::Stream(
            "the stream ended before `response.completed`".into(),
        )));
    }
}

impl ResponsesDecoder {
    /// The response ends (complete or not): the model, the usage and why
    /// it stopped.
    fn completed(
        &mut self,
        data: &Value,
        kind: &str,
        out: &mut VecDeque<Result<StreamEvent, ProviderError>>,
    ) {
        let response = data.get("response").cloned().unwrap_or(Value::Null);
        if let Some(model) = response.get("model").and_then(Value::as_str) {
            out.push_back(Ok(StreamEvent::Model(model.to_owned())));
        }
        if let Some(usage) = usage_of(&response) {
            out.push_back(Ok(StreamEvent::Usage(usage)));
        }
        let stop = if kind == "response.incomplete" {
            match response
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
            {
                Some("content_filter") => StopReason::ContentFilter,
                Some("max_output_tokens") | None => StopReason::MaxTokens,
                Some(other) => StopReason::Other(other.to_owned()),
            }
        } else if self.calls_seen {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        };
        out.push_back(Ok(StreamEvent::Finished(stop)));
    }
}
