//! The done marker with details, and the filtered marker (see [`super::redis_key`]).

use super::redis_key::{DEDUPE_DEAD_TYPES, DEDUPE_DONE, DEDUPE_DONE_DETAILED_PREFIX, DEDUPE_FILTERED_PREFIX};

/// Whether a dedupe key's value is a done marker, in either form: the plain [`DEDUPE_DONE`] or
/// [`DEDUPE_DONE_DETAILED_PREFIX`] with details (read as done even when the details do not parse).
pub fn is_done(value: &str) -> bool {
    value == DEDUPE_DONE || value.starts_with(DEDUPE_DONE_DETAILED_PREFIX)
}

/// What a done marker says about the processing it records, written in the same `SET` that marks the event
/// done (no other key, no other round trip): when the handler's success was recorded, how long the handling
/// took, and the position of the record that was processed (an inbound, retry or re-driven record).
///
/// Encoded as `done:<processed at ms>:<handling ms>:<partition>:<offset>:<topic>`; the topic goes last
/// because it is the one free-form field (Kafka topic names have no `:`, but nothing needs to rely on it).
/// A consumer of a build before this form reads such a value as a claim held by another consumer: it waits
/// (never processes the event, never skips it) until it is replaced by a build that reads it as done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoneMarker {
    pub processed_at_ms: i64,
    pub handling_ms: u64,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

impl DoneMarker {
    /// `done:<processed at ms>:<handling ms>:<partition>:<offset>:<topic>`. Written once per processed event, so
    /// without `format!`'s machinery (about 2k instructions per marker; this is a few hundred).
    pub fn encode(&self) -> String {
        let mut numbers = itoa::Buffer::new();
        let mut marker = String::with_capacity(DEDUPE_DONE_DETAILED_PREFIX.len() + 64 + self.topic.len());
        marker.push_str(DEDUPE_DONE_DETAILED_PREFIX);
        marker.push_str(numbers.format(self.processed_at_ms));
        marker.push(':');
        marker.push_str(numbers.format(self.handling_ms));
        marker.push(':');
        marker.push_str(numbers.format(self.partition));
        marker.push(':');
        marker.push_str(numbers.format(self.offset));
        marker.push(':');
        marker.push_str(&self.topic);
        marker
    }

    /// The details of a done marker: `None` for the plain `done` (written before details were kept), for a
    /// detailed marker that does not parse, and for any value that is not a done marker.
    pub fn decode(value: &str) -> Option<Self> {
        let details = value.strip_prefix(DEDUPE_DONE_DETAILED_PREFIX)?;
        let mut fields = details.splitn(5, ':');
        let processed_at_ms = fields.next()?.parse().ok()?;
        let handling_ms = fields.next()?.parse().ok()?;
        let partition = fields.next()?.parse().ok()?;
        let offset = fields.next()?.parse().ok()?;
        let topic = fields.next().filter(|topic| !topic.is_empty())?.to_owned();
        Some(Self { processed_at_ms, handling_ms, topic, partition, offset })
    }
}

/// What a filtered marker says: the service's route skipped the event by its filter `filter` (a
/// `[[routes.filters]]` name), when, and the position of the record skipped. Written in place of the claim with
/// the done TTL, so that every later copy of the event is skipped as a duplicate for as long as a processed one
/// would be, and `lookup` and event search say *filtered*, not *processed*.
///
/// Encoded as `done:filtered:<filter>:<filtered at ms>:<partition>:<offset>:<topic>;types=,<hex>,...,`: a done
/// marker ([`is_done`]), so that every dedupe script and reader, those of the builds before filters included, takes
/// it as done (a duplicate), never as a claim to wait on; its details do not parse as a [`DoneMarker`]'s. A
/// filter's name holds no `:` (letters, digits, `.`, `-`, `_`), a topic no `;`. The types are those of the copies
/// skipped, as a dead marker records them ([`super::redis_key::dead_marker_type`]; `;types=,` for none): a copy
/// of an allowlisted type not among them may claim the event over, as it may a dead marker's, so that a copy
/// re-sent first under another unsigned type cannot get the genuine one skipped as a duplicate. A marker written
/// before types were recorded (no `;types=`) is claimed over by nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilteredMarker {
    pub filter: String,
    pub filtered_at_ms: i64,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The types (hex) of the copies skipped.
    pub types: Vec<String>,
}

impl FilteredMarker {
    pub fn encode(&self) -> String {
        format!(
            "{DEDUPE_FILTERED_PREFIX}{}:{}:{}:{}:{}{DEDUPE_DEAD_TYPES},{}",
            self.filter,
            self.filtered_at_ms,
            self.partition,
            self.offset,
            self.topic,
            self.types.iter().map(|hex| format!("{hex},")).collect::<String>()
        )
    }

    /// The details of a filtered marker; `None` for any other value and for one that does not parse.
    pub fn decode(value: &str) -> Option<Self> {
        let details = value.strip_prefix(DEDUPE_FILTERED_PREFIX)?;
        let mut fields = details.splitn(5, ':');
        let filter = fields.next().filter(|filter| !filter.is_empty())?.to_owned();
        let filtered_at_ms = fields.next()?.parse().ok()?;
        let partition = fields.next()?.parse().ok()?;
        let offset = fields.next()?.parse().ok()?;
        let rest = fields.next()?;
        let (topic, types) = match rest.split_once(DEDUPE_DEAD_TYPES) {
            Some((topic, types)) => {
                (topic, types.split(',').filter(|hex| !hex.is_empty()).map(str::to_owned).collect())
            }
            None => (rest, Vec::new()),
        };
        let topic = Some(topic).filter(|topic| !topic.is_empty())?.to_owned();
        Some(Self { filter, filtered_at_ms, topic, partition, offset, types })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker() -> DoneMarker {
        DoneMarker {
            processed_at_ms: 1_767_000_001_230,
            handling_ms: 18,
            topic: "webhooks.inbound".to_owned(),
            partition: 3,
            offset: 18_233,
        }
    }

    #[test]
    fn a_detailed_marker_round_trips() {
        let encoded = marker().encode();
        assert_eq!(encoded, "done:1767000001230:18:3:18233:webhooks.inbound");
        assert!(is_done(&encoded));
        assert_eq!(DoneMarker::decode(&encoded), Some(marker()));
    }

    #[test]
    fn the_plain_done_of_earlier_builds_is_done_without_details() {
        assert!(is_done(DEDUPE_DONE));
        assert_eq!(DoneMarker::decode(DEDUPE_DONE), None);
    }

    #[test]
    fn a_damaged_detailed_marker_is_still_done() {
        for value in ["done:", "done:x:18:3:18233:webhooks.inbound", "done:1:2:3:4:", "done:1:2:3"] {
            assert!(is_done(value), "{value}");
            assert_eq!(DoneMarker::decode(value), None, "{value}");
        }
    }

    #[test]
    fn claims_and_dead_markers_are_not_done() {
        for value in ["claim:8f1c", "dead:webhooks.dlq:0:7", "donee", ""] {
            assert!(!is_done(value), "{value}");
            assert_eq!(DoneMarker::decode(value), None, "{value}");
        }
    }

    #[test]
    fn a_filtered_marker_round_trips_is_done_and_is_not_a_processed_one() {
        let filtered = FilteredMarker {
            filter: "test_mode".to_owned(),
            filtered_at_ms: 1_767_000_001_230,
            topic: "webhooks.inbound".to_owned(),
            partition: 3,
            offset: 18_233,
            types: vec!["70757368".to_owned()],
        };
        let encoded = filtered.encode();
        assert_eq!(encoded, "done:filtered:test_mode:1767000001230:3:18233:webhooks.inbound;types=,70757368,");
        let untyped = FilteredMarker { types: Vec::new(), ..filtered.clone() };
        assert!(untyped.encode().ends_with(":webhooks.inbound;types=,"), "{}", untyped.encode());
        assert_eq!(FilteredMarker::decode(&untyped.encode()), Some(untyped));
        // Written before types were recorded.
        let before = FilteredMarker::decode("done:filtered:test_mode:1767000001230:3:18233:webhooks.inbound");
        assert_eq!(before.map(|marker| marker.types), Some(Vec::new()));
        assert!(is_done(&encoded), "every reader and script takes it as done");
        assert_eq!(FilteredMarker::decode(&encoded), Some(filtered));
        assert_eq!(DoneMarker::decode(&encoded), None, "not a processed event's details");
        assert_eq!(FilteredMarker::decode(&marker().encode()), None);
        for damaged in ["done:filtered:", "done:filtered::1:2:3:t", "done:filtered:f:x:2:3:t", "done:filtered:f:1:2:3:"]
        {
            assert_eq!(FilteredMarker::decode(damaged), None, "{damaged}");
        }
    }
}
