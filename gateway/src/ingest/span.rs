//! The request's span and its `source` label: what a request is called in traces and metrics before anything in
//! it is believed.

use hookline_common::telemetry::traces::{self, KeyValue, Parent, SpanKind, TraceSpan, attribute};
use http::Request;
use hyper::body::Incoming;

use super::ROUTE_PREFIX;
use crate::{rejection_ring::UNKNOWN_SOURCE, source::SourceTable};

/// The request's server span (none with traces off), always the root of a trace of its own under the local
/// sampler: the span starts before the request is verified, and whoever can reach a source's URL must not choose
/// our trace ids or force sampling with a `traceparent`. For a source with `trust_traceparent` the span carries a
/// link to the request's `traceparent` (a link chooses neither the trace nor its sampling); from anyone else it
/// is ignored.
pub(super) fn request_span(sources: &SourceTable, request: &Request<Incoming>, source_label: &str) -> TraceSpan {
    if !traces::enabled() {
        return TraceSpan::off();
    }
    let trusted = request
        .uri()
        .path()
        .strip_prefix(ROUTE_PREFIX)
        .and_then(|name| sources.get(name))
        .is_some_and(|source| source.trust_traceparent);
    let inbound = if trusted { traces::http_context(request.headers()) } else { None };
    let parent = match &inbound {
        Some(span_context) => Parent::LinkedTo(span_context),
        None => Parent::Root,
    };
    TraceSpan::start(
        SpanKind::Server,
        parent,
        || format!("POST {ROUTE_PREFIX}{{source}}"),
        || {
            vec![
                KeyValue::new(attribute::HTTP_REQUEST_METHOD, request.method().as_str().to_owned()),
                KeyValue::new(attribute::HTTP_ROUTE, format!("{ROUTE_PREFIX}{{source}}")),
                KeyValue::new(attribute::SOURCE, source_label.to_owned()),
            ]
        },
    )
}

/// The `source` metric label: the configured name, or `unknown` (never the raw path: bounded cardinality).
pub(super) fn source_label<'a>(sources: &'a SourceTable, path: &str) -> &'a str {
    path.strip_prefix(ROUTE_PREFIX).and_then(|name| sources.name_of(name)).unwrap_or(UNKNOWN_SOURCE)
}
