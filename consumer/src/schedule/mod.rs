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

use self::route::{BreakerState, Gate, RouteKey, RouteRule, RouteState};
pub use self::{
    hold::{RoutePauseState, RouteReport},
    job::{Admission, Completion, DeferReason, Downstream, Job, Work},
};
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

#[derive(Debug)]
struct PartitionState {
    generation: u64,
    window: Window,
    /// Jobs of this partition in the handler stage.
    running: usize,
    /// Paused because its window is full.
    paused: bool,
    /// A partition of a source topic ([`Scheduler::with_source_topics`]): records of a held route wait here in
    /// memory and the partition stops being fetched, instead of being copied to the retry topic.
    source_topic: bool,
    /// Paused because a held route's records wait in it (a source topic's partition only).
    held: bool,
    /// Whether librdkafka was last told to pause it ([`Scheduler::pause_changes`]).
    fetch_paused_told: bool,
    /// Revoked: nothing more starts; kept only until its running jobs finish or the wait ends.
    revoked: bool,
}

impl PartitionState {
    /// Whether librdkafka should be fetching it.
    fn fetch_paused(&self) -> bool {
        self.paused || self.held
    }
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
    /// Looked up three times per record (admit, start, complete): hashed with foldhash, not SipHash (the keys are
    /// our own topics and partitions, nothing an outsider chooses).
    partitions: HashMap<PartitionKey, PartitionState, foldhash::fast::RandomState>,
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
    /// Source topics: their partitions are held (paused) while a held route's records wait in them.
    source_topics: HashSet<String>,
    /// Operators' pauses by route label, applied to routes as they are made ([`Self::set_pause`]).
    pauses: HashMap<String, RoutePauseState>,
    /// When each route label was last resumed by an operator (ms): its records' retry budgets start no earlier.
    resumed_at_ms: HashMap<String, i64>,
    /// Which source-topic partitions are held needs a look at the held routes' queues: done when something that
    /// changes it happened, else at most every [`HOLD_CHECK_INTERVAL`].
    holds_dirty: bool,
    holds_checked_at: Option<Instant>,
    /// `service.routing = "fan_out"`: a record goes to every route that takes it, one job per destination.
    fan_out: bool,
    /// Per record of a fan-out service given to more than one destination (partition, its generation, offset):
    /// the destinations whose work on it has not ended. Its offset joins the prefix only when the last one ends.
    fanned: HashMap<(PartitionKey, u64, i64), usize, foldhash::fast::RandomState>,
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
                    label: route.label(),
                    matcher: route.matcher(),
                    max_in_flight: route.max_in_flight.unwrap_or(default_route_max_in_flight),
                    rate_per_s: route.rate_per_s,
                    breaker_failures: route.breaker_failures.unwrap_or(processing.breaker_failures),
                    breaker_cooldown_ms: route.breaker_cooldown_ms.unwrap_or(processing.breaker_cooldown_ms),
                    retry_max_total_ms: i64::try_from(
                        route.retry.as_ref().and_then(|own| own.max_total_ms).unwrap_or(retry.max_total_ms),
                    )
                    .unwrap_or(i64::MAX),
                })
                .collect(),
            partitions: HashMap::default(),
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
            source_topics: HashSet::new(),
            pauses: HashMap::new(),
            resumed_at_ms: HashMap::new(),
            holds_dirty: false,
            holds_checked_at: None,
            fan_out: false,
            fanned: HashMap::default(),
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
                source_topic: self.source_topics.contains(&partition.0),
                held: false,
                fetch_paused_told: false,
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
        self.fanned.retain(|(partition, _, _), _| !revoked.contains(partition));
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
        if route.paused.is_some() {
            return self.next_of_paused_route(index, now_ms, defer_room);
        }
        let budget = self.routes[index].retry_max_total_ms;
        let floor = self.routes[index].budget_floor_ms;
        match self.routes[index].breaker.gate(now_ms) {
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
                let deferrable = move |job: &Job, state: &PartitionState| {
                    job.chain.is_none() && !job.budget_spent(now_ms, budget, floor) && state.paused
                };
                self.defer(index, due_at_ms, DeferReason::Saturated, deferrable)
            }
            Gate::Open { next_probe_ms } => {
                let jitter_ms = rand::rng().random_range(0..=self.routes[index].breaker.cooldown_ms / 10);
                let due_at_ms = next_probe_ms.max(now_ms) + jitter_ms;
                self.hold_parked(index, due_at_ms, move |job| !job.budget_spent(now_ms, budget, floor));
                // A source topic's records wait here (their partition is held); the others go to the retry topic.
                let deferrable = move |job: &Job, state: &PartitionState| {
                    job.chain.is_none() && !job.budget_spent(now_ms, budget, floor) && !state.source_topic
                };
                let deferred =
                    if defer_room { self.defer(index, due_at_ms, DeferReason::BreakerOpen, deferrable) } else { None };
                if deferred.is_some() {
                    return deferred;
                }
                // A record past its retry budget gets its last call even now, so that it ends in the DLQ.
                let exhausted = move |job: &Job| job.budget_spent(now_ms, budget, floor);
                let mut job = if can_call { self.start(index, exhausted, false)? } else { return None };
                if job.prior.is_none() && job.first_failure_at_ms.is_none() {
                    // Held in memory since it was fetched, never called: its budget started then.
                    job.prior = Some(Attempts {
                        attempts: 0,
                        first_failure_at_ms: job.admitted_at_ms.max(floor),
                        last_error: "held while its route's circuit breaker was open".to_owned(),
                    });
                }
                Some(job)
            }
        }
    }

    /// Starts the first current job of route `index` (among the first few queued) that `eligible` accepts.
    fn start(&mut self, index: usize, eligible: impl Fn(&Job) -> bool, probe: bool) -> Option<Job> {
        let mut job = self.take_queued(index, |job, _| eligible(job))?;
        if let Some(bucket) = &mut self.routes[index].bucket {
            bucket.take();
        }
        // Its retry budget restarts at the route's last resume: time paused by an operator is not spent.
        let floor = self.routes[index].budget_floor_ms;
        if let Some(prior) = &mut job.prior {
            prior.first_failure_at_ms = prior.first_failure_at_ms.max(floor);
        }
        job.probe = probe;
        job.work = Work::Handle;
        self.routes[index].running += 1;
        self.running += 1;
        Some(job)
    }

    /// Takes a job of route `index` that `deferrable` accepts (never an ordered one) to park in the retry topic
    /// until `due_at_ms`, or the end of its retry budget if sooner.
    fn defer(
        &mut self,
        index: usize,
        due_at_ms: i64,
        reason: DeferReason,
        deferrable: impl Fn(&Job, &PartitionState) -> bool,
    ) -> Option<Job> {
        let budget = self.routes[index].retry_max_total_ms;
        let mut job = self.take_queued(index, |job, state| job.chain.is_none() && deferrable(job, state))?;
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
        match job.work {
            Work::Handle => {
                self.running -= 1;
                let route = &mut self.routes[job.route];
                route.running -= 1;
                if route.breaker.record(downstream, job.probe, now_ms) {
                    self.breaker_changes.push((route.label.clone(), route.breaker.is_open()));
                    self.holds_dirty = true;
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
        let offset = job.record.offset();
        match completion {
            Completion::Handled => {
                // A record given to several destinations is handled when the last of them ends its work on it.
                let fanned_key = (job.partition.clone(), job.generation, offset);
                let last = match self.fanned.get_mut(&fanned_key) {
                    Some(remaining) => {
                        *remaining -= 1;
                        *remaining == 0
                    }
                    None => true,
                };
                let prefix_end = if last { state.window.handled(offset) } else { None };
                if last {
                    self.fanned.remove(&fanned_key);
                }
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
            // Records held in memory behind an open breaker get their last call when their retry budget ends.
            if route.paused.is_none() && route.breaker.is_open() {
                let budget_end = route
                    .queue
                    .iter()
                    .take(QUEUE_SCAN)
                    .map(|job| {
                        let start = job.first_failure_at_ms.unwrap_or(job.admitted_at_ms).max(route.budget_floor_ms);
                        start.saturating_add(route.retry_max_total_ms)
                    })
                    .filter(|end_ms| *end_ms > now_ms)
                    .min();
                if let Some(end_ms) = budget_end {
                    let wait = Duration::from_millis(u64::try_from(end_ms - now_ms).unwrap_or(0));
                    wake = Some(wake.map_or(wait, |current| current.min(wait)));
                }
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
        self.partitions.get(partition).is_none_or(|state| state.fetch_paused() || state.revoked)
    }
}

mod admit;
mod flow;
mod hold;
mod job;
mod route;
#[cfg(test)]
mod tests;
