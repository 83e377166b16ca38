//! The Prometheus text format (version 0.0.4) read into samples: name, labels, value. The one reader of `/metrics`
//! text in the workspace: the replayer's flow overview reads the services' counters with it, the test suite its
//! assertions.
//!
//! Written here rather than taken from a crate: the format's sample line is one short grammar, and the readers on
//! offer bring a date-time library and a regex engine for it; what the callers need is exact label matching.

use std::collections::BTreeMap;

/// One sample line: `name{label="value",...} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// Whether every `(label, value)` of `labels` is one of this sample's.
    pub fn has_labels(&self, labels: &[(&str, &str)]) -> bool {
        labels.iter().all(|(key, value)| self.labels.get(*key).is_some_and(|have| have == value))
    }
}

/// A scrape: its text (for assertion messages) and its samples, in order. A line that is not a sample (a
/// comment, `# HELP`, `# TYPE`, a blank, anything malformed) is skipped.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    text: String,
    samples: Vec<Sample>,
}

impl Scrape {
    pub fn parse(text: &str) -> Self {
        Self { text: text.to_owned(), samples: samples(text).collect() }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn all(&self) -> &[Sample] {
        &self.samples
    }

    /// The samples of `name` (exactly: `x_count` is not `x`) carrying every one of `labels`.
    pub fn samples<'a>(&'a self, name: &'a str, labels: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |sample| sample.name == name && sample.has_labels(labels))
    }

    /// The sum of [`Self::samples`]; 0 when there is none (a counter not incremented yet).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name, labels).map(|sample| sample.value).sum()
    }

    /// The value of the first of [`Self::samples`], if any (a gauge's one series).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples(name, labels).next().map(|sample| sample.value)
    }
}

impl std::fmt::Display for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// The samples of `text`, in order, without keeping the text: lines that are not samples are skipped.
pub fn samples(text: &str) -> impl Iterator<Item = Sample> + '_ {
    text.lines().filter_map(sample)
}

impl Sample {
    /// The value of label `key`, or `""` when the sample has none (as Prometheus treats a missing label).
    pub fn label(&self, key: &str) -> &str {
        self.labels.get(key).map_or("", String::as_str)
    }
}

fn sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' ', '\t'])?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = label_set(inner)?;
        labels = parsed;
        rest = after;
    }
    // The value, then an optional timestamp (ms), which a test never needs.
    let value = rest.split_whitespace().next()?;
    Some(Sample { name: name.to_owned(), labels, value: number(value)? })
}

/// `label="value",...}` (after the `{`): the labels and what follows the `}`.
fn label_set(mut text: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        text = text.trim_start();
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after_key) = text.split_once('=')?;
        let mut chars = after_key.strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (at, '"') => break at,
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.trim().to_owned(), value);
        text = after_key[1 + end + 1..].trim_start();
        text = text.strip_prefix(',').unwrap_or(text);
    }
}

/// A sample value: a float, or `+Inf`, `-Inf`, `NaN` as the format writes them.
fn number(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP hookline_consumer_events_total Records by outcome.
# TYPE hookline_consumer_events_total counter
hookline_consumer_events_total{outcome="processed",source="github"} 3
hookline_consumer_events_total{outcome="processed",source="stripe"} 2
hookline_consumer_events_total{outcome="duplicate",source="github"} 1
hookline_consumer_event_age_seconds_bucket{le="+Inf"} 4
hookline_consumer_event_age_seconds_sum 0.25
hookline_consumer_event_age_seconds_count 4
hookline_consumer_paused 0 1700000000000
odd{path="a\"b\\c,d}",x="y"} -Inf
"#;

    #[test]
    fn samples_are_read_with_their_labels() {
        let scrape = Scrape::parse(TEXT);
        assert_eq!(scrape.all().len(), 8);
        assert_eq!(scrape.sum("hookline_consumer_events_total", &[]), 6.0);
        assert_eq!(scrape.sum("hookline_consumer_events_total", &[("outcome", "processed")]), 5.0);
        assert_eq!(
            scrape.value("hookline_consumer_events_total", &[("source", "github"), ("outcome", "duplicate")]),
            Some(1.0)
        );
        assert_eq!(scrape.value("hookline_consumer_events_total", &[("outcome", "process")]), None);
        assert_eq!(scrape.value("hookline_consumer_event_age_seconds_bucket", &[("le", "+Inf")]), Some(4.0));
        assert_eq!(scrape.value("hookline_consumer_event_age_seconds", &[]), None, "a name is matched exactly");
        assert_eq!(scrape.value("hookline_consumer_event_age_seconds_sum", &[]), Some(0.25));
        assert_eq!(scrape.value("hookline_consumer_paused", &[]), Some(0.0), "a timestamp is not the value");
        assert_eq!(scrape.value("odd", &[("path", "a\"b\\c,d}"), ("x", "y")]), Some(f64::NEG_INFINITY));
        assert_eq!(scrape.sum("absent_total", &[]), 0.0);
        assert_eq!(scrape.to_string(), TEXT);
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let scrape = Scrape::parse("a{x=\"1\" 2\nb{x=1} 2\nc\nd{} x\ne{} 5\n");
        assert_eq!(scrape.all().len(), 1);
        assert_eq!(scrape.value("e", &[]), Some(5.0));
    }
}
