//! Calls that stop while running: a Code Mode script whose tool call
//! waits for a deferred approval pauses mid-loop, and a sub-agent or a
//! team member whose call waits stops its parent's run. Process A stops and saves the
//! session; process B loads it, gives the decision and finishes. Every
//! tool ran once, and the transcript equals that of a run approved in
//! place.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use kinet_core::confirm::{ConfirmError, ConfirmRequest};
use kinet_core::deferred::Decisions;
use kinet_core::session::{Session, SessionState};
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::tool::Toolset;
use kinet_core::{
    Agent, ApprovalPolicy, ConfirmDecision, ConfirmHandler, Conversation, RunOutcome, RunStop,
    Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct LookupArgs {
    /// The item to price.
    item: String,
}

/// Prices an item (three per letter), and notes each lookup in a file.
struct Lookup {
    log: PathBuf,
}

#[async_trait::async_trait]
impl Tool for Lookup {
    type Args = LookupArgs;
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "Looks up the price of an item."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, args: LookupArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        append(&self.log, &args.item)?;
        Ok(ToolOutput::text((args.item.len() * 3).to_string()))
    }
}

#[derive(Deserialize, JsonSchema)]
struct ChargeArgs {
    /// The account.
    account: String,
    /// The amount.
    amount: u64,
}

/// Charges an account: a ledger line, once per idempotency key.
struct Charge {
    ledger: PathBuf,
}

#[async_trait::async_trait]
impl Tool for Charge {
    type Args = ChargeArgs;
    fn name(&self) -> &str {
        "charge"
    }
    fn description(&self) -> &str {
        "Charges an account."
    }
    async fn call(&self, args: ChargeArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let key = ctx
            .idempotency_key()
            .ok_or_else(|| ToolError::failed("no idempotency key"))?;
        let ledger = std::fs::read_to_string(&self.ledger).unwrap_or_default();
        if !ledger
            .lines()
            .any(|line| line.starts_with(&format!("{key} ")))
        {
            append(
                &self.ledger,
                &format!("{key} {} {}", args.account, args.amount),
            )?;
        }
        Ok(ToolOutput::text(format!(
            "charged {} to {}",
            args.amount, args.account
        )))
    }
}

fn append(path: &Path, line: &str) -> Result<(), ToolError> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| ToolError::failed(e.to_string()))?;
    writeln!(file, "{line}").map_err(|e| ToolError::failed(e.to_string()))
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Approves everything, in place.
struct Approver;

#[async_trait::async_trait]
impl ConfirmHandler for Approver {
    async fn confirm(&self, _request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        Ok(ConfirmDecision::Allow)
    }
}

/// Which run a stage plays.
#[derive(Clone, Copy)]
enum Scenario {
    CodeMode,
    SubAgent,
    Team,
}

impl Scenario {
    fn from_name(name: &str) -> Self {
        match name {
            "code" => Self::CodeMode,
            "team" => Self::Team,
            _ => Self::SubAgent,
        }
    }

    /// The model's turns, in order (the sub-agent's among its parent's).
    /// Process A plays the first `split`, process B the rest.
    fn turns(self) -> (Vec<ScriptedTurn>, usize) {
        match self {
            Self::CodeMode => (
                vec![
                    ScriptedTurn::new().tool_call("s", "run_code", json!({ "code": SCRIPT })),
                    ScriptedTurn::text("done"),
                ],
                1,
            ),
            Self::SubAgent => (
                vec![
                    ScriptedTurn::new().tool_call(
                        "d",
                        "dispatch_agent",
                        json!({"prompt": "charge x for an apple", "description": "charge"}),
                    ),
                    ScriptedTurn::new()
                        .tool_call("l", "lookup", json!({"item": "apple"}))
                        .tool_call("c", "charge", json!({"account": "x", "amount": 15})),
                    ScriptedTurn::text("charged 15 to x"),
                    ScriptedTurn::text("done"),
                ],
                2,
            ),
            Self::Team => (
                vec![
                    ScriptedTurn::new().tool_call(
                        "t1",
                        "spawn_team",
                        json!({"members": [{"name": "clerk", "role": "You charge accounts."}]}),
                    ),
                    ScriptedTurn::new().tool_call(
                        "t2",
                        "team_send",
                        json!({"member": "clerk", "message": "charge x for an apple"}),
                    ),
                    ScriptedTurn::new()
                        .tool_call("l", "lookup", json!({"item": "apple"}))
                        .tool_call("c", "charge", json!({"account": "x", "amount": 15})),
                    ScriptedTurn::text("charged 15 to x"),
                    ScriptedTurn::text("done"),
                ],
                3,
            ),
        }
    }

    /// The call that waits.
    fn waiting(self) -> &'static str {
        match self {
            Self::CodeMode => "s.3",
            Self::SubAgent => "d.c",
            Self::Team => "t2.clerk.c",
        }
    }
}

/// A loop of lookups with a charge in the middle: the script pauses at the
/// charge, with its variables and what it printed.
const SCRIPT: &str = r#"
total = 0
for item in ["apple", "pear", "fig", "kiwi"]:
    price = int(lookup(item))
    total += price
    print(item, price)
    if item == "pear":
        try:
            print(charge("x", total))
        except Exception as e:
            print("refused:", e)
print("total", total)
"#;

fn agent(dir: &Path, turns: Vec<ScriptedTurn>, policy: ApprovalPolicy) -> Agent {
    agent_and_team(dir, turns, policy).0
}

/// The agent, and the session state its team keeps.
fn agent_and_team(
    dir: &Path,
    turns: Vec<ScriptedTurn>,
    policy: ApprovalPolicy,
) -> (Agent, Vec<Arc<dyn SessionState>>) {
    let team = kinet_tools::agents::TeamPack::default();
    let mut tools = Toolset::new()
        .with(Lookup {
            log: dir.join("lookups"),
        })
        .with(Charge {
            ledger: dir.join("ledger"),
        })
        .with(kinet_tools::agents::DispatchAgentTool)
        .merged(team.toolset());
    #[cfg(feature = "code-mode")]
    {
        let code = kinet_tools::code_mode::CodeMode::new(&tools);
        tools.add(code);
    }
    #[cfg(not(feature = "code-mode"))]
    let _ = &mut tools;
    let agent = Agent::builder(ScriptedProvider::new(turns))
        .tools(tools)
        .policy(policy)
        .confirm_handler(Approver)
        .build();
    let states: Vec<Arc<dyn SessionState>> = vec![Arc::new(team.team().clone())];
    (agent, states)
}

/// The host's policy: charges are asked about (also a sub-agent's).
fn policy(defer: bool) -> ApprovalPolicy {
    ApprovalPolicy::ask()
        .ask_for("charge")
        .defer_questions(defer)
}

fn transcript(conversation: &Conversation) -> String {
    serde_json::to_string(&conversation.messages).unwrap()
}

fn read(path: &Path) -> Conversation {
    read_with(path, &[])
}

fn read_with(path: &Path, states: &[Arc<dyn SessionState>]) -> Conversation {
    let session = Session::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    session.resume(states).unwrap().0
}

/// One stage, in a process of its own (see `across_processes`).
#[tokio::test]
#[ignore = "run by the tests below, in processes of their own"]
async fn paused_stage() {
    let dir = PathBuf::from(std::env::var("KINET_PAUSED_DIR").unwrap());
    let scenario = Scenario::from_name(&std::env::var("KINET_PAUSED_SCENARIO").unwrap());
    let stage = std::env::var("KINET_PAUSED_STAGE").unwrap();
    let saved = dir.join("session.json");
    let (mut turns, split) = scenario.turns();
    let (outcome, states): (RunOutcome, _) = if stage == "a" {
        turns.truncate(split);
        let (agent, states) = agent_and_team(&dir, turns, policy(true));
        (agent.run_to_completion("charge x").await, states)
    } else {
        let (agent, states) = agent_and_team(&dir, turns.split_off(split), policy(true));
        let conversation = read_with(&saved, &states);
        let decisions = conversation
            .deferred
            .as_ref()
            .unwrap()
            .pending
            .iter()
            .fold(Decisions::new(), |d, p| d.allow(p.call_id.clone()));
        (agent.resume(conversation, decisions).finish().await, states)
    };
    std::fs::write(
        &saved,
        Session::capture(&outcome.conversation, &states).to_json(),
    )
    .unwrap();
    let pending: Vec<String> = match &outcome.stop {
        RunStop::AwaitingApproval { pending } => {
            pending.iter().map(|p| p.call_id.clone()).collect()
        }
        _ => Vec::new(),
    };
    println!("STOP {} PENDING {}", outcome.stop, pending.join(","));
}

/// Plays the scenario approved in place, then deferred across two
/// processes; returns the directories of both (lookup log and ledger).
async fn across_processes(
    scenario: Scenario,
    name: &str,
) -> (tempfile::TempDir, tempfile::TempDir) {
    let here = tempfile::tempdir().unwrap();
    let in_place = agent(here.path(), scenario.turns().0, policy(false))
        .run_to_completion("charge x")
        .await;
    assert!(in_place.stop.is_completed(), "{}", in_place.stop);

    let dir = tempfile::tempdir().unwrap();
    let mut stops = Vec::new();
    for stage in ["a", "b"] {
        let output = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "paused_stage", "--ignored", "--nocapture"])
            .env("KINET_PAUSED_DIR", dir.path())
            .env("KINET_PAUSED_SCENARIO", name)
            .env("KINET_PAUSED_STAGE", stage)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "stage {stage}: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stops.push(
            text.lines()
                .find_map(|l| l.strip_prefix("STOP "))
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(
        stops,
        [
            format!(
                "waiting for approval of charge PENDING {}",
                scenario.waiting()
            ),
            "completed PENDING ".to_owned(),
        ]
    );
    let finished = read(&dir.path().join("session.json"));
    assert!(finished.deferred.is_none());
    assert_eq!(transcript(&finished), transcript(&in_place.conversation));
    assert_eq!(
        lines(&dir.path().join("lookups")),
        lines(&here.path().join("lookups"))
    );
    (here, dir)
}

#[cfg(feature = "code-mode")]
#[tokio::test]
async fn a_script_paused_mid_loop_goes_on_in_another_process() {
    let (_here, dir) = across_processes(Scenario::CodeMode, "code").await;
    // Each lookup ran once (the script went on after the charge; it did
    // not start again), and the charge ran once, under the key of the
    // script's third call.
    assert_eq!(
        lines(&dir.path().join("lookups")),
        ["apple", "pear", "fig", "kiwi"]
    );
    let ledger = lines(&dir.path().join("ledger"));
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert!(ledger[0].ends_with("/s.3 x 27"), "{ledger:?}");
}

#[cfg(feature = "code-mode")]
#[tokio::test]
async fn a_denied_paused_call_raises_in_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let (turns, _) = Scenario::CodeMode.turns();
    let stopped = agent(dir.path(), turns[..1].to_vec(), policy(true))
        .run_to_completion("charge x")
        .await;
    let RunStop::AwaitingApproval { pending } = &stopped.stop else {
        panic!("{}", stopped.stop);
    };
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].tool, "charge");
    assert_eq!(pending[0].arguments, json!({"account": "x", "amount": 27}));
    // Nothing of the script's call is in the conversation yet.
    assert_eq!(
        stopped
            .conversation
            .messages
            .iter()
            .filter(|m| matches!(m, kinet_core::Message::Tool { .. }))
            .count(),
        0
    );
    let denied = agent(dir.path(), turns[1..].to_vec(), policy(true))
        .resume(
            stopped.conversation,
            Decisions::new().deny("s.3", "over budget"),
        )
        .finish()
        .await;
    assert!(denied.stop.is_completed(), "{}", denied.stop);
    let result = denied
        .conversation
        .messages
        .iter()
        .find(|m| matches!(m, kinet_core::Message::Tool { .. }))
        .unwrap()
        .text();
    assert!(
        result.starts_with("apple 15\npear 12\nrefused: charge failed:")
            && result.contains("over budget")
            && result.ends_with("kiwi 12\ntotal 48\n"),
        "{result}"
    );
    assert!(lines(&dir.path().join("ledger")).is_empty());
}

#[tokio::test]
async fn a_sub_agents_question_stops_its_parent_and_resumes_in_another_process() {
    let (here, dir) = across_processes(Scenario::SubAgent, "sub").await;
    let ledger = lines(&dir.path().join("ledger"));
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert!(ledger[0].ends_with(" x 15"), "{ledger:?}");
    assert_eq!(lines(&dir.path().join("lookups")), ["apple"]);
    assert_eq!(lines(&here.path().join("ledger")).len(), 1);
}

#[tokio::test]
async fn a_team_members_question_stops_the_lead_and_resumes_in_another_process() {
    let (_here, dir) = across_processes(Scenario::Team, "team").await;
    let ledger = lines(&dir.path().join("ledger"));
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert!(ledger[0].ends_with(" x 15"), "{ledger:?}");
    assert_eq!(lines(&dir.path().join("lookups")), ["apple"]);
}

#[tokio::test]
async fn a_sub_agent_asks_the_hosts_handler_only_for_ask_rules() {
    // Without an ask rule, a sub-agent's mutating call is denied, never
    // asked (the handler here would approve it).
    let dir = tempfile::tempdir().unwrap();
    let (turns, _) = Scenario::SubAgent.turns();
    let outcome = agent(dir.path(), turns, ApprovalPolicy::ask())
        .run_to_completion("charge x")
        .await;
    assert!(outcome.stop.is_completed(), "{}", outcome.stop);
    assert!(lines(&dir.path().join("ledger")).is_empty());
}
