//! The one way hookline writes to Kafka. Every writer (the gateway's inbound produce, the consumer's dead letters,
//! retries and fates, the replayer's re-drives and fates, the reconciler's recovered events) sends through an
//! [`AckedProducer`]: idempotent with `acks=all` ([`producer_config`]), and every send resolves, acknowledged or
//! not, within the produce timeout, so no caller can hang on a delivery report that never comes. It also signs
//! every record it sends with the service's record key ([`crate::record_auth`]): no writer can forget to.

use std::time::Duration;

use hookline_record::Outgoing;
use rdkafka::{
    error::{KafkaError, RDKafkaErrorCode},
    message::ToBytes,
    producer::{FutureProducer, FutureRecord, Producer},
    util::Timeout,
};

use crate::{
    config::KafkaConfig,
    kafka::{LINGER_MS, QUEUE_BUFFERING_MAX_MS, QuietContext, producer_config},
    record_auth::{RecordKeys, SignError},
    telemetry::traces::{self, Parent, TraceSpan, attribute},
    wire::{kafka, now_ms},
};
use opentelemetry::{KeyValue, trace::SpanKind};

/// Beyond `produce_timeout_ms` (librdkafka's own `message.timeout.ms`, which ends the delivery attempt), how long
/// a send waits for the report before giving up on it: only a report that never arrives takes this margin.
const REPORT_MARGIN: Duration = Duration::from_secs(1);

/// Where an acknowledged record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub partition: i32,
    pub offset: i64,
}

/// Why a record was not acknowledged. The record may still have been written after a [`ProduceError::Timeout`]:
/// every writer's records carry an event id or an entry id, so a retry's duplicate is absorbed downstream.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    #[error("the local producer queue is full")]
    QueueFull,
    #[error("no delivery report within the deadline")]
    Timeout,
    #[error("the broker refused or could not be reached")]
    Kafka(#[source] KafkaError),
    /// Nothing was sent: no record key is valid now (all before their `not_before` or past their `not_after`).
    #[error("the record cannot be signed")]
    Sign(#[source] SignError),
}

impl ProduceError {
    /// A short, bounded name of the failure (a span's `error.type`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::Timeout => "timeout",
            Self::Kafka(_) => "kafka",
            Self::Sign(_) => "sign",
        }
    }

    /// Whether the record is too large for its topic (the broker's `MESSAGE_TOO_LARGE` or `RECORD_LIST_TOO_LARGE`,
    /// or librdkafka's local check against `message.max.bytes`, which reports the same code): sending the same
    /// record again fails the same way. A batch is refused whole, so a small record that shared a batch with a
    /// large one may see it once: a caller acting on it should see it twice in a row first.
    pub fn is_too_large(&self) -> bool {
        matches!(
            self,
            Self::Kafka(KafkaError::MessageProduction(
                RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::MessageBatchTooLarge
            ))
        )
    }
}

/// How long a send may wait for room in the producer's local queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueWait {
    /// Not at all: a full queue is [`ProduceError::QueueFull`] at once (the gateway answers 503 rather than queue).
    Never,
    /// Up to the send's deadline (writers whose caller waits anyway).
    UpToDeadline,
}

/// An idempotent, `acks=all` producer whose sends are bounded by the produce timeout. Cheap to clone.
#[derive(Clone)]
pub struct AckedProducer {
    producer: FutureProducer<QuietContext>,
    deadline: Duration,
    keys: RecordKeys,
}

impl std::fmt::Debug for AckedProducer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("AckedProducer").field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl AckedProducer {
    /// A producer for `kafka`, logging as `name`, signing with the keys of `kafka.record_auth` (a config without a
    /// loadable key is refused, like a bad property). Creating one does not connect.
    pub fn new(kafka: &KafkaConfig, name: &'static str) -> Result<Self, KafkaError> {
        Self::from_client_config(kafka, name, producer_config(kafka))
    }

    /// [`Self::new`] with `linger.ms` set to `linger_ms`, over any `linger.ms` of `kafka.properties`: for a writer
    /// that chooses its linger itself (the gateway's two producers, see its `batching` module). Only how long a
    /// record may wait in the local queue changes; the durability settings are [`producer_config`]'s.
    pub fn with_linger(kafka: &KafkaConfig, name: &'static str, linger_ms: f64) -> Result<Self, KafkaError> {
        let mut config = producer_config(kafka);
        config.remove(QUEUE_BUFFERING_MAX_MS).set(LINGER_MS, linger_ms.to_string());
        Self::from_client_config(kafka, name, config)
    }

    fn from_client_config(
        kafka: &KafkaConfig,
        name: &'static str,
        config: rdkafka::ClientConfig,
    ) -> Result<Self, KafkaError> {
        let keys =
            RecordKeys::load(&kafka.record_auth).map_err(|problems| KafkaError::ClientCreation(problems.join("; ")))?;
        Ok(Self {
            producer: config.create_with_context(QuietContext::new(name))?,
            deadline: Duration::from_millis(kafka.produce_timeout_ms) + REPORT_MARGIN,
            keys,
        })
    }

    /// The keys this producer signs with.
    pub fn record_keys(&self) -> &RecordKeys {
        &self.keys
    }

    /// Produces `record` and resolves once the broker acknowledged it (all in-sync replicas), or refused it, or the
    /// produce timeout passed.
    pub async fn send_record(&self, record: Outgoing, queue: QueueWait) -> Result<Delivery, ProduceError> {
        self.send_record_within(record, queue, self.deadline).await
    }

    /// [`Self::send_record`], giving up after `limit` if that comes before the produce timeout.
    ///
    /// With traces on, the send is a `send <topic>` producer span, a child of the task's current span
    /// ([`TraceSpan::scope`]), and the record carries that span's context ([`Outgoing::set_traceparent`],
    /// replacing one copied from an earlier record), put in before the MAC is computed. The record's headers are
    /// then signed and turned into librdkafka's once.
    pub async fn send_record_within(
        &self,
        record: Outgoing,
        queue: QueueWait,
        limit: Duration,
    ) -> Result<Delivery, ProduceError> {
        if !traces::enabled() {
            return self.send_signed(record, queue, limit).await;
        }
        self.send_traced(record, queue, limit).await
    }

    /// [`Self::send_record`] for a record given as librdkafka parts (tools and tests that build one by hand).
    pub async fn send<K, P>(&self, record: FutureRecord<'_, K, P>, queue: QueueWait) -> Result<Delivery, ProduceError>
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        self.send_within(record, queue, self.deadline).await
    }

    /// [`Self::send_record_within`] for a record given as librdkafka parts.
    pub async fn send_within<K, P>(
        &self,
        record: FutureRecord<'_, K, P>,
        queue: QueueWait,
        limit: Duration,
    ) -> Result<Delivery, ProduceError>
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        let outgoing = kafka::outgoing(
            record.topic,
            record.key.map(ToBytes::to_bytes),
            record.payload.map(ToBytes::to_bytes),
            record.headers.as_ref(),
        );
        self.send_record_within(outgoing, queue, limit).await
    }

    async fn send_traced(
        &self,
        mut record: Outgoing,
        queue: QueueWait,
        limit: Duration,
    ) -> Result<Delivery, ProduceError> {
        let topic = record.topic.clone();
        let span = TraceSpan::start(
            SpanKind::Producer,
            Parent::Current,
            || format!("send {topic}"),
            || {
                let mut attributes = vec![
                    KeyValue::new(attribute::MESSAGING_SYSTEM, "kafka"),
                    KeyValue::new(attribute::MESSAGING_OPERATION_NAME, "send"),
                    KeyValue::new(attribute::MESSAGING_OPERATION_TYPE, "send"),
                    KeyValue::new(attribute::MESSAGING_DESTINATION_NAME, topic.clone()),
                ];
                if let Some(event_id) = record.event_id() {
                    attributes.push(KeyValue::new(attribute::MESSAGING_MESSAGE_ID, event_id));
                }
                attributes
            },
        );
        if let Some(traceparent) = span.traceparent() {
            record.set_traceparent(&traceparent);
        }
        let sent = self.send_signed(record, queue, limit).await;
        match &sent {
            Ok(delivery) => {
                span.set(attribute::MESSAGING_DESTINATION_PARTITION_ID, || delivery.partition.to_string());
                span.set(attribute::MESSAGING_KAFKA_OFFSET, || delivery.offset);
            }
            Err(error) => span.fail(error.kind(), || error.to_string()),
        }
        sent
    }

    /// Signs `record`, turns its headers into librdkafka's (once) and sends it.
    async fn send_signed(
        &self,
        mut record: Outgoing,
        queue: QueueWait,
        limit: Duration,
    ) -> Result<Delivery, ProduceError> {
        self.keys.sign_record(&mut record, now_ms()).map_err(ProduceError::Sign)?;
        let mut kafka_record =
            FutureRecord::<[u8], [u8]>::to(&record.topic).headers(kafka::owned_headers(&record.headers));
        if let Some(key) = &record.key {
            kafka_record = kafka_record.key(key.as_ref());
        }
        if let Some(body) = &record.body {
            kafka_record = kafka_record.payload(body.as_ref());
        }
        let deadline = limit.min(self.deadline);
        let queue_timeout = match queue {
            QueueWait::Never => Duration::ZERO,
            QueueWait::UpToDeadline => deadline,
        };
        let delivery = self.producer.send(kafka_record, Timeout::After(queue_timeout));
        match tokio::time::timeout(deadline, delivery).await {
            Err(_elapsed) => Err(ProduceError::Timeout),
            Ok(Ok(delivered)) => Ok(Delivery { partition: delivered.partition, offset: delivered.offset }),
            Ok(Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _))) => Err(ProduceError::QueueFull),
            Ok(Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut), _))) => {
                Err(ProduceError::Timeout)
            }
            Ok(Err((error, _))) => Err(ProduceError::Kafka(error)),
        }
    }

    /// Records in the local queue or awaiting an acknowledgement.
    pub fn queue_depth(&self) -> i32 {
        self.producer.in_flight_count()
    }

    /// Whether the broker answers a metadata request and each of `topics` exists with partitions. Blocking: call
    /// off the runtime.
    pub fn topics_ready(&self, topics: &[String], timeout: Duration) -> bool {
        let Ok(metadata) = self.producer.client().fetch_metadata(None, timeout) else { return false };
        topics.iter().all(|name| {
            metadata
                .topics()
                .iter()
                .any(|topic| topic.name() == name && topic.error().is_none() && !topic.partitions().is_empty())
        })
    }

    /// A fatal error (for example a fenced idempotent producer): the producer cannot be used again.
    pub fn fatal_error(&self) -> Option<String> {
        self.producer.client().fatal_error().map(|(code, reason)| format!("{code}: {reason}"))
    }

    /// Waits for queued records to be delivered. Blocking: call off the runtime.
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.producer.flush(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_send_to_no_broker_resolves_within_the_produce_timeout() {
        let kafka = KafkaConfig {
            brokers: "127.0.0.1:1".to_owned(),
            produce_timeout_ms: 300,
            record_auth: crate::record_auth::RecordAuthConfig {
                keys: vec![crate::config::SecretRef::from_env("k1", "CARGO_PKG_DESCRIPTION")],
                accept_unsigned_until: None,
                inbound_only_keys: Vec::new(),
            },
            ..KafkaConfig::default()
        };
        let producer = AckedProducer::new(&kafka, "test-producer").unwrap();
        let record = FutureRecord::<str, str>::to("nowhere").payload("x");
        // A liveness bound (the send must end), far above produce_timeout_ms plus the margin: not a benchmark.
        let sent = tokio::time::timeout(Duration::from_secs(30), producer.send(record, QueueWait::UpToDeadline))
            .await
            .expect("the send resolved");
        assert!(matches!(sent, Err(ProduceError::Timeout)), "{sent:?}");
    }
}
