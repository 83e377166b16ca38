//! The fetch side of the consumer: each assigned partition is read from its own librdkafka queue
//! (`split_partition_queue`) by a reader task that reads only while the partition's window has room, and every
//! fetched record is taken into the scheduler here ([`Intake::take`]).
//!
//! Why not `pause()`: librdkafka throws away everything it had prefetched for a partition when it is paused, and
//! fetches it again from the application's position on resume. With one shared consumer queue and a deep backlog,
//! a window that filled and emptied every few hundred milliseconds paid a fetch, a decompression and a parse of up
//! to `fetch.message.max.bytes` per resume, most of it thrown away at the next pause (docs/benchmarks/consumer.md,
//! "A large backlog"). A reader that simply stops reading leaves its records queued in librdkafka, whose fetcher
//! stops by itself once the partition's own queue holds `queued.min.messages` records or
//! `queued.max.messages.kbytes` (per partition once its queue is split off), and resumes `fetch.queue.backoff.ms`
//! later: nothing is discarded, and prefetch stays bounded per partition. Those thresholds are checked before a
//! fetch, and a fetch's limits are in compressed bytes: what one fetch adds is bounded by `fetch.max.bytes`
//! ([`bound_prefetch`]).
//!
//! The queue of a partition is split off in the assign callback *before* librdkafka starts fetching it, so none of
//! its records ever lands in the consumer's main queue (librdkafka does not re-forward a queue the application
//! split), and one reader at a time admits its records, in offset order. A reader stops for good when its
//! partition is revoked; its stop is checked under the scheduler's lock, so a record it fetched before the revoke
//! is never admitted into a later assignment's window. A partition whose queue could not be split is read from the
//! main queue and flow-controlled with `pause()` as before.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hookline_common::wire::{FetchedRecord, now_ms};
use rdkafka::{
    ClientConfig, Message, TopicPartitionList, consumer::Consumer, error::KafkaError, message::BorrowedMessage,
};
use tokio::sync::Notify;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument;

use crate::{
    config::ConsumerConfig,
    metrics::{self, Metrics},
    pipeline::Pipeline,
    rebalance::{GroupConsumer, Shared, SplitQueue},
    record::Record,
    schedule::{Admission, PartitionKey},
    service::{self, ServiceTopics},
};

/// At most one line per kind of outage failure (fetch, Redis, a produce retried) per interval; metrics count all.
pub const OUTAGE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// librdkafka re-checks a partition whose queue was over its thresholds after this long. Its default (1 s) made
/// a partition whose reader had stopped wait a whole second after its reader went on, and with split queues a
/// partition reaches its thresholds all the time.
const FETCH_QUEUE_BACKOFF_MS: &str = "10";
/// A reader re-polls its queue at least this often: a split queue wakes its reader through an edge-triggered
/// callback, and a lost wake-up must not stall the partition (rust-rdkafka #840).
const LOST_WAKEUP_POLL: Duration = Duration::from_millis(250);
/// A reader waiting for room looks again at least this often, whatever it was told.
const ROOM_RECHECK: Duration = Duration::from_millis(200);

/// librdkafka's prefetch, bounded per partition from `processing`: a partition is fetched only while its queue holds
/// under a window of records and `partition_prefetch_bytes`, and one fetch response carries at most
/// `fetch_max_bytes` compressed for all its partitions together (a first batch larger comes alone), so the fetch that
/// takes a queue over its threshold adds at most 255 x that decompressed ([`crate::memory`]). librdkafka refuses a
/// `fetch.max.bytes` below `message.max.bytes`, which sizes nothing else a consumer sends: it is lowered with it.
/// Settings the operator put in `kafka.properties` win, and stay consistent: an operator's `message.max.bytes` above
/// `fetch_max_bytes` raises the fetch to it, an operator's `fetch.max.bytes` lowers `message.max.bytes` under it.
pub(crate) fn bound_prefetch(client_config: &mut ClientConfig, config: &ConsumerConfig) {
    let processing = &config.processing;
    let properties = &config.kafka.properties;
    let operator = |key: &str| properties.get(key).and_then(|value| value.trim().parse::<usize>().ok());
    let fetch_max = operator("fetch.max.bytes")
        .unwrap_or_else(|| processing.fetch_max_bytes.max(operator("message.max.bytes").unwrap_or(0)));
    let settings = [
        ("queued.min.messages", processing.partition_window.max(1).to_string()),
        ("queued.max.messages.kbytes", (processing.partition_prefetch_bytes / 1024).max(1).to_string()),
        ("message.max.bytes", processing.fetch_max_bytes.min(fetch_max).to_string()),
        ("fetch.max.bytes", fetch_max.to_string()),
        ("fetch.message.max.bytes", fetch_max.to_string()),
        ("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS.to_owned()),
    ];
    for (key, value) in settings {
        if !properties.contains_key(key) {
            client_config.set(key, value);
        }
    }
}

/// Takes fetched records into the scheduler: the fetch loop's main queue and every partition's reader.
pub(crate) struct Intake {
    pub(crate) shared: Arc<Shared>,
    pub(crate) consumer: Arc<GroupConsumer>,
    pub(crate) metrics: Metrics,
    pub(crate) pipeline: Pipeline,
    pub(crate) topics: ServiceTopics,
    pub(crate) service: String,
    pub(crate) outage_log: Arc<hookline_common::telemetry::LogThrottle>,
}

/// The reader a record came through: its partition, and its stop.
struct Via<'a> {
    partition: &'a PartitionKey,
    stop: &'a CancellationToken,
}

impl Intake {
    /// Takes one record fetched from the main queue (a partition whose queue could not be split).
    pub(crate) fn take_from_main(&self, message: &BorrowedMessage<'_>) {
        self.take(message, Arc::from(message.topic()), None);
    }

    /// The door: copies `message` out of librdkafka and parses it once into a [`Record`] the scheduler admits (or
    /// passes it on, when it is addressed to another service), applies the pauses that follow and wakes the fetch
    /// loop; true when the reader `via` may read on (its partition's window has room). `topic` is the record's
    /// topic name, shared by its partition's records.
    fn take(&self, message: &BorrowedMessage<'_>, topic: Arc<str>, via: Option<Via<'_>>) -> bool {
        self.metrics.consumed.inc();
        let fetched = FetchedRecord::copy_of(message, topic);
        let admitted = if service::addressed_elsewhere(fetched.headers(), &self.service) {
            // Its source label only from a record whose MAC verifies: anyone who can write the topic could
            // otherwise grow the label set without bound.
            let verdict = self.pipeline.authenticate(&fetched, self.topics.record_kind(fetched.topic()));
            let source = service::passed_source_label(fetched.headers(), &verdict);
            self.metrics.events.with_label_values(&[&source, metrics::event_outcome::OTHER_SERVICE]).inc();
            None
        } else {
            // The MAC is checked once, here; the record carries the verdict to the pipeline.
            let kind = self.topics.record_kind(fetched.topic());
            let record = Record::parse(fetched, |fetched| self.pipeline.authenticate(fetched, kind));
            let admission = admission_of(&record, &self.topics);
            Some((Box::new(record), admission))
        };
        let mut scheduler = self.shared.lock();
        // Under the lock, so that a revoke (which stops the reader first) and this admission are ordered.
        if via.as_ref().is_some_and(|via| via.stop.is_cancelled()) {
            return false;
        }
        match admitted {
            Some((record, admission)) => {
                if !scheduler.admit(record, admission, now_ms()) {
                    self.metrics.dropped.inc();
                }
            }
            None => {
                // Addressed elsewhere: handled as it arrives, so it holds nothing back.
                let partition = (message.topic().to_owned(), message.partition());
                if let Some(prefix_end) = scheduler.pass(&partition, message.offset()) {
                    // Under the lock, like every stored prefix, so that it never moves backwards.
                    if let Err(error) = self.consumer.store_offset(&partition.0, partition.1, prefix_end) {
                        tracing::debug!(error = %error, partition = partition.1, "cannot store offset");
                    }
                }
            }
        }
        let changes = scheduler.pause_changes();
        let room = via.as_ref().is_some_and(|via| !scheduler.is_paused(via.partition));
        drop(scheduler);
        self.apply(changes);
        self.shared.notify.notify_one();
        room
    }

    /// Counts and (rate-limited) logs an error the fetch loop or a reader received.
    pub(crate) fn fetch_failed(&self, error: &KafkaError) {
        // Transient (a broker down or restarting): librdkafka reconnects by itself. Each error is an event in the
        // same queue as the records and the rebalance callbacks, and librdkafka queues them faster than one per
        // 200 ms while no broker answers: sleeping here let a backlog build that delayed the first assignment by
        // the length of the outage. So: count, log a summary at most once per interval, and read on at once.
        self.metrics.fetch_errors.inc();
        if let Some(held_back) = self.outage_log.admit("fetch failed", Instant::now()) {
            tracing::warn!(
                error = %error,
                held_back,
                interval_s = OUTAGE_LOG_INTERVAL.as_secs(),
                "fetch failed (rate-limited log; hookline_consumer_fetch_errors_total counts every one)"
            );
        }
    }

    /// Pauses partitions whose window is full and resumes those with room again: a partition with a reader by
    /// telling its reader, one read from the main queue through librdkafka's pause and resume.
    pub(crate) fn apply_pauses(&self) {
        let changes = self.shared.lock().pause_changes();
        self.apply(changes);
    }

    fn apply(&self, (pause, resume): (Vec<PartitionKey>, Vec<PartitionKey>)) {
        if pause.is_empty() && resume.is_empty() {
            return;
        }
        let context = self.consumer.context();
        let splits = context.splits();
        let pause: Vec<PartitionKey> =
            pause.into_iter().filter(|partition| !splits.readers.contains_key(partition)).collect();
        let resume: Vec<PartitionKey> = resume
            .into_iter()
            .filter(|partition| match splits.readers.get(partition) {
                Some(reader) => {
                    reader.room.notify_one();
                    false
                }
                None => true,
            })
            .collect();
        drop(splits);
        for (partitions, paused) in [(pause, true), (resume, false)] {
            if partitions.is_empty() {
                continue;
            }
            let mut list = TopicPartitionList::new();
            for (topic, partition) in &partitions {
                list.add_partition(topic, *partition);
            }
            let result = if paused { self.consumer.pause(&list) } else { self.consumer.resume(&list) };
            if let Err(error) = result {
                tracing::warn!(error = %error, paused, "cannot pause or resume partitions");
            }
        }
    }

    /// Starts a reader task for every partition split since the last call.
    pub(crate) fn start_readers(self: &Arc<Self>, readers: &TaskTracker) {
        let context = self.consumer.context();
        let mut splits = context.splits();
        for partition in std::mem::take(&mut splits.unstarted) {
            let Some(reader) = splits.readers.get(&partition) else { continue };
            let (queue, stop, room) = (reader.queue.clone(), reader.stop.clone(), reader.room.clone());
            readers.spawn(self.clone().read(partition, queue, stop, room).in_current_span());
        }
    }

    /// Reads one partition's queue while its window has room, until stopped.
    async fn read(
        self: Arc<Self>,
        partition: PartitionKey,
        queue: Arc<SplitQueue>,
        stop: CancellationToken,
        room: Arc<Notify>,
    ) {
        let mut has_room = !self.shared.lock().is_paused(&partition);
        let topic: Arc<str> = Arc::from(partition.0.as_str());
        loop {
            if !has_room {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = room.notified() => {}
                    () = tokio::time::sleep(ROOM_RECHECK) => {}
                }
                has_room = !self.shared.lock().is_paused(&partition);
                continue;
            }
            // A record already queued is taken without arming a timer; an empty queue is waited on.
            let received = match futures_util::FutureExt::now_or_never(queue.recv()) {
                Some(received) => Ok(received),
                None => tokio::select! {
                    () = stop.cancelled() => return,
                    received = tokio::time::timeout(LOST_WAKEUP_POLL, queue.recv()) => received,
                },
            };
            match received {
                // Nothing within the interval: poll again (a wake-up may have been lost).
                Err(_) => {}
                Ok(Ok(message)) => {
                    let via = Via { partition: &partition, stop: &stop };
                    has_room = self.take(&message, topic.clone(), Some(via));
                }
                Ok(Err(error)) => self.fetch_failed(&error),
            }
        }
    }
}

/// What the scheduler needs of it. A record without hookline's MAC gets no route of its own and no due
/// time: whatever its headers claim, it only goes to the pipeline, which dead-letters it. A record no gateway
/// wrote gets no source (dead-lettered as poison on the `unknown` route). A record of a retry topic waits until
/// its due time.
fn admission_of(record: &Record, topics: &ServiceTopics) -> Admission {
    if !record.verdict.accepted() {
        return Admission::default();
    }
    let retry = record.retry.as_ref().filter(|_| topics.is_retry(record.fetched.topic()));
    let (due_at_ms, first_failure_at_ms, attempts) = match retry {
        Some(retry) => (Some(retry.due_at_ms), Some(retry.attempts.first_failure_at_ms), Some(retry.attempts.clone())),
        None => (None, None, None),
    };
    match &record.event {
        Ok(event) => Admission {
            source: Some(event.meta.source.clone()),
            event_type: event.meta.event_type.clone(),
            ordering_key: event.meta.ordering_key.clone(),
            due_at_ms,
            first_failure_at_ms,
            attempts,
            destination: event.destination.clone(),
        },
        Err(_) => Admission { due_at_ms, first_failure_at_ms, attempts, ..Admission::default() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounded(properties: &[(&str, &str)]) -> ClientConfig {
        let mut config = ConsumerConfig::default();
        for (key, value) in properties {
            config.kafka.properties.insert((*key).to_owned(), (*value).to_owned());
        }
        let mut client_config = ClientConfig::new();
        bound_prefetch(&mut client_config, &config);
        client_config
    }

    #[test]
    fn a_fetch_response_is_bounded_in_compressed_bytes_for_every_partition_together() {
        let client_config = bounded(&[]);
        let fetch_max = ConsumerConfig::default().processing.fetch_max_bytes.to_string();
        assert_eq!(client_config.get("fetch.max.bytes"), Some(fetch_max.as_str()));
        assert_eq!(client_config.get("fetch.message.max.bytes"), Some(fetch_max.as_str()));
        // librdkafka refuses a fetch.max.bytes below message.max.bytes.
        assert_eq!(client_config.get("message.max.bytes"), Some(fetch_max.as_str()));
        assert_eq!(client_config.get("queued.max.messages.kbytes"), Some("1024"));
    }

    #[test]
    fn an_operators_settings_win_and_stay_consistent_for_librdkafka() {
        let raised = bounded(&[("message.max.bytes", "1000000")]);
        assert_eq!(raised.get("message.max.bytes"), None, "the operator's, applied later");
        assert_eq!(raised.get("fetch.max.bytes"), Some("1000000"));
        let lowered = bounded(&[("fetch.max.bytes", "8192")]);
        assert_eq!(lowered.get("fetch.max.bytes"), None, "the operator's, applied later");
        assert_eq!(lowered.get("message.max.bytes"), Some("8192"));
    }
}
