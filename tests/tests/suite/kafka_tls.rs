//! Kafka over TLS and SASL against the stack's real broker (`scripts/stack`: a SASL_SSL listener with SCRAM-SHA-512,
//! SCRAM-SHA-256, PLAIN and OAUTHBEARER users, a listener requiring a client certificate): the whole pipeline runs
//! over them (gateway 2xx only after the broker's ack, the consumer handles once, a poison event is dead-lettered
//! and the replayer re-drives it), and a broker that refuses us (wrong password, untrusted CA, expired client
//! certificate) stops every service at start with one clear error, never a 2xx.

use std::time::Duration;

use hookline_common::{
    config::{KafkaConfig, SaslMechanism, SecretRef},
    kafka::{TopicSpec, ensure_topics, producer_config, read_topic},
    kafka_security::{ACCEPT_CHECK_WAIT, check_broker_accepts},
};
use hookline_dlq_replayer::{
    ReplayerConfig,
    filter::Filter,
    index::{Entry, Status},
    ops::{ReplayRequest, Replayer},
};
use hookline_gateway::{
    GatewayConfig, Listeners,
    config::{Limits, ProducerConfig, SourceConfig},
};
use hookline_tests::{
    Delivery, TEST_SECRET, TestStack, eventually,
    kafka_tls::{KafkaSecurity, TokenEndpoint},
    record_auth::test_record_auth,
    redis_url,
};
use http_body_util::Full;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use rdkafka::{
    Message,
    producer::{FutureProducer, FutureRecord},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A default [`KafkaConfig`] over `security`, with the test stacks' record key.
fn kafka_config(security: &KafkaSecurity) -> KafkaConfig {
    let mut kafka = KafkaConfig { record_auth: test_record_auth(), ..KafkaConfig::default() };
    security.apply_to(&mut kafka);
    kafka
}

async fn entry_of(replayer: &Replayer, event_id: &str) -> Option<Entry> {
    let entries = replayer.list(&Filter::default()).await.expect("list");
    entries.into_iter().rfind(|e| e.entry.event_id.as_deref() == Some(event_id))
}

/// Gateway 2xx, handled once, a poison event dead-lettered, re-driven by the replayer and then handled once: every
/// client of every service (the gateway's producer, the consumer's group, DLQ and retry writers, the replayer's
/// index reader and producer, the test's own topic admin and reader) over `security`.
async fn pipeline_over(security: KafkaSecurity) {
    let stack = TestStack::builder().kafka_security(security.clone()).consumer().build().await;
    assert_eq!(stack.kafka.brokers, security.brokers, "the stack runs on the TLS listener");

    let fine = Delivery::new(&b"{\"tls\":\"fine\"}"[..]);
    stack.post_accepted(&fine).await;
    eventually(Duration::from_secs(30), "the event is handled", || async {
        stack.handler.count(&fine.delivery_id) == 1
    })
    .await;

    let poison = Delivery::new(&b"{\"tls\":\"poison\"}"[..]);
    stack.handler.poison(&poison.delivery_id);
    stack.post_accepted(&poison).await;
    let replayer =
        Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer");
    eventually(Duration::from_secs(30), "the poison event is dead-lettered", || async {
        entry_of(&replayer, &poison.delivery_id).await.is_some()
    })
    .await;
    let entry = entry_of(&replayer, &poison.delivery_id).await.expect("entry");
    assert_eq!(entry.entry.error_class.as_deref(), Some("poison"));
    assert_eq!(stack.handler.count(&poison.delivery_id), 0);

    stack.handler.heal(&poison.delivery_id);
    let report = replayer
        .replay(&ReplayRequest { ids: vec![entry.entry.id.clone()], by: "test".into(), ..ReplayRequest::default() })
        .await
        .expect("replay");
    assert_eq!(report.done, vec![entry.entry.id.clone()]);
    eventually(Duration::from_secs(30), "the re-driven event is handled", || async {
        stack.handler.count(&poison.delivery_id) == 1
    })
    .await;
    eventually(Duration::from_secs(30), "the entry is marked succeeded", || async {
        entry_of(&replayer, &poison.delivery_id).await.is_some_and(|entry| entry.status == Status::Succeeded)
    })
    .await;
    assert_eq!(stack.handler.count(&fine.delivery_id), 1, "handled once");
    let inbound = stack.inbound_records().await;
    assert_eq!(inbound.len(), 3, "two acknowledged events and one re-drive, read back over TLS");
    stack.shutdown().await;
}

#[tokio::test]
async fn pipeline_runs_over_sasl_ssl_with_scram_sha_512() {
    pipeline_over(KafkaSecurity::sasl_ssl(SaslMechanism::ScramSha512)).await;
}

#[tokio::test]
async fn pipeline_runs_over_mutual_tls() {
    pipeline_over(KafkaSecurity::mutual_tls()).await;
}

/// One record produced (acknowledged) and read back with `kafka`, on a fresh topic.
async fn round_trip(kafka: &KafkaConfig) {
    check_broker_accepts(kafka, ACCEPT_CHECK_WAIT).await.expect("the broker accepts us");
    let topic = format!("test-{}-tls", uuid::Uuid::new_v4().simple());
    ensure_topics(kafka, &[TopicSpec { name: topic.clone(), partitions: 1, compacted: false }], 1)
        .await
        .expect("create topic");
    let producer: FutureProducer = producer_config(kafka).create().expect("producer");
    producer
        .send(FutureRecord::to(&topic).key("k").payload("over tls"), Duration::from_secs(20))
        .await
        .expect("acknowledged");
    let (kafka, read) = (kafka.clone(), topic.clone());
    let records = tokio::task::spawn_blocking(move || read_topic(&kafka, &read, Duration::from_secs(20)))
        .await
        .expect("reader")
        .expect("read");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].payload(), Some(&b"over tls"[..]));
}

#[tokio::test]
async fn scram_sha_256_and_plain_are_accepted_too() {
    for mechanism in [SaslMechanism::ScramSha256, SaslMechanism::Plain] {
        round_trip(&kafka_config(&KafkaSecurity::sasl_ssl(mechanism))).await;
    }
}

#[tokio::test]
async fn oauthbearer_gets_its_token_from_the_client_credentials_endpoint() {
    let dir = tempdir();
    let secret_file = dir.join("oidc-client-secret");
    std::fs::write(&secret_file, "the-client-secret").expect("write");
    let endpoint = TokenEndpoint::start("the-client-secret").await;
    let security = KafkaSecurity::oauthbearer(&endpoint, &secret_file);
    round_trip(&kafka_config(&security)).await;
    assert!(endpoint.issued() >= 1, "librdkafka fetched its token from the endpoint");
    assert_eq!(endpoint.refused(), 0);

    // The gateway acknowledges over OAUTHBEARER as well.
    let stack = TestStack::builder().kafka_security(security).build().await;
    let delivery = Delivery::new(&b"{\"tls\":\"oauth\"}"[..]);
    stack.post_accepted(&delivery).await;
    assert_eq!(stack.inbound_records().await.len(), 1);
    stack.shutdown().await;

    // A wrong client secret gets no token, so the broker is never asked: the endpoint saw it refused.
    let wrong_file = dir.join("wrong-secret");
    std::fs::write(&wrong_file, "not-the-secret").expect("write");
    let wrong = kafka_config(&KafkaSecurity::oauthbearer(&endpoint, &wrong_file));
    let error = check_broker_accepts(&wrong, ACCEPT_CHECK_WAIT).await.expect_err("refused");
    assert!(endpoint.refused() >= 1);
    assert!(error.to_string().contains("refuse"), "{error}");
}

/// An error and its sources, as `main` prints them.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("hookline-kafka-tls-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Every service refuses to start against a broker that refuses `security`, with one error naming the refusal, and
/// the gateway never answers a webhook with a 2xx.
async fn refused_at_start(security: KafkaSecurity, why: &str) {
    let kafka = KafkaConfig {
        inbound_topic: format!("test-{}-inbound", uuid::Uuid::new_v4().simple()),
        ..kafka_config(&security)
    };
    let error = check_broker_accepts(&kafka, ACCEPT_CHECK_WAIT).await.expect_err("the broker refuses us");
    let message = error.to_string();
    assert!(message.contains("refuse") && message.contains(why), "{message}");
    assert!(!message.contains("not-the-password"), "no secret in the error: {message}");

    // The gateway: a webhook sent while it starts is never acknowledged, and it stops with the error.
    let dir = tempdir();
    let secret_file = dir.join("github-secret");
    std::fs::write(&secret_file, TEST_SECRET).expect("write");
    let config = GatewayConfig {
        listen_addr: "127.0.0.1:0".to_owned(),
        admin_addr: "127.0.0.1:0".to_owned(),
        kafka: kafka.clone(),
        producer: ProducerConfig::default(),
        limits: Limits { body_read_timeout_ms: 2_000, drain_grace_ms: 0, ..Limits::default() },
        reload_token: None,
        rejections_token: None,
        telemetry: Default::default(),
        key_fetch: Default::default(),
        sources: vec![SourceConfig {
            type_from_header: Some(true),
            ..SourceConfig::new(
                "github",
                "github",
                vec![SecretRef::from_file("primary", secret_file.display().to_string())],
            )
        }],
    };
    let public = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = public.local_addr().expect("addr");
    let gateway = tokio::spawn(hookline_gateway::run(config, Listeners { public, admin }, CancellationToken::new()));
    let delivery = Delivery::new(&b"{\"tls\":\"refused\"}"[..]);
    let request = delivery.request(address, &delivery.signature(TEST_SECRET));
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let reply = tokio::time::timeout(Duration::from_secs(60), client.request(request)).await.expect("bounded");
    if let Ok(response) = &reply {
        assert!(!response.status().is_success(), "a 2xx from a gateway the broker refuses: {}", response.status());
    }
    let result =
        tokio::time::timeout(Duration::from_secs(60), gateway).await.expect("the gateway stops").expect("task");
    let error = chain(&result.expect_err("the gateway refuses to run"));
    assert!(error.contains("refuse") && error.contains(why), "{error}");

    // The consumer.
    let consumer_config = hookline_consumer::ConsumerConfig {
        kafka: kafka.clone(),
        redis: hookline_common::config::RedisConfig { url: redis_url(), ..Default::default() },
        ..hookline_consumer::ConsumerConfig::default()
    };
    let loaded = hookline_consumer::Loaded::build(consumer_config).expect("valid config");
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let result =
        tokio::time::timeout(Duration::from_secs(60), hookline_consumer::run(loaded, admin, CancellationToken::new()))
            .await
            .expect("the consumer stops");
    let error = chain(&result.expect_err("the consumer refuses to run"));
    assert!(error.contains("refuse") && error.contains(why), "{error}");

    // The replayer's API.
    let token_file = dir.join("api-token");
    std::fs::write(&token_file, "an-api-token-of-at-least-thirty-two-chars").expect("write");
    let replayer_config = ReplayerConfig {
        kafka,
        api_token: Some(SecretRef::from_file("api", token_file.display().to_string())),
        ..ReplayerConfig::default()
    };
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        hookline_dlq_replayer::serve_api(replayer_config, admin, CancellationToken::new()),
    )
    .await
    .expect("the replayer stops");
    let error = chain(&result.expect_err("the replayer refuses to run"));
    assert!(error.contains("refuse") && error.contains(why), "{error}");
}

#[tokio::test]
async fn a_wrong_password_stops_every_service_at_start_and_never_gets_a_2xx() {
    refused_at_start(KafkaSecurity::wrong_password(&tempdir()), "Authentication failed").await;
}

#[tokio::test]
async fn an_untrusted_ca_stops_every_service_at_start_and_never_gets_a_2xx() {
    refused_at_start(KafkaSecurity::untrusted_ca(), "certificate verify failed").await;
}

#[tokio::test]
async fn an_expired_client_certificate_stops_every_service_at_start_and_never_gets_a_2xx() {
    // The broker's TLS stack answers an expired client certificate with the alert "certificate unknown".
    refused_at_start(KafkaSecurity::expired_client_certificate(), "certificate unknown").await;
}

#[tokio::test]
async fn an_unreachable_broker_is_an_outage_not_a_refusal() {
    let mut kafka = kafka_config(&KafkaSecurity::sasl_ssl(SaslMechanism::ScramSha512));
    kafka.brokers = "127.0.0.1:1".to_owned();
    check_broker_accepts(&kafka, Duration::from_secs(2)).await.expect("an outage is waited for, not refused");
}
