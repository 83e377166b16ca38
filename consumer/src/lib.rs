//! The consumer: one member of a Kafka consumer group. One record's path, in the order it takes:
//!
//! 1. `rebalance`: a partition assigned gets its own librdkafka queue, split off before it is fetched;
//! 2. `fetch`: its reader reads while the partition's window has room, and the door (`fetch::Intake`) copies
//!    each message out of librdkafka once and parses it once into a [`record::Record`] (body, headers, MAC
//!    verdict, event, retry headers, trace context), which everything after takes;
//! 3. [`schedule`]: the record joins its partition's window and its route's queue; it starts when its route has a
//!    slot and its ordering key's turn has come, is held while its route is paused or its breaker is open, or is
//!    deferred to the retry topic;
//! 4. [`pipeline`]: claim in Redis (two-phase dedupe), the handler, the done marker; or a retry parked in the
//!    retry topic ([`retry`]), or a dead letter ([`dlq`]) with its alert ([`alert`]); or, when its route's
//!    [`filter`] skips it, the filtered marker instead of the handler;
//! 5. back in [`schedule`]: the partition's offset is stored only up to the contiguous prefix of handled records
//!    ([`window`]), and committed.
//!
//! Delivery into the handler is at least once; through dedupe, the effect is at most once. Beside the path:
//! [`control`] follows operators' route pauses, `start` connects the service to what it finds in Redis and Kafka,
//! `watch` keeps `/readyz` and the lag gauges true.
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
pub mod filter;
pub mod handler;
pub mod load;
pub mod memory;
pub mod metrics;
pub mod pipeline;
mod rebalance;
pub mod record;
pub mod retry;
pub mod schedule;
pub mod service;
mod start;
pub mod transform_test;
mod watch;
pub mod window;

use std::{
    sync::{Arc, Mutex, atomic::Ordering},
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
    fetch::Intake,
    metrics::Metrics,
    pipeline::Pipeline,
    rebalance::{GroupConsumer, GroupContext, Shared},
    schedule::{Job, PartitionKey, Scheduler},
    start::{REDIS_CONNECT_BACKOFF, Start, take_over},
    watch::{Flags, Topics, watch},
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
    /// (Its Display says the handler's error, so it is not also its source: an error chain prints it once.)
    #[error("handler: {0}")]
    HandlerStart(crate::handler::StartError),
}

/// Runs the consumer until `shutdown`: then it stops fetching and starting records, lets the records in the
/// handler finish (claims of events not finished are released, or expire), commits the stored prefixes and leaves
/// the group.
pub async fn run(loaded: Loaded, admin: TcpListener, shutdown: CancellationToken) -> Result<(), ConsumerError> {
    // Every line this consumer logs, its record tasks' included, names its service.
    let span = tracing::info_span!("consumer", service = %loaded.config.service_name());
    consume(loaded, admin, shutdown).instrument(span).await
}

async fn consume(loaded: Loaded, admin: TcpListener, shutdown: CancellationToken) -> Result<(), ConsumerError> {
    let Loaded { config, handler, filters, alerts } = loaded;
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
    let flags = Flags {
        redis: readiness.check("redis"),
        kafka: readiness.check("kafka"),
        assigned: readiness.check("partitions_assigned"),
        retry_topic: readiness.check("retry_topic"),
    };
    let background = Background::serve_admin(admin, registry, readiness, &shutdown);

    let dedupe = match start_handler_and_connect(&config, handler.as_ref(), &service, &metrics, &shutdown).await {
        Ok(Some(dedupe)) => dedupe,
        ended => {
            background.stop().await;
            return ended.map(|_| ());
        }
    };
    flags.redis.store(true, Ordering::Relaxed);

    let shared = Arc::new(Shared {
        scheduler: Mutex::new(
            Scheduler::new(&config.processing, &config.routes, &config.retry)
                .with_source_topics(config.service.source_topics.iter().cloned())
                .with_fan_out(config.fans_out()),
        ),
        notify: Notify::new(),
        revoke_wait: Duration::from_millis(config.processing.revoke_wait_ms),
    });
    let consumer = group_consumer(&config, &shared)?;
    let outage_log = Arc::new(LogThrottle::new(OUTAGE_LOG_INTERVAL));
    let start = Start { consumer: consumer.clone(), metrics: metrics.clone(), outage_log: outage_log.clone() };
    let Some((dedupe, topics)) = take_over(&config, dedupe, &start, &shutdown).await else {
        background.stop().await;
        return Ok(());
    };
    let pipeline = Pipeline {
        dedupe: dedupe.clone(),
        dead_letters: DeadLetters::new(&config.kafka, &service, &topics.retry)?
            .keeping_dedupe_rows_for(crate::handler::postgres::shortest_retention_days(&config)),
        handler,
        filters,
        handler_timeout: Duration::from_millis(config.handler.timeout_ms),
        retry: config.retry.clone(),
        destination_retries: Arc::new(config.destination_retries()),
        metrics: metrics.clone(),
        alerts: Alerts::start(alerts, shutdown.clone(), &background.tasks),
        redis_ready: flags.redis.clone(),
        outage_log: outage_log.clone(),
        shutdown: shutdown.clone(),
    };
    let keys = pipeline.dead_letters.record_keys();
    background.watch(keys, &start, dedupe, flags, &topics, &shutdown);
    // Route pauses first: an instance started while a route is paused must know it before its first record.
    background.follow_control(&config, keys, &shared, &metrics, &shutdown).await;
    background.subscribe(&config, &consumer, &topics)?;
    let intake = Intake { shared, consumer: consumer.clone(), metrics, pipeline, topics, service, outage_log };
    let intake = Arc::new(intake);
    fetch_until_shutdown(&intake, &shutdown).await;

    if let Err(error) = consumer.commit_consumer_state(CommitMode::Sync) {
        // Nothing stored since the last auto-commit is the usual reason; the rest is redelivered.
        tracing::debug!(error = %error, "final commit");
    }
    let dead_letters = intake.pipeline.dead_letters.clone();
    let _ = tokio::task::spawn_blocking(move || dead_letters.flush(Duration::from_secs(5))).await;
    background.stop().await;
    tracing::info!("consumer stopped");
    Ok(())
}

/// Starts the handler (a handler that must reach its database first does so before the group is joined; what it
/// can never run with ends the start), then waits for Redis: never process without the dedupe gate. `None` on
/// shutdown.
async fn start_handler_and_connect(
    config: &ConsumerConfig,
    handler: &dyn Handler,
    service: &str,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> Result<Option<Dedupe>, ConsumerError> {
    let start_context =
        handler::StartContext { service: service.to_owned(), metrics: metrics.clone(), shutdown: shutdown.clone() };
    handler.start(&start_context).await.map_err(ConsumerError::HandlerStart)?;
    if shutdown.is_cancelled() {
        return Ok(None);
    }
    for warning in config.window_warnings() {
        tracing::warn!("{warning}");
    }
    loop {
        match Dedupe::connect(&config.redis, service).await {
            Ok(dedupe) => {
                let dedupe = dedupe.report_bucket_fill(metrics.dedupe_bucket_fill.clone());
                return Ok(Some(dedupe.with_source_windows(config.source_windows())));
            }
            Err(error) => {
                // A configuration Redis will never accept ends the start; only an unreachable Redis is waited for.
                if let Some(refusal) = redis_security::refusal(&config.redis, error.redis_error()) {
                    return Err(refusal.into());
                }
                tracing::warn!(error = %error, cause = ?std::error::Error::source(&error), "redis unreachable; waiting")
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(REDIS_CONNECT_BACKOFF) => {}
        }
    }
}

/// The group's client, with its rebalance context attached: not yet subscribed.
fn group_consumer(config: &ConsumerConfig, shared: &Arc<Shared>) -> Result<Arc<GroupConsumer>, ConsumerError> {
    let mut client_config = consumer_config(&config.kafka, &config.kafka.group_id);
    client_config.set("auto.offset.reset", config.service.starts_at.as_str());
    fetch::bound_prefetch(&mut client_config, config);
    let consumer: Arc<GroupConsumer> = Arc::new(client_config.create_with_context(GroupContext::new(shared.clone()))?);
    consumer.context().attach(&consumer);
    Ok(consumer)
}

/// The tasks beside the fetch loop: the admin listener, the alerts, the watchers and the control topic's follower.
struct Background {
    tasks: TaskTracker,
    admin_shutdown: CancellationToken,
}

impl Background {
    fn serve_admin(
        admin: TcpListener,
        registry: prometheus::Registry,
        readiness: Arc<Readiness>,
        shutdown: &CancellationToken,
    ) -> Self {
        let tasks = TaskTracker::new();
        let admin_shutdown = shutdown.child_token();
        tasks.spawn(serve_admin(admin, registry, readiness, admin_shutdown.clone()).in_current_span());
        Self { tasks, admin_shutdown }
    }

    /// Logs the record keys, and starts what keeps `/readyz` and the gauges true: the unsigned window's countdown
    /// and [`watch`].
    fn watch(
        &self,
        keys: &hookline_common::record_auth::RecordKeys,
        start: &Start,
        dedupe: Dedupe,
        flags: Flags,
        topics: &service::ServiceTopics,
        shutdown: &CancellationToken,
    ) {
        tracing::info!(
            key_ids = ?keys.key_ids(),
            signing_key = keys.signing_key_id(now_ms()).unwrap_or("none valid now"),
            accept_unsigned_until_ms = keys.accept_unsigned_until_ms(),
            "record keys loaded: records are signed with the signing key; records without a valid MAC are dead-lettered as unauthenticated_record"
        );
        let unsigned_window = start.metrics.unsigned_window_remaining.clone();
        self.tasks.spawn(metrics::track_unsigned_window(
            keys.accept_unsigned_until_ms(),
            unsigned_window,
            shutdown.clone(),
        ));
        self.tasks.spawn(
            watch(
                start.consumer.clone(),
                dedupe,
                start.metrics.clone(),
                flags,
                Topics { inbound: topics.inbound.clone(), retry: topics.retry.clone() },
                shutdown.clone(),
            )
            .in_current_span(),
        );
    }

    /// Follows the control topic (operators' route pauses) on a thread of its own, and waits until it has read
    /// the topic to its end, or [`CONTROL_CATCH_UP_WAIT`], or shutdown.
    async fn follow_control(
        &self,
        config: &ConsumerConfig,
        keys: &hookline_common::record_auth::RecordKeys,
        shared: &Arc<Shared>,
        metrics: &Metrics,
        shutdown: &CancellationToken,
    ) {
        let control_caught_up = Arc::new(Notify::new());
        self.tasks.spawn_blocking({
            let (kafka, service, keys) = (config.kafka.clone(), config.service_name().to_owned(), keys.clone());
            let (shared, metrics, shutdown) = (shared.clone(), metrics.clone(), shutdown.clone());
            let caught_up = control_caught_up.clone();
            let span = tracing::Span::current();
            move || {
                let _entered = span.enter();
                let apply = |pause| apply_pause(&shared, pause);
                control::follow(&kafka, &service, &keys, &metrics, &shutdown, apply, move || caught_up.notify_one());
            }
        });
        tokio::select! {
            () = control_caught_up.notified() => {}
            () = tokio::time::sleep(CONTROL_CATCH_UP_WAIT) => tracing::warn!(
                topic = %config.kafka.control_topic,
                wait_s = CONTROL_CATCH_UP_WAIT.as_secs(),
                "the control topic could not be read up to its end: joining the group without knowing every route pause"
            ),
            () = shutdown.cancelled() => {}
        }
    }

    /// Joins the group: the retry topics are read like the inbound one, so a parked event comes back through the
    /// same path when due. Then checks, beside the fetch loop, that the prefetch bounds fit the memory.
    fn subscribe(
        &self,
        config: &ConsumerConfig,
        consumer: &Arc<GroupConsumer>,
        topics: &service::ServiceTopics,
    ) -> Result<(), ConsumerError> {
        consumer.subscribe(&topics.subscription())?;
        tracing::info!(
            service = %config.service_name(),
            group = %config.kafka.group_id,
            topic = %topics.inbound,
            retry_topic = %topics.retry,
            shared_retry_topic = topics.shared_retry.as_deref().unwrap_or(""),
            "consumer joined"
        );
        let subscribed = topics.subscription().into_iter().map(str::to_owned).collect();
        let check = memory::warn_if_unfit(config.processing.clone(), consumer.clone(), subscribed);
        self.tasks.spawn(check.in_current_span());
        Ok(())
    }

    /// Stops the admin listener and waits for every task beside the fetch loop.
    async fn stop(self) {
        self.admin_shutdown.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// The fetch loop: starts the partitions' readers and the jobs the scheduler allows, until shutdown; then stops
/// the readers and lets the records in the handler finish.
async fn fetch_until_shutdown(intake: &Arc<Intake>, shutdown: &CancellationToken) {
    let (shared, consumer, pipeline) = (&intake.shared, &intake.consumer, &intake.pipeline);
    let workers = TaskTracker::new();
    let mut routes_reported_at = Instant::now();
    let (readers, readers_guard) = (TaskTracker::new(), rebalance::ReadersGuard(consumer.clone()));
    loop {
        intake.start_readers(&readers);
        // Pauses first: whether a partition is paused decides whether a saturated route's record is deferred.
        intake.apply_pauses();
        start_ready(shared, consumer, pipeline, &workers);
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
        report_scheduler(shared, &intake.metrics, &mut routes_reported_at);
    }

    shutdown.cancel();
    drop(readers_guard);
    readers.close();
    readers.wait().await;
    workers.close();
    workers.wait().await;
}

/// Brings the scheduler's gauges up to date (the routes' at most every [`ROUTE_REPORT_INTERVAL`]), and reports
/// the breakers that opened or closed.
fn report_scheduler(shared: &Shared, metrics: &Metrics, routes_reported_at: &mut Instant) {
    let mut scheduler = shared.lock();
    metrics.in_flight.set(i64::try_from(scheduler.running()).unwrap_or(i64::MAX));
    metrics.windowed.set(i64::try_from(scheduler.windowed()).unwrap_or(i64::MAX));
    metrics.windowed_bytes.set(i64::try_from(scheduler.windowed_bytes()).unwrap_or(i64::MAX));
    if routes_reported_at.elapsed() >= ROUTE_REPORT_INTERVAL {
        metrics.report_routes(&scheduler.route_reports(), now_ms());
        *routes_reported_at = Instant::now();
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

/// How long the start waits to have read the control topic (route pauses) before it joins the group anyway: an
/// unreadable control topic must not keep every event from being processed.
const CONTROL_CATCH_UP_WAIT: Duration = Duration::from_secs(15);

/// How long the fetch loop sleeps when nothing waits on time (it wakes on every record and completion anyway).
const IDLE_WAKE: Duration = Duration::from_secs(1);

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

/// Starts every job the scheduler allows: those that may run together ([`Pipeline::joins_together`]) in tasks of
/// up to [`pipeline::TOGETHER_MAX`], one claim and one done call each, the others each in its own task. A task
/// reports what ended to the scheduler, which stores the partitions' new prefixes, and wakes the fetch loop to
/// start the next jobs.
fn start_ready(shared: &Arc<Shared>, consumer: &Arc<GroupConsumer>, pipeline: &Pipeline, workers: &TaskTracker) {
    if pipeline.shutdown.is_cancelled() {
        // Not started: left for redelivery.
        return;
    }
    let mut together = Vec::new();
    loop {
        let job = {
            let mut scheduler = shared.lock();
            scheduler.release_due(now_ms());
            scheduler.next_job(Instant::now(), now_ms())
        };
        let Some(job) = job else { break };
        if pipeline.joins_together(&job) {
            together.push(job);
            if together.len() == pipeline::TOGETHER_MAX {
                start_together(std::mem::take(&mut together), shared, consumer, pipeline, workers);
            }
            continue;
        }
        let (shared, consumer, pipeline) = (shared.clone(), consumer.clone(), pipeline.clone());
        let task = async move {
            // Never panics: a panic on the record's path is its failure, so `complete` is always called.
            let (completion, downstream) = pipeline.run(&job).await;
            report(&shared, &consumer, vec![(job, completion, downstream)]);
        };
        // Boxed once here: the record's future is large (the whole pipeline, inlined), and spawning it by value
        // copied all of it at each of spawn's moves (callgrind: 15.8k instructions of `memcpy` per record).
        workers.spawn(Box::pin(task).in_current_span());
    }
    if !together.is_empty() {
        start_together(together, shared, consumer, pipeline, workers);
    }
}

/// Starts one task for jobs that run together.
fn start_together(
    jobs: Vec<Job>,
    shared: &Arc<Shared>,
    consumer: &Arc<GroupConsumer>,
    pipeline: &Pipeline,
    workers: &TaskTracker,
) {
    let (shared, consumer, pipeline) = (shared.clone(), consumer.clone(), pipeline.clone());
    let task = async move {
        pipeline.run_together(jobs, |ended| report(&shared, &consumer, ended)).await;
    };
    workers.spawn(Box::pin(task).in_current_span());
}

/// Tells the scheduler that these jobs ended, under one lock, and stores each partition's new prefix there (so
/// that prefixes are stored in order and never move backwards); then wakes the fetch loop.
fn report(shared: &Shared, consumer: &GroupConsumer, ended: Vec<pipeline::Ended>) {
    let mut scheduler = shared.lock();
    let mut prefixes: Vec<(PartitionKey, i64)> = Vec::new();
    for (job, completion, downstream) in ended {
        let partition = job.partition.clone();
        if let Some(prefix_end) = scheduler.complete(job, completion, downstream, now_ms()) {
            match prefixes.iter_mut().find(|(stored, _)| *stored == partition) {
                Some((_, end)) => *end = prefix_end,
                None => prefixes.push((partition, prefix_end)),
            }
        }
    }
    for ((topic, partition), prefix_end) in prefixes {
        if let Err(error) = consumer.store_offset(&topic, partition, prefix_end) {
            // Expected after a revoke: the partition is no longer ours, and its new owner will see the record
            // again (and skip it as a duplicate if we got as far as marking it done).
            tracing::debug!(error = %error, partition, "cannot store offset");
        }
    }
    drop(scheduler);
    shared.notify.notify_one();
}
