//! Test support for the cross-service suite: one [`TestStack`] builder that runs the real gateway and consumer
//! in-process on port 0 against the real Kafka broker and Redis started by `scripts/stack`, each test with its
//! own topics, consumer group and Redis key prefix so tests run in parallel.
//!
//! `KAFKA_BROKERS` and `REDIS_URL` point at the stack (`eval "$(scripts/stack env)"`); the defaults are the
//! stack's default ports.

use std::{
    future::Future,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use bytes::Bytes;
use hookline_common::{
    config::{KafkaConfig, RedisConfig, SecretRef},
    kafka::{TopicSpec, ensure_topics, read_topic},
    wire::InboundEvent,
};
use hookline_consumer::{
    ConsumerConfig,
    handler::{BoxFuture, Handler, HandlerError},
};
use hookline_gateway::{
    GatewayConfig, Listeners,
    config::{Limits, SourceConfig},
};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use rdkafka::message::OwnedMessage;
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::CancellationToken;

/// The secret every test source is configured with.
pub const TEST_SECRET: &str = "integration-test-secret";

pub fn brokers() -> String {
    std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".to_owned())
}

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:16379".to_owned())
}

/// Waits until `condition` holds, checking every 100 ms; panics with `what` after `deadline`.
pub async fn eventually<F, Fut>(deadline: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !condition().await {
        assert!(started.elapsed() < deadline, "timed out after {deadline:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A handler that records each call, for asserting what was processed and how often.
#[derive(Debug, Default)]
pub struct RecordingHandler {
    calls: Mutex<Vec<InboundEvent>>,
}

impl RecordingHandler {
    pub fn calls(&self) -> Vec<InboundEvent> {
        self.calls.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// How many times the event with this id was processed.
    pub fn count(&self, event_id: &str) -> usize {
        self.calls().iter().filter(|event| event.meta.event_id == event_id).count()
    }
}

impl Handler for RecordingHandler {
    fn name(&self) -> &str {
        "recording"
    }

    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        self.calls.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(event.clone());
        Box::pin(async { Ok(()) })
    }
}

/// Builds a [`TestStack`].
#[derive(Debug, Default)]
pub struct TestStackBuilder {
    with_consumer: bool,
    gateway_brokers: Option<String>,
    produce_timeout_ms: Option<u64>,
    gateway_sources: Vec<SourceConfig>,
    gateway_limits: Option<Limits>,
}

impl TestStackBuilder {
    /// Also run a consumer (with a [`RecordingHandler`]) on the stack's topics.
    pub fn consumer(mut self) -> Self {
        self.with_consumer = true;
        self
    }

    /// Point the gateway at other brokers (for example a port where none listens).
    pub fn gateway_brokers(mut self, brokers: impl Into<String>) -> Self {
        self.gateway_brokers = Some(brokers.into());
        self
    }

    pub fn produce_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.produce_timeout_ms = Some(timeout_ms);
        self
    }

    /// Serve this source too, next to the default `github` one (its topic defaults to the stack's inbound topic).
    pub fn gateway_source(mut self, source: SourceConfig) -> Self {
        self.gateway_sources.push(source);
        self
    }

    /// The gateway's limits (default: [`Limits::default`] with a 2 s body read timeout).
    pub fn gateway_limits(mut self, limits: Limits) -> Self {
        self.gateway_limits = Some(limits);
        self
    }

    pub async fn build(self) -> TestStack {
        let run_id = uuid::Uuid::new_v4().simple().to_string();
        let kafka = KafkaConfig {
            brokers: brokers(),
            inbound_topic: format!("test-{run_id}-inbound"),
            dlq_topic: format!("test-{run_id}-dlq"),
            dlq_status_topic: format!("test-{run_id}-dlq-status"),
            produce_timeout_ms: self.produce_timeout_ms.unwrap_or(5_000),
            group_id: format!("test-{run_id}-consumer"),
            properties: Default::default(),
        };
        let topics = [
            TopicSpec { name: kafka.inbound_topic.clone(), partitions: 3, compacted: false },
            TopicSpec { name: kafka.dlq_topic.clone(), partitions: 1, compacted: false },
            TopicSpec { name: kafka.dlq_status_topic.clone(), partitions: 1, compacted: true },
        ];
        ensure_topics(&kafka.brokers, &topics, 1).await.expect("create test topics (is `scripts/stack up` running?)");

        // The gateway reads secrets from a file or the environment, never from its config; tests use a file so
        // nothing mutates the process environment.
        let secret_file = std::env::temp_dir().join(format!("hookline-test-{run_id}.secret"));
        std::fs::write(&secret_file, TEST_SECRET).expect("write secret file");
        let shutdown = CancellationToken::new();
        let mut gateway_kafka = kafka.clone();
        if let Some(brokers) = self.gateway_brokers {
            gateway_kafka.brokers = brokers;
        }
        let gateway_config = GatewayConfig {
            listen_addr: "127.0.0.1:0".to_owned(),
            admin_addr: "127.0.0.1:0".to_owned(),
            kafka: gateway_kafka,
            limits: self.gateway_limits.unwrap_or(Limits { body_read_timeout_ms: 2_000, ..Limits::default() }),
            sources: std::iter::once(SourceConfig {
                max_body_bytes: 64 * 1024,
                ..SourceConfig::new(
                    "github",
                    "github",
                    vec![SecretRef::from_file("primary", secret_file.display().to_string())],
                )
            })
            .chain(self.gateway_sources)
            .collect(),
        };
        gateway_config.validate().expect("valid gateway config");
        let public = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let gateway_addr = public.local_addr().expect("addr");
        let gateway_admin_addr = admin.local_addr().expect("addr");
        let gateway =
            tokio::spawn(hookline_gateway::run(gateway_config, Listeners { public, admin }, shutdown.clone()));

        let handler = Arc::new(RecordingHandler::default());
        let redis = RedisConfig { url: redis_url(), key_prefix: format!("test:{run_id}"), ..RedisConfig::default() };
        let mut consumer = None;
        let mut consumer_admin_addr = None;
        if self.with_consumer {
            let config = ConsumerConfig { kafka: kafka.clone(), redis: redis.clone(), ..ConsumerConfig::default() };
            let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            consumer_admin_addr = Some(admin.local_addr().expect("addr"));
            consumer = Some(tokio::spawn(hookline_consumer::run(config, admin, handler.clone(), shutdown.clone())));
        }

        TestStack {
            kafka,
            redis,
            gateway_addr,
            gateway_admin_addr,
            consumer_admin_addr,
            handler,
            shutdown,
            gateway: Some(gateway),
            consumer,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }
}

/// The real services, running in-process, and what a test needs to drive and observe them.
#[derive(Debug)]
pub struct TestStack {
    pub kafka: KafkaConfig,
    pub redis: RedisConfig,
    pub gateway_addr: SocketAddr,
    pub gateway_admin_addr: SocketAddr,
    pub consumer_admin_addr: Option<SocketAddr>,
    pub handler: Arc<RecordingHandler>,
    shutdown: CancellationToken,
    gateway: Option<JoinHandle<Result<(), hookline_gateway::GatewayError>>>,
    consumer: Option<JoinHandle<Result<(), hookline_consumer::ConsumerError>>>,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

/// A response as the test saw it.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// The stable error code of a JSON error response.
    pub fn error_code(&self) -> Option<String> {
        let value: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        value["error"]["code"].as_str().map(str::to_owned)
    }
}

/// A GitHub delivery: the headers GitHub sends, signed with `secret`.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub delivery_id: String,
    pub event: String,
    pub body: Bytes,
}

impl Delivery {
    pub fn new(body: impl Into<Bytes>) -> Self {
        Self { delivery_id: uuid::Uuid::new_v4().to_string(), event: "push".to_owned(), body: body.into() }
    }

    pub fn signature(&self, secret: &str) -> String {
        hookline_common::signature::github::sign(secret.as_bytes(), &self.body)
    }
}

impl TestStack {
    pub fn builder() -> TestStackBuilder {
        TestStackBuilder::default()
    }

    /// Sends `delivery` to the `github` source with this `X-Hub-Signature-256` value.
    pub async fn post_signed(&self, delivery: &Delivery, signature: &str) -> Reply {
        let request = Request::post(format!("http://{}/webhooks/github", self.gateway_addr))
            .header("content-type", "application/json")
            .header("x-github-delivery", &delivery.delivery_id)
            .header("x-github-event", &delivery.event)
            .header("x-hub-signature-256", signature)
            .body(Full::new(delivery.body.clone()))
            .expect("request");
        self.send(request).await
    }

    /// Sends `delivery` correctly signed with the test secret.
    pub async fn post(&self, delivery: &Delivery) -> Reply {
        self.post_signed(delivery, &delivery.signature(TEST_SECRET)).await
    }

    pub async fn send(&self, request: Request<Full<Bytes>>) -> Reply {
        let response = self.client.request(request).await.expect("gateway answers");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("response body").to_bytes();
        Reply { status: parts.status, headers: parts.headers, body }
    }

    /// Every record now in the inbound topic.
    pub async fn inbound_records(&self) -> Vec<OwnedMessage> {
        let (brokers, topic) = (self.kafka.brokers.clone(), self.kafka.inbound_topic.clone());
        tokio::task::spawn_blocking(move || read_topic(&brokers, &topic, Duration::from_secs(20)))
            .await
            .expect("reader task")
            .expect("read inbound topic")
    }

    /// The sum of the consumer's `hookline_consumer_events_total` samples with this outcome, from `/metrics`.
    pub async fn consumer_events(&self, outcome: &str) -> u64 {
        let addr = self.consumer_admin_addr.expect("stack built with .consumer()");
        let request = Request::get(format!("http://{addr}/metrics")).body(Full::default()).expect("request");
        let reply = self.send(request).await;
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        let label = format!("outcome=\"{outcome}\"");
        text.lines()
            .filter(|line| line.starts_with("hookline_consumer_events_total{") && line.contains(&label))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// Waits until the consumer has handled (processed or skipped) `n_records` records.
    pub async fn wait_until_handled(&self, n_records: u64) {
        eventually(Duration::from_secs(30), &format!("{n_records} records handled by the consumer"), || async {
            self.consumer_events("processed").await
                + self.consumer_events("duplicate").await
                + self.consumer_events("dead_lettered").await
                >= n_records
        })
        .await;
    }

    /// Stops the services and surfaces any error they returned.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if let Some(gateway) = self.gateway.take() {
            gateway.await.expect("gateway task").expect("gateway ran cleanly");
        }
        if let Some(consumer) = self.consumer.take() {
            consumer.await.expect("consumer task").expect("consumer ran cleanly");
        }
    }
}

impl Drop for TestStack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
