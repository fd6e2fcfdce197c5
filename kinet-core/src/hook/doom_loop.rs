//! [`DoomLoopGuard`]: stops a model that keeps making the same call.

use std::sync::Mutex;

use async_trait::async_trait;

use super::{BeforeTool, Hook};
use crate::message::ToolCall;

/// A hook that answers the model instead of running a call when the same
/// tool was called with identical arguments `limit` times in a row
/// (default 3): the `limit`-th identical call and every one after it get a
/// message telling the model to change course. Arguments are compared as
/// JSON values, so spacing and key order do not matter. A different call
/// starts the count again.
///
/// Calls are counted in the order the agent's pipeline sees them; give
/// each agent its own guard.
///
/// ```
/// use kinet_core::hook::DoomLoopGuard;
///
/// let guard = DoomLoopGuard::new(); // fires on the 3rd identical call
/// let strict = DoomLoopGuard::with_limit(2);
/// # let _ = (guard, strict);
/// ```
#[derive(Debug)]
pub struct DoomLoopGuard {
    limit: u32,
    last: Mutex<Option<(String, serde_json::Value, u32)>>,
}

impl Default for DoomLoopGuard {
    fn default() -> Self {
        Self::with_limit(3)
    }
}

impl DoomLoopGuard {
    /// A guard that fires on the 3rd identical call in a row.
    pub fn new() -> Self {
        Self::default()
    }

    /// A guard that fires on the `limit`-th identical call in a row (at
    /// least 2).
    pub fn with_limit(limit: u32) -> Self {
        Self {
            limit: limit.max(2),
            last: Mutex::new(None),
        }
    }
}

#[async_trait]
impl Hook for DoomLoopGuard {
    async fn before_tool_call(&self, call: &ToolCall) -> BeforeTool {
        let arguments = serde_json::from_str::<serde_json::Value>(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
        let Ok(mut last) = self.last.lock() else {
            return BeforeTool::Continue;
        };
        let count = match last.as_mut() {
            Some((name, args, count)) if *name == call.name && *args == arguments => {
                *count += 1;
                *count
            }
            _ => {
                *last = Some((call.name.clone(), arguments, 1));
                1
            }
        };
        if count >= self.limit {
            BeforeTool::Deny(format!(
                "not run: this is call {count} in a row to `{}` with the same arguments, and \
                 repeating it will not give a different result. Change the arguments, try \
                 another tool, or tell the user what is blocking you.",
                call.name
            ))
        } else {
            BeforeTool::Continue
        }
    }
}
