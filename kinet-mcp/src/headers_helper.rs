//! Claude Code's `headersHelper`: a shell command printing the headers for
//! a remote server, run before each connection.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

/// How long a helper may run.
const HELPER_TIMEOUT: Duration = Duration::from_secs(10);

/// The most output read from a helper.
const HELPER_OUTPUT: u64 = 64 * 1024;

/// Runs `command` with `sh -c` for server `server` at `url` and returns the
/// headers it printed (a JSON object of strings). The helper's whole
/// process group is killed when it overruns the time limit or the call is
/// dropped.
pub(crate) async fn run(
    command: &str,
    server: &str,
    url: &str,
) -> Result<BTreeMap<String, String>, String> {
    let fail = |why: String| format!("the headersHelper of `{server}` {why}");
    let mut child = tokio::process::Command::new("sh");
    child
        .arg("-c")
        .arg(command)
        .env("CLAUDE_CODE_MCP_SERVER_NAME", server)
        .env("CLAUDE_CODE_MCP_SERVER_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    child.process_group(0);
    let mut child = child
        .spawn()
        .map_err(|e| fail(format!("could not start: {e}")))?;
    let group = KillGroup(child.id());
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| fail("has no output".into()))?;
    let mut stderr = child
        .stderr
        .take()
        .ok_or_else(|| fail("has no output".into()))?;
    let work = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        // Standard output until its end (stopping at once past the cap);
        // standard error alongside, kept to 4 KiB.
        let status = {
            let out_task = read_capped(&mut stdout, &mut out, HELPER_OUTPUT, true);
            let err_task = read_capped(&mut stderr, &mut err, 4096, false);
            tokio::pin!(out_task, err_task);
            let mut err_done = false;
            let out = loop {
                tokio::select! {
                    out = &mut out_task => break out,
                    _ = &mut err_task, if !err_done => err_done = true,
                }
            };
            let overflow = out.map_err(|e| fail(format!("could not be read: {e}")))?;
            if overflow {
                // Stop it now: it would block on a full pipe until the
                // time limit.
                return Err(fail(format!(
                    "printed more than {} KiB; headers are a small JSON object",
                    HELPER_OUTPUT / 1024
                )));
            }
            // Then its exit; what it (or a child it left behind) still
            // writes to standard error gets a moment, not the time limit.
            let status = loop {
                tokio::select! {
                    status = child.wait() => break status,
                    _ = &mut err_task, if !err_done => err_done = true,
                }
            };
            if !err_done {
                let _ = tokio::time::timeout(Duration::from_millis(100), &mut err_task).await;
            }
            status.map_err(|e| fail(format!("could not be waited for: {e}")))?
        };
        Ok::<_, String>((status, out, err))
    };
    let (status, out, err) = tokio::time::timeout(HELPER_TIMEOUT, work)
        .await
        .map_err(|_| {
            fail(format!(
                "ran past {} s and was stopped",
                HELPER_TIMEOUT.as_secs()
            ))
        })??;
    drop(group);
    if !status.success() {
        let err = String::from_utf8_lossy(&err);
        return Err(fail(format!(
            "failed ({status}){}",
            match err.trim() {
                "" => String::new(),
                text => format!(": {}", text.chars().take(300).collect::<String>()),
            }
        )));
    }
    let json: serde_json::Value = serde_json::from_slice(&out).map_err(|e| {
        fail(format!(
            "must print a JSON object of header names to string values: {e}"
        ))
    })?;
    let object = json
        .as_object()
        .ok_or_else(|| fail("must print a JSON object of header names to string values".into()))?;
    object
        .iter()
        .map(|(name, value)| match value.as_str() {
            Some(value) => Ok((name.clone(), value.to_owned())),
            None => Err(fail(format!(
                "printed a non-string value for header `{name}`"
            ))),
        })
        .collect()
}

/// Reads `reader` to its end into `kept`, keeping at most `cap` bytes and
/// saying whether there was more. With `stop`, the read ends at the first
/// byte past the cap; without, the rest is drained and dropped (so the
/// writer never blocks on a full pipe). What was read stays in `kept` if
/// the read is abandoned.
async fn read_capped(
    reader: &mut (impl tokio::io::AsyncRead + Unpin),
    kept: &mut Vec<u8>,
    cap: u64,
    stop: bool,
) -> std::io::Result<bool> {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut more = false;
    let mut buf = [0u8; 8192];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return Ok(more);
        }
        let room = cap.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
        if n > room {
            more = true;
            if stop {
                return Ok(more);
            }
        }
    }
}

/// Kills the helper's process group when dropped (it may have started
/// children of its own).
struct KillGroup(Option<u32>);

impl Drop for KillGroup {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
