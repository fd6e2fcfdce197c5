//! A host's client of the served agent, through Restate's ingress.

use kinet_core::deferred::Decisions;
use kinet_core::session::Session;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::object::{Prompt, Reply, Waiting};

/// Calls the `KinetAgent` object through a Restate ingress
/// (`http://host:8080` by default in Restate's server).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    ingress: String,
}

/// A call through the ingress failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Restate's ingress could not be reached.
    #[error("cannot reach Restate's ingress at {url}: {message}; is the server running?")]
    Unreachable {
        /// The address called.
        url: String,
        /// What failed.
        message: String,
    },
    /// The ingress or the handler answered with an error.
    #[error("{url} answered {status}: {body}")]
    Status {
        /// The address called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The answer's text.
        body: String,
    },
    /// The answer was not what the handler returns.
    #[error("{url} answered something unreadable: {message}")]
    Unreadable {
        /// The address called.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// `decide` found no run waiting for approvals.
    #[error("conversation {0} waits for no approval")]
    NotWaiting(String),
}

impl Client {
    /// A client of the ingress at `ingress` (e.g. `http://127.0.0.1:8080`).
    pub fn new(ingress: impl Into<String>) -> Self {
        Self {
            http: reqwest::Client::new(),
            ingress: ingress.into().trim_end_matches('/').to_owned(),
        }
    }

    /// Sends `text` to conversation `key` and waits for the run's end
    /// (including any wait for approvals). With `idempotency_key`, a
    /// repeated request gets the first one's reply instead of a new run.
    pub async fn prompt(
        &self,
        key: &str,
        text: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Reply, ClientError> {
        let url = format!("{}/KinetAgent/{}/prompt", self.ingress, encode(key));
        self.post(&url, &Prompt { text: text.into() }, idempotency_key)
            .await
    }

    /// Starts `text`'s run without waiting: the invocation's id (read its
    /// reply with [`attach`](Self::attach)).
    pub async fn send(
        &self,
        key: &str,
        text: &str,
        idempotency_key: Option<&str>,
    ) -> Result<String, ClientError> {
        let url = format!(
            "{}/restate/send/KinetAgent/{}/prompt",
            self.ingress,
            encode(key)
        );
        let sent: serde_json::Value = self
            .post(&url, &Prompt { text: text.into() }, idempotency_key)
            .await?;
        sent.get("invocationId")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ClientError::Unreadable {
                url,
                message: format!("no invocationId in {sent}"),
            })
    }

    /// Waits for a sent run's reply.
    pub async fn attach(&self, invocation: &str) -> Result<Reply, ClientError> {
        let url = format!("{}/restate/attach/{}", self.ingress, encode(invocation));
        let request = self.http.get(&url);
        self.answer(url, request).await
    }

    /// What conversation `key`'s run waits for, if it waits.
    pub async fn pending(&self, key: &str) -> Result<Option<Waiting>, ClientError> {
        let url = format!("{}/KinetAgent/{}/pending", self.ingress, encode(key));
        let request = self.http.post(&url);
        self.answer(url, request).await
    }

    /// Answers the approvals conversation `key`'s run waits for; the run
    /// goes on.
    pub async fn decide(&self, key: &str, decisions: &Decisions) -> Result<(), ClientError> {
        let waiting = self
            .pending(key)
            .await?
            .ok_or_else(|| ClientError::NotWaiting(key.to_owned()))?;
        let url = format!(
            "{}/restate/awakeables/{}/resolve",
            self.ingress,
            encode(&waiting.awakeable)
        );
        let request = self.http.post(&url).json(decisions);
        let response = request.send().await.map_err(|e| unreachable(&url, &e))?;
        check(url, response).await.map(drop)
    }

    /// Conversation `key` as a kinet session (`None` before its first
    /// run).
    pub async fn session(&self, key: &str) -> Result<Option<Session>, ClientError> {
        let url = format!("{}/KinetAgent/{}/session", self.ingress, encode(key));
        let request = self.http.post(&url);
        self.answer(url, request).await
    }

    async fn post<T: DeserializeOwned>(
        &self,
        url: &str,
        body: &impl Serialize,
        idempotency_key: Option<&str>,
    ) -> Result<T, ClientError> {
        let mut request = self.http.post(url).json(body);
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        self.answer(url.to_owned(), request).await
    }

    async fn answer<T: DeserializeOwned>(
        &self,
        url: String,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let response = request.send().await.map_err(|e| unreachable(&url, &e))?;
        let body = check(url.clone(), response).await?;
        serde_json::from_str(&body).map_err(|e| ClientError::Unreadable {
            url,
            message: e.to_string(),
        })
    }
}

fn unreachable(url: &str, error: &reqwest::Error) -> ClientError {
    ClientError::Unreachable {
        url: url.to_owned(),
        message: error.to_string(),
    }
}

/// The answer's text when its status is a success.
async fn check(url: String, response: reqwest::Response) -> Result<String, ClientError> {
    let status = response.status();
    let body = response.text().await.map_err(|e| unreachable(&url, &e))?;
    if status.is_success() {
        Ok(body)
    } else {
        Err(ClientError::Status {
            url,
            status: status.as_u16(),
            body,
        })
    }
}

/// A path segment: everything but unreserved characters percent-encoded.
fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
