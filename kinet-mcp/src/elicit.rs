//! Client-side elicitation: a server asks the user for input (a form) in
//! the middle of a request. The hub advertises the capability only when
//! the host gives it an [`Elicitation`] handler
//! ([`McpHub::start_with_elicitation`](crate::McpHub::start_with_elicitation));
//! without one, servers cannot ask, and any request that still comes is
//! declined. URL-mode requests are declined.

use async_trait::async_trait;
use serde_json::{Map, Value};

/// What a server asks the user.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ElicitationRequest {
    /// The server asking.
    pub server: String,
    /// What it says to the user.
    pub message: String,
    /// The form: a JSON schema of an object whose properties are the
    /// fields (strings, numbers, booleans, enums).
    pub schema: Value,
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ElicitationAnswer {
    /// Submitted, with the field values.
    Accept(Map<String, Value>),
    /// Refused.
    Decline,
    /// Dismissed without a choice.
    Cancel,
}

/// The host's form UI for servers' questions.
#[async_trait]
pub trait Elicitation: Send + Sync {
    /// Shows `request` to the user and returns their answer.
    async fn elicit(&self, request: ElicitationRequest) -> ElicitationAnswer;
}
