//! The scheduler's units of work: a fetched record on its way through the handler stage ([`Job`]), what it does
//! when started ([`Work`]), what the fetch loop tells the scheduler of it ([`Admission`]) and how it ended
//! ([`Completion`], [`Downstream`]).

use super::PartitionKey;
use crate::{record::Record, retry::Attempts};

/// One record on its way through the handler stage.
#[derive(Debug)]
pub struct Job {
    /// The record, as parsed at the door (boxed: jobs move through the scheduler's queues).
    pub record: Box<Record>,
    pub partition: PartitionKey,
    pub(super) generation: u64,
    pub(super) route: usize,
    /// The ordering key: jobs of one partition with the same key run one after another, in offset order.
    pub(super) chain: Option<String>,
    /// Handler attempts already made, for an ordered record retried in memory.
    pub prior: Option<Attempts>,
    /// From the retry headers: when the event first failed or was first deferred (its retry budget's start).
    pub(super) first_failure_at_ms: Option<i64>,
    /// When it was fetched: a record that never failed starts its retry budget here while its route is held.
    pub(super) admitted_at_ms: i64,
    /// Read back from the retry topic (it had a due time): already parked once, so an open breaker holds it here
    /// rather than copying it again (`Scheduler::hold_parked`).
    pub(super) parked: bool,
    /// What to do with the record.
    pub work: Work,
    /// The one call let through a half-open breaker.
    pub(super) probe: bool,
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
    /// An operator paused its route.
    Paused,
}

impl DeferReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Saturated => "saturated",
            Self::BreakerOpen => "breaker_open",
            Self::Paused => "paused",
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
#[derive(Debug, Default, Clone)]
pub struct Admission {
    pub source: Option<String>,
    pub event_type: Option<String>,
    pub ordering_key: Option<String>,
    /// Not before this time (ms since the epoch): a record read back from the retry topic.
    pub due_at_ms: Option<i64>,
    /// From the retry headers: when its retry budget started.
    pub first_failure_at_ms: Option<i64>,
    /// From the retry headers: the attempts made so far (a record read back from the retry topic).
    pub attempts: Option<Attempts>,
    /// The one destination of a fan-out service it is for (a retry, deferral or re-drive of one destination), from
    /// its authenticated headers; `None`: a fresh record, for every destination that takes it.
    pub destination: Option<String>,
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
    /// Its retry budget is spent: no more deferrals, the next failure is dead-lettered. The budget starts at its
    /// first failure or deferral, or, for a record that never failed, when it was fetched; never before its
    /// route's last resume (`budget_floor_ms`): time spent paused by an operator does not count.
    pub(super) fn budget_spent(&self, now_ms: i64, max_total_ms: i64, budget_floor_ms: i64) -> bool {
        let start = self.first_failure_at_ms.unwrap_or(self.admitted_at_ms).max(budget_floor_ms);
        now_ms.saturating_sub(start) >= max_total_ms
    }
}
