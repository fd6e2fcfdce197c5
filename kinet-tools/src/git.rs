//! `git_diff`: the real `git diff`, read-only.

use std::path::{Path, PathBuf};
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

/// Shows changes with the real `git`, in the repository around the working
/// directory. Read-only: never asks.
///
/// **What runs.** `git` itself and nothing the repository names. A cloned
/// repository's `.git/config` and `.gitattributes` belong to whoever made
/// it, so every git command gets: the host's environment reduced to `PATH`,
/// `HOME`, `USER`, `LOGNAME`, `TMPDIR`, `TZ`; system and global config
/// ignored (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`);
/// `core.fsmonitor=false`; hooks pointed at `/dev/null`; every filter
/// driver the config defines emptied (`clean`, `smudge`, `process`) and
/// not required; every diff driver's `textconv` and `command` emptied plus
/// `--no-textconv --no-ext-diff`; submodules ignored (their own config is
/// never read); no pager; no network (every `protocol.*.allow=never`, no
/// lazy fetch in partial clones, no credential helper, proxy or prompts);
/// no optional index writes; pathspecs taken literally. These overrides go
/// through `GIT_CONFIG_KEY_n` (git 2.31+). A work tree or repository
/// outside the workspace roots (`core.worktree`, a `.git` file or link
/// pointing elsewhere) is refused.
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

/// The host's environment variables git still gets; everything else
/// (`GIT_DIR`, `GIT_PROXY_COMMAND`, `GIT_EXTERNAL_DIFF`, config passed
/// through the environment, ...) is dropped.
const KEPT_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "SYSTEMROOT",
    "TZ",
];

/// Settings that stop git from running anything the repository names or
/// reaching any network.
const SAFE_CONFIG: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.sshCommand", ""),
    ("core.askPass", ""),
    ("core.gitProxy", ""),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("protocol.allow", "never"),
    ("protocol.ext.allow", "never"),
    ("protocol.file.allow", "never"),
    ("protocol.ssh.allow", "never"),
    ("protocol.git.allow", "never"),
    ("protocol.http.allow", "never"),
    ("protocol.https.allow", "never"),
];

/// A git command with the hardening described on [`GitDiffTool`];
/// `drivers` are the filter and diff driver names to empty. Overrides go
/// through `GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`, not `-c`, since `-c`
/// splits at the first `=` and a driver name may contain one.
fn git_command(git: &str, dir: &Path, drivers: &Drivers, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(git);
    command.env_clear();
    for name in KEPT_ENV {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_LITERAL_PATHSPECS", "1")
        .env("GIT_PAGER", "cat")
        .env("PAGER", "cat")
        .env("LC_ALL", "C");
    let mut config: Vec<(String, String)> = SAFE_CONFIG
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect();
    for name in &drivers.filters {
        for key in ["clean", "smudge", "process"] {
            config.push((format!("filter.{name}.{key}"), String::new()));
        }
        config.push((format!("filter.{name}.required"), "false".to_owned()));
    }
    for name in &drivers.diffs {
        for key in ["textconv", "command"] {
            config.push((format!("diff.{name}.{key}"), String::new()));
        }
    }
    command.env("GIT_CONFIG_COUNT", config.len().to_string());
    for (index, (key, value)) in config.iter().enumerate() {
        command
            .env(format!("GIT_CONFIG_KEY_{index}"), key)
            .env(format!("GIT_CONFIG_VALUE_{index}"), value);
    }
    command
        .arg("--no-pager")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The filter and diff drivers the repository's config defines.
#[derive(Debug, Default)]
struct Drivers {
    filters: Vec<String>,
    diffs: Vec<String>,
}

impl Drivers {
    /// Parses `git config --name-only --get-regexp` output: names such as
    /// `filter.lfs.clean` or `diff.a.b.textconv` (the driver may contain dots).
    fn parse(names: &str) -> Self {
        let mut drivers = Self::default();
        for name in names.lines() {
            let (list, rest) = if let Some(rest) = name.strip_prefix("filter.") {
                (&mut drivers.filters, rest)
            } else if let Some(rest) = name.strip_prefix("diff.") {
                (&mut drivers.diffs, rest)
            } else {
                continue;
            };
            if let Some((driver, _key)) = rest.rsplit_once('.')
                && !list.iter().any(|known| known == driver)
            {
                list.push(driver.to_owned());
            }
        }
        drivers
    }
}

async fn run_git(
    git: &str,
    dir: &Path,
    drivers: &Drivers,
    args: &[&str],
    ctx: &ToolCtx,
) -> Result<GitOutput, ToolError> {
    let child = git_command(git, dir, drivers, args)
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
        let repo = Repo {
            git: &self.git,
            dir: ctx.cwd().to_path_buf(),
            ctx,
        };
        repo.check_inside_workspace().await?;
        let drivers = repo.drivers().await?;
        let mut text = repo.diff(&args, file.as_deref(), &drivers).await?;
        if !args.cached && args.git_ref.is_none() {
            let untracked = repo.untracked(file.as_deref(), &drivers).await?;
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

/// The longest diff returned; the rest is cut with a note.
const MAX_DIFF_BYTES: usize = 4 * 1024 * 1024;

/// The repository one `git_diff` call works in: the git executable, the
/// directory git runs in and the call's context.
struct Repo<'a> {
    git: &'a str,
    dir: PathBuf,
    ctx: &'a ToolCtx,
}

impl Repo<'_> {
    /// Runs one hardened git command in the directory.
    async fn run(&self, drivers: &Drivers, args: &[&str]) -> Result<GitOutput, ToolError> {
        run_git(self.git, &self.dir, drivers, args, self.ctx).await
    }

    /// Checks that the directory is inside a git work tree, and that the
    /// work tree and the repository lie inside the workspace: a
    /// `core.worktree` pointing elsewhere would show files from there, and
    /// a `.git` file or link naming another repository its history.
    async fn check_inside_workspace(&self) -> Result<(), ToolError> {
        let inside = self
            .run(
                &Drivers::default(),
                &[
                    "rev-parse",
                    "--is-inside-work-tree",
                    "--show-toplevel",
                    "--absolute-git-dir",
                    "--git-common-dir",
                ],
            )
            .await?;
        let mut lines = inside.stdout.lines();
        if inside.status != Some(0) || lines.next() != Some("true") {
            return Err(ToolError::invalid_arguments(format!(
                "`{}` is not inside a git repository (git said: {})",
                self.dir.display(),
                if inside.stderr.is_empty() {
                    "not a work tree"
                } else {
                    &inside.stderr
                }
            )));
        }
        if !self.ctx.roots().is_empty() {
            for (what, path) in ["work tree", "repository", "repository"]
                .into_iter()
                .zip(lines)
            {
                let path = self.dir.join(path);
                self.ctx
                    .resolve_path(&path.to_string_lossy())
                    .map_err(|e| {
                        ToolError::permission_denied(format!(
                            "the {what} `{}` is outside the workspace ({})",
                            path.display(),
                            e.message()
                        ))
                    })?;
            }
        }
        Ok(())
    }

    /// The filter and diff drivers the repository's config defines, read
    /// without running any of them.
    async fn drivers(&self) -> Result<Drivers, ToolError> {
        let names = self
            .run(
                &Drivers::default(),
                &["config", "--name-only", "--get-regexp", r"^(filter|diff)\."],
            )
            .await?;
        Ok(Drivers::parse(&names.stdout))
    }

    /// Runs `git diff` as `args` ask and returns its text: the diff, cut
    /// at [`MAX_DIFF_BYTES`], or a line saying there are no changes.
    async fn diff(
        &self,
        args: &GitDiffArgs,
        file: Option<&Path>,
        drivers: &Drivers,
    ) -> Result<String, ToolError> {
        let mut command: Vec<String> = ["diff", "--no-color", "--no-ext-diff", "--no-textconv"]
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
        if let Some(file) = file {
            command.push(file.display().to_string());
        }
        let refs: Vec<&str> = command.iter().map(String::as_str).collect();
        let diff = self.run(drivers, &refs).await?;
        if diff.status != Some(0) {
            return Err(diff_error(args.git_ref.as_deref(), &diff.stderr));
        }
        if diff.stdout.is_empty() {
            let what = if args.cached {
                "staged changes"
            } else if args.git_ref.is_some() {
                "changes"
            } else {
                "unstaged changes"
            };
            return Ok(format!("No {what}."));
        }
        Ok(cut_diff(diff.stdout))
    }

    /// The untracked files `git status` lists (limited to `file` if given),
    /// which `git diff` does not show.
    async fn untracked(
        &self,
        file: Option<&Path>,
        drivers: &Drivers,
    ) -> Result<Vec<String>, ToolError> {
        let mut status_args = vec![
            "status",
            "--porcelain",
            "--untracked-files=normal",
            "--ignore-submodules=all",
            "--",
        ];
        let file_arg = file.map(|f| f.display().to_string());
        if let Some(file) = &file_arg {
            status_args.push(file);
        }
        let status = self.run(drivers, &status_args).await?;
        Ok(status
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("?? "))
            .map(str::to_owned)
            .collect())
    }
}

/// The error for a failed `git diff`: an unknown ref is reported as not
/// found, anything else as a failure with git's message.
fn diff_error(git_ref: Option<&str>, message: &str) -> ToolError {
    if let Some(git_ref) = git_ref
        && (message.contains("bad revision")
            || message.contains("unknown revision")
            || message.contains("ambiguous argument"))
    {
        return ToolError::not_found(format!(
            "unknown ref `{git_ref}`: no commit, branch or tag by that name (git said: {message})"
        ));
    }
    ToolError::failed(format!("git diff failed: {message}"))
}

/// Cuts a diff longer than [`MAX_DIFF_BYTES`] at a character boundary and
/// says so at the end.
fn cut_diff(mut stdout: String) -> String {
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
    stdout
}
