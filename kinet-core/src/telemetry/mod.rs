//! Observability: spans by the OpenTelemetry GenAI semantic conventions,
//! emitted through `tracing`, and the cost of model calls from a price
//! table the host supplies.
//!
//! # Spans
//!
//! Every run is an `invoke_agent` span; inside it each model call is a
//! `chat` span and each tool call an `execute_tool` span (target
//! [`TARGET`], level INFO). A sub-agent's or team member's run nests under
//! the tool call that started it. Attributes follow the conventions:
//!
//! | span | attributes |
//! |---|---|
//! | `invoke_agent {agent}` | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.agent.name`, `gen_ai.usage.*` for the run, `kinet.cost`, `kinet.turns`, `kinet.stop`, `error.type` |
//! | `chat {model}` | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.response.finish_reasons`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens`, `kinet.cost`, `error.type` |
//! | `execute_tool {tool}` | `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`, `error.type` |
//!
//! Prompts, completions, tool arguments and results
//! (`gen_ai.system_instructions`, `gen_ai.input.messages`,
//! `gen_ai.output.messages`, `gen_ai.tool.call.arguments`,
//! `gen_ai.tool.call.result`) are recorded only when the host opts in with
//! [`Telemetry::record_content`]. Failed spans carry `error.type` (the
//! tool's [`ToolErrorKind`](crate::tool::ToolErrorKind) or the provider
//! error's kind, in snake case) and an error status.
//!
//! Any `tracing` subscriber sees the spans; the `opentelemetry` feature
//! adds [`otel`], which sends them to an OTLP endpoint, and makes
//! [`traceparent`] give the W3C trace context that MCP calls carry to their
//! servers in `_meta`.
//!
//! # Cost
//!
//! With a [`PriceTable`] ([`Telemetry::prices`])
//! each model call's cost is reported ([`AgentEvent::Cost`](crate::AgentEvent::Cost)),
//! summed in [`RunOutcome::cost`](crate::RunOutcome::cost), and a budget
//! ([`Limits::budget`](crate::builder::Limits::budget)) ends a run
//! cleanly once reached.

mod cost;
#[cfg(feature = "opentelemetry")]
pub mod otel;
pub(crate) mod spans;

pub use cost::{Price, PriceTable};
pub use spans::TARGET;

/// How an agent's runs are traced and what they cost. Every field
/// documents its default.
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct Telemetry {
    agent_name: Option<String>,
    record_content: Option<bool>,
    prices: Option<std::sync::Arc<PriceTable>>,
}

impl Telemetry {
    /// The defaults: no agent name (runs are named by their model), no
    /// content recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// The agent's name (`gen_ai.agent.name`, and the run span's name).
    /// Default: none.
    pub fn agent_name(mut self, name: impl Into<String>) -> Self {
        self.agent_name = Some(name.into());
        self
    }

    /// Records prompts, completions, tool arguments and tool results on
    /// the spans. They may hold secrets and personal data: only turn this
    /// on where the tracing backend may keep them. Default: off.
    pub fn record_content(mut self, yes: bool) -> Self {
        self.record_content = Some(yes);
        self
    }

    /// Prices per model, for the cost of each model call and run
    /// ([`AgentEvent::Cost`](crate::AgentEvent::Cost),
    /// [`RunOutcome::cost`](crate::RunOutcome::cost)) and the run's
    /// [budget](crate::builder::Limits::budget). Default: none (no cost
    /// reported).
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = Some(std::sync::Arc::new(prices));
        self
    }

    /// The price table, if set.
    pub fn price_table(&self) -> Option<&std::sync::Arc<PriceTable>> {
        self.prices.as_ref()
    }

    /// The agent's name, if set.
    pub fn name(&self) -> Option<&str> {
        self.agent_name.as_deref()
    }

    /// Whether content is recorded.
    pub fn records_content(&self) -> bool {
        self.record_content.unwrap_or(false)
    }

    /// `other`'s settings over these: what `other` sets replaces, what it
    /// leaves unset stays (the builder's groups combine this way).
    pub(crate) fn merge(&mut self, other: Telemetry) {
        if other.agent_name.is_some() {
            self.agent_name = other.agent_name;
        }
        if other.record_content.is_some() {
            self.record_content = other.record_content;
        }
        if other.prices.is_some() {
            self.prices = other.prices;
        }
    }
}

/// The W3C trace context (`traceparent`) of the current span, for
/// protocols that carry it to the other side (MCP requests' `_meta`). Only
/// with the `opentelemetry` feature and an OpenTelemetry layer installed;
/// `None` otherwise.
pub fn traceparent() -> Option<String> {
    #[cfg(feature = "opentelemetry")]
    {
        otel::current_traceparent()
    }
    #[cfg(not(feature = "opentelemetry"))]
    {
        None
    }
}
