//! The gateway's metrics, defined once. Labels are bounded: source names come from config (`unknown` for any
//! other path), outcomes from [`crate::error::Rejection::code`] plus `accepted` and `handshake`, reasons from
//! `VerifyError::reason`, secret ids from config.

use hookline_common::metrics_catalog::{self, MetricDescription};
use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry, core::Collector,
};

#[derive(Debug, Clone)]
pub struct Metrics {
    /// `hookline_gateway_requests_total{source, outcome}`.
    pub requests: IntCounterVec,
    /// `hookline_gateway_verified_total{source, secret_id}`: which secret matched, for rotations.
    pub verified: IntCounterVec,
    /// `hookline_gateway_verification_failures_total{source, reason}`.
    pub verification_failures: IntCounterVec,
    /// `hookline_gateway_request_duration_seconds{source, outcome}`: socket to response.
    pub request_duration: HistogramVec,
    /// `hookline_gateway_produce_duration_seconds{outcome}`: produce call to delivery report.
    pub produce_duration: HistogramVec,
    /// `hookline_gateway_body_size_bytes{source}`: bodies read in full.
    pub body_size: HistogramVec,
    /// `hookline_gateway_in_flight_requests`.
    pub in_flight: IntGauge,
    /// `hookline_gateway_producer_queue_depth`: records queued or awaiting the broker's acknowledgement.
    pub producer_queue_depth: IntGauge,
    /// `hookline_gateway_peer_paced_total`: requests that waited for their turn under `limits.peer_rate_per_s`
    /// (those refused are `hookline_gateway_requests_total{outcome="rate_limited"}`).
    pub peer_paced: IntCounter,
    /// `hookline_gateway_source_quota_tokens{source}`: the requests each source with a quota may send now before
    /// it is refused (its burst when idle, 0 while it is throttled), computed when `/metrics` is read. Its refusals
    /// are `hookline_gateway_requests_total{outcome="quota_exceeded"}`.
    pub source_quota_tokens: GaugeVec,
    /// `hookline_gateway_config_reloads_total{outcome}`: `applied` or `rejected`.
    pub reloads: IntCounterVec,
    pub key_fetches: IntCounterVec,
    pub key_cache_lookups: IntCounterVec,
    pub key_cache_entries: IntGauge,
    pub key_cache_bytes: IntGauge,
    /// `hookline_gateway_key_fetches_refused_total{reason}`: keys not held that were not fetched (`miss_budget`:
    /// the source's `key_fetch.misses_per_source` spent; `in_flight`: `key_fetch.max_fetches_in_flight` reached).
    pub key_fetches_refused: IntCounterVec,
}

const LATENCY_BUCKETS: &[f64] = &[0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
const SIZE_BUCKETS: &[f64] =
    &[256.0, 1024.0, 4096.0, 16_384.0, 65_536.0, 262_144.0, 1_048_576.0, 4_194_304.0, 16_777_216.0];

impl Metrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let metrics = Self {
            requests: IntCounterVec::new(
                Opts::new("hookline_gateway_requests_total", "Webhook requests by source and outcome."),
                &["source", "outcome"],
            )?,
            verified: IntCounterVec::new(
                Opts::new("hookline_gateway_verified_total", "Verified requests by the secret that matched."),
                &["source", "secret_id"],
            )?,
            verification_failures: IntCounterVec::new(
                Opts::new("hookline_gateway_verification_failures_total", "Requests that failed verification."),
                &["source", "reason"],
            )?,
            request_duration: HistogramVec::new(
                HistogramOpts::new("hookline_gateway_request_duration_seconds", "Time from request to response.")
                    .buckets(LATENCY_BUCKETS.to_vec()),
                &["source", "outcome"],
            )?,
            produce_duration: HistogramVec::new(
                HistogramOpts::new("hookline_gateway_produce_duration_seconds", "Time from produce to broker ack.")
                    .buckets(LATENCY_BUCKETS.to_vec()),
                &["outcome"],
            )?,
            body_size: HistogramVec::new(
                HistogramOpts::new("hookline_gateway_body_size_bytes", "Sizes of request bodies read in full.")
                    .buckets(SIZE_BUCKETS.to_vec()),
                &["source"],
            )?,
            in_flight: IntGauge::new("hookline_gateway_in_flight_requests", "Requests being handled.")?,
            producer_queue_depth: IntGauge::new(
                "hookline_gateway_producer_queue_depth",
                "Records queued in the producer or awaiting the broker's acknowledgement.",
            )?,
            peer_paced: IntCounter::new(
                "hookline_gateway_peer_paced_total",
                "Requests that waited for their turn under the per-address request rate.",
            )?,
            source_quota_tokens: GaugeVec::new(
                Opts::new(
                    "hookline_gateway_source_quota_tokens",
                    "Requests each source with a quota may send now before it is refused (429 quota_exceeded).",
                ),
                &["source"],
            )?,
            reloads: IntCounterVec::new(
                Opts::new("hookline_gateway_config_reloads_total", "Config reloads by outcome."),
                &["outcome"],
            )?,
            key_fetches: IntCounterVec::new(
                Opts::new(
                    "hookline_gateway_key_fetches_total",
                    "Fetches from providers' pinned key hosts (certificates, SNS subscription confirmations).",
                ),
                &["provider", "kind", "outcome"],
            )?,
            key_cache_lookups: IntCounterVec::new(
                Opts::new(
                    "hookline_gateway_key_cache_lookups_total",
                    "Lookups of fetched keys: hit, miss (a fetch follows), failing (a recent fetch failed: 503).",
                ),
                &["outcome"],
            )?,
            key_cache_entries: IntGauge::new(
                "hookline_gateway_key_cache_entries",
                "Fetched keys (and remembered fetch failures) held.",
            )?,
            key_cache_bytes: IntGauge::new("hookline_gateway_key_cache_bytes", "Bytes of fetched certificates held.")?,
            key_fetches_refused: IntCounterVec::new(
                Opts::new(
                    "hookline_gateway_key_fetches_refused_total",
                    "Keys not held that were not fetched (503): the source's miss budget spent, or too many in flight.",
                ),
                &["reason"],
            )?,
        };
        metrics_catalog::register_all(registry, metrics.collectors())?;
        Ok(metrics)
    }

    /// Every metric of the service: what [`Self::register`] registers and `--print-metrics` describes.
    pub fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.requests.clone()),
            Box::new(self.verified.clone()),
            Box::new(self.verification_failures.clone()),
            Box::new(self.request_duration.clone()),
            Box::new(self.produce_duration.clone()),
            Box::new(self.body_size.clone()),
            Box::new(self.in_flight.clone()),
            Box::new(self.producer_queue_depth.clone()),
            Box::new(self.peer_paced.clone()),
            Box::new(self.source_quota_tokens.clone()),
            Box::new(self.reloads.clone()),
            Box::new(self.key_fetches.clone()),
            Box::new(self.key_cache_lookups.clone()),
            Box::new(self.key_cache_entries.clone()),
            Box::new(self.key_cache_bytes.clone()),
            Box::new(self.key_fetches_refused.clone()),
        ]
    }

    /// The service's metric families (name, type, help, labels), labelled ones without series included, with no
    /// registry, broker or config: what `--print-metrics` prints.
    pub fn describe() -> Result<Vec<MetricDescription>, prometheus::Error> {
        let mut described = metrics_catalog::describe(&Self::register(&Registry::new())?.collectors());
        let mut outcomes = vec![outcome::ACCEPTED, outcome::HANDSHAKE];
        outcomes.extend(crate::error::Rejection::codes());
        for name in ["hookline_gateway_requests_total", "hookline_gateway_request_duration_seconds"] {
            metrics_catalog::set_label_values(&mut described, name, "outcome", &outcomes);
        }
        metrics_catalog::set_label_values(
            &mut described,
            "hookline_gateway_key_fetches_total",
            "kind",
            &["certificate", "confirmation"],
        );
        metrics_catalog::set_label_values(
            &mut described,
            "hookline_gateway_key_fetches_total",
            "outcome",
            &["ok", "timeout", "too_large", "status", "unreachable", "not_a_certificate"],
        );
        metrics_catalog::set_label_values(
            &mut described,
            "hookline_gateway_key_cache_lookups_total",
            "outcome",
            &["hit", "miss", "failing"],
        );
        metrics_catalog::set_label_values(
            &mut described,
            "hookline_gateway_key_fetches_refused_total",
            "reason",
            &["miss_budget", "in_flight"],
        );
        let produced = [outcome::ACKED, outcome::FAILED];
        metrics_catalog::set_label_values(
            &mut described,
            "hookline_gateway_produce_duration_seconds",
            "outcome",
            &produced,
        );
        Ok(described)
    }
}

/// The `outcome` label values that are not a [`crate::error::Rejection`] code.
pub mod outcome {
    /// A request answered 2xx after the broker's acknowledgement.
    pub const ACCEPTED: &str = "accepted";
    /// A provider's handshake, answered after it verified and never produced.
    pub const HANDSHAKE: &str = "handshake";
    /// `produce_duration_seconds`: the broker acknowledged the record.
    pub const ACKED: &str = "acked";
    /// `produce_duration_seconds`: it did not (timeout, full queue, broker error).
    pub const FAILED: &str = "failed";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outcome values alert rules may name come from the code, every rejection and verification failure included.
    #[test]
    fn print_metrics_lists_every_outcome_the_gateway_answers_with() {
        let described = Metrics::describe().unwrap();
        let requests = described.iter().find(|metric| metric.name == "hookline_gateway_requests_total").unwrap();
        let outcomes = &requests.label_values["outcome"];
        for expected in
            ["accepted", "handshake", "signature_mismatch", "timestamp_stale", "rate_limited", "broker_unavailable"]
        {
            assert!(outcomes.iter().any(|outcome| outcome == expected), "{expected} not in {outcomes:?}");
        }
        assert_eq!(outcomes.len(), 2 + 16 + 12, "every rejection code and verification reason once: {outcomes:?}");
    }

    /// `--print-metrics` lists exactly what `/metrics` exports once every metric has a series: a metric registered
    /// some other way, or described but not registered, fails here.
    #[test]
    fn print_metrics_lists_what_the_registry_gathers() {
        let registry = Registry::new();
        let metrics = Metrics::register(&registry).unwrap();
        metrics.requests.with_label_values(&["s", "accepted"]).inc();
        metrics.verified.with_label_values(&["s", "v1"]).inc();
        metrics.verification_failures.with_label_values(&["s", "mismatch"]).inc();
        metrics.request_duration.with_label_values(&["s", "accepted"]).observe(0.01);
        metrics.produce_duration.with_label_values(&["ok"]).observe(0.01);
        metrics.body_size.with_label_values(&["s"]).observe(100.0);
        metrics.in_flight.set(1);
        metrics.producer_queue_depth.set(1);
        metrics.peer_paced.inc();
        metrics.source_quota_tokens.with_label_values(&["s"]).set(2.5);
        metrics.reloads.with_label_values(&["applied"]).inc();
        metrics.key_fetches.with_label_values(&["sns", "certificate", "ok"]).inc();
        metrics.key_cache_lookups.with_label_values(&["hit"]).inc();
        metrics.key_cache_entries.set(1);
        metrics.key_cache_bytes.set(1);
        metrics.key_fetches_refused.with_label_values(&["miss_budget"]).inc();
        let described = Metrics::describe().unwrap();
        assert_eq!(described.len(), 16);
        assert_eq!(metrics_catalog::gathered(&registry), metrics_catalog::with_sorted_labels(described));
    }
}
