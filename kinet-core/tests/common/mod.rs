//! Tools and handlers shared by the engine tests.
#![allow(dead_code, missing_docs, unreachable_pub, clippy::type_complexity)]

use kinet_core::tool::engine::EngineCtx as _;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kinet_core::confirm::{ConfirmError, ConfirmRequest};
use kinet_core::{
    AgentEvent, AgentRun, ConfirmDecision, ConfirmHandler, RunOutcome, Tool, ToolCtx, ToolError,
    ToolOutput,
};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::time::Instant;

/// When each call started and ended.
#[derive(Clone, Default)]
pub struct Timeline(Arc<Mutex<Vec<(String, &'static str, Instant)>>>);

impl Timeline {
    pub fn record(&self, label: &str, what: &'static str) {
        self.0
            .lock()
            .unwrap()
            .push((label.to_owned(), what, Instant::now()));
    }

    pub fn at(&self, label: &str, what: &str) -> Instant {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|(l, w, _)| l == label && *w == what)
            .map(|(_, _, t)| *t)
            .unwrap_or_else(|| panic!("no {what} for {label}"))
    }

    pub fn labels(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, w, _)| *w == "start")
            .map(|(l, _, _)| l.clone())
            .collect()
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct SleepArgs {
    /// A label echoed back.
    pub label: String,
    /// How long to sleep, in milliseconds.
    pub ms: u64,
}

/// Sleeps, records start/end, returns its label.
pub struct Sleeper {
    pub name: &'static str,
    pub read_only: bool,
    pub timeline: Timeline,
    pub calls: Arc<AtomicUsize>,
}

impl Sleeper {
    pub fn new(name: &'static str, read_only: bool, timeline: &Timeline) -> Self {
        Self {
            name,
            read_only,
            timeline: timeline.clone(),
            calls: Arc::new(AtomicUsize::new(0)),
        }
    }
}

#[async_trait::async_trait]
impl Tool for Sleeper {
    type Args = SleepArgs;
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "Sleeps, then returns its label."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        if self.read_only {
            kinet_core::ToolAnnotations::read_only()
        } else {
            // It returns its own label: nothing anyone else wrote.
            kinet_core::ToolAnnotations::default().open_world(false)
        }
    }
    async fn call(&self, args: SleepArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.timeline.record(&args.label, "start");
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        self.timeline.record(&args.label, "end");
        Ok(ToolOutput::text(format!("{} done", args.label)))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct NoArgs {}

/// Panics when called.
pub struct Panicker;

#[async_trait::async_trait]
impl Tool for Panicker {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "panicker"
    }
    fn description(&self) -> &str {
        "Panics."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        panic!("the disk is on fire")
    }
}

/// Returns a fatal error.
pub struct Doomed;

#[async_trait::async_trait]
impl Tool for Doomed {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "doomed"
    }
    fn description(&self) -> &str {
        "Fails fatally."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, _: NoArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Err(ToolError::fatal("the credentials were revoked"))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct SizeArgs {
    /// Characters to produce.
    pub chars: usize,
}

/// Produces a numbered text of the requested length.
pub struct Big;

pub fn big_text(chars: usize) -> String {
    let mut text = String::with_capacity(chars);
    let mut line = 0;
    while text.len() < chars {
        text.push_str(&format!(
            "line {line:05} ......................................\n"
        ));
        line += 1;
    }
    text.truncate(chars);
    text
}

#[async_trait::async_trait]
impl Tool for Big {
    type Args = SizeArgs;
    fn name(&self) -> &str {
        "big"
    }
    fn description(&self) -> &str {
        "Produces a long text."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, args: SizeArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(big_text(args.chars)))
    }
}

/// Answers confirmation requests from a queue and records them.
#[derive(Default)]
pub struct QueueConfirm {
    pub answers: Mutex<VecDeque<Result<ConfirmDecision, ConfirmError>>>,
    pub asked: Mutex<Vec<ConfirmRequest>>,
    pub delay: Option<Duration>,
}

impl QueueConfirm {
    pub fn new(answers: impl IntoIterator<Item = ConfirmDecision>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into_iter().map(Ok).collect()),
            ..Self::default()
        })
    }

    pub fn asked(&self) -> Vec<ConfirmRequest> {
        self.asked.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl ConfirmHandler for QueueConfirm {
    async fn confirm(&self, request: ConfirmRequest) -> Result<ConfirmDecision, ConfirmError> {
        self.asked.lock().unwrap().push(request);
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Err(ConfirmError("no answer scripted".into())))
    }
}

/// Reads every event of a run, then its outcome.
pub async fn collect(mut run: AgentRun) -> (Vec<AgentEvent>, RunOutcome) {
    let mut events = Vec::new();
    while let Some(event) = run.next().await {
        events.push(event);
    }
    (events, run.finish().await)
}

/// The text of the tool result message for `call_id`.
pub fn result_text(outcome: &RunOutcome, call_id: &str) -> (String, bool) {
    outcome
        .conversation
        .messages
        .iter()
        .find_map(|m| match m {
            kinet_core::Message::Tool {
                tool_call_id,
                is_error,
                ..
            } if tool_call_id == call_id => Some((m.text(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {call_id}"))
}

/// Results paired with calls: every call id has exactly one result, in order.
pub fn assert_paired(outcome: &RunOutcome) {
    let conversation = &outcome.conversation;
    assert!(
        conversation.unanswered_tool_calls().is_empty(),
        "unanswered: {:?}",
        conversation.unanswered_tool_calls()
    );
    let messages = &conversation.messages;
    for (i, message) in messages.iter().enumerate() {
        let calls = message.tool_calls();
        if calls.is_empty() {
            continue;
        }
        let ids: Vec<&str> = messages[i + 1..]
            .iter()
            .take(calls.len())
            .map(|m| match m {
                kinet_core::Message::Tool { tool_call_id, .. } => tool_call_id.as_str(),
                other => panic!("expected a tool result, got {other:?}"),
            })
            .collect();
        let expected: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids, expected,
            "results must follow their calls in call order"
        );
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct DelegateArgs {
    prompt: String,
}

/// Runs a sub-agent through the context's spawner.
pub struct Delegate;

#[async_trait::async_trait]
impl Tool for Delegate {
    type Args = DelegateArgs;
    fn name(&self) -> &str {
        "delegate"
    }
    fn description(&self) -> &str {
        "Runs a sub-agent."
    }
    fn annotations(&self) -> kinet_core::ToolAnnotations {
        kinet_core::ToolAnnotations::read_only()
    }
    async fn call(&self, args: DelegateArgs, ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        let spawner = ctx
            .spawner()
            .ok_or_else(|| ToolError::failed("sub-agents are not available"))?;
        let report = spawner
            .run(
                kinet_core::tool::engine::SubAgentRequest {
                    prompt: args.prompt,
                    description: None,
                    engine: None,
                },
                ctx,
            )
            .await?;
        Ok(ToolOutput::text(report.text))
    }
}
