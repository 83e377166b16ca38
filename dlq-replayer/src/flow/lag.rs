//! A consumer service's lag as Kafka holds it: per partition of the inbound topic and of the service's own retry
//! topic, the high watermark minus the group's committed offset (the low watermark when nothing is committed, as
//! the consumer's own `hookline_consumer_lag_records` counts it). Read from the brokers, so it is known while every
//! replica of the service is down, which is when it matters most. The group is only asked for its committed
//! offsets (OffsetFetch), never joined and never committed to.

use std::time::Duration;

use hookline_common::{
    config::KafkaConfig,
    kafka::{QuietContext, partitions_of},
};
use rdkafka::{
    Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::{KafkaError, RDKafkaErrorCode},
};

use crate::index::reader_config;

/// How long one metadata, offsets or watermarks request may take: a sample is abandoned rather than waited for,
/// well within the sampling interval.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The records of the inbound topic and of `<retry_topic>.<service>` that `group` has not committed. A retry topic
/// that does not exist (yet) counts nothing. Blocking: call off the runtime.
pub fn group_lag(kafka: &KafkaConfig, service: &str, group: &str) -> Result<i64, KafkaError> {
    let client: BaseConsumer<QuietContext> =
        reader_config(kafka).set("group.id", group).create_with_context(QuietContext::new("flow-lag"))?;
    let retry_topic = format!("{}.{service}", kafka.retry_topic);
    let mut wanted = TopicPartitionList::new();
    for topic in [kafka.inbound_topic.as_str(), retry_topic.as_str()] {
        match partitions_of(&client, topic, REQUEST_TIMEOUT) {
            Ok(partitions) => {
                for partition in partitions {
                    wanted.add_partition(topic, partition);
                }
            }
            Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition)) if topic == retry_topic => {}
            Err(error) => return Err(error),
        }
    }
    let committed = client.committed_offsets(wanted.clone(), REQUEST_TIMEOUT)?;
    let mut lag = 0_i64;
    for element in wanted.elements() {
        let (topic, partition) = (element.topic(), element.partition());
        let (low, high) = client.fetch_watermarks(topic, partition, REQUEST_TIMEOUT)?;
        let from = match committed.find_partition(topic, partition).map(|found| found.offset()) {
            Some(Offset::Offset(offset)) => offset.max(low),
            _ => low,
        };
        lag += (high - from).max(0);
    }
    Ok(lag)
}
