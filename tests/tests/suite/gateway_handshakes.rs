//! The subscription handshakes of the named presets against the real gateway and broker: Meta's `GET
//! hub.challenge` (and a wrong verify token refused), Okta's `GET` challenge, Microsoft Graph's `validationToken`
//! echo, Azure Event Grid's validation event, each answered and nothing produced; a `GET` to a source without a
//! `GET` handshake stays 405; Adyen's configured reply `[accepted]` once the broker acknowledged. Each answered
//! handshake is kept, with its kind, in its source's ring beside the rejections (`GET /admin/rejections`), in a
//! small ring of its own: a flood of credential-less handshakes does not push the rejections out.

use bytes::Bytes;
use hookline_common::config::SecretRef;
use hookline_gateway::config::SourceConfig;
use hookline_tests::{Reply, TestStack};
use http::{Request, StatusCode};
use http_body_util::Full;

const META_APP_SECRET: &str = "meta-app-secret-integration";
const META_VERIFY_TOKEN: &str = "meta-verify-token-integration";
const OKTA_TOKEN: &str = "okta-authorization-integration";
const GRAPH_CLIENT_STATE: &str = "graph-client-state-integration";
const GRID_CODE: &str = "event-grid-code-integration";
/// Adyen's own libraries' test key and notification (the official vector).
const ADYEN_KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const ADYEN_BODY: &str = r#"{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="},"amount":{"value":1130,"currency":"EUR"},"pspReference":"7914073381342284","eventCode":"AUTHORISATION","merchantAccountCode":"TestMerchant","merchantReference":"TestPayment-1407325143704","paymentMethod":"visa","success":"true"}}]}"#;

fn secret(id: &str, value: &str) -> SecretRef {
    let path = std::env::temp_dir().join(format!("hookline-gw-test-{}.secret", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, value).expect("write secret");
    SecretRef::from_file(id, path.display().to_string())
}

async fn stack() -> TestStack {
    TestStack::builder()
        .gateway_source(SourceConfig {
            verify_tokens: vec![secret("v1", META_VERIFY_TOKEN)],
            ..SourceConfig::new("whatsapp", "meta", vec![secret("app", META_APP_SECRET)])
        })
        .gateway_source(SourceConfig {
            allow_token: true,
            ..SourceConfig::new("okta", "okta", vec![secret("hook", OKTA_TOKEN)])
        })
        .gateway_source(SourceConfig {
            allow_token: true,
            ..SourceConfig::new("graph", "microsoft_graph", vec![secret("state", GRAPH_CLIENT_STATE)])
        })
        .gateway_source(SourceConfig {
            allow_token: true,
            ..SourceConfig::new("grid", "azure_event_grid", vec![secret("code", GRID_CODE)])
        })
        .gateway_source(SourceConfig::new("adyen", "adyen", vec![secret("hmac", ADYEN_KEY)]))
        .build()
        .await
}

async fn send(stack: &TestStack, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut request = Request::builder().method(method).uri(format!("http://{}{path}", stack.gateway_addr));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    stack.send(request.body(Full::new(Bytes::from(body.to_owned()))).expect("request")).await
}

#[tokio::test]
async fn handshakes_are_answered_checked_and_never_produced() {
    let stack = stack().await;

    let query = format!("hub.mode=subscribe&hub.verify_token={META_VERIFY_TOKEN}&hub.challenge=1158201444");
    let reply = send(&stack, "GET", &format!("/webhooks/whatsapp?{query}"), &[], "").await;
    assert_eq!((reply.status, &reply.body[..]), (StatusCode::OK, &b"1158201444"[..]));
    assert_eq!(reply.headers.get("x-content-type-options").map(|v| v.as_bytes()), Some(&b"nosniff"[..]));
    let wrong = "/webhooks/whatsapp?hub.mode=subscribe&hub.verify_token=guess&hub.challenge=1158201444";
    let reply = send(&stack, "GET", wrong, &[], "").await;
    assert_eq!((reply.status, reply.error_code().as_deref()), (StatusCode::UNAUTHORIZED, Some("signature_mismatch")));
    assert!(!String::from_utf8_lossy(&reply.body).contains("1158201444"), "a refused challenge is not echoed");
    let reply = send(&stack, "GET", "/webhooks/whatsapp", &[], "").await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "a GET that is no handshake");
    let reply = send(&stack, "GET", "/webhooks/adyen", &[], "").await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "a source without a GET handshake");

    let challenge = [("X-Okta-Verification-Challenge", "okta-challenge-1"), ("Authorization", OKTA_TOKEN)];
    let reply = send(&stack, "GET", "/webhooks/okta", &challenge, "").await;
    assert_eq!(reply.status, StatusCode::OK);
    let answer: serde_json::Value = serde_json::from_slice(&reply.body).expect("json");
    assert_eq!(answer, serde_json::json!({ "verification": "okta-challenge-1" }));
    let forged = [("X-Okta-Verification-Challenge", "okta-challenge-1"), ("Authorization", "guess")];
    assert_eq!(send(&stack, "GET", "/webhooks/okta", &forged, "").await.status, StatusCode::UNAUTHORIZED);

    let validation = "/webhooks/graph?validationToken=Validation%3A+Testing+client+application+reachability";
    let reply = send(&stack, "POST", validation, &[("Content-Type", "text/plain")], "").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(&reply.body[..], b"Validation: Testing client application reachability");
    assert!(reply.headers.get(http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/plain")));

    let grid_event = r#"[{"id":"2d1781af","topic":"/subscriptions/x","subject":"","data":{"validationCode":"512d38b6-c7b8-40c8-89fe-f46f9e9622b6"},"eventType":"Microsoft.EventGrid.SubscriptionValidationEvent","eventTime":"2026-12-06T16:00:00Z","metadataVersion":"1","dataVersion":"2"}]"#;
    let headers = [("aeg-event-type", "SubscriptionValidation")];
    let reply = send(&stack, "POST", &format!("/webhooks/grid?code={GRID_CODE}"), &headers, grid_event).await;
    assert_eq!(reply.status, StatusCode::OK);
    let answer: serde_json::Value = serde_json::from_slice(&reply.body).expect("json");
    assert_eq!(answer["validationResponse"], "512d38b6-c7b8-40c8-89fe-f46f9e9622b6");
    let reply = send(&stack, "POST", "/webhooks/grid?code=guess", &headers, grid_event).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "the validation event is answered only once verified");

    assert!(stack.inbound_records().await.is_empty(), "handshakes are not events");

    // The answered handshakes are kept beside each source's rejections, with their kind; a refused one is a
    // rejection (the wrong verify token above), as is a GET that is no handshake.
    let ring = send(&stack, "GET", "/admin/rejections?source=whatsapp", &[], "").await;
    assert_eq!(ring.status, StatusCode::NOT_FOUND, "the ring is on the admin listener, not the public one");
    let request = Request::get(format!("http://{}/admin/rejections?source=whatsapp", stack.gateway_admin_addr))
        .body(Full::default())
        .expect("request");
    let ring: serde_json::Value = serde_json::from_slice(&stack.send(request).await.body).expect("json");
    let entries: Vec<(&str, u64, Option<&str>)> = ring["sources"]["whatsapp"]
        .as_array()
        .expect("whatsapp's entries")
        .iter()
        .map(|entry| {
            (
                entry["code"].as_str().expect("code"),
                entry["status"].as_u64().expect("status"),
                entry["handshake"].as_str(),
            )
        })
        .collect();
    let expected = [
        ("method_not_allowed", 405, None), // the GET that was no handshake
        ("signature_mismatch", 401, None), // the wrong verify token
        ("handshake", 200, Some("meta_hub")),
    ];
    assert_eq!(entries, expected, "newest first");
    for (source, kind) in [("okta", "okta"), ("graph", "graph_validation"), ("grid", "event_grid")] {
        let request = Request::get(format!("http://{}/admin/rejections?source={source}", stack.gateway_admin_addr))
            .body(Full::default())
            .expect("request");
        let ring: serde_json::Value = serde_json::from_slice(&stack.send(request).await.body).expect("json");
        let kinds: Vec<&str> = ring["sources"][source]
            .as_array()
            .expect("entries")
            .iter()
            .filter_map(|entry| entry["handshake"].as_str())
            .collect();
        assert_eq!(kinds, [kind], "{source}'s answered handshake, once");
    }

    // A delivery after the handshakes: Adyen's official vector, answered with Adyen's own reply, produced once.
    let reply = send(&stack, "POST", "/webhooks/adyen", &[("Content-Type", "application/json")], ADYEN_BODY).await;
    assert_eq!((reply.status, &reply.body[..]), (StatusCode::OK, &b"[accepted]"[..]));
    let records = stack.inbound_records().await;
    assert_eq!(records.len(), 1);
    use rdkafka::Message;
    assert_eq!(records[0].payload(), Some(ADYEN_BODY.as_bytes()), "the raw body, byte for byte");
    stack.shutdown().await;
}

async fn ring_of(stack: &TestStack, source: &str) -> Vec<serde_json::Value> {
    let request = Request::get(format!("http://{}/admin/rejections?source={source}", stack.gateway_admin_addr))
        .body(Full::default())
        .expect("request");
    let ring: serde_json::Value = serde_json::from_slice(&stack.send(request).await.body).expect("json");
    ring["sources"][source].as_array().expect("entries").clone()
}

/// P13: Graph's `validationToken` is answered to anyone (it carries no credential); 10,000 of them leave the
/// source's real rejection listed, and only a few handshakes beside it.
#[tokio::test]
async fn a_flood_of_handshakes_does_not_push_out_the_rejections() {
    let stack = TestStack::builder()
        .gateway_source(SourceConfig {
            allow_token: true,
            ..SourceConfig::new("graph", "microsoft_graph", vec![secret("state", GRAPH_CLIENT_STATE)])
        })
        .build()
        .await;
    let forged = r#"{"value":[{"clientState":"guess","changeType":"created","resource":"x"}]}"#;
    let reply = send(&stack, "POST", "/webhooks/graph", &[("Content-Type", "application/json")], forged).await;
    assert!(reply.status.is_client_error(), "{:?}", reply.status);
    let refused = reply.error_code().expect("a rejection code");

    let flooding = &stack;
    for _ in 0..200 {
        let burst = (0..50).map(|n| {
            let path = format!("/webhooks/graph?validationToken=flood-{n}");
            async move { send(flooding, "POST", &path, &[("Content-Type", "text/plain")], "").await.status }
        });
        let statuses = futures_util::future::join_all(burst).await;
        assert!(statuses.iter().all(|status| *status == StatusCode::OK), "{statuses:?}");
    }

    let entries = ring_of(&stack, "graph").await;
    let codes: Vec<&str> = entries.iter().filter_map(|entry| entry["code"].as_str()).collect();
    assert!(codes.contains(&refused.as_str()), "the rejection is still listed: {codes:?}");
    let n_handshakes = codes.iter().filter(|code| **code == "handshake").count();
    assert!((1..=10).contains(&n_handshakes), "the handshakes are listed, a few: {n_handshakes}");
    assert_eq!(entries[0]["code"], "handshake", "newest first");
    stack.shutdown().await;
}
