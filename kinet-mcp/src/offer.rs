//! What the hub offers the model each turn: the ready servers' tools, or
//! past the token budget the tools found so far and `mcp_tool_search`; and
//! the resource tools while a server has resources.

use std::sync::Arc;

use async_trait::async_trait;
use kinet_core::tool::{DynTool, ToolSource};
use tokio::time::Instant;

use crate::hub::McpHub;

use crate::search::Loaded;

/// The hub as the tool source of one conversation: the tools the model
/// finds through `mcp_tool_search` are offered to this conversation only.
/// Made by [`McpHub::conversation_tools`]; the hub itself, as a
/// [`ToolSource`], keeps one found set for every conversation it serves.
///
/// It is also a [`SessionState`](kinet_core::session::SessionState)
/// (key `mcp_tool_search`): give it to the session's journal and to
/// `Session::resume`, and a resumed conversation is offered the tools it
/// had found without searching again.
#[derive(Clone)]
pub struct ConversationTools {
    hub: McpHub,
    loaded: Arc<Loaded>,
}

impl std::fmt::Debug for ConversationTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConversationTools").finish_non_exhaustive()
    }
}

impl McpHub {
    /// A tool source for one conversation on this hub (the servers are
    /// shared; the set of tools found through tool search is its own).
    /// Give each agent run of a multi-conversation host its own.
    pub fn conversation_tools(&self) -> ConversationTools {
        ConversationTools {
            hub: self.clone(),
            loaded: Arc::default(),
        }
    }

    /// The ready servers' tools; past the budget, those in `found` and
    /// `mcp_tool_search` for the rest.
    async fn offer(
        &self,
        ready_by: Instant,
        window: Option<u64>,
        found: &Arc<Loaded>,
    ) -> Vec<Arc<dyn DynTool>> {
        self.wait_until(ready_by).await;
        let named = self.named_tools();
        let over_budget = self
            .settings()
            .search_budget(window)
            .is_some_and(|budget| named.tokens > budget);
        let mut offered = self.resource_tools();
        if !over_budget {
            offered.extend(
                named
                    .tools
                    .iter()
                    .map(|tool| Arc::clone(tool) as Arc<dyn DynTool>),
            );
            return offered;
        }
        let (loaded, rest): (Vec<_>, Vec<_>) = named
            .tools
            .iter()
            .cloned()
            .partition(|tool| found.contains(&tool.name));
        offered.extend(loaded.into_iter().map(|tool| tool as Arc<dyn DynTool>));
        if !rest.is_empty() {
            offered.push(Arc::new(crate::search::SearchTool::new(
                rest,
                Arc::clone(found),
            )));
        }
        offered
    }
}

#[async_trait]
impl ToolSource for McpHub {
    fn name(&self) -> &str {
        "mcp"
    }

    /// The ready servers' tools; past the tool-search budget
    /// ([`HubSettings::tool_search_budget`](crate::HubSettings::tool_search_budget)),
    /// the tools found so far (by any conversation using the hub itself as
    /// its source; see [`McpHub::conversation_tools`]) and
    /// `mcp_tool_search` for the rest.
    async fn tools(&self, ready_by: Instant) -> Vec<Arc<dyn DynTool>> {
        self.offer(ready_by, None, self.loaded()).await
    }

    /// [`tools`](Self::tools) with the budget taken from the model's
    /// window ([`HubSettings::tool_search_percent`](crate::HubSettings::tool_search_percent)).
    async fn tools_for_window(
        &self,
        ready_by: Instant,
        window: Option<u64>,
    ) -> Vec<Arc<dyn DynTool>> {
        self.offer(ready_by, window, self.loaded()).await
    }
}

impl kinet_core::session::SessionState for ConversationTools {
    fn key(&self) -> &str {
        "mcp_tool_search"
    }

    fn save(&self) -> serde_json::Value {
        serde_json::json!({ "found": self.loaded.names() })
    }

    fn restore(&self, state: &serde_json::Value) -> Result<(), String> {
        let found = state
            .get("found")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| "the saved tool-search state has no `found` list".to_owned())?;
        // Names of tools that are gone are harmless: nothing matches them.
        self.loaded.add(
            found
                .iter()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_owned),
        );
        Ok(())
    }
}

#[async_trait]
impl ToolSource for ConversationTools {
    fn name(&self) -> &str {
        "mcp"
    }

    async fn tools(&self, ready_by: Instant) -> Vec<Arc<dyn DynTool>> {
        self.hub.offer(ready_by, None, &self.loaded).await
    }

    async fn tools_for_window(
        &self,
        ready_by: Instant,
        window: Option<u64>,
    ) -> Vec<Arc<dyn DynTool>> {
        self.hub.offer(ready_by, window, &self.loaded).await
    }
}
