//! The consumer: one member of a Kafka consumer group. For each inbound record it claims the event id in Redis
//! (two-phase dedupe), runs the handler, retries what may clear, dead-letters what cannot, and stores the
//! record's offset only once the event is fully handled. Delivery into the handler is at least once; through
//! dedupe, the effect is at most once.
//!
//! Records are handled concurrently, many from one partition, at most `processing.max_in_flight` at once
//! ([`schedule`]); a partition's offset is stored only up to the contiguous prefix of handled records
//! ([`window`]). Records sharing an ordering key are handled in offset order. A route that cannot take a record
//! that holds a paused partition, or whose circuit breaker is open, has it deferred to the retry topic without an
//! attempt ([`schedule`], [`pipeline::Pipeline::defer`]).
//!
//! [`run`] takes a bound admin listener and a [`Handler`], so tests (and users building their own consumer
//! binary on this library) run the real consumer in-process.

pub mod alert;
pub mod config;
pub mod control;
pub mod dedupe;
pub mod dlq;
mod fetch;
mod fetch_stats;
pub mod handler;
pub mod load;
pub mod memory;
pub mod metrics;
pub mod pipeline;
pub mod retry;
pub mod schedule;
pub mod service;
pub mod window;

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use hookline_common::{
    http::{Readiness, serve_admin},
    kafka::consumer_config,
    redis_security,
    telemetry::LogThrottle,
    wire::now_ms,
};
use rdkafka::{
    Offset,
    consumer::{CommitMode, Consumer},
    error::KafkaError,
};
use tokio::{net::TcpListener, sync::Notify};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument;

use crate::{
    alert::Alerts,
    dedupe::Dedupe,
    dlq::DeadLetters,
    fetch::{GroupConsumer, GroupContext, Intake, Shared},
    metrics::Metrics,
    pipeline::Pipeline,
    schedule::Scheduler,
    service::ServiceTopics,
};
pub use crate::{config::ConsumerConfig, fetch::OUTAGE_LOG_INTERVAL, handler::Handler, load::Loaded};

#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error("kafka")]
    Kafka(#[from] KafkaError),
    #[error("cannot register metrics")]
    Metrics(#[from] prometheus::Error),
    /// Redis refuses this configuration (certificate, credentials, permissions): said in one line, not waited for.
    #[error(transparent)]
    RedisRefused(#[from] hookline_common::redis_security::RedisRefusal),
    /// A handler can never run with its configuration (a statement that does not prepare, a database that refuses
    /// the credentials): said in one line at start.
    #[error("handler: {0}")]
    HandlerStart(String),
}

const REDIS_CONNECT_BACKOFF: Duration = Duration::from_secs(1);
/// How long the start waits for a just-created retry topic to show in the broker's metadata.
const RETRY_TOPIC_WAIT: Duration = Duration::from_secs(10);
const WATCH_INTERVAL: Duration = Duration::from_secs(2);

/// Runs the consumer until `shutdown`: then it stops fetching and starting records, lets the records in the
/// handler finish (claims of events not finished are released, or expire), commits the stored prefixes and leaves
/// the group.
pub async fn run(loaded: Loaded, admin: TcpListener, shutdown: CancellationToken) -> Result<(), ConsumerError> {
    // Every line this consumer logs, its record tasks' included, names its service.
    let span = tracing::info_span!("consumer", service = %loaded.config.service_name());
    consume(loaded, admin, shutdown).instrument(span).await
}

async fn consume(loaded: Loaded, admin: TcpListener, shutdown: CancellationToken) -> Result<(), ConsumerError> {
    let Loaded { config, handler, alerts } = loaded;
    // A broker that refuses our TLS or SASL settings is a configuration error, not an outage to wait out.
    hookline_common::kafka_security::check_broker_accepts(
        &config.kafka,
        hookline_common::kafka_security::ACCEPT_CHECK_WAIT,
    )
    .await?;
    let service = config.service_name().to_owned();
    let registry = metrics::service_registry(&service)?;
    let metrics = Metrics::register(&registry)?;
    let readiness = Arc::new(Readiness::of(format!("service {service}")));
    let redis_ready = readiness.check("redis");
    let kafka_ready = readiness.check("kafka");
    let assigned_ready = readiness.check("partitions_assigned");
    let retry_topic_ready = readiness.check("retry_topic");
    let tasks = TaskTracker::new();
    let admin_shutdown = shutdown.child_token();
    tasks.spawn(serve_admin(admin, registry, readiness.clone(), admin_shutdown.clone()).in_current_span());

    // A handler that must reach its database first does so before the group is joined; what it can never run with
    // ends the start.
    let start_context =
        handler::StartContext { service: service.clone(), metrics: metrics.clone(), shutdown: shutdown.clone() };
    let started = handler.start(&start_context).await;
    if started.is_err() || shutdown.is_cancelled() {
        admin_shutdown.cancel();
        tasks.close();
        tasks.wait().await;
        return started.map_err(ConsumerError::HandlerStart);
    }

    // Never process without the dedupe gate: wait for Redis before joining the group.
    let dedupe = loop {
        match Dedupe::connect(&config.redis, &service).await {
            Ok(dedupe) => break dedupe,
            Err(error) => {
                // A configuration Redis will never accept ends the start; only an unreachable Redis is waited for.
                if let Some(refusal) = redis_security::refusal(&config.redis, error.redis_error()) {
                    admin_shutdown.cancel();
                    tasks.close();
                    tasks.wait().await;
                    return Err(refusal.into());
                }
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

    let shared = Arc::new(Shared {
        scheduler: Mutex::new(
            Scheduler::new(&config.processing, &config.routes, &config.retry)
                .with_source_topics(config.service.source_topics.iter().cloned()),
        ),
        notify: Notify::new(),
        revoke_wait: Duration::from_millis(config.processing.revoke_wait_ms),
    });
    let mut client_config = consumer_config(&config.kafka, &config.kafka.group_id);
    client_config.set("auto.offset.reset", config.service.starts_at.as_str());
    fetch::bound_prefetch(&mut client_config, &config);
    let consumer: Arc<GroupConsumer> = Arc::new(client_config.create_with_context(GroupContext::new(shared.clone()))?);
    consumer.context().attach(&consumer);
    let outage_log = Arc::new(LogThrottle::new(OUTAGE_LOG_INTERVAL));
    let start = Start { consumer: consumer.clone(), metrics: metrics.clone(), outage_log: outage_log.clone() };
    let Some((dedupe, topics)) = take_over(&config, dedupe, &start, &shutdown).await else {
        tasks.close();
        tasks.wait().await;
        return Ok(());
    };
    // The retry topics are read like the inbound one: a parked event comes back through the same path when due.
    consumer.subscribe(&topics.subscription())?;
    tracing::info!(
        service = %service,
        group = %config.kafka.group_id,
        topic = %topics.inbound,
        retry_topic = %topics.retry,
        shared_retry_topic = topics.shared_retry.as_deref().unwrap_or(""),
        "consumer joined"
    );

    let pipeline = Pipeline {
        dedupe: dedupe.clone(),
        dead_letters: DeadLetters::new(&config.kafka, &service, &topics.retry)?
            .keeping_dedupe_rows_for(crate::handler::postgres::shortest_retention_days(&config)),
        handler,
        handler_timeout: Duration::from_millis(config.handler.timeout_ms),
        retry: config.retry.clone(),
        metrics: metrics.clone(),
        alerts: Alerts::start(alerts, shutdown.clone(), &tasks),
        redis_ready: redis_ready.clone(),
        outage_log: outage_log.clone(),
        shutdown: shutdown.clone(),
    };
    let keys = pipeline.dead_letters.record_keys();
    tracing::info!(
        key_ids = ?keys.key_ids(),
        signing_key = keys.signing_key_id(now_ms()).unwrap_or("none valid now"),
        accept_unsigned_until_ms = keys.accept_unsigned_until_ms(),
        "record keys loaded: records are signed with the signing key; records without a valid MAC are dead-lettered as unauthenticated_record"
    );
    let unsigned_window = metrics.unsigned_window_remaining.clone();
    tasks.spawn(metrics::track_unsigned_window(keys.accept_unsigned_until_ms(), unsigned_window, shutdown.clone()));
    tasks.spawn(
        watch(
            consumer.clone(),
            dedupe,
            metrics.clone(),
            Flags { kafka: kafka_ready, redis: redis_ready, assigned: assigned_ready, retry_topic: retry_topic_ready },
            Topics { inbound: topics.inbound.clone(), retry: topics.retry.clone() },
            shutdown.clone(),
        )
        .in_current_span(),
    );

    let subscribed = topics.subscription().into_iter().map(str::to_owned).collect();
    tasks.spawn(memory::warn_if_unfit(config.processing.clone(), consumer.clone(), subscribed).in_current_span());
    let intake = Arc::new(Intake {
        shared: shared.clone(),
        consumer: consumer.clone(),
        metrics: metrics.clone(),
        pipeline: pipeline.clone(),
        topics,
        service,
        outage_log,
    });
    tasks.spawn_blocking({
        let (kafka, service, keys) = (config.kafka.clone(), config.service_name().to_owned(), keys.clone());
        let (shared, metrics, shutdown) = (shared.clone(), metrics.clone(), shutdown.clone());
        let span = tracing::Span::current();
        move || {
            let _entered = span.enter();
            control::follow(&kafka, &service, &keys, &metrics, &shutdown, |pause| apply_pause(&shared, pause));
        }
    });
    let workers = TaskTracker::new();
    let mut routes_reported_at = Instant::now();
    let (readers, readers_guard) = (TaskTracker::new(), fetch::ReadersGuard(consumer.clone()));
    loop {
        intake.start_readers(&readers);
        // Pauses first: whether a partition is paused decides whether a saturated route's record is deferred.
        intake.apply_pauses();
        start_ready(&shared, &consumer, &pipeline, &workers);
        intake.apply_pauses();
        let wake = shared.lock().next_wake(Instant::now(), now_ms()).unwrap_or(IDLE_WAKE);
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = shared.notify.notified() => {}
            () = tokio::time::sleep(wake) => {}
            // Rebalances, errors and statistics; records only of a partition whose queue could not be split.
            message = consumer.recv() => match message {
                Ok(message) => intake.take_from_main(&message),
                Err(error) => intake.fetch_failed(&error),
            },
        }
        let mut scheduler = shared.lock();
        metrics.in_flight.set(i64::try_from(scheduler.running()).unwrap_or(i64::MAX));
        metrics.windowed.set(i64::try_from(scheduler.windowed()).unwrap_or(i64::MAX));
        metrics.windowed_bytes.set(i64::try_from(scheduler.windowed_bytes()).unwrap_or(i64::MAX));
        if routes_reported_at.elapsed() >= ROUTE_REPORT_INTERVAL {
            metrics.report_routes(&scheduler.route_reports(), now_ms());
            routes_reported_at = Instant::now();
        }
        for (route, open) in scheduler.breaker_changes() {
            metrics.route_breaker_open.with_label_values(&[&route]).set(i64::from(open));
            if open {
                tracing::warn!(route = %route, "circuit breaker open: the route's records are deferred");
            } else {
                tracing::info!(route = %route, "circuit breaker closed");
            }
        }
    }

    shutdown.cancel();
    drop(readers_guard);
    readers.close();
    readers.wait().await;
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

/// What the start needs to ask Kafka while a broker may be down: the client, and the fetch-error counter and
/// log throttle an outage is reported through.
struct Start {
    consumer: Arc<GroupConsumer>,
    metrics: Metrics,
    outage_log: Arc<LogThrottle>,
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
async fn take_over(
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

/// How long the fetch loop sleeps when nothing waits on time (it wakes on every record and completion anyway).
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// Starts every job the scheduler allows, each in its own task. A task reports back to the scheduler, which
/// stores the partition's new prefix, and wakes the fetch loop to start the next jobs.
/// How often the routes' gauges (paused, waiting records and their age) are brought up to date.
const ROUTE_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Applies an operator's pause or resume of one of this service's routes, and wakes the fetch loop to act on it.
fn apply_pause(shared: &Shared, pause: hookline_common::control::RoutePause) {
    let state = pause.paused.then(|| schedule::RoutePauseState {
        since_ms: pause.at_ms,
        by: pause.by.clone(),
        reason: pause.reason.clone(),
    });
    if shared.lock().set_pause(&pause.route, state, pause.at_ms) {
        if pause.paused {
            tracing::warn!(route = %pause.route, by = %pause.by, reason = %pause.reason, "route paused by an operator: its records wait, nothing is called");
        } else {
            tracing::info!(route = %pause.route, by = %pause.by, reason = %pause.reason, "route resumed by an operator");
        }
    }
    shared.notify.notify_one();
}

fn start_ready(shared: &Arc<Shared>, consumer: &Arc<GroupConsumer>, pipeline: &Pipeline, workers: &TaskTracker) {
    if pipeline.shutdown.is_cancelled() {
        // Not started: left for redelivery.
        return;
    }
    loop {
        let job = {
            let mut scheduler = shared.lock();
            scheduler.release_due(now_ms());
            scheduler.next_job(Instant::now(), now_ms())
        };
        let Some(job) = job else { return };
        let (shared, consumer, pipeline) = (shared.clone(), consumer.clone(), pipeline.clone());
        let task = async move {
            // Never panics: a panic on the record's path is its failure, so `complete` is always called.
            let (completion, downstream) = pipeline.run(&job).await;
            let (topic, partition) = job.partition.clone();
            let mut scheduler = shared.lock();
            if let Some(prefix_end) = scheduler.complete(job, completion, downstream, now_ms()) {
                // Under the lock, so prefixes are stored in order and never move backwards.
                if let Err(error) = consumer.store_offset(&topic, partition, prefix_end) {
                    // Expected after a revoke: the partition is no longer ours, and its new owner will see the
                    // record again (and skip it as a duplicate if we got as far as marking it done).
                    tracing::debug!(error = %error, partition, "cannot store offset");
                }
            }
            drop(scheduler);
            shared.notify.notify_one();
        };
        // Boxed once here: the record's future is large (the whole pipeline, inlined), and spawning it by value
        // copied all of it at each of spawn's moves (callgrind: 15.8k instructions of `memcpy` per record).
        workers.spawn(Box::pin(task).in_current_span());
    }
}

struct Flags {
    kafka: Arc<AtomicBool>,
    redis: Arc<AtomicBool>,
    assigned: Arc<AtomicBool>,
    /// The retry topic exists: without it a retryable failure could not be parked (the record would wait).
    retry_topic: Arc<AtomicBool>,
}

struct Topics {
    inbound: String,
    retry: String,
}

/// Keeps `/readyz` and the lag gauges true: broker and Redis reachable, partitions assigned, lag per partition.
async fn watch(
    consumer: Arc<GroupConsumer>,
    dedupe: Dedupe,
    metrics: Metrics,
    flags: Flags,
    topics: Topics,
    shutdown: CancellationToken,
) {
    let topics = Arc::new(topics);
    let lag_shown = Arc::new(Mutex::new(BTreeSet::new()));
    loop {
        let probe = consumer.clone();
        let lag_metrics = metrics.clone();
        let probe_topics = topics.clone();
        let probe_lag_shown = lag_shown.clone();
        let (reachable, retry_topic_exists, n_assigned) = tokio::task::spawn_blocking(move || {
            let metadata = probe.fetch_metadata(Some(&probe_topics.retry), WATCH_INTERVAL);
            let retry_topic_exists = metadata.as_ref().is_ok_and(|metadata| {
                metadata.topics().iter().any(|topic| {
                    topic.name() == probe_topics.retry && topic.error().is_none() && !topic.partitions().is_empty()
                })
            });
            let n_assigned = record_lag(&probe, &lag_metrics, &probe_topics.inbound, &probe_lag_shown);
            (metadata.is_ok(), retry_topic_exists, n_assigned)
        })
        .await
        .unwrap_or((false, false, 0));
        flags.kafka.store(reachable, Ordering::Relaxed);
        flags.retry_topic.store(retry_topic_exists, Ordering::Relaxed);
        flags.assigned.store(n_assigned > 0, Ordering::Relaxed);
        metrics.assigned_partitions.set(i64::try_from(n_assigned).unwrap_or(i64::MAX));
        flags.redis.store(dedupe.ping().await.is_ok(), Ordering::Relaxed);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(WATCH_INTERVAL) => {}
        }
    }
}

/// Sets `hookline_consumer_lag_records` for each assigned partition of the inbound topic; returns how many
/// partitions are assigned (of both topics). Blocking.
///
/// The series are updated in place, never reset: a scrape always finds every assigned partition (with its last
/// value while a fresh one cannot be read), and only the series of partitions no longer assigned are removed.
/// The lag is counted from the group's committed offset, which is known for a partition this member has not
/// fetched from yet (its position is not), so a caught-up partition shows 0, not the whole log.
fn record_lag(consumer: &GroupConsumer, metrics: &Metrics, inbound_topic: &str, shown: &Mutex<BTreeSet<i32>>) -> usize {
    let Ok(assignment) = consumer.assignment() else { return 0 };
    let assigned: BTreeSet<i32> = assignment
        .elements()
        .iter()
        .filter(|element| element.topic() == inbound_topic)
        .map(|element| element.partition())
        .collect();
    let mut shown = shown.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for gone in shown.difference(&assigned) {
        let _ = metrics.lag.remove_label_values(&[&gone.to_string()]);
    }
    shown.retain(|partition| assigned.contains(partition));
    if assigned.is_empty() {
        return assignment.count();
    }
    let Ok(committed) = consumer.committed(WATCH_INTERVAL) else { return assignment.count() };
    for &partition in &assigned {
        let Ok((low, high)) = consumer.fetch_watermarks(inbound_topic, partition, WATCH_INTERVAL) else { continue };
        let committed_offset = committed.find_partition(inbound_topic, partition).and_then(|element| {
            match element.offset() {
                Offset::Offset(offset) => Some(offset),
                // Nothing committed yet: the group starts at the earliest record.
                _ => None,
            }
        });
        metrics.lag.with_label_values(&[&partition.to_string()]).set(lag_records(low, high, committed_offset));
        shown.insert(partition);
    }
    assignment.count()
}

/// Records from the group's committed offset (the low watermark when nothing is committed, or when retention
/// deleted past it) to the high watermark.
fn lag_records(low: i64, high: i64, committed: Option<i64>) -> i64 {
    (high - committed.unwrap_or(low).max(low)).max(0)
}

#[cfg(test)]
mod tests {
    use super::lag_records;

    #[test]
    fn lag_counts_from_the_committed_offset_and_never_invents_records() {
        assert_eq!(lag_records(0, 40, Some(40)), 0, "caught up");
        assert_eq!(lag_records(0, 40, Some(25)), 15);
        assert_eq!(lag_records(10, 40, None), 30, "nothing committed: everything retained is to be read");
        assert_eq!(lag_records(30, 40, Some(5)), 10, "retention deleted past the committed offset");
        assert_eq!(lag_records(0, 40, Some(41)), 0);
    }
}
