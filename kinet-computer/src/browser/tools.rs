//! The `browser_*` tools.

use async_trait::async_trait;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::actions::{self, SnapshotMode, SnapshotOptions};
use super::inspect::{EvalTool, ScreenshotTool};
use super::navigation::{self, Landing, settle};
use super::policy::check_url;
use super::session::BrowserSession;
use super::shared::{Shared, cancellable};
use super::tabs::TabsTool;

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
    shared: Shared,
}

impl std::fmt::Debug for BrowserTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrowserTools")
            .field("session", &self.shared.session)
            .field("snapshot_after_action", &self.shared.snapshot_after_action)
            .finish_non_exhaustive()
    }
}

impl BrowserTools {
    /// Tools driving `session`; actions answer with what changed on the
    /// page.
    pub fn new(session: BrowserSession) -> Self {
        Self {
            shared: Shared::new(session),
        }
    }

    /// Whether navigate, click, type and select answer with the page
    /// afterwards (default: the change since the last snapshot, or the new
    /// page) or only say what they did.
    pub fn snapshot_after_action(mut self, yes: bool) -> Self {
        self.shared.snapshot_after_action = yes;
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
        let shared = &self.shared;
        tools.add(NavigateTool(shared.clone()));
        tools.add(SnapshotTool(shared.clone()));
        tools.add(ClickTool(shared.clone()));
        tools.add(TypeTool(shared.clone()));
        tools.add(SelectTool(shared.clone()));
        tools.add(EvalTool(shared.clone()));
        tools.add(ScreenshotTool(shared.clone()));
        tools.add(TabsTool(shared.clone()));
    }
}

/// Arguments of `browser_navigate`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NavigateArgs {
    /// The URL to open in the active tab (http or https).
    pub url: String,
}

struct NavigateTool(Shared);

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

struct SnapshotTool(Shared);

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

struct ClickTool(Shared);

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

struct TypeTool(Shared);

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

struct SelectTool(Shared);

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
