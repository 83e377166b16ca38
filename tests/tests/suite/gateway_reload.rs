//! Secret rotation without a restart, against the real broker: `POST /admin/reload` and SIGHUP re-read the secrets,
//! swap them in atomically, and a bad config is rejected while the old one keeps serving.
//!
//! The rotation test sends SIGHUP to its own process, which every gateway in the process sees: the other test
//! only checks refusals, which a reload of its own valid config does not change.

use std::time::Duration;

use bytes::Bytes;
use hookline_common::config::SecretRef;
use hookline_gateway::config::SourceConfig;
use hookline_signature::github;
use hookline_tests::{Reply, TestStack, eventually};
use http::{Request, StatusCode};
use http_body_util::Full;

async fn post_signed(stack: &TestStack, secret: &str, delivery_id: &str) -> Reply {
    let body = Bytes::from(format!(r#"{{"delivery":"{delivery_id}"}}"#));
    let request = Request::post(format!("http://{}/webhooks/rotating", stack.gateway_addr))
        .header("x-github-delivery", delivery_id)
        .header("x-hub-signature-256", github::sign(secret.as_bytes(), &body))
        .body(Full::new(body))
        .expect("request");
    stack.send(request).await
}

async fn admin(stack: &TestStack, method: http::Method) -> Reply {
    let request = Request::builder()
        .method(method)
        .uri(format!("http://{}/admin/reload", stack.gateway_admin_addr))
        .body(Full::default())
        .expect("request");
    stack.send(request).await
}

#[tokio::test]
async fn secrets_rotate_without_restart_and_a_bad_reload_keeps_the_old_config() {
    let secret_path = std::env::temp_dir().join(format!("hookline-reload-{}.secret", uuid::Uuid::new_v4().simple()));
    std::fs::write(&secret_path, "first-secret\n").expect("write");
    let stack = TestStack::builder()
        .gateway_source(SourceConfig {
            type_from_header: Some(true),
            ..SourceConfig::new(
                "rotating",
                "github",
                vec![SecretRef::from_file("current", secret_path.display().to_string())],
            )
        })
        .build()
        .await;
    assert_eq!(post_signed(&stack, "first-secret", "d-1").await.status, StatusCode::ACCEPTED);

    // The secret file is rotated; the admin endpoint swaps it in.
    std::fs::write(&secret_path, "second-secret\n").expect("write");
    assert_eq!(post_signed(&stack, "second-secret", "d-2").await.status, StatusCode::UNAUTHORIZED, "not yet reloaded");
    let reply = admin(&stack, http::Method::POST).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let answer: serde_json::Value = serde_json::from_slice(&reply.body).expect("json");
    assert_eq!((answer["status"].as_str(), answer["sources"].as_u64()), (Some("reloaded"), Some(2)));
    assert_eq!(post_signed(&stack, "second-secret", "d-3").await.status, StatusCode::ACCEPTED);
    assert_eq!(post_signed(&stack, "first-secret", "d-4").await.status, StatusCode::UNAUTHORIZED);

    // A broken secret (empty file) is rejected (the log names the reason, the answer only counts: it never echoes
    // secret file paths); the running secret keeps working.
    std::fs::write(&secret_path, "").expect("write");
    let reply = admin(&stack, http::Method::POST).await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    let answer: serde_json::Value = serde_json::from_slice(&reply.body).expect("json");
    assert_eq!(answer["error"]["code"], "reload_rejected");
    assert_eq!(answer["error"]["problems"], 1, "{answer}");
    assert!(!reply.body.windows(4).any(|window| window == b"/tmp"), "no path in the answer: {answer}");
    // A secret of only whitespace is as empty (it would be a guessable key): rejected too.
    std::fs::write(&secret_path, "  \t \n").expect("write");
    assert_eq!(admin(&stack, http::Method::POST).await.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(post_signed(&stack, "second-secret", "d-5").await.status, StatusCode::ACCEPTED);
    assert_eq!(admin(&stack, http::Method::GET).await.status, StatusCode::METHOD_NOT_ALLOWED);

    // SIGHUP does the same.
    std::fs::write(&secret_path, "third-secret").expect("write");
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .expect("send SIGHUP");
    assert!(status.success());
    eventually(Duration::from_secs(10), "SIGHUP reloads the secret", || async {
        post_signed(&stack, "third-secret", &uuid::Uuid::new_v4().to_string()).await.status == StatusCode::ACCEPTED
    })
    .await;
    assert_eq!(post_signed(&stack, "second-secret", "d-6").await.status, StatusCode::UNAUTHORIZED);

    let metrics = stack.gateway_scrape().await;
    let reloads = |outcome| metrics.value("hookline_gateway_config_reloads_total", &[("outcome", outcome)]);
    assert_eq!(reloads("applied"), Some(2.0), "{metrics}");
    assert_eq!(reloads("rejected"), Some(2.0), "{metrics}");

    // Every acknowledged delivery is in Kafka; none of the refused ones are.
    let keys: Vec<String> = stack
        .inbound_records()
        .await
        .iter()
        .filter_map(|record| rdkafka::Message::key(record).map(|key| String::from_utf8_lossy(key).into_owned()))
        .collect();
    // GitHub's delivery id is unsigned: records are keyed by the body's SHA-256.
    let key_of =
        |delivery_id: &str| hookline_tests::body_event_id(format!(r#"{{"delivery":"{delivery_id}"}}"#).as_bytes());
    for acknowledged in ["d-1", "d-3", "d-5"] {
        assert!(keys.contains(&key_of(acknowledged)), "{acknowledged} in {keys:?}");
    }
    for refused in ["d-2", "d-4", "d-6"] {
        assert!(!keys.contains(&key_of(refused)), "{refused} must not be in Kafka");
    }
    let _ = std::fs::remove_file(&secret_path);
    stack.shutdown().await;
}

/// The status line's code of a `POST /admin/reload` sent from `local` (a loopback address) with `extra` headers.
async fn reload_from(stack: &TestStack, local: &str, extra: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(format!("{local}:0").parse().expect("addr")).expect("bind");
    let mut stream = socket.connect(stack.gateway_admin_addr).await.expect("connect");
    let request = format!(
        "POST /admin/reload HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\n{extra}Connection: close\r\n\r\n",
        stack.gateway_admin_addr
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    answer.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or_else(|| panic!("no status: {answer}"))
}

/// Without a reload token, only 127.0.0.1 itself may reload, and never a browser: a service mesh's sidecar (every
/// client arriving from 127.0.0.6) and a web page posting to 127.0.0.1 are refused.
#[tokio::test]
async fn a_tokenless_reload_comes_from_127_0_0_1_itself_and_never_from_a_browser() {
    let stack = TestStack::builder().build().await;
    assert_eq!(reload_from(&stack, "127.0.0.6", "").await, 403, "a sidecar's address is not this host");
    assert_eq!(reload_from(&stack, "127.0.0.1", "Origin: https://evil.example\r\n").await, 403, "a web page");
    assert_eq!(reload_from(&stack, "127.0.0.1", "Origin: null\r\n").await, 403, "a sandboxed page");
    assert_eq!(reload_from(&stack, "127.0.0.1", "").await, 200, "the operator on the host");
    stack.shutdown().await;
}
