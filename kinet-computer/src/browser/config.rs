//! The settings of the dedicated browser, and where its executable is
//! found.

use std::path::PathBuf;
use std::time::Duration;

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
    /// How long `browser_navigate` waits for a page to load (then stops
    /// it), and how long an action waits for a navigation it started to
    /// finish loading (then says it is still loading). Every browser tool
    /// call finishes within this plus `command_timeout`. Default 10 s.
    pub navigation_timeout: Duration,
    /// Extra command-line flags, e.g. `--proxy-server=...`.
    pub extra_args: Vec<String>,
    /// How long an action waits for its element to become actionable
    /// (visible, enabled, not moving, not covered) before refusing with the
    /// reason. Default 2 s.
    pub action_wait: Duration,
    /// Whether `file:` URLs may be opened, and then only inside the call's
    /// workspace roots. Default false.
    pub allow_file_urls: bool,
    /// Further URL schemes the tools may open (e.g. `"chrome"`). Default
    /// none: only `http`, `https`, `data` and `about:blank`.
    pub allowed_schemes: Vec<String>,
    /// The longest snapshot put in a tool result, in characters; a longer
    /// one is shown in part and saved whole to a file. Default 7,500 (under
    /// the engine's 8,192-character cut).
    pub snapshot_limit: usize,
    /// Where such snapshots are saved. Default: a temporary directory of
    /// the tools, removed with them.
    pub snapshot_dir: Option<PathBuf>,
    /// How `confirm()` and `prompt()` dialogs are answered: accepted (true,
    /// the default: the action that opened one was already approved) or
    /// dismissed. Alerts are always accepted. Either way the model reads
    /// what the dialog said with the next result.
    pub accept_dialogs: bool,
    /// Where downloads go. Default: `Downloads` in the profile directory.
    pub downloads_dir: Option<PathBuf>,
    /// Confines Chrome's writes with kinet's sandbox (Landlock, Linux
    /// 5.13+ with unprivileged user namespaces): only the profile, the
    /// downloads directory, the temp directories and Chrome's own `/proc`
    /// files are writable, whatever a page or an exploit asks; the network
    /// stays on; the sockets the sandbox hides (session bus, ssh agent;
    /// X11 too when headless) are out of reach. Where the sandbox is not
    /// available Chrome runs contained only, and a warning is logged.
    /// Default true.
    pub confine_writes: bool,
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
            action_wait: Duration::from_secs(2),
            allow_file_urls: false,
            allowed_schemes: Vec::new(),
            snapshot_limit: 7_500,
            snapshot_dir: None,
            accept_dialogs: true,
            downloads_dir: None,
            confine_writes: true,
        }
    }
}

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
