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

use std::time::Duration;

use rdkafka::{
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
};
use serde::{Deserialize, Serialize};

use crate::{
    config::KafkaConfig,
    kafka::{QuietContext, TopicSpec, admin_config, ensure_topics},
};

/// Key prefix of a route pause record.
pub const ROUTE_PAUSE_KEY_PREFIX: &str = "route-pause:";

/// The record key of `service`'s `route` pause state.
pub fn route_pause_key(service: &str, route: &str) -> String {
    format!("{ROUTE_PAUSE_KEY_PREFIX}{service}:{route}")
}

/// An operator paused (or resumed) one route of one consumer service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutePause {
    pub service: String,
    /// The route's label (`hookline_consumer_route_breaker_open{route}` names the same routes).
    pub route: String,
    /// True: paused from `at_ms`; false: resumed at `at_ms`.
    pub paused: bool,
    /// Who asked, as the operator's tool recorded it.
    pub by: String,
    /// Why (free text, shown to other operators).
    pub reason: String,
    /// When, ms since the epoch.
    pub at_ms: i64,
}

impl RoutePause {
    /// The record key this state is written under.
    pub fn key(&self) -> String {
        route_pause_key(&self.service, &self.route)
    }

    /// Decodes a control record's value; `None` when it is not a route pause (another kind, or damaged), or when
    /// its key does not name the service and route its value names (a record moved under another key).
    pub fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let key = std::str::from_utf8(key).ok()?;
        if !key.starts_with(ROUTE_PAUSE_KEY_PREFIX) {
            return None;
        }
        let pause: Self = serde_json::from_slice(value).ok()?;
        (pause.key() == key).then_some(pause)
    }
}

/// Whether `route` can name a route: what the consumer's labels are made of (a source name, `:`, event types
/// and `,`), without control characters, at most 256 bytes.
pub fn valid_route_label(route: &str) -> bool {
    !route.is_empty() && route.len() <= 256 && route.chars().all(|c| !c.is_control() && c != '/')
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
