//! `browser_tabs`: list, open, select and close tabs.

use std::fmt::Write as _;

use async_trait::async_trait;
use chromiumoxide::Page;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::policy::check_url;
use super::shared::{Shared, cancellable};
use crate::ComputerError;

/// How long a tab may take to tell its title.
const TITLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// What `browser_tabs` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TabAction {
    /// List the tabs.
    List,
    /// Open a tab (at `url`, default about:blank) and make it active.
    New,
    /// Make tab `index` active.
    Select,
    /// Close tab `index` (default: the active one).
    Close,
}

/// Arguments of `browser_tabs`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TabsArgs {
    /// list, new, select or close.
    pub action: TabAction,
    /// The tab's index from the list (select, close).
    #[serde(default)]
    pub index: Option<usize>,
    /// The URL for a new tab.
    #[serde(default)]
    pub url: Option<String>,
}

pub(super) struct TabsTool(pub(super) Shared);

impl TabsTool {
    async fn list(&self) -> Result<String, ComputerError> {
        let (pages, active) = self.0.session.tabs().await?;
        let mut text = String::new();
        for (index, page) in pages.iter().enumerate() {
            // A tab that does not answer (hung or crashed) must not stall the list.
            let title = match tokio::time::timeout(TITLE_TIMEOUT, page.get_title()).await {
                Ok(title) => title.ok().flatten().unwrap_or_default(),
                Err(_) => "(not answering)".to_owned(),
            };
            let url = page.url().await.ok().flatten().unwrap_or_default();
            let marker = if Some(index) == active {
                " (active)"
            } else {
                ""
            };
            let _ = writeln!(text, "{index}: {title} — {url}{marker}");
        }
        if text.is_empty() {
            text.push_str("No tabs are open.");
        }
        Ok(text)
    }

    async fn tab(&self, index: Option<usize>) -> Result<Page, ComputerError> {
        let (pages, active) = self.0.session.tabs().await?;
        let count = pages.len();
        let index = index
            .or(active)
            .ok_or_else(|| ComputerError::InvalidInput("give the tab's index".into()))?;
        pages.into_iter().nth(index).ok_or_else(|| {
            ComputerError::InvalidInput(format!(
                "there is no tab {index}; {count} tab(s) are open (0 to {})",
                count.saturating_sub(1)
            ))
        })
    }
}

#[async_trait]
impl Tool for TabsTool {
    type Args = TabsArgs;
    fn name(&self) -> &str {
        "browser_tabs"
    }
    fn description(&self) -> &str {
        "Manages the browser's tabs: list them, open a new one (optionally at url), select one \
by index to make it active, or close one."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::default().destructive(false)
    }
    fn mutating(&self, args: &TabsArgs) -> bool {
        args.action != TabAction::List
    }
    async fn confirm_summary(&self, args: &TabsArgs, _ctx: &ToolCtx) -> Option<String> {
        Some(match args.action {
            TabAction::List => "List browser tabs".into(),
            TabAction::New => format!(
                "Open a browser tab at {}",
                args.url.as_deref().unwrap_or("about:blank")
            ),
            TabAction::Select => format!(
                "Switch to browser tab {}",
                args.index.map_or("?".into(), |i| i.to_string())
            ),
            TabAction::Close => format!(
                "Close browser tab {}",
                args.index.map_or("(active)".into(), |i| i.to_string())
            ),
        })
    }
    async fn call(&self, args: TabsArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        if let Some(url) = &args.url {
            check_url(url, self.0.session.config(), ctx)?;
        }
        cancellable(ctx, self.0.call_limit(), async {
            let done = match args.action {
                TabAction::List => return Ok(ToolOutput::text(self.list().await?)),
                TabAction::New => {
                    let url = args.url.as_deref().unwrap_or("about:blank");
                    self.0.session.new_tab(url).await?;
                    format!("Opened a new tab at {url}.")
                }
                TabAction::Select => {
                    let index = args.index.ok_or_else(|| {
                        ComputerError::InvalidInput("select needs the tab's index".into())
                    })?;
                    let page = self.tab(Some(index)).await?;
                    self.0.session.activate(&page).await?;
                    format!("Tab {index} is active.")
                }
                TabAction::Close => {
                    let page = self.tab(args.index).await?;
                    self.0.session.close_tab(page).await?;
                    "Closed the tab.".to_owned()
                }
            };
            Ok(ToolOutput::text(format!("{done}\n{}", self.list().await?)))
        })
        .await
    }
}
