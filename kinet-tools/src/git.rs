//! `git_diff`: the real `git diff`, read-only.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use kinet_core::{Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `git_diff`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GitDiffArgs {
    /// Limit the diff to this file or directory.
    #[serde(default)]
    pub file: Option<String>,
    /// Compare with this commit, branch or tag (e.g. `HEAD~1`, `main`)
    /// instead of the index.
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
    /// Show staged changes (`git diff --cached`) instead of unstaged ones.
    #[serde(default)]
    pub cached: bool,
}

/// Shows changes with the real `git` (`--no-color --no-ext-diff`), in the
/// repository around the working directory. Read-only: never asks.
#[derive(Debug, Clone)]
pub struct GitDiffTool {
    git: String,
    timeout: Duration,
}

impl Default for GitDiffTool {
    fn default() -> Self {
        Self {
            git: "git".into(),
            timeout: Duration::from_secs(60),
        }
    }
}

impl GitDiffTool {
    /// Uses this git executable (default `git` from `PATH`).
    pub fn with_git(mut self, git: impl Into<String>) -> Self {
        self.git = git.into();
        self
    }
}

const DESCRIPTION: &str = "\
Shows changes in the git repository of the working directory as a unified diff.
- Default: unstaged changes (working tree vs index). cached=true: staged changes. \
ref: changes since that commit, branch or tag (e.g. HEAD~1, main), staged or not.
- file limits the diff to one file or directory.
- Untracked files are listed after the diff, since git diff does not show them.";

/// Output of one git command.
struct GitOutput {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn run_git(
    git: &str,
    dir: &Path,
    args: &[&str],
    ctx: &ToolCtx,
) -> Result<GitOutput, ToolError> {
    let child = tokio::process::Command::new(git)
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ToolError::failed(format!("cannot run `{git}`: {e}; is git installed?")))?;
    // Dropping the wait on timeout or cancellation kills git (kill_on_drop).
    let output = ctx
        .bounded("git", child.wait_with_output())
        .await?
        .map_err(|e| ToolError::failed(format!("git failed: {e}")))?;
    Ok(GitOutput {
        status: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
    })
}

#[async_trait]
impl Tool for GitDiffTool {
    type Args = GitDiffArgs;

    fn name(&self) -> &str {
        "git_diff"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }

    /// The pipeline stops git after this long (60 s by default).
    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    async fn call(&self, args: GitDiffArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let dir = ctx.cwd().to_path_buf();
        if let Some(git_ref) = &args.git_ref
            && (git_ref.starts_with('-') || git_ref.trim().is_empty())
        {
            return Err(ToolError::invalid_arguments(format!(
                "`{git_ref}` is not a ref; give a commit, branch or tag name"
            )));
        }
        let file = match &args.file {
            Some(file) => Some(ctx.resolve_path(file)?),
            None => None,
        };
        let inside = run_git(
            &self.git,
            &dir,
            &["rev-parse", "--is-inside-work-tree"],
            ctx,
        )
        .await?;
        if inside.status != Some(0) || inside.stdout.trim() != "true" {
            return Err(ToolError::invalid_arguments(format!(
                "`{}` is not inside a git repository (git said: {})",
                dir.display(),
                if inside.stderr.is_empty() {
                    "not a work tree"
                } else {
                    &inside.stderr
                }
            )));
        }
        // Read-only for real: no textconv or fsmonitor programs from the
        // repository's config run.
        let mut command: Vec<String> = [
            "-c",
            "core.fsmonitor=false",
            "--no-pager",
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if args.cached {
            command.push("--cached".into());
        }
        if let Some(git_ref) = &args.git_ref {
            command.push(git_ref.clone());
        }
        command.push("--".into());
        if let Some(file) = &file {
            command.push(file.display().to_string());
        }
        let refs: Vec<&str> = command.iter().map(String::as_str).collect();
        let diff = run_git(&self.git, &dir, &refs, ctx).await?;
        if diff.status != Some(0) {
            let message = &diff.stderr;
            if let Some(git_ref) = &args.git_ref
                && (message.contains("bad revision")
                    || message.contains("unknown revision")
                    || message.contains("ambiguous argument"))
            {
                return Err(ToolError::not_found(format!(
                    "unknown ref `{git_ref}`: no commit, branch or tag by that name (git said: {message})"
                )));
            }
            return Err(ToolError::failed(format!("git diff failed: {message}")));
        }
        const MAX_DIFF_BYTES: usize = 4 * 1024 * 1024;
        let mut stdout = diff.stdout;
        if stdout.len() > MAX_DIFF_BYTES {
            let mut cut = MAX_DIFF_BYTES;
            while !stdout.is_char_boundary(cut) {
                cut -= 1;
            }
            let total = stdout.len();
            stdout.truncate(cut);
            stdout.push_str(&format!(
                "\n[diff cut at {MAX_DIFF_BYTES} of {total} bytes; limit it with file]\n"
            ));
        }
        let diff_stdout = stdout;
        let mut text = if diff_stdout.is_empty() {
            let what = if args.cached {
                "staged changes"
            } else if args.git_ref.is_some() {
                "changes"
            } else {
                "unstaged changes"
            };
            format!("No {what}.")
        } else {
            diff_stdout
        };
        if !args.cached && args.git_ref.is_none() {
            let mut status_args = vec!["status", "--porcelain", "--untracked-files=normal", "--"];
            let file_arg = file.as_ref().map(|f| f.display().to_string());
            if let Some(file) = &file_arg {
                status_args.push(file);
            }
            let status = run_git(&self.git, &dir, &status_args, ctx).await?;
            let untracked: Vec<&str> = status
                .stdout
                .lines()
                .filter_map(|l| l.strip_prefix("?? "))
                .collect();
            if !untracked.is_empty() {
                text.push_str(&format!(
                    "\nUntracked files (not in the diff): {}\n",
                    untracked.join(", ")
                ));
            }
        }
        Ok(ToolOutput::text(text))
    }
}
