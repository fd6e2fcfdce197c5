//! `feishu_send_file`: sends a workspace file to a Feishu / Lark chat or user.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kinet_core::tool::CancellationToken;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::common::{
    IntegrationError, Secret, Vendor, endpoint, envelope, http_client, human_size,
};
use super::messaging::{
    OneOf, TokenCache, TokenSource, UPLOAD_TIMEOUT, UploadSource, one_of, read_upload, with_token,
};

const FEISHU: Vendor = Vendor {
    service: "Feishu",
    code_of: |body| envelope(body, "code", "msg"),
};

/// The im file upload limit.
const MAX_FILE_BYTES: u64 = 30 * 1024 * 1024;

/// Settings of the Feishu / Lark client.
#[derive(Debug, Clone)]
pub struct FeishuConfig {
    /// The app's id (`cli_...`).
    pub app_id: String,
    /// The app's secret.
    pub app_secret: Secret,
    /// The open platform root: [`FeishuConfig::FEISHU_BASE_URL`] (default)
    /// or [`FeishuConfig::LARK_BASE_URL`].
    pub base_url: String,
    /// Time limit of each request. Default 60 s.
    pub request_timeout: Duration,
}

impl FeishuConfig {
    /// Feishu (mainland China).
    pub const FEISHU_BASE_URL: &str = "https://open.feishu.cn";
    /// Lark (international).
    pub const LARK_BASE_URL: &str = "https://open.larksuite.com";

    /// Feishu settings for this app.
    pub fn new(app_id: impl Into<String>, app_secret: impl Into<Secret>) -> Self {
        Self {
            app_id: app_id.into(),
            app_secret: app_secret.into(),
            base_url: Self::FEISHU_BASE_URL.to_owned(),
            request_timeout: Duration::from_secs(60),
        }
    }

    /// The same app on Lark.
    pub fn lark(mut self) -> Self {
        self.base_url = Self::LARK_BASE_URL.to_owned();
        self
    }

    /// Settings from `FEISHU_APP_ID` and `FEISHU_APP_SECRET` (required) and
    /// `FEISHU_BASE_URL` (`feishu`, `lark` or a URL).
    pub fn from_env() -> Result<Self, IntegrationError> {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| IntegrationError::Config(format!("{name} is not set")))
        };
        let mut config = Self::new(var("FEISHU_APP_ID")?, var("FEISHU_APP_SECRET")?);
        match std::env::var("FEISHU_BASE_URL").ok().as_deref() {
            None | Some("" | "feishu") => {}
            Some("lark") => config = config.lark(),
            Some(url) => config.base_url = url.to_owned(),
        }
        Ok(config)
    }
}

/// Who receives a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeishuRecipient {
    /// A group chat (`oc_...`).
    Chat(String),
    /// A user by open id (`ou_...`).
    User(String),
}

impl FeishuRecipient {
    fn id_type_and_id(&self) -> (&'static str, &str) {
        match self {
            Self::Chat(id) => ("chat_id", id),
            Self::User(id) => ("open_id", id),
        }
    }
}

/// A file message that was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeishuSentFile {
    /// The uploaded file's key.
    pub file_key: String,
    /// The message id (`om_...`).
    pub message_id: String,
    /// Bytes sent.
    pub bytes: u64,
}

/// A Feishu / Lark open-platform client: tenant access token cached until
/// shortly before it expires (and renewed when the platform calls it
/// invalid), file upload and file messages. Cheap to clone.
///
/// ```no_run
/// # async fn send() -> Result<(), kinet_tools::integrations::IntegrationError> {
/// use kinet_tools::integrations::{FeishuClient, FeishuConfig, FeishuRecipient};
///
/// let client = FeishuClient::new(FeishuConfig::new("cli_a1b2c3", "app-secret").lark());
/// let sent = client
///     .send_file(
///         &FeishuRecipient::Chat("oc_5ad11d72b830411d72b836c20".into()),
///         std::path::Path::new("report.pdf"),
///         &kinet_core::tool::CancellationToken::new(),
///     )
///     .await?;
/// println!("sent as {}", sent.message_id);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FeishuClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    config: FeishuConfig,
    tokens: TokenCache,
}

impl std::fmt::Debug for FeishuClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeishuClient")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct TenantToken {
    tenant_access_token: String,
    expire: u64,
}

#[derive(Deserialize)]
struct DataOf<T> {
    data: T,
}

#[derive(Deserialize)]
struct Uploaded {
    file_key: String,
}

#[derive(Deserialize)]
struct Sent {
    message_id: String,
}

#[async_trait]
impl TokenSource for Inner {
    fn token_cache(&self) -> &TokenCache {
        &self.tokens
    }

    /// Tenant token invalid or expired; app token invalid.
    fn expired_codes(&self) -> &'static [i64] {
        &[99991663, 99991664, 99991671]
    }

    async fn fetch_token(
        &self,
        cancel: &CancellationToken,
    ) -> Result<(Secret, Duration), IntegrationError> {
        const API: &str = "/open-apis/auth/v3/tenant_access_token/internal";
        let request = self
            .http
            .post(endpoint(&self.config.base_url, API))
            .json(&json!({
                "app_id": self.config.app_id,
                "app_secret": self.config.app_secret.expose(),
            }));
        let token: TenantToken = FEISHU.decode(API, FEISHU.call(API, request, cancel).await?)?;
        Ok((
            Secret::new(token.tenant_access_token),
            Duration::from_secs(token.expire),
        ))
    }
}

/// The im `file_type` for a file name: opus, mp4, pdf, doc, xls, ppt, or
/// stream for everything else.
fn file_type(file_name: &str) -> &'static str {
    let extension = Path::new(file_name)
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        "opus" => "opus",
        "mp4" => "mp4",
        "pdf" => "pdf",
        "doc" | "docx" => "doc",
        "xls" | "xlsx" => "xls",
        "ppt" | "pptx" => "ppt",
        _ => "stream",
    }
}

impl FeishuClient {
    /// A client for this app.
    pub fn new(config: FeishuConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                http: http_client(config.request_timeout),
                config,
                tokens: TokenCache::default(),
            }),
        }
    }

    /// Uploads `path` (at most 30 MiB, not empty) and sends it as a file
    /// message.
    pub async fn send_file(
        &self,
        to: &FeishuRecipient,
        path: &Path,
        cancel: &CancellationToken,
    ) -> Result<FeishuSentFile, IntegrationError> {
        self.send_from(to, UploadSource::Path(path), cancel).await
    }

    /// [`send_file`](Self::send_file) from a path in the workspace.
    pub(crate) async fn send_from(
        &self,
        to: &FeishuRecipient,
        source: UploadSource<'_>,
        cancel: &CancellationToken,
    ) -> Result<FeishuSentFile, IntegrationError> {
        let inner = &*self.inner;
        let upload = read_upload(FEISHU.service, source, 1, MAX_FILE_BYTES).await?;
        let file_key = with_token(inner, cancel, |token| {
            const API: &str = "/open-apis/im/v1/files";
            let form = reqwest::multipart::Form::new()
                .text("file_type", file_type(&upload.file_name))
                .text("file_name", upload.file_name.clone())
                .part("file", upload.part());
            let request = inner
                .http
                .post(endpoint(&inner.config.base_url, API))
                .bearer_auth(token.expose())
                .timeout(UPLOAD_TIMEOUT)
                .multipart(form);
            async move {
                let uploaded: DataOf<Uploaded> =
                    FEISHU.decode(API, FEISHU.call(API, request, cancel).await?)?;
                Ok(uploaded.data.file_key)
            }
        })
        .await?;
        let (id_type, id) = to.id_type_and_id();
        let content = json!({ "file_key": file_key }).to_string();
        let message_id = with_token(inner, cancel, |token| {
            const API: &str = "/open-apis/im/v1/messages";
            let request = inner
                .http
                .post(endpoint(&inner.config.base_url, API))
                .query(&[("receive_id_type", id_type)])
                .bearer_auth(token.expose())
                .json(&json!({ "receive_id": id, "msg_type": "file", "content": content }));
            async move {
                let sent: DataOf<Sent> =
                    FEISHU.decode(API, FEISHU.call(API, request, cancel).await?)?;
                Ok(sent.data.message_id)
            }
        })
        .await?;
        Ok(FeishuSentFile {
            file_key,
            message_id,
            bytes: upload.bytes.len() as u64,
        })
    }
}

/// Arguments of `feishu_send_file`: exactly one of `chat_id` and `open_id`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FeishuSendFileArgs {
    /// The group chat to send to (`oc_...`).
    #[serde(default)]
    pub chat_id: Option<String>,
    /// The user to send to, by open id (`ou_...`).
    #[serde(default)]
    pub open_id: Option<String>,
    /// The workspace file to send (at most 30 MB).
    pub path: String,
}

/// Sends a workspace file to a Feishu / Lark group chat or user as a file
/// message. Mutating: the host is asked first.
#[derive(Debug, Clone)]
pub struct FeishuSendFileTool {
    client: FeishuClient,
}

impl FeishuSendFileTool {
    /// A tool sending through `client`.
    pub fn new(client: FeishuClient) -> Self {
        Self { client }
    }
}

fn recipient(args: &FeishuSendFileArgs) -> Result<FeishuRecipient, ToolError> {
    let hint = "chat_id (a group chat, oc_...) and open_id (a user, ou_...)";
    Ok(match one_of(&args.chat_id, &args.open_id, hint)? {
        OneOf::First(chat) => FeishuRecipient::Chat(chat.to_owned()),
        OneOf::Second(user) => FeishuRecipient::User(user.to_owned()),
    })
}

#[async_trait]
impl Tool for FeishuSendFileTool {
    type Args = FeishuSendFileArgs;

    fn name(&self) -> &str {
        "feishu_send_file"
    }

    fn description(&self) -> &str {
        "Sends a file from the workspace to a Feishu (Lark) group chat (chat_id, oc_...) or a \
user (open_id, ou_...) as a file message. At most 30 MB; empty files are refused."
    }

    async fn confirm_summary(&self, args: &FeishuSendFileArgs, _ctx: &ToolCtx) -> Option<String> {
        let to = match recipient(args).ok()? {
            FeishuRecipient::Chat(id) => format!("chat {id}"),
            FeishuRecipient::User(id) => format!("user {id}"),
        };
        Some(format!("Send {} to Feishu {to}", args.path))
    }

    async fn call(&self, args: FeishuSendFileArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let to = recipient(&args)?;
        let place = ctx.workspace_path(&args.path)?;
        let sent = self
            .client
            .send_from(&to, UploadSource::Workspace(&place), ctx.cancellation())
            .await?;
        let (id_type, id) = to.id_type_and_id();
        Ok(ToolOutput::text(format!(
            "Sent {} ({}) to {id_type} {id}: message {}.",
            args.path,
            human_size(sent.bytes),
            sent.message_id
        ))
        .with_structured(json!({
            "message_id": sent.message_id,
            "file_key": sent.file_key,
            "bytes": sent.bytes,
        })))
    }
}
