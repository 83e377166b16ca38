//! Redis over TLS with the stack's ACL user: the configs the TLS tests give their consumers, read from
//! `scripts/stack env` (`REDIS_TLS_URL`, `REDIS_TLS_CLUSTER_URLS`, `REDIS_CA_FILE`, `REDIS_CLIENT_CERT_FILE`,
//! `REDIS_CLIENT_KEY_FILE`, `REDIS_ACL_USER`, `REDIS_ACL_PASSWORD_FILE`; the defaults are the stack's), and a
//! consumer run to its refusal.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    sync::Arc,
    time::Duration,
};

use hookline_common::config::{RedisConfig, RedisTls, SecretRef};
use hookline_consumer::{ConsumerConfig, handler::Handler};
use tokio::net::{TcpListener, TcpStream};

fn var_or(name: &str, default: impl FnOnce() -> String) -> String {
    std::env::var(name).unwrap_or_else(|_| default())
}

/// `<repo>/.stack`, where `scripts/stack` keeps its state when `STACK_DIR` is not set.
fn default_stack_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.stack")
}

/// A file of the stack's throwaway certificates (`ca.pem`, `other-ca.pem`, `client.key`, ...).
pub fn tls_file(name: &str) -> String {
    let dir = std::env::var("REDIS_CA_FILE")
        .ok()
        .and_then(|ca| PathBuf::from(ca).parent().map(PathBuf::from))
        .unwrap_or_else(|| default_stack_dir().join("tls"));
    dir.join(name).display().to_string()
}

pub fn tls_url() -> String {
    var_or("REDIS_TLS_URL", || "rediss://127.0.0.1:16390".to_owned())
}

pub fn tls_cluster_urls() -> String {
    var_or("REDIS_TLS_CLUSTER_URLS", || {
        "rediss://127.0.0.1:16391,rediss://127.0.0.1:16392,rediss://127.0.0.1:16393".to_owned()
    })
}

pub fn acl_user() -> String {
    var_or("REDIS_ACL_USER", || "hookline".to_owned())
}

pub fn acl_password_file() -> String {
    var_or("REDIS_ACL_PASSWORD_FILE", || default_stack_dir().join("redis-acl-password").display().to_string())
}

/// A fresh key prefix inside the ACL user's keys (`~hookline:*`).
pub fn key_prefix() -> String {
    format!("hookline:tls-{}", uuid::Uuid::new_v4().simple())
}

/// The stack's single Redis over TLS (its CA), as the ACL user (password from its file), on a fresh key prefix.
pub fn single_node() -> RedisConfig {
    RedisConfig {
        url: tls_url(),
        key_prefix: key_prefix(),
        username: Some(acl_user()),
        password: Some(SecretRef::from_file("redis", acl_password_file())),
        tls: Some(RedisTls { ca_file: Some(var_or("REDIS_CA_FILE", || tls_file("ca.pem"))), ..RedisTls::default() }),
        ..RedisConfig::default()
    }
}

/// The stack's Redis Cluster over TLS, which requires a client certificate: [`single_node`]'s settings plus the
/// stack's client certificate and key.
pub fn cluster() -> RedisConfig {
    let mut config = single_node();
    config.url = tls_cluster_urls();
    config.cluster = true;
    if let Some(tls) = &mut config.tls {
        tls.client_cert_file = Some(var_or("REDIS_CLIENT_CERT_FILE", || tls_file("client.pem")));
        tls.client_key =
            Some(SecretRef::from_file("redis-client-key", var_or("REDIS_CLIENT_KEY_FILE", || tls_file("client.key"))));
    }
    config
}

/// A file holding `contents`, for a secret a test makes up (a wrong password).
pub fn secret_file(contents: &str) -> SecretRef {
    let path = std::env::temp_dir().join(format!("hookline-redis-tls-{}.secret", uuid::Uuid::new_v4()));
    std::fs::write(&path, contents).expect("write the secret file");
    SecretRef::from_file("redis", path.display().to_string())
}

/// How long a consumer with a refused configuration may take to say so: a connect or two.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(30);

/// Runs a consumer with `config` and `handler` until it stops on its own, and returns the error it stopped with.
/// Panics if it keeps running past the deadline (it waited instead of refusing) or ends without an error.
pub async fn run_consumer_until_refused(config: ConsumerConfig, handler: Arc<dyn Handler>) -> String {
    let loaded = hookline_consumer::Loaded::build(config).expect("a config that builds");
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let run = hookline_consumer::run(loaded.with_handler(handler), admin, shutdown.clone());
    let outcome = tokio::time::timeout(REFUSAL_DEADLINE, run).await;
    shutdown.cancel();
    match outcome {
        Ok(Err(error)) => error.to_string(),
        Ok(Ok(())) => panic!("the consumer ended without an error"),
        Err(_) => panic!("the consumer still waits after {REFUSAL_DEADLINE:?}: a refusal was taken for an outage"),
    }
}

/// Runs the `test-consumer` binary (`env!("CARGO_BIN_EXE_test-consumer")`) on `config` until it exits; returns
/// whether it succeeded and what it wrote to stderr.
pub async fn run_consumer_process_to_exit(binary: &str, config: &ConsumerConfig) -> (bool, String) {
    let config_file = std::env::temp_dir().join(format!("hookline-redis-tls-{}.toml", uuid::Uuid::new_v4()));
    let text = hookline_common::config::effective_toml(&config.effective().expect("printable config"))
        .expect("config as TOML");
    std::fs::write(&config_file, text).expect("write config");
    let mut child = Command::new(binary)
        .arg(&config_file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the consumer process");
    let stderr = child.stderr.take().expect("stderr");
    let waited = tokio::task::spawn_blocking(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut text).expect("read stderr");
        (child.wait().expect("wait"), text)
    });
    let (status, text) = tokio::time::timeout(REFUSAL_DEADLINE, waited)
        .await
        .expect("the consumer process exits instead of waiting")
        .expect("waiter");
    let _ = std::fs::remove_file(config_file);
    (status.success(), text)
}

/// A loopback port that refuses connections until [`Self::forward_to`] makes it forward them: a Redis that is
/// unreachable, then reachable.
#[derive(Debug)]
pub struct LatePort {
    pub port: u16,
}

impl LatePort {
    /// A port nothing listens on (bound once to find a free one, then closed).
    pub async fn closed() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        Self { port }
    }

    /// From now on, accepts on the port and forwards each connection, byte for byte, to `target` (`host:port`).
    pub async fn forward_to(&self, target: String) -> tokio::task::JoinHandle<()> {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.expect("bind the late port");
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        })
    }
}
