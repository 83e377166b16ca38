//! Claims and done markers made together (one script call for many records, issue 37) against a real Redis: for
//! keys in every state the one-key rule knows (free, done, dead, dead and taken over by an allowlisted type or a
//! re-drive, held by another consumer, our own claim re-sent, the same event twice in one batch), the many-key call
//! answers key by key what the one-key calls answer one after another, and marks done exactly what they mark.

use hookline_common::{config::RedisConfig, wire::redis_key::DoneMarker};
use hookline_consumer::dedupe::{Claim, ClaimToken, Dedupe};
use hookline_tests::redis_url;

async fn dedupe() -> Dedupe {
    let config = RedisConfig {
        url: redis_url(),
        key_prefix: format!("test:{}", uuid::Uuid::new_v4().simple()),
        ..RedisConfig::default()
    };
    Dedupe::connect(&config, "billing").await.expect("redis")
}

fn acquired(claim: Claim) -> ClaimToken {
    match claim {
        Claim::Acquired(token) => token,
        other => panic!("expected the claim, got {other:?}"),
    }
}

fn marker(offset: i64) -> DoneMarker {
    DoneMarker { processed_at_ms: 1, handling_ms: 1, topic: "webhooks.inbound".into(), partition: 0, offset }
}

/// What a claim answered, without its random claim value: the variant, and for an acquired claim whether it took
/// over a dead marker.
fn shape(claim: &Claim) -> String {
    match claim {
        Claim::Acquired(token) => {
            if format!("{token:?}").contains("took_over: Some") { "acquired over a dead marker" } else { "acquired" }
                .to_owned()
        }
        other => format!("{other:?}"),
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
    let held = dedupe.token("github", "held");
    acquired(dedupe.claim(&held).await.expect("redis"));
    let own = acquired(dedupe.claim(&dedupe.token("github", "own")).await.expect("redis"));
    vec![
        dedupe.token("github", "free"),
        dedupe.token("github", "done"),
        typed("dead", "push"),
        typed("dead-new-type", "push").allowlisted(),
        dedupe.redrive_token("github", "dead-redrive").recording_type(Some("push")),
        dedupe.token("github", "held"),
        own,
        dedupe.token("github", "twice"),
        dedupe.token("github", "twice"),
    ]
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
    assert_eq!(
        lone,
        [
            "acquired",
            "AlreadyDone",
            "DeadLettered",
            "acquired over a dead marker",
            "acquired over a dead marker",
            "HeldByOther",
            "acquired",
            "acquired",
            "HeldByOther",
        ],
        "the one-key rule, as the dedupe tests know it"
    );
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
