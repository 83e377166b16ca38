//! Traces: OpenTelemetry spans from the gateway's request to the consumer's handler call, exported over OTLP
//! (http/protobuf). Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; then
//! `OTEL_SERVICE_NAME` names the service (default: the binary's name) and `[telemetry] trace_sample_ratio` samples
//! new traces (parent-based: a trace sampled at the gateway is sampled in every service it reaches).
//!
//! Off costs one branch: [`tracer`] reads a `OnceLock` that nothing set, every [`TraceSpan`] is `None` and nothing
//! is allocated, formatted or parsed. The services call the OpenTelemetry API directly (no `tracing` bridge) for
//! that reason.
//!
//! The context crosses Kafka in the record's W3C trace context header ([`hookline_record::Outgoing::set_traceparent`]),
//! which [`crate::producer::AckedProducer`] writes for every record it sends while traces are on, before the record's
//! MAC is computed: the MAC covers it like every header, and it is metadata outside the signed body. Readers parse it
//! once per record, in [`record_context`]. Over HTTP it crosses in the W3C header of the same name
//! ([`http_traceparent`]): the gateway's request, the `http` handler's call.
//!
//! Attribute names follow the OpenTelemetry semantic conventions at version [`SEMCONV_VERSION`] (messaging, HTTP);
//! hookline's own are under `hookline.`.

use std::{borrow::Cow, future::Future, sync::OnceLock, time::Duration};

use futures_util::future::Either;
use opentelemetry::{
    Context, Value,
    context::FutureExt as _,
    trace::{
        Link, Span as _, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer as _,
        TracerProvider as _,
    },
};
use opentelemetry_sdk::{
    Resource,
    trace::{BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider},
};
use rdkafka::message::Headers;
use serde::{Deserialize, Serialize};

use crate::{config::Problems, wire::kafka};

/// What a service needs of the OpenTelemetry API to start spans, re-exported so only `common` depends on it.
pub use opentelemetry::{
    KeyValue,
    trace::{SpanContext, SpanKind},
};

/// The semantic conventions version the attribute names below follow.
pub const SEMCONV_VERSION: &str = "1.30.0";

/// Attribute names (semantic conventions [`SEMCONV_VERSION`], and hookline's own).
pub mod attribute {
    pub const MESSAGING_SYSTEM: &str = "messaging.system";
    pub const MESSAGING_OPERATION_NAME: &str = "messaging.operation.name";
    pub const MESSAGING_OPERATION_TYPE: &str = "messaging.operation.type";
    pub const MESSAGING_DESTINATION_NAME: &str = "messaging.destination.name";
    pub const MESSAGING_DESTINATION_PARTITION_ID: &str = "messaging.destination.partition.id";
    pub const MESSAGING_KAFKA_OFFSET: &str = "messaging.kafka.offset";
    pub const MESSAGING_MESSAGE_ID: &str = "messaging.message.id";
    pub const MESSAGING_CONSUMER_GROUP_NAME: &str = "messaging.consumer.group.name";
    pub const HTTP_REQUEST_METHOD: &str = "http.request.method";
    pub const HTTP_ROUTE: &str = "http.route";
    pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
    pub const ERROR_TYPE: &str = "error.type";
    pub const SOURCE: &str = "hookline.source";
    pub const OUTCOME: &str = "hookline.outcome";
    pub const REJECTION_REASON: &str = "hookline.rejection.reason";
    pub const SECRET_ID: &str = "hookline.secret_id";
    pub const SERVICE: &str = "hookline.service";
    pub const HANDLER: &str = "hookline.handler";
    pub const DEDUPE_OUTCOME: &str = "hookline.dedupe.outcome";
    pub const ATTEMPT: &str = "hookline.attempt";
    pub const ACTION: &str = "hookline.action";
    pub const ENTRY_ID: &str = "hookline.dlq.entry_id";
}

/// The `[telemetry]` table of every service's config.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Share of new traces sampled, 0 to 1, once traces are on (`OTEL_EXPORTER_OTLP_ENDPOINT` set). Parent-based:
    /// a record or request whose trace context says sampled is sampled whatever this says, one that says not
    /// sampled is not, so a trace is whole or absent.
    pub trace_sample_ratio: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self { trace_sample_ratio: 1.0 }
    }
}

impl TelemetryConfig {
    pub fn validate(&self, problems: &mut Problems) {
        problems.check(
            (0.0..=1.0).contains(&self.trace_sample_ratio),
            format!("telemetry.trace_sample_ratio must be between 0 and 1 (got {})", self.trace_sample_ratio),
        );
    }
}

static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The tracer, when traces are on: the one branch the hot path pays when they are off.
#[inline]
pub fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get()
}

/// Whether traces are on in this process.
#[inline]
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// A service's whole run with traces: set up from the environment now ([`init_from_env`]), then `work`, then the
/// spans still queued flushed, whatever `work` returned. Every binary's `main` runs through it.
pub fn with_traces<F: Future>(
    default_service_name: &str,
    config: &TelemetryConfig,
    work: F,
) -> Result<impl Future<Output = F::Output>, TraceInitError> {
    let traces = init_from_env(default_service_name, config)?;
    Ok(async move {
        let output = work.await;
        if let Some(traces) = traces {
            traces.shutdown().await;
        }
        output
    })
}

/// The installed tracer provider; [`Traces::shutdown`] flushes the spans still queued.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Exports the spans still queued and stops the exporter. Runs the blocking flush off the async workers (the
    /// export itself runs on the runtime).
    pub async fn shutdown(self) {
        let provider = self.provider;
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = flushed {
            tracing::warn!(error = %error, "traces: the last spans could not be exported");
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TraceInitError {
    #[error("traces: cannot build the OTLP exporter")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    #[error("traces: no tokio runtime to export on")]
    NoRuntime,
    #[error("traces: the collector's TLS settings (OTEL_EXPORTER_OTLP_CERTIFICATE, _CLIENT_CERTIFICATE, _CLIENT_KEY)")]
    CollectorTls(#[source] crate::http_client::ClientError),
}

/// Turns traces on when the standard variables ask for it: `None` when neither `OTEL_EXPORTER_OTLP_ENDPOINT` nor
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (or `OTEL_TRACES_EXPORTER=none`). Call once, in `main`, on the
/// runtime. The exporter reads the other `OTEL_EXPORTER_OTLP_*` variables (headers, timeout) itself; the collector's
/// CA and client certificate variables are read here ([`super::export::CollectorTls`]).
pub fn init_from_env(default_service_name: &str, config: &TelemetryConfig) -> Result<Option<Traces>, TraceInitError> {
    let endpoint_set = ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        .iter()
        .any(|name| std::env::var(name).is_ok_and(|value| !value.trim().is_empty()));
    let exporter_none = std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|value| value.trim() == "none");
    if !endpoint_set || exporter_none {
        return Ok(None);
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| TraceInitError::NoRuntime)?;
    let tls = super::export::CollectorTls::from_vars(|name| std::env::var(name).ok());
    let client = super::export::RuntimeClient::new(runtime, &tls, Duration::from_secs(10))
        .map_err(TraceInitError::CollectorTls)?;
    let exporter = {
        use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
        opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_http_client(client)
            .build()
            .map_err(TraceInitError::Exporter)?
    };
    let service_name = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| default_service_name.to_owned());
    // The batch processor queues spans (bounded, dropping past it) and exports from its own thread: a request or a
    // record never waits for the collector.
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter).build())
        .with_sampler(sampler(config))
        .with_resource(
            Resource::builder()
                .with_service_name(service_name)
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        )
        .build();
    install(provider.clone());
    Ok(Some(Traces { provider }))
}

/// The sampler for `config`: parent-based, new traces at `trace_sample_ratio`.
pub fn sampler(config: &TelemetryConfig) -> Sampler {
    Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.trace_sample_ratio)))
}

/// Makes `provider`'s tracer the process's. The first call wins (tests install an in-memory exporter this way);
/// returns whether this one did.
pub fn install(provider: SdkTracerProvider) -> bool {
    TRACER.set(provider.tracer("hookline")).is_ok()
}

/// Where a new span hangs.
#[derive(Debug)]
pub enum Parent<'a> {
    /// A new trace.
    Root,
    /// The context current in this task ([`TraceSpan::scope`]), or a new trace when there is none.
    Current,
    /// A context read from a record or a trusted request: the new span continues its trace.
    Remote(&'a SpanContext),
    /// A new trace with a link to this context (a replay of a dead letter).
    LinkedTo(&'a SpanContext),
}

/// One span, or nothing when traces are off or the trace is not sampled. Ends when dropped.
#[derive(Debug, Default)]
pub struct TraceSpan(Option<Context>);

impl TraceSpan {
    /// No span (traces off).
    pub const fn off() -> Self {
        Self(None)
    }

    /// Starts a span named `name()` (called only when traces are on) with `attributes()`.
    pub fn start<N, A>(kind: SpanKind, parent: Parent<'_>, name: N, attributes: A) -> Self
    where
        N: FnOnce() -> String,
        A: FnOnce() -> Vec<KeyValue>,
    {
        let Some(tracer) = tracer() else { return Self(None) };
        let (parent_context, links) = match parent {
            Parent::Root => (Context::new(), Vec::new()),
            Parent::Current => (Context::current(), Vec::new()),
            Parent::Remote(span_context) => (Context::new().with_remote_span_context(span_context.clone()), Vec::new()),
            Parent::LinkedTo(span_context) => (Context::new(), vec![Link::with_context(span_context.clone())]),
        };
        let span = tracer
            .span_builder(Cow::Owned(name()))
            .with_kind(kind)
            .with_attributes(attributes())
            .with_links(links)
            .start_with_context(tracer, &parent_context);
        if !span.is_recording() {
            // Not sampled: nothing to record, but the context (not sampled) still travels so the trace stays whole.
            return Self(Some(Context::new().with_remote_span_context(span.span_context().clone())));
        }
        Self(Some(Context::new().with_span(span)))
    }

    /// Whether a span is being recorded (traces on and sampled).
    pub fn is_recording(&self) -> bool {
        self.0.as_ref().is_some_and(|context| context.span().is_recording())
    }

    /// Sets an attribute; `value()` is evaluated only when the span records.
    pub fn set<V: Into<Value>>(&self, key: &'static str, value: impl FnOnce() -> V) {
        if let Some(context) = self.0.as_ref().filter(|context| context.span().is_recording()) {
            context.span().set_attribute(KeyValue::new(key, value().into()));
        }
    }

    /// Marks the span failed with `error.type` and a status message.
    pub fn fail(&self, error_type: &'static str, message: impl FnOnce() -> String) {
        if let Some(context) = self.0.as_ref().filter(|context| context.span().is_recording()) {
            let span = context.span();
            span.set_attribute(KeyValue::new(attribute::ERROR_TYPE, error_type));
            span.set_status(Status::error(message()));
        }
    }

    /// This span's context (to carry in a record or a request), when there is one.
    pub fn span_context(&self) -> Option<SpanContext> {
        self.0.as_ref().map(|context| context.span().span_context().clone()).filter(SpanContext::is_valid)
    }

    /// The W3C `traceparent` of this span, when there is one.
    pub fn traceparent(&self) -> Option<String> {
        self.span_context().map(|span_context| format_traceparent(&span_context))
    }

    /// Runs `future` with this span as the current context (its [`Parent::Current`] children, the producer's send
    /// spans, the `http` handler's `traceparent`). Without a span the future runs as is.
    pub fn scope<F: Future>(&self, future: F) -> Either<opentelemetry::context::WithContext<F>, F> {
        match &self.0 {
            Some(context) => Either::Left(future.with_context(context.clone())),
            None => Either::Right(future),
        }
    }
}

impl Drop for TraceSpan {
    fn drop(&mut self) {
        if let Some(context) = self.0.take() {
            context.span().end();
        }
    }
}

/// The context of the span current in this task, when traces are on and one is.
pub fn current_span_context() -> Option<SpanContext> {
    if !enabled() {
        return None;
    }
    Context::map_current(|context| Some(context.span().span_context().clone()).filter(SpanContext::is_valid))
}

/// The trace context a record carries ([`hookline_record::Claims::traceparent`]): the one place a record's trace
/// context is parsed (once per record). `None` when traces are off, without reading the headers.
pub fn record_context<H: Headers>(headers: Option<&H>) -> Option<SpanContext> {
    if !enabled() {
        return None;
    }
    parse_traceparent(hookline_record::Claims::of(kafka::headers_of(headers)).traceparent()?)
}

/// The W3C trace context's HTTP header (`traceparent`), as OpenTelemetry's W3C propagator names it (its first
/// field). An HTTP header: what the gateway's request may carry and what the `http` handler sends its downstream.
/// The record header of the same name is the `record` crate's.
pub fn http_traceparent() -> &'static http::HeaderName {
    use opentelemetry::propagation::TextMapPropagator as _;
    static NAME: OnceLock<http::HeaderName> = OnceLock::new();
    NAME.get_or_init(|| {
        let propagator = opentelemetry_sdk::propagation::TraceContextPropagator::new();
        let name = propagator.fields().next().expect("the W3C propagator names its header");
        http::HeaderName::from_bytes(name.as_bytes()).expect("the W3C header name is a valid HTTP header name")
    })
}

/// The trace context of an HTTP request's [`http_traceparent`] header (for a source that trusts it).
pub fn http_context(headers: &http::HeaderMap) -> Option<SpanContext> {
    if !enabled() {
        return None;
    }
    parse_traceparent(headers.get(http_traceparent())?.as_bytes())
}

/// Parses a W3C `traceparent` (`00-<trace id>-<span id>-<flags>`; a later version's extra fields are ignored, as
/// the recommendation asks). `None` for anything malformed or an all-zero id.
pub fn parse_traceparent(value: &[u8]) -> Option<SpanContext> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let mut parts = value.split('-');
    let (version, trace_id, span_id, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let lower_hex = |part: &str, len: usize| {
        part.len() == len && part.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !lower_hex(version, 2)
        || version == "ff"
        || !lower_hex(trace_id, 32)
        || !lower_hex(span_id, 16)
        || !lower_hex(flags, 2)
    {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let span_context =
        SpanContext::new(trace_id, span_id, TraceFlags::new(flags) & TraceFlags::SAMPLED, true, TraceState::NONE);
    span_context.is_valid().then_some(span_context)
}

/// The W3C `traceparent` of `span_context`.
pub fn format_traceparent(span_context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        span_context.trace_id(),
        span_context.span_id(),
        span_context.trace_flags().to_u8() & TraceFlags::SAMPLED.to_u8()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_config(text: &str) -> Result<TelemetryConfig, Vec<String>> {
        let config: TelemetryConfig = toml::from_str(text).map_err(|error| vec![error.to_string()])?;
        let mut problems = Problems::default();
        config.validate(&mut problems);
        let lines = problems.into_lines();
        if lines.is_empty() { Ok(config) } else { Err(lines) }
    }

    #[test]
    fn the_sample_ratio_is_read_and_bounded() {
        assert_eq!(parse_config("").expect("defaults").trace_sample_ratio, 1.0);
        assert_eq!(parse_config("trace_sample_ratio = 0.01").expect("1 %").trace_sample_ratio, 0.01);
        assert_eq!(parse_config("trace_sample_ratio = 0").expect("none").trace_sample_ratio, 0.0);
        for bad in ["trace_sample_ratio = 1.5", "trace_sample_ratio = -0.1", "trace_sample_ratio = nan"] {
            let problems = parse_config(bad).expect_err(bad);
            assert!(problems[0].contains("telemetry.trace_sample_ratio"), "{bad}: {problems:?}");
        }
        assert!(parse_config("sample_ratio = 0.5").is_err(), "an unknown key is refused");
    }

    #[test]
    fn a_traceparent_round_trips_and_malformed_ones_are_refused() {
        let value = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let span_context = parse_traceparent(value.as_bytes()).expect("valid");
        assert!(span_context.is_sampled());
        assert!(span_context.is_remote());
        assert_eq!(format_traceparent(&span_context), value);
        let unsampled = parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").expect("valid");
        assert!(!unsampled.is_sampled());
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad.as_bytes()).is_none(), "{bad}");
        }
        assert!(parse_traceparent(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future").is_some());
    }

    #[test]
    fn the_sampler_follows_a_sampled_parent_whatever_the_ratio() {
        use opentelemetry::trace::{SpanKind, TraceContextExt as _};
        use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample as _};
        let records = |decision: &SamplingDecision| {
            matches!(decision, SamplingDecision::RecordAndSample | SamplingDecision::RecordOnly)
        };
        let never = sampler(&TelemetryConfig { trace_sample_ratio: 0.0 });
        let parent = parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").expect("valid");
        let parent_context = Context::new().with_remote_span_context(parent.clone());
        let decision =
            never.should_sample(Some(&parent_context), parent.trace_id(), "x", &SpanKind::Consumer, &[], &[]);
        assert!(records(&decision.decision), "a sampled parent is followed");
        let root = never.should_sample(None, parent.trace_id(), "x", &SpanKind::Server, &[], &[]);
        assert!(!records(&root.decision), "a new trace at ratio 0 is not sampled");
    }

    #[test]
    fn off_there_is_no_span_and_no_header_is_read() {
        // Nothing in this test binary installs a tracer.
        assert!(!enabled());
        let span = TraceSpan::start(SpanKind::Server, Parent::Root, || unreachable!(), || unreachable!());
        assert!(span.traceparent().is_none());
        let mut record = hookline_record::Outgoing::new("t", None, None, hookline_record::HeaderTable::new());
        record.set_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let headers = kafka::owned_headers(&record.headers);
        assert!(record_context(Some(&headers)).is_none());
    }
}
