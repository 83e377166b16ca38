//! Operators' instructions to this service, from the control topic ([`hookline_common::control`]): today, which
//! routes are paused. Every consumer reads the whole (compacted, small) topic from its start and then follows it,
//! so every instance of a service obeys a pause within a poll interval, including one started later; nothing is
//! kept in one process.
//!
//! A control record is applied only when its record MAC verifies with one of the service's keys (an unsigned one
//! never, whatever the upgrade window for unsigned inbound records): whoever may write the topic without holding
//! a record key cannot pause or resume a route. What is refused is counted
//! (`hookline_consumer_control_records_refused_total`) and logged, never applied.

use std::time::Duration;

use hookline_common::{
    config::KafkaConfig,
    control::{RoutePause, ensure_control_topic},
    kafka::{QuietContext, assignment_reader_config, partitions_of},
    record_auth::{RecordKeys, Verdict},
    wire::now_ms,
};
use rdkafka::{
    Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// How long one poll waits: a pause reaches a running instance within about this plus the broker's fetch wait.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How long to wait before asking again for a control topic that cannot be read.
const RETRY_INTERVAL: Duration = Duration::from_secs(5);
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

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
    let partitions = partitions_of(&consumer, topic, METADATA_TIMEOUT)?;
    let mut assignment = TopicPartitionList::new();
    // Where the topic ends now, per partition: read up to there, the service knows every pause made before it.
    let mut behind = Vec::new();
    for &partition in &partitions {
        assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
        let (low, high) = consumer.fetch_watermarks(topic, partition, METADATA_TIMEOUT)?;
        if high > low {
            behind.push((partition, high));
        }
    }
    consumer.assign(&assignment)?;
    while !shutdown.is_cancelled() {
        if behind.is_empty()
            && let Some(caught_up) = caught_up.take()
        {
            caught_up();
        }
        let Some(message) = consumer.poll(POLL_INTERVAL) else {
            // The end may be a record compaction removed, or a transaction marker: passed once the position is.
            if !behind.is_empty()
                && let Ok(positions) = consumer.position()
            {
                behind.retain(|&(partition, end)| {
                    positions.find_partition(topic, partition).is_none_or(|element| match element.offset() {
                        Offset::Offset(next) => next < end,
                        _ => true,
                    })
                });
            }
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
        behind.retain(|&(partition, end)| partition != message.partition() || message.offset() + 1 < end);
        let verdict = keys.verify(topic, message.key(), message.payload(), message.headers(), now_ms());
        if !matches!(verdict, Verdict::Authentic { .. }) {
            metrics.control_refused.with_label_values(&["unauthenticated"]).inc();
            tracing::error!(
                partition = message.partition(),
                offset = message.offset(),
                outcome = verdict.label(),
                "control record refused: its MAC does not verify with this service's keys; not applied"
            );
            continue;
        }
        let Some(pause) = RoutePause::decode(message.key().unwrap_or_default(), message.payload().unwrap_or_default())
        else {
            metrics.control_refused.with_label_values(&["malformed"]).inc();
            tracing::warn!(
                partition = message.partition(),
                offset = message.offset(),
                "control record not understood; not applied"
            );
            continue;
        };
        if pause.service == service {
            apply(pause);
        }
    }
    Ok(())
}
