//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

/// Whether git is installed; says so loudly when not.
pub fn have_git() -> bool {
    let found = std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        kinet_core::testing::skipped("git is not installed (.ci/test installs it)");
    }
    found
}

/// The text of the tool result for `call_id` in a run's conversation, and
/// whether it is an error.
pub fn result_text(outcome: &kinet_core::RunOutcome, call_id: &str) -> (String, bool) {
    outcome
        .conversation
        .messages
        .iter()
        .find_map(|m| match m {
            kinet_core::Message::Tool {
                tool_call_id,
                is_error,
                ..
            } if tool_call_id == call_id => Some((m.text(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {call_id}"))
}
