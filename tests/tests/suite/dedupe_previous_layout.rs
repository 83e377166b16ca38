//! The previous dedupe layout (one key per event) during a service's upgrade to the bucketed one, against a real
//! Redis, on a single Redis and on the stack's Redis Cluster (issue 44): its keys honoured until they expire (done,
//! filtered, dead, claimed; a dead or typed filtered marker claimed over by an allowlisted type it does not record,
//! P8), and the previous build's protocol run beside this one's.

use std::time::Duration;

use hookline_common::{
    config::RedisConfig,
    wire::{
        dedupe_layout::Outcome,
        now_ms,
        redis_key::{self, DoneMarker},
    },
};
use hookline_consumer::dedupe::{Claim, Dedupe, LayoutHistory, previous_layout};

use super::dedupe_together::{acquired, config, filtered_marker, outcome, raw};

/// A dedupe honouring the previous layout: in its upgrade period (`writing`), or after it (reading only).
async fn upgraded(config: &RedisConfig, writing: bool) -> Dedupe {
    let mut dedupe = Dedupe::connect(config, "billing").await.expect("redis");
    let period_ms = 3_600_000;
    let since_ms = if writing { now_ms() } else { now_ms() - period_ms - 1 };
    dedupe.honour_legacy_layout(LayoutHistory { upgraded: true, since_ms }, period_ms);
    assert!(!dedupe.claims_together(), "the previous layout's keys are claimed one by one");
    dedupe
}

/// Writes the previous layout's key of an event as the previous build wrote it.
async fn write_previous(config: &RedisConfig, event_id: &str, value: &str, ttl_ms: u64) {
    let key = redis_key::dedupe(&config.key_prefix, "billing", "github", event_id);
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(ttl_ms)
        .query_async(&mut raw(config).await)
        .await
        .expect("redis");
}

#[tokio::test]
async fn keys_of_the_previous_layout_make_the_new_one_skip_until_they_expire() {
    for (cluster, writing) in [(false, false), (false, true), (true, false), (true, true)] {
        let config = config(cluster);
        let dedupe = upgraded(&config, writing).await;
        let ttl = 3_600_000;
        write_previous(&config, "done", "done:1767000001230:18:3:18233:webhooks.inbound", ttl).await;
        write_previous(&config, "plain", "done", ttl).await;
        write_previous(&config, "filtered", "done:filtered:test_mode:1767000001230:3:1:webhooks.inbound", ttl).await;
        write_previous(
            &config,
            "dead",
            &redis_key::dead_marker("webhooks.dlq:0:1", &[redis_key::dead_marker_type("bogus")]),
            ttl,
        )
        .await;
        let issues = redis_key::dead_marker_type("issues");
        let typed_filtered = format!("done:filtered:noise:1767000001230:3:1:webhooks.inbound;types=,{issues},");
        write_previous(&config, "filtered-typed", &typed_filtered, ttl).await;
        write_previous(&config, "claimed", "claim:an-old-instance", ttl).await;
        write_previous(&config, "short", "done", 1_000).await;
        let claim = |id: &str| {
            let token = dedupe.token("github", id);
            let dedupe = dedupe.clone();
            async move { dedupe.claim(&token).await }
        };
        let case = format!("cluster {cluster}, upgrade period {writing}");
        assert_eq!(claim("done").await.expect("redis"), Claim::AlreadyDone, "{case}");
        assert_eq!(claim("plain").await.expect("redis"), Claim::AlreadyDone, "{case}");
        assert_eq!(claim("filtered").await.expect("redis"), Claim::AlreadyDone, "{case}");
        assert_eq!(claim("dead").await.expect("redis"), Claim::DeadLettered, "{case}");
        assert_eq!(claim("claimed").await.expect("redis"), Claim::HeldByOther, "{case}");
        acquired(claim("fresh").await.expect("redis"));
        // An allowlisted type the old marker does not record claims over it, and its dead marker keeps both types.
        let typed = dedupe.token("github", "dead").recording_type(Some("push")).allowlisted();
        let over = acquired(dedupe.claim(&typed).await.expect("redis"));
        dedupe.mark_dead(&over, "webhooks.dlq:0:2").await.expect("redis");
        let both = [redis_key::dead_marker_type("bogus"), redis_key::dead_marker_type("push")];
        assert!(
            matches!(outcome(&config, "github", "dead").await, Some(Outcome::Dead { marker, .. }) if marker == redis_key::dead_marker("webhooks.dlq:0:2", &both)),
            "{case}"
        );
        // P8 on the old keys: a filtered marker that records types is claimed over by an allowlisted type it does
        // not record (and the new outcome keeps both types); one from before types were recorded, by nothing.
        let copy = |id: &str, event_type: &str| dedupe.token("github", id).recording_type(Some(event_type));
        let pushed = || copy("filtered-typed", "push").allowlisted();
        assert_eq!(
            dedupe.claim(&copy("filtered", "push").allowlisted()).await.expect("redis"),
            Claim::AlreadyDone,
            "{case}"
        );
        assert_eq!(dedupe.claim(&copy("filtered-typed", "push")).await.expect("redis"), Claim::AlreadyDone, "{case}");
        assert_eq!(
            dedupe.claim(&copy("filtered-typed", "issues").allowlisted()).await.expect("redis"),
            Claim::AlreadyDone,
            "{case}"
        );
        let over = acquired(dedupe.claim(&pushed()).await.expect("redis"));
        assert!(dedupe.mark_filtered(&over, &filtered_marker("noise", 2)).await.expect("redis"), "{case}");
        let both = vec![issues.clone(), redis_key::dead_marker_type("push")];
        let found = outcome(&config, "github", "filtered-typed").await;
        assert!(
            matches!(&found, Some(Outcome::Filtered { types: Some(types), .. }) if *types == both),
            "{case}: {found:?}"
        );
        assert_eq!(dedupe.claim(&pushed()).await.expect("redis"), Claim::AlreadyDone, "{case}");
        // Expired, the old key no longer counts.
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        acquired(claim("short").await.expect("redis"));
    }
}

/// What the previous build's consumer does with one event's key: its scripts, with its arguments.
pub(super) struct PreviousInstance {
    pub(super) config: RedisConfig,
    pub(super) token: String,
}

impl PreviousInstance {
    fn key(&self, id: &str) -> String {
        redis_key::dedupe(&self.config.key_prefix, "billing", "github", id)
    }

    async fn run<T: redis::FromRedisValue>(&self, script: &str, id: &str, args: &[String]) -> T {
        let script = redis::Script::new(script);
        let mut invocation = script.key(self.key(id));
        invocation.arg(&self.token);
        for arg in args {
            invocation.arg(arg);
        }
        invocation.invoke_async(&mut raw(&self.config).await).await.expect("redis")
    }

    async fn claim(&self, id: &str) -> String {
        self.claim_as(id, "").await
    }

    /// A claim by a copy of allowlisted type `hex` (empty: none).
    async fn claim_as(&self, id: &str, hex: &str) -> String {
        let args = [self.config.claim_lease_ms.to_string(), "done".into(), "0".into(), hex.to_owned()];
        self.run(previous_layout::CLAIM_SCRIPT, id, &args).await
    }

    async fn done(&self, id: &str) -> i64 {
        let marker = DoneMarker { processed_at_ms: 1, handling_ms: 1, topic: "t".into(), partition: 0, offset: 1 };
        let ttl = (self.config.dedupe_ttl_s * 1000).to_string();
        self.run(previous_layout::DONE_SCRIPT, id, &[marker.encode(), ttl]).await
    }

    async fn dead(&self, id: &str) -> i64 {
        let ttl = (self.config.dedupe_ttl_s * 1000).to_string();
        self.run(previous_layout::DEAD_SCRIPT, id, &[redis_key::dead_marker("webhooks.dlq:0:5", &[]), ttl]).await
    }

    async fn release(&self, id: &str) -> i64 {
        let ttl = (self.config.dedupe_ttl_s * 1000).to_string();
        self.run(previous_layout::RELEASE_SCRIPT, id, &[String::new(), ttl]).await
    }
}

async fn previous_protocol_beside_the_new_one(cluster: bool) {
    let config = config(cluster);
    let new = upgraded(&config, true).await;
    let old = PreviousInstance { config: config.clone(), token: "claim:old-instance".to_owned() };
    let marker = DoneMarker { processed_at_ms: 1, handling_ms: 1, topic: "t".into(), partition: 0, offset: 2 };

    // The old instance processes an event: the new one waits for it, then skips it.
    assert_eq!(old.claim("a").await, "acquired");
    assert_eq!(new.claim(&new.token("github", "a")).await.expect("redis"), Claim::HeldByOther);
    assert_eq!(old.done("a").await, 1);
    assert_eq!(new.claim(&new.token("github", "a")).await.expect("redis"), Claim::AlreadyDone);

    // The new instance processes an event: the old one waits for it, then skips it.
    let token = acquired(new.claim(&new.token("github", "b")).await.expect("redis"));
    assert_eq!(old.claim("b").await, "held");
    assert!(new.renew(&token).await.expect("redis"));
    assert!(new.mark_done(&token, &marker).await.expect("redis"));
    assert_eq!(old.claim("b").await, "done");

    // A retryable failure on the new instance gives the event to whichever claims next, the old one included; a
    // claim the new one could not take in its own layout gives the old key back.
    let token = acquired(new.claim(&new.token("github", "c")).await.expect("redis"));
    new.release(&token).await.expect("redis");
    assert_eq!(old.claim("c").await, "acquired");
    assert_eq!(new.claim(&new.token("github", "c")).await.expect("redis"), Claim::HeldByOther);
    assert_eq!(old.release("c").await, 1);
    acquired(new.claim(&new.token("github", "c")).await.expect("redis"));

    // Dead letters, both ways.
    assert_eq!(old.claim("d").await, "acquired");
    assert_eq!(old.dead("d").await, 1);
    assert_eq!(new.claim(&new.token("github", "d")).await.expect("redis"), Claim::DeadLettered);
    let token = acquired(new.claim(&new.token("github", "e")).await.expect("redis"));
    new.mark_dead(&token, "webhooks.dlq:0:6").await.expect("redis");
    assert_eq!(old.claim("e").await, "dead");

    // Filtered by the new one: a done to the old one, but for a copy of an allowlisted type it does not record
    // (P8: the old key's marker records the types as the previous build's would).
    let typed = new.token("github", "f").recording_type(Some("issues")).allowlisted();
    let token = acquired(new.claim(&typed).await.expect("redis"));
    assert!(new.mark_filtered(&token, &filtered_marker("x", 7)).await.expect("redis"));
    assert_eq!(old.claim("f").await, "done");
    assert_eq!(old.claim_as("f", &redis_key::dead_marker_type("issues")).await, "done");
    let over = old.claim_as("f", &redis_key::dead_marker_type("push")).await;
    assert!(over.starts_with("over:done:filtered:x:"), "{over}");
    assert_eq!(new.claim(&new.token("github", "f")).await.expect("redis"), Claim::HeldByOther, "the old one runs it");
}

#[tokio::test]
async fn the_previous_protocol_beside_the_new_one_never_processes_an_event_twice() {
    previous_protocol_beside_the_new_one(false).await;
}

#[tokio::test]
async fn the_previous_protocol_beside_the_new_one_on_a_redis_cluster() {
    // Needs `scripts/stack start-redis-cluster` (scripts/test starts it).
    previous_protocol_beside_the_new_one(true).await;
}
