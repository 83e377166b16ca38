//! Consumer throughput: a topic is filled with gateway-shaped records, read once raw (a consumer-group member that
//! only fetches and detaches, the floor of what any consumer can do), then processed end to end by 1, 2, 4, ...
//! instances of the real `consumer` binary (two-phase Redis dedupe and the `log` handler, whose lines go to
//! `/dev/null`), each set in a fresh group with a fresh dedupe key prefix. Throughput is read from the
//! instances' own `hookline_consumer_events_total`, sampled every 100 ms.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener as StdTcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use hookline_common::{
    config::{KafkaConfig, Table},
    kafka::{QuietContext, consumer_config},
};
use rdkafka::{
    Message,
    consumer::{Consumer, StreamConsumer},
};

use crate::{
    ceilings::{KafkaCeilingConfig, kafka_ceiling},
    record_key::BenchRecordKey,
};

#[derive(Debug, Clone)]
pub struct ConsumerBenchConfig {
    pub brokers: String,
    pub redis_url: String,
    /// A fresh, existing topic; its partition count bounds the useful number of instances.
    pub topic: String,
    /// The run's record key: the fill signs with it, every consumer instance verifies with it.
    pub record_key: BenchRecordKey,
    /// Existing topics for the consumer's dead letters and statuses (none are expected).
    pub dlq_topic: String,
    pub dlq_status_topic: String,
    /// How long to fill the topic for (with the Kafka-ceiling producer).
    pub fill: Duration,
    pub body_bytes: usize,
    pub consumer_bin: PathBuf,
    pub instances: Vec<usize>,
    /// Where the consumers' config files go.
    pub work_dir: PathBuf,
    /// Give up on one measurement after this long.
    pub timeout: Duration,
    /// Tables merged over each consumer's config (a key here wins): how the bench runs the consumer over TLS and
    /// SASL (`[kafka] brokers`, `[kafka.tls]`, `[kafka.sasl]`, `[redis]`), while the fill and the raw consume
    /// stay on `brokers`.
    pub overlay: Option<Table>,
    /// Fill with unsigned records and let the consumers accept them (`accept_unsigned_until` an hour ahead): the
    /// consumer without its MAC check, to measure what the check costs.
    pub unsigned: bool,
}

/// `base` with every key of `overlay` set over it, tables merged key by key.
pub fn merge_overlay(base: &mut Table, overlay: &Table) {
    for (key, value) in overlay {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(base)), toml::Value::Table(overlay)) => merge_overlay(base, overlay),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ConsumerRow {
    /// `raw` or `end_to_end`.
    pub kind: String,
    pub instances: usize,
    pub events: u64,
    pub duration_s: f64,
    pub events_per_s: f64,
    /// End to end: events processed / skipped as duplicates / dead-lettered (must be all / 0 / 0).
    pub processed: u64,
    pub duplicates: u64,
    pub dead_lettered: u64,
    /// End to end: CPU per event over the timed window, of the database's processes (`postgres`, whether or not
    /// the handler uses it: ~0 for the `log` handler), the consumer instances together, and the bench.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<crate::cpu::CpuPerEvent>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ConsumerReport {
    pub topic: String,
    pub events: u64,
    pub body_bytes: usize,
    pub fill_per_s: f64,
    pub rows: Vec<ConsumerRow>,
    /// Each end-to-end row's events/s over the raw row's.
    pub ratios: Vec<(usize, f64)>,
}

pub async fn run(config: &ConsumerBenchConfig) -> anyhow::Result<ConsumerReport> {
    let fill = kafka_ceiling(&KafkaCeilingConfig {
        brokers: config.brokers.clone(),
        topic: config.topic.clone(),
        message_bytes: config.body_bytes,
        concurrency: 256,
        duration: config.fill,
        record_key: config.record_key.clone(),
        unsigned: config.unsigned,
    })
    .await?;
    let n_events = fill.acknowledged + fill.warm_up_records;
    eprintln!("consumer-bench: filled {} with {n_events} records ({:.0}/s)", config.topic, fill.messages_per_s);
    let mut rows = vec![raw_consume(config, n_events).await?];
    eprintln!("consumer-bench: raw consume {:.0} events/s", rows[0].events_per_s);
    for &instances in &config.instances {
        let row = end_to_end(config, instances, n_events).await?;
        let cpu = row.cpu.map_or_else(String::new, |cpu| {
            format!("; CPU per event: consumer {:.1} µs, database {:.1} µs", cpu.process_us, cpu.database_us)
        });
        eprintln!("consumer-bench: {instances} consumer(s) {:.0} events/s{cpu}", row.events_per_s);
        rows.push(row);
    }
    let raw = rows[0].events_per_s;
    let ratios = rows.iter().skip(1).map(|row| (row.instances, row.events_per_s / raw)).collect();
    Ok(ConsumerReport {
        topic: config.topic.clone(),
        events: n_events,
        body_bytes: config.body_bytes,
        fill_per_s: fill.messages_per_s,
        rows,
        ratios,
    })
}

/// A group member with the consumer's settings that fetches and detaches every record and does nothing else.
/// Timed from the first record to the last, so joining the group is not counted.
async fn raw_consume(config: &ConsumerBenchConfig, n_events: u64) -> anyhow::Result<ConsumerRow> {
    let kafka = KafkaConfig { brokers: config.brokers.clone(), ..KafkaConfig::default() };
    let group = format!("hookline-bench-raw-{}", uuid::Uuid::new_v4().simple());
    let consumer: StreamConsumer<QuietContext> =
        consumer_config(&kafka, &group).create_with_context(QuietContext::new("bench-raw-consumer"))?;
    consumer.subscribe(&[&config.topic])?;
    let deadline = Instant::now() + config.timeout;
    let mut first = None;
    let mut seen = 0_u64;
    let mut bytes = 0_usize;
    while seen < n_events {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let message = tokio::time::timeout(remaining, consumer.recv())
            .await
            .map_err(|_| anyhow::anyhow!("raw consume: timed out after {seen} of {n_events}"))??;
        let owned = message.detach();
        bytes += owned.payload().map_or(0, <[u8]>::len);
        first.get_or_insert_with(Instant::now);
        seen += 1;
    }
    // Counted so the detach cannot be optimised away.
    debug_assert!(bytes > 0);
    let duration_s = first.map_or(0.0, |first| first.elapsed().as_secs_f64());
    Ok(ConsumerRow {
        kind: "raw".to_owned(),
        instances: 1,
        events: n_events,
        duration_s,
        events_per_s: (n_events.saturating_sub(1)) as f64 / duration_s,
        processed: 0,
        duplicates: 0,
        dead_lettered: 0,
        cpu: None,
    })
}

struct Instance {
    child: Child,
    admin: SocketAddr,
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SIGTERM: the consumer drains and commits. Then wait a bounded time, and kill what is still there.
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn end_to_end(config: &ConsumerBenchConfig, n_instances: usize, n_events: u64) -> anyhow::Result<ConsumerRow> {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let mut instances = Vec::new();
    for instance_idx in 0..n_instances {
        let admin = free_port()?;
        let path = config.work_dir.join(format!("consumer-{run_id}-{instance_idx}.toml"));
        let mut consumer_config: Table = format!(
            r#"admin_addr = "{admin}"
[kafka]
brokers = "{brokers}"
inbound_topic = "{topic}"
dlq_topic = "{dlq}"
dlq_status_topic = "{dlq_status}"
group_id = "hookline-bench-{run_id}"
{record_auth}[redis]
url = "{redis}"
key_prefix = "hookline:bench:{run_id}"
dedupe_ttl_s = 600
[handler]
kind = "log"
"#,
            record_auth = config.record_key.toml(),
            brokers = config.brokers,
            topic = config.topic,
            dlq = config.dlq_topic,
            dlq_status = config.dlq_status_topic,
            redis = config.redis_url,
        )
        .parse()?;
        if let Some(overlay) = &config.overlay {
            merge_overlay(&mut consumer_config, overlay);
        }
        if config.unsigned {
            let until = humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(3600));
            let overlay: Table = format!("[kafka.record_auth]\naccept_unsigned_until = \"{until}\"\n").parse()?;
            merge_overlay(&mut consumer_config, &overlay);
        }
        std::fs::write(&path, consumer_config.to_string())?;
        let child = Command::new(&config.consumer_bin)
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        instances.push(Instance { child, admin });
    }
    let deadline = Instant::now() + config.timeout;
    let sample_cpu = |instances: &[Instance]| {
        let mut sample = crate::cpu::Sample::now("postgres", None);
        sample.process = instances.iter().filter_map(|instance| crate::cpu::of_pid(instance.child.id())).sum();
        sample
    };
    let mut first: Option<(Instant, u64, crate::cpu::Sample)> = None;
    let totals = loop {
        anyhow::ensure!(Instant::now() < deadline, "{n_instances} consumer(s): not done within {:?}", config.timeout);
        let mut totals = Totals::default();
        for instance in &instances {
            if let Some(sample) = scrape(instance.admin) {
                totals.add(&sample);
            }
        }
        let handled = totals.handled();
        let now = Instant::now();
        if handled > 0 && first.is_none() {
            first = Some((now, handled, sample_cpu(&instances)));
        }
        if handled >= n_events {
            break (totals, now, sample_cpu(&instances));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ((totals, done_at, cpu_after), (first_at, first_count, cpu_before)) = (totals, first.expect("set before done"));
    let duration_s = done_at.duration_since(first_at).as_secs_f64();
    drop(instances);
    Ok(ConsumerRow {
        kind: "end_to_end".to_owned(),
        instances: n_instances,
        events: n_events,
        duration_s,
        events_per_s: (n_events - first_count) as f64 / duration_s.max(1e-3),
        processed: totals.processed,
        duplicates: totals.duplicates,
        dead_lettered: totals.dead_lettered,
        cpu: Some(cpu_before.per_event(&cpu_after, n_events - first_count)),
    })
}

fn free_port() -> std::io::Result<SocketAddr> {
    StdTcpListener::bind("127.0.0.1:0")?.local_addr()
}

#[derive(Debug, Default)]
struct Totals {
    processed: u64,
    duplicates: u64,
    dead_lettered: u64,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        self.processed += other.processed;
        self.duplicates += other.duplicates;
        self.dead_lettered += other.dead_lettered;
    }

    fn handled(&self) -> u64 {
        self.processed + self.duplicates + self.dead_lettered
    }
}

/// `hookline_consumer_events_total` by outcome, from one instance's `/metrics`; `None` while it is not up.
fn scrape(admin: SocketAddr) -> Option<Totals> {
    let mut stream = TcpStream::connect_timeout(&admin, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let mut totals = Totals::default();
    for line in text.lines().filter(|line| line.starts_with("hookline_consumer_events_total{")) {
        let value = line.rsplit(' ').next()?.parse::<f64>().ok()? as u64;
        if line.contains("outcome=\"processed\"") {
            totals.processed += value;
        } else if line.contains("outcome=\"duplicate\"") {
            totals.duplicates += value;
        } else if line.contains("outcome=\"dead_lettered\"") {
            totals.dead_lettered += value;
        }
    }
    Some(totals)
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
}

#[derive(Debug, Default)]
struct Sink {
    in_flight: std::sync::atomic::AtomicUsize,
    max_in_flight: std::sync::atomic::AtomicUsize,
}

/// Serves the bench downstream: `/healthy` answers 200 after `delay`, `/failing` answers 503 at once.
async fn serve_sink(listener: tokio::net::TcpListener, delay: Duration, sink: std::sync::Arc<Sink>) {
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
async fn fill_sources(
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
                Some(&meta.to_headers()),
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
    let n_events: u64 = match delay_ms {
        0..=5 => 20_000,
        6..=20 => 15_000,
        _ => 6_000,
    };
    let sources: &[&str] = if with_failing { &["bench-healthy", "bench-failing"] } else { &["bench-healthy"] };
    fill_sources(&config.brokers, &topic, sources, n_events, config.body_bytes, config.record_key.keys()).await?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sink_addr = listener.local_addr()?;
    let sink = std::sync::Arc::new(Sink::default());
    let sink_task = tokio::spawn(serve_sink(listener, Duration::from_millis(delay_ms), sink.clone()));

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
{record_auth}[kafka.properties]
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
[[routes]]
source = "bench-failing"
max_in_flight = {failing_limit}
handler = {{ kind = "http", url = "http://{sink_addr}/failing" }}
"#,
            record_auth = config.record_key.toml(),
            brokers = config.brokers,
            dlq = config.dlq_topic,
            dlq_status = config.dlq_status_topic,
            redis = config.redis_url,
            max_in_flight = config.max_in_flight,
            failing_limit = (config.max_in_flight / 4).max(1),
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
        anyhow::ensure!(Instant::now() < deadline, "http D = {delay_ms} ms: not done within {:?}", config.timeout);
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
    let consumer_peak_rss_kib = peak_rss_kib(instance.child.id());
    drop(instance);
    sink_task.abort();
    let duration_s = done_at.duration_since(first_at).as_secs_f64().max(1e-3);
    Ok(HttpRow {
        kind: kind.to_owned(),
        partitions,
        delay_ms,
        events: n_events,
        duration_s,
        events_per_s: (n_events - first_count) as f64 / duration_s,
        sink_max_in_flight: sink.max_in_flight.load(std::sync::atomic::Ordering::Relaxed),
        concurrency_bound_per_s: (delay_ms > 0).then(|| config.max_in_flight as f64 * 1000.0 / delay_ms as f64),
        consumer_peak_rss_kib,
    })
}

/// `VmHWM` of a process, KiB (Linux).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `hookline_consumer_events_total{source, outcome="processed"}` of one source, from one instance.
fn scrape_processed(admin: SocketAddr, source: &str) -> Option<u64> {
    let mut stream = TcpStream::connect_timeout(&admin, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let source_label = format!("source=\"{source}\"");
    let mut total = 0;
    for line in text.lines().filter(|line| line.starts_with("hookline_consumer_events_total{")) {
        if line.contains(&source_label) && line.contains("outcome=\"processed\"") {
            total += line.rsplit(' ').next()?.parse::<f64>().ok()? as u64;
        }
    }
    Some(total)
}
