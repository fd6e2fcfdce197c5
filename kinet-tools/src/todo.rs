//! `todo_write`: the agent's shared checklist.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use kinet_core::tool::Scheduling;
use kinet_core::{Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One entry of the agent's todo list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TodoItem {
    /// What to do, in the imperative ("Run the tests").
    pub content: String,
    /// Where it stands.
    pub status: TodoStatus,
    /// The present-continuous form shown while it runs ("Running the tests").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_form: Option<String>,
}

/// The state of a todo item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on (at most one at a time).
    InProgress,
    /// Done.
    Completed,
}

/// The pack event `todo_write` sends (pack `"todo"`): the whole new list.
/// Read it from [`AgentEvent::Pack`](kinet_core::AgentEvent::Pack) with
/// `event.downcast_ref::<TodoUpdated>()`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TodoUpdated {
    /// The whole list.
    pub todos: Vec<TodoItem>,
}

/// Arguments of `todo_write`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TodoWriteArgs {
    /// The whole list, replacing the previous one.
    pub todos: Vec<TodoItem>,
}

/// The current todo list, shared between the tool and the host.
#[derive(Debug, Clone, Default)]
pub struct TodoList(Arc<Mutex<Vec<TodoItem>>>);

impl TodoList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// The items, in order.
    pub fn items(&self) -> Vec<TodoItem> {
        self.0.lock().map(|items| items.clone()).unwrap_or_default()
    }
}

/// Kept in a [`Session`](kinet_core::session::Session) as `"todo"`.
impl kinet_core::session::SessionState for TodoList {
    fn key(&self) -> &str {
        "todo"
    }

    fn save(&self) -> serde_json::Value {
        serde_json::to_value(self.items()).unwrap_or_default()
    }

    fn restore(&self, state: &serde_json::Value) -> Result<(), String> {
        let items: Vec<TodoItem> =
            serde_json::from_value(state.clone()).map_err(|e| e.to_string())?;
        let mut list = self
            .0
            .lock()
            .map_err(|_| "the todo list is poisoned".to_owned())?;
        *list = items;
        Ok(())
    }
}

/// Replaces the agent's todo list, checks it (at most one item in progress,
/// no empty items), tells the host through a [`TodoUpdated`] pack event, and
/// returns a compact summary. It changes only the agent's own list, so it
/// needs no approval; two `todo_write` calls never run at once.
#[derive(Debug, Clone, Default)]
pub struct TodoWriteTool {
    list: TodoList,
}

impl TodoWriteTool {
    /// A tool writing to `list`.
    pub fn new(list: TodoList) -> Self {
        Self { list }
    }
}

const DESCRIPTION: &str = "\
Writes your todo list for the current task: the whole list each time, replacing the \
previous one. The user sees it as a checklist.
- Use it for work with several steps; skip it for a single quick step.
- Each item: content (imperative, \"Run the tests\"), status (pending, in_progress, \
completed), optional active_form (\"Running the tests\").
- Keep exactly one item in_progress while working; mark items completed as soon as they \
are done.";

#[async_trait]
impl Tool for TodoWriteTool {
    type Args = TodoWriteArgs;

    fn name(&self) -> &str {
        "todo_write"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::local_write()
            .destructive(true)
            .idempotent(true)
    }

    fn mutating(&self, _: &TodoWriteArgs) -> bool {
        false
    }

    fn scheduling(&self, _: &TodoWriteArgs) -> Scheduling {
        Scheduling::keyed("todo")
    }

    async fn call(&self, args: TodoWriteArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let todos = args.todos;
        if let Some(index) = todos.iter().position(|t| t.content.trim().is_empty()) {
            return Err(ToolError::invalid_arguments(format!(
                "todo {} has empty content",
                index + 1
            )));
        }
        let in_progress: Vec<&TodoItem> = todos
            .iter()
            .filter(|t| t.status == TodoStatus::InProgress)
            .collect();
        if in_progress.len() > 1 {
            return Err(ToolError::invalid_arguments(format!(
                "{} items are in_progress; keep exactly one in progress and mark the others pending or completed",
                in_progress.len()
            )));
        }
        let count = |status| todos.iter().filter(|t| t.status == status).count();
        let mut summary = format!(
            "Todo list updated: {} completed, {} in progress, {} pending.",
            count(TodoStatus::Completed),
            in_progress.len(),
            count(TodoStatus::Pending)
        );
        if let Some(current) = in_progress.first() {
            summary.push_str(&format!(" Now: {}.", current.content));
        }
        {
            let mut list = self
                .list
                .0
                .lock()
                .map_err(|_| ToolError::failed("the todo list is poisoned"))?;
            list.clone_from(&todos);
        }
        ctx.emit_pack("todo", TodoUpdated { todos });
        Ok(ToolOutput::text(summary))
    }
}
