//! Other coding agents as `dispatch_agent` engines: kinet as the ACP
//! client. See [`AcpEngine`].

mod client;
mod config;
mod events;
mod process;
mod serve;
mod session;
mod terminals;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kinet_core::sandbox::EnvPolicy;
use kinet_core::tool::engine::{EventSink, ExternalEngine, SubAgentRequest};
use kinet_core::{ToolCtx, ToolError};

pub use config::{EngineConfigError, EngineTable};
pub use events::{EnginePlan, EnginePlanEntry, EngineStarted};

use process::EngineProcess;
use serve::Served;
use session::{Failure, Task};

/// Another coding agent that speaks the Agent Client Protocol, run as a
/// read-only `dispatch_agent` engine: Gemini CLI, Claude Code or Codex
/// through their ACP adapters, opencode (`opencode acp`), or kinet itself
/// (`agent --acp`).
///
/// Each task starts the engine's process, gives it the task as one
/// prompt in a new session in the call's working directory, streams its
/// updates into the parent run's events (text, thoughts, tool calls, its
/// plan as an [`EnginePlan`] pack event, its start as [`EngineStarted`]),
/// and returns its answer's text.
/// Then the process and everything it started are stopped.
///
/// The engine does its own I/O, so kinet confines its process: in
/// kinet's sandbox ([`kinet_core::sandbox`]) the workspace is read-only,
/// writes go only to a private directory (its `HOME`, `TMPDIR` and XDG
/// directories, removed afterwards), the network reaches only the hosts
/// named with [`allow_hosts`](Self::allow_hosts) (its model endpoint),
/// through the sandbox's proxy, and it sees only the environment
/// [`EnvPolicy::core`] passes plus what [`env`](Self::env) sets. What it
/// asks of kinet is answered as a read-only client: file reads through
/// kinet's confined workspace, no file writes, permission for reading
/// kinds of calls only, and its terminals run by kinet's command planner
/// in the same read-only sandbox. Each refusal reaches the host as a
/// warning event, and the model reads them after the answer.
///
/// Cancelling the call sends `session/cancel`, waits up to
/// [`cancel_grace`](Self::cancel_grace), then kills the engine's process
/// tree; a timeout (the call's future dropped) kills it at once. A
/// malformed message or a broken connection ends the call with an error
/// naming the engine; the parent's run goes on.
///
/// ```no_run
/// use kinet_acp::AcpEngine;
/// use kinet_core::Agent;
/// use kinet_core::builder::SubAgents;
/// # use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
/// # let provider = ScriptedProvider::new([ScriptedTurn::text("hi")]);
///
/// let opencode = AcpEngine::command("opencode", ["acp"])
///     .allow_hosts(["127.0.0.1:8080"]) // its model server
///     .env("OPENCODE_DISABLE_AUTOUPDATE", "1");
/// let agent = Agent::builder(provider)
///     .sub_agents(SubAgents::new().engine("opencode", opencode))
///     .build();
/// # let _ = agent;
/// ```
#[derive(Debug, Clone)]
pub struct AcpEngine {
    program: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    pass_env: Vec<String>,
    hosts: Vec<String>,
    files: Vec<(String, String)>,
    start_timeout: Duration,
    cancel_grace: Duration,
    confined: bool,
    offers: Offers,
}

/// What kinet offers an engine as its client.
#[derive(Debug, Clone, Copy)]
pub(super) struct Offers {
    pub(super) files: bool,
    pub(super) terminals: bool,
}

impl AcpEngine {
    /// The engine started as `program` with `args` (found on `PATH`
    /// unless a path; `{home}` in an argument becomes its private home). Defaults: no extra variables, no network, start
    /// timeout 60 s, cancel grace 200 ms, confined, file reads and
    /// terminals offered.
    pub fn command<I, S>(program: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            pass_env: Vec::new(),
            hosts: Vec::new(),
            files: Vec::new(),
            start_timeout: Duration::from_secs(60),
            cancel_grace: Duration::from_millis(200),
            confined: true,
            offers: Offers {
                files: true,
                terminals: true,
            },
        }
    }

    /// Sets a variable for the engine (an API key, its model's base
    /// URL). `{home}` in the value becomes its private home directory.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Also passes on these variables of the host's own environment
    /// (default: only [`kinet_core::sandbox::CORE_VARIABLES`]).
    pub fn pass_env<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.pass_env.extend(names.into_iter().map(Into::into));
        self
    }

    /// Lets the engine reach these hosts (its model endpoint), and no
    /// others, through the sandbox's proxy; entries as
    /// [`SandboxPolicy::allow_hosts`](kinet_core::sandbox::SandboxPolicy::allow_hosts)
    /// takes them (`api.anthropic.com`, `127.0.0.1:8080`). Default: no
    /// network at all.
    pub fn allow_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.hosts.extend(hosts.into_iter().map(Into::into));
        self
    }

    /// Writes a file into the engine's private home before it starts (its
    /// configuration: `.config/opencode/opencode.json`); `relative` is a
    /// plain relative path, and `{home}` in `contents` becomes the home's
    /// path. Default: none.
    pub fn home_file(mut self, relative: impl Into<String>, contents: impl Into<String>) -> Self {
        self.files.push((relative.into(), contents.into()));
        self
    }

    /// How long the engine may take to answer `initialize`. Default 60 s.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// How long a cancelled engine may take to end its turn before it is
    /// killed. Default 200 ms.
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Whether kinet's sandbox confines the engine (default: yes). Where
    /// the machine has no sandbox, a confined engine does not start; a
    /// host that accepts an unconfined engine (its own I/O unchecked)
    /// turns this off.
    pub fn confined(mut self, confined: bool) -> Self {
        self.confined = confined;
        self
    }

    /// Whether kinet offers the engine its file reads (`fs/read_text_file`
    /// through kinet's confined workspace). Default: yes. Writes are never
    /// offered.
    pub fn serve_files(mut self, offer: bool) -> Self {
        self.offers.files = offer;
        self
    }

    /// Whether kinet offers the engine terminals (`terminal/*`, its
    /// commands planned and run by kinet in the read-only sandbox).
    /// Default: yes. Some engines then run their commands through kinet
    /// instead of themselves; either way they run confined.
    pub fn serve_terminals(mut self, offer: bool) -> Self {
        self.offers.terminals = offer;
        self
    }

    /// The program the engine starts as.
    pub fn program(&self) -> &str {
        &self.program
    }

    fn env_policy(&self) -> EnvPolicy {
        self.pass_env
            .iter()
            .fold(EnvPolicy::core(), |policy, name| policy.allow(name.clone()))
    }

    /// Runs one task; `name` is the engine's registered name.
    async fn task(
        &self,
        name: &str,
        request: &SubAgentRequest,
        parent: &ToolCtx,
        events: EventSink,
    ) -> Result<String, ToolError> {
        let failed = |why: String| ToolError::failed(format!("engine `{name}`: {why}"));
        let cancel = parent.cancellation().child_token();
        let started = std::time::Instant::now();
        let mut process = EngineProcess::start(self, parent).map_err(failed)?;
        let updates = Arc::new(events::Updates::new(events));
        let served = Arc::new(Served::new(
            name.to_owned(),
            parent.clone(),
            Arc::clone(&updates),
        ));
        let terminals = Arc::new(terminals::Terminals::new(
            parent.clone(),
            process.private_path.clone(),
            process.env.clone(),
        ));
        let (Some(stdin), Some(stdout)) = (process.stdin.take(), process.stdout.take()) else {
            process.stop().await;
            return Err(failed("its standard streams could not be opened".into()));
        };
        let task = Task {
            prompt: request.prompt.clone(),
            cwd: parent.cwd().to_path_buf(),
            start_timeout: self.start_timeout,
            cancel_grace: self.cancel_grace,
            cancel,
            updates: Arc::clone(&updates),
            started,
            offers: self.offers,
        };
        let outcome = session::converse(
            stdin,
            stdout,
            Arc::clone(&served),
            Arc::clone(&terminals),
            task,
        )
        .await;
        let said = process.said();
        // Its terminals and its process tree end with the task.
        drop(terminals);
        process.stop().await;
        let text = updates.text();
        let strays = updates.strays();
        match outcome {
            Ok(()) if strays > 0 => Err(failed(format!(
                "it sent {strays} messages naming a session kinet did not open"
            ))),
            Ok(()) => Ok(report(text, &served.refusals())),
            Err(Failure::Cancelled) => Err(ToolError::cancelled(format!(
                "engine `{name}` was cancelled"
            ))),
            Err(Failure::NoStart(limit)) => Err(failed(with_stderr(
                format!("no answer to `initialize` within {} s", limit.as_secs()),
                &said,
            ))),
            Err(Failure::Protocol(why)) => Err(failed(with_stderr(why, &said))),
            Err(Failure::Stopped(reason)) => Ok(report(
                format!("{text}\n\n(the engine stopped: {reason})"),
                &served.refusals(),
            )),
        }
    }
}

/// The error kinet answers an engine's request it will not serve with:
/// invalid params, `message` as its data (what the engine's log shows).
pub(super) fn invalid(message: impl Into<String>) -> agent_client_protocol::Error {
    agent_client_protocol::Error::invalid_params().data(serde_json::json!(message.into()))
}

/// The answer as the model reads it: the engine's text, then what kinet
/// refused it.
fn report(text: String, refusals: &[String]) -> String {
    let mut report = text;
    if !refusals.is_empty() {
        report.push_str("\n\n(kinet refused the engine, which runs read-only:");
        for refusal in refusals {
            report.push_str("\n- ");
            report.push_str(refusal);
        }
        report.push(')');
    }
    report
}

fn with_stderr(why: String, said: &str) -> String {
    if said.is_empty() {
        why
    } else {
        format!("{why}; it said: {said}")
    }
}

#[async_trait]
impl ExternalEngine for AcpEngine {
    async fn run(
        &self,
        request: &SubAgentRequest,
        parent: &ToolCtx,
        events: EventSink,
    ) -> Result<String, ToolError> {
        let name = request
            .engine
            .clone()
            .unwrap_or_else(|| self.program.clone());
        self.task(&name, request, parent, events).await
    }
}
