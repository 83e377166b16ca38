//! The reconciler's metrics, defined once. Labels are the source name and a bounded outcome, never an event id.

use hookline_common::metrics_catalog::{self, MetricDescription};
use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry, core::Collector};

#[derive(Debug, Clone)]
pub struct Metrics {
    /// `hookline_reconciler_runs_total{source,outcome}`: runs by outcome (`applied`, `dry_run`, or an error).
    pub runs: IntCounterVec,
    /// `hookline_reconciler_missed_events_total{source}`: events found in the provider's log that hookline never
    /// accepted, counted once per event (the first run that finds it), dry runs included.
    pub missed: IntCounterVec,
    /// `hookline_reconciler_recovered_events_total{source,action}`: missed events we brought in, by how
    /// (`redelivery_requested`, `fetched_and_produced`).
    pub recovered: IntCounterVec,
    /// `hookline_reconciler_unrecovered_events{source}`: after the last run, missed events not brought in yet
    /// (dry run, still missing after a redelivery we asked for, or an action that failed). The alert's signal.
    pub unrecovered: IntGaugeVec,
    /// `hookline_reconciler_last_success_timestamp_seconds{source}`: when a run of the source last completed.
    pub last_success: GaugeVec,
    /// `hookline_reconciler_api_requests_total{source,outcome}`: calls to the provider's API.
    pub api_requests: IntCounterVec,
    /// `hookline_reconciler_indexed_records_total{source}`: accepted events recorded in the index.
    pub indexed: IntCounterVec,
    /// `hookline_reconciler_record_auth_total{outcome}`: the indexer's MAC check of every record it reads; a
    /// refused record (not written by hookline) is never indexed, so a forged record cannot hide a missed event.
    /// Outcomes as the consumer's ([`hookline_common::record_auth::outcome::ALL`]).
    pub record_auth: IntCounterVec,
}

impl Metrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let metrics = Self {
            runs: IntCounterVec::new(
                Opts::new("hookline_reconciler_runs_total", "Reconciliation runs by source and outcome."),
                &["source", "outcome"],
            )?,
            missed: IntCounterVec::new(
                Opts::new(
                    "hookline_reconciler_missed_events_total",
                    "Events in the provider's log that hookline never accepted (each counted once).",
                ),
                &["source"],
            )?,
            recovered: IntCounterVec::new(
                Opts::new("hookline_reconciler_recovered_events_total", "Missed events brought in, by action."),
                &["source", "action"],
            )?,
            unrecovered: IntGaugeVec::new(
                Opts::new(
                    "hookline_reconciler_unrecovered_events",
                    "Missed events not brought in as of the source's last run.",
                ),
                &["source"],
            )?,
            last_success: GaugeVec::new(
                Opts::new(
                    "hookline_reconciler_last_success_timestamp_seconds",
                    "When a reconciliation run of the source last completed.",
                ),
                &["source"],
            )?,
            api_requests: IntCounterVec::new(
                Opts::new("hookline_reconciler_api_requests_total", "Provider API calls by source and outcome."),
                &["source", "outcome"],
            )?,
            indexed: IntCounterVec::new(
                Opts::new("hookline_reconciler_indexed_records_total", "Accepted events recorded in the index."),
                &["source"],
            )?,
            record_auth: IntCounterVec::new(
                Opts::new(
                    "hookline_reconciler_record_auth_total",
                    "Records the indexer read, by the outcome of their MAC check; only authentic ones are indexed.",
                ),
                &["outcome"],
            )?,
        };
        for collector in metrics.collectors() {
            registry.register(collector)?;
        }
        Ok(metrics)
    }

    /// Every metric of the service: what [`Self::register`] registers and `--print-metrics` describes.
    pub fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.runs.clone()),
            Box::new(self.missed.clone()),
            Box::new(self.recovered.clone()),
            Box::new(self.unrecovered.clone()),
            Box::new(self.last_success.clone()),
            Box::new(self.api_requests.clone()),
            Box::new(self.indexed.clone()),
            Box::new(self.record_auth.clone()),
        ]
    }

    /// The service's metric families (name, type, help, labels), labelled ones without series included, with no
    /// registry, broker or config: what `--print-metrics` prints.
    pub fn describe() -> Result<Vec<MetricDescription>, prometheus::Error> {
        Ok(metrics_catalog::describe(&Self::register(&Registry::new())?.collectors()))
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
        metrics.runs.with_label_values(&["s", "applied"]).inc();
        metrics.missed.with_label_values(&["s"]).inc();
        metrics.recovered.with_label_values(&["s", "redelivery_requested"]).inc();
        metrics.unrecovered.with_label_values(&["s"]).set(1);
        metrics.last_success.with_label_values(&["s"]).set(1.0);
        metrics.api_requests.with_label_values(&["s", "ok"]).inc();
        metrics.indexed.with_label_values(&["s"]).inc();
        metrics.record_auth.with_label_values(&["authentic"]).inc();
        let described = Metrics::describe().unwrap();
        assert_eq!(described.len(), 8);
        assert_eq!(metrics_catalog::gathered(&registry), metrics_catalog::with_sorted_labels(described));
    }
}
