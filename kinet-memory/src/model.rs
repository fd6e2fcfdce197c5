//! The data every backend stores and returns.

use std::sync::Arc;

use serde::Serialize;

use crate::embed::Embedder;

use crate::MemoryError;

/// A labelled long-term memory block, rendered into each request by
/// [`BlocksHook`](crate::BlocksHook).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Block {
    /// The label (`user_profile`, `project_context`, ...).
    pub label: String,
    /// The content.
    pub value: String,
    /// The most characters it may hold.
    pub limit: usize,
    /// The model cannot change it.
    pub read_only: bool,
    /// What belongs in it (shown to the model).
    pub description: String,
}

/// A block to create if missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSpec {
    /// The label.
    pub label: String,
    /// Character limit.
    pub limit: usize,
    /// Read-only for the model.
    pub read_only: bool,
    /// What belongs in it.
    pub description: String,
    /// Initial content.
    pub initial: String,
    /// Seen by every scope inside the one it is defined in (an agent's
    /// persona for all its users), instead of by that scope alone. In
    /// [`MemoryConfig::blocks`] a shared block is defined for the empty
    /// scope, so every scope sees it; an unshared one is a template each
    /// scope gets its own copy of. A shared block the model may edit is a
    /// channel between the scopes that see it: make it read-only unless
    /// that is the point.
    pub shared: bool,
}

impl BlockSpec {
    /// A writable block.
    pub fn new(label: impl Into<String>, limit: usize, description: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            limit,
            read_only: false,
            description: description.into(),
            initial: String::new(),
            shared: false,
        }
    }

    /// The same block, read-only for the model.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// The same block, with initial content.
    pub fn initial(mut self, text: impl Into<String>) -> Self {
        self.initial = text.into();
        self
    }

    /// The same block, shared by every scope inside the one it is
    /// defined in (see the `shared` field).
    pub fn shared(mut self) -> Self {
        self.shared = true;
        self
    }

    /// The default blocks: `user_profile` (2000 chars), `project_context`
    /// (4000), `active_goals` (1000).
    pub fn defaults() -> Vec<Self> {
        vec![
            Self::new(
                "user_profile",
                2000,
                "Who the user is: name, role, preferences, how they like to work.",
            ),
            Self::new(
                "project_context",
                4000,
                "The project: what it is, its stack, conventions, key decisions.",
            ),
            Self::new(
                "active_goals",
                1000,
                "What the user is trying to achieve now, and open threads.",
            ),
        ]
    }
}

/// A change to one block, applied by
/// [`MemoryBackend::edit_block`](crate::MemoryBackend::edit_block) inside
/// the backend's transaction, so concurrent edits (from other agents or
/// other processes) are never lost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockEdit {
    /// Replace the one occurrence of `old` with `new` (refused when `old`
    /// occurs zero or several times). Refused on read-only blocks.
    Replace {
        /// The exact text to replace.
        old: String,
        /// Its replacement.
        new: String,
    },
    /// Append text on a new line. Refused on read-only blocks.
    Append(String),
    /// Set the whole content: host use, ignores the read-only flag.
    Set(String),
}

impl BlockEdit {
    /// The block's new value, or why the edit is refused (written for the
    /// model). The character limit holds, except that an edit which does
    /// not grow the block is always allowed, so a block over a lowered
    /// limit can be shrunk step by step.
    pub(crate) fn apply(&self, block: &Block) -> Result<String, MemoryError> {
        let label = &block.label;
        if block.read_only && !matches!(self, Self::Set(_)) {
            return Err(MemoryError::Invalid(format!(
                "block `{label}` is read-only"
            )));
        }
        let value = match self {
            Self::Replace { old, new } => {
                if old.is_empty() {
                    return Err(MemoryError::Invalid(
                        "`old` is empty; give the exact text to replace".into(),
                    ));
                }
                match block.value.matches(old.as_str()).count() {
                    0 => {
                        return Err(MemoryError::Invalid(format!(
                            "`{old}` does not occur in block `{label}`; copy the exact text from the block"
                        )));
                    }
                    1 => block.value.replacen(old.as_str(), new, 1),
                    n => {
                        return Err(MemoryError::Invalid(format!(
                            "`{old}` occurs {n} times in block `{label}`; include more surrounding text so it occurs once"
                        )));
                    }
                }
            }
            Self::Append(text) if block.value.is_empty() => text.clone(),
            Self::Append(text) => format!("{}\n{text}", block.value),
            Self::Set(value) => return Ok(value.clone()),
        };
        let chars = value.chars().count();
        let used = block.value.chars().count();
        if chars > block.limit && chars > used {
            return Err(MemoryError::Invalid(format!(
                "block `{label}` would hold {chars} characters, over its {} limit by {}; it holds {used} now, \
                 so {} characters of room are left. Shorten the text or replace older content.",
                block.limit,
                chars - block.limit,
                block.limit.saturating_sub(used)
            )));
        }
        Ok(value)
    }
}

/// The answer for an edit of a block that does not exist.
pub(crate) fn no_such_block(label: &str, known: &[String]) -> MemoryError {
    MemoryError::Invalid(format!(
        "there is no block `{label}`; blocks: {}",
        if known.is_empty() {
            "(none)".to_owned()
        } else {
            known.join(", ")
        }
    ))
}

/// One history record to store.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewRecord {
    /// The session it belongs to.
    pub session: String,
    /// `user`, `assistant`, `tool:<name>`, or what the host records.
    pub role: String,
    /// The text.
    pub text: String,
    /// The turn (one user message and what answered it) it was recorded
    /// in; recall can leave a turn out (see [`RecallQuery::exclude_turn`]).
    pub turn: Option<String>,
}

impl NewRecord {
    /// A record outside any turn.
    pub fn new(
        session: impl Into<String>,
        role: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Self {
            session: session.into(),
            role: role.into(),
            text: text.into(),
            turn: None,
        }
    }

    /// The same record, of `turn`.
    pub fn in_turn(mut self, turn: impl Into<String>) -> Self {
        self.turn = Some(turn.into());
        self
    }
}

/// What to recall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecallQuery {
    /// The query text (embedded for similarity; its words for full text).
    pub text: String,
    /// How many records, 1 to 100 (default 5).
    pub limit: usize,
    /// Leave out records older than this (seconds since the epoch).
    pub since: Option<i64>,
    /// Leave out the records of this turn: the turn in progress, whose own
    /// question would otherwise be the best match for itself.
    pub exclude_turn: Option<String>,
}

impl RecallQuery {
    /// A query for `text`: 5 records, any age, no turn left out.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            limit: 5,
            since: None,
            exclude_turn: None,
        }
    }

    /// At most `limit` records (clamped to 1..=100).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Only records from `since` on (seconds since the epoch).
    pub fn since(mut self, since: Option<i64>) -> Self {
        self.since = since;
        self
    }

    /// Leaves out the records of `turn`.
    pub fn exclude_turn(mut self, turn: Option<String>) -> Self {
        self.exclude_turn = turn;
        self
    }

    /// The clamped limit and the candidate depth each ranking searches.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let k = self.limit.clamp(1, 100);
        (k, (k * 4).max(50))
    }
}

/// One recalled record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// Record id.
    pub id: i64,
    /// The session it was recorded in.
    pub session: String,
    /// `user`, `assistant`, `tool`, or what the host recorded.
    pub role: String,
    /// The text.
    pub text: String,
    /// Seconds since the Unix epoch.
    pub created_at: i64,
    /// The fused score (higher is better).
    pub score: f64,
    /// Cosine similarity, when the vector search found it.
    pub similarity: Option<f32>,
    /// Whether full-text search found it.
    pub full_text: bool,
}

/// How a recall was answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecallMode {
    /// Embedding similarity and full-text rank, fused by reciprocal rank.
    Hybrid,
    /// Full text only: no embedder is configured, or it failed.
    FullTextOnly {
        /// Why.
        reason: String,
    },
}

/// A knowledge-graph fact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Triple {
    /// Id.
    pub id: i64,
    /// Subject.
    pub subject: String,
    /// Predicate.
    pub predicate: String,
    /// Object.
    pub object: String,
    /// Where it came from.
    pub source: String,
    /// Valid since (seconds since the epoch).
    pub valid_from: i64,
    /// Valid until; `None` while current.
    pub valid_to: Option<i64>,
}

/// What `recall` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recall {
    /// Records, best first.
    pub hits: Vec<Hit>,
    /// Current triples mentioning the query's words.
    pub triples: Vec<Triple>,
    /// How the records were ranked.
    pub mode: RecallMode,
}

/// A query on triples; `None` fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TripleQuery {
    /// Subject.
    pub subject: Option<String>,
    /// Predicate.
    pub predicate: Option<String>,
    /// Object.
    pub object: Option<String>,
    /// Include superseded triples.
    pub include_history: bool,
}

/// A triple to add.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewTriple {
    /// Subject.
    pub subject: String,
    /// Predicate.
    pub predicate: String,
    /// Object.
    pub object: String,
    /// Where it came from (may be empty).
    pub source: String,
    /// End the current triples with the same subject and predicate
    /// (compared case-insensitively) and another object.
    pub supersede: bool,
}

impl NewTriple {
    /// A triple that supersedes older objects of its subject and predicate.
    pub fn new(
        subject: impl Into<String>,
        predicate: impl Into<String>,
        object: impl Into<String>,
    ) -> Self {
        Self {
            subject: subject.into(),
            predicate: predicate.into(),
            object: object.into(),
            source: String::new(),
            supersede: true,
        }
    }

    /// Where it came from.
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// Kept beside older objects instead of superseding them.
    pub fn keep_existing(mut self) -> Self {
        self.supersede = false;
        self
    }
}

/// Settings of a store (SQLite or PostgreSQL). The default: no embedder
/// (full-text recall only) and no blocks.
#[derive(Clone, Default)]
pub struct MemoryConfig {
    /// The embedder for recall; `None`: full-text recall only.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// Blocks every scope has: an unshared one is a template (each scope
    /// gets its own copy, with the initial content until first edited, and
    /// the template's limit, flag and description always apply); a shared
    /// one is created once for the empty scope if missing, and seen by all.
    pub blocks: Vec<BlockSpec>,
}
