//! The `browser_*` tools.

use std::fmt::Write as _;
use std::time::Duration;

use async_trait::async_trait;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::{
    CaptureScreenshotFormat, CaptureScreenshotParams, Viewport,
};
use kinet_core::message::ImagePart;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::actions::{self, Snapshot, settle};
use super::browser_error;
use super::session::BrowserSession;
use super::tabs::TabsTool;
use crate::ComputerError;

/// The browser tools over one [`BrowserSession`].
///
/// ```
/// use kinet_computer::browser::{BrowserConfig, BrowserSession, BrowserTools};
///
/// let session = BrowserSession::new(BrowserConfig::default()); // Chrome starts on first use
/// let tools = BrowserTools::new(session).toolset();
/// assert!(tools.static_tools().get("browser_snapshot").is_some());
/// ```
#[derive(Debug, Clone)]
pub struct BrowserTools {
    pub(super) session: BrowserSession,
    snapshot_after_action: bool,
}

impl BrowserTools {
    /// Tools driving `session`; actions answer with a fresh snapshot.
    pub fn new(session: BrowserSession) -> Self {
        Self {
            session,
            snapshot_after_action: true,
        }
    }

    /// Whether navigate, click, type and select answer with a fresh
    /// snapshot (default) or only say what they did.
    pub fn snapshot_after_action(mut self, yes: bool) -> Self {
        self.snapshot_after_action = yes;
        self
    }

    /// `browser_navigate`, `browser_snapshot`, `browser_click`,
    /// `browser_type`, `browser_select`, `browser_eval`,
    /// `browser_screenshot`, `browser_tabs`.
    pub fn toolset(&self) -> kinet_core::Toolset {
        let mut tools = kinet_core::Toolset::new();
        self.add_to(&mut tools);
        tools
    }

    /// Adds the same tools to `tools`.
    pub fn add_to(&self, tools: &mut kinet_core::Toolset) {
        tools.add(NavigateTool(self.clone()));
        tools.add(SnapshotTool(self.clone()));
        tools.add(ClickTool(self.clone()));
        tools.add(TypeTool(self.clone()));
        tools.add(SelectTool(self.clone()));
        tools.add(EvalTool(self.clone()));
        tools.add(ScreenshotTool(self.clone()));
        tools.add(TabsTool(self.clone()));
    }

    /// The longest one tool call may take: a command, a navigation and a
    /// snapshot.
    pub(super) fn call_limit(&self) -> Duration {
        let config = self.session.config();
        config.command_timeout * 2 + config.navigation_timeout
    }

    async fn page(&self) -> Result<Page, ComputerError> {
        self.session.active_page().await
    }

    /// What an action answers: what it did, then the page as it is now. The
    /// action has happened by now, so a page that cannot be read yet (still
    /// loading) is said, not turned into an error the model would retry.
    async fn after_action(&self, page: &Page, done: String) -> Result<ToolOutput, ComputerError> {
        if !self.snapshot_after_action {
            return Ok(self.with_notes(done));
        }
        let text = match self.snapshot(page).await {
            Ok(snapshot) => format!("{done}\n\n{}", snapshot.render()),
            Err(error) => format!(
                "{done}\n\nThe page could not be read afterwards ({error}); it may still be \
loading: take a browser_snapshot."
            ),
        };
        Ok(self.with_notes(text))
    }

    /// A snapshot of `page`, taking turns with this session's other
    /// snapshots (see [`actions::snapshot`]).
    async fn snapshot(&self, page: &Page) -> Result<Snapshot, ComputerError> {
        let _turn = self.session.snapshot_turn().await;
        actions::snapshot(page).await
    }

    /// `text` followed by what happened on the tabs since the last result
    /// (dialogs answered, tabs reopened).
    fn with_notes(&self, mut text: String) -> ToolOutput {
        for note in self.session.take_notes() {
            text.push_str("\n\n");
            text.push_str(&note);
        }
        ToolOutput::text(text)
    }
}

/// Runs `work` unless the run is cancelled first; gives up after `limit`.
pub(super) async fn cancellable<T>(
    ctx: &ToolCtx,
    limit: Duration,
    work: impl Future<Output = Result<T, ComputerError>>,
) -> Result<T, ToolError> {
    tokio::select! {
        biased;
        _ = ctx.cancellation().cancelled() => Err(ComputerError::Cancelled.into()),
        result = tokio::time::timeout(limit, work) => match result {
            Ok(result) => result.map_err(ToolError::from),
            Err(_) => Err(ToolError::new(
                kinet_core::tool::ToolErrorKind::Timeout,
                format!("the browser did not finish within {} s", limit.as_secs()),
            )),
        },
    }
}

pub(super) fn check_url(url: &str) -> Result<(), ComputerError> {
    let allowed = ["http://", "https://", "file://", "about:", "data:"];
    if allowed.iter().any(|scheme| url.starts_with(scheme)) {
        Ok(())
    } else {
        Err(ComputerError::InvalidInput(format!(
            "{url:?} is not a full URL: give http(s)://..., file://... or about:blank"
        )))
    }
}

/// Arguments of `browser_navigate`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NavigateArgs {
    /// The URL to open in the active tab.
    pub url: String,
}

struct NavigateTool(BrowserTools);

#[async_trait]
impl Tool for NavigateTool {
    type Args = NavigateArgs;
    fn name(&self) -> &str {
        "browser_navigate"
    }
    fn description(&self) -> &str {
        "Opens a URL in the browser's active tab, waits for it to load and returns a snapshot \
of the page (elements carry [ref=eN] for the other browser tools)."
    }
    async fn confirm_summary(&self, args: &NavigateArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(format!("Open {} in the browser", args.url))
    }
    async fn call(&self, args: NavigateArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        check_url(&args.url)?;
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            page.goto(args.url.as_str())
                .await
                .map_err(|e| ComputerError::Browser(format!("could not open {}: {e}", args.url)))?;
            self.0
                .after_action(&page, format!("Opened {}.", args.url))
                .await
        })
        .await
    }
}

/// Arguments of `browser_snapshot` (none).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SnapshotArgs {}

struct SnapshotTool(BrowserTools);

#[async_trait]
impl Tool for SnapshotTool {
    type Args = SnapshotArgs;
    fn name(&self) -> &str {
        "browser_snapshot"
    }
    fn description(&self) -> &str {
        "Returns a compact text snapshot of the active tab: headings, text, images and every \
interactive element with a [ref=eN]. Use the refs with browser_click, browser_type and \
browser_select; take a new snapshot after the page changes."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, _args: SnapshotArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            let snapshot = self.0.snapshot(&page).await?;
            Ok(self.0.with_notes(snapshot.render()))
        })
        .await
    }
}

/// Arguments of `browser_click`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ClickArgs {
    /// The element's ref from the latest snapshot, e.g. `e12`.
    #[serde(rename = "ref")]
    pub element: String,
}

struct ClickTool(BrowserTools);

#[async_trait]
impl Tool for ClickTool {
    type Args = ClickArgs;
    fn name(&self) -> &str {
        "browser_click"
    }
    fn description(&self) -> &str {
        "Clicks an element of the active tab by its ref from the latest snapshot (real mouse \
events at its centre, after scrolling it into view). Returns the page afterwards."
    }
    async fn confirm_summary(&self, args: &ClickArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(format!("Click element {} in the browser", args.element))
    }
    async fn call(&self, args: ClickArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let limit = self.0.session.config().navigation_timeout;
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            settle(&page, limit, actions::click(&page, &args.element)).await?;
            self.0
                .after_action(&page, format!("Clicked {}.", args.element))
                .await
        })
        .await
    }
}

/// Arguments of `browser_type`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TypeArgs {
    /// The text field's ref from the latest snapshot.
    #[serde(rename = "ref")]
    pub element: String,
    /// The text; it replaces what the field holds.
    pub text: String,
    /// Press Enter afterwards (submits most forms).
    #[serde(default)]
    pub submit: bool,
}

struct TypeTool(BrowserTools);

#[async_trait]
impl Tool for TypeTool {
    type Args = TypeArgs;
    fn name(&self) -> &str {
        "browser_type"
    }
    fn description(&self) -> &str {
        "Types text into a field of the active tab by its ref, replacing what it holds; \
submit presses Enter afterwards. Returns the page afterwards."
    }
    async fn confirm_summary(&self, args: &TypeArgs, _ctx: &ToolCtx) -> Option<String> {
        let submit = if args.submit { " and press Enter" } else { "" };
        Some(format!(
            "Type {:?} into element {}{submit}",
            args.text, args.element
        ))
    }
    async fn call(&self, args: TypeArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let limit = self.0.session.config().navigation_timeout;
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            let action = actions::type_text(&page, &args.element, &args.text, args.submit);
            settle(&page, limit, action).await?;
            let mut done = format!(
                "Typed {} characters into {}",
                args.text.chars().count(),
                args.element
            );
            done.push_str(if args.submit {
                " and pressed Enter."
            } else {
                "."
            });
            self.0.after_action(&page, done).await
        })
        .await
    }
}

/// Arguments of `browser_select`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SelectArgs {
    /// The select element's ref from the latest snapshot.
    #[serde(rename = "ref")]
    pub element: String,
    /// The options to choose, by value or visible label (several only for a
    /// multiple select).
    pub values: Vec<String>,
}

struct SelectTool(BrowserTools);

#[async_trait]
impl Tool for SelectTool {
    type Args = SelectArgs;
    fn name(&self) -> &str {
        "browser_select"
    }
    fn description(&self) -> &str {
        "Chooses options of a select element of the active tab by its ref, by value or \
visible label. Returns the page afterwards."
    }
    async fn confirm_summary(&self, args: &SelectArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(format!(
            "Select {:?} in element {}",
            args.values, args.element
        ))
    }
    async fn call(&self, args: SelectArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        if args.values.is_empty() {
            return Err(ToolError::invalid_arguments("values is empty"));
        }
        let limit = self.0.session.config().navigation_timeout;
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            let chosen = settle(
                &page,
                limit,
                actions::select(&page, &args.element, &args.values),
            )
            .await?;
            let done = format!("Selected {} in {}.", chosen.join(", "), args.element);
            self.0.after_action(&page, done).await
        })
        .await
    }
}

/// Arguments of `browser_eval`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EvalArgs {
    /// A JavaScript expression evaluated in the active tab; promises are
    /// awaited; the result is returned as JSON.
    pub expression: String,
}

struct EvalTool(BrowserTools);

#[async_trait]
impl Tool for EvalTool {
    type Args = EvalArgs;
    fn name(&self) -> &str {
        "browser_eval"
    }
    fn description(&self) -> &str {
        "Evaluates a JavaScript expression in the active tab (promises awaited) and returns \
its value as JSON. Prefer the other browser tools for clicking and typing."
    }
    async fn confirm_summary(&self, args: &EvalArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(format!(
            "Run JavaScript in the browser:\n{}",
            args.expression
        ))
    }
    async fn call(&self, args: EvalArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            let value = actions::evaluate(&page, &args.expression).await?;
            let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
            Ok(self.0.with_notes(text).with_structured(value))
        })
        .await
    }
}

/// Arguments of `browser_screenshot`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BrowserScreenshotArgs {
    /// The whole scrollable page instead of the visible part.
    #[serde(default)]
    pub full_page: bool,
}

struct ScreenshotTool(BrowserTools);

/// The largest width or height of a full-page screenshot, in CSS pixels
/// (model APIs refuse larger images).
const MAX_FULL_PAGE: f64 = 8000.0;

/// Width and height from the header of a base64-encoded PNG.
fn png_size(base64_png: &str) -> Option<(u32, u32)> {
    use base64::Engine as _;
    let head = base64::engine::general_purpose::STANDARD
        .decode(base64_png.get(..32)?)
        .ok()?;
    let png = head.as_slice();
    let width = png.get(16..20)?.try_into().ok().map(u32::from_be_bytes)?;
    let height = png.get(20..24)?.try_into().ok().map(u32::from_be_bytes)?;
    Some((width, height))
}

#[async_trait]
impl Tool for ScreenshotTool {
    type Args = BrowserScreenshotArgs;
    fn name(&self) -> &str {
        "browser_screenshot"
    }
    fn description(&self) -> &str {
        "Takes a PNG screenshot of the active tab (the visible part, or the full page)."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(
        &self,
        args: BrowserScreenshotArgs,
        ctx: &ToolCtx,
    ) -> Result<ToolOutput, ToolError> {
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            page.activate().await.map_err(browser_error)?;
            let mut params =
                CaptureScreenshotParams::builder().format(CaptureScreenshotFormat::Png);
            let mut cropped = None;
            if args.full_page {
                // A clip beyond the viewport leaves the page's layout alone
                // (no device-metrics override to undo if the call fails).
                let size = page
                    .layout_metrics()
                    .await
                    .map_err(browser_error)?
                    .css_content_size;
                let (width, height) = (size.width.max(1.0), size.height.max(1.0));
                // One image pixel per CSS pixel, also on HiDPI screens.
                let ratio = actions::evaluate(&page, "devicePixelRatio")
                    .await?
                    .as_f64()
                    .filter(|r| r.is_finite() && *r > 0.0)
                    .unwrap_or(1.0);
                if width > MAX_FULL_PAGE || height > MAX_FULL_PAGE {
                    cropped = Some((width, height));
                }
                params = params.capture_beyond_viewport(true).clip(Viewport {
                    x: 0.0,
                    y: 0.0,
                    width: width.min(MAX_FULL_PAGE),
                    height: height.min(MAX_FULL_PAGE),
                    scale: 1.0 / ratio,
                });
            }
            let shot = page
                .execute(params.build())
                .await
                .map_err(browser_error)?
                .result
                .data;
            let data: &str = shot.as_ref();
            let url = page.url().await.ok().flatten().unwrap_or_default();
            let (width, height) = png_size(data).unwrap_or_default();
            let mut text = format!("Screenshot of {url} ({width}x{height}).");
            if let Some((full_width, full_height)) = cropped {
                let _ = write!(
                    text,
                    " The page is {full_width:.0}x{full_height:.0}; this shows its top-left \
{MAX_FULL_PAGE:.0}x{MAX_FULL_PAGE:.0} at most."
                );
            }
            Ok(ToolOutput::text(text).with_image(ImagePart {
                media_type: "image/png".into(),
                data: data.to_owned(),
            }))
        })
        .await
    }
}
