//! Shell command lines that kinet runs itself: what the approval rules
//! check is exactly what runs.
//!
//! A line is [planned](plan) in three steps, at check time:
//!
//! 1. **Parsed** into lists (`;`, newlines), and-or lists (`&&`, `||`),
//!    pipelines (`|`) and simple commands (assignments, words,
//!    redirections), by the grammar dash and bash share. Whatever the two
//!    shells read differently (`&>`, `|&`, brace expansion, the `time`
//!    keyword, a background job's input), or compute at run time (`$...`,
//!    backquotes, here-documents, process substitution), or keep as shell
//!    state (`cd`, `export`, `set`, subshells, `if`/`for`/...), makes the
//!    line [`Planned::Unsure`].
//! 2. **Expanded**: quotes removed, `~` replaced by `HOME`, glob words
//!    matched against the directory the command runs in (beneath the
//!    workspace roots only, and only in the line's first pipeline, which
//!    no earlier command can have changed); the expanded arguments are what
//!    is checked and run.
//! 3. **Resolved**: each program is found through the `PATH` the command
//!    will get; [wrappers](#wrappers) are read by their real grammar and
//!    the program they run is resolved in turn; `sh -c 'script'` (and
//!    `bash`, `dash`) is planned as its script.
//!
//! The result, a [`Plan`], is what the rules judge
//! ([`Rules::check_plan`](crate::rules::Rules::check_plan)) and what the
//! shell tool runs: on Linux each program is started with `execve` of its
//! resolved path, pipes, lists and redirections wired by kinet
//! ([`Launch::plan`](crate::sandbox::Launch::plan)); nothing is parsed
//! again by a shell. A line that cannot be planned is asked about and,
//! once approved, runs under one [named shell](named_shell).
//!
//! # Wrappers
//!
//! `env`, `nice`, `nohup`, `timeout`, `stdbuf` and `xargs` (found in a
//! system directory) run their arguments as a command: their options are
//! read as GNU `getopt_long` reads them (clusters, attached values, long
//! options abbreviated, `--`), an unknown option or one that changes what
//! runs (`env -S`, `env -C`, `xargs --process-slot-var`) makes the line
//! unsure, and the program they run is resolved and written into their
//! arguments as a path, so they run what was checked. The builtins `exec`
//! and `command` (without options) are read too.
//!
//! # Programs
//!
//! A program named without `/` is looked up in `PATH` like a shell does
//! (the first executable file); it is a **system program** when its
//! directory is absolute and lies outside the workspace roots, the temp
//! directories and every other directory the command may write, and is
//! not world-writable. A program named by a path (`./x`, `bin/x`) is never
//! a system program. The builtins `echo`, `printf`, `test`, `[`, `true`,
//! `false`, `pwd` and `kill` run as the system's programs of those names.
//!
//! ```
//! use kinet_core::command::{Context, Planned, plan};
//!
//! let context = Context::examples();
//! let Planned::Plan(planned) = plan("ls -l src | wc -l && echo done", &context) else {
//!     panic!()
//! };
//! let programs: Vec<_> = planned.invocations().map(|i| i.target.name()).collect();
//! assert_eq!(programs, ["ls", "wc", "echo"]);
//! assert!(matches!(plan("ls &> out", &context), Planned::Unsure(_)));
//! ```

mod glob;
mod grammar;
mod lex;
mod pathcache;
mod planner;
mod resolve;
mod variables;
mod wrappers;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use planner::plan;
pub(crate) use resolve::resolve_existing;
pub use resolve::{Context, named_shell};
pub use variables::{PROGRAM_VARIABLES, is_program_variable};

/// Whether kinet runs planned lines itself on this system
/// ([`Launch::plan`](crate::sandbox::Launch::plan): Linux). Elsewhere a
/// tool runs the line with a shell, so the rules' `allow` asks.
pub const RUNS_PLANS: bool = cfg!(target_os = "linux");

/// How a line was planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Planned {
    /// Exactly these programs, wired this way.
    Plan(Plan),
    /// kinet cannot prove what a shell would run; the reason.
    Unsure(String),
}

/// The line a call runs and where it runs, for planning
/// ([`Tool::command_line`](crate::Tool::command_line)).
#[derive(Debug, Clone)]
pub struct CommandLine {
    /// The line as the model wrote it.
    pub line: String,
    /// Where and with which environment it runs.
    pub context: Context,
}

/// The plan of a call's command line, handed by the pipeline to the tool
/// that runs it (a [`ToolCtx`](crate::ToolCtx) extension): the same value
/// the rules checked.
#[derive(Debug, Clone)]
pub struct CheckedCommand {
    /// The call it belongs to.
    pub call_id: String,
    /// The line.
    pub line: String,
    /// Where it runs.
    pub context: Context,
    /// Its plan.
    pub planned: Planned,
}

/// A planned command line: its items in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The items, separated by `;` or newlines.
    pub items: Vec<Item>,
}

/// An and-or list (`a && b || c`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// The first pipeline.
    pub first: Pipeline,
    /// The pipelines after it, each run or not by its connector.
    pub rest: Vec<(Connector, Pipeline)>,
}

/// `&&` or `||`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Connector {
    /// `&&`: runs after a success.
    And,
    /// `||`: runs after a failure.
    Or,
}

/// Commands joined by `|`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pipeline {
    /// The commands, left to right.
    pub commands: Vec<Command>,
}

/// One command of a pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Command {
    /// A program.
    Program(Invocation),
    /// `sh -c 'script'`: the script, run as a group of its own.
    Shell(Nested),
}

/// A program started with `execve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invocation {
    /// The file executed.
    pub path: PathBuf,
    /// Its arguments as executed: the first as written, the programs that
    /// wrappers run replaced by their resolved paths.
    pub argv: Vec<String>,
    /// Leading assignments (`NAME=value cmd`), set in its environment.
    pub env: Vec<(String, String)>,
    /// Its redirections, in order.
    pub redirects: Vec<Redirect>,
    /// Written after `exec`: nothing after it in its list runs.
    pub exec: bool,
    /// The command the rules judge: the program itself, or the one its
    /// wrappers run.
    pub target: Target,
    /// The wrappers between the program and the target (`nice`, `env`),
    /// outermost first.
    pub wrappers: Vec<String>,
}

/// The program the rules judge, and what it is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// The program as written.
    pub written: String,
    /// Where it was found (`None`: nowhere, and it will fail to start).
    pub path: Option<PathBuf>,
    /// Found in a system directory (see the [module docs](self)).
    pub system: bool,
    /// Its arguments (after the program).
    pub args: Vec<String>,
    /// More arguments are added at run time (`xargs`): the rules cannot
    /// see them all.
    pub open_args: bool,
    /// Variables set for it: leading assignments and `env`'s.
    pub env: Vec<(String, String)>,
}

impl Target {
    /// The program's name: the last component of its path.
    pub fn name(&self) -> &str {
        match &self.path {
            Some(path) => path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or(&self.written),
            None => self.written.rsplit('/').next().unwrap_or(&self.written),
        }
    }

    /// Whether it was written as a path (`./x`, `/usr/bin/x`).
    pub fn written_as_path(&self) -> bool {
        self.written.contains('/')
    }
}

/// `sh -c 'script'` planned as its script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nested {
    /// The shell as written (`sh`, `bash`), for messages.
    pub shell: String,
    /// The script's plan.
    pub plan: Plan,
    /// Redirections of the whole group.
    pub redirects: Vec<Redirect>,
}

/// A redirection of descriptor 0, 1 or 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redirect {
    /// The descriptor redirected.
    pub fd: u8,
    /// What it becomes.
    pub kind: RedirectKind,
}

/// What a redirection does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RedirectKind {
    /// `<file`
    Read(RedirectFile),
    /// `>file`: created or emptied.
    Write(RedirectFile),
    /// `>>file`
    Append(RedirectFile),
    /// `>&n` / `<&n`: a copy of descriptor `n`.
    Dup(u8),
}

/// A redirection's file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedirectFile {
    /// As written (expanded), opened relative to the command's directory.
    pub path: String,
    /// Whether it lies outside the workspace roots, as written or with its
    /// symlinks resolved (`/dev/null` never does).
    pub outside_roots: bool,
}

impl Redirect {
    /// The file it writes, if it writes one (not `/dev/null`).
    pub fn writes(&self) -> Option<&str> {
        match &self.kind {
            RedirectKind::Write(file) | RedirectKind::Append(file) if file.path != "/dev/null" => {
                Some(&file.path)
            }
            _ => None,
        }
    }

    /// Its file, if it has one.
    pub fn file(&self) -> Option<&RedirectFile> {
        match &self.kind {
            RedirectKind::Read(file) | RedirectKind::Write(file) | RedirectKind::Append(file) => {
                Some(file)
            }
            _ => None,
        }
    }
}

impl Plan {
    /// Every program it starts, nested shells' included, in order.
    pub fn invocations(&self) -> impl Iterator<Item = &Invocation> {
        let mut all = Vec::new();
        self.collect(&mut all);
        all.into_iter()
    }

    fn collect<'a>(&'a self, all: &mut Vec<&'a Invocation>) {
        for item in &self.items {
            for pipeline in std::iter::once(&item.first).chain(item.rest.iter().map(|(_, p)| p)) {
                for command in &pipeline.commands {
                    match command {
                        Command::Program(invocation) => all.push(invocation),
                        Command::Shell(nested) => nested.plan.collect(all),
                    }
                }
            }
        }
    }

    /// The plan as a line for people: the programs' paths and arguments,
    /// quoted where needed, with the operators between them.
    pub fn display(&self) -> String {
        let mut text = String::new();
        for (n, item) in self.items.iter().enumerate() {
            if n > 0 {
                text.push_str("; ");
            }
            display_pipeline(&item.first, &mut text);
            for (connector, pipeline) in &item.rest {
                text.push_str(match connector {
                    Connector::And => " && ",
                    Connector::Or => " || ",
                });
                display_pipeline(pipeline, &mut text);
            }
        }
        text
    }
}

fn display_pipeline(pipeline: &Pipeline, text: &mut String) {
    for (n, command) in pipeline.commands.iter().enumerate() {
        if n > 0 {
            text.push_str(" | ");
        }
        let redirects = match command {
            Command::Program(invocation) => {
                if invocation.exec {
                    text.push_str("exec ");
                }
                for (name, value) in &invocation.env {
                    text.push_str(&quote(&format!("{name}={value}")));
                    text.push(' ');
                }
                text.push_str(&quote(&invocation.path.to_string_lossy()));
                for arg in invocation.argv.iter().skip(1) {
                    text.push(' ');
                    text.push_str(&quote(arg));
                }
                &invocation.redirects
            }
            Command::Shell(nested) => {
                text.push_str(&format!(
                    "{} -c {}",
                    nested.shell,
                    quote(&nested.plan.display())
                ));
                &nested.redirects
            }
        };
        for redirect in redirects {
            text.push(' ');
            text.push_str(&redirect.fd.to_string());
            match &redirect.kind {
                RedirectKind::Read(f) => text.push_str(&format!("<{}", quote(&f.path))),
                RedirectKind::Write(f) => text.push_str(&format!(">{}", quote(&f.path))),
                RedirectKind::Append(f) => text.push_str(&format!(">>{}", quote(&f.path))),
                RedirectKind::Dup(n) => text.push_str(&format!(">&{n}")),
            }
        }
    }
}

/// `word` quoted for a shell when it needs to be.
pub fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Whether two paths name the same file: equal once `.` and `..` are
/// folded, or once their links are resolved.
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    let (a, b) = (normalize(a), normalize(b));
    a == b
        || matches!(
            (std::fs::canonicalize(&a), std::fs::canonicalize(&b)),
            (Ok(x), Ok(y)) if x == y
        )
}

/// Folds `.` and `..` without touching the file system.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Whether `path` lies beneath `dir` (or is it), both absolute and
/// normalized: compared as bytes, at component boundaries.
fn beneath(path: &Path, dir: &Path) -> bool {
    let (path, dir) = (
        path.as_os_str().as_encoded_bytes(),
        dir.as_os_str().as_encoded_bytes(),
    );
    path.starts_with(dir)
        && (path.len() == dir.len() || dir.ends_with(b"/") || path[dir.len()] == b'/')
}
