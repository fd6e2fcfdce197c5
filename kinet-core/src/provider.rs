//! Model backends: the [`Provider`] trait, what goes to a
//! model and comes back, and (with the `openai` / `anthropic` features) the
//! shipped providers and the `kit` they are built from.

pub use crate::backend::{Provider, ProviderStream};
pub use crate::data::model::{
    ChatRequest, GenerationParams, OutputSchema, ProviderError, StopReason, StreamEvent, Usage,
};
#[cfg(feature = "http")]
pub use crate::providers::*;
