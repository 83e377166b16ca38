//! Kafka client settings that keep data safe, in one place, and a client context that routes librdkafka's
//! logs through `tracing` without flooding them while a broker is down.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use rdkafka::{
    ClientConfig, ClientContext, Message, Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    config::RDKafkaLogLevel,
    consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance},
    error::{KafkaError, RDKafkaErrorCode},
    message::{BorrowedMessage, OwnedMessage},
    producer::ProducerContext,
    types::RDKafkaRespErr,
};

use crate::{
    config::{KafkaConfig, refused_property},
    kafka_security,
};

/// Producer settings for a producer that loses nothing: idempotence (which implies `acks=all` and
/// bounded in-flight requests, so retries cannot reorder or duplicate), a delivery timeout equal to the
/// deadline the caller waits for, and a bounded local queue so a slow broker turns into fast refusals
/// instead of unbounded memory.
pub fn producer_config(kafka: &KafkaConfig) -> ClientConfig {
    let message_timeout_ms = kafka.produce_timeout_ms.to_string();
    client_config(
        kafka,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("message.timeout.ms", &message_timeout_ms),
            (LINGER_MS, "2"),
            ("compression.type", "lz4"),
            ("queue.buffering.max.messages", "100000"),
            ("queue.buffering.max.kbytes", "262144"),
            ("message.max.bytes", "16777216"),
            ("socket.keepalive.enable", "true"),
        ],
    )
}

/// librdkafka's linger: how long a producer holds a record for company before sending it.
pub const LINGER_MS: &str = "linger.ms";
/// librdkafka's other name for [`LINGER_MS`].
pub const QUEUE_BUFFERING_MAX_MS: &str = "queue.buffering.max.ms";

/// Whether the operator fixed the producers' linger in `kafka.properties` (under either name).
pub fn properties_set_linger(kafka: &KafkaConfig) -> bool {
    kafka.properties.contains_key(LINGER_MS) || kafka.properties.contains_key(QUEUE_BUFFERING_MAX_MS)
}

/// What every client shares: the brokers, [`RECONNECT_BACKOFF_MAX_MS`] and warnings-only logging, the TLS and SASL
/// settings ([`kafka_security::apply`]), then the role's own `settings`, then the operator's `kafka.properties`
/// (those that would break a guarantee or carry a credential skipped). Every Kafka client of hookline starts here.
pub fn client_config(kafka: &KafkaConfig, settings: &[(&str, &str)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &kafka.brokers)
        .set("reconnect.backoff.max.ms", RECONNECT_BACKOFF_MAX_MS)
        .set_log_level(RDKafkaLogLevel::Warning);
    kafka_security::apply(&mut config, kafka);
    for (key, value) in settings {
        config.set(*key, *value);
    }
    apply_properties(&mut config, kafka);
    config
}

/// librdkafka doubles the pause between connection attempts to a broker that refuses up to this (its default,
/// 10 s, adds up to 10 s to every recovery after an outage). One attempt per second per broker costs nothing.
const RECONNECT_BACKOFF_MAX_MS: &str = "1000";

/// The settings of a consumer that reads by assignment: a throwaway group id (librdkafka requires one even for
/// `assign()`; nothing is committed to it), no commits, only committed records, records up to 16 MiB; then
/// `settings`.
pub fn assignment_reader_config(kafka: &KafkaConfig, settings: &[(&str, &str)]) -> ClientConfig {
    let group_id = format!("hookline-reader-{}", uuid::Uuid::new_v4());
    let mut all = vec![
        ("group.id", group_id.as_str()),
        ("enable.auto.commit", "false"),
        ("enable.partition.eof", "false"),
        ("isolation.level", "read_committed"),
        ("fetch.message.max.bytes", "16777216"),
    ];
    all.extend_from_slice(settings);
    client_config(kafka, &all)
}

/// An admin client's settings: the brokers and `kafka.properties` (TLS, SASL) every client of ours shares.
pub fn admin_config(kafka: &KafkaConfig) -> ClientConfig {
    client_config(kafka, &[])
}

/// Consumer settings for at-least-once delivery into the handler: offsets are stored by the application
/// only once an event is fully handled, and auto-committed from that store (also on revoke and close).
pub fn consumer_config(kafka: &KafkaConfig, group_id: &str) -> ClientConfig {
    client_config(
        kafka,
        &[
            ("group.id", group_id),
            ("enable.auto.commit", "true"),
            ("auto.commit.interval.ms", "1000"),
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", "earliest"),
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("session.timeout.ms", "10000"),
            ("max.poll.interval.ms", "300000"),
            // Bounds prefetch memory when processing is slower than producing (rust-rdkafka #650).
            ("queued.max.messages.kbytes", "65536"),
            ("fetch.message.max.bytes", "16777216"),
            // A consumer reading two topics (inbound and retry) where one is idle otherwise waits the broker's
            // default 500 ms on the idle one between fetches of the busy one: measured, it capped one busy
            // partition at about 2,000 records/s.
            ("fetch.wait.max.ms", "50"),
            ("isolation.level", "read_committed"),
        ],
    )
}

fn apply_properties(config: &mut ClientConfig, kafka: &KafkaConfig) {
    // Validation refuses these; skipping them here too keeps the guarantee for configs built without it.
    for (key, value) in kafka.properties.iter().filter(|(key, _)| refused_property(key).is_none()) {
        config.set(key, value);
    }
}

/// A client context that logs librdkafka's messages through `tracing`, at most one line per
/// [`LOG_INTERVAL`] (with a count of what it held back), because a down broker makes librdkafka repeat itself
/// many times a second.
#[derive(Debug)]
pub struct QuietContext {
    name: &'static str,
    window: Mutex<LogWindow>,
}

#[derive(Debug)]
struct LogWindow {
    last_logged: Option<Instant>,
    suppressed: u64,
}

const LOG_INTERVAL: Duration = Duration::from_secs(10);

impl QuietContext {
    pub fn new(name: &'static str) -> Self {
        Self { name, window: Mutex::new(LogWindow { last_logged: None, suppressed: 0 }) }
    }

    /// Whether to log now; returns how many lines were held back since the last one.
    fn admit(&self) -> Option<u64> {
        let mut window = self.window.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        match window.last_logged {
            Some(last) if now.duration_since(last) < LOG_INTERVAL => {
                window.suppressed += 1;
                None
            }
            _ => {
                window.last_logged = Some(now);
                Some(std::mem::take(&mut window.suppressed))
            }
        }
    }
}

impl ClientContext for QuietContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if let Some(suppressed) = self.admit() {
            match level {
                RDKafkaLogLevel::Emerg
                | RDKafkaLogLevel::Alert
                | RDKafkaLogLevel::Critical
                | RDKafkaLogLevel::Error => {
                    tracing::error!(client = self.name, facility, suppressed, "librdkafka: {message}")
                }
                RDKafkaLogLevel::Warning => {
                    tracing::warn!(client = self.name, facility, suppressed, "librdkafka: {message}")
                }
                _ => tracing::debug!(client = self.name, facility, "librdkafka: {message}"),
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(suppressed) = self.admit() {
            tracing::warn!(client = self.name, error = %error, suppressed, "librdkafka: {reason}");
        }
    }
}

impl ConsumerContext for QuietContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, partitions: &mut TopicPartitionList) {
        rebalance_cooperatively(self, consumer, err, partitions);
    }
}

/// What rdkafka's default rebalance does, for a group of ours (always `cooperative-sticky`: [`consumer_config`]
/// sets it and `kafka.properties` may not change it), without the two requests that can hang for ever while the
/// consumer closes.
///
/// The default asks librdkafka for the group's rebalance protocol and then (un)assigns: each is a request to the
/// group's queue, answered by librdkafka's main thread and waited for without a deadline. Once the group has
/// terminated, librdkafka drops such a request unanswered (`rd_kafka_cgrp_op_serve`), so a rebalance event still
/// queued when the close completed hung the consumer's `Drop`, the thread that runs it and the service's shutdown
/// (librdkafka#4041, rust-rdkafka#509; seen here as a test that never ended). Here the protocol is known without
/// asking, and a group already closed is not asked anything: a closed group has nothing to (un)assign.
pub fn rebalance_cooperatively<C: ConsumerContext>(
    context: &C,
    consumer: &BaseConsumer<C>,
    err: RDKafkaRespErr,
    partitions: &mut TopicPartitionList,
) {
    let rebalance = match err {
        RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => Rebalance::Assign(partitions),
        RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => Rebalance::Revoke(partitions),
        _ => {
            let code: RDKafkaErrorCode = err.into();
            tracing::error!(error = %code, "rebalance error");
            Rebalance::Error(KafkaError::Rebalance(code))
        }
    };
    context.pre_rebalance(consumer, &rebalance);
    if !consumer.closed() {
        let outcome = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => consumer.incremental_assign(partitions),
            _ => consumer.incremental_unassign(partitions),
        };
        if let Err(error) = outcome {
            tracing::warn!(error = %error, "rebalance: (un)assigning partitions");
        }
    }
    context.post_rebalance(consumer, &rebalance);
}

impl ProducerContext for QuietContext {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: Self::DeliveryOpaque) {}
}

/// A topic to create: name, partition count, and whether it is compacted.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    pub compacted: bool,
}

/// Creates the topics that do not exist yet (replication factor 1 is for local stacks and tests;
/// production topics are created by the deployment's topic job).
pub async fn ensure_topics(kafka: &KafkaConfig, topics: &[TopicSpec], replication: i32) -> Result<(), KafkaError> {
    let admin: AdminClient<DefaultClientContext> = admin_config(kafka).create()?;
    let new_topics: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|topic| {
            let new_topic = NewTopic::new(&topic.name, topic.partitions, TopicReplication::Fixed(replication));
            if topic.compacted { new_topic.set("cleanup.policy", "compact") } else { new_topic }
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.create_topics(&new_topics, &options).await? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                tracing::error!(topic = name, error = %code, "cannot create topic");
                return Err(KafkaError::AdminOp(code));
            }
        }
    }
    Ok(())
}

/// Every record of `topic`, from the start of each partition up to its high watermark at the moment of the call,
/// in partition then offset order. Reads by assignment: joins no group and commits nothing.
/// Blocking: call off the runtime.
pub fn read_topic(kafka: &KafkaConfig, topic: &str, timeout: Duration) -> Result<Vec<OwnedMessage>, KafkaError> {
    let mut records = Vec::new();
    visit_topic(kafka, topic, timeout, |record| records.push(record.detach()))?;
    records.sort_by_key(|record| (record.partition(), record.offset()));
    Ok(records)
}

/// A topic of state read from its start (pauses, API tokens): `consumer` assigned every partition from its
/// beginning, and where each ended when the reading began. Once the reader has passed every such end it knows
/// everything written before it started.
#[derive(Debug)]
pub struct ReadFromStart {
    topic: String,
    /// Partitions not passed yet, with their end at the start.
    behind: Vec<(i32, i64)>,
}

impl ReadFromStart {
    /// Assigns `consumer` every partition of `topic` from its beginning and notes where each ends now. Blocking.
    pub fn assign<C: ConsumerContext>(
        consumer: &BaseConsumer<C>,
        topic: &str,
        timeout: Duration,
    ) -> Result<Self, KafkaError> {
        let mut assignment = TopicPartitionList::new();
        let mut behind = Vec::new();
        for partition in partitions_of(consumer, topic, timeout)? {
            assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
            let (low, high) = consumer.fetch_watermarks(topic, partition, timeout)?;
            if high > low {
                behind.push((partition, high));
            }
        }
        consumer.assign(&assignment)?;
        Ok(Self { topic: topic.to_owned(), behind })
    }

    /// A record at `offset` of `partition` was read.
    pub fn read(&mut self, partition: i32, offset: i64) {
        self.behind.retain(|&(p, end)| p != partition || offset + 1 < end);
    }

    /// A poll brought nothing: an end may be a record compaction removed, or a transaction marker, which no
    /// record reaches; it is passed once the consumer's position is.
    pub fn idle<C: ConsumerContext>(&mut self, consumer: &BaseConsumer<C>) {
        if self.behind.is_empty() {
            return;
        }
        let Ok(positions) = consumer.position() else { return };
        let topic = &self.topic;
        self.behind.retain(|&(partition, end)| {
            positions.find_partition(topic, partition).is_none_or(|element| match element.offset() {
                Offset::Offset(next) => next < end,
                _ => true,
            })
        });
    }

    /// Every partition's end at the start is passed.
    pub fn passed(&self) -> bool {
        self.behind.is_empty()
    }
}

/// The partition ids of `topic`, ascending, as the broker's metadata lists them; an error when the topic is
/// unknown or has none. Blocking: call off the runtime.
pub fn partitions_of<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<i32>, KafkaError> {
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let mut partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        return Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition));
    }
    partitions.sort_unstable();
    Ok(partitions)
}

/// Per partition of `topic`, the offsets `(partition, start, end)` of the records timestamped in `[from, to)`:
/// the broker's offset for each time (the first at or after it, within the partition's watermarks; the end of the
/// partition when no record is that late), the partition's start without `from` and its end as it is now without
/// `to`. A partition with nothing in that range is left out. Blocking: call off the runtime.
pub fn offset_ranges_for_times<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    from_ms: Option<i64>,
    to_ms: Option<i64>,
    timeout: Duration,
) -> Result<Vec<(i32, i64, i64)>, KafkaError> {
    let partitions = partitions_of(consumer, topic, timeout)?;
    let offsets_for = |ms: i64| -> Result<HashMap<i32, Offset>, KafkaError> {
        let mut times = TopicPartitionList::new();
        for &partition in &partitions {
            times.add_partition_offset(topic, partition, Offset::Offset(ms))?;
        }
        let found = consumer.offsets_for_times(times, timeout)?;
        Ok(found.elements().iter().map(|element| (element.partition(), element.offset())).collect())
    };
    let starts = from_ms.map(offsets_for).transpose()?;
    let ends = to_ms.map(offsets_for).transpose()?;
    let mut ranges = Vec::new();
    for &partition in &partitions {
        let (low, high) = consumer.fetch_watermarks(topic, partition, timeout)?;
        let at = |offsets: &Option<HashMap<i32, Offset>>, default: i64| match offsets {
            None => default,
            Some(offsets) => match offsets.get(&partition) {
                Some(Offset::Offset(offset)) => (*offset).clamp(low, high),
                _ => high,
            },
        };
        let (start, end) = (at(&starts, low), at(&ends, high));
        if start < end {
            ranges.push((partition, start, end));
        }
    }
    Ok(ranges)
}

/// Calls `visit` with every record of `topic` up to each partition's high watermark at the moment of the call
/// (in offset order within a partition), without keeping them: for topics too large to hold in memory.
/// Reads by assignment: joins no group and commits nothing. Blocking: call off the runtime. `timeout` bounds each
/// metadata call and each wait for the next record, not the whole read: a topic that holds many records (a flood
/// of junk) is read to its end as long as records keep arriving.
pub fn visit_topic(
    kafka: &KafkaConfig,
    topic: &str,
    timeout: Duration,
    mut visit: impl FnMut(&BorrowedMessage<'_>),
) -> Result<(), KafkaError> {
    let consumer: BaseConsumer<QuietContext> =
        assignment_reader_config(kafka, &[]).create_with_context(QuietContext::new("topic-reader"))?;
    let partitions = partitions_of(&consumer, topic, timeout)?;
    // The last offset to read in each partition that holds anything.
    let mut last_offsets: HashMap<i32, i64> = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        let (low, high) = consumer.fetch_watermarks(topic, partition, timeout)?;
        if high > low {
            last_offsets.insert(partition, high - 1);
            assignment.add_partition_offset(topic, partition, Offset::Offset(low))?;
        }
    }
    if last_offsets.is_empty() {
        return Ok(());
    }
    consumer.assign(&assignment)?;
    let mut deadline = Instant::now() + timeout;
    while !last_offsets.is_empty() {
        if Instant::now() >= deadline {
            return Err(KafkaError::NoMessageReceived);
        }
        let Some(message) = consumer.poll(Duration::from_millis(200)) else { continue };
        let message = message?;
        deadline = Instant::now() + timeout;
        let Some(&last) = last_offsets.get(&message.partition()) else { continue };
        if message.offset() <= last {
            visit(&message);
        }
        if message.offset() >= last {
            last_offsets.remove(&message.partition());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_and_consumer_carry_the_shared_settings_and_their_own() {
        let kafka = KafkaConfig {
            brokers: "broker-a:9092,broker-b:9092".to_owned(),
            properties: [("client.rack".to_owned(), "rack-1".to_owned())].into(),
            ..KafkaConfig::default()
        };
        let timeout = kafka.produce_timeout_ms.to_string();
        let producer = producer_config(&kafka);
        let consumer = consumer_config(&kafka, "group-1");
        for config in [&producer, &consumer] {
            assert_eq!(config.get("bootstrap.servers"), Some("broker-a:9092,broker-b:9092"));
            assert_eq!(config.get("reconnect.backoff.max.ms"), Some(RECONNECT_BACKOFF_MAX_MS));
            assert_eq!(config.get("client.rack"), Some("rack-1"), "the operator's properties come last");
            assert!(matches!(config.log_level, RDKafkaLogLevel::Warning));
        }
        assert_eq!(producer.get("acks"), Some("all"));
        assert_eq!(producer.get("message.timeout.ms"), Some(timeout.as_str()));
        assert_eq!(producer.get("group.id"), None);
        assert_eq!(consumer.get("group.id"), Some("group-1"));
        assert_eq!(consumer.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(consumer.get("isolation.level"), Some("read_committed"));
        assert_eq!(consumer.get("enable.idempotence"), None);
    }
}
