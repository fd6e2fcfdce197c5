//! SQLite-backed memory for kinet agents: facts, blocks, recall, knowledge-graph triples.
//!
//! This crate is a placeholder in the workspace layout; its tools land in
//! their own issues. It depends only on `kinet-core`, like every pack.

pub use kinet_core;
