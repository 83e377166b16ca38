//! The gateways' rejections in one place: the replayer asks every configured gateway's `GET /admin/rejections`
//! and serves them merged per source, newest first, each entry naming its gateway, on `GET /v1/rejections` (behind
//! the API token) and on the console's Rejections page (every value escaped); a gateway that does not answer is
//! named with the reason (as is one answering past the size bound or not at all within the timeout) and the
//! others' entries are still served.

use std::{
    net::SocketAddr,
    time::{SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use hookline_common::{
    config::SecretRef,
    http::{Body, ServeLimits, serve},
};
use hookline_dlq_replayer::{ReplayerConfig, ServeError, config::GatewaysConfig, rejections::MAX_RESPONSE_BYTES};
use hookline_gateway::config::SourceConfig;
use hookline_signature::stripe;
use hookline_tests::{Reply, TestStack, forward::secret_file};
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use serde_json::Value;
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::CancellationToken;

const STRIPE_SECRET: &str = "whsec_gathered_current";
const API_TOKEN: &str = "a-replayer-token-for-the-rejections-test-0123";
const GATEWAY_TOKEN: &str = "the-gateways-reload-token-0123456789";

fn now_s() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()).expect("time")
}

fn temp_secret(name: &str, value: &str) -> SecretRef {
    let path = std::env::temp_dir().join(format!("hookline-{name}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, value).expect("secret file");
    SecretRef::from_file(name, path.display().to_string())
}

/// The replayer's `serve`, in-process, gathering from `admin_urls`.
struct Replayer {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Replayer {
    async fn start(stack: &TestStack, admin_urls: Vec<String>) -> Self {
        let config = ReplayerConfig {
            kafka: stack.kafka.clone(),
            api_token: Some(temp_secret("api", API_TOKEN)),
            gateways: GatewaysConfig { admin_urls, token: Some(temp_secret("gateways", GATEWAY_TOKEN)) },
            ..ReplayerConfig::default()
        };
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = admin.local_addr().expect("addr");
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(hookline_dlq_replayer::serve_api(config, admin, shutdown.clone()));
        Self { addr, shutdown, task }
    }

    async fn get(&self, stack: &TestStack, path: &str, headers: &[(header::HeaderName, &str)]) -> Reply {
        let mut request = Request::get(format!("http://{}{path}", self.addr));
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        stack.send(request.body(Full::default()).expect("request")).await
    }

    async fn api_rejections(&self, stack: &TestStack, query: &str) -> Value {
        let bearer = format!("Bearer {API_TOKEN}");
        let reply = self.get(stack, &format!("/v1/rejections{query}"), &[(header::AUTHORIZATION, &bearer)]).await;
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
        serde_json::from_slice(&reply.body).expect("JSON")
    }

    /// Logs into the console with the API token; the session cookie.
    async fn log_in(&self, stack: &TestStack) -> String {
        let request = Request::post(format!("http://{}/ui/login", self.addr))
            .header(header::HOST, self.addr.to_string())
            .header(header::ORIGIN, format!("http://{}", self.addr))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Full::new(Bytes::from(format!("token={API_TOKEN}"))))
            .expect("request");
        let reply = stack.send(request).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{:?}", reply.body);
        let cookie = reply.headers[header::SET_COOKIE].to_str().expect("cookie");
        cookie.split(';').next().expect("name=value").to_owned()
    }

    async fn console_page(&self, stack: &TestStack, path: &str) -> (Reply, String) {
        let cookie = self.log_in(stack).await;
        let reply = self.get(stack, path, &[(header::COOKIE, &cookie)]).await;
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
        let html = String::from_utf8(reply.body.to_vec()).expect("UTF-8");
        (reply, html)
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("replayer task").expect("served");
    }
}

/// A loopback address nothing listens on: bound, then let go.
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("addr")
}

#[tokio::test]
async fn every_gateways_rejections_are_gathered_and_one_that_does_not_answer_is_named() {
    let stack = TestStack::builder()
        .gateway_source(SourceConfig::new("stripe", "stripe", vec![secret_file("2026-12", STRIPE_SECRET)]))
        .build()
        .await;
    let now = now_s();
    let forged = format!("t={now},v1={}", "ab".repeat(32));
    let stale_body = r#"{"id":"evt_stale"}"#;
    let stale = stripe::sign(STRIPE_SECRET.as_bytes(), stale_body.as_bytes(), now - 600);
    for (signature, body, code) in
        [(&forged, r#"{"id":"evt_forged"}"#, "signature_mismatch"), (&stale, stale_body, "timestamp_stale")]
    {
        let request = Request::post(format!("http://{}/webhooks/stripe", stack.gateway_addr))
            .header("Stripe-Signature", signature.as_str())
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("request");
        let reply = stack.send(request).await;
        assert_eq!(reply.error_code().as_deref(), Some(code), "{:?}", reply.body);
    }
    let gateway_own = stack
        .send(
            Request::get(format!("http://{}/admin/rejections", stack.gateway_admin_addr))
                .body(Full::default())
                .expect("request"),
        )
        .await;
    let gateway_name = serde_json::from_slice::<Value>(&gateway_own.body).expect("JSON")["gateway"]
        .as_str()
        .expect("the gateway's name")
        .to_owned();

    let silent = closed_port().await;
    let silent_url = format!("http://{silent}");
    let replayer =
        Replayer::start(&stack, vec![format!("http://{}/", stack.gateway_admin_addr), silent_url.clone()]).await;

    // Without the API token, or with a wrong one: 401, nothing gathered.
    let anonymous = replayer.get(&stack, "/v1/rejections", &[]).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED, "{:?}", anonymous.body);
    let wrong = replayer.get(&stack, "/v1/rejections", &[(header::AUTHORIZATION, "Bearer not-the-token")]).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{:?}", wrong.body);
    assert!(!String::from_utf8_lossy(&wrong.body).contains("signature_mismatch"));

    let answer = replayer.api_rejections(&stack, "").await;
    let stripe = answer["sources"]["stripe"].as_array().expect("stripe's rejections");
    let seen: Vec<(&str, &str, i64)> = stripe
        .iter()
        .map(|entry| {
            (
                entry["gateway"].as_str().expect("gateway"),
                entry["code"].as_str().expect("code"),
                entry["at_ms"].as_i64().expect("at_ms"),
            )
        })
        .collect();
    assert_eq!(seen.len(), 2, "{answer}");
    // Newest first, each tagged with the gateway that refused it.
    assert_eq!((seen[0].0, seen[0].1), (gateway_name.as_str(), "timestamp_stale"), "{answer}");
    assert_eq!((seen[1].0, seen[1].1), (gateway_name.as_str(), "signature_mismatch"), "{answer}");
    assert!(seen[0].2 >= seen[1].2, "{answer}");
    assert!(stripe[0]["skew_ms"].as_i64().is_some_and(|skew| skew <= -600_000), "{answer}");
    assert_eq!(stripe[0]["peer"], "127.0.0.1", "{answer}");
    assert_eq!(answer["gateways"], serde_json::json!([gateway_name]), "{answer}");
    // The closed port is named, with why, and did not fail the answer.
    let unreachable = answer["unreachable"].as_array().expect("unreachable");
    assert_eq!(unreachable.len(), 1, "{answer}");
    assert_eq!(unreachable[0]["url"], silent_url.as_str(), "{answer}");
    assert!(unreachable[0]["reason"].as_str().is_some_and(|reason| !reason.is_empty()), "{answer}");

    // One source: passed on to every gateway.
    let only_stripe = replayer.api_rejections(&stack, "?source=stripe").await;
    assert_eq!(only_stripe["sources"], serde_json::json!({ "stripe": stripe }), "{only_stripe}");
    let bad_query = replayer
        .get(&stack, "/v1/rejections?colour=red", &[(header::AUTHORIZATION, &format!("Bearer {API_TOKEN}"))])
        .await;
    assert_eq!(bad_query.status, StatusCode::BAD_REQUEST, "{:?}", bad_query.body);

    // The console's page: the same entries, and a note naming the gateway that did not answer.
    let anonymous_page = replayer.get(&stack, "/ui/rejections", &[]).await;
    assert_eq!(anonymous_page.status, StatusCode::SEE_OTHER, "the page needs a session");
    let (reply, html) = replayer.console_page(&stack, "/ui/rejections").await;
    assert!(reply.headers["content-security-policy"].to_str().expect("CSP").starts_with("default-src 'none'"));
    assert!(html.contains(r#"<a href="/ui/rejections">Rejections</a>"#), "linked from the navigation");
    let table = html.split(r#"<table class="rejections" data-source="stripe">"#).nth(1).expect("stripe's table");
    let rows: Vec<&str> = table.split("</table>").next().expect("table").split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 2, "{html}");
    assert!(rows[0].contains("timestamp_stale") && rows[0].contains(&gateway_name), "{}", rows[0]);
    assert!(rows[0].contains("2026-12") && rows[0].contains("127.0.0.1"), "{}", rows[0]);
    assert!(rows[1].contains("signature_mismatch"), "{}", rows[1]);
    let note = html.split(r#"id="unreachable""#).nth(1).expect("a note on the gateway that did not answer");
    assert!(note.split("</div>").next().expect("note").contains(&silent_url), "{note}");

    replayer.stop().await;
    stack.shutdown().await;
}

/// A stand-in for a gateway that answers only with `GATEWAY_TOKEN`. Under `/admin/rejections`, entries carrying
/// markup; under `/huge/admin/rejections`, a well-formed answer one byte over the replayer's bound; under
/// `/silent/admin/rejections`, nothing until it is stopped.
async fn hostile_gateway(shutdown: CancellationToken) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stopped = shutdown.clone();
    let handler = move |request: Request<hyper::body::Incoming>| {
        let stopped = stopped.clone();
        async move {
            let authorized = request.headers().get(header::AUTHORIZATION).and_then(|value| value.to_str().ok())
                == Some(&format!("Bearer {GATEWAY_TOKEN}"));
            let (status, body) = match request.uri().path() {
                _ if !authorized => {
                    (StatusCode::UNAUTHORIZED, serde_json::json!({ "error": { "code": "unauthorized" } }).to_string())
                }
                "/admin/rejections" => {
                    let entry = serde_json::json!({
                        "at_ms": 1_780_000_000_000_i64, "code": "<script>alert(1)</script>", "status": 401,
                        "secrets_tried": ["<b>key</b>"], "skew_ms": null, "peer": "\"><img src=x onerror=alert(2)>",
                        "event_id": null
                    });
                    let answer = serde_json::json!({ "gateway": "<i>gw</i>", "sources": { "stripe": [entry] } });
                    (StatusCode::OK, answer.to_string())
                }
                "/huge/admin/rejections" => {
                    let head = r#"{"gateway":"huge","sources":{},"padding":""#;
                    let padding = MAX_RESPONSE_BYTES + 1 - head.len() - 2;
                    (StatusCode::OK, format!("{head}{}\"}}", " ".repeat(padding)))
                }
                "/silent/admin/rejections" => {
                    stopped.cancelled().await;
                    (StatusCode::SERVICE_UNAVAILABLE, String::new())
                }
                _ => (StatusCode::NOT_FOUND, String::new()),
            };
            let mut response = Response::new(Body::new(Bytes::from(body)));
            *response.status_mut() = status;
            response
        }
    };
    tokio::spawn(serve(listener, handler, ServeLimits::default(), shutdown));
    addr
}

#[tokio::test]
async fn a_gateway_answering_too_much_or_nothing_is_named_and_the_others_are_served() {
    let stack = TestStack::builder().build().await;
    let fake_shutdown = CancellationToken::new();
    let gateway = hostile_gateway(fake_shutdown.clone()).await;
    let (huge, silent) = (format!("http://{gateway}/huge"), format!("http://{gateway}/silent"));
    let replayer = Replayer::start(&stack, vec![huge.clone(), format!("http://{gateway}"), silent.clone()]).await;

    let answer = replayer.api_rejections(&stack, "").await;
    assert_eq!(answer["gateways"], serde_json::json!(["<i>gw</i>"]), "{answer}");
    assert_eq!(answer["sources"]["stripe"].as_array().map(Vec::len), Some(1), "{answer}");
    let reasons: Vec<(&str, &str)> = answer["unreachable"]
        .as_array()
        .expect("unreachable")
        .iter()
        .map(|gateway| (gateway["url"].as_str().expect("url"), gateway["reason"].as_str().expect("reason")))
        .collect();
    assert_eq!(reasons, [(huge.as_str(), "answer larger than 4 MiB"), (silent.as_str(), "no answer within 2 s")]);

    replayer.stop().await;
    fake_shutdown.cancel();
    stack.shutdown().await;
}

#[tokio::test]
async fn the_console_escapes_what_a_gateway_answers_and_the_gateways_token_is_sent() {
    let stack = TestStack::builder().build().await;
    let fake_shutdown = CancellationToken::new();
    let gateway = hostile_gateway(fake_shutdown.clone()).await;
    let replayer = Replayer::start(&stack, vec![format!("http://{gateway}")]).await;

    // The fake answers only with the configured token: its entry arriving proves the token was sent.
    let answer = replayer.api_rejections(&stack, "").await;
    assert_eq!(answer["unreachable"], serde_json::json!([]), "{answer}");
    assert_eq!(answer["sources"]["stripe"][0]["code"], "<script>alert(1)</script>", "the API keeps the value as is");

    let (_, html) = replayer.console_page(&stack, "/ui/rejections").await;
    let table = html.split(r#"<table class="rejections" data-source="stripe">"#).nth(1).expect("stripe's table");
    let table = table.split("</table>").next().expect("table");
    assert!(table.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{table}");
    assert!(table.contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"), "{table}");
    assert!(table.contains("&lt;i&gt;gw&lt;/i&gt;") && table.contains("&lt;b&gt;key&lt;/b&gt;"), "{table}");
    for raw in ["<script>alert", "<img src=x", "<i>gw", "<b>key"] {
        assert!(!html.contains(raw), "{raw} unescaped in {html}");
    }

    replayer.stop().await;
    fake_shutdown.cancel();
    stack.shutdown().await;
}
