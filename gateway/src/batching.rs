//! Batching that follows the load: which of the gateway's two producers a record goes to.
//!
//! A 2xx waits for the broker's acknowledgement, so every record waits out its producer's `linger.ms` before it is
//! even sent. With few requests in flight that wait is pure latency (a batch of one or two records gains nothing
//! from it); with many in flight it is what turns hundreds of tiny produce requests into a few full ones, and the
//! broker and librdkafka spend less CPU per record. No fixed linger wins both (docs/benchmarks/gateway-batching.md
//! measures 0 and 2 ms at 64 and 256 connections), and librdkafka's `linger.ms` cannot change once a producer
//! exists. So the gateway keeps two producers with the same durability settings (idempotent, `acks=all`): one that
//! sends at once (`linger.ms = 0`) and one that lingers, and sends each record to the first while fewer than
//! [`ProducerConfig::batch_from_in_flight`] produces are awaiting their acknowledgement, to the second from then on.
//!
//! The choice only decides how long a record may wait in the local queue: both producers are idempotent with
//! `acks=all`, and every record's 2xx still waits for its own acknowledgement. Order is unaffected where it is
//! defined: a provider's next delivery of the same key is only sent after the previous one was answered, by which
//! time the previous record is acknowledged, whichever producer carried it. Records in flight at the same time
//! had no order to keep.
//!
//! It is the default at 64 (`batch_from_in_flight = 0` gives one lingering producer). Measured on a quiet machine
//! (issue 37, docs/benchmarks/gateway-linger.md, run 3) the split at 64 answered at 30 % of peak as fast as
//! `linger.ms = 0` (p50 1.9-2.6 ms, one 2 ms producer 3.6-4.2) and did 2.04-2.21x kprf at 256 connections (0.85-1.04
//! of one 2 ms producer). A broker-restart test that failed 2 of 7 runs with it (on a broker holding 10.5k stale
//! test partitions, whose restart took over 90 s) passed 10 of 10 on a fresh stack under load
//! (docs/benchmarks/gateway-linger.md, "The default").

use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

/// `[producer]`: how the gateway batches its produces (see the module docs).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProducerConfig {
    /// Produces awaiting their acknowledgement from which a record goes to the lingering producer; below it, to
    /// the producer that sends at once. 0: one producer that always lingers (the gateway before issue 25).
    pub batch_from_in_flight: usize,
    /// The lingering producer's `linger.ms` (fractions allowed: librdkafka counts in microseconds).
    pub batch_linger_ms: f64,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        // The split at 64: light-load answers as fast as no linger, 256 connections held (see the module).
        Self { batch_from_in_flight: 64, batch_linger_ms: 2.0 }
    }
}

/// Which producer a record goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// `linger.ms = 0`: sent as soon as the producer's broker thread sees it.
    Immediate,
    /// `linger.ms = batch_linger_ms`: waits for company, up to the linger.
    Batching,
}

/// Counts the produces awaiting their acknowledgement and picks each record's [`Lane`] from that count.
#[derive(Debug)]
pub struct LaneChooser {
    batch_from_in_flight: usize,
    in_flight: AtomicUsize,
}

impl LaneChooser {
    /// `batch_from_in_flight = 0` always chooses [`Lane::Batching`].
    pub fn new(batch_from_in_flight: usize) -> Self {
        Self { batch_from_in_flight, in_flight: AtomicUsize::new(0) }
    }

    /// The lane for a record produced while `in_flight` others await their acknowledgement.
    pub fn lane_at(&self, in_flight: usize) -> Lane {
        if in_flight < self.batch_from_in_flight { Lane::Immediate } else { Lane::Batching }
    }

    /// Counts one more produce in flight until the returned guard is dropped, and chooses its lane from the count
    /// before it (the produces already waiting).
    pub fn enter(&self) -> (Lane, InFlight<'_>) {
        let before = self.in_flight.fetch_add(1, Ordering::Relaxed);
        (self.lane_at(before), InFlight { chooser: self })
    }

    /// Produces awaiting their acknowledgement now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// One produce in flight; dropping it (the produce resolved, or its request was abandoned) ends the count.
#[derive(Debug)]
pub struct InFlight<'a> {
    chooser: &'a LaneChooser,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.chooser.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_the_threshold_a_record_is_sent_at_once_and_from_it_on_it_is_batched() {
        let chooser = LaneChooser::new(128);
        assert_eq!(chooser.lane_at(0), Lane::Immediate);
        assert_eq!(chooser.lane_at(64), Lane::Immediate);
        assert_eq!(chooser.lane_at(127), Lane::Immediate);
        assert_eq!(chooser.lane_at(128), Lane::Batching);
        assert_eq!(chooser.lane_at(256), Lane::Batching);
    }

    #[test]
    fn a_threshold_of_zero_always_batches() {
        let chooser = LaneChooser::new(0);
        assert_eq!(chooser.lane_at(0), Lane::Batching);
        assert_eq!(chooser.lane_at(1000), Lane::Batching);
    }

    #[test]
    fn the_count_follows_produces_entering_and_leaving() {
        let chooser = LaneChooser::new(2);
        let (first, first_guard) = chooser.enter();
        let (second, second_guard) = chooser.enter();
        // Two already waiting: the third batches.
        let (third, third_guard) = chooser.enter();
        assert_eq!((first, second, third), (Lane::Immediate, Lane::Immediate, Lane::Batching));
        assert_eq!(chooser.in_flight(), 3);
        drop(third_guard);
        drop(first_guard);
        assert_eq!(chooser.in_flight(), 1);
        // One waiting: sent at once again.
        let (fourth, fourth_guard) = chooser.enter();
        assert_eq!(fourth, Lane::Immediate);
        drop(fourth_guard);
        drop(second_guard);
        assert_eq!(chooser.in_flight(), 0);
    }
}
