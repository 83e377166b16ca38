//! Fan-out inside one service (issue 48, item 1): one consumer service, one consumer group and one read of the
//! topic, 20 named `http` destinations on one source, with different event types, filters and transforms. Each
//! destination gets exactly its filtered set once; a destination answering 503 for a while dead-letters what its
//! retry budget could not deliver while the others go on, and the replay of its dead letters reaches it alone
//! (nobody else is even offered a second copy: no destination counts a duplicate). And a service without
//! `service.routing` still gives each event to its first matching route only.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use hookline_common::wire::{self, kafka};
use hookline_consumer::{
    ConsumerConfig, Loaded,
    config::{FilterConfig, HandlerConfig, RouteConfig, RouteRetryConfig, Routing},
};
use hookline_dlq_replayer::{
    ReplayerConfig,
    filter::Filter,
    index::Status,
    ops::{ReplayRequest, Replayer},
};
use hookline_gateway::config::SourceConfig;
use hookline_record::inbound::InboundRecord;
use hookline_tests::{Delivery, TEST_SECRET, TestStack, eventually, forward::secret_file};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use rdkafka::Message;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const SOURCE: &str = "gh";

/// The destination that answers 503 for a while.
const FLAKY: &str = "d19";

/// One request a destination received, and what it was answered.
#[derive(Debug, Clone)]
struct Received {
    destination: String,
    event_id: String,
    body: serde_json::Value,
    status: u16,
    replay: bool,
}

/// A downstream on loopback for every destination (`/<destination>`), recording each request; the flaky
/// destination's path answers 503 while `failing` is set.
#[derive(Debug, Clone)]
struct Downstreams {
    addr: std::net::SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    failing: Arc<AtomicBool>,
}

impl Downstreams {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let received = Arc::new(Mutex::new(Vec::new()));
        let failing = Arc::new(AtomicBool::new(false));
        let (log, flag) = (received.clone(), failing.clone());
        let handler = move |request: Request<hyper::body::Incoming>| {
            let (log, flag) = (log.clone(), flag.clone());
            async move {
                let (parts, body) = request.into_parts();
                let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                let destination = parts.uri.path().trim_start_matches('/').to_owned();
                let status = if destination == FLAKY && flag.load(Ordering::SeqCst) { 503 } else { 200 };
                let header = |name: &str| parts.headers.get(name).and_then(|value| value.to_str().ok());
                let received = Received {
                    event_id: header("x-hookline-event-id").unwrap_or_default().to_owned(),
                    replay: header("x-hookline-replay-of").is_some(),
                    body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
                    destination,
                    status,
                };
                log.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(received);
                let mut response = hookline_common::http::text(StatusCode::OK, "ok");
                *response.status_mut() = StatusCode::from_u16(status).expect("status");
                response
            }
        };
        // 20 destinations' calls at once from one peer: far above an admin listener's bounds.
        let limits = hookline_common::http::ServeLimits {
            max_connections: 1024,
            max_connections_per_peer: 1024,
            ..hookline_common::http::ServeLimits::default()
        };
        tokio::spawn(hookline_common::http::serve(listener, handler, limits, CancellationToken::new()));
        Self { addr, received, failing }
    }

    fn url(&self, destination: &str) -> String {
        format!("http://{}/{destination}", self.addr)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// The event ids each destination accepted (answered 200), with how many times.
    fn accepted(&self) -> BTreeMap<String, BTreeMap<String, usize>> {
        let mut accepted: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        for received in self.received().into_iter().filter(|received| received.status == 200) {
            *accepted.entry(received.destination).or_default().entry(received.event_id).or_default() += 1;
        }
        accepted
    }
}

/// A filter's condition and, for the test's own bookkeeping, which event numbers it skips.
type Skip = (&'static str, fn(u64) -> bool);

/// One destination of the test's service: which events it takes, skips and how it reshapes them.
struct Spec {
    name: String,
    event_types: Option<&'static [&'static str]>,
    skip: Option<Skip>,
    transform: bool,
}

impl Spec {
    fn takes(&self, event_type: &str, n: u64) -> bool {
        self.event_types.is_none_or(|types| types.contains(&event_type))
            && !self.skip.is_some_and(|(_, skips)| skips(n))
    }

    /// Its transform: the event's number and the destination's name.
    fn program(&self) -> String {
        format!(r#"{{n: .n, to: "{}"}}"#, self.name)
    }

    fn route(&self, downstreams: &Downstreams) -> RouteConfig {
        RouteConfig {
            name: Some(self.name.clone()),
            // A small retry budget of its own: the flaky destination's events dead-letter after two attempts.
            retry: (self.name == FLAKY).then_some(RouteRetryConfig { max_attempts: Some(2), max_total_ms: None }),
            source: SOURCE.into(),
            event_types: self.event_types.map(|types| types.iter().map(|t| (*t).to_owned()).collect()),
            handler: HandlerConfig {
                kind: "http".into(),
                url: Some(downstreams.url(&self.name)),
                ..HandlerConfig::default()
            },
            max_in_flight: Some(4),
            breaker_cooldown_ms: Some(200),
            filters: self
                .skip
                .map(|(condition, _)| FilterConfig { name: "skip".into(), skip_when: vec![condition.to_owned()] })
                .into_iter()
                .collect(),
            transform: self.transform.then(|| self.program()),
            ..RouteConfig::default()
        }
    }
}

/// 20 destinations: every type or one, with or without a filter, with or without a transform; the last is the
/// flaky one.
fn specs() -> Vec<Spec> {
    let push: &'static [&'static str] = &["push"];
    let issues: &'static [&'static str] = &["issues"];
    let low: Skip = ("/n < 10", |n| n < 10);
    let high: Skip = ("/n >= 20", |n| n >= 20);
    let few: Skip = ("/n in [1, 2, 3, 31]", |n| matches!(n, 1 | 2 | 3 | 31));
    (0..20)
        .map(|index| {
            let (event_types, skip, transform) = match index {
                0..=4 => (None, None, index == 4),
                5 | 6 => (Some(push), Some(low), index == 6),
                7..=9 => (Some(push), None, index != 9),
                10 => (Some(issues), Some(high), false),
                11..=14 => (Some(issues), None, index == 11),
                15 => (None, Some(few), false),
                16..=18 => (None, None, index != 18),
                _ => (None, Some(few), true),
            };
            Spec { name: format!("d{index:02}"), event_types, skip, transform }
        })
        .collect()
}

async fn stack() -> TestStack {
    TestStack::builder()
        .gateway_source(SourceConfig {
            type_from_header: Some(true),
            ..SourceConfig::new(SOURCE, "github", vec![secret_file("github", TEST_SECRET)])
        })
        .build()
        .await
}

async fn start_consumer(stack: &mut TestStack, routing: Routing, routes: Vec<RouteConfig>) {
    let mut config = ConsumerConfig { routes, ..stack.consumer_config.clone() };
    config.service.routing = routing;
    let router = Loaded::build(config.clone()).expect("a valid consumer config").handler;
    stack.start_consumer_with(config, router).await;
}

/// The type of event `n`: push for even numbers, issues for odd ones.
fn event_type(n: u64) -> &'static str {
    if n % 2 == 0 { "push" } else { "issues" }
}

/// Posts GitHub delivery number `n`, accepted; returns its event id.
async fn post(stack: &TestStack, n: u64) -> String {
    let body = format!(r#"{{"action":"opened","n":{n},"nonce":"{}"}}"#, uuid::Uuid::new_v4());
    let delivery = Delivery { event: event_type(n).to_owned(), ..Delivery::new(body) };
    let request = Request::post(format!("http://{}/webhooks/{SOURCE}", stack.gateway_addr))
        .header("content-type", "application/json")
        .header("x-github-delivery", &delivery.delivery_id)
        .header("x-github-event", event_type(n))
        .header("x-hub-signature-256", delivery.signature(TEST_SECRET))
        .body(Full::new(delivery.body.clone()))
        .expect("request");
    let reply = stack.send(request).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    delivery.delivery_id
}

/// `hookline_consumer_destination_events_total` of one destination and outcome.
async fn destination_events(stack: &TestStack, destination: &str, outcome: &str) -> u64 {
    let labels = [("destination", destination), ("outcome", outcome)];
    stack.consumer_metric(0, "hookline_consumer_destination_events_total", &labels).await as u64
}

#[tokio::test]
async fn twenty_destinations_each_get_their_filtered_set_once_and_a_flaky_ones_dead_letters_replay_to_it_alone() {
    let downstreams = Downstreams::start().await;
    let specs = specs();
    let mut stack = stack().await;
    start_consumer(&mut stack, Routing::FanOut, specs.iter().map(|spec| spec.route(&downstreams)).collect()).await;

    // While the flaky destination answers 503: 30 events.
    downstreams.failing.store(true, Ordering::SeqCst);
    let mut events: Vec<(u64, String)> = Vec::new();
    for n in 0..30 {
        events.push((n, post(&stack, n).await));
    }
    let expected = |spec: &Spec, events: &[(u64, String)]| -> BTreeSet<String> {
        events.iter().filter(|(n, _)| spec.takes(event_type(*n), *n)).map(|(_, id)| id.clone()).collect()
    };
    let flaky = specs.iter().find(|spec| spec.name == FLAKY).expect("flaky");
    let flaky_failed = expected(flaky, &events);
    assert!(flaky_failed.len() > 20, "the flaky destination takes most events: {}", flaky_failed.len());
    // The others are not held by it: each gets its whole set while it fails; its events all dead-letter.
    eventually(Duration::from_secs(120), "every healthy destination has its set, the flaky one dead-lettered", || {
        let (downstreams, specs, events, stack) = (&downstreams, &specs, &events, &stack);
        let dead = flaky_failed.len() as u64;
        async move {
            let accepted = downstreams.accepted();
            let healthy = specs
                .iter()
                .filter(|spec| spec.name != FLAKY)
                .all(|spec| accepted.get(&spec.name).map(|ids| ids.len()).unwrap_or(0) == expected(spec, events).len());
            healthy && destination_events(stack, FLAKY, "dead_lettered").await == dead
        }
    })
    .await;
    assert!(!downstreams.accepted().contains_key(FLAKY), "nothing reached the flaky destination while it failed");

    // It recovers: 10 more events reach every destination, the flaky one included.
    downstreams.failing.store(false, Ordering::SeqCst);
    for n in 30..40 {
        events.push((n, post(&stack, n).await));
    }
    eventually(Duration::from_secs(120), "every destination has its set of the later events", || {
        let (downstreams, specs, events) = (&downstreams, &specs, &events);
        let flaky_failed = &flaky_failed;
        async move {
            let accepted = downstreams.accepted();
            specs.iter().all(|spec| {
                let mut wanted = expected(spec, events);
                if spec.name == FLAKY {
                    wanted.retain(|id| !flaky_failed.contains(id));
                }
                accepted.get(&spec.name).map(|ids| ids.len()).unwrap_or(0) == wanted.len()
            })
        }
    })
    .await;

    // Its dead letters name it; the replay of every one of them reaches it alone.
    let dead_letters = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dead_letters.len(), flaky_failed.len());
    for record in &dead_letters {
        let entry = wire::dead_letter_entry(record);
        assert_eq!(entry.destination.as_deref(), Some(FLAKY), "{entry:?}");
        assert!(flaky_failed.contains(entry.event_id.as_deref().unwrap_or_default()), "{entry:?}");
    }
    let replayer =
        Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer");
    let ids: Vec<String> =
        replayer.list(&Filter::default()).await.expect("list").into_iter().map(|entry| entry.entry.id).collect();
    assert_eq!(ids.len(), flaky_failed.len());
    let request = ReplayRequest { ids: ids.clone(), by: "test".into(), ..ReplayRequest::default() };
    assert_eq!(replayer.replay(&request).await.expect("replay").done.len(), ids.len());
    eventually(Duration::from_secs(60), "every replayed entry succeeded", || async {
        let entries = replayer.list(&Filter::default()).await.expect("list");
        entries.len() == ids.len() && entries.iter().all(|entry| entry.status == Status::Succeeded)
    })
    .await;
    let redriven: Vec<InboundRecord> = stack
        .records(&stack.kafka.inbound_topic)
        .await
        .iter()
        .map(|record| InboundRecord::decode(kafka::headers_of(record.headers())).expect("inbound"))
        .filter(|record| record.replay_of.is_some())
        .collect();
    assert_eq!(redriven.len(), ids.len());
    let addressed: BTreeSet<Option<&str>> = redriven.iter().map(|record| record.destination.as_deref()).collect();
    assert_eq!(addressed, BTreeSet::from([Some(FLAKY)]), "each re-drive is addressed to the flaky destination");

    // Each destination got exactly its filtered set, once; replays went to the flaky one only.
    let accepted = downstreams.accepted();
    for spec in &specs {
        let wanted = expected(spec, &events);
        let got = accepted.get(&spec.name).cloned().unwrap_or_default();
        assert_eq!(got.keys().cloned().collect::<BTreeSet<_>>(), wanted, "{}: its filtered set", spec.name);
        assert!(got.values().all(|count| *count == 1), "{}: each event once: {got:?}", spec.name);
        // Not offered a second copy either: a re-drive that reached it would count a duplicate.
        assert_eq!(destination_events(&stack, &spec.name, "duplicate").await, 0, "{}", spec.name);
        let processed = destination_events(&stack, &spec.name, "processed").await;
        assert_eq!(processed, wanted.len() as u64, "{}", spec.name);
        let filtered = destination_events(&stack, &spec.name, "filtered").await;
        let of_its_types =
            events.iter().filter(|(n, _)| spec.event_types.is_none_or(|t| t.contains(&event_type(*n)))).count();
        assert_eq!(filtered, (of_its_types - wanted.len()) as u64, "{}: what its filter skipped", spec.name);
    }
    let received = downstreams.received();
    let replays: BTreeSet<&str> = received.iter().filter(|r| r.replay).map(|r| r.destination.as_str()).collect();
    assert_eq!(replays, BTreeSet::from([FLAKY]), "replays reached the flaky destination alone");
    // Each transform reshaped the body its own destination got, and only its own.
    for received in received.iter().filter(|received| received.status == 200) {
        let spec = specs.iter().find(|spec| spec.name == received.destination).expect("a destination");
        let n = events.iter().find(|(_, id)| *id == received.event_id).expect("an event").0;
        if spec.transform {
            assert_eq!(received.body, serde_json::json!({"n": n, "to": spec.name}), "{}", spec.name);
        } else {
            assert_eq!(received.body["n"], n, "{}: the body as sent", spec.name);
            assert_eq!(received.body["action"], "opened", "{}: the body as sent", spec.name);
        }
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn a_service_without_routing_still_gives_each_event_to_its_first_matching_route_only() {
    let downstreams = Downstreams::start().await;
    let mut stack = stack().await;
    let route = |name: &str, event_types: Option<&'static [&'static str]>| {
        Spec { name: name.to_owned(), event_types, skip: None, transform: false }.route(&downstreams)
    };
    // Unnamed, as every config before fan-out: the first route that takes an event is its route.
    let routes = vec![
        RouteConfig { name: None, ..route("first", Some(&["push"])) },
        RouteConfig { name: None, ..route("second", None) },
        RouteConfig { name: None, ..route("third", None) },
    ];
    start_consumer(&mut stack, Routing::FirstMatch, routes).await;
    let mut events = Vec::new();
    for n in 0..6 {
        events.push((n, post(&stack, n).await));
    }
    stack.wait_until_handled(6).await;
    let accepted = downstreams.accepted();
    let ids = |destination: &str| accepted.get(destination).map(|ids| ids.keys().cloned().collect::<BTreeSet<_>>());
    let of_type = |wanted: &str| -> BTreeSet<String> {
        events.iter().filter(|(n, _)| event_type(*n) == wanted).map(|(_, id)| id.clone()).collect()
    };
    assert_eq!(ids("first"), Some(of_type("push")));
    assert_eq!(ids("second"), Some(of_type("issues")), "what the first route does not take");
    assert_eq!(ids("third"), None, "never reached: an earlier route takes everything");
    assert_eq!(stack.consumer_events("processed").await, 6, "each event handled once");
    stack.shutdown().await;
}
