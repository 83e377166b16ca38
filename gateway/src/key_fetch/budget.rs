//! Each source's budget of cache misses: a key (a certificate URL, a Plaid key id) not held is fetched at most
//! `per_interval` times per `interval` for one source (a token bucket: `per_interval` at once, refilled evenly over
//! the interval). A forged request that names a new key costs one outbound fetch (for Plaid, one `POST` with the
//! operator's API credentials); past the budget such requests are answered 503 with `Retry-After` at once, and a
//! key already held is served whatever the budget says.
//!
//! One bucket per source name; only configured sources reach a fetch, and a reload drops the buckets of the sources
//! it removed ([`MissBudget::retain_sources`]), so the map is as large as the source table.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

#[derive(Debug)]
pub struct MissBudget {
    per_interval: f64,
    interval: Duration,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl MissBudget {
    pub fn new(per_interval: u32, interval: Duration) -> Self {
        Self {
            per_interval: f64::from(per_interval.max(1)),
            interval: interval.max(Duration::from_millis(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bucket>> {
        self.buckets.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether `source` may fetch a key now (without spending it), or how long until it may.
    pub fn check(&self, source: &str, now: Instant) -> Result<(), Duration> {
        self.with_bucket(source, now, |_| ())
    }

    /// Spends one of `source`'s fetches, or says how long until one is available.
    pub fn spend(&self, source: &str, now: Instant) -> Result<(), Duration> {
        self.with_bucket(source, now, |bucket| bucket.tokens -= 1.0)
    }

    fn with_bucket(&self, source: &str, now: Instant, use_one: impl FnOnce(&mut Bucket)) -> Result<(), Duration> {
        let mut buckets = self.lock();
        let bucket = match buckets.get_mut(source) {
            Some(bucket) => bucket,
            None => buckets.entry(source.to_owned()).or_insert(Bucket { tokens: self.per_interval, at: now }),
        };
        let rate_per_s = self.per_interval / self.interval.as_secs_f64();
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate_per_s).min(self.per_interval);
        bucket.at = now.max(bucket.at);
        if bucket.tokens >= 1.0 {
            use_one(bucket);
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate_per_s))
        }
    }

    /// Drops the buckets of the sources `keep` says are gone.
    pub fn retain_sources(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|name, _| keep(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_fetches_at_most_its_budget_per_interval_and_others_keep_theirs() {
        let start = Instant::now();
        let budget = MissBudget::new(3, Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(budget.spend("plaid", start), Ok(()));
        }
        let wait = budget.spend("plaid", start).expect_err("past the budget");
        assert_eq!(wait, Duration::from_secs(20), "one refills every interval / budget");
        assert!(budget.check("plaid", start).is_err(), "checking does not spend, but sees the empty bucket");
        assert_eq!(budget.spend("sns", start), Ok(()), "another source has its own budget");
        assert_eq!(budget.spend("plaid", start + Duration::from_secs(20)), Ok(()));
        assert!(budget.spend("plaid", start + Duration::from_secs(21)).is_err());
        budget.retain_sources(|name| name == "sns");
        assert_eq!(budget.lock().len(), 1, "a removed source's bucket is dropped");
    }
}
