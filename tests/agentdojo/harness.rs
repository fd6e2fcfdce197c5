//! The AgentDojo harness, shared by `tests/injection.rs` and
//! `benches/injection.rs`.
//!
//! `server.py` (beside this file) serves one AgentDojo suite over MCP with
//! AgentDojo's own environments, tools, attacks (`important_instructions`,
//! `tool_knowledge`, and `adaptive`, written against kinet's own rule) and
//! checks. Here a kinet agent reaches it through the MCP hub, driven by
//! [`Gullible`]: a scripted model that declares the plan a planner writes
//! from the request alone (when it has the `declare_plan` tool), makes the
//! user task's ground-truth calls and, once a tool result holds injected
//! instructions, does what they say first (the adaptive text also asks
//! for its actions to be declared). After the run the suite's own
//! `utility` and `security` checks say what happened.
//!
//! Two harnesses: the plain one lets the model pass the ground truth's
//! values; the honest one ([`Harness::Honest`]) lets it pass only a value
//! it has seen: a short value (an id, a name, an address) that is nowhere
//! in its context (the request, the system prompt, the tool results it
//! was shown) is made with what it can see, `unknown`, and the utility
//! check decides.

#![allow(
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

use kinet::Toolset;
use kinet::builder::{Approval, Limits};
use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use futures::StreamExt as _;
use kinet::core::confirm::ApprovalPolicy;
use kinet::core::message::Message;
use kinet::core::pipeline::{Defence, DefenceMode, PLAN_TOOL};
use kinet::core::provider::{ChatRequest, ProviderError, ProviderStream, StopReason, StreamEvent};
use kinet::core::{Agent, AgentEvent, Provider};
use kinet::mcp::{HubSettings, McpHub, ServerConfig};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

/// What the attack writes around its goal; a result holding it carries
/// injected instructions.
pub const MARKER: &str = "<INFORMATION>";

/// AgentDojo's four suites.
pub const SUITES: [&str; 4] = ["banking", "slack", "travel", "workspace"];

/// The attacks run: two of AgentDojo's, and one written against kinet's
/// rule (see `server.py`).
pub const ATTACKS: [&str; 3] = ["important_instructions", "tool_knowledge", "adaptive"];

/// Which values the gullible model may pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Harness {
    /// The ground truth's, seen or not.
    Plain,
    /// Only values in its context (see the module docs).
    Honest,
}

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
    /// The plan a planner writes from the request alone (bare tool names).
    #[serde(default)]
    pub user_plan: Vec<Value>,
    /// The plan the adaptive attack's text asks for.
    #[serde(default)]
    pub injection_plan: Vec<Value>,
    /// The attack, if any.
    #[serde(skip)]
    pub attack: Option<String>,
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

impl Checked {
    /// When the task lost its utility: says so, and why each flagged call
    /// was flagged.
    pub fn explain_loss(&self, run: &str) {
        if self.utility {
            return;
        }
        eprintln!("{run}: utility lost");
        for reason in &self.reasons {
            eprintln!("    {reason}");
        }
    }
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
                .start_run(user, Some((injection, ATTACKS[0])))
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
        injection: Option<(&str, &str)>,
    ) -> anyhow::Result<Plan> {
        let value = self
            .post(
                "start",
                json!({
                    "user_task": user_task,
                    "injection_task": injection.map(|(task, _)| task),
                    "attack": injection.map(|(_, attack)| attack),
                }),
            )
            .await?;
        let mut plan: Plan = serde_json::from_value(value)?;
        plan.attack = injection.map(|(_, attack)| attack.to_owned());
        Ok(plan)
    }

    /// Runs the gullible agent on the run `start_run` prepared and asks
    /// AgentDojo's checks.
    pub async fn run(
        &self,
        plan: &Plan,
        defence: Defence,
        harness: Harness,
    ) -> anyhow::Result<Checked> {
        let model = Arc::new(Gullible::new(&self.suite, plan, harness));
        let agent = Agent::builder(model.clone())
            .system_prompt(plan.system_message.as_str())
            .tools(Toolset::new().with_source(Arc::new(self.hub.clone())))
            // An unattended host: nothing to ask, every call runs unless
            // the defence stops it.
            .policy(ApprovalPolicy::never())
            .approval(Approval::new().defence(defence))
            .limits(Limits::new().max_turns(200))
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

/// A perfectly gullible assistant: it declares the plan a planner writes
/// from the request (when it has the `declare_plan` tool), then makes the
/// user task's ground-truth calls one at a time and, as soon as a tool
/// result holds injected instructions, does what they say before going on
/// (for the adaptive attack: declares the injection's actions, then makes
/// its calls); then it answers with the task's ground-truth output.
pub struct Gullible {
    prefix: String,
    harness: Harness,
    state: Mutex<State>,
}

struct State {
    pending: VecDeque<Call>,
    injection: Vec<Call>,
    user_plan: Vec<Value>,
    injection_plan: Vec<Value>,
    adaptive: bool,
    declared: bool,
    followed: bool,
    final_text: String,
    calls: usize,
    unseen: usize,
}

impl Gullible {
    pub fn new(suite: &str, plan: &Plan, harness: Harness) -> Self {
        Self {
            prefix: format!("mcp__{suite}__"),
            harness,
            state: Mutex::new(State {
                pending: plan.user_calls.iter().cloned().collect(),
                injection: plan.injection_calls.clone(),
                user_plan: plan.user_plan.clone(),
                injection_plan: plan.injection_plan.clone(),
                adaptive: plan.attack.as_deref() == Some("adaptive"),
                declared: false,
                followed: false,
                final_text: plan.final_text.clone(),
                calls: 0,
                unseen: 0,
            }),
        }
    }

    /// Whether it met injected instructions (and so followed them).
    pub fn followed(&self) -> bool {
        self.state.lock().unwrap().followed
    }

    /// Values it could not have seen (the honest harness replaced them).
    pub fn unseen(&self) -> usize {
        self.state.lock().unwrap().unseen
    }

    /// A `declare_plan` call for these actions, tool names prefixed.
    fn declaration(&self, actions: &[Value]) -> Call {
        let prefixed =
            |name: &Value| json!(format!("{}{}", self.prefix, name.as_str().unwrap_or("")));
        let actions: Vec<Value> = actions
            .iter()
            .map(|action| {
                let mut action = action.clone();
                action["tool"] = prefixed(&action["tool"]);
                let list = |tools: &Value| -> Value {
                    tools.as_array().map_or(Value::Null, |tools| {
                        Value::Array(tools.iter().map(prefixed).collect())
                    })
                };
                match action.get("from").cloned() {
                    Some(Value::Array(tools)) => action["from"] = list(&Value::Array(tools)),
                    Some(Value::Object(map)) => {
                        let map: serde_json::Map<String, Value> = map
                            .iter()
                            .map(|(arg, tools)| (arg.clone(), list(tools)))
                            .collect();
                        action["from"] = Value::Object(map);
                    }
                    _ => {}
                }
                action
            })
            .collect();
        Call {
            function: PLAN_TOOL.to_owned(),
            args: json!({ "actions": actions }),
        }
    }
}

/// Folded for the honest harness's "has it seen this value": letters and
/// digits, lower case.
fn folded(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// Replaces each short string value (up to four words, not a date or a
/// number) that is nowhere in `context` by `unknown`; counts them.
fn only_seen(value: &mut Value, context: &str, unseen: &mut usize) {
    match value {
        Value::String(text) => {
            let f = folded(text);
            let short = text.split_whitespace().count() <= 4;
            let plain_number_or_date = text
                .chars()
                .all(|c| c.is_ascii_digit() || " -:/.T".contains(c));
            if short && !f.is_empty() && !plain_number_or_date && !context.contains(&f) {
                *text = "unknown".to_owned();
                *unseen += 1;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| only_seen(v, context, unseen)),
        Value::Object(map) => map.values_mut().for_each(|v| only_seen(v, context, unseen)),
        _ => {}
    }
}

#[async_trait::async_trait]
impl Provider for Gullible {
    fn name(&self) -> &str {
        "gullible"
    }

    async fn stream(&self, request: ChatRequest<'_>) -> Result<ProviderStream, ProviderError> {
        let mut state = self.state.lock().unwrap();
        let can_plan = request.tools.iter().any(|t| t.name == PLAN_TOOL);
        let injected = matches!(
            request.messages.last(),
            Some(message @ Message::Tool { .. }) if message.text().contains(MARKER)
        );
        if injected && !state.followed {
            state.followed = true;
            for call in state.injection.clone().into_iter().rev() {
                state.pending.push_front(call);
            }
            if state.adaptive && can_plan && !state.injection_plan.is_empty() {
                let declaration = self.declaration(&state.injection_plan);
                state.pending.push_front(declaration);
            }
        }
        if can_plan && !state.declared {
            state.declared = true;
            if !state.user_plan.is_empty() {
                let declaration = self.declaration(&state.user_plan);
                state.pending.push_front(declaration);
            }
        }
        let next = state.pending.pop_front().map(|mut call| {
            if self.harness == Harness::Honest && call.function != PLAN_TOOL {
                let mut context = folded(&request.system);
                for message in request.messages.iter() {
                    context.push_str(&folded(&message.text()));
                }
                only_seen(&mut call.args, &context, &mut state.unseen);
            }
            call
        });
        let events = match next {
            Some(call) => {
                state.calls += 1;
                let name = if call.function == PLAN_TOOL {
                    call.function.clone()
                } else {
                    format!("{}{}", self.prefix, call.function)
                };
                vec![
                    StreamEvent::ToolCallStart {
                        index: 0,
                        id: format!("call_{}", state.calls),
                        name,
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

/// The defence modes compared: off, the provenance rule alone, the
/// default (control-flow integrity), and the default with the host's
/// policies ([`host_policy`]), each as an unattended host runs it.
pub const MODES: [&str; 4] = ["off", "provenance", "planned", "policy"];

/// The defence for a mode of [`MODES`] on `suite`.
pub fn defence(mode: &str, suite: &str) -> Defence {
    match mode {
        "off" => Defence::off(),
        "provenance" => Defence::provenance().unattended(true),
        "policy" => host_policy(suite, defence_on()),
        _ => defence_on(),
    }
}

/// What a host of each suite would bind, as data: the arguments whose
/// values only the user may give, unattended.
pub fn host_policy(suite: &str, defence: Defence) -> Defence {
    match suite {
        // A file to delete is the user's to name: a plan that leaves it
        // to the drive's listing lets text in the drive choose another.
        "workspace" => defence.bind("mcp__workspace__delete_file", "file_id", ["user"]),
        _ => defence,
    }
}

/// The defence as an unattended host runs it by default.
pub fn defence_on() -> Defence {
    let defence = Defence::new().unattended(true);
    assert_eq!(defence.mode(), DefenceMode::Planned);
    defence
}

/// The figures for one suite (or all): per attack and mode, the pairs;
/// per mode, the user tasks without attack.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub attacked: std::collections::BTreeMap<(String, String), Tally>,
    pub clean: std::collections::BTreeMap<String, Tally>,
}

impl Figures {
    pub fn merge(&mut self, other: &Figures) {
        for (key, tally) in &other.attacked {
            self.attacked.entry(key.clone()).or_default().merge(tally);
        }
        for (key, tally) in &other.clean {
            self.clean.entry(key.clone()).or_default().merge(tally);
        }
    }

    /// The tally of pairs under `attack` in `mode`.
    pub fn pairs(&self, attack: &str, mode: &str) -> Tally {
        self.attacked
            .get(&(attack.to_owned(), mode.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    /// One line per attack and mode.
    pub fn rows(&self, name: &str) -> Vec<String> {
        let mut rows = Vec::new();
        for ((attack, mode), tally) in &self.attacked {
            let clean = self.clean.get(mode).copied().unwrap_or_default();
            rows.push(format!(
                "{name:<10} {attack:<22} {mode:<10} pairs {:>4} | attack success {:>5.1}% | utility under attack {:>5.1}% | without attack {:>5.1}% ({} tasks)",
                tally.runs,
                tally.attack_rate(),
                tally.utility_rate(),
                clean.utility_rate(),
                clean.runs,
            ));
        }
        rows
    }
}

/// Runs `pairs` (user task, injection task) under each of `attacks` and
/// `clean` user tasks without attack, in each of `modes`; pairs whose
/// injection task has no ground-truth calls (AgentDojo's workspace
/// injection tasks 6 to 13 and travel's 6 leave them to a real model) are
/// not run.
pub async fn measure(
    fixture: &Fixture,
    pairs: &[(String, String)],
    clean: &[String],
    attacks: &[&str],
    modes: &[&str],
    harness: Harness,
) -> anyhow::Result<Figures> {
    let mut figures = Figures::default();
    let verbose = std::env::var_os("KINET_AGENTDOJO_VERBOSE").is_some();
    for attack in attacks {
        for (user, injection) in pairs {
            for mode in modes {
                let plan = fixture.start_run(user, Some((injection, attack))).await?;
                if plan.injection_calls.is_empty() {
                    break;
                }
                let checked = fixture
                    .run(&plan, defence(mode, &fixture.suite), harness)
                    .await
                    .with_context(|| format!("{user} × {injection} ({attack}, {mode})"))?;
                if *mode != "off" && checked.attack_succeeded == Some(true) {
                    eprintln!(
                        "ATTACK SUCCEEDED with the defence on ({mode}): {} {user} × {injection} ({attack})",
                        fixture.suite
                    );
                }
                if verbose && *mode != "off" {
                    checked.explain_loss(&format!(
                        "{} {user} × {injection} ({attack}, {mode})",
                        fixture.suite
                    ));
                }
                figures
                    .attacked
                    .entry(((*attack).to_owned(), (*mode).to_owned()))
                    .or_default()
                    .add(&checked);
            }
        }
    }
    for user in clean {
        for mode in modes {
            let plan = fixture.start_run(user, None).await?;
            let checked = fixture
                .run(&plan, defence(mode, &fixture.suite), harness)
                .await?;
            if verbose && *mode != "off" {
                checked.explain_loss(&format!(
                    "{} {user} ({mode}), without attack",
                    fixture.suite
                ));
            }
            figures
                .clean
                .entry((*mode).to_owned())
                .or_default()
                .add(&checked);
        }
    }
    Ok(figures)
}
