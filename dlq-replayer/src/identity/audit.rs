//! The audit trail: one record per mutating action (replay, discard, pause, resume, reprocess, token create and
//! revoke), written by the operation itself (so the API, the console and the CLI all record), with the subject it
//! ran as, what it did and when. The audit topic deletes records past its retention (`identity.audit_retention_days`,
//! 30 by default), so the trail covers that long. Dry runs change nothing and are not recorded.
//!
//! [`Replayer::audit_trail`] reads it back from the broker's offset for `since` on, keeps the authentic records that
//! match, and answers the newest first.

use std::{collections::HashMap, time::Duration};

use hookline_common::{
    kafka::{QuietContext, assignment_reader_config, offset_ranges_for_times},
    record_auth::{RecordKind, Verdict},
    wire::now_ms,
};
use hookline_record::identity::AuditRecord;
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
};
use serde::Serialize;

use crate::ops::{OpError, Replayer};

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the read may go without a record before it gives up.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Records answered when a query does not say; and at most.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 10_000;

/// What to read back: who, what, since when, how many (newest first).
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// The subject, exactly (`token:alice`).
    pub who: Option<String>,
    /// The action, exactly (`replay`), or a family by its prefix (`token.`).
    pub what: Option<String>,
    /// RFC 3339, or a duration back from now (`24h`, `7d`); without it, the whole retention.
    pub since: Option<String>,
    pub limit: Option<usize>,
}

impl AuditQuery {
    /// `who`, `what`, `since` and `limit` of a query string.
    pub fn from_query(query: &str) -> Result<Self, String> {
        let mut audit = Self::default();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let value = Some(value.into_owned()).filter(|value| !value.is_empty());
            match key.as_ref() {
                "who" => audit.who = value,
                "what" => audit.what = value,
                "since" => audit.since = value,
                "limit" => {
                    let limit = value.as_deref().and_then(|v| v.parse::<usize>().ok());
                    audit.limit = Some(limit.ok_or(format!("limit must be a number from 1 to {MAX_LIMIT}"))?);
                }
                other => return Err(format!("unknown query parameter `{other}`")),
            }
        }
        Ok(audit)
    }

    fn since_ms(&self, now: i64) -> Result<Option<i64>, OpError> {
        let Some(since) = self.since.as_deref() else { return Ok(None) };
        if let Ok(ms) = hookline_common::time::parse_rfc3339_weak_ms(since) {
            return Ok(Some(ms));
        }
        let back = humantime::parse_duration(since)
            .map_err(|_| OpError::BadRequest(format!("since `{since}` is neither an RFC 3339 time nor a duration")))?;
        Ok(Some(now.saturating_sub(i64::try_from(back.as_millis()).unwrap_or(i64::MAX))))
    }

    fn matches(&self, record: &AuditRecord, since_ms: Option<i64>) -> bool {
        self.who.as_ref().is_none_or(|who| *who == record.subject)
            && self.what.as_ref().is_none_or(|what| {
                record.action == *what || (what.ends_with('.') && record.action.starts_with(what.as_str()))
            })
            && since_ms.is_none_or(|since| record.at_ms >= since)
    }
}

/// The records a query found, newest first, and how many records of the window failed their MAC (never shown).
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditTrail {
    pub records: Vec<AuditRecord>,
    pub refused: u64,
}

impl Replayer {
    /// The audit records `query` asks for, newest first.
    pub async fn audit_trail(&self, query: &AuditQuery) -> Result<AuditTrail, OpError> {
        let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(OpError::BadRequest(format!("limit must be a number from 1 to {MAX_LIMIT}")));
        }
        let since_ms = query.since_ms(now_ms())?;
        self.ensure_identity_topics().await?;
        let kafka = self.config().kafka.clone();
        let topic = self.config().audit_topic();
        let keys = self.record_keys().clone();
        let query = query.clone();
        let mut trail = tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer<QuietContext> =
                assignment_reader_config(&kafka, &[]).create_with_context(QuietContext::new("audit-reader"))?;
            let ranges = offset_ranges_for_times(&consumer, &topic, since_ms, None, METADATA_TIMEOUT)?;
            let mut trail = AuditTrail::default();
            if ranges.is_empty() {
                return Ok(trail);
            }
            let mut assignment = TopicPartitionList::new();
            let mut ends: HashMap<i32, i64> = HashMap::new();
            for &(partition, start, end) in &ranges {
                assignment.add_partition_offset(&topic, partition, Offset::Offset(start))?;
                ends.insert(partition, end);
            }
            consumer.assign(&assignment)?;
            let mut last_progress = std::time::Instant::now();
            while !ends.is_empty() {
                let Some(message) = consumer.poll(Duration::from_millis(200)) else {
                    if last_progress.elapsed() > STALL_TIMEOUT {
                        return Err(KafkaError::NoMessageReceived);
                    }
                    continue;
                };
                let message = message?;
                last_progress = std::time::Instant::now();
                let Some(&end) = ends.get(&message.partition()) else { continue };
                if message.offset() < end {
                    let verdict = keys.verify_as(
                        RecordKind::Identity,
                        &topic,
                        message.key(),
                        message.payload(),
                        message.headers(),
                        now_ms(),
                    );
                    let record = matches!(verdict, Verdict::Authentic { .. })
                        .then(|| {
                            AuditRecord::decode(
                                message.key().unwrap_or_default(),
                                message.payload().unwrap_or_default(),
                            )
                        })
                        .flatten();
                    match record {
                        Some(record) if query.matches(&record, since_ms) => trail.records.push(record),
                        Some(_) => {}
                        None => trail.refused += 1,
                    }
                }
                if message.offset() + 1 >= end {
                    ends.remove(&message.partition());
                }
            }
            Ok::<_, KafkaError>(trail)
        })
        .await??;
        trail.records.sort_by_key(|record| std::cmp::Reverse(record.at_ms));
        trail.records.truncate(limit);
        Ok(trail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_filters_by_who_what_and_since() {
        let record = |subject: &str, action: &str, at_ms| AuditRecord {
            at_ms,
            subject: subject.to_owned(),
            action: action.to_owned(),
            detail: serde_json::Value::Null,
        };
        let query = AuditQuery::from_query("who=token%3Aalice&what=token.").unwrap();
        assert!(query.matches(&record("token:alice", "token.create", 5), None));
        assert!(!query.matches(&record("token:alice", "replay", 5), None));
        assert!(!query.matches(&record("token:bob", "token.revoke", 5), None));
        assert!(!query.matches(&record("token:alice", "token.revoke", 5), Some(6)));
        let since = AuditQuery::from_query("since=1h").unwrap().since_ms(10_000_000).unwrap();
        assert_eq!(since, Some(10_000_000 - 3_600_000));
        assert!(AuditQuery::from_query("colour=red").is_err());
        assert!(AuditQuery::from_query("since=yesterday").unwrap().since_ms(0).is_err());
    }
}
