//! Tool packs for kinet agents: shell, files, grep, glob, git, web, todo, sub-agents, skills.
//!
//! This crate is a placeholder in the workspace layout; its tools land in
//! their own issues. It depends only on `kinet-core`, like every pack.

pub use kinet_core;
