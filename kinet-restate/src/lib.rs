//! Durable kinet runs on [Restate](https://restate.dev): a kinet agent
//! served as a Restate virtual object keyed by conversation
//! ([`AgentObject`]), each model call and each tool call a journaled step,
//! approvals as awakeables a host resolves from anywhere ([`Client`]).
//!
//! When to use it: plain kinet with a session store (SQLite, PostgreSQL)
//! resumes a conversation after a crash, but only when something calls
//! [`Agent::resume`](kinet_core::Agent::resume) again, and a tool that was
//! running when the process died runs again. Restate brings the rest: it
//! retries the run by itself, one reply per conversation at a time with no
//! leases, finished steps are never redone, and a wait for a person
//! survives restarts of the service and of Restate's own nodes. The price
//! is a Restate server (one binary, or a cluster) and a journal write per
//! step (see BENCHMARKS.md).
//!
//! ```no_run
//! use kinet_core::Agent;
//! use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
//! use kinet_restate::AgentObject;
//!
//! # async fn serve() -> std::io::Result<()> {
//! let model = ScriptedProvider::new([ScriptedTurn::text("hello")]);
//! let object = AgentObject::new(model, |model| Agent::builder(model));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9080").await?;
//! // Register http://127.0.0.1:9080 with Restate's admin API, then call
//! // POST /KinetAgent/<conversation>/prompt {"text": "hi"} on its ingress.
//! object.serve_on(listener, std::future::pending::<()>()).await;
//! # Ok(())
//! # }
//! ```

mod client;
mod object;
mod steps;

pub use client::{Client, ClientError};
pub use object::{AgentObject, ConversationEvent, Reply, Waiting};
