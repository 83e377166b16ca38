//! A forged flood on a public-key source (SendGrid's ECDSA costs about 20 HMACs) cannot take another source's
//! share: each public-key source verifies at most its budget at once, on the blocking pool, and past it answers
//! 503 `verify_busy` without taking an in-flight permit. Counts only; the rate figure is in docs/benchmarks.md.

use std::{
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use hookline_common::config::SecretRef;
use hookline_gateway::config::{Limits, SourceConfig};
use hookline_tests::{Delivery, TestStack};
use http::{Request, StatusCode};
use http_body_util::Full;

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
        .gateway_limits(Limits { max_in_flight: 16, max_asymmetric_verifications_per_source: 1, ..Limits::default() })
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
