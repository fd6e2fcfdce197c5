//! What a tool call produces: [`ToolOutput`] or a [`ToolError`].

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::deferred::Suspension;
use crate::message::ImagePart;

/// What a tool call produced: text, optional images, optional JSON.
///
/// The host receives it whole; the model sees `text` truncated by the
/// agent's [`TruncationPolicy`](crate::tool::TruncationPolicy), plus the images.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// The text the model reads.
    pub text: String,
    /// Images (screenshots) shown to the model after the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePart>,
    /// Machine-readable data for the host (not sent to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
}

impl ToolOutput {
    /// A text-only output.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// Adds an image.
    pub fn with_image(mut self, image: ImagePart) -> Self {
        self.images.push(image);
        self
    }

    /// Attaches structured data for the host.
    pub fn with_structured(mut self, value: serde_json::Value) -> Self {
        self.structured = Some(value);
        self
    }
}

/// What went wrong in a tool call. All kinds but [`ToolErrorKind::Fatal`]
/// become an error result the model reads; `Fatal` ends the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// The arguments did not fit the schema or were not JSON.
    InvalidArguments,
    /// The model asked for a tool that does not exist.
    UnknownTool,
    /// A file, path, ref or record was not found.
    NotFound,
    /// A search-and-replace matched zero or several times.
    NoUniqueMatch,
    /// A path or action outside what the host allows (e.g. outside the
    /// workspace roots).
    PermissionDenied,
    /// The user (or policy) denied the call.
    Denied,
    /// The call ran out of time.
    Timeout,
    /// The run was cancelled while the call was pending or running.
    Cancelled,
    /// The tool panicked; the panic was caught.
    Panicked,
    /// The tool ran and failed.
    Failed,
    /// Something the tool depends on was briefly unavailable (a dropped
    /// connection, a busy upstream, a rate limit): the same call may succeed
    /// if retried. [`RetryLayer`](crate::layer::RetryLayer) retries these for
    /// idempotent tools.
    Unavailable,
    /// Unrecoverable: the run ends.
    Fatal,
    /// The call stopped while running: calls it made wait for decisions
    /// given later ([`ToolError::deferred`]). In a run, the run stops and
    /// the call runs again on resume; elsewhere it is a denial.
    Deferred,
}

/// A tool failure: a kind, a message written for the model, and the cause.
#[derive(Debug, Clone)]
pub struct ToolError {
    kind: ToolErrorKind,
    message: String,
    source: Option<Arc<dyn StdError + Send + Sync>>,
    /// Set for [`ToolErrorKind::Deferred`].
    suspension: Option<Arc<Suspension>>,
}

impl ToolError {
    /// An error of `kind` with a message for the model.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
            suspension: None,
        }
    }

    /// [`ToolErrorKind::Deferred`]: the call stopped while running, and
    /// `suspension` says what waits and what it needs to go on (see
    /// [`deferred`](crate::deferred)).
    pub fn deferred(suspension: Suspension) -> Self {
        let waiting = suspension
            .pending
            .iter()
            .map(|p| format!("`{}` ({})", p.tool, p.call_id))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            kind: ToolErrorKind::Deferred,
            message: format!("waiting for approval of {waiting}"),
            source: None,
            suspension: Some(Arc::new(suspension)),
        }
    }

    /// What a deferred call waits for ([`ToolErrorKind::Deferred`]).
    pub fn suspension(&self) -> Option<&Suspension> {
        self.suspension.as_deref()
    }

    /// Attaches the underlying cause (kept for the host, not sent to the model).
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// [`ToolErrorKind::InvalidArguments`].
    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::InvalidArguments, message)
    }

    /// [`ToolErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::NotFound, message)
    }

    /// [`ToolErrorKind::Failed`].
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Failed, message)
    }

    /// [`ToolErrorKind::PermissionDenied`].
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::PermissionDenied, message)
    }

    /// [`ToolErrorKind::Unavailable`]: worth retrying.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Unavailable, message)
    }

    /// [`ToolErrorKind::Timeout`].
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Timeout, message)
    }

    /// [`ToolErrorKind::Cancelled`].
    pub fn cancelled(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Cancelled, message)
    }

    /// [`ToolErrorKind::Fatal`]: ends the run.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self::new(ToolErrorKind::Fatal, message)
    }

    /// The kind.
    pub fn kind(&self) -> ToolErrorKind {
        self.kind
    }

    /// The message written for the model.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the run must end.
    pub fn is_fatal(&self) -> bool {
        self.kind == ToolErrorKind::Fatal
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for ToolError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}
