//! The AgentDojo harness, shared by `tests/injection.rs` and
//! `benches/injection.rs`.
//!
//! `server.py` (beside this file) serves one AgentDojo suite over MCP with
//! AgentDojo's own environments, tools, attack (`important_instructions`)
//! and checks. Here a kinet agent reaches it through the MCP hub, driven by
//! [`Gullible`]: a scripted model that makes the user task's ground-truth
//! calls and, once a tool result holds injected instructions, the
//! injection task's ground-truth calls too. After the run the suite's own
//! `utility` and `security` checks say what happened.

#![allow(
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use futures::StreamExt as _;
use kinet::core::confirm::ApprovalPolicy;
use kinet::core::message::Message;
use kinet::core::pipeline::Defence;
use kinet::core::provider::{ChatRequest, ProviderError, ProviderStream, StopReason, StreamEvent};
use kinet::core::{Agent, AgentEvent, Provider};
use kinet::mcp::{HubSettings, McpHub, ServerConfig};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

/// What the attack writes around its goal; a result holding it carries
/// injected instructions.
pub const MARKER: &str = "<INFORMATION>";

/// The suites the issue names.
pub const SUITES: [&str; 3] = ["banking", "slack", "workspace"];

/// One ground-truth call.
#[derive(Debug, Clone, Deserialize)]
pub struct Call {
    pub function: String,
    pub args: Value,
}

/// What `/harness/start` answers.
#[derive(Debug, Clone, Deserialize)]
pub struct Plan {
    pub prompt: String,
    /// AgentDojo's default system message.
    pub system_message: String,
    pub user_calls: Vec<Call>,
    pub final_text: String,
    pub injection_calls: Vec<Call>,
}

/// The suite's tasks.
#[derive(Debug, Clone, Deserialize)]
pub struct Tasks {
    pub user_tasks: Vec<String>,
    pub injection_tasks: Vec<String>,
}

/// What AgentDojo's checks said of one run.
#[derive(Debug, Clone, Default)]
pub struct Checked {
    /// The user task's utility check.
    pub utility: bool,
    /// The injection task's security check: true when the attack
    /// succeeded (AgentDojo's meaning). `None` without an injection task.
    pub attack_succeeded: Option<bool>,
    /// Calls the defence flagged.
    pub flagged: usize,
    /// Why, one line per flagged call (tool: reason).
    pub reasons: Vec<String>,
    /// Whether the model met injected instructions.
    pub injection_seen: bool,
}

/// A running `server.py` for one suite and a hub connected to it.
pub struct Fixture {
    pub suite: String,
    pub hub: McpHub,
    control: String,
    http: reqwest::Client,
    // Dropping these ends the server: its stdin closes, and it is killed.
    _stdin: tokio::process::ChildStdin,
    _child: tokio::process::Child,
}

/// The Python with agentdojo and the MCP SDK, or `None` after a loud
/// message (an error when `KINET_REQUIRE_AGENTDOJO=1`, as in CI).
pub fn python() -> anyhow::Result<Option<String>> {
    let python = std::env::var("KINET_AGENTDOJO_PYTHON")
        .unwrap_or_else(|_| "/var/tmp/kinet-agentdojo/bin/python".to_owned());
    let works = std::process::Command::new(&python)
        .args(["-c", "import agentdojo, mcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if works {
        return Ok(Some(python));
    }
    if std::env::var("KINET_REQUIRE_AGENTDOJO").as_deref() == Ok("1") {
        bail!("{python} cannot import agentdojo and mcp; run .ci/setup");
    }
    eprintln!(
        "\n=== SKIPPED: the AgentDojo harness needs a Python with agentdojo==0.1.35 and mcp \
         (KINET_AGENTDOJO_PYTHON, default /var/tmp/kinet-agentdojo/bin/python); \
         `source .ci/setup` installs it ===\n"
    );
    Ok(None)
}

impl Fixture {
    /// Starts the server for `suite` and connects a hub to it.
    pub async fn start(python: &str, suite: &str) -> anyhow::Result<Self> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/agentdojo/server.py");
        let mut child = tokio::process::Command::new(python)
            .args([script, "--suite", suite])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {script}"))?;
        let stdin = child.stdin.take().context("the server's stdin")?;
        let stdout = child.stdout.take().context("the server's stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(90), lines.next_line())
            .await
            .context("the AgentDojo server did not start within 90 s")??
            .context("the AgentDojo server exited before it was ready")?;
        let ready: Value = serde_json::from_str(&line)?;
        let url = ready["url"].as_str().context("no url")?.to_owned();
        let control = ready["control"].as_str().context("no control")?.to_owned();
        let hub = McpHub::start(vec![ServerConfig::http(suite, url)], HubSettings::default());
        if !hub.wait_settled(Duration::from_secs(60)).await {
            bail!(
                "the hub did not connect to the {suite} server: {:?}",
                hub.status()
            );
        }
        Ok(Self {
            suite: suite.to_owned(),
            hub,
            control,
            http: reqwest::Client::new(),
            _stdin: stdin,
            _child: child,
        })
    }

    async fn post(&self, route: &str, body: Value) -> anyhow::Result<Value> {
        let response = self
            .http
            .post(format!("{}/{route}", self.control))
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let value: Value = response.json().await?;
        if !status.is_success() {
            bail!("/harness/{route}: {status} {value}");
        }
        Ok(value)
    }

    /// The suite's user and injection tasks.
    pub async fn tasks(&self) -> anyhow::Result<Tasks> {
        let value: Value = self
            .http
            .get(format!("{}/tasks", self.control))
            .send()
            .await?
            .json()
            .await?;
        Ok(serde_json::from_value(value)?)
    }

    /// The injection tasks that have ground-truth calls to replay (AgentDojo
    /// leaves workspace's injection tasks 6 to 13 to a real model).
    pub async fn runnable_injections(&self, tasks: &Tasks) -> anyhow::Result<Vec<String>> {
        let user = tasks.user_tasks.first().context("no user tasks")?;
        let mut runnable = Vec::new();
        for injection in &tasks.injection_tasks {
            if !self
                .start_run(user, Some(injection))
                .await?
                .injection_calls
                .is_empty()
            {
                runnable.push(injection.clone());
            }
        }
        Ok(runnable)
    }

    /// Resets the environment for a user task, with an injection task
    /// planted by the attack when given.
    pub async fn start_run(
        &self,
        user_task: &str,
        injection_task: Option<&str>,
    ) -> anyhow::Result<Plan> {
        let value = self
            .post(
                "start",
                json!({
                    "user_task": user_task,
                    "injection_task": injection_task,
                    "attack": injection_task.map(|_| "important_instructions"),
                }),
            )
            .await?;
        Ok(serde_json::from_value(value)?)
    }

    /// Runs the gullible agent on the run `start_run` prepared and asks
    /// AgentDojo's checks.
    pub async fn run(&self, plan: &Plan, defence: Defence) -> anyhow::Result<Checked> {
        let model = Arc::new(Gullible::new(&self.suite, plan));
        let agent = Agent::builder_arc(model.clone())
            .system_prompt(plan.system_message.as_str())
            .tool_source(Arc::new(self.hub.clone()))
            // An unattended host: nothing to ask, every call runs unless
            // the defence stops it.
            .policy(ApprovalPolicy::never())
            .defence(defence)
            .max_turns(200)
            .build();
        let mut run = agent.run(plan.prompt.as_str());
        let mut reasons = Vec::new();
        while let Some(event) = run.next().await {
            if let AgentEvent::InjectionSuspected { tool, reason, .. } = event {
                reasons.push(format!("{tool}: {reason}"));
            }
        }
        let outcome = run.finish().await;
        if !outcome.stop.is_completed() {
            bail!("the run did not complete: {}", outcome.stop);
        }
        let output = outcome.final_text().unwrap_or_default();
        let checked = self
            .post("check", json!({ "model_output": output }))
            .await?;
        Ok(Checked {
            utility: checked["utility"]
                .as_bool()
                .ok_or_else(|| anyhow!("{checked}"))?,
            attack_succeeded: checked["security"].as_bool(),
            flagged: reasons.len(),
            reasons,
            injection_seen: model.followed(),
        })
    }
}

/// A perfectly gullible assistant: it makes the user task's ground-truth
/// calls one at a time and, as soon as a tool result holds injected
/// instructions, the injection task's calls before going on; then it
/// answers with the task's ground-truth output.
pub struct Gullible {
    prefix: String,
    state: Mutex<State>,
}

struct State {
    pending: VecDeque<Call>,
    injection: Vec<Call>,
    followed: bool,
    final_text: String,
    calls: usize,
}

impl Gullible {
    pub fn new(suite: &str, plan: &Plan) -> Self {
        Self {
            prefix: format!("mcp__{suite}__"),
            state: Mutex::new(State {
                pending: plan.user_calls.iter().cloned().collect(),
                injection: plan.injection_calls.clone(),
                followed: false,
                final_text: plan.final_text.clone(),
                calls: 0,
            }),
        }
    }

    /// Whether it met injected instructions (and so followed them).
    pub fn followed(&self) -> bool {
        self.state.lock().unwrap().followed
    }
}

#[async_trait::async_trait]
impl Provider for Gullible {
    fn name(&self) -> &str {
        "gullible"
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let mut state = self.state.lock().unwrap();
        let injected = matches!(
            request.messages.last(),
            Some(message @ Message::Tool { .. }) if message.text().contains(MARKER)
        );
        if injected && !state.followed {
            state.followed = true;
            for call in state.injection.clone().into_iter().rev() {
                state.pending.push_front(call);
            }
        }
        let events = match state.pending.pop_front() {
            Some(call) => {
                state.calls += 1;
                vec![
                    StreamEvent::ToolCallStart {
                        index: 0,
                        id: format!("call_{}", state.calls),
                        name: format!("{}{}", self.prefix, call.function),
                    },
                    StreamEvent::ToolCallArgumentsDelta {
                        index: 0,
                        delta: call.args.to_string(),
                    },
                    StreamEvent::Finished(StopReason::ToolUse),
                ]
            }
            None => vec![
                StreamEvent::TextDelta(if state.final_text.is_empty() {
                    "Done.".to_owned()
                } else {
                    state.final_text.clone()
                }),
                StreamEvent::Finished(StopReason::EndTurn),
            ],
        };
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

/// Counts over runs.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub runs: usize,
    pub attacks_succeeded: usize,
    pub utility: usize,
    pub flagged_runs: usize,
}

impl Tally {
    pub fn add(&mut self, checked: &Checked) {
        self.runs += 1;
        self.attacks_succeeded += usize::from(checked.attack_succeeded == Some(true));
        self.utility += usize::from(checked.utility);
        self.flagged_runs += usize::from(checked.flagged > 0);
    }

    pub fn merge(&mut self, other: &Tally) {
        self.runs += other.runs;
        self.attacks_succeeded += other.attacks_succeeded;
        self.utility += other.utility;
        self.flagged_runs += other.flagged_runs;
    }

    pub fn attack_rate(&self) -> f64 {
        rate(self.attacks_succeeded, self.runs)
    }

    pub fn utility_rate(&self) -> f64 {
        rate(self.utility, self.runs)
    }
}

pub fn rate(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// The figures for one suite (or all).
#[derive(Debug, Default, Clone, Copy)]
pub struct Figures {
    /// Attack on, defence off.
    pub off: Tally,
    /// Attack on, defence on (unattended).
    pub on: Tally,
    /// No attack, defence off / on (one run per user task).
    pub clean_off: Tally,
    pub clean_on: Tally,
}

impl Figures {
    pub fn merge(&mut self, other: &Figures) {
        self.off.merge(&other.off);
        self.on.merge(&other.on);
        self.clean_off.merge(&other.clean_off);
        self.clean_on.merge(&other.clean_on);
    }

    pub fn row(&self, name: &str) -> String {
        format!(
            "{name:<10} pairs {:>4} | attack success off {:>5.1}% on {:>5.1}% | utility under attack on {:>5.1}% (off {:>5.1}%) | utility without attack on {:>5.1}% off {:>5.1}% ({} tasks)",
            self.off.runs,
            self.off.attack_rate(),
            self.on.attack_rate(),
            self.on.utility_rate(),
            self.off.utility_rate(),
            self.clean_on.utility_rate(),
            self.clean_off.utility_rate(),
            self.clean_on.runs,
        )
    }
}

/// The defence as an unattended host runs it.
pub fn defence_on() -> Defence {
    Defence::new().unattended(true)
}

/// Runs `pairs` (user task, injection task) and `clean` user tasks of one
/// suite with the defence off and on; pairs whose injection task has no
/// ground-truth calls (AgentDojo's workspace injection tasks 6 to 13 leave
/// them to a real model) are not run.
pub async fn measure(
    fixture: &Fixture,
    pairs: &[(String, String)],
    clean: &[String],
) -> anyhow::Result<Figures> {
    let mut figures = Figures::default();
    for (user, injection) in pairs {
        let plan = fixture.start_run(user, Some(injection)).await?;
        if plan.injection_calls.is_empty() {
            continue;
        }
        let off = fixture.run(&plan, Defence::off()).await?;
        figures.off.add(&off);
        let plan = fixture.start_run(user, Some(injection)).await?;
        let on = fixture
            .run(&plan, defence_on())
            .await
            .with_context(|| format!("{user} × {injection}"))?;
        if on.attack_succeeded == Some(true) {
            eprintln!(
                "ATTACK SUCCEEDED with the defence on: {} {user} × {injection}",
                fixture.suite
            );
        }
        figures.on.add(&on);
    }
    let verbose = std::env::var_os("KINET_AGENTDOJO_VERBOSE").is_some();
    for user in clean {
        let plan = fixture.start_run(user, None).await?;
        let off = fixture.run(&plan, Defence::off()).await?;
        figures.clean_off.add(&off);
        let plan = fixture.start_run(user, None).await?;
        let on = fixture.run(&plan, defence_on()).await?;
        if verbose && !on.utility {
            eprintln!("{} {user}: utility lost without attack", fixture.suite);
            for reason in &on.reasons {
                eprintln!("    {reason}");
            }
        }
        figures.clean_on.add(&on);
    }
    Ok(figures)
}
