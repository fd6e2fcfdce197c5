//! The memory tools the model calls.

use async_trait::async_trait;
use kinet_core::tool::Scheduling;
use kinet_core::{Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput, Toolset};
use schemars::JsonSchema;
use serde::Deserialize;

use std::sync::Arc;

use crate::MemoryError;
use crate::backend::SharedMemory;
use crate::hooks::{BlocksHook, HistoryHook, TurnMark};
use crate::model::{NewTriple, RecallMode, RecallQuery, Triple, TripleQuery};
use crate::scope::Scope;

fn tool_error(error: MemoryError) -> ToolError {
    match error {
        MemoryError::Invalid(message) => ToolError::invalid_arguments(message),
        other => ToolError::failed(other.to_string()),
    }
}

/// The memory tools for one session: `remember_fact`, `recall_fact`,
/// `memory_replace`, `memory_append`, `recall_memory`, `kg_add`,
/// `kg_query`. They change only the agent's memory, so they are read-only
/// for approval purposes (never asked about).
///
/// Install [`history_hook`](Self::history_hook) beside the tools to record
/// the conversation for `recall_memory`; recall then leaves out the turn in
/// progress. [`blocks_hook`](Self::blocks_hook) renders the blocks the
/// pack's scope sees.
///
/// Everything the tools and hooks read and write is in the pack's
/// [`Scope`] (default: the empty scope), which the host sets with
/// [`scope`](Self::scope); the model cannot name another one.
#[derive(Debug, Clone)]
pub struct MemoryPack {
    store: SharedMemory,
    session: String,
    scope: Scope,
    turn: Arc<TurnMark>,
}

impl MemoryPack {
    /// Tools on a backend (a [`MemoryStore`](crate::MemoryStore), a
    /// [`PostgresMemory`](crate::postgres::PostgresMemory) or any
    /// `Arc<dyn MemoryBackend>`), with facts scoped to `session`.
    pub fn new(memory: impl Into<SharedMemory>, session: impl Into<String>) -> Self {
        Self {
            store: memory.into(),
            session: session.into(),
            scope: Scope::default(),
            turn: Arc::default(),
        }
    }

    /// The same pack reading and writing only `scope`'s memory (and the
    /// shared blocks of scopes containing it). Set it before making the
    /// toolset and hooks: they take the scope with them.
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// A [`BlocksHook`] rendering the blocks this pack's scope sees.
    pub fn blocks_hook(&self) -> BlocksHook {
        BlocksHook::new(Arc::clone(&self.store)).scope(self.scope.clone())
    }

    /// A [`HistoryHook`] recording into the same backend and session that
    /// tells this pack's `recall_memory` which turn is in progress.
    pub fn history_hook(&self) -> HistoryHook {
        HistoryHook::with_turn(
            Arc::clone(&self.store),
            self.session.clone(),
            Arc::clone(&self.turn),
        )
        .scope(self.scope.clone())
    }

    /// All seven tools.
    pub fn toolset(&self) -> Toolset {
        let shared = |t: &Self| t.clone();
        Toolset::new()
            .with(RememberFact(shared(self)))
            .with(RecallFact(shared(self)))
            .with(MemoryReplace(shared(self)))
            .with(MemoryAppend(shared(self)))
            .with(RecallMemory(shared(self)))
            .with(KgAdd(shared(self)))
            .with(KgQuery(shared(self)))
    }
}

/// What the memory tools tell clients: reads, additions and replacements of
/// the agent's own store, on this machine.
const READS: ToolAnnotations = ToolAnnotations::read_only();
const WRITES: ToolAnnotations = ToolAnnotations::local_write();
const REPLACES: ToolAnnotations = ToolAnnotations::local_write().destructive(true);

macro_rules! memory_tool {
    ($tool:ident, $args:ty, $name:literal, $annotations:expr, $description:expr) => {
        struct $tool(MemoryPack);

        #[async_trait]
        impl Tool for $tool {
            type Args = $args;
            fn name(&self) -> &str {
                $name
            }
            fn description(&self) -> &str {
                $description
            }
            fn annotations(&self) -> ToolAnnotations {
                $annotations
            }
            // The store is the agent's own: no approval, but one call at a
            // time, in call order, so a recall sees the writes before it.
            fn mutating(&self, _: &$args) -> bool {
                false
            }
            fn scheduling(&self, _: &$args) -> Scheduling {
                Scheduling::keyed("memory")
            }
            async fn call(&self, args: $args, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
                run(&self.0, args).await
            }
        }
    };
}

/// Arguments of `remember_fact`.
#[derive(Debug, Deserialize, JsonSchema)]
struct RememberFactArgs {
    /// A short key, e.g. `build_command` or `chosen_database`.
    key: String,
    /// The value to keep.
    value: String,
}

/// Arguments of `recall_fact`.
#[derive(Debug, Deserialize, JsonSchema)]
struct RecallFactArgs {
    /// The key; omit to list every fact of this session.
    #[serde(default)]
    key: Option<String>,
}

/// Arguments of `memory_replace`.
#[derive(Debug, Deserialize, JsonSchema)]
struct MemoryReplaceArgs {
    /// The block label, e.g. `user_profile`.
    label: String,
    /// The exact text to replace; it must occur once in the block.
    old: String,
    /// The new text (empty to delete `old`).
    new: String,
}

/// Arguments of `memory_append`.
#[derive(Debug, Deserialize, JsonSchema)]
struct MemoryAppendArgs {
    /// The block label, e.g. `project_context`.
    label: String,
    /// The text to add on a new line.
    text: String,
}

/// A point in time: seconds since the Unix epoch, or a `YYYY-MM-DD` date.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
enum Since {
    Seconds(i64),
    Date(String),
}

/// Arguments of `recall_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
struct RecallMemoryArgs {
    /// What to look for, in natural language.
    query: String,
    /// How many results (default 5, at most 50).
    #[serde(default)]
    k: Option<usize>,
    /// Only records since then: a `YYYY-MM-DD` date or Unix seconds.
    #[serde(default)]
    since: Option<Since>,
}

/// Arguments of `kg_add`.
#[derive(Debug, Deserialize, JsonSchema)]
struct KgAddArgs {
    /// The entity, e.g. `api-service`.
    subject: String,
    /// The relation, e.g. `deployed_on`.
    predicate: String,
    /// The value or other entity, e.g. `kubernetes`.
    object: String,
    /// Where the fact comes from (a file, the user, a URL).
    #[serde(default)]
    source: Option<String>,
    /// Keep other current objects for this subject and predicate (for
    /// many-valued relations such as `likes`); by default they are
    /// superseded.
    #[serde(default)]
    keep_existing: bool,
}

/// Arguments of `kg_query`.
#[derive(Debug, Deserialize, JsonSchema)]
struct KgQueryArgs {
    /// Match this subject.
    #[serde(default)]
    subject: Option<String>,
    /// Match this predicate.
    #[serde(default)]
    predicate: Option<String>,
    /// Match this object.
    #[serde(default)]
    object: Option<String>,
    /// Include superseded facts, with their validity dates.
    #[serde(default)]
    include_history: bool,
}

memory_tool!(
    RememberFact,
    RememberFactArgs,
    "remember_fact",
    WRITES,
    "Stores a key/value fact for this session (a step's output, a decision, a path). Overwrites the key."
);
memory_tool!(
    RecallFact,
    RecallFactArgs,
    "recall_fact",
    READS,
    "Reads a fact stored with remember_fact in this session; without a key, lists all of them."
);
memory_tool!(
    MemoryReplace,
    MemoryReplaceArgs,
    "memory_replace",
    REPLACES,
    "Edits a long-term memory block (shown in your system prompt): replaces text that occurs exactly once in it."
);
memory_tool!(
    MemoryAppend,
    MemoryAppendArgs,
    "memory_append",
    WRITES,
    "Adds a line to a long-term memory block (shown in your system prompt). Blocks have character limits."
);
memory_tool!(
    RecallMemory,
    RecallMemoryArgs,
    "recall_memory",
    READS,
    "Searches past conversations and tool results by meaning and keywords; also returns related knowledge-graph facts."
);
memory_tool!(
    KgAdd,
    KgAddArgs,
    "kg_add",
    WRITES,
    "Records a fact as (subject, predicate, object). A new object for the same subject and predicate supersedes the old one, which stays in the history."
);
memory_tool!(
    KgQuery,
    KgQueryArgs,
    "kg_query",
    READS,
    "Looks up knowledge-graph facts by subject, predicate and/or object; include_history shows superseded ones."
);

trait Run<A> {
    async fn run(&self, args: A) -> Result<ToolOutput, ToolError>;
}

async fn run<A>(tools: &MemoryPack, args: A) -> Result<ToolOutput, ToolError>
where
    MemoryPack: Run<A>,
{
    tools.run(args).await
}

impl Run<RememberFactArgs> for MemoryPack {
    async fn run(&self, args: RememberFactArgs) -> Result<ToolOutput, ToolError> {
        if args.key.trim().is_empty() {
            return Err(ToolError::invalid_arguments("the key is empty"));
        }
        self.store
            .set_fact(&self.scope, &self.session, &args.key, &args.value)
            .await
            .map_err(tool_error)?;
        Ok(ToolOutput::text(format!("Remembered `{}`.", args.key)))
    }
}

impl Run<RecallFactArgs> for MemoryPack {
    async fn run(&self, args: RecallFactArgs) -> Result<ToolOutput, ToolError> {
        match args.key {
            Some(key) => match self
                .store
                .fact(&self.scope, &self.session, &key)
                .await
                .map_err(tool_error)?
            {
                Some(value) => Ok(ToolOutput::text(value)),
                None => {
                    let keys: Vec<String> = self
                        .store
                        .facts(&self.scope, &self.session)
                        .await
                        .map_err(tool_error)?
                        .into_iter()
                        .map(|(k, _)| k)
                        .collect();
                    Err(ToolError::not_found(format!(
                        "no fact `{key}` in this session; known keys: {}",
                        if keys.is_empty() {
                            "(none)".to_owned()
                        } else {
                            keys.join(", ")
                        }
                    )))
                }
            },
            None => {
                let facts = self
                    .store
                    .facts(&self.scope, &self.session)
                    .await
                    .map_err(tool_error)?;
                Ok(ToolOutput::text(if facts.is_empty() {
                    "No facts stored in this session.".to_owned()
                } else {
                    facts
                        .iter()
                        .map(|(k, v)| format!("{k}: {v}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                }))
            }
        }
    }
}

impl Run<MemoryReplaceArgs> for MemoryPack {
    async fn run(&self, args: MemoryReplaceArgs) -> Result<ToolOutput, ToolError> {
        let block = self
            .store
            .block_replace(&self.scope, &args.label, &args.old, &args.new)
            .await
            .map_err(tool_error)?;
        Ok(ToolOutput::text(format!(
            "Updated `{}` ({}/{} characters).",
            block.label,
            block.value.chars().count(),
            block.limit
        )))
    }
}

impl Run<MemoryAppendArgs> for MemoryPack {
    async fn run(&self, args: MemoryAppendArgs) -> Result<ToolOutput, ToolError> {
        let block = self
            .store
            .block_append(&self.scope, &args.label, &args.text)
            .await
            .map_err(tool_error)?;
        Ok(ToolOutput::text(format!(
            "Appended to `{}` ({}/{} characters).",
            block.label,
            block.value.chars().count(),
            block.limit
        )))
    }
}

fn parse_since(since: Since) -> Result<i64, ToolError> {
    match since {
        Since::Seconds(seconds) if seconds.abs() > 100_000_000_000 => {
            Err(ToolError::invalid_arguments(format!(
                "`since` {seconds} looks like milliseconds; give seconds since the epoch or a YYYY-MM-DD date"
            )))
        }
        Since::Seconds(seconds) => Ok(seconds),
        Since::Date(text) => {
            let parts: Vec<&str> = text.get(..10).unwrap_or(&text).split('-').collect();
            let date = match parts.as_slice() {
                [y, m, d] => match (y.parse::<i32>(), m.parse::<u8>(), d.parse::<u8>()) {
                    (Ok(y), Ok(m), Ok(d)) => time::Month::try_from(m)
                        .ok()
                        .and_then(|m| time::Date::from_calendar_date(y, m, d).ok()),
                    _ => None,
                },
                _ => None,
            };
            date.map(|date| date.midnight().assume_utc().unix_timestamp())
                .ok_or_else(|| {
                    ToolError::invalid_arguments(format!("`{text}` is not a YYYY-MM-DD date"))
                })
        }
    }
}

fn format_date(seconds: i64) -> String {
    match time::OffsetDateTime::from_unix_timestamp(seconds) {
        Ok(at) => format!(
            "{:04}-{:02}-{:02}",
            at.year(),
            u8::from(at.month()),
            at.day()
        ),
        // Past the years a calendar date is kept for (±9999).
        Err(_) => format!("{seconds} (unix seconds)"),
    }
}

fn format_triple(triple: &Triple) -> String {
    let validity = match triple.valid_to {
        None => format!("since {}", format_date(triple.valid_from)),
        Some(to) => format!(
            "{} to {}, superseded",
            format_date(triple.valid_from),
            format_date(to)
        ),
    };
    let source = if triple.source.is_empty() {
        String::new()
    } else {
        format!(", source: {}", triple.source)
    };
    format!(
        "({}, {}, {}) [{validity}{source}]",
        triple.subject, triple.predicate, triple.object
    )
}

impl Run<RecallMemoryArgs> for MemoryPack {
    async fn run(&self, args: RecallMemoryArgs) -> Result<ToolOutput, ToolError> {
        if args.query.trim().is_empty() {
            return Err(ToolError::invalid_arguments("the query is empty"));
        }
        let since = args.since.map(parse_since).transpose()?;
        let query = RecallQuery::new(args.query)
            .limit(args.k.unwrap_or(5).min(50))
            .since(since)
            .exclude_turn(self.turn.current());
        let recall = self
            .store
            .recall(&self.scope, &query)
            .await
            .map_err(tool_error)?;
        let mut text = String::new();
        if let RecallMode::FullTextOnly { reason } = &recall.mode {
            text.push_str(&format!(
                "(semantic search unavailable: {reason}; keyword matches only)\n"
            ));
        }
        if recall.hits.is_empty() {
            text.push_str("No matching memories.\n");
        }
        for (n, hit) in recall.hits.iter().enumerate() {
            text.push_str(&format!(
                "{}. [{} {} {}] {}\n",
                n + 1,
                format_date(hit.created_at),
                hit.session,
                hit.role,
                hit.text
            ));
        }
        if !recall.triples.is_empty() {
            text.push_str("Related facts:\n");
            for triple in &recall.triples {
                text.push_str(&format!("- {}\n", format_triple(triple)));
            }
        }
        let structured = serde_json::to_value(&recall).unwrap_or_default();
        Ok(ToolOutput::text(text.trim_end().to_owned()).with_structured(structured))
    }
}

impl Run<KgAddArgs> for MemoryPack {
    async fn run(&self, args: KgAddArgs) -> Result<ToolOutput, ToolError> {
        for (field, value) in [
            ("subject", &args.subject),
            ("predicate", &args.predicate),
            ("object", &args.object),
        ] {
            if value.trim().is_empty() {
                return Err(ToolError::invalid_arguments(format!(
                    "the {field} is empty"
                )));
            }
        }
        let (triple, superseded) = self
            .store
            .add_triple(
                &self.scope,
                NewTriple {
                    subject: args.subject,
                    predicate: args.predicate,
                    object: args.object,
                    source: args.source.unwrap_or_default(),
                    supersede: !args.keep_existing,
                },
            )
            .await
            .map_err(tool_error)?;
        let mut text = format!("Recorded {}.", format_triple(&triple));
        if !superseded.is_empty() {
            text.push_str(&format!(" It supersedes: {}.", superseded.join(", ")));
        }
        Ok(ToolOutput::text(text))
    }
}

impl Run<KgQueryArgs> for MemoryPack {
    async fn run(&self, args: KgQueryArgs) -> Result<ToolOutput, ToolError> {
        if args.subject.is_none() && args.predicate.is_none() && args.object.is_none() {
            return Err(ToolError::invalid_arguments(
                "give at least one of subject, predicate, object",
            ));
        }
        let triples = self
            .store
            .query_triples(
                &self.scope,
                TripleQuery {
                    subject: args.subject,
                    predicate: args.predicate,
                    object: args.object,
                    include_history: args.include_history,
                },
            )
            .await
            .map_err(tool_error)?;
        Ok(ToolOutput::text(if triples.is_empty() {
            "No matching facts.".to_owned()
        } else {
            triples
                .iter()
                .map(format_triple)
                .collect::<Vec<_>>()
                .join("\n")
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        for (text, expected) in [("1970-01-01", 0), ("2026-12-02", 1_796_169_600)] {
            let seconds = parse_since(Since::Date(text.into())).unwrap();
            assert_eq!(seconds, expected, "{text}");
            assert_eq!(format_date(seconds), text);
        }
        assert!(parse_since(Since::Date("last week".into())).is_err());
        assert!(parse_since(Since::Date("2024-02-30".into())).is_err());
        assert!(parse_since(Since::Date("2024-02-29".into())).is_ok());
        assert!(parse_since(Since::Seconds(1_764_665_730_000)).is_err());
    }
}
