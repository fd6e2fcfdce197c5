//! Files as an editor holds them: its open buffers, unsaved changes
//! included. An agent that runs inside an editor (over ACP, say) gets an
//! [`EditorFiles`] as a [`ToolCtx`](super::ToolCtx) extension
//! ([`Editor`]); the file tools then go through it, after their own
//! confinement checks on disk:
//!
//! - `read_file` opens the path beneath the workspace root first (a link
//!   out of it, a FIFO or a device is refused there); only a regular
//!   text file inside is asked of the editor, whose text is what the model
//!   sees.
//! - `edit_file` takes its base text from the editor (the model edits what
//!   it read, unsaved changes included) and, when the editor
//!   [`writes`](EditorFiles::writes), hands it the new text instead of
//!   writing the disk; `write_file` likewise. Before the editor is asked
//!   to write, the write is prepared beneath the root as a disk write
//!   would be (protected names refused, parent directories created) and
//!   the editor gets the path with its symlinks resolved, so it writes
//!   where kinet checked.
//!
//! The editor is a process of its own, outside kinet's kernel
//! confinement: a link swapped in by another process between the check
//! and the editor's write is not caught (kinet's own tools run one
//! mutating call at a time, so none of them can).
//!
//! Terminals ([`Terminals`]): the shell tool runs its command in one of the
//! editor's terminals (the person watches it live there), but the program
//! the editor starts is this one in launcher mode
//! ([`crate::sandbox::launcher`]), which applies the same containment,
//! sandbox and environment policy as a command kinet starts itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

/// The editor's side: read a file's current text, and (where the editor
/// offers it) replace it.
#[async_trait]
pub trait EditorFiles: Send + Sync {
    /// Whether the editor gives files' text. Default: yes.
    fn reads(&self) -> bool {
        true
    }

    /// The text of the file at `path` (absolute), as the editor has it;
    /// an error says why not (the tool then reads the disk).
    async fn read_text(&self, path: &Path) -> Result<String, String>;

    /// Whether the editor takes writes ([`write_text`](Self::write_text)).
    /// Used only when it also [`reads`](Self::reads): an edit's base read
    /// from disk could undo an edit the editor has not saved yet. Default:
    /// no (the tools write the disk).
    fn writes(&self) -> bool {
        false
    }

    /// Replaces the text of the file at `path` (absolute, symlinks
    /// resolved, checked), creating it when missing; the editor saves it
    /// as its own settings say. An error says why not; the call then
    /// fails and nothing is written. Default: refused.
    async fn write_text(&self, path: &Path, text: &str) -> Result<(), String> {
        let _ = (path, text);
        Err("this editor does not take writes".into())
    }
}

/// The [`ToolCtx`](super::ToolCtx) extension that carries the editor's
/// files (`AgentBuilder::extension(Editor(...))`, or
/// `Agent::to_builder`).
#[derive(Clone)]
pub struct Editor(pub Arc<dyn EditorFiles>);

/// A command for an editor's terminal: the program (a
/// [`Launcher`](crate::sandbox::launcher::Launcher)) and its arguments, the
/// directory, and how much output the editor keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TerminalCommand {
    /// The program to start.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// The directory to start it in (absolute).
    pub cwd: PathBuf,
    /// The most output bytes the editor keeps (it drops the oldest).
    pub output_limit: u64,
}

impl TerminalCommand {
    /// `program args` in `cwd`, keeping `output_limit` bytes of output.
    pub fn new(program: PathBuf, args: Vec<String>, cwd: PathBuf, output_limit: u64) -> Self {
        Self {
            program,
            args,
            cwd,
            output_limit,
        }
    }
}

/// How a terminal's command ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TerminalExit {
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<String>,
}

impl TerminalExit {
    /// An exit with `exit_code` or by `signal`.
    pub fn new(exit_code: Option<i32>, signal: Option<String>) -> Self {
        Self { exit_code, signal }
    }
}

/// The editor's side of terminals: start a command in one.
#[async_trait]
pub trait EditorTerminals: Send + Sync {
    /// Starts `command` in a new terminal for the call `ctx` belongs to
    /// (the editor shows it with the call).
    async fn create(
        &self,
        ctx: &super::ToolCtx,
        command: TerminalCommand,
    ) -> Result<Box<dyn EditorTerminal>, String>;
}

/// One terminal of the editor's.
#[async_trait]
pub trait EditorTerminal: Send + Sync {
    /// Waits for the command to end.
    async fn wait_for_exit(&self) -> Result<TerminalExit, String>;
    /// The output so far (the last [`TerminalCommand::output_limit`]
    /// bytes) and whether older output was dropped.
    async fn output(&self) -> Result<(String, bool), String>;
    /// Kills the command (the terminal stays, for its output).
    async fn kill(&self) -> Result<(), String>;
    /// Lets the editor free the terminal (it keeps showing the output).
    async fn release(&self);
}

/// The [`ToolCtx`](super::ToolCtx) extension through which the shell tool
/// runs commands in the editor's terminals: the editor's side, and this
/// program as the [`Launcher`](crate::sandbox::launcher::Launcher) that
/// applies kinet's confinement inside them.
#[derive(Clone)]
pub struct Terminals {
    /// The editor's terminals.
    pub editor: Arc<dyn EditorTerminals>,
    /// The program the editor starts (in launcher mode).
    pub launcher: crate::sandbox::launcher::Launcher,
}
