//! `read_file`: line-numbered text, images as image parts.

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

use async_trait::async_trait;
use kinet_core::message::ImagePart;
use kinet_core::tool::workspace::WorkspacePath;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::tracker::{FileStamp, FileTracker};
use super::{blocking, editor, editor_text, number_line, stop_check};

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadFileArgs {
    /// The file to read: absolute, or relative to the working directory.
    pub path: String,
    /// The line number to start at (1-based). Use with `limit` for files too
    /// large to read whole.
    #[serde(default)]
    pub offset: Option<usize>,
    /// How many lines to read (default 2000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// The limits of `read_file`. Every field documents its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadLimits {
    /// Lines returned when no `limit` is given. Default 2000.
    pub default_lines: usize,
    /// Characters kept of one line; the rest is cut with a note. Default 2000.
    pub max_line_chars: usize,
    /// Largest file read whole when no range is given. Default 512 KiB.
    pub max_whole_file_bytes: u64,
    /// Largest image returned. Default 10 MiB.
    pub max_image_bytes: u64,
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            default_lines: 2000,
            max_line_chars: 2000,
            max_whole_file_bytes: 512 * 1024,
            max_image_bytes: 10 * 1024 * 1024,
        }
    }
}

/// Reads a text file with line numbers, or an image as an image part.
///
/// Binary files and directories get a clear error; invalid UTF-8 is shown
/// lossily with a note. Each read is recorded in the [`FileTracker`].
#[derive(Debug, Clone)]
pub struct ReadFileTool {
    tracker: Arc<FileTracker>,
    limits: ReadLimits,
}

impl ReadFileTool {
    /// A tool recording reads in `tracker`, with default limits.
    pub fn new(tracker: Arc<FileTracker>) -> Self {
        Self {
            tracker,
            limits: ReadLimits::default(),
        }
    }

    /// Replaces the limits.
    pub fn with_limits(mut self, limits: ReadLimits) -> Self {
        self.limits = limits;
        self
    }
}

const DESCRIPTION: &str = "\
Reads a file from the local filesystem. Text comes back with line numbers \
(`cat -n` style: number, tab, line); use those numbers for offset, not as part of \
the text when editing.
- By default up to 2000 lines are returned from the start of the file; lines longer \
than 2000 characters are cut.
- For a large file, pass offset (1-based line number) and limit to read a range, or \
search it with grep first. Files over 512 KB must be read in ranges.
- Images (PNG, JPEG, GIF, WebP, recognised by their content) are returned as images \
you can see.
- Binary files and directories are refused; use glob to list a directory.
- Read a file before editing it with edit_file.";

/// The image type of a file by its first bytes (its name says nothing: a
/// text file called `notes.png` is text).
fn image_type(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

#[async_trait]
impl Tool for ReadFileTool {
    type Args = ReadFileArgs;

    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }

    async fn call(&self, args: ReadFileArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        if args.limit == Some(0) {
            return Err(ToolError::invalid_arguments(
                "limit is 0; give the number of lines to read (at least 1), or leave it out",
            ));
        }
        let job = Arc::new(Job {
            place: ctx.workspace_path(&args.path)?,
            args,
            limits: self.limits.clone(),
            tracker: Arc::clone(&self.tracker),
        });
        let stop = stop_check(ctx);
        let Some(editor) = editor(ctx).filter(|editor| editor.reads()) else {
            return blocking(move || match job.open()? {
                Opened::Image(output) => Ok(output),
                Opened::Text(mut reader, metadata) => job.lines(&mut reader, &metadata, &stop),
            })
            .await;
        };
        // Inside an editor: the checks on disk first (the path opened
        // beneath the workspace root, a regular text file), then the text
        // as the editor holds it (unsaved changes included); the disk's
        // when the editor cannot give it.
        let opened = {
            let job = Arc::clone(&job);
            blocking(move || job.open()).await?
        };
        let (reader, metadata) = match opened {
            Opened::Image(output) => return Ok(output),
            Opened::Text(reader, metadata) => (reader, metadata),
        };
        // Asked by the path of the file opened and checked.
        let asked = kinet_core::sandbox::opened_path(reader.get_ref())
            .ok()
            .unwrap_or_else(|| job.place.path().to_path_buf());
        let text = editor_text(&*editor, &asked).await;
        blocking(move || match text {
            Some(text) => {
                let output = job.lines(&mut text.as_bytes(), &metadata, &stop)?;
                // What an edit must find again: this text, not the disk's.
                job.tracker
                    .record_text(job.place.path(), FileStamp::of(&metadata), &text);
                Ok(output)
            }
            None => job.lines(&mut { reader }, &metadata, &stop),
        })
        .await
    }
}

/// One `read_file` call.
struct Job {
    place: WorkspacePath,
    args: ReadFileArgs,
    limits: ReadLimits,
    tracker: Arc<FileTracker>,
}

/// A file opened and checked for reading.
enum Opened {
    /// An image, read whole.
    Image(ToolOutput),
    /// A text file: its reader (at the start) and its metadata.
    Text(BufReader<std::fs::File>, std::fs::Metadata),
}

impl Job {
    /// Opens the file beneath the workspace root and checks it: a regular
    /// file, an image within its limit (read whole), or text within the
    /// whole-file limit and not binary.
    fn open(&self) -> Result<Opened, ToolError> {
        let (place, args, limits) = (&self.place, &self.args, &self.limits);
        let path = place.path();
        let shown = path.display();
        let fail = |e| place.error("read", e);
        // One open, and everything after it on that descriptor: what is
        // checked is what is read.
        let file = place.open_read().map_err(fail)?;
        let metadata = file.metadata().map_err(fail)?;
        if metadata.is_dir() {
            return Err(ToolError::invalid_arguments(format!(
                "`{shown}` is a directory, not a file; use glob to list its files"
            )));
        }
        if !metadata.is_file() {
            // FIFOs, sockets and devices could block forever.
            return Err(ToolError::invalid_arguments(format!(
                "`{shown}` is not a regular file (a pipe, socket or device); it cannot be read"
            )));
        }
        let mut reader = BufReader::with_capacity(64 * 1024, file);
        let head = reader.fill_buf().map_err(fail)?;
        if let Some(media_type) = image_type(head) {
            if metadata.len() > limits.max_image_bytes {
                return Err(ToolError::invalid_arguments(format!(
                    "the image `{shown}` is {} bytes, over the {} byte limit",
                    metadata.len(),
                    limits.max_image_bytes
                )));
            }
            let mut bytes = Vec::new();
            reader
                .take(limits.max_image_bytes)
                .read_to_end(&mut bytes)
                .map_err(fail)?;
            self.tracker.record(path, FileStamp::of(&metadata));
            return Ok(Opened::Image(
                ToolOutput::text(format!(
                    "Image `{shown}` ({} bytes, {media_type}).",
                    bytes.len()
                ))
                .with_image(ImagePart::from_bytes(media_type, &bytes)),
            ));
        }
        let ranged = args.offset.is_some() || args.limit.is_some();
        if !ranged && metadata.len() > limits.max_whole_file_bytes {
            return Err(ToolError::invalid_arguments(format!(
                "`{shown}` is {} KB, over the {} KB limit for reading a whole file; read a range \
                 with offset and limit (e.g. offset=1, limit=500), or search it with grep",
                metadata.len() / 1024,
                limits.max_whole_file_bytes / 1024
            )));
        }
        // A NUL byte near the start marks a binary file.
        let head = reader.fill_buf().map_err(fail)?;
        let sniff = &head[..head.len().min(8192)];
        if sniff.contains(&0) {
            return Err(ToolError::invalid_arguments(format!(
                "`{shown}` is a binary file ({} bytes); it cannot be shown as text",
                metadata.len()
            )));
        }
        Ok(Opened::Text(reader, metadata))
    }

    /// The numbered lines of the text `source` holds (the file opened by
    /// [`open`](Self::open), or the editor's copy of it).
    fn lines(
        &self,
        source: &mut dyn BufRead,
        metadata: &std::fs::Metadata,
        stop: &dyn Fn() -> bool,
    ) -> Result<ToolOutput, ToolError> {
        let (place, args, limits) = (&self.place, &self.args, &self.limits);
        let path = place.path();
        let shown = path.display();
        let fail = |e| place.error("read", e);
        let start = args.offset.unwrap_or(1).max(1);
        let count = args.limit.unwrap_or(limits.default_lines).max(1);
        let mut out = String::new();
        let mut line = Vec::new();
        // A character is at most 4 bytes; longer lines are cut anyway.
        let line_byte_cap = limits.max_line_chars.saturating_mul(4).saturating_add(4);
        let mut number = 0usize;
        let mut shown_lines = 0usize;
        let mut lossy = false;
        let mut cut_lines = 0usize;
        let mut more = false;
        loop {
            let (read, dropped) =
                read_line_capped(source, &mut line, line_byte_cap).map_err(fail)?;
            if read == 0 {
                break;
            }
            number += 1;
            // Skipping to a far offset of a huge file stops with the call.
            if number.is_multiple_of(4096) && stop() {
                return Err(ToolError::cancelled(format!(
                    "reading `{shown}` was stopped: the call was cancelled or ran out of time"
                )));
            }
            if number < start {
                continue;
            }
            if shown_lines == count {
                more = true;
                break;
            }
            let text = match std::str::from_utf8(&line) {
                Ok(text) => std::borrow::Cow::Borrowed(text),
                // The cap cut a character in two: the line is fine, only cut.
                Err(error) if dropped && error.error_len().is_none() => std::borrow::Cow::Owned(
                    String::from_utf8_lossy(&line[..error.valid_up_to()]).into_owned(),
                ),
                Err(_) => {
                    lossy = true;
                    String::from_utf8_lossy(&line)
                }
            };
            match text.char_indices().nth(limits.max_line_chars) {
                Some((cut, _)) => {
                    cut_lines += 1;
                    let total = if dropped {
                        format!("{read} bytes")
                    } else {
                        format!("{} characters", text.chars().count())
                    };
                    let kept = &text[..cut];
                    number_line(&mut out, number, &format!("{kept}… [line cut: {total}]"));
                }
                None if dropped => {
                    cut_lines += 1;
                    number_line(
                        &mut out,
                        number,
                        &format!("{text}… [line cut: {read} bytes]"),
                    );
                }
                None => number_line(&mut out, number, &text),
            }
            shown_lines += 1;
        }
        self.tracker.record(path, FileStamp::of(metadata));

        if number == 0 {
            return Ok(ToolOutput::text(format!("`{shown}` is empty.")));
        }
        if shown_lines == 0 {
            return Err(ToolError::invalid_arguments(format!(
                "offset {start} is past the end of `{shown}`, which has {number} lines"
            )));
        }
        let mut notes = Vec::new();
        if lossy {
            notes.push("the file is not valid UTF-8; invalid bytes are shown as �".to_owned());
        }
        if cut_lines > 0 {
            notes.push(format!(
                "{cut_lines} line(s) longer than {} characters were cut",
                limits.max_line_chars
            ));
        }
        if more {
            let next = start + shown_lines;
            notes.push(format!(
                "showing lines {start}-{}; more follow: continue with offset={next}",
                next - 1
            ));
        }
        if !notes.is_empty() {
            out.push_str(&format!("\n[{}]\n", notes.join("; ")));
        }
        Ok(ToolOutput::text(out))
    }
}

/// Reads one line (through `\n`) but keeps at most `cap` bytes of it in
/// `line` (without the line ending). Returns the line's full length in
/// bytes (0 at the end of the file) and whether bytes were dropped. A huge
/// single-line file costs `cap` bytes of memory, not its size.
fn read_line_capped(
    reader: &mut (impl BufRead + ?Sized),
    line: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<(usize, bool)> {
    line.clear();
    let mut total = 0;
    let mut dropped = false;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let (chunk, done) = match memchr::memchr(b'\n', buf) {
            Some(end) => (&buf[..end], Some(end + 1)),
            None => (buf, None),
        };
        let room = cap.saturating_sub(line.len());
        dropped |= chunk.len() > room;
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        total += chunk.len();
        match done {
            Some(used) => {
                reader.consume(used);
                total += 1;
                break;
            }
            None => {
                let used = buf.len();
                reader.consume(used);
            }
        }
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok((total, dropped))
}
