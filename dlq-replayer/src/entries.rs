//! Reading the dead-letter topic into entries. The replayer keeps nothing that Kafka does not hold: every
//! view is built from the topic itself.

use std::time::Duration;

use hookline_common::{config::KafkaConfig, kafka::read_topic, wire::DeadLetterEntry};
use rdkafka::error::KafkaError;

const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// All entries of the DLQ topic, in partition then offset order. Blocking: call off the runtime.
pub fn read_all(kafka: &KafkaConfig) -> Result<Vec<DeadLetterEntry>, KafkaError> {
    let records = read_topic(&kafka.brokers, &kafka.dlq_topic, READ_TIMEOUT)?;
    Ok(records.iter().map(DeadLetterEntry::from_message).collect())
}
