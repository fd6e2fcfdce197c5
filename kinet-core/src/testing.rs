//! Offline, deterministic providers for examples and tests.

pub use crate::scripted::{
    Expectation, RecordedRequest, ScriptError, ScriptedCall, ScriptedProvider, ScriptedTurn,
};
