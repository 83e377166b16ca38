//! The one way the services connect to Redis: a single Redis through a reconnecting connection manager, or a Redis
//! Cluster whose connection routes each key to its slot's node, both with `redis.response_timeout_ms` on every
//! connect and reply. A [`RedisConnection`] runs commands, pipelines and scripts like any async connection. TLS,
//! the client certificate and the ACL user's credentials come from [`crate::redis_security`].

use std::time::Duration;

use redis::{
    Cmd, Pipeline, RedisFuture, RedisResult, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster_async::ClusterConnection,
};

use crate::{config::RedisConfig, redis_security::RedisSecurity};

/// Reconnection attempts a call may make before it fails (the caller retries after that).
const RETRIES: usize = 2;
/// Longest pause between a single Redis's reconnection attempts.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);

/// A connection to the configured Redis or Redis Cluster. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub enum RedisConnection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self {
            Self::Single(_) => "RedisConnection::Single",
            Self::Cluster(_) => "RedisConnection::Cluster",
        })
    }
}

impl RedisConnection {
    /// Connects as `config` says. Fails when Redis cannot be reached now (the caller retries) or refuses the
    /// configuration ([`crate::redis_security::refusal`] tells which: the caller stops). The CA, client key and
    /// password are read now.
    pub async fn connect(config: &RedisConfig) -> RedisResult<Self> {
        let security = RedisSecurity::load(config).map_err(crate::redis_security::invalid_settings)?;
        crate::redis_security::install_crypto_provider();
        let timeout = Duration::from_millis(config.response_timeout_ms);
        if config.cluster {
            let client = security
                .cluster_builder(config.urls().map(str::to_owned).collect::<Vec<_>>())
                .response_timeout(timeout)
                .connection_timeout(timeout)
                .retries(RETRIES as u32)
                .build()?;
            Ok(Self::Cluster(client.get_async_connection().await?))
        } else {
            let client = security.client(config.url.trim())?;
            let manager_config = security.manager_config(
                ConnectionManagerConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_connection_timeout(Some(timeout))
                    .set_number_of_retries(RETRIES)
                    .set_max_delay(MAX_RECONNECT_DELAY),
            );
            Ok(Self::Single(client.get_connection_manager_with_config(manager_config).await?))
        }
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}
