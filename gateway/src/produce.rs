//! Producing a verified webhook to the inbound topic, and waiting for the broker's acknowledgement.
//!
//! Only a [`VerifiedWebhook`] can be produced, and only a [`Verified`] proof can make one. The proof carries the
//! exact bytes it vouches for (the body `signature::verify` checked, shared, not copied) and the webhook takes its
//! body from the proof: there is no parameter through which other bytes could enter. So the type system, not a
//! convention at the call site, keeps unverified bytes away from Kafka.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
pub use hookline_common::producer::{Delivery, ProduceError};
use hookline_common::{
    config::KafkaConfig,
    kafka::properties_set_linger,
    producer::{AckedProducer, QueueWait},
    wire::EventMeta,
};
use hookline_record::{Outgoing, inbound::InboundRecord};
use hookline_signature::Verified;
use rdkafka::error::KafkaError;

use crate::batching::{Lane, LaneChooser, ProducerConfig};

/// A request body whose signature verified, with the metadata it will carry into Kafka.
///
/// Compile-level guarantee: `body` is private and set only in [`VerifiedWebhook::new`], from the proof's own
/// bytes; a caller holding a proof for one body cannot produce another.
#[derive(Debug)]
pub struct VerifiedWebhook {
    /// Its metadata, the provider's unsigned event id and the allowlisted request headers.
    record: InboundRecord,
    body: Bytes,
    topic: String,
}

impl VerifiedWebhook {
    /// The webhook for the bytes `proof` verified; the secret id comes from the proof too.
    pub fn new(proof: Verified, mut meta: EventMeta, topic: impl Into<String>) -> Self {
        meta.secret_id = proof.secret_id().to_owned();
        let body = proof.body().clone();
        Self { record: InboundRecord::new(meta), body, topic: topic.into() }
    }

    /// Carries the provider's own event id when it is not the dedupe id (it was not signed).
    pub fn with_provider_event_id(mut self, provider_event_id: Option<String>) -> Self {
        self.record.provider_event_id = provider_event_id;
        self
    }

    /// Carries these request headers into the record (lowercase name, value; one entry per value).
    pub fn with_forwarded_headers(mut self, forwarded: Vec<(String, Bytes)>) -> Self {
        self.record.forwarded_headers = forwarded;
        self
    }

    pub fn meta(&self) -> &EventMeta {
        &self.record.meta
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The bytes that will be produced: those the proof verified.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The inbound record, as [`EventProducer::produce`] sends it (before the producer signs it): the golden
    /// record tests read it.
    pub fn record(&self) -> Outgoing {
        self.record.encode(&self.topic, self.body.clone())
    }
}

/// Produces verified webhooks to their topics, each through the producer its [`Lane`] names (see
/// [`crate::batching`]). Cheap to clone: clones share the producers and the in-flight count.
#[derive(Clone)]
pub struct EventProducer {
    lanes: Arc<Lanes>,
    topic: String,
}

/// The lingering producer, and the one that sends at once when batching follows the load.
struct Lanes {
    batching: AckedProducer,
    /// `None`: one producer for every record (`batch_from_in_flight = 0`, or a linger fixed by `kafka.properties`).
    immediate: Option<AckedProducer>,
    chooser: LaneChooser,
}

impl Lanes {
    fn all(&self) -> impl Iterator<Item = &AckedProducer> {
        std::iter::once(&self.batching).chain(self.immediate.as_ref())
    }
}

impl std::fmt::Debug for EventProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventProducer")
            .field("topic", &self.topic)
            .field("follows_load", &self.lanes.immediate.is_some())
            .finish_non_exhaustive()
    }
}

impl EventProducer {
    /// The producers `batching` asks for. A `linger.ms` the operator fixed in `kafka.properties` wins: one
    /// producer with it, as before batching followed the load.
    pub fn new(kafka: &KafkaConfig, batching: &ProducerConfig) -> Result<Self, KafkaError> {
        let fixed_by_operator = properties_set_linger(kafka);
        let lingering = if fixed_by_operator {
            AckedProducer::new(kafka, "gateway-producer")?
        } else {
            AckedProducer::with_linger(kafka, "gateway-producer", batching.batch_linger_ms)?
        };
        let immediate = if batching.batch_from_in_flight > 0 && !fixed_by_operator {
            Some(AckedProducer::with_linger(kafka, "gateway-producer-immediate", 0.0)?)
        } else {
            None
        };
        let batch_from_in_flight = if immediate.is_some() { batching.batch_from_in_flight } else { 0 };
        let lanes = Lanes { batching: lingering, immediate, chooser: LaneChooser::new(batch_from_in_flight) };
        Ok(Self { lanes: Arc::new(lanes), topic: kafka.inbound_topic.clone() })
    }

    /// Produces the record and resolves once the broker acknowledged it (all in-sync replicas), or failed, or
    /// `deadline` (capped at the produce timeout) passed.
    ///
    /// After a timeout the record may still be delivered later; the provider's retry then produces a second
    /// copy with the same event id, which the consumer's dedupe absorbs. Duplicates are safe, losses are not.
    pub async fn produce(&self, webhook: &VerifiedWebhook, deadline: Duration) -> Result<Delivery, ProduceError> {
        let record = webhook.record();
        let (lane, _in_flight) = self.lanes.chooser.enter();
        let producer = match (lane, &self.lanes.immediate) {
            (Lane::Immediate, Some(immediate)) => immediate,
            _ => &self.lanes.batching,
        };
        // No wait for queue room: a full local queue is an immediate 503, not a wait.
        producer.send_record_within(record, QueueWait::Never, deadline).await
    }

    /// Records in the producers' local queues or awaiting an acknowledgement.
    pub fn queue_depth(&self) -> i32 {
        self.lanes.all().map(AckedProducer::queue_depth).sum()
    }

    /// Whether the broker answers a metadata request and each of `topics` exists with partitions. Blocking:
    /// call off the runtime.
    pub fn topics_ready(&self, topics: &[String], timeout: Duration) -> bool {
        self.lanes.batching.topics_ready(topics, timeout)
    }

    /// The inbound topic: where sources without a `topic` of their own produce.
    pub fn inbound_topic(&self) -> &str {
        &self.topic
    }

    /// A fatal producer error (for example a fenced idempotent producer) of either producer: it cannot be used
    /// again, and half a gateway is not one to keep running.
    pub fn fatal_error(&self) -> Option<String> {
        self.lanes.all().find_map(AckedProducer::fatal_error)
    }

    /// Waits for queued records to be delivered, by both producers within `timeout` in all. Blocking: call off
    /// the runtime.
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        let started = std::time::Instant::now();
        let mut outcome = Ok(());
        for producer in self.lanes.all() {
            let flushed = producer.flush(timeout.saturating_sub(started.elapsed()));
            if outcome.is_ok() {
                outcome = flushed;
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use hookline_common::wire::EventMeta;
    use hookline_signature::{self as signature, GitHub, Secret, UnverifiedRequest};
    use http::{HeaderMap, HeaderValue};

    use super::VerifiedWebhook;

    fn meta() -> EventMeta {
        EventMeta {
            source: "github".to_owned(),
            event_id: "delivery-1".to_owned(),
            event_type: Some("push".to_owned()),
            received_at_ms: 1_700_000_000_000,
            content_type: None,
            secret_id: String::new(),
            ordering_key: None,
        }
    }

    #[test]
    fn a_webhook_carries_the_very_bytes_its_proof_verified() {
        let body = Bytes::from_static(br#"{"zen":"Keep it logically awesome."}"#);
        let mut headers = HeaderMap::new();
        let value = signature::github::sign(b"secret", &body);
        headers.insert("x-hub-signature-256", HeaderValue::from_str(&value).expect("ASCII"));
        let secrets = [Secret::new("primary", b"secret".to_vec())];
        let request = UnverifiedRequest::new(&headers, &body, 0);
        let proof = signature::verify(&GitHub, &request, &secrets).expect("a genuine signature");
        assert_eq!(proof.body(), &body);

        let webhook = VerifiedWebhook::new(proof, meta(), "inbound");
        assert_eq!(webhook.body(), &body);
        // The same allocation: the proof and the webhook share the received buffer, nothing was copied.
        assert_eq!(webhook.body().as_ptr(), body.as_ptr());
        assert_eq!(webhook.meta().secret_id, "primary");
    }
}
