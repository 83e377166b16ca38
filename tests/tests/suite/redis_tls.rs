//! Redis over TLS with an ACL user, against the stack's Redis (`REDIS_TLS_URL`, client certificate optional) and
//! its Redis Cluster (`REDIS_TLS_CLUSTER_URLS`, client certificate required), as the stack's ACL user, whose ACL
//! is exactly the one docs/security.md gives a consumer service: the pipeline runs over them, and every
//! configuration Redis can never accept stops the consumer at start with one clear error, having processed
//! nothing, while an unreachable Redis is still waited for.

use std::time::Duration;

use hookline_common::{
    config::{RedisTls, SecretRef},
    redis_connection::RedisConnection,
};
use hookline_tests::{
    Delivery, TestStack, eventually,
    redis_tls::{self, LatePort},
};

/// The pipeline over `redis`: a duplicate is suppressed, a poison event is dead-lettered, and the done markers
/// are in that Redis under the stack's key prefix.
async fn pipeline_over(redis: hookline_common::config::RedisConfig) {
    let stack = TestStack::builder().redis(redis).consumer().build().await;
    let event = Delivery::new(&br#"{"over":"tls"}"#[..]);
    let poison = Delivery::new(&br#"{"poison":"over tls"}"#[..]);
    stack.handler.poison(&poison.delivery_id);
    stack.post_accepted(&event).await;
    stack.post_accepted(&event).await;
    stack.post_accepted(&poison).await;
    stack.wait_until_handled(3).await;

    assert_eq!(stack.handler.count(&event.delivery_id), 1, "the duplicate was suppressed through Redis over TLS");
    assert_eq!(stack.handler.attempts(&poison.delivery_id), 1, "poison is not retried");
    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dlq.len(), 1, "the poison event is in the DLQ");
    assert_eq!(rdkafka::Message::payload(&dlq[0]), Some(poison.body.as_ref()));

    let mut connection = RedisConnection::connect(&stack.redis).await.expect("connect as the ACL user");
    let service = stack.consumer_config.service_name().to_owned();
    let outcome = hookline_tests::dedupe_outcome(
        &mut connection,
        &stack.redis.key_prefix,
        &service,
        "github",
        &event.delivery_id,
    )
    .await;
    assert!(
        matches!(outcome, Some((hookline_common::wire::dedupe_layout::Outcome::Processed { .. }, _))),
        "the done outcome is in the TLS Redis: {outcome:?}"
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn the_pipeline_runs_over_tls_as_the_acl_user_on_a_single_redis() {
    pipeline_over(redis_tls::single_node()).await;
}

#[tokio::test]
async fn the_pipeline_runs_over_mutual_tls_as_the_acl_user_on_a_redis_cluster() {
    pipeline_over(redis_tls::cluster()).await;
}

/// A stack without consumers, one event accepted: what a refused consumer must never process.
async fn stack_with_one_event() -> (TestStack, Delivery) {
    let stack = TestStack::builder().build().await;
    let event = Delivery::new(format!(r#"{{"refused":"{}"}}"#, uuid::Uuid::new_v4()).into_bytes());
    stack.post_accepted(&event).await;
    (stack, event)
}

/// Runs a consumer of `stack` with `redis` to its refusal; asserts it processed nothing and returns its error.
async fn refused(stack: &TestStack, event: &Delivery, redis: hookline_common::config::RedisConfig) -> String {
    let config = hookline_consumer::ConsumerConfig { redis, ..stack.consumer_config.clone() };
    let error = redis_tls::run_consumer_until_refused(config, stack.handler.clone()).await;
    assert_eq!(stack.handler.calls().len(), 0, "a refused consumer processed nothing");
    assert_eq!(stack.handler.count(&event.delivery_id), 0);
    assert!(!error.contains('\n'), "one line: {error}");
    error
}

#[tokio::test]
async fn a_wrong_password_or_an_unknown_user_stops_the_consumer_at_start() {
    let (stack, event) = stack_with_one_event().await;
    let wrong_password = hookline_common::config::RedisConfig {
        password: Some(redis_tls::secret_file("wrong")),
        ..redis_tls::single_node()
    };
    let error = refused(&stack, &event, wrong_password).await;
    assert!(error.contains("refused to authenticate user `hookline`"), "{error}");
    assert!(error.contains("redis.password"), "says what to change: {error}");

    let unknown_user =
        hookline_common::config::RedisConfig { username: Some("nobody".to_owned()), ..redis_tls::single_node() };
    let error = refused(&stack, &event, unknown_user).await;
    assert!(error.contains("refused to authenticate user `nobody`"), "{error}");
    stack.shutdown().await;
}

#[tokio::test]
async fn an_untrusted_server_certificate_stops_the_consumer_at_start() {
    let (stack, event) = stack_with_one_event().await;
    let mut redis = redis_tls::single_node();
    redis.tls = Some(RedisTls { ca_file: Some(redis_tls::tls_file("other-ca.pem")), ..RedisTls::default() });
    let error = refused(&stack, &event, redis).await;
    assert!(error.contains("TLS refused") && error.contains("not signed by a CA hookline trusts"), "{error}");
    assert!(error.contains("redis.tls.ca_file"), "says what to change: {error}");

    // The built-in roots (no ca_file) do not hold the stack's private CA either.
    let mut redis = redis_tls::single_node();
    redis.tls = None;
    let error = refused(&stack, &event, redis).await;
    assert!(error.contains("not signed by a CA hookline trusts"), "{error}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_cluster_that_requires_a_client_certificate_refuses_a_consumer_without_one() {
    let (stack, event) = stack_with_one_event().await;
    let mut redis = redis_tls::cluster();
    redis.tls = Some(RedisTls { ca_file: Some(redis_tls::tls_file("ca.pem")), ..RedisTls::default() });
    let error = refused(&stack, &event, redis).await;
    assert!(error.contains("TLS refused"), "{error}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_user_without_permission_on_the_key_prefix_stops_the_consumer_at_start() {
    let (stack, event) = stack_with_one_event().await;
    // The ACL user may touch ~hookline:* only.
    let redis = hookline_common::config::RedisConfig {
        key_prefix: format!("elsewhere:{}", uuid::Uuid::new_v4().simple()),
        ..redis_tls::single_node()
    };
    let error = refused(&stack, &event, redis).await;
    assert!(error.contains("lacks a permission") && error.to_ascii_uppercase().contains("NOPERM"), "{error}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_missing_or_non_pem_ca_file_or_an_unreadable_password_fails_the_build() {
    let stack = TestStack::builder().build().await;
    let build = |redis| {
        let config = hookline_consumer::ConsumerConfig { redis, ..stack.consumer_config.clone() };
        hookline_consumer::Loaded::build(config).expect_err("refused at build").to_string()
    };
    let mut redis = redis_tls::single_node();
    redis.tls = Some(RedisTls { ca_file: Some("/nonexistent/redis-ca.pem".to_owned()), ..RedisTls::default() });
    let error = build(redis);
    assert!(error.contains("redis.tls.ca_file: cannot read /nonexistent/redis-ca.pem"), "{error}");

    let mut redis = redis_tls::single_node();
    // A key is not a certificate.
    redis.tls = Some(RedisTls { ca_file: Some(redis_tls::tls_file("client.key")), ..RedisTls::default() });
    assert!(build(redis).contains("holds no PEM certificate"));

    let redis = hookline_common::config::RedisConfig {
        password: Some(SecretRef::from_file("redis", "/nonexistent/redis-password")),
        ..redis_tls::single_node()
    };
    let error = build(redis);
    assert!(error.contains("redis.password: secret `redis`: cannot read"), "{error}");

    let redis = hookline_common::config::RedisConfig {
        url: "rediss://hookline:hunter2@127.0.0.1:6379".to_owned(),
        ..redis_tls::single_node()
    };
    let error = build(redis);
    assert!(error.contains("redis.url carries credentials") && !error.contains("hunter2"), "{error}");
    stack.shutdown().await;
}

#[tokio::test]
async fn the_consumer_process_exits_non_zero_with_one_line_on_a_refused_password() {
    let (stack, _event) = stack_with_one_event().await;
    let config = hookline_consumer::ConsumerConfig {
        redis: hookline_common::config::RedisConfig {
            password: Some(redis_tls::secret_file("wrong")),
            ..redis_tls::single_node()
        },
        ..stack.consumer_config.clone()
    };
    let (succeeded, stderr) =
        redis_tls::run_consumer_process_to_exit(env!("CARGO_BIN_EXE_test-consumer"), &config).await;
    assert!(!succeeded, "a non-zero exit");
    let lines: Vec<&str> = stderr.lines().filter(|line| !line.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].contains("refused to authenticate user `hookline`"), "{stderr}");
    stack.shutdown().await;
}

/// How long the TLS Redis stays unreachable: long enough for several connect attempts (one a second).
const UNREACHABLE_FOR: Duration = Duration::from_secs(4);

#[tokio::test]
async fn an_unreachable_tls_redis_is_waited_for_then_used() {
    let late = LatePort::closed().await;
    let mut redis = redis_tls::single_node();
    let target = redis.url.trim_start_matches("rediss://").trim_end_matches('/').to_owned();
    redis.url = format!("rediss://127.0.0.1:{}", late.port);
    let mut stack = TestStack::builder().redis(redis).build().await;
    let event = Delivery::new(format!(r#"{{"waited":"{}"}}"#, uuid::Uuid::new_v4()).into_bytes());
    stack.post_accepted(&event).await;
    stack.start_consumer().await;

    // The outage is the condition under test, so its length is fixed, not waited for.
    tokio::time::sleep(UNREACHABLE_FOR).await;
    assert_eq!(stack.handler.count(&event.delivery_id), 0, "nothing is processed without Redis");

    let forwarder = late.forward_to(target).await;
    eventually(Duration::from_secs(30), "the waiting consumer connects over TLS and processes", || async {
        stack.handler.count(&event.delivery_id) == 1
    })
    .await;
    stack.shutdown().await;
    forwarder.abort();
}
