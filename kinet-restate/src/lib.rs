//! Durable kinet runs on [Restate](https://restate.dev): an agent served
//! as a Restate virtual object keyed by conversation, each model call and
//! each tool call a journaled step, and approvals that wait durably until
//! a host answers them from any process.
//!
//! ```no_run
//! use kinet_core::builder::Workspace;
//! use kinet_core::deferred::Decisions;
//! use kinet_core::{Agent, ApprovalPolicy, Provider, Toolset};
//! use kinet_restate::{AgentObject, Client, ClientError};
//!
//! // The service; register http://127.0.0.1:9080 with Restate's admin API.
//! async fn serve(provider: impl Provider + 'static, tools: Toolset) -> std::io::Result<()> {
//!     // Called once per run with the journaled model: build the agent as usual.
//!     let object = AgentObject::new(provider, move |model| {
//!         Agent::builder(model)
//!             .tools(tools.clone())
//!             .workspace(Workspace::new().cwd("/srv/repo").root("/srv/repo"))
//!             .policy(ApprovalPolicy::ask())
//!     });
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:9080").await?;
//!     object.serve_on(listener, std::future::pending::<()>()).await;
//!     Ok(())
//! }
//!
//! // A host, through Restate's ingress: start a run, answer its approvals.
//! async fn host() -> Result<(), ClientError> {
//!     let client = Client::new("http://127.0.0.1:8080");
//!     let run = client.send("alice", "Create notes.txt saying hi", None).await?;
//!     // Later, from this process or another:
//!     if let Some(waiting) = client.pending("alice").await? {
//!         let decisions = waiting.pending.iter().fold(Decisions::new(), |decisions, request| {
//!             decisions.allow(request.call_id.clone())
//!         });
//!         client.decide("alice", &decisions).await?;
//!     }
//!     let reply = client.attach(&run).await?; // the answer's text, how it ended
//!     let answer: Option<String> = reply.text;
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! # Where to go next
//!
//! - [`AgentObject`]: the service (`KinetAgent`) and its handlers
//!   (`prompt`, `pending`, `session`); one reply per conversation at a
//!   time, a turn's tool calls one at a time; [`AgentObject::events`] to
//!   watch runs; [`AgentObject::endpoint`] for the retry settings.
//! - [`Client`]: a host's calls through the ingress; [`Reply`] and
//!   [`Waiting`] are what they return.
//!
//! When to use it: plain kinet with a session store resumes a conversation
//! after a crash only when something calls
//! [`Agent::resume`](kinet_core::Agent::resume), and reruns a tool that was
//! running. Restate retries the run by itself, never redoes a finished
//! step, and keeps a wait for a person across restarts. The price is a
//! Restate server and a journal write per step (see `BENCHMARKS.md`).

mod client;
mod object;
mod steps;

pub use client::{Client, ClientError};
pub use object::{AgentObject, ConversationEvent, Reply, Waiting};
