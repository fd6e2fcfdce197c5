//! The dedicated Chrome: started on first use with its own profile, watched,
//! started again when it dies, shut down cleanly.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::target::{CloseTargetParams, GetTargetsParams, TargetId};
use chromiumoxide::handler::HandlerConfig;
use chromiumoxide::{Browser, Page};
use futures::StreamExt;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::browser_error;
use super::config::BrowserConfig;
use super::dialogs::Dialogs;
use super::document::evaluate;
use super::launch::{Chrome, launch_error};
use super::link::Link;
use crate::ComputerError;

/// How long a tab may take to answer a trivial evaluation before it counts
/// as crashed or hung.
const PAGE_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

struct Running {
    browser: Browser,
    chrome: Option<Chrome>,
    events: JoinHandle<()>,
    active: Option<TargetId>,
    /// Tabs in the order they were first seen (Chrome reports them in no
    /// particular order; indexes must stay put).
    order: Vec<TargetId>,
    dialogs: Dialogs,
    /// The dialog answerer of each tab seen.
    watched: HashMap<TargetId, JoinHandle<()>>,
    /// kinet's own DevTools connection, once used.
    link: Option<Arc<Link>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.events.abort();
        for watcher in self.watched.values() {
            watcher.abort();
        }
    }
}

impl Running {
    fn is_alive(&mut self) -> bool {
        !self.events.is_finished() && self.chrome.as_mut().is_some_and(Chrome::is_alive)
    }

    /// Answers the dialogs of `page` from now on.
    async fn watch(&mut self, page: &Page) {
        if !self.watched.contains_key(page.target_id()) {
            let watcher = self.dialogs.watch(page).await;
            self.watched.insert(page.target_id().clone(), watcher);
        }
    }

    /// The open tabs in a stable order.
    async fn pages(&mut self) -> Result<Vec<Page>, ComputerError> {
        let mut pages = self.browser.pages().await.map_err(browser_error)?;
        for page in &pages {
            if !self.order.contains(page.target_id()) {
                self.order.push(page.target_id().clone());
            }
            self.watch(page).await;
        }
        self.order
            .retain(|id| pages.iter().any(|page| page.target_id() == id));
        self.watched.retain(|id, watcher| {
            let open = pages.iter().any(|page| page.target_id() == id);
            if !open {
                watcher.abort();
            }
            open
        });
        let order = &self.order;
        pages.sort_by_key(|page| order.iter().position(|id| id == page.target_id()));
        Ok(pages)
    }
}

/// The browser the `browser_*` tools share. Chrome starts on the first call;
/// if it dies, the next call starts it again. Cheap to clone.
#[derive(Clone)]
pub struct BrowserSession {
    inner: Arc<Inner>,
}

struct Inner {
    config: BrowserConfig,
    /// Snapshots of this session's tabs take turns (see [`snapshot`]).
    ///
    /// [`snapshot`]: super::snapshot
    snapshots: Mutex<()>,
    state: Mutex<Option<Running>>,
    dialogs: Dialogs,
    /// Tabs waiting for a navigation an action started, and since when.
    pending: std::sync::Mutex<HashMap<TargetId, (String, std::time::Instant)>>,
}

impl std::fmt::Debug for BrowserSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrowserSession")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl BrowserSession {
    /// A session that starts Chrome with these settings on first use.
    pub fn new(config: BrowserConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                dialogs: Dialogs::new(config.accept_dialogs),
                config,
                snapshots: Mutex::new(()),
                state: Mutex::new(None),
                pending: std::sync::Mutex::default(),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &BrowserConfig {
        &self.inner.config
    }

    /// A turn to take a snapshot: held while one runs.
    pub(crate) async fn snapshot_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.snapshots.lock().await
    }

    /// What happened on the tabs (dialogs answered, tabs reopened) since
    /// the last call.
    pub(crate) fn take_notes(&self) -> Vec<String> {
        self.inner.dialogs.take()
    }

    async fn launch(&self) -> Result<Running, ComputerError> {
        let config = &self.inner.config;
        let executable = config.find_executable()?;
        let chrome = Chrome::start(config, &executable).await?;
        let handler_config = HandlerConfig {
            viewport: None,
            request_timeout: config.command_timeout,
            ..HandlerConfig::default()
        };
        let endpoint = chrome
            .pipe
            .library_endpoint(config.launch_timeout)
            .await
            .map_err(|e| launch_error(&executable, e))?;
        let (browser, mut handler) = Browser::connect_with_config(&endpoint, handler_config)
            .await
            .map_err(|e| launch_error(&executable, e))?;
        let events = tokio::spawn(async move {
            while let Some(event) = handler.next().await {
                if let Err(error) = event {
                    tracing::debug!(%error, "browser connection event");
                }
            }
        });
        let mut running = Running {
            browser,
            chrome: Some(chrome),
            events,
            active: None,
            order: Vec::new(),
            dialogs: self.inner.dialogs.clone(),
            watched: HashMap::new(),
            link: None,
        };
        // One tab of ours; the tab Chrome opens at start is closed (it is
        // not attached, so it cannot be driven). Asking Chrome directly keeps
        // the connection from attaching to it.
        let page = running
            .browser
            .new_page("about:blank")
            .await
            .map_err(browser_error)?;
        running.active = Some(page.target_id().clone());
        running.order.push(page.target_id().clone());
        if let Ok(targets) = running.browser.execute(GetTargetsParams::default()).await {
            for target in targets.result.target_infos {
                if target.r#type == "page" && &target.target_id != page.target_id() {
                    let _ = running
                        .browser
                        .execute(CloseTargetParams::new(target.target_id))
                        .await;
                }
            }
        }
        tracing::debug!(executable = %executable.display(), "browser started");
        Ok(running)
    }

    /// Runs `f` on the live browser, starting (or restarting) it first.
    async fn with_running<T>(
        &self,
        f: impl AsyncFnOnce(&mut Running) -> Result<T, ComputerError>,
    ) -> Result<T, ComputerError> {
        let mut state = self.inner.state.lock().await;
        if let Some(running) = state.as_mut()
            && !running.is_alive()
        {
            tracing::info!("the browser exited; starting it again");
            state.take();
        }
        if state.is_none() {
            *state = Some(self.launch().await?);
        }
        let limit = self.inner.config.command_timeout;
        let Some(running) = state.as_mut() else {
            return Err(ComputerError::Browser("the browser is not running".into()));
        };
        match tokio::time::timeout(limit, f(running)).await {
            Ok(result) => result,
            Err(_) => {
                // A browser that stops answering is replaced on the next call.
                state.take();
                Err(ComputerError::Browser(format!(
                    "the browser did not answer within {} s; it starts again on the next call",
                    limit.as_secs()
                )))
            }
        }
    }

    /// The active tab, opening one when there is none. A tab whose page
    /// stopped answering (a crashed or hung renderer) is replaced by a new
    /// tab at the same address. A tab waiting for a page it was sent to
    /// (a click on a link to a slow server) is not mistaken for a hung one:
    /// while it waits, nothing on it can be read, and this says so.
    pub async fn active_page(&self) -> Result<Page, ComputerError> {
        let page = self.live_active_page().await?;
        // A plain evaluation in the current document; Chrome holds it back
        // while a navigation to a new document is waiting for its answer.
        let probe = evaluate(&page, "1");
        if matches!(
            tokio::time::timeout(PAGE_PROBE_TIMEOUT, probe).await,
            Ok(Ok(_))
        ) {
            self.set_pending(page.target_id(), None);
            return Ok(page);
        }
        if let Some((url, since)) = self.pending(page.target_id()) {
            return Err(ComputerError::NotActionable(format!(
                "the tab is still waiting for {url} to answer (for {} s now); nothing on it can be read or clicked until the page arrives. Wait and try again, or browser_navigate elsewhere.",
                since.elapsed().as_secs()
            )));
        }
        let url = page
            .url()
            .await
            .ok()
            .flatten()
            .filter(|url| url.starts_with("http") || url.starts_with("file:"))
            .unwrap_or_else(|| "about:blank".to_owned());
        tracing::info!(%url, "a browser tab stopped answering; reopening it");
        self.inner.dialogs.note(format!(
            "The tab's page stopped answering (crashed or hung); kinet closed it and opened \
{url} in a new tab."
        ));
        let _ = self.close_tab(page).await;
        self.new_tab(&url).await
    }

    /// The active tab for a navigation, which replaces whatever the tab is
    /// waiting for: not probed while a navigation is pending.
    pub(crate) async fn page_to_navigate(&self) -> Result<Page, ComputerError> {
        let page = self.live_active_page().await?;
        if self.pending(page.target_id()).is_some() {
            return Ok(page);
        }
        self.active_page().await
    }

    /// Notes that `tab` waits for `url` (a navigation an action started
    /// that has not answered yet), or with `None` that it does not.
    pub(crate) fn set_pending(&self, tab: &TargetId, url: Option<String>) {
        if let Ok(mut pending) = self.inner.pending.lock() {
            match url {
                Some(url) => {
                    pending.insert(tab.clone(), (url, std::time::Instant::now()));
                }
                None => {
                    pending.remove(tab);
                }
            }
        }
    }

    fn pending(&self, tab: &TargetId) -> Option<(String, std::time::Instant)> {
        self.inner.pending.lock().ok()?.get(tab).cloned()
    }

    async fn live_active_page(&self) -> Result<Page, ComputerError> {
        self.with_running(async |running| {
            if let Some(id) = running.active.clone()
                && let Ok(page) = running.browser.get_page(id).await
            {
                running.watch(&page).await;
                return Ok(page);
            }
            let pages = running.pages().await?;
            let page = match pages.into_iter().next() {
                Some(page) => page,
                None => running
                    .browser
                    .new_page("about:blank")
                    .await
                    .map_err(browser_error)?,
            };
            running.active = Some(page.target_id().clone());
            running.watch(&page).await;
            Ok(page)
        })
        .await
    }

    /// Every open tab, in the order Chrome reports them, and the index of
    /// the active one.
    pub async fn tabs(&self) -> Result<(Vec<Page>, Option<usize>), ComputerError> {
        self.with_running(async |running| {
            let pages = running.pages().await?;
            let active = running
                .active
                .as_ref()
                .and_then(|id| pages.iter().position(|p| p.target_id() == id));
            Ok((pages, active))
        })
        .await
    }

    /// Opens a tab, makes it the active one and loads `url` in it (within
    /// the navigation timeout).
    pub async fn new_tab(&self, url: &str) -> Result<Page, ComputerError> {
        let page = self
            .with_running(async |running| {
                let page = running
                    .browser
                    .new_page("about:blank")
                    .await
                    .map_err(browser_error)?;
                // Dialogs are answered from the start, so one shown while
                // the page loads cannot hold up the load.
                running.watch(&page).await;
                running.active = Some(page.target_id().clone());
                Ok(page)
            })
            .await?;
        if url != "about:blank" {
            // Loaded outside the session lock: the other tabs stay usable.
            let limit = self.inner.config.navigation_timeout;
            let link = self.link().await?;
            let failure = match super::navigation::navigate(&page, &link, url, limit).await {
                Ok(landing) if landing.timed_out.is_none() => None,
                Ok(_) => Some(format!(
                    "it did not load within {} s and was stopped",
                    limit.as_secs_f64()
                )),
                Err(error) => Some(error.to_string()),
            };
            if let Some(failure) = failure {
                return Err(ComputerError::Browser(format!(
                    "opened a new tab (now the active one) but could not load {url}: {failure}"
                )));
            }
        }
        Ok(page)
    }

    /// Makes `page` the active tab.
    pub async fn activate(&self, page: &Page) -> Result<(), ComputerError> {
        page.bring_to_front().await.map_err(browser_error)?;
        let id = page.target_id().clone();
        self.with_running(async |running| {
            running.active = Some(id);
            Ok(())
        })
        .await
    }

    /// Closes `page` (through the browser: the page's own connection ends
    /// with it); the active tab becomes the first remaining one.
    pub async fn close_tab(&self, page: Page) -> Result<(), ComputerError> {
        let id = page.target_id().clone();
        self.with_running(async |running| {
            running
                .browser
                .execute(CloseTargetParams::new(id.clone()))
                .await
                .map_err(browser_error)?;
            if running.active.as_ref() == Some(&id) {
                running.active = None;
            }
            // The tab leaves the list once Chrome reports it destroyed.
            for _ in 0..40 {
                if !running.pages().await?.iter().any(|p| p.target_id() == &id) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Ok(())
        })
        .await
    }

    /// The process id at the top of the running Chrome's process tree, if
    /// one runs: killing it ends every Chrome process.
    pub async fn pid(&self) -> Option<u32> {
        let state = self.inner.state.lock().await;
        state.as_ref()?.chrome.as_ref()?.pid()
    }

    /// kinet's own DevTools connection (see [`Link`]), connected on first
    /// use.
    pub(crate) async fn link(&self) -> Result<Arc<Link>, ComputerError> {
        self.with_running(async |running| {
            if let Some(link) = &running.link {
                return Ok(Arc::clone(link));
            }
            let pipe = running
                .chrome
                .as_ref()
                .map(|chrome| Arc::clone(&chrome.pipe))
                .ok_or_else(|| ComputerError::Browser("the browser is not running".into()))?;
            let link = Arc::new(Link::new(pipe));
            running.link = Some(Arc::clone(&link));
            Ok(link)
        })
        .await
    }

    /// Closes Chrome (politely, then by force after 2 s) and deletes its
    /// temporary profile. The next call starts a new one.
    pub async fn shutdown(&self) {
        let Some(mut running) = self.inner.state.lock().await.take() else {
            return;
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), running.browser.close()).await;
        if let Some(chrome) = running.chrome.take() {
            chrome.stop(Duration::from_secs(2)).await;
        }
    }
}
