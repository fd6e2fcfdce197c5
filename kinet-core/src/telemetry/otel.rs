//! Sending the spans to an OpenTelemetry backend (feature `opentelemetry`):
//! an OTLP/HTTP exporter, the `tracing` layer that turns spans into
//! OpenTelemetry spans, and the W3C trace context of the current span.
//!
//! ```no_run
//! # fn main() -> Result<(), kinet_core::telemetry::otel::OtelError> {
//! // Spans of this process go to a local collector until `guard` drops.
//! let guard = kinet_core::telemetry::otel::install("http://127.0.0.1:4318", "my-agent")?;
//! // ... run agents ...
//! drop(guard); // flushes what is left
//! # Ok(())
//! # }
//! ```
//!
//! A host with its own subscriber adds [`layer`] to it instead.

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;

pub use opentelemetry_sdk;

/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The OTLP exporter could not be built (a bad endpoint, say).
    #[error("cannot send spans to {endpoint}: {reason}")]
    Exporter {
        /// The endpoint given.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// Another global `tracing` subscriber is already installed: add
    /// [`layer`] to it instead.
    #[error("a tracing subscriber is already installed; add kinet's layer to it instead")]
    SubscriberTaken,
}

/// A tracer provider exporting over OTLP/HTTP (JSON) to `endpoint` (the
/// collector's base address, e.g. `http://127.0.0.1:4318`; spans go to
/// `/v1/traces` under it), in batches, as service `service`.
pub fn otlp_provider(endpoint: &str, service: &str) -> Result<SdkTracerProvider, OtelError> {
    let traces = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .with_endpoint(traces)
        .build()
        .map_err(|error| OtelError::Exporter {
            endpoint: endpoint.to_owned(),
            reason: error.to_string(),
        })?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service.to_owned())
                .build(),
        )
        .build())
}

/// The `tracing` layer that turns spans into OpenTelemetry spans of
/// `provider`'s tracer. Lean: no busy/idle timing on every poll, no
/// thread or source-location attributes (the GenAI attributes say what a
/// span is), and the OpenTelemetry context is not made current on every
/// poll (kinet reads a span's context from the span itself, as
/// [`traceparent`](super::traceparent) does). A host whose own
/// OpenTelemetry-native instrumentation runs inside kinet's spans and
/// reads the current context builds the layer with context activation
/// instead (`tracing_opentelemetry::layer()`).
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S> + use<S>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("kinet"))
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_location(false)
        .with_context_activation(false)
}

/// Flushes and shuts the provider down when dropped.
#[must_use = "spans are flushed when the guard drops"]
#[derive(Debug)]
pub struct OtelGuard {
    provider: SdkTracerProvider,
}

impl OtelGuard {
    /// The provider, for other layers or a manual flush.
    pub fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::debug!(%error, "shutting the span exporter down");
        }
    }
}

/// Installs a global subscriber that sends every span at INFO and above to
/// `endpoint` over OTLP/HTTP as service `service`.
pub fn install(endpoint: &str, service: &str) -> Result<OtelGuard, OtelError> {
    let provider = otlp_provider(endpoint, service)?;
    let subscriber = tracing_subscriber::registry()
        .with(layer(&provider))
        .with(tracing_subscriber::filter::LevelFilter::INFO);
    tracing::subscriber::set_global_default(subscriber).map_err(|_| OtelError::SubscriberTaken)?;
    Ok(OtelGuard { provider })
}

/// `traceparent` of the current span, when an OpenTelemetry layer gave it
/// a valid context.
pub(crate) fn current_traceparent() -> Option<String> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        )
    })
}
