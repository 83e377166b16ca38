//! A quota per source (`rate_per_s`, `burst`, and the `[limits]` defaults), against the real broker: past its burst a
//! source's verified requests are answered 429 `quota_exceeded` with `Retry-After` and nothing of them reaches Kafka,
//! while a neighbour sending ten times as much loses nothing; forged requests never spend the quota (it is charged
//! only once a request verified), a reload refills no one's burst, and the throttling shows in the metrics and the
//! admin port's rejections. Counts only: the quota is so slow (one request per 1,000 s) that the test's own pace
//! cannot change what it admits.

use std::{collections::BTreeSet, sync::Arc};

use hookline_gateway::config::{Limits, SourceConfig};
use hookline_tests::{Delivery, Reply, TEST_SECRET, TestStack, forward::secret_file, read};
use http::{Request, StatusCode, header};
use http_body_util::Full;

const TENANT_SECRET: &str = "tenant-quota-secret";
/// The tenant's quota: a burst of 3, then one request per 1,000 s.
const TENANT_BURST: usize = 3;
const N_TENANT: usize = 10;
/// The neighbour sends ten times what the tenant sends, within its own quota (the `[limits]` default).
const N_NEIGHBOUR: usize = 10 * N_TENANT;
const N_FORGED: usize = 20;

/// `delivery` to the GitHub-scheme source `source`, signed with `secret`.
async fn post_to(stack: &TestStack, source: &str, delivery: &Delivery, secret: &str) -> Reply {
    let request = Request::post(format!("http://{}/webhooks/{source}", stack.gateway_addr))
        .header("content-type", "application/json")
        .header("x-github-delivery", &delivery.delivery_id)
        .header("x-github-event", &delivery.event)
        .header("x-hub-signature-256", delivery.signature(secret))
        .body(Full::new(delivery.body.clone()))
        .expect("request");
    stack.send(request).await
}

/// The event id of an accepted request's `202 {"status":"accepted","event_id":...}`.
fn accepted_event_id(reply: &Reply) -> String {
    let body: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    body["event_id"].as_str().expect("an event id").to_owned()
}

async fn admin(stack: &TestStack, request: http::request::Builder) -> Reply {
    stack.send(request.body(Full::default()).expect("request")).await
}

#[tokio::test]
async fn a_source_past_its_quota_gets_429_while_a_neighbour_at_ten_times_its_rate_loses_nothing() {
    let stack = TestStack::builder()
        .gateway_source(SourceConfig {
            type_from_header: Some(true),
            rate_per_s: Some(0.001),
            burst: Some(TENANT_BURST as u32),
            ..SourceConfig::new("tenant", "github", vec![secret_file("current", TENANT_SECRET)])
        })
        // The default quota, which the stack's `github` source (the neighbour) takes: its whole load fits its burst.
        .gateway_limits(Limits {
            source_rate_per_s: 0.01,
            source_burst: N_NEIGHBOUR as u32 + 20,
            body_read_timeout_ms: 2_000,
            drain_grace_ms: 0,
            ..Limits::default()
        })
        .build()
        .await;
    let stack = Arc::new(stack);

    // Forgeries first: refused by the signature check, they spend nothing of the tenant's quota.
    for n in 0..N_FORGED {
        let forged = Delivery::new(format!(r#"{{"forged":{n}}}"#));
        let reply = post_to(&stack, "tenant", &forged, "not-the-tenant-secret").await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{:?}", reply.body);
    }

    // The neighbour sends ten requests for each of the tenant's, at the same time.
    let mut neighbours = tokio::task::JoinSet::new();
    for task in 0..10 {
        let stack = stack.clone();
        neighbours.spawn(async move {
            let mut replies = Vec::new();
            for n in 0..N_NEIGHBOUR / 10 {
                let delivery = Delivery::new(format!(r#"{{"neighbour":{task},"n":{n}}}"#));
                replies.push(post_to(&stack, "github", &delivery, TEST_SECRET).await);
            }
            replies
        });
    }
    let (mut tenant_accepted, mut tenant_throttled) = (Vec::new(), Vec::new());
    for n in 0..N_TENANT {
        let delivery = Delivery::new(format!(r#"{{"tenant":{n}}}"#));
        let reply = post_to(&stack, "tenant", &delivery, TENANT_SECRET).await;
        match reply.status {
            StatusCode::ACCEPTED => tenant_accepted.push(accepted_event_id(&reply)),
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(reply.error_code().as_deref(), Some("quota_exceeded"), "{:?}", reply.body);
                let retry_after: u64 = reply
                    .headers
                    .get(header::RETRY_AFTER)
                    .and_then(|value| value.to_str().ok()?.parse().ok())
                    .expect("a 429 carries Retry-After in seconds");
                assert!((1..=1_000).contains(&retry_after), "seconds to the next turn, at least 1: {retry_after}");
                tenant_throttled.push(delivery.delivery_id.clone());
            }
            other => panic!("the tenant's request is accepted or throttled, never {other}: {:?}", reply.body),
        }
    }
    let mut neighbour_accepted = Vec::new();
    while let Some(replies) = neighbours.join_next().await {
        for reply in replies.expect("neighbour") {
            assert_eq!(reply.status, StatusCode::ACCEPTED, "the neighbour loses nothing: {:?}", reply.body);
            neighbour_accepted.push(accepted_event_id(&reply));
        }
    }
    assert_eq!(tenant_accepted.len(), TENANT_BURST, "the burst, and the twenty forgeries took none of it");
    assert_eq!(tenant_throttled.len(), N_TENANT - TENANT_BURST);
    assert_eq!(neighbour_accepted.len(), N_NEIGHBOUR);

    // Past its quota, a forgery is still refused by the signature check (401): the quota is never consulted first.
    let forged = Delivery::new(r#"{"forged":"late"}"#);
    assert_eq!(post_to(&stack, "tenant", &forged, "not-the-tenant-secret").await.status, StatusCode::UNAUTHORIZED);

    // A reload (the same config) keeps the tenant's cell: no burst refilled.
    let reload = admin(&stack, Request::post(format!("http://{}/admin/reload", stack.gateway_admin_addr))).await;
    assert_eq!(reload.status, StatusCode::OK, "{:?}", reload.body);
    let after_reload = Delivery::new(r#"{"tenant":"after the reload"}"#);
    let reply = post_to(&stack, "tenant", &after_reload, TENANT_SECRET).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{:?}", reply.body);
    tenant_throttled.push(after_reload.delivery_id.clone());

    // What reached Kafka is exactly what was acknowledged, per source.
    let records = stack.inbound_records().await;
    let in_kafka = |source: &str| -> BTreeSet<String> {
        records
            .iter()
            .map(read::inbound)
            .filter(|record| record.meta.source == source)
            .map(|record| record.meta.event_id)
            .collect()
    };
    assert_eq!(in_kafka("tenant"), tenant_accepted.iter().cloned().collect(), "only the accepted tenant requests");
    assert_eq!(in_kafka("github"), neighbour_accepted.iter().cloned().collect(), "every neighbour request");
    assert_eq!(records.len(), TENANT_BURST + N_NEIGHBOUR);

    // The metrics say who is throttled, and how much each source has left.
    let scrape = stack.gateway_scrape().await;
    let throttled = |source: &str| {
        scrape.sum("hookline_gateway_requests_total", &[("source", source), ("outcome", "quota_exceeded")])
    };
    assert_eq!(throttled("tenant"), tenant_throttled.len() as f64);
    assert_eq!(throttled("github"), 0.0);
    let tokens = |source: &str| scrape.sum("hookline_gateway_source_quota_tokens", &[("source", source)]);
    assert!(tokens("tenant") < 1.0, "the tenant has no whole request left: {}", tokens("tenant"));
    assert!(tokens("github") >= 20.0, "the neighbour kept the rest of its burst: {}", tokens("github"));

    // The admin port explains each refusal, with the event id of the verified request that was throttled.
    let rejections =
        admin(&stack, Request::get(format!("http://{}/admin/rejections?source=tenant", stack.gateway_admin_addr)))
            .await;
    assert_eq!(rejections.status, StatusCode::OK, "{:?}", rejections.body);
    let answer: serde_json::Value = serde_json::from_slice(&rejections.body).expect("JSON");
    let entries = answer["sources"]["tenant"].as_array().expect("the tenant's rejections");
    let over_quota: BTreeSet<String> = entries
        .iter()
        .filter(|entry| entry["code"] == "quota_exceeded")
        .inspect(|entry| assert_eq!(entry["status"], 429))
        .map(|entry| entry["event_id"].as_str().expect("a throttled request's event id").to_owned())
        .collect();
    assert_eq!(over_quota, tenant_throttled.into_iter().collect());
    let forgeries = entries.iter().filter(|entry| entry["code"] == "signature_mismatch").count();
    assert_eq!(forgeries, N_FORGED + 1);
}
