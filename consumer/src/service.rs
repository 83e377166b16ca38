//! The consumer service a consumer belongs to: its name, the topics it reads, and what it must do to take over
//! from the layout before services had names.
//!
//! Several services read the same inbound topic, each in its own consumer group with its own handler. What one
//! service does never reaches another:
//! - its dedupe keys are scoped to its name ([`crate::dedupe`]);
//! - its retries and deferrals go to its own retry topic, `<kafka.retry_topic>.<service>`, created here if
//!   missing (with the inbound topic's partitions and replication), and are addressed to it (the service a
//!   [`hookline_record::retry::RetryHeaders`] record names);
//! - a record addressed to another service (its retry, a re-driven dead letter, a re-processing request) is
//!   skipped as it arrives: its offset is stored, it is counted as `other_service`, and nothing else happens.
//!
//! **Upgrading.** Before services had names, every consumer shared one retry topic (`kafka.retry_topic` itself)
//! and unscoped dedupe keys. A service whose consumer group had committed offsets when it first started on this
//! build ran on that layout: for as long as its unscoped keys can live it reads them before claiming, and it
//! drains the shared retry topic, taking the records written before the upgrade (no service header) and its
//! own. A service that started on this build (no committed offsets) does neither: those keys and records are
//! other services' work.

use std::time::Duration;

use hookline_common::{
    config::KafkaConfig,
    kafka::admin_config,
    record_auth::{RecordKind, Verdict},
    wire::kafka,
};
use hookline_record::Claims;
use rdkafka::{
    Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication},
    client::DefaultClientContext,
    consumer::{Consumer, ConsumerContext},
    error::{KafkaError, RDKafkaErrorCode},
    message::Headers,
};

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// The topics one service's consumer reads.
#[derive(Debug, Clone)]
pub struct ServiceTopics {
    pub inbound: String,
    /// The service's own retry topic.
    pub retry: String,
    /// The retry topic every consumer shared before services had names, drained by an upgraded service while it
    /// exists.
    pub shared_retry: Option<String>,
    /// Source topics (`service.source_topics`): each carries one source's events, so holding a route of theirs
    /// pauses their partitions instead of copying records.
    pub sources: Vec<String>,
}

impl ServiceTopics {
    /// Every topic to subscribe to.
    pub fn subscription(&self) -> Vec<&str> {
        let mut topics = vec![self.inbound.as_str(), self.retry.as_str()];
        topics.extend(self.shared_retry.as_deref());
        topics.extend(self.sources.iter().map(String::as_str));
        topics
    }

    /// What the records of `topic` are, for their MAC check: a retry topic's are retries (an inbound-only key
    /// never signs one), the others inbound.
    pub fn record_kind(&self, topic: &str) -> RecordKind {
        if self.is_retry(topic) { RecordKind::Retry } else { RecordKind::Inbound }
    }

    /// Whether records of `topic` are retry records (they wait for their due time).
    pub fn is_retry(&self, topic: &str) -> bool {
        topic == self.retry || self.shared_retry.as_deref() == Some(topic)
    }
}

/// Whether `message` is addressed to a service other than `service` ([`Claims::service`]): then this service
/// skips it. A record addressed to none (what the gateway writes, and retry records from before services) is
/// every service's.
pub fn addressed_elsewhere<H: Headers>(headers: Option<&H>, service: &str) -> bool {
    match Claims::of(kafka::headers_of(headers)).service() {
        Some(addressee) => addressee != service,
        // None, or damaged (not UTF-8): not provably ours, and not provably another's. Taken, so that it ends
        // processed or dead-lettered rather than nowhere.
        None => false,
    }
}

/// The `source` label of a record this service passes (addressed to another service): the source it names when
/// the record's MAC verifies, else `unknown`. A writer of the topic without the record key must not add a series
/// per source string it makes up to every consumer's `/metrics`.
pub fn passed_source_label<H: Headers>(headers: Option<&H>, verdict: &Verdict) -> String {
    match verdict {
        Verdict::Authentic { .. } | Verdict::UnsignedAccepted => {
            Claims::of(kafka::headers_of(headers)).source().unwrap_or_else(|| "unknown".to_owned())
        }
        Verdict::Refused(_) => "unknown".to_owned(),
    }
}

/// Whether the consumer's group committed an offset on any partition of `topic`: a service that ran before. An
/// error while the topic's partitions cannot be listed. Blocking: call off the runtime.
pub fn group_committed_before<C: ConsumerContext>(
    consumer: &impl Consumer<C>,
    topic: &str,
) -> Result<bool, KafkaError> {
    let metadata = consumer.fetch_metadata(Some(topic), METADATA_TIMEOUT)?;
    let mut partitions = TopicPartitionList::new();
    for found in metadata.topics().iter().filter(|found| found.name() == topic && found.error().is_none()) {
        for partition in found.partitions() {
            partitions.add_partition(topic, partition.id());
        }
    }
    if partitions.count() == 0 {
        // No answer about the group (the topic is missing, or its metadata is not ready): not "never ran".
        return Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition));
    }
    let committed = consumer.committed_offsets(partitions, METADATA_TIMEOUT)?;
    Ok(committed.elements().iter().any(|element| matches!(element.offset(), Offset::Offset(_))))
}

/// Whether `topic` exists. Blocking.
pub fn topic_exists<C: ConsumerContext>(consumer: &impl Consumer<C>, topic: &str) -> Result<bool, KafkaError> {
    let metadata = consumer.fetch_metadata(Some(topic), METADATA_TIMEOUT)?;
    Ok(metadata.topics().iter().any(|found| found.name() == topic && found.error().is_none()))
}

/// What a retry or DLQ topic must take beyond the largest record of the inbound topic: a copy adds headers (the
/// retry or failure headers, about fifteen, the error text up to 2 KiB). Its `max.message.bytes` is the inbound
/// topic's plus this; the deployment files do the same, and `scripts/check-deploy` holds them to it.
pub const COPY_HEADROOM_BYTES: i64 = 64 * 1024;

/// The topic setting that bounds a record batch (for one large record: the record).
const MAX_MESSAGE_BYTES: &str = "max.message.bytes";

/// Creates the service's retry topic when it does not exist, with the inbound topic's partition count and
/// replication factor, so that adding a service needs no topic job, and able to hold a copy of any record the
/// inbound topic takes (`max.message.bytes`: the inbound topic's plus [`COPY_HEADROOM_BYTES`]). A deployment that
/// creates topics itself (or whose credentials may not) has it already; if creating fails, the consumer's
/// `/readyz` says `retry_topic`.
pub async fn ensure_retry_topic<C: ConsumerContext>(
    consumer: &impl Consumer<C>,
    kafka: &KafkaConfig,
    topics: &ServiceTopics,
) -> Result<(), KafkaError> {
    if topic_exists(consumer, &topics.retry)? {
        return Ok(());
    }
    let metadata = consumer.fetch_metadata(Some(&topics.inbound), METADATA_TIMEOUT)?;
    let inbound = metadata
        .topics()
        .iter()
        .find(|found| found.name() == topics.inbound && found.error().is_none())
        .ok_or(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition))?;
    let partitions = i32::try_from(inbound.partitions().len()).unwrap_or(i32::MAX).max(1);
    let replication = inbound.partitions().first().map_or(1, |partition| partition.replicas().len()).max(1);
    let replication = i32::try_from(replication).unwrap_or(1);
    let admin: AdminClient<DefaultClientContext> = admin_config(kafka).create()?;
    let options = AdminOptions::new().operation_timeout(Some(METADATA_TIMEOUT));
    let max_message_bytes = max_message_bytes(&admin, &topics.inbound, &options)
        .await?
        .map(|inbound| inbound.saturating_add(COPY_HEADROOM_BYTES).to_string());
    let mut topic = NewTopic::new(&topics.retry, partitions, TopicReplication::Fixed(replication));
    if let Some(max_message_bytes) = &max_message_bytes {
        topic = topic.set(MAX_MESSAGE_BYTES, max_message_bytes);
    }
    for result in admin.create_topics([&topic], &options).await? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(KafkaError::AdminOp(code)),
        }
    }
    tracing::info!(
        topic = %topics.retry,
        partitions,
        replication,
        max_message_bytes = max_message_bytes.as_deref().unwrap_or("broker default"),
        "created the service's retry topic"
    );
    Ok(())
}

/// `topic`'s effective `max.message.bytes` (its own, or the broker's default), as the broker describes it.
async fn max_message_bytes(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    options: &AdminOptions,
) -> Result<Option<i64>, KafkaError> {
    let described = admin.describe_configs([&ResourceSpecifier::Topic(topic)], options).await?;
    let resource = described.into_iter().next().transpose().map_err(KafkaError::AdminOp)?;
    Ok(resource
        .as_ref()
        .and_then(|resource| resource.get(MAX_MESSAGE_BYTES))
        .and_then(|entry| entry.value.as_deref())
        .and_then(|value| value.parse().ok()))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use hookline_common::wire::EventMeta;
    use hookline_record::inbound::InboundRecord;
    use rdkafka::{Message, Timestamp, message::OwnedMessage};

    use super::*;

    /// An inbound record of `github`, addressed to `service` (as the replayer re-drives one) or to none.
    fn record(service: Option<&str>) -> OwnedMessage {
        let meta = EventMeta {
            source: "github".to_owned(),
            event_id: "d-1".to_owned(),
            event_type: None,
            received_at_ms: 1,
            content_type: None,
            secret_id: "primary".to_owned(),
            ordering_key: None,
        };
        let record = InboundRecord { service: service.map(str::to_owned), ..InboundRecord::new(meta) }
            .encode("t", Bytes::from_static(b"{}"));
        let headers = kafka::owned_headers(&record.headers);
        OwnedMessage::new(None, None, "t".into(), Timestamp::NotAvailable, 0, 0, Some(headers))
    }

    #[test]
    fn only_a_record_addressed_to_another_service_is_skipped() {
        let addressed_elsewhere = |message: OwnedMessage, service| addressed_elsewhere(message.headers(), service);
        assert!(!addressed_elsewhere(record(None), "billing"), "a gateway record is every service's");
        assert!(!addressed_elsewhere(record(Some("billing")), "billing"));
        assert!(addressed_elsewhere(record(Some("analytics")), "billing"));
    }

    #[test]
    fn a_passed_record_is_labelled_with_its_source_only_when_its_mac_verifies() {
        let message = record(Some("analytics"));
        let authentic = Verdict::Authentic { key_id: "k1".to_owned() };
        assert_eq!(passed_source_label(message.headers(), &authentic), "github");
        assert_eq!(passed_source_label(message.headers(), &Verdict::UnsignedAccepted), "github");
        let refused = Verdict::Refused(hookline_common::record_auth::Refusal::BadMac);
        assert_eq!(passed_source_label(message.headers(), &refused), "unknown");
        let bare = OwnedMessage::new(None, None, "t".into(), Timestamp::NotAvailable, 0, 0, None);
        assert_eq!(passed_source_label(bare.headers(), &authentic), "unknown");
    }

    #[test]
    fn an_upgraded_service_also_reads_the_shared_retry_topic() {
        let topics = ServiceTopics {
            inbound: "webhooks.inbound".into(),
            retry: "webhooks.retry.billing".into(),
            shared_retry: Some("webhooks.retry".into()),
            sources: Vec::new(),
        };
        assert_eq!(topics.subscription(), ["webhooks.inbound", "webhooks.retry.billing", "webhooks.retry"]);
        assert!(topics.is_retry("webhooks.retry") && topics.is_retry("webhooks.retry.billing"));
        assert!(!topics.is_retry("webhooks.inbound"));
    }
}
