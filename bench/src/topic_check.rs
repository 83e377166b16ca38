//! After a run: does the topic hold exactly what the gateway acknowledged? A benchmark that loses data, or stores
//! what it refused, is a failed benchmark, whatever its throughput.
//!
//! Per event id, with `acked` 2xx deliveries, `uncertain` deliveries (5xx or no answer: the produce may still have
//! landed, which dedupe absorbs) and `copies` records in the topic:
//! - `copies < acked` is a **lost** acknowledged delivery;
//! - `copies > acked + uncertain` is a copy nobody asked for;
//! - an id that was only ever refused (4xx) must have no copy at all;
//! - a record whose id the run never sent means the topic was not fresh.
//!
//! The topic is read by assignment up to each partition's high watermark, keys only (the gateway keys each
//! record by its event id).

use std::{collections::HashMap, time::Duration};

use hookline_common::{config::KafkaConfig, kafka::visit_topic};
use rdkafka::{Message, error::KafkaError};

use crate::loadgen::{Delivery, Outcome};

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TopicCheck {
    pub topic: String,
    pub records_in_topic: u64,
    pub acknowledged_deliveries: u64,
    pub refused_deliveries: u64,
    pub uncertain_deliveries: u64,
    /// Acknowledged deliveries with no record: data loss.
    pub lost: u64,
    /// Records of events that were only ever refused.
    pub refused_but_stored: u64,
    /// Records beyond the acknowledged plus uncertain deliveries of their event.
    pub unexpected_copies: u64,
    /// Records whose event id the run never sent.
    pub unknown_records: u64,
    /// A few offending event ids, for the log.
    pub examples: Vec<String>,
    pub passed: bool,
}

#[derive(Default)]
struct Expectation {
    acked: u64,
    uncertain: u64,
    refused: u64,
}

/// Compares `deliveries` with the records of `topic`. Blocking: call off the runtime.
pub fn check_topic(
    brokers: &str,
    topic: &str,
    deliveries: &[Delivery],
    timeout: Duration,
) -> Result<TopicCheck, KafkaError> {
    let copies = count_keys(brokers, topic, timeout)?;
    Ok(compare(topic, deliveries, &copies))
}

/// The check itself, on already counted records.
pub fn compare(topic: &str, deliveries: &[Delivery], copies: &HashMap<String, u64>) -> TopicCheck {
    let mut expected: HashMap<&str, Expectation> = HashMap::with_capacity(deliveries.len());
    let mut check = TopicCheck { topic: topic.to_owned(), ..TopicCheck::default() };
    for delivery in deliveries {
        let entry = expected.entry(delivery.event_id.as_str()).or_default();
        match delivery.outcome {
            Outcome::Status(status) if (200..300).contains(&status) => {
                entry.acked += 1;
                check.acknowledged_deliveries += 1;
            }
            Outcome::Status(status) if status < 500 => {
                entry.refused += 1;
                check.refused_deliveries += 1;
            }
            Outcome::Status(_) | Outcome::Failed => {
                entry.uncertain += 1;
                check.uncertain_deliveries += 1;
            }
        }
    }
    let note = |check: &mut TopicCheck, what: String| {
        if check.examples.len() < 10 {
            check.examples.push(what);
        }
    };
    for (event_id, expectation) in &expected {
        let n = copies.get(*event_id).copied().unwrap_or(0);
        if n < expectation.acked {
            check.lost += expectation.acked - n;
            note(&mut check, format!("lost: {event_id} ({n} of {} acknowledged)", expectation.acked));
        } else if expectation.acked == 0 && expectation.uncertain == 0 && expectation.refused > 0 && n > 0 {
            check.refused_but_stored += n;
            note(&mut check, format!("refused but stored: {event_id} ({n} copies)"));
        } else if n > expectation.acked + expectation.uncertain {
            check.unexpected_copies += n - expectation.acked - expectation.uncertain;
            note(&mut check, format!("unexpected copies: {event_id} ({n} copies)"));
        }
    }
    for (event_id, n) in copies {
        check.records_in_topic += n;
        if !expected.contains_key(event_id.as_str()) {
            check.unknown_records += n;
            note(&mut check, format!("never sent: {event_id}"));
        }
    }
    check.passed =
        check.lost == 0 && check.refused_but_stored == 0 && check.unexpected_copies == 0 && check.unknown_records == 0;
    check
}

/// How many records of `topic` carry each key, from the start of every partition to its high watermark now.
pub fn count_keys(brokers: &str, topic: &str, timeout: Duration) -> Result<HashMap<String, u64>, KafkaError> {
    let mut copies: HashMap<String, u64> = HashMap::new();
    visit_topic(&KafkaConfig { brokers: brokers.to_owned(), ..KafkaConfig::default() }, topic, timeout, |record| {
        let key = String::from_utf8_lossy(record.key().unwrap_or_default()).into_owned();
        *copies.entry(key).or_insert(0) += 1;
    })?;
    Ok(copies)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(id: &str, outcome: Outcome) -> Delivery {
        Delivery { event_id: id.to_owned(), outcome, forged: false }
    }

    fn copies(entries: &[(&str, u64)]) -> HashMap<String, u64> {
        entries.iter().map(|(id, n)| ((*id).to_owned(), *n)).collect()
    }

    #[test]
    fn every_acknowledged_delivery_must_be_stored_once() {
        let deliveries = [delivery("a", Outcome::Status(202)), delivery("a", Outcome::Status(202))];
        assert!(compare("t", &deliveries, &copies(&[("a", 2)])).passed);
        let lost = compare("t", &deliveries, &copies(&[("a", 1)]));
        assert!(!lost.passed);
        assert_eq!(lost.lost, 1);
    }

    #[test]
    fn a_refused_event_must_not_be_stored() {
        let deliveries = [delivery("bad", Outcome::Status(401))];
        assert!(compare("t", &deliveries, &copies(&[])).passed);
        assert_eq!(compare("t", &deliveries, &copies(&[("bad", 1)])).refused_but_stored, 1);
    }

    #[test]
    fn an_uncertain_delivery_may_or_may_not_be_stored() {
        let deliveries = [delivery("u", Outcome::Status(503)), delivery("v", Outcome::Failed)];
        assert!(compare("t", &deliveries, &copies(&[("u", 1)])).passed);
        assert!(compare("t", &deliveries, &copies(&[])).passed);
        assert_eq!(compare("t", &deliveries, &copies(&[("u", 2)])).unexpected_copies, 1);
    }

    #[test]
    fn records_nobody_sent_fail_the_check() {
        assert_eq!(compare("t", &[], &copies(&[("stranger", 1)])).unknown_records, 1);
    }
}
