//! The crate's error type.

use kinet_core::ToolError;

use kinet_core::tool::ToolErrorKind;

/// A failed computer-use action. Messages name the window, monitor, element
/// ref or browser executable involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ComputerError {
    /// The browser could not be started.
    #[error("could not start the browser {executable}: {reason}")]
    Launch {
        /// The executable tried.
        executable: String,
        /// Why.
        reason: String,
    },
    /// No Chrome or Chromium was found.
    #[error(
        "no Chrome or Chromium found (tried {tried}); install Debian's chromium or set the executable path"
    )]
    NoBrowser {
        /// The paths looked at.
        tried: String,
    },
    /// The browser failed a command (it may have exited; the next call
    /// starts it again).
    #[error("browser: {0}")]
    Browser(String),
    /// An element ref from an older snapshot, or one that never existed.
    #[error("{0}")]
    StaleRef(String),
    /// The page's JavaScript threw.
    #[error("the expression threw: {0}")]
    Script(String),
    /// The element cannot take the action (hidden, covered, disabled, not a
    /// select).
    #[error("{0}")]
    NotActionable(String),
    /// A URL the browser tools do not open (a local file outside the
    /// workspace, a browser-internal page); the message says what the host
    /// can allow.
    #[error("{0}")]
    Blocked(String),
    /// Bad arguments (unknown key name, tab index out of range, ...).
    #[error("{0}")]
    InvalidInput(String),
    /// Nothing matched (window title, monitor).
    #[error("{0}")]
    NotFound(String),
    /// Screen capture failed.
    #[error("screen capture: {0}")]
    Capture(String),
    /// Input simulation failed (no display, no permission).
    #[error("input: {0}")]
    Input(String),
    /// Encoding or decoding an image failed.
    #[error("image: {0}")]
    Image(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl From<ComputerError> for ToolError {
    fn from(error: ComputerError) -> Self {
        let kind = match &error {
            ComputerError::StaleRef(_) | ComputerError::InvalidInput(_) => {
                ToolErrorKind::InvalidArguments
            }
            ComputerError::NotFound(_) => ToolErrorKind::NotFound,
            ComputerError::Blocked(_) => ToolErrorKind::PermissionDenied,
            ComputerError::Cancelled => ToolErrorKind::Cancelled,
            _ => ToolErrorKind::Failed,
        };
        let message = error.to_string();
        ToolError::new(kind, message).with_source(error)
    }
}
