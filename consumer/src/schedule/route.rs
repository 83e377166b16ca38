//! Routes: what a fetched record is handed to (a `[[routes]]` entry, or else its source), each with its own
//! limit, rate (a token bucket) and circuit breaker, so that one slow or failing downstream holds only its own
//! route's capacity.

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use super::{Downstream, Job, Scheduler};
use crate::config::{self, RouteMatch};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum RouteKey {
    Configured(usize),
    Source(String),
}

#[derive(Debug)]
pub(super) struct RouteRule {
    /// Its name in metrics and pauses ([`crate::config::RouteConfig::label`]).
    pub(super) label: String,
    pub(super) matcher: RouteMatch,
    pub(super) max_in_flight: usize,
    pub(super) rate_per_s: Option<f64>,
    pub(super) breaker_failures: u32,
    pub(super) breaker_cooldown_ms: u64,
    /// `retry.max_total_ms`, or the destination's own (`[routes.retry]`).
    pub(super) retry_max_total_ms: i64,
}

#[derive(Debug)]
pub(super) struct RouteState {
    /// For the breaker gauge: the source, and the event types of a configured route limited to some.
    pub(super) label: String,
    pub(super) queue: VecDeque<Job>,
    pub(super) running: usize,
    pub(super) max_in_flight: usize,
    pub(super) bucket: Option<TokenBucket>,
    pub(super) breaker: Breaker,
    /// An operator's pause: nothing is called while set.
    pub(super) paused: Option<super::RoutePauseState>,
    /// Its records' retry budgets start no earlier than this (its last resume, ms; `i64::MIN`: never paused).
    pub(super) budget_floor_ms: i64,
    /// How long its records' retry budget lasts (`retry.max_total_ms`, or the destination's own).
    pub(super) retry_max_total_ms: i64,
}

impl RouteState {
    /// Whether its records wait rather than run: paused, or its breaker open.
    pub(super) fn held(&self) -> bool {
        self.paused.is_some() || self.breaker.is_open()
    }
}

/// A route's circuit breaker: closed (calls flow), open until a time (no calls), or probing (one call in flight
/// decides).
#[derive(Debug)]
pub(super) struct Breaker {
    /// Consecutive retryable failures that open it; 0: never.
    pub(super) failures_to_open: u32,
    pub(super) cooldown_ms: i64,
    pub(super) consecutive_failures: u32,
    pub(super) state: BreakerState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BreakerState {
    Closed,
    Open { until_ms: i64 },
    Probing { next_probe_ms: i64 },
}

/// What a route's breaker allows now.
pub(super) enum Gate {
    Closed,
    /// Let one call through.
    Probe,
    /// No calls; records go to the retry topic until this time.
    Open {
        next_probe_ms: i64,
    },
}

impl Breaker {
    pub(super) fn gate(&self, now_ms: i64) -> Gate {
        match self.state {
            BreakerState::Closed => Gate::Closed,
            BreakerState::Open { until_ms } if now_ms >= until_ms => Gate::Probe,
            BreakerState::Open { until_ms } => Gate::Open { next_probe_ms: until_ms },
            BreakerState::Probing { next_probe_ms } => Gate::Open { next_probe_ms },
        }
    }

    pub(super) fn is_open(&self) -> bool {
        self.state != BreakerState::Closed
    }

    /// Records a handler outcome; true when the breaker opened or closed.
    pub(super) fn record(&mut self, downstream: Downstream, probe: bool, now_ms: i64) -> bool {
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
pub(super) struct TokenBucket {
    pub(super) rate_per_s: f64,
    pub(super) tokens: f64,
    pub(super) refilled_at: Instant,
}

impl TokenBucket {
    pub(super) fn new(rate_per_s: f64, now: Instant) -> Self {
        Self { rate_per_s, tokens: rate_per_s.max(1.0), refilled_at: now }
    }

    pub(super) fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled_at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate_per_s).min(self.rate_per_s.max(1.0));
        self.refilled_at = now;
    }

    /// How long until a start is allowed (zero: now).
    pub(super) fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 { Duration::ZERO } else { Duration::from_secs_f64((1.0 - self.tokens) / self.rate_per_s) }
    }

    pub(super) fn take(&mut self) {
        self.tokens -= 1.0;
    }
}

impl Scheduler {
    /// The route of a record of `source` and `event_type` (addressed to `destination`, in a fan-out service),
    /// made on first use.
    pub(super) fn route_for(
        &mut self,
        source: Option<&str>,
        event_type: Option<&str>,
        destination: Option<&str>,
    ) -> usize {
        let source = source.unwrap_or("unknown");
        let configured = config::chosen_index(&self.rules, |rule| &rule.matcher, source, event_type, destination);
        self.route_at(source, configured)
    }

    /// The route of configured rule `configured`, or else of `source`, made on first use.
    pub(super) fn route_at(&mut self, source: &str, configured: Option<usize>) -> usize {
        let key = match configured {
            Some(index) => RouteKey::Configured(index),
            None => RouteKey::Source(source.to_owned()),
        };
        if let Some(&index) = self.route_index.get(&key) {
            return index;
        }
        let (max_in_flight, rate_per_s, failures_to_open, cooldown_ms, label, retry_max_total_ms) = match configured {
            Some(index) => {
                let rule = &self.rules[index];
                let label = rule.label.clone();
                let budget = rule.retry_max_total_ms;
                (rule.max_in_flight, rule.rate_per_s, rule.breaker_failures, rule.breaker_cooldown_ms, label, budget)
            }
            None => (
                self.default_route_max_in_flight,
                None,
                self.default_breaker_failures,
                self.default_breaker_cooldown_ms,
                source.to_owned(),
                self.retry_max_total_ms,
            ),
        };
        self.routes.push(RouteState {
            label: label.clone(),
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
            paused: self.pauses.get(&label).cloned(),
            budget_floor_ms: self.resumed_at_ms.get(&label).copied().unwrap_or(i64::MIN),
            retry_max_total_ms,
        });
        let index = self.routes.len() - 1;
        self.route_index.insert(key, index);
        index
    }
}
