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
    /// `hookline_reconciler_registration_ok{source,check}`: 1 when the source's last registration check found
    /// `check` (`registered`, `enabled`, `event_types`, `reconciled_endpoint`) as expected, 0 on drift; no series
    /// for a check not judged (an earlier one failed, or it does not apply). The drift alert's signal.
    pub registration_ok: IntGaugeVec,
    /// `hookline_reconciler_registration_checks_total{source,outcome}`: registration checks by outcome (`ok`,
    /// `drift`, `error`: the provider could not be asked).
    pub registration_checks: IntCounterVec,
    /// `hookline_reconciler_registration_last_check_timestamp_seconds{source}`: when the source's registration
    /// was last judged (a check that could not ask the provider does not count).
    pub registration_last_check: GaugeVec,
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
            registration_ok: IntGaugeVec::new(
                Opts::new(
                    "hookline_reconciler_registration_ok",
                    "Whether the source's webhook registration at the provider passed the check (1) or drifted (0).",
                ),
                &["source", "check"],
            )?,
            registration_checks: IntCounterVec::new(
                Opts::new(
                    "hookline_reconciler_registration_checks_total",
                    "Webhook registration checks by source and outcome (ok, drift, error).",
                ),
                &["source", "outcome"],
            )?,
            registration_last_check: GaugeVec::new(
                Opts::new(
                    "hookline_reconciler_registration_last_check_timestamp_seconds",
                    "When the source's webhook registration was last judged.",
                ),
                &["source"],
            )?,
        };
        metrics_catalog::register_all(registry, metrics.collectors())?;
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
            Box::new(self.registration_ok.clone()),
            Box::new(self.registration_checks.clone()),
            Box::new(self.registration_last_check.clone()),
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
        metrics.registration_ok.with_label_values(&["s", "registered"]).set(1);
        metrics.registration_checks.with_label_values(&["s", "ok"]).inc();
        metrics.registration_last_check.with_label_values(&["s"]).set(1.0);
        let described = Metrics::describe().unwrap();
        assert_eq!(described.len(), 11);
        assert_eq!(metrics_catalog::gathered(&registry), metrics_catalog::with_sorted_labels(described));
    }
}
