//! Context management: keeping every request inside the model's window.
//!
//! Before each model call the engine estimates the request's size (the
//! last response's reported prompt tokens calibrate a fast character
//! estimate). Past the threshold (default 80% of the window):
//!
//! 1. old large tool results are pruned, each leaving a stub that says what
//!    was removed and how to get it again;
//! 2. if that is not enough, the older turns are replaced by a summary
//!    written by the model (or the host's [`Summarizer`]): goals, decisions,
//!    files touched, open todos, and the user's own words, kept verbatim
//!    where they fit.
//!
//! The cut always falls just before a user message, so a tool call and its
//! result are never split; the system prompt and the latest turns are kept.
//! A context-length error from the provider teaches the window (llama.cpp,
//! OpenAI and others state it) and triggers one compaction and a retry.
//! Between compactions the history only grows at its end, so the request
//! prefix stays byte-identical and provider-side prompt caches keep hitting.

mod compact;

use std::sync::Arc;

use async_trait::async_trait;

use crate::data::spec::ToolSpec;
use crate::message::{ContentPart, Message};

pub use compact::Compaction;
pub(crate) use compact::{Model, Request, SUMMARY_ENDS, SUMMARY_OPENS, compact};

/// Writes the summary that replaces older turns.
#[async_trait]
pub trait Summarizer: Send + Sync {
    /// A summary of `messages` (the older part of the conversation).
    async fn summarize(&self, messages: &[Message]) -> Result<String, String>;
}

/// How a run keeps its requests inside the model's context window. Every
/// field documents its default.
#[derive(Clone)]
pub struct ContextPolicy {
    pub(crate) window: Option<u64>,
    pub(crate) threshold: f64,
    pub(crate) keep_user_turns: usize,
    pub(crate) prune_over_chars: usize,
    pub(crate) summarizer: Option<Arc<dyn Summarizer>>,
    /// Windows providers stated, by model name.
    pub(crate) learned: Arc<std::sync::Mutex<std::collections::HashMap<String, u64>>>,
}

impl std::fmt::Debug for ContextPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextPolicy")
            .field("window", &self.window)
            .field("threshold", &self.threshold)
            .field("keep_user_turns", &self.keep_user_turns)
            .field("prune_over_chars", &self.prune_over_chars)
            .field("summarizer", &self.summarizer.is_some())
            .finish()
    }
}

impl Default for ContextPolicy {
    fn default() -> Self {
        Self {
            window: None,
            threshold: 0.8,
            keep_user_turns: 2,
            prune_over_chars: 1000,
            summarizer: None,
            learned: Arc::default(),
        }
    }
}

impl ContextPolicy {
    /// The defaults: the window from the model's name when it is a
    /// well-known one (see [`known_window`]) or learned from a provider's
    /// context-length error, compaction at 80% of it, the last 2 user turns
    /// always kept, tool results over 1,000 characters pruned first, the
    /// agent's own model as summariser.
    pub fn new() -> Self {
        Self::default()
    }

    /// The model's context window in tokens (default: by model name, or
    /// learned from the provider).
    pub fn window(mut self, tokens: u64) -> Self {
        self.window = Some(tokens);
        self
    }

    /// The share of the window at which a request is compacted (default 0.8).
    pub fn threshold(mut self, share: f64) -> Self {
        self.threshold = share.clamp(0.1, 0.95);
        self
    }

    /// How many of the latest user turns are always kept whole (default 2).
    pub fn keep_user_turns(mut self, turns: usize) -> Self {
        self.keep_user_turns = turns.max(1);
        self
    }

    /// Tool results longer than this many characters are pruned first
    /// (default 1,000).
    pub fn prune_over_chars(mut self, chars: usize) -> Self {
        self.prune_over_chars = chars;
        self
    }

    /// Writes summaries with this instead of the agent's model.
    pub fn summarizer(mut self, summarizer: Arc<dyn Summarizer>) -> Self {
        self.summarizer = Some(summarizer);
        self
    }

    /// The window in force for `model`: configured, else learned from the
    /// provider, else known by name.
    pub(crate) fn window_for(&self, model: &str) -> Option<u64> {
        self.window
            .or_else(|| self.learned.lock().ok()?.get(model).copied())
            .or_else(|| known_window(model))
    }

    /// Remembers a window a provider stated for `model`.
    pub(crate) fn learn(&self, model: &str, tokens: u64) {
        if let Ok(mut learned) = self.learned.lock() {
            learned.insert(model.to_owned(), tokens);
        }
    }
}

/// Context windows of well-known model families, by name prefix.
pub fn known_window(model: &str) -> Option<u64> {
    let model = model.to_ascii_lowercase();
    let table: &[(&str, u64)] = &[
        ("gpt-4.1", 1_047_576),
        ("gpt-5", 400_000),
        ("gpt-4o", 128_000),
        ("gpt-4-turbo", 128_000),
        ("o1", 200_000),
        ("o3", 200_000),
        ("o4", 200_000),
        ("claude", 200_000),
        ("glm-4.6", 200_000),
        ("glm-4.5", 128_000),
        ("glm-4", 128_000),
        ("deepseek", 128_000),
        ("qwen3", 131_072),
        ("qwen2.5", 32_768),
        ("llama-3", 131_072),
        ("mistral-large", 131_072),
    ];
    table
        .iter()
        .find(|(prefix, _)| model.starts_with(prefix))
        .map(|(_, window)| *window)
}

/// Characters of a message as a provider would send them (text, call
/// arguments, a flat cost for images).
fn message_chars(message: &Message) -> usize {
    let parts = |content: &[ContentPart]| -> usize {
        content
            .iter()
            .map(|part| match part {
                ContentPart::Text { text } => text.len(),
                ContentPart::Image(_) => 3000,
            })
            .sum()
    };
    match message {
        Message::System { text } => text.len(),
        Message::User { content } => parts(content),
        Message::Assistant {
            content,
            tool_calls,
            ..
        } => {
            parts(content)
                + tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len() + c.id.len())
                    .sum::<usize>()
        }
        Message::Tool { content, .. } => parts(content),
    }
}

/// Fast token estimates of requests that share one system prompt and one
/// set of tools (a turn): their characters are counted once, the messages
/// each time. About four characters a token plus a little per message;
/// [`tokens`](Self::tokens) multiplies by `calibration` (reported over
/// estimated tokens of the last request).
pub(crate) struct Sizer {
    fixed_chars: usize,
    pub(crate) calibration: f64,
}

impl Sizer {
    pub(crate) fn new(system: &str, tools: &[ToolSpec], calibration: f64) -> Self {
        let tool_chars: usize = tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
            .sum();
        Self {
            fixed_chars: system.len() + tool_chars,
            calibration,
        }
    }

    /// The uncalibrated estimate.
    pub(crate) fn raw(&self, messages: &[Message]) -> u64 {
        let chars = self.fixed_chars + messages.iter().map(message_chars).sum::<usize>();
        (chars as f64 / 4.0 + 6.0 * messages.len() as f64 + 8.0).ceil() as u64
    }

    /// A raw estimate, calibrated.
    pub(crate) fn calibrated(&self, raw: u64) -> u64 {
        (raw as f64 * self.calibration).ceil() as u64
    }

    /// The calibrated estimate.
    pub(crate) fn tokens(&self, messages: &[Message]) -> u64 {
        self.calibrated(self.raw(messages))
    }
}
