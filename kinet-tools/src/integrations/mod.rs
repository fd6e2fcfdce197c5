//! Thin, correct clients of vendor HTTP APIs, each behind its own feature:
//! MiniMax video generation, Feishu / Lark file messages, WeCom file
//! messages and approval records. Credentials are [`Secret`]s: they never
//! appear in events, logs, errors or tool output.
//!
//! Sending and generating are mutating (the agent asks its
//! [`ConfirmHandler`](kinet_core::ConfirmHandler) first); reading approvals
//! is read-only. None of these tools is in
//! [`default_tools`](crate::default_tools): add the ones the host has
//! credentials for.

#[cfg(feature = "integrations-wecom")]
mod clock;
mod common;
#[cfg(feature = "integrations-feishu")]
mod feishu;
#[cfg(any(feature = "integrations-feishu", feature = "integrations-wecom"))]
mod messaging;
#[cfg(feature = "integrations-minimax")]
mod minimax;
#[cfg(feature = "integrations-wecom")]
mod wecom;
#[cfg(feature = "integrations-wecom")]
mod wecom_approval;

pub use common::{IntegrationError, Secret};
#[cfg(feature = "integrations-feishu")]
pub use feishu::{
    FeishuClient, FeishuConfig, FeishuRecipient, FeishuSendFileArgs, FeishuSendFileTool,
    FeishuSentFile,
};
#[cfg(feature = "integrations-minimax")]
pub use minimax::{MiniMaxConfig, VideoGenArgs, VideoGenTool};
#[cfg(feature = "integrations-wecom")]
pub use wecom::{
    WeComClient, WeComConfig, WeComRecipient, WeComSendFileArgs, WeComSendFileTool, WeComSentFile,
};
#[cfg(feature = "integrations-wecom")]
pub use wecom_approval::{
    ApprovalStatus, TimeValue, WeComApprovalDetailArgs, WeComApprovalDetailTool,
    WeComApprovalListArgs, WeComApprovalListTool,
};

/// `wecom_send_file`, `wecom_approval_list` and `wecom_approval_detail`
/// sharing one client (one cached access token).
///
/// ```
/// use kinet_tools::integrations::{WeComClient, WeComConfig, wecom_tools};
///
/// let client = WeComClient::new(WeComConfig::new("ww0123456789", "app-secret").agent_id(1000002));
/// let tools = wecom_tools(&client);
/// let names: Vec<_> = tools.static_tools().names().collect();
/// assert_eq!(names, ["wecom_send_file", "wecom_approval_list", "wecom_approval_detail"]);
/// ```
#[cfg(feature = "integrations-wecom")]
pub fn wecom_tools(client: &WeComClient) -> kinet_core::Toolset {
    kinet_core::Toolset::new()
        .with(WeComSendFileTool::new(client.clone()))
        .with(WeComApprovalListTool::new(client.clone()))
        .with(WeComApprovalDetailTool::new(client.clone()))
}
