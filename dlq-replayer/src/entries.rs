//! Reading the dead-letter topic: every entry from the start of each partition up to its high watermark at the
//! moment of the call. The replayer keeps nothing that Kafka does not hold.

use std::{collections::HashMap, time::Duration};

use hookline_common::{config::KafkaConfig, kafka::QuietContext, wire::DeadLetterEntry};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
};

const TIMEOUT: Duration = Duration::from_secs(10);

/// All entries of the DLQ topic, in partition then offset order. Blocking: call off the runtime.
pub fn read_all(kafka: &KafkaConfig) -> Result<Vec<DeadLetterEntry>, KafkaError> {
    let consumer: BaseConsumer<QuietContext> = ClientConfig::new()
        .set("bootstrap.servers", &kafka.brokers)
        // Assigned, never subscribed: the group id is required by librdkafka but nothing is committed to it.
        .set("group.id", format!("hookline-dlq-reader-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .create_with_context(QuietContext::new("dlq-reader"))?;
    let topic = kafka.dlq_topic.as_str();
    let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT)?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        return Err(KafkaError::MetadataFetch(rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition));
    }

    // The last offset to read in each partition (high watermark minus one), for partitions that hold anything.
    let mut remaining: HashMap<i32, i64> = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        let (low, high) = consumer.fetch_watermarks(topic, partition, TIMEOUT)?;
        if high > low {
            remaining.insert(partition, high - 1);
            assignment.add_partition_offset(topic, partition, Offset::Offset(low))?;
        }
    }
    let mut entries = Vec::new();
    if remaining.is_empty() {
        return Ok(entries);
    }
    consumer.assign(&assignment)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !remaining.is_empty() && std::time::Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(500)) else { continue };
        let message = message?;
        let partition = message.partition();
        if let Some(&last) = remaining.get(&partition) {
            if message.offset() <= last {
                entries.push(DeadLetterEntry::from_message(&message));
            }
            if message.offset() >= last {
                remaining.remove(&partition);
            }
        }
    }
    if !remaining.is_empty() {
        return Err(KafkaError::NoMessageReceived);
    }
    entries.sort_by_key(|entry| (entry.partition, entry.offset));
    Ok(entries)
}
