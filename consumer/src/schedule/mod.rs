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
//!
//! Routes share partitions, so a record waiting for its route holds its partition's commit prefix, and a full
//! window pauses the partition for every route. Two things keep one route from holding the others this way:
//! - **deferral**: a record of a saturated route (no free slot, or no rate token) whose partition is paused,
//!   while another route has room, is parked in the retry topic without spending an attempt ([`Work::Defer`]);
//!   its offset then counts as handled once the broker acknowledged it, and the prefix moves on;
//! - **a circuit breaker per route**: after `breaker_failures` consecutive retryable failures the route opens;
//!   its records are deferred to the breaker's next probe without calling the downstream; after the cool-down
//!   one record is let through as a probe, and its success closes the breaker.
//!
//! Records with an ordering key are never deferred (a copy in the retry topic would lose their place); they wait.
//! Nor is a record whose retry budget (`retry.max_total_ms` since its first failure or first deferral) is spent:
//! it gets one last handler call, whatever the breaker says, and its failure is dead-lettered.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    time::{Duration, Instant},
};

use hookline_common::record_auth::Verdict;
use rand::Rng;
use rdkafka::message::OwnedMessage;

use self::route::{BreakerState, Gate, RouteKey, RouteRule, RouteState};
use crate::{
    config::{ProcessingConfig, RetryConfig, RouteConfig},
    retry::Attempts,
    window::Window,
};

/// A topic and partition.
pub type PartitionKey = (String, i32);

/// How deep into a route's queue the scheduler looks for a job it may start or defer (ordered records and
/// records of other partitions can sit in front of it); bounds the work of one decision.
const QUEUE_SCAN: usize = 64;

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
    /// From the retry headers: when the event first failed or was first deferred (its retry budget's start).
    first_failure_at_ms: Option<i64>,
    /// Read back from the retry topic (it had a due time): already parked once, so an open breaker holds it here
    /// rather than copying it again ([`Scheduler::hold_parked`]).
    parked: bool,
    /// What to do with the record.
    pub work: Work,
    /// The one call let through a half-open breaker.
    probe: bool,
    /// The record's MAC as checked when it was fetched: the pipeline takes it rather than checking the same bytes
    /// again (one check is a third of the consumer's instructions per event). `None`: checked when processed.
    pub verdict: Option<Verdict>,
}

/// What a started job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Dedupe, handler, retries: the pipeline.
    Handle,
    /// Park the record in the retry topic until `due_at_ms`, spending no attempt, and count it handled once the
    /// broker acknowledged it.
    Defer { due_at_ms: i64, reason: DeferReason },
}

/// Why a record was deferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeferReason {
    /// Its route had no free slot while its partition was paused.
    Saturated,
    /// Its route's circuit breaker is open.
    BreakerOpen,
}

impl DeferReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Saturated => "saturated",
            Self::BreakerOpen => "breaker_open",
        }
    }
}

/// What a handled job tells its route's circuit breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Downstream {
    /// No handler call (a duplicate, a deferral, shutdown): nothing learnt.
    NotCalled,
    /// The handler answered: success, or a failure no retry can fix (the downstream is up).
    Answered,
    /// A retryable failure (5xx, timeout, connection refused).
    Failed,
}

/// What the scheduler needs to know of a fetched record.
#[derive(Debug, Default)]
pub struct Admission {
    pub source: Option<String>,
    pub event_type: Option<String>,
    pub ordering_key: Option<String>,
    /// Not before this time (ms since the epoch): a record read back from the retry topic.
    pub due_at_ms: Option<i64>,
    /// From the retry headers: when its retry budget started.
    pub first_failure_at_ms: Option<i64>,
    /// The record's MAC, checked once as it was fetched ([`Job::verdict`]).
    pub verdict: Option<Verdict>,
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
impl Job {
    /// Its retry budget is spent: no more deferrals, the next failure is dead-lettered.
    fn budget_spent(&self, now_ms: i64, max_total_ms: i64) -> bool {
        self.first_failure_at_ms.is_some_and(|first| now_ms.saturating_sub(first) >= max_total_ms)
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
    /// Bytes of the records in every window together: reached, every partition pauses.
    max_window_bytes: usize,
    default_route_max_in_flight: usize,
    default_breaker_failures: u32,
    default_breaker_cooldown_ms: u64,
    /// 0: no deferral of a saturated route's records.
    defer_delay_ms: u64,
    /// `retry.max_total_ms`: past it since its first failure or deferral, a record is no longer deferred.
    retry_max_total_ms: i64,
    rules: Vec<RouteRule>,
    partitions: HashMap<PartitionKey, PartitionState>,
    routes: Vec<RouteState>,
    route_index: HashMap<RouteKey, usize>,
    /// Per (partition, ordering key) with a job queued, delayed or running: the jobs waiting behind it.
    chains: HashMap<(PartitionKey, String), VecDeque<Job>>,
    delayed: BTreeMap<(i64, u64), Delayed>,
    running: usize,
    /// Deferrals in flight (retry-topic produces), apart from `running`: they take no handler capacity.
    deferring: usize,
    /// Breakers that opened (true) or closed (false) since the last call of [`Self::breaker_changes`].
    breaker_changes: Vec<(String, bool)>,
    next_generation: u64,
    next_sequence: u64,
    /// Where the round-robin over routes starts next, so no route starves the others.
    cursor: usize,
}

impl Scheduler {
    pub fn new(processing: &ProcessingConfig, routes: &[RouteConfig], retry: &RetryConfig) -> Self {
        let default_route_max_in_flight = processing.route_max_in_flight.min(processing.max_in_flight);
        Self {
            max_in_flight: processing.max_in_flight,
            partition_window: processing.partition_window,
            max_window_bytes: usize::try_from(processing.max_window_bytes).unwrap_or(usize::MAX),
            default_route_max_in_flight,
            default_breaker_failures: processing.breaker_failures,
            default_breaker_cooldown_ms: processing.breaker_cooldown_ms,
            defer_delay_ms: processing.defer_delay_ms,
            retry_max_total_ms: i64::try_from(retry.max_total_ms).unwrap_or(i64::MAX),
            rules: routes
                .iter()
                .map(|route| RouteRule {
                    source: route.source.clone(),
                    event_types: route.event_types.as_ref().map(|types| types.iter().cloned().collect()),
                    max_in_flight: route.max_in_flight.unwrap_or(default_route_max_in_flight),
                    rate_per_s: route.rate_per_s,
                    breaker_failures: route.breaker_failures.unwrap_or(processing.breaker_failures),
                    breaker_cooldown_ms: route.breaker_cooldown_ms.unwrap_or(processing.breaker_cooldown_ms),
                })
                .collect(),
            partitions: HashMap::new(),
            routes: Vec::new(),
            route_index: HashMap::new(),
            chains: HashMap::new(),
            delayed: BTreeMap::new(),
            running: 0,
            deferring: 0,
            breaker_changes: Vec::new(),
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
        if state.revoked || !state.window.admit(message.offset(), crate::window::record_bytes(&message)) {
            return false;
        }
        let generation = state.generation;
        let route = self.route_for(admission.source.as_deref(), admission.event_type.as_deref());
        let job = Job {
            message,
            partition,
            generation,
            route,
            chain: admission.ordering_key,
            prior: None,
            first_failure_at_ms: admission.first_failure_at_ms,
            parked: admission.due_at_ms.is_some(),
            work: Work::Handle,
            probe: false,
            verdict: admission.verdict,
        };
        match admission.due_at_ms {
            Some(due_at_ms) if due_at_ms > now_ms => self.delay(job, due_at_ms, false),
            _ => self.enqueue(job),
        }
        true
    }

    /// Admits a record that is handled as it arrives (addressed to another service: nothing to do for it), so
    /// that it never holds its partition's prefix nor takes a route's slot. Returns the offset to store when the
    /// prefix moved; `None` also when the record was not admitted (its partition is not ours, or it was fetched
    /// before).
    pub fn pass(&mut self, partition: &PartitionKey, offset: i64) -> Option<i64> {
        let state = self.partitions.get_mut(partition).filter(|state| !state.revoked)?;
        // Handled at once: it holds no memory.
        if !state.window.admit(offset, 0) {
            return None;
        }
        state.window.handled(offset)
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
    pub fn next_job(&mut self, now: Instant, now_ms: i64) -> Option<Job> {
        let handle_room = self.running < self.max_in_flight;
        let defer_room = self.deferring < self.max_in_flight;
        if !handle_room && !defer_room {
            return None;
        }
        let n_routes = self.routes.len();
        for step in 0..n_routes {
            let index = (self.cursor + step) % n_routes;
            if self.routes[index].queue.is_empty() {
                continue;
            }
            let Some(job) = self.next_of_route(index, now, now_ms, handle_room, defer_room) else { continue };
            self.cursor = (index + 1) % n_routes;
            return Some(job);
        }
        None
    }

    /// The next job of one route: a handler call if its breaker and capacity allow, else perhaps a deferral.
    fn next_of_route(
        &mut self,
        index: usize,
        now: Instant,
        now_ms: i64,
        handle_room: bool,
        defer_room: bool,
    ) -> Option<Job> {
        let route = &mut self.routes[index];
        let has_slot = route.running < route.max_in_flight;
        let has_token = route.bucket.as_mut().is_none_or(|bucket| bucket.wait(now).is_zero());
        let can_call = handle_room && has_slot && has_token;
        match route.breaker.gate(now_ms) {
            Gate::Closed if can_call => self.start(index, |_| true, false),
            Gate::Probe if can_call => {
                let job = self.start(index, |_| true, true)?;
                let cooldown_ms = self.routes[index].breaker.cooldown_ms;
                self.routes[index].breaker.state = BreakerState::Probing { next_probe_ms: now_ms + cooldown_ms };
                Some(job)
            }
            Gate::Closed | Gate::Probe => {
                // Saturated: defer only what holds a paused partition while another route could use the room.
                if !defer_room || self.defer_delay_ms == 0 || !self.another_route_has_room(index) {
                    return None;
                }
                let delay_ms = rand::rng().random_range(self.defer_delay_ms / 2..=self.defer_delay_ms);
                let due_at_ms = now_ms + i64::try_from(delay_ms).unwrap_or(i64::MAX);
                self.defer(index, due_at_ms, DeferReason::Saturated, now_ms, true)
            }
            Gate::Open { next_probe_ms } => {
                let jitter_ms = rand::rng().random_range(0..=self.routes[index].breaker.cooldown_ms / 10);
                let due_at_ms = next_probe_ms.max(now_ms) + jitter_ms;
                self.hold_parked(index, due_at_ms, now_ms);
                let deferred = if defer_room {
                    self.defer(index, due_at_ms, DeferReason::BreakerOpen, now_ms, false)
                } else {
                    None
                };
                if deferred.is_some() {
                    return deferred;
                }
                // A record past its retry budget gets its last call even now, so that it ends in the DLQ.
                let budget = self.retry_max_total_ms;
                let exhausted = move |job: &Job| job.budget_spent(now_ms, budget);
                if can_call { self.start(index, exhausted, false) } else { None }
            }
        }
    }

    /// Starts the first current job of route `index` (among the first few queued) that `eligible` accepts.
    fn start(&mut self, index: usize, eligible: impl Fn(&Job) -> bool, probe: bool) -> Option<Job> {
        let mut job = self.take_queued(index, |job, _| eligible(job))?;
        if let Some(bucket) = &mut self.routes[index].bucket {
            bucket.take();
        }
        job.probe = probe;
        job.work = Work::Handle;
        self.routes[index].running += 1;
        self.running += 1;
        Some(job)
    }

    /// Takes a deferrable job of route `index` (unordered, within its retry budget, and when `paused_only`, of a
    /// paused partition) to park in the retry topic until `due_at_ms`.
    fn defer(
        &mut self,
        index: usize,
        due_at_ms: i64,
        reason: DeferReason,
        now_ms: i64,
        paused_only: bool,
    ) -> Option<Job> {
        let budget = self.retry_max_total_ms;
        let mut job = self.take_queued(index, |job, state| {
            job.chain.is_none() && !job.budget_spent(now_ms, budget) && (!paused_only || state.paused)
        })?;
        // Never past the end of its budget: then it is due for its last call.
        let budget_end_ms = job.first_failure_at_ms.map_or(i64::MAX, |first| first.saturating_add(budget));
        job.work = Work::Defer { due_at_ms: due_at_ms.min(budget_end_ms), reason };
        self.deferring += 1;
        Some(job)
    }

    /// Holds the records of route `index` (its breaker open) that were read back from the retry topic, among the
    /// first [`QUEUE_SCAN`] queued, in memory until `due_at_ms` (the next probe) instead of parking them again.
    /// Copying a parked record to the retry topic costs about what handling a healthy one does, and with every
    /// parked record copied again at every probe, an outage cost the healthy routes more the longer it lasted
    /// (docs/benchmarks/consumer.md, "Isolation over a long outage"). Only while its partition has room: a full
    /// window (paused) parks them again, so that the retry topic moves on to what follows them. Not held: a
    /// record past its retry budget (it gets its last call) and an ordered one (never deferred).
    fn hold_parked(&mut self, index: usize, due_at_ms: i64, now_ms: i64) {
        let budget = self.retry_max_total_ms;
        let queue = &mut self.routes[index].queue;
        let mut position = 0;
        let mut held = Vec::new();
        while position < queue.len().min(QUEUE_SCAN) {
            let job = &queue[position];
            let room = self
                .partitions
                .get(&job.partition)
                .is_some_and(|state| state.generation == job.generation && !state.revoked && !state.paused);
            if room && job.parked && job.chain.is_none() && !job.budget_spent(now_ms, budget) {
                held.extend(queue.remove(position));
            } else {
                position += 1;
            }
        }
        for job in held {
            self.delay(job, due_at_ms, false);
        }
    }

    /// Removes and returns the first job among the first [`QUEUE_SCAN`] of route `index` whose partition is still
    /// ours and that `eligible` accepts, counting it running in its partition. Jobs of an ended assignment met on
    /// the way are dropped (their next owner fetches them again).
    fn take_queued(&mut self, index: usize, eligible: impl Fn(&Job, &PartitionState) -> bool) -> Option<Job> {
        let queue = &mut self.routes[index].queue;
        let mut position = 0;
        while position < queue.len().min(QUEUE_SCAN) {
            let job = &queue[position];
            let current = self
                .partitions
                .get(&job.partition)
                .filter(|state| state.generation == job.generation && !state.revoked);
            match current {
                None => {
                    queue.remove(position);
                }
                Some(state) if eligible(job, state) => {
                    let job = queue.remove(position)?;
                    if let Some(state) = self.partitions.get_mut(&job.partition) {
                        state.running += 1;
                    }
                    return Some(job);
                }
                Some(_) => position += 1,
            }
        }
        None
    }

    fn another_route_has_room(&self, index: usize) -> bool {
        self.routes
            .iter()
            .enumerate()
            .any(|(other, route)| other != index && route.running < route.max_in_flight && !route.breaker.is_open())
    }

    /// A started job ended; `downstream` is what its handler call said of the route's downstream. Returns the
    /// offset to store for its partition when the prefix moved forward.
    pub fn complete(&mut self, job: Job, completion: Completion, downstream: Downstream, now_ms: i64) -> Option<i64> {
        use rdkafka::Message;
        match job.work {
            Work::Handle => {
                self.running -= 1;
                let route = &mut self.routes[job.route];
                route.running -= 1;
                if route.breaker.record(downstream, job.probe, now_ms) {
                    self.breaker_changes.push((route.label.clone(), route.breaker.is_open()));
                }
            }
            Work::Defer { .. } => self.deferring -= 1,
        }
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
                // Its retry budget started with its first failure: past it, an open breaker lets its last call through.
                let first_failure_at_ms = job.first_failure_at_ms.or(Some(attempts.first_failure_at_ms));
                let job = Job { prior: Some(attempts), probe: false, first_failure_at_ms, ..job };
                self.delay(job, due_at_ms, true);
                None
            }
        }
    }

    /// Routes whose breaker opened (true) or closed (false) since the last call, by label.
    pub fn breaker_changes(&mut self) -> Vec<(String, bool)> {
        std::mem::take(&mut self.breaker_changes)
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

    /// Partitions to pause (window full, or every window together at `max_window_bytes`) and to resume (window
    /// down to half, and the bytes down to half); marks them so. The gap between the two matters: a partition read
    /// from the main queue is paused in librdkafka, which drops what it had prefetched for it and fetches again on
    /// resume, so resuming at the first free slot would pay a fetch round trip per few records.
    pub fn pause_changes(&mut self) -> (Vec<PartitionKey>, Vec<PartitionKey>) {
        let (mut pause, mut resume) = (Vec::new(), Vec::new());
        let bytes = self.windowed_bytes();
        let (bytes_full, bytes_low) = (bytes >= self.max_window_bytes, bytes <= self.max_window_bytes / 2);
        for (partition, state) in &mut self.partitions {
            if state.revoked {
                continue;
            }
            let len = state.window.len();
            if (len >= self.partition_window || bytes_full) && !state.paused {
                state.paused = true;
                pause.push(partition.clone());
            } else if len <= self.partition_window / 2 && bytes_low && state.paused {
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
            if route.queue.is_empty() {
                continue;
            }
            // Records that could not be deferred (ordered ones) wait for the breaker's next probe. Once it is due,
            // the probe waits for a free slot, and a completion wakes the loop: no wake-up here, or it would spin.
            if let BreakerState::Open { until_ms } = route.breaker.state
                && until_ms > now_ms
            {
                let wait = Duration::from_millis(u64::try_from(until_ms - now_ms).unwrap_or(0));
                wake = Some(wake.map_or(wait, |current| current.min(wait)));
            }
            if route.running >= route.max_in_flight {
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

    /// Records being deferred (their retry-topic produce in flight).
    pub fn deferring(&self) -> usize {
        self.deferring
    }

    /// Records fetched and not yet committed, across partitions.
    pub fn windowed(&self) -> usize {
        self.partitions.values().map(|state| state.window.len()).sum()
    }

    /// Bytes of the records fetched and not yet committed, across partitions.
    pub fn windowed_bytes(&self) -> usize {
        self.partitions.values().map(|state| state.window.bytes()).sum()
    }

    /// Whether the partition takes no more records now (paused by [`Self::pause_changes`], revoked, or not
    /// assigned).
    pub fn is_paused(&self, partition: &PartitionKey) -> bool {
        self.partitions.get(partition).is_none_or(|state| state.paused || state.revoked)
    }
}

mod route;
#[cfg(test)]
mod tests;
