//! `video_gen`: MiniMax text-to-video, from prompt to a file in the workspace.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use kinet_core::tool::CancellationToken;
use kinet_core::tool::workspace::WorkspacePath;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use super::common::{
    IntegrationError, Secret, Vendor, endpoint, envelope, http_client, human_size,
};

const MINIMAX: Vendor = Vendor {
    service: "MiniMax",
    code_of: |body| envelope(body.get("base_resp")?, "status_code", "status_msg"),
};

/// Settings of `video_gen`. Every field documents its default.
#[derive(Debug, Clone)]
pub struct MiniMaxConfig {
    /// The API key (sent as a bearer token to `base_url` only, never to the
    /// download host).
    pub api_key: Secret,
    /// The API root. Default [`MiniMaxConfig::GLOBAL_BASE_URL`]; accounts
    /// from mainland China use [`MiniMaxConfig::CHINA_BASE_URL`].
    pub base_url: String,
    /// The model when the call names none. Default `MiniMax-Hailuo-02`.
    pub model: String,
    /// Where videos are saved, relative to the working directory (inside
    /// the workspace). Default `videos`.
    pub output_dir: PathBuf,
    /// The first wait before asking for the task's status; later waits grow
    /// by half up to `max_poll_interval`. Default 5 s.
    pub poll_interval: Duration,
    /// The longest wait between status queries. Default 30 s.
    pub max_poll_interval: Duration,
    /// How long a task may take before the call gives up. Default 30 min.
    pub max_wait: Duration,
    /// Largest video downloaded. Default 1 GiB.
    pub max_video_bytes: u64,
    /// Time limit of each API request. Default 60 s.
    pub request_timeout: Duration,
}

impl MiniMaxConfig {
    /// The international API root.
    pub const GLOBAL_BASE_URL: &str = "https://api.minimax.io";
    /// The API root for accounts in mainland China.
    pub const CHINA_BASE_URL: &str = "https://api.minimaxi.com";

    /// Default settings with this API key.
    pub fn new(api_key: impl Into<Secret>) -> Self {
        Self {
            api_key: api_key.into(),
            base_url: Self::GLOBAL_BASE_URL.to_owned(),
            model: "MiniMax-Hailuo-02".to_owned(),
            output_dir: PathBuf::from("videos"),
            poll_interval: Duration::from_secs(5),
            max_poll_interval: Duration::from_secs(30),
            max_wait: Duration::from_secs(30 * 60),
            max_video_bytes: 1 << 30,
            request_timeout: Duration::from_secs(60),
        }
    }

    /// Settings from `MINIMAX_API_KEY` (required), `MINIMAX_BASE_URL` and
    /// `MINIMAX_VIDEO_MODEL`.
    pub fn from_env() -> Result<Self, IntegrationError> {
        let key = std::env::var("MINIMAX_API_KEY")
            .ok()
            .filter(|k| !k.trim().is_empty())
            .ok_or_else(|| IntegrationError::Config("MINIMAX_API_KEY is not set".into()))?;
        let mut config = Self::new(key);
        if let Ok(url) = std::env::var("MINIMAX_BASE_URL") {
            config.base_url = url;
        }
        if let Ok(model) = std::env::var("MINIMAX_VIDEO_MODEL") {
            config.model = model;
        }
        Ok(config)
    }
}

/// Arguments of `video_gen`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct VideoGenArgs {
    /// What the video shows: scene, subject, motion, camera, style.
    pub prompt: String,
    /// The model (e.g. `MiniMax-Hailuo-02`); the configured default when
    /// omitted.
    #[serde(default)]
    pub model: Option<String>,
    /// Length in seconds (6 or 10 for Hailuo models).
    #[serde(default)]
    pub duration: Option<u32>,
    /// Resolution, e.g. `768P` or `1080P`.
    #[serde(default)]
    pub resolution: Option<String>,
    /// Where to save the video in the workspace (a new `.mp4` path);
    /// default `videos/minimax-<task id>.mp4`.
    #[serde(default)]
    pub output: Option<String>,
}

/// Generates a video from a prompt with MiniMax: creates the task, polls it
/// with growing waits (progress events for the host; cancellable), fetches
/// the download URL and saves the video atomically into the workspace.
/// Mutating: it spends the account's credit, so the host is asked first.
///
/// ```
/// use kinet_tools::integrations::{MiniMaxConfig, VideoGenTool};
///
/// let mut config = MiniMaxConfig::new("minimax-api-key");
/// config.base_url = MiniMaxConfig::CHINA_BASE_URL.into();
/// config.output_dir = "media/videos".into();
/// let tools = kinet_core::Toolset::new().with(VideoGenTool::new(config));
/// ```
#[derive(Debug, Clone)]
pub struct VideoGenTool {
    http: reqwest::Client,
    config: MiniMaxConfig,
}

impl VideoGenTool {
    /// A tool with these settings.
    pub fn new(config: MiniMaxConfig) -> Self {
        Self {
            http: http_client(config.request_timeout),
            config,
        }
    }
}

const DESCRIPTION: &str = "\
Generates a short video from a text prompt with MiniMax (Hailuo) and saves it as an \
.mp4 file in the workspace. Takes one to several minutes; returns the saved path.
- Describe scene, subject, motion, camera and style in the prompt.
- duration is 6 or 10 seconds; resolution 768P or 1080P (1080P allows 6 s only).
- Costs credit on the user's account: only generate when asked to.";

#[derive(Deserialize)]
struct CreatedTask {
    task_id: String,
}

#[derive(Deserialize)]
struct TaskStatus {
    status: String,
    #[serde(default, deserialize_with = "id_text")]
    file_id: Option<String>,
    #[serde(default)]
    video_width: Option<u32>,
    #[serde(default)]
    video_height: Option<u32>,
}

#[derive(Deserialize)]
struct RetrievedFile {
    file: FileInfo,
}

#[derive(Deserialize)]
struct FileInfo {
    download_url: String,
}

/// MiniMax sends file ids as numbers or strings.
fn id_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

impl VideoGenTool {
    fn api(&self, path: &str) -> String {
        endpoint(&self.config.base_url, path)
    }

    async fn create_task(
        &self,
        args: &VideoGenArgs,
        model: &str,
        cancel: &CancellationToken,
    ) -> Result<String, IntegrationError> {
        const API: &str = "/v1/video_generation";
        let mut body = json!({ "model": model, "prompt": args.prompt });
        if let Some(duration) = args.duration {
            body["duration"] = json!(duration);
        }
        if let Some(resolution) = &args.resolution {
            body["resolution"] = json!(resolution);
        }
        let request = self
            .http
            .post(self.api(API))
            .bearer_auth(self.config.api_key.expose())
            .json(&body);
        let created: CreatedTask =
            MINIMAX.decode(API, MINIMAX.call(API, request, cancel).await?)?;
        if created.task_id.is_empty() {
            return Err(MINIMAX.decode_error(API, "empty task_id"));
        }
        Ok(created.task_id)
    }

    /// GETs `api?name=value` with the key and decodes the answer.
    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        api: &'static str,
        query: (&str, &str),
        cancel: &CancellationToken,
    ) -> Result<T, IntegrationError> {
        let request = self
            .http
            .get(self.api(api))
            .query(&[query])
            .bearer_auth(self.config.api_key.expose());
        MINIMAX.decode(api, MINIMAX.call(api, request, cancel).await?)
    }

    async fn query_task(
        &self,
        task_id: &str,
        cancel: &CancellationToken,
    ) -> Result<TaskStatus, IntegrationError> {
        self.get("/v1/query/video_generation", ("task_id", task_id), cancel)
            .await
    }

    /// Polls until the task succeeds (its status) or fails (an error).
    /// Transient errors (transport, HTTP, rate limit) are retried up to three
    /// times in a row.
    async fn wait_for(&self, task_id: &str, ctx: &ToolCtx) -> Result<TaskStatus, IntegrationError> {
        let started = Instant::now();
        let mut wait = self.config.poll_interval;
        let mut last = "Queueing".to_owned();
        let mut transient_failures = 0;
        loop {
            tokio::select! {
                biased;
                _ = ctx.cancellation().cancelled() => return Err(IntegrationError::Cancelled),
                _ = tokio::time::sleep(wait) => {}
            }
            wait = (wait * 3 / 2).min(self.config.max_poll_interval);
            let waited = started.elapsed();
            match self.query_task(task_id, ctx.cancellation()).await {
                Ok(status) => {
                    transient_failures = 0;
                    match status.status.as_str() {
                        "Success" => return Ok(status),
                        "Fail" => {
                            return Err(IntegrationError::TaskFailed {
                                service: MINIMAX.service,
                                task_id: task_id.to_owned(),
                                message: "the generation failed on MiniMax's side".into(),
                            });
                        }
                        other => {
                            ctx.progress(format!(
                                "MiniMax task {task_id}: {other} after {} s\n",
                                waited.as_secs()
                            ));
                            last = other.to_owned();
                        }
                    }
                }
                // Transport and HTTP errors, and 1002 (rate limited).
                Err(
                    error @ (IntegrationError::Transport { .. }
                    | IntegrationError::Http { .. }
                    | IntegrationError::Vendor { code: 1002, .. }),
                ) => {
                    transient_failures += 1;
                    if transient_failures >= 3 {
                        return Err(error);
                    }
                    tracing::debug!(task_id, %error, "MiniMax status query failed; retrying");
                }
                Err(error) => return Err(error),
            }
            if started.elapsed() >= self.config.max_wait {
                return Err(IntegrationError::TaskTimeout {
                    service: MINIMAX.service,
                    task_id: task_id.to_owned(),
                    status: last,
                    waited: started.elapsed(),
                });
            }
        }
    }

    async fn download_url(
        &self,
        file_id: &str,
        cancel: &CancellationToken,
    ) -> Result<String, IntegrationError> {
        let retrieved: RetrievedFile = self
            .get("/v1/files/retrieve", ("file_id", file_id), cancel)
            .await?;
        Ok(retrieved.file.download_url)
    }

    /// Streams the video into a temporary file beside `dest`, then renames
    /// it into place. No credential is sent to the download host.
    async fn download(
        &self,
        url: &str,
        place: &WorkspacePath,
        cancel: &CancellationToken,
    ) -> Result<u64, IntegrationError> {
        const API: &str = "video download";
        let dest = place.path();
        let io = |source| IntegrationError::Io {
            path: dest.to_path_buf(),
            source,
        };
        let limit = self.config.max_video_bytes;
        let too_large = |size| IntegrationError::TooLarge {
            service: MINIMAX.service,
            path: dest.to_path_buf(),
            size,
            limit,
        };
        let response = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(IntegrationError::Cancelled),
            response = self.http.get(url).timeout(Duration::from_secs(30 * 60)).send() => {
                response.map_err(|e| MINIMAX.transport(API, e))?
            }
        };
        if !response.status().is_success() {
            return Err(IntegrationError::Http {
                service: MINIMAX.service,
                api: API,
                status: response.status().as_u16(),
                body: String::new(),
            });
        }
        if let Some(length) = response.content_length()
            && length > limit
        {
            return Err(too_large(length));
        }
        // The temporary file sits beside the target, in the directory
        // opened beneath the workspace root; it is removed unless renamed.
        let pending = {
            let place = place.clone();
            tokio::task::spawn_blocking(move || place.begin_write())
                .await
                .map_err(|e| io(std::io::Error::other(e)))?
                .map_err(io)?
        };
        let mut pending = pending;
        let mut file = tokio::fs::File::from_std(pending.file().try_clone().map_err(io)?);
        let mut stream = response.bytes_stream();
        let mut written = 0u64;
        loop {
            let chunk = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(IntegrationError::Cancelled),
                chunk = stream.next() => chunk,
            };
            let Some(chunk) = chunk else { break };
            let chunk = chunk.map_err(|e| MINIMAX.transport(API, e))?;
            written += chunk.len() as u64;
            if written > limit {
                return Err(too_large(written));
            }
            file.write_all(&chunk).await.map_err(io)?;
        }
        file.flush().await.map_err(io)?;
        drop(file);
        if cancel.is_cancelled() {
            return Err(IntegrationError::Cancelled);
        }
        // Never replaces a file that appeared meanwhile, and does nothing
        // once the call is cancelled.
        let cancel = cancel.clone();
        tokio::task::spawn_blocking(move || {
            pending.commit_unless(false, &|| cancel.is_cancelled())
        })
        .await
        .map_err(|e| io(std::io::Error::other(e)))?
        .map_err(io)?;
        Ok(written)
    }

    fn output_path(
        &self,
        args: &VideoGenArgs,
        task_id: &str,
        ctx: &ToolCtx,
    ) -> Result<WorkspacePath, ToolError> {
        match &args.output {
            Some(output) => ctx.workspace_path(output),
            None => {
                let relative = self
                    .config
                    .output_dir
                    .join(format!("minimax-{task_id}.mp4"));
                ctx.workspace_path(&relative.to_string_lossy())
            }
        }
    }
}

#[async_trait]
impl Tool for VideoGenTool {
    type Args = VideoGenArgs;

    fn name(&self) -> &str {
        "video_gen"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    async fn confirm_summary(&self, args: &VideoGenArgs, _ctx: &ToolCtx) -> Option<String> {
        let model = args.model.as_deref().unwrap_or(&self.config.model);
        let mut settings = vec![model.to_owned()];
        settings.extend(args.duration.map(|d| format!("{d} s")));
        settings.extend(args.resolution.clone());
        Some(format!(
            "Generate a video with MiniMax ({}):\n{}",
            settings.join(", "),
            args.prompt
        ))
    }

    async fn call(&self, args: VideoGenArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        if args.prompt.trim().is_empty() {
            return Err(ToolError::invalid_arguments("prompt is empty"));
        }
        // Refuse a taken or out-of-workspace output before spending credit.
        if args.output.is_some() {
            let dest = self.output_path(&args, "", ctx)?;
            if dest.metadata().is_ok() {
                return Err(ToolError::invalid_arguments(format!(
                    "{} already exists; choose a new output path",
                    dest.path().display()
                )));
            }
        }
        let model = args
            .model
            .clone()
            .unwrap_or_else(|| self.config.model.clone());
        let cancel = ctx.cancellation();
        let task_id = self.create_task(&args, &model, cancel).await?;
        ctx.progress(format!("MiniMax task {task_id} created ({model})\n"));
        let status = self.wait_for(&task_id, ctx).await?;
        let file_id = status.file_id.clone().ok_or_else(|| {
            MINIMAX.decode_error(
                "/v1/query/video_generation",
                "task succeeded without a file_id",
            )
        })?;
        let url = self.download_url(&file_id, cancel).await?;
        let place = self.output_path(&args, &task_id, ctx)?;
        let dest = place.path().to_path_buf();
        ctx.progress(format!("MiniMax task {task_id}: downloading the video\n"));
        let size = self.download(&url, &place, cancel).await?;
        let shown = dest
            .strip_prefix(ctx.cwd())
            .unwrap_or(&dest)
            .display()
            .to_string();
        let dimensions = match (status.video_width, status.video_height) {
            (Some(w), Some(h)) => format!(", {w}x{h}"),
            _ => String::new(),
        };
        Ok(ToolOutput::text(format!(
            "Saved the video to {shown} ({}{dimensions}; model {model}, task {task_id}).",
            human_size(size)
        ))
        .with_structured(json!({
            "path": dest,
            "bytes": size,
            "task_id": task_id,
            "file_id": file_id,
            "model": model,
            "width": status.video_width,
            "height": status.video_height,
        })))
    }
}
