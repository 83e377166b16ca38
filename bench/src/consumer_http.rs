//! The consumer with the `http` handler against a local sink (issue 21's rows, "the http handler against a slow
//! sink" and "a healthy source beside a failing one"): the sink, the fill of gateway-shaped records per source,
//! and one consumer instance per run. The naive peer (`naive_consumer.rs`) reads the same sink.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use hookline_common::{config::KafkaConfig, kafka::QuietContext};

use crate::{
    consumer_bench::{Instance, free_port},
    record_key::BenchRecordKey,
};

/// What the runs of hookline's consumer with the `http` handler share (`consumer-http`, `consumer-peer`, `fan-out-egress`).
#[derive(Debug, clap::Args)]
pub struct HttpConsumerArgs {
    #[arg(long, env = "KAFKA_BROKERS")]
    pub brokers: String,
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: String,
    #[arg(long, env = "DLQ_TOPIC", default_value = "webhooks.dlq")]
    pub dlq_topic: String,
    #[arg(long, env = "DLQ_STATUS_TOPIC", default_value = "webhooks.dlq-status")]
    pub dlq_status_topic: String,
    #[arg(long, default_value_t = 256)]
    pub max_in_flight: usize,
    #[arg(long, default_value_t = 1024)]
    pub body_bytes: usize,
    /// The `consumer` binary (a release build).
    #[arg(long)]
    pub consumer_bin: PathBuf,
    #[arg(long)]
    pub work_dir: PathBuf,
    #[arg(long, default_value_t = 180)]
    pub timeout_s: u64,
}

impl HttpConsumerArgs {
    /// The bench's configuration with these, its work directory created and a fresh record key.
    pub fn config(self, delays_ms: Vec<u64>, partitions: Vec<i32>) -> anyhow::Result<HttpBenchConfig> {
        std::fs::create_dir_all(&self.work_dir)?;
        Ok(HttpBenchConfig {
            brokers: self.brokers,
            redis_url: self.redis_url,
            dlq_topic: self.dlq_topic,
            dlq_status_topic: self.dlq_status_topic,
            consumer_bin: self.consumer_bin,
            work_dir: self.work_dir,
            timeout: Duration::from_secs(self.timeout_s),
            body_bytes: self.body_bytes,
            delays_ms,
            partitions,
            max_in_flight: self.max_in_flight,
            isolation_delays_ms: Vec::new(),
            isolation_events: None,
            breaker_cooldown_ms: None,
            failing_source_topic: false,
            kafka_properties: Vec::new(),
            record_key: BenchRecordKey::generate()?,
        })
    }
}

/// The `http` handler against a local sink that answers 200 after `delay_ms` (and 503 at once for the failing
/// source): events/s of one consumer instance for each delay and partition count, and the healthy source's rate
/// alone and beside a source whose downstream always answers 503. Each run gets fresh topics (inbound and retry),
/// a fresh group and a fresh dedupe prefix.
#[derive(Debug, Clone)]
pub struct HttpBenchConfig {
    pub brokers: String,
    pub redis_url: String,
    pub dlq_topic: String,
    pub dlq_status_topic: String,
    pub consumer_bin: PathBuf,
    pub work_dir: PathBuf,
    pub timeout: Duration,
    pub body_bytes: usize,
    pub delays_ms: Vec<u64>,
    pub partitions: Vec<i32>,
    /// `processing.max_in_flight` (and the healthy route's limit).
    pub max_in_flight: usize,
    /// The delays of the isolation runs (healthy alone, then beside the 503 source), on 6 partitions.
    pub isolation_delays_ms: Vec<u64>,
    /// Healthy events per isolation run (as many failing ones beside); `None`: by D, as the throughput runs.
    pub isolation_events: Option<u64>,
    /// `processing.breaker_cooldown_ms`; `None`: the consumer's default.
    pub breaker_cooldown_ms: Option<u64>,
    /// The failing source in its own topic (`service.source_topics`) instead of sharing the inbound one.
    pub failing_source_topic: bool,
    /// Extra librdkafka properties for the consumer (`[kafka.properties]`), `key=value`.
    pub kafka_properties: Vec<String>,
    /// The run's record key: the fill signs with it, the consumer verifies with it.
    pub record_key: BenchRecordKey,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct HttpRow {
    /// `http`, `healthy_alone` or `healthy_beside_503`.
    pub kind: String,
    pub partitions: i32,
    pub delay_ms: u64,
    /// Healthy events timed (the failing ones are not counted).
    pub events: u64,
    pub duration_s: f64,
    pub events_per_s: f64,
    /// The most requests the sink saw in flight at once.
    pub sink_max_in_flight: usize,
    /// max_in_flight / D (no bound at D = 0).
    pub concurrency_bound_per_s: Option<f64>,
    /// The consumer process's peak resident memory (`VmHWM`), KiB.
    pub consumer_peak_rss_kib: Option<u64>,
    /// The failing source had its own topic (`service.source_topics`).
    pub failing_source_topic: bool,
    /// Copies to the retry topic (`hookline_consumer_deferred_total` plus `_retries_total`) of the failing source
    /// when the healthy one was done, per failing record.
    pub failing_copies_per_record: Option<f64>,
}

#[derive(Debug, Default)]
pub(crate) struct Sink {
    in_flight: std::sync::atomic::AtomicUsize,
    max_in_flight: std::sync::atomic::AtomicUsize,
}

/// Serves the bench downstream: `/healthy` answers 200 after `delay`, `/failing` answers 503 at once.
pub(crate) async fn serve_sink(listener: tokio::net::TcpListener, delay: Duration, sink: std::sync::Arc<Sink>) {
    use std::sync::atomic::Ordering;
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let sink = sink.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let sink = sink.clone();
                async move {
                    let failing = request.uri().path() == "/failing";
                    let _ = http_body_util::BodyExt::collect(request.into_body()).await;
                    let status = if failing {
                        http::StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        let now = sink.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
                        sink.max_in_flight.fetch_max(now, Ordering::Relaxed);
                        tokio::time::sleep(delay).await;
                        sink.in_flight.fetch_sub(1, Ordering::Relaxed);
                        http::StatusCode::OK
                    };
                    let mut response = http::Response::new(http_body_util::Full::new(bytes::Bytes::new()));
                    *response.status_mut() = status;
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Produces `n` gateway-shaped records per source (interleaved), signed with `keys` as the gateway signs, and
/// waits for every acknowledgement.
pub(crate) async fn fill_sources(
    brokers: &str,
    topic: &str,
    sources: &[&str],
    n: u64,
    body_bytes: usize,
    keys: &hookline_common::record_auth::RecordKeys,
) -> anyhow::Result<()> {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let kafka = KafkaConfig { brokers: brokers.to_owned(), ..KafkaConfig::default() };
    let producer: FutureProducer<QuietContext> =
        hookline_common::kafka::producer_config(&kafka).create_with_context(QuietContext::new("bench-fill"))?;
    let mut pending = std::collections::VecDeque::new();
    for index in 0..n {
        for source in sources {
            let event_id = format!("{source}-{index}-{}", uuid::Uuid::new_v4().simple());
            let meta = hookline_common::wire::EventMeta {
                source: (*source).to_owned(),
                event_id: event_id.clone(),
                event_type: Some("push".to_owned()),
                received_at_ms: hookline_common::wire::now_ms(),
                content_type: Some("application/json".to_owned()),
                secret_id: "bench".to_owned(),
                ordering_key: None,
            };
            let body = crate::signing::json_body(&event_id, body_bytes);
            let headers = keys.sign(
                topic,
                Some(event_id.as_bytes()),
                Some(&body),
                Some(&hookline_common::wire::event_headers(&meta)),
                hookline_common::wire::now_ms(),
            )?;
            let record = FutureRecord::to(topic).key(event_id.as_str()).payload(&body).headers(headers);
            let delivery = producer.send_result(record).map_err(|(error, _)| error)?;
            pending.push_back(delivery);
            if pending.len() >= 10_000
                && let Some(delivery) = pending.pop_front()
            {
                delivery.await?.map_err(|(error, _)| error)?;
            }
        }
    }
    for delivery in pending {
        delivery.await?.map_err(|(error, _)| error)?;
    }
    Ok(())
}

pub async fn run_http(config: &HttpBenchConfig) -> anyhow::Result<Vec<HttpRow>> {
    let mut rows = Vec::new();
    for &partitions in &config.partitions {
        for &delay_ms in &config.delays_ms {
            let row = http_run(config, "http", partitions, delay_ms, false).await?;
            eprintln!(
                "consumer-bench http: {partitions} partition(s), D = {delay_ms} ms: {:.0} events/s, sink max {} in flight",
                row.events_per_s, row.sink_max_in_flight
            );
            rows.push(row);
        }
    }
    for &delay_ms in &config.isolation_delays_ms {
        for (kind, with_failing) in [("healthy_alone", false), ("healthy_beside_503", true)] {
            let row = http_run(config, kind, 6, delay_ms, with_failing).await?;
            eprintln!("consumer-bench http: {kind}, D = {delay_ms} ms: {:.0} healthy events/s", row.events_per_s);
            rows.push(row);
        }
    }
    Ok(rows)
}

async fn http_run(
    config: &HttpBenchConfig,
    kind: &str,
    partitions: i32,
    delay_ms: u64,
    with_failing: bool,
) -> anyhow::Result<HttpRow> {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let topic = format!("hookline-bench-http-{run_id}");
    let retry_topic = format!("{topic}-retry");
    let specs = [&topic, &retry_topic].map(|name| hookline_common::kafka::TopicSpec {
        name: name.clone(),
        partitions,
        compacted: false,
    });
    hookline_common::kafka::ensure_topics(
        &KafkaConfig { brokers: config.brokers.clone(), ..KafkaConfig::default() },
        &specs,
        1,
    )
    .await?;
    // Enough events for several seconds at the expected rate, bounded for the slow cases.
    let by_delay = match delay_ms {
        0..=5 => 20_000,
        6..=20 => 15_000,
        _ => 6_000,
    };
    let n_events: u64 = if kind == "http" { by_delay } else { config.isolation_events.unwrap_or(by_delay) };
    let failing_topic = (with_failing && config.failing_source_topic).then(|| format!("{topic}-failing"));
    let sources: &[&str] = match (with_failing, &failing_topic) {
        (true, None) => &["bench-healthy", "bench-failing"],
        _ => &["bench-healthy"],
    };
    fill_sources(&config.brokers, &topic, sources, n_events, config.body_bytes, config.record_key.keys()).await?;
    if let Some(failing_topic) = &failing_topic {
        let spec = hookline_common::kafka::TopicSpec { name: failing_topic.clone(), partitions, compacted: false };
        let kafka = KafkaConfig { brokers: config.brokers.clone(), ..KafkaConfig::default() };
        hookline_common::kafka::ensure_topics(&kafka, &[spec], 1).await?;
        let keys = config.record_key.keys();
        fill_sources(&config.brokers, failing_topic, &["bench-failing"], n_events, config.body_bytes, keys).await?;
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sink_addr = listener.local_addr()?;
    let sink = std::sync::Arc::new(Sink::default());
    let sink_task = tokio::spawn(serve_sink(listener, Duration::from_millis(delay_ms), sink.clone()));
    let measured =
        measure_consumer_with(config, &topic, &retry_topic, failing_topic.as_deref(), sink_addr, n_events).await;
    sink_task.abort();
    let measured = measured?;
    Ok(HttpRow {
        kind: kind.to_owned(),
        partitions,
        delay_ms,
        events: n_events,
        duration_s: measured.duration_s,
        events_per_s: measured.events_per_s,
        sink_max_in_flight: sink.max_in_flight.load(std::sync::atomic::Ordering::Relaxed),
        concurrency_bound_per_s: (delay_ms > 0).then(|| config.max_in_flight as f64 * 1000.0 / delay_ms as f64),
        consumer_peak_rss_kib: measured.peak_rss_kib,
        failing_source_topic: failing_topic.is_some(),
        failing_copies_per_record: with_failing.then(|| measured.failing_copies as f64 / n_events as f64),
    })
}

/// What one consumer instance did with a filled topic.
pub(crate) struct Measured {
    pub(crate) duration_s: f64,
    pub(crate) events_per_s: f64,
    pub(crate) peak_rss_kib: Option<u64>,
    /// The failing source's copies to the retry topic (deferrals and retries) when the healthy source was done.
    pub(crate) failing_copies: u64,
}

/// Starts one consumer instance (fresh group, fresh dedupe prefix) with the `http` handler posting `bench-healthy`
/// to `sink_addr`'s `/healthy` (and `bench-failing` to `/failing`), and times it from its first processed event
/// until `n_events` of `bench-healthy` are processed.
pub(crate) async fn measure_consumer(
    config: &HttpBenchConfig,
    topic: &str,
    retry_topic: &str,
    sink_addr: SocketAddr,
    n_events: u64,
) -> anyhow::Result<Measured> {
    measure_consumer_with(config, topic, retry_topic, None, sink_addr, n_events).await
}

/// [`measure_consumer`], with the failing source in `failing_topic` (a source topic of the service) when given.
async fn measure_consumer_with(
    config: &HttpBenchConfig,
    topic: &str,
    retry_topic: &str,
    failing_topic: Option<&str>,
    sink_addr: SocketAddr,
    n_events: u64,
) -> anyhow::Result<Measured> {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let admin = free_port()?;
    let path = config.work_dir.join(format!("consumer-http-{run_id}.toml"));
    std::fs::write(
        &path,
        format!(
            r#"admin_addr = "{admin}"
[kafka]
brokers = "{brokers}"
inbound_topic = "{topic}"
retry_topic = "{retry_topic}"
dlq_topic = "{dlq}"
dlq_status_topic = "{dlq_status}"
group_id = "hookline-bench-{run_id}"
{record_auth}{service}[kafka.properties]
{properties}
[redis]
url = "{redis}"
key_prefix = "hookline:bench:{run_id}"
dedupe_ttl_s = 600
[handler]
kind = "http"
url = "http://{sink_addr}/healthy"
[processing]
max_in_flight = {max_in_flight}
route_max_in_flight = {max_in_flight}
{cooldown}[[routes]]
source = "bench-failing"
max_in_flight = {failing_limit}
handler = {{ kind = "http", url = "http://{sink_addr}/failing" }}
"#,
            record_auth = config.record_key.toml(),
            service =
                failing_topic.map_or_else(String::new, |topic| format!("[service]\nsource_topics = [{topic:?}]\n")),
            brokers = config.brokers,
            dlq = config.dlq_topic,
            dlq_status = config.dlq_status_topic,
            redis = config.redis_url,
            max_in_flight = config.max_in_flight,
            failing_limit = (config.max_in_flight / 4).max(1),
            cooldown =
                config.breaker_cooldown_ms.map_or_else(String::new, |ms| format!("breaker_cooldown_ms = {ms}\n")),
            properties = config
                .kafka_properties
                .iter()
                .filter_map(|property| property.split_once('='))
                .map(|(key, value)| format!("{key:?} = {value:?}\n"))
                .collect::<String>(),
        ),
    )?;
    let child = Command::new(&config.consumer_bin)
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let instance = Instance { child, admin };
    let deadline = Instant::now() + config.timeout;
    let mut first: Option<(Instant, u64)> = None;
    let (done_at, first_at, first_count) = loop {
        anyhow::ensure!(Instant::now() < deadline, "{topic}: not done within {:?}", config.timeout);
        let processed = scrape_processed(instance.admin, "bench-healthy").unwrap_or(0);
        let now = Instant::now();
        if processed > 0 && first.is_none() {
            first = Some((now, processed));
        }
        if processed >= n_events {
            let (first_at, first_count) = first.expect("set before done");
            break (now, first_at, first_count);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let peak_rss_kib = peak_rss_kib(instance.child.id());
    let failing_copies = scrape_counter(instance.admin, "hookline_consumer_deferred_total", "bench-failing")
        .unwrap_or(0)
        + scrape_counter(instance.admin, "hookline_consumer_retries_total", "bench-failing").unwrap_or(0);
    drop(instance);
    let duration_s = done_at.duration_since(first_at).as_secs_f64().max(1e-3);
    Ok(Measured {
        duration_s,
        events_per_s: (n_events - first_count) as f64 / duration_s,
        peak_rss_kib,
        failing_copies,
    })
}

/// `VmHWM` of a process, KiB (Linux).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The sum of counter `name` of one source, from one instance.
fn scrape_counter(admin: SocketAddr, name: &str, source: &str) -> Option<u64> {
    Some(crate::consumer_bench::scrape_metrics(admin)?.sum(name, &[("source", source)]) as u64)
}

/// `hookline_consumer_events_total{source, outcome="processed"}` of one source, from one instance.
fn scrape_processed(admin: SocketAddr, source: &str) -> Option<u64> {
    let scrape = crate::consumer_bench::scrape_metrics(admin)?;
    Some(scrape.sum("hookline_consumer_events_total", &[("source", source), ("outcome", "processed")]) as u64)
}
