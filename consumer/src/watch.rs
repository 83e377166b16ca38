//! Keeps `/readyz` and the lag gauges true while the consumer runs: broker and Redis reachable, the retry topic
//! present, partitions assigned, and the lag of each assigned partition of the inbound topic.

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use rdkafka::{Offset, consumer::Consumer};
use tokio_util::sync::CancellationToken;

use crate::{dedupe::Dedupe, metrics::Metrics, rebalance::GroupConsumer};

const WATCH_INTERVAL: Duration = Duration::from_secs(2);

pub(crate) struct Flags {
    pub(crate) kafka: Arc<AtomicBool>,
    pub(crate) redis: Arc<AtomicBool>,
    pub(crate) assigned: Arc<AtomicBool>,
    /// The retry topic exists: without it a retryable failure could not be parked (the record would wait).
    pub(crate) retry_topic: Arc<AtomicBool>,
}

pub(crate) struct Topics {
    pub(crate) inbound: String,
    pub(crate) retry: String,
}

/// Keeps `/readyz` and the lag gauges true: broker and Redis reachable, partitions assigned, lag per partition.
pub(crate) async fn watch(
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
