//! Model providers over HTTP: OpenAI Chat Completions and compatible
//! servers, OpenAI Responses, Anthropic Messages.
//!
//! All stream server-sent events, retry 408/409/429/5xx/529 and any
//! transport failure before the response headers (a closed keep-alive
//! connection included) with jittered exponential backoff (honouring
//! `retry-after`), recognise context overflow in the error bodies of
//! OpenAI, Anthropic, llama.cpp, vLLM, Ollama, DeepSeek and GLM (with the
//! window size where the server states it), fail a stream that stays silent past an idle timeout, and
//! abort the HTTP request when the stream is dropped (which is how a run's
//! cancellation reaches them).
//!
//! ```no_run
//! use kinet_core::Agent;
//! use kinet_core::provider::{OpenAiConfig, OpenAiProvider};
//!
//! # fn main() -> Result<(), kinet_core::provider::ProviderError> {
//! let glm = OpenAiProvider::new(
//!     OpenAiConfig::new()
//!         .base_url("https://open.bigmodel.cn/api/paas/v4")
//!         .api_key(std::env::var("ZHIPU_API_KEY").unwrap_or_default()),
//! )?;
//! let agent = Agent::builder(glm).model("glm-4.6").build();
//! # let _ = agent;
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "anthropic")]
mod anthropic;
mod from_env;
mod http;
pub mod kit;
#[cfg(feature = "openai")]
mod openai;
mod overflow;
#[cfg(feature = "openai")]
mod responses;
mod sse;

#[cfg(feature = "anthropic")]
pub use anthropic::{ANTHROPIC_VERSION, AnthropicConfig, AnthropicProvider};
pub use from_env::{EnvProvider, from_env, from_env_with};
pub use http::HttpSettings;
#[cfg(feature = "openai")]
pub use openai::{MaxTokensField, OpenAiConfig, OpenAiProvider};
#[cfg(feature = "openai")]
pub use responses::OpenAiResponsesProvider;

/// The wire formats a recorded stream can be decoded as.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// OpenAI Chat Completions chunks.
    #[cfg(feature = "openai")]
    OpenAiChat,
    /// OpenAI Responses events.
    #[cfg(feature = "openai")]
    OpenAiResponses,
    /// Anthropic Messages events.
    #[cfg(feature = "anthropic")]
    Anthropic,
}

/// Decodes a recorded SSE body the way the provider would, `chunk` bytes at
/// a time (for benchmarks and fixture checks).
#[doc(hidden)]
pub fn decode_recorded(
    format: WireFormat,
    bytes: &[u8],
    chunk: usize,
) -> Vec<Result<crate::data::model::StreamEvent, crate::data::model::ProviderError>> {
    // With the `http` feature alone there is no wire format to decode.
    let _ = (bytes, chunk);
    match format {
        #[cfg(feature = "openai")]
        WireFormat::OpenAiChat => http::decode_bytes(openai::ChatDecoder::default(), bytes, chunk),
        #[cfg(feature = "openai")]
        WireFormat::OpenAiResponses => {
            http::decode_bytes(responses::ResponsesDecoder::default(), bytes, chunk)
        }
        #[cfg(feature = "anthropic")]
        WireFormat::Anthropic => {
            http::decode_bytes(anthropic::MessagesDecoder::default(), bytes, chunk)
        }
    }
}
