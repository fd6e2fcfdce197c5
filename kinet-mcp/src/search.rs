//! Tool search for large MCP tool sets: past a token budget the model is
//! offered one `mcp_tool_search` tool instead of every schema; the tools it
//! finds are offered in full from its next step on: for the hub's lifetime
//! when the hub itself is the source, for one conversation (and its saved
//! session) with [`ConversationTools`](crate::ConversationTools).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use kinet_core::{Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput};
use serde_json::Value;

use crate::remote_tool::McpTool;

/// The search tool's name.
pub(crate) const SEARCH_TOOL: &str = "mcp_tool_search";

/// Results shown when the model asks for no number.
const DEFAULT_LIMIT: usize = 8;

/// Tokens a tool's spec costs in a request, estimated as 4 characters a
/// token over its name, description and schema.
pub(crate) fn spec_tokens(tool: &McpTool) -> usize {
    (tool.name.len() + tool.description.len() + tool.parameters.to_string().len()).div_ceil(4)
}

/// The tools the model found so far (qualified names).
#[derive(Default)]
pub(crate) struct Loaded(Mutex<BTreeSet<String>>);

impl Loaded {
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.0.lock().is_ok_and(|set| set.contains(name))
    }

    /// Every name found so far, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(crate) fn add(&self, names: impl IntoIterator<Item = String>) {
        if let Ok(mut set) = self.0.lock() {
            set.extend(names);
        }
    }
}

/// The first line of a description, at most 160 characters.
fn one_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    match line.char_indices().nth(160) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

/// Ranks `tools` for `query`: each word found in a tool's name scores 3,
/// in its description 1; tools that match nothing are left out.
pub(crate) fn rank<'a>(tools: &'a [Arc<McpTool>], query: &str) -> Vec<&'a Arc<McpTool>> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 1)
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, &Arc<McpTool>)> = tools
        .iter()
        .map(|tool| {
            let name = tool.name.to_lowercase();
            let description = tool.description.to_lowercase();
            let score = words
                .iter()
                .map(|w| {
                    3 * usize::from(name.contains(w.as_str()))
                        + usize::from(description.contains(w.as_str()))
                })
                .sum();
            (score, tool)
        })
        .filter(|(score, _)| *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    scored.into_iter().map(|(_, tool)| tool).collect()
}

/// `mcp_tool_search`: finds MCP tools by keyword and makes them callable.
pub(crate) struct SearchTool {
    pub(crate) tools: Vec<Arc<McpTool>>,
    pub(crate) loaded: Arc<Loaded>,
    pub(crate) description: String,
}

impl SearchTool {
    pub(crate) fn new(tools: Vec<Arc<McpTool>>, loaded: Arc<Loaded>) -> Self {
        let mut servers: Vec<&str> = tools.iter().map(|t| t.slot.config.name.as_str()).collect();
        servers.dedup();
        let description = format!(
            "Finds tools of the connected MCP servers ({}): {} tools whose schemas are not loaded yet. \
             Give words for the capability you need (e.g. \"read file\", \"create issue\"); the best matches are \
             listed with one line each and become callable from your next step. \
             `select:name1,name2` loads tools by exact name.",
            servers.join(", "),
            tools.len()
        );
        Self {
            tools,
            loaded,
            description,
        }
    }

    fn run(&self, query: &str, limit: usize) -> ToolOutput {
        let found: Vec<&Arc<McpTool>> = match query.trim().strip_prefix("select:") {
            Some(names) => {
                let wanted: Vec<&str> = names.split(',').map(str::trim).collect();
                self.tools
                    .iter()
                    .filter(|t| wanted.contains(&t.name.as_str()))
                    .collect()
            }
            None => rank(&self.tools, query).into_iter().take(limit).collect(),
        };
        if found.is_empty() {
            return ToolOutput::text(format!(
                "No MCP tool matches `{query}`. Try other words, or fewer."
            ));
        }
        self.loaded.add(found.iter().map(|t| t.name.clone()));
        let lines: Vec<String> = found
            .iter()
            .map(|t| format!("{} — {}", t.name, one_line(&t.description)))
            .collect();
        ToolOutput::text(format!(
            "{}\n\nThese tools are callable from your next step.",
            lines.join("\n")
        ))
    }
}

/// The arguments of `mcp_tool_search`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct SearchArgs {
    /// Words describing the capability, or `select:name1,name2`.
    query: String,
    /// How many matches to list (default 8, at most 50).
    #[serde(default)]
    #[schemars(with = "Option<u64>")]
    limit: Option<Value>,
}

#[async_trait]
impl Tool for SearchTool {
    type Args = SearchArgs;

    fn name(&self) -> &str {
        SEARCH_TOOL
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }

    async fn call(&self, args: SearchArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        if args.query.trim().is_empty() {
            return Err(ToolError::invalid_arguments(
                "`query` (words to search for) is required",
            ));
        }
        // A limit that is not a number means the default, as before.
        let limit = args
            .limit
            .as_ref()
            .and_then(Value::as_u64)
            .map_or(DEFAULT_LIMIT, |l| (l as usize).clamp(1, 50));
        Ok(self.run(&args.query, limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_cuts_long_text() {
        assert_eq!(one_line("\n  First line.\nSecond"), "First line.");
        assert!(one_line(&"x".repeat(400)).ends_with('…'));
    }
}
