//! Spans by the OpenTelemetry GenAI conventions, collected through the
//! OpenTelemetry SDK's in-memory exporter: a run with a sub-agent, an MCP
//! call to a real server (the official Python SDK, which reports the trace
//! context it received) and a failing tool; then cost and content opt-in.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kinet::Toolset;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kinet::core::provider::Usage;
use kinet::core::telemetry::{Price, PriceTable, Telemetry};
use kinet::core::testing::{ScriptedProvider, ScriptedTurn};
use kinet::core::{Agent, AgentEvent, ApprovalPolicy, Tool, ToolCtx, ToolError, ToolOutput};
use kinet::mcp::{HubSettings, McpHub, ServerConfig};
use opentelemetry::trace::{SpanId, Status};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

/// One exporter for the test binary: the subscriber is process-wide, so
/// runs on any worker thread are traced.
fn exporter() -> &'static InMemorySpanExporter {
    static SETUP: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    &SETUP
        .get_or_init(|| {
            let exporter = InMemorySpanExporter::default();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(exporter.clone())
                .build();
            let subscriber =
                tracing_subscriber::registry().with(kinet::core::telemetry::otel::layer(&provider));
            tracing::subscriber::set_global_default(subscriber).unwrap();
            (exporter, provider)
        })
        .0
}

/// A tool that always fails.
struct Broken;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

#[async_trait::async_trait]
impl Tool for Broken {
    type Args = NoArgs;
    fn name(&self) -> &str {
        "broken"
    }
    fn description(&self) -> &str {
        "Always fails."
    }
    fn annotations(&self) -> kinet::core::ToolAnnotations {
        kinet::core::ToolAnnotations::read_only()
    }
    async fn call(&self, _args: NoArgs, _ctx: &ToolCtx) -> Result<ToolOutput, ToolError> {
        Err(ToolError::failed("the disk is on fire"))
    }
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "{name}: {:?}", names(spans));
    found[0]
}

fn names(spans: &[SpanData]) -> Vec<String> {
    spans.iter().map(|s| s.name.to_string()).collect()
}

fn python() -> Option<String> {
    let python = std::env::var("KINET_PYTHON").unwrap_or_else(|_| "python3".into());
    let works = std::process::Command::new(&python)
        .args(["-c", "import mcp.server.mcpserver"])
        .output()
        .is_ok_and(|out| out.status.success());
    works.then_some(python)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_a_sub_agent_an_mcp_call_and_a_failing_tool_is_traced() {
    let Some(python) = python() else {
        kinet::core::testing::skipped(
            "the official Python MCP SDK (KINET_PYTHON, .ci/setup installs it) is missing",
        );
        return;
    };
    let exporter = exporter();
    let server = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/kinet-mcp/tests/peers/trace_server.py"
    );
    let hub = McpHub::start(
        vec![ServerConfig::stdio(
            "trace",
            python,
            vec![server.to_owned()],
        )],
        HubSettings::default(),
    );
    assert!(hub.wait_settled(Duration::from_secs(30)).await);
    let provider = ScriptedProvider::new([
        ScriptedTurn::new()
            .tool_call("c-broken", "broken", json!({}))
            .tool_call("c-mcp", "mcp__trace__traceparent", json!({}))
            .tool_call("c-sub", "dispatch_agent", json!({"prompt": "look around"}))
            .with_usage(usage(1_000, 100)),
        // The sub-agent's only turn.
        ScriptedTurn::text("nothing here").with_usage(usage(500, 50)),
        ScriptedTurn::text("all done").with_usage(usage(2_000, 200)),
    ]);
    let agent = Agent::builder(provider)
        .model("test-model")
        .telemetry(
            Telemetry::new()
                .agent_name("tracer")
                .prices(PriceTable::new().with("test-model", Price::new(1.0, 10.0))),
        )
        .policy(ApprovalPolicy::never())
        .tool(Broken)
        .tool(kinet::tools::agents::DispatchAgentTool)
        .tools(Toolset::new().with_source(Arc::new(hub.clone())))
        .build();
    let mut run = agent.run("trace this");
    let mut costs = Vec::new();
    let mut mcp_answer = None;
    while let Some(event) = futures::StreamExt::next(&mut run).await {
        match event {
            AgentEvent::Cost { turn, run } => costs.push((turn, run)),
            AgentEvent::ToolCallFinished {
                call_id, result, ..
            } if call_id == "c-mcp" => {
                mcp_answer = Some(result.unwrap().text);
            }
            _ => {}
        }
    }
    let outcome = run.finish().await;
    assert!(outcome.stop.is_completed(), "{}", outcome.stop);
    hub.shutdown().await;

    // Cost: the parent's two model calls (the sub-agent's are its own).
    let first = (1_000.0 * 1.0 + 100.0 * 10.0) / 1e6;
    let second = (2_000.0 * 1.0 + 200.0 * 10.0) / 1e6;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    assert_eq!(costs.len(), 2, "{costs:?}");
    assert!(
        close(costs[0].0, first) && close(costs[1].1, first + second),
        "{costs:?}"
    );
    assert!(close(outcome.cost.unwrap(), first + second));

    let spans = exporter.get_finished_spans().unwrap();
    // The root: the sub-agent's run has the agent's name too.
    let run_span = spans
        .iter()
        .find(|s| s.name == "invoke_agent tracer" && s.parent_span_id == SpanId::INVALID)
        .unwrap_or_else(|| panic!("no root run: {:?}", names(&spans)));
    let trace = run_span.span_context.trace_id();
    let spans: Vec<SpanData> = spans
        .into_iter()
        .filter(|s| s.span_context.trace_id() == trace)
        .collect();
    let run_span = spans
        .iter()
        .find(|s| s.name == "invoke_agent tracer" && s.parent_span_id == SpanId::INVALID)
        .unwrap();
    assert_eq!(
        attribute(run_span, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        attribute(run_span, "gen_ai.agent.name").as_deref(),
        Some("tracer")
    );
    assert_eq!(
        attribute(run_span, "gen_ai.provider.name").as_deref(),
        Some("scripted")
    );
    assert_eq!(
        attribute(run_span, "gen_ai.usage.input_tokens").as_deref(),
        Some("3000")
    );
    assert_eq!(attribute(run_span, "kinet.turns").as_deref(), Some("2"));
    let run_id = run_span.span_context.span_id();

    // Two model calls of the run, under it.
    let chats: Vec<_> = named(&spans, "chat test-model")
        .into_iter()
        .filter(|s| s.parent_span_id == run_id)
        .collect();
    assert_eq!(chats.len(), 2, "{:?}", names(&spans));
    for chat in &chats {
        assert_eq!(
            attribute(chat, "gen_ai.operation.name").as_deref(),
            Some("chat")
        );
        assert_eq!(
            attribute(chat, "gen_ai.request.model").as_deref(),
            Some("test-model")
        );
        assert!(attribute(chat, "gen_ai.usage.output_tokens").is_some());
        assert!(attribute(chat, "kinet.cost").is_some());
        assert_eq!(
            attribute(chat, "gen_ai.input.messages"),
            None,
            "content is opt-in"
        );
    }
    let finish: Vec<_> = chats
        .iter()
        .filter_map(|c| attribute(c, "gen_ai.response.finish_reasons"))
        .collect();
    assert!(finish.contains(&"tool_calls".to_owned()) && finish.contains(&"stop".to_owned()));

    // Tool calls under the run; the failing one marked.
    let broken = one(&spans, "execute_tool broken");
    assert_eq!(broken.parent_span_id, run_id);
    assert_eq!(
        attribute(broken, "gen_ai.tool.name").as_deref(),
        Some("broken")
    );
    assert_eq!(
        attribute(broken, "gen_ai.tool.call.id").as_deref(),
        Some("c-broken")
    );
    assert_eq!(attribute(broken, "error.type").as_deref(), Some("failed"));
    assert!(
        matches!(&broken.status, Status::Error { description } if description.contains("on fire"))
    );
    let mcp = one(&spans, "execute_tool mcp__trace__traceparent");
    assert_eq!(mcp.parent_span_id, run_id);
    assert_eq!(attribute(mcp, "error.type"), None);

    // The MCP server received the call's trace context.
    let expected = format!("00-{}-{}-01", trace, mcp.span_context.span_id());
    assert_eq!(mcp_answer.as_deref(), Some(expected.as_str()));

    // The sub-agent's run nests under the dispatch_agent call, with its
    // model call under it.
    let dispatch = one(&spans, "execute_tool dispatch_agent");
    assert_eq!(dispatch.parent_span_id, run_id);
    let child = spans
        .iter()
        .find(|s| {
            s.name.starts_with("invoke_agent")
                && s.parent_span_id == dispatch.span_context.span_id()
        })
        .unwrap_or_else(|| panic!("no sub-agent run under dispatch_agent: {:?}", names(&spans)));
    let child_chat = named(&spans, "chat test-model")
        .into_iter()
        .find(|s| s.parent_span_id == child.span_context.span_id())
        .expect("the sub-agent's model call under its run");
    assert_eq!(
        attribute(child_chat, "gen_ai.usage.input_tokens").as_deref(),
        Some("500")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_is_recorded_only_when_the_host_opts_in() {
    let exporter = exporter();
    let provider = ScriptedProvider::new([
        ScriptedTurn::new().tool_call("c-1", "broken", json!({})),
        ScriptedTurn::text("the answer"),
    ]);
    let agent = Agent::builder(provider)
        .model("content-model")
        .system_prompt("Be careful.")
        .telemetry(Telemetry::new().agent_name("content").record_content(true))
        .policy(ApprovalPolicy::never())
        .tool(Broken)
        .build();
    agent.run_to_completion("secret question").await;
    let spans = exporter.get_finished_spans().unwrap();
    let run_span = one(&spans, "invoke_agent content");
    let trace = run_span.span_context.trace_id();
    let spans: Vec<SpanData> = spans
        .into_iter()
        .filter(|s| s.span_context.trace_id() == trace)
        .collect();
    let chats = named(&spans, "chat content-model");
    assert_eq!(chats.len(), 2);
    let input = attribute(chats[0], "gen_ai.input.messages").unwrap();
    assert!(input.contains("secret question"), "{input}");
    assert_eq!(
        attribute(chats[0], "gen_ai.system_instructions").as_deref(),
        Some("Be careful.")
    );
    let output = attribute(chats[1], "gen_ai.output.messages").unwrap();
    assert!(output.contains("the answer"), "{output}");
    let tool = one(&spans, "execute_tool broken");
    assert_eq!(
        attribute(tool, "gen_ai.tool.call.arguments").as_deref(),
        Some("{}")
    );
    assert_eq!(
        attribute(tool, "gen_ai.tool.call.result").as_deref(),
        Some("the disk is on fire")
    );
}
