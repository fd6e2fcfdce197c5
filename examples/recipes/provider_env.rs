//! Recipe: a provider from the environment, or one configured in code.
//! `KINET_BASE_URL=http://127.0.0.1:8080/v1 cargo run --example recipe_provider_env`
#![allow(clippy::print_stdout, missing_docs)]

use std::sync::Arc;

use kinet::core::provider::{AnthropicConfig, AnthropicProvider, OpenAiConfig, OpenAiProvider};
use kinet::{Agent, Provider};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // KINET_PROVIDER (openai | responses | anthropic), KINET_BASE_URL,
    // KINET_MODEL, KINET_API_KEY or OPENAI_API_KEY / ANTHROPIC_API_KEY.
    let (provider, model): (Arc<dyn Provider>, String) = match kinet::core::provider::from_env()? {
        Some(chosen) => {
            println!("using {}", chosen.label);
            (chosen.provider, chosen.model)
        }
        // The same in code: any OpenAI-compatible server (llama.cpp,
        // Ollama, vLLM, GLM) by its base URL, or Anthropic with a key.
        None if std::env::var_os("USE_ANTHROPIC").is_some() => (
            Arc::new(AnthropicProvider::new(
                AnthropicConfig::new().api_key("sk-ant-..."),
            )?),
            "claude-sonnet-4-5".to_owned(),
        ),
        None => (
            Arc::new(OpenAiProvider::new(
                OpenAiConfig::new().base_url("http://127.0.0.1:8080/v1"),
            )?),
            "local".to_owned(),
        ),
    };
    // Transport errors, 429 and 5xx are retried; a context-length error is
    // answered by compacting the conversation and trying again.
    let agent = Agent::builder(provider)
        .model(model)
        .tools(kinet::tools::default_tools())
        .build();
    let outcome = agent.run_to_completion("Say hello in five words.").await;
    match outcome.final_text() {
        Some(text) => println!("{text}"),
        None => println!("no answer: {}", outcome.stop),
    }
    Ok(())
}
