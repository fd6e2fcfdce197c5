//! Provenance: the text a conversation's model has read and who wrote it,
//! for the injection defence ([`pipeline::Defence`](crate::pipeline::Defence)).

pub use crate::data::provenance::{Provenance, Seen, Trust};
