//! `glob`: find files by name pattern, newest first.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use globset::GlobBuilder;
use kinet_core::tool::workspace::WorkspacePath;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

use super::walk::{FileEntry, Flow};
use super::{confinement_note, display_path, rules, walk_place};

/// Arguments of `glob`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GlobArgs {
    /// The pattern, matched against paths relative to the search directory:
    /// `**/*.rs`, `src/**/*.{ts,tsx}`, `*.md` (top level only).
    pub pattern: String,
    /// The directory to search (default: the working directory).
    #[serde(default)]
    pub path: Option<String>,
}

/// Limits of `glob`. Every field documents its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobConfig {
    /// Paths returned; the count of the rest is reported. Default 100.
    pub max_results: usize,
    /// Walk threads. Default: the number of CPUs, capped at 12.
    pub threads: usize,
}

impl Default for GlobConfig {
    fn default() -> Self {
        Self {
            max_results: 100,
            threads: std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(12),
        }
    }
}

/// Finds files whose path matches a glob, newest-modified first,
/// `.gitignore`-aware, hidden files skipped, symlinks not followed; the
/// walk opens every directory by handle beneath the workspace root.
#[derive(Debug, Clone, Default)]
pub struct GlobTool {
    config: GlobConfig,
}

impl GlobTool {
    /// A glob tool with these limits.
    pub fn new(config: GlobConfig) -> Self {
        Self { config }
    }
}

const DESCRIPTION: &str = "\
Finds files by path pattern, newest-modified first (at most 100).
- Patterns match paths relative to the search directory: `**/*.rs` (any depth), \
`src/**/*.{ts,tsx}`, `*.md` (top level only), `**/test_*.py`.
- Respects .gitignore and skips hidden files.
- Use grep to search file contents.";

#[async_trait]
impl Tool for GlobTool {
    type Args = GlobArgs;

    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }

    async fn call(&self, args: GlobArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let root = ctx.workspace_path_or_cwd(args.path.as_deref())?;
        let cwd = ctx.cwd().to_path_buf();
        let config = self.config.clone();
        let cancel = ctx.cancellation().clone();
        tokio::task::spawn_blocking(move || glob(&args.pattern, &root, &cwd, &config, &cancel))
            .await
            .map_err(|e| ToolError::failed(format!("glob task failed: {e}")))?
    }
}

/// Finds matching files (blocking).
pub(crate) fn glob(
    pattern: &str,
    place: &WorkspacePath,
    cwd: &Path,
    config: &GlobConfig,
    cancel: &kinet_core::tool::CancellationToken,
) -> Result<ToolOutput, ToolError> {
    let root = place.path();
    // Patterns are relative to the search directory: accept an absolute
    // pattern under it, and a leading `./`.
    let root_prefix = format!("{}/", root.display());
    let relative = pattern
        .strip_prefix(&root_prefix)
        .or_else(|| pattern.strip_prefix("./"))
        .unwrap_or(pattern);
    let matcher = GlobBuilder::new(relative)
        .literal_separator(true)
        .build()
        .map_err(|e| ToolError::invalid_arguments(format!("invalid glob `{pattern}`: {e}")))?
        .compile_matcher();
    if !place
        .metadata()
        .map_err(|e| place.error("list", e))?
        .is_dir()
    {
        return Err(ToolError::not_found(format!(
            "`{}` is not a directory",
            root.display()
        )));
    }
    let found: Arc<Mutex<Found>> = Arc::new(Mutex::new(Vec::new()));
    let rules = rules(root, None, None)?;
    walk_place(place, &rules, config.threads, || {
        let mut batch = Batch {
            local: Vec::new(),
            found: Arc::clone(&found),
        };
        let matcher = &matcher;
        move |entry: FileEntry<'_>| {
            if cancel.is_cancelled() {
                return Flow::Quit;
            }
            let relative = entry.path.strip_prefix(root).unwrap_or(&entry.path);
            if matcher.is_match(relative) {
                let modified = entry
                    .dir
                    .metadata(entry.name)
                    .map_or(SystemTime::UNIX_EPOCH, |m| m.modified);
                batch.local.push((modified, entry.path));
            }
            Flow::Continue
        }
    })?;
    // Every walker thread's batch was flushed when its visitor was dropped.
    let mut found = std::mem::take(
        &mut *found
            .lock()
            .map_err(|_| ToolError::failed("glob results were poisoned"))?,
    );
    if cancel.is_cancelled() {
        return Err(ToolError::new(
            kinet_core::tool::ToolErrorKind::Cancelled,
            "glob was cancelled",
        ));
    }
    found.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len();
    // Every name was listed from a directory opened beneath the root.
    found.truncate(config.max_results);
    let mut text = if total == 0 {
        format!(
            "No files match `{pattern}` (patterns are relative to `{}`; hidden and .gitignored files are skipped).",
            display_path(root, cwd)
        )
    } else {
        found
            .iter()
            .take(config.max_results)
            .map(|(_, path)| display_path(path, cwd))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if total > found.len() {
        text.push_str(&format!(
            "\n[{} more files not shown ({total} in all); use a narrower pattern or path]",
            total - found.len()
        ));
    }
    if let Some(note) = confinement_note(place) {
        text.push('\n');
        text.push_str(note);
    }
    Ok(ToolOutput::text(text).with_structured(serde_json::json!({ "total": total })))
}

type Found = Vec<(SystemTime, PathBuf)>;

/// One walker thread's matches, added to the shared list when the thread's
/// visitor is dropped (one lock per thread, not per file).
struct Batch {
    local: Found,
    found: Arc<Mutex<Found>>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Ok(mut found) = self.found.lock() {
            found.append(&mut self.local);
        }
    }
}
