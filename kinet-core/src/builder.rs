//! The [`AgentBuilder`](crate::AgentBuilder)'s groups of settings, one
//! value per concern; each documents its defaults.
//!
//! | group | what it holds |
//! |---|---|
//! | [`Approval`] | the approval policy, rules as data, the host's handler, the injection defence |
//! | [`Workspace`] | the working directory, workspace roots, protected names |
//! | [`Calls`] | hooks, the host's own pipeline stages, layers, truncation, one call at a time |
//! | [`Limits`] | turns per run, a cost budget, a time limit per tool call |
//! | [`Sessions`] | the journal, the context-window policy |
//! | [`SubAgents`] | on or off, nesting depth, named engines |
//! | [`Telemetry`] | span names, content recording, prices |

pub use crate::agent::{Approval, Calls, Engine, Limits, Sessions, SubAgents, Workspace};
pub use crate::telemetry::Telemetry;
