//! Hub-wide settings.

use std::time::Duration;

/// Hub-wide settings. Every field documents its default; a server's own
/// `startup_timeout` / `tool_timeout` win over these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSettings {
    /// How long `initialize` may take. Default 30 s.
    pub startup_timeout: Duration,
    /// How long one `tools/call` may go without an answer or a progress
    /// notification (each notification starts it again). Default 120 s.
    pub tool_timeout: Duration,
    /// Consecutive restarts after a dropped connection before the server is
    /// marked failed. Default 5.
    pub max_restarts: u32,
    /// First restart delay, doubled per attempt. Default 250 ms.
    pub restart_backoff: Duration,
    /// Longest restart delay. Default 10 s.
    pub max_restart_backoff: Duration,
    /// The client name sent in `initialize`. Default `kinet`.
    pub client_name: String,
    /// How often a remote (HTTP or SSE) server is pinged while idle, so a
    /// server that went away is noticed, reported and reconnected. Default
    /// 15 s.
    pub health_check: Duration,
    /// When the MCP tools' schemas would take more than the budget of
    /// every request, the model is offered `mcp_tool_search` instead
    /// (names and one-line descriptions, keyword search) and each tool it
    /// finds is offered in full from its next step. This is the budget in
    /// tokens when the agent does not know the model's context window;
    /// when it does, [`tool_search_percent`](Self::tool_search_percent) of
    /// the window is. `None`: tool search off, always every tool. Default
    /// `Some(12_000)`, about 10% of a 128k-token window.
    pub tool_search_budget: Option<usize>,
    /// The tool-search budget as a percentage of the model's context
    /// window, when the agent knows the window (configured in its context
    /// policy, known by the model's name, or learned from the provider).
    /// `None` (or 0): always [`tool_search_budget`](Self::tool_search_budget),
    /// so a budget you set yourself holds whatever the window. Default
    /// `Some(10)`.
    pub tool_search_percent: Option<u8>,
    /// Offer the model `mcp_list_resources` and `mcp_read_resource` while a
    /// ready server has resources. Default true.
    pub resource_tools: bool,
}

impl Default for HubSettings {
    fn default() -> Self {
        Self {
            startup_timeout: Duration::from_secs(30),
            tool_timeout: Duration::from_secs(120),
            max_restarts: 5,
            restart_backoff: Duration::from_millis(250),
            max_restart_backoff: Duration::from_secs(10),
            client_name: "kinet".into(),
            health_check: Duration::from_secs(15),
            tool_search_budget: Some(12_000),
            tool_search_percent: Some(10),
            resource_tools: true,
        }
    }
}

impl HubSettings {
    /// The tool-search budget in tokens for a model with a `window`-token
    /// context (when known); `None` when tool search is off.
    pub(crate) fn search_budget(&self, window: Option<u64>) -> Option<usize> {
        let fixed = self.tool_search_budget?;
        Some(match (self.tool_search_percent, window) {
            (Some(percent), Some(window)) if percent > 0 => {
                let tokens = window.saturating_mul(u64::from(percent.min(100))) / 100;
                usize::try_from(tokens).unwrap_or(usize::MAX)
            }
            _ => fixed,
        })
    }

    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        self.restart_backoff
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
            .min(self.max_restart_backoff)
    }
}
