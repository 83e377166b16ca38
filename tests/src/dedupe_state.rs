//! A service's remembered outcome for an event, read from its buckets as the replayer's lookup reads them
//! (for tests that check what the consumer wrote).

use hookline_common::wire::{
    dedupe_layout::{BucketSchedule, EventHash, MAX_WINDOW_S, Outcome},
    now_ms,
};

/// The service's bucket schedule as stored (the default when none is).
pub async fn bucket_schedule(
    connection: &mut impl redis::aio::ConnectionLike,
    prefix: &str,
    service: &str,
) -> BucketSchedule {
    hookline_common::dedupe_schedule::read(connection, prefix, service).await.expect("a readable schedule").0
}

/// The event's latest outcome in the service's buckets, with its bucket's time to live (ms); `None`: none.
pub async fn dedupe_outcome(
    connection: &mut impl redis::aio::ConnectionLike,
    prefix: &str,
    service: &str,
    source: &str,
    event_id: &str,
) -> Option<(Outcome, i64)> {
    let hash = EventHash::new(source, event_id);
    let now_s = u64::try_from(now_ms() / 1000).expect("after the epoch");
    let mut latest: Option<(Outcome, i64)> = None;
    let schedule = bucket_schedule(connection, prefix, service).await;
    for bucket in hash.window_buckets(prefix, service, now_s, MAX_WINDOW_S, &schedule) {
        let value: Option<String> =
            redis::cmd("HGET").arg(&bucket).arg(&hash.field[..]).query_async(connection).await.expect("HGET");
        let Some(outcome) = value.as_deref().and_then(Outcome::decode) else { continue };
        if latest.as_ref().is_none_or(|(best, _)| outcome.at_s() > best.at_s()) {
            let ttl_ms: i64 = redis::cmd("PTTL").arg(&bucket).query_async(connection).await.expect("PTTL");
            latest = Some((outcome, ttl_ms));
        }
    }
    latest
}
