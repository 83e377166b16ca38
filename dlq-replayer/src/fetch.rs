//! Reads one DLQ record (body, key, every header) by partition and offset: what `show` displays and `replay`
//! re-drives. The index holds no bodies; this is the only place that reads them. `lookup` reads inbound and retry
//! records by position through it too.
//!
//! The replayer's door for a record read by position: it is copied out of librdkafka once ([`FetchedRecord`],
//! headers in the `record` crate's table), and a DLQ record is decoded once ([`dead_letter_entry`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use hookline_common::{
    config::KafkaConfig,
    kafka::QuietContext,
    wire::{DeadLetterEntry, FetchedRecord},
};
use hookline_record::dead_letter::Position as RecordPosition;
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
};

use crate::index::{Position, reader_config};

/// One consumer, reused: consecutive offsets of a partition (a bulk replay) are read without seeking again.
/// Calls are serialized; each is blocking (run it off the runtime).
#[derive(Clone)]
pub struct Fetcher {
    kafka: KafkaConfig,
    topic: String,
    inner: Arc<Mutex<Option<Reader>>>,
}

struct Reader {
    consumer: BaseConsumer<QuietContext>,
    /// The offset the next poll returns, per assigned partition.
    next: HashMap<i32, i64>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher").field("topic", &self.topic).finish_non_exhaustive()
    }
}

const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

impl Fetcher {
    pub fn new(kafka: &KafkaConfig) -> Self {
        Self::of_topic(kafka, &kafka.dlq_topic)
    }

    /// A fetcher of another topic's records (`lookup` reads inbound and retry records by position).
    pub fn of_topic(kafka: &KafkaConfig, topic: &str) -> Self {
        Self { kafka: kafka.clone(), topic: topic.to_owned(), inner: Arc::new(Mutex::new(None)) }
    }

    /// The record at `position`, or `None` when the topic has no record there (any more).
    pub fn fetch(&self, position: Position) -> Result<Option<FetchedRecord>, KafkaError> {
        let mut guard = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if guard.is_none() {
            // Fetch one record, not a queue's worth: no prefetch past what was asked, and no backoff between
            // fetches (librdkafka's default waits up to a second once its queue thresholds were reached).
            let consumer = reader_config(&self.kafka)
                .set("queued.min.messages", "1")
                .set("fetch.queue.backoff.ms", "0")
                .set("fetch.message.max.bytes", "1048576")
                .set("fetch.wait.max.ms", "5")
                .create_with_context(QuietContext::new("dlq-fetch"))?;
            *guard = Some(Reader { consumer, next: HashMap::new() });
        }
        let Some(reader) = guard.as_mut() else { return Ok(None) };
        let result = reader.fetch(&self.topic, position);
        if result.is_err() {
            *guard = None; // Start clean next time.
        }
        result
    }
}

impl Reader {
    fn fetch(&mut self, topic: &str, position: Position) -> Result<Option<FetchedRecord>, KafkaError> {
        if self.next.get(&position.partition) != Some(&position.offset) || self.next.len() != 1 {
            let (low, high) = self.consumer.fetch_watermarks(topic, position.partition, FETCH_TIMEOUT)?;
            if position.offset < low || position.offset >= high {
                return Ok(None);
            }
            let mut assignment = TopicPartitionList::new();
            assignment.add_partition_offset(topic, position.partition, Offset::Offset(position.offset))?;
            self.consumer.assign(&assignment)?;
            self.next.clear();
        }
        let deadline = Instant::now() + FETCH_TIMEOUT;
        while Instant::now() < deadline {
            let Some(message) = self.consumer.poll(Duration::from_millis(100)) else { continue };
            let message = message?;
            if message.partition() != position.partition {
                continue;
            }
            self.next.clear();
            self.next.insert(position.partition, message.offset() + 1);
            if message.offset() == position.offset {
                return Ok(Some(FetchedRecord::copy_of(&message, Arc::from(topic))));
            }
            if message.offset() > position.offset {
                return Ok(None); // No record at that offset (a transaction marker).
            }
        }
        Err(KafkaError::NoMessageReceived)
    }
}

/// What a fetched DLQ record says, decoded once ([`DeadLetterEntry::decode`]).
pub fn dead_letter_entry(record: &FetchedRecord) -> DeadLetterEntry {
    let position = RecordPosition {
        topic: record.topic(),
        partition: record.partition(),
        offset: record.offset(),
        timestamp_ms: record.timestamp().to_millis(),
    };
    let headers = record.headers().into_iter().flat_map(|headers| headers.table().iter());
    DeadLetterEntry::decode(position, record.payload().map_or(0, <[u8]>::len), headers)
}
