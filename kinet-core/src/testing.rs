//! Offline, deterministic providers for examples and tests.

pub use crate::scripted::{
    Expectation, RecordedRequest, ScriptError, ScriptedCall, ScriptedProvider, ScriptedTurn,
};

/// Says that a test did not run, and why, where the person running the
/// tests sees it: straight to the process's standard error, past the test
/// harness's output capture (which hides `eprintln!` of passing tests).
/// For tests that need a program that may be missing (a browser, a model
/// server); `what` names it and how to install it.
///
/// ```
/// kinet_core::testing::skipped("Chromium is not installed (apt install chromium)");
/// ```
pub fn skipped(what: &str) {
    use std::io::Write;
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("\n*** SKIPPED: {what} ***\n").as_bytes());
}
