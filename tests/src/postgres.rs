//! What the `postgres` handler's tests share: a connection to the stack's PostgreSQL as the test role, a handler
//! config, the migration a user runs once, and a consumer started from its config as the binary would.

use hookline_consumer::{
    ConsumerConfig,
    config::{HandlerConfig, postgres::PostgresConfig},
};
use tokio_postgres::{Client, NoTls};

use crate::{TestStack, postgres_config};

/// A connection to the stack's PostgreSQL (no TLS: the tests' own reads and writes, not the handler's).
pub async fn connect() -> Client {
    let (client, connection) = postgres_config().connect(NoTls).await.expect("connect to the stack's PostgreSQL");
    tokio::spawn(connection);
    client
}

/// A `[handler]` of kind `postgres`.
pub fn postgres_handler(postgres: PostgresConfig) -> HandlerConfig {
    HandlerConfig { kind: "postgres".into(), postgres: Some(postgres), ..HandlerConfig::default() }
}

/// Runs the migration of every postgres handler of `config`, twice (it is idempotent), as
/// `hookline-consumer migrate` would.
pub async fn migrate(config: &ConsumerConfig) {
    for (place, handler) in hookline_consumer::handler::postgres::configured(config).expect("postgres handlers") {
        handler.migrate().await.unwrap_or_else(|problem| panic!("{place}: {problem}"));
        handler.migrate().await.expect("the migration runs twice");
    }
}

/// Starts the stack's consumer with the handler its config builds (as the binary does).
pub async fn start_configured_consumer(stack: &mut TestStack) {
    let config = stack.consumer_config.clone();
    let handler = hookline_consumer::Loaded::build(config.clone()).expect("valid config").handler;
    stack.start_consumer_with(config, handler).await;
}
