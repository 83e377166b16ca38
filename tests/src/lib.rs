//! Test support for the cross-service suite: one [`TestStack`] builder that runs the real gateway and consumer
//! in-process on port 0 against the real Kafka broker and Redis started by `scripts/stack`, each test with its
//! own topics, consumer group and Redis key prefix so tests run in parallel.
//!
//! `KAFKA_BROKERS` and `REDIS_URL` point at the stack (`eval "$(scripts/stack env)"`); the defaults are the
//! stack's default ports.

use std::{net::SocketAddr, sync::Arc};

use bytes::Bytes;
use hookline_common::{
    config::{KafkaConfig, RedisConfig, SecretRef},
    kafka::{TopicSpec, ensure_topics},
    record_auth::{RecordAuthConfig, RecordKeys},
    wire::now_ms,
};
use hookline_consumer::{ConsumerConfig, handler::Handler};
use hookline_gateway::{
    GatewayConfig, Listeners,
    config::{Limits, ProducerConfig, SourceConfig},
};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use rdkafka::message::OwnedHeaders;
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::CancellationToken;

pub mod browser;
mod builder;
mod dedupe_state;
mod delivery;
mod fake_endpoint;
pub mod forward;
pub mod gateway_process;
mod handler;
pub mod jaeger;
pub mod kafka_tls;
pub mod key_server;
pub mod loopback_tls;
mod observe;
pub mod postgres;
pub mod process;
pub mod prometheus;
pub mod provider_fakes;
pub mod read;
pub mod reconciler;
pub mod record_auth;
pub mod redis_tls;
mod stack_env;

pub use crate::{
    builder::TestStackBuilder,
    dedupe_state::{bucket_schedule, dedupe_outcome},
    delivery::{Delivery, Reply, TEST_SECRET, body_event_id, push_meta},
    fake_endpoint::FakeEndpoint,
    handler::{TestHandler, routed},
    stack_env::{
        StackRestore, brokers, cluster_brokers, eventually, plaintext_kafka, postgres_config, postgres_handler_config,
        redis_cluster_urls, redis_url, stack_script, stack_script_args,
    },
};

/// The replayer's HTTP API and console, running in-process on a loopback port with a bearer token.
#[derive(Debug)]
pub struct ReplayerApi {
    pub addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), hookline_dlq_replayer::ServeError>>,
    token_file: std::path::PathBuf,
}

impl ReplayerApi {
    /// Stops it and asserts it served without error.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("replayer task").expect("served");
        let _ = std::fs::remove_file(self.token_file);
    }
}

/// A consumer running in-process, stoppable on its own.
#[derive(Debug)]
pub struct RunningConsumer {
    pub admin_addr: SocketAddr,
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<(), hookline_consumer::ConsumerError>>>,
}

/// The real services, running in-process, and what a test needs to drive and observe them.
#[derive(Debug)]
pub struct TestStack {
    pub kafka: KafkaConfig,
    pub redis: RedisConfig,
    /// The config every consumer of this stack starts with.
    pub consumer_config: ConsumerConfig,
    pub gateway_addr: SocketAddr,
    pub gateway_admin_addr: SocketAddr,
    /// Shared by every consumer of the stack: what was processed, by any of them.
    pub handler: Arc<TestHandler>,
    shutdown: CancellationToken,
    gateway_config: GatewayConfig,
    gateway_shutdown: CancellationToken,
    gateway: Option<JoinHandle<Result<(), hookline_gateway::GatewayError>>>,
    pub consumers: Vec<RunningConsumer>,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

impl TestStack {
    pub fn builder() -> TestStackBuilder {
        TestStackBuilder::default()
    }

    /// Starts one more consumer in the stack's group (a rebalance follows); returns its index.
    pub async fn start_consumer(&mut self) -> usize {
        let (config, handler) = (self.consumer_config.clone(), self.handler.clone());
        self.start_consumer_with(config, handler).await
    }

    /// The stack's consumer config for another consumer service named `service` (its own group; the same
    /// topics, Redis and key prefix).
    pub fn service_config(&self, service: &str) -> ConsumerConfig {
        let mut config = self.consumer_config.clone();
        config.kafka.group_id = format!("{}-{service}", self.kafka.group_id);
        config.service.name = Some(service.to_owned());
        config
    }

    /// Starts a consumer with this config and handler (another service's, say); returns its index.
    pub async fn start_consumer_with(&mut self, config: ConsumerConfig, handler: Arc<dyn Handler>) -> usize {
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let admin_addr = admin.local_addr().expect("addr");
        let shutdown = self.shutdown.child_token();
        let loaded = hookline_consumer::Loaded::build(config).expect("valid consumer config");
        let task = tokio::spawn(hookline_consumer::run(loaded.with_handler(handler), admin, shutdown.clone()));
        self.consumers.push(RunningConsumer { admin_addr, shutdown, task: Some(task) });
        self.consumers.len() - 1
    }

    /// Restarts the gateway as a SIGTERM and a new process would: a graceful drain (its `drain_grace_ms`,
    /// then in-flight requests), then a new gateway on the same addresses.
    pub async fn restart_gateway(&mut self) {
        self.gateway_shutdown.cancel();
        if let Some(gateway) = self.gateway.take() {
            gateway.await.expect("gateway task").expect("gateway ran cleanly");
        }
        let public =
            hookline_common::http::bind(&self.gateway_addr.to_string()).await.expect("rebind the public address");
        let admin = TcpListener::bind(self.gateway_admin_addr).await.expect("rebind the admin address");
        self.gateway_shutdown = self.shutdown.child_token();
        self.gateway = Some(tokio::spawn(hookline_gateway::run(
            self.gateway_config.clone(),
            Listeners { public, admin },
            self.gateway_shutdown.clone(),
        )));
    }

    /// Restarts the gateway (a graceful drain, then a new one on the same addresses) with this
    /// `[kafka.record_auth]`, as a deployment rolling out new record keys does.
    pub async fn restart_gateway_with_record_auth(&mut self, record_auth: RecordAuthConfig) {
        self.gateway_config.kafka.record_auth = record_auth;
        self.restart_gateway().await;
    }

    /// The stack's consumer config with this `[kafka.record_auth]` (the same group, topics and Redis).
    pub fn consumer_config_with_record_auth(&self, record_auth: RecordAuthConfig) -> ConsumerConfig {
        let mut config = self.consumer_config.clone();
        config.kafka.record_auth = record_auth;
        config
    }

    /// The stack's record keys, loaded.
    pub fn record_keys(&self) -> RecordKeys {
        RecordKeys::load(&self.kafka.record_auth).expect("the stack's record keys load")
    }

    /// `headers` with the MAC hookline would add to a record of `topic` with this key and body.
    pub fn signed(&self, topic: &str, key: Option<&[u8]>, body: &[u8], headers: &OwnedHeaders) -> OwnedHeaders {
        self.record_keys().sign(topic, key, Some(body), Some(headers), now_ms()).expect("a key valid now")
    }

    /// Starts the replayer's API and console on the stack's topics, taking `token` (index refresh every second).
    pub async fn start_replayer_api(&self, token: &str) -> ReplayerApi {
        self.start_replayer_api_with(token, |_| {}).await
    }

    /// [`TestStack::start_replayer_api`] with `tweak` applied to its config (the gateways and services it samples).
    pub async fn start_replayer_api_with(
        &self,
        token: &str,
        tweak: impl FnOnce(&mut hookline_dlq_replayer::ReplayerConfig),
    ) -> ReplayerApi {
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        self.start_replayer_api_on(admin, token, tweak)
    }

    /// [`TestStack::start_replayer_api_with`] on a listener the test bound (to know the console's address before it
    /// starts: an identity provider's redirect URI).
    pub fn start_replayer_api_on(
        &self,
        admin: TcpListener,
        token: &str,
        tweak: impl FnOnce(&mut hookline_dlq_replayer::ReplayerConfig),
    ) -> ReplayerApi {
        let token_file = std::env::temp_dir().join(format!("hookline-api-token-{}", uuid::Uuid::new_v4()));
        std::fs::write(&token_file, token).expect("token file");
        let mut config = hookline_dlq_replayer::ReplayerConfig {
            kafka: self.kafka.clone(),
            api_token: Some(SecretRef::from_file("api", token_file.display().to_string())),
            refresh_interval_s: 1,
            ..hookline_dlq_replayer::ReplayerConfig::default()
        };
        tweak(&mut config);
        let addr = admin.local_addr().expect("addr");
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(hookline_dlq_replayer::serve_api(config, admin, shutdown.clone()));
        ReplayerApi { addr, shutdown, task, token_file }
    }

    /// Stops consumer `index` gracefully and waits until it has left.
    pub async fn stop_consumer(&mut self, index: usize) {
        let consumer = &mut self.consumers[index];
        consumer.shutdown.cancel();
        if let Some(task) = consumer.task.take() {
            task.await.expect("consumer task").expect("consumer ran cleanly");
        }
    }

    /// Aborts consumer `index`'s main task without any drain, as a crash would (then cancels its token, so its
    /// helper tasks let go of the Kafka client and the member leaves the group instead of lingering until
    /// `max.poll.interval.ms`).
    pub async fn kill_consumer(&mut self, index: usize) {
        let consumer = &mut self.consumers[index];
        if let Some(task) = consumer.task.take() {
            task.abort();
            let _ = task.await;
        }
        consumer.shutdown.cancel();
    }

    /// Sends `delivery` to the `github` source with this `X-Hub-Signature-256` value.
    pub async fn post_signed(&self, delivery: &Delivery, signature: &str) -> Reply {
        self.send(delivery.request(self.gateway_addr, signature)).await
    }

    /// Sends `delivery` correctly signed with the test secret.
    pub async fn post(&self, delivery: &Delivery) -> Reply {
        self.post_signed(delivery, &delivery.signature(TEST_SECRET)).await
    }

    /// Sends `delivery` correctly signed; `None` when the connection failed before an answer (as a provider's
    /// client sees a pooled connection the gateway closed for idleness at the moment it was reused: it retries).
    pub async fn try_post(&self, delivery: &Delivery) -> Option<Reply> {
        let request = delivery.request(self.gateway_addr, &delivery.signature(TEST_SECRET));
        let response = self.client.request(request).await.ok()?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.ok()?.to_bytes();
        Some(Reply { status: parts.status, headers: parts.headers, body })
    }

    /// Sends `delivery` and asserts the gateway acknowledged it.
    pub async fn post_accepted(&self, delivery: &Delivery) {
        let reply = self.post(delivery).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }

    pub async fn send(&self, request: Request<Full<Bytes>>) -> Reply {
        let response = self.client.request(request).await.expect("server answers");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("response body").to_bytes();
        Reply { status: parts.status, headers: parts.headers, body }
    }

    /// Stops the services and surfaces any error they returned.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if let Some(gateway) = self.gateway.take() {
            gateway.await.expect("gateway task").expect("gateway ran cleanly");
        }
        for consumer in &mut self.consumers {
            if let Some(task) = consumer.task.take() {
                task.await.expect("consumer task").expect("consumer ran cleanly");
            }
        }
    }
}

impl Drop for TestStack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
