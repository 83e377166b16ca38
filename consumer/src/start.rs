//! The start, before the fetch loop: what the service finds in Redis and Kafka (its history on the unscoped
//! dedupe layout, the shared retry topic of an upgraded service, its own retry topic, created if missing), asked
//! until each answers while a broker or Redis may be down.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hookline_common::{telemetry::LogThrottle, wire::now_ms};
use rdkafka::error::KafkaError;
use tokio_util::sync::CancellationToken;

use crate::{
    config::ConsumerConfig,
    dedupe::{self, Dedupe},
    metrics::Metrics,
    rebalance::GroupConsumer,
    service::{self, ServiceTopics},
};

/// Between two tries of what the start asks Redis or Kafka.
pub(crate) const REDIS_CONNECT_BACKOFF: Duration = Duration::from_secs(1);
/// How long the start waits for a just-created retry topic to show in the broker's metadata.
const RETRY_TOPIC_WAIT: Duration = Duration::from_secs(10);

/// What the start needs to ask Kafka while a broker may be down: the client, and the fetch-error counter and
/// log throttle an outage is reported through.
pub(crate) struct Start {
    pub(crate) consumer: Arc<GroupConsumer>,
    pub(crate) metrics: Metrics,
    pub(crate) outage_log: Arc<LogThrottle>,
}

impl Start {
    fn outage_log_redis(&self, error: &dedupe::DedupeError) {
        if let Some(held_back) = self.outage_log.admit("redis failed", Instant::now()) {
            tracing::warn!(error = %error, held_back, "cannot read or record the service's history in redis; waiting");
        }
    }

    /// Asks Kafka (a blocking call, off the runtime) until it answers; a failure counts in
    /// `hookline_consumer_fetch_errors_total` and is logged at most once per interval, like the fetch loop's.
    /// `None` on shutdown.
    async fn ask<T, F>(&self, what: &'static str, shutdown: &CancellationToken, question: F) -> Option<T>
    where
        T: Send + 'static,
        F: Fn(&GroupConsumer) -> Result<T, KafkaError> + Send + Sync + 'static,
    {
        let question = Arc::new(question);
        loop {
            let (consumer, question) = (self.consumer.clone(), question.clone());
            match tokio::task::spawn_blocking(move || question(&consumer)).await {
                Ok(Ok(answer)) => return Some(answer),
                Ok(Err(error)) => self.failed(what, &error),
                Err(error) => self.failed(what, &error),
            }
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(REDIS_CONNECT_BACKOFF) => {}
            }
        }
    }

    fn failed(&self, what: &'static str, error: &dyn std::fmt::Display) {
        self.metrics.fetch_errors.inc();
        if let Some(held_back) = self.outage_log.admit(what, Instant::now()) {
            tracing::warn!(error = %error, held_back, "{what}; waiting (rate-limited log)");
        }
    }
}

/// Connects this service to what it finds: its history (did it run on the unscoped layout?), and so whether it
/// honours unscoped dedupe keys and drains the shared retry topic; and its own retry topic, created if missing.
/// Kafka and Redis errors are retried until they clear. `None` on shutdown.
pub(crate) async fn take_over(
    config: &ConsumerConfig,
    mut dedupe: Dedupe,
    start: &Start,
    shutdown: &CancellationToken,
) -> Option<(Dedupe, ServiceTopics)> {
    let mut topics = ServiceTopics {
        inbound: config.kafka.inbound_topic.clone(),
        retry: config.service_retry_topic(),
        shared_retry: None,
        sources: config.service.source_topics.clone(),
    };
    let consumer = &start.consumer;
    // Whether the service's key was there before this start: it ran on an earlier build, so on the previous
    // dedupe layout unless a build of this one recorded its layout first.
    let mut ran_before = true;
    let history = loop {
        match dedupe.recorded_history().await {
            Ok(Some(history)) => break history,
            Ok(None) => {
                // Unanswered is not "new": that would skip the unscoped keys of an upgraded service.
                let inbound = topics.inbound.clone();
                let upgraded = start
                    .ask("cannot read the group's committed offsets", shutdown, move |consumer| {
                        service::group_committed_before(consumer, &inbound)
                    })
                    .await?;
                ran_before = upgraded;
                match dedupe.record_history(upgraded).await {
                    Ok(history) => break history,
                    Err(error) => start.outage_log_redis(&error),
                }
            }
            Err(error) => start.outage_log_redis(&error),
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(REDIS_CONNECT_BACKOFF) => {}
        }
    };
    let layout = loop {
        match dedupe.record_layout(ran_before).await {
            Ok(layout) => break layout,
            Err(error) => start.outage_log_redis(&error),
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(REDIS_CONNECT_BACKOFF) => {}
        }
    };
    let upgrade_period_ms =
        i64::try_from(config.redis.dedupe_upgrade_period_s.saturating_mul(1000)).unwrap_or(i64::MAX);
    dedupe.honour_legacy_layout(layout, upgrade_period_ms);
    if layout.upgraded {
        tracing::info!(
            since_ms = layout.since_ms,
            upgrade_period_s = config.redis.dedupe_upgrade_period_s,
            "service ran on the previous dedupe layout: writing its keys beside the buckets for the upgrade period, \
             reading them until they expire"
        );
    }
    let honour_until_ms = dedupe.unscoped_keys_expire_at(history);
    if history.upgraded && now_ms() < honour_until_ms {
        dedupe.honour_unscoped_keys(honour_until_ms);
        let shared = config.kafka.retry_topic.clone();
        let exists = start
            .ask("cannot read the shared retry topic's metadata", shutdown, move |consumer| {
                service::topic_exists(consumer, &shared)
            })
            .await?;
        if exists && config.kafka.retry_topic != topics.retry {
            topics.shared_retry = Some(config.kafka.retry_topic.clone());
        }
        tracing::info!(
            since_ms = history.since_ms,
            until_ms = honour_until_ms,
            "service ran before dedupe keys were scoped: honouring unscoped keys and draining the shared retry topic"
        );
    }
    if let Err(error) = service::ensure_retry_topic(&**consumer, &config.kafka, &topics).await {
        tracing::warn!(error = %error, topic = %topics.retry, "cannot create the service's retry topic");
    }
    // Subscribe once the topic shows in metadata: a subscribed topic missing at the group join is only looked
    // for again at the next metadata refresh, and retries would wait that long.
    let deadline = Instant::now() + RETRY_TOPIC_WAIT;
    while Instant::now() < deadline {
        let (probe, retry) = (consumer.clone(), topics.retry.clone());
        if matches!(tokio::task::spawn_blocking(move || service::topic_exists(&*probe, &retry)).await, Ok(Ok(true))) {
            break;
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
    Some((dedupe, topics))
}
