//! The dedupe layout's states and transitions against a real Redis, on a single Redis and on the stack's Redis
//! Cluster (issue 44): claimed, held by another, renewed, released, lapsed, done, filtered, dead; the remembered
//! outcomes kept in compact (listpack) buckets; a source's own window. (The previous layout during an upgrade:
//! [`super::dedupe_previous_layout`].)
//!
//! And claims and done markers made together (one script call for many records, issue 37): for events in every
//! state the one-event rule knows (free, done, dead, dead and taken over by an allowlisted type or a re-drive,
//! filtered, filtered and taken over by an allowlisted type it does not record (P8), held by another consumer, our
//! own claim re-sent, the same event twice in one batch), the many-event call answers
//! event by event what the one-event calls answer one after another, and marks done exactly what they mark.

use std::{collections::HashMap, time::Duration};

use hookline_common::{
    config::RedisConfig,
    redis_connection::RedisConnection,
    wire::{
        dedupe_layout::{EventHash, Outcome},
        now_ms,
        redis_key::{self, DoneMarker, FilteredMarker},
    },
};
use hookline_consumer::dedupe::{Claim, ClaimToken, Dedupe, previous_layout};
use hookline_tests::{redis_cluster_urls, redis_url};

use super::dedupe_previous_layout::PreviousInstance;

pub(super) fn config(cluster: bool) -> RedisConfig {
    RedisConfig {
        url: if cluster { redis_cluster_urls() } else { redis_url() },
        cluster,
        key_prefix: format!("test:{}", uuid::Uuid::new_v4().simple()),
        claim_lease_ms: 1_000,
        ..RedisConfig::default()
    }
}

async fn dedupe() -> Dedupe {
    Dedupe::connect(&config(false), "billing").await.expect("redis")
}

pub(super) fn acquired(claim: Claim) -> ClaimToken {
    match claim {
        Claim::Acquired(token) => token,
        other => panic!("expected the claim, got {other:?}"),
    }
}

fn marker(offset: i64) -> DoneMarker {
    DoneMarker { processed_at_ms: 1, handling_ms: 1, topic: "webhooks.inbound".into(), partition: 0, offset }
}

/// What a claim answered, without its random claim value: the variant, and for an acquired claim whether it took
/// over a dead marker or a filtered outcome.
fn shape(claim: &Claim) -> String {
    match claim {
        Claim::Acquired(token) => {
            let token = format!("{token:?}");
            if token.contains("took_over: Some(\"dead:") {
                "acquired over a dead marker"
            } else if token.contains("took_over: Some(\"f") {
                "acquired over a filtered outcome"
            } else if token.contains("took_over: Some") {
                "acquired over something else"
            } else {
                "acquired"
            }
            .to_owned()
        }
        other => format!("{other:?}"),
    }
}

pub(super) fn filtered_marker(filter: &str, offset: i64) -> FilteredMarker {
    FilteredMarker {
        filter: filter.into(),
        filtered_at_ms: 1,
        topic: "t".into(),
        partition: 0,
        offset,
        types: Vec::new(),
    }
}

/// Puts keys into every state and returns the tokens to claim them with next, in order.
async fn prepare(dedupe: &Dedupe) -> Vec<ClaimToken> {
    let typed = |id: &str, event_type: &str| dedupe.token("github", id).recording_type(Some(event_type));
    let done = acquired(dedupe.claim(&dedupe.token("github", "done")).await.expect("redis"));
    assert!(dedupe.mark_done(&done, &marker(1)).await.expect("redis"));
    for id in ["dead", "dead-new-type", "dead-redrive"] {
        let first = acquired(dedupe.claim(&typed(id, "bogus")).await.expect("redis"));
        dedupe.mark_dead(&first, "webhooks.dlq:0:1").await.expect("redis");
    }
    for id in ["filtered", "filtered-new-type"] {
        let first = acquired(dedupe.claim(&typed(id, "issues").allowlisted()).await.expect("redis"));
        assert!(dedupe.mark_filtered(&first, &filtered_marker("noise", 1)).await.expect("redis"));
    }
    let held = dedupe.token("github", "held");
    acquired(dedupe.claim(&held).await.expect("redis"));
    let own = acquired(dedupe.claim(&dedupe.token("github", "own")).await.expect("redis"));
    vec![
        dedupe.token("github", "free"),
        dedupe.token("github", "done"),
        typed("dead", "push"),
        typed("dead-new-type", "push").allowlisted(),
        dedupe.redrive_token("github", "dead-redrive").recording_type(Some("push")),
        typed("filtered", "issues").allowlisted(),
        typed("filtered-new-type", "push").allowlisted(),
        dedupe.token("github", "held"),
        own,
        dedupe.token("github", "twice"),
        dedupe.token("github", "twice"),
    ]
}

/// The answers of the one-event rule for [`prepare`]'s states.
const ONE_EVENT_ANSWERS: [&str; 11] = [
    "acquired",
    "AlreadyDone",
    "DeadLettered",
    "acquired over a dead marker",
    "acquired over a dead marker",
    "AlreadyDone",
    "acquired over a filtered outcome",
    "HeldByOther",
    "acquired",
    "acquired",
    "HeldByOther",
];

#[tokio::test]
async fn every_claim_answer_holds_on_a_redis_cluster() {
    // Needs `scripts/stack start-redis-cluster` (scripts/test starts it).
    let dedupe = Dedupe::connect(&config(true), "billing").await.expect("redis cluster");
    assert!(!dedupe.claims_together(), "a cluster claims one event at a time");
    let mut answers = Vec::new();
    for token in &prepare(&dedupe).await {
        answers.push(shape(&dedupe.claim(token).await.expect("redis")));
    }
    assert_eq!(answers, ONE_EVENT_ANSWERS);
}

#[tokio::test]
async fn claims_and_done_markers_made_together_answer_what_one_key_calls_answer() {
    let (alone, together) = (dedupe().await, dedupe().await);
    assert!(together.claims_together(), "a single Redis claims together");

    let tokens = prepare(&alone).await;
    let mut lone_claims = Vec::new();
    for token in &tokens {
        lone_claims.push(alone.claim(token).await.expect("redis"));
    }
    let tokens = prepare(&together).await;
    let refs: Vec<&ClaimToken> = tokens.iter().collect();
    let claims = together.claim_together(&refs).await.expect("redis");

    let lone: Vec<String> = lone_claims.iter().map(shape).collect();
    let batched: Vec<String> = claims.iter().map(shape).collect();
    assert_eq!(lone, ONE_EVENT_ANSWERS, "the one-event rule, as the dedupe tests know it");
    assert_eq!(batched, lone, "the many-key call answers key by key what the one-key calls answer");

    // Marked done together: every acquired claim is still ours; a claim we never held is not, and is not taken.
    let mut acquired_tokens: Vec<ClaimToken> = Vec::new();
    for claim in claims {
        if let Claim::Acquired(token) = claim {
            acquired_tokens.push(token);
        }
    }
    let markers: Vec<DoneMarker> = (0..acquired_tokens.len()).map(|n| marker(n as i64 + 10)).collect();
    let pairs: Vec<(&ClaimToken, &DoneMarker)> = acquired_tokens.iter().zip(&markers).collect();
    let still_ours = together.done_together(&pairs).await.expect("redis");
    assert_eq!(still_ours, vec![true; acquired_tokens.len()]);
    for token in &acquired_tokens {
        assert_eq!(together.claim(token).await.expect("redis"), Claim::AlreadyDone, "marked done");
    }
    // A second done call for the same claims (a reply lost) still says they were ours.
    assert_eq!(together.done_together(&pairs).await.expect("redis"), vec![true; acquired_tokens.len()]);
    // A done call for a claim this consumer does not hold says so (and, like the one-key call, marks the key done).
    let stranger = together.token("github", "held");
    assert_eq!(together.done_together(&[(&stranger, &markers[0])]).await.expect("redis"), vec![false]);
}

pub(super) async fn raw(config: &RedisConfig) -> RedisConnection {
    RedisConnection::connect(config).await.expect("redis")
}

/// The outcome the event's buckets hold, read as lookup reads it.
pub(super) async fn outcome(config: &RedisConfig, source: &str, event_id: &str) -> Option<Outcome> {
    let mut connection = raw(config).await;
    let hash = EventHash::new(source, event_id);
    let now_s = u64::try_from(now_ms() / 1000).expect("redis");
    let mut found = None;
    let schedule = hookline_tests::bucket_schedule(&mut connection, &config.key_prefix, "billing").await;
    for bucket in hash.window_buckets(&config.key_prefix, "billing", now_s, config.dedupe_ttl_s, &schedule) {
        let value: Option<String> =
            redis::cmd("HGET").arg(&bucket).arg(&hash.field[..]).query_async(&mut connection).await.expect("redis");
        found = found.or(value.as_deref().and_then(Outcome::decode));
    }
    found
}

/// Every state and transition of one event on the bucketed layout, for service `billing` of `config` (whatever
/// bucket schedule it has).
pub(super) async fn states_and_transitions(config: RedisConfig) {
    let dedupe = Dedupe::connect(&config, "billing").await.expect("redis");
    let done = |offset| DoneMarker { processed_at_ms: 1, handling_ms: 1, topic: "t".into(), partition: 0, offset };

    // Free, claimed; our claim re-sent is still ours; another consumer's claim is held, not a duplicate.
    let first = dedupe.token("github", "e1");
    assert_eq!(dedupe.claim(&first).await.expect("redis"), Claim::Acquired(first.clone()));
    assert_eq!(dedupe.claim(&first).await.expect("redis"), Claim::Acquired(first.clone()), "a re-sent claim");
    assert_eq!(dedupe.claim(&dedupe.token("github", "e1")).await.expect("redis"), Claim::HeldByOther);
    // Renewed; released (compare-and-delete): a stranger's release takes nothing, then another claims it.
    assert!(dedupe.renew(&first).await.expect("redis"));
    dedupe.release(&dedupe.token("github", "e1")).await.expect("redis");
    assert_eq!(
        dedupe.claim(&dedupe.token("github", "e1")).await.expect("redis"),
        Claim::HeldByOther,
        "not ours to free"
    );
    dedupe.release(&first).await.expect("redis");
    assert!(!dedupe.renew(&first).await.expect("redis"), "released: nothing to renew");
    let second = acquired(dedupe.claim(&dedupe.token("github", "e1")).await.expect("redis"));
    // The held claim is waited on: done, it answers done to the one waiting.
    let waiting = dedupe.token("github", "e1");
    assert_eq!(dedupe.claim(&waiting).await.expect("redis"), Claim::HeldByOther);
    assert!(dedupe.mark_done(&second, &done(1)).await.expect("redis"));
    assert!(dedupe.mark_done(&second, &done(1)).await.expect("redis"), "a re-sent done: still ours");
    assert_eq!(dedupe.claim(&waiting).await.expect("redis"), Claim::AlreadyDone);
    assert!(matches!(outcome(&config, "github", "e1").await, Some(Outcome::Processed { .. })));
    // A stranger's dead marker never replaces a done outcome.
    dedupe.mark_dead(&dedupe.token("github", "e1"), "webhooks.dlq:0:9").await.expect("redis");
    assert_eq!(dedupe.claim(&dedupe.token("github", "e1")).await.expect("redis"), Claim::AlreadyDone);
    // A re-processing run has its own claim.
    acquired(dedupe.claim(&dedupe.reprocess_token("run-1", "github", "e1")).await.expect("redis"));

    // A lapsed lease (the owner died): another consumer claims; the late owner's done says the claim was lost,
    // and leaves the new owner's claim alone.
    let dying = acquired(dedupe.claim(&dedupe.token("github", "e2")).await.expect("redis"));
    tokio::time::sleep(dedupe.lease() + Duration::from_millis(300)).await;
    let taker = acquired(dedupe.claim(&dedupe.token("github", "e2")).await.expect("redis"));
    assert!(!dedupe.mark_done(&dying, &done(2)).await.expect("redis"), "the lease had lapsed");
    assert!(dedupe.renew(&taker).await.expect("redis"), "the new owner's claim is still there");
    assert!(dedupe.mark_done(&taker, &done(2)).await.expect("redis"));

    // Filtered: a done outcome naming the filter, and the types of the copies filtered (none here).
    let filtered = acquired(dedupe.claim(&dedupe.token("github", "e3")).await.expect("redis"));
    assert!(dedupe.mark_filtered(&filtered, &filtered_marker("test_mode", 3)).await.expect("redis"));
    assert_eq!(dedupe.claim(&dedupe.token("github", "e3")).await.expect("redis"), Claim::AlreadyDone);
    let found = outcome(&config, "github", "e3").await;
    assert!(
        matches!(&found, Some(Outcome::Filtered { filter, types: Some(types), .. }) if filter == "test_mode" && types.is_empty()),
        "{found:?}"
    );

    // Dead: skipped; a re-drive claims over it; released, the dead outcome is as it was; done, it is done.
    let dying =
        acquired(dedupe.claim(&dedupe.token("github", "e4").recording_type(Some("push"))).await.expect("redis"));
    dedupe.mark_dead(&dying, "webhooks.dlq:0:4").await.expect("redis");
    dedupe.mark_dead(&dying, "webhooks.dlq:0:4").await.expect("redis"); // re-sent
    assert_eq!(dedupe.claim(&dedupe.token("github", "e4")).await.expect("redis"), Claim::DeadLettered);
    match outcome(&config, "github", "e4").await {
        Some(Outcome::Dead { marker, .. }) => {
            assert_eq!(marker, redis_key::dead_marker("webhooks.dlq:0:4", &[redis_key::dead_marker_type("push")]));
        }
        other => panic!("expected the dead outcome, got {other:?}"),
    }
    let redrive = acquired(dedupe.claim(&dedupe.redrive_token("github", "e4")).await.expect("redis"));
    assert_eq!(
        dedupe.claim(&dedupe.token("github", "e4")).await.expect("redis"),
        Claim::HeldByOther,
        "the re-drive runs"
    );
    dedupe.release(&redrive).await.expect("redis");
    assert_eq!(dedupe.claim(&dedupe.token("github", "e4")).await.expect("redis"), Claim::DeadLettered);
    let redrive = acquired(dedupe.claim(&dedupe.redrive_token("github", "e4")).await.expect("redis"));
    assert!(dedupe.mark_done(&redrive, &done(4)).await.expect("redis"));
    assert_eq!(dedupe.claim(&dedupe.redrive_token("github", "e4")).await.expect("redis"), Claim::AlreadyDone);

    // The remembered outcomes sit in compact buckets, which expire whole; the claim keys are gone.
    let mut connection = raw(&config).await;
    let hash = EventHash::new("github", "e1");
    let now_s = u64::try_from(now_ms() / 1000).expect("redis");
    let schedule = hookline_tests::bucket_schedule(&mut connection, &config.key_prefix, "billing").await;
    let bucket = hash.write_bucket(&config.key_prefix, "billing", now_s, &schedule);
    let encoding: String =
        redis::cmd("OBJECT").arg("ENCODING").arg(&bucket).query_async(&mut connection).await.expect("redis");
    assert_eq!(encoding, "listpack");
    let ttl_ms: i64 = redis::cmd("PTTL").arg(&bucket).query_async(&mut connection).await.expect("redis");
    assert!(
        ttl_ms > i64::try_from(config.dedupe_ttl_s * 1000).expect("redis"),
        "the bucket outlives the window: {ttl_ms}"
    );
    let claim: Option<String> = redis::cmd("GET")
        .arg(hash.claim_key(&config.key_prefix, "billing"))
        .query_async(&mut connection)
        .await
        .expect("redis");
    assert_eq!(claim, None, "done ends the claim");
}

#[tokio::test]
async fn every_state_and_transition_of_the_bucketed_layout_on_a_single_redis() {
    states_and_transitions(config(false)).await;
}

#[tokio::test]
async fn every_state_and_transition_of_the_bucketed_layout_on_a_redis_cluster() {
    // Needs `scripts/stack start-redis-cluster` (scripts/test starts it).
    states_and_transitions(config(true)).await;
}

#[tokio::test]
async fn a_source_with_a_short_window_processes_a_re_sent_event_again_after_it() {
    for cluster in [false, true] {
        let config = config(cluster);
        let dedupe = Dedupe::connect(&config, "billing")
            .await
            .expect("redis")
            .with_source_windows(HashMap::from([("shopify".to_owned(), 2)]));
        let marker = DoneMarker { processed_at_ms: 1, handling_ms: 1, topic: "t".into(), partition: 0, offset: 0 };
        for source in ["shopify", "github"] {
            let token = acquired(dedupe.claim(&dedupe.token(source, "e1")).await.expect("redis"));
            assert!(dedupe.mark_done(&token, &marker).await.expect("redis"));
            assert_eq!(dedupe.claim(&dedupe.token(source, "e1")).await.expect("redis"), Claim::AlreadyDone, "{source}");
        }
        // Redis's clock counts whole seconds: 3 s is past a 2 s window whatever the second the done fell in.
        tokio::time::sleep(Duration::from_secs(3)).await;
        acquired(dedupe.claim(&dedupe.token("shopify", "e1")).await.expect("redis"));
        assert_eq!(
            dedupe.claim(&dedupe.token("github", "e1")).await.expect("redis"),
            Claim::AlreadyDone,
            "the default window"
        );
    }
}

/// `INFO` field `name` of a Redis, as a number.
async fn info_number(connection: &mut RedisConnection, section: &str, name: &str) -> f64 {
    let info: String = redis::cmd("INFO").arg(section).query_async(connection).await.expect("redis");
    let line = info.lines().find_map(|line| line.strip_prefix(&format!("{name}:"))).unwrap_or_else(|| panic!("{name}"));
    line.trim().parse().expect("redis")
}

/// Redis `used_memory` and CPU (user + sys, s) now.
async fn memory_and_cpu(connection: &mut RedisConnection) -> (f64, f64) {
    let memory = info_number(connection, "memory", "used_memory").await;
    let cpu =
        info_number(connection, "cpu", "used_cpu_user").await + info_number(connection, "cpu", "used_cpu_sys").await;
    (memory, cpu)
}

/// The measurement of docs/benchmarks/dedupe-layout.md: Redis bytes and CPU per remembered event, the previous
/// layout's scripts against this one's, each event claimed then marked done, at the defaults. Run it against a
/// Redis of its own (it flushes it): `redis-server --port 16999 --save '' --appendonly no`, then
/// `DEDUPE_BYTES_REDIS=redis://127.0.0.1:16999 DEDUPE_BYTES_EVENTS=1000000 cargo test --release -p hookline-tests
/// --test suite -- --ignored --nocapture dedupe_together::bytes_per_remembered_event`.
#[tokio::test]
#[ignore = "a measurement: needs a Redis of its own, which it flushes"]
async fn bytes_per_remembered_event() {
    use futures_util::StreamExt;
    let url = std::env::var("DEDUPE_BYTES_REDIS").expect("DEDUPE_BYTES_REDIS: a Redis this measurement may flush");
    let events: usize = std::env::var("DEDUPE_BYTES_EVENTS").map_or(1_000_000, |n| n.parse().expect("redis"));
    let config = RedisConfig {
        url,
        key_prefix: "hookline:dedupe".to_owned(),
        response_timeout_ms: 60_000,
        ..RedisConfig::default()
    };
    let mut connection = raw(&config).await;
    // Event ids as a provider sends them (a UUID), the topic and positions of a busy inbound topic.
    let id = |n: usize| format!("{:08x}-5d1c-4b8e-9f3a-{:012x}", n, n * 7919);
    let marker = |n: usize| DoneMarker {
        processed_at_ms: 1_767_000_001_230 + n as i64,
        handling_ms: 3,
        topic: "webhooks.inbound".into(),
        partition: (n % 12) as i32,
        offset: 18_233_000 + n as i64,
    };
    // `DEDUPE_BYTES_LAYOUTS`: which to run, of `previous`, `bucketed` (the default count) and `bucketed:<n>` (n
    // buckets per slot from the bucket schedule); by default the first two.
    // `DEDUPE_BYTES_TOGETHER`: n > 1 claims and marks done n events per call, as records started together are.
    let together: usize = std::env::var("DEDUPE_BYTES_TOGETHER").map_or(1, |n| n.parse().expect("a count"));
    let layouts = std::env::var("DEDUPE_BYTES_LAYOUTS").unwrap_or_else(|_| "previous,bucketed".to_owned());
    println!("| layout | events | used_memory growth | bytes per event | Redis CPU per event (claim + done) |");
    println!("|---|---|---|---|---|");
    for layout in layouts.split(',') {
        let _: () = redis::cmd("FLUSHALL").arg("SYNC").query_async(&mut connection).await.expect("redis");
        if let Some(buckets) = layout.strip_prefix("bucketed:") {
            let _: () = redis::cmd("SET")
                .arg(redis_key::dedupe_buckets(&config.key_prefix, "billing"))
                .arg(format!("{buckets}@0"))
                .query_async(&mut connection)
                .await
                .expect("redis");
        }
        let dedupe = Dedupe::connect(&config, "billing").await.expect("redis");
        let previous = PreviousInstance { config: config.clone(), token: "claim:9b2e4c1a-previous".to_owned() };
        let previous_connection = raw(&config).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (memory_before, cpu_before) = memory_and_cpu(&mut connection).await;
        if together > 1 && layout.starts_with("bucketed") {
            // The consumer's path at volume: records started together, claimed and marked done by one call each.
            let chunks: Vec<Vec<usize>> =
                (0..events).collect::<Vec<_>>().chunks(together).map(<[usize]>::to_vec).collect();
            futures_util::stream::iter(chunks)
                .for_each_concurrent((512 / together).max(1), |chunk| {
                    let dedupe = &dedupe;
                    async move {
                        let tokens: Vec<_> = chunk.iter().map(|&n| dedupe.token("github", &id(n))).collect();
                        let claims = dedupe.claim_together(&tokens.iter().collect::<Vec<_>>()).await.expect("redis");
                        let claimed: Vec<_> = claims.into_iter().map(acquired).collect();
                        let markers: Vec<_> = chunk.iter().map(|&n| marker(n)).collect();
                        let done: Vec<_> = claimed.iter().zip(&markers).collect();
                        let ours = dedupe.done_together(&done).await.expect("redis");
                        assert!(ours.into_iter().all(|ours| ours));
                    }
                })
                .await;
        } else if together > 1 {
            // The previous build's path for records started together: its one-key scripts made many-key as it made
            // them (`previous_many_keys`).
            let claim = redis::Script::new(&previous_many_keys(previous_layout::CLAIM_SCRIPT, 5));
            let done = redis::Script::new(&previous_many_keys(previous_layout::DONE_SCRIPT, 3));
            let chunks: Vec<Vec<usize>> =
                (0..events).collect::<Vec<_>>().chunks(together).map(<[usize]>::to_vec).collect();
            futures_util::stream::iter(chunks)
                .for_each_concurrent((512 / together).max(1), |chunk| {
                    let (claim, done, previous, mut previous_connection) =
                        (&claim, &done, &previous, previous_connection.clone());
                    async move {
                        let keys: Vec<String> = chunk
                            .iter()
                            .map(|&n| redis_key::dedupe("hookline:dedupe", "billing", "github", &id(n)))
                            .collect();
                        let mut invocation = claim.prepare_invoke();
                        for key in &keys {
                            invocation.key(key).arg(&previous.token).arg(previous.config.claim_lease_ms);
                            invocation.arg("done").arg("0").arg("");
                        }
                        let claims: Vec<String> =
                            invocation.invoke_async(&mut previous_connection).await.expect("redis");
                        assert!(claims.iter().all(|claim| claim == "acquired"));
                        let mut invocation = done.prepare_invoke();
                        for (key, &n) in keys.iter().zip(&chunk) {
                            invocation.key(key).arg(&previous.token).arg(marker(n).encode());
                            invocation.arg(previous.config.dedupe_ttl_s * 1000);
                        }
                        let done: Vec<i64> = invocation.invoke_async(&mut previous_connection).await.expect("redis");
                        assert!(done.iter().all(|done| *done == 1));
                    }
                })
                .await;
        } else {
            futures_util::stream::iter(0..events)
                .for_each_concurrent(512, |n| {
                    let (dedupe, previous, mut previous_connection) = (&dedupe, &previous, previous_connection.clone());
                    async move {
                        if layout.starts_with("bucketed") {
                            let token = acquired(dedupe.claim(&dedupe.token("github", &id(n))).await.expect("redis"));
                            assert!(dedupe.mark_done(&token, &marker(n)).await.expect("redis"));
                        } else {
                            let key = redis_key::dedupe("hookline:dedupe", "billing", "github", &id(n));
                            let claim: String = redis::Script::new(previous_layout::CLAIM_SCRIPT)
                                .key(&key)
                                .arg(&previous.token)
                                .arg(previous.config.claim_lease_ms)
                                .arg("done")
                                .arg("0")
                                .arg("")
                                .invoke_async(&mut previous_connection)
                                .await
                                .expect("redis");
                            assert_eq!(claim, "acquired");
                            let done: i64 = redis::Script::new(previous_layout::DONE_SCRIPT)
                                .key(&key)
                                .arg(&previous.token)
                                .arg(marker(n).encode())
                                .arg(previous.config.dedupe_ttl_s * 1000)
                                .invoke_async(&mut previous_connection)
                                .await
                                .expect("redis");
                            assert_eq!(done, 1);
                        }
                    }
                })
                .await;
        }
        let (memory_after, cpu_after) = memory_and_cpu(&mut connection).await;
        let growth = memory_after - memory_before;
        println!(
            "| {layout} | {events} | {growth:.0} B | {:.1} B | {:.2} µs |",
            growth / events as f64,
            (cpu_after - cpu_before) * 1e6 / events as f64
        );
    }
}

/// How the previous build made a many-key script of a one-key one taking `width` arguments (its `together.rs`):
/// the body becomes a function called for each key with that key's arguments, the replies in key order.
fn previous_many_keys(one_key: &str, width: usize) -> String {
    let mut body = one_key.replace("KEYS[1]", "key");
    for n in (1..=width).rev() {
        body = body.replace(&format!("ARGV[{n}]"), &format!("a{n}"));
    }
    let params: Vec<String> = (1..=width).map(|n| format!("a{n}")).collect();
    let args: Vec<String> = (1..=width).map(|n| format!("ARGV[base + {n}]")).collect();
    format!(
        "local function one(key, {})\n{body}\nend\nlocal replies = {{}}\nfor i, key in ipairs(KEYS) do\n  local base = \
         (i - 1) * {width}\n  replies[i] = one(key, {})\nend\nreturn replies\n",
        params.join(", "),
        args.join(", ")
    )
}
