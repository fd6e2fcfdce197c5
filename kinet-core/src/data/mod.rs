//! Plain data: messages, tool outputs and errors, tool specs, what goes to
//! and comes from a model, events and run outcomes.
//!
//! This module is the leaf of the crate: it imports nothing else of
//! kinet-core, so every runtime module can use it without an import circle.

pub(crate) mod conversation;
pub(crate) mod dates;
pub(crate) mod deferred;
pub(crate) mod error;
pub(crate) mod event;
pub(crate) mod message;
pub(crate) mod model;
pub(crate) mod output;
pub(crate) mod provenance;
pub(crate) mod repair;
pub(crate) mod spec;
pub(crate) mod truncate;
