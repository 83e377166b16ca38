//! The scan itself, on one blocking thread: one plain consumer (no group: `assign()` of every partition of every
//! topic searched, from the broker's offset for `since` to its offset for `until`), each record judged where
//! librdkafka holds it, without a copy: first its headers (source, type, and that it is not a re-drive's copy)
//! and its timestamp, then, only for those, its MAC, and only then its body parsed as JSON for the conditions.
//! The headers judged first are covered by the MAC, so a record whose headers were changed to escape the search
//! was changed, and one changed to enter it is refused by the MAC check that follows.

use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use hookline_common::{
    config::KafkaConfig,
    kafka::{QuietContext, assignment_reader_config, offset_ranges_for_times},
    record_auth::{RecordKeys, RecordKind},
    wire::{kafka::headers_of, now_ms},
};
use hookline_record::inbound::InboundSummary;
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
};

use super::{Criteria, Found, Progress, Unread};
use crate::lookup::RecordPosition;

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the scan may go without a record before it stops and reports what was left unread.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// `[start, end)` of one partition of one topic.
#[derive(Debug, Clone)]
struct Range {
    topic: String,
    partition: i32,
    start: i64,
    end: i64,
}

/// What the scan found and counted.
#[derive(Debug, Default)]
pub(super) struct Scanned {
    pub found: Vec<Found>,
    pub progress: Progress,
    pub unread: Vec<Unread>,
    pub stopped_by: Option<&'static str>,
}

/// Scans `topics` for records matching `criteria`, calling `on_progress` about once a second and once at the end,
/// until the end, a bound, or `cancelled` (checked before every poll: the request went away).
pub(super) fn scan(
    kafka: &KafkaConfig,
    keys: &RecordKeys,
    topics: &[String],
    criteria: &Criteria,
    cancelled: &AtomicBool,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<Scanned, KafkaError> {
    let consumer: BaseConsumer<QuietContext> = assignment_reader_config(
        kafka,
        &[
            // Read as fast as the broker sends, in memory the replayer's pod has: librdkafka's prefetch queue is
            // per partition (16 MiB each: 12 inbound partitions hold at most 192 MiB), and one fetch response is at
            // most 16 MiB (a record larger than the partition bound still comes, alone).
            ("fetch.wait.max.ms", "50"),
            ("queued.min.messages", "100000"),
            ("queued.max.messages.kbytes", "16384"),
            ("fetch.max.bytes", "16777216"),
            ("max.partition.fetch.bytes", "4194304"),
        ],
    )
    .create_with_context(QuietContext::new("event-search"))?;
    let mut ranges = Vec::new();
    for topic in topics {
        if cancelled.load(Ordering::Relaxed) {
            return Ok(Scanned { stopped_by: Some("cancelled"), ..Scanned::default() });
        }
        ranges.extend(ranges_of(&consumer, topic, criteria.since_ms, criteria.until_ms)?);
    }
    let mut scanned = Scanned::default();
    scanned.progress.records_to_read =
        ranges.iter().map(|range| u64::try_from(range.end - range.start).unwrap_or(0)).sum();
    if ranges.is_empty() {
        return Ok(scanned);
    }
    let mut assignment = TopicPartitionList::new();
    // Where each partition is: the next offset to read, and its end.
    let mut open: BTreeMap<(String, i32), (i64, i64)> = BTreeMap::new();
    for range in &ranges {
        assignment.add_partition_offset(&range.topic, range.partition, Offset::Offset(range.start))?;
        open.insert((range.topic.clone(), range.partition), (range.start, range.end));
    }
    consumer.assign(&assignment)?;

    let started = Instant::now();
    let mut last_progress = Instant::now();
    let mut last_record = Instant::now();
    let now = now_ms();
    let progress = &mut scanned.progress;
    while !open.is_empty() {
        if cancelled.load(Ordering::Relaxed) {
            scanned.stopped_by = Some("cancelled");
            break;
        }
        if progress.records_read >= criteria.max_records {
            scanned.stopped_by = Some("max_records");
            break;
        }
        if started.elapsed() >= criteria.max_duration {
            scanned.stopped_by = Some("max_seconds");
            break;
        }
        if scanned.found.len() >= criteria.limit {
            scanned.stopped_by = Some("limit");
            break;
        }
        if last_progress.elapsed() >= PROGRESS_EVERY {
            progress.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            on_progress(progress);
            last_progress = Instant::now();
        }
        let message = match consumer.poll(Duration::from_millis(100)) {
            Some(message) => message?,
            None => {
                // An end that is no record (a transaction marker) is reached when the position passes it.
                if let Ok(positions) = consumer.position() {
                    for element in positions.elements() {
                        let key = (element.topic().to_owned(), element.partition());
                        if let (Offset::Offset(next), Some((_, end))) = (element.offset(), open.get(&key))
                            && next >= *end
                        {
                            open.remove(&key);
                        }
                    }
                }
                if last_record.elapsed() > STALL_TIMEOUT {
                    scanned.stopped_by = Some("stalled");
                    break;
                }
                continue;
            }
        };
        last_record = Instant::now();
        let key = (message.topic().to_owned(), message.partition());
        let Some(at) = open.get_mut(&key) else { continue };
        if message.offset() >= at.1 {
            open.remove(&key);
            continue;
        }
        at.0 = message.offset() + 1;
        if at.0 >= at.1 {
            open.remove(&key);
        }
        progress.records_read += 1;

        // Headers first: one pass, no copies.
        let summary = InboundSummary::read(headers_of(message.headers()));
        let source_ok = summary.source == Some(criteria.source.as_bytes());
        let type_ok = criteria.event_type.as_deref().is_none_or(|wanted| summary.event_type == Some(wanted.as_bytes()));
        let copy = summary.is_copy;
        if !source_ok || !type_ok {
            continue;
        }
        if copy {
            progress.copies_skipped += 1;
            continue;
        }
        let timestamp = message.timestamp().to_millis();
        if timestamp.is_some_and(|ms| ms < criteria.since_ms || ms >= criteria.until_ms) {
            continue;
        }
        progress.candidates += 1;
        let verdict = keys.verify_as(
            RecordKind::Inbound,
            message.topic(),
            message.key(),
            message.payload(),
            message.headers(),
            now,
        );
        if !verdict.accepted() {
            *progress.refused.entry(verdict.label().to_owned()).or_default() += 1;
            continue;
        }
        if !criteria.conditions.is_empty() {
            let Ok(body) = serde_json::from_slice::<serde_json::Value>(message.payload().unwrap_or_default()) else {
                progress.not_json += 1;
                continue;
            };
            if !criteria.conditions.iter().all(|condition| condition.matches(&body)) {
                continue;
            }
        }
        let text = |value: Option<&[u8]>| value.map(|bytes| String::from_utf8_lossy(bytes).into_owned());
        scanned.found.push(Found {
            position: RecordPosition {
                topic: message.topic().to_owned(),
                partition: message.partition(),
                offset: message.offset(),
            },
            accepted_at_ms: summary.received_at_ms().or(timestamp),
            event_id: text(summary.event_id),
            event_type: text(summary.event_type),
        });
    }
    progress.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    // Once more at the end: a caller that went away is told where the scan stopped.
    on_progress(progress);
    for ((topic, partition), (next, end)) in open {
        if next < end {
            scanned.unread.push(Unread { topic, partition, from_offset: next, to_offset: end });
        }
    }
    Ok(scanned)
}

/// The partitions of `topic` with records timestamped in `[since, until)`: from the broker's offset for `since`
/// to its offset for `until` (the end of the partition when no record is that late).
fn ranges_of(
    consumer: &BaseConsumer<QuietContext>,
    topic: &str,
    since_ms: i64,
    until_ms: i64,
) -> Result<Vec<Range>, KafkaError> {
    let ranges = offset_ranges_for_times(consumer, topic, Some(since_ms), Some(until_ms), METADATA_TIMEOUT)?;
    Ok(ranges
        .into_iter()
        .map(|(partition, start, end)| Range { topic: topic.to_owned(), partition, start, end })
        .collect())
}
