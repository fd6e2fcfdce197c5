//! The HTTP providers against a loopback server replaying recorded streams
//! in each API's wire format, driven through the real loop.
#![cfg(all(feature = "openai", feature = "anthropic"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/mock_server.rs"]
mod mock_server;

use std::time::{Duration, Instant};

use kinet_core::message::{ContentPart, ImagePart};
use kinet_core::provider::{
    AnthropicConfig, AnthropicProvider, HttpSettings, OpenAiConfig, OpenAiProvider,
    OpenAiResponsesProvider, WireFormat, decode_recorded,
};
use kinet_core::provider::{ProviderError, StopReason, StreamEvent};
use kinet_core::{
    Agent, AgentError, Conversation, Message, RunOutcome, RunStop, Tool, ToolCtx, ToolError,
    ToolOutput,
};
use mock_server::{MockServer, Reply, fixture_path};
use serde_json::{Value, json};

/// A tiny PNG signature, enough to check image plumbing.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WeatherArgs {
    /// City name.
    city: String,
}

/// Fixed weather; Lima also returns a radar image.
struct GetWeather;

#[async_trait::async_trait]
impl Tool for GetWeather {
    type Args = WeatherArgs;
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "Current weather for a city."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, args: WeatherArgs, _: &ToolCtx) -> Result<ToolOutput, ToolError> {
        match args.city.as_str() {
            "Oslo" => Ok(ToolOutput::text("Oslo: 4 °C, cloudy")),
            "Lima" => Ok(ToolOutput::text("Lima: 19 °C, sunny")
                .with_image(ImagePart::from_bytes("image/png", PNG))),
            other => Err(ToolError::not_found(format!("no station in {other}"))),
        }
    }
}

fn fast_http() -> HttpSettings {
    HttpSettings {
        max_retries: 2,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        idle_timeout: Duration::from_secs(5),
        ..HttpSettings::default()
    }
}

fn openai_config(server: &MockServer) -> OpenAiConfig {
    OpenAiConfig::new()
        .base_url(format!("{}/v1", server.url))
        .api_key("sk-test-123")
        .header("x-team", "kinet")
        .http(fast_http())
}

fn openai(server: &MockServer) -> OpenAiProvider {
    OpenAiProvider::new(openai_config(server)).unwrap()
}

fn responses(server: &MockServer) -> OpenAiResponsesProvider {
    OpenAiResponsesProvider::new(openai_config(server)).unwrap()
}

fn anthropic(server: &MockServer) -> AnthropicProvider {
    AnthropicProvider::new(
        AnthropicConfig::new()
            .base_url(&server.url)
            .api_key("sk-ant-test")
            .http(fast_http()),
    )
    .unwrap()
}

fn agent(provider: impl kinet_core::Provider + 'static) -> Agent {
    Agent::builder(provider)
        .model("test-model")
        .system_prompt("You report the weather.")
        .tool(GetWeather)
        .build()
}

fn weather_question() -> Conversation {
    vec![Message::User {
        content: vec![
            ContentPart::text("Weather in Oslo and Lima? Here is a map."),
            ContentPart::Image(ImagePart::from_bytes("image/png", PNG)),
        ],
    }]
    .into()
}

fn provider_error(outcome: &RunOutcome) -> &ProviderError {
    match &outcome.stop {
        RunStop::Failed(AgentError::Provider { source, .. }) => source,
        other => panic!("expected a provider failure, got {other:?}"),
    }
}

fn assert_weather_outcome(outcome: &RunOutcome) {
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(
        outcome.final_text().as_deref(),
        Some("Oslo is 4 °C and cloudy; Lima is 19 °C and sunny.")
    );
    assert!(outcome.conversation.unanswered_tool_calls().is_empty());
    let results: Vec<String> = outcome
        .conversation
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .map(Message::text)
        .collect();
    assert_eq!(results, ["Oslo: 4 °C, cloudy", "Lima: 19 °C, sunny"]);
}

const PNG_DATA_URL: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==";

// ---------------------------------------------------------------- OpenAI chat

#[tokio::test]
async fn openai_text_turn() {
    let server = MockServer::start(vec![Reply::sse_fixture("openai/text.sse")]).await;
    let outcome = agent(openai(&server))
        .run_to_completion("What is the capital of France?")
        .await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(
        outcome.final_text().as_deref(),
        Some("The capital of France is Paris.")
    );
    assert_eq!(
        (outcome.usage.input_tokens, outcome.usage.output_tokens),
        (24, 8)
    );
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.headers["authorization"], "Bearer sk-test-123");
    assert_eq!(request.headers["x-team"], "kinet");
    assert_eq!(request.body["model"], "test-model");
    assert_eq!(request.body["stream"], true);
    assert_eq!(
        request.body["stream_options"],
        json!({"include_usage": true})
    );
    assert_eq!(
        request.body["messages"][0],
        json!({"role": "system", "content": "You report the weather."})
    );
    assert_eq!(request.body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(request.body["tools"][0]["type"], "function");
}

#[tokio::test]
async fn openai_parallel_tool_calls_through_the_loop() {
    let server = MockServer::start(vec![
        Reply::sse_fixture("openai/tools.sse"),
        Reply::sse_fixture("openai/after_tools.sse"),
    ])
    .await;
    let outcome = agent(openai(&server))
        .run_to_completion(weather_question())
        .await;
    assert_weather_outcome(&outcome);
    assert_eq!(outcome.usage.cache_read_tokens, 64);

    let requests = server.requests();
    let first = &requests[0].body["messages"];
    assert_eq!(first[1]["content"][1]["image_url"]["url"], PNG_DATA_URL);
    let second = requests[1].body["messages"].as_array().unwrap().clone();
    assert_openai_pairing(&second);
    // The assistant turn carries both calls with their raw arguments.
    let assistant = second.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["content"], Value::Null);
    assert_eq!(assistant["tool_calls"][0]["id"], "call_weather_oslo");
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        "{\"city\": \"Oslo\"}"
    );
    assert_eq!(assistant["tool_calls"][1]["id"], "call_weather_lima");
    // Tool results cannot hold images: they follow as one user message.
    let last = second.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(
        last["content"][0]["text"],
        "Images returned by tool call call_weather_lima:"
    );
    assert_eq!(last["content"][1]["image_url"]["url"], PNG_DATA_URL);
}

/// Every assistant tool call is followed, before any other role, by a tool
/// message with its id.
fn assert_openai_pairing(messages: &[Value]) {
    for (i, message) in messages.iter().enumerate() {
        let Some(calls) = message["tool_calls"].as_array() else {
            continue;
        };
        let answered: Vec<&str> = messages[i + 1..]
            .iter()
            .take_while(|m| m["role"] == "tool")
            .map(|m| m["tool_call_id"].as_str().unwrap())
            .collect();
        let asked: Vec<&str> = calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(answered, asked, "tool calls must be answered in order");
    }
}

#[tokio::test]
async fn openai_error_mid_stream_fails_the_run_and_keeps_the_history_clean() {
    let server = MockServer::start(vec![Reply::sse_fixture("openai/error_mid_stream.sse")]).await;
    let outcome = agent(openai(&server)).run_to_completion("hi").await;
    let error = provider_error(&outcome);
    assert!(
        error.to_string().contains("The server had an error"),
        "{error}"
    );
    assert_eq!(outcome.conversation.messages.len(), 1);
}

#[tokio::test]
async fn openai_429_then_success() {
    let server = MockServer::start(vec![
        Reply::json(429, r#"{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","code":"rate_limit_exceeded"}}"#)
            .header("retry-after", "0"),
        Reply::sse_fixture("openai/text.sse"),
    ])
    .await;
    let outcome = agent(openai(&server)).run_to_completion("hi").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn openai_compatible_server_without_ids_or_usage_runs_the_loop() {
    // Ollama: no call ids, finish_reason "stop" with a tool call, no usage.
    let server = MockServer::start(vec![
        Reply::sse_fixture("openai/quirk_ollama.sse"),
        Reply::sse_fixture("openai/after_tools.sse"),
    ])
    .await;
    let outcome = agent(openai(&server)).run_to_completion("Oslo?").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let second = server.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_openai_pairing(&second);
    let id = second[2]["tool_calls"][0]["id"].as_str().unwrap();
    assert!(id.starts_with("call_"), "{id}");
}

fn decoded(format: WireFormat, fixture: &str) -> Vec<Result<StreamEvent, ProviderError>> {
    let bytes = std::fs::read(fixture_path(fixture)).unwrap();
    let whole = decode_recorded(format, &bytes, usize::MAX);
    // The same events whatever the chunking.
    for chunk in [1, 7, 64] {
        let events = decode_recorded(format, &bytes, chunk);
        assert_eq!(
            format!("{events:?}"),
            format!("{whole:?}"),
            "chunk size {chunk}"
        );
    }
    whole
}

#[test]
fn openai_quirks_decode() {
    use StreamEvent::*;
    // Ollama: no id, arguments whole, "stop" finish, no usage event.
    let events: Vec<StreamEvent> = decoded(WireFormat::OpenAiChat, "openai/quirk_ollama.sse")
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        [
            Model("qwen3:8b".into()),
            ToolCallStart {
                index: 0,
                id: String::new(),
                name: "get_weather".into()
            },
            ToolCallArgumentsDelta {
                index: 0,
                delta: "{\"city\":\"Oslo\"}".into()
            },
            Finished(StopReason::EndTurn),
        ]
    );
    // GLM: reasoning deltas, cached tokens, no [DONE] after the finish reason.
    let events: Vec<StreamEvent> = decoded(WireFormat::OpenAiChat, "openai/quirk_glm.sse")
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(events[0], Model("glm-4.6".into()));
    assert_eq!(events[1], ReasoningDelta("The user wants".into()));
    assert!(events.contains(&Usage(kinet_core::provider::Usage {
        input_tokens: 210,
        output_tokens: 33,
        cache_read_tokens: 128,
        cache_write_tokens: 0
    })));
    assert_eq!(events.last(), Some(&Finished(StopReason::ToolUse)));
    // llama.cpp: arguments as an object, "eos" finish.
    let events: Vec<StreamEvent> =
        decoded(WireFormat::OpenAiChat, "openai/quirk_object_arguments.sse")
            .into_iter()
            .map(Result::unwrap)
            .collect();
    let arguments = events
        .iter()
        .find(|e| matches!(e, ToolCallArgumentsDelta { .. }));
    assert_eq!(
        arguments,
        Some(&ToolCallArgumentsDelta {
            index: 0,
            delta: "{\"city\":\"Oslo\"}".into()
        })
    );
    assert_eq!(events.last(), Some(&Finished(StopReason::EndTurn)));
    // A stream cut off mid-answer is an error, not a short answer.
    let events = decoded(WireFormat::OpenAiChat, "openai/truncated.sse");
    assert!(
        matches!(events.last(), Some(Err(ProviderError::Stream(m))) if m.contains("ended before"))
    );
}

// ------------------------------------------------------------------ Anthropic

#[tokio::test]
async fn anthropic_text_turn() {
    let server = MockServer::start(vec![Reply::sse_fixture("anthropic/text.sse")]).await;
    let outcome = agent(anthropic(&server))
        .run_to_completion("Capital of France?")
        .await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(
        outcome.final_text().as_deref(),
        Some("The capital of France is Paris.")
    );
    assert_eq!(
        (outcome.usage.input_tokens, outcome.usage.output_tokens),
        (25, 9)
    );
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.headers["x-api-key"], "sk-ant-test");
    assert_eq!(request.headers["anthropic-version"], "2023-06-01");
    assert_eq!(request.body["system"][0]["text"], "You report the weather.");
    assert_eq!(request.body["max_tokens"], 8192);
    assert_eq!(request.body["messages"][0]["role"], "user");
    assert_eq!(request.body["tools"][0]["input_schema"]["type"], "object");
}

/// Where the `cache_control` breakpoints of an Anthropic request sit.
fn breakpoints(body: &serde_json::Value) -> Vec<String> {
    fn walk(value: &serde_json::Value, path: String, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                if map.contains_key("cache_control") {
                    out.push(path.clone());
                }
                for (key, value) in map {
                    walk(value, format!("{path}/{key}"), out);
                }
            }
            serde_json::Value::Array(items) => {
                for (index, value) in items.iter().enumerate() {
                    walk(value, format!("{path}/{index}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(body, String::new(), &mut out);
    // In path order, whatever order the JSON maps keep.
    out.sort();
    out
}

#[tokio::test]
async fn anthropic_cache_breakpoints_sit_on_system_tools_and_the_last_block() {
    let server = MockServer::start(vec![
        Reply::sse_fixture("anthropic/tools.sse"),
        Reply::sse_fixture("anthropic/after_tools.sse"),
    ])
    .await;
    let outcome = agent(anthropic(&server))
        .run_to_completion(weather_question())
        .await;
    assert_weather_outcome(&outcome);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let marks = breakpoints(&request.body);
        assert!(marks.len() <= 4, "{marks:?}");
        let tools = request.body["tools"].as_array().unwrap().len();
        let messages = request.body["messages"].as_array().unwrap();
        let last = messages.len() - 1;
        let blocks = messages[last]["content"].as_array().unwrap().len();
        assert_eq!(
            marks,
            vec![
                format!("/messages/{last}/content/{}", blocks - 1),
                "/system/0".to_owned(),
                format!("/tools/{}", tools - 1),
            ]
        );
    }
    // The breakpoint moved forward with the conversation; system and tools
    // are byte-identical between the turns (the cached prefix).
    assert_eq!(requests[0].body["system"], requests[1].body["system"]);
    assert_eq!(requests[0].body["tools"], requests[1].body["tools"]);
}

#[tokio::test]
async fn anthropic_parallel_tool_use_through_the_loop() {
    let server = MockServer::start(vec![
        Reply::sse_fixture("anthropic/tools.sse"),
        Reply::sse_fixture("anthropic/after_tools.sse"),
    ])
    .await;
    let outcome = agent(anthropic(&server))
        .run_to_completion(weather_question())
        .await;
    assert_weather_outcome(&outcome);
    assert_eq!(outcome.usage.cache_read_tokens, 2048 + 2148);
    assert_eq!(outcome.usage.cache_write_tokens, 100);

    let requests = server.requests();
    assert_eq!(
        requests[0].body["messages"][0]["content"][1]["source"],
        json!({"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUg=="})
    );
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 3, "user, assistant, user(tool results)");
    let assistant = &messages[1]["content"];
    assert_eq!(
        assistant[0],
        json!({"type": "text", "text": "I'll check both cities."})
    );
    assert_eq!(
        assistant[1],
        json!({"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {"city": "Oslo"}})
    );
    assert_anthropic_pairing(&messages);
    let results = &messages[2]["content"];
    assert_eq!(results[1]["content"][1]["type"], "image");
}

/// Every tool_use is answered by a tool_result in the next user message.
fn assert_anthropic_pairing(messages: &[Value]) {
    for (i, message) in messages.iter().enumerate() {
        let asked: Vec<&str> = message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| b["id"].as_str().unwrap())
            .collect();
        if asked.is_empty() {
            continue;
        }
        let next = &messages[i + 1];
        assert_eq!(next["role"], "user");
        let answered: Vec<&str> = next["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| b["tool_use_id"].as_str().unwrap())
            .collect();
        assert_eq!(answered, asked);
    }
}

#[tokio::test]
async fn anthropic_thinking_blocks_are_sent_back_with_their_signature() {
    let server = MockServer::start(vec![
        Reply::sse_fixture("anthropic/thinking.sse"),
        Reply::sse_fixture("anthropic/after_tools.sse"),
    ])
    .await;
    let outcome = agent(anthropic(&server)).run_to_completion("Oslo?").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    let messages = server.requests()[1].body["messages"].clone();
    assert_eq!(
        messages[1]["content"][0],
        json!({
            "type": "thinking",
            "thinking": "The user asks about Oslo. I should call the tool.",
            "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
        })
    );
    assert_eq!(messages[1]["content"][1]["type"], "tool_use");
}

#[tokio::test]
async fn anthropic_error_mid_stream_and_429_then_success() {
    let server =
        MockServer::start(vec![Reply::sse_fixture("anthropic/error_mid_stream.sse")]).await;
    let outcome = agent(anthropic(&server)).run_to_completion("hi").await;
    assert!(
        matches!(provider_error(&outcome), ProviderError::Server { status: 529, message } if message == "Overloaded")
    );
    assert_eq!(outcome.conversation.messages.len(), 1);

    let server = MockServer::start(vec![
        Reply::json(429, r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#)
            .header("retry-after", "0"),
        Reply::json(529, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
        Reply::sse_fixture("anthropic/text.sse"),
    ])
    .await;
    let outcome = agent(anthropic(&server)).run_to_completion("hi").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(server.requests().len(), 3);
}

// ---------------------------------------------------------- OpenAI Responses

#[tokio::test]
async fn responses_text_turn() {
    let server = MockServer::start(vec![Reply::sse_fixture("responses/text.sse")]).await;
    let outcome = agent(responses(&server))
        .run_to_completion("Capital of France?")
        .await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(
        outcome.final_text().as_deref(),
        Some("The capital of France is Paris.")
    );
    assert_eq!(
        (outcome.usage.input_tokens, outcome.usage.output_tokens),
        (37, 11)
    );
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(request.body["instructions"], "You report the weather.");
    assert_eq!(request.body["store"], false);
    assert_eq!(request.body["tools"][0]["name"], "get_weather");
    assert_eq!(
        request.body["input"][0],
        json!({"role": "user", "content": [{"type": "input_text", "text": "Capital of France?"}]})
    );
}

#[tokio::test]
async fn responses_function_calls_through_the_loop() {
    let server = MockServer::start(vec![
        Reply::sse_fixture("responses/tools.sse"),
        Reply::sse_fixture("responses/after_tools.sse"),
    ])
    .await;
    let outcome = agent(responses(&server))
        .run_to_completion(weather_question())
        .await;
    assert_weather_outcome(&outcome);
    assert_eq!(outcome.usage.cache_read_tokens, 256);
    let input = server.requests()[1].body["input"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(
        input[0]["content"][1],
        json!({"type": "input_image", "image_url": PNG_DATA_URL})
    );
    let calls: Vec<&str> = input
        .iter()
        .filter(|i| i["type"] == "function_call")
        .map(|i| i["call_id"].as_str().unwrap())
        .collect();
    let outputs: Vec<&str> = input
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(calls, ["call_oslo_9x", "call_lima_7y"]);
    assert_eq!(outputs, calls);
    assert_eq!(
        input[2]["arguments"], "{\"city\":\"Lima\"}",
        "arguments from the done event"
    );
}

#[tokio::test]
async fn responses_failure_mid_stream_and_429_then_success() {
    let server =
        MockServer::start(vec![Reply::sse_fixture("responses/error_mid_stream.sse")]).await;
    let outcome = agent(responses(&server)).run_to_completion("hi").await;
    assert!(
        provider_error(&outcome)
            .to_string()
            .contains("The model produced invalid content.")
    );

    let server = MockServer::start(vec![
        Reply::json(429, r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#)
            .header("retry-after-ms", "5"),
        Reply::sse_fixture("responses/text.sse"),
    ])
    .await;
    let outcome = agent(responses(&server)).run_to_completion("hi").await;
    assert!(outcome.stop.is_completed(), "{:?}", outcome.stop);
    assert_eq!(server.requests().len(), 2);
}

// ------------------------------------------------------- shared HTTP behaviour

#[tokio::test]
async fn errors_are_typed_and_only_transient_ones_retried() {
    let server = MockServer::start(vec![Reply::json(
        401,
        r#"{"error":{"message":"Incorrect API key provided: sk-test-***","type":"invalid_request_error","code":"invalid_api_key"}}"#,
    )])
    .await;
    let outcome = agent(openai(&server)).run_to_completion("hi").await;
    assert!(
        matches!(provider_error(&outcome), ProviderError::Auth(m) if m.contains("Incorrect API key"))
    );
    assert_eq!(server.requests().len(), 1, "no retry on 401");

    let server = MockServer::start(vec![Reply::json(
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 212000 tokens > 200000 maximum"}}"#,
    )])
    .await;
    let outcome = agent(anthropic(&server)).run_to_completion("hi").await;
    assert!(matches!(
        provider_error(&outcome),
        ProviderError::ContextLengthExceeded { .. }
    ));

    let server = MockServer::start(vec![
        Reply::json(503, "upstream unavailable"),
        Reply::json(502, "bad gateway"),
        Reply::json(500, r#"{"error":{"message":"internal"}}"#),
    ])
    .await;
    let outcome = agent(openai(&server)).run_to_completion("hi").await;
    assert!(matches!(
        provider_error(&outcome),
        ProviderError::Server { status: 500, .. }
    ));
    assert_eq!(server.requests().len(), 3, "first attempt + 2 retries");

    // Nothing listening: a transport error after the retries.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let provider = OpenAiProvider::new(
        OpenAiConfig::new()
            .base_url(format!("http://{closed}/v1"))
            .http(fast_http()),
    )
    .unwrap();
    let outcome = agent(provider).run_to_completion("hi").await;
    assert!(
        matches!(provider_error(&outcome), ProviderError::Transport(m) if m.contains(&closed.to_string()))
    );
}

#[tokio::test]
async fn a_silent_stream_hits_the_idle_timeout() {
    let server = MockServer::start(vec![
        Reply::sse_bytes(
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        )
        .then_stall(Duration::from_secs(30)),
    ])
    .await;
    let provider = OpenAiProvider::new(openai_config(&server).http(HttpSettings {
        idle_timeout: Duration::from_millis(300),
        ..fast_http()
    }))
    .unwrap();
    let started = Instant::now();
    let outcome = agent(provider).run_to_completion("hi").await;
    assert!(matches!(
        provider_error(&outcome),
        ProviderError::IdleTimeout(_)
    ));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn cancelling_a_run_aborts_the_http_request() {
    let server = MockServer::start(vec![
        Reply::sse_bytes(
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Thinking\"}}]}\n\n",
        )
        .then_stall(Duration::from_secs(30)),
    ])
    .await;
    let run = agent(openai(&server)).run("hi");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancelled = Instant::now();
    run.cancel();
    let outcome = run.finish().await;
    assert!(matches!(outcome.stop, RunStop::Cancelled));
    assert!(cancelled.elapsed() < Duration::from_secs(1));
    assert_eq!(outcome.final_text().as_deref(), Some("Thinking"));
    // The server sees the client hang up.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.client_hangups() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.client_hangups(), 1);
}

// ------------------------------------------------------------------ typed output

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct CityTemp {
    city: String,
    temperature_c: i64,
}

fn chat_sse(text: &str) -> Vec<u8> {
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": text}}]});
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    format!("data: {chunk}\n\ndata: {end}\n\ndata: [DONE]\n\n").into_bytes()
}

#[tokio::test]
async fn typed_output_uses_response_format_and_asks_again_once() {
    // No tools: the structured call is the whole run. The first answer does
    // not fit the schema; the second does.
    let server = MockServer::start(vec![
        Reply::sse_bytes(&chat_sse(r#"{"city": "Paris"}"#)),
        Reply::sse_bytes(&chat_sse(r#"{"city": "Paris", "temperature_c": 21}"#)),
    ])
    .await;
    let agent = Agent::builder(openai(&server)).model("m").build();
    let typed = agent
        .run_typed::<CityTemp>("It is 21 C in Paris.")
        .await
        .unwrap();
    assert_eq!(
        (typed.value.city.as_str(), typed.value.temperature_c),
        ("Paris", 21)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let format = &requests[0].body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["strict"], true);
    assert_eq!(format["json_schema"]["name"], "CityTemp");
    assert_eq!(
        format["json_schema"]["schema"]["required"],
        json!(["city", "temperature_c"])
    );
    // The retry tells the model what was wrong.
    let retry = requests[1].body["messages"].as_array().unwrap();
    let last = retry.last().unwrap()["content"].as_str().unwrap();
    assert!(
        last.contains("does not match the schema") && last.contains("temperature_c"),
        "{last}"
    );
}

#[tokio::test]
async fn typed_output_gives_up_after_one_retry() {
    let server = MockServer::start(vec![
        Reply::sse_bytes(&chat_sse("not json")),
        Reply::sse_bytes(&chat_sse("still not json")),
    ])
    .await;
    let agent = Agent::builder(openai(&server)).model("m").build();
    match agent.run_typed::<CityTemp>("Paris?").await {
        Err(kinet_core::event::TypedError::Invalid { message, outcome }) => {
            assert!(message.contains("still not json"), "{message}");
            assert_eq!(outcome.turns, 2);
        }
        other => panic!("{other:?}"),
    }
}

/// One SSE event named by its payload's `type`.
fn typed_event(event: &Value) -> String {
    format!(
        "event: {}\ndata: {event}\n\n",
        event["type"].as_str().unwrap()
    )
}

#[tokio::test]
async fn typed_output_uses_text_format_on_responses_and_a_forced_tool_on_anthropic() {
    let responses_sse = [
        json!({"type": "response.output_text.delta", "item_id": "m1", "output_index": 0, "content_index": 0, "delta": "{\"city\":\"Oslo\",\"temperature_c\":3}"}),
        json!({"type": "response.completed", "response": {"id": "r1", "status": "completed", "output": [], "usage": {"input_tokens": 5, "output_tokens": 7}}}),
    ]
    .iter()
    .map(typed_event)
    .collect::<String>();
    let server = MockServer::start(vec![Reply::sse_bytes(responses_sse.as_bytes())]).await;
    let typed = Agent::builder(responses(&server))
        .model("m")
        .build()
        .run_typed::<CityTemp>("Oslo?")
        .await
        .unwrap();
    assert_eq!(typed.value.city, "Oslo");
    let format = &server.requests()[0].body["text"]["format"];
    assert_eq!(
        (format["type"].as_str(), format["strict"].as_bool()),
        (Some("json_schema"), Some(true))
    );

    let anthropic_sse = [
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 9, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "CityTemp", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"city\":\"Rome\","}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "\"temperature_c\":18}"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
        json!({"type": "message_stop"}),
    ]
    .iter()
    .map(typed_event)
    .collect::<String>();
    let server = MockServer::start(vec![Reply::sse_bytes(anthropic_sse.as_bytes())]).await;
    let typed = Agent::builder(anthropic(&server))
        .model("m")
        .build()
        .run_typed::<CityTemp>("Rome?")
        .await
        .unwrap();
    assert_eq!(
        (typed.value.city.as_str(), typed.value.temperature_c),
        ("Rome", 18)
    );
    let body = &server.requests()[0].body;
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "CityTemp"})
    );
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.last().unwrap()["name"], "CityTemp");
}

// ------------------------------------------------------------------ history repair

/// A history as a crashed process or a host's editing could leave it: an
/// unanswered call, an orphan result, a reused id.
fn broken_history() -> Conversation {
    use kinet_core::message::ToolCall;
    let call = |id: &str, city: &str| ToolCall {
        id: id.into(),
        name: "get_weather".into(),
        arguments: json!({"city": city}).to_string(),
    };
    let result = |id: &str| kinet_core::Message::Tool {
        tool_call_id: id.into(),
        name: "get_weather".into(),
        content: vec![ContentPart::Text {
            text: "Sunny".into(),
        }],
        is_error: false,
    };
    vec![
        kinet_core::Message::user("Weather in Paris and Oslo?"),
        kinet_core::Message::Assistant {
            content: Vec::new(),
            tool_calls: vec![call("c1", "Paris"), call("c2", "Oslo")],
            provider_state: None,
        },
        result("c1"),
        kinet_core::Message::user("And Rome?"),
        result("ghost"),
        kinet_core::Message::Assistant {
            content: Vec::new(),
            tool_calls: vec![call("c1", "Rome")],
            provider_state: None,
        },
        result("c1"),
        kinet_core::Message::user("Thanks. Summarise."),
    ]
    .into()
}

/// The (call ids, result ids) a request body carries, in order, per format.
fn pairing(format: WireFormat, body: &Value) -> (Vec<String>, Vec<String>) {
    let (mut calls, mut results) = (Vec::new(), Vec::new());
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match format {
        WireFormat::OpenAiChat => {
            for message in body["messages"].as_array().unwrap() {
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    calls.push(text(&call["id"]));
                }
                if message["role"] == "tool" {
                    results.push(text(&message["tool_call_id"]));
                }
            }
        }
        WireFormat::Anthropic => {
            for message in body["messages"].as_array().unwrap() {
                for block in message["content"].as_array().into_iter().flatten() {
                    match block["type"].as_str() {
                        Some("tool_use") => calls.push(text(&block["id"])),
                        Some("tool_result") => results.push(text(&block["tool_use_id"])),
                        _ => {}
                    }
                }
            }
        }
        _ => {
            for item in body["input"].as_array().unwrap() {
                match item["type"].as_str() {
                    Some("function_call") => calls.push(text(&item["call_id"])),
                    Some("function_call_output") => results.push(text(&item["call_id"])),
                    _ => {}
                }
            }
        }
    }
    (calls, results)
}

#[tokio::test]
async fn a_broken_history_is_sent_in_a_valid_shape_in_every_format() {
    for (format, fixture) in [
        (WireFormat::OpenAiChat, "openai/text.sse"),
        (WireFormat::Anthropic, "anthropic/text.sse"),
        (WireFormat::OpenAiResponses, "responses/text.sse"),
    ] {
        let server = MockServer::start(vec![Reply::sse_fixture(fixture)]).await;
        let agent = match format {
            WireFormat::OpenAiChat => agent(openai(&server)),
            WireFormat::Anthropic => agent(anthropic(&server)),
            _ => agent(responses(&server)),
        };
        let mut run = agent.run(broken_history());
        let mut repaired = Vec::new();
        while let Some(event) = futures::StreamExt::next(&mut run).await {
            if let kinet_core::AgentEvent::HistoryRepaired { repairs } = event {
                repaired = repairs;
            }
        }
        let outcome = run.finish().await;
        assert!(
            outcome.stop.is_completed(),
            "{format:?}: {:?}",
            outcome.stop
        );
        assert_eq!(repaired.len(), 3, "{format:?}: {repaired:?}");
        let body = &server.requests()[0].body;
        let (calls, results) = pairing(format, body);
        // Every call answered, nothing answered twice or without a call,
        // ids unique, each result after its call.
        let unique: std::collections::BTreeSet<_> = calls.iter().collect();
        assert_eq!(unique.len(), calls.len(), "{format:?}: {calls:?}");
        let mut sorted_calls = calls.clone();
        let mut sorted_results = results.clone();
        sorted_calls.sort();
        sorted_results.sort();
        assert_eq!(
            sorted_calls, sorted_results,
            "{format:?}: {calls:?} vs {results:?}"
        );
        assert_eq!(calls.len(), 3, "{format:?}: {calls:?}");
        assert!(!results.contains(&"ghost".to_owned()), "{format:?}");
    }
}
