//! What a run reports: events, stop reasons, outcomes (typed ones from
//! [`Agent::run_typed`](crate::Agent::run_typed)), errors.

pub use crate::agent::{Typed, TypedError};
pub use crate::data::error::AgentError;
pub use crate::data::event::{AgentEvent, PackEvent, RunOutcome, RunStop};
pub use crate::data::repair::Repair;
