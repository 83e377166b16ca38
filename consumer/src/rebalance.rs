//! The consumer's client context: what happens at a rebalance. On assign, each partition's librdkafka queue is
//! split off before librdkafka fetches it (its reader, in [`crate::fetch`], starts next); on revoke, the
//! partition's reader stops, nothing of it starts any more, the records in the handler get a bounded wait, and the
//! stored prefix is committed before the partition goes.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, OnceLock, Weak},
    time::{Duration, Instant},
};

use hookline_common::kafka::QuietContext;
use rdkafka::{
    ClientContext, Statistics, TopicPartitionList,
    config::RDKafkaLogLevel,
    consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer},
    error::KafkaError,
    types::RDKafkaRespErr,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::{
    fetch_stats,
    schedule::{PartitionKey, Scheduler},
};

pub(crate) type GroupConsumer = StreamConsumer<GroupContext>;
pub(crate) type SplitQueue = rdkafka::consumer::stream_consumer::StreamPartitionQueue<GroupContext>;

/// The scheduler, shared by the fetch loop, the readers, the record tasks and the rebalance callbacks.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) scheduler: Mutex<Scheduler>,
    /// Wakes the fetch loop: a record was admitted, a job completed, or partitions were assigned.
    pub(crate) notify: Notify,
    pub(crate) revoke_wait: Duration,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Scheduler> {
        self.scheduler.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A partition read from its own queue.
pub(crate) struct Reader {
    pub(crate) queue: Arc<SplitQueue>,
    /// Cancelled when the partition is revoked (or at shutdown): the reader ends and admits nothing more.
    pub(crate) stop: CancellationToken,
    /// Told when the partition's window has room again.
    pub(crate) room: Arc<Notify>,
}

#[derive(Default)]
pub(crate) struct Splits {
    pub(crate) readers: HashMap<PartitionKey, Reader>,
    /// Split in the assign callback, their reader task not started yet.
    pub(crate) unstarted: Vec<PartitionKey>,
}

/// The consumer's client context: librdkafka logs through [`QuietContext`] and its statistics through
/// [`fetch_stats`], rebalances through the scheduler. On assign: each partition's queue is split off (before
/// librdkafka fetches it), and each partition starts with an empty window, resumed (a pause from an earlier
/// assignment must not survive it). On revoke: its reader stops, nothing of the revoked partitions starts any
/// more, their queued records are dropped, the ones in the handler get a bounded wait, and the stored prefix is
/// committed before the partitions go.
pub(crate) struct GroupContext {
    quiet: QuietContext,
    pub(crate) shared: Arc<Shared>,
    /// The consumer itself, to split queues with; set once it exists (weak: the consumer owns this context).
    consumer: OnceLock<Weak<GroupConsumer>>,
    splits: Mutex<Splits>,
}

impl GroupContext {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            quiet: QuietContext::new("consumer"),
            shared,
            consumer: OnceLock::new(),
            splits: Mutex::new(Splits::default()),
        }
    }

    /// Lets the assign callback split partition queues: call once, right after creating the consumer.
    pub(crate) fn attach(&self, consumer: &Arc<GroupConsumer>) {
        let _ = self.consumer.set(Arc::downgrade(consumer));
    }

    pub(crate) fn splits(&self) -> MutexGuard<'_, Splits> {
        self.splits.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stops every reader and lets go of every queue (they hold the consumer: a queue left here would keep it from
    /// closing). At shutdown; each reader lets go of its own queue as its task ends.
    pub(crate) fn stop_readers(&self) {
        let mut splits = self.splits();
        for reader in splits.readers.values() {
            reader.stop.cancel();
        }
        splits.readers.clear();
        splits.unstarted.clear();
    }
}

/// Stops every reader when dropped: at shutdown, and when the consumer's future is dropped without one (a task
/// aborted), when readers left running would keep the consumer alive, and in its group, through their queues.
pub(crate) struct ReadersGuard(pub(crate) Arc<GroupConsumer>);

impl Drop for ReadersGuard {
    fn drop(&mut self) {
        self.0.context().stop_readers();
    }
}

impl ClientContext for GroupContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.quiet.log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.quiet.error(error, reason);
    }

    fn stats(&self, statistics: Statistics) {
        fetch_stats::log(&statistics);
    }
}

fn partitions_of(list: &TopicPartitionList) -> Vec<PartitionKey> {
    list.elements().iter().map(|element| (element.topic().to_owned(), element.partition())).collect()
}

impl ConsumerContext for GroupContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, partitions: &mut TopicPartitionList) {
        hookline_common::kafka::rebalance_cooperatively(self, consumer, err, partitions);
    }

    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => self.split(list),
            Rebalance::Revoke(list) => self.revoke(consumer, list),
            Rebalance::Error(_) => {}
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Assign(list) = rebalance else { return };
        if list.count() == 0 {
            return;
        }
        self.shared.lock().assign(partitions_of(list));
        if let Err(error) = consumer.resume(list) {
            tracing::debug!(error = %error, "resume on assign");
        }
        tracing::info!(partitions = list.count(), "partitions assigned");
        self.shared.notify.notify_one();
    }
}

impl GroupContext {
    /// Splits the queues of partitions about to be assigned, before librdkafka starts fetching them.
    fn split(&self, list: &TopicPartitionList) {
        let Some(consumer) = self.consumer.get().and_then(Weak::upgrade) else { return };
        let mut splits = self.splits();
        for partition in partitions_of(list) {
            // An eager rebalance lists partitions this member keeps: they keep their reader.
            if splits.readers.contains_key(&partition) {
                continue;
            }
            match consumer.split_partition_queue(&partition.0, partition.1) {
                Some(queue) => {
                    let reader = Reader {
                        queue: Arc::new(queue),
                        stop: CancellationToken::new(),
                        room: Arc::new(Notify::new()),
                    };
                    splits.readers.insert(partition.clone(), reader);
                    splits.unstarted.push(partition);
                }
                None => tracing::warn!(
                    topic = %partition.0,
                    partition = partition.1,
                    "cannot read the partition from its own queue: read with the others, paused when its window is full"
                ),
            }
        }
    }

    fn revoke(&self, consumer: &BaseConsumer<Self>, list: &TopicPartitionList) {
        let partitions = partitions_of(list);
        // Stopped before the scheduler forgets them: a reader checks its stop under the scheduler's lock.
        let stopped: Vec<Arc<SplitQueue>> = {
            let mut splits = self.splits();
            splits.unstarted.retain(|partition| !partitions.contains(partition));
            partitions
                .iter()
                .filter_map(|partition| splits.readers.remove(partition))
                .map(|reader| {
                    reader.stop.cancel();
                    reader.queue
                })
                .collect()
        };
        self.shared.lock().revoke(&partitions);
        // This callback runs inside the fetch loop's poll. Record tasks and readers run on the other worker
        // threads; on a current-thread runtime they cannot run until this returns, so waiting would only delay.
        let can_wait = tokio::runtime::Handle::try_current()
            .is_ok_and(|handle| handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread);
        let started = Instant::now();
        while can_wait && started.elapsed() < self.shared.revoke_wait {
            // A stopped reader lets go of its queue: dropping the last handle here, before the partition can be
            // assigned and split again, keeps it from disabling the new handle's wake-ups.
            let readers_gone = stopped.iter().all(|queue| Arc::strong_count(queue) == 1);
            if readers_gone && self.shared.lock().running_in(&partitions) == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let abandoned = self.shared.lock().running_in(&partitions);
        self.shared.lock().forget(&partitions);
        drop(stopped);
        tracing::info!(partitions = partitions.len(), abandoned, "partitions revoked");
        // Offsets are stored as each prefix grows; commit them now, before the new owner fetches.
        if let Err(error) = consumer.commit_consumer_state(CommitMode::Sync) {
            tracing::debug!(error = %error, "commit on revoke");
        }
    }
}
