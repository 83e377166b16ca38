//! "Where is event X?" against the real broker, Redis and consumers: `lookup` answers for an event processed
//! (and delivered again: the copy was a duplicate), one waiting in its service's retry topic, one dead-lettered,
//! and one replayed (with its replay's outcome); the API and the console's search box give the same answer; an
//! unknown event is said to be unknown; a plain `done` written by an earlier consumer is still a duplicate; and
//! every dedupe script takes both forms of the done marker. A replayer that cannot read the dedupe state says why
//! and how to fix it instead of "unknown event".

use std::{net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use hookline_common::{
    config::SecretRef,
    wire::{kafka, now_ms, redis_key},
};
use hookline_consumer::handler::HandlerError;
use hookline_dlq_replayer::{
    ReplayerConfig, ServeError,
    config::LookupConfig,
    index::Status,
    lookup::{Answer, DedupeState, Lookup, render_text},
    ops::{ReplayRequest, Replayer},
};
use hookline_record::inbound::InboundRecord;
use hookline_tests::{Delivery, Reply, TestHandler, TestStack, eventually};
use http::{Request, StatusCode, header as http_header};
use http_body_util::Full;
use rdkafka::{Message, message::OwnedMessage};
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::CancellationToken;

const API_TOKEN: &str = "a-replayer-token-for-the-lookup-test-0123456";

fn config_for(stack: &TestStack) -> ReplayerConfig {
    ReplayerConfig {
        kafka: stack.kafka.clone(),
        lookup: LookupConfig { redis: Some(stack.redis.clone()), ..LookupConfig::default() },
        ..ReplayerConfig::default()
    }
}

fn lookup_for(stack: &TestStack) -> Lookup {
    Lookup::new(Replayer::new(config_for(stack)).expect("replayer"))
}

async fn look_up(stack: &TestStack, event_id: &str) -> Answer {
    lookup_for(stack).lookup("github", event_id).await.expect("lookup")
}

fn service<'a>(answer: &'a Answer, name: &str) -> &'a hookline_dlq_replayer::lookup::ServiceAnswer {
    answer.services.iter().find(|s| s.service == name).unwrap_or_else(|| panic!("service {name} in {answer:#?}"))
}

/// An inbound record the gateway wrote, decoded.
fn decoded(record: &OwnedMessage) -> InboundRecord {
    InboundRecord::decode(kafka::headers_of(record.headers())).expect("an inbound record")
}

fn inbound_record_of(records: &[OwnedMessage], event_id: &str) -> OwnedMessage {
    records.iter().find(|r| decoded(r).meta.event_id == event_id).expect("the event's inbound record").clone()
}

/// The replayer's `serve` in-process, with `lookup.redis` set.
struct Served {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Served {
    async fn start(stack: &TestStack) -> Self {
        let token = std::env::temp_dir().join(format!("hookline-lookup-token-{}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&token, API_TOKEN).expect("token file");
        let config = ReplayerConfig {
            api_token: Some(SecretRef::from_file("api", token.display().to_string())),
            ..config_for(stack)
        };
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = admin.local_addr().expect("addr");
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(hookline_dlq_replayer::serve_api(config, admin, shutdown.clone()));
        let served = Self { addr, shutdown, task };
        eventually(Duration::from_secs(30), "the replayer is ready", || async {
            served.get(stack, "/readyz", &[]).await.status == StatusCode::OK
        })
        .await;
        served
    }

    async fn get(&self, stack: &TestStack, path: &str, headers: &[(http_header::HeaderName, &str)]) -> Reply {
        let mut request = Request::get(format!("http://{}{path}", self.addr));
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        stack.send(request.body(Full::default()).expect("request")).await
    }

    async fn api(&self, stack: &TestStack, path: &str) -> Reply {
        let bearer = format!("Bearer {API_TOKEN}");
        self.get(stack, path, &[(http_header::AUTHORIZATION, &bearer)]).await
    }

    async fn console(&self, stack: &TestStack, path: &str) -> (StatusCode, String) {
        let request = Request::post(format!("http://{}/ui/login", self.addr))
            .header(http_header::HOST, self.addr.to_string())
            .header(http_header::ORIGIN, format!("http://{}", self.addr))
            .header(http_header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Full::new(Bytes::from(format!("token={API_TOKEN}"))))
            .expect("request");
        let reply = stack.send(request).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{:?}", reply.body);
        let cookie = reply.headers[http_header::SET_COOKIE].to_str().expect("cookie");
        let cookie = cookie.split(';').next().expect("name=value").to_owned();
        let reply = self.get(stack, path, &[(http_header::COOKIE, &cookie)]).await;
        (reply.status, String::from_utf8(reply.body.to_vec()).expect("UTF-8"))
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("replayer task").expect("served");
    }
}

#[tokio::test]
async fn lookup_finds_an_event_processed_once_whose_later_copy_was_a_duplicate() {
    let stack = TestStack::builder().consumer().build().await;
    let service_name = stack.consumer_config.service_name().to_owned();
    let delivery = Delivery::new(br#"{"action":"opened"}"#.to_vec());
    stack.post_accepted(&delivery).await;
    stack.wait_until_handled(1).await;
    // The provider delivers it again: the consumer skips the copy.
    stack.post_accepted(&delivery).await;
    eventually(Duration::from_secs(30), "the second copy was skipped as a duplicate", || async {
        stack.consumer_events("duplicate").await >= 1
    })
    .await;
    assert_eq!(stack.handler.count(&delivery.delivery_id), 1);

    let records = stack.inbound_records().await;
    let first = inbound_record_of(&records, &delivery.delivery_id);
    let received_at = decoded(&first).meta.received_at_ms;
    let answer = look_up(&stack, &delivery.delivery_id).await;
    assert!(answer.found, "{answer:#?}");
    // The bucketed dedupe layout keeps when, not how long nor where (docs/dedupe.md): no record to read.
    assert!(answer.accepted.is_none(), "{answer:#?}");
    let ours = service(&answer, &service_name);
    match &ours.dedupe {
        DedupeState::Processed { processed_at_ms, handling_ms, position, expires_in_ms } => {
            // To the second: Redis's clock, which may lag the gateway's by less than a second on one host.
            assert!(processed_at_ms.is_some_and(|at| at + 1_000 >= received_at));
            assert_eq!((handling_ms, position), (&None, &None));
            assert!(expires_in_ms.is_some_and(|ms| ms > 0));
        }
        other => panic!("not processed: {other:?}"),
    }
    assert!(ours.retry.waiting.is_empty() && ours.dead_letters.is_empty());
    let text = render_text(&answer, true).join("\n");
    println!("{text}");
    assert!(text.contains(&format!("{service_name}: processed ")), "{text}");
    assert!(text.contains("later copies are duplicates"), "{text}");
    assert!(text.contains("accepted: no record named"), "{text}");

    // The API and the console's search box give the same answer; an unknown event is a 404 that says so.
    let served = Served::start(&stack).await;
    let reply = served.api(&stack, &format!("/v1/events/github/{}", delivery.delivery_id)).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let json: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    assert_eq!(json["found"], true);
    let ours_json =
        json["services"].as_array().expect("services").iter().find(|s| s["service"] == service_name.as_str());
    assert_eq!(ours_json.expect("our service")["dedupe"]["state"], "processed");
    let unknown = served.api(&stack, "/v1/events/github/no-such-event").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&unknown.body).expect("JSON")["found"], false);
    let no_token = served.get(&stack, &format!("/v1/events/github/{}", delivery.delivery_id), &[]).await;
    assert_eq!(no_token.status, StatusCode::UNAUTHORIZED, "same auth as the other routes");
    let (status, html) =
        served.console(&stack, &format!("/ui/events?source=github&event_id={}", delivery.delivery_id)).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains(r#"id="lookup-answer" data-found="true""#), "{html}");
    assert!(html.contains("later copies are duplicates"), "{html}");
    let (status, html) = served.console(&stack, "/ui/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains(r#"id="event-search""#), "the overview has the search box: {html}");
    let (status, html) = served.console(&stack, "/ui/events?source=github&event_id=%3Cscript%3E").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("unknown event: github &lt;script&gt;") && !html.contains("<script>"), "{html}");
    served.stop().await;

    let unknown = look_up(&stack, "no-such-event").await;
    assert!(!unknown.found);
    assert!(render_text(&unknown, false)[0].starts_with("unknown event: github no-such-event"));
    stack.shutdown().await;
}

#[tokio::test]
async fn lookup_finds_an_event_waiting_in_its_services_retry_topic() {
    let stack = TestStack::builder()
        .consumer_config(|config| {
            // The retry is due long after the test ends: the record waits in the retry topic.
            config.retry.initial_backoff_ms = 600_000;
            config.retry.max_backoff_ms = 600_000;
            config.retry.max_total_ms = 3_600_000;
        })
        .consumer()
        .build()
        .await;
    let service_name = stack.consumer_config.service_name().to_owned();
    let delivery = Delivery::new(br#"{"action":"closed"}"#.to_vec());
    stack.handler.fail_with(&delivery.delivery_id, [HandlerError::retryable("downstream answered 503")]);
    let posted_at = now_ms();
    stack.post_accepted(&delivery).await;
    eventually(Duration::from_secs(30), "the event waits in the retry topic", || async {
        let answer = look_up(&stack, &delivery.delivery_id).await;
        // The group shows among the brokers' groups once it has joined: until then no service is found.
        answer.services.iter().any(|s| s.service == service_name && !s.retry.waiting.is_empty())
    })
    .await;
    let answer = look_up(&stack, &delivery.delivery_id).await;
    let ours = service(&answer, &service_name);
    assert_eq!(ours.dedupe, DedupeState::Absent, "the claim was released for the retry");
    let waiting = &ours.retry.waiting[0];
    assert_eq!(waiting.attempts, Some(1));
    assert!(waiting.error.as_deref().is_some_and(|e| e.contains("503")), "{waiting:?}");
    assert!(
        waiting.due_at_ms.is_some_and(|due| due >= posted_at + 300_000),
        "due minutes from now (jittered): {waiting:?}"
    );
    assert_eq!(waiting.position.topic, stack.consumer_config.service_retry_topic());
    assert_eq!(ours.retry.records_not_scanned, 0);
    let first = inbound_record_of(&stack.inbound_records().await, &delivery.delivery_id);
    let inbound = answer.accepted.as_ref().and_then(|a| a.inbound.clone()).expect("inbound position");
    assert_eq!((inbound.partition, inbound.offset), (first.partition(), first.offset()), "from the retry headers");
    let text = render_text(&answer, false).join("\n");
    println!("{text}");
    assert!(text.contains(&format!("{service_name}: attempt 1 failed downstream answered 503, retry due ")), "{text}");
    stack.shutdown().await;
}

#[tokio::test]
async fn lookup_follows_a_dead_letter_through_its_replay_and_the_replays_outcome() {
    let mut stack = TestStack::builder().consumer().build().await;
    let billing = Arc::new(TestHandler::default());
    stack.start_consumer_with(stack.service_config("billing"), billing.clone()).await;
    let default_service = stack.consumer_config.service_name().to_owned();
    let delivery = Delivery::new(br#"{"action":"edited"}"#.to_vec());
    billing.poison(&delivery.delivery_id);
    stack.post_accepted(&delivery).await;
    eventually(Duration::from_secs(30), "processed by one service, dead-lettered by billing", || async {
        let answer = look_up(&stack, &delivery.delivery_id).await;
        answer.services.iter().any(|s| s.service == "billing" && !s.dead_letters.is_empty())
            && matches!(service(&answer, "billing").dedupe, DedupeState::DeadLettered { .. })
            && matches!(service(&answer, &default_service).dedupe, DedupeState::Processed { .. })
    })
    .await;
    let answer_dead = look_up(&stack, &delivery.delivery_id).await;
    let billing_answer = service(&answer_dead, "billing");
    let entry = billing_answer.dead_letters[0].clone();
    assert_eq!(entry.status, Status::New);
    assert_eq!(
        billing_answer.dedupe,
        DedupeState::DeadLettered {
            entry_id: entry.entry.id.clone(),
            expires_in_ms: match &billing_answer.dedupe {
                DedupeState::DeadLettered { expires_in_ms, .. } => *expires_in_ms,
                _ => None,
            },
        }
    );
    let text = render_text(&answer_dead, false).join("\n");
    println!("{text}");
    assert!(text.contains(&format!("billing: dead-lettered {} (new)", entry.entry.id)), "{text}");
    assert!(text.contains("poison after 1 attempts: test poison for"), "{text}");

    billing.heal(&delivery.delivery_id);
    let replayer = Replayer::new(config_for(&stack)).expect("replayer");
    let request = ReplayRequest { ids: vec![entry.entry.id.clone()], by: "test".into(), ..ReplayRequest::default() };
    assert_eq!(replayer.replay(&request).await.expect("replay").done, vec![entry.entry.id.clone()]);
    eventually(Duration::from_secs(30), "the replay succeeded and lookup says so", || async {
        let answer = look_up(&stack, &delivery.delivery_id).await;
        let billing_answer = service(&answer, "billing");
        billing_answer.dead_letters.first().is_some_and(|e| e.status == Status::Succeeded)
            && matches!(billing_answer.dedupe, DedupeState::Processed { .. })
    })
    .await;
    let answer = look_up(&stack, &delivery.delivery_id).await;
    assert_eq!(billing.count(&delivery.delivery_id), 1);
    let first = inbound_record_of(&stack.inbound_records().await, &delivery.delivery_id);
    let inbound = answer.accepted.as_ref().and_then(|a| a.inbound.clone()).expect("inbound");
    assert_eq!((inbound.partition, inbound.offset), (first.partition(), first.offset()), "the original record");
    let text = render_text(&answer, false).join("\n");
    println!("{text}");
    assert!(text.contains(&format!("(after dead letter {}: succeeded)", entry.entry.id)), "{text}");
    assert!(text.contains("status succeeded at "), "{text}");
    assert!(text.contains("replayed 1 time(s)"), "{text}");
    stack.shutdown().await;
}

#[tokio::test]
/// (That a fresh service ignores the previous layout's keys, and an upgraded one honours them:
/// `tests/tests/suite/dedupe_previous_layout.rs`. Here the service is fresh, so the plain `done` is lookup's to
/// read only.)
async fn a_plain_done_marker_of_an_earlier_consumer_is_read_by_lookup() {
    let stack = TestStack::builder().consumer().build().await;
    let service_name = stack.consumer_config.service_name().to_owned();
    let delivery = Delivery::new(br#"{"action":"reopened"}"#.to_vec());
    let client = redis::Client::open(stack.redis.url.as_str()).expect("client");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connection");
    let key = redis_key::dedupe(&stack.redis.key_prefix, &service_name, "github", &delivery.delivery_id);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(redis_key::DEDUPE_DONE)
        .arg("EX")
        .arg(600)
        .query_async(&mut connection)
        .await
        .expect("SET");
    // The service is found once its consumer group has joined (lookup finds services by their groups).
    eventually(Duration::from_secs(30), "the service's group is known", || async {
        look_up(&stack, &delivery.delivery_id).await.services.iter().any(|s| s.service == service_name)
    })
    .await;
    let answer = look_up(&stack, &delivery.delivery_id).await;
    assert!(matches!(service(&answer, &service_name).dedupe, DedupeState::Processed { position: None, .. }));
    assert!(answer.accepted.is_none(), "a plain marker names no record to read");
    let text = render_text(&answer, false).join("\n");
    assert!(text.contains("plain done marker of an earlier consumer"), "{text}");
    stack.shutdown().await;
}

#[tokio::test]
async fn with_trace_lookup_reads_the_trace_id_of_the_records_traceparent() {
    let stack = TestStack::builder().consumer().build().await;
    let service_name = stack.consumer_config.service_name().to_owned();
    let delivery = Delivery::new(br#"{"action":"traced"}"#.to_vec());
    stack.post_accepted(&delivery).await;
    stack.wait_until_handled(1).await;
    // The gateway's record again, as a tracing gateway would write it: with a `traceparent` header.
    let original = inbound_record_of(&stack.inbound_records().await, &delivery.delivery_id);
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traced_id = format!("{}-traced", delivery.delivery_id);
    let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let mut traced = decoded(&original);
    traced.meta.event_id = traced_id.clone();
    let mut traced = traced.encode(&stack.kafka.inbound_topic, Bytes::new());
    traced.set_traceparent(&traceparent);
    let headers = kafka::owned_headers(&traced.headers);
    // Poison, so its DLQ entry names the record (a processed event's outcome keeps no position: docs/dedupe.md).
    stack.handler.poison(&traced_id);
    stack.produce_raw(0, "traced", headers, original.payload().unwrap_or_default()).await;
    eventually(Duration::from_secs(30), "the traced copy dead-lettered", || async {
        matches!(service(&look_up(&stack, &traced_id).await, &service_name).dedupe, DedupeState::DeadLettered { .. })
    })
    .await;
    let answer = look_up(&stack, &traced_id).await;
    assert_eq!(answer.accepted.as_ref().and_then(|a| a.trace_id.as_deref()), Some(trace_id));
    let text = render_text(&answer, true).join("\n");
    assert!(text.contains(&format!("trace: {trace_id}")), "{text}");
    stack.shutdown().await;
}

/// The scripts against a real Redis: a done outcome is done for the claim script, a re-sent done (its reply lost)
/// still finds its claim's work done, a dead marker never replaces it, and lookup's reader finds it. (The previous
/// layout's markers, plain `done` included: `tests/tests/suite/dedupe_previous_layout.rs`.)
#[tokio::test]
async fn every_dedupe_script_takes_the_done_outcome() {
    use hookline_common::wire::dedupe_layout::Outcome;
    use hookline_consumer::dedupe::{Claim, Dedupe};
    let redis = hookline_common::config::RedisConfig {
        url: hookline_tests::redis_url(),
        key_prefix: format!("test:{}", uuid::Uuid::new_v4().simple()),
        ..hookline_common::config::RedisConfig::default()
    };
    let dedupe = Dedupe::connect(&redis, "billing").await.expect("connect");
    let marker = |offset| redis_key::DoneMarker {
        processed_at_ms: now_ms(),
        handling_ms: 7,
        topic: "webhooks.inbound".to_owned(),
        partition: 2,
        offset,
    };
    let client = redis::Client::open(redis.url.as_str()).expect("client");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connection");

    let token = dedupe.token("github", "evt_1");
    assert!(matches!(dedupe.claim(&token).await.expect("claim"), Claim::Acquired(_)));
    assert!(dedupe.mark_done(&token, &marker(41)).await.expect("done"), "our claim");
    assert!(dedupe.mark_done(&token, &marker(41)).await.expect("done again"), "a re-sent done finds it done");
    assert_eq!(dedupe.claim(&dedupe.token("github", "evt_1")).await.expect("claim"), Claim::AlreadyDone);
    assert_eq!(dedupe.claim(&dedupe.redrive_token("github", "evt_1")).await.expect("claim"), Claim::AlreadyDone);
    dedupe.mark_dead(&dedupe.token("github", "evt_1"), "webhooks.dlq:0:1").await.expect("dead");
    let outcome =
        hookline_tests::dedupe_outcome(&mut connection, &redis.key_prefix, "billing", "github", "evt_1").await;
    assert!(matches!(outcome, Some((Outcome::Processed { .. }, _))), "a dead marker never replaces a done one");
    let state = hookline_dlq_replayer::lookup::dedupe_state(
        &hookline_common::redis_connection::RedisConnection::connect(&redis).await.expect("connect"),
        &redis.key_prefix,
        "billing",
        "github",
        "evt_1",
    )
    .await
    .expect("read");
    assert!(matches!(state, DedupeState::Processed { processed_at_ms: Some(_), .. }), "{state:?}");
}

/// `lookup` without a readable dedupe state: no `lookup.redis`, or a key prefix under which no service is found.
/// Either way the answer says so and how to fix it, instead of "unknown event ... services looked in: none".
#[tokio::test]
async fn lookup_without_dedupe_state_says_why_and_how_to_fix_it() {
    let stack = TestStack::builder().build().await;
    let config = ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() };
    let answer =
        Lookup::new(Replayer::new(config.clone()).expect("replayer")).lookup("github", "evt_1").await.expect("lookup");
    let text = render_text(&answer, false);
    assert_eq!(text.len(), 1, "{text:?}");
    assert!(text[0].starts_with("not known: github evt_1"), "{text:?}");
    assert!(text[0].contains("the replayer has no [lookup.redis]; set it to the consumers' Redis"), "{text:?}");
    assert!(!text[0].contains("unknown event"), "{text:?}");

    let wrong_prefix = ReplayerConfig {
        lookup: LookupConfig {
            redis: Some(hookline_common::config::RedisConfig {
                key_prefix: "not-the-consumers".to_owned(),
                ..stack.redis.clone()
            }),
            ..LookupConfig::default()
        },
        ..config
    };
    let answer =
        Lookup::new(Replayer::new(wrong_prefix).expect("replayer")).lookup("github", "evt_1").await.expect("lookup");
    let text = render_text(&answer, false).join("\n");
    assert!(text.contains("no consumer service found"), "{text}");
    assert!(text.contains("set lookup.redis.key_prefix to the consumers' redis.key_prefix"), "{text}");
}
