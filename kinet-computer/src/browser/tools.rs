//! The `browser_*` tools.

use std::time::Duration;

use async_trait::async_trait;
use chromiumoxide::Page;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::actions::{self, Snapshot, SnapshotMode, SnapshotOptions};
use super::frames::RemoteFrames;
use super::inspect::{EvalTool, ScreenshotTool};
use super::navigation::{self, Landing, settle};
use super::policy::{check_landing, check_url};
use super::session::BrowserSession;
use super::tabs::TabsTool;
use super::view::Views;
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
#[derive(Clone)]
pub struct BrowserTools {
    pub(super) session: BrowserSession,
    snapshot_after_action: bool,
    frames: RemoteFrames,
    views: Views,
}

impl std::fmt::Debug for BrowserTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrowserTools")
            .field("session", &self.session)
            .field("snapshot_after_action", &self.snapshot_after_action)
            .finish_non_exhaustive()
    }
}

impl BrowserTools {
    /// Tools driving `session`; actions answer with what changed on the
    /// page.
    pub fn new(session: BrowserSession) -> Self {
        Self {
            session,
            snapshot_after_action: true,
            frames: RemoteFrames::default(),
            views: Views::default(),
        }
    }

    /// Whether navigate, click, type and select answer with the page
    /// afterwards (default: the change since the last snapshot, or the new
    /// page) or only say what they did.
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

    /// The longest one tool call may take: a navigation and a command
    /// (see [`BrowserConfig::navigation_timeout`]).
    ///
    /// [`BrowserConfig::navigation_timeout`]: super::BrowserConfig::navigation_timeout
    pub(super) fn call_limit(&self) -> Duration {
        let config = self.session.config();
        config.navigation_timeout + config.command_timeout
    }

    pub(super) async fn page(&self) -> Result<Page, ComputerError> {
        self.session.active_page().await
    }

    /// What an action answers: what it did and where the tab landed, then
    /// the page: what changed since the last snapshot, or the whole new
    /// page. The action has happened by now, so a page that cannot be read
    /// yet (still loading) is said, not turned into an error the model
    /// would retry.
    async fn after_action(
        &self,
        page: &Page,
        ctx: &ToolCtx,
        done: String,
        landing: &Landing,
    ) -> Result<ToolOutput, ComputerError> {
        let mut head = done;
        let landed = landing.describe();
        if !landed.is_empty() {
            head.push(' ');
            head.push_str(&landed);
        }
        if landing.navigated && landing.response.is_none() && landing.timed_out.is_some() {
            // Waiting for the new page's answer: nothing can be read now.
            let url = landing
                .requested
                .clone()
                .unwrap_or_else(|| "a new page".into());
            self.session.set_pending(page.target_id(), Some(url));
            return Ok(self.with_notes(head));
        }
        if !self.snapshot_after_action {
            return Ok(self.with_notes(head));
        }
        let options = SnapshotOptions::default();
        let text = match self.snapshot(page, ctx, &options, false).await {
            Ok(snapshot) => {
                let view = self
                    .views
                    .change(page.target_id(), &snapshot)
                    .unwrap_or_else(|| snapshot.render());
                format!("{head}\n\n{}", self.sized(view))
            }
            Err(error @ ComputerError::Blocked(_)) => return Err(error),
            Err(error) => format!(
                "{head}\n\nThe page could not be read afterwards ({error}); it may still be \
loading: take a browser_snapshot."
            ),
        };
        Ok(self.with_notes(text))
    }

    /// A snapshot of `page` with its frames of other sites, taking turns
    /// with this session's other snapshots (see [`actions::snapshot`]);
    /// `remember`: a whole-page one becomes the base of the next change. A
    /// tab that wandered to a local file outside the workspace is taken
    /// back to about:blank first.
    async fn snapshot(
        &self,
        page: &Page,
        ctx: &ToolCtx,
        options: &SnapshotOptions,
        remember: bool,
    ) -> Result<Snapshot, ComputerError> {
        let url = page.url().await.ok().flatten().unwrap_or_default();
        if let Err(error) = check_landing(&url, self.session.config(), ctx) {
            let limit = self.session.config().navigation_timeout;
            if let Ok(link) = self.session.link().await {
                let _ = navigation::navigate(page, &link, "about:blank", limit).await;
            }
            return Err(error);
        }
        let _turn = self.session.snapshot_turn().await;
        let snapshot = self.frames.snapshot(&self.session, page, options).await?;
        if remember && options.root.is_none() && options.mode == SnapshotMode::Full {
            self.views.remember(page.target_id(), &snapshot);
        }
        Ok(snapshot)
    }

    fn sized(&self, text: String) -> String {
        let config = self.session.config();
        self.views
            .sized(text, config.snapshot_limit, config.snapshot_dir.as_ref())
    }

    /// `text` followed by what happened on the tabs since the last result
    /// (dialogs answered, tabs reopened).
    pub(super) fn with_notes(&self, mut text: String) -> ToolOutput {
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

/// Arguments of `browser_navigate`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NavigateArgs {
    /// The URL to open in the active tab (http or https).
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
        "Opens a web page in the browser's active tab, waits for it to load (10 s by default; a \
page that takes longer is stopped there) and returns its HTTP status and a snapshot of the page \
(elements carry [ref=eN] for the other browser tools)."
    }
    async fn confirm_summary(&self, args: &NavigateArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(format!("Open {} in the browser", args.url))
    }
    async fn call(&self, args: NavigateArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let config = self.0.session.config();
        check_url(&args.url, config, ctx)?;
        let limit = config.navigation_timeout;
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.session.page_to_navigate().await?;
            let url = args.url.trim();
            let link = self.0.session.link().await?;
            let landing = navigation::navigate(&page, &link, url, limit).await?;
            self.0.session.set_pending(page.target_id(), None);
            let done = if landing.timed_out.is_none() {
                match &landing.response {
                    Some((code, text, at)) => {
                        let text = if text.is_empty() {
                            String::new()
                        } else {
                            format!(" {text}")
                        };
                        format!("Opened {at} (HTTP {code}{text}).")
                    }
                    None => format!("Opened {url}."),
                }
            } else {
                let now = page.url().await.ok().flatten().unwrap_or_default();
                match &landing.response {
                    Some((code, ..)) => format!(
                        "{url} answered HTTP {code} but did not finish loading within {} s; kinet \
stopped loading it, so what follows is what had loaded.",
                        limit.as_secs_f64()
                    ),
                    None => format!(
                        "The navigation to {url} timed out: no answer within {} s. kinet stopped \
it; the tab stays at {now}.",
                        limit.as_secs_f64()
                    ),
                }
            };
            // The navigation's outcome is said in `done`.
            let quiet = Landing::default();
            let mut output = self.0.after_action(&page, ctx, done, &quiet).await?;
            if landing.timed_out.is_some() || landing.http_error() {
                output = output.with_structured(serde_json::json!({
                    "timed_out": landing.timed_out.is_some(),
                    "status": landing.response.as_ref().map(|(code, ..)| *code),
                }));
            }
            Ok(output)
        })
        .await
    }
}

/// Arguments of `browser_snapshot`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct SnapshotArgs {
    /// Only this part of the page: an element's ref (`e12`, a frame `f3`)
    /// or a CSS selector. Text blocks are shown whole under a root.
    #[serde(default)]
    pub root: Option<String>,
    /// How many levels of nesting (lists, tables, frames) to show; deeper
    /// parts are summarised with the ref to ask for.
    #[serde(default)]
    pub depth: Option<usize>,
    /// "full" (default), "interactive" (only elements with refs) or "text"
    /// (reading view, no refs).
    #[serde(default)]
    pub mode: SnapshotMode,
}

struct SnapshotTool(BrowserTools);

#[async_trait]
impl Tool for SnapshotTool {
    type Args = SnapshotArgs;
    fn name(&self) -> &str {
        "browser_snapshot"
    }
    fn description(&self) -> &str {
        "Returns a text snapshot of the active tab: headings, text, code, lists, tables, frames and \
every interactive element with a [ref=eN]. Use the refs with browser_click, browser_type and \
browser_select. For a large page ask for a part: root (a ref or CSS selector), depth, or mode \
\"interactive\" / \"text\"."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        // The page is the open web: its text is untrusted.
        kinet_core::ToolAnnotations::read_only().open_world(true)
    }
    async fn call(&self, args: SnapshotArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let options = SnapshotOptions {
            root: args.root.filter(|root| !root.trim().is_empty()),
            depth: args.depth,
            mode: args.mode,
            ..SnapshotOptions::default()
        };
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            let snapshot = self.0.snapshot(&page, ctx, &options, true).await?;
            Ok(self.0.with_notes(self.0.sized(snapshot.render())))
        })
        .await
    }
}

/// Arguments of `browser_click`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ClickArgs {
    /// The element's ref from the latest snapshot, e.g. `e12` (`f3e12`
    /// inside a frame).
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
events at its centre, after scrolling it into view; an element that is hidden, disabled, covered \
or moving is waited for briefly, then refused with the reason). Returns where the click led and \
what changed on the page."
    }
    async fn confirm_summary(&self, args: &ClickArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(format!("Click element {} in the browser", args.element))
    }
    async fn call(&self, args: ClickArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let config = self.0.session.config();
        let (limit, wait) = (config.navigation_timeout, config.action_wait);
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            let doc = self.0.frames.doc_for(&page, &args.element, false).await?;
            let ((), landing) =
                settle(&page, limit, actions::click_in(&doc, &args.element, wait)).await?;
            let done = format!("Clicked {}.", args.element);
            self.0.after_action(&page, ctx, done, &landing).await
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
submit presses Enter afterwards. Returns what changed on the page."
    }
    async fn confirm_summary(&self, args: &TypeArgs, _ctx: &ToolCtx) -> Option<String> {
        let submit = if args.submit { " and press Enter" } else { "" };
        Some(format!(
            "Type {:?} into element {}{submit}",
            args.text, args.element
        ))
    }
    async fn call(&self, args: TypeArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let config = self.0.session.config();
        let (limit, wait) = (config.navigation_timeout, config.action_wait);
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            let doc = self.0.frames.doc_for(&page, &args.element, false).await?;
            let action = actions::type_in(&doc, &args.element, &args.text, args.submit, wait);
            let (_, landing) = settle(&page, limit, action).await?;
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
            self.0.after_action(&page, ctx, done, &landing).await
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
visible label. Returns what changed on the page."
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
        let config = self.0.session.config();
        let (limit, wait) = (config.navigation_timeout, config.action_wait);
        cancellable(ctx, self.0.call_limit(), async {
            let page = self.0.page().await?;
            let doc = self.0.frames.doc_for(&page, &args.element, false).await?;
            let action = actions::select_in(&doc, &args.element, &args.values, wait);
            let (chosen, landing) = settle(&page, limit, action).await?;
            let done = format!("Selected {} in {}.", chosen.join(", "), args.element);
            self.0.after_action(&page, ctx, done, &landing).await
        })
        .await
    }
}
