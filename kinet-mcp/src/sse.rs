//! The legacy HTTP+SSE client transport (MCP protocol 2024-11-05), which
//! hosted servers still offer: a GET opens an event stream whose first
//! `endpoint` event names the URL to POST messages to; the server's
//! messages arrive as `message` events on the stream.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use kinet_core::provider::kit::SseParser;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::{mpsc, oneshot};

/// A failure of the SSE transport, in words for the user.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SseError(String);

/// A connected legacy SSE transport.
pub(crate) struct SseTransport {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    headers: HeaderMap,
    incoming: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: tokio::task::JoinHandle<()>,
    /// OAuth: each POST carries the current token.
    auth: Option<std::sync::Arc<crate::oauth::Authorizer>>,
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The request headers, checked.
pub(crate) fn header_map(headers: &BTreeMap<String, String>) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("invalid header name `{name}`"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("invalid value for header `{name}`"))?;
        map.insert(header, value);
    }
    Ok(map)
}

/// Notes an OAuth challenge: a 401, or a 403 with `WWW-Authenticate`
/// (insufficient scope). Whether it was one.
fn note_refusal(auth: Option<&crate::oauth::Authorizer>, response: &reqwest::Response) -> bool {
    let challenge = response.headers().get(reqwest::header::WWW_AUTHENTICATE);
    let refused = response.status() == reqwest::StatusCode::UNAUTHORIZED
        || (response.status() == reqwest::StatusCode::FORBIDDEN && challenge.is_some());
    match auth {
        Some(auth) if refused => {
            auth.note_challenge(challenge.and_then(|v| v.to_str().ok()).unwrap_or(""));
            true
        }
        _ => false,
    }
}

/// What a failed HTTP status means for the user.
pub(crate) fn status_hint(status: reqwest::StatusCode) -> &'static str {
    match status.as_u16() {
        401 | 403 => ": check the token or headers configured for this server",
        404 => ": check the URL",
        _ => "",
    }
}

impl SseTransport {
    /// Opens the event stream at `url` and waits (up to `timeout`) for the
    /// endpoint to POST to, which must be on the same origin: a server
    /// cannot send the configured headers (tokens) elsewhere.
    pub(crate) async fn connect(
        url: &str,
        headers: &BTreeMap<String, String>,
        timeout: Duration,
        auth: Option<std::sync::Arc<crate::oauth::Authorizer>>,
    ) -> Result<Self, String> {
        let headers = header_map(headers)?;
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("invalid URL `{url}`: {e}"))?;
        // No redirects: the configured headers (tokens) go to the configured
        // origin only, and the endpoint must be on it.
        let client = reqwest::Client::builder()
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        let response = tokio::time::timeout(
            timeout,
            client
                .get(parsed.clone())
                .headers(headers.clone())
                .header(ACCEPT, "text/event-stream")
                .send(),
        )
        .await
        .map_err(|_| format!("{url} did not answer within {} s", timeout.as_secs()))?
        .map_err(|e| format!("cannot reach {url}: {}", crate::errors::error_chain(&e)))?;
        let status = response.status();
        if note_refusal(auth.as_deref(), &response) {
            return Err(format!(
                "{status} from {url}: the server wants an OAuth authorization"
            ));
        }
        if !status.is_success() {
            return Err(format!("{status} from {url}{}", status_hint(status)));
        }
        let kind = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if !kind.starts_with("text/event-stream") {
            return Err(format!(
                "{url} answered with `{kind}`, not an event stream: is it a streamable HTTP server? Then use \"type\": \"http\""
            ));
        }
        let base = parsed.clone();
        let (endpoint_sender, endpoint) = oneshot::channel::<String>();
        let (messages, incoming) = mpsc::channel(64);
        let reader = tokio::spawn(read_events(response, endpoint_sender, messages));
        let endpoint = match tokio::time::timeout(timeout, endpoint).await {
            Ok(Ok(endpoint)) => endpoint,
            Ok(Err(_)) => {
                return Err(format!(
                    "{url} closed its event stream before naming an endpoint"
                ));
            }
            Err(_) => {
                reader.abort();
                return Err(format!(
                    "{url} sent no `endpoint` event within {} s",
                    timeout.as_secs()
                ));
            }
        };
        let endpoint = match base.join(&endpoint) {
            Ok(endpoint) => endpoint,
            Err(error) => {
                reader.abort();
                return Err(format!(
                    "{url} named an invalid endpoint `{endpoint}`: {error}"
                ));
            }
        };
        if endpoint.origin() != base.origin() {
            reader.abort();
            return Err(format!(
                "{url} named an endpoint on another origin ({endpoint}); refused so the configured headers stay with {}",
                base.origin().ascii_serialization()
            ));
        }
        Ok(Self {
            client,
            endpoint,
            headers,
            incoming,
            reader,
            auth,
        })
    }
}

/// The largest event accepted.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Reads the event stream: the first `endpoint` event to `endpoint`, each
/// `message` event (parsed) to `messages`, until the stream ends.
async fn read_events(
    response: reqwest::Response,
    endpoint: oneshot::Sender<String>,
    messages: mpsc::Sender<ServerJsonRpcMessage>,
) {
    let mut endpoint = Some(endpoint);
    let mut parser = SseParser::new();
    let mut stream = response.bytes_stream();
    // Bytes since the last complete event: a server streaming one endless
    // line would otherwise grow the parser's buffer without bound.
    let mut pending = 0usize;
    while let Some(Ok(chunk)) = stream.next().await {
        let mut events = Vec::new();
        parser.feed(&chunk, &mut |event| events.push(event));
        pending = if events.is_empty() {
            pending + chunk.len()
        } else {
            0
        };
        if pending > MAX_EVENT_BYTES {
            tracing::warn!("an SSE event grew past {MAX_EVENT_BYTES} bytes; the stream is closed");
            return;
        }
        for event in events {
            match event.event.as_str() {
                "endpoint" => {
                    if let Some(sender) = endpoint.take() {
                        let _ = sender.send(event.data.trim().to_owned());
                    }
                }
                "" | "message" => match serde_json::from_str(&event.data) {
                    Ok(message) => {
                        if messages.send(message).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::debug!("ignored an SSE message that is not JSON-RPC: {error}");
                    }
                },
                _ => {}
            }
        }
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn name() -> Cow<'static, str> {
        "SSE".into()
    }

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let client = self.client.clone();
        let endpoint = self.endpoint.clone();
        let headers = self.headers.clone();
        let auth = self.auth.clone();
        async move {
            let post = |token: Option<String>| {
                let mut request = client.post(endpoint.clone()).headers(headers.clone());
                if let Some(token) = token {
                    request = request.bearer_auth(token);
                }
                let request = request.json(&item);
                let endpoint = endpoint.clone();
                async move {
                    request.send().await.map_err(|e| {
                        SseError(format!(
                            "cannot send to {endpoint}: {}",
                            crate::errors::error_chain(&e)
                        ))
                    })
                }
            };
            // With OAuth, the current token, and a refused one refreshed
            // and retried once, as over streamable HTTP.
            let response = match &auth {
                Some(auth) => auth
                    .send_with_token(&post, |answer| {
                        answer
                            .as_ref()
                            .is_ok_and(|r| r.status() == reqwest::StatusCode::UNAUTHORIZED)
                    })
                    .await
                    .map_err(SseError)??,
                None => post(None).await?,
            };
            let status = response.status();
            note_refusal(auth.as_deref(), &response);
            if status.is_success() {
                Ok(())
            } else {
                Err(SseError(format!(
                    "{status} from {endpoint}{}",
                    status_hint(status)
                )))
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), SseError> {
        self.reader.abort();
        Ok(())
    }
}
