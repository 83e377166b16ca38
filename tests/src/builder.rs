//! [`TestStackBuilder`]: which services a [`TestStack`] runs and how they are configured, then the real services
//! started in-process on port 0 against the stack's Kafka and Redis.

use super::*;

/// A change to every consumer's config, applied before it starts.
type ConfigTweak = Box<dyn Fn(&mut ConsumerConfig) + Send + Sync>;

/// Builds a [`TestStack`].
#[derive(Default)]
pub struct TestStackBuilder {
    n_consumers: usize,
    partitions: Option<i32>,
    gateway_brokers: Option<String>,
    produce_timeout_ms: Option<u64>,
    consumer_tweak: Option<ConfigTweak>,
    gateway_sources: Vec<SourceConfig>,
    gateway_limits: Option<Limits>,
    gateway_producer: Option<ProducerConfig>,
    gateway_key_fetch: Option<hookline_gateway::key_fetch::KeyFetchConfig>,
    brokers: Option<String>,
    replication: Option<i32>,
    kafka_security: Option<kafka_tls::KafkaSecurity>,
    redis: Option<RedisConfig>,
}

impl std::fmt::Debug for TestStackBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestStackBuilder").field("n_consumers", &self.n_consumers).finish_non_exhaustive()
    }
}

impl TestStackBuilder {
    /// Also run a consumer (with the stack's [`TestHandler`]) on the stack's topics.
    pub fn consumer(self) -> Self {
        self.consumers(1)
    }

    /// Run `n` consumers in the stack's group, sharing one [`TestHandler`].
    pub fn consumers(mut self, n: usize) -> Self {
        self.n_consumers = n;
        self
    }

    /// Partitions of the inbound topic (default 3).
    pub fn partitions(mut self, partitions: i32) -> Self {
        self.partitions = Some(partitions);
        self
    }

    /// Point the gateway at other brokers (for example a port where none listens).
    pub fn gateway_brokers(mut self, brokers: impl Into<String>) -> Self {
        self.gateway_brokers = Some(brokers.into());
        self
    }

    /// The gateway's `[key_fetch]` (a [`key_server::KeyServer`]'s, for the fetched-key schemes).
    pub fn gateway_key_fetch(mut self, key_fetch: hookline_gateway::key_fetch::KeyFetchConfig) -> Self {
        self.gateway_key_fetch = Some(key_fetch);
        self
    }

    pub fn produce_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.produce_timeout_ms = Some(timeout_ms);
        self
    }

    /// Adjusts every consumer's config (retry budget, lease, alert URL, ...) before it starts.
    pub fn consumer_config(mut self, tweak: impl Fn(&mut ConsumerConfig) + Send + Sync + 'static) -> Self {
        self.consumer_tweak = Some(Box::new(tweak));
        self
    }

    /// Serve this source too, next to the default `github` one (its topic defaults to the stack's inbound topic).
    pub fn gateway_source(mut self, source: SourceConfig) -> Self {
        self.gateway_sources.push(source);
        self
    }

    /// The gateway's limits (default: [`Limits::default`] with a 2 s body read timeout and no drain grace).
    pub fn gateway_limits(mut self, limits: Limits) -> Self {
        self.gateway_limits = Some(limits);
        self
    }

    /// The gateway's `[producer]` batching (default: [`ProducerConfig::default`]).
    pub fn gateway_producer(mut self, producer: ProducerConfig) -> Self {
        self.gateway_producer = Some(producer);
        self
    }

    /// Run everything against these brokers (default: the single-node stack's), for example
    /// [`cluster_brokers`] with [`replication`](Self::replication) 3.
    pub fn brokers(mut self, brokers: impl Into<String>) -> Self {
        self.brokers = Some(brokers.into());
        self
    }

    /// Run every service and client of the stack over these brokers and TLS/SASL settings (see [`kafka_tls`]).
    pub fn kafka_security(mut self, security: kafka_tls::KafkaSecurity) -> Self {
        self.kafka_security = Some(security);
        self
    }

    /// The Redis every consumer of the stack uses, and [`TestStack::redis`] (default: the stack's plain Redis with a
    /// fresh key prefix), for example [`redis_tls::single_node`]'s TLS and ACL user.
    pub fn redis(mut self, redis: RedisConfig) -> Self {
        self.redis = Some(redis);
        self
    }

    /// Replication factor of the stack's topics (default 1).
    pub fn replication(mut self, replication: i32) -> Self {
        self.replication = Some(replication);
        self
    }

    pub async fn build(self) -> TestStack {
        let run_id = uuid::Uuid::new_v4().simple().to_string();
        let mut kafka = KafkaConfig {
            brokers: self.brokers.clone().unwrap_or_else(brokers),
            inbound_topic: format!("test-{run_id}-inbound"),
            dlq_topic: format!("test-{run_id}-dlq"),
            dlq_status_topic: format!("test-{run_id}-dlq-status"),
            retry_topic: format!("test-{run_id}-retry"),
            control_topic: format!("test-{run_id}-control"),
            produce_timeout_ms: self.produce_timeout_ms.unwrap_or(5_000),
            group_id: format!("test-{run_id}-consumer"),
            record_auth: record_auth::test_record_auth(),
            ..KafkaConfig::default()
        };
        if let Some(security) = &self.kafka_security {
            security.apply_to(&mut kafka);
        }
        let topics = [
            TopicSpec { name: kafka.inbound_topic.clone(), partitions: self.partitions.unwrap_or(3), compacted: false },
            TopicSpec { name: kafka.dlq_topic.clone(), partitions: 1, compacted: false },
            TopicSpec { name: kafka.dlq_status_topic.clone(), partitions: 1, compacted: true },
            TopicSpec { name: kafka.control_topic.clone(), partitions: 1, compacted: true },
        ];
        ensure_topics(&kafka, &topics, self.replication.unwrap_or(1))
            .await
            .expect("create test topics (is `scripts/stack up` running?)");

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
            producer: self.gateway_producer.unwrap_or_default(),
            // No drain grace unless a test asks for one: every test's shutdown would wait for it.
            limits: self.gateway_limits.unwrap_or(Limits {
                body_read_timeout_ms: 2_000,
                drain_grace_ms: 0,
                ..Limits::default()
            }),
            reload_token: None,
            rejections_token: None,
            telemetry: Default::default(),
            key_fetch: self.gateway_key_fetch.unwrap_or_default(),
            sources: std::iter::once(SourceConfig {
                max_body_bytes: 64 * 1024,
                // The consumer's tests route on `X-GitHub-Event`, as the shipped configs do.
                type_from_header: Some(true),
                ..SourceConfig::new(
                    "github",
                    "github",
                    vec![SecretRef::from_file("primary", secret_file.display().to_string())],
                )
            })
            .chain(self.gateway_sources)
            .collect(),
        };
        hookline_gateway::Loaded::build(gateway_config.clone()).expect("valid gateway config");
        let public = hookline_common::http::bind("127.0.0.1:0").await.expect("bind");
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let gateway_addr = public.local_addr().expect("addr");
        let gateway_admin_addr = admin.local_addr().expect("addr");
        let gateway_shutdown = shutdown.child_token();
        let gateway = tokio::spawn(hookline_gateway::run(
            gateway_config.clone(),
            Listeners { public, admin },
            gateway_shutdown.clone(),
        ));

        let redis = self.redis.clone().unwrap_or_else(|| RedisConfig {
            url: redis_url(),
            key_prefix: format!("test:{run_id}"),
            ..RedisConfig::default()
        });
        let mut consumer_config =
            ConsumerConfig { kafka: kafka.clone(), redis: redis.clone(), ..ConsumerConfig::default() };
        consumer_config.retry.initial_backoff_ms = 50;
        consumer_config.retry.max_backoff_ms = 200;
        if let Some(tweak) = &self.consumer_tweak {
            tweak(&mut consumer_config);
        }
        hookline_consumer::Loaded::build(consumer_config.clone()).expect("valid consumer config");
        // The service's own retry topic (a consumer would create it too, with the inbound topic's partitions).
        let retry = TopicSpec { name: consumer_config.service_retry_topic(), partitions: 2, compacted: false };
        ensure_topics(&kafka, &[retry], self.replication.unwrap_or(1)).await.expect("create the retry topic");
        let mut stack = TestStack {
            kafka,
            redis,
            consumer_config,
            gateway_addr,
            gateway_admin_addr,
            handler: Arc::new(TestHandler::default()),
            shutdown,
            gateway_config,
            gateway_shutdown,
            gateway: Some(gateway),
            consumers: Vec::new(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        };
        for _ in 0..self.n_consumers {
            stack.start_consumer().await;
        }
        stack
    }
}
