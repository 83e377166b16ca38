//! The consumer's metrics, defined once. Labels are bounded: source names, outcomes, error classes.

use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

#[derive(Debug, Clone)]
pub struct Metrics {
    /// `hookline_consumer_events_total{source, outcome}`: outcome is `processed`, `duplicate` or `dead_lettered`.
    pub events: IntCounterVec,
    /// `hookline_consumer_handler_failures_total{source, class}`: each failed handler attempt.
    pub handler_failures: IntCounterVec,
    /// `hookline_consumer_dead_lettered_total{source, error_class}`: the alerting signal for the DLQ.
    pub dead_lettered: IntCounterVec,
    /// `hookline_consumer_handle_duration_seconds{source}`: one successful handler call.
    pub handle_duration: HistogramVec,
    /// `hookline_consumer_dedupe_errors_total`: Redis errors and timeouts (the consumer pauses on each).
    pub dedupe_errors: IntCounter,
    /// `hookline_consumer_claim_conflicts_total`: claims found held by another consumer.
    pub claim_conflicts: IntCounter,
    /// `hookline_consumer_dlq_produce_errors_total`: failed dead-letter produces (retried; the offset waits).
    pub dlq_produce_errors: IntCounter,
    /// `hookline_consumer_records_consumed_total`: records fetched from the inbound topic.
    pub consumed: IntCounter,
    /// `hookline_consumer_retries_total{source}`: handler retries scheduled.
    pub retries: IntCounterVec,
    /// `hookline_consumer_redis_duration_seconds{operation}`: claim, done, release round trips.
    pub redis_duration: HistogramVec,
    /// `hookline_consumer_paused`: 1 while processing is paused because Redis fails.
    pub paused: IntGauge,
    /// `hookline_consumer_fetch_errors_total`: errors the fetch loop received (a broker down repeats them; the log
    /// has a summary per interval, this counts every one).
    pub fetch_errors: IntCounter,
    /// `hookline_consumer_lag_records{partition}`: high watermark minus the group's committed offset (the low
    /// watermark when nothing is committed), per assigned inbound partition.
    pub lag: IntGaugeVec,
    /// `hookline_consumer_assigned_partitions`.
    pub assigned_partitions: IntGauge,
    /// `hookline_consumer_in_flight_records`: records in the handler stage.
    pub in_flight: IntGauge,
    /// `hookline_consumer_window_records`: records fetched and not yet committed, across partitions.
    pub windowed: IntGauge,
    /// `hookline_consumer_records_dropped_total`: fetched records of a revoked partition, or re-fetched ones.
    pub dropped: IntCounter,
    /// `hookline_consumer_deferred_total{source, reason}`: records parked in the retry topic without an attempt,
    /// because their route was saturated (`saturated`) or its breaker open (`breaker_open`).
    pub deferred: IntCounterVec,
    /// `hookline_consumer_route_breaker_open{route}`: 1 while the route's circuit breaker is open or probing.
    pub route_breaker_open: IntGaugeVec,
}

impl Metrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let metrics = Self {
            events: IntCounterVec::new(
                Opts::new("hookline_consumer_events_total", "Events handled, by source and outcome."),
                &["source", "outcome"],
            )?,
            handler_failures: IntCounterVec::new(
                Opts::new("hookline_consumer_handler_failures_total", "Failed handler attempts."),
                &["source", "class"],
            )?,
            dead_lettered: IntCounterVec::new(
                Opts::new("hookline_consumer_dead_lettered_total", "Events published to the dead-letter topic."),
                &["source", "error_class"],
            )?,
            handle_duration: HistogramVec::new(
                HistogramOpts::new("hookline_consumer_handle_duration_seconds", "Successful handler call time."),
                &["source"],
            )?,
            dedupe_errors: IntCounter::new("hookline_consumer_dedupe_errors_total", "Redis errors and timeouts.")?,
            claim_conflicts: IntCounter::new(
                "hookline_consumer_claim_conflicts_total",
                "Claims found held by another consumer.",
            )?,
            dlq_produce_errors: IntCounter::new(
                "hookline_consumer_dlq_produce_errors_total",
                "Failed dead-letter produces.",
            )?,
            consumed: IntCounter::new("hookline_consumer_records_consumed_total", "Records fetched.")?,
            retries: IntCounterVec::new(
                Opts::new("hookline_consumer_retries_total", "Handler retries scheduled."),
                &["source"],
            )?,
            redis_duration: HistogramVec::new(
                HistogramOpts::new("hookline_consumer_redis_duration_seconds", "Dedupe round trips.")
                    .buckets(vec![0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 2.5]),
                &["operation"],
            )?,
            fetch_errors: IntCounter::new(
                "hookline_consumer_fetch_errors_total",
                "Errors received by the fetch loop (broker unreachable and the like).",
            )?,
            paused: IntGauge::new("hookline_consumer_paused", "1 while processing is paused because Redis fails.")?,
            lag: IntGaugeVec::new(
                Opts::new(
                    "hookline_consumer_lag_records",
                    "Records behind the high watermark from the committed offset, per partition.",
                ),
                &["partition"],
            )?,
            assigned_partitions: IntGauge::new("hookline_consumer_assigned_partitions", "Partitions assigned.")?,
            in_flight: IntGauge::new("hookline_consumer_in_flight_records", "Records in the handler stage.")?,
            windowed: IntGauge::new("hookline_consumer_window_records", "Records fetched and not yet committed.")?,
            dropped: IntCounter::new(
                "hookline_consumer_records_dropped_total",
                "Fetched records dropped: their partition was revoked, or they were fetched before.",
            )?,
            deferred: IntCounterVec::new(
                Opts::new("hookline_consumer_deferred_total", "Records parked in the retry topic without an attempt."),
                &["source", "reason"],
            )?,
            route_breaker_open: IntGaugeVec::new(
                Opts::new("hookline_consumer_route_breaker_open", "1 while the route's circuit breaker is open."),
                &["route"],
            )?,
        };
        registry.register(Box::new(metrics.deferred.clone()))?;
        registry.register(Box::new(metrics.route_breaker_open.clone()))?;
        registry.register(Box::new(metrics.in_flight.clone()))?;
        registry.register(Box::new(metrics.windowed.clone()))?;
        registry.register(Box::new(metrics.dropped.clone()))?;
        registry.register(Box::new(metrics.consumed.clone()))?;
        registry.register(Box::new(metrics.retries.clone()))?;
        registry.register(Box::new(metrics.redis_duration.clone()))?;
        registry.register(Box::new(metrics.paused.clone()))?;
        registry.register(Box::new(metrics.fetch_errors.clone()))?;
        registry.register(Box::new(metrics.lag.clone()))?;
        registry.register(Box::new(metrics.assigned_partitions.clone()))?;
        registry.register(Box::new(metrics.events.clone()))?;
        registry.register(Box::new(metrics.handler_failures.clone()))?;
        registry.register(Box::new(metrics.dead_lettered.clone()))?;
        registry.register(Box::new(metrics.handle_duration.clone()))?;
        registry.register(Box::new(metrics.dedupe_errors.clone()))?;
        registry.register(Box::new(metrics.claim_conflicts.clone()))?;
        registry.register(Box::new(metrics.dlq_produce_errors.clone()))?;
        Ok(metrics)
    }
}
