//! What the flow reads from a gateway's or a consumer's `/metrics`: the few series it charts, parsed from the
//! Prometheus text format. Only those series are kept; everything else in the answer is skipped line by line.

use std::collections::BTreeMap;

use hookline_common::prometheus_text;

/// The gateway's `hookline_gateway_requests_total{source, outcome}` outcome of an accepted request; every other
/// outcome but [`HANDSHAKE`] is a refusal, named by its code (`signature_mismatch`, `rate_limited`, …).
const ACCEPTED: &str = "accepted";
/// A provider's endpoint verification: neither accepted nor refused.
const HANDSHAKE: &str = "handshake";

/// What one gateway said: its request counters per source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GatewayReading {
    /// `hookline_gateway_requests_total`, per (source, outcome), handshakes left out.
    pub requests: BTreeMap<SourceOutcome, f64>,
}

/// A source's name and a gateway outcome (`accepted`, or a refusal's code).
pub type SourceOutcome = (String, String);

/// What the flow charts of a consumer's events, from `hookline_consumer_events_total{outcome}` and
/// `hookline_consumer_deferred_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// `processed`.
    Processed,
    /// `retry_scheduled`, `retry_later`, and records deferred to the retry topic without an attempt because their
    /// route was saturated or its breaker open (not those of a paused route).
    Retrying,
    /// `dead_lettered`.
    DeadLettered,
}

impl Outcome {
    pub const ALL: [Self; 3] = [Self::Processed, Self::Retrying, Self::DeadLettered];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::Retrying => "retrying",
            Self::DeadLettered => "dead-lettered",
        }
    }
}

/// What one consumer replica said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConsumerReading {
    /// Event counters, summed over sources.
    pub events: BTreeMap<Outcome, f64>,
    /// Routes whose breaker is open or probing (`hookline_consumer_route_breaker_open` = 1).
    pub breaker_open: Vec<String>,
    /// Routes an operator paused, as this replica applies them (`hookline_consumer_route_paused` = 1).
    pub paused_routes: Vec<String>,
    /// Whether processing is paused because Redis fails (`hookline_consumer_paused`).
    pub redis_paused: bool,
    /// Records fetched and waiting for a route (`hookline_consumer_route_waiting_records`, summed).
    pub waiting_records: f64,
    /// The oldest of them, seconds since written to Kafka (`hookline_consumer_route_oldest_waiting_age_seconds`, max).
    pub oldest_waiting_age_s: f64,
}

/// A gateway's `/metrics` answer.
pub fn gateway(text: &str) -> GatewayReading {
    let mut reading = GatewayReading::default();
    for sample in prometheus_text::samples(text) {
        let (name, value) = (sample.name.as_str(), sample.value);
        if name != "hookline_gateway_requests_total" {
            continue;
        }
        let outcome = sample.label("outcome");
        if outcome == HANDSHAKE {
            continue;
        }
        let key = (sample.label("source").to_owned(), outcome.to_owned());
        *reading.requests.entry(key).or_default() += value;
    }
    reading
}

/// Whether a gateway outcome is an accepted request (else a refusal).
pub fn is_accepted(outcome: &str) -> bool {
    outcome == ACCEPTED
}

/// A consumer's `/metrics` answer.
pub fn consumer(text: &str) -> ConsumerReading {
    let mut reading = ConsumerReading::default();
    for sample in prometheus_text::samples(text) {
        let (name, value) = (sample.name.as_str(), sample.value);
        let outcome = match name {
            "hookline_consumer_events_total" => match sample.label("outcome") {
                "processed" => Some(Outcome::Processed),
                "retry_scheduled" | "retry_later" => Some(Outcome::Retrying),
                "dead_lettered" => Some(Outcome::DeadLettered),
                _ => None,
            },
            // A paused route's deferrals are no failure: the pause is shown apart.
            "hookline_consumer_deferred_total" if sample.label("reason") != "paused" => Some(Outcome::Retrying),
            "hookline_consumer_route_breaker_open" if value >= 1.0 => {
                reading.breaker_open.push(sample.label("route").to_owned());
                None
            }
            "hookline_consumer_route_paused" if value >= 1.0 => {
                reading.paused_routes.push(sample.label("route").to_owned());
                None
            }
            "hookline_consumer_paused" => {
                reading.redis_paused = value >= 1.0;
                None
            }
            "hookline_consumer_route_waiting_records" => {
                reading.waiting_records += value;
                None
            }
            "hookline_consumer_route_oldest_waiting_age_seconds" => {
                reading.oldest_waiting_age_s = reading.oldest_waiting_age_s.max(value);
                None
            }
            _ => None,
        };
        if let Some(outcome) = outcome {
            *reading.events.entry(outcome).or_default() += value;
        }
    }
    reading
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateways_requests_are_read_per_source_and_outcome_without_handshakes() {
        let text = "# HELP hookline_gateway_requests_total Webhook requests by source and outcome.\n\
                    # TYPE hookline_gateway_requests_total counter\n\
                    hookline_gateway_requests_total{outcome=\"accepted\",source=\"stripe\"} 12\n\
                    hookline_gateway_requests_total{outcome=\"signature_mismatch\",source=\"stripe\"} 3\n\
                    hookline_gateway_requests_total{outcome=\"handshake\",source=\"stripe\"} 1\n\
                    hookline_gateway_requests_total{outcome=\"accepted\",source=\"we \\\"ird\\\\\"} 2\n\
                    hookline_gateway_in_flight_requests 4\n";
        let reading = gateway(text);
        let key = |source: &str, outcome: &str| (source.to_owned(), outcome.to_owned());
        assert_eq!(reading.requests.get(&key("stripe", "accepted")), Some(&12.0));
        assert_eq!(reading.requests.get(&key("stripe", "signature_mismatch")), Some(&3.0));
        assert_eq!(reading.requests.get(&key("we \"ird\\", "accepted")), Some(&2.0), "escaped label values");
        assert_eq!(reading.requests.len(), 3, "handshakes and other series are left out");
    }

    #[test]
    fn a_consumers_events_breakers_and_pauses_are_read() {
        let text = "hookline_consumer_events_total{outcome=\"processed\",source=\"github\"} 10\n\
                    hookline_consumer_events_total{outcome=\"processed\",source=\"stripe\"} 5\n\
                    hookline_consumer_events_total{outcome=\"retry_scheduled\",source=\"github\"} 4\n\
                    hookline_consumer_events_total{outcome=\"duplicate\",source=\"github\"} 7\n\
                    hookline_consumer_deferred_total{reason=\"breaker_open\",source=\"github\"} 2\n\
                    hookline_consumer_deferred_total{reason=\"paused\",source=\"github\"} 9\n\
                    hookline_consumer_events_total{outcome=\"dead_lettered\",source=\"github\"} 1\n\
                    hookline_consumer_route_breaker_open{route=\"github\"} 1\n\
                    hookline_consumer_route_breaker_open{route=\"stripe\"} 0\n\
                    hookline_consumer_route_paused{route=\"stripe\"} 1\n\
                    hookline_consumer_paused 0\n\
                    hookline_consumer_route_waiting_records{route=\"github\"} 3\n\
                    hookline_consumer_route_oldest_waiting_age_seconds{route=\"github\"} 42\n\
                    hookline_consumer_route_oldest_waiting_age_seconds{route=\"stripe\"} 7\n";
        let reading = consumer(text);
        assert_eq!(reading.events[&Outcome::Processed], 15.0);
        assert_eq!(reading.events[&Outcome::Retrying], 6.0, "retries and deferrals, not a pause's");
        assert_eq!(reading.events[&Outcome::DeadLettered], 1.0);
        assert_eq!(reading.breaker_open, ["github"]);
        assert_eq!(reading.paused_routes, ["stripe"]);
        assert!(!reading.redis_paused);
        assert_eq!((reading.waiting_records, reading.oldest_waiting_age_s), (3.0, 42.0));
    }
}
