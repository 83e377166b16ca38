//! The arithmetic of a request rate with a burst, shared by the two limits that count requests: the rate per client
//! address ([`crate::peer_limit`]) and the quota per source ([`crate::quota`]).
//!
//! It is the generic cell rate algorithm (GCRA), a token bucket kept as one time per cell: the cell's theoretical
//! arrival time, which each admitted request pushes one interval (`1 / rate`) ahead, with `burst` requests of
//! tolerance. A cell never seen (or whose time has passed) holds a full burst. Nothing here reads a clock or holds
//! a lock: the caller passes `now` and keeps the time, so the arithmetic is tested without waiting.

use std::time::{Duration, Instant};

/// A rate and a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    interval: Duration,
    /// `burst - 1` intervals: how far ahead of `now` a cell's time may be with its next request still admitted.
    tolerance: Duration,
}

impl Gcra {
    /// `None` when `rate_per_s` is not a positive finite number, or so small that one interval would not fit a
    /// [`Duration`] (the limit is off). A `burst` of 0 is taken as 1.
    pub fn new(rate_per_s: f64, burst: u32) -> Option<Self> {
        if !(rate_per_s > 0.0 && rate_per_s.is_finite()) {
            return None;
        }
        let interval = Duration::try_from_secs_f64(1.0 / rate_per_s).ok()?;
        Some(Self { interval, tolerance: interval.saturating_mul(burst.max(1) - 1) })
    }

    /// How long a request arriving at `now` must wait for its turn in a cell whose time is `arrival` (`None`: a
    /// fresh cell): zero while the burst lasts.
    pub fn wait(&self, arrival: Option<Instant>, now: Instant) -> Duration {
        arrival.map_or(Duration::ZERO, |arrival| arrival.saturating_duration_since(now).saturating_sub(self.tolerance))
    }

    /// The cell's time once `turns` more requests arriving at `now` took theirs.
    pub fn take(&self, arrival: Option<Instant>, now: Instant, turns: u32) -> Instant {
        arrival.map_or(now, |arrival| arrival.max(now)) + self.interval.saturating_mul(turns)
    }

    /// The requests a cell whose time is `arrival` admits at `now` without waiting, the fraction of the next one
    /// included: the burst for a fresh cell, 0 when the next request would wait.
    pub fn available(&self, arrival: Option<Instant>, now: Instant) -> f64 {
        let debt = arrival.map_or(Duration::ZERO, |arrival| arrival.saturating_duration_since(now));
        (self.tolerance + self.interval).saturating_sub(debt).as_secs_f64() / self.interval.as_secs_f64()
    }

    /// The burst: what a fresh cell admits at once.
    pub fn burst(&self) -> f64 {
        (self.tolerance + self.interval).as_secs_f64() / self.interval.as_secs_f64()
    }

    /// The cell time at `now` of a cell holding `available` requests (clamped to this burst): how a cell keeps what
    /// it holds when its rate or burst changes.
    pub fn arrival_holding(&self, available: f64, now: Instant) -> Instant {
        let holding = available.clamp(0.0, self.burst());
        let debt = (self.tolerance + self.interval).as_secs_f64() - holding * self.interval.as_secs_f64();
        now + Duration::from_secs_f64(debt.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_positive_finite_rate_is_no_limit() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300] {
            assert!(Gcra::new(rate, 10).is_none(), "{rate}");
        }
    }

    #[test]
    fn a_fresh_cell_holds_the_burst_and_each_turn_takes_one_interval() {
        let now = Instant::now();
        // 4/s, burst 3: one turn each 250 ms.
        let gcra = Gcra::new(4.0, 3).expect("a limit");
        assert_eq!(gcra.available(None, now), 3.0);
        let mut arrival = None;
        for n in 0..3 {
            assert_eq!(gcra.wait(arrival, now), Duration::ZERO, "burst request {n}");
            arrival = Some(gcra.take(arrival, now, 1));
        }
        assert_eq!(gcra.available(arrival, now), 0.0);
        assert_eq!(gcra.wait(arrival, now), Duration::from_millis(250));
        // 100 ms later, 0.4 of a turn is back; at 250 ms a whole one.
        assert!((gcra.available(arrival, now + Duration::from_millis(100)) - 0.4).abs() < 1e-9);
        assert_eq!(gcra.wait(arrival, now + Duration::from_millis(250)), Duration::ZERO);
        // Long idle: back to the burst, never more.
        assert_eq!(gcra.available(arrival, now + Duration::from_secs(60)), 3.0);
    }

    #[test]
    fn a_burst_of_zero_is_one() {
        assert_eq!(Gcra::new(2.0, 0), Gcra::new(2.0, 1));
        assert_eq!(Gcra::new(2.0, 0).expect("a limit").burst(), 1.0);
    }

    #[test]
    fn several_turns_at_once_push_the_cell_that_far() {
        let now = Instant::now();
        let gcra = Gcra::new(10.0, 1).expect("a limit");
        let arrival = gcra.take(None, now, 10);
        assert_eq!(arrival, now + Duration::from_secs(1));
        // A time in the past counts from now.
        assert_eq!(gcra.take(Some(now), now + Duration::from_secs(5), 1), now + Duration::from_millis(5_100));
    }

    #[test]
    fn a_cell_keeps_what_it_holds_across_a_change_of_rate_and_the_new_burst_caps_it() {
        let now = Instant::now();
        let old = Gcra::new(10.0, 20).expect("a limit");
        // 15 of the 20 taken: 5 left.
        let arrival = old.take(None, now, 15);
        assert!((old.available(Some(arrival), now) - 5.0).abs() < 1e-9);
        let faster = Gcra::new(100.0, 50).expect("a limit");
        let kept = faster.arrival_holding(old.available(Some(arrival), now), now);
        assert!((faster.available(Some(kept), now) - 5.0).abs() < 1e-6, "still 5, not a fresh 50");
        let smaller = Gcra::new(1.0, 2).expect("a limit");
        let capped = smaller.arrival_holding(old.available(Some(arrival), now), now);
        assert!((smaller.available(Some(capped), now) - 2.0).abs() < 1e-6, "never more than the new burst");
        let empty = smaller.arrival_holding(0.0, now);
        assert_eq!(smaller.wait(Some(empty), now), Duration::from_secs(1));
    }
}
