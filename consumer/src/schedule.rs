//! Which fetched record starts next. The fetch loop never waits here: it admits every fetched record into its
//! partition's [`Window`] and a route's queue, and starts records while capacity allows:
//! - at most `processing.max_in_flight` records in the handler stage at once, across partitions;
//! - per route (a configured `[[routes]]` entry, or else the source), at most its `max_in_flight`, and at most
//!   `rate_per_s` starts per second: a slow or failing downstream holds only its own route's capacity. A record
//!   waiting for its route is simply not started; it holds no global capacity meanwhile;
//! - records with an ordering key wait for the record before them with the same key in the same partition;
//! - records not due yet (read back from the retry topic, or an ordered record waiting for its retry) wait in a
//!   timer list.
//!
//! A partition whose window holds `processing.partition_window` records is paused, so prefetch and memory stay
//! bounded while other partitions keep flowing. The scheduler is shared (behind a mutex) by the fetch loop, the
//! record tasks reporting completion, and the rebalance callbacks.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    time::{Duration, Instant},
};

use rdkafka::message::OwnedMessage;

use crate::{
    config::{ProcessingConfig, RouteConfig},
    pipeline::Attempts,
    window::Window,
};

/// A topic and partition.
pub type PartitionKey = (String, i32);

/// One record on its way through the handler stage.
#[derive(Debug)]
pub struct Job {
    pub message: OwnedMessage,
    pub partition: PartitionKey,
    generation: u64,
    route: usize,
    /// The ordering key: jobs of one partition with the same key run one after another, in offset order.
    chain: Option<String>,
    /// Handler attempts already made, for an ordered record retried in memory.
    pub prior: Option<Attempts>,
}

/// What the scheduler needs to know of a fetched record.
#[derive(Debug)]
pub struct Admission {
    pub source: Option<String>,
    pub event_type: Option<String>,
    pub ordering_key: Option<String>,
    /// Not before this time (ms since the epoch): a record read back from the retry topic.
    pub due_at_ms: Option<i64>,
}

/// What became of a started job.
#[derive(Debug)]
pub enum Completion {
    /// Fully handled: its offset may join the prefix.
    Handled,
    /// Shutdown interrupted it: leave the offset for redelivery.
    Interrupted,
    /// An ordered record to retry at this time, keeping its place at the head of its key.
    RetryAt { due_at_ms: i64, attempts: Attempts },
}

/// The route a record belongs to: a configured route, or its source.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum RouteKey {
    Configured(usize),
    Source(String),
}

#[derive(Debug)]
struct RouteRule {
    source: String,
    event_types: Option<HashSet<String>>,
    max_in_flight: usize,
    rate_per_s: Option<f64>,
}

#[derive(Debug)]
struct RouteState {
    queue: VecDeque<Job>,
    running: usize,
    max_in_flight: usize,
    bucket: Option<TokenBucket>,
}

/// Starts per second, with a burst of one second's worth.
#[derive(Debug)]
struct TokenBucket {
    rate_per_s: f64,
    tokens: f64,
    refilled_at: Instant,
}

impl TokenBucket {
    fn new(rate_per_s: f64, now: Instant) -> Self {
        Self { rate_per_s, tokens: rate_per_s.max(1.0), refilled_at: now }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled_at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate_per_s).min(self.rate_per_s.max(1.0));
        self.refilled_at = now;
    }

    /// How long until a start is allowed (zero: now).
    fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 { Duration::ZERO } else { Duration::from_secs_f64((1.0 - self.tokens) / self.rate_per_s) }
    }

    fn take(&mut self) {
        self.tokens -= 1.0;
    }
}

#[derive(Debug)]
struct PartitionState {
    generation: u64,
    window: Window,
    /// Jobs of this partition in the handler stage.
    running: usize,
    paused: bool,
    /// Revoked: nothing more starts; kept only until its running jobs finish or the wait ends.
    revoked: bool,
}

/// A job waiting for its due time; `owns_chain` when it already holds its ordering key's turn.
#[derive(Debug)]
struct Delayed {
    job: Job,
    owns_chain: bool,
}

#[derive(Debug)]
pub struct Scheduler {
    max_in_flight: usize,
    partition_window: usize,
    default_route_max_in_flight: usize,
    rules: Vec<RouteRule>,
    partitions: HashMap<PartitionKey, PartitionState>,
    routes: Vec<RouteState>,
    route_index: HashMap<RouteKey, usize>,
    /// Per (partition, ordering key) with a job queued, delayed or running: the jobs waiting behind it.
    chains: HashMap<(PartitionKey, String), VecDeque<Job>>,
    delayed: BTreeMap<(i64, u64), Delayed>,
    running: usize,
    next_generation: u64,
    next_sequence: u64,
    /// Where the round-robin over routes starts next, so no route starves the others.
    cursor: usize,
}

impl Scheduler {
    pub fn new(processing: &ProcessingConfig, routes: &[RouteConfig]) -> Self {
        let default_route_max_in_flight = processing.route_max_in_flight.min(processing.max_in_flight);
        Self {
            max_in_flight: processing.max_in_flight,
            partition_window: processing.partition_window,
            default_route_max_in_flight,
            rules: routes
                .iter()
                .map(|route| RouteRule {
                    source: route.source.clone(),
                    event_types: route.event_types.as_ref().map(|types| types.iter().cloned().collect()),
                    max_in_flight: route.max_in_flight.unwrap_or(default_route_max_in_flight),
                    rate_per_s: route.rate_per_s,
                })
                .collect(),
            partitions: HashMap::new(),
            routes: Vec::new(),
            route_index: HashMap::new(),
            chains: HashMap::new(),
            delayed: BTreeMap::new(),
            running: 0,
            next_generation: 0,
            next_sequence: 0,
            cursor: 0,
        }
    }

    /// Partitions newly assigned: each starts with an empty window.
    pub fn assign(&mut self, partitions: impl IntoIterator<Item = PartitionKey>) {
        for partition in partitions {
            self.next_generation += 1;
            let state = PartitionState {
                generation: self.next_generation,
                window: Window::default(),
                running: 0,
                paused: false,
                revoked: false,
            };
            self.partitions.insert(partition, state);
        }
    }

    /// Partitions being revoked: nothing of theirs starts any more, and their queued, delayed and waiting jobs
    /// are dropped (the next owner fetches them again from the committed offset).
    pub fn revoke(&mut self, partitions: &[PartitionKey]) {
        let revoked: HashSet<&PartitionKey> = partitions.iter().collect();
        for partition in partitions {
            if let Some(state) = self.partitions.get_mut(partition) {
                state.revoked = true;
            }
        }
        for route in &mut self.routes {
            route.queue.retain(|job| !revoked.contains(&job.partition));
        }
        self.chains.retain(|(partition, _), _| !revoked.contains(partition));
        self.delayed.retain(|_, delayed| !revoked.contains(&delayed.job.partition));
    }

    /// Jobs of these partitions still in the handler stage.
    pub fn running_in(&self, partitions: &[PartitionKey]) -> usize {
        partitions.iter().filter_map(|partition| self.partitions.get(partition)).map(|state| state.running).sum()
    }

    /// Forgets revoked partitions: completions of their jobs that are still running change nothing.
    pub fn forget(&mut self, partitions: &[PartitionKey]) {
        for partition in partitions {
            self.partitions.remove(partition);
        }
    }

    /// Takes a fetched record into its partition's window and queues it. False when it is not ours (its
    /// partition is not assigned, or revoked) or a re-fetch: then it is dropped.
    pub fn admit(&mut self, message: OwnedMessage, admission: Admission, now_ms: i64) -> bool {
        use rdkafka::Message;
        let partition = (message.topic().to_owned(), message.partition());
        let Some(state) = self.partitions.get_mut(&partition) else { return false };
        if state.revoked || !state.window.admit(message.offset()) {
            return false;
        }
        let generation = state.generation;
        let route = self.route_for(admission.source.as_deref(), admission.event_type.as_deref());
        let job = Job { message, partition, generation, route, chain: admission.ordering_key, prior: None };
        match admission.due_at_ms {
            Some(due_at_ms) if due_at_ms > now_ms => self.delay(job, due_at_ms, false),
            _ => self.enqueue(job),
        }
        true
    }

    /// Queues a job that does not hold its key's turn yet.
    fn enqueue(&mut self, job: Job) {
        if let Some(key) = &job.chain {
            let chain_key = (job.partition.clone(), key.clone());
            if let Some(waiting) = self.chains.get_mut(&chain_key) {
                waiting.push_back(job);
                return;
            }
            self.chains.insert(chain_key, VecDeque::new());
        }
        let route = job.route;
        self.routes[route].queue.push_back(job);
    }

    fn delay(&mut self, job: Job, due_at_ms: i64, owns_chain: bool) {
        self.next_sequence += 1;
        self.delayed.insert((due_at_ms, self.next_sequence), Delayed { job, owns_chain });
    }

    /// Moves the jobs that are due into their route queues.
    pub fn release_due(&mut self, now_ms: i64) {
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let Delayed { job, owns_chain } = entry.remove();
            if owns_chain {
                let route = job.route;
                self.routes[route].queue.push_back(job);
            } else {
                self.enqueue(job);
            }
        }
    }

    /// The next job to start, if capacity allows; the caller must report it through [`Self::complete`].
    pub fn next_job(&mut self, now: Instant) -> Option<Job> {
        if self.running >= self.max_in_flight {
            return None;
        }
        let n_routes = self.routes.len();
        for step in 0..n_routes {
            let index = (self.cursor + step) % n_routes;
            let route = &mut self.routes[index];
            if route.queue.is_empty() || route.running >= route.max_in_flight {
                continue;
            }
            if let Some(bucket) = &mut route.bucket
                && !bucket.wait(now).is_zero()
            {
                continue;
            }
            let mut started = None;
            while let Some(job) = route.queue.pop_front() {
                let current = self
                    .partitions
                    .get_mut(&job.partition)
                    .filter(|state| state.generation == job.generation && !state.revoked);
                if let Some(state) = current {
                    state.running += 1;
                    started = Some(job);
                    break;
                }
                // Otherwise it was queued for an assignment that has ended: its next owner fetches it again.
            }
            let Some(job) = started else { continue };
            if let Some(bucket) = &mut route.bucket {
                bucket.take();
            }
            route.running += 1;
            self.running += 1;
            self.cursor = (index + 1) % n_routes;
            return Some(job);
        }
        None
    }

    /// A started job ended. Returns the offset to store for its partition when the prefix moved forward.
    pub fn complete(&mut self, job: Job, completion: Completion) -> Option<i64> {
        use rdkafka::Message;
        self.running -= 1;
        self.routes[job.route].running -= 1;
        let current = self.partitions.get_mut(&job.partition).filter(|state| state.generation == job.generation);
        let Some(state) = current else {
            // A job of a revoked partition, or of an earlier assignment of it: its new owner handles the record.
            return None;
        };
        state.running -= 1;
        let offset = job.message.offset();
        match completion {
            Completion::Handled => {
                let prefix_end = state.window.handled(offset);
                self.next_in_chain(&job);
                prefix_end
            }
            Completion::Interrupted => None,
            Completion::RetryAt { .. } if state.revoked => None,
            Completion::RetryAt { due_at_ms, attempts } => {
                let job = Job { prior: Some(attempts), ..job };
                self.delay(job, due_at_ms, true);
                None
            }
        }
    }

    /// Passes the key's turn to the next job waiting behind `job`.
    fn next_in_chain(&mut self, job: &Job) {
        let Some(key) = &job.chain else { return };
        let chain_key = (job.partition.clone(), key.clone());
        let next = self.chains.get_mut(&chain_key).and_then(VecDeque::pop_front);
        match next {
            Some(next) => {
                let route = next.route;
                self.routes[route].queue.push_back(next);
            }
            None => {
                self.chains.remove(&chain_key);
            }
        }
    }

    /// Partitions to pause (window full) and to resume (window down to half); marks them so. The gap between the
    /// two matters: librdkafka drops what it had prefetched for a paused partition and fetches again from the
    /// position on resume, so resuming at the first free slot would pay a fetch round trip per few records.
    pub fn pause_changes(&mut self) -> (Vec<PartitionKey>, Vec<PartitionKey>) {
        let (mut pause, mut resume) = (Vec::new(), Vec::new());
        for (partition, state) in &mut self.partitions {
            if state.revoked {
                continue;
            }
            let len = state.window.len();
            if len >= self.partition_window && !state.paused {
                state.paused = true;
                pause.push(partition.clone());
            } else if len <= self.partition_window / 2 && state.paused {
                state.paused = false;
                resume.push(partition.clone());
            }
        }
        (pause, resume)
    }

    /// How long until a delayed job is due or a rate-limited route may start again; `None`: nothing waits on
    /// time.
    pub fn next_wake(&mut self, now: Instant, now_ms: i64) -> Option<Duration> {
        let mut wake = self
            .delayed
            .first_key_value()
            .map(|((due_at_ms, _), _)| Duration::from_millis(u64::try_from(due_at_ms - now_ms).unwrap_or(0)));
        for route in &mut self.routes {
            if route.queue.is_empty() || route.running >= route.max_in_flight {
                continue;
            }
            if let Some(bucket) = &mut route.bucket {
                let wait = bucket.wait(now).max(Duration::from_millis(1));
                wake = Some(wake.map_or(wait, |current| current.min(wait)));
            }
        }
        wake
    }

    /// Records in the handler stage, across partitions.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Records fetched and not yet committed, across partitions.
    pub fn windowed(&self) -> usize {
        self.partitions.values().map(|state| state.window.len()).sum()
    }

    fn route_for(&mut self, source: Option<&str>, event_type: Option<&str>) -> usize {
        let source = source.unwrap_or("unknown");
        let configured = self.rules.iter().position(|rule| {
            rule.source == source
                && rule.event_types.as_ref().is_none_or(|types| event_type.is_some_and(|t| types.contains(t)))
        });
        let key = match configured {
            Some(index) => RouteKey::Configured(index),
            None => RouteKey::Source(source.to_owned()),
        };
        if let Some(&index) = self.route_index.get(&key) {
            return index;
        }
        let (max_in_flight, rate_per_s) = match configured {
            Some(index) => (self.rules[index].max_in_flight, self.rules[index].rate_per_s),
            None => (self.default_route_max_in_flight, None),
        };
        self.routes.push(RouteState {
            queue: VecDeque::new(),
            running: 0,
            max_in_flight: max_in_flight.max(1),
            bucket: rate_per_s.map(|rate| TokenBucket::new(rate, Instant::now())),
        });
        let index = self.routes.len() - 1;
        self.route_index.insert(key, index);
        index
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::{Message, Timestamp, message::OwnedMessage};

    use super::*;

    fn config(max_in_flight: usize, route_max_in_flight: usize) -> ProcessingConfig {
        ProcessingConfig { max_in_flight, route_max_in_flight, partition_window: 4, ..ProcessingConfig::default() }
    }

    fn record(partition: i32, offset: i64) -> OwnedMessage {
        OwnedMessage::new(None, None, "t".to_owned(), Timestamp::NotAvailable, partition, offset, None)
    }

    fn admission(source: &str, ordering_key: Option<&str>) -> Admission {
        Admission {
            source: Some(source.to_owned()),
            event_type: None,
            ordering_key: ordering_key.map(str::to_owned),
            due_at_ms: None,
        }
    }

    #[test]
    fn many_records_of_one_partition_run_at_once_and_the_prefix_waits_for_the_head() {
        let mut scheduler = Scheduler::new(&config(8, 8), &[]);
        scheduler.assign([("t".to_owned(), 0)]);
        for offset in 0..3 {
            assert!(scheduler.admit(record(0, offset), admission("a", None), 0));
        }
        let jobs: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now())).collect();
        assert_eq!(jobs.len(), 3);
        let mut jobs = jobs.into_iter();
        let head = jobs.next().expect("head");
        assert_eq!(scheduler.complete(jobs.next().expect("1"), Completion::Handled), None);
        assert_eq!(scheduler.complete(jobs.next().expect("2"), Completion::Handled), None);
        assert_eq!(scheduler.complete(head, Completion::Handled), Some(2));
    }

    #[test]
    fn a_full_route_does_not_hold_back_another_route() {
        let mut scheduler = Scheduler::new(&config(4, 1), &[]);
        scheduler.assign([("t".to_owned(), 0)]);
        scheduler.admit(record(0, 0), admission("slow", None), 0);
        scheduler.admit(record(0, 1), admission("slow", None), 0);
        scheduler.admit(record(0, 2), admission("fast", None), 0);
        let started: Vec<i64> =
            std::iter::from_fn(|| scheduler.next_job(Instant::now())).map(|job| job.message.offset()).collect();
        assert_eq!(started, vec![0, 2], "the second `slow` record waits; `fast` starts");
        assert_eq!(scheduler.running(), 2);
    }

    #[test]
    fn same_key_records_run_one_after_another_in_offset_order() {
        let mut scheduler = Scheduler::new(&config(8, 8), &[]);
        scheduler.assign([("t".to_owned(), 0)]);
        scheduler.admit(record(0, 0), admission("a", Some("k")), 0);
        scheduler.admit(record(0, 1), admission("a", Some("k")), 0);
        scheduler.admit(record(0, 2), admission("a", Some("other")), 0);
        let first: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now())).collect();
        assert_eq!(first.iter().map(|job| job.message.offset()).collect::<Vec<_>>(), vec![0, 2]);
        let mut first = first.into_iter();
        let head = first.next().expect("head");
        let attempts = Attempts { attempts: 1, first_failure_at_ms: 0, last_error: "x".to_owned() };
        scheduler.complete(head, Completion::RetryAt { due_at_ms: 10, attempts });
        assert!(scheduler.next_job(Instant::now()).is_none(), "offset 1 waits for its key's head to be retried");
        scheduler.release_due(10);
        let retried = scheduler.next_job(Instant::now()).expect("the head again");
        assert_eq!(retried.message.offset(), 0);
        assert_eq!(retried.prior.as_ref().map(|prior| prior.attempts), Some(1));
        scheduler.complete(retried, Completion::Handled);
        assert_eq!(scheduler.next_job(Instant::now()).map(|job| job.message.offset()), Some(1));
    }

    #[test]
    fn a_full_window_pauses_its_partition_and_revoke_drops_what_is_queued() {
        let mut scheduler = Scheduler::new(&config(1, 1), &[]);
        scheduler.assign([("t".to_owned(), 0), ("t".to_owned(), 1)]);
        for offset in 0..4 {
            scheduler.admit(record(0, offset), admission("a", None), 0);
        }
        scheduler.admit(record(1, 0), admission("a", None), 0);
        let (pause, resume) = scheduler.pause_changes();
        assert_eq!(pause, vec![("t".to_owned(), 0)]);
        assert!(resume.is_empty());
        let running = scheduler.next_job(Instant::now()).expect("one starts");
        scheduler.revoke(&[("t".to_owned(), 0)]);
        assert_eq!(scheduler.running_in(&[("t".to_owned(), 0)]), 1);
        scheduler.forget(&[("t".to_owned(), 0)]);
        assert_eq!(scheduler.complete(running, Completion::Handled), None, "revoked: nothing stored");
        assert_eq!(scheduler.next_job(Instant::now()).map(|job| job.partition.1), Some(1));
        assert!(!scheduler.admit(record(0, 9), admission("a", None), 0), "a revoked partition's record is dropped");
    }
}
