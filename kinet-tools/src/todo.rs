//! `todo_write`: the agent's shared checklist.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use kinet_core::{TodoItem, TodoStatus, Tool, ToolCtx, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

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

/// Replaces the agent's todo list, checks it (at most one item in progress,
/// no empty items), tells the host through a `TodoUpdated` event, and
/// returns a compact summary. It changes only the agent's own list, so it is
/// read-only for approval purposes.
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

    fn read_only(&self, _: &TodoWriteArgs) -> bool {
        true
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
        ctx.todos_updated(todos);
        Ok(ToolOutput::text(summary))
    }
}
