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

/// `value` with every object's keys in sorted order, for snapshots and
/// comparisons that must not depend on the order JSON maps keep
/// (`serde_json`'s `preserve_order`, which some dependencies turn on for
/// the whole build, keeps insertion order).
///
/// ```
/// let value = serde_json::json!({"b": 1, "a": {"d": 2, "c": 3}});
/// let sorted = kinet_core::testing::sorted_keys(value);
/// assert_eq!(sorted.to_string(), r#"{"a":{"c":3,"d":2},"b":1}"#);
/// ```
pub fn sorted_keys(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let sorted: std::collections::BTreeMap<String, serde_json::Value> =
                map.into_iter().map(|(k, v)| (k, sorted_keys(v))).collect();
            serde_json::Value::Object(sorted.into_iter().collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted_keys).collect())
        }
        other => other,
    }
}
