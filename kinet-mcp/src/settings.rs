//! Hub-wide settings.

use std::time::Duration;

/// Hub-wide settings. Every field documents its default; a server's own
/// `startup_timeout` / `tool_timeout` win over these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSettings {
    /// How long `initialize` may take. Default 30 s.
    pub startup_timeout: Duration,
    /// How long one `tools/call` may take. Default 120 s.
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
