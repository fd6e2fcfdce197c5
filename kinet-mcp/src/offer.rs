//! What the hub offers the model each turn: the ready servers' tools, or
//! past the token budget the tools found so far and `mcp_tool_search`; and
//! the resource tools while a server has resources.

use std::sync::Arc;

use async_trait::async_trait;
use kinet_core::tool::{DynTool, ToolSource};
use tokio::time::Instant;

use crate::hub::McpHub;

#[async_trait]
impl ToolSource for McpHub {
    fn name(&self) -> &str {
        "mcp"
    }

    /// The ready servers' tools; past
    /// [`HubSettings::tool_search_budget`](crate::HubSettings::tool_search_budget), the tools the model found so
    /// far and `mcp_tool_search` for the rest.
    async fn tools(&self, ready_by: Instant) -> Vec<Arc<dyn DynTool>> {
        self.wait_until(ready_by).await;
        let named = self.named_tools();
        let over_budget = self
            .settings()
            .tool_search_budget
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
            .partition(|tool| self.loaded().contains(&tool.name));
        offered.extend(loaded.into_iter().map(|tool| tool as Arc<dyn DynTool>));
        if !rest.is_empty() {
            offered.push(Arc::new(crate::search::SearchTool::new(
                rest,
                Arc::clone(self.loaded()),
            )));
        }
        offered
    }
}
