//! The service's bucket schedule ([`BucketSchedule`]): how many buckets each time slot has. Read when dedupe
//! connects and again every [`SCHEDULE_REFRESH_S`] by a task of its own; a schedule not read for
//! [`SCHEDULE_STALE_S`] fails every call (the caller retries, as on any Redis error), because a change published
//! meanwhile takes effect [`SCHEDULE_LEAD_S`] after it was written and this consumer would then read and write
//! other buckets than the rest of its service. Changed only by an operator ([`Dedupe::change_buckets`],
//! `hookline-consumer dedupe-buckets`), with a compare-and-set so two changes never overwrite each other.
//!
//! The same task samples how full the last complete slot's buckets are ([`FILL_SAMPLES`] random buckets, one
//! `HLEN` each): past [`FILL_WARN`] outcomes per bucket it logs the count to set, and the consumer's gauge
//! `hookline_consumer_dedupe_bucket_fill` says it to an alert (a bucket past 128 costs about three times the
//! bytes, docs/dedupe.md).

use std::{
    sync::{Arc, OnceLock, RwLock, Weak},
    time::Duration,
};

use prometheus::IntGauge;

use hookline_common::{
    dedupe_schedule::{self, ReadScheduleError},
    redis_connection::RedisConnection,
    wire::{
        dedupe_layout::{
            BUCKETS, BucketChange, BucketSchedule, EventHash, FIELD_BYTES, MAX_BUCKETS, SCHEDULE_REFRESH_S,
            SCHEDULE_STALE_S, ScheduleError, write_slot,
        },
        now_ms, redis_key,
    },
};

use super::{Dedupe, DedupeError};

/// Buckets of the last complete slot whose `HLEN` is read each refresh.
const FILL_SAMPLES: usize = 16;
/// Outcomes per bucket past which a warning names the bucket count to set: 3/4 of Redis's usual listpack limit.
const FILL_WARN: f64 = 96.0;
/// Outcomes per bucket the advised count aims at (docs/dedupe.md, "Buckets per slot").
const FILL_TARGET: f64 = 64.0;

/// The schedule last read, and when (ms since the epoch); the gauge the sampled fill goes to.
#[derive(Debug)]
pub(super) struct ScheduleCache {
    state: RwLock<(BucketSchedule, i64)>,
    fill_gauge: OnceLock<IntGauge>,
}

impl ScheduleCache {
    pub(super) fn new(schedule: BucketSchedule) -> Arc<Self> {
        Arc::new(Self { state: RwLock::new((schedule, now_ms())), fill_gauge: OnceLock::new() })
    }

    /// The schedule, if it was read recently enough to be trusted.
    pub(super) fn fresh(&self) -> Result<BucketSchedule, DedupeError> {
        let (schedule, read_at_ms) = &*self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let age_ms = now_ms() - read_at_ms;
        if age_ms > i64::try_from(SCHEDULE_STALE_S * 1000).unwrap_or(i64::MAX) {
            return Err(DedupeError(redis::RedisError::from(std::io::Error::other(format!(
                "the dedupe bucket schedule was last read {} s ago",
                age_ms / 1000
            )))));
        }
        Ok(schedule.clone())
    }

    /// The schedule last read, however long ago.
    pub(super) fn last(&self) -> BucketSchedule {
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner).0.clone()
    }

    fn store(&self, schedule: BucketSchedule) {
        *self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner) = (schedule, now_ms());
    }
}

/// Why the schedule could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum ChangeBucketsError {
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("redis: {0}")]
    Redis(#[from] DedupeError),
    #[error("the schedule kept changing under this change; try again")]
    Contended,
}

/// Sets `KEYS[1]` to `ARGV[2]` only if it still holds `ARGV[1]` (empty: absent).
const COMPARE_AND_SET: &str = r"
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
";

/// Reads `service`'s schedule; an unreadable one is an error (never guessed: a wrong count reads wrong buckets).
pub(super) async fn read(
    connection: &RedisConnection,
    prefix: &str,
    service: &str,
) -> Result<(BucketSchedule, String), DedupeError> {
    dedupe_schedule::read(&mut connection.clone(), prefix, service).await.map_err(|error| match error {
        ReadScheduleError::Redis(error) => DedupeError(error),
        ReadScheduleError::Unreadable(error) => DedupeError(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            error.to_string(),
        ))),
    })
}

impl Dedupe {
    /// Re-reads the schedule every [`SCHEDULE_REFRESH_S`] for as long as this dedupe (or a clone) lives.
    pub(super) fn refresh_schedule(&self) {
        let cache: Weak<ScheduleCache> = Arc::downgrade(&self.schedule);
        let (connection, prefix, service) = (self.connection.clone(), self.prefix.clone(), self.service.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(SCHEDULE_REFRESH_S)).await;
                let Some(cache) = cache.upgrade() else { return };
                match read(&connection, &prefix, &service).await {
                    Ok((schedule, _)) => {
                        sample_fill(&connection, &prefix, &service, &schedule, cache.fill_gauge.get()).await;
                        cache.store(schedule);
                    }
                    Err(error) => tracing::warn!(%error, "dedupe bucket schedule not re-read; retrying"),
                }
            }
        });
    }

    /// Reports the sampled outcomes per bucket of the last complete slot to `gauge` from the next refresh on.
    pub fn report_bucket_fill(self, gauge: IntGauge) -> Self {
        let _ = self.schedule.fill_gauge.set(gauge);
        self
    }

    /// Outcomes per bucket in the last complete slot, from [`FILL_SAMPLES`] random buckets (what the gauge of
    /// [`Self::report_bucket_fill`] shows); `None` before slot 1.
    pub async fn sampled_bucket_fill(&self) -> Result<Option<f64>, DedupeError> {
        let schedule = self.schedule.fresh()?;
        let sample = sampled_fill(&self.connection, &self.prefix, &self.service, &schedule).await?;
        Ok(sample.map(|(_, _, fill)| fill))
    }

    /// The service's bucket schedule as last read.
    pub fn bucket_schedule(&self) -> Result<BucketSchedule, DedupeError> {
        self.schedule.fresh()
    }

    /// Gives the service's slots `buckets` buckets, each spanning `span` slots (`None`: the span in force), from
    /// the first slot that starts at least
    /// [`hookline_common::wire::dedupe_layout::SCHEDULE_LEAD_S`] from now (and after any change already
    /// scheduled); returns that change. Slots already begun keep their count.
    pub async fn change_buckets(&self, buckets: u64, span: Option<u64>) -> Result<BucketChange, ChangeBucketsError> {
        let key = redis_key::dedupe_buckets(&self.prefix, &self.service);
        let script = redis::Script::new(COMPARE_AND_SET);
        for _ in 0..5 {
            let (schedule, written) = read(&self.connection, &self.prefix, &self.service).await?;
            let now_s = u64::try_from(now_ms() / 1000).unwrap_or(0);
            let (changed, change) = schedule.changed(now_s, buckets, span)?;
            let mut invocation = script.prepare_invoke();
            invocation.key(&key).arg(&written).arg(changed.encode());
            let set: i64 = invocation.invoke_async(&mut self.connection.clone()).await.map_err(DedupeError)?;
            if set == 1 {
                self.schedule.store(changed);
                return Ok(change);
            }
        }
        Err(ChangeBucketsError::Contended)
    }
}

/// The mean length of [`FILL_SAMPLES`] random buckets of the last complete span (the one before the current
/// slot's), with that span's first slot and bucket count; `None` before slot 1.
async fn sampled_fill(
    connection: &RedisConnection,
    prefix: &str,
    service: &str,
    schedule: &BucketSchedule,
) -> Result<Option<(u64, u32, f64)>, DedupeError> {
    // The bucket of the last complete span: the one before the current slot's.
    let (current, _) = schedule.span_of(write_slot(u64::try_from(now_ms() / 1000).unwrap_or(0)));
    let Some(before) = current.checked_sub(1) else { return Ok(None) };
    let (slot, _) = schedule.span_of(before);
    let buckets = schedule.buckets_at(slot);
    let mut total = 0_u64;
    for _ in 0..FILL_SAMPLES {
        let random = uuid::Uuid::new_v4();
        let [a, b, c, d, ..] = *random.as_bytes();
        let index = u16::from_be_bytes([a, b]) % u16::try_from(BUCKETS).unwrap_or(u16::MAX);
        let bucket = EventHash { field: [0; FIELD_BYTES], index, sub_bits: u16::from_be_bytes([c, d]) };
        let key = bucket.bucket_key(prefix, service, slot, buckets);
        let length: u64 = redis::cmd("HLEN").arg(&key).query_async(&mut connection.clone()).await?;
        total += length;
    }
    Ok(Some((slot, buckets, total as f64 / FILL_SAMPLES as f64)))
}

/// Samples the fill ([`sampled_fill`]), sets `gauge` to it, and warns, naming the count to set, past
/// [`FILL_WARN`]. A failed read is left for the next refresh.
async fn sample_fill(
    connection: &RedisConnection,
    prefix: &str,
    service: &str,
    schedule: &BucketSchedule,
    gauge: Option<&IntGauge>,
) {
    let (slot, buckets, fill) = match sampled_fill(connection, prefix, service, schedule).await {
        Ok(Some(sample)) => sample,
        Ok(None) => return,
        Err(error) => {
            // Said once: a user without `+hlen` (docs/security.md) would say it every minute.
            static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(%error, "dedupe bucket fill not sampled (is HLEN allowed?); the gauge stays as it was");
            }
            return;
        }
    };
    if let Some(gauge) = gauge {
        gauge.set(fill.round() as i64);
    }
    if fill > FILL_WARN {
        let needed = (fill * f64::from(buckets) / FILL_TARGET).ceil() as u64;
        let advised = needed.next_power_of_two().min(u64::from(MAX_BUCKETS));
        tracing::warn!(
            slot,
            buckets,
            outcomes_per_bucket = fill,
            advised,
            "dedupe buckets are filling past the compact encoding: run `hookline-consumer dedupe-buckets --set \
             {advised}` (docs/dedupe.md, \"Buckets per slot\")"
        );
    }
}
