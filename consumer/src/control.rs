//! Operators' instructions to this service, from the control topic ([`hookline_common::control`]): today, which
//! routes are paused. Every consumer reads the whole (compacted, small) topic from its start and then follows it,
//! so every instance of a service obeys a pause within a poll interval, including one started later; nothing is
//! kept in one process.
//!
//! A control record is applied only when its record MAC verifies with one of the service's keys (an unsigned one
//! never, whatever the upgrade window for unsigned inbound records): whoever may write the topic without holding
//! a record key cannot pause or resume a route, and one signed with the gateway's inbound-only key is refused
//! whatever its headers. What is refused is counted (`hookline_consumer_control_records_refused_total`) and logged
//! (one line per [`REFUSAL_LOG_INTERVAL`] at most, with the count since: a flood of junk costs no log line each,
//! so reading it stays fast), never applied.
//!
//! Freshness ([`PauseBook`]): a route's record is applied only when its `at_ms` is later than the state held, so a
//! signed record written again later (an old `resume` replayed) is refused as `stale`; a tombstone is refused as
//! unsigned and the pause it follows stays held (the replayer writes the pause again so that compaction keeps it).

use std::time::Duration;

use hookline_common::{
    config::KafkaConfig,
    control::{PauseBook, Read, RoutePause, ensure_control_topic},
    kafka::{QuietContext, ReadFromStart, assignment_reader_config},
    record_auth::{RecordKeys, RecordKind, Verdict},
    wire::now_ms,
};
use rdkafka::{Message, consumer::BaseConsumer, error::KafkaError};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// How long one poll waits: a pause reaches a running instance within about this plus the broker's fetch wait.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How long to wait before asking again for a control topic that cannot be read.
const RETRY_INTERVAL: Duration = Duration::from_secs(5);
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// How often at most a refused control record is logged (with the count since the last line).
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The refused records' log: one line per interval at most.
#[derive(Default)]
struct RefusalLog {
    last: Option<std::time::Instant>,
    since_last_line: u64,
}

impl RefusalLog {
    fn refused(&mut self, partition: i32, offset: i64, reason: &str, outcome: &str) {
        self.since_last_line += 1;
        if self.last.is_some_and(|at| at.elapsed() < REFUSAL_LOG_INTERVAL) {
            return;
        }
        tracing::error!(
            partition,
            offset,
            reason,
            outcome,
            refused_since_last_line = self.since_last_line,
            "control record refused (its MAC does not verify with this service's keys as a control record, it is \
             not understood, or it is older than the route's state); not applied"
        );
        *self = Self { last: Some(std::time::Instant::now()), since_last_line: 0 };
    }
}

/// Follows the control topic until `shutdown`, calling `apply` with each authentic route pause addressed to
/// `service`, in the topic's order (the latest record of a route is its state). Blocking: run it on its own
/// thread (`spawn_blocking`). Creates the topic (compacted, one partition, the inbound topic's replication) when
/// it does not exist.
///
/// `caught_up` is called once every record the topic held when it was first read has been applied: the consumer
/// joins its group only then, so that an instance started while a route is paused never calls it.
pub fn follow(
    kafka: &KafkaConfig,
    service: &str,
    keys: &RecordKeys,
    metrics: &Metrics,
    shutdown: &CancellationToken,
    mut apply: impl FnMut(RoutePause),
    caught_up: impl FnOnce(),
) {
    let mut caught_up = Some(caught_up);
    while !shutdown.is_cancelled() {
        match follow_once(kafka, service, keys, metrics, shutdown, &mut apply, &mut caught_up) {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(error = %error, topic = %kafka.control_topic, "cannot read the control topic; route pauses are not followed until it can be read");
                let deadline = std::time::Instant::now() + RETRY_INTERVAL;
                while !shutdown.is_cancelled() && std::time::Instant::now() < deadline {
                    std::thread::sleep(POLL_INTERVAL);
                }
            }
        }
    }
}

fn follow_once(
    kafka: &KafkaConfig,
    service: &str,
    keys: &RecordKeys,
    metrics: &Metrics,
    shutdown: &CancellationToken,
    apply: &mut impl FnMut(RoutePause),
    caught_up: &mut Option<impl FnOnce()>,
) -> Result<(), KafkaError> {
    let consumer: BaseConsumer<QuietContext> =
        assignment_reader_config(kafka, &[]).create_with_context(QuietContext::new("control"))?;
    let topic = kafka.control_topic.as_str();
    ensure_control_topic(kafka)?;
    // Where the topic ends now, per partition: read up to there, the service knows every pause made before it.
    let mut start = ReadFromStart::assign(&consumer, topic, METADATA_TIMEOUT)?;
    // Read anew on each (re)connection: the topic from its start gives every route's state.
    let mut book = PauseBook::default();
    let mut log = RefusalLog::default();
    while !shutdown.is_cancelled() {
        if start.passed()
            && let Some(caught_up) = caught_up.take()
        {
            caught_up();
        }
        let Some(message) = consumer.poll(POLL_INTERVAL) else {
            start.idle(&consumer);
            continue;
        };
        let message = match message {
            Ok(message) => message,
            // Transient (a broker restarting): librdkafka reconnects by itself.
            Err(error) => {
                tracing::debug!(error = %error, "control topic fetch");
                continue;
            }
        };
        start.read(message.partition(), message.offset());
        let (partition, offset) = (message.partition(), message.offset());
        let key = message.key().unwrap_or_default();
        let now = now_ms();
        let verdict =
            keys.verify_as(RecordKind::Control, topic, message.key(), message.payload(), message.headers(), now);
        if !matches!(verdict, Verdict::Authentic { .. }) {
            // A tombstone lands here too (no MAC): the state it would erase after compaction stays held.
            book.read(key, None, now);
            metrics.control_refused.with_label_values(&["unauthenticated"]).inc();
            log.refused(partition, offset, "unauthenticated", verdict.label());
            continue;
        }
        let Some(pause) = RoutePause::decode(key, message.payload().unwrap_or_default()) else {
            book.read(key, None, now);
            metrics.control_refused.with_label_values(&["malformed"]).inc();
            log.refused(partition, offset, "malformed", verdict.label());
            continue;
        };
        let ours = pause.service == service;
        match book.read(key, Some(pause), now) {
            Read::Applied(pause) if ours => apply(pause),
            Read::Stale if ours => {
                metrics.control_refused.with_label_values(&["stale"]).inc();
                log.refused(partition, offset, "stale", verdict.label());
            }
            Read::Applied(_) | Read::Stale | Read::Again | Read::Ignored => {}
        }
    }
    Ok(())
}
