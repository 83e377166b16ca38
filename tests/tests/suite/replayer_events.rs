//! Event search against the real broker and Redis: 200,000 accepted records, signed as the gateway signs them,
//! across two sources (one of them also in its own topic) and two services, searched with every operator, time
//! bounds, a record bound and a match limit; a tampered record is refused and counted, never shown; each match
//! carries each service's dedupe state; the API route and the console page give the same answer.
//!
//! Records are produced straight to the topics with the stack's record key (the gateway's path is tested
//! elsewhere; 200,000 requests through it would cost this test a minute for nothing it checks).

use hookline_common::time::format_rfc3339_millis;
use std::{collections::BTreeSet, time::Duration};

use bytes::Bytes;
use hookline_common::{
    config::SecretRef,
    kafka::{TopicSpec, ensure_topics, producer_config},
    wire::{EventMeta, kafka, now_ms, redis_key},
};
use hookline_dlq_replayer::{
    ReplayerConfig,
    config::{EventsConfig, LookupConfig, LookupService},
    events::{SearchReport, SearchRequest, reprocess_request},
    lookup::DedupeState,
    ops::Replayer,
};
use hookline_record::inbound::InboundRecord;
use hookline_tests::{TestStack, eventually};
use http::{Request, StatusCode, header as http_header};
use http_body_util::Full;
use rdkafka::{
    message::OwnedHeaders,
    producer::{FutureProducer, FutureRecord},
};
use serde_json::{Value, json};

const N_INBOUND: usize = 150_000;
const N_OWN_TOPIC: usize = 50_000;
const SERVICES: [&str; 2] = ["billing", "analytics"];
const API_TOKEN: &str = "a-replayer-token-for-the-events-test-0123456";

/// One generated event: where it went and what it says.
#[derive(Debug, Clone)]
struct Event {
    topic: String,
    source: &'static str,
    event_type: &'static str,
    event_id: String,
    timestamp_ms: i64,
    body: Value,
}

/// Event `i` of the inbound topic (github two thirds, stripe one third) or of stripe's own topic; one record every
/// 10 ms from `base_ms`.
fn event(i: usize, own_topic: Option<&str>, inbound: &str, base_ms: i64) -> Event {
    let (source, topic) = match own_topic {
        Some(topic) => ("stripe", topic.to_owned()),
        None if i % 3 == 2 => ("stripe", inbound.to_owned()),
        None => ("github", inbound.to_owned()),
    };
    let n = if own_topic.is_some() { N_INBOUND + i } else { i };
    let event_type = match (source, n % 2) {
        ("github", 0) => "push",
        ("github", _) => "release",
        (_, 0) => "invoice.paid",
        _ => "charge.refunded",
    };
    let mut body = json!({
        "customer": format!("cus_{}", n % 500),
        "amount": n % 10_000,
        "repo": format!("org{}/repo-{}", n % 3, n % 50),
        "live": n % 7 != 0,
    });
    if n % 11 == 0 {
        body["coupon"] = json!(format!("C{n}"));
    }
    Event {
        topic,
        source,
        event_type,
        event_id: format!("evt_{n}"),
        timestamp_ms: base_ms + i64::try_from(n).expect("n") * 10,
        body,
    }
}

/// The event as the gateway writes it.
fn record_of(event: &Event) -> InboundRecord {
    InboundRecord::new(EventMeta {
        source: event.source.to_owned(),
        event_id: event.event_id.clone(),
        event_type: Some(event.event_type.to_owned()),
        received_at_ms: event.timestamp_ms,
        content_type: None,
        secret_id: "s1".to_owned(),
        ordering_key: None,
    })
}

fn headers_of(event: &Event) -> OwnedHeaders {
    kafka::owned_headers(&record_of(event).encode(&event.topic, Bytes::new()).headers)
}

/// Produces every event with its own timestamp, signed with the stack's key, each to partition `n % partitions`.
async fn produce(stack: &TestStack, events: &[Event], partitions: i32) {
    let keys = stack.record_keys();
    let producer: FutureProducer = producer_config(&stack.kafka)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer");
    let mut deliveries = Vec::with_capacity(events.len());
    for (i, event) in events.iter().enumerate() {
        let body = serde_json::to_vec(&event.body).expect("json");
        let key = event.event_id.as_bytes();
        let headers =
            keys.sign(&event.topic, Some(key), Some(&body), Some(&headers_of(event)), now_ms()).expect("signed");
        let partition = i32::try_from(i).expect("i") % partitions;
        let record = FutureRecord::to(&event.topic)
            .partition(partition)
            .key(key)
            .payload(&body)
            .headers(headers)
            .timestamp(event.timestamp_ms);
        deliveries.push(producer.send_result(record).map_err(|(error, _)| error).expect("enqueued"));
    }
    for delivery in deliveries {
        delivery.await.expect("delivery report").map_err(|(error, _)| error).expect("produced");
    }
}

fn config_for(stack: &TestStack, own_topic: &str) -> ReplayerConfig {
    ReplayerConfig {
        kafka: stack.kafka.clone(),
        lookup: LookupConfig {
            redis: Some(stack.redis.clone()),
            services: SERVICES.iter().map(|name| LookupService { name: (*name).to_owned(), group_id: None }).collect(),
            ..LookupConfig::default()
        },
        events: EventsConfig { source_topics: vec![own_topic.to_owned()], ..EventsConfig::default() },
        ..ReplayerConfig::default()
    }
}

fn ids(report: &SearchReport) -> BTreeSet<String> {
    report.matches.iter().filter_map(|found| found.event_id.clone()).collect()
}

struct World {
    stack: TestStack,
    replayer: Replayer,
    events: Vec<Event>,
    base_ms: i64,
    end_ms: i64,
    own_topic: String,
}

impl World {
    async fn search(&self, source: &str, event_type: Option<&str>, conditions: &[&str]) -> SearchReport {
        self.search_with(SearchRequest {
            source: source.to_owned(),
            event_type: event_type.map(str::to_owned),
            since: format_rfc3339_millis(self.base_ms),
            until: Some(format_rfc3339_millis(self.end_ms)),
            conditions: conditions.iter().map(|c| (*c).to_owned()).collect(),
            limit: Some(10_000),
            ..SearchRequest::default()
        })
        .await
    }

    async fn search_with(&self, request: SearchRequest) -> SearchReport {
        let started = std::time::Instant::now();
        let report = self.replayer.search_events(&request, |_| {}).await.expect("search");
        println!(
            "{} {:?} {:?}: {} matches, {} records in {:?}",
            request.source,
            request.event_type,
            request.conditions,
            report.matches.len(),
            report.progress.records_read,
            started.elapsed()
        );
        report
    }

    /// The event ids the generator says match.
    fn expected(&self, source: &str, event_type: Option<&str>, holds: impl Fn(&Value) -> bool) -> BTreeSet<String> {
        self.events
            .iter()
            .filter(|e| e.source == source && event_type.is_none_or(|t| e.event_type == t) && holds(&e.body))
            .map(|e| e.event_id.clone())
            .collect()
    }
}

async fn world() -> World {
    let stack = TestStack::builder().build().await;
    let own_topic = format!("{}-stripe", stack.kafka.inbound_topic);
    ensure_topics(&stack.kafka, &[TopicSpec { name: own_topic.clone(), partitions: 2, compacted: false }], 1)
        .await
        .expect("stripe's own topic");
    // An hour ago onwards: every record is in the past, one every 10 ms.
    let base_ms = now_ms() - 3_600_000;
    let inbound = stack.kafka.inbound_topic.clone();
    let mut events: Vec<Event> = (0..N_INBOUND).map(|i| event(i, None, &inbound, base_ms)).collect();
    let own: Vec<Event> = (0..N_OWN_TOPIC).map(|i| event(i, Some(&own_topic), &inbound, base_ms)).collect();
    let started = std::time::Instant::now();
    produce(&stack, &events, 3).await;
    produce(&stack, &own, 2).await;
    println!("produced {} records in {:?}", N_INBOUND + N_OWN_TOPIC, started.elapsed());
    events.extend(own);
    let end_ms = base_ms + i64::try_from(N_INBOUND + N_OWN_TOPIC).expect("n") * 10;
    let replayer = Replayer::new(config_for(&stack, &own_topic)).expect("replayer");
    World { stack, replayer, events, base_ms, end_ms, own_topic }
}

#[tokio::test]
async fn event_search_finds_exactly_the_matching_accepted_events_and_refuses_tampered_ones() {
    let world = world().await;
    let stack = &world.stack;

    // A tampered copy of a matching record (its body changed after signing), a re-processing copy, and a service's
    // dedupe state for one matching event.
    let victim = world.events.iter().find(|e| e.source == "github" && e.body["customer"] == "cus_7").expect("victim");
    let mut tampered_body = victim.body.clone();
    tampered_body["amount"] = json!(1);
    let body = serde_json::to_vec(&victim.body).expect("json");
    let signed = stack.signed(&stack.kafka.inbound_topic, Some(b"tampered"), &body, &headers_of(victim));
    let producer: FutureProducer = producer_config(&stack.kafka).create().expect("producer");
    let tampered = serde_json::to_vec(&tampered_body).expect("json");
    producer
        .send(
            FutureRecord::to(&stack.kafka.inbound_topic)
                .partition(0)
                .key("tampered")
                .payload(&tampered)
                .headers(signed)
                .timestamp(victim.timestamp_ms),
            Duration::from_secs(10),
        )
        .await
        .expect("produced");
    let copy = InboundRecord { reprocess_id: Some("run-1".to_owned()), ..record_of(victim) };
    let copy_headers = kafka::owned_headers(&copy.encode(&victim.topic, Bytes::new()).headers);
    let signed_copy = stack.signed(&stack.kafka.inbound_topic, Some(b"copy"), &body, &copy_headers);
    producer
        .send(
            FutureRecord::to(&stack.kafka.inbound_topic)
                .partition(1)
                .key("copy")
                .payload(&body)
                .headers(signed_copy)
                .timestamp(victim.timestamp_ms),
            Duration::from_secs(10),
        )
        .await
        .expect("produced");
    let client = redis::Client::open(stack.redis.url.as_str()).expect("redis");
    let mut connection = client.get_multiplexed_async_connection().await.expect("redis");
    let key = redis_key::dedupe(&stack.redis.key_prefix, "billing", "github", &victim.event_id);
    let _: () =
        redis::cmd("SET").arg(&key).arg(redis_key::DEDUPE_DONE).query_async(&mut connection).await.expect("SET");

    // == on a string: exact matches; the tampered record counted, not shown; the copy skipped; each service's state.
    let report = world.search("github", None, &["/customer == \"cus_7\""]).await;
    let expected = world.expected("github", None, |b| b["customer"] == "cus_7");
    assert!(!expected.is_empty());
    assert_eq!(ids(&report), expected);
    assert_eq!(report.matches.len(), expected.len(), "no event shown twice");
    assert_eq!(report.progress.refused.get("bad_mac"), Some(&1), "{:?}", report.progress);
    assert_eq!(report.progress.copies_skipped, 1);
    assert_eq!(report.progress.records_read, u64::try_from(N_INBOUND + N_OWN_TOPIC + 2).expect("n"));
    assert_eq!(report.stopped_by, None);
    let victim_match = report.matches.iter().find(|m| m.event_id.as_deref() == Some(&victim.event_id)).expect("shown");
    assert_eq!(victim_match.position.topic, stack.kafka.inbound_topic);
    assert_eq!(victim_match.accepted_at_ms, Some(victim.timestamp_ms));
    let states: Vec<(&str, &DedupeState)> =
        victim_match.services.iter().map(|s| (s.service.as_str(), &s.dedupe)).collect();
    assert!(
        matches!(states[..], [("billing", DedupeState::Processed { .. }), ("analytics", DedupeState::Absent)]),
        "{states:?}"
    );

    // Every other operator, exactly; a type filter; both of stripe's topics.
    let f = |v: &Value| v.as_f64().expect("number");
    // Each other operator exactly (narrowed so that every case stays under the match limit); a type filter;
    // stripe's matches from both of its topics.
    type Holds = Box<dyn Fn(&Value) -> bool>;
    let cases: Vec<(&str, Option<&str>, Vec<&str>, Holds)> = vec![
        (
            "github",
            Some("push"),
            vec!["/amount < 60", "/repo != \"org0/repo-0\""],
            Box::new(move |b: &Value| f(&b["amount"]) < 60.0 && b["repo"] != "org0/repo-0"),
        ),
        (
            "github",
            None,
            vec!["/customer in [\"cus_1\", \"cus_2\"]"],
            Box::new(|b: &Value| b["customer"] == "cus_1" || b["customer"] == "cus_2"),
        ),
        ("stripe", Some("invoice.paid"), vec!["/coupon exists"], Box::new(|b: &Value| b.get("coupon").is_some())),
        (
            "github",
            Some("release"),
            vec!["/repo prefix \"org1/repo-4\""],
            Box::new(|b: &Value| b["repo"].as_str().expect("repo").starts_with("org1/repo-4")),
        ),
        ("stripe", Some("invoice.paid"), vec!["/amount < 15"], Box::new(move |b: &Value| f(&b["amount"]) < 15.0)),
        ("github", None, vec!["/amount <= 3"], Box::new(move |b: &Value| f(&b["amount"]) <= 3.0)),
        ("stripe", None, vec!["/amount > 9996"], Box::new(move |b: &Value| f(&b["amount"]) > 9996.0)),
        ("github", Some("push"), vec!["/amount >= 9990"], Box::new(move |b: &Value| f(&b["amount"]) >= 9990.0)),
        ("stripe", Some("charge.refunded"), vec!["/live == false"], Box::new(|b: &Value| b["live"] == false)),
    ];
    for (source, event_type, conditions, holds) in &cases {
        let report = world.search(source, *event_type, conditions).await;
        let expected = world.expected(source, *event_type, holds);
        assert!(!expected.is_empty(), "{conditions:?} selects something");
        assert_eq!(ids(&report), expected, "{source} {event_type:?} {conditions:?}");
        assert_eq!(report.matches.len(), expected.len(), "{conditions:?}");
        assert_eq!(report.stopped_by, None);
        assert!(report.matches.iter().all(|m| event_type.is_none_or(|t| m.event_type.as_deref() == Some(t))));
        if *source == "stripe" {
            let topics: BTreeSet<&str> = report.matches.iter().map(|m| m.position.topic.as_str()).collect();
            assert_eq!(topics, BTreeSet::from([stack.kafka.inbound_topic.as_str(), world.own_topic.as_str()]));
        }
    }
    // Two conditions: both must hold.
    let both = world.search("github", None, &["/customer == \"cus_7\"", "/live == true"]).await;
    assert_eq!(ids(&both), world.expected("github", None, |b| b["customer"] == "cus_7" && b["live"] == true));

    // Time bounds: since inclusive, until exclusive, as the records' timestamps say.
    let (since, until) = (world.base_ms + 10_000, world.base_ms + 20_000);
    let bounded = world
        .search_with(SearchRequest {
            source: "github".to_owned(),
            since: format_rfc3339_millis(since),
            until: Some(format_rfc3339_millis(until)),
            limit: Some(10_000),
            ..SearchRequest::default()
        })
        .await;
    let expected: BTreeSet<String> = world
        .events
        .iter()
        .filter(|e| e.source == "github" && e.timestamp_ms >= since && e.timestamp_ms < until)
        .map(|e| e.event_id.clone())
        .collect();
    assert_eq!(expected.len(), 667, "1000 records in the range, two thirds github");
    assert_eq!(ids(&bounded), expected);
    assert!(bounded.progress.records_read < 1_100, "offsets for times bound the read: {:?}", bounded.progress);

    // The bound on records: stopped, and what was left unread said exactly.
    let bounded = world.search_with(SearchRequest { max_records: Some(10_000), ..request_all(&world, "github") }).await;
    assert_eq!(bounded.stopped_by.as_deref(), Some("max_records"));
    assert_eq!(bounded.progress.records_read, 10_000);
    assert_eq!(bounded.records_unread(), bounded.progress.records_to_read - 10_000);
    // The limit on matches.
    let limited = world.search_with(SearchRequest { limit: Some(5), ..request_all(&world, "github") }).await;
    assert_eq!((limited.matches.len(), limited.stopped_by.as_deref()), (5, Some("limit")));

    // Handed to reprocess: the inbound matches' ids, a dry run.
    let request =
        reprocess_request(&report, &request_all(&world, "github"), "billing".to_owned(), false, "test".to_owned());
    assert_eq!(request.event_ids.len(), report.matches.len());
    let dry = world.replayer.reprocess(&request).await.expect("dry run");
    assert!(!dry.applied);
    // `reprocess` selects by headers (its dry run lists the tampered record too, which carries the victim's id);
    // applied, it re-drives only records whose MAC verifies.
    assert_eq!(dry.records.len(), report.matches.len() + 1, "{dry:?}");

    // The API route and the console page: the same matches.
    let api = ApiServer::start(&world).await;
    let query = format!(
        "source=github&since={}&until={}&where={}&limit=10000",
        enc(&format_rfc3339_millis(world.base_ms)),
        enc(&format_rfc3339_millis(world.end_ms)),
        enc("/customer == \"cus_7\"")
    );
    let reply = api.get(stack, &format!("/v1/events?{query}"), None).await;
    assert_eq!(reply.0, StatusCode::UNAUTHORIZED, "the API needs the token");
    let reply = api.get(stack, &format!("/v1/events?{query}"), Some(&format!("Bearer {API_TOKEN}"))).await;
    assert_eq!(reply.0, StatusCode::OK, "{}", reply.1);
    let answer: Value = serde_json::from_str(&reply.1).expect("json");
    let api_ids: BTreeSet<String> = answer["matches"]
        .as_array()
        .expect("matches")
        .iter()
        .map(|m| m["event_id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(api_ids, expected_cus_7(&world));
    assert_eq!(answer["progress"]["refused"]["bad_mac"], 1);
    let reply = api.get(stack, "/v1/events?source=github&since=yesterday", Some(&format!("Bearer {API_TOKEN}"))).await;
    assert_eq!(reply.0, StatusCode::BAD_REQUEST, "{}", reply.1);

    let html = api.console(stack, &format!("/ui/search?{query}&type={}", enc("<script>"))).await;
    assert!(html.contains(r#"data-matches="0""#), "no event has that type");
    assert!(html.contains("&lt;script&gt;") && !html.contains("<script>"), "escaped");
    let html = api.console(stack, &format!("/ui/search?{query}")).await;
    assert!(html.contains(&format!(r#"data-matches="{}""#, expected_cus_7(&world).len())), "{html}");
    assert!(html.contains(&format!(">{}</a>", victim.event_id)), "{html}");
    assert!(html.contains("billing processed"), "{html}");
    assert!(html.contains("1 bad_mac"), "{html}");
    api.stop().await;

    // A search whose caller goes away stops at its next poll, and frees its place.
    let replayer = world.replayer.clone();
    let (sender, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let request = request_all(&world, "github");
    let search = tokio::spawn(async move {
        replayer
            .search_events(&request, move |at| {
                let _ = sender.send((at.records_read, at.records_to_read));
            })
            .await
    });
    let mut last = progress.recv().await.expect("a first progress report");
    search.abort();
    // The channel closes when the scan thread drops its callback: the scan has ended.
    while let Some(at) = progress.recv().await {
        last = at;
    }
    assert!(last.0 < last.1, "the scan read on to the end after its caller left: {last:?}");
    assert_eq!(world.replayer.searches_running(), 0);
}

fn expected_cus_7(world: &World) -> BTreeSet<String> {
    world.expected("github", None, |b| b["customer"] == "cus_7")
}

fn request_all(world: &World, source: &str) -> SearchRequest {
    SearchRequest {
        source: source.to_owned(),
        since: format_rfc3339_millis(world.base_ms),
        until: Some(format_rfc3339_millis(world.end_ms)),
        limit: Some(10_000),
        ..SearchRequest::default()
    }
}

fn enc(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// The replayer's `serve` in-process on a loopback port.
struct ApiServer {
    addr: std::net::SocketAddr,
    shutdown: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Result<(), hookline_dlq_replayer::ServeError>>,
}

impl ApiServer {
    async fn start(world: &World) -> Self {
        let token = std::env::temp_dir().join(format!("hookline-events-token-{}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&token, API_TOKEN).expect("token file");
        let config = ReplayerConfig {
            api_token: Some(SecretRef::from_file("api", token.display().to_string())),
            ..config_for(&world.stack, &world.own_topic)
        };
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = admin.local_addr().expect("addr");
        let shutdown = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(hookline_dlq_replayer::serve_api(config, admin, shutdown.clone()));
        let server = Self { addr, shutdown, task };
        eventually(Duration::from_secs(30), "the replayer is ready", || async {
            server.get(&world.stack, "/readyz", None).await.0 == StatusCode::OK
        })
        .await;
        server
    }

    async fn get(&self, stack: &TestStack, path: &str, authorization: Option<&str>) -> (StatusCode, String) {
        let mut request = Request::get(format!("http://{}{path}", self.addr));
        if let Some(value) = authorization {
            request = request.header(http_header::AUTHORIZATION, value);
        }
        let reply = stack.send(request.body(Full::default()).expect("request")).await;
        (reply.status, String::from_utf8_lossy(&reply.body).into_owned())
    }

    async fn console(&self, stack: &TestStack, path: &str) -> String {
        let login = Request::post(format!("http://{}/ui/login", self.addr))
            .header(http_header::HOST, self.addr.to_string())
            .header(http_header::ORIGIN, format!("http://{}", self.addr))
            .header(http_header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Full::new(Bytes::from(format!("token={API_TOKEN}"))))
            .expect("request");
        let reply = stack.send(login).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER);
        let cookie = reply.headers[http_header::SET_COOKIE].to_str().expect("cookie");
        let cookie = cookie.split(';').next().expect("cookie").to_owned();
        let request = Request::get(format!("http://{}{path}", self.addr))
            .header(http_header::COOKIE, cookie)
            .body(Full::default())
            .expect("request");
        let reply = stack.send(request).await;
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
        String::from_utf8_lossy(&reply.body).into_owned()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("replayer task").expect("served");
    }
}
