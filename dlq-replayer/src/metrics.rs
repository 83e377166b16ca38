//! The replayer's metrics, defined once.

use hookline_common::metrics_catalog::{self, MetricDescription};
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, core::Collector};

use crate::index::Index;

#[derive(Debug, Clone)]
pub struct Metrics {
    /// `hookline_dlq_entries{status,source,service,error_class}`: entries in the DLQ topic, refreshed periodically.
    pub entries: IntGaugeVec,
    /// `hookline_dlq_oldest_untriaged_age_seconds{source,service}`: how long ago the oldest entry nobody has dealt with
    /// (`new`, `replay_failed`, `replay_overdue`) became a dead letter; absent for a (source, service) with none.
    pub oldest_untriaged_age_seconds: IntGaugeVec,
    /// `hookline_dlq_oldest_by_reference_age_seconds{source,service}`: how long ago the event of the oldest
    /// unresolved dead letter *by reference* first failed. Its body is only at its original position and expires
    /// with that topic's retention (the inbound topic's 7 days by default): `HooklineDLQBodyExpiring` fires before.
    pub oldest_by_reference_age_seconds: IntGaugeVec,
    /// `hookline_dlq_index_entries`: entries the replayer's index holds.
    pub index_entries: IntGauge,
    /// `hookline_dlq_index_unverified_entries`: entries whose DLQ record's MAC did not verify (a writer without the
    /// record key): indexed with none of their strings, listed as `unverified`, never untriaged.
    pub index_unverified_entries: IntGauge,
    /// `hookline_dlq_index_string_bytes`: the bytes of the strings the index interns (each cut to 2 KiB).
    pub index_string_bytes: IntGauge,
    /// `hookline_dlq_replays_total`: entries re-driven through the API.
    pub replays: IntCounter,
    /// `hookline_dlq_discards_total`: entries discarded through the API.
    pub discards: IntCounter,
    /// `hookline_replayer_record_auth_total{outcome}`: the index's MAC check of every status record it reads
    /// (outcomes as the consumer's, [`hookline_common::record_auth::outcome::ALL`]); a refused one is never
    /// applied. Mirrors [`crate::index::StatusCounts`] at each refresh.
    pub record_auth: IntCounterVec,
    /// `hookline_replayer_status_records_dropped_total{reason}`: authentic status records not kept, because their
    /// position is behind the DLQ tail with no entry (`no_such_entry`) or too many wait for their entries
    /// (`too_many_early`).
    pub status_records_dropped: IntCounterVec,
    /// `hookline_replayer_auth_failures_total{surface}`: wrong tokens presented to the JSON API (`api`) or the
    /// console's login form (`console`).
    pub auth_failures: IntCounterVec,
}

impl Metrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let metrics = Self {
            entries: IntGaugeVec::new(
                Opts::new(
                    "hookline_dlq_entries",
                    "Dead-letter entries by status, source, consumer service and error class.",
                ),
                &["status", "source", "service", "error_class"],
            )?,
            oldest_untriaged_age_seconds: IntGaugeVec::new(
                Opts::new(
                    "hookline_dlq_oldest_untriaged_age_seconds",
                    "Age of the oldest dead-letter entry nobody has replayed or discarded, per source and service.",
                ),
                &["source", "service"],
            )?,
            oldest_by_reference_age_seconds: IntGaugeVec::new(
                Opts::new(
                    "hookline_dlq_oldest_by_reference_age_seconds",
                    "Age of the event of the oldest unresolved dead letter by reference (its body expires with the \
                     original topic's retention), per source and service.",
                ),
                &["source", "service"],
            )?,
            index_entries: IntGauge::new("hookline_dlq_index_entries", "Entries in the replayer's index.")?,
            index_unverified_entries: IntGauge::new(
                "hookline_dlq_index_unverified_entries",
                "Entries whose dead-letter record's MAC did not verify: indexed without their strings, never untriaged.",
            )?,
            index_string_bytes: IntGauge::new(
                "hookline_dlq_index_string_bytes",
                "Bytes of the strings the replayer's index interns (each cut to 2 KiB).",
            )?,
            replays: IntCounter::new("hookline_dlq_replays_total", "Entries re-driven through the admin API.")?,
            discards: IntCounter::new("hookline_dlq_discards_total", "Entries discarded through the admin API.")?,
            record_auth: IntCounterVec::new(
                Opts::new(
                    "hookline_replayer_record_auth_total",
                    "Status records read by the replayer's index, by the outcome of their MAC check (only authentic \
                     ones, or unsigned ones inside accept_unsigned_until, are applied).",
                ),
                &["outcome"],
            )?,
            status_records_dropped: IntCounterVec::new(
                Opts::new(
                    "hookline_replayer_status_records_dropped_total",
                    "Authentic status records the index did not keep: no entry at their position, or too many \
                     waiting for their entries.",
                ),
                &["reason"],
            )?,
            auth_failures: IntCounterVec::new(
                Opts::new(
                    "hookline_replayer_auth_failures_total",
                    "Wrong tokens presented, by surface (api: a bearer token; console: the login form).",
                ),
                &["surface"],
            )?,
        };
        metrics_catalog::register_all(registry, metrics.collectors())?;
        Ok(metrics)
    }

    /// Every metric of the service: what [`Self::register`] registers and `--print-metrics` describes.
    pub fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.entries.clone()),
            Box::new(self.oldest_untriaged_age_seconds.clone()),
            Box::new(self.oldest_by_reference_age_seconds.clone()),
            Box::new(self.index_entries.clone()),
            Box::new(self.index_unverified_entries.clone()),
            Box::new(self.index_string_bytes.clone()),
            Box::new(self.replays.clone()),
            Box::new(self.discards.clone()),
            Box::new(self.record_auth.clone()),
            Box::new(self.status_records_dropped.clone()),
            Box::new(self.auth_failures.clone()),
        ]
    }

    /// The service's metric families (name, type, help, labels), labelled ones without series included, with no
    /// registry, broker or config: what `--print-metrics` prints.
    pub fn describe() -> Result<Vec<MetricDescription>, prometheus::Error> {
        Ok(metrics_catalog::describe(&Self::register(&Registry::new())?.collectors()))
    }

    /// Sets the gauges from the index (a scan of its metadata; no Kafka read).
    pub fn refresh(&self, index: &Index, now_ms: i64) {
        let gauges = match index.gauges() {
            Ok(gauges) => gauges,
            Err(error) => {
                tracing::error!(error = %error, "the dead-letter gauges could not be counted");
                return;
            }
        };
        self.entries.reset();
        for ((status, source, service, class), n) in gauges.counts {
            self.entries
                .with_label_values(&[status.as_str(), source.as_str(), service.as_str(), class.as_str()])
                .set(n as i64);
        }
        self.oldest_untriaged_age_seconds.reset();
        for ((source, service), seen) in gauges.untriaged {
            let age_s = (now_ms - seen.oldest_at_ms).max(0) / 1000;
            self.oldest_untriaged_age_seconds.with_label_values(&[source.as_str(), service.as_str()]).set(age_s);
        }
        self.oldest_by_reference_age_seconds.reset();
        for ((source, service), seen) in gauges.by_reference {
            let age_s = (now_ms - seen.oldest_at_ms).max(0) / 1000;
            self.oldest_by_reference_age_seconds.with_label_values(&[source.as_str(), service.as_str()]).set(age_s);
        }
        self.index_entries.set(index.len() as i64);
        self.index_unverified_entries.set(index.unverified_len() as i64);
        self.index_string_bytes.set(index.string_bytes().0 as i64);
        let counts = index.status_counts();
        for (outcome, count) in counts.auth() {
            let counter = self.record_auth.with_label_values(&[outcome]);
            counter.inc_by(count.saturating_sub(counter.get()));
        }
        for (reason, count) in counts.dropped() {
            let counter = self.status_records_dropped.with_label_values(&[reason]);
            counter.inc_by(count.saturating_sub(counter.get()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--print-metrics` lists exactly what `/metrics` exports once every metric has a series: a metric registered
    /// some other way, or described but not registered, fails here.
    #[test]
    fn print_metrics_lists_what_the_registry_gathers() {
        let registry = Registry::new();
        let metrics = Metrics::register(&registry).unwrap();
        metrics.entries.with_label_values(&["new", "s", "billing", "poison"]).set(1);
        metrics.oldest_untriaged_age_seconds.with_label_values(&["s", "billing"]).set(1);
        metrics.oldest_by_reference_age_seconds.with_label_values(&["s", "billing"]).set(1);
        metrics.index_entries.set(1);
        metrics.index_unverified_entries.set(1);
        metrics.index_string_bytes.set(1);
        metrics.replays.inc();
        metrics.discards.inc();
        metrics.record_auth.with_label_values(&["bad_mac"]).inc();
        metrics.status_records_dropped.with_label_values(&["no_such_entry"]).inc();
        metrics.auth_failures.with_label_values(&["api"]).inc();
        let described = Metrics::describe().unwrap();
        assert_eq!(described.len(), 11);
        assert_eq!(metrics_catalog::gathered(&registry), metrics_catalog::with_sorted_labels(described));
    }
}
