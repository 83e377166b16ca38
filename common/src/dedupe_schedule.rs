//! Reading a consumer service's dedupe bucket schedule ([`BucketSchedule`], stored at
//! [`redis_key::dedupe_buckets`]): one read for the consumer (which claims by it), the replayer's `lookup` and the
//! tests, so that all three read the same buckets.

use crate::wire::{
    dedupe_layout::{BucketSchedule, ScheduleError},
    redis_key,
};

/// Why a schedule could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadScheduleError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Stored but not a schedule (written by hand?): never guessed, a wrong count reads the wrong buckets.
    #[error(transparent)]
    Unreadable(#[from] ScheduleError),
}

/// `service`'s schedule and the value it was read from (empty when none is stored: the default schedule).
pub async fn read(
    connection: &mut impl redis::aio::ConnectionLike,
    prefix: &str,
    service: &str,
) -> Result<(BucketSchedule, String), ReadScheduleError> {
    let stored: Option<String> =
        redis::cmd("GET").arg(redis_key::dedupe_buckets(prefix, service)).query_async(connection).await?;
    let stored = stored.unwrap_or_default();
    Ok((BucketSchedule::decode(&stored)?, stored))
}
