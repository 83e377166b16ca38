//! The wire format of control records: an operator's instructions to running services, kept in the compacted
//! control topic (`webhooks.control` by default, [`crate::wire::default_topic::CONTROL`]).
//!
//! Today one kind: a **route pause**. Its key is `route-pause:<service>:<route>` (the route as the consumer's
//! metrics label it: the source, or `source:type,type` for a configured route limited to event types) and its
//! value a JSON [`RoutePause`]; compaction keeps the latest per route, which is the route's state. The topic is
//! small and every consumer reads it whole at start and then tails it, so an instance started later obeys too.
//!
//! A control record is an instruction, so it is believed only when its record MAC verifies with a key the reader
//! holds ([`crate::record_auth`]): an unsigned one is never applied, whatever the upgrade window for unsigned
//! inbound records says. Whoever may write the topic but does not hold a record key cannot pause or resume
//! anything.
//!
//! **Freshness.** A MAC orders nothing, so a route's record is applied only when its `at_ms` is later than the
//! state held for the route ([`PauseBook`]): a signed record written again later (a replay of an old `resume` or
//! `pause`) changes nothing. An `at_ms` ahead of the reader's clock counts as at most [`CLOCK_SLACK_MS`] ahead,
//! and a budget floor never moves past the reader's now. Records that change nothing (stale, unsigned, a
//! tombstone) are still the latest of their key by offset, and compaction would keep them and delete the state:
//! the book says which states are shadowed so, and the replayer writes them again ([`PauseBook::shadowed`]).

use std::{collections::BTreeMap, time::Duration};

use rdkafka::{
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
};

use crate::{
    config::KafkaConfig,
    kafka::{QuietContext, TopicSpec, admin_config, ensure_topics},
};

pub use hookline_record::route_pause::{ROUTE_PAUSE_KEY_PREFIX, RoutePause, route_pause_key};

/// Whether `route` can name a route: what the consumer's labels are made of (a source name, `:`, event types
/// and `,`), without control characters, at most 256 bytes.
pub fn valid_route_label(route: &str) -> bool {
    !route.is_empty() && route.len() <= 256 && route.chars().all(|c| !c.is_control() && c != '/')
}

/// How far ahead of a reader's clock a control record's `at_ms` is believed: writers' clocks drift a little.
pub const CLOCK_SLACK_MS: i64 = 5 * 60 * 1000;

/// What reading one record of the control topic did to the routes' states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The route's state changed (or was first known): apply it. Its `at_ms` is no later than the reader's now.
    Applied(RoutePause),
    /// Not later than the state held for its route: an old record written again. Ignored.
    Stale,
    /// The state held, read again (the replayer wrote it again): it is its key's latest record once more.
    Again,
    /// Not an authentic route pause (unsigned, a tombstone, damaged). Ignored.
    Ignored,
}

/// The routes' states as the control topic gives them, with freshness: the latest `at_ms` wins, not the latest
/// offset. Keeps only authentic states (one per route ever paused), so junk records cost no memory.
#[derive(Debug, Default, Clone)]
pub struct PauseBook {
    routes: BTreeMap<String, Held>,
}

#[derive(Debug, Clone)]
struct Held {
    /// The record as written (its `at_ms` unclamped: it is what gets written again).
    pause: RoutePause,
    /// Its `at_ms`, at most [`CLOCK_SLACK_MS`] ahead of the reader's clock when it was read.
    at_ms: i64,
    /// A later record of its key changed nothing: compaction would keep that one and delete this state.
    shadowed: bool,
}

impl PauseBook {
    /// Reads one record: `pause` when its MAC verified and it decoded, `None` otherwise (unsigned, tombstone,
    /// malformed), under record key `key`, at the reader's clock `now_ms`.
    pub fn read(&mut self, key: &[u8], pause: Option<RoutePause>, now_ms: i64) -> Read {
        let Some(pause) = pause else {
            if let Some(held) = std::str::from_utf8(key).ok().and_then(|key| self.routes.get_mut(key)) {
                held.shadowed = true;
            }
            return Read::Ignored;
        };
        let at_ms = pause.at_ms.min(now_ms.saturating_add(CLOCK_SLACK_MS));
        let key = pause.key();
        if let Some(held) = self.routes.get_mut(&key)
            && at_ms <= held.at_ms
        {
            if held.pause == pause {
                held.shadowed = false;
                return Read::Again;
            }
            held.shadowed = true;
            return Read::Stale;
        }
        let applied = RoutePause { at_ms: pause.at_ms.min(now_ms), ..pause.clone() };
        self.routes.insert(key, Held { pause, at_ms, shadowed: false });
        Read::Applied(applied)
    }

    /// The state held for `service`'s `route`, if any record of it was read.
    pub fn state(&self, service: &str, route: &str) -> Option<&RoutePause> {
        self.routes.get(&route_pause_key(service, route)).map(|held| &held.pause)
    }

    /// The routes paused now.
    pub fn paused(&self) -> impl Iterator<Item = &RoutePause> {
        self.routes.values().map(|held| &held.pause).filter(|pause| pause.paused)
    }

    /// The states a later record of their key shadows (a stale replay, a tombstone, junk): after compaction a
    /// reader starting anew would not know them. The replayer writes each again, so that it is its key's latest.
    pub fn shadowed(&self) -> impl Iterator<Item = &RoutePause> {
        self.routes.values().filter(|held| held.shadowed).map(|held| &held.pause)
    }
}

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Creates the control topic when it does not exist: compacted, one partition, with the inbound topic's
/// replication factor (the deployments create it with the other topics; this covers a stack that predates it).
/// Blocking: call it off the runtime.
pub fn ensure_control_topic(kafka: &KafkaConfig) -> Result<(), KafkaError> {
    let client: BaseConsumer<QuietContext> = admin_config(kafka).create_with_context(QuietContext::new("control"))?;
    let metadata = client.fetch_metadata(None, METADATA_TIMEOUT)?;
    let topics = metadata.topics();
    if topics.iter().any(|topic| topic.name() == kafka.control_topic && topic.error().is_none()) {
        return Ok(());
    }
    let replication = topics
        .iter()
        .find(|topic| topic.name() == kafka.inbound_topic)
        .and_then(|topic| topic.partitions().first())
        .map_or(1, |partition| partition.replicas().len().max(1));
    let spec = TopicSpec { name: kafka.control_topic.clone(), partitions: 1, compacted: true };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| KafkaError::AdminOpCreation(error.to_string()))?;
    runtime.block_on(ensure_topics(kafka, std::slice::from_ref(&spec), i32::try_from(replication).unwrap_or(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause() -> RoutePause {
        RoutePause {
            service: "billing".to_owned(),
            route: "stripe:invoice.paid".to_owned(),
            paused: true,
            by: "ops".to_owned(),
            reason: "maintenance".to_owned(),
            at_ms: 1,
        }
    }

    #[test]
    fn the_latest_state_wins_by_its_time_not_its_offset_and_a_shadowed_one_is_named() {
        const NOW: i64 = 1_780_000_000_000;
        let at = |paused: bool, at_ms: i64| RoutePause { paused, at_ms, ..pause() };
        let key = pause().key();
        let mut book = PauseBook::default();
        assert_eq!(book.read(key.as_bytes(), Some(at(true, NOW - 3_000)), NOW), Read::Applied(at(true, NOW - 3_000)));
        assert_eq!(book.read(key.as_bytes(), Some(at(false, NOW - 2_000)), NOW), Read::Applied(at(false, NOW - 2_000)));
        assert_eq!(book.read(key.as_bytes(), Some(at(true, NOW - 1_000)), NOW), Read::Applied(at(true, NOW - 1_000)));
        // The old resume, written again: stale, the route stays paused, and the pause is shadowed.
        assert_eq!(book.read(key.as_bytes(), Some(at(false, NOW - 2_000)), NOW), Read::Stale);
        assert_eq!(book.paused().count(), 1);
        assert_eq!(book.shadowed().cloned().collect::<Vec<_>>(), vec![at(true, NOW - 1_000)]);
        // The replayer writes the pause again: no longer shadowed.
        assert_eq!(book.read(key.as_bytes(), Some(at(true, NOW - 1_000)), NOW), Read::Again);
        assert_eq!(book.shadowed().count(), 0);
        // A tombstone (or anything unsigned) under the key shadows it and changes nothing.
        assert_eq!(book.read(key.as_bytes(), None, NOW), Read::Ignored);
        assert_eq!(book.paused().count(), 1);
        assert_eq!(book.shadowed().count(), 1);
        // Junk under other keys costs nothing.
        assert_eq!(book.read(b"route-pause:x:y", None, NOW), Read::Ignored);
        assert_eq!(book.routes.len(), 1);
        // A resume from a day ahead counts as at most the slack ahead, and applies at the reader's now (the
        // budget floor), so that a genuine later pause still wins.
        let future = at(false, NOW + 86_400_000);
        assert_eq!(book.read(key.as_bytes(), Some(future), NOW), Read::Applied(at(false, NOW)));
        let later = NOW + CLOCK_SLACK_MS + 1;
        assert_eq!(book.read(key.as_bytes(), Some(at(true, later)), later), Read::Applied(at(true, later)));
    }

    #[test]
    fn a_pause_decodes_only_under_its_own_key() {
        let value = serde_json::to_vec(&pause()).unwrap();
        assert_eq!(RoutePause::decode(pause().key().as_bytes(), &value), Some(pause()));
        assert_eq!(RoutePause::decode(b"route-pause:analytics:stripe:invoice.paid", &value), None);
        assert_eq!(RoutePause::decode(b"something-else", &value), None);
        assert_eq!(RoutePause::decode(pause().key().as_bytes(), b"{not json"), None);
    }

    #[test]
    fn route_labels_are_checked() {
        assert!(valid_route_label("stripe"));
        assert!(valid_route_label("stripe:invoice.paid,invoice.failed"));
        assert!(!valid_route_label(""));
        assert!(!valid_route_label("a/b"));
        assert!(!valid_route_label("a\nb"));
    }
}
