//! How a tool is described: to the model ([`ToolSpec`]), to clients and
//! the scheduler ([`ToolAnnotations`], [`Scheduling`]).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// What a provider is told about a tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// The tool name.
    pub name: String,
    /// The description.
    pub description: String,
    /// The JSON schema of the arguments.
    pub parameters: serde_json::Value,
}

/// Static facts about a tool, as MCP's tool annotations: what clients are
/// told (`readOnlyHint`, `destructiveHint`, `idempotentHint`,
/// `openWorldHint`) and where the defaults of
/// [`Tool::mutating`](crate::tool::Tool::mutating) and
/// [`Tool::scheduling`](crate::tool::Tool::scheduling) come from.
///
/// The default is MCP's: not read-only, destructive, not idempotent, open
/// world — the defensive reading of a tool that says nothing.
///
/// ```
/// use kinet_core::ToolAnnotations;
///
/// let grep = ToolAnnotations::read_only();
/// assert!(grep.read_only && grep.idempotent && !grep.destructive);
/// let write = ToolAnnotations::default().destructive(false).idempotent(true).open_world(false);
/// assert!(!write.read_only && write.idempotent);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolAnnotations {
    /// The tool changes nothing (files, processes, remote state, the
    /// agent's own state).
    pub read_only: bool,
    /// When not read-only: it may destroy or overwrite something, rather
    /// than only add.
    pub destructive: bool,
    /// Calling it again with the same arguments has no further effect: safe
    /// to retry.
    pub idempotent: bool,
    /// It reaches outside the machine's closed world (the web, remote
    /// services).
    pub open_world: bool,
}

impl Default for ToolAnnotations {
    fn default() -> Self {
        Self {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        }
    }
}

impl ToolAnnotations {
    /// A tool that only reads local state: read-only, idempotent, not
    /// destructive, closed world.
    pub const fn read_only() -> Self {
        Self {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        }
    }

    /// A tool that adds to local state (a file, the agent's memory or todo
    /// list): not read-only, not destructive, not idempotent, closed world.
    pub const fn local_write() -> Self {
        Self {
            read_only: false,
            destructive: false,
            idempotent: false,
            open_world: false,
        }
    }

    /// Sets [`destructive`](Self::destructive).
    pub const fn destructive(mut self, destructive: bool) -> Self {
        self.destructive = destructive;
        self
    }

    /// Sets [`idempotent`](Self::idempotent).
    pub const fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Sets [`open_world`](Self::open_world).
    pub const fn open_world(mut self, open_world: bool) -> Self {
        self.open_world = open_world;
        self
    }

    /// Whether a failed call may safely run again: read-only or idempotent.
    pub const fn retry_safe(&self) -> bool {
        self.read_only || self.idempotent
    }
}

/// When a call may run beside the other calls of its turn.
///
/// The scheduler splits a turn's calls into phases at every
/// [`Exclusive`](Self::Exclusive) call; within a phase, calls run at the
/// same time except that calls sharing a [`Keyed`](Self::Keyed) key run one
/// at a time, in call order. A key is also held across runs that share the
/// agent's pipeline (sub-agents, team members, served tools), so two runs
/// never touch the same state at once; the wait for a key does not count
/// against the call's timeout, and a cancelled call stops waiting. Do not
/// key a tool that runs agents which may call tools of the same key (they
/// would wait for their caller): make it [`Exclusive`](Self::Exclusive).
/// Results always go back in call order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheduling {
    /// Safe beside any other call (pure reads).
    Parallel,
    /// One at a time with every other call holding the same key (calls that
    /// write the same state: a memory store, a todo list).
    Keyed(Cow<'static, str>),
    /// Alone: the calls before it finish first, the calls after it wait.
    Exclusive,
}

impl Scheduling {
    /// A [`Keyed`](Self::Keyed) scheduling.
    pub fn keyed(key: impl Into<Cow<'static, str>>) -> Self {
        Self::Keyed(key.into())
    }
}
