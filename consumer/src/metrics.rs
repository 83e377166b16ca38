//! The consumer's metrics, defined once. Labels are bounded: source names, outcomes, error classes.

use hookline_common::metrics_catalog::{
    self, MetricDescription,
    new::{counter, counter_vec, gauge, gauge_vec, histogram_vec},
};
use prometheus::{HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry, core::Collector};

#[derive(Debug, Clone)]
pub struct Metrics {
    /// `hookline_consumer_events_total{source, outcome}`: outcome is one of [`event_outcome::ALL`].
    pub events: IntCounterVec,
    /// `hookline_consumer_destination_events_total{destination, outcome}`: in a fan-out service, each destination's
    /// events by outcome (one of [`event_outcome::ALL`]; bounded: destinations are the config's route names).
    /// `hookline_consumer_events_total` counts every destination's outcome too, by source.
    pub destination_events: IntCounterVec,
    /// `hookline_consumer_filtered_total{route, filter}`: events a route's filter skipped for this service (each
    /// recorded as filtered in its dedupe key; bounded labels: both come from the config).
    pub filtered: IntCounterVec,
    /// `hookline_consumer_handler_failures_total{source, class}`: each failed handler attempt.
    pub handler_failures: IntCounterVec,
    /// `hookline_consumer_dead_lettered_total{source, error_class}`: the alerting signal for the DLQ.
    pub dead_lettered: IntCounterVec,
    /// `hookline_consumer_handle_duration_seconds{source}`: one successful handler call.
    pub handle_duration: HistogramVec,
    /// `hookline_consumer_event_age_seconds{source}`: from the gateway's acceptance (`received_at_ms`) to the
    /// event's processing, for events processed the first time (not replays or re-processing runs): how far
    /// behind the service runs, in time rather than records.
    pub event_age: HistogramVec,
    /// `hookline_consumer_dedupe_errors_total`: Redis errors and timeouts (the consumer pauses on each).
    pub dedupe_errors: IntCounter,
    /// `hookline_consumer_dedupe_bucket_fill`: outcomes per dedupe bucket in the last complete time slot, sampled
    /// every minute; past about 100 the service needs more buckets per slot (docs/dedupe.md, "Buckets per slot").
    pub dedupe_bucket_fill: IntGauge,
    /// `hookline_consumer_claim_conflicts_total`: claims found held by another consumer.
    pub claim_conflicts: IntCounter,
    /// `hookline_consumer_dlq_produce_errors_total`: failed dead-letter produces (retried; the offset waits).
    pub dlq_produce_errors: IntCounter,
    /// `hookline_consumer_panics_total{source}`: panics on a record's path (in its handler or elsewhere), each
    /// counted as a failed attempt of the record (`unknown` when the record names no source).
    pub panics: IntCounterVec,
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
    /// `hookline_consumer_window_bytes`: bytes of the records fetched and not yet committed (what
    /// `processing.max_window_bytes` bounds).
    pub windowed_bytes: IntGauge,
    /// `hookline_consumer_records_dropped_total`: fetched records of a revoked partition, or re-fetched ones.
    pub dropped: IntCounter,
    /// `hookline_consumer_deferred_total{source, reason}`: records parked in the retry topic without an attempt,
    /// because their route was saturated (`saturated`) or its breaker open (`breaker_open`).
    pub deferred: IntCounterVec,
    /// `hookline_consumer_route_breaker_open{route}`: 1 while the route's circuit breaker is open or probing.
    pub route_breaker_open: IntGaugeVec,
    /// `hookline_consumer_route_paused{route}`: 1 while an operator has the route paused.
    pub route_paused: IntGaugeVec,
    /// `hookline_consumer_route_waiting_records{route}`: records fetched and queued for the route (waiting for a
    /// slot, or held while it is paused or its breaker open).
    pub route_waiting_records: IntGaugeVec,
    /// `hookline_consumer_route_oldest_waiting_age_seconds{route}`: how long ago the oldest of them was written to
    /// Kafka (0 when none waits): alerted well before the topic's retention could delete an unhandled record.
    pub route_oldest_waiting_age: IntGaugeVec,
    /// `hookline_consumer_control_records_refused_total{reason}`: control records (route pauses) not applied:
    /// their MAC did not verify (`unauthenticated`) or they could not be read (`malformed`).
    pub control_refused: IntCounterVec,
    /// `hookline_consumer_record_auth_total{outcome}`: every record's MAC check, before dedupe or any handler
    /// (`authentic`, `unsigned_accepted` in the transition window, or why it was refused: see
    /// [`hookline_common::record_auth::outcome::ALL`]). No source label: a refused record's source is not known.
    pub record_auth: IntCounterVec,
    /// `hookline_consumer_unsigned_window_seconds_remaining`: seconds left in `kafka.record_auth.accept_unsigned_until`
    /// (records without a MAC processed), 0 outside such a window: a window left open is visible and alertable.
    pub unsigned_window_remaining: IntGauge,
    /// `hookline_consumer_postgres_transactions_total{source, outcome}`: each event transaction of a `postgres`
    /// handler, by how it ended ([`postgres_outcome::ALL`]).
    pub postgres_transactions: IntCounterVec,
    /// `hookline_consumer_postgres_pool_wait_seconds`: time to get a database connection (a full pool waits).
    pub postgres_pool_wait: HistogramVec,
    /// `hookline_consumer_postgres_transaction_seconds`: one event's transaction, BEGIN to COMMIT or ROLLBACK (an
    /// inbox row: from queueing it to its batch's answer).
    pub postgres_transaction: HistogramVec,
    /// `hookline_consumer_postgres_batch_rows`: rows per statement of an `inbox` handler (events waiting at the same
    /// time are stored together).
    pub postgres_batch_rows: HistogramVec,
    /// `hookline_consumer_postgres_dedupe_rows{table}`: the dedupe table's rows (the planner's estimate).
    pub postgres_dedupe_rows: IntGaugeVec,
    /// `hookline_consumer_postgres_oldest_row_age_seconds{table}`: age of the oldest dedupe row (retention works
    /// when it stays near `retention_days`).
    pub postgres_oldest_row_age: IntGaugeVec,
    /// `hookline_consumer_postgres_rows_deleted_total{table}`: dedupe rows deleted by retention.
    pub postgres_rows_deleted: IntCounterVec,
}

impl Metrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let metrics = Self {
            events: counter_vec(
                "hookline_consumer_events_total",
                "Events handled, by source and outcome.",
                &["source", "outcome"],
            )?,
            destination_events: counter_vec(
                "hookline_consumer_destination_events_total",
                "Events handled per destination of a fan-out service, by destination and outcome.",
                &["destination", "outcome"],
            )?,
            filtered: counter_vec(
                "hookline_consumer_filtered_total",
                "Events a route's filter skipped for this service, by route and filter.",
                &["route", "filter"],
            )?,
            handler_failures: counter_vec(
                "hookline_consumer_handler_failures_total",
                "Failed handler attempts.",
                &["source", "class"],
            )?,
            dead_lettered: counter_vec(
                "hookline_consumer_dead_lettered_total",
                "Events published to the dead-letter topic.",
                &["source", "error_class"],
            )?,
            handle_duration: histogram_vec(
                "hookline_consumer_handle_duration_seconds",
                "Successful handler call time.",
                &["source"],
                None,
            )?,
            event_age: histogram_vec(
                "hookline_consumer_event_age_seconds",
                "Time from the gateway's acceptance to processing, for events processed the first time.",
                &["source"],
                Some(&[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0]),
            )?,
            dedupe_errors: counter("hookline_consumer_dedupe_errors_total", "Redis errors and timeouts.")?,
            dedupe_bucket_fill: gauge(
                "hookline_consumer_dedupe_bucket_fill",
                "Outcomes per dedupe bucket in the last complete time slot, sampled each minute.",
            )?,
            claim_conflicts: counter(
                "hookline_consumer_claim_conflicts_total",
                "Claims found held by another consumer.",
            )?,
            dlq_produce_errors: counter("hookline_consumer_dlq_produce_errors_total", "Failed dead-letter produces.")?,
            panics: counter_vec(
                "hookline_consumer_panics_total",
                "Panics on a record's path, each counted as a failed attempt of the record.",
                &["source"],
            )?,
            consumed: counter("hookline_consumer_records_consumed_total", "Records fetched.")?,
            retries: counter_vec("hookline_consumer_retries_total", "Handler retries scheduled.", &["source"])?,
            redis_duration: histogram_vec(
                "hookline_consumer_redis_duration_seconds",
                "Dedupe round trips.",
                &["operation"],
                Some(&[0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 2.5]),
            )?,
            fetch_errors: counter(
                "hookline_consumer_fetch_errors_total",
                "Errors received by the fetch loop (broker unreachable and the like).",
            )?,
            paused: gauge("hookline_consumer_paused", "1 while processing is paused because Redis fails.")?,
            lag: gauge_vec(
                "hookline_consumer_lag_records",
                "Records behind the high watermark from the committed offset, per partition.",
                &["partition"],
            )?,
            assigned_partitions: gauge("hookline_consumer_assigned_partitions", "Partitions assigned.")?,
            in_flight: gauge("hookline_consumer_in_flight_records", "Records in the handler stage.")?,
            windowed: gauge("hookline_consumer_window_records", "Records fetched and not yet committed.")?,
            windowed_bytes: gauge(
                "hookline_consumer_window_bytes",
                "Bytes (payload, key, headers) of the records fetched and not yet committed.",
            )?,
            dropped: counter(
                "hookline_consumer_records_dropped_total",
                "Fetched records dropped: their partition was revoked, or they were fetched before.",
            )?,
            deferred: counter_vec(
                "hookline_consumer_deferred_total",
                "Records parked in the retry topic without an attempt.",
                &["source", "reason"],
            )?,
            route_breaker_open: gauge_vec(
                "hookline_consumer_route_breaker_open",
                "1 while the route's circuit breaker is open.",
                &["route"],
            )?,
            route_paused: gauge_vec(
                "hookline_consumer_route_paused",
                "1 while an operator has the route paused.",
                &["route"],
            )?,
            route_waiting_records: gauge_vec(
                "hookline_consumer_route_waiting_records",
                "Records fetched and queued for the route (waiting for a slot, or held while paused or its breaker is open).",
                &["route"],
            )?,
            route_oldest_waiting_age: gauge_vec(
                "hookline_consumer_route_oldest_waiting_age_seconds",
                "Age of the route's oldest waiting record since it was written to Kafka.",
                &["route"],
            )?,
            control_refused: counter_vec(
                "hookline_consumer_control_records_refused_total",
                "Control records (route pauses) not applied, by reason.",
                &["reason"],
            )?,
            record_auth: counter_vec(
                "hookline_consumer_record_auth_total",
                "Records checked for hookline's MAC before dedupe, by outcome.",
                &["outcome"],
            )?,
            unsigned_window_remaining: gauge(
                "hookline_consumer_unsigned_window_seconds_remaining",
                "Seconds left in kafka.record_auth.accept_unsigned_until, when records without a MAC are processed; 0 outside it.",
            )?,
            postgres_transactions: counter_vec(
                "hookline_consumer_postgres_transactions_total",
                "Event transactions of postgres handlers, by outcome.",
                &["source", "outcome"],
            )?,
            postgres_pool_wait: histogram_vec(
                "hookline_consumer_postgres_pool_wait_seconds",
                "Time to get a connection from a postgres handler's pool.",
                &[],
                Some(&[0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5]),
            )?,
            postgres_transaction: histogram_vec(
                "hookline_consumer_postgres_transaction_seconds",
                "One event's transaction in a postgres handler, BEGIN to COMMIT or ROLLBACK.",
                &[],
                Some(&[0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0]),
            )?,
            postgres_batch_rows: histogram_vec(
                "hookline_consumer_postgres_batch_rows",
                "Rows per statement of a postgres inbox handler (events waiting at the same time go together).",
                &[],
                Some(&[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]),
            )?,
            postgres_dedupe_rows: gauge_vec(
                "hookline_consumer_postgres_dedupe_rows",
                "Rows of a postgres handler's dedupe table (the planner's estimate).",
                &["table"],
            )?,
            postgres_oldest_row_age: gauge_vec(
                "hookline_consumer_postgres_oldest_row_age_seconds",
                "Age of the oldest row of a postgres handler's dedupe table.",
                &["table"],
            )?,
            postgres_rows_deleted: counter_vec(
                "hookline_consumer_postgres_rows_deleted_total",
                "Dedupe rows deleted by retention.",
                &["table"],
            )?,
        };
        metrics_catalog::register_all(registry, metrics.collectors())?;
        Ok(metrics)
    }

    /// Every metric of the service: what [`Self::register`] registers and `--print-metrics` describes.
    pub fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.events.clone()),
            Box::new(self.destination_events.clone()),
            Box::new(self.filtered.clone()),
            Box::new(self.handler_failures.clone()),
            Box::new(self.dead_lettered.clone()),
            Box::new(self.handle_duration.clone()),
            Box::new(self.event_age.clone()),
            Box::new(self.dedupe_errors.clone()),
            Box::new(self.dedupe_bucket_fill.clone()),
            Box::new(self.claim_conflicts.clone()),
            Box::new(self.dlq_produce_errors.clone()),
            Box::new(self.panics.clone()),
            Box::new(self.consumed.clone()),
            Box::new(self.retries.clone()),
            Box::new(self.redis_duration.clone()),
            Box::new(self.paused.clone()),
            Box::new(self.fetch_errors.clone()),
            Box::new(self.lag.clone()),
            Box::new(self.assigned_partitions.clone()),
            Box::new(self.in_flight.clone()),
            Box::new(self.windowed.clone()),
            Box::new(self.windowed_bytes.clone()),
            Box::new(self.dropped.clone()),
            Box::new(self.deferred.clone()),
            Box::new(self.route_breaker_open.clone()),
            Box::new(self.route_paused.clone()),
            Box::new(self.route_waiting_records.clone()),
            Box::new(self.route_oldest_waiting_age.clone()),
            Box::new(self.control_refused.clone()),
            Box::new(self.record_auth.clone()),
            Box::new(self.unsigned_window_remaining.clone()),
            Box::new(self.postgres_transactions.clone()),
            Box::new(self.postgres_pool_wait.clone()),
            Box::new(self.postgres_transaction.clone()),
            Box::new(self.postgres_batch_rows.clone()),
            Box::new(self.postgres_dedupe_rows.clone()),
            Box::new(self.postgres_oldest_row_age.clone()),
            Box::new(self.postgres_rows_deleted.clone()),
        ]
    }

    /// The service's metric families (name, type, help, labels), labelled ones without series included, with no
    /// registry, broker or config: what `--print-metrics` prints.
    /// Sets the routes' gauges from the scheduler's reports.
    pub fn report_routes(&self, reports: &[crate::schedule::RouteReport], now_ms: i64) {
        for report in reports {
            let label = [report.label.as_str()];
            self.route_paused.with_label_values(&label).set(i64::from(report.paused.is_some()));
            self.route_waiting_records.with_label_values(&label).set(i64::try_from(report.waiting).unwrap_or(i64::MAX));
            let age_s = report.oldest_waiting_ms.map_or(0, |written_ms| (now_ms - written_ms).max(0) / 1000);
            self.route_oldest_waiting_age.with_label_values(&label).set(age_s);
        }
    }

    pub fn describe() -> Result<Vec<MetricDescription>, prometheus::Error> {
        let mut described = metrics_catalog::describe(&Self::register(&Registry::new())?.collectors());
        // The service's registry adds the `service` label to every series (see [`service_registry`]).
        for family in &mut described {
            family.labels.push(SERVICE_LABEL.to_owned());
        }
        metrics_catalog::set_label_values(
            &mut described,
            "hookline_consumer_events_total",
            "outcome",
            event_outcome::ALL,
        );
        metrics_catalog::set_label_values(
            &mut described,
            "hookline_consumer_destination_events_total",
            "outcome",
            event_outcome::ALL,
        );
        metrics_catalog::set_label_values(
            &mut described,
            "hookline_consumer_postgres_transactions_total",
            "outcome",
            postgres_outcome::ALL,
        );
        metrics_catalog::set_label_values(
            &mut described,
            "hookline_consumer_record_auth_total",
            "outcome",
            hookline_common::record_auth::outcome::ALL,
        );
        Ok(described)
    }
}

/// The `outcome` label values of `hookline_consumer_events_total`.
/// The label every consumer series carries: the consumer service's name, so that several services' consumers
/// scraped into one Prometheus stay apart (dashboards and alert rules group by it).
pub const SERVICE_LABEL: &str = "service";

/// The registry of one consumer: every metric registered in it is exported with `service="<service>"`.
pub fn service_registry(service: &str) -> Result<Registry, prometheus::Error> {
    let labels = std::collections::HashMap::from([(SERVICE_LABEL.to_owned(), service.to_owned())]);
    Registry::new_custom(None, Some(labels))
}

/// Keeps `hookline_consumer_unsigned_window_seconds_remaining` at the seconds left until `until_ms` (the end of
/// `kafka.record_auth.accept_unsigned_until`; `None`: no window), updated once a minute until shutdown.
pub async fn track_unsigned_window(
    until_ms: Option<i64>,
    gauge: IntGauge,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        gauge.set(unsigned_window_seconds(until_ms, hookline_common::wire::now_ms()));
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
        }
    }
}

/// Whole seconds from `now_ms` to `until_ms`, rounded up; 0 without a window or after it.
fn unsigned_window_seconds(until_ms: Option<i64>, now_ms: i64) -> i64 {
    until_ms.map_or(0, |until_ms| (until_ms.saturating_sub(now_ms).max(0) + 999) / 1000)
}

pub mod postgres_outcome {
    /// The work committed with its dedupe row.
    pub const APPLIED: &str = "applied";
    /// A guard matched no row (`on_zero_rows = "skip"`): the dedupe row committed marked skipped.
    pub const SKIPPED: &str = "skipped";
    /// The dedupe row was there: the effect happened before; rolled back.
    pub const DUPLICATE: &str = "duplicate";
    /// Rolled back; the attempt is retried (a lost connection, a timeout, a serialization failure, 0 rows with
    /// `on_zero_rows = "retry"`).
    pub const RETRYABLE: &str = "retryable";
    /// Rolled back; the event is dead-lettered (bad data, a constraint, a trigger refusing, a row count).
    pub const POISON: &str = "poison";
    /// Rolled back; the schema or grants changed under the consumer: retried, so the breaker and the alert act.
    pub const SCHEMA_CHANGED: &str = "schema_changed";
    /// A stale prepared statement (after DDL), prepared again and the transaction run once more.
    pub const REPREPARED: &str = "reprepared";
    pub const ALL: &[&str] = &[APPLIED, SKIPPED, DUPLICATE, RETRYABLE, POISON, SCHEMA_CHANGED, REPREPARED];
}

pub mod event_outcome {
    pub const PROCESSED: &str = "processed";
    pub const DUPLICATE: &str = "duplicate";
    /// Dead-lettered before (within the dedupe TTL): a re-send skipped; only a re-drive of its entry runs it.
    pub const DEAD_LETTERED_BEFORE: &str = "dead_lettered_before";
    pub const DEAD_LETTERED: &str = "dead_lettered";
    /// An ordered record retried in memory.
    pub const RETRY_LATER: &str = "retry_later";
    /// Parked in the retry topic.
    pub const RETRY_SCHEDULED: &str = "retry_scheduled";
    /// Addressed to another consumer service (its retry, replay or re-processing record): skipped, no effect.
    pub const OTHER_SERVICE: &str = "other_service";
    /// Skipped by its route's filter, and recorded so (`hookline_consumer_filtered_total` says which filter).
    pub const FILTERED: &str = "filtered";
    /// Every value, as `--print-metrics` lists them.
    pub const ALL: &[&str] = &[
        PROCESSED,
        DUPLICATE,
        DEAD_LETTERED_BEFORE,
        DEAD_LETTERED,
        RETRY_LATER,
        RETRY_SCHEDULED,
        FILTERED,
        OTHER_SERVICE,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unsigned_window_gauge_counts_down_to_zero() {
        assert_eq!(unsigned_window_seconds(None, 1_000), 0);
        assert_eq!(unsigned_window_seconds(Some(61_000), 1_000), 60);
        assert_eq!(unsigned_window_seconds(Some(1_500), 1_000), 1);
        assert_eq!(unsigned_window_seconds(Some(1_000), 2_000), 0, "a window that ended");
    }

    /// `--print-metrics` lists exactly what `/metrics` exports once every metric has a series: a metric registered
    /// some other way, or described but not registered, fails here.
    #[test]
    fn print_metrics_lists_what_the_registry_gathers() {
        let registry = service_registry("billing").unwrap();
        let metrics = Metrics::register(&registry).unwrap();
        metrics.events.with_label_values(&["s", "processed"]).inc();
        metrics.filtered.with_label_values(&["r", "f"]).inc();
        metrics.handler_failures.with_label_values(&["s", "retryable"]).inc();
        metrics.dead_lettered.with_label_values(&["s", "poison"]).inc();
        metrics.handle_duration.with_label_values(&["s"]).observe(0.01);
        metrics.event_age.with_label_values(&["s"]).observe(0.2);
        metrics.dedupe_errors.inc();
        metrics.dedupe_bucket_fill.set(40);
        metrics.claim_conflicts.inc();
        metrics.dlq_produce_errors.inc();
        metrics.panics.with_label_values(&["s"]).inc();
        metrics.consumed.inc();
        metrics.retries.with_label_values(&["s"]).inc();
        metrics.redis_duration.with_label_values(&["claim"]).observe(0.001);
        metrics.paused.set(1);
        metrics.fetch_errors.inc();
        metrics.lag.with_label_values(&["0"]).set(1);
        metrics.assigned_partitions.set(1);
        metrics.in_flight.set(1);
        metrics.windowed.set(1);
        metrics.windowed_bytes.set(1);
        metrics.dropped.inc();
        metrics.deferred.with_label_values(&["s", "saturated"]).inc();
        metrics.route_breaker_open.with_label_values(&["r"]).set(1);
        metrics.route_paused.with_label_values(&["r"]).set(1);
        metrics.route_waiting_records.with_label_values(&["r"]).set(1);
        metrics.route_oldest_waiting_age.with_label_values(&["r"]).set(1);
        metrics.control_refused.with_label_values(&["unauthenticated"]).inc();
        metrics.record_auth.with_label_values(&["authentic"]).inc();
        metrics.unsigned_window_remaining.set(1);
        metrics.postgres_transactions.with_label_values(&["s", "applied"]).inc();
        metrics.postgres_pool_wait.with_label_values(&[] as &[&str]).observe(0.001);
        metrics.postgres_transaction.with_label_values(&[] as &[&str]).observe(0.001);
        metrics.postgres_batch_rows.with_label_values(&[] as &[&str]).observe(3.0);
        metrics.postgres_dedupe_rows.with_label_values(&["t"]).set(1);
        metrics.postgres_oldest_row_age.with_label_values(&["t"]).set(1);
        metrics.postgres_rows_deleted.with_label_values(&["t"]).inc();
        metrics.destination_events.with_label_values(&["ledger", "processed"]).inc();
        let described = Metrics::describe().unwrap();
        assert_eq!(described.len(), 38);
        assert_eq!(metrics_catalog::gathered(&registry), metrics_catalog::with_sorted_labels(described));
    }
}
