//! "Why was it refused?": the gateway keeps each source's last rejections and serves them on its admin listener
//! (`GET /admin/rejections`) with the code, the secrets the signature was checked against, the timestamp's skew
//! and the client address, never the body, a signature or a secret; the ring stays bounded; and nothing refused
//! reaches Kafka.

use std::time::{SystemTime, UNIX_EPOCH};

use hookline_common::config::SecretRef;
use hookline_gateway::{config::SourceConfig, rejection_ring::PER_SOURCE};
use hookline_signature::stripe;
use hookline_tests::{Reply, TestStack, forward::secret_file};
use http::{Request, StatusCode};
use http_body_util::Full;
use serde_json::Value;

const STRIPE_SECRET: &str = "whsec_rejections_current";
const PREVIOUS_SECRET: &str = "whsec_rejections_previous";
const RETIRED_SECRET: &str = "whsec_rejections_retired";

fn now_s() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()).expect("time")
}

/// A gateway with a `stripe` source: two active secrets and one retired in 2020, which is never tried.
async fn stack() -> TestStack {
    let secrets = vec![
        SecretRef { not_after: Some("2020-01-01T00:00:00Z".to_owned()), ..secret_file("2019-retired", RETIRED_SECRET) },
        secret_file("2026-06", PREVIOUS_SECRET),
        secret_file("2026-12", STRIPE_SECRET),
    ];
    TestStack::builder().gateway_source(SourceConfig::new("stripe", "stripe", secrets)).build().await
}

async fn post_stripe(stack: &TestStack, signature: Option<&str>, body: &str) -> Reply {
    let mut request = Request::post(format!("http://{}/webhooks/stripe", stack.gateway_addr));
    if let Some(signature) = signature {
        request = request.header("Stripe-Signature", signature);
    }
    stack.send(request.body(Full::new(body.to_owned().into())).expect("request")).await
}

async fn rejections(stack: &TestStack, query: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = Request::get(format!("http://{}/admin/rejections{query}", stack.gateway_admin_addr));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    stack.send(request.body(Full::default()).expect("request")).await
}

fn json(reply: &Reply) -> Value {
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    serde_json::from_slice(&reply.body).expect("JSON")
}

#[tokio::test]
async fn a_refused_request_is_explained_on_the_admin_port_without_its_body_and_never_produced() {
    let stack = stack().await;
    let now = now_s();

    // Forged: a well-formed header whose signature no secret produces.
    let forged_body = r#"{"id":"evt_forged","marker":"forged-body-bytes"}"#;
    let forged_signature = format!("t={now},v1={}", "ab".repeat(32));
    let reply = post_stripe(&stack, Some(&forged_signature), forged_body).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{:?}", reply.body);

    // Stale: signed with the current secret ten minutes ago, twice Stripe's 300 s tolerance.
    let stale_body = r#"{"id":"evt_stale","marker":"stale-body-bytes"}"#;
    let stale_signature = stripe::sign(STRIPE_SECRET.as_bytes(), stale_body.as_bytes(), now - 600);
    let reply = post_stripe(&stack, Some(&stale_signature), stale_body).await;
    assert_eq!(reply.error_code().as_deref(), Some("timestamp_stale"), "{:?}", reply.body);

    // Signed now, but with a secret this source does not have (a new one the operator has not configured yet).
    let wrong_body = r#"{"id":"evt_wrong_secret","marker":"wrong-secret-body-bytes"}"#;
    let wrong_signature = stripe::sign(b"whsec_not_configured_here", wrong_body.as_bytes(), now);
    let reply = post_stripe(&stack, Some(&wrong_signature), wrong_body).await;
    assert_eq!(reply.error_code().as_deref(), Some("signature_mismatch"), "{:?}", reply.body);

    let reply = rejections(&stack, "", &[]).await;
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    let answer = json(&reply);
    assert!(answer["gateway"].as_str().is_some_and(|name| !name.is_empty()), "{answer}");
    let stripe = answer["sources"]["stripe"].as_array().expect("stripe's rejections");
    assert_eq!(stripe.len(), 3, "{answer}");
    // Newest first.
    let codes: Vec<&str> = stripe.iter().map(|entry| entry["code"].as_str().expect("code")).collect();
    assert_eq!(codes, ["signature_mismatch", "timestamp_stale", "signature_mismatch"], "{answer}");
    let at: Vec<i64> = stripe.iter().map(|entry| entry["at_ms"].as_i64().expect("at_ms")).collect();
    assert!(at.windows(2).all(|pair| pair[0] >= pair[1]), "{at:?}");
    for entry in stripe {
        assert_eq!(entry["status"], 401, "{entry}");
        // The active secrets, in configured order; the retired one was not tried.
        assert_eq!(entry["secrets_tried"], serde_json::json!(["2026-06", "2026-12"]), "{entry}");
        assert_eq!(entry["peer"], "127.0.0.1", "{entry}");
        assert_eq!(entry["event_id"], Value::Null, "{entry}");
    }
    let (wrong, stale, forged) = (&stripe[0], &stripe[1], &stripe[2]);
    assert_eq!(wrong["skew_ms"], Value::Null, "{wrong}");
    assert_eq!(forged["skew_ms"], Value::Null, "{forged}");
    // Signed 600 s before `now` (whole seconds), received within moments of `now`: beyond the 300 s tolerance.
    let skew_ms = stale["skew_ms"].as_i64().expect("a stale entry carries its skew");
    assert!(skew_ms <= -600_000 && skew_ms > -660_000, "skew {skew_ms} ms");

    // Never the body, a signature or a secret.
    for secret_material in [
        "forged-body-bytes",
        "stale-body-bytes",
        "wrong-secret-body-bytes",
        "evt_",
        &forged_signature,
        &stale_signature,
        &wrong_signature,
        &"ab".repeat(32),
        STRIPE_SECRET,
        PREVIOUS_SECRET,
        RETIRED_SECRET,
    ] {
        assert!(!text.contains(secret_material), "{secret_material:?} in {text}");
    }

    // One source by name; a configured source with nothing refused; a name no source has.
    let only_stripe = json(&rejections(&stack, "?source=stripe", &[]).await);
    assert_eq!(only_stripe["sources"], serde_json::json!({ "stripe": stripe }));
    let github = json(&rejections(&stack, "?source=github", &[]).await);
    assert_eq!(github["sources"], serde_json::json!({ "github": [] }));
    let typo = rejections(&stack, "?source=strpie", &[]).await;
    assert_eq!((typo.status, typo.error_code().as_deref()), (StatusCode::NOT_FOUND, Some("unknown_source")));

    // Guarded like a reload: no reload_token is configured, so a page in the operator's browser is refused.
    let from_a_page = rejections(&stack, "", &[("Origin", "https://evil.example")]).await;
    assert_eq!(from_a_page.status, StatusCode::FORBIDDEN, "{:?}", from_a_page.body);
    assert!(!String::from_utf8_lossy(&from_a_page.body).contains("127.0.0.1\""), "no entries in a refusal");

    assert!(stack.inbound_records().await.is_empty(), "nothing refused reaches Kafka");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_sources_ring_keeps_only_its_newest_rejections() {
    let stack = stack().await;
    // The 50 oldest lack a signature; the newest PER_SOURCE are forged.
    for _ in 0..50 {
        let reply = post_stripe(&stack, None, r#"{"id":"evt_unsigned"}"#).await;
        assert_eq!(reply.error_code().as_deref(), Some("signature_missing"), "{:?}", reply.body);
    }
    let forged_signature = format!("t={},v1={}", now_s(), "cd".repeat(32));
    for _ in 0..PER_SOURCE {
        let reply = post_stripe(&stack, Some(&forged_signature), r#"{"id":"evt_forged"}"#).await;
        assert_eq!(reply.error_code().as_deref(), Some("signature_mismatch"), "{:?}", reply.body);
    }

    let answer = json(&rejections(&stack, "?source=stripe", &[]).await);
    let stripe = answer["sources"]["stripe"].as_array().expect("stripe's rejections");
    assert_eq!(stripe.len(), PER_SOURCE, "{} kept after {} rejections", stripe.len(), PER_SOURCE + 50);
    assert!(stripe.iter().all(|entry| entry["code"] == "signature_mismatch"), "the 50 oldest were dropped");
    assert!(stack.inbound_records().await.is_empty(), "nothing refused reaches Kafka");
    stack.shutdown().await;
}
