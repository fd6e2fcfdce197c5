//! What the vendor clients share: secrets that never print, cached access
//! tokens with one refresh on the vendor's "token expired" codes, JSON calls
//! that read the vendor's error envelope, and upload checks.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kinet_core::tool::{CancellationToken, ToolErrorKind};

use kinet_core::ToolError;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A credential (API key, app secret, access token). `Debug` and `Display`
/// print `***`, so it cannot leak through logs, events or error messages.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps a credential.
    pub fn new(value: impl Into<Arc<str>>) -> Self {
        Self(value.into())
    }

    /// The credential itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

/// A failed vendor call. Messages name the service, the API and the file;
/// they never contain a credential (transport errors have their URL removed
/// because WeCom puts the access token in the query string).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntegrationError {
    /// The vendor answered with a non-zero error code.
    #[error("{service} {api} failed with error code {code}: {message}")]
    Vendor {
        /// "MiniMax", "Feishu", "WeCom".
        service: &'static str,
        /// The API path that failed.
        api: &'static str,
        /// The vendor's error code.
        code: i64,
        /// The vendor's message.
        message: String,
    },
    /// An HTTP error status without a vendor error body.
    #[error("{service} {api} returned HTTP {status}: {body}")]
    Http {
        /// The service.
        service: &'static str,
        /// The API path.
        api: &'static str,
        /// The HTTP status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The request did not complete (connection refused, timeout, reset).
    #[error("{service} {api} could not be reached: {source}")]
    Transport {
        /// The service.
        service: &'static str,
        /// The API path.
        api: &'static str,
        /// The cause, without its URL.
        #[source]
        source: reqwest::Error,
    },
    /// The answer did not have the documented shape.
    #[error("{service} {api} sent an unexpected answer: {detail}")]
    Decode {
        /// The service.
        service: &'static str,
        /// The API path.
        api: &'static str,
        /// What did not fit.
        detail: String,
    },
    /// A file over the vendor's size limit, refused before any upload.
    #[error("{path}: {size} bytes is over {service}'s limit of {limit} bytes for a file")]
    TooLarge {
        /// The service.
        service: &'static str,
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The vendor's limit.
        limit: u64,
    },
    /// A file under the vendor's minimum size (empty files are refused).
    #[error("{path}: {size} bytes is under {service}'s minimum of {min} bytes for a file")]
    TooSmall {
        /// The service.
        service: &'static str,
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The vendor's minimum.
        min: u64,
    },
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Missing or contradictory settings or arguments.
    #[error("{0}")]
    Config(String),
    /// A generation task ended in failure.
    #[error("{service} task {task_id} failed: {message}")]
    TaskFailed {
        /// The service.
        service: &'static str,
        /// The vendor's task id.
        task_id: String,
        /// Why, as the vendor says.
        message: String,
    },
    /// A generation task did not finish in time.
    #[error("{service} task {task_id} was not finished after {} s (last status {status})", waited.as_secs())]
    TaskTimeout {
        /// The service.
        service: &'static str,
        /// The vendor's task id.
        task_id: String,
        /// The last status seen.
        status: String,
        /// How long it was polled.
        waited: Duration,
    },
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl From<IntegrationError> for ToolError {
    fn from(error: IntegrationError) -> Self {
        let kind = match &error {
            IntegrationError::TooLarge { .. }
            | IntegrationError::TooSmall { .. }
            | IntegrationError::Config(_) => ToolErrorKind::InvalidArguments,
            IntegrationError::Io { source, .. }
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                ToolErrorKind::NotFound
            }
            IntegrationError::Cancelled => ToolErrorKind::Cancelled,
            IntegrationError::TaskTimeout { .. } => ToolErrorKind::Timeout,
            _ => ToolErrorKind::Failed,
        };
        let message = error.to_string();
        ToolError::new(kind, message).with_source(error)
    }
}

/// How one vendor reports errors inside a JSON body.
#[derive(Clone, Copy)]
pub(crate) struct Vendor {
    /// Shown in errors: "MiniMax", "Feishu", "WeCom".
    pub(crate) service: &'static str,
    /// The error code and message of a body, when it carries one; code 0 is
    /// success.
    pub(crate) code_of: fn(&Value) -> Option<(i64, String)>,
}

impl Vendor {
    pub(crate) fn transport(&self, api: &'static str, error: reqwest::Error) -> IntegrationError {
        IntegrationError::Transport {
            service: self.service,
            api,
            source: error.without_url(),
        }
    }

    pub(crate) fn decode_error(
        &self,
        api: &'static str,
        detail: impl fmt::Display,
    ) -> IntegrationError {
        IntegrationError::Decode {
            service: self.service,
            api,
            detail: detail.to_string(),
        }
    }

    /// Sends a request and returns its JSON body: a non-zero vendor code
    /// wins over the HTTP status (Feishu answers 400 with a JSON error);
    /// cancellation drops the request.
    pub(crate) async fn call(
        &self,
        api: &'static str,
        request: reqwest::RequestBuilder,
        cancel: &CancellationToken,
    ) -> Result<Value, IntegrationError> {
        let exchange = async {
            let response = request.send().await.map_err(|e| self.transport(api, e))?;
            let status = response.status();
            let body = response.bytes().await.map_err(|e| self.transport(api, e))?;
            Ok::<_, IntegrationError>((status, body))
        };
        let (status, body) = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(IntegrationError::Cancelled),
            result = exchange => result?,
        };
        match serde_json::from_slice::<Value>(&body) {
            Ok(value) => {
                if let Some((code, message)) = (self.code_of)(&value)
                    && code != 0
                {
                    return Err(IntegrationError::Vendor {
                        service: self.service,
                        api,
                        code,
                        message,
                    });
                }
                if !status.is_success() {
                    return Err(self.http_error(api, status.as_u16(), &body));
                }
                Ok(value)
            }
            Err(_) if !status.is_success() => Err(self.http_error(api, status.as_u16(), &body)),
            Err(error) => Err(self.decode_error(api, format!("not JSON ({error})"))),
        }
    }

    fn http_error(&self, api: &'static str, status: u16, body: &[u8]) -> IntegrationError {
        let text = String::from_utf8_lossy(body);
        let mut excerpt: String = text.chars().take(300).collect();
        if excerpt.len() < text.len() {
            excerpt.push('…');
        }
        IntegrationError::Http {
            service: self.service,
            api,
            status,
            body: excerpt,
        }
    }

    /// Deserialises a successful body into the documented shape.
    pub(crate) fn decode<T: DeserializeOwned>(
        &self,
        api: &'static str,
        value: Value,
    ) -> Result<T, IntegrationError> {
        serde_json::from_value(value).map_err(|e| self.decode_error(api, e))
    }
}

/// The `(code, message)` of a JSON error envelope: `{"code": 0, "msg": ""}`
/// and the like, under the vendor's own field names.
pub(crate) fn envelope(body: &Value, code: &str, message: &str) -> Option<(i64, String)> {
    let text = body
        .get(message)
        .and_then(Value::as_str)
        .unwrap_or_default();
    Some((body.get(code)?.as_i64()?, text.to_owned()))
}

/// An HTTP client with the settings every vendor client uses.
pub(crate) fn http_client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("kinet-tools/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

/// `base` + `path` without a doubled slash.
pub(crate) fn endpoint(base: &str, path: &str) -> String {
    format!("{}{path}", base.trim_end_matches('/'))
}

/// Byte counts for people: `1.2 MB`.
pub(crate) fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["bytes", "KB", "MB", "GB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
