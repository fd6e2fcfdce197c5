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
    /// When the MCP tools' schemas would take more than this many tokens
    /// of every request, the model is offered `mcp_tool_search` instead
    /// (names and one-line descriptions, keyword search) and each tool it
    /// finds is offered in full from its next step, for the hub's
    /// lifetime. `None`: always every tool. Default `Some(12_000)`, about
    /// 10% of a 128k-token window; set it from your model's window.
    pub tool_search_budget: Option<usize>,
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
            resource_tools: true,
        }
    }
}

impl HubSettings {
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        self.restart_backoff
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
            .min(self.max_restart_backoff)
    }
}
