//! The `Provider` trait: a streaming model backend.

use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;

use crate::data::model::{ChatRequest, ProviderError, StreamEvent};

/// What a provider's `stream` returns.
pub type ProviderStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, ProviderError>> + Send>>;

/// A model backend that streams responses.
///
/// Implementations turn a [`ChatRequest`] into their wire format before
/// returning, so the returned stream borrows nothing. Dropping the stream
/// must abort the underlying request: that is how cancellation reaches it.
#[async_trait]
pub trait Provider: Send + Sync {
    /// A short name for logs ("openai", "anthropic", "scripted").
    fn name(&self) -> &str;

    /// Starts one model call.
    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError>;
}

/// A shared provider is a provider: pass an `Arc` where one is taken.
#[async_trait]
impl<P: Provider + ?Sized> Provider for std::sync::Arc<P> {
    fn name(&self) -> &str {
        (**self).name()
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        (**self).stream(request).await
    }
}
