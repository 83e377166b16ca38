//! The reconciler's metrics, defined once. Labels are the source name and a bounded outcome, never an event id.

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry};

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
        };
        registry.register(Box::new(metrics.runs.clone()))?;
        registry.register(Box::new(metrics.missed.clone()))?;
        registry.register(Box::new(metrics.recovered.clone()))?;
        registry.register(Box::new(metrics.unrecovered.clone()))?;
        registry.register(Box::new(metrics.last_success.clone()))?;
        registry.register(Box::new(metrics.api_requests.clone()))?;
        registry.register(Box::new(metrics.indexed.clone()))?;
        Ok(metrics)
    }
}
