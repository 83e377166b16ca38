//! The gateway's metrics, defined once. Labels are bounded: source names come from config, outcomes from
//! [`crate::error::Outcome`].

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

#[derive(Debug, Clone)]
pub struct Metrics {
    /// `hookline_gateway_requests_total{source, outcome}`.
    pub requests: IntCounterVec,
    /// `hookline_gateway_verified_total{source, secret_id}`: which secret matched, for rotations.
    pub verified: IntCounterVec,
    /// `hookline_gateway_request_duration_seconds{source, outcome}`: socket to response.
    pub request_duration: HistogramVec,
    /// `hookline_gateway_produce_duration_seconds{outcome}`: produce call to delivery report.
    pub produce_duration: HistogramVec,
    /// `hookline_gateway_in_flight_requests`.
    pub in_flight: IntGauge,
}

const LATENCY_BUCKETS: &[f64] = &[0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

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
            in_flight: IntGauge::new("hookline_gateway_in_flight_requests", "Requests being handled.")?,
        };
        registry.register(Box::new(metrics.requests.clone()))?;
        registry.register(Box::new(metrics.verified.clone()))?;
        registry.register(Box::new(metrics.request_duration.clone()))?;
        registry.register(Box::new(metrics.produce_duration.clone()))?;
        registry.register(Box::new(metrics.in_flight.clone()))?;
        Ok(metrics)
    }
}
