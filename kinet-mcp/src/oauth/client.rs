//! The streamable HTTP client with OAuth: every request carries the
//! server's current access token; a 401 on a token gets one refresh and
//! one retry; a challenge that remains is noted for the supervisor, which
//! runs a new authorization.

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use super::Authorizer;

type Error = StreamableHttpError<reqwest::Error>;

#[derive(Clone)]
pub(crate) struct OAuthHttpClient {
    inner: reqwest::Client,
    auth: Arc<Authorizer>,
}

impl OAuthHttpClient {
    pub(crate) fn new(auth: Arc<Authorizer>) -> Result<Self, String> {
        // No redirects: the token goes to the configured server only. No
        // idle pooling, as the SDK's own client (half-read bodies stall
        // reused connections).
        let inner = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        Ok(Self { inner, auth })
    }

    /// Runs `call` with the current token, refreshing and retrying once if
    /// the server refuses it.
    async fn with_token<T, F, Fut>(&self, call: F) -> Result<T, Error>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let retried = self
            .auth
            .send_with_token(
                |token| async { unauthorized_as_challenge(call(token).await) },
                |answer| matches!(answer, Err(StreamableHttpError::AuthRequired(_))),
            )
            .await
            .map_err(|e| StreamableHttpError::UnexpectedServerResponse(e.into()))?;
        match &retried {
            Err(StreamableHttpError::AuthRequired(e)) => {
                self.auth.note_challenge(&e.www_authenticate_header);
            }
            Err(StreamableHttpError::InsufficientScope(e)) => {
                self.auth.note_challenge(&e.www_authenticate_header);
            }
            _ => {}
        }
        retried
    }
}

/// A 401 without `WWW-Authenticate` is a challenge too (the spec's
/// discovery then falls back to the well-known metadata paths).
fn unauthorized_as_challenge<T>(result: Result<T, Error>) -> Result<T, Error> {
    match result {
        Err(StreamableHttpError::Client(error))
            if error.status() == Some(reqwest::StatusCode::UNAUTHORIZED) =>
        {
            Err(StreamableHttpError::AuthRequired(
                rmcp::transport::streamable_http_client::AuthRequiredError::new(String::new()),
            ))
        }
        other => other,
    }
}

impl StreamableHttpClient for OAuthHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.with_token(|token| {
            self.inner.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.with_token(|token| {
            self.inner.post_message_with_max_sse_event_size(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.with_token(|token| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        self.with_token(|token| {
            self.inner.delete_session(
                uri.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.with_token(|token| {
            self.inner.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.with_token(|token| {
            self.inner.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}
