//! The consumer: one member of a Kafka consumer group. For each inbound record it claims the event id in Redis
//! (two-phase dedupe), runs the handler, retries what may clear, dead-letters what cannot, and stores the
//! record's offset only once the event is fully handled. Delivery into the handler is at least once; through
//! dedupe, the effect is at most once.
//!
//! Records of one partition are handled in order by that partition's worker; partitions are handled
//! concurrently, with at most `processing.max_in_flight` events in the handler stage at once.
//!
//! [`run`] takes a bound admin listener and a [`Handler`], so tests (and users building their own consumer
//! binary on this library) run the real consumer in-process.

pub mod alert;
pub mod config;
pub mod dedupe;
pub mod dlq;
pub mod handler;
pub mod metrics;
pub mod pipeline;

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use hookline_common::{
    http::{Readiness, serve_admin},
    kafka::{QuietContext, consumer_config},
};
use prometheus::Registry;
use rdkafka::{
    Message, Offset,
    consumer::{CommitMode, Consumer, StreamConsumer},
    error::KafkaError,
    message::OwnedMessage,
};
use tokio::{
    net::TcpListener,
    sync::{Semaphore, mpsc},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    alert::Alerts,
    dedupe::Dedupe,
    dlq::DeadLetters,
    metrics::Metrics,
    pipeline::{Disposition, Pipeline},
};
pub use crate::{config::ConsumerConfig, handler::Handler};

#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error("kafka")]
    Kafka(#[from] KafkaError),
    #[error("cannot register metrics")]
    Metrics(#[from] prometheus::Error),
}

type GroupConsumer = StreamConsumer<QuietContext>;

const REDIS_CONNECT_BACKOFF: Duration = Duration::from_secs(1);
const WATCH_INTERVAL: Duration = Duration::from_secs(2);

/// Runs the consumer until `shutdown`: then it stops fetching, lets each partition worker finish the event in
/// hand (claims of events not finished are released, or expire), commits the stored offsets and leaves the group.
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
    let assigned_ready = readiness.check("partitions_assigned");
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

    let consumer: Arc<GroupConsumer> = Arc::new(
        consumer_config(&config.kafka, &config.kafka.group_id).create_with_context(QuietContext::new("consumer"))?,
    );
    consumer.subscribe(&[&config.kafka.inbound_topic])?;
    tracing::info!(group = %config.kafka.group_id, topic = %config.kafka.inbound_topic, "consumer joined");

    let pipeline = Pipeline {
        dedupe: dedupe.clone(),
        dead_letters: DeadLetters::new(&config.kafka)?,
        handler,
        handler_timeout: Duration::from_millis(config.handler.timeout_ms),
        retry: config.retry.clone(),
        metrics: metrics.clone(),
        alerts: Alerts::start(&config.alert, &config.config_dir, shutdown.clone(), &tasks),
        redis_ready: redis_ready.clone(),
        shutdown: shutdown.clone(),
    };
    tasks.spawn(watch(
        consumer.clone(),
        dedupe,
        metrics.clone(),
        Flags { kafka: kafka_ready, redis: redis_ready, assigned: assigned_ready },
        shutdown.clone(),
    ));

    let in_flight = Arc::new(Semaphore::new(config.processing.max_in_flight));
    let workers = TaskTracker::new();
    let mut partitions: HashMap<i32, mpsc::Sender<OwnedMessage>> = HashMap::new();
    loop {
        let message = tokio::select! {
            () = shutdown.cancelled() => break,
            message = consumer.recv() => match message {
                Ok(message) => message.detach(),
                Err(error) => {
                    // Transient (a broker restarting): librdkafka retries by itself; don't spin or flood the log.
                    tracing::warn!(error = %error, "fetch failed");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        metrics.consumed.inc();
        let partition = message.partition();
        let sender = partitions.entry(partition).or_insert_with(|| {
            let (sender, receiver) = mpsc::channel(config.processing.partition_queue);
            workers.spawn(partition_worker(receiver, pipeline.clone(), consumer.clone(), in_flight.clone()));
            sender
        });
        // A full queue makes fetching wait: backpressure instead of unbounded prefetch.
        let sent = tokio::select! {
            () = shutdown.cancelled() => break,
            sent = sender.send(message) => sent,
        };
        if sent.is_err() {
            // The worker stopped (shutdown is under way): stop fetching too.
            break;
        }
    }

    shutdown.cancel();
    drop(partitions);
    workers.close();
    workers.wait().await;
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

/// Handles one partition's records in order, storing each offset once its record is handled.
async fn partition_worker(
    mut receiver: mpsc::Receiver<OwnedMessage>,
    pipeline: Pipeline,
    consumer: Arc<GroupConsumer>,
    in_flight: Arc<Semaphore>,
) {
    while let Some(message) = receiver.recv().await {
        if pipeline.shutdown.is_cancelled() {
            // Not started: leave it for redelivery.
            return;
        }
        let Ok(_permit) = in_flight.acquire().await else { return };
        match pipeline.process(&message).await {
            Disposition::Handled => {
                if let Err(error) = consumer.store_offset(message.topic(), message.partition(), message.offset()) {
                    // Expected after a revoke: the partition is no longer ours, and its new owner will see the
                    // record again (and skip it as a duplicate if we got as far as marking it done).
                    tracing::debug!(error = %error, partition = message.partition(), "cannot store offset");
                }
            }
            Disposition::Interrupted => return,
        }
    }
}

struct Flags {
    kafka: Arc<AtomicBool>,
    redis: Arc<AtomicBool>,
    assigned: Arc<AtomicBool>,
}

/// Keeps `/readyz` and the lag gauges true: broker and Redis reachable, partitions assigned, lag per partition.
async fn watch(
    consumer: Arc<GroupConsumer>,
    dedupe: Dedupe,
    metrics: Metrics,
    flags: Flags,
    shutdown: CancellationToken,
) {
    loop {
        let probe = consumer.clone();
        let lag_metrics = metrics.clone();
        let (reachable, n_assigned) = tokio::task::spawn_blocking(move || {
            let reachable = probe.fetch_metadata(None, WATCH_INTERVAL).is_ok();
            let n_assigned = record_lag(&probe, &lag_metrics);
            (reachable, n_assigned)
        })
        .await
        .unwrap_or((false, 0));
        flags.kafka.store(reachable, Ordering::Relaxed);
        flags.assigned.store(n_assigned > 0, Ordering::Relaxed);
        metrics.assigned_partitions.set(i64::try_from(n_assigned).unwrap_or(i64::MAX));
        flags.redis.store(dedupe.ping().await.is_ok(), Ordering::Relaxed);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(WATCH_INTERVAL) => {}
        }
    }
}

/// Sets `hookline_consumer_lag_records` for each assigned partition; returns how many are assigned. Blocking.
fn record_lag(consumer: &GroupConsumer, metrics: &Metrics) -> usize {
    let Ok(assignment) = consumer.assignment() else { return 0 };
    metrics.lag.reset();
    let Ok(positions) = consumer.position() else { return assignment.count() };
    for element in positions.elements() {
        let Ok((_, high)) = consumer.fetch_watermarks(element.topic(), element.partition(), WATCH_INTERVAL) else {
            continue;
        };
        let position = match element.offset() {
            Offset::Offset(offset) => offset,
            // Nothing consumed yet on this partition.
            _ => 0,
        };
        metrics.lag.with_label_values(&[&element.partition().to_string()]).set((high - position).max(0));
    }
    assignment.count()
}
