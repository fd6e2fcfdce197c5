//! Code Mode: scripts that call the agent's tools through the pipeline,
//! with a sandbox and limits.
#![cfg(feature = "code-mode")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::result_text;
use kinet_core::testing::{ScriptedProvider, ScriptedTurn};
use kinet_core::tool::Toolset;
use kinet_core::{
    Agent, AgentEvent, ApprovalPolicy, Tool, ToolAnnotations, ToolCtx, ToolError, ToolOutput,
};
use kinet_tools::code_mode::CodeMode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct LookupArgs {
    /// The item to price.
    item: String,
}

/// Prices an item: three per letter.
struct Lookup(Arc<AtomicUsize>);

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
        self.0.fetch_add(1, Ordering::SeqCst);
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

/// A mutating tool: needs approval.
struct Charge(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl Tool for Charge {
    type Args = ChargeArgs;
    fn name(&self) -> &str {
        "charge"
    }
    fn description(&self) -> &str {
        "Charges an account."
    }
    async fn call(&self, args: ChargeArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::text(format!(
            "charged {} to {}",
            args.amount, args.account
        )))
    }
}

struct Setup {
    lookups: Arc<AtomicUsize>,
    charges: Arc<AtomicUsize>,
    tools: Toolset,
}

fn setup(configure: impl FnOnce(CodeMode) -> CodeMode) -> Setup {
    let lookups = Arc::new(AtomicUsize::new(0));
    let charges = Arc::new(AtomicUsize::new(0));
    let mut tools = Toolset::new()
        .with(Lookup(Arc::clone(&lookups)))
        .with(Charge(Arc::clone(&charges)));
    let code = configure(CodeMode::new(&tools));
    tools.add(code);
    Setup {
        lookups,
        charges,
        tools,
    }
}

/// Runs one script as the model's call; the result text and whether it
/// is an error, and the run's events.
async fn run(
    setup: &Setup,
    script: &str,
    policy: ApprovalPolicy,
) -> (String, bool, Vec<AgentEvent>) {
    let agent = Agent::builder(ScriptedProvider::new([
        ScriptedTurn::new().tool_call("s", "run_code", json!({ "code": script })),
        ScriptedTurn::text("done"),
    ]))
    .tools(setup.tools.clone())
    .policy(policy)
    .build();
    let mut run = agent.run("go");
    let mut events = Vec::new();
    while let Some(event) = futures::StreamExt::next(&mut run).await {
        events.push(event);
    }
    let outcome = run.finish().await;
    let result = result_text(&outcome, "s");
    (result.0, result.1, events)
}

#[tokio::test]
async fn a_script_calls_tools_through_the_pipeline() {
    let setup = setup(|c| c);
    let description = setup
        .tools
        .static_tools()
        .specs()
        .iter()
        .find(|spec| spec.name == "run_code")
        .unwrap()
        .description
        .clone();
    assert!(
        description.contains("def lookup(item: str):")
            && description.contains("def charge(account: str, amount: int):")
            && description.contains("item: The item to price."),
        "{description}"
    );
    let script = r#"
total = 0
prices = {}
for item in ["apple", "pear", "fig"]:
    prices[item] = int(lookup(item))
    total += prices[item]
print("total", total)
prices
"#;
    let (text, error, events) = run(&setup, script, ApprovalPolicy::ask()).await;
    assert!(!error, "{text}");
    // The last expression's value comes back as JSON.
    let (printed, value) = text.split_once('\n').unwrap();
    assert_eq!(printed, "total 36");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(value).unwrap(),
        json!({"apple": 15, "fig": 9, "pear": 12})
    );
    assert_eq!(setup.lookups.load(Ordering::SeqCst), 3);
    // Each nested call has its own events, named after the script's call.
    let started: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCallStarted { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["s", "s.1", "s.2", "s.3"]);
}

#[tokio::test]
async fn a_denied_call_is_an_exception_the_script_can_catch() {
    let setup = setup(|c| c);
    let script = r#"
try:
    charge("x", 5)
    print("charged")
except Exception as e:
    print("refused:", e)
print(lookup(item="kiwi"))
"#;
    // The default handler denies; the policy asks for mutating calls.
    let (text, error, _) = run(&setup, script, ApprovalPolicy::ask()).await;
    assert!(!error, "{text}");
    assert!(
        text.starts_with("refused: charge failed: This `charge` call was denied"),
        "{text}"
    );
    assert!(text.ends_with("\n12\n"), "{text}");
    assert_eq!(setup.charges.load(Ordering::SeqCst), 0);
    // Allowed by the policy, it runs.
    let (text, _, _) = run(&setup, script, ApprovalPolicy::never()).await;
    assert!(text.starts_with("charged"), "{text}");
    assert_eq!(setup.charges.load(Ordering::SeqCst), 1);
    // Wrong arguments are a TypeError before any call.
    let (text, error, _) = run(&setup, "charge(amount=1)", ApprovalPolicy::never()).await;
    assert!(
        error && text.contains("missing required argument: 'account'"),
        "{text}"
    );
}

#[tokio::test]
async fn files_sockets_and_the_environment_are_out_of_reach() {
    let setup = setup(|c| c);
    for (script, wanted) in [
        ("open('/etc/passwd').read()", "Error"),
        (
            "from pathlib import Path\nPath('/etc/passwd').read_text()",
            "PermissionError",
        ),
        ("import os\nos.getenv('HOME')", "PermissionError"),
        ("import os\nos.environ['PATH']", "Error"),
        ("import socket", "Error"),
        ("import subprocess", "Error"),
    ] {
        let (text, error, _) = run(&setup, script, ApprovalPolicy::never()).await;
        assert!(error, "{script}: {text}");
        assert!(text.contains(wanted), "{script}: {text}");
        assert!(!text.contains("root:"), "{script}: {text}");
        assert!(!text.contains("/usr/bin"), "{script}: {text}");
    }
}

#[tokio::test]
async fn limits_stop_a_script_with_a_clear_error() {
    let setup_time = setup(|c| c.time_limit(Duration::from_millis(200)));
    let started = std::time::Instant::now();
    let (text, error, _) = run(
        &setup_time,
        "while True:\n    pass",
        ApprovalPolicy::never(),
    )
    .await;
    assert!(error && text.contains("time limit"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(5));

    let setup_calls = setup(|c| c.max_tool_calls(3));
    let (text, error, _) = run(
        &setup_calls,
        "for i in range(10):\n    lookup('x')",
        ApprovalPolicy::never(),
    )
    .await;
    assert!(error && text.contains("more than 3 tool calls"), "{text}");
    assert_eq!(setup_calls.lookups.load(Ordering::SeqCst), 3);

    let setup_output = setup(|c| c.max_output(1024));
    let (text, error, _) = run(
        &setup_output,
        "for i in range(1000):\n    print('line', i)",
        ApprovalPolicy::never(),
    )
    .await;
    assert!(error, "{text}");
    assert!(text.len() < 4096, "{}", text.len());

    let (text, error, _) = run(&setup_output, "def (", ApprovalPolicy::never()).await;
    assert!(error && text.contains("does not parse"), "{text}");
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

/// Counts its calls and takes a while.
struct Slow(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl Tool for Slow {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "slow"
    }
    fn description(&self) -> &str {
        "Takes 30 ms."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, _args: NoArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(30)).await;
        Ok(ToolOutput::text("ok"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_script_makes_no_later_call() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut tools = Toolset::new().with(Slow(Arc::clone(&calls)));
    let code = CodeMode::new(&tools);
    tools.add(code);
    // The script even catches what its calls raise, and goes on.
    let script = "for i in range(60):\n    try:\n        slow()\n    except Exception as e:\n        pass\nprint('finished')";
    let agent = Agent::builder(ScriptedProvider::new([
        ScriptedTurn::new().tool_call("s", "run_code", json!({ "code": script })),
        ScriptedTurn::text("done"),
    ]))
    .tools(tools)
    .build();
    let run = agent.run("go");
    tokio::time::sleep(Duration::from_millis(200)).await;
    run.cancel();
    let outcome = run.finish().await;
    assert!(!outcome.stop.is_completed(), "{}", outcome.stop);
    let at_cancel = calls.load(Ordering::SeqCst);
    assert!((1..60).contains(&at_cancel), "{at_cancel} calls");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        at_cancel,
        "a call ran after the cancel"
    );
}
