//! What fan-out costs the broker (issue 48): one service with N `http` destinations on one source reads the topic
//! once, where N services would each read all of it. A topic is filled with gateway-shaped records of one source;
//! a plain reader fetches it once from the start (what any one service's group fetches at least: the topic's bytes
//! as the broker serves them); then one consumer service in fan-out mode with N destinations (each an `http`
//! route to a local sink answering 200 at once) processes every event for every destination. Both byte counts are
//! librdkafka's own (`rx_bytes` of its statistics: every byte received from the brokers, fetch responses and the
//! rest), the consumer's read from its statistics line (`statistics.interval.ms` set through `[kafka.properties]`).
//!
//! Two loads: a backlog (the topic filled first, then drained), and, with a rate, live traffic (the service
//! started first, the events produced at that rate while it runs, as a deployment keeping up with its traffic).

use std::{
    io::BufRead,
    net::SocketAddr,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hookline_common::{config::KafkaConfig, kafka::consumer_config};
use rdkafka::{
    ClientContext, Message, Statistics, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext},
};

use crate::{
    consumer_bench::{Instance, free_port, scrape_metrics},
    consumer_http::{HttpBenchConfig, Sink, fill_sources, serve_sink},
};

/// The one source of the run's events.
const SOURCE: &str = "bench-fan-out";

#[derive(Debug, Clone, serde::Serialize)]
pub struct EgressReport {
    pub events: u64,
    pub destinations: usize,
    pub partitions: i32,
    pub body_bytes: usize,
    /// `rx_bytes` of a plain reader fetching the topic once, from the start.
    pub read_once_rx_bytes: u64,
    /// `rx_bytes` of the fan-out service's group consumer, from its start until every destination had every event.
    pub fan_out_rx_bytes: u64,
    /// `fan_out_rx_bytes / read_once_rx_bytes`.
    pub ratio: f64,
    /// What N services, each reading the topic once, would fetch: N x `read_once_rx_bytes`.
    pub separate_services_rx_bytes: u64,
    /// Deliveries counted by the service (`hookline_consumer_destination_events_total{outcome="processed"}`).
    pub delivered: u64,
    pub duration_s: f64,
    /// Events produced per second while the service ran; `None`: a backlog, filled before it started.
    pub rate_per_s: Option<u64>,
}

/// Fills a fresh topic with `events` records and measures both reads.
pub async fn run(
    config: &HttpBenchConfig,
    events: u64,
    destinations: usize,
    partitions: i32,
    rate_per_s: Option<u64>,
) -> anyhow::Result<EgressReport> {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let topic = format!("hookline-bench-fan-out-{run_id}");
    let retry_topic = format!("{topic}-retry");
    let kafka = KafkaConfig { brokers: config.brokers.clone(), ..KafkaConfig::default() };
    let specs = [&topic, &retry_topic].map(|name| hookline_common::kafka::TopicSpec {
        name: name.clone(),
        partitions,
        compacted: false,
    });
    hookline_common::kafka::ensure_topics(&kafka, &specs, 1).await?;
    let fill = Fill { config: config.clone(), topic: topic.clone(), events, rate_per_s };
    let live = match rate_per_s {
        None => {
            fill.run().await?;
            eprintln!("fan-out-egress: {events} events in {topic}");
            None
        }
        Some(_) => Some(fill),
    };

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let sink_addr = listener.local_addr()?;
    let sink_task = tokio::spawn(serve_sink(listener, Duration::ZERO, Arc::new(Sink::default())));
    let measured = fan_out(config, &topic, &retry_topic, sink_addr, events, destinations, live).await;
    sink_task.abort();
    let (fan_out_rx_bytes, delivered, duration_s) = measured?;

    let read_once_rx_bytes = {
        let (kafka, topic) = (kafka.clone(), topic.clone());
        tokio::task::spawn_blocking(move || read_once(&kafka, &topic, events, partitions)).await??
    };
    eprintln!("fan-out-egress: the topic read once: {read_once_rx_bytes} bytes received");
    Ok(EgressReport {
        events,
        destinations,
        partitions,
        body_bytes: config.body_bytes,
        read_once_rx_bytes,
        fan_out_rx_bytes,
        ratio: fan_out_rx_bytes as f64 / read_once_rx_bytes.max(1) as f64,
        separate_services_rx_bytes: read_once_rx_bytes * destinations as u64,
        delivered,
        duration_s,
        rate_per_s,
    })
}

/// The run's events: all at once, or paced at `rate_per_s` (one second's worth at a time).
struct Fill {
    config: HttpBenchConfig,
    topic: String,
    events: u64,
    rate_per_s: Option<u64>,
}

impl Fill {
    async fn run(self) -> anyhow::Result<()> {
        let (config, keys) = (&self.config, self.config.record_key.keys());
        let Some(rate) = self.rate_per_s.filter(|rate| *rate > 0) else {
            return fill_sources(&config.brokers, &self.topic, &[SOURCE], self.events, config.body_bytes, keys).await;
        };
        let started = Instant::now();
        let mut produced = 0;
        while produced < self.events {
            let batch = rate.min(self.events - produced);
            fill_sources(&config.brokers, &self.topic, &[SOURCE], batch, config.body_bytes, keys).await?;
            produced += batch;
            let due = started + Duration::from_secs_f64(produced as f64 / rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        Ok(())
    }
}

/// Keeps the latest `rx_bytes` of librdkafka's statistics, and how many statistics it has had.
#[derive(Default)]
struct StatisticsContext {
    rx_bytes: AtomicU64,
    seen: AtomicU64,
}

impl ClientContext for StatisticsContext {
    fn stats(&self, statistics: Statistics) {
        self.rx_bytes.store(u64::try_from(statistics.rx_bytes).unwrap_or(0), Ordering::SeqCst);
        self.seen.fetch_add(1, Ordering::SeqCst);
    }
}

impl ConsumerContext for StatisticsContext {}

/// Reads every partition of `topic` once from the start until `events` records came, then waits for a statistics
/// report taken after the last one: the bytes it received.
fn read_once(kafka: &KafkaConfig, topic: &str, events: u64, partitions: i32) -> anyhow::Result<u64> {
    let mut client_config = consumer_config(kafka, &format!("hookline-bench-read-once-{}", uuid::Uuid::new_v4()));
    client_config.set("statistics.interval.ms", "200");
    let consumer: BaseConsumer<StatisticsContext> = client_config.create_with_context(StatisticsContext::default())?;
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment.add_partition_offset(topic, partition, rdkafka::Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut read = 0;
    while read < events {
        anyhow::ensure!(Instant::now() < deadline, "{topic}: {read} of {events} records read");
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message?;
            if message.payload().is_some() {
                read += 1;
            }
        }
    }
    let seen = consumer.context().seen.load(Ordering::SeqCst);
    while consumer.context().seen.load(Ordering::SeqCst) < seen + 2 {
        let _ = consumer.poll(Duration::from_millis(100));
    }
    Ok(consumer.context().rx_bytes.load(Ordering::SeqCst))
}

/// Runs one consumer service in fan-out mode with `destinations` `http` routes on the run's source until every
/// destination processed every event; returns its group consumer's received bytes (its last statistics line after
/// that), the deliveries it counted and how long they took.
async fn fan_out(
    config: &HttpBenchConfig,
    topic: &str,
    retry_topic: &str,
    sink_addr: SocketAddr,
    events: u64,
    destinations: usize,
    live: Option<Fill>,
) -> anyhow::Result<(u64, u64, f64)> {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let admin = free_port()?;
    let routes: String = (0..destinations)
        .map(|index| {
            format!(
                "[[routes]]\nname = \"d{index:02}\"\nsource = \"{SOURCE}\"\nhandler = {{ kind = \"http\", url = \"http://{sink_addr}/d{index:02}\" }}\n"
            )
        })
        .collect();
    let path = config.work_dir.join(format!("consumer-fan-out-{run_id}.toml"));
    std::fs::write(
        &path,
        format!(
            r#"admin_addr = "{admin}"
[service]
routing = "fan_out"
[kafka]
brokers = "{brokers}"
inbound_topic = "{topic}"
retry_topic = "{retry_topic}"
dlq_topic = "{dlq}"
dlq_status_topic = "{dlq_status}"
group_id = "hookline-bench-{run_id}"
{record_auth}[kafka.properties]
"statistics.interval.ms" = "1000"
[redis]
url = "{redis}"
key_prefix = "hookline:bench:{run_id}"
dedupe_ttl_s = 600
[processing]
max_in_flight = {max_in_flight}
{routes}"#,
            brokers = config.brokers,
            dlq = config.dlq_topic,
            dlq_status = config.dlq_status_topic,
            record_auth = config.record_key.toml(),
            redis = config.redis_url,
            max_in_flight = config.max_in_flight,
        ),
    )?;
    let mut child = Command::new(&config.consumer_bin)
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn,hookline_consumer::fetch_stats=info")
        .env("HOOKLINE_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let rx_bytes = Arc::new(AtomicU64::new(0));
    let statistics_lines = Arc::new(AtomicU64::new(0));
    let stdout = child.stdout.take().expect("piped");
    {
        let (rx_bytes, statistics_lines) = (rx_bytes.clone(), statistics_lines.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(bytes) = statistics_rx_bytes(&line) {
                    rx_bytes.store(bytes, Ordering::SeqCst);
                    statistics_lines.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    let instance = Instance { child, admin };
    let started = Instant::now();
    // Live traffic: produced while the service runs (it starts at the earliest offset, so nothing is missed).
    let live = live.map(|fill| tokio::spawn(fill.run()));
    let deadline = started + config.timeout;
    let wanted = events * destinations as u64;
    let delivered = loop {
        let delivered = scrape_metrics(instance.admin).map_or(0, |scrape| {
            scrape.sum("hookline_consumer_destination_events_total", &[("outcome", "processed")]) as u64
        });
        if delivered >= wanted {
            break delivered;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{topic}: {delivered} of {wanted} deliveries within {:?}",
            config.timeout
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let duration_s = started.elapsed().as_secs_f64();
    if let Some(live) = live {
        live.await??;
    }
    // A statistics line written after the last delivery: everything fetched until then is in it.
    let lines = statistics_lines.load(Ordering::SeqCst);
    while statistics_lines.load(Ordering::SeqCst) < lines + 2 {
        anyhow::ensure!(Instant::now() < deadline, "{topic}: no statistics line after the last delivery");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(instance);
    Ok((rx_bytes.load(Ordering::SeqCst), delivered, duration_s))
}

/// `rx_bytes` of the consumer's `librdkafka statistics` line (JSON logs), if `line` is one.
fn statistics_rx_bytes(line: &str) -> Option<u64> {
    if !line.contains("librdkafka statistics") {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    value["fields"]["rx_bytes"].as_u64()
}
