//! Re-processing beyond the DLQ: events a service already processed (its handler had a bug that did not fail),
//! re-driven on an operator's word to that one service. The request selects records of the inbound topic by time
//! (the broker's offsets-for-times on every partition: `from` inclusive, `to` exclusive) and/or by event id, and
//! is a dry run unless `apply` is set. Applied, it gets a run id, records the request in the status topic under
//! `reprocess:<run id>` first, then produces each selected record's key, body and headers back to the inbound
//! topic addressed to the service, with the run id and where the record was ([`Reprocess`]); the service's consumer
//! runs its handler once per run id and records each fate under `reprocess:<run id>:<reprocess-of>`.
//!
//! The inbound topic is read twice when applying: once to select (metadata only), once to re-drive the
//! selected records, so no body is held beyond the one being produced.

use std::{
    collections::{BTreeMap, HashSet},
    sync::Arc,
    time::Duration,
};

use hookline_common::record_auth::RecordKind;
use hookline_common::wire::{EntryStatus, EntryStatusRecord, FetchedRecord, REPROCESS_STATUS_KEY_PREFIX, now_ms};
use hookline_record::{inbound::InboundSummary, redrive::Reprocess};
use rdkafka::{Message, Offset, TopicPartitionList, consumer::Consumer, error::KafkaError};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::{OpError, RateLimiter, Replayer, by_or_default};
use crate::index::reader;

/// What `reprocess` should do.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReprocessRequest {
    /// The one consumer service to re-process for (required).
    pub service: String,
    /// Only records with these event ids (within `from`..`to`, or the topic's whole retention without them).
    pub event_ids: Vec<String>,
    /// Records the broker timestamped at or after this RFC 3339 time.
    pub from: Option<String>,
    /// Records the broker timestamped before this RFC 3339 time.
    pub to: Option<String>,
    /// Only records of this source.
    pub source: Option<String>,
    /// Produce and record; without it, only report what would be re-driven.
    pub apply: bool,
    /// At most this many records per second.
    pub rate_per_s: Option<f64>,
    /// Who asked (recorded as `replayer:<by>`).
    pub by: String,
}

/// One selected record of the inbound topic.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Reprocessed {
    /// `<topic>:<partition>:<offset>`: what `hookline-reprocess-of` says.
    pub position: String,
    pub source: Option<String>,
    pub event_id: Option<String>,
    /// The gateway's receive time (`hookline-received-at-ms`), or else the record's timestamp.
    pub received_at_ms: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ReprocessReport {
    /// False for a dry run: nothing was produced or recorded.
    pub applied: bool,
    /// The run's id, when it was applied (and selected anything).
    pub run_id: Option<String>,
    pub service: String,
    /// Re-driven (or, in a dry run, would be), in (partition, offset) order.
    pub records: Vec<Reprocessed>,
}

/// How long finding partitions, watermarks and offsets for times may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a scan may go without a record before it gives up.
const SCAN_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Offsets `[start, end)` of one partition.
type Range = (i32, i64, i64);

impl Replayer {
    /// Re-drives already processed events of the inbound topic to one service (see the module's doc). With traces
    /// on, the run is one `reprocess` span (a new trace) and every record it sends a child of it.
    pub async fn reprocess(&self, request: &ReprocessRequest) -> Result<ReprocessReport, OpError> {
        use hookline_common::telemetry::traces::{KeyValue, Parent, SpanKind, TraceSpan, attribute};
        let span = TraceSpan::start(
            SpanKind::Internal,
            Parent::Root,
            || "reprocess".to_owned(),
            || {
                vec![
                    KeyValue::new(attribute::ACTION, "reprocess"),
                    KeyValue::new(attribute::SERVICE, request.service.trim().to_owned()),
                ]
            },
        );
        let report = span.scope(self.reprocess_run(request)).await;
        if let Err(error) = &report {
            span.fail("reprocess_failed", || error.to_string());
        }
        report
    }

    async fn reprocess_run(&self, request: &ReprocessRequest) -> Result<ReprocessReport, OpError> {
        let service = request.service.trim();
        if service.is_empty() {
            return Err(OpError::BadRequest("a re-processing names its service".to_owned()));
        }
        if request.rate_per_s.is_some_and(|rate| !(rate.is_finite() && rate > 0.0)) {
            return Err(OpError::BadRequest("rate must be a positive number of records per second".to_owned()));
        }
        let from_ms = request.from.as_deref().map(parse_rfc3339_ms).transpose()?;
        let to_ms = request.to.as_deref().map(parse_rfc3339_ms).transpose()?;
        if request.event_ids.is_empty() && (from_ms.is_none() || to_ms.is_none()) {
            return Err(OpError::BadRequest("give --from and --to, and/or --event-id".to_owned()));
        }
        if from_ms.zip(to_ms).is_some_and(|(from, to)| from >= to) {
            return Err(OpError::BadRequest("--from must be before --to".to_owned()));
        }
        let topic = self.config.kafka.inbound_topic.clone();
        let ranges = {
            let kafka = self.config.kafka.clone();
            let topic = topic.clone();
            tokio::task::spawn_blocking(move || ranges_of(&kafka, &topic, from_ms, to_ms)).await??
        };
        let event_ids: HashSet<&str> = request.event_ids.iter().map(String::as_str).collect();
        let source = request.source.as_deref().filter(|source| !source.is_empty());
        fn summary(record: &FetchedRecord) -> InboundSummary<'_> {
            InboundSummary::read(record.headers().into_iter().flat_map(|headers| headers.table().iter()))
        }
        let selects = |summary: &InboundSummary<'_>| {
            let text = InboundSummary::text;
            // A re-drive (replay or re-processing) is a copy of an event its original already selects.
            !summary.is_copy
                && source.is_none_or(|source| text(summary.source).as_deref() == Some(source))
                && (event_ids.is_empty() || text(summary.event_id).is_some_and(|id| event_ids.contains(id.as_str())))
        };

        // Pass 1: select, keeping metadata only.
        let mut selected: BTreeMap<(i32, i64), Reprocessed> = BTreeMap::new();
        let mut records = self.scan(ranges);
        while let Some(record) = records.recv().await {
            let record = record?;
            let summary = summary(&record);
            if selects(&summary) {
                selected.insert(
                    (record.partition(), record.offset()),
                    Reprocessed {
                        position: format!("{topic}:{}:{}", record.partition(), record.offset()),
                        source: InboundSummary::text(summary.source),
                        event_id: InboundSummary::text(summary.event_id),
                        received_at_ms: summary.received_at_ms().or_else(|| record.timestamp().to_millis()),
                    },
                );
            }
        }
        let mut report = ReprocessReport {
            applied: request.apply,
            run_id: None,
            service: service.to_owned(),
            records: selected.values().cloned().collect(),
        };
        if !request.apply || selected.is_empty() {
            return Ok(report);
        }

        // The request first, so that every fate the consumer records has its request before it.
        let run_id = uuid::Uuid::new_v4().to_string();
        let what = match (&request.from, &request.to) {
            (Some(from), Some(to)) => format!("from {from} to {to}"),
            (Some(from), None) => format!("from {from}"),
            (None, Some(to)) => format!("until {to}"),
            (None, None) => "the topic's whole retention".to_owned(),
        };
        let ids = if request.event_ids.is_empty() {
            String::new()
        } else {
            format!(", event ids {}", request.event_ids.join(", "))
        };
        let source_note = source.map(|source| format!(", source {source}")).unwrap_or_default();
        let n = u32::try_from(selected.len()).unwrap_or(u32::MAX);
        let status = EntryStatusRecord {
            status: EntryStatus::Replayed,
            at_ms: now_ms(),
            by: format!("replayer:{}", by_or_default(&request.by)),
            event_id: None,
            new_entry: None,
            note: Some(format!("re-process for service {service}: {topic} {what}{source_note}{ids}: {n} records")),
            replays: Some(n),
        };
        let key = format!("{REPROCESS_STATUS_KEY_PREFIX}{run_id}");
        self.send(status.encode(&self.config.kafka.dlq_status_topic, &key)).await?;

        // Pass 2: re-drive the selected records, read again by position.
        let mut ranges: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
        for &(partition, offset) in selected.keys() {
            let range = ranges.entry(partition).or_insert((offset, offset + 1));
            range.0 = range.0.min(offset);
            range.1 = range.1.max(offset + 1);
        }
        let mut limiter = request.rate_per_s.map(RateLimiter::per_second);
        let mut records =
            self.scan(ranges.into_iter().map(|(partition, (start, end))| (partition, start, end)).collect());
        while let Some(record) = records.recv().await {
            let record = record?;
            let Some(selected) = selected.get(&(record.partition(), record.offset())) else { continue };
            let verdict = self.authenticate(&record, RecordKind::Inbound);
            if !verdict.accepted() {
                // Never laundered into a signed record: the consumer refused it too.
                tracing::warn!(at = %selected.position, refusal = verdict.label(), "not re-processed: the record has no valid MAC");
                continue;
            }
            if let Some(limiter) = &mut limiter {
                limiter.acquire().await;
            }
            let copy = Reprocess { service, run_id: &run_id, of: &selected.position };
            let out = copy.encode(&topic, record.original());
            self.send(out).await?;
        }
        tracing::info!(run_id = %run_id, service, records = selected.len(), "re-processing requested");
        let detail =
            serde_json::json!({ "service": service, "run_id": run_id, "records": selected.len(), "note": status.note });
        self.audit(&by_or_default(&request.by), "reprocess", detail).await?;
        report.run_id = Some(run_id);
        Ok(report)
    }

    /// Reads the records of `ranges` of the inbound topic on a blocking thread; each arrives on the channel
    /// (bounded: the reader waits for the caller).
    fn scan(&self, ranges: Vec<Range>) -> mpsc::Receiver<Result<FetchedRecord, OpError>> {
        let (sender, receiver) = mpsc::channel(64);
        let kafka = self.config.kafka.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(error) = scan_ranges(&kafka, &ranges, &sender) {
                let _ = sender.blocking_send(Err(error.into()));
            }
        });
        receiver
    }
}

fn parse_rfc3339_ms(text: &str) -> Result<i64, OpError> {
    hookline_common::time::parse_rfc3339_weak_ms(text)
        .map_err(|_| OpError::BadRequest(format!("`{text}` is not an RFC 3339 time")))
}

/// Per partition of `topic`, the offsets `[start, end)` of the records timestamped in `[from, to)`: the broker's
/// offsets for those times (the first offset at or after each), the start of the topic without `from` and its
/// end as it is now without `to` (or when no record is that late).
fn ranges_of(
    kafka: &hookline_common::config::KafkaConfig,
    topic: &str,
    from_ms: Option<i64>,
    to_ms: Option<i64>,
) -> Result<Vec<Range>, KafkaError> {
    let consumer = reader(kafka, "reprocess-select")?;
    hookline_common::kafka::offset_ranges_for_times(&consumer, topic, from_ms, to_ms, METADATA_TIMEOUT)
}

/// Reads every record of `ranges` and sends it on; stops early when the receiver is gone.
fn scan_ranges(
    kafka: &hookline_common::config::KafkaConfig,
    ranges: &[Range],
    sender: &mpsc::Sender<Result<FetchedRecord, OpError>>,
) -> Result<(), KafkaError> {
    if ranges.is_empty() {
        return Ok(());
    }
    let topic = &kafka.inbound_topic;
    let shared_topic: Arc<str> = Arc::from(topic.as_str());
    let consumer = reader(kafka, "reprocess-scan")?;
    let mut assignment = TopicPartitionList::new();
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for &(partition, start, end) in ranges {
        assignment.add_partition_offset(topic, partition, Offset::Offset(start))?;
        ends.insert(partition, end);
    }
    consumer.assign(&assignment)?;
    let mut last_progress = std::time::Instant::now();
    while !ends.is_empty() {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                last_progress = std::time::Instant::now();
                let partition = message.partition();
                let Some(&end) = ends.get(&partition) else { continue };
                if message.offset() < end
                    && sender.blocking_send(Ok(FetchedRecord::copy_of(&message, shared_topic.clone()))).is_err()
                {
                    return Ok(());
                }
                if message.offset() + 1 >= end {
                    ends.remove(&partition);
                }
            }
            Some(Err(error)) => return Err(error),
            None => {
                // An end offset that is no record (a transaction marker) is reached when the position passes it.
                if let Ok(positions) = consumer.position() {
                    for element in positions.elements() {
                        let passed = match element.offset() {
                            Offset::Offset(next) => ends.get(&element.partition()).is_some_and(|end| next >= *end),
                            _ => false,
                        };
                        if passed {
                            ends.remove(&element.partition());
                        }
                    }
                }
                if last_progress.elapsed() > SCAN_STALL_TIMEOUT {
                    return Err(KafkaError::NoMessageReceived);
                }
            }
        }
    }
    Ok(())
}
