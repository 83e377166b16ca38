//! A service's retry topic, searched for one event: per partition, from the service group's committed offset
//! (what it has not finished yet) to the high watermark, at most a bounded number of records per partition.
//! Read by assignment with a throwaway group id; the service's group is only asked for its committed offsets
//! (OffsetFetch), never joined and never committed to.

use std::time::{Duration, Instant};

use hookline_common::{
    config::KafkaConfig,
    kafka::{QuietContext, partitions_of},
    wire::kafka::headers_of,
};
use hookline_record::{inbound::InboundSummary, retry::RetryHeaders};
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::{KafkaError, RDKafkaErrorCode},
};
use serde::Serialize;

use super::RecordPosition;
use crate::index::reader_config;

/// How long one metadata or offsets request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a whole scan may take before it reports what it read (`complete: false`).
const SCAN_DEADLINE: Duration = Duration::from_secs(30);

/// A record of the event waiting in the retry topic: its retry headers as the service reads them
/// ([`RetryHeaders::decode`]; all `None` when they are damaged, as the service then starts counting again).
#[derive(Debug, Clone, Serialize)]
pub struct Waiting {
    pub position: RecordPosition,
    /// Attempts made before it was parked.
    pub attempts: Option<i64>,
    pub error: Option<String>,
    pub due_at_ms: Option<i64>,
    pub first_failure_at_ms: Option<i64>,
    pub trace_id: Option<String>,
}

/// What the search of one service's retry topic found, and how much of it was read.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RetryScan {
    pub topic: String,
    pub waiting: Vec<Waiting>,
    /// Records read.
    pub records_scanned: u64,
    /// Records between the committed offsets and the ends that were not read (the bound, or the deadline).
    pub records_not_scanned: u64,
}

/// Every consumer group the brokers know.
pub fn consumer_groups(kafka: &KafkaConfig) -> Result<Vec<String>, KafkaError> {
    let consumer: BaseConsumer<QuietContext> =
        reader_config(kafka).create_with_context(QuietContext::new("lookup-groups"))?;
    let groups = consumer.fetch_group_list(None, REQUEST_TIMEOUT)?;
    Ok(groups.groups().iter().map(|group| group.name().to_owned()).collect())
}

/// Searches `<kafka.retry_topic>.<service>` for records of `source`/`event_id` not yet consumed by `group`,
/// reading at most `max_records_per_partition` records of each partition.
pub fn scan(
    kafka: &KafkaConfig,
    service: &str,
    group: &str,
    source: &str,
    event_id: &str,
    max_records_per_partition: u64,
) -> Result<RetryScan, KafkaError> {
    let topic = format!("{}.{service}", kafka.retry_topic);
    let mut scan = RetryScan { topic: topic.clone(), ..RetryScan::default() };
    let reader: BaseConsumer<QuietContext> =
        reader_config(kafka).create_with_context(QuietContext::new("lookup-retry"))?;
    // No such topic (or none of its partitions listed): nothing waits in retry.
    let partitions = match partitions_of(&reader, &topic, REQUEST_TIMEOUT) {
        Ok(partitions) => partitions,
        Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition)) => return Ok(scan),
        Err(error) => return Err(error),
    };
    // The group's committed offsets, asked with the group's id; this client never joins or commits.
    let group_client: BaseConsumer<QuietContext> =
        reader_config(kafka).set("group.id", group).create_with_context(QuietContext::new("lookup-committed"))?;
    let mut wanted = TopicPartitionList::new();
    for &partition in &partitions {
        wanted.add_partition(&topic, partition);
    }
    let committed = group_client.committed_offsets(wanted, REQUEST_TIMEOUT)?;

    let mut assignment = TopicPartitionList::new();
    let mut ends: Vec<(i32, i64, i64)> = Vec::new();
    for &partition in &partitions {
        let (low, high) = reader.fetch_watermarks(&topic, partition, REQUEST_TIMEOUT)?;
        let from = match committed.find_partition(&topic, partition).map(|p| p.offset()) {
            Some(Offset::Offset(offset)) => offset.max(low),
            _ => low,
        };
        if from >= high {
            continue;
        }
        let available = u64::try_from(high - from).unwrap_or(0);
        let read = available.min(max_records_per_partition);
        scan.records_not_scanned += available - read;
        let end = from + i64::try_from(read).unwrap_or(i64::MAX);
        assignment.add_partition_offset(&topic, partition, Offset::Offset(from))?;
        ends.push((partition, from, end));
    }
    if ends.is_empty() {
        return Ok(scan);
    }
    reader.assign(&assignment)?;
    let deadline = Instant::now() + SCAN_DEADLINE;
    // Per partition: the next offset to read, and where reading stops.
    let mut next = ends;
    while next.iter().any(|&(_, at, end)| at < end) && Instant::now() < deadline {
        let Some(message) = reader.poll(Duration::from_millis(100)) else { continue };
        let message = message?;
        let Some(slot) = next.iter_mut().find(|(partition, _, _)| *partition == message.partition()) else { continue };
        if message.offset() >= slot.2 {
            slot.1 = slot.2; // Past the bound (or a transaction marker moved us there): this partition is read.
            continue;
        }
        slot.1 = message.offset() + 1;
        scan.records_scanned += 1;
        let headers = headers_of(message.headers());
        let summary = InboundSummary::read(headers.clone());
        let text = InboundSummary::text;
        if text(summary.event_id).as_deref() != Some(event_id) || text(summary.source).as_deref() != Some(source) {
            continue;
        }
        let retry = RetryHeaders::decode(headers);
        scan.waiting.push(Waiting {
            position: RecordPosition { topic: topic.clone(), partition: message.partition(), offset: message.offset() },
            attempts: retry.as_ref().map(|retry| i64::from(retry.attempts.attempts)),
            due_at_ms: retry.as_ref().map(|retry| retry.due_at_ms),
            first_failure_at_ms: retry.as_ref().map(|retry| retry.attempts.first_failure_at_ms),
            error: retry.map(|retry| retry.attempts.last_error),
            trace_id: text(summary.traceparent).as_deref().and_then(super::trace_id),
        });
    }
    // Whatever the deadline left unread.
    for (_, at, end) in next {
        scan.records_not_scanned += u64::try_from(end - at).unwrap_or(0);
    }
    Ok(scan)
}
