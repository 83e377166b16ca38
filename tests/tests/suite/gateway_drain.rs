//! A draining gateway tells the load balancer first and drops nobody: once shutdown starts, `/readyz` fails at
//! once while the public listener keeps serving for `drain_grace_ms`; a request arriving on a kept-alive
//! connection then gets its real answer with `Connection: close` (instead of a reset), and only after the grace
//! does the gateway stop accepting and close what is left.

use std::{net::SocketAddr, time::Duration};

use hookline_gateway::config::Limits;
use hookline_tests::{Delivery, TEST_SECRET, TestStack, eventually};
use rdkafka::Message;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// One HTTP/1.1 answer read off a kept-alive connection: status, headers (lowercase names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }
}

/// Writes one signed GitHub delivery on `stream` (keep-alive) and reads exactly its answer.
async fn post_on(stream: &mut TcpStream, delivery: &Delivery) -> std::io::Result<Answer> {
    let head = format!(
        "POST /webhooks/github HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nX-GitHub-Delivery: {}\r\nX-GitHub-Event: push\r\nX-Hub-Signature-256: {}\r\nContent-Length: {}\r\n\r\n",
        delivery.delivery_id,
        delivery.signature(TEST_SECRET),
        delivery.body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&delivery.body).await?;
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break end + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed before an answer"));
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().and_then(|line| line.split(' ').nth(1)).and_then(|code| code.parse().ok()).unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize =
        headers.iter().find(|(name, _)| name == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    while buffer.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    Ok(Answer { status, headers })
}

#[tokio::test]
async fn a_draining_gateway_fails_readyz_first_and_answers_kept_alive_connections_with_connection_close() {
    let grace = Duration::from_secs(3);
    let stack = TestStack::builder()
        .gateway_limits(Limits {
            body_read_timeout_ms: 2_000,
            drain_grace_ms: grace.as_millis() as u64,
            ..Limits::default()
        })
        .build()
        .await;
    let (public, admin, topic) = (stack.gateway_addr, stack.gateway_admin_addr, stack.kafka.inbound_topic.clone());
    eventually(Duration::from_secs(30), "the gateway is ready", || async { readyz_on(admin).await == Some(200) }).await;

    // Two kept-alive connections, each used once: the second stays idle until after the drain starts.
    let mut first = TcpStream::connect(public).await.expect("connect");
    let mut idle = TcpStream::connect(public).await.expect("connect");
    let mut acknowledged = Vec::new();
    for (stream, n) in [(&mut first, 0), (&mut idle, 1)] {
        let delivery = Delivery::new(format!(r#"{{"drain":"before {n}"}}"#));
        let answer = post_on(stream, &delivery).await.expect("answer before the drain");
        assert_eq!(answer.status, 202);
        assert_eq!(answer.header("connection"), None, "kept alive before the drain");
        acknowledged.push(delivery.delivery_id);
    }

    let shutdown = tokio::spawn(stack_shutdown(stack));
    // `/readyz` fails as soon as the drain starts, long before the listener closes.
    eventually(Duration::from_secs(2), "readyz fails once draining", || async { readyz_on(admin).await == Some(503) })
        .await;

    // A request on a kept-alive connection during the drain: answered for real, and told to close.
    let during = Delivery::new(&br#"{"drain":"during, kept-alive"}"#[..]);
    let answer = post_on(&mut first, &during).await.expect("a kept-alive connection is answered while draining");
    assert_eq!(answer.status, 202);
    assert_eq!(answer.header("connection"), Some("close"));
    acknowledged.push(during.delivery_id);
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), first.read_to_end(&mut rest))
        .await
        .expect("closed")
        .expect("read");
    assert_eq!(n, 0, "the gateway closes the connection after its answer");
    // The other kept-alive connection too, and a new one.
    let late = Delivery::new(&br#"{"drain":"during, idle connection"}"#[..]);
    let answer = post_on(&mut idle, &late).await.expect("an idle kept-alive connection is answered while draining");
    assert_eq!((answer.status, answer.header("connection")), (202, Some("close")));
    acknowledged.push(late.delivery_id);
    let mut fresh = TcpStream::connect(public).await.expect("still accepting during the grace");
    let new = Delivery::new(&br#"{"drain":"during, new connection"}"#[..]);
    let answer = post_on(&mut fresh, &new).await.expect("a new connection is answered while draining");
    assert_eq!((answer.status, answer.header("connection")), (202, Some("close")));
    acknowledged.push(new.delivery_id);

    tokio::time::timeout(Duration::from_secs(30), shutdown).await.expect("drains and exits").expect("task");
    assert!(TcpStream::connect(public).await.is_err(), "the listener is closed after the drain");

    let records = tokio::task::spawn_blocking(move || {
        hookline_common::kafka::read_topic(&hookline_tests::plaintext_kafka(), &topic, Duration::from_secs(20))
    })
    .await
    .expect("reader")
    .expect("read topic");
    let keys: Vec<String> =
        records.iter().filter_map(|record| record.key().map(|key| String::from_utf8_lossy(key).into_owned())).collect();
    for id in &acknowledged {
        assert!(keys.contains(id), "acknowledged {id} is in Kafka");
    }
}

async fn stack_shutdown(stack: TestStack) {
    stack.shutdown().await;
}

async fn readyz_on(admin: SocketAddr) -> Option<u16> {
    let request = http::Request::get(format!("http://{admin}/readyz")).body(String::new()).ok()?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    Some(client.request(request).await.ok()?.status().as_u16())
}
