//! `edit_file`: exact search-and-replace, atomically written.

use std::sync::Arc;

use async_trait::async_trait;
use kinet_core::tool::ToolErrorKind;
use kinet_core::tool::workspace::WorkspacePath;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::tracker::{EditorCopy, FileStamp, FileTracker};
use super::write::diff_summary;
use super::{
    EDIT_READ_CAP, Existing, SUMMARY_READ_CAP, blocking, editor, editor_copy, existing,
    number_line, put_result, read_only, stop_check, writes_to,
};

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
///
/// Inside an editor ([`Editor`](kinet_core::editor::Editor)) the edit applies
/// to the editor's text (unsaved changes included), which must be what the
/// agent last read; when the editor takes writes, the result goes to the
/// editor instead of the disk, after the same checks on disk.
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
        // The next search starts one character in (a character may be
        // several bytes).
        let step = haystack[first..].chars().next().map_or(1, char::len_utf8);
        finder.find(&bytes[first + step..]).is_some()
    })
}

/// The file as the model sees it: `read_file` shows lines without their
/// `\r`, so matching happens on the text with each `\r\n` read as `\n`.
/// `crlf` holds the offsets (in `text`) of the `\n`s that were `\r\n`.
struct LfView {
    text: String,
    crlf: Vec<usize>,
}

impl LfView {
    fn of(content: &str) -> Self {
        let mut text = String::with_capacity(content.len());
        let mut crlf = Vec::new();
        let mut rest = content;
        while let Some(at) = memchr::memmem::find(rest.as_bytes(), b"\r\n") {
            text.push_str(&rest[..at]);
            crlf.push(text.len());
            text.push('\n');
            rest = &rest[at + 2..];
        }
        text.push_str(rest);
        Self { text, crlf }
    }

    /// The offset in the file of offset `at` in the view.
    fn original(&self, at: usize) -> usize {
        at + self.crlf.partition_point(|&p| p < at)
    }

    fn is_crlf(&self, newline_at: usize) -> bool {
        self.crlf.binary_search(&newline_at).is_ok()
    }

    /// The line endings of the region `[from, to)`, in order, and the
    /// ending for lines added past them: that of the line the region ends
    /// on (the region's last when it ends with a newline), else the file's
    /// more common one.
    fn endings(&self, from: usize, to: usize) -> (Vec<&'static str>, &'static str) {
        let ending = |crlf: bool| if crlf { "\r\n" } else { "\n" };
        let inside: Vec<&'static str> = memchr::memchr_iter(b'\n', &self.text.as_bytes()[from..to])
            .map(|i| ending(self.is_crlf(from + i)))
            .collect();
        let ends_a_line = to > from && self.text.as_bytes()[to - 1] == b'\n';
        let fallback = match (inside.last(), ends_a_line) {
            (Some(last), true) => *last,
            _ => match memchr::memchr(b'\n', &self.text.as_bytes()[to..]) {
                Some(i) => ending(self.is_crlf(to + i)),
                None => {
                    let lines = memchr::memchr_iter(b'\n', self.text.as_bytes()).count();
                    ending(self.crlf.len() * 2 > lines)
                }
            },
        };
        (inside, fallback)
    }
}

/// `text` with its `k`-th newline written as `endings[k]` (`fallback` past
/// the end of `endings`).
fn with_endings(text: &str, endings: &[&str], fallback: &str) -> String {
    let mut out = String::with_capacity(text.len() + endings.len());
    for (k, line) in text.split('\n').enumerate() {
        if k > 0 {
            out.push_str(endings.get(k - 1).copied().unwrap_or(fallback));
        }
        out.push_str(line);
    }
    out
}

/// The result of an edit: the new content, the file offsets of the
/// replaced text, and where the first replacement sits in the new content
/// (offset and length).
#[derive(Debug)]
struct Applied {
    content: String,
    found: Vec<usize>,
    first: (usize, usize),
}

/// Applies the edit to `content`, or explains why it cannot. Strings
/// without `\r` match the file with its line endings read as `\n`, and
/// each replaced line keeps its own ending (mixed LF/CRLF files stay as
/// they were).
fn apply(shown: &str, content: &str, args: &EditFileArgs) -> Result<Applied, ToolError> {
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
    let exact = args.old_string.contains('\r') || args.new_string.contains('\r');
    let view = if exact {
        LfView {
            text: content.to_owned(),
            crlf: Vec::new(),
        }
    } else {
        LfView::of(content)
    };
    let haystack = view.text.as_str();
    let old = args.old_string.as_str();
    let found = occurrences(haystack, old);
    let ambiguous = found.len() > 1 || (found.len() == 1 && occurs_twice(haystack, old));
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
                .map(|&at| (haystack[..at].matches('\n').count() + 1).to_string())
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
            let mut out = String::with_capacity(content.len() + args.new_string.len());
            let mut last = 0;
            let mut first = (0, 0);
            for (index, &at) in found.iter().enumerate() {
                let end = at + old.len();
                out.push_str(&content[view.original(last)..view.original(at)]);
                let replacement = if exact {
                    args.new_string.clone()
                } else {
                    let (endings, fallback) = view.endings(at, end);
                    with_endings(&args.new_string, &endings, fallback)
                };
                if index == 0 {
                    first = (out.len(), replacement.len());
                }
                out.push_str(&replacement);
                last = end;
            }
            out.push_str(&content[view.original(last)..]);
            let found = found.iter().map(|&at| view.original(at)).collect();
            Ok(Applied {
                content: out,
                found,
                first,
            })
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

    fn annotations(&self) -> kinet_core::ToolAnnotations {
        // Changes a file in the workspace, nothing outside the machine; its
        // output (the edit made) is no one else's text.
        kinet_core::ToolAnnotations::default().open_world(false)
    }

    async fn confirm_summary(&self, args: &EditFileArgs, ctx: &ToolCtx) -> Option<String> {
        let place = ctx.workspace_path(&args.path).ok()?;
        let args = EditFileArgs {
            path: String::new(),
            old_string: args.old_string.clone(),
            new_string: args.new_string.clone(),
            replace_all: args.replace_all,
        };
        let in_editor = editor_copy(editor(ctx).as_ref(), &place).await;
        tokio::task::spawn_blocking(move || {
            let shown = place.path().display().to_string();
            Some(match existing(&place, SUMMARY_READ_CAP).ok()? {
                Existing::File { bytes, .. } => {
                    let content = match in_editor {
                        Some(text) => text,
                        None => String::from_utf8(bytes).ok()?,
                    };
                    let applied = apply(&shown, &content, &args).ok()?;
                    diff_summary(&shown, &content, &applied.content, 400)
                }
                Existing::TooLarge(metadata) => format!(
                    "edit {shown} ({} bytes; too large for a diff)\n- {}\n+ {}",
                    metadata.len(),
                    args.old_string,
                    args.new_string
                ),
                Existing::NotRegular(what) => {
                    format!("edit {shown}: it is {what}, so the call will be refused")
                }
                Existing::Missing => return None,
            })
        })
        .await
        .ok()
        .flatten()
    }

    async fn call(&self, args: EditFileArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let place = ctx.workspace_path(&args.path)?;
        let tracker = Arc::clone(&self.tracker);
        let stop = stop_check(ctx);
        let editor = editor(ctx);
        let path = place.path().to_path_buf();
        let shown = path.display().to_string();
        // The checks on disk come first, editor or not: the path beneath
        // the root, a regular file within the limit, writable.
        let (bytes, metadata) = {
            let place = place.clone();
            blocking(move || load(&place)).await?
        };
        let stamp = FileStamp::of(&metadata);
        // Inside an editor, the base is the editor's text (what read_file
        // showed, unsaved changes included).
        let to_editor = writes_to(editor.as_ref());
        let in_editor = editor_copy(editor.as_ref(), &place).await;
        let content = match in_editor {
            Some(text) => {
                let copy = EditorCopy {
                    text: &text,
                    disk: Some(&bytes),
                    to_disk: !to_editor,
                };
                tracker.check_fresh_text(&path, stamp, copy)?;
                text
            }
            None => {
                tracker.check_fresh(&path, stamp)?;
                String::from_utf8(bytes).map_err(|_| {
                    ToolError::invalid_arguments(format!(
                        "`{shown}` is not valid UTF-8 text; edit_file cannot change it safely"
                    ))
                })?
            }
        };
        let mut applied = {
            let shown = shown.clone();
            blocking(move || apply(&shown, &content, &args)).await?
        };
        applied.content = put_result(
            editor.as_ref(),
            place,
            tracker,
            applied.content,
            stop,
            "edit",
        )
        .await?;
        let count = applied.found.len();
        Ok(ToolOutput::text(format!(
            "Edited `{shown}`: replaced {count} occurrence{}. The file now reads:\n{}",
            if count == 1 { "" } else { "s" },
            snippet(&applied.content, applied.first.0, applied.first.1)
        )))
    }
}

/// The file `edit_file` changes, loaded and checked: a regular file within
/// the limit whose mode allows writing.
fn load(place: &WorkspacePath) -> Result<(Vec<u8>, std::fs::Metadata), ToolError> {
    let shown = place.path().display();
    let (bytes, metadata) =
        match existing(place, EDIT_READ_CAP).map_err(|e| place.error("edit", e))? {
            Existing::File { bytes, metadata } => (bytes, metadata),
            Existing::Missing => {
                return Err(ToolError::not_found(format!("`{shown}` does not exist")));
            }
            Existing::NotRegular(what) => {
                return Err(ToolError::invalid_arguments(format!(
                    "`{shown}` is {what}; edit_file only edits regular files"
                )));
            }
            Existing::TooLarge(metadata) => {
                return Err(ToolError::invalid_arguments(format!(
                    "`{shown}` is {} bytes, over the {EDIT_READ_CAP} byte limit of edit_file",
                    metadata.len()
                )));
            }
        };
    if read_only(&metadata) {
        return Err(ToolError::permission_denied(format!(
            "`{shown}` is read-only; it was not changed"
        )));
    }
    Ok((bytes, metadata))
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
        let applied = apply("f", text, &args("= 1", "= 3", true)).unwrap();
        assert_eq!(applied.found.len(), 2);
        assert_eq!(applied.content, "let a = 3;\nlet b = 3;\nlet c = 2;\n");
        let err = apply("f", text, &args("let d", "x", false)).unwrap_err();
        assert!(err.message().contains("was not found"));
        assert!(apply("f", text, &args("", "x", false)).is_err());
        assert!(apply("f", text, &args("a", "a", false)).is_err());
        let applied = apply("f", text, &args("let c = 2;", "let c = 20;", false)).unwrap();
        assert!(applied.content.ends_with("let c = 20;\n"));
        // Overlapping occurrences are ambiguous too.
        assert!(apply("f", "}\n}\n}", &args("}\n}", "}", false)).is_err());
        // CRLF files take LF strings from the model.
        let applied = apply("f", "a\r\nb\r\nc\r\n", &args("a\nb", "x\ny", false)).unwrap();
        assert_eq!(applied.content, "x\r\ny\r\nc\r\n");
    }

    #[test]
    fn a_match_starting_with_a_multibyte_character_is_unique() {
        let applied = apply("f", "é one\ntwo\n", &args("é one", "e one", false)).unwrap();
        assert_eq!(applied.content, "e one\ntwo\n");
        assert!(apply("f", "日本日本", &args("日本", "x", false)).is_err());
    }

    #[test]
    fn crlf_with_multibyte_text_does_not_panic() {
        let content = "alpha\r\nbeta\r\n";
        let applied = apply("f", content, &args("alpha\nbeta", "alpha\n日本", false)).unwrap();
        assert_eq!(applied.content, "alpha\r\n日本\r\n");
        let (at, len) = applied.first;
        assert_eq!(&applied.content[at..at + len], "alpha\r\n日本");
        assert!(snippet(&applied.content, at, len).contains("日本"));
    }

    #[test]
    fn mixed_endings_keep_each_lines_own() {
        // One CRLF line among LF lines: a multi-line edit copied from
        // read_file (which shows no `\r`) still matches.
        let content = "one\ntwo\r\nthree\nfour\n";
        let applied = apply("f", content, &args("two\nthree", "TWO\nTHREE", false)).unwrap();
        assert_eq!(applied.content, "one\nTWO\r\nTHREE\nfour\n");
        // Added lines take the ending of the region's last line.
        let applied = apply("f", content, &args("one\ntwo", "1\n2\n2b", false)).unwrap();
        assert_eq!(applied.content, "1\n2\r\n2b\r\nthree\nfour\n");
        // A single-line edit on a CRLF line that adds a line uses that line's ending.
        let applied = apply("f", content, &args("two", "two\nhalf", false)).unwrap();
        assert_eq!(applied.content, "one\ntwo\r\nhalf\r\nthree\nfour\n");
        // Text with `\r` is matched as given.
        let applied = apply("f", content, &args("two\r\n", "2\r\n", false)).unwrap();
        assert_eq!(applied.content, "one\n2\r\nthree\nfour\n");
    }
}
