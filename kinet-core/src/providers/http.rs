//! HTTP machinery shared by the providers: retries with jittered backoff,
//! error mapping, and turning an SSE response into a `ProviderStream`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::sse::{SseEvent, SseParser};
use crate::backend::ProviderStream;
use crate::data::model::{ProviderError, StreamEvent};

/// Retry and timeout settings of an HTTP provider.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSettings {
    /// Retries after the first attempt for 408/409/429/5xx/529 and any
    /// transport failure before the response headers (including a pooled
    /// connection the server closed). A stream that breaks after content
    /// reached the host is reported, never replayed. Default 4.
    pub max_retries: u32,
    /// The first backoff; doubled per retry, with jitter. Default 500 ms.
    pub initial_backoff: Duration,
    /// The longest backoff. Default 30 s.
    pub max_backoff: Duration,
    /// A `retry-after` longer than this is not waited for: the error is
    /// returned at once. Default 60 s.
    pub max_retry_after: Duration,
    /// The stream fails when no bytes arrive for this long. Default 120 s.
    pub idle_timeout: Duration,
    /// Connection timeout. Default 10 s.
    pub connect_timeout: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            max_retries: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// An HTTP client for streaming model APIs: retries, backoff, idle timeout
/// (see [`HttpSettings`] for the defaults).
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: reqwest::Client,
    settings: HttpSettings,
}

impl HttpClient {
    /// A client with these settings.
    pub fn new(settings: HttpSettings) -> Result<Self, ProviderError> {
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .build()
            .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self { client, settings })
    }

    /// The settings.
    pub fn settings(&self) -> &HttpSettings {
        &self.settings
    }

    /// Encodes `body`, POSTs it (with retries) and streams the SSE answer
    /// through `decoder`: what every provider's `stream` does.
    pub async fn stream_sse<D: SseDecoder>(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &serde_json::Value,
        decoder: D,
    ) -> Result<ProviderStream, ProviderError> {
        let body = serde_json::to_vec(body)
            .map_err(|e| ProviderError::Stream(format!("cannot encode the request: {e}")))?;
        let response = self.post(url, headers, body).await?;
        Ok(sse_stream(response, decoder, self.settings.idle_timeout))
    }

    /// POSTs a JSON body, retrying as the settings say, and returns the
    /// successful response (its body not yet read).
    async fn post(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: Vec<u8>,
    ) -> Result<reqwest::Response, ProviderError> {
        let mut attempt = 0;
        loop {
            let sent = self
                .client
                .post(url)
                .headers(headers.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(reqwest::header::ACCEPT, "text/event-stream")
                .body(body.clone())
                .send()
                .await;
            let (error, retry_after) = match sent {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => {
                    let status = response.status().as_u16();
                    let retry_after = retry_after(response.headers());
                    let text = read_error_body(response).await;
                    let error = error_from_status(status, &text, retry_after);
                    if !retryable_status(status) {
                        return Err(error);
                    }
                    (error, retry_after)
                }
                // Anything that failed before the response headers (a refused
                // or reset connection, a pooled keep-alive connection the
                // server had closed, a timeout) is retried, as the official
                // SDKs do; only a request that could not be built is not.
                Err(error) if !error.is_builder() => (
                    ProviderError::Transport(format!("{url}: {}", error_chain(&error))),
                    None,
                ),
                Err(error) => {
                    return Err(ProviderError::Transport(format!(
                        "{url}: {}",
                        error_chain(&error)
                    )));
                }
            };
            if attempt >= self.settings.max_retries {
                return Err(error);
            }
            let delay = match retry_after {
                Some(wait) if wait > self.settings.max_retry_after => return Err(error),
                Some(wait) => wait,
                None => self.backoff(attempt),
            };
            tracing::debug!(%url, attempt, ?delay, %error, "retrying model request");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    /// Exponential backoff with jitter: a random delay between half and all
    /// of `initial * 2^attempt`, capped.
    fn backoff(&self, attempt: u32) -> Duration {
        let base = self
            .settings
            .initial_backoff
            .saturating_mul(1_u32 << attempt.min(16))
            .min(self.settings.max_backoff);
        base.mul_f64(0.5 + crate::random::unit() / 2.0)
    }
}

fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Statuses worth another attempt.
fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// `retry-after-ms`, or `retry-after` in seconds (HTTP dates are ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    number("retry-after-ms")
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .or_else(|| number("retry-after").map(Duration::from_secs_f64))
}

async fn read_error_body(response: reqwest::Response) -> String {
    const LIMIT: usize = 64 * 1024;
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        body.extend_from_slice(&chunk);
        if body.len() > LIMIT {
            body.truncate(LIMIT);
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// The message and code of an error body in the OpenAI
/// (`{"error": {"message", "code", "type"}}`) or Anthropic
/// (`{"type": "error", "error": {"type", "message"}}`) shape.
pub fn error_details(body: &str) -> (String, String) {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let message = error
        .and_then(|e| e.get("message").or(Some(e)))
        .and_then(|m| m.as_str())
        .map(str::to_owned)
        .or_else(|| {
            parsed
                .as_ref()
                .and_then(|v| v.get("message"))
                .and_then(|m| m.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| {
            let trimmed = body.trim();
            if trimmed.is_empty() {
                "(empty body)".to_owned()
            } else {
                trimmed.chars().take(2000).collect()
            }
        });
    let code = error
        .and_then(|e| e.get("code").or_else(|| e.get("type")))
        .or_else(|| parsed.as_ref().and_then(|v| v.get("code")))
        .and_then(|c| c.as_str())
        .unwrap_or_default()
        .to_owned();
    (message, code)
}

/// Maps an HTTP error status and body to a typed error.
pub fn error_from_status(status: u16, body: &str, retry_after: Option<Duration>) -> ProviderError {
    let (message, _) = error_details(body);
    match status {
        401 | 403 => ProviderError::Auth(format!("{message} (HTTP {status})")),
        429 => ProviderError::RateLimited {
            message,
            retry_after,
        },
        _ => match super::overflow::overflow(body) {
            Some(overflow) => overflow,
            None if (400..500).contains(&status) => ProviderError::BadRequest { status, message },
            None => ProviderError::Server { status, message },
        },
    }
}

/// Maps an error reported inside a stream (an `error` event or chunk).
pub fn error_from_stream(message: String, code: &str) -> ProviderError {
    match code {
        "rate_limit_error" | "rate_limit_exceeded" => ProviderError::RateLimited {
            message,
            retry_after: None,
        },
        "overloaded_error" => ProviderError::Server {
            status: 529,
            message,
        },
        "authentication_error" | "invalid_api_key" => ProviderError::Auth(message),
        _ => match super::overflow::overflow_in_stream(&message, code) {
            Some(overflow) => overflow,
            None if code.is_empty() => ProviderError::Stream(message),
            None => ProviderError::Stream(format!("{message} ({code})")),
        },
    }
}

/// Adds a header, reporting an invalid name or value.
pub fn insert_header(
    headers: &mut HeaderMap,
    name: &str,
    value: &str,
) -> Result<(), ProviderError> {
    let header_name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| ProviderError::Config(format!("invalid header name `{name}`")))?;
    let mut header_value = HeaderValue::from_str(value)
        .map_err(|_| ProviderError::Config(format!("invalid value for header `{name}`")))?;
    if name.eq_ignore_ascii_case("authorization") || name.eq_ignore_ascii_case("x-api-key") {
        header_value.set_sensitive(true);
    }
    headers.insert(header_name, header_value);
    Ok(())
}

/// Adds temperature, top_p and the pass-through fields to a request body.
pub fn insert_sampling(
    body: &mut serde_json::Map<String, serde_json::Value>,
    params: &crate::data::model::GenerationParams,
) {
    if let Some(t) = params.temperature {
        body.insert("temperature".into(), serde_json::json!(t));
    }
    if let Some(p) = params.top_p {
        body.insert("top_p".into(), serde_json::json!(p));
    }
    for (key, value) in &params.extra {
        body.insert(key.clone(), value.clone());
    }
}

/// What a decoder says after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading.
    Continue,
    /// The response is complete: stop reading and close the stream.
    Done,
}

/// Turns one provider's SSE events into stream events.
pub trait SseDecoder: Send + 'static {
    /// Handles one event.
    fn decode(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<Result<StreamEvent, ProviderError>>,
    ) -> Flow;
    /// The connection closed before `Flow::Done`: finish or report an error.
    fn end(&mut self, out: &mut VecDeque<Result<StreamEvent, ProviderError>>);
}

/// Parses the JSON of an event whose payload names its own `type` (the
/// Anthropic and Responses streams), falling back to the SSE `event:` field.
/// Returns the payload and that type.
pub fn typed_event(event: &SseEvent) -> Result<(serde_json::Value, String), ProviderError> {
    let data: serde_json::Value = serde_json::from_str(&event.data).map_err(|error| {
        ProviderError::Stream(format!("unparseable `{}` event ({error})", event.event))
    })?;
    let kind = data
        .get("type")
        .and_then(serde_json::Value::as_str)
        .unwrap_or(&event.event)
        .to_owned();
    Ok((data, kind))
}

struct SseState<D> {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Vec<u8>>> + Send>>,
    parser: SseParser,
    decoder: D,
    pending: VecDeque<Result<StreamEvent, ProviderError>>,
    done: bool,
    idle: Duration,
}

/// Streams a successful SSE response through `decoder`. Ends after the
/// decoder says `Done`, after the first error, or when no bytes come for the
/// idle timeout. Dropping the stream closes the connection.
fn sse_stream<D: SseDecoder>(
    response: reqwest::Response,
    decoder: D,
    idle: Duration,
) -> ProviderStream {
    let body = response
        .bytes_stream()
        .map(|chunk| chunk.map(|b| b.to_vec()));
    let state = SseState {
        body: Box::pin(body),
        parser: SseParser::new(),
        decoder,
        pending: VecDeque::new(),
        done: false,
        idle,
    };
    Box::pin(futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(item) = state.pending.pop_front() {
                if item.is_err() {
                    state.done = true;
                    state.pending.clear();
                }
                return Some((item, state));
            }
            if state.done {
                return None;
            }
            let next = tokio::time::timeout(state.idle, state.body.next()).await;
            let SseState {
                parser,
                decoder,
                pending,
                done,
                idle,
                ..
            } = &mut state;
            match next {
                Err(_) => {
                    pending.push_back(Err(ProviderError::IdleTimeout(*idle)));
                }
                Ok(None) => {
                    parser.finish(&mut |event| {
                        if !*done && decoder.decode(event, pending) == Flow::Done {
                            *done = true;
                        }
                    });
                    if !*done {
                        decoder.end(pending);
                    }
                    *done = true;
                }
                Ok(Some(Err(error))) => {
                    pending.push_back(Err(ProviderError::Stream(format!(
                        "the connection broke: {}",
                        error_chain(&error)
                    ))));
                }
                Ok(Some(Ok(bytes))) => {
                    parser.feed(&bytes, &mut |event| {
                        if !*done && decoder.decode(event, pending) == Flow::Done {
                            *done = true;
                        }
                    });
                }
            }
        }
    }))
}

/// Runs a decoder over recorded bytes (benchmarks and tests): returns every
/// stream event, fed `chunk` bytes at a time.
pub fn decode_bytes<D: SseDecoder>(
    mut decoder: D,
    bytes: &[u8],
    chunk: usize,
) -> Vec<Result<StreamEvent, ProviderError>> {
    let mut parser = SseParser::new();
    let mut out = VecDeque::new();
    let mut done = false;
    for piece in bytes.chunks(chunk.max(1)) {
        parser.feed(piece, &mut |event| {
            if !done && decoder.decode(event, &mut out) == Flow::Done {
                done = true;
            }
        });
    }
    parser.finish(&mut |event| {
        if !done && decoder.decode(event, &mut out) == Flow::Done {
            done = true;
        }
    });
    if !done {
        decoder.end(&mut out);
    }
    out.into()
}

/// The model a request names, or the provider's default when it names
/// none.
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) fn model_or<'a>(requested: &'a str, default: &'a str) -> &'a str {
    if requested.is_empty() {
        default
    } else {
        requested
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_typed_errors() {
        let openai = r#"{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            error_from_status(400, openai, None),
            ProviderError::ContextLengthExceeded { message: m, limit: Some(8192), .. } if m.contains("8192")
        ));
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        assert!(matches!(
            error_from_status(400, anthropic, None),
            ProviderError::ContextLengthExceeded { .. }
        ));
        assert!(matches!(
            error_from_status(401, r#"{"error":{"message":"Incorrect API key provided"}}"#, None),
            ProviderError::Auth(m) if m.contains("Incorrect API key")
        ));
        assert!(matches!(
            error_from_status(400, r#"{"error":{"message":"Unknown parameter: 'foo'"}}"#, None),
            ProviderError::BadRequest { status: 400, message } if message == "Unknown parameter: 'foo'"
        ));
        assert!(matches!(
            error_from_status(503, "upstream connect error", None),
            ProviderError::Server { status: 503, message } if message == "upstream connect error"
        ));
        assert!(matches!(
            error_from_status(429, "{}", Some(Duration::from_secs(2))),
            ProviderError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(2)
        ));
    }

    #[test]
    fn retry_after_headers_are_read() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        headers.clear();
        headers.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn backoff_doubles_with_jitter_and_caps() {
        let client = HttpClient::new(HttpSettings::default()).unwrap();
        for attempt in 0..8 {
            let base = Duration::from_millis(500) * (1 << attempt);
            let base = base.min(Duration::from_secs(30));
            let delay = client.backoff(attempt);
            assert!(delay >= base / 2 && delay <= base, "{attempt}: {delay:?}");
        }
    }
}
