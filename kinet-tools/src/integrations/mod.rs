//! Thin, correct clients of vendor HTTP APIs, each behind its own feature:
//! MiniMax video generation, Feishu / Lark file messages, WeCom file
//! messages and approval records. Credentials are [`Secret`]s: they never
//! appear in events, logs, errors or tool output.

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
#[cfg(feature = "integrations-wecom")]
pub fn wecom_tools(client: &WeComClient) -> kinet_core::Toolset {
    kinet_core::Toolset::new()
        .with(WeComSendFileTool::new(client.clone()))
        .with(WeComApprovalListTool::new(client.clone()))
        .with(WeComApprovalDetailTool::new(client.clone()))
}
