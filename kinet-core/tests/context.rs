//! Context management with a model that counts: a 200-turn session with
//! large tool outputs inside a 16k window, and a request prefix that stays
//! byte-identical between compactions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kinet_core::builder::Sessions;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::stream;
use kinet_core::context::{ContextPolicy, Summarizer};
use kinet_core::message::ContentPart;
use kinet_core::provider::{ChatRequest, ProviderError, StopReason, StreamEvent, Usage};
use kinet_core::{
    Agent, AgentEvent, Conversation, Message, Provider, Tool, ToolAnnotations, ToolCtx, ToolError,
    ToolOutput,
};
use schemars::JsonSchema;
use serde::Deserialize;

/// Tokens as this fake model counts them: denser than kinet's estimate
/// (3.5 characters a token), so the estimate must calibrate from usage.
fn tokens(request: &ChatRequest<'_>) -> u64 {
    let chars = request.system.len()
        + serde_json::to_string(&*request.messages).unwrap().len()
        + serde_json::to_string(&*request.tools).unwrap().len();
    (chars as f64 / 3.5) as u64
}

/// A model that calls `read_log` once per user turn, then answers; it
/// records every request's size and serialised messages.
#[derive(Default)]
struct Counting {
    sizes: Mutex<Vec<u64>>,
    bodies: Mutex<Vec<String>>,
}

#[async_trait]
impl Provider for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    async fn stream(
        &self,
        request: ChatRequest<'_>,
    ) -> Result<kinet_core::provider::ProviderStream, ProviderError> {
        let size = tokens(&request);
        self.sizes.lock().unwrap().push(size);
        self.bodies
            .lock()
            .unwrap()
            .push(serde_json::to_string(&*request.messages).unwrap());
        let usage = StreamEvent::Usage(Usage {
            input_tokens: size,
            output_tokens: 20,
            ..Usage::default()
        });
        let last_is_user = matches!(request.messages.last(), Some(Message::User { .. }));
        let events: Vec<Result<StreamEvent, ProviderError>> =
            if last_is_user && !request.tools.is_empty() {
                let n = request.messages.len();
                vec![
                    Ok(StreamEvent::ToolCallStart {
                        index: 0,
                        id: format!("call-{n}"),
                        name: "read_log".into(),
                    }),
                    Ok(StreamEvent::ToolCallArgumentsDelta {
                        index: 0,
                        delta: "{}".into(),
                    }),
                    Ok(usage),
                    Ok(StreamEvent::Finished(StopReason::ToolUse)),
                ]
            } else {
                vec![
                    Ok(StreamEvent::TextDelta("Read it; all fine.".into())),
                    Ok(usage),
                    Ok(StreamEvent::Finished(StopReason::EndTurn)),
                ]
            };
        Ok(Box::pin(stream::iter(events)))
    }
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

/// A tool with 6,000 characters of output.
struct ReadLog;

#[async_trait]
impl Tool for ReadLog {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "read_log"
    }
    fn description(&self) -> &str {
        "Reads the build log."
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn call(&self, _args: NoArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("log line ".repeat(666)))
    }
}

/// Records what it was given.
#[derive(Default)]
struct Recording {
    seen: Mutex<Vec<Message>>,
    calls: Mutex<usize>,
}

#[async_trait]
impl Summarizer for Recording {
    async fn summarize(&self, messages: &[Message]) -> Result<String, String> {
        *self.calls.lock().unwrap() += 1;
        self.seen.lock().unwrap().extend(messages.iter().cloned());
        Ok("Goals: keep the build green. Decisions: none. Files touched: none.".into())
    }
}

fn user_text(message: &Message) -> Option<String> {
    match message {
        Message::User { content } => Some(
            content
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.clone()),
                    _ => None,
                })
                .collect(),
        ),
        _ => None,
    }
}

#[tokio::test]
async fn two_hundred_turns_stay_inside_a_16k_window() {
    const WINDOW: u64 = 16_000;
    let provider = Arc::new(Counting::default());
    let summarizer = Arc::new(Recording::default());
    let agent = Agent::builder(provider.clone())
        .model("test-model")
        .system_prompt("You watch the build.")
        .tool(ReadLog)
        .sessions(
            Sessions::new().context(
                ContextPolicy::new()
                    .window(WINDOW)
                    .summarizer(summarizer.clone()),
            ),
        )
        .build();
    let mut conversation = Conversation::new();
    let mut compactions = 0;
    let mut said = Vec::new();
    for turn in 0..200 {
        let text = format!("Turn {turn}: check the build log and tell me if it is fine.");
        said.push(text.clone());
        conversation.push(Message::user(text));
        let mut run = agent.run(conversation);
        while let Some(event) = futures::StreamExt::next(&mut run).await {
            if let AgentEvent::ContextCompacted {
                before_tokens,
                after_tokens,
                ..
            } = event
            {
                compactions += 1;
                assert!(after_tokens < before_tokens);
            }
        }
        let outcome = run.finish().await;
        assert!(
            outcome.stop.is_completed(),
            "turn {turn}: {:?}",
            outcome.stop
        );
        conversation = outcome.conversation;
    }
    let sizes = provider.sizes.lock().unwrap().clone();
    let largest = sizes.iter().max().copied().unwrap();
    assert!(
        largest <= WINDOW,
        "a request of {largest} tokens went out (window {WINDOW})"
    );
    assert!(compactions >= 3, "{compactions} compactions");
    // Compaction starts at the threshold, not before: requests reached past
    // half the window.
    assert!(largest > WINDOW / 2, "largest request {largest}");
    // Every user message was either summarised or is still in the history.
    let seen = summarizer.seen.lock().unwrap();
    let summarised: Vec<String> = seen.iter().filter_map(user_text).collect();
    let kept: Vec<String> = conversation.messages.iter().filter_map(user_text).collect();
    for text in &said {
        assert!(
            summarised
                .iter()
                .chain(&kept)
                .any(|t| t.contains(text.as_str())),
            "never reached the summariser nor kept: {text}"
        );
    }
}

#[tokio::test]
async fn the_request_prefix_is_byte_stable_between_compactions() {
    let provider = Arc::new(Counting::default());
    // An unknown model and no window: nothing is compacted.
    let agent = Agent::builder(provider.clone())
        .model("test-model")
        .system_prompt("You watch the build.")
        .tool(ReadLog)
        .build();
    let mut conversation = Conversation::new();
    for turn in 0..50 {
        conversation.push(Message::user(format!("Turn {turn}: check the log.")));
        let outcome = agent.run_to_completion(conversation).await;
        assert!(outcome.stop.is_completed());
        conversation = outcome.conversation;
    }
    let bodies = provider.bodies.lock().unwrap();
    assert_eq!(bodies.len(), 100);
    for pair in bodies.windows(2) {
        // The previous request's messages, minus the closing `]`, begin the
        // next one's byte for byte.
        let previous = &pair[0][..pair[0].len() - 1];
        assert!(pair[1].starts_with(previous), "the prefix changed");
    }
}

#[tokio::test]
async fn the_host_can_compact_on_demand() {
    let summarizer = Arc::new(Recording::default());
    let agent = Agent::builder(Arc::new(Counting::default()))
        .model("test-model")
        .sessions(Sessions::new().context(ContextPolicy::new().summarizer(summarizer.clone())))
        .build();
    let mut conversation = Conversation::new();
    for n in 0..10 {
        conversation.push(Message::user(format!("question {n}")));
        conversation.push(Message::assistant(format!("answer {n} ").repeat(50)));
    }
    let (compacted, done) = agent.compact(conversation).await.unwrap();
    assert_eq!(*summarizer.calls.lock().unwrap(), 1);
    assert!(done.after_tokens < done.before_tokens, "{done:?}");
    assert!(done.summarized_messages >= 10, "{done:?}");
    // The latest turns are kept whole; the first message is the summary.
    assert!(
        user_text(&compacted.messages[0])
            .unwrap()
            .contains("Summary of the earlier conversation")
    );
    assert!(
        compacted
            .messages
            .iter()
            .filter_map(user_text)
            .any(|t| t == "question 9")
    );
}
