//! Holding a route: an operator's pause (followed from the control topic) and what a held route's records cost.
//! A held route (paused, or its breaker open) calls nothing but its probe (none while paused); its records wait
//! in memory. In a source topic (`service.source_topics`: one source's events) the partition where they wait is
//! paused in librdkafka, so nothing more of it is fetched, copied or parsed; in shared partitions they wait while
//! the window has room, then go to the retry topic so that the other routes move on, and those read back while the
//! route is still held stay in memory (docs/consumer-window.md, "Holding a route").

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use rand::Rng;

use super::{DeferReason, Job, PartitionKey, PartitionState, QUEUE_SCAN, Scheduler, Work};

/// An operator's pause of one route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePauseState {
    pub since_ms: i64,
    pub by: String,
    pub reason: String,
}

/// How often the held source-topic partitions are looked for when nothing marked them changed.
pub(super) const HOLD_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// When a paused route's records read back from the retry topic are looked at again (they stay in memory).
pub(super) const PAUSED_RECHECK_MS: i64 = 5_000;

/// What one route is doing, for its gauges.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteReport {
    pub label: String,
    pub paused: Option<RoutePauseState>,
    pub breaker_open: bool,
    /// Records queued for the route (waiting for a slot, or held).
    pub waiting: usize,
    /// Kafka timestamp (ms) of the oldest record among the first queued, when known.
    pub oldest_waiting_ms: Option<i64>,
}

impl Scheduler {
    /// Topics that each carry one source's events (`service.source_topics`): a held route's records in them wait
    /// in memory and their partitions stop being fetched, at no copy.
    pub fn with_source_topics(mut self, topics: impl IntoIterator<Item = String>) -> Self {
        self.source_topics = topics.into_iter().collect();
        self
    }

    /// Applies an operator's pause (`Some`) or resume (`None`, at `at_ms`) of the route labelled `label`, now or
    /// when the route is first used. Returns whether anything changed.
    pub fn set_pause(&mut self, label: &str, pause: Option<RoutePauseState>, at_ms: i64) -> bool {
        let changed = match &pause {
            Some(pause) => self.pauses.insert(label.to_owned(), pause.clone()).as_ref() != Some(pause),
            None => {
                let was_paused = self.pauses.remove(label).is_some();
                if was_paused {
                    let resumed = self.resumed_at_ms.entry(label.to_owned()).or_insert(at_ms);
                    *resumed = (*resumed).max(at_ms);
                }
                was_paused
            }
        };
        for route in self.routes.iter_mut().filter(|route| route.label == label) {
            route.paused = pause.clone();
            route.budget_floor_ms = self.resumed_at_ms.get(label).copied().unwrap_or(i64::MIN);
        }
        self.holds_dirty |= changed;
        changed
    }

    /// Every route's state, for the gauges; a paused label no record has used yet too (so an operator sees the
    /// pause obeyed before the route's first record).
    pub fn route_reports(&self) -> Vec<RouteReport> {
        // Labels paused or resumed before any record used them: reported too, so a pause shows as obeyed (and a
        // resume as cleared) before the route's first record.
        let known = |label: &String| self.routes.iter().any(|route| &route.label == label);
        let mut unused: Vec<RouteReport> = self
            .pauses
            .keys()
            .chain(self.resumed_at_ms.keys().filter(|label| !self.pauses.contains_key(*label)))
            .filter(|label| !known(label))
            .map(|label| RouteReport {
                label: label.clone(),
                paused: self.pauses.get(label).cloned(),
                breaker_open: false,
                waiting: 0,
                oldest_waiting_ms: None,
            })
            .collect();
        unused.sort_by(|a, b| a.label.cmp(&b.label));
        self.routes
            .iter()
            .map(|route| RouteReport {
                label: route.label.clone(),
                paused: route.paused.clone(),
                breaker_open: route.breaker.is_open(),
                waiting: route.queue.len(),
                oldest_waiting_ms: route
                    .queue
                    .iter()
                    .take(QUEUE_SCAN)
                    .filter_map(|job| job.record.timestamp().to_millis())
                    .min(),
            })
            .chain(unused)
            .collect()
    }

    /// An operator paused route `index`: nothing is called, no probe, no last call. Its records read back from the
    /// retry topic stay in memory; its records in source topics wait (their partitions are held); its unordered
    /// records holding a full shared partition go to the retry topic, so that the other routes there move on.
    pub(super) fn next_of_paused_route(&mut self, index: usize, now_ms: i64, defer_room: bool) -> Option<Job> {
        self.hold_parked(index, now_ms + PAUSED_RECHECK_MS, |_| true);
        if !defer_room {
            return None;
        }
        let delay_ms = if self.defer_delay_ms > 0 { self.defer_delay_ms } else { self.default_breaker_cooldown_ms };
        let delay_ms = rand::rng().random_range(delay_ms / 2..=delay_ms.max(1));
        let due_at_ms = now_ms + i64::try_from(delay_ms).unwrap_or(i64::MAX);
        let deferrable = |job: &Job, state: &PartitionState| job.chain.is_none() && state.paused && !state.source_topic;
        let mut job = self.defer(index, due_at_ms, DeferReason::Paused, deferrable)?;
        // A pause spends no retry budget: not capped at its end.
        job.work = Work::Defer { due_at_ms, reason: DeferReason::Paused };
        Some(job)
    }

    /// Holds the records of route `index` (its breaker open, or paused) that were read back from the retry topic
    /// and that `holdable` accepts, among the first [`QUEUE_SCAN`] queued, in memory until `due_at_ms` (the next
    /// probe, or the next look at a pause) instead of parking them again.
    /// Copying a parked record to the retry topic costs about what handling a healthy one does, and with every
    /// parked record copied again at every probe, an outage cost the healthy routes more the longer it lasted
    /// (docs/benchmarks/consumer.md, "Isolation over a long outage"). Only while its partition has room: a full
    /// window (paused) parks them again, so that the retry topic moves on to what follows them. Never held: an
    /// ordered record (never deferred); the caller leaves out a record past its retry budget (it gets its last
    /// call).
    pub(super) fn hold_parked(&mut self, index: usize, due_at_ms: i64, holdable: impl Fn(&Job) -> bool) {
        let queue = &mut self.routes[index].queue;
        let mut position = 0;
        let mut held = Vec::new();
        while position < queue.len().min(QUEUE_SCAN) {
            let job = &queue[position];
            let room = self
                .partitions
                .get(&job.partition)
                .is_some_and(|state| state.generation == job.generation && !state.revoked && !state.paused);
            if room && job.parked && job.chain.is_none() && holdable(job) {
                held.extend(queue.remove(position));
            } else {
                position += 1;
            }
        }
        for job in held {
            self.delay(job, due_at_ms, false);
        }
    }

    /// Marks held the source-topic partitions where a held route's records wait, and releases the others.
    pub(super) fn update_holds(&mut self, now: Instant) {
        if self.source_topics.is_empty() {
            return;
        }
        let due = self.holds_checked_at.is_none_or(|checked| now.duration_since(checked) >= HOLD_CHECK_INTERVAL);
        if !self.holds_dirty && !due {
            return;
        }
        self.holds_dirty = false;
        self.holds_checked_at = Some(now);
        let mut held: HashSet<&PartitionKey> = HashSet::new();
        for route in self.routes.iter().filter(|route| route.held()) {
            held.extend(route.queue.iter().map(|job| &job.partition));
        }
        let held: HashSet<PartitionKey> = held.into_iter().cloned().collect();
        for (partition, state) in &mut self.partitions {
            state.held = state.source_topic && held.contains(partition);
        }
    }
}
