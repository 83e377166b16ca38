//! What the reconciler's tests share: sources pointing at the provider fakes, and [`TestReconciler`], the
//! reconciler with its indexer running in-process on a [`TestStack`]'s inbound topic.

use std::sync::Arc;

use bytes::Bytes;
use hookline_common::{config::SecretRef, wire};
use hookline_reconciler::{
    Mode, Outcome, Provider, ReconcileError, Reconciler, ReconcilerConfig, Report, RunRequest, SourceConfig,
    metrics::Metrics,
};
use tokio_util::sync::CancellationToken;

use crate::{
    TestStack,
    provider_fakes::{FakeGithub, FakePaddle, GITHUB_HOOK, PADDLE_SETTING},
    redis_url,
};

pub const API_TOKEN: &str = "provider-api-token-for-tests";
pub const STRIPE_KEY: &str = "sk_test_123";

pub fn temp_file(name: &str, contents: &str) -> String {
    let path = std::env::temp_dir().join(format!("hookline-reconciler-{}-{name}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, contents).expect("write temp file");
    path.display().to_string()
}

pub fn github_source(github: &FakeGithub, token: &str) -> SourceConfig {
    SourceConfig {
        api_url: Some(github.api_url()),
        allow_custom_api_url: true,
        hook: Some(GITHUB_HOOK.to_owned()),
        settle_s: 0,
        ..SourceConfig::new("github", Provider::Github, SecretRef::from_file("github-api", temp_file("token", token)))
    }
}

pub fn paddle_source(paddle: &FakePaddle) -> SourceConfig {
    SourceConfig {
        api_url: Some(paddle.api_url()),
        allow_custom_api_url: true,
        notification_setting_id: Some(PADDLE_SETTING.to_owned()),
        settle_s: 0,
        ..SourceConfig::new("paddle", Provider::Paddle, SecretRef::from_file("paddle-api", temp_file("key", API_TOKEN)))
    }
}

/// A reconciler config for `stack`'s Kafka and Redis, with an index group and a Redis prefix of its own.
pub fn test_config(stack: &TestStack, sources: Vec<SourceConfig>, complete_since: Option<&str>) -> ReconcilerConfig {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let mut config = ReconcilerConfig {
        kafka: stack.kafka.clone(),
        index_group_id: format!("test-{run_id}-index"),
        index_complete_since: complete_since.map(str::to_owned),
        sources,
        ..ReconcilerConfig::default()
    };
    config.redis.url = redis_url();
    config.redis.key_prefix = format!("test:{run_id}:reconcile");
    config
}

/// The reconciler service as `hookline-reconciler serve` runs it ([`hookline_reconciler::run`]), in-process, with
/// its admin listener on a loopback port of its own.
#[allow(missing_debug_implementations)]
pub struct ReconcilerService {
    pub admin_addr: std::net::SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), ReconcileError>>,
}

impl ReconcilerService {
    /// Starts the service on `stack` with `sources`, its index complete since 2000 (the fakes' histories are older
    /// than the indexer).
    pub async fn start(stack: &TestStack, sources: Vec<SourceConfig>) -> Self {
        let config = test_config(stack, sources, Some("2000-01-01T00:00:00Z"));
        let loaded = hookline_reconciler::Loaded::build(config).expect("valid config");
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let admin_addr = admin.local_addr().expect("addr");
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(hookline_reconciler::run(loaded, admin, shutdown.clone()));
        Self { admin_addr, shutdown, task }
    }

    /// Shuts the service down and asserts it ended cleanly.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("service task").expect("service ran cleanly");
    }
}

/// The reconciler for a [`TestStack`]: its indexer running in-process on the stack's inbound topic, with its own
/// consumer group and Redis prefix.
#[allow(missing_debug_implementations)]
pub struct TestReconciler {
    pub reconciler: Reconciler,
    pub metrics: Arc<Metrics>,
    pub shutdown: CancellationToken,
}

impl TestReconciler {
    pub async fn start(stack: &TestStack, sources: Vec<SourceConfig>) -> Self {
        // The fakes' histories (and stripe-mock's 2009 fixtures) predate the indexer; the test topics hold
        // every record ever accepted, so the index is complete from the start.
        Self::start_with(stack, sources, Some("2000-01-01T00:00:00Z")).await
    }

    pub async fn start_with(stack: &TestStack, sources: Vec<SourceConfig>, complete_since: Option<&str>) -> Self {
        let config =
            ReconcilerConfig { index_catch_up_timeout_ms: 30_000, ..test_config(stack, sources, complete_since) };
        let loaded = hookline_reconciler::Loaded::build(config.clone()).expect("valid reconciler config");
        let metrics = Arc::new(Metrics::register(&prometheus_registry()).expect("metrics"));
        let reconciler = Reconciler::connect(loaded, metrics.clone()).await.expect("connect");
        let shutdown = CancellationToken::new();
        tokio::spawn(hookline_reconciler::index::run_indexer(
            config.kafka.clone(),
            config.index_group_id.clone(),
            config.sources.clone(),
            config.index_complete_since_ms().expect("valid"),
            reconciler.store().clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
        Self { reconciler, metrics, shutdown }
    }

    pub async fn run(&self, source: &str, mode: Mode) -> Result<Report, ReconcileError> {
        let now = wire::now_ms();
        self.run_window(source, mode, now - 3_600_000, now + 60_000).await
    }

    pub async fn run_window(
        &self,
        source: &str,
        mode: Mode,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Report, ReconcileError> {
        let request = RunRequest { source: source.to_owned(), from_ms, to_ms, mode, again_after_request: false };
        self.reconciler.run(&request).await
    }
}

impl Drop for TestReconciler {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub fn prometheus_registry() -> prometheus::Registry {
    prometheus::Registry::new()
}

pub fn outcomes(report: &Report) -> Vec<Outcome> {
    report.missed.iter().map(|missed| missed.outcome).collect()
}

pub fn push_body(n: usize) -> Bytes {
    Bytes::from(format!(r#"{{"ref":"refs/heads/main","after":"{n:040}","repository":{{"full_name":"acme/widgets"}}}}"#))
}

/// `GET http://{addr}{path}` on a service's admin listener: the status and body (0 and empty if unreachable).
pub async fn admin_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use http_body_util::BodyExt;
    let client: hyper_util::client::legacy::Client<_, http_body_util::Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let request = http::Request::get(format!("http://{addr}{path}"))
        .body(http_body_util::Full::new(Bytes::new()))
        .expect("request");
    match client.request(request).await {
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
        Err(_) => (0, String::new()),
    }
}
