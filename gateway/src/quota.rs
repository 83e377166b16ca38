//! A request quota per source: a rate and a burst (`rate_per_s`, `burst` on the source, `limits.source_rate_per_s`
//! and `limits.source_burst` for every source that sets none), past which the source's requests are answered 429
//! `quota_exceeded` with `Retry-After` and nothing is produced. One source over its quota costs its neighbours
//! nothing: each source has its own cell, and a refused request takes no turn.
//!
//! Only a request that verified is charged, once its event is known and just before it is produced: a caller
//! without the source's secret cannot spend its quota and lock the genuine provider out (unauthenticated floods
//! are the per-address limit's, [`crate::peer_limit`]). A handshake is never charged, nor a request refused for any
//! other reason. The arithmetic is [`crate::gcra`]'s, with no waiting: a verified request holds an in-flight permit,
//! so one over the quota is answered at once rather than held.
//!
//! The cells outlive a reload: a source whose quota did not change keeps its cell exactly (a reload to rotate a
//! secret refills no one's burst), one whose quota changed keeps what it held (capped at its new burst), a source
//! the reload removed loses its cell, and a new one starts with a full burst.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use hookline_common::config::Problems;

use crate::{
    config::{GatewayConfig, SourceConfig},
    gcra::Gcra,
};

/// The slowest quota a source may have: one request per 1,000 s. Below it a rate is more likely a mistake (a rate
/// per minute or per hour written as per second) than a wish.
pub const MIN_RATE_PER_S: f64 = 0.001;

/// `source`'s quota in `config` (its own `rate_per_s` and `burst`, else the `[limits]` defaults): `None` when
/// unlimited. `config` must have passed [`check_config`].
pub fn of_source(config: &GatewayConfig, source: &SourceConfig) -> Option<Gcra> {
    let (rate_per_s, burst) = settings(config, source);
    let burst = if burst > 0 {
        burst
    } else {
        // One second's worth.
        rate_per_s.ceil().clamp(1.0, f64::from(u32::MAX)) as u32
    };
    Gcra::new(rate_per_s, burst)
}

/// `source`'s rate and burst as configured, the defaults applied.
fn settings(config: &GatewayConfig, source: &SourceConfig) -> (f64, u32) {
    (source.rate_per_s.unwrap_or(config.limits.source_rate_per_s), source.burst.unwrap_or(config.limits.source_burst))
}

/// Adds the problems of the quota defaults and of each source's own: a rate is 0 (unlimited) or at least
/// [`MIN_RATE_PER_S`], and a burst without a rate is a mistake (it would limit nothing).
pub(crate) fn check_config(config: &GatewayConfig, problems: &mut Problems) {
    let valid_rate = |rate: f64| rate == 0.0 || (rate.is_finite() && rate >= MIN_RATE_PER_S);
    let limits = &config.limits;
    problems.check(
        valid_rate(limits.source_rate_per_s),
        format!("limits.source_rate_per_s must be 0 (unlimited) or at least {MIN_RATE_PER_S}"),
    );
    problems.check(
        limits.source_burst == 0 || limits.source_rate_per_s > 0.0,
        "limits.source_burst is set but limits.source_rate_per_s is 0 (unlimited): set the rate, or remove the burst",
    );
    for source in &config.sources {
        let name = &source.name;
        if let Some(rate) = source.rate_per_s {
            problems.check(
                valid_rate(rate),
                format!("source `{name}`: rate_per_s must be 0 (unlimited) or at least {MIN_RATE_PER_S}"),
            );
        }
        let (rate, _) = settings(config, source);
        problems.check(
            source.burst.is_none_or(|burst| burst == 0 || rate > 0.0),
            format!(
                "source `{name}`: burst is set but the source has no rate (rate_per_s or limits.source_rate_per_s)"
            ),
        );
    }
}

/// Every source's cell: the quota it was last charged under and its time.
#[derive(Debug, Default)]
pub struct SourceQuotas {
    cells: Mutex<HashMap<String, Cell>>,
}

#[derive(Debug, Clone, Copy)]
struct Cell {
    quota: Gcra,
    arrival: Instant,
}

impl Cell {
    /// The cell's time under `quota`: its own if that is the quota it was charged under, else one that holds what
    /// it held at `now`.
    fn arrival_under(&self, quota: &Gcra, now: Instant) -> Instant {
        if self.quota == *quota {
            self.arrival
        } else {
            quota.arrival_holding(self.quota.available(Some(self.arrival), now), now)
        }
    }
}

/// A request the quota refused: how long until the source's next turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverQuota {
    pub wait: Duration,
}

impl OverQuota {
    /// `Retry-After`: whole seconds until a turn is available, at least 1.
    pub fn retry_after_s(&self) -> u64 {
        self.wait.as_secs_f64().ceil().max(1.0) as u64
    }
}

impl SourceQuotas {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cell>> {
        self.cells.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Charges one request of `source` under its `quota` at `now`, or refuses it without taking a turn.
    pub fn charge(&self, source: &str, quota: &Gcra, now: Instant) -> Result<(), OverQuota> {
        let mut cells = self.lock();
        // A cell charged under another quota (before a reload) is converted once, refused or not: from then on it
        // refills at its new rate.
        let arrival = cells.get_mut(source).map(|cell| {
            if cell.quota != *quota {
                *cell = Cell { quota: *quota, arrival: cell.arrival_under(quota, now) };
            }
            cell.arrival
        });
        let wait = quota.wait(arrival, now);
        if !wait.is_zero() {
            return Err(OverQuota { wait });
        }
        let cell = Cell { quota: *quota, arrival: quota.take(arrival, now, 1) };
        match cells.get_mut(source) {
            Some(kept) => *kept = cell,
            None => {
                cells.insert(source.to_owned(), cell);
            }
        }
        Ok(())
    }

    /// The requests `source` may send at `now` under `quota` without being refused (fractions included).
    pub fn available(&self, source: &str, quota: &Gcra, now: Instant) -> f64 {
        let arrival = self.lock().get(source).map(|cell| cell.arrival_under(quota, now));
        quota.available(arrival, now)
    }

    /// Drops the cells of the sources `keep` says are gone (after a reload removed them, or took their quota away).
    pub fn retain_sources(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|name, _| keep(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(rate_per_s: f64, burst: u32) -> Gcra {
        Gcra::new(rate_per_s, burst).expect("a quota")
    }

    fn config(limits: crate::config::Limits, sources: Vec<SourceConfig>) -> GatewayConfig {
        GatewayConfig { limits, sources, ..GatewayConfig::default() }
    }

    fn source(name: &str, rate_per_s: Option<f64>, burst: Option<u32>) -> SourceConfig {
        SourceConfig { rate_per_s, burst, ..SourceConfig::new(name, "github", Vec::new()) }
    }

    fn quota_problems(config: &GatewayConfig) -> Vec<String> {
        let mut problems = Problems::default();
        check_config(config, &mut problems);
        problems.into_lines()
    }

    #[test]
    fn a_source_takes_its_own_quota_else_the_default_and_zero_is_unlimited() {
        let limits = crate::config::Limits { source_rate_per_s: 10.0, source_burst: 50, ..Default::default() };
        let config = config(
            limits,
            vec![
                source("defaulted", None, None),
                source("own", Some(2.0), Some(3)),
                source("own_rate", Some(4.0), None),
                source("unlimited", Some(0.0), None),
            ],
        );
        assert!(quota_problems(&config).is_empty(), "{:?}", quota_problems(&config));
        let quota_of = |index: usize| of_source(&config, &config.sources[index]);
        assert_eq!(quota_of(0), Gcra::new(10.0, 50));
        assert_eq!(quota_of(1), Gcra::new(2.0, 3));
        assert_eq!(quota_of(2), Gcra::new(4.0, 50), "the default burst with the source's rate");
        assert_eq!(quota_of(3), None);
        // No default: unlimited unless the source sets a rate; a burst of 0 is one second's worth.
        let config = super::tests::config(
            crate::config::Limits::default(),
            vec![source("plain", None, None), source("own", Some(2.5), Some(0))],
        );
        assert_eq!(of_source(&config, &config.sources[0]), None, "the default is unlimited");
        assert_eq!(of_source(&config, &config.sources[1]), Gcra::new(2.5, 3));
    }

    #[test]
    fn a_negative_tiny_or_non_finite_rate_and_a_burst_without_a_rate_are_problems() {
        let limits = crate::config::Limits { source_rate_per_s: -1.0, source_burst: 0, ..Default::default() };
        let sources = vec![
            source("nan", Some(f64::NAN), None),
            source("tiny", Some(0.000_1), None),
            source("burst_only", None, Some(5)),
            source("fine", Some(0.001), Some(1)),
        ];
        let problems = quota_problems(&config(limits, sources)).join("\n");
        for expected in ["limits.source_rate_per_s", "`nan`: rate_per_s", "`tiny`: rate_per_s", "`burst_only`: burst"] {
            assert!(problems.contains(expected), "{expected} not in {problems}");
        }
        assert!(!problems.contains("`fine`"), "{problems}");
        let limits = crate::config::Limits { source_burst: 10, ..Default::default() };
        let problems = quota_problems(&config(limits, Vec::new())).join("\n");
        assert!(problems.contains("limits.source_burst is set"), "{problems}");
    }

    #[test]
    fn past_its_burst_a_source_is_refused_with_the_wait_for_its_next_turn_and_a_neighbour_is_not() {
        let now = Instant::now();
        let quotas = SourceQuotas::default();
        // 2/s, burst 3.
        let small = quota(2.0, 3);
        for n in 0..3 {
            assert_eq!(quotas.charge("small", &small, now), Ok(()), "burst request {n}");
        }
        let refused = quotas.charge("small", &small, now).unwrap_err();
        assert_eq!(refused.wait, Duration::from_millis(500));
        assert_eq!(refused.retry_after_s(), 1, "rounded up to a whole second, at least 1");
        // A refusal takes no turn: 500 ms later exactly one more is admitted.
        assert!(quotas.charge("small", &small, now).is_err());
        let later = now + Duration::from_millis(500);
        assert_eq!(quotas.charge("small", &small, later), Ok(()));
        assert!(quotas.charge("small", &small, later).is_err());
        // Another source, ten times the rate, is untouched by the first's debt.
        let large = quota(20.0, 30);
        for n in 0..30 {
            assert_eq!(quotas.charge("large", &large, now), Ok(()), "neighbour request {n}");
        }
    }

    #[test]
    fn retry_after_is_the_wait_in_whole_seconds_and_never_zero() {
        let after = |ms: u64| OverQuota { wait: Duration::from_millis(ms) }.retry_after_s();
        assert_eq!([after(1), after(999), after(1_000), after(1_001), after(12_500)], [1, 1, 1, 2, 13]);
        let now = Instant::now();
        let quotas = SourceQuotas::default();
        // One request per 10 s: the next is 10 s away.
        let slow = quota(0.1, 1);
        assert_eq!(quotas.charge("slow", &slow, now), Ok(()));
        assert_eq!(quotas.charge("slow", &slow, now + Duration::from_secs(4)).unwrap_err().retry_after_s(), 6);
    }

    #[test]
    fn the_tokens_a_source_holds_fall_with_each_request_and_refill_with_time() {
        let now = Instant::now();
        let quotas = SourceQuotas::default();
        let per_second = quota(1.0, 5);
        assert_eq!(quotas.available("a", &per_second, now), 5.0, "a source never charged holds its burst");
        for _ in 0..4 {
            quotas.charge("a", &per_second, now).expect("within the burst");
        }
        assert_eq!(quotas.available("a", &per_second, now), 1.0);
        assert_eq!(quotas.available("a", &per_second, now + Duration::from_secs(2)), 3.0);
        assert_eq!(quotas.available("a", &per_second, now + Duration::from_secs(3_600)), 5.0);
    }

    #[test]
    fn a_reload_keeps_an_unchanged_cell_exactly_and_a_changed_one_what_it_held() {
        let now = Instant::now();
        let quotas = SourceQuotas::default();
        let before = quota(1.0, 4);
        for _ in 0..4 {
            quotas.charge("s", &before, now).expect("within the burst");
        }
        // The same quota (a reload that changed something else): still empty, not refilled.
        assert!(quotas.charge("s", &quota(1.0, 4), now).is_err());
        // Raised: what it held (nothing) under the new rate, so its next turn comes at the new rate's pace.
        let raised = quota(10.0, 40);
        assert_eq!(quotas.available("s", &raised, now), 0.0);
        assert_eq!(quotas.charge("s", &raised, now).unwrap_err().wait, Duration::from_millis(100));
        assert_eq!(quotas.charge("s", &raised, now + Duration::from_millis(100)), Ok(()));
        // A source removed by a reload loses its cell: if it comes back, it starts with a full burst.
        quotas.retain_sources(|name| name != "s");
        assert_eq!(quotas.available("s", &before, now), 4.0);
    }
}
