//! "Where is event X?": one event's fate across every consumer service, answered from what hookline already
//! keeps, at no cost on the hot path. Nothing here writes anything.
//!
//! - Per service, its dedupe key in Redis ([`redis_state`]): absent, claimed now, done (with when, how long and
//!   the processed record's position, for markers the consumer wrote since they carry details), filtered (skipped
//!   by one of its route's filters: which, when, and the record's position) or dead-lettered.
//! - The DLQ index: the entries of that source and event id, with attempts, error and replay status; the status
//!   topic's replay outcomes are part of each entry's fate.
//! - Per service, its retry topic ([`retry_scan`]): the records waiting there with that event id, read from the
//!   service group's committed offsets to the end, at most [`crate::config::LookupConfig::retry_scan_max_records`]
//!   records per partition (the answer says when the bound cut a scan short).
//! - Accepted-at and the inbound position: from the record itself, fetched at the position the done marker, the
//!   retry record's or the DLQ entry's original-position headers name.
//!
//! Which services: those `lookup.services` names, or else every consumer group Kafka knows that has a service
//! key in Redis (`<prefix>:svc=<group>`, written at a service's first start; a service's name is its group id
//! unless `service.name` says otherwise, and then it must be listed), plus those named by DLQ entries.

mod redis_state;
mod render;
mod retry_scan;

use std::collections::BTreeSet;

use hookline_common::{config::RedisConfig, redis_connection::RedisConnection, wire::FetchedRecord};
use hookline_record::{inbound::InboundSummary, retry::RetryHeaders};
use serde::Serialize;

pub use self::{
    redis_state::{DedupeState, read as dedupe_state},
    render::{render_text, trace_id},
    retry_scan::{RetryScan, Waiting},
};
use crate::{
    ReplayerConfig,
    filter::Filter,
    index::Entry,
    ops::{OpError, Replayer},
};

/// Where a record is: topic, partition, offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordPosition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

impl RecordPosition {
    fn of(message: &FetchedRecord) -> Self {
        Self { topic: message.topic().to_owned(), partition: message.partition(), offset: message.offset() }
    }
}

/// The consumer services whose dedupe state to read: `lookup.services`, or else every consumer group the brokers
/// know that has a service key in Redis.
pub async fn services(
    config: &ReplayerConfig,
    connection: &RedisConnection,
    redis: &RedisConfig,
) -> Result<Vec<String>, OpError> {
    if !config.lookup.services.is_empty() {
        return Ok(config.lookup.services.iter().map(|service| service.name.clone()).collect());
    }
    let kafka = config.kafka.clone();
    let groups = tokio::task::spawn_blocking(move || retry_scan::consumer_groups(&kafka)).await??;
    redis_state::services_among(connection, &redis.key_prefix, groups).await
}

/// What to say when `lookup.redis` cannot be reached, with what to check.
pub fn redis_unreachable(error: &impl std::fmt::Display) -> String {
    format!(
        "dedupe state not read: lookup.redis refused or did not answer ({error}); check its url, TLS and user \
         against the consumers' [redis]"
    )
}

/// What to say when Redis answers but no service is found in it, with the fix.
pub fn no_service_found(key_prefix: &str) -> String {
    format!(
        "no consumer service found: no consumer group the brokers know has a service key `{key_prefix}:svc=<group>` \
         in lookup.redis; set lookup.redis.key_prefix to the consumers' redis.key_prefix, or list the services \
         under [lookup] services"
    )
}

/// When the gateway accepted the event, and where its inbound record is.
#[derive(Debug, Clone, Serialize)]
pub struct Accepted {
    pub received_at_ms: Option<i64>,
    /// The inbound record (for an event re-driven or retried: the original one its headers name).
    pub inbound: Option<RecordPosition>,
    /// The trace id of the `traceparent` header of the record read, when it has one.
    pub trace_id: Option<String>,
}

/// One service's view of the event.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceAnswer {
    pub service: String,
    pub dedupe: DedupeState,
    /// Records of the event waiting in the service's retry topic.
    pub retry: RetryScan,
    /// The service's DLQ entries for the event, oldest first.
    pub dead_letters: Vec<Entry>,
}

/// The whole answer.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub source: String,
    pub event_id: String,
    /// Anything at all was found: a dedupe key, a waiting retry, a DLQ entry.
    pub found: bool,
    pub accepted: Option<Accepted>,
    pub services: Vec<ServiceAnswer>,
    /// DLQ entries of the event that name no service (written before services had names).
    pub unattributed_dead_letters: Vec<Entry>,
    /// Why no service's dedupe state could be read, and how to fix it, in one line (no `lookup.redis`, a Redis
    /// that refuses the connection, no service found under its key prefix); `None` when it was read. An answer
    /// with this set has not looked where a processed event is recorded: "not found" then means "not known".
    pub dedupe_unread: Option<String>,
}

/// The fix for a replayer without `lookup.redis`, said wherever the missing dedupe state is.
pub const NO_LOOKUP_REDIS: &str = "dedupe state not read: the replayer has no [lookup.redis]; set it to the \
    consumers' Redis (their redis.url and redis.key_prefix) to see whether each service processed the event";

/// Looks events up. Each lookup connects to Redis anew (when `lookup.redis` is configured; without it the
/// answer has no dedupe state): an operator's question, not a hot path, and a Redis that is down at the
/// replayer's start must not stop the rest of the API.
#[derive(Clone, Debug)]
pub struct Lookup {
    replayer: Replayer,
}

impl Lookup {
    pub fn new(replayer: Replayer) -> Self {
        Self { replayer }
    }

    /// Everything hookline keeps about `event_id` of `source`.
    pub async fn lookup(&self, source: &str, event_id: &str) -> Result<Answer, OpError> {
        if source.is_empty() || event_id.is_empty() {
            return Err(OpError::BadRequest("a lookup names a source and an event id".to_owned()));
        }
        let config = self.replayer.config().clone();
        let mut dedupe_unread = None;
        let redis: Option<(RedisConnection, &RedisConfig)> = match &config.lookup.redis {
            Some(redis) => match RedisConnection::connect(redis).await {
                Ok(connection) => Some((connection, redis)),
                Err(error) => {
                    dedupe_unread = Some(redis_unreachable(&error));
                    None
                }
            },
            None => {
                dedupe_unread = Some(NO_LOOKUP_REDIS.to_owned());
                None
            }
        };
        let filter = Filter { source: Some(source.to_owned()), ..Filter::default() };
        let entries: Vec<Entry> = self
            .replayer
            .list(&filter)
            .await?
            .into_iter()
            .filter(|entry| entry.entry.event_id.as_deref() == Some(event_id))
            .collect();

        let mut services: BTreeSet<String> = BTreeSet::new();
        match &redis {
            Some((connection, redis)) => {
                services.extend(self::services(&config, connection, redis).await?);
                if services.is_empty() {
                    dedupe_unread = Some(no_service_found(&redis.key_prefix));
                }
            }
            None => services.extend(config.lookup.services.iter().map(|service| service.name.clone())),
        }
        services.extend(entries.iter().filter_map(|entry| entry.entry.service.clone()));

        let mut answers = Vec::new();
        for service in services {
            let dedupe = match &redis {
                Some((connection, redis)) => {
                    redis_state::read(connection, &redis.key_prefix, &service, source, event_id).await?
                }
                None => DedupeState::NotConfigured,
            };
            let group = config.lookup.group_of(&service).to_owned();
            let (kafka, limit) = (config.kafka.clone(), config.lookup.retry_scan_max_records);
            let (scan_service, scan_source, scan_id) = (service.clone(), source.to_owned(), event_id.to_owned());
            let retry = tokio::task::spawn_blocking(move || {
                retry_scan::scan(&kafka, &scan_service, &group, &scan_source, &scan_id, limit)
            })
            .await??;
            let dead_letters =
                entries.iter().filter(|entry| entry.entry.service.as_deref() == Some(&service)).cloned().collect();
            answers.push(ServiceAnswer { service, dedupe, retry, dead_letters });
        }
        let unattributed_dead_letters: Vec<Entry> =
            entries.iter().filter(|entry| entry.entry.service.is_none()).cloned().collect();
        let found = !entries.is_empty()
            || answers.iter().any(|answer| answer.dedupe.is_present() || !answer.retry.waiting.is_empty());
        let accepted = if found { self.accepted(&answers, &entries).await? } else { None };
        Ok(Answer {
            source: source.to_owned(),
            event_id: event_id.to_owned(),
            found,
            accepted,
            services: answers,
            unattributed_dead_letters,
            dedupe_unread,
        })
    }

    /// Accepted-at and the inbound position, from the first record the answer names: a done marker's position,
    /// a waiting retry record, or a DLQ entry's original position.
    async fn accepted(&self, answers: &[ServiceAnswer], entries: &[Entry]) -> Result<Option<Accepted>, OpError> {
        // A DLQ entry's original record first: a processed record may be a re-drive of it, which carries no
        // position of the original.
        let mut candidates: Vec<RecordPosition> = Vec::new();
        for entry in entries {
            let e = &entry.entry;
            if let (Some(topic), Some(partition), Some(offset)) =
                (&e.original_topic, e.original_partition, e.original_offset)
            {
                candidates.push(RecordPosition { topic: topic.clone(), partition, offset });
            }
        }
        for answer in answers {
            match &answer.dedupe {
                DedupeState::Processed { position: Some(position), .. }
                | DedupeState::Filtered { position: Some(position), .. } => {
                    candidates.push(position.clone());
                }
                _ => {}
            }
            candidates.extend(answer.retry.waiting.iter().map(|waiting| waiting.position.clone()));
        }
        let inbound_topic = self.replayer.config().kafka.inbound_topic.clone();
        // The inbound record itself first, when a candidate names it: it is the one that was accepted.
        candidates.sort_by_key(|position| position.topic != inbound_topic);
        for position in candidates {
            let kafka = self.replayer.config().kafka.clone();
            let at = position.clone();
            let record = tokio::task::spawn_blocking(move || {
                crate::fetch::Fetcher::of_topic(&kafka, &at.topic)
                    .fetch(crate::index::Position { partition: at.partition, offset: at.offset })
            })
            .await??;
            let Some(record) = record else { continue };
            return Ok(Some(accepted_from(&record, &inbound_topic)));
        }
        Ok(None)
    }
}

/// What a record says about its acceptance: its receive time, and the inbound position (its own, or the
/// original one a retry or re-driven record's headers name).
fn accepted_from(record: &FetchedRecord, inbound_topic: &str) -> Accepted {
    let headers = || record.headers().into_iter().flat_map(|headers| headers.table().iter());
    let summary = InboundSummary::read(headers());
    let is_copy = summary.is_copy;
    let inbound = if record.topic() == inbound_topic && !is_copy {
        Some(RecordPosition::of(record))
    } else {
        RetryHeaders::decode(headers())
            .map(|retry| RecordPosition {
                topic: retry.origin.topic,
                partition: retry.origin.partition,
                offset: retry.origin.offset,
            })
            .or_else(|| {
                let dead_letter = crate::fetch::dead_letter_entry(record);
                Some(RecordPosition {
                    topic: dead_letter.original_topic?,
                    partition: dead_letter.original_partition?,
                    offset: dead_letter.original_offset?,
                })
            })
            // A re-drive or re-processing copy is not the accepted record: its position is not the inbound one.
            .or_else(|| (record.topic() == inbound_topic && !is_copy).then(|| RecordPosition::of(record)))
    };
    Accepted {
        received_at_ms: summary.received_at_ms(),
        inbound,
        trace_id: InboundSummary::text(summary.traceparent).as_deref().and_then(trace_id),
    }
}
