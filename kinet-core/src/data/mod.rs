//! Plain data below the runtime: the conversation (the run state), tool
//! outputs and errors, tool specs and truncation policies, and what goes
//! to and comes from a model.
//!
//! It imports only the public data modules ([`message`](crate::message),
//! [`deferred`](crate::deferred), [`provenance`](crate::provenance)),
//! which import nothing of the runtime, so every runtime module can use it
//! without an import circle. Events and run outcomes are in
//! [`event`](crate::event); the history repair the loop does is in the
//! engine.

pub(crate) mod conversation;
pub(crate) mod error;
pub(crate) mod model;
pub(crate) mod output;
pub(crate) mod spec;
pub(crate) mod truncate;
