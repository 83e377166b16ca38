//! One service's dedupe state for an event, read (GET, HGET and PTTL, never a write) and decoded: its claim key
//! and its buckets ([`dedupe_layout`]), then its key in the previous layout (written before the upgrade and during
//! it); and which consumer groups are hookline services (they have a service key).

use hookline_common::{
    dedupe_schedule::{self, ReadScheduleError},
    redis_connection::RedisConnection,
    wire::{
        dedupe_layout::{self, BucketSchedule, EventHash, Outcome},
        now_ms,
        redis_key::{self, DEDUPE_CLAIM_PREFIX, DoneMarker, FilteredMarker},
    },
};
use serde::Serialize;

use super::RecordPosition;
use crate::ops::OpError;

/// What a service's dedupe key says about the event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum DedupeState {
    /// The replayer has no `lookup.redis`: nothing was read.
    NotConfigured,
    /// No key: never processed by this service, or longer ago than its dedupe TTL, or released for a retry.
    Absent,
    /// A consumer holds the claim now (it is processing the event); the lease ends in `expires_in_ms`.
    Claimed { expires_in_ms: Option<i64> },
    /// Processed. `position` etc. are absent for a plain `done` written by a consumer before markers had details,
    /// and for the bucketed layout, which keeps only when (to the second).
    /// Any later copy of the event is skipped as a duplicate for `expires_in_ms`.
    Processed {
        processed_at_ms: Option<i64>,
        handling_ms: Option<u64>,
        position: Option<RecordPosition>,
        expires_in_ms: Option<i64>,
    },
    /// Skipped by the service's route filter `filter` (never handled): any later copy is skipped as a duplicate
    /// for `expires_in_ms`; `reprocess` for the service runs it. No position in the bucketed layout.
    Filtered { filter: String, filtered_at_ms: i64, position: Option<RecordPosition>, expires_in_ms: Option<i64> },
    /// Dead-lettered as DLQ entry `entry_id`: a re-send is skipped, a re-drive of the entry runs it.
    DeadLettered { entry_id: String, expires_in_ms: Option<i64> },
    /// A value lookup does not know (a newer build's?), shown as it is.
    Unknown { value: String },
}

impl DedupeState {
    /// Whether the key exists.
    pub fn is_present(&self) -> bool {
        !matches!(self, Self::NotConfigured | Self::Absent)
    }

    /// Decodes a dedupe key's value (`None`: no key) with its remaining time to live.
    pub fn decode(value: Option<&str>, expires_in_ms: Option<i64>) -> Self {
        let Some(value) = value else { return Self::Absent };
        // Before the done markers: a filtered marker is one, for the consumers' sake.
        if let Some(marker) = FilteredMarker::decode(value) {
            return Self::Filtered {
                filter: marker.filter,
                filtered_at_ms: marker.filtered_at_ms,
                position: Some(RecordPosition {
                    topic: marker.topic,
                    partition: marker.partition,
                    offset: marker.offset,
                }),
                expires_in_ms,
            };
        }
        if redis_key::is_done(value) {
            let marker = DoneMarker::decode(value);
            return Self::Processed {
                processed_at_ms: marker.as_ref().map(|marker| marker.processed_at_ms),
                handling_ms: marker.as_ref().map(|marker| marker.handling_ms),
                position: marker.map(|marker| RecordPosition {
                    topic: marker.topic,
                    partition: marker.partition,
                    offset: marker.offset,
                }),
                expires_in_ms,
            };
        }
        if value.starts_with(DEDUPE_CLAIM_PREFIX) {
            return Self::Claimed { expires_in_ms };
        }
        if let Some((entry_id, _types)) = redis_key::parse_dead_marker(value) {
            return Self::DeadLettered { entry_id: entry_id.to_owned(), expires_in_ms };
        }
        Self::Unknown { value: value.to_owned() }
    }

    /// The state a bucket's outcome says, the bucket living `expires_in_ms` more (an upper bound: the source's
    /// window may end it sooner).
    pub fn from_outcome(outcome: Outcome, expires_in_ms: Option<i64>) -> Self {
        match outcome {
            Outcome::Processed { at_s } => {
                Self::Processed { processed_at_ms: Some(at_s * 1000), handling_ms: None, position: None, expires_in_ms }
            }
            Outcome::Filtered { at_s, filter, .. } => {
                Self::Filtered { filter, filtered_at_ms: at_s * 1000, position: None, expires_in_ms }
            }
            Outcome::Dead { marker, .. } => match redis_key::parse_dead_marker(&marker) {
                Some((entry_id, _)) => Self::DeadLettered { entry_id: entry_id.to_owned(), expires_in_ms },
                None => Self::Unknown { value: marker },
            },
        }
    }
}

/// The service's dedupe state for the event: its claim, else its latest outcome in the buckets of the longest window
/// a source may have, else its key in the previous layout, read with its time to live.
pub async fn read(
    connection: &RedisConnection,
    prefix: &str,
    service: &str,
    source: &str,
    event_id: &str,
) -> Result<DedupeState, OpError> {
    let mut connection = connection.clone();
    let hash = EventHash::new(source, event_id);
    // Commands on one event's keys (one slot on a cluster); a state that changes in between is read as it was at
    // each read: good enough for an answer a person reads.
    let claim_key = hash.claim_key(prefix, service);
    let (value, ttl_ms) = get_with_ttl(&mut connection, &claim_key).await?;
    if value.is_some() {
        return Ok(DedupeState::decode(value.as_deref(), ttl_ms));
    }
    let now_s = u64::try_from(now_ms() / 1000).unwrap_or(0);
    let mut latest: Option<(Outcome, String)> = None;
    // Every bucket of the longest window (120 of them) in one round trip: they share the event's hash tag, so one
    // slot on a cluster; an event search looks up thousands of events, each one a pipeline, not 120 calls.
    // An unreadable schedule (written by hand?) is read as the default: a person reading a lookup is told what
    // the default buckets hold, and the consumer, which never guesses, refuses to claim until it is mended.
    let schedule = match dedupe_schedule::read(&mut connection, prefix, service).await {
        Ok((schedule, _)) => schedule,
        Err(ReadScheduleError::Redis(error)) => return Err(OpError::Redis(error)),
        Err(ReadScheduleError::Unreadable(_)) => BucketSchedule::default(),
    };
    let buckets = hash.window_buckets(prefix, service, now_s, dedupe_layout::MAX_WINDOW_S, &schedule);
    let mut pipeline = redis::pipe();
    for bucket in &buckets {
        pipeline.cmd("HGET").arg(bucket).arg(&hash.field[..]);
    }
    let values: Vec<Option<String>> = pipeline.query_async(&mut connection).await.map_err(OpError::Redis)?;
    for (bucket, value) in buckets.into_iter().zip(values) {
        let Some(outcome) = value.as_deref().and_then(Outcome::decode) else { continue };
        if latest.as_ref().is_none_or(|(best, _)| outcome.at_s() > best.at_s()) {
            latest = Some((outcome, bucket));
        }
    }
    if let Some((outcome, bucket)) = latest {
        let ttl_ms: i64 = redis::cmd("PTTL").arg(&bucket).query_async(&mut connection).await.map_err(OpError::Redis)?;
        return Ok(DedupeState::from_outcome(outcome, (ttl_ms >= 0).then_some(ttl_ms)));
    }
    let (value, ttl_ms) = get_with_ttl(&mut connection, &redis_key::dedupe(prefix, service, source, event_id)).await?;
    Ok(DedupeState::decode(value.as_deref(), ttl_ms))
}

/// A string key's value and its time to live.
async fn get_with_ttl(connection: &mut RedisConnection, key: &str) -> Result<(Option<String>, Option<i64>), OpError> {
    let value: Option<String> = redis::cmd("GET").arg(key).query_async(connection).await.map_err(OpError::Redis)?;
    let ttl_ms: i64 = redis::cmd("PTTL").arg(key).query_async(connection).await.map_err(OpError::Redis)?;
    Ok((value, (ttl_ms >= 0).then_some(ttl_ms)))
}

/// The consumer groups among `groups` that are hookline services: those with a service key
/// (`<prefix>:svc=<group>`), which a service writes at its first start. One GET per group.
pub async fn services_among(
    connection: &RedisConnection,
    prefix: &str,
    groups: Vec<String>,
) -> Result<Vec<String>, OpError> {
    let mut services = Vec::new();
    let mut connection = connection.clone();
    for group in groups {
        let recorded: Option<String> = redis::cmd("GET")
            .arg(redis_key::service(prefix, &group))
            .query_async(&mut connection)
            .await
            .map_err(OpError::Redis)?;
        if recorded.is_some() {
            services.push(group);
        }
    }
    Ok(services)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_of_a_dedupe_key_decodes() {
        assert_eq!(DedupeState::decode(None, None), DedupeState::Absent);
        assert_eq!(
            DedupeState::decode(Some("done"), Some(5)),
            DedupeState::Processed { processed_at_ms: None, handling_ms: None, position: None, expires_in_ms: Some(5) }
        );
        assert_eq!(
            DedupeState::decode(Some("done:1767000001230:18:3:18233:webhooks.inbound"), None),
            DedupeState::Processed {
                processed_at_ms: Some(1_767_000_001_230),
                handling_ms: Some(18),
                position: Some(RecordPosition { topic: "webhooks.inbound".to_owned(), partition: 3, offset: 18_233 }),
                expires_in_ms: None,
            }
        );
        assert_eq!(
            DedupeState::decode(Some("claim:abc"), Some(900)),
            DedupeState::Claimed { expires_in_ms: Some(900) }
        );
        assert_eq!(
            DedupeState::decode(Some("dead:webhooks.dlq:0:7"), None),
            DedupeState::DeadLettered { entry_id: "webhooks.dlq:0:7".to_owned(), expires_in_ms: None }
        );
        assert_eq!(
            DedupeState::decode(Some("dead:webhooks.dlq:0:7;types=,62,"), None),
            DedupeState::DeadLettered { entry_id: "webhooks.dlq:0:7".to_owned(), expires_in_ms: None }
        );
        assert_eq!(
            DedupeState::decode(Some("done:filtered:test_mode:1767000001230:3:18233:webhooks.inbound"), Some(7)),
            DedupeState::Filtered {
                filter: "test_mode".to_owned(),
                filtered_at_ms: 1_767_000_001_230,
                position: Some(RecordPosition { topic: "webhooks.inbound".to_owned(), partition: 3, offset: 18_233 }),
                expires_in_ms: Some(7),
            }
        );
        assert_eq!(DedupeState::decode(Some("other"), None), DedupeState::Unknown { value: "other".to_owned() });
    }
}
