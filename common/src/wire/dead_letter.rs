//! A dead-letter record as the replayer and the tools read it back.

use rdkafka::message::Message;

use super::{header, header_str};

/// One dead-letter record, read back: its stable id, the original event's metadata (when it had any) and the
/// failure metadata the consumer attached.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeadLetterEntry {
    /// `<dlq topic>:<partition>:<offset>`: stable, derived from where the entry lives.
    pub id: String,
    pub partition: i32,
    pub offset: i64,
    pub source: Option<String>,
    /// The consumer service that dead-lettered it ([`header::dlq::SERVICE`]; for an entry written before
    /// services had names, its consumer group, which was the service's default name).
    pub service: Option<String>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub error_class: Option<String>,
    pub error: Option<String>,
    pub attempts: Option<u32>,
    pub original_topic: Option<String>,
    pub original_partition: Option<i32>,
    pub original_offset: Option<i64>,
    pub first_failure_at_ms: Option<i64>,
    pub last_failure_at_ms: Option<i64>,
    pub body_bytes: usize,
}

impl DeadLetterEntry {
    pub fn entry_id(topic: &str, partition: i32, offset: i64) -> String {
        format!("{topic}:{partition}:{offset}")
    }

    /// Reads what a DLQ record carries; a header that is absent or unreadable is `None`, never an error, so
    /// that a damaged entry can still be listed and inspected.
    pub fn from_message<M: Message>(message: &M) -> Self {
        let headers = message.headers();
        let text = |name: &'static str| header_str(headers, name).and_then(Result::ok);
        let number = |name: &'static str| text(name).and_then(|value| value.parse::<i64>().ok());
        Self {
            id: Self::entry_id(message.topic(), message.partition(), message.offset()),
            partition: message.partition(),
            offset: message.offset(),
            source: text(header::SOURCE),
            service: text(header::dlq::SERVICE).or_else(|| text(header::dlq::CONSUMER_GROUP)),
            event_id: text(header::EVENT_ID).or_else(|| text(header::dlq::EVENT_ID)),
            event_type: text(header::EVENT_TYPE),
            error_class: text(header::dlq::ERROR_CLASS),
            error: text(header::dlq::ERROR),
            attempts: number(header::dlq::ATTEMPTS).and_then(|n| u32::try_from(n).ok()),
            original_topic: text(header::dlq::ORIGINAL_TOPIC),
            original_partition: number(header::dlq::ORIGINAL_PARTITION).and_then(|n| i32::try_from(n).ok()),
            original_offset: number(header::dlq::ORIGINAL_OFFSET),
            first_failure_at_ms: number(header::dlq::FIRST_FAILURE_AT_MS),
            last_failure_at_ms: number(header::dlq::LAST_FAILURE_AT_MS),
            // A dead letter by reference: the length of the body it points to.
            body_bytes: number(header::dlq::BODY_BY_REFERENCE)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or_else(|| message.payload().map_or(0, <[u8]>::len)),
        }
    }
}
