//! WeCom (企业微信) client and `wecom_send_file`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kinet_core::tool::CancellationToken;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::common::{
    IntegrationError, Secret, Vendor, endpoint, envelope, http_client, human_size,
};
use super::messaging::{
    OneOf, TokenCache, TokenSource, UPLOAD_TIMEOUT, UploadSource, one_of, read_upload, with_token,
};

pub(crate) const WECOM: Vendor = Vendor {
    service: "WeCom",
    code_of: |body| envelope(body, "errcode", "errmsg"),
};

/// The temporary-media limits for files.
const MIN_FILE_BYTES: u64 = 5;
const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;

/// Settings of the WeCom client.
#[derive(Debug, Clone)]
pub struct WeComConfig {
    /// The corporation id (`ww...`).
    pub corp_id: String,
    /// The secret of the app (for approvals: the approval app's secret, or
    /// an app given approval access).
    pub corp_secret: Secret,
    /// The app's agent id, needed to send app messages to users.
    pub agent_id: Option<i64>,
    /// The API root. Default `https://qyapi.weixin.qq.com`.
    pub base_url: String,
    /// Time limit of each request. Default 60 s.
    pub request_timeout: Duration,
    /// The time zone of dates given without one, in minutes east of UTC.
    /// Default 480 (UTC+08:00, China Standard Time).
    pub utc_offset_minutes: i32,
}

impl WeComConfig {
    /// The public API root.
    pub const BASE_URL: &str = "https://qyapi.weixin.qq.com";

    /// Settings for this corporation and app secret.
    pub fn new(corp_id: impl Into<String>, corp_secret: impl Into<Secret>) -> Self {
        Self {
            corp_id: corp_id.into(),
            corp_secret: corp_secret.into(),
            agent_id: None,
            base_url: Self::BASE_URL.to_owned(),
            request_timeout: Duration::from_secs(60),
            utc_offset_minutes: 480,
        }
    }

    /// Sets the app's agent id.
    pub fn agent_id(mut self, agent_id: i64) -> Self {
        self.agent_id = Some(agent_id);
        self
    }

    /// Settings from `WECOM_CORP_ID` and `WECOM_CORP_SECRET` (required),
    /// `WECOM_AGENT_ID` and `WECOM_BASE_URL`.
    pub fn from_env() -> Result<Self, IntegrationError> {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| IntegrationError::Config(format!("{name} is not set")))
        };
        let mut config = Self::new(var("WECOM_CORP_ID")?, var("WECOM_CORP_SECRET")?);
        if let Ok(agent) = var("WECOM_AGENT_ID") {
            let id = agent.trim().parse().map_err(|_| {
                IntegrationError::Config(format!("WECOM_AGENT_ID is not a number: {agent}"))
            })?;
            config.agent_id = Some(id);
        }
        if let Ok(url) = var("WECOM_BASE_URL") {
            config.base_url = url;
        }
        Ok(config)
    }
}

/// Who receives a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeComRecipient {
    /// Users by user id, several joined with `|`, or `@all` (an app
    /// message; needs the agent id).
    Users(String),
    /// An app group chat by chat id.
    Chat(String),
}

impl WeComRecipient {
    /// `users a|b` or `group chat <id>`.
    fn describe(&self) -> String {
        match self {
            Self::Users(users) => format!("users {users}"),
            Self::Chat(id) => format!("group chat {id}"),
        }
    }
}

/// A file message that was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeComSentFile {
    /// The temporary media id of the upload (valid three days).
    pub media_id: String,
    /// The message id, when WeCom returns one.
    pub message_id: Option<String>,
    /// Recipients WeCom could not deliver to (`|`-joined), if any.
    pub invalid_users: Option<String>,
    /// Bytes sent.
    pub bytes: u64,
}

/// A WeCom client: access token cached until shortly before it expires (and
/// renewed on 40001/40014/42001), media upload, app and group-chat
/// messages, approval records. The token travels in the query string, so
/// transport errors are reported without their URL. Cheap to clone.
#[derive(Clone)]
pub struct WeComClient {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    http: reqwest::Client,
    pub(crate) config: WeComConfig,
    tokens: TokenCache,
}

impl std::fmt::Debug for WeComClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeComClient")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct AccessToken {
    access_token: String,
    expires_in: u64,
}

#[async_trait]
impl TokenSource for Inner {
    fn token_cache(&self) -> &TokenCache {
        &self.tokens
    }

    /// Invalid credential, invalid token, token expired.
    fn expired_codes(&self) -> &'static [i64] {
        &[40001, 40014, 42001]
    }

    async fn fetch_token(
        &self,
        cancel: &CancellationToken,
    ) -> Result<(Secret, Duration), IntegrationError> {
        const API: &str = "/cgi-bin/gettoken";
        let request = self.http.get(endpoint(&self.config.base_url, API)).query(&[
            ("corpid", self.config.corp_id.as_str()),
            ("corpsecret", self.config.corp_secret.expose()),
        ]);
        let token: AccessToken = WECOM.decode(API, WECOM.call(API, request, cancel).await?)?;
        Ok((
            Secret::new(token.access_token),
            Duration::from_secs(token.expires_in),
        ))
    }
}

impl Inner {
    /// POSTs `body` as JSON to `api` with the access token.
    pub(crate) async fn post_json<T: DeserializeOwned>(
        &self,
        api: &'static str,
        body: &Value,
        cancel: &CancellationToken,
    ) -> Result<T, IntegrationError> {
        with_token(self, cancel, |token| {
            let request = self
                .http
                .post(endpoint(&self.config.base_url, api))
                .query(&[("access_token", token.expose())])
                .json(body);
            async move { WECOM.decode(api, WECOM.call(api, request, cancel).await?) }
        })
        .await
    }
}

#[derive(Deserialize)]
struct UploadedMedia {
    media_id: String,
}

#[derive(Deserialize)]
struct SentMessage {
    #[serde(default)]
    msgid: Option<String>,
    #[serde(default)]
    invaliduser: Option<String>,
}

impl WeComClient {
    /// A client for this corporation and app.
    pub fn new(config: WeComConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                http: http_client(config.request_timeout),
                config,
                tokens: TokenCache::default(),
            }),
        }
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// Uploads `path` as temporary media (5 bytes to 20 MiB) and sends it as
    /// a file message.
    pub async fn send_file(
        &self,
        to: &WeComRecipient,
        path: &Path,
        cancel: &CancellationToken,
    ) -> Result<WeComSentFile, IntegrationError> {
        self.send_from(to, UploadSource::Path(path), cancel).await
    }

    /// [`send_file`](Self::send_file) from a path in the workspace.
    pub(crate) async fn send_from(
        &self,
        to: &WeComRecipient,
        source: UploadSource<'_>,
        cancel: &CancellationToken,
    ) -> Result<WeComSentFile, IntegrationError> {
        let inner = &*self.inner;
        if matches!(to, WeComRecipient::Users(_)) && inner.config.agent_id.is_none() {
            return Err(IntegrationError::Config(
                "sending to WeCom users needs the app's agent id (WeComConfig::agent_id)".into(),
            ));
        }
        let upload = read_upload(WECOM.service, source, MIN_FILE_BYTES, MAX_FILE_BYTES).await?;
        let media: UploadedMedia = with_token(inner, cancel, |token| {
            const API: &str = "/cgi-bin/media/upload";
            let form = reqwest::multipart::Form::new().part("media", upload.part());
            let request = inner
                .http
                .post(endpoint(&inner.config.base_url, API))
                .query(&[("access_token", token.expose()), ("type", "file")])
                .timeout(UPLOAD_TIMEOUT)
                .multipart(form);
            async move { WECOM.decode(API, WECOM.call(API, request, cancel).await?) }
        })
        .await?;
        let file = json!({ "media_id": media.media_id });
        let sent: SentMessage = match to {
            WeComRecipient::Users(users) => {
                let body = json!({
                    "touser": users,
                    "msgtype": "file",
                    "agentid": inner.config.agent_id,
                    "file": file,
                });
                inner
                    .post_json("/cgi-bin/message/send", &body, cancel)
                    .await?
            }
            WeComRecipient::Chat(chat) => {
                let body = json!({ "chatid": chat, "msgtype": "file", "file": file });
                inner
                    .post_json("/cgi-bin/appchat/send", &body, cancel)
                    .await?
            }
        };
        Ok(WeComSentFile {
            media_id: media.media_id,
            message_id: sent.msgid.filter(|m| !m.is_empty()),
            invalid_users: sent.invaliduser.filter(|u| !u.is_empty()),
            bytes: upload.bytes.len() as u64,
        })
    }
}

/// Arguments of `wecom_send_file`: exactly one of `chat_id` and `touser`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WeComSendFileArgs {
    /// The app group chat to send to.
    #[serde(default)]
    pub chat_id: Option<String>,
    /// User ids to send to, several joined with `|`, or `@all`.
    #[serde(default)]
    pub touser: Option<String>,
    /// The workspace file to send (5 bytes to 20 MB).
    pub path: String,
}

/// Sends a workspace file to WeCom users (app message) or an app group chat.
/// Mutating: the host is asked first.
#[derive(Debug, Clone)]
pub struct WeComSendFileTool {
    client: WeComClient,
}

impl WeComSendFileTool {
    /// A tool sending through `client`.
    pub fn new(client: WeComClient) -> Self {
        Self { client }
    }
}

fn recipient(args: &WeComSendFileArgs) -> Result<WeComRecipient, ToolError> {
    let hint = "chat_id (an app group chat) and touser (user ids joined with |)";
    Ok(match one_of(&args.chat_id, &args.touser, hint)? {
        OneOf::First(chat) => WeComRecipient::Chat(chat.to_owned()),
        OneOf::Second(users) => WeComRecipient::Users(users.to_owned()),
    })
}

#[async_trait]
impl Tool for WeComSendFileTool {
    type Args = WeComSendFileArgs;

    fn name(&self) -> &str {
        "wecom_send_file"
    }

    fn description(&self) -> &str {
        "Sends a file from the workspace through WeCom (企业微信): to users by user id (touser, \
several joined with |) as an app message, or to an app group chat (chat_id). 5 bytes to 20 MB."
    }

    async fn confirm_summary(&self, args: &WeComSendFileArgs, _ctx: &ToolCtx) -> Option<String> {
        let to = recipient(args).ok()?;
        Some(format!("Send {} to WeCom {}", args.path, to.describe()))
    }

    async fn call(&self, args: WeComSendFileArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let to = recipient(&args)?;
        let place = ctx.workspace_path(&args.path)?;
        let sent = self
            .client
            .send_from(&to, UploadSource::Workspace(&place), ctx.cancellation())
            .await?;
        let mut text = format!(
            "Sent {} ({}) to {}.",
            args.path,
            human_size(sent.bytes),
            to.describe()
        );
        if let Some(invalid) = &sent.invalid_users {
            text.push_str(&format!(
                " Not delivered to (unknown or out of the app's scope): {invalid}."
            ));
        }
        Ok(ToolOutput::text(text).with_structured(json!({
            "media_id": sent.media_id,
            "message_id": sent.message_id,
            "invalid_users": sent.invalid_users,
            "bytes": sent.bytes,
        })))
    }
}
