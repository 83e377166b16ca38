//! The replayer's metrics, defined once.

use prometheus::{IntCounter, IntGaugeVec, Opts, Registry};

use crate::view::Entry;

#[derive(Debug, Clone)]
pub struct Metrics {
    /// `hookline_dlq_entries{status,source,error_class}`: entries in the DLQ topic, refreshed periodically.
    pub entries: IntGaugeVec,
    /// `hookline_dlq_replays_total`: entries re-driven through the API.
    pub replays: IntCounter,
    /// `hookline_dlq_discards_total`: entries discarded through the API.
    pub discards: IntCounter,
}

impl Metrics {
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let metrics = Self {
            entries: IntGaugeVec::new(
                Opts::new("hookline_dlq_entries", "Dead-letter entries by status, source and error class."),
                &["status", "source", "error_class"],
            )?,
            replays: IntCounter::new("hookline_dlq_replays_total", "Entries re-driven through the admin API.")?,
            discards: IntCounter::new("hookline_dlq_discards_total", "Entries discarded through the admin API.")?,
        };
        registry.register(Box::new(metrics.entries.clone()))?;
        registry.register(Box::new(metrics.replays.clone()))?;
        registry.register(Box::new(metrics.discards.clone()))?;
        Ok(metrics)
    }

    pub fn set_entries(&self, entries: &[Entry]) {
        self.entries.reset();
        for entry in entries {
            let source = entry.entry.source.as_deref().unwrap_or("unknown");
            let class = entry.entry.error_class.as_deref().unwrap_or("unknown");
            self.entries.with_label_values(&[entry.status.as_str(), source, class]).inc();
        }
    }
}
