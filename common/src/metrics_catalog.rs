//! What a service's metrics are, without running it: `--print-metrics` prints [`describe`] of the collectors a
//! service registers, so deploy checks (alert rules, dashboards) read the metric names, types and labels from
//! the binary itself rather than from a copy that drifts.

use prometheus::{core::Collector, proto::MetricType};
use serde::Serialize;

/// One metric family a service exports.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct MetricDescription {
    pub name: String,
    /// `counter`, `gauge`, `histogram`, `summary` or `untyped`, as in the exposition format's `# TYPE`.
    #[serde(rename = "type")]
    pub kind: String,
    pub help: String,
    /// The variable labels, in the order the code gives their values.
    pub labels: Vec<String>,
    /// For a label whose values the code fixes (an outcome, not a source name): every value it can take.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub label_values: std::collections::BTreeMap<String, Vec<String>>,
}

/// Records in `described` that label `label` of metric `name` takes only `values`.
pub fn set_label_values(described: &mut [MetricDescription], name: &str, label: &str, values: &[&str]) {
    for metric in described.iter_mut().filter(|metric| metric.name == name) {
        let mut values: Vec<String> = values.iter().map(|value| (*value).to_owned()).collect();
        values.sort();
        values.dedup();
        metric.label_values.insert(label.to_owned(), values);
    }
}

/// Registers every one of `collectors` (a service's `Metrics::collectors()`) in `registry`: what a service exports
/// and what [`describe`] prints are then the one list.
pub fn register_all(
    registry: &prometheus::Registry,
    collectors: Vec<Box<dyn Collector>>,
) -> Result<(), prometheus::Error> {
    for collector in collectors {
        registry.register(collector)?;
    }
    Ok(())
}

/// The families of these collectors, sorted by name. A labelled metric with no series yet is described too: its
/// `collect()` still returns its (empty) family, with name, help and type.
pub fn describe(collectors: &[Box<dyn Collector>]) -> Vec<MetricDescription> {
    let mut described = Vec::new();
    for collector in collectors {
        let descs = collector.desc();
        for family in collector.collect() {
            let labels = descs
                .iter()
                .find(|desc| desc.fq_name == family.name())
                .map(|desc| desc.variable_labels.clone())
                .unwrap_or_default();
            described.push(MetricDescription {
                name: family.name().to_owned(),
                kind: type_name(family.get_field_type()).to_owned(),
                help: family.help().to_owned(),
                labels,
                label_values: Default::default(),
            });
        }
    }
    described.sort();
    described
}

/// What [`describe`] says, taken instead from a registry's `gather()`: only families that have a series, with the
/// label names their series carry (sorted by name, as `gather()` gives them). A service's test touches every
/// metric, then compares this with [`with_sorted_labels`] of its description, so a metric registered outside the
/// described collectors cannot go unlisted, nor a described one go unregistered.
pub fn gathered(registry: &prometheus::Registry) -> Vec<MetricDescription> {
    let mut described: Vec<MetricDescription> = registry
        .gather()
        .iter()
        .map(|family| {
            let mut labels: Vec<String> = family
                .get_metric()
                .first()
                .map(|metric| metric.get_label().iter().map(|pair| pair.name().to_owned()).collect())
                .unwrap_or_default();
            labels.sort();
            labels.dedup();
            MetricDescription {
                name: family.name().to_owned(),
                kind: type_name(family.get_field_type()).to_owned(),
                help: family.help().to_owned(),
                labels,
                label_values: Default::default(),
            }
        })
        .collect();
    described.sort();
    described
}

/// The same families with each one's labels sorted by name and without label values (a registry does not know
/// them), to compare with [`gathered`].
pub fn with_sorted_labels(mut described: Vec<MetricDescription>) -> Vec<MetricDescription> {
    for family in &mut described {
        family.labels.sort();
        family.label_values.clear();
    }
    described
}

/// The described families as pretty JSON (what `--print-metrics` prints).
pub fn to_json(described: &[MetricDescription]) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(described)
}

fn type_name(kind: MetricType) -> &'static str {
    match kind {
        MetricType::COUNTER => "counter",
        MetricType::GAUGE => "gauge",
        MetricType::HISTOGRAM => "histogram",
        MetricType::SUMMARY => "summary",
        MetricType::UNTYPED => "untyped",
    }
}

#[cfg(test)]
mod tests {
    use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntGaugeVec, Opts, Registry};

    use super::*;

    #[test]
    fn a_labelled_metric_without_series_is_described_like_gather_sees_it_once_touched() {
        let counter = IntCounter::new("t_total", "A counter.").unwrap();
        let gauges = IntGaugeVec::new(Opts::new("t_gauge", "Gauges."), &["source", "outcome"]).unwrap();
        let histograms = HistogramVec::new(HistogramOpts::new("t_seconds", "Times."), &["route"]).unwrap();
        let described = describe(&[Box::new(counter.clone()), Box::new(gauges.clone()), Box::new(histograms.clone())]);
        let names: Vec<(&str, &str, Vec<&str>)> = described
            .iter()
            .map(|d| (d.name.as_str(), d.kind.as_str(), d.labels.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("t_gauge", "gauge", vec!["source", "outcome"]),
                ("t_seconds", "histogram", vec!["route"]),
                ("t_total", "counter", vec![]),
            ]
        );
        let registry = Registry::new();
        registry.register(Box::new(counter.clone())).unwrap();
        registry.register(Box::new(gauges.clone())).unwrap();
        registry.register(Box::new(histograms.clone())).unwrap();
        assert_eq!(gathered(&registry).len(), 1, "untouched vectors have no series, so gather() skips them");
        gauges.with_label_values(&["a", "b"]).set(1);
        histograms.with_label_values(&["r"]).observe(0.1);
        // gather() sorts a series' labels by name; the description keeps the code's order.
        assert_eq!(gathered(&registry), with_sorted_labels(described));
    }
}

/// Constructors for a service's metric definitions, one call each, so that a service's list of metrics reads as
/// a table of names, help texts and labels.
pub mod new {
    use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Result};

    pub fn counter(name: &str, help: &str) -> Result<IntCounter> {
        IntCounter::new(name, help)
    }

    pub fn counter_vec(name: &str, help: &str, labels: &[&str]) -> Result<IntCounterVec> {
        IntCounterVec::new(Opts::new(name, help), labels)
    }

    pub fn gauge(name: &str, help: &str) -> Result<IntGauge> {
        IntGauge::new(name, help)
    }

    pub fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> Result<IntGaugeVec> {
        IntGaugeVec::new(Opts::new(name, help), labels)
    }

    /// A histogram with Prometheus's default buckets, or `buckets` (upper bounds, ascending).
    pub fn histogram_vec(name: &str, help: &str, labels: &[&str], buckets: Option<&[f64]>) -> Result<HistogramVec> {
        let options = HistogramOpts::new(name, help);
        HistogramVec::new(buckets.map_or(options.clone(), |buckets| options.buckets(buckets.to_vec())), labels)
    }
}
