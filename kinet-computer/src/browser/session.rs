//! The dedicated Chrome: started on first use with its own profile, watched,
//! started again when it dies, shut down cleanly.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::target::{CloseTargetParams, GetTargetsParams, TargetId};
use chromiumoxide::{Browser, Page};
use futures::StreamExt;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::browser_error;
use super::dialogs::Dialogs;
use crate::ComputerError;

/// Settings of the dedicated browser. Every field documents its default.
#[derive(Debug, Clone)]
pub struct BrowserConfig {
    /// The Chrome or Chromium executable. Default: `KINET_CHROME`, then
    /// `/usr/bin/chromium` (Debian), `chromium-browser`, `google-chrome`,
    /// then the usual install places of each platform.
    pub executable: Option<PathBuf>,
    /// Run without a window. Default true.
    pub headless: bool,
    /// The profile directory. Default: a fresh temporary directory per
    /// start, deleted at shutdown, so the user's own browser profile is
    /// never touched. Set a path to keep cookies and logins between runs.
    pub profile_dir: Option<PathBuf>,
    /// Window (and viewport) size. Default 1280 x 800.
    pub window_size: (u32, u32),
    /// How long Chrome may take to start. Default 20 s.
    pub launch_timeout: Duration,
    /// Time limit of one DevTools command. Default 30 s.
    pub command_timeout: Duration,
    /// How long an action waits for a navigation it started to finish
    /// loading. Default 10 s.
    pub navigation_timeout: Duration,
    /// Extra command-line flags, e.g. `--proxy-server=...`.
    pub extra_args: Vec<String>,
    /// How `confirm()` and `prompt()` dialogs are answered: accepted (true,
    /// the default: the action that opened one was already approved) or
    /// dismissed. Alerts are always accepted. Either way the model reads
    /// what the dialog said with the next result.
    pub accept_dialogs: bool,
}

impl Default for BrowserConfig {
    fn default() -> Self {
        Self {
            executable: None,
            headless: true,
            profile_dir: None,
            window_size: (1280, 800),
            launch_timeout: Duration::from_secs(20),
            command_timeout: Duration::from_secs(30),
            navigation_timeout: Duration::from_secs(10),
            extra_args: Vec::new(),
            accept_dialogs: true,
        }
    }
}

/// How long a tab may take to answer a trivial evaluation before it counts
/// as crashed or hung.
const PAGE_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where Chrome is usually installed.
const CANDIDATES: &[&str] = &[
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
    "/usr/bin/google-chrome-stable",
    "/snap/bin/chromium",
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
    r"C:\Program Files\Google\Chrome\Application\chrome.exe",
    r"C:\Program Files (x86)\Google\Chrome\Application\chrome.exe",
];

impl BrowserConfig {
    /// The executable to start: the configured one, else the first found.
    pub fn find_executable(&self) -> Result<PathBuf, ComputerError> {
        if let Some(path) = &self.executable {
            return Ok(path.clone());
        }
        let from_env = std::env::var_os("KINET_CHROME").map(PathBuf::from);
        let candidates = from_env
            .iter()
            .cloned()
            .chain(CANDIDATES.iter().map(PathBuf::from));
        let mut tried = Vec::new();
        for candidate in candidates {
            if candidate.is_file() {
                return Ok(candidate);
            }
            tried.push(candidate.display().to_string());
        }
        Err(ComputerError::NoBrowser {
            tried: tried.join(", "),
        })
    }
}

/// Whether this process runs as root (Chrome's sandbox refuses root).
fn running_as_root() -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    }
    #[cfg(not(unix))]
    {
        false
    }
}

struct Running {
    browser: Browser,
    events: JoinHandle<()>,
    active: Option<TargetId>,
    /// Tabs in the order they were first seen (Chrome reports them in no
    /// particular order; indexes must stay put).
    order: Vec<TargetId>,
    dialogs: Dialogs,
    /// The dialog answerer of each tab seen.
    watched: HashMap<TargetId, JoinHandle<()>>,
    _profile: Option<tempfile::TempDir>,
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
        !self.events.is_finished() && matches!(self.browser.try_wait(), Ok(None))
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
        let (profile, profile_dir) = match &config.profile_dir {
            Some(dir) => (None, dir.clone()),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("kinet-chrome-")
                    .tempdir()
                    .map_err(|e| launch_error(&executable, e))?;
                let path = dir.path().to_path_buf();
                (Some(dir), path)
            }
        };
        let (width, height) = config.window_size;
        let mut builder = chromiumoxide::BrowserConfig::builder()
            .chrome_executable(&executable)
            .user_data_dir(&profile_dir)
            .window_size(width, height)
            .viewport(None)
            .launch_timeout(config.launch_timeout)
            .request_timeout(config.command_timeout)
            .args([
                "--disable-gpu",
                "--disable-quic",
                "--disable-component-update",
                "--no-default-browser-check",
                "--mute-audio",
            ])
            .args(config.extra_args.iter().map(String::as_str));
        builder = if config.headless {
            builder.new_headless_mode()
        } else {
            builder.with_head()
        };
        if running_as_root() {
            builder = builder.no_sandbox();
        }
        let chrome = builder.build().map_err(|e| launch_error(&executable, e))?;
        let (browser, mut handler) = Browser::launch(chrome)
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
            events,
            active: None,
            order: Vec::new(),
            dialogs: self.inner.dialogs.clone(),
            watched: HashMap::new(),
            _profile: profile,
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
            if let Some(mut dead) = state.take() {
                let _ = dead.browser.kill().await;
            }
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
                if let Some(mut stuck) = state.take() {
                    let _ = stuck.browser.kill().await;
                }
                Err(ComputerError::Browser(format!(
                    "the browser did not answer within {} s; it starts again on the next call",
                    limit.as_secs()
                )))
            }
        }
    }

    /// The active tab, opening one when there is none. A tab whose page
    /// stopped answering (a crashed or hung renderer) is replaced by a new
    /// tab at the same address.
    pub async fn active_page(&self) -> Result<Page, ComputerError> {
        let page = self.live_active_page().await?;
        let probe = page.evaluate_expression("1");
        if matches!(
            tokio::time::timeout(PAGE_PROBE_TIMEOUT, probe).await,
            Ok(Ok(_))
        ) {
            return Ok(page);
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
            let loaded = tokio::time::timeout(limit, page.goto(url)).await;
            let failure = match loaded {
                Ok(Ok(_)) => None,
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some(format!("not loaded within {} s", limit.as_secs())),
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

    /// The process id of the running Chrome, if one runs.
    pub async fn pid(&self) -> Option<u32> {
        let mut state = self.inner.state.lock().await;
        let running = state.as_mut()?;
        running
            .browser
            .get_mut_child()
            .and_then(|child| child.inner.id())
    }

    /// Closes Chrome (politely, then by force after 2 s) and deletes its
    /// temporary profile. The next call starts a new one.
    pub async fn shutdown(&self) {
        let Some(mut running) = self.inner.state.lock().await.take() else {
            return;
        };
        let closed = tokio::time::timeout(Duration::from_secs(2), async {
            running.browser.close().await.ok()?;
            running.browser.wait().await.ok()
        })
        .await;
        if !matches!(closed, Ok(Some(_))) {
            let _ = running.browser.kill().await;
        }
    }
}

fn launch_error(executable: &Path, error: impl std::fmt::Display) -> ComputerError {
    ComputerError::Launch {
        executable: executable.display().to_string(),
        reason: error.to_string(),
    }
}
