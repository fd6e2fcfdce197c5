//! Hooks that connect the store to the loop.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use kinet_core::hook::Hook;
use kinet_core::hook::HookError;
use kinet_core::message::ToolCall;
use kinet_core::provider::ChatRequest;
use kinet_core::{Message, ToolError, ToolOutput};

use crate::backend::SharedMemory;
use crate::model::NewRecord;
use crate::scope::Scope;

/// Renders the memory blocks into each model request, at the front of the
/// latest user message (in the request only; the history is not changed).
/// There a changed block leaves the system prompt, the tools and every
/// earlier message byte-identical, so provider-side prompt caches keep
/// hitting; in the system prompt every edit would rewrite the whole prefix.
/// A request without a user message gets them in the system prompt.
#[derive(Debug, Clone)]
pub struct BlocksHook {
    store: SharedMemory,
    scope: Scope,
}

impl BlocksHook {
    /// A hook reading the blocks of the empty scope from a backend.
    pub fn new(memory: impl Into<SharedMemory>) -> Self {
        Self {
            store: memory.into(),
            scope: Scope::default(),
        }
    }

    /// The same hook, rendering the blocks `scope` sees.
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }
}

#[async_trait]
impl Hook for BlocksHook {
    async fn before_model_call(&self, request: &mut ChatRequest<'_>) -> Result<(), HookError> {
        let blocks = self
            .store
            .blocks(&self.scope)
            .await
            .map_err(|e| HookError(e.to_string()))?;
        if blocks.is_empty() {
            return Ok(());
        }
        let mut text = String::from(
            "\n\n<memory_blocks>\nYour long-term memory. Keep it current with memory_replace and memory_append.\n",
        );
        for block in blocks {
            let used = block.value.chars().count();
            text.push_str(&format!(
                "<{label} chars=\"{used}/{limit}\"{ro}>\n<!-- {description} -->\n{value}\n</{label}>\n",
                label = block.label,
                limit = block.limit,
                ro = if block.read_only { " read_only=\"true\"" } else { "" },
                description = block.description,
                value = block.value,
            ));
        }
        text.push_str("</memory_blocks>");
        let latest_user = request
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::User { .. }));
        match latest_user {
            Some(at) => {
                if let Some(Message::User { content }) = request.messages.to_mut().get_mut(at) {
                    content.insert(
                        0,
                        kinet_core::message::ContentPart::Text {
                            text: text.trim_start().to_owned(),
                        },
                    );
                }
            }
            None => request.system.to_mut().push_str(&text),
        }
        Ok(())
    }
}

/// The turn in progress (one user message and what answers it), shared by
/// a [`HistoryHook`] that tags what it records and the recall tool that
/// leaves those records out.
#[derive(Debug, Default)]
pub(crate) struct TurnMark {
    state: Mutex<Option<(u64, String)>>,
}

impl TurnMark {
    /// The id of the turn in progress, if a user message was seen.
    pub(crate) fn current(&self) -> Option<String> {
        self.state
            .lock()
            .ok()
            .and_then(|state| state.as_ref().map(|(_, id)| id.clone()))
    }

    /// The turn of the latest user message `fingerprint`: the same id while
    /// the message is the same, a new one for a new message. Ids are unique
    /// across processes and runs (time, process, counter).
    fn enter(&self, fingerprint: u64) -> Option<String> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut state = self.state.lock().ok()?;
        match &*state {
            Some((seen, id)) if *seen == fingerprint => Some(id.clone()),
            _ => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let id = format!(
                    "{nanos:x}-{:x}-{}",
                    std::process::id(),
                    COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                );
                *state = Some((fingerprint, id.clone()));
                Some(id)
            }
        }
    }
}

/// Records the conversation into the store: user and assistant text before
/// each model call (each message once), tool results after each call.
///
/// Records from the latest user message on carry the turn's id, so the
/// recall tool of the same pack leaves the turn in progress out (its own
/// question would be its best match). Make the hook with
/// [`MemoryPack::history_hook`](crate::MemoryPack::history_hook) to get
/// that; [`HistoryHook::new`] records without telling any recall tool.
#[derive(Debug)]
pub struct HistoryHook {
    store: SharedMemory,
    session: String,
    scope: Scope,
    seen: Mutex<HashSet<u64>>,
    turn: Arc<TurnMark>,
}

impl HistoryHook {
    /// A hook recording into a backend under `session`.
    pub fn new(memory: impl Into<SharedMemory>, session: impl Into<String>) -> Self {
        Self::with_turn(memory.into(), session.into(), Arc::default())
    }

    pub(crate) fn with_turn(store: SharedMemory, session: String, turn: Arc<TurnMark>) -> Self {
        Self {
            store,
            session,
            scope: Scope::default(),
            seen: Mutex::new(HashSet::new()),
            turn,
        }
    }

    /// The same hook, recording into `scope` (the empty scope by default).
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// The id of the turn in progress, as its records carry it (for a
    /// host's own [`RecallQuery::exclude_turn`](crate::RecallQuery::exclude_turn)).
    pub fn current_turn(&self) -> Option<String> {
        self.turn.current()
    }

    fn fingerprint(role: &str, text: &str, position: usize) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (role, text, position).hash(&mut hasher);
        hasher.finish()
    }

    fn seen(&self, fingerprint: u64) -> bool {
        self.seen
            .lock()
            .map(|seen| seen.contains(&fingerprint))
            .unwrap_or(true)
    }
}

/// Tools whose results are not recorded.
const MEMORY_TOOLS: &[&str] = &[
    "remember_fact",
    "recall_fact",
    "memory_replace",
    "memory_append",
    "recall_memory",
    "kg_add",
    "kg_query",
];

/// Tool results are kept up to this many characters.
const MAX_RECORDED_CHARS: usize = 4000;

#[async_trait]
impl Hook for HistoryHook {
    async fn before_model_call(&self, request: &mut ChatRequest<'_>) -> Result<(), HookError> {
        let mut new = Vec::new();
        let mut fingerprints = Vec::new();
        let latest_user = request
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::User { .. }));
        let turn = latest_user.and_then(|at| {
            let text = request.messages[at].text();
            self.turn.enter(Self::fingerprint("user", &text, at))
        });
        for (position, message) in request.messages.iter().enumerate() {
            let role = match message {
                Message::User { .. } => "user",
                Message::Assistant { .. } => "assistant",
                _ => continue,
            };
            let text = message.text();
            let fingerprint = Self::fingerprint(role, &text, position);
            if !text.trim().is_empty() && !self.seen(fingerprint) {
                let mut record = NewRecord::new(self.session.clone(), role, text);
                // Earlier messages (a resumed conversation) belong to no
                // turn in progress.
                if latest_user.is_some_and(|at| position >= at) {
                    record.turn = turn.clone();
                }
                new.push(record);
                fingerprints.push(fingerprint);
            }
        }
        if new.is_empty() {
            return Ok(());
        }
        match self.store.add_records(&self.scope, &new).await {
            // Marked only once stored: a failed write is retried next turn.
            Ok(_) => {
                if let Ok(mut seen) = self.seen.lock() {
                    seen.extend(fingerprints);
                }
            }
            // Memory must not stop the conversation.
            Err(error) => tracing::warn!(%error, "could not record history"),
        }
        Ok(())
    }

    async fn after_tool_call(&self, call: &ToolCall, result: &mut Result<ToolOutput, ToolError>) {
        // Memory tools' own output would feed recall with copies of itself.
        if MEMORY_TOOLS.contains(&call.name.as_str()) {
            return;
        }
        let text = match result {
            Ok(output) => output.text.clone(),
            Err(error) => format!("error: {}", error.message()),
        };
        if text.trim().is_empty() {
            return;
        }
        let text: String = text.chars().take(MAX_RECORDED_CHARS).collect();
        let mut record = NewRecord::new(
            self.session.clone(),
            format!("tool:{}", call.name),
            format!("{}({}) -> {text}", call.name, call.arguments),
        );
        record.turn = self.turn.current();
        if let Err(error) = self.store.add_records(&self.scope, &[record]).await {
            tracing::warn!(%error, "could not record a tool result");
        }
    }
}
