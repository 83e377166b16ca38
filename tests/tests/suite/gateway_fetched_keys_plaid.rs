//! Plaid against the real gateway and broker, with Plaid's key endpoint played by a key host of the test's own on
//! loopback (its own CA; `production.plaid.com` resolved to it by the gateway's test-only setting, as in
//! `gateway_fetched_keys.rs`). Webhooks are signed as Plaid documents ("Webhook verification"): an ES256 JWT in
//! `Plaid-Verification` with `iat` and `request_body_sha256`, by the `openssl` command line (Plaid signs
//! server-side; its client libraries only ask for the key).
//!
//! The key is asked for by `POST /webhook_verification_key/get` with the source's `client_id:secret` and the
//! token's `kid`, once, then cached. A genuine webhook is stored byte for byte; a tampered body, another key, a
//! stale `iat` (nothing fetched) and a key id Plaid does not know are refused; a key host that is down costs a 503
//! with `Retry-After`, never a 401. Forged tokens naming new key ids cost at most the source's miss budget in
//! requests to Plaid.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use hookline_common::config::SecretRef;
use hookline_gateway::config::SourceConfig;
use hookline_tests::{
    Reply, TestStack,
    key_server::{EcKey, KeyServer, PLAID_HOST, Served, TestCa},
};
use http::{Request, StatusCode};
use http_body_util::Full;
use rdkafka::Message;
use sha2::{Digest, Sha256};

const CLIENT_ID: &str = "60e3ee4019a2a0001a2b3c4d";
const API_SECRET: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f";
const KEY_PATH: &str = "/webhook_verification_key/get";
const BODY: &str = r#"{"environment":"production","error":null,"item_id":"wz666MBjYWTp2PDzzggYhM6oWWmBb","new_transactions":19,"webhook_code":"DEFAULT_UPDATE","webhook_type":"TRANSACTIONS"}"#;

fn secret(id: &str, value: &str) -> SecretRef {
    let path = std::env::temp_dir().join(format!("hookline-plaid-{}.secret", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, value).expect("write secret");
    SecretRef::from_file(id, path.display().to_string())
}

fn now_s() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64
}

/// Plaid's `Plaid-Verification` value: ES256 over `header.claims`, base64url without padding.
fn plaid_token(key: &EcKey, kid: &str, issued_s_ago: i64, body: &str) -> String {
    let base64url = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = base64url(serde_json::json!({ "alg": "ES256", "kid": kid, "typ": "JWT" }).to_string().as_bytes());
    let claims = serde_json::json!({
        "iat": now_s() - issued_s_ago,
        "request_body_sha256": hex::encode(Sha256::digest(body.as_bytes())),
    });
    let claims = base64url(claims.to_string().as_bytes());
    let signature = base64url(&key.sign(format!("{header}.{claims}").as_bytes()));
    format!("{header}.{claims}.{signature}")
}

struct Plaid {
    server: KeyServer,
    signer: EcKey,
    stranger: EcKey,
}

async fn plaid() -> Plaid {
    let directory = std::env::temp_dir().join(format!("hookline-plaid-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let signer = EcKey::generate(&directory, "plaid-signer");
    let stranger = EcKey::generate(&directory, "plaid-stranger");
    let retired = EcKey::generate(&directory, "plaid-retired");
    let server = KeyServer::start(Arc::new(TestCa::new("hookline test Plaid CA"))).await;
    server.serve(
        KEY_PATH,
        Served::PlaidKeys {
            client_id: CLIENT_ID.to_owned(),
            secret: API_SECRET.to_owned(),
            keys: vec![
                (
                    "6c5516e1-92dc-479e-a8ff-5a51992e0001".to_owned(),
                    signer.jwk("6c5516e1-92dc-479e-a8ff-5a51992e0001", None),
                ),
                ("retired-1".to_owned(), retired.jwk("retired-1", Some(now_s() - 60))),
            ],
        },
    );
    Plaid { server, signer, stranger }
}

const KID: &str = "6c5516e1-92dc-479e-a8ff-5a51992e0001";

async fn stack(key_fetch: hookline_gateway::key_fetch::KeyFetchConfig) -> TestStack {
    TestStack::builder()
        .gateway_key_fetch(key_fetch)
        .gateway_source(SourceConfig::new("plaid", "plaid", vec![secret("api", &format!("{CLIENT_ID}:{API_SECRET}"))]))
        .build()
        .await
}

async fn post(stack: &TestStack, token: Option<&str>, body: &str) -> Reply {
    let mut request = Request::post(format!("http://{}/webhooks/plaid", stack.gateway_addr))
        .header("Content-Type", "application/json");
    if let Some(token) = token {
        request = request.header("Plaid-Verification", token);
    }
    stack.send(request.body(Full::new(Bytes::from(body.to_owned()))).expect("request")).await
}

fn refused(reply: &Reply) -> (StatusCode, Option<String>) {
    (reply.status, reply.error_code())
}

fn unauthorized(code: &str) -> (StatusCode, Option<String>) {
    (StatusCode::UNAUTHORIZED, Some(code.to_owned()))
}

#[tokio::test]
async fn plaid_webhooks_verify_with_the_key_asked_for_by_kid_and_forgeries_are_refused() {
    let plaid = plaid().await;
    let stack = stack(plaid.server.key_fetch_config()).await;

    let reply = post(&stack, Some(&plaid_token(&plaid.signer, KID, 5, BODY)), BODY).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let records = stack.inbound_records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].payload(), Some(BODY.as_bytes()), "the raw body, byte for byte");
    let key_request = format!("{KEY_PATH} key_id={KID}");
    assert_eq!(plaid.server.requests_for(&key_request), 1, "asked for with the credentials and the kid");

    let again = BODY.replace("19", "20");
    assert_eq!(
        post(&stack, Some(&plaid_token(&plaid.signer, KID, 0, &again)), &again).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(plaid.server.requests_for(&key_request), 1, "the key is cached by its id");

    let tampered = BODY.replace("19", "99");
    let token = plaid_token(&plaid.signer, KID, 5, BODY);
    assert_eq!(refused(&post(&stack, Some(&token), &tampered).await), unauthorized("signature_mismatch"));
    let forged = plaid_token(&plaid.stranger, KID, 5, BODY);
    assert_eq!(refused(&post(&stack, Some(&forged), BODY).await), unauthorized("signature_mismatch"));
    let retired = plaid_token(&plaid.signer, "retired-1", 5, BODY);
    assert_eq!(
        refused(&post(&stack, Some(&retired), BODY).await),
        unauthorized("signature_mismatch"),
        "expired_at set"
    );

    // Stale: refused before anything is asked for.
    let stale = plaid_token(&plaid.signer, "never-asked", 301, BODY);
    assert_eq!(refused(&post(&stack, Some(&stale), BODY).await), unauthorized("timestamp_stale"));
    assert_eq!(plaid.server.requests_for(&format!("{KEY_PATH} key_id=never-asked")), 0);

    // A key id Plaid does not know: Plaid answers 400, the key cannot be had, 503 (as for any key not fetched).
    let unknown = plaid_token(&plaid.signer, "unknown-kid", 5, BODY);
    let reply = post(&stack, Some(&unknown), BODY).await;
    assert_eq!(refused(&reply), (StatusCode::SERVICE_UNAVAILABLE, Some("key_unavailable".to_owned())));
    assert_eq!(plaid.server.requests_for(&format!("{KEY_PATH} key_id=unknown-kid")), 1);

    assert_eq!(refused(&post(&stack, None, BODY).await), unauthorized("signature_missing"));
    let hs256 = plaid_token(&plaid.signer, KID, 5, BODY).replacen("eyJhbGciOiJFUzI1NiIs", "eyJhbGciOiJIUzI1NiIs", 1);
    assert_eq!(post(&stack, Some(&hs256), BODY).await.status, StatusCode::BAD_REQUEST, "alg HS256 is malformed");
    assert_eq!(stack.inbound_records().await.len(), 2, "nothing refused was produced");
    stack.shutdown().await;
}

#[tokio::test]
async fn wrong_credentials_or_a_key_host_that_is_down_cost_a_503_never_a_401() {
    let plaid = plaid().await;
    // The credentials Plaid does not accept: the key cannot be had.
    let stack_wrong = TestStack::builder()
        .gateway_key_fetch(plaid.server.key_fetch_config())
        .gateway_source(SourceConfig::new(
            "plaid",
            "plaid",
            vec![secret("api", &format!("{CLIENT_ID}:not-the-secret"))],
        ))
        .build()
        .await;
    let token = plaid_token(&plaid.signer, KID, 5, BODY);
    let reply = post(&stack_wrong, Some(&token), BODY).await;
    assert_eq!(refused(&reply), (StatusCode::SERVICE_UNAVAILABLE, Some("key_unavailable".to_owned())));
    assert!(reply.headers.get("retry-after").is_some());
    stack_wrong.shutdown().await;

    // The pinned host resolved to a loopback port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let mut key_fetch = plaid.server.key_fetch_config();
    for (host, addr) in &mut key_fetch.test_only.as_mut().expect("test-only settings").resolve {
        if host == PLAID_HOST {
            *addr = closed;
        }
    }
    let stack = stack(key_fetch).await;
    let reply = post(&stack, Some(&token), BODY).await;
    assert_eq!(refused(&reply), (StatusCode::SERVICE_UNAVAILABLE, Some("key_unavailable".to_owned())));
    assert!(reply.headers.get("retry-after").is_some());
    assert_eq!(stack.gateway_metric("hookline_gateway_key_fetches_total", &[("outcome", "unreachable")]).await, 1.0);
    assert!(stack.inbound_records().await.is_empty());
    stack.shutdown().await;
}

/// P6: every made-up `kid` would cost one authenticated `POST` to Plaid with the operator's credentials; a source
/// fetches at most `key_fetch.misses_per_source` keys it does not hold per interval, the rest are answered 503 with
/// `Retry-After` at once, and the key already held keeps serving.
#[tokio::test]
async fn forged_tokens_naming_new_kids_cost_at_most_the_sources_miss_budget_in_fetches() {
    const BUDGET: u32 = 5;
    let plaid = plaid().await;
    let key_fetch = hookline_gateway::key_fetch::KeyFetchConfig {
        misses_per_source: BUDGET,
        miss_interval_s: 3_600,
        ..plaid.server.key_fetch_config()
    };
    let stack = stack(key_fetch).await;
    let genuine = plaid_token(&plaid.signer, KID, 5, BODY);
    assert_eq!(post(&stack, Some(&genuine), BODY).await.status, StatusCode::ACCEPTED, "one miss: the genuine key");

    // Forged tokens: the genuine claims and signature under headers naming 1,000 new key ids.
    let base64url = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let mut parts = genuine.split('.').skip(1);
    let (claims, signature) = (parts.next().expect("claims"), parts.next().expect("signature"));
    let mut statuses = std::collections::BTreeMap::new();
    for n in 0..1_000 {
        let header = serde_json::json!({ "alg": "ES256", "kid": format!("forged-{n}"), "typ": "JWT" });
        let forged = format!("{}.{claims}.{signature}", base64url(header.to_string().as_bytes()));
        let reply = post(&stack, Some(&forged), BODY).await;
        assert!(reply.headers.get("retry-after").is_some(), "{:?}", reply.status);
        *statuses.entry(reply.status.as_u16()).or_insert(0) += 1;
    }
    let fetched = plaid.server.requests_for(KEY_PATH);
    assert!(
        fetched <= BUDGET as usize,
        "{fetched} requests reached Plaid for 1 genuine and 1,000 forged kids; the budget is {BUDGET} ({statuses:?})"
    );
    assert!(statuses.keys().all(|status| *status == 503 || *status == 429), "{statuses:?}");
    assert!(
        stack.gateway_metric("hookline_gateway_key_fetches_refused_total", &[("reason", "miss_budget")]).await >= 990.0
    );
    let again = BODY.replace("19", "21");
    assert_eq!(
        post(&stack, Some(&plaid_token(&plaid.signer, KID, 0, &again)), &again).await.status,
        StatusCode::ACCEPTED,
        "the key held keeps serving past the budget"
    );
    stack.shutdown().await;
}
