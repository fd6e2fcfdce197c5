//! Plain data: the conversation (the run state), tool outputs and errors,
//! tool specs, what goes to and comes from a model, events and run
//! outcomes.
//!
//! It imports only the public data modules ([`message`](crate::message),
//! [`deferred`](crate::deferred), [`provenance`](crate::provenance)),
//! which import nothing of the runtime, so every runtime module can use it
//! without an import circle.

pub(crate) mod conversation;
pub(crate) mod error;
pub(crate) mod event;
pub(crate) mod model;
pub(crate) mod output;
pub(crate) mod repair;
pub(crate) mod spec;
pub(crate) mod truncate;
