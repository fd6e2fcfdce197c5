//! What every browser tool holds: the session, the frames of other sites
//! seen in snapshots and the last view of each tab; and how a tool call
//! is bounded and answered.

use std::time::Duration;

use chromiumoxide::Page;
use kinet_core::{ToolCtx, ToolError, ToolOutput};

use super::actions::{Snapshot, SnapshotMode, SnapshotOptions};
use super::frames::RemoteFrames;
use super::navigation::{self, Landing};
use super::policy::check_landing;
use super::session::BrowserSession;
use super::view::Views;
use crate::ComputerError;

/// The state the browser tools share (each tool holds a clone).
#[derive(Clone)]
pub(super) struct Shared {
    pub(super) session: BrowserSession,
    /// Whether actions answer with the page afterwards.
    pub(super) snapshot_after_action: bool,
    pub(super) frames: RemoteFrames,
    views: Views,
}

impl Shared {
    /// The state of tools driving `session`; actions answer with what
    /// changed on the page.
    pub(super) fn new(session: BrowserSession) -> Self {
        Self {
            session,
            snapshot_after_action: true,
            frames: RemoteFrames::default(),
            views: Views::default(),
        }
    }

    /// The longest one tool call may take: a navigation and a command
    /// (see [`BrowserConfig::navigation_timeout`]).
    ///
    /// [`BrowserConfig::navigation_timeout`]: super::BrowserConfig::navigation_timeout
    pub(super) fn call_limit(&self) -> Duration {
        let config = self.session.config();
        config.navigation_timeout + config.command_timeout
    }

    /// The active tab (see [`BrowserSession::active_page`]).
    pub(super) async fn page(&self) -> Result<Page, ComputerError> {
        self.session.active_page().await
    }

    /// What an action answers: what it did and where the tab landed, then
    /// the page: what changed since the last snapshot, or the whole new
    /// page. The action has happened by now, so a page that cannot be read
    /// yet (still loading) is said, not turned into an error the model
    /// would retry.
    pub(super) async fn after_action(
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
    /// with this session's other snapshots (see [`snapshot`](super::snapshot));
    /// `remember`: a whole-page one becomes the base of the next change. A
    /// tab that wandered to a local file outside the workspace is taken
    /// back to about:blank first.
    pub(super) async fn snapshot(
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

    /// `text` as a tool result takes it: whole, or in part and saved to a
    /// file when longer than [`BrowserConfig::snapshot_limit`].
    ///
    /// [`BrowserConfig::snapshot_limit`]: super::BrowserConfig::snapshot_limit
    pub(super) fn sized(&self, text: String) -> String {
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
