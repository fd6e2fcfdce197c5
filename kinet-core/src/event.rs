//! What a run reports: events, stop reasons, outcomes, errors.

pub use crate::data::error::AgentError;
pub use crate::data::event::{AgentEvent, PackEvent, RunOutcome, RunStop};
