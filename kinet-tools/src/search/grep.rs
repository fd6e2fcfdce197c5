//! `grep`: ripgrep's engine in process (grep-searcher, grep-regex, and
//! ignore's matchers over a walk by directory handles).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use kinet_core::tool::workspace::WorkspacePath;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::walk::{FileEntry, Flow};
use super::{confinement_note, display_path, rules, walk_place};

/// What `grep` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// Matching lines as `path:line: text` (with context lines if asked).
    Content,
    /// Only the paths of files that match (the default).
    #[default]
    FilesWithMatches,
    /// Matching lines per file, as `path:count`.
    Count,
}

fn yes() -> bool {
    true
}

/// Arguments of `grep`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GrepArgs {
    /// The regular expression to search for (Rust/ripgrep syntax; escape
    /// special characters such as `(` or `{` to search for them literally).
    pub pattern: String,
    /// A file or directory to search (default: the working directory).
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files whose path matches this glob, e.g. `*.rs` or `src/**/*.ts`.
    #[serde(default)]
    pub glob: Option<String>,
    /// Only search files of this type, e.g. `rust`, `py`, `js`, `md` (ripgrep's type names).
    #[serde(default, rename = "type")]
    pub file_type: Option<String>,
    /// `files_with_matches` (default): paths only; `content`: matching lines;
    /// `count`: number of matching lines per file.
    #[serde(default)]
    pub output_mode: OutputMode,
    /// Case-insensitive search.
    #[serde(default, rename = "-i")]
    pub case_insensitive: bool,
    /// Show line numbers in content mode (default true).
    #[serde(default = "yes", rename = "-n")]
    pub line_numbers: bool,
    /// Lines of context after each match (content mode).
    #[serde(default, rename = "-A")]
    pub after: Option<usize>,
    /// Lines of context before each match (content mode).
    #[serde(default, rename = "-B")]
    pub before: Option<usize>,
    /// Lines of context before and after each match (content mode).
    #[serde(default, rename = "-C")]
    pub context: Option<usize>,
    /// Let patterns span lines and `.` match newlines.
    #[serde(default)]
    pub multiline: bool,
    /// Return at most this many lines (content), files, or counts.
    #[serde(default)]
    pub head_limit: Option<usize>,
}

/// Limits of `grep`. Every field documents its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepConfig {
    /// Characters kept of a matching line. Default 1000.
    pub max_line_chars: usize,
    /// Output entries collected before the search stops early. Default 20,000.
    pub max_entries: usize,
    /// Search threads. Default: the number of CPUs (ripgrep's choice, capped at 12).
    pub threads: usize,
    /// The largest file searched with `multiline` (which holds a file in
    /// memory whole); larger ones are skipped with a note. Default 16 MiB.
    pub max_multiline_file_bytes: u64,
}

impl Default for GrepConfig {
    fn default() -> Self {
        Self {
            max_line_chars: 1000,
            max_entries: 20_000,
            threads: std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(12),
            max_multiline_file_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Searches file contents with ripgrep's engine: `.gitignore`-aware
/// (also outside git repositories), hidden files skipped, binary files
/// skipped, a parallel directory walk. Results are sorted by path.
#[derive(Debug, Clone, Default)]
pub struct GrepTool {
    config: GrepConfig,
}

impl GrepTool {
    /// A grep tool with these limits.
    pub fn new(config: GrepConfig) -> Self {
        Self { config }
    }
}

const DESCRIPTION: &str = "\
Searches file contents with a regular expression (ripgrep's engine and syntax).
- Respects .gitignore; skips hidden and binary files.
- output_mode: `files_with_matches` (default) lists matching files; `content` shows \
matching lines as `path:line: text` (use -A/-B/-C for context); `count` shows the number of matching lines per file.
- Narrow with glob (e.g. `*.rs`, `src/**/*.ts`) or type (e.g. `rust`, `py`, `js`).
- -i for case-insensitive; multiline to match across lines.
- Escape regex characters to search literally: `fn main\\(` or `\\{\\}`.
- Prefer this over running grep or rg in the shell.";

/// One file's results.
struct FileHits {
    path: PathBuf,
    /// (line number, is_match, text); an entry with `usize::MAX` is a break
    /// between context groups.
    lines: Vec<(u64, bool, String)>,
    count: u64,
}

const BREAK: u64 = u64::MAX;

struct Collector<'a> {
    hits: &'a mut FileHits,
    mode: OutputMode,
    max_chars: usize,
    /// Entries collected by all threads; the search stops at `limit`.
    collected: &'a std::sync::atomic::AtomicUsize,
    limit: usize,
}

impl Collector<'_> {
    /// Counts one entry; false once the search-wide limit is reached.
    fn room(&self) -> bool {
        self.collected
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            < self.limit
    }

    fn push(&mut self, number: Option<u64>, is_match: bool, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches(['\n', '\r']);
        let text = match text.char_indices().nth(self.max_chars) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text.to_owned(),
        };
        self.hits.lines.push((number.unwrap_or(0), is_match, text));
    }
}

impl Sink for Collector<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        self.hits.count += 1;
        match self.mode {
            OutputMode::FilesWithMatches => {
                self.room();
                Ok(false)
            }
            OutputMode::Count => Ok(true),
            OutputMode::Content => {
                // A multi-line match reports all its lines.
                let first = found.line_number();
                for (offset, line) in found.lines().enumerate() {
                    if !self.room() {
                        return Ok(false);
                    }
                    self.push(first.map(|n| n + offset as u64), true, line);
                }
                Ok(true)
            }
        }
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        if !self.room() {
            return Ok(false);
        }
        self.push(context.line_number(), false, context.bytes());
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, std::io::Error> {
        self.hits.lines.push((BREAK, false, String::new()));
        Ok(true)
    }
}

struct Search {
    matcher: RegexMatcher,
    searcher: SearcherBuilder,
    mode: OutputMode,
    max_chars: usize,
    collected: AtomicUsize,
    limit: usize,
    multiline: bool,
    max_multiline_bytes: u64,
    /// Files skipped for being over `max_multiline_bytes`.
    skipped_large: AtomicUsize,
}

impl Search {
    /// Searches one file, opened through the workspace confinement (from
    /// its directory's handle during a walk), shown as `path`.
    fn file(
        &self,
        searcher: &mut Searcher,
        file: std::io::Result<std::fs::File>,
        path: PathBuf,
    ) -> Option<FileHits> {
        if self.collected.load(Ordering::Relaxed) >= self.limit {
            return None;
        }
        // Unreadable files are skipped, as ripgrep does.
        let file = file.ok()?;
        let metadata = file.metadata().ok()?;
        if !metadata.is_file() {
            return None;
        }
        if self.multiline && metadata.len() > self.max_multiline_bytes {
            self.skipped_large.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let mut hits = FileHits {
            path,
            lines: Vec::new(),
            count: 0,
        };
        let mut sink = Collector {
            hits: &mut hits,
            mode: self.mode,
            max_chars: self.max_chars,
            collected: &self.collected,
            limit: self.limit,
        };
        searcher.search_file(&self.matcher, &file, &mut sink).ok()?;
        (hits.count > 0).then_some(hits)
    }
}

fn build_search(args: &GrepArgs, config: &GrepConfig) -> Result<Search, ToolError> {
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(args.case_insensitive)
        .multi_line(args.multiline)
        .dot_matches_new_line(args.multiline)
        .line_terminator((!args.multiline).then_some(b'\n'))
        .build(&args.pattern)
        .map_err(|e| {
            ToolError::invalid_arguments(format!(
                "invalid regular expression `{}`: {e}",
                args.pattern
            ))
        })?;
    let mut searcher = SearcherBuilder::new();
    searcher
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .multi_line(args.multiline);
    if args.output_mode == OutputMode::Content {
        let around = args.context.unwrap_or(0);
        searcher
            .before_context(args.before.unwrap_or(around))
            .after_context(args.after.unwrap_or(around));
    }
    Ok(Search {
        matcher,
        searcher,
        mode: args.output_mode,
        max_chars: config.max_line_chars,
        collected: AtomicUsize::new(0),
        limit: config.max_entries,
        multiline: args.multiline,
        max_multiline_bytes: config.max_multiline_file_bytes,
        skipped_large: AtomicUsize::new(0),
    })
}

#[async_trait]
impl Tool for GrepTool {
    type Args = GrepArgs;

    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }

    async fn call(&self, args: GrepArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let root = ctx.workspace_path_or_cwd(args.path.as_deref())?;
        let cwd = ctx.cwd().to_path_buf();
        let config = self.config.clone();
        let cancel = ctx.cancellation().clone();
        tokio::task::spawn_blocking(move || grep(&args, &root, &cwd, &config, &cancel))
            .await
            .map_err(|e| ToolError::failed(format!("grep task failed: {e}")))?
    }
}

/// Runs a search and formats the result (blocking).
pub(crate) fn grep(
    args: &GrepArgs,
    place: &WorkspacePath,
    cwd: &Path,
    config: &GrepConfig,
    cancel: &kinet_core::tool::CancellationToken,
) -> Result<ToolOutput, ToolError> {
    let search = build_search(args, config)?;
    let metadata = place.metadata().map_err(|e| place.error("search", e))?;
    let root = place.path();
    let mut files: Vec<FileHits> = if metadata.is_file() {
        let mut searcher = search.searcher.build();
        search
            .file(&mut searcher, place.open_read(), root.to_path_buf())
            .into_iter()
            .collect()
    } else {
        let rules = rules(root, args.glob.as_deref(), args.file_type.as_deref())?;
        let found: Mutex<Vec<FileHits>> = Mutex::new(Vec::new());
        walk_place(place, &rules, config.threads, || {
            let mut searcher = search.searcher.build();
            let (found, search) = (&found, &search);
            move |entry: FileEntry<'_>| {
                if cancel.is_cancelled() {
                    return Flow::Quit;
                }
                let file = entry.dir.open_file(entry.name);
                if let Some(hits) = search.file(&mut searcher, file, entry.path)
                    && let Ok(mut found) = found.lock()
                {
                    found.push(hits);
                }
                if search.collected.load(Ordering::Relaxed) >= search.limit {
                    return Flow::Quit;
                }
                Flow::Continue
            }
        })?;
        found
            .into_inner()
            .map_err(|_| ToolError::failed("grep results were poisoned"))?
    };
    if cancel.is_cancelled() {
        return Err(ToolError::new(
            kinet_core::tool::ToolErrorKind::Cancelled,
            "grep was cancelled",
        ));
    }
    files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    let mut output = format_results(args, &files, cwd, config);
    let skipped = search.skipped_large.load(Ordering::Relaxed);
    if skipped > 0 {
        output.text.push_str(&format!(
            "\n[{skipped} file(s) over {} MiB were not searched: multiline search holds a file in \
             memory; search them without multiline, or read them in ranges]",
            config.max_multiline_file_bytes / (1024 * 1024)
        ));
    }
    if let Some(note) = confinement_note(place) {
        output.text.push('\n');
        output.text.push_str(note);
    }
    Ok(output)
}

fn format_results(
    args: &GrepArgs,
    files: &[FileHits],
    cwd: &Path,
    config: &GrepConfig,
) -> ToolOutput {
    let limit = args.head_limit.unwrap_or(usize::MAX);
    let mut lines: Vec<String> = Vec::new();
    let mut total = 0usize;
    let matches: u64 = files.iter().map(|f| f.count).sum();
    for file in files {
        let path = display_path(&file.path, cwd);
        match args.output_mode {
            OutputMode::FilesWithMatches => {
                total += 1;
                if lines.len() < limit {
                    lines.push(path);
                }
            }
            OutputMode::Count => {
                total += 1;
                if lines.len() < limit {
                    lines.push(format!("{path}:{}", file.count));
                }
            }
            OutputMode::Content => {
                for (number, is_match, text) in &file.lines {
                    if *number != BREAK {
                        total += 1;
                    }
                    if lines.len() >= limit {
                        continue;
                    }
                    if *number == BREAK {
                        lines.push("--".to_owned());
                    } else if args.line_numbers {
                        let sep = if *is_match { ':' } else { '-' };
                        lines.push(format!("{path}{sep}{number}{sep} {text}"));
                    } else {
                        let sep = if *is_match { ':' } else { '-' };
                        lines.push(format!("{path}{sep} {text}"));
                    }
                }
            }
        }
    }
    let mut text = if files.is_empty() {
        format!("No matches for `{}`.", args.pattern)
    } else {
        lines.join("\n")
    };
    if total > lines.len() && !files.is_empty() {
        text.push_str(&format!(
            "\n[showing {} of {total}; narrow the search or raise head_limit]",
            lines.len()
        ));
    }
    let collected: usize = match args.output_mode {
        OutputMode::Content => files
            .iter()
            .map(|f| f.lines.iter().filter(|l| l.0 != BREAK).count())
            .sum(),
        _ => files.len(),
    };
    if collected >= config.max_entries {
        text.push_str(&format!(
            "\n[the search stopped after {} results; narrow the pattern, path or glob]",
            config.max_entries
        ));
    }
    ToolOutput::text(text).with_structured(serde_json::json!({
        "files": files.len(),
        "matching_lines": matches,
    }))
}
