//! A forged flood on a public-key source (SendGrid's ECDSA costs about 20 HMACs) cannot take another source's
//! share: each public-key source verifies at most its budget at once, on the blocking pool, and past it answers
//! 503 `verify_busy` without taking an in-flight permit. And with `limits.peer_rate_per_s`, a flood from one
//! address is paced to that rate before anything else is done for it, whatever the source. Counts only; the rate
//! figures are in docs/benchmarks/gateway-attacks.md.

use std::{
    sync::Arc,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use hookline_common::config::SecretRef;
use hookline_gateway::config::{Limits, SourceConfig};
use hookline_tests::{Delivery, TestStack};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};

/// SendGrid's published verification key and a signature of its (with another timestamp, so: a forgery whose
/// check costs a full ECDSA verification).
const SENDGRID_PUBLIC_KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==";
const FORGED_SIGNATURE: &str =
    "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=";

#[tokio::test]
async fn a_sendgrid_flood_leaves_another_sources_accepted_rate() {
    const N_FLOODERS: usize = 48;
    const N_FORGED_EACH: usize = 40;
    const N_VALID: usize = 40;
    let path = std::env::temp_dir().join(format!("hookline-flood-{}.secret", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, SENDGRID_PUBLIC_KEY).expect("write key");
    let stack = TestStack::builder()
        .gateway_source(SourceConfig::new(
            "sendgrid",
            "sendgrid",
            vec![SecretRef::from_file("events", path.display().to_string())],
        ))
        // Fewer permits than flooders: before the budget, the forgeries held them while verifying.
        .gateway_limits(Limits { max_in_flight: 16, max_costly_verifications_per_source: 1, ..Limits::default() })
        .build()
        .await;
    let stack = Arc::new(stack);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs().to_string();

    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..N_FLOODERS {
        let (stack, now) = (stack.clone(), now.clone());
        flood.spawn(async move {
            let mut statuses = Vec::with_capacity(N_FORGED_EACH);
            for n in 0..N_FORGED_EACH {
                let request = Request::post(format!("http://{}/webhooks/sendgrid", stack.gateway_addr))
                    .header("x-twilio-email-event-webhook-signature", FORGED_SIGNATURE)
                    .header("x-twilio-email-event-webhook-timestamp", now.as_str())
                    .body(Full::new(format!(r#"[{{"event":"forged","n":{n}}}]"#).into()))
                    .expect("request");
                let reply = stack.send(request).await;
                statuses.push((reply.status, reply.error_code()));
            }
            statuses
        });
    }
    let mut accepted = 0;
    for index in 0..N_VALID {
        let reply = stack.post(&Delivery::new(format!(r#"{{"during_flood":{index}}}"#))).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "a valid delivery during the flood: {:?}", reply.body);
        accepted += 1;
    }
    let (mut n_verified_and_refused, mut n_deferred) = (0, 0);
    while let Some(statuses) = flood.join_next().await {
        for (status, code) in statuses.expect("flooder") {
            match (status, code.as_deref()) {
                (StatusCode::UNAUTHORIZED, Some("signature_mismatch")) => n_verified_and_refused += 1,
                (StatusCode::SERVICE_UNAVAILABLE, Some("verify_busy")) => n_deferred += 1,
                other => panic!("a forgery is refused or deferred, never anything else: {other:?}"),
            }
        }
    }
    assert_eq!(accepted, N_VALID, "the other source's deliveries were all accepted during the flood");
    assert!(n_verified_and_refused > 0, "the forgeries were verified (and refused), not only deferred");
    assert!(n_deferred > 0, "the source's verification budget held the flood back");
    assert_eq!(stack.inbound_records().await.len(), N_VALID, "no forgery reached Kafka");
}

#[tokio::test]
async fn a_flood_from_one_address_is_paced_to_its_rate_and_other_addresses_are_served() {
    const RATE: f64 = 20.0;
    const BURST: u32 = 5;
    const N_FLOODERS: usize = 16;
    const N_EACH: usize = 12;
    const N_VALID: usize = 20;
    let stack = TestStack::builder()
        .gateway_limits(Limits { peer_rate_per_s: RATE, peer_burst: BURST, peer_max_wait_ms: 200, ..Limits::default() })
        .build()
        .await;
    let stack = Arc::new(stack);

    // The flood: forged GitHub deliveries from 127.0.0.2, many connections at once.
    let started = Instant::now();
    let mut flood = tokio::task::JoinSet::new();
    for flooder in 0..N_FLOODERS {
        let stack = stack.clone();
        flood.spawn(async move {
            let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
            connector.set_local_address(Some("127.0.0.2".parse().expect("address")));
            let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build::<_, Full<bytes::Bytes>>(connector);
            let mut answers = Vec::with_capacity(N_EACH);
            for n in 0..N_EACH {
                let delivery = Delivery::new(format!(r#"{{"forged":{flooder},"n":{n}}}"#));
                let request = Request::post(format!("http://{}/webhooks/github", stack.gateway_addr))
                    .header("content-type", "application/json")
                    .header("x-github-delivery", &delivery.delivery_id)
                    .header("x-github-event", &delivery.event)
                    .header("x-hub-signature-256", format!("sha256={}", "0".repeat(64)))
                    .body(Full::new(delivery.body.clone()))
                    .expect("request");
                // A refused request's unread body may end its connection: that is an answer too (none).
                let Ok(response) = client.request(request).await else {
                    answers.push(None);
                    continue;
                };
                let retry_after = response.headers().contains_key(http::header::RETRY_AFTER);
                let status = response.status();
                let _ = response.into_body().collect().await;
                answers.push(Some((status, retry_after)));
            }
            answers
        });
    }
    // Meanwhile, valid deliveries from 127.0.0.1, one at a time: within the rate, never refused.
    for index in 0..N_VALID {
        let reply = stack.post(&Delivery::new(format!(r#"{{"beside_the_flood":{index}}}"#))).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "a valid delivery from another address: {:?}", reply.body);
    }
    let (mut n_verified, mut n_rate_limited, mut n_unanswered) = (0_u32, 0_u32, 0_u32);
    while let Some(answers) = flood.join_next().await {
        for answer in answers.expect("flooder") {
            match answer {
                Some((StatusCode::UNAUTHORIZED, _)) => n_verified += 1,
                Some((StatusCode::TOO_MANY_REQUESTS, true)) => n_rate_limited += 1,
                None => n_unanswered += 1,
                other => {
                    panic!("a flooded request is verified and refused, or rate-limited with Retry-After: {other:?}")
                }
            }
        }
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    // What the limit promises: the address got no more turns than the burst plus the rate over the time, and each
    // forgery it sent cost it ten turns (only the requests in flight at once may not have been charged yet).
    let turns = f64::from(BURST) + RATE * elapsed_s + 1.0;
    let allowed = turns / f64::from(hookline_gateway::peer_limit::FAILED_VERIFICATION_TURNS) + N_FLOODERS as f64;
    assert!(
        f64::from(n_verified) <= allowed,
        "{n_verified} forgeries were verified in {elapsed_s:.2} s; the limit allows {allowed:.0}"
    );
    assert!(n_rate_limited > 0, "the flood went over the rate and was refused ({n_unanswered} unanswered)");
    assert!(n_verified > 0, "requests within the rate were still served");
    assert_eq!(stack.inbound_records().await.len(), N_VALID, "only the valid deliveries reached Kafka");
}
