//! Errors that end a run.

use super::model::ProviderError;

/// Why a run failed. Tool errors that the model can react to are not here:
/// they become tool results.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The model provider failed (after its own retries).
    #[error("provider `{provider}` failed: {source}")]
    Provider {
        /// The provider's name.
        provider: String,
        /// What went wrong.
        #[source]
        source: ProviderError,
    },
    /// A hook refused to go on.
    #[error("hook failed: {0}")]
    Hook(#[from] HookError),
    /// The engine itself failed (a bug: please report it).
    #[error("internal error: {0}")]
    Internal(String),
    /// A run could not continue a conversation waiting for approvals (a
    /// plain run on it, a decision missing or for a call not waiting, a
    /// saved turn that does not match the history).
    #[error("cannot continue the conversation: {0}")]
    Resume(String),
    /// A tool returned a fatal error.
    #[error("tool `{tool}` failed fatally: {message}")]
    FatalTool {
        /// The tool.
        tool: String,
        /// Its message.
        message: String,
    },
}

/// An error a hook returns to stop the run.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct HookError(pub String);
