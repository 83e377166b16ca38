//! What an HTTP/2 stream flood can cost the gateway. Each stream may hold a request head of up to
//! `max_header_bytes` while its body is awaited, so the memory bound counts streams, not connections: a connection
//! may open `max_concurrent_streams` streams (advertised in SETTINGS, the rest refused), at most
//! `max_requests_in_progress` requests are in progress at once (past it: 503 with `Retry-After`, at once), and
//! every head held is charged to the body budget. For its memory the gateway runs as its own process
//! (`test-gateway`), so its resident memory is its own, apart from the flooding clients'; the heads' charge is
//! tested on the in-process gateway of a [`TestStack`].

use std::{
    net::{IpAddr, Ipv4Addr},
    sync::Arc,
    time::Duration,
};

use hookline_bench::h2_flood::{FloodConnection, FloodRequest, Outcomes, rss_bytes};
use hookline_gateway::config::Limits;
use hookline_tests::{Delivery, TEST_SECRET, TestStack, eventually};
use http::StatusCode;

/// The gateway as a process of its own.
struct GatewayProcess(hookline_tests::gateway_process::GatewayProcess);

impl std::ops::Deref for GatewayProcess {
    type Target = hookline_tests::gateway_process::GatewayProcess;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl GatewayProcess {
    /// Starts `test-gateway` with the stack's Kafka settings, a `github` source signed with [`TEST_SECRET`], and
    /// `limits`; returns once it listens.
    fn start(stack: &TestStack, limits: Limits) -> Self {
        let config = hookline_tests::gateway_process::github_gateway_config(&stack.kafka, limits);
        Self(hookline_tests::gateway_process::GatewayProcess::start(
            env!("CARGO_BIN_EXE_test-gateway").as_ref(),
            &config,
            &[],
        ))
    }

    fn rss_bytes(&self) -> u64 {
        rss_bytes(self.id()).expect("the gateway process is running")
    }

    /// The sum of the samples of `metric` on the gateway's `/metrics` carrying every one of `labels`.
    async fn metric(&self, stack: &TestStack, metric: &str, labels: &[(&str, &str)]) -> f64 {
        stack.scrape(self.admin).await.sum(metric, labels)
    }

    async fn in_progress(&self, stack: &TestStack) -> f64 {
        self.metric(stack, "hookline_gateway_in_flight_requests", &[]).await
    }

    /// A correctly signed GitHub delivery, over HTTP/1.1 from 127.0.0.1.
    async fn post(&self, stack: &TestStack, delivery: &Delivery) -> StatusCode {
        stack.send(delivery.request(self.public, &delivery.signature(TEST_SECRET))).await.status
    }
}

/// Limits under which a flood's streams are held for the whole test: no timeout ends them first.
fn held() -> Limits {
    Limits { body_read_timeout_ms: 60_000, request_deadline_ms: 60_000, drain_grace_ms: 0, ..Limits::default() }
}

/// Loopback address `n` (127.0.0.`n`): each is a peer of its own to the gateway.
fn loopback(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

const HEADER_BYTES: usize = 60 * 1024;
const STREAMS_OFFERED: usize = 64;
const CONNECTIONS_PER_PEER: usize = 4;
const MAX_REQUESTS_IN_PROGRESS: usize = 48;
/// The default (`Limits::default().max_concurrent_streams`), which this test holds the gateway to.
const MAX_STREAMS: usize = 8;

/// Opens `n_connections` flooding connections from `peer`, each offering [`STREAMS_OFFERED`] streams of
/// [`HEADER_BYTES`] of headers and no body. Connections past the per-peer cap are closed by the gateway: they are
/// left out.
async fn flood(
    gateway: &GatewayProcess,
    peer: IpAddr,
    n_connections: usize,
    outcomes: &Arc<Outcomes>,
) -> Vec<FloodConnection> {
    let request =
        FloodRequest { uri: format!("http://{}/webhooks/github", gateway.public), n_header_bytes: HEADER_BYTES };
    let mut connections = Vec::new();
    for _ in 0..n_connections {
        if let Ok(connection) =
            FloodConnection::open(gateway.public, peer, &request, STREAMS_OFFERED, outcomes.clone()).await
        {
            connections.push(connection);
        }
    }
    connections
}

#[tokio::test]
async fn an_h2_stream_flood_is_held_to_the_stream_and_request_caps_within_the_memory_bound() {
    let stack = TestStack::builder().build().await;
    let limits = Limits {
        max_connections: 64,
        max_connections_per_peer: CONNECTIONS_PER_PEER,
        max_requests_in_progress: MAX_REQUESTS_IN_PROGRESS,
        max_body_buffer_bytes: 32 * 1024 * 1024,
        ..held()
    };
    assert_eq!(limits.max_concurrent_streams as usize, MAX_STREAMS, "the default the test holds the gateway to");
    let gateway = GatewayProcess::start(&stack, limits.clone());
    eventually(Duration::from_secs(30), "the gateway acknowledges a delivery", || async {
        gateway.post(&stack, &Delivery::new(r#"{"warm":"up"}"#)).await == StatusCode::ACCEPTED
    })
    .await;
    let baseline_rss = gateway.rss_bytes();

    // One peer floods with twice the connections it may open, each offering four times the streams it may open.
    let outcomes = Arc::new(Outcomes::default());
    let from_one_peer = flood(&gateway, loopback(2), 2 * CONNECTIONS_PER_PEER, &outcomes).await;
    let held_by_one_peer = CONNECTIONS_PER_PEER * MAX_STREAMS;
    eventually(Duration::from_secs(30), "one peer's streams are held, as many as its connections may open", || async {
        gateway.in_progress(&stack).await >= held_by_one_peer as f64
    })
    .await;
    // (a) Each connection is told its stream limit, and the gateway holds no more streams than that per connection.
    let advertised: Vec<usize> = from_one_peer.iter().map(FloodConnection::advertised_streams).collect();
    let n_limited = advertised.iter().filter(|&&streams| streams == MAX_STREAMS).count();
    assert_eq!(
        n_limited, CONNECTIONS_PER_PEER,
        "the connections the peer may open are told {MAX_STREAMS}: {advertised:?}"
    );
    // (c) Beside the held flood, a delivery from another peer is acknowledged.
    let reply = gateway.post(&stack, &Delivery::new(r#"{"beside":"the flood"}"#)).await;
    assert_eq!(reply, StatusCode::ACCEPTED, "a valid delivery while one peer's flood is held");
    let in_progress = gateway.in_progress(&stack).await;
    assert_eq!(in_progress, held_by_one_peer as f64, "no connection holds more than {MAX_STREAMS} streams");
    assert_eq!(outcomes.n_answered(), 0, "held streams are not answered");

    // (b) More peers flood: past max_requests_in_progress every stream is answered 503 with Retry-After at once.
    let mut from_more_peers = Vec::new();
    for peer in 3..=6 {
        from_more_peers.extend(flood(&gateway, loopback(peer), CONNECTIONS_PER_PEER, &outcomes).await);
    }
    // Streams are refused for as long as the flood goes on: wait until the gateway has refused a good many and
    // the flood's clients have heard every refusal the gateway counted.
    let too_many = &[("outcome", "too_many_requests_in_progress")];
    let enough = MAX_REQUESTS_IN_PROGRESS;
    eventually(Duration::from_secs(60), "streams past the cap are refused, and the clients heard it", || async {
        let counted = gateway.metric(&stack, "hookline_gateway_requests_total", too_many).await;
        counted >= enough as f64 && counted == outcomes.answered(StatusCode::SERVICE_UNAVAILABLE).0 as f64
    })
    .await;
    let (n_503, n_retry_after) = outcomes.answered(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(n_503, outcomes.n_answered(), "past the cap the only answer is 503");
    assert_eq!(n_retry_after, n_503, "every 503 carries Retry-After");
    let in_progress = gateway.in_progress(&stack).await;
    assert_eq!(in_progress, MAX_REQUESTS_IN_PROGRESS as f64, "held: exactly max_requests_in_progress");

    // (d) The gateway's own memory: what it held at rest, plus each request in progress holding its head
    // (charged to the body budget) twice over (the header block as received and the decoded header map), plus a
    // head being received and the buffers of each open connection.
    let n_connections = (CONNECTIONS_PER_PEER + from_more_peers.len()) as u64;
    let per_request = 2 * (HEADER_BYTES as u64 + 16 * 1024);
    let per_connection = limits.max_header_bytes as u64 + 128 * 1024;
    let bound = baseline_rss
        + MAX_REQUESTS_IN_PROGRESS as u64 * per_request
        + n_connections * per_connection
        + 16 * 1024 * 1024;
    let held_rss = gateway.rss_bytes();
    eprintln!(
        "503: {n_503}, refused: {}, failed: {}; RSS at rest {} KiB, under the flood {} KiB, bound {} KiB",
        outcomes.n_refused(),
        outcomes.n_failed(),
        baseline_rss >> 10,
        held_rss >> 10,
        bound >> 10
    );
    let offered_bytes = ((CONNECTIONS_PER_PEER + from_more_peers.len()) * STREAMS_OFFERED * HEADER_BYTES) as u64;
    assert!(
        held_rss <= bound,
        "gateway RSS {} MiB under the flood, over the bound {} MiB (at rest {} MiB; the flood offered {} MiB of heads)",
        held_rss >> 20,
        bound >> 20,
        baseline_rss >> 20,
        offered_bytes >> 20
    );
    drop((from_one_peer, from_more_peers));
}

#[tokio::test]
async fn heads_held_by_streams_are_charged_to_the_body_budget() {
    const BUDGET: usize = 512 * 1024;
    let stack = TestStack::builder().gateway_limits(Limits { max_body_buffer_bytes: BUDGET, ..held() }).build().await;
    let request =
        FloodRequest { uri: format!("http://{}/webhooks/github", stack.gateway_addr), n_header_bytes: HEADER_BYTES };
    let head = request.build();
    let charged = hookline_gateway::body::head_bytes(head.uri(), head.headers());
    let n_fit = BUDGET / charged;
    assert!(n_fit < 4 * MAX_STREAMS, "the flood offers more heads than the budget holds: {n_fit}");

    let outcomes = Arc::new(Outcomes::default());
    let mut flood = Vec::new();
    for _ in 0..4 {
        let connection =
            FloodConnection::open(stack.gateway_addr, loopback(2), &request, 2 * MAX_STREAMS, outcomes.clone());
        flood.push(connection.await.expect("connect"));
    }
    let buffer_full = &[("outcome", "body_buffer_full")];
    eventually(Duration::from_secs(30), "heads past the budget are refused, and the clients heard it", || async {
        let counted = stack.gateway_metric("hookline_gateway_requests_total", buffer_full).await;
        let (n_503, _) = outcomes.answered(StatusCode::SERVICE_UNAVAILABLE);
        counted > 0.0
            && counted == n_503 as f64
            && stack.gateway_metric("hookline_gateway_in_flight_requests", &[]).await == n_fit as f64
    })
    .await;
    let (n_503, n_retry_after) = outcomes.answered(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!((n_503, n_retry_after), (outcomes.n_answered(), n_503), "only 503s, each with Retry-After");
    // What the held heads leave of the budget is less than one more flood head, and more than a delivery needs.
    let reply = stack.post(&Delivery::new(r#"{"small":"enough"}"#)).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let held = stack.gateway_metric("hookline_gateway_in_flight_requests", &[]).await;
    assert_eq!(held, n_fit as f64, "the budget holds {n_fit} heads of {charged} bytes");
    drop(flood);
    stack.shutdown().await;
}

/// One address's flood takes at most its share of the requests in progress, so the cap is never all its own and a
/// delivery from another address is acknowledged while the flood is held.
#[tokio::test]
async fn one_address_holds_at_most_its_share_of_the_requests_in_progress() {
    const SHARE: usize = 12;
    let stack = TestStack::builder()
        .gateway_limits(Limits {
            max_requests_in_progress: 2 * SHARE,
            max_requests_in_progress_per_peer: SHARE,
            ..held()
        })
        .build()
        .await;
    let request = FloodRequest { uri: format!("http://{}/webhooks/github", stack.gateway_addr), n_header_bytes: 1024 };
    let outcomes = Arc::new(Outcomes::default());
    let mut flood = Vec::new();
    // 4 connections x 8 streams offered from one address: 32, against a share of 12 and a cap of 24.
    for _ in 0..4 {
        let connection =
            FloodConnection::open(stack.gateway_addr, loopback(2), &request, MAX_STREAMS, outcomes.clone());
        flood.push(connection.await.expect("connect"));
    }
    let too_many = &[("outcome", "too_many_requests_in_progress")];
    eventually(
        Duration::from_secs(30),
        "the address's streams past its share are refused, and it heard it",
        || async {
            let counted = stack.gateway_metric("hookline_gateway_requests_total", too_many).await;
            counted >= (4 * MAX_STREAMS - SHARE) as f64
                && counted == outcomes.answered(StatusCode::SERVICE_UNAVAILABLE).0 as f64
        },
    )
    .await;
    let (n_503, n_retry_after) = outcomes.answered(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!((n_503, n_retry_after), (outcomes.n_answered(), n_503), "only 503s, each with Retry-After");
    assert_eq!(stack.gateway_metric("hookline_gateway_in_flight_requests", &[]).await, SHARE as f64, "its share, held");
    let reply = stack.post(&Delivery::new(r#"{"beside":"one address's flood"}"#)).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "another address is answered: {:?}", reply.body);
    drop(flood);
    stack.shutdown().await;
}
