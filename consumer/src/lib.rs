//! The consumer: one member of a Kafka consumer group. For each inbound record it claims the event id in Redis
//! (two-phase dedupe), runs the handler, retries what may clear, dead-letters what cannot, and stores the
//! record's offset only once the event is fully handled. Delivery into the handler is at least once; through
//! dedupe, the effect is at most once.
//!
//! [`run`] takes a bound admin listener and a [`Handler`], so tests (and users building their own consumer
//! binary on this library) run the real consumer in-process.

pub mod config;
pub mod dedupe;
pub mod dlq;
pub mod handler;
pub mod metrics;
pub mod pipeline;

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use hookline_common::{
    http::{Readiness, serve_admin},
    kafka::{QuietContext, consumer_config},
};
use prometheus::Registry;
use rdkafka::{
    consumer::{CommitMode, Consumer, StreamConsumer},
    error::KafkaError,
};
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use crate::{config::ConsumerConfig, handler::Handler};
use crate::{
    dedupe::Dedupe,
    dlq::DeadLetters,
    metrics::Metrics,
    pipeline::{Disposition, Pipeline},
};

#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error("kafka")]
    Kafka(#[from] KafkaError),
    #[error("cannot register metrics")]
    Metrics(#[from] prometheus::Error),
}

const REDIS_CONNECT_BACKOFF: Duration = Duration::from_secs(1);
const READINESS_INTERVAL: Duration = Duration::from_secs(2);

/// Runs the consumer until `shutdown`: then it finishes the event in hand, commits the stored offsets and
/// leaves the group.
pub async fn run(
    config: ConsumerConfig,
    admin: TcpListener,
    handler: Arc<dyn Handler>,
    shutdown: CancellationToken,
) -> Result<(), ConsumerError> {
    let registry = Registry::new();
    let metrics = Metrics::register(&registry)?;
    let readiness = Arc::new(Readiness::default());
    let redis_ready = readiness.check("redis");
    let kafka_ready = readiness.check("kafka");
    let tasks = TaskTracker::new();
    tasks.spawn(serve_admin(admin, registry, readiness.clone(), shutdown.child_token()));

    // Never process without the dedupe gate: wait for Redis before joining the group.
    let dedupe = loop {
        match Dedupe::connect(&config.redis).await {
            Ok(dedupe) => break dedupe,
            Err(error) => {
                tracing::warn!(error = %error, cause = ?std::error::Error::source(&error), "redis unreachable; waiting")
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => {
                tasks.close();
                tasks.wait().await;
                return Ok(());
            }
            () = tokio::time::sleep(REDIS_CONNECT_BACKOFF) => {}
        }
    };
    redis_ready.store(true, Ordering::Relaxed);

    let consumer: Arc<StreamConsumer<QuietContext>> = Arc::new(
        consumer_config(&config.kafka, &config.kafka.group_id).create_with_context(QuietContext::new("consumer"))?,
    );
    consumer.subscribe(&[&config.kafka.inbound_topic])?;
    tracing::info!(group = %config.kafka.group_id, topic = %config.kafka.inbound_topic, "consumer joined");

    let pipeline = Pipeline {
        dedupe: dedupe.clone(),
        dead_letters: DeadLetters::new(&config.kafka)?,
        handler,
        handler_config: config.handler.clone(),
        retry: config.retry.clone(),
        metrics,
        redis_ready: redis_ready.clone(),
        shutdown: shutdown.clone(),
    };
    tasks.spawn(watch_dependencies(consumer.clone(), dedupe, kafka_ready, redis_ready, shutdown.clone()));

    loop {
        let message = tokio::select! {
            () = shutdown.cancelled() => break,
            message = consumer.recv() => message,
        };
        let message = match message {
            Ok(message) => message,
            Err(error) => {
                tracing::warn!(error = %error, "fetch failed");
                continue;
            }
        };
        match pipeline.process(&message).await {
            Disposition::Handled => {
                if let Err(error) = consumer.store_offset_from_message(&message) {
                    // Expected after a revoke: the partition is no longer ours, and its new owner will see the
                    // record again (and skip it as a duplicate if we got as far as marking it done).
                    tracing::debug!(error = %error, "cannot store offset");
                }
            }
            Disposition::Interrupted => break,
        }
    }

    shutdown.cancel();
    if let Err(error) = consumer.commit_consumer_state(CommitMode::Sync) {
        // Nothing stored since the last auto-commit is the usual reason; the rest is redelivered.
        tracing::debug!(error = %error, "final commit");
    }
    let dead_letters = pipeline.dead_letters.clone();
    let _ = tokio::task::spawn_blocking(move || dead_letters.flush(Duration::from_secs(5))).await;
    tasks.close();
    tasks.wait().await;
    tracing::info!("consumer stopped");
    Ok(())
}

/// Keeps `/readyz` true to the broker and Redis being reachable.
async fn watch_dependencies(
    consumer: Arc<StreamConsumer<QuietContext>>,
    dedupe: Dedupe,
    kafka_ready: Arc<std::sync::atomic::AtomicBool>,
    redis_ready: Arc<std::sync::atomic::AtomicBool>,
    shutdown: CancellationToken,
) {
    loop {
        let probe = consumer.clone();
        let reachable = tokio::task::spawn_blocking(move || probe.fetch_metadata(None, READINESS_INTERVAL).is_ok())
            .await
            .unwrap_or(false);
        kafka_ready.store(reachable, Ordering::Relaxed);
        redis_ready.store(dedupe.ping().await.is_ok(), Ordering::Relaxed);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(READINESS_INTERVAL) => {}
        }
    }
}
