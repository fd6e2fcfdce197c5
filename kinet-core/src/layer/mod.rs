//! Tool layers: code wrapped around every tool call, in the shape of
//! tower's `Layer` — each gets the call and the rest of the stack, and
//! decides whether, when and how often to run it.
//!
//! Layers come from three places, outermost first: the agent
//! ([`Calls::layer`](crate::builder::Calls::layer)), the toolset
//! ([`Toolset::layer`](crate::Toolset::layer)) and the tool
//! ([`Toolset::add_layered`](crate::Toolset::add_layered)). Innermost, the
//! pipeline always adds a [`TimeoutLayer`] for the agent's tool timeout and
//! the tool's own [`timeout`](crate::Tool::timeout).
//!
//! Shipped layers, each in a module of its own: [`TimeoutLayer`],
//! [`ConcurrencyLimitLayer`], [`RateLimitLayer`], [`RetryLayer`].
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use kinet_core::layer::{Invocation, Next, ToolLayer};
//! use kinet_core::{ToolError, ToolOutput};
//!
//! /// Counts the calls that pass through.
//! #[derive(Default)]
//! struct Count(AtomicUsize);
//!
//! #[async_trait::async_trait]
//! impl ToolLayer for Count {
//!     async fn call(&self, call: Invocation, next: Next<'_>) -> Result<ToolOutput, ToolError> {
//!         self.0.fetch_add(1, Ordering::Relaxed);
//!         next.run(call).await
//!     }
//! }
//! ```

mod limit;
mod rate;
mod retry;
mod timeout;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::ctx::ToolCtx;
use crate::data::output::{ToolError, ToolOutput};
use crate::data::spec::ToolAnnotations;
use crate::tooldef::{DynTool, PreparedCall};

pub use limit::ConcurrencyLimitLayer;
pub use rate::RateLimitLayer;
pub use retry::RetryLayer;
pub(crate) use timeout::CANCEL_GRACE;
pub use timeout::TimeoutLayer;

/// A tool call on its way through the layers: the tool, the arguments it
/// was prepared from, and the context it will run in.
pub struct Invocation {
    tool: Arc<dyn DynTool>,
    arguments: Arc<str>,
    prepared: Option<Box<dyn PreparedCall>>,
    ctx: ToolCtx,
}

impl Invocation {
    pub(crate) fn new(
        tool: Arc<dyn DynTool>,
        arguments: Arc<str>,
        prepared: Box<dyn PreparedCall>,
        ctx: ToolCtx,
    ) -> Self {
        Self {
            tool,
            arguments,
            prepared: Some(prepared),
            ctx,
        }
    }

    /// The tool.
    pub fn tool(&self) -> &Arc<dyn DynTool> {
        &self.tool
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        self.ctx.tool_name()
    }

    /// The tool's annotations.
    pub fn annotations(&self) -> ToolAnnotations {
        self.tool.annotations()
    }

    /// The JSON arguments, as given to the tool (after any hook rewrote
    /// them).
    pub fn arguments(&self) -> &str {
        &self.arguments
    }

    /// The context the call will run in.
    pub fn ctx(&self) -> &ToolCtx {
        &self.ctx
    }

    /// The context, to change (a tighter deadline, another cancellation
    /// token).
    pub fn ctx_mut(&mut self) -> &mut ToolCtx {
        &mut self.ctx
    }

    /// A fresh copy of the call, to run it once more (its arguments are
    /// parsed again when it runs).
    pub fn retry_copy(&self) -> Invocation {
        Invocation {
            tool: Arc::clone(&self.tool),
            arguments: Arc::clone(&self.arguments),
            prepared: None,
            ctx: self.ctx.clone(),
        }
    }

    /// Runs the tool itself: the bottom of every stack.
    async fn run_tool(self) -> Result<ToolOutput, ToolError> {
        let prepared = match self.prepared {
            Some(prepared) => prepared,
            None => Arc::clone(&self.tool).prepare(&self.arguments)?,
        };
        prepared.call(self.ctx).await
    }
}

impl fmt::Debug for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Invocation")
            .field("tool", &self.name())
            .field("call_id", &self.ctx.call_id())
            .field("arguments", &self.arguments)
            .finish_non_exhaustive()
    }
}

/// Code wrapped around tool calls.
#[async_trait]
pub trait ToolLayer: Send + Sync + 'static {
    /// Handles one call: run it with `next.run(call)` (once, several times,
    /// or not at all) and return its result, or a result of its own.
    async fn call(&self, call: Invocation, next: Next<'_>) -> Result<ToolOutput, ToolError>;
}

/// A shared layer is a layer (one counter for several agents or servers):
/// pass an `Arc` where one is taken.
#[async_trait]
impl<L: ToolLayer + ?Sized> ToolLayer for Arc<L> {
    async fn call(&self, call: Invocation, next: Next<'_>) -> Result<ToolOutput, ToolError> {
        (**self).call(call, next).await
    }
}

/// A stack of layers as one slice list: the pipeline's, the toolset's,
/// the tool's own, and the timeout.
pub(crate) type Stack<'a> = [&'a [Arc<dyn ToolLayer>]; 4];

/// The rest of the stack below a layer. Copy it to run a call again.
#[derive(Clone, Copy)]
pub struct Next<'a> {
    stack: Stack<'a>,
    level: usize,
    index: usize,
}

impl<'a> Next<'a> {
    pub(crate) fn new(stack: Stack<'a>) -> Self {
        Self {
            stack,
            level: 0,
            index: 0,
        }
    }

    /// Runs the call through the rest of the stack and the tool.
    pub async fn run(self, call: Invocation) -> Result<ToolOutput, ToolError> {
        let (mut level, mut index) = (self.level, self.index);
        while level < self.stack.len() {
            if let Some(layer) = self.stack[level].get(index) {
                let next = Next {
                    stack: self.stack,
                    level,
                    index: index + 1,
                };
                return layer.call(call, next).await;
            }
            level += 1;
            index = 0;
        }
        call.run_tool().await
    }
}

impl fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let left: usize = self.stack.iter().map(|s| s.len()).sum::<usize>();
        f.debug_struct("Next").field("layers", &left).finish()
    }
}

/// Waits for `future` unless the call is cancelled first.
pub(crate) async fn unless_cancelled<F: Future>(ctx: &ToolCtx, future: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        _ = ctx.cancellation().cancelled() => None,
        out = future => Some(out),
    }
}

/// The error of a call cancelled while it waited in a layer.
pub(crate) fn cancelled_while_waiting(ctx: &ToolCtx, what: &str) -> ToolError {
    ToolError::cancelled(format!(
        "`{}` was cancelled while waiting for {what}",
        ctx.tool_name()
    ))
}
