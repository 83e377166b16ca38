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

use rand::Rng;
use rdkafka::message::OwnedMessage;

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
    /// What to do with the record.
    pub work: Work,
    /// The one call let through a half-open breaker.
    probe: bool,
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
#[derive(Debug)]
pub struct Admission {
    pub source: Option<String>,
    pub event_type: Option<String>,
    pub ordering_key: Option<String>,
    /// Not before this time (ms since the epoch): a record read back from the retry topic.
    pub due_at_ms: Option<i64>,
    /// From the retry headers: when its retry budget started.
    pub first_failure_at_ms: Option<i64>,
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
    breaker_failures: u32,
    breaker_cooldown_ms: u64,
}

#[derive(Debug)]
struct RouteState {
    /// For the breaker gauge: the source, and the event types of a configured route limited to some.
    label: String,
    queue: VecDeque<Job>,
    running: usize,
    max_in_flight: usize,
    bucket: Option<TokenBucket>,
    breaker: Breaker,
}

/// A route's circuit breaker: closed (calls flow), open until a time (no calls), or probing (one call in flight
/// decides).
#[derive(Debug)]
struct Breaker {
    /// Consecutive retryable failures that open it; 0: never.
    failures_to_open: u32,
    cooldown_ms: i64,
    consecutive_failures: u32,
    state: BreakerState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BreakerState {
    Closed,
    Open { until_ms: i64 },
    Probing { next_probe_ms: i64 },
}

/// What a route's breaker allows now.
enum Gate {
    Closed,
    /// Let one call through.
    Probe,
    /// No calls; records go to the retry topic until this time.
    Open {
        next_probe_ms: i64,
    },
}

impl Breaker {
    fn gate(&self, now_ms: i64) -> Gate {
        match self.state {
            BreakerState::Closed => Gate::Closed,
            BreakerState::Open { until_ms } if now_ms >= until_ms => Gate::Probe,
            BreakerState::Open { until_ms } => Gate::Open { next_probe_ms: until_ms },
            BreakerState::Probing { next_probe_ms } => Gate::Open { next_probe_ms },
        }
    }

    fn is_open(&self) -> bool {
        self.state != BreakerState::Closed
    }

    /// Records a handler outcome; true when the breaker opened or closed.
    fn record(&mut self, downstream: Downstream, probe: bool, now_ms: i64) -> bool {
        let was_open = self.is_open();
        match downstream {
            Downstream::Answered => {
                self.consecutive_failures = 0;
                self.state = BreakerState::Closed;
            }
            Downstream::Failed => {
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                let probe_failed = probe && matches!(self.state, BreakerState::Probing { .. });
                let threshold = self.failures_to_open > 0 && self.consecutive_failures >= self.failures_to_open;
                if probe_failed || (self.state == BreakerState::Closed && threshold) {
                    self.state = BreakerState::Open { until_ms: now_ms + self.cooldown_ms };
                }
            }
            // A probe that called nothing (a duplicate, shutdown): the next record probes instead.
            Downstream::NotCalled if probe && matches!(self.state, BreakerState::Probing { .. }) => {
                self.state = BreakerState::Open { until_ms: now_ms };
            }
            Downstream::NotCalled => {}
        }
        was_open != self.is_open()
    }
}

/// Starts per second, with a burst of one second's worth.
#[derive(Debug)]
struct TokenBucket {
    rate_per_s: f64,
    tokens: f64,
    refilled_at: Instant,
}

impl Job {
    /// Its retry budget is spent: no more deferrals, the next failure is dead-lettered.
    fn budget_spent(&self, now_ms: i64, max_total_ms: i64) -> bool {
        self.first_failure_at_ms.is_some_and(|first| now_ms.saturating_sub(first) >= max_total_ms)
    }
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
        if state.revoked || !state.window.admit(message.offset()) {
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
            work: Work::Handle,
            probe: false,
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
        if !state.window.admit(offset) {
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
                if defer_room {
                    let jitter_ms = rand::rng().random_range(0..=self.routes[index].breaker.cooldown_ms / 10);
                    let due_at_ms = next_probe_ms.max(now_ms) + jitter_ms;
                    if let Some(job) = self.defer(index, due_at_ms, DeferReason::BreakerOpen, now_ms, false) {
                        return Some(job);
                    }
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
        let (max_in_flight, rate_per_s, failures_to_open, cooldown_ms, label) = match configured {
            Some(index) => {
                let rule = &self.rules[index];
                let label = match &rule.event_types {
                    Some(types) => {
                        let mut types: Vec<&str> = types.iter().map(String::as_str).collect();
                        types.sort_unstable();
                        format!("{}:{}", rule.source, types.join(","))
                    }
                    None => rule.source.clone(),
                };
                (rule.max_in_flight, rule.rate_per_s, rule.breaker_failures, rule.breaker_cooldown_ms, label)
            }
            None => (
                self.default_route_max_in_flight,
                None,
                self.default_breaker_failures,
                self.default_breaker_cooldown_ms,
                source.to_owned(),
            ),
        };
        self.routes.push(RouteState {
            label,
            queue: VecDeque::new(),
            running: 0,
            max_in_flight: max_in_flight.max(1),
            bucket: rate_per_s.map(|rate| TokenBucket::new(rate, Instant::now())),
            breaker: Breaker {
                failures_to_open,
                cooldown_ms: i64::try_from(cooldown_ms).unwrap_or(i64::MAX),
                consecutive_failures: 0,
                state: BreakerState::Closed,
            },
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
            first_failure_at_ms: None,
        }
    }

    #[test]
    fn many_records_of_one_partition_run_at_once_and_the_prefix_waits_for_the_head() {
        let mut scheduler = Scheduler::new(&config(8, 8), &[], &RetryConfig::default());
        scheduler.assign([("t".to_owned(), 0)]);
        for offset in 0..3 {
            assert!(scheduler.admit(record(0, offset), admission("a", None), 0));
        }
        let jobs: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).collect();
        assert_eq!(jobs.len(), 3);
        let mut jobs = jobs.into_iter();
        let head = jobs.next().expect("head");
        assert_eq!(scheduler.complete(jobs.next().expect("1"), Completion::Handled, Downstream::Answered, 0), None);
        assert_eq!(scheduler.complete(jobs.next().expect("2"), Completion::Handled, Downstream::Answered, 0), None);
        assert_eq!(scheduler.complete(head, Completion::Handled, Downstream::Answered, 0), Some(2));
    }

    #[test]
    fn a_full_route_does_not_hold_back_another_route() {
        let mut scheduler = Scheduler::new(&config(4, 1), &[], &RetryConfig::default());
        scheduler.assign([("t".to_owned(), 0)]);
        scheduler.admit(record(0, 0), admission("slow", None), 0);
        scheduler.admit(record(0, 1), admission("slow", None), 0);
        scheduler.admit(record(0, 2), admission("fast", None), 0);
        let started: Vec<i64> =
            std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).map(|job| job.message.offset()).collect();
        assert_eq!(started, vec![0, 2], "the second `slow` record waits; `fast` starts");
        assert_eq!(scheduler.running(), 2);
    }

    #[test]
    fn same_key_records_run_one_after_another_in_offset_order() {
        let mut scheduler = Scheduler::new(&config(8, 8), &[], &RetryConfig::default());
        scheduler.assign([("t".to_owned(), 0)]);
        scheduler.admit(record(0, 0), admission("a", Some("k")), 0);
        scheduler.admit(record(0, 1), admission("a", Some("k")), 0);
        scheduler.admit(record(0, 2), admission("a", Some("other")), 0);
        let first: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).collect();
        assert_eq!(first.iter().map(|job| job.message.offset()).collect::<Vec<_>>(), vec![0, 2]);
        let mut first = first.into_iter();
        let head = first.next().expect("head");
        let attempts = Attempts { attempts: 1, first_failure_at_ms: 0, last_error: "x".to_owned() };
        scheduler.complete(head, Completion::RetryAt { due_at_ms: 10, attempts }, Downstream::Answered, 0);
        assert!(scheduler.next_job(Instant::now(), 0).is_none(), "offset 1 waits for its key's head to be retried");
        scheduler.release_due(10);
        let retried = scheduler.next_job(Instant::now(), 0).expect("the head again");
        assert_eq!(retried.message.offset(), 0);
        assert_eq!(retried.prior.as_ref().map(|prior| prior.attempts), Some(1));
        scheduler.complete(retried, Completion::Handled, Downstream::Answered, 0);
        assert_eq!(scheduler.next_job(Instant::now(), 0).map(|job| job.message.offset()), Some(1));
    }

    #[test]
    fn a_full_window_pauses_its_partition_and_revoke_drops_what_is_queued() {
        let mut scheduler = Scheduler::new(&config(1, 1), &[], &RetryConfig::default());
        scheduler.assign([("t".to_owned(), 0), ("t".to_owned(), 1)]);
        for offset in 0..4 {
            scheduler.admit(record(0, offset), admission("a", None), 0);
        }
        scheduler.admit(record(1, 0), admission("a", None), 0);
        let (pause, resume) = scheduler.pause_changes();
        assert_eq!(pause, vec![("t".to_owned(), 0)]);
        assert!(resume.is_empty());
        let running = scheduler.next_job(Instant::now(), 0).expect("one starts");
        scheduler.revoke(&[("t".to_owned(), 0)]);
        assert_eq!(scheduler.running_in(&[("t".to_owned(), 0)]), 1);
        scheduler.forget(&[("t".to_owned(), 0)]);
        assert_eq!(
            scheduler.complete(running, Completion::Handled, Downstream::Answered, 0),
            None,
            "revoked: nothing stored"
        );
        assert_eq!(scheduler.next_job(Instant::now(), 0).map(|job| job.partition.1), Some(1));
        assert!(!scheduler.admit(record(0, 9), admission("a", None), 0), "a revoked partition's record is dropped");
    }

    #[test]
    fn a_saturated_route_defers_unordered_records_of_a_paused_partition_only() {
        let mut scheduler = Scheduler::new(&config(8, 2), &[], &RetryConfig::default());
        scheduler.assign([("t".to_owned(), 0)]);
        for offset in 0..3 {
            scheduler.admit(record(0, offset), admission("slow", None), 0);
        }
        scheduler.admit(record(0, 3), admission("slow", Some("k")), 0);
        scheduler.admit(record(0, 4), admission("fast", None), 0);
        scheduler.pause_changes();
        let jobs: Vec<Job> = std::iter::from_fn(|| scheduler.next_job(Instant::now(), 0)).collect();
        let started: Vec<(i64, Work)> = jobs.iter().map(|job| (job.message.offset(), job.work)).collect();
        assert_eq!(started.len(), 4, "{started:?}");
        assert_eq!(started[..3].iter().map(|(offset, _)| *offset).collect::<Vec<_>>(), vec![0, 4, 1]);
        assert!(started[..3].iter().all(|(_, work)| *work == Work::Handle));
        assert!(
            matches!(started[3], (2, Work::Defer { reason: DeferReason::Saturated, due_at_ms }) if due_at_ms >= 500),
            "offset 2 is deferred; the ordered offset 3 waits: {started:?}"
        );
        assert_eq!(scheduler.running(), 3);
        assert_eq!(scheduler.deferring(), 1);
    }

    #[test]
    fn an_open_breaker_defers_to_its_next_probe_and_a_successful_probe_closes_it() {
        let processing = ProcessingConfig { breaker_failures: 2, breaker_cooldown_ms: 1_000, ..config(8, 8) };
        let mut scheduler = Scheduler::new(&processing, &[], &RetryConfig::default());
        scheduler.assign([("t".to_owned(), 0)]);
        for offset in 0..6 {
            scheduler.admit(record(0, offset), admission("a", None), 0);
        }
        let first = scheduler.next_job(Instant::now(), 0).expect("0");
        let second = scheduler.next_job(Instant::now(), 0).expect("1");
        scheduler.complete(first, Completion::Handled, Downstream::Failed, 0);
        assert!(scheduler.breaker_changes().is_empty(), "one failure: still closed");
        scheduler.complete(second, Completion::Handled, Downstream::Failed, 0);
        assert_eq!(scheduler.breaker_changes(), vec![("a".to_owned(), true)]);
        let deferred = scheduler.next_job(Instant::now(), 10).expect("2");
        assert!(
            matches!(deferred.work, Work::Defer { reason: DeferReason::BreakerOpen, due_at_ms } if (1_000..=1_100).contains(&due_at_ms)),
            "{:?}",
            deferred.work
        );
        let probe = scheduler.next_job(Instant::now(), 1_000).expect("3, the probe");
        assert_eq!(probe.work, Work::Handle);
        let while_probing = scheduler.next_job(Instant::now(), 1_000).expect("4");
        assert!(matches!(while_probing.work, Work::Defer { reason: DeferReason::BreakerOpen, .. }));
        scheduler.complete(probe, Completion::Handled, Downstream::Answered, 1_001);
        assert_eq!(scheduler.breaker_changes(), vec![("a".to_owned(), false)]);
        assert_eq!(scheduler.next_job(Instant::now(), 1_001).map(|job| job.work), Some(Work::Handle));
    }

    #[test]
    fn a_record_past_its_retry_budget_gets_its_last_call_through_an_open_breaker() {
        let processing = ProcessingConfig { breaker_failures: 1, ..config(8, 8) };
        let retry = RetryConfig { max_total_ms: 100, ..RetryConfig::default() };
        let mut scheduler = Scheduler::new(&processing, &[], &retry);
        scheduler.assign([("t".to_owned(), 0)]);
        scheduler.admit(record(0, 0), admission("a", None), 0);
        let failing = scheduler.next_job(Instant::now(), 0).expect("0");
        scheduler.complete(failing, Completion::Handled, Downstream::Failed, 0);
        let spent = Admission { first_failure_at_ms: Some(0), ..admission("a", None) };
        scheduler.admit(record(0, 1), spent, 200);
        let last_call = scheduler.next_job(Instant::now(), 200).expect("1");
        assert_eq!(last_call.work, Work::Handle, "not deferred again: its failure goes to the DLQ");
    }
}
