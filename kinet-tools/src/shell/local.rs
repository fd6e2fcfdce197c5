//! A command kinet starts itself: contained (and sandboxed) by [`Launch`],
//! its merged output read from one pipe, capped in memory and streamed as
//! progress, killed with everything it started when it ends, times out or
//! is cancelled.

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kinet_core::sandbox::{Containment, Launch};
use kinet_core::{ToolCtx, ToolError};

use super::{Ended, Finished, ShellConfig};

/// Output kept in memory: the first `limit / 2` bytes and the last
/// `limit / 2`, with a count of what was dropped in between.
struct CappedOutput {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    half: usize,
    dropped: u64,
}

impl CappedOutput {
    fn new(limit: usize) -> Self {
        let half = (limit / 2).max(1);
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            half,
            dropped: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < self.half {
            let take = bytes.len().min(self.half - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= self.half {
            self.dropped += (self.tail.len() + bytes.len() - self.half) as u64;
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.half..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.half);
        self.dropped += overflow as u64;
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    fn into_text(self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!(
                "\n[... {} bytes of output omitted ...]\n",
                self.dropped
            ));
        }
        let (a, b) = self.tail.as_slices();
        let mut tail = Vec::with_capacity(a.len() + b.len());
        tail.extend_from_slice(a);
        tail.extend_from_slice(b);
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

/// Splits off complete UTF-8 text from `pending`, keeping an incomplete
/// character at the end for the next chunk.
fn take_text(pending: &mut Vec<u8>) -> String {
    let valid = match std::str::from_utf8(pending) {
        Ok(_) => pending.len(),
        Err(error) if error.error_len().is_none() => error.valid_up_to(),
        Err(_) => pending.len(),
    };
    let rest = pending.split_off(valid);
    let text = String::from_utf8_lossy(pending).into_owned();
    *pending = rest;
    text
}

/// A command to run here: the line (for messages and the report), the
/// command built from the launch spec, and how to start it.
pub(super) struct Local<'a> {
    pub line: &'a str,
    pub command: std::process::Command,
    pub launch: Launch,
    pub timeout: Duration,
}

/// Kills the process group when dropped: covers every way out of
/// `run_command`, including the future being dropped mid-command.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

/// Kills the process group led by `pid` (the whole tree on Windows). With
/// a PID namespace this ends the supervisor and PID 1, and with it every
/// process in the namespace.
fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid else { return };
    #[cfg(unix)]
    {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::Pid;
        if let Ok(raw) = i32::try_from(pid) {
            let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
        }
    }
    #[cfg(windows)]
    {
        let _ = std::process::Command::new("taskkill")
            .args(["/F", "/T", "/PID", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The read end of the command's output pipe, read without a thread of
/// its own on Unix (nothing is left blocked when the call ends).
struct OutputPipe {
    #[cfg(unix)]
    pipe: tokio::net::unix::pipe::Receiver,
    #[cfg(unix)]
    buf: Vec<u8>,
    #[cfg(windows)]
    chunks: tokio::sync::mpsc::Receiver<Vec<u8>>,
}

impl OutputPipe {
    fn new(reader: std::io::PipeReader) -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            let fd = std::os::fd::OwnedFd::from(reader);
            Ok(Self {
                pipe: tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?,
                buf: vec![0u8; 64 * 1024],
            })
        }
        #[cfg(windows)]
        {
            use std::io::Read;
            let mut reader = reader;
            let (sender, chunks) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = reader.read(&mut buf) {
                    if n == 0 || sender.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            });
            Ok(Self { chunks })
        }
    }

    /// The next chunk, or `None` at the end (or on a read error).
    async fn next(&mut self) -> Option<Vec<u8>> {
        #[cfg(unix)]
        {
            use tokio::io::AsyncReadExt;
            match self.pipe.read(&mut self.buf).await {
                Ok(0) | Err(_) => None,
                Ok(n) => Some(self.buf[..n].to_vec()),
            }
        }
        #[cfg(windows)]
        {
            self.chunks.recv().await
        }
    }
}

pub(super) async fn run_command(
    local: Local<'_>,
    config: &ShellConfig,
    ctx: &ToolCtx,
) -> Result<Finished, ToolError> {
    let Local {
        line,
        command,
        launch,
        timeout,
    } = local;
    let started = Instant::now();
    let spawn_error = |e: std::io::Error| ToolError::failed(format!("cannot start `{line}`: {e}"));
    // One pipe for both streams keeps their order.
    let (reader, writer) = std::io::pipe().map_err(spawn_error)?;
    let Spawned {
        mut child,
        sandboxed,
        containment,
    } = spawn(line, command, launch, writer)?;
    let pid = child.id();
    // If this future is dropped (the run aborted), still stop the group.
    let mut group = GroupGuard(pid);
    let mut output = OutputReader {
        pipe: OutputPipe::new(reader).map_err(spawn_error)?,
        eof: false,
        kept: CappedOutput::new(config.max_output_bytes),
        progress: Progress {
            pending: Vec::new(),
            budget: config.max_output_bytes,
            ctx,
        },
    };
    let outcome = output
        .until_end(&mut child, line, timeout, config.drain_after_exit)
        .await?;
    // Stop everything left: the command itself on timeout or cancellation,
    // background children otherwise.
    kill_group(pid);
    group.0 = None;
    let status = match outcome {
        Outcome::Exited(status) => Some(status),
        Outcome::TimedOut | Outcome::Cancelled => {
            tokio::time::timeout(Duration::from_secs(5), child.wait())
                .await
                .ok()
                .and_then(Result::ok)
        }
    };
    // What the killed processes had written before they died; the pipe is
    // dropped after a short wait either way.
    output.drain_for(Duration::from_millis(50)).await;
    let text = output.into_text();
    let (exit_code, signal) = match status {
        Some(status) => (status.code(), signal_of(&status).map(|s| s.to_string())),
        None => (None, None),
    };
    let ended = Ended {
        exit_code,
        signal,
        timed_out: matches!(outcome, Outcome::TimedOut),
        cancelled: matches!(outcome, Outcome::Cancelled),
    };
    Ok(Finished::new(
        line,
        text,
        ended,
        sandboxed,
        containment,
        started,
    ))
}

/// A started command, with what its launch said about it.
struct Spawned {
    child: tokio::process::Child,
    sandboxed: bool,
    containment: Containment,
}

/// Starts `command` contained by `launch`, its stdout and stderr both
/// going to `writer`, in a process group of its own.
fn spawn(
    line: &str,
    mut command: std::process::Command,
    launch: Launch,
    writer: std::io::PipeWriter,
) -> Result<Spawned, ToolError> {
    let spawn_error = |e: std::io::Error| ToolError::failed(format!("cannot start `{line}`: {e}"));
    let writer_err = writer.try_clone().map_err(spawn_error)?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer_err));
    #[cfg(windows)]
    {
        use std::os::windows::process::CommandExt;
        const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
        command.creation_flags(CREATE_NEW_PROCESS_GROUP);
    }
    let sandboxed = launch.is_sandboxed();
    let containment = launch
        .prepare(&mut command)
        .map_err(|e| ToolError::failed(format!("cannot start `{line}`: {e}")))?;
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    let child = command.spawn().map_err(spawn_error)?;
    // Close our copies of the write end, or the reader never sees EOF.
    drop(command);
    Ok(Spawned {
        child,
        sandboxed,
        containment,
    })
}

/// How the wait for a command ended.
enum Outcome {
    /// It exited with this status.
    Exited(std::process::ExitStatus),
    /// The timeout passed first.
    TimedOut,
    /// The call was cancelled first.
    Cancelled,
}

/// Streams output as progress events, up to a budget of bytes, so a slow
/// host is not flooded by a command like `yes`; the final output is capped
/// apart.
struct Progress<'a> {
    /// Bytes of an incomplete UTF-8 character, sent with the next chunk.
    pending: Vec<u8>,
    /// Bytes left to stream.
    budget: usize,
    ctx: &'a ToolCtx,
}

impl Progress<'_> {
    /// Sends what fits in the budget of `chunk`, saying so once the budget
    /// is spent.
    fn send(&mut self, chunk: &[u8]) {
        if self.budget == 0 {
            return;
        }
        let take = chunk.len().min(self.budget);
        self.budget -= take;
        self.pending.extend_from_slice(&chunk[..take]);
        let mut text = take_text(&mut self.pending);
        if self.budget == 0 {
            text.push_str("\n[... further output is not streamed; it is in the result ...]\n");
        }
        if !text.is_empty() {
            self.ctx.progress(text);
        }
    }
}

/// The command's output as it is read: kept (capped) for the result and
/// streamed as progress.
struct OutputReader<'a> {
    pipe: OutputPipe,
    /// The pipe has ended: every writer closed it.
    eof: bool,
    kept: CappedOutput,
    progress: Progress<'a>,
}

impl OutputReader<'_> {
    /// Keeps and streams one chunk.
    fn take(&mut self, chunk: &[u8]) {
        self.kept.push(chunk);
        self.progress.send(chunk);
    }

    /// Reads output until the command exits, the timeout passes or the
    /// call is cancelled. After the exit, reads on for `drain_after_exit`
    /// at most.
    async fn until_end(
        &mut self,
        child: &mut tokio::process::Child,
        line: &str,
        timeout: Duration,
        drain_after_exit: Duration,
    ) -> Result<Outcome, ToolError> {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let ctx = self.progress.ctx;
        loop {
            tokio::select! {
                chunk = self.pipe.next(), if !self.eof => match chunk {
                    Some(chunk) => self.take(&chunk),
                    // The command closed its output but may still be running
                    // (`exec >log 2>&1; make`): keep waiting for it.
                    None => self.eof = true,
                },
                exited = child.wait() => {
                    let status = exited.map_err(|e| ToolError::failed(format!("waiting for `{line}` failed: {e}")))?;
                    // Keep reading what is already in the pipe (and, without a
                    // PID namespace, what background children write) for a
                    // moment, then stop.
                    self.drain_for(drain_after_exit).await;
                    return Ok(Outcome::Exited(status));
                }
                _ = &mut deadline => return Ok(Outcome::TimedOut),
                _ = ctx.cancellation().cancelled() => return Ok(Outcome::Cancelled),
            }
        }
    }

    /// Reads what comes until the pipe ends or `wait` has passed.
    async fn drain_for(&mut self, wait: Duration) {
        let stop = tokio::time::sleep(wait);
        tokio::pin!(stop);
        while !self.eof {
            tokio::select! {
                chunk = self.pipe.next() => match chunk {
                    Some(chunk) => self.take(&chunk),
                    None => self.eof = true,
                },
                _ = &mut stop => break,
            }
        }
    }

    /// Closes the pipe and returns the output kept.
    fn into_text(self) -> String {
        drop(self.pipe);
        self.kept.into_text()
    }
}

#[cfg(unix)]
fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn signal_of(_status: &std::process::ExitStatus) -> Option<i32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_output_keeps_head_and_tail() {
        let mut out = CappedOutput::new(10);
        for chunk in [&b"abc"[..], b"defgh", b"ijklmnop", b"qrstuvwxyz"] {
            out.push(chunk);
        }
        assert_eq!(
            out.into_text(),
            "abcde\n[... 16 bytes of output omitted ...]\nvwxyz"
        );
        let mut small = CappedOutput::new(100);
        small.push(b"hello");
        assert_eq!(small.into_text(), "hello");
    }

    #[test]
    fn split_utf8_is_carried_to_the_next_chunk() {
        let bytes = "ü€".as_bytes();
        let mut pending = bytes[..3].to_vec();
        assert_eq!(take_text(&mut pending), "ü");
        pending.extend_from_slice(&bytes[3..]);
        assert_eq!(take_text(&mut pending), "€");
        assert!(pending.is_empty());
    }
}
