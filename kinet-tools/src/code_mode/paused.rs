//! A script paused at a call waiting for approval, as the run saves it:
//! the interpreter's state (monty's dump, in base64), what the script had
//! printed, and how many tool calls it had made.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kinet_core::ToolError;
use serde::{Deserialize, Serialize};

use super::script::Start;

/// The saved form.
#[derive(Serialize, Deserialize)]
struct Saved {
    /// monty's dump of the paused interpreter, base64.
    interpreter: String,
    /// What the script printed before it paused.
    printed: String,
    /// The tool calls it made before the one it paused at.
    calls: usize,
}

/// The saved state of a script that paused at its call number `calls + 1`.
pub(super) fn save(dump: &[u8], printed: &str, calls: usize) -> serde_json::Value {
    let saved = Saved {
        interpreter: STANDARD.encode(dump),
        printed: printed.to_owned(),
        calls,
    };
    serde_json::to_value(saved).unwrap_or_default()
}

/// Where a paused script goes on, what it had printed and the calls it had
/// made.
pub(super) fn load(
    saved: &serde_json::Value,
    call_id: &str,
) -> Result<(Start, String, usize), ToolError> {
    let unreadable = |why: String| {
        ToolError::failed(format!(
            "the paused script of call {call_id} cannot be continued ({why}); run it again"
        ))
    };
    let saved = Saved::deserialize(saved).map_err(|e| unreadable(e.to_string()))?;
    let bytes = STANDARD
        .decode(saved.interpreter.as_bytes())
        .map_err(|e| unreadable(e.to_string()))?;
    let dump = monty::Dump::load(&bytes).map_err(|e| unreadable(e.to_string()))?;
    match dump.state {
        monty::Session::Running(progress) => {
            Ok((Start::Paused(progress), saved.printed, saved.calls))
        }
        _ => Err(unreadable("it is not a paused script".into())),
    }
}
