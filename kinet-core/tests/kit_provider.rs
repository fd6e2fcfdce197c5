//! A provider written outside kinet-core, on the public provider kit only,
//! for a made-up wire format: it streams a tool turn through the loop.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/mock_server.rs"]
mod mock_server;

use std::collections::VecDeque;

use kinet_core::provider::kit::{
    Flow, HeaderMap, HttpClient, HttpSettings, SseDecoder, SseEvent, insert_header,
};
use kinet_core::provider::{
    ChatRequest, ProviderError, ProviderStream, StopReason, StreamEvent, Usage,
};
use kinet_core::{Agent, Message, Provider, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput};
use mock_server::{MockServer, Reply};
use serde_json::json;

/// "Tiny": `{"say": text}`, `{"call": {"id", "name", "args"}}` and
/// `{"done": reason, "tokens": n}` events.
struct TinyProvider {
    url: String,
    http: HttpClient,
    headers: HeaderMap,
}

impl TinyProvider {
    fn new(url: String) -> Result<Self, ProviderError> {
        let mut headers = HeaderMap::new();
        insert_header(&mut headers, "x-tiny-key", "secret")?;
        Ok(Self {
            url,
            http: HttpClient::new(HttpSettings::default())?,
            headers,
        })
    }
}

#[derive(Default)]
struct TinyDecoder {
    calls: usize,
}

impl SseDecoder for TinyDecoder {
    fn decode(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<Result<StreamEvent, ProviderError>>,
    ) -> Flow {
        let value: serde_json::Value = match serde_json::from_str(&event.data) {
            Ok(value) => value,
            Err(e) => {
                out.push_back(Err(ProviderError::Stream(e.to_string())));
                return Flow::Done;
            }
        };
        if let Some(text) = value["say"].as_str() {
            out.push_back(Ok(StreamEvent::TextDelta(text.to_owned())));
        } else if let Some(call) = value.get("call") {
            let index = self.calls;
            self.calls += 1;
            out.push_back(Ok(StreamEvent::ToolCallStart {
                index,
                id: call["id"].as_str().unwrap_or_default().to_owned(),
                name: call["name"].as_str().unwrap_or_default().to_owned(),
            }));
            out.push_back(Ok(StreamEvent::ToolCallArgumentsDelta {
                index,
                delta: call["args"].to_string(),
            }));
        } else if let Some(done) = value["done"].as_str() {
            out.push_back(Ok(StreamEvent::Usage(Usage {
                output_tokens: value["tokens"].as_u64().unwrap_or(0),
                ..Usage::default()
            })));
            out.push_back(Ok(StreamEvent::Finished(match done {
                "tools" => StopReason::ToolUse,
                _ => StopReason::EndTurn,
            })));
            return Flow::Done;
        }
        Flow::Continue
    }

    fn end(&mut self, out: &mut VecDeque<Result<StreamEvent, ProviderError>>) {
        out.push_back(Err(ProviderError::Stream("the stream ended early".into())));
    }
}

#[async_trait::async_trait]
impl Provider for TinyProvider {
    fn name(&self) -> &str {
        "tiny"
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let messages: Vec<_> = request
            .messages
            .iter()
            .map(|m| match m {
                Message::Tool { tool_call_id, .. } => {
                    json!({"tool_result": tool_call_id, "text": m.text()})
                }
                other => json!({"text": other.text()}),
            })
            .collect();
        let tools: Vec<_> = request.tools.iter().map(|t| t.name.clone()).collect();
        let body = json!({"messages": messages, "tools": tools});
        self.http
            .stream_sse(&self.url, &self.headers, &body, TinyDecoder::default())
            .await
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct CityArgs {
    city: String,
}

struct Weather;

#[async_trait::async_trait]
impl Tool for Weather {
    type Args = CityArgs;
    fn name(&self) -> &str {
        "weather"
    }
    fn description(&self) -> &str {
        "The weather in a city."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, args: CityArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!("{}: 4 °C", args.city)))
    }
}

fn sse(events: &[serde_json::Value]) -> Reply {
    let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    Reply::sse_bytes(body.as_bytes())
}

#[tokio::test]
async fn a_provider_on_the_public_kit_streams_a_tool_turn() {
    let server = MockServer::start(vec![
        Reply::json(503, r#"{"error": {"message": "busy"}}"#),
        sse(&[
            json!({"say": "Checking "}),
            json!({"say": "two cities."}),
            json!({"call": {"id": "a", "name": "weather", "args": {"city": "Oslo"}}}),
            json!({"call": {"id": "b", "name": "weather", "args": {"city": "Lima"}}}),
            json!({"done": "tools", "tokens": 7}),
        ]),
        sse(&[
            json!({"say": "Cold in Oslo."}),
            json!({"done": "stop", "tokens": 3}),
        ]),
    ])
    .await;
    let provider = TinyProvider::new(format!("{}/v1/tiny", server.url)).unwrap();
    let agent = Agent::builder(provider).tool(Weather).build();
    let outcome = agent.run_to_completion("weather?").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(outcome.final_text().as_deref(), Some("Cold in Oslo."));
    assert_eq!(outcome.usage.output_tokens, 10);
    let requests = server.requests();
    // The 503 was retried by the kit's client.
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[0].headers.get("x-tiny-key").map(String::as_str),
        Some("secret")
    );
    let last = &requests[2].body["messages"];
    assert_eq!(last[2], json!({"tool_result": "a", "text": "Oslo: 4 °C"}));
    assert_eq!(last[3], json!({"tool_result": "b", "text": "Lima: 4 °C"}));
}
