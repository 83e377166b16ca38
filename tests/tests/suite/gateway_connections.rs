//! What a connection can cost the gateway: slow senders hold no in-flight permit, so valid deliveries keep being
//! accepted beside them; silent connections (no byte, half a protocol preface, an idle keep-alive) are closed on
//! the public and the admin port; past the connection caps new connections are answered 503 while `/livez`
//! answers; and every answer given before the body was read (a refusal at a cap, a 413) reaches the client, never
//! a reset or a failed write of its body.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use hookline_gateway::config::Limits;
use hookline_tests::{Delivery, TEST_SECRET, TestStack, eventually};
use http::{Request, StatusCode};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// The HTTP/2 connection preface and an empty SETTINGS frame: what a client sends before its first stream.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// A request body that declares its length and never sends a byte.
struct NeverSent;

impl hyper::body::Body for NeverSent {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Pending
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(1_000)
    }
}

/// An HTTP/1.1 request whose head is complete and whose body has sent one byte of 1,000.
async fn slow_http1_request(stack: &TestStack) -> TcpStream {
    let mut stream = TcpStream::connect(stack.gateway_addr).await.expect("connect");
    let head = "POST /webhooks/github HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n\
                content-length: 1000\r\nx-github-event: push\r\nx-github-delivery: slow\r\n\
                x-hub-signature-256: sha256=00\r\n\r\n{";
    stream.write_all(head.as_bytes()).await.expect("write");
    stream
}

/// An h2c connection with `n_streams` requests that each declare 1,000 bytes and send none.
async fn silent_h2_streams(stack: &TestStack, n_streams: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let stream = TcpStream::connect(stack.gateway_addr).await.expect("connect");
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.expect("h2c handshake");
    let mut tasks = vec![tokio::spawn(async move {
        let _ = connection.await;
    })];
    for _ in 0..n_streams {
        let mut sender = sender.clone();
        let request = Request::post(format!("http://{}/webhooks/github", stack.gateway_addr))
            .header("content-length", "1000")
            .header("x-github-event", "push")
            .header("x-github-delivery", "stalled")
            .header("x-hub-signature-256", "sha256=00")
            .body(NeverSent)
            .expect("request");
        tasks.push(tokio::spawn(async move {
            let _ = sender.send_request(request).await;
        }));
    }
    tasks
}

#[tokio::test]
async fn slow_clients_leave_valid_deliveries_accepted() {
    const N_SLOW_HTTP1: usize = 200;
    const N_H2_CONNECTIONS: usize = 12;
    // The default `max_concurrent_streams`: the gateway holds no more per connection (gateway_h2_streams.rs).
    const N_STREAMS: usize = 8;
    const N_VALID: usize = 20;
    let stack = TestStack::builder()
        .gateway_limits(Limits {
            // Far fewer permits than slow requests: before the fix each slow request held one.
            max_in_flight: 16,
            body_read_timeout_ms: 60_000,
            request_deadline_ms: 60_000,
            ..Limits::default()
        })
        .build()
        .await;

    let mut slow = Vec::new();
    for _ in 0..N_SLOW_HTTP1 {
        slow.push(slow_http1_request(&stack).await);
    }
    let mut h2_tasks = Vec::new();
    for _ in 0..N_H2_CONNECTIONS {
        h2_tasks.extend(silent_h2_streams(&stack, N_STREAMS).await);
    }
    let n_slow = (N_SLOW_HTTP1 + N_H2_CONNECTIONS * N_STREAMS) as f64;
    eventually(Duration::from_secs(30), "every slow request is being read", || async {
        stack.gateway_metric("hookline_gateway_in_flight_requests", &[]).await >= n_slow
    })
    .await;

    for index in 0..N_VALID {
        let reply = stack.post(&Delivery::new(format!(r#"{{"n":{index}}}"#))).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "a valid delivery beside slow clients: {:?}", reply.body);
    }
    assert!(
        stack.gateway_metric("hookline_gateway_in_flight_requests", &[]).await >= n_slow,
        "the slow requests were still open while the valid ones were accepted"
    );
    assert_eq!(stack.inbound_records().await.len(), N_VALID);
    drop(slow);
    for task in h2_tasks {
        task.abort();
    }
    stack.shutdown().await;
}

/// Reads until the server closes the connection; panics if it is still open after `bound`.
async fn closed_by_server(mut stream: TcpStream, bound: Duration, what: &str) {
    let mut buffer = [0u8; 4096];
    let read_to_end = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(bound, read_to_end).await.unwrap_or_else(|_| panic!("{what}: still open after {bound:?}"));
}

#[tokio::test]
async fn silent_connections_are_closed() {
    const MAX_CONNECTIONS: usize = 30;
    // A bound on how long a closed connection may take to be noticed, far above the limits below.
    const BOUND: Duration = Duration::from_secs(20);
    let stack = TestStack::builder()
        .gateway_limits(Limits {
            header_read_timeout_ms: 500,
            idle_timeout_ms: 1_000,
            max_connections: MAX_CONNECTIONS,
            max_connections_per_peer: MAX_CONNECTIONS,
            body_read_timeout_ms: 2_000,
            ..Limits::default()
        })
        .build()
        .await;

    // An idle keep-alive connection that sent one valid request.
    let delivery = Delivery::new(r#"{"keep":"alive"}"#);
    let mut keep_alive = TcpStream::connect(stack.gateway_addr).await.expect("connect");
    let request = format!(
        "POST /webhooks/github HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         x-github-event: push\r\nx-github-delivery: {}\r\nx-hub-signature-256: {}\r\n\r\n",
        delivery.body.len(),
        delivery.delivery_id,
        delivery.signature(TEST_SECRET)
    );
    keep_alive.write_all(request.as_bytes()).await.expect("write");
    keep_alive.write_all(&delivery.body).await.expect("write");
    let mut response = vec![0u8; 4096];
    let n = keep_alive.read(&mut response).await.expect("response");
    assert!(response[..n].starts_with(b"HTTP/1.1 202"), "{}", String::from_utf8_lossy(&response[..n]));

    // Fill the cap: connections that send nothing, half the HTTP/2 preface, or the whole preface and no stream.
    let mut silent = Vec::new();
    for index in 0..MAX_CONNECTIONS - 1 {
        let mut stream = TcpStream::connect(stack.gateway_addr).await.expect("connect");
        match index % 3 {
            0 => {}
            1 => stream.write_all(&H2_PREFACE[..10]).await.expect("write"),
            _ => stream.write_all(H2_PREFACE).await.expect("write"),
        }
        silent.push(stream);
    }
    // Past the cap a new connection is told to come back at once, and the admin port still answers.
    eventually(BOUND, "a connection past the cap is answered 503 at once", || async {
        let mut extra = TcpStream::connect(stack.gateway_addr).await.expect("connect");
        let _ = extra.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(2), extra.read_to_end(&mut answer)).await;
        matches!(read, Ok(Ok(_))) && answer.starts_with(b"HTTP/1.1 503 ")
    })
    .await;
    let livez = stack
        .send(Request::get(format!("http://{}/livez", stack.gateway_admin_addr)).body(Default::default()).unwrap())
        .await;
    assert_eq!(livez.status, StatusCode::OK);

    let silent_admin = TcpStream::connect(stack.gateway_admin_addr).await.expect("connect admin");
    let mut closing = tokio::task::JoinSet::new();
    closing.spawn(closed_by_server(keep_alive, BOUND, "an idle keep-alive connection"));
    closing.spawn(closed_by_server(silent_admin, BOUND, "a silent admin connection"));
    for stream in silent {
        closing.spawn(closed_by_server(stream, BOUND, "a silent public connection"));
    }
    while let Some(joined) = closing.join_next().await {
        joined.expect("every silent connection is closed");
    }

    // Their slots are free again.
    eventually(BOUND, "valid deliveries are accepted again", || async {
        stack.post(&Delivery::new(r#"{"after":"cap"}"#)).await.status == StatusCode::ACCEPTED
    })
    .await;
    stack.shutdown().await;
}

/// One client's request with an 8 KiB body, written whole before it reads; its answer, or what went wrong.
async fn post_then_read(addr: std::net::SocketAddr) -> Result<String, String> {
    let body = vec![b'x'; 8 * 1024];
    let head = format!(
        "POST /webhooks/github HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nx-github-event: push\r\nx-github-delivery: burst\r\nx-hub-signature-256: sha256=00\r\n\r\n",
        body.len()
    );
    let mut stream = TcpStream::connect(addr).await.map_err(|error| format!("connect: {error}"))?;
    stream.write_all(head.as_bytes()).await.map_err(|error| format!("write head: {error}"))?;
    stream.write_all(&body).await.map_err(|error| format!("write body: {error}"))?;
    match tokio::time::timeout(Duration::from_secs(30), read_answer_head(&mut stream)).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(error)) => Err(format!("read: {error}")),
        Err(_) => Err("no answer within 30 s".to_owned()),
    }
}

/// Reads until the answer's head is complete (then leaves, as an HTTP client does), or the server closes.
async fn read_answer_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !answer.windows(4).any(|window| window == b"\r\n\r\n") {
        match stream.read(&mut buffer).await? {
            0 => break,
            n => answer.extend_from_slice(&buffer[..n]),
        }
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test]
async fn a_burst_of_connections_over_the_per_address_cap_each_reads_503_with_retry_after() {
    const PER_PEER: usize = 4;
    const BURST: usize = 2_000;
    let stack = TestStack::builder()
        .gateway_limits(Limits {
            max_connections_per_peer: PER_PEER,
            body_read_timeout_ms: 60_000,
            request_deadline_ms: 60_000,
            ..Limits::default()
        })
        .build()
        .await;
    // The address is at its cap: requests whose bodies are still coming.
    let mut held = Vec::new();
    for _ in 0..PER_PEER {
        held.push(slow_http1_request(&stack).await);
    }
    eventually(Duration::from_secs(30), "the held requests are being read", || async {
        stack.gateway_metric("hookline_gateway_in_flight_requests", &[]).await >= PER_PEER as f64
    })
    .await;

    // Before the fix only 8 refusals were answered at once per address: the rest were closed on accept, and their
    // clients failed to write their bodies or read a reset.
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..BURST {
        burst.spawn(post_then_read(stack.gateway_addr));
    }
    let mut failures = Vec::new();
    while let Some(joined) = burst.join_next().await {
        match joined.expect("client task") {
            Ok(answer) if answer.starts_with("HTTP/1.1 503 ") && answer.contains("retry-after: 1\r\n") => {}
            Ok(answer) => failures.push(format!("answered {answer:?}")),
            Err(error) => failures.push(error),
        }
    }
    let n_failed = failures.len();
    failures.sort();
    failures.dedup_by(|a, b| a.split(':').next() == b.split(':').next());
    assert!(failures.is_empty(), "{n_failed} of {BURST} clients did not read 503 with Retry-After: {failures:?}");
    drop(held);
    stack.shutdown().await;
}

#[tokio::test]
async fn a_413_decided_from_the_head_reaches_a_client_still_writing_its_body() {
    let stack = TestStack::builder().build().await;
    // Above the source's 1 MB limit, declared in the head: answered before a byte of the body is read.
    let body = vec![b'x'; 1_500_000];
    let head = format!(
        "POST /webhooks/github HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nx-github-event: push\r\nx-github-delivery: big\r\nx-hub-signature-256: sha256=00\r\n\r\n",
        body.len()
    );
    let mut stream = TcpStream::connect(stack.gateway_addr).await.expect("connect");
    stream.write_all(head.as_bytes()).await.expect("write head");
    // Before the fix the gateway closed with the body unread: a reset, and this write failed.
    stream.write_all(&body).await.expect("the whole body is written, not cut by a reset");
    let answer = tokio::time::timeout(Duration::from_secs(10), read_answer_head(&mut stream))
        .await
        .expect("answered within 10 s")
        .expect("the answer is read, not a reset");
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    stack.shutdown().await;
}
