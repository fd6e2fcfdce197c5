//! The provider kit: what the shipped providers are built from, public so
//! that a provider for another API (Gemini, Bedrock, an in-house gateway)
//! can live outside kinet-core and behave the same way.
//!
//! - [`HttpClient`]: POSTs a JSON body, retries 408/409/429/5xx/529 and
//!   connection errors with jittered exponential backoff (honouring
//!   `retry-after` / `retry-after-ms`) before the first byte, and streams
//!   the server-sent events through your [`SseDecoder`], failing a stream
//!   that stays silent past the idle timeout. Dropping the stream aborts
//!   the request.
//! - [`SseParser`]: the event-stream framing alone.
//! - Helpers for error bodies and request fields.
//!
//! ```
//! use std::collections::VecDeque;
//! use kinet_core::provider::kit::{Flow, SseDecoder, SseEvent};
//! use kinet_core::provider::{ProviderError, StopReason, StreamEvent};
//!
//! /// Decodes `data: {"text": "..."}` events until `data: [DONE]`.
//! struct TextOnly;
//!
//! impl SseDecoder for TextOnly {
//!     fn decode(&mut self, event: SseEvent, out: &mut VecDeque<Result<StreamEvent, ProviderError>>) -> Flow {
//!         if event.data == "[DONE]" {
//!             out.push_back(Ok(StreamEvent::Finished(StopReason::EndTurn)));
//!             return Flow::Done;
//!         }
//!         match serde_json::from_str::<serde_json::Value>(&event.data) {
//!             Ok(value) => out.push_back(Ok(StreamEvent::TextDelta(
//!                 value["text"].as_str().unwrap_or_default().to_owned(),
//!             ))),
//!             Err(e) => out.push_back(Err(ProviderError::Stream(e.to_string()))),
//!         }
//!         Flow::Continue
//!     }
//!
//!     fn end(&mut self, out: &mut VecDeque<Result<StreamEvent, ProviderError>>) {
//!         out.push_back(Err(ProviderError::Stream("the stream ended early".into())));
//!     }
//! }
//! ```

pub use super::http::{
    Flow, HttpClient, HttpSettings, SseDecoder, decode_bytes, error_details, error_from_status,
    error_from_stream, insert_header, insert_sampling, typed_event,
};
pub use super::sse::{SseEvent, SseParser};
pub use reqwest::header::{HeaderMap, HeaderValue};
