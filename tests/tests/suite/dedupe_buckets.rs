//! A service's dedupe bucket schedule (issue 44): past about 128 outcomes a bucket is a hashtable in Redis, about
//! three times the bytes of the compact listpack, so a service past ~75 events/s per 6-hour slot gets more buckets
//! per slot (sub-buckets under the same hash tags) from a slot an operator's change names. A slot keeps its count:
//! an outcome written before a change is found after it, by the consumer and by lookup; on a single Redis and on
//! the stack's Redis Cluster every state and transition holds with more buckets.

use hookline_common::{
    config::RedisConfig,
    redis_connection::RedisConnection,
    wire::{
        dedupe_layout::{
            BUCKETS, BucketChange, BucketSchedule, EventHash, SCHEDULE_LEAD_S, SLOT_S, ScheduleError, write_slot,
        },
        now_ms,
        redis_key::{self, DoneMarker},
    },
};
use hookline_consumer::dedupe::{ChangeBucketsError, Claim, Dedupe};
use hookline_dlq_replayer::lookup::{DedupeState, dedupe_state};

use super::dedupe_together::{acquired, config, raw, states_and_transitions};

const SERVICE: &str = "billing";

async fn set_schedule(config: &RedisConfig, value: &str) {
    let _: () = redis::cmd("SET")
        .arg(redis_key::dedupe_buckets(&config.key_prefix, SERVICE))
        .arg(value)
        .query_async(&mut raw(config).await)
        .await
        .expect("redis");
}

async fn exists(connection: &mut RedisConnection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS").arg(key).query_async(connection).await.expect("redis");
    n == 1
}

fn now_s() -> u64 {
    u64::try_from(now_ms() / 1000).expect("after the epoch")
}

fn marker() -> DoneMarker {
    DoneMarker { processed_at_ms: 1, handling_ms: 1, topic: "t".into(), partition: 0, offset: 1 }
}

/// Every state and transition with the schedule `schedule` from slot 0, and the outcome in its sub-bucket.
async fn states_with_schedule(cluster: bool, schedule: &str) {
    let config = config(cluster);
    set_schedule(&config, schedule).await;
    states_and_transitions(config.clone()).await;
    let decoded = BucketSchedule::decode(schedule).expect("readable");
    let hash = EventHash::new("github", "e1");
    let written = hash.write_bucket(&config.key_prefix, SERVICE, now_s(), &decoded);
    let (span_start, _) = decoded.span_of(write_slot(now_s()));
    assert!(written.ends_with(&format!(":{span_start}:{}", hash.sub_bits % 4)), "{written}");
    assert!(exists(&mut raw(&config).await, &written).await, "the outcome is in its sub-bucket: {written}");
}

#[tokio::test]
async fn every_state_holds_with_four_times_the_buckets_on_a_single_redis() {
    states_with_schedule(false, &format!("{}@0", 4 * BUCKETS)).await;
}

#[tokio::test]
async fn every_state_holds_with_four_times_the_buckets_on_a_redis_cluster() {
    states_with_schedule(true, &format!("{}@0", 4 * BUCKETS)).await;
}

#[tokio::test]
async fn every_state_holds_with_buckets_spanning_a_day_on_a_single_redis() {
    states_with_schedule(false, &format!("{}x4@0", 4 * BUCKETS)).await;
}

#[tokio::test]
async fn every_state_holds_with_buckets_spanning_a_day_on_a_redis_cluster() {
    states_with_schedule(true, &format!("{}x4@0", 4 * BUCKETS)).await;
}

#[tokio::test]
async fn an_outcome_written_in_a_day_bucket_is_found_by_a_claim_in_a_later_slot_of_it() {
    // The day's bucket started two slots ago (a change in force from then): an outcome written in its first slot
    // is in the bucket every later slot of the day reads and writes.
    let config = config(false);
    let slot = write_slot(now_s());
    set_schedule(&config, &format!("{}x4@{}", BUCKETS, slot - 2)).await;
    let earlier = EventHash::new("github", "earlier-in-the-day");
    let day_bucket = earlier.bucket_key(&config.key_prefix, SERVICE, slot - 2, BUCKETS);
    let mut connection = raw(&config).await;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(&day_bucket)
        .arg(&earlier.field[..])
        .arg((now_s() - 7 * 3600).to_string())
        .ignore()
        .cmd("PEXPIRE")
        .arg(&day_bucket)
        .arg(3_600_000)
        .ignore()
        .query_async(&mut connection)
        .await
        .expect("redis");
    let dedupe = Dedupe::connect(&config, SERVICE).await.expect("redis");
    assert_eq!(dedupe.claim(&dedupe.token("github", "earlier-in-the-day")).await.expect("redis"), Claim::AlreadyDone);
    let token = acquired(dedupe.claim(&dedupe.token("github", "now")).await.expect("redis"));
    assert!(dedupe.mark_done(&token, &marker()).await.expect("redis"));
    let now = EventHash::new("github", "now");
    let now_bucket = now.bucket_key(&config.key_prefix, SERVICE, slot - 2, BUCKETS);
    let field: Option<String> =
        redis::cmd("HGET").arg(&now_bucket).arg(&now.field[..]).query_async(&mut connection).await.expect("redis");
    assert!(field.is_some(), "written into the day's bucket, named by its first slot");
    // It lives to the day's end plus the window.
    let ttl_ms: i64 = redis::cmd("PTTL").arg(&now_bucket).query_async(&mut connection).await.expect("redis");
    let day_end_s = (slot + 2) * SLOT_S;
    let at_least = (day_end_s - now_s() + config.dedupe_ttl_s) * 1000;
    assert!(u64::try_from(ttl_ms).expect("a TTL") + 5_000 >= at_least, "{ttl_ms} < {at_least}");
}

#[tokio::test]
async fn a_slot_keeps_its_count_so_an_outcome_written_before_a_change_is_still_found() {
    let config = config(false);
    let mut connection = raw(&config).await;
    let slot = write_slot(now_s());
    // A change made at least its lead ago, in force from the current slot; the slot before kept the default.
    set_schedule(&config, &format!("{}@{slot}", 4 * BUCKETS)).await;
    let before = EventHash::new("github", "before-the-change");
    let old_bucket = before.bucket_key(&config.key_prefix, SERVICE, slot - 1, BUCKETS);
    let _: () = redis::cmd("HSET")
        .arg(&old_bucket)
        .arg(&before.field[..])
        .arg((now_s() - 60).to_string())
        .query_async(&mut connection)
        .await
        .expect("redis");
    let _: () =
        redis::cmd("PEXPIRE").arg(&old_bucket).arg(3_600_000).query_async(&mut connection).await.expect("redis");

    let dedupe = Dedupe::connect(&config, SERVICE).await.expect("redis");
    assert_eq!(dedupe.claim(&dedupe.token("github", "before-the-change")).await.expect("redis"), Claim::AlreadyDone);
    let looked_up = dedupe_state(&connection, &config.key_prefix, SERVICE, "github", "before-the-change").await;
    assert!(matches!(looked_up, Ok(DedupeState::Processed { .. })), "{looked_up:?}");

    // An event processed now goes to the current slot's sub-bucket, never to the default-count bucket.
    let token = acquired(dedupe.claim(&dedupe.token("github", "after-the-change")).await.expect("redis"));
    assert!(dedupe.mark_done(&token, &marker()).await.expect("redis"));
    let after = EventHash::new("github", "after-the-change");
    let field: Option<String> = redis::cmd("HGET")
        .arg(after.bucket_key(&config.key_prefix, SERVICE, slot, 4 * BUCKETS))
        .arg(&after.field[..])
        .query_async(&mut connection)
        .await
        .expect("redis");
    assert!(field.is_some(), "in the sub-bucket");
    let default_bucket = after.bucket_key(&config.key_prefix, SERVICE, slot, BUCKETS);
    assert!(!exists(&mut connection, &default_bucket).await, "{default_bucket}");
    assert_eq!(dedupe.claim(&dedupe.token("github", "after-the-change")).await.expect("redis"), Claim::AlreadyDone);
    let looked_up = dedupe_state(&connection, &config.key_prefix, SERVICE, "github", "after-the-change").await;
    assert!(matches!(looked_up, Ok(DedupeState::Processed { .. })), "{looked_up:?}");
}

#[tokio::test]
async fn an_operator_change_takes_effect_only_from_a_slot_that_starts_after_its_lead() {
    let config = config(false);
    let dedupe = Dedupe::connect(&config, SERVICE).await.expect("redis");
    let change = dedupe.change_buckets(u64::from(8 * BUCKETS), None).await.expect("a valid change");
    assert_eq!(change.buckets, 8 * BUCKETS);
    assert!(change.from_slot * SLOT_S >= now_s() + SCHEDULE_LEAD_S, "{change:?}");
    assert!(change.from_slot * SLOT_S < now_s() + SCHEDULE_LEAD_S + SLOT_S, "the first slot past the lead: {change:?}");
    let schedule = hookline_tests::bucket_schedule(&mut raw(&config).await, &config.key_prefix, SERVICE).await;
    assert_eq!(schedule.changes(), &[change]);
    // Another consumer of the service reads it; the current slot keeps the default count.
    let other = Dedupe::connect(&config, SERVICE).await.expect("redis");
    assert_eq!(other.bucket_schedule().expect("fresh").changes(), &[change]);
    let token = acquired(other.claim(&other.token("github", "now")).await.expect("redis"));
    assert!(other.mark_done(&token, &marker()).await.expect("redis"));
    let hash = EventHash::new("github", "now");
    let current = hash.bucket_key(&config.key_prefix, SERVICE, write_slot(now_s()), BUCKETS);
    assert!(exists(&mut raw(&config).await, &current).await, "{current}");

    // A second change goes after the first; a count that is not a power of two in range is refused.
    let second = dedupe.change_buckets(u64::from(2 * BUCKETS), Some(4)).await.expect("a valid change");
    assert_eq!(second, BucketChange { from_slot: change.from_slot + 1, buckets: 2 * BUCKETS, span: 4 });
    let refused = dedupe.change_buckets(50_000, None).await;
    assert!(matches!(refused, Err(ChangeBucketsError::Schedule(ScheduleError::Count(50_000)))), "{refused:?}");
    let schedule = hookline_tests::bucket_schedule(&mut raw(&config).await, &config.key_prefix, SERVICE).await;
    assert_eq!(schedule.changes(), &[change, second]);
}

#[tokio::test]
async fn an_unreadable_schedule_stops_dedupe_at_connect() {
    let config = config(false);
    set_schedule(&config, "lots").await;
    let error = Dedupe::connect(&config, SERVICE).await.expect_err("an unreadable schedule");
    assert!(error.redis_error().to_string().contains("lots"), "{}", error.redis_error());
}

#[tokio::test]
async fn the_sampled_fill_reads_the_last_complete_slots_buckets_with_their_count() {
    let config = config(false);
    let slot = write_slot(now_s());
    // The last complete slot had twice the default buckets; each of them holds three outcomes.
    set_schedule(&config, &format!("{}@{}", 2 * BUCKETS, slot - 1)).await;
    let mut connection = raw(&config).await;
    let mut pipeline = redis::pipe();
    for index in 0..u16::try_from(BUCKETS).expect("16 bits") {
        for sub in 0..2 {
            let bucket = EventHash { field: [0; 16], index, sub_bits: sub };
            let key = bucket.bucket_key(&config.key_prefix, SERVICE, slot - 1, 2 * BUCKETS);
            pipeline.cmd("HSET").arg(&key).arg("a").arg(1).arg("b").arg(2).arg("c").arg(3).ignore();
            pipeline.cmd("PEXPIRE").arg(&key).arg(600_000).ignore();
        }
    }
    let _: () = pipeline.query_async(&mut connection).await.expect("redis");
    // The current slot's buckets are fuller, and not sampled.
    let hash = EventHash::new("github", "current");
    let current = hash.bucket_key(&config.key_prefix, SERVICE, slot, 2 * BUCKETS);
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(&current)
        .arg("x")
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&current)
        .arg(600_000)
        .ignore()
        .query_async(&mut connection)
        .await
        .expect("redis");
    let dedupe = Dedupe::connect(&config, SERVICE).await.expect("redis");
    assert_eq!(dedupe.sampled_bucket_fill().await.expect("redis"), Some(3.0));
    let mut cleanup = redis::pipe();
    for index in 0..u16::try_from(BUCKETS).expect("16 bits") {
        for sub in 0..2 {
            let bucket = EventHash { field: [0; 16], index, sub_bits: sub };
            cleanup.cmd("UNLINK").arg(bucket.bucket_key(&config.key_prefix, SERVICE, slot - 1, 2 * BUCKETS)).ignore();
        }
    }
    let _: () = cleanup.query_async(&mut connection).await.expect("redis");
}
