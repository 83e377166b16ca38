//! The local stack `scripts/stack` runs: where its brokers and Redis listen (overridden by `KAFKA_BROKERS`,
//! `REDIS_URL`, ... from `eval "$(scripts/stack env)"`), driving its script from a fault test, and waiting for a
//! condition to hold.

use std::{
    future::Future,
    time::{Duration, Instant},
};

use hookline_common::config::KafkaConfig;

pub fn brokers() -> String {
    std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".to_owned())
}

/// The single-node stack's brokers over PLAINTEXT, as a [`KafkaConfig`] (other keys default).
pub fn plaintext_kafka() -> KafkaConfig {
    KafkaConfig { brokers: brokers(), ..KafkaConfig::default() }
}

/// The three brokers of `scripts/stack up --brokers 3` (`CLUSTER_KAFKA_BROKERS`).
pub fn cluster_brokers() -> String {
    std::env::var("CLUSTER_KAFKA_BROKERS")
        .unwrap_or_else(|_| "127.0.0.1:19192,127.0.0.1:19194,127.0.0.1:19196".to_owned())
}

/// Seed nodes of the test Redis Cluster (`scripts/stack start-redis-cluster`).
pub fn redis_cluster_urls() -> String {
    std::env::var("REDIS_CLUSTER_URLS")
        .unwrap_or_else(|_| "redis://127.0.0.1:16380,redis://127.0.0.1:16381,redis://127.0.0.1:16382".to_owned())
}

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:16379".to_owned())
}

/// Runs `scripts/stack <verb>` (the fault tests stop and start the shared broker and Redis) and asserts it
/// succeeded.
pub fn stack_script(verb: &str) {
    stack_script_args(&[verb]);
}

/// Runs `scripts/stack` with these arguments (`["stop-broker", "2", "--kill"]`) and asserts it succeeded.
pub fn stack_script_args(args: &[&str]) {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/stack");
    let status = std::process::Command::new(script).args(args).status().expect("run scripts/stack");
    assert!(status.success(), "scripts/stack {} failed", args.join(" "));
}

/// Runs `scripts/stack <verb>` when dropped: brings a stopped service back even when an assertion fails
/// mid-test, so later test binaries find it running. `StackRestore("start-kafka")`.
#[derive(Debug)]
pub struct StackRestore(pub &'static str);

impl Drop for StackRestore {
    fn drop(&mut self) {
        stack_script(self.0);
    }
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

/// A `[handler.postgres]` for the stack's PostgreSQL over TLS (the stack's CA), its password from the stack's file,
/// with `dedupe_table` in `schema` and the default pool and timeouts; the caller sets the work.
pub fn postgres_handler_config(schema: &str) -> hookline_consumer::config::postgres::PostgresConfig {
    let url =
        std::env::var("POSTGRES_URL").unwrap_or_else(|_| "postgres://hookline@127.0.0.1:15432/hookline".to_owned());
    let stack_dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.stack");
    let password_file = std::env::var("POSTGRES_PASSWORD_FILE")
        .unwrap_or_else(|_| stack_dir.join("postgres-password").display().to_string());
    let ca_file =
        std::env::var("POSTGRES_CA_FILE").unwrap_or_else(|_| stack_dir.join("tls/ca.pem").display().to_string());
    hookline_consumer::config::postgres::PostgresConfig {
        url: Some(format!("{url}?sslmode=require")),
        password: Some(hookline_common::config::SecretRef::from_file("postgres", password_file)),
        ca_file: Some(ca_file.into()),
        dedupe_table: format!("{schema}.processed"),
        ..Default::default()
    }
}

/// The stack's PostgreSQL as its test role (`POSTGRES_URL` without a password; the password from
/// `POSTGRES_PASSWORD_FILE`, as `scripts/stack env` exports them).
pub fn postgres_config() -> tokio_postgres::Config {
    let url =
        std::env::var("POSTGRES_URL").unwrap_or_else(|_| "postgres://hookline@127.0.0.1:15432/hookline".to_owned());
    let mut config: tokio_postgres::Config = url.parse().expect("POSTGRES_URL is a PostgreSQL URL");
    let password_file = std::env::var("POSTGRES_PASSWORD_FILE").unwrap_or_else(|_| {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.stack/postgres-password").display().to_string()
    });
    let password = std::fs::read_to_string(&password_file)
        .unwrap_or_else(|error| panic!("{password_file}: {error} (scripts/stack up makes it)"));
    config.password(password.trim());
    config
}
