//! What servers report about their resources and prompts (see
//! [`McpHub::changes`](crate::McpHub::changes)); its own module so the
//! connection code can send it without knowing the resources API.

/// Something a server reports about its resources or prompts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerChange {
    /// A subscribed resource changed (read it again to see how).
    ResourceUpdated {
        /// The server's name.
        server: String,
        /// The resource's URI.
        uri: String,
    },
    /// The server's list of resources changed.
    ResourcesChanged {
        /// The server's name.
        server: String,
    },
    /// The server's list of prompts changed.
    PromptsChanged {
        /// The server's name.
        server: String,
    },
}
