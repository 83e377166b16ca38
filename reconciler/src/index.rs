//! The index of accepted events: which record proves "hookline accepted this event id".
//!
//! Acceptance *is* the inbound topic: the gateway answers 2xx only once the broker acknowledged the record, and
//! the reconciler's own produce and the replayer's re-drives land there too. So the indexer, a consumer group of
//! its own on the inbound topic, records every record of a reconciled source in Redis under the id the
//! provider's log shows (a source with a topic of its own: that topic too), with a TTL longer than the provider's window ([`crate::config::SourceConfig::index_ttl_s`]).
//! Its offsets are stored only after the Redis writes landed (at-least-once; a write is idempotent).
//!
//! Neither existing record would do: the consumer's dedupe keys are written only once an event is *processed*
//! (an accepted event waiting in the retry topic or sitting in the DLQ has none, and would be fetched again) and
//! live 72 hours, less than Stripe's 30 days or Paddle's 90; the inbound topic itself is kept for days, not months.
//!
//! Only records hookline wrote count: the indexer checks each record's MAC ([`hookline_common::record_auth`]) as
//! the consumer does, so a record forged into the inbound topic (which the consumer dead-letters) cannot make a
//! missed event look accepted.
//!
//! Before a run decides anything, it waits until the indexer's committed offsets reach the high watermarks the
//! topic had *after* the provider's list was read ([`IndexCheck::wait_caught_up`]): every event accepted before
//! the provider listed it is then in the index.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use hookline_common::{
    config::KafkaConfig,
    kafka::{QuietContext, client_config, consumer_config},
    record_auth::{RecordKeys, RecordKind},
    wire::{self, kafka},
};
use hookline_record::inbound::InboundRecord;
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, StreamConsumer},
};
use tokio_util::sync::CancellationToken;

use crate::{
    config::{Provider, SourceConfig},
    error::ReconcileError,
    metrics::Metrics,
    store::Store,
};

/// Records per Redis round trip.
const BATCH: usize = 500;

/// The id a record of `provider` is indexed under: what the provider's event log shows.
///
/// GitHub's event id is the body's SHA-256 (its delivery id is not signed), while its deliveries API lists
/// delivery GUIDs (`X-GitHub-Delivery`, kept as `hookline-provider-event-id`) and returns payloads only as
/// re-serialized JSON, whose digest would not match the raw body: so GitHub is indexed by its GUID. Stripe and
/// Paddle sign their event ids inside the body; they are the dedupe id and the log's id at once.
pub fn indexed_id(provider: Provider, event: &wire::EventMeta, provider_event_id: Option<&str>) -> Option<String> {
    match provider {
        Provider::Github => provider_event_id.map(str::to_owned),
        Provider::Stripe | Provider::Paddle => Some(event.event_id.clone()),
    }
}

/// Reads the inbound topic for ever (until `shutdown`) and indexes every record of a configured source.
pub async fn run_indexer(
    kafka: KafkaConfig,
    group_id: String,
    sources: Vec<SourceConfig>,
    complete_since_ms: Option<i64>,
    store: Store,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<(), ReconcileError> {
    let keys = RecordKeys::load(&kafka.record_auth).map_err(|problems| ReconcileError::Setup {
        source_name: "-".to_owned(),
        error: format!("record keys: {}", problems.join("; ")),
    })?;
    let consumer: StreamConsumer<QuietContext> =
        consumer_config(&kafka, &group_id).create_with_context(QuietContext::new("reconciler-index"))?;
    let topics = indexed_topics(&kafka, &sources);
    consumer.subscribe(&topics.iter().map(String::as_str).collect::<Vec<_>>())?;
    let by_name: HashMap<String, SourceConfig> = sources.into_iter().map(|s| (s.name.clone(), s)).collect();
    // Coverage starts no later than now (or the configured time); each record indexed may move it back.
    let start_ms = complete_since_ms.unwrap_or(i64::MAX).min(wire::now_ms());
    let mut backoff = Duration::from_millis(100);
    while let Err(error) = store.lower_index_since(start_ms).await {
        tracing::warn!(error = %error, "cannot record where the index starts; retrying");
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    loop {
        let first = tokio::select! {
            () = shutdown.cancelled() => break,
            message = consumer.recv() => message,
        };
        let first = match first {
            Ok(message) => message.detach(),
            Err(error) => {
                // A broker that is away surfaces here; librdkafka reconnects by itself. Nothing was stored.
                tracing::warn!(error = %error, "indexer: cannot fetch from the inbound topic; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match tokio::time::timeout(Duration::from_millis(20), consumer.recv()).await {
                Ok(Ok(message)) => batch.push(message.detach()),
                Ok(Err(_)) | Err(_) => break,
            }
        }
        let mut entries = Vec::new();
        let mut oldest_ms = i64::MAX;
        let now_ms = wire::now_ms();
        for message in &batch {
            let verdict = keys.verify_as(
                RecordKind::Inbound,
                message.topic(),
                message.key(),
                message.payload(),
                message.headers(),
                now_ms,
            );
            metrics.record_auth.with_label_values(&[verdict.label()]).inc();
            if !verdict.accepted() {
                // Not written by hookline: the consumer dead-letters it, and it proves nothing was accepted.
                continue;
            }
            // A record no gateway wrote is not an accepted event of any source: nothing to index.
            let Ok(InboundRecord { meta, provider_event_id: provider_id, .. }) =
                InboundRecord::decode(kafka::headers_of(message.headers()))
            else {
                continue;
            };
            let Some(source) = by_name.get(&meta.source) else { continue };
            oldest_ms = oldest_ms.min(meta.received_at_ms);
            if let Some(id) = indexed_id(source.provider, &meta, provider_id.as_deref()) {
                metrics.indexed.with_label_values(&[&meta.source]).inc();
                entries.push((meta.source.clone(), id, meta.received_at_ms, source.index_ttl_s()));
            }
        }
        // Redis first, offsets after: a record is never skipped, at worst indexed twice.
        let mut backoff = Duration::from_millis(100);
        let write = || async {
            store.index(&entries).await?;
            if oldest_ms < i64::MAX {
                store.lower_index_since(oldest_ms).await?;
            }
            Ok::<(), redis::RedisError>(())
        };
        while let Err(error) = write().await {
            tracing::warn!(error = %error, "cannot write the accepted-events index; retrying");
            tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
        for message in &batch {
            consumer.store_offset(message.topic(), message.partition(), message.offset())?;
        }
        // Commit now rather than at the next auto-commit tick, so a run waiting for the index sees it at once.
        if let Err(error) = consumer.commit_consumer_state(rdkafka::consumer::CommitMode::Async) {
            tracing::debug!(error = %error, "commit of the index offsets deferred to auto-commit");
        }
    }
    Ok(())
}

/// The topics the indexer reads: the inbound topic, and any topic of its own a source names (a gateway source
/// with its own `topic`).
pub fn indexed_topics(kafka: &KafkaConfig, sources: &[SourceConfig]) -> Vec<String> {
    let mut topics = vec![kafka.inbound_topic.clone()];
    for topic in sources.iter().filter_map(|source| source.topic.clone()) {
        if !topics.contains(&topic) {
            topics.push(topic);
        }
    }
    topics
}

/// Reads the indexer group's committed offsets, to tell whether the index covers the topics.
pub struct IndexCheck {
    consumer: BaseConsumer<QuietContext>,
    topics: Vec<String>,
}

impl std::fmt::Debug for IndexCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexCheck").field("topics", &self.topics).finish_non_exhaustive()
    }
}

impl IndexCheck {
    pub fn new(kafka: &KafkaConfig, group_id: &str, sources: &[SourceConfig]) -> Result<Self, ReconcileError> {
        // Never subscribes: only reads the group's committed offsets and the topic's watermarks.
        let consumer = client_config(kafka, &[("group.id", group_id), ("enable.auto.commit", "false")])
            .create_with_context(QuietContext::new("reconciler-index-check"))?;
        Ok(Self { consumer, topics: indexed_topics(kafka, sources) })
    }

    /// Waits until the indexer has committed past every record the topics hold now. Blocking: call off the
    /// runtime. Transient broker errors (a topic's leader not elected yet, a broker restarting) are retried
    /// until `timeout`.
    pub fn wait_caught_up(&self, timeout: Duration) -> Result<(), ReconcileError> {
        let deadline = Instant::now() + timeout;
        let mut targets = loop {
            match self.high_watermarks() {
                Ok(targets) => break targets,
                Err(error) if Instant::now() < deadline => {
                    tracing::debug!(error = %error, "reading the topics' ends; retrying");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(error) => return Err(error.into()),
            }
        };
        loop {
            let mut list = TopicPartitionList::new();
            for (topic, partition) in targets.keys() {
                list.add_partition(topic, *partition);
            }
            match self.consumer.committed_offsets(list, Duration::from_secs(10)) {
                Ok(committed) => targets.retain(|(topic, partition), high| {
                    let done = committed.find_partition(topic, *partition).map(|element| element.offset());
                    !matches!(done, Some(Offset::Offset(offset)) if offset >= *high)
                }),
                Err(error) if Instant::now() < deadline => {
                    tracing::debug!(error = %error, "reading the indexer's committed offsets; retrying");
                }
                Err(error) => return Err(error.into()),
            }
            if targets.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(ReconcileError::IndexBehind(timeout));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// (topic, partition) -> the high watermark the indexer must have committed, for partitions holding records.
    fn high_watermarks(&self) -> Result<HashMap<(String, i32), i64>, rdkafka::error::KafkaError> {
        let call_timeout = Duration::from_secs(10);
        let mut targets = HashMap::new();
        for topic in &self.topics {
            let metadata = self.consumer.fetch_metadata(Some(topic), call_timeout)?;
            let partitions: Vec<i32> = metadata
                .topics()
                .iter()
                .filter(|listed| listed.name() == topic)
                .flat_map(|listed| listed.partitions().iter().map(|partition| partition.id()))
                .collect();
            for partition in partitions {
                let (low, high) = self.consumer.fetch_watermarks(topic, partition, call_timeout)?;
                if high > low {
                    targets.insert((topic.clone(), partition), high);
                }
            }
        }
        Ok(targets)
    }
}
