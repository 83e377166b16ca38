//! Tailing the two topics into the index: up to their high watermarks (built), then on and on (the service).

use std::{
    collections::HashMap,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use hookline_common::{
    config::KafkaConfig,
    kafka::{QuietContext, assignment_reader_config, partitions_of},
};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
};
use tokio_util::sync::CancellationToken;

use super::Index;

/// Reads both topics into `index`: up to their high watermarks at the start, then, with `follow`, on and on
/// until `stop`. Blocking (a librdkafka consumer): run it on its own thread. Joins no group and commits nothing.
pub fn tail(
    kafka: &KafkaConfig,
    index: &Index,
    follow: bool,
    stop: &CancellationToken,
    startup_timeout: Duration,
) -> Result<(), KafkaError> {
    let consumer = reader(kafka, "dlq-index")?;
    let topics = [kafka.dlq_topic.as_str(), kafka.dlq_status_topic.as_str()];
    let mut assignment = TopicPartitionList::new();
    let mut targets: HashMap<(String, i32), i64> = HashMap::new();
    let mut assigned: HashMap<&str, usize> = HashMap::new();
    for topic in topics {
        let partitions = partitions_of(&consumer, topic, startup_timeout)?;
        assigned.insert(topic, partitions.len());
        for partition in partitions {
            let (low, high) = consumer.fetch_watermarks(topic, partition, startup_timeout)?;
            if high > low {
                targets.insert((topic.to_owned(), partition), high - 1);
            }
            assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
        }
    }
    consumer.assign(&assignment)?;
    let started = Instant::now();
    let mut last_metadata_check = Instant::now();
    if targets.is_empty() {
        // Both topics are empty: built already.
        index.caught_up.store(true, Ordering::Release);
        if !follow {
            return Ok(());
        }
    }
    let mut batch = Vec::with_capacity(1024);
    loop {
        if stop.is_cancelled() {
            return Ok(());
        }
        if !index.is_caught_up() && !follow && started.elapsed() > startup_timeout {
            return Err(KafkaError::NoMessageReceived);
        }
        batch.clear();
        let mut timed_out = false;
        while batch.len() < 1024 {
            match consumer.poll(Duration::from_millis(if batch.is_empty() { 200 } else { 0 })) {
                Some(Ok(message)) => batch.push(message),
                Some(Err(error)) => {
                    tracing::warn!(error = %error, "reading the dead-letter topics");
                    break;
                }
                None => {
                    timed_out = true;
                    break;
                }
            }
        }
        index.apply(&kafka.dlq_status_topic, &batch);
        if !index.is_caught_up() {
            for message in &batch {
                let key = (message.topic().to_owned(), message.partition());
                if targets.get(&key).is_some_and(|last| message.offset() >= *last) {
                    targets.remove(&key);
                }
            }
            if timed_out && !targets.is_empty() {
                // A target offset that is no record (a compacted or control record at the end) is reached when
                // the consumer's position passes it.
                if let Ok(positions) = consumer.position() {
                    for element in positions.elements() {
                        if let Offset::Offset(next) = element.offset() {
                            let key = (element.topic().to_owned(), element.partition());
                            if targets.get(&key).is_some_and(|last| next > *last) {
                                targets.remove(&key);
                            }
                        }
                    }
                }
            }
            if targets.is_empty() {
                index.caught_up.store(true, Ordering::Release);
                tracing::info!(
                    entries = index.len(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "dead-letter index built"
                );
                if !follow {
                    return Ok(());
                }
            }
        }
        // Partitions added to either topic later are picked up from their start.
        if follow && last_metadata_check.elapsed() > Duration::from_secs(30) {
            last_metadata_check = Instant::now();
            let mut added = TopicPartitionList::new();
            for topic in topics {
                let partitions = partitions_of(&consumer, topic, Duration::from_secs(5)).unwrap_or_default();
                let known = assigned.get(topic).copied().unwrap_or(0);
                for &partition in partitions.iter().skip(known) {
                    added.add_partition_offset(topic, partition, Offset::Beginning)?;
                }
                if partitions.len() > known {
                    assigned.insert(topic, partitions.len());
                }
            }
            if added.count() > 0 {
                consumer.incremental_assign(&added)?;
            }
        }
    }
}

/// A consumer that reads by assignment: no group membership, no commits, only committed records. The user's
/// `kafka.properties` (TLS, SASL) apply, minus the refused ones.
pub fn reader(kafka: &KafkaConfig, name: &'static str) -> Result<BaseConsumer<QuietContext>, KafkaError> {
    reader_config(kafka).create_with_context(QuietContext::new(name))
}

/// The settings of [`reader`], to adjust before creating one.
pub fn reader_config(kafka: &KafkaConfig) -> ClientConfig {
    assignment_reader_config(
        kafka,
        &[
            ("fetch.wait.max.ms", "10"),
            // Prefetch bounded: the index, not librdkafka's queue, is what should hold memory.
            ("queued.max.messages.kbytes", "16384"),
        ],
    )
}
