//! Starting Chrome so that nothing of it outlives the host, with its
//! DevTools on a pipe (no port) and its writes confined.
//!
//! Chrome is started through kinet's process containment
//! ([`kinet_core::sandbox::Launch`]): on Linux it runs in a PID namespace
//! whose supervisor dies with the host (`PR_SET_PDEATHSIG`), so when the
//! host exits in any way (`process::exit`, SIGTERM, SIGKILL) the kernel
//! ends every Chrome process. A temporary profile is removed by a small
//! watcher started beside it: it waits for the host to go (its end of a
//! pipe closes), then for Chrome to go, then deletes the profile.

use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kinet_core::sandbox::{Launch, SandboxPolicy};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr};

use super::config::BrowserConfig;
use super::pipe::{self, DevtoolsPipe};
use crate::ComputerError;

/// The flags every start gets (besides the profile, the window and the
/// headless mode): no first-run UI, no background traffic, no
/// throttling of background tabs, no crash reporter.
const FLAGS: &[&str] = &[
    "--disable-background-networking",
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    "--disable-renderer-backgrounding",
    "--disable-breakpad",
    "--disable-client-side-phishing-detection",
    "--disable-component-extensions-with-background-pages",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--disable-features=TranslateUI",
    "--disable-hang-monitor",
    "--disable-ipc-flooding-protection",
    "--disable-popup-blocking",
    "--disable-prompt-on-repost",
    "--disable-sync",
    "--disable-gpu",
    "--disable-quic",
    "--force-color-profile=srgb",
    "--metrics-recording-only",
    "--no-first-run",
    "--no-default-browser-check",
    "--password-store=basic",
    "--use-mock-keychain",
    "--mute-audio",
    "--lang=en-US",
    "--enable-automation",
    "--remote-debugging-pipe",
    "about:blank",
];

/// How much of Chrome's error output is kept for messages.
const STDERR_KEPT: usize = 4096;

/// A running Chrome process tree.
pub(crate) struct Chrome {
    child: Child,
    /// The DevTools pipe (no port is open).
    pub(crate) pipe: Arc<DevtoolsPipe>,
    /// The write end of the profile watcher's pipe: closing it (this value
    /// dropped, or the host gone) lets the watcher remove the profile.
    watcher: Option<std::process::ChildStdin>,
    profile: Option<tempfile::TempDir>,
}

impl Chrome {
    /// Starts Chrome per `config` and waits until it answers on its
    /// DevTools pipe.
    pub(crate) async fn start(
        config: &BrowserConfig,
        executable: &Path,
    ) -> Result<Self, ComputerError> {
        let (profile, profile_dir) = match &config.profile_dir {
            Some(dir) => (None, dir.clone()),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("kinet-chrome-")
                    .tempdir()
                    .map_err(|e| launch_error(executable, e))?;
                let path = dir.path().to_path_buf();
                (Some(dir), path)
            }
        };
        let mut command = std::process::Command::new(executable);
        let (width, height) = config.window_size;
        command
            .args(FLAGS)
            .arg(format!("--user-data-dir={}", profile_dir.display()))
            .arg(format!("--window-size={width},{height}"))
            .args(&config.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if config.headless {
            command.args(["--headless=new", "--hide-scrollbars"]);
        }
        if kinet_core::sandbox::running_as_root() {
            // Chrome's own sandbox refuses to run as root.
            command.arg("--no-sandbox");
        }
        let downloads = config
            .downloads_dir
            .clone()
            .unwrap_or_else(|| profile_dir.join("Downloads"));
        std::fs::create_dir_all(&downloads).map_err(|e| launch_error(executable, e))?;
        let (ends, write, read) = pipe::pipes().map_err(|e| launch_error(executable, e))?;
        let launch = confined(config, &mut command, &profile_dir, &downloads)
            .map_err(|e| launch_error(executable, e))?
            .pass_fd(ends.commands, 3)
            .and_then(|launch| launch.pass_fd(ends.replies, 4))
            .map_err(|e| launch_error(executable, e))?;
        launch
            .prepare(&mut command)
            .map_err(|e| launch_error(executable, e))?;
        let pipe = DevtoolsPipe::start(write, read).map_err(|e| launch_error(executable, e))?;
        let mut child = {
            // Descriptors 3 and 4 taken here while spawning (see
            // `Launch::pass_fd`); Chrome's ends close with the command.
            let _low = hold_low_descriptors();
            tokio::process::Command::from(command)
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| launch_error(executable, e))?
        };
        let watcher = match (&profile, child.id()) {
            (Some(dir), Some(pid)) => watch_profile(dir.path(), pid),
            _ => None,
        };
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| launch_error(executable, "no error output"))?;
        let kept = Arc::new(Mutex::new(String::new()));
        tokio::spawn(keep_stderr(stderr, kept.clone()));
        let ready = pipe
            .call(
                "Browser.getVersion",
                None,
                serde_json::json!({}),
                config.launch_timeout,
            )
            .await;
        let ready = match ready {
            Ok(_) => {
                pipe.call(
                    "Browser.setDownloadBehavior",
                    None,
                    serde_json::json!({
                        "behavior": "allow",
                        "downloadPath": downloads.display().to_string(),
                    }),
                    config.command_timeout,
                )
                .await
            }
            failed => failed,
        };
        if let Err(error) = ready {
            let _ = child.start_kill();
            let said = kept.lock().map(|s| s.trim().to_owned()).unwrap_or_default();
            let why = match error {
                ComputerError::Browser(message) if message.contains("did not answer") => format!(
                    "no answer on the DevTools pipe within {} s",
                    config.launch_timeout.as_secs()
                ),
                _ => "it exited before it was ready".to_owned(),
            };
            let reason = if said.is_empty() {
                why
            } else {
                format!("{why}; it said: {said}")
            };
            return Err(launch_error(executable, reason));
        }
        Ok(Self {
            child,
            pipe,
            watcher,
            profile,
        })
    }

    /// Whether the process tree still runs.
    pub(crate) fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The process id at the top of the tree (killing it ends them all).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits up to `limit` for Chrome to exit by itself, then kills the
    /// tree; then removes the temporary profile.
    pub(crate) async fn stop(mut self, limit: Duration) {
        if tokio::time::timeout(limit, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        self.watcher.take();
        if let Some(profile) = self.profile.take() {
            let _ = profile.close();
        }
    }
}

impl Drop for Chrome {
    fn drop(&mut self) {
        // The tree goes with its top (kill_on_drop); the watcher removes
        // the profile once it has gone.
        let _ = self.child.start_kill();
    }
}

/// A launch with Chrome's writes confined to its profile and its
/// downloads (see [`BrowserConfig::confine_writes`]). Its temp directory
/// is a private tmpfs inside the profile (`TMPDIR`), so the listening
/// socket of Chrome's process singleton, which Chrome always makes, lives
/// where no process outside Chrome's sandbox can reach it.
fn confined(
    config: &BrowserConfig,
    command: &mut std::process::Command,
    profile: &Path,
    downloads: &Path,
) -> std::io::Result<Launch> {
    let launch = Launch::new();
    if !config.confine_writes {
        return Ok(launch);
    }
    let temp = profile.join(".kinet-tmp");
    std::fs::create_dir_all(&temp)?;
    let mut policy = SandboxPolicy::workspace_write()
        .temp_dirs(false)
        .allow_network(true)
        .own_proc_writable(true)
        .private_dir(&temp);
    if !config.headless {
        policy = policy.reachable("/tmp/.X11-unix");
    }
    if let Some(why) = kinet_core::sandbox::support().sandbox_unavailable(&policy) {
        tracing::warn!(%why, "Chrome's writes are not confined");
        return Ok(launch);
    }
    command.env("TMPDIR", &temp);
    Ok(launch.sandbox(policy, vec![profile.to_path_buf(), downloads.to_path_buf()]))
}

/// Keeps Chrome's error output drained (a full pipe would stall Chrome),
/// its first lines kept for messages.
async fn keep_stderr(stderr: ChildStderr, kept: Arc<Mutex<String>>) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Ok(mut kept) = kept.lock()
            && kept.len() < STDERR_KEPT
        {
            kept.push_str(&line);
            kept.push('\n');
        }
    }
}

/// Opens `/dev/null` until the descriptors up to 4 are all taken, so the
/// spawn's own error pipe cannot get 3 or 4 (which Chrome's pipe ends
/// replace in the child); they close when the value is dropped.
fn hold_low_descriptors() -> Vec<std::fs::File> {
    use std::os::fd::AsRawFd;
    let mut held = Vec::new();
    while let Ok(file) = std::fs::File::open("/dev/null") {
        if file.as_raw_fd() > 4 {
            break;
        }
        held.push(file);
    }
    held
}

/// Starts the profile watcher: a shell that waits for its input to end
/// (the host gone or done), then for process `pid` (the top of Chrome's
/// tree, whose end takes every Chrome process with it) to end, then
/// removes `profile`. Returns the input's write end. Without a shell nothing is
/// watched (the profile is still removed at a clean shutdown).
fn watch_profile(profile: &Path, pid: u32) -> Option<std::process::ChildStdin> {
    // The process counts as gone once it is a zombie: nobody may reap it
    // soon once the host has died (a container's init may not).
    let script = "read _ignored; \
while state=$(cat \"/proc/$1/stat\" 2>/dev/null); do \
case \"${state##*) }\" in Z*|X*) break ;; esac; sleep 0.05; done; \
sleep 0.1; rm -rf -- \"$2\"";
    let mut command = std::process::Command::new("/bin/sh");
    command
        .args(["-c", script, "kinet-profile-watcher"])
        .arg(pid.to_string())
        .arg(profile)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Not contained: it must outlive the host to do its work. Its own
    // session keeps terminal signals away.
    Launch::new().contain(false).prepare(&mut command).ok()?;
    let mut child = command.spawn().ok()?;
    let stdin = child.stdin.take();
    // Reaped by whoever adopts it; nothing to wait for here.
    std::thread::spawn(move || child.wait());
    stdin.map(|mut stdin| {
        let _ = stdin.flush();
        stdin
    })
}

pub(crate) fn launch_error(executable: &Path, error: impl std::fmt::Display) -> ComputerError {
    ComputerError::Launch {
        executable: executable.display().to_string(),
        reason: error.to_string(),
    }
}
