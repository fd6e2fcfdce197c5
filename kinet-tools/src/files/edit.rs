//! `edit_file`: exact search-and-replace, atomically written.

use std::sync::Arc;

use async_trait::async_trait;
use kinet_core::tool::ToolErrorKind;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::atomic::atomic_write;
use super::tracker::{FileStamp, FileTracker};
use super::write::diff_summary;
use super::{blocking, io_error, number_line};

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EditFileArgs {
    /// The file to edit: absolute, or relative to the working directory.
    pub path: String,
    /// The exact text to replace, including whitespace and indentation.
    pub old_string: String,
    /// The text to put in its place (must differ from old_string).
    pub new_string: String,
    /// Replace every occurrence instead of exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
}

/// Replaces an exact string in a file the agent has read. `old_string` must
/// occur exactly once unless `replace_all`; the file must not have changed
/// since it was read; the write is atomic. The confirmation shows a unified
/// diff.
#[derive(Debug, Clone)]
pub struct EditFileTool {
    tracker: Arc<FileTracker>,
}

impl EditFileTool {
    /// A tool checking reads in `tracker`.
    pub fn new(tracker: Arc<FileTracker>) -> Self {
        Self { tracker }
    }
}

const DESCRIPTION: &str = "\
Replaces exact text in a file. Read the file with read_file first.
- old_string must match the file exactly, including whitespace and indentation; do not \
include the line-number prefix that read_file shows.
- old_string must occur exactly once: if it occurs several times, add surrounding lines \
to make it unique, or set replace_all to change every occurrence (e.g. renaming).
- new_string replaces it and must be different.
- The edit is refused if the file changed on disk since you read it: read it again.";

/// Where the replacements land: byte offsets of each non-overlapping
/// occurrence.
fn occurrences(haystack: &str, needle: &str) -> Vec<usize> {
    memchr::memmem::find_iter(haystack.as_bytes(), needle.as_bytes()).collect()
}

/// Whether `needle` occurs more than once, counting overlapping
/// occurrences (`}\n}` twice in `}\n}\n}`).
fn occurs_twice(haystack: &str, needle: &str) -> bool {
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let bytes = haystack.as_bytes();
    finder.find(bytes).is_some_and(|first| {
        let next = haystack[first + 1..]
            .char_indices()
            .next()
            .map_or(bytes.len(), |(i, _)| first + 1 + i);
        finder.find(&bytes[next..]).is_some()
    })
}

/// The file's line ending applied to the model's text: `read_file` shows
/// lines without `\r`, so on a CRLF file `\n` in the strings means `\r\n`.
fn with_file_line_endings<'a>(content: &str, text: &'a str) -> std::borrow::Cow<'a, str> {
    if content.contains("\r\n") && text.contains('\n') && !text.contains('\r') {
        std::borrow::Cow::Owned(text.replace('\n', "\r\n"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// Applies the edit to `content`, or explains why it cannot.
fn apply(
    shown: &str,
    content: &str,
    args: &EditFileArgs,
) -> Result<(String, Vec<usize>), ToolError> {
    if args.old_string.is_empty() {
        return Err(ToolError::invalid_arguments(
            "old_string is empty; give the exact text to replace (use write_file to create a file)",
        ));
    }
    if args.old_string == args.new_string {
        return Err(ToolError::invalid_arguments(
            "old_string and new_string are the same; there is nothing to change",
        ));
    }
    let old = with_file_line_endings(content, &args.old_string);
    let new = with_file_line_endings(content, &args.new_string);
    let found = occurrences(content, &old);
    let ambiguous = found.len() > 1 || (found.len() == 1 && occurs_twice(content, &old));
    match found.len() {
        0 => Err(ToolError::new(
            ToolErrorKind::NoUniqueMatch,
            format!(
                "old_string was not found in `{shown}`. It must match exactly, including \
                 whitespace and indentation; read the file again and copy the text."
            ),
        )),
        n if ambiguous && !args.replace_all => {
            let n = n.max(2);
            let lines: Vec<String> = found
                .iter()
                .take(10)
                .map(|&at| (content[..at].matches('\n').count() + 1).to_string())
                .collect();
            Err(ToolError::new(
                ToolErrorKind::NoUniqueMatch,
                format!(
                    "old_string occurs {n} times in `{shown}` (lines {}); add surrounding lines \
                     to make it unique, or set replace_all to replace every occurrence",
                    lines.join(", ")
                ),
            ))
        }
        _ => {
            let mut out = String::with_capacity(
                content.len() + found.len() * new.len().saturating_sub(old.len()),
            );
            let mut last = 0;
            for &at in &found {
                out.push_str(&content[last..at]);
                out.push_str(&new);
                last = at + old.len();
            }
            out.push_str(&content[last..]);
            Ok((out, found))
        }
    }
}

/// A few numbered lines around the first replacement, as the model's
/// confirmation of what the file now says.
fn snippet(new_content: &str, first_at: usize, new_len: usize) -> String {
    let first_line = new_content[..first_at].matches('\n').count();
    let edited_lines = new_content[first_at..first_at + new_len]
        .matches('\n')
        .count();
    let from = first_line.saturating_sub(3);
    let to = first_line + edited_lines + 4;
    let mut out = String::new();
    for (index, line) in new_content.lines().enumerate().skip(from).take(to - from) {
        number_line(&mut out, index + 1, line);
    }
    out
}

#[async_trait]
impl Tool for EditFileTool {
    type Args = EditFileArgs;

    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    async fn confirm_summary(&self, args: &EditFileArgs, ctx: &ToolCtx) -> Option<String> {
        let path = ctx.resolve_path(&args.path).ok()?;
        let content = tokio::fs::read_to_string(&path).await.ok()?;
        let shown = path.display().to_string();
        tokio::task::spawn_blocking({
            let args = (
                args.old_string.clone(),
                args.new_string.clone(),
                args.replace_all,
            );
            move || {
                let args = EditFileArgs {
                    path: String::new(),
                    old_string: args.0,
                    new_string: args.1,
                    replace_all: args.2,
                };
                let (new, _) = apply(&shown, &content, &args).ok()?;
                Some(diff_summary(&shown, &content, &new, 400))
            }
        })
        .await
        .ok()
        .flatten()
    }

    async fn call(&self, args: EditFileArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let path = ctx.resolve_path(&args.path)?;
        let tracker = Arc::clone(&self.tracker);
        blocking(move || {
            let shown = path.display().to_string();
            let metadata = std::fs::metadata(&path).map_err(|e| io_error(&path, "edit", e))?;
            if metadata.is_dir() {
                return Err(ToolError::invalid_arguments(format!(
                    "`{shown}` is a directory; give a file path"
                )));
            }
            tracker.check_fresh(&path, FileStamp::of(&metadata))?;
            let bytes = std::fs::read(&path).map_err(|e| io_error(&path, "edit", e))?;
            let content = String::from_utf8(bytes).map_err(|_| {
                ToolError::invalid_arguments(format!(
                    "`{shown}` is not valid UTF-8 text; edit_file cannot change it safely"
                ))
            })?;
            let (new_content, found) = apply(&shown, &content, &args)?;
            atomic_write(&path, new_content.as_bytes()).map_err(|e| io_error(&path, "write", e))?;
            let metadata = std::fs::metadata(&path).map_err(|e| io_error(&path, "edit", e))?;
            tracker.record(&path, FileStamp::of(&metadata));
            let first_at = found.first().copied().unwrap_or(0);
            Ok(ToolOutput::text(format!(
                "Edited `{shown}`: replaced {} occurrence{}. The file now reads:\n{}",
                found.len(),
                if found.len() == 1 { "" } else { "s" },
                snippet(&new_content, first_at, args.new_string.len())
            )))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(old: &str, new: &str, all: bool) -> EditFileArgs {
        EditFileArgs {
            path: "f".into(),
            old_string: old.into(),
            new_string: new.into(),
            replace_all: all,
        }
    }

    #[test]
    fn uniqueness_rules() {
        let text = "let a = 1;\nlet b = 1;\nlet c = 2;\n";
        let err = apply("f", text, &args("= 1", "= 3", false)).unwrap_err();
        assert_eq!(err.kind(), ToolErrorKind::NoUniqueMatch);
        assert_eq!(err.kind(), ToolErrorKind::NoUniqueMatch);
        assert!(
            err.message().contains("occurs 2 times in `f` (lines 1, 2)"),
            "{}",
            err.message()
        );
        let (new, found) = apply("f", text, &args("= 1", "= 3", true)).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(new, "let a = 3;\nlet b = 3;\nlet c = 2;\n");
        let err = apply("f", text, &args("let d", "x", false)).unwrap_err();
        assert!(err.message().contains("was not found"));
        assert!(apply("f", text, &args("", "x", false)).is_err());
        assert!(apply("f", text, &args("a", "a", false)).is_err());
        let (new, _) = apply("f", text, &args("let c = 2;", "let c = 20;", false)).unwrap();
        assert!(new.ends_with("let c = 20;\n"));
        // Overlapping occurrences are ambiguous too.
        assert!(apply("f", "}\n}\n}", &args("}\n}", "}", false)).is_err());
        // CRLF files take LF strings from the model.
        let (new, _) = apply("f", "a\r\nb\r\nc\r\n", &args("a\nb", "x\ny", false)).unwrap();
        assert_eq!(new, "x\r\ny\r\nc\r\n");
    }
}
