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
    prometheus_text::Scrape,
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
    /// Stop the fill at this many records, if `fill` has not ended it first.
    pub fill_records: Option<u64>,
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
    /// Each instance's log, but for the line per event, goes to `<dir>/consumer-<run>-<n>.log` (else to
    /// /dev/null).
    pub consumer_log_dir: Option<PathBuf>,
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
    /// End to end: the largest peak resident set (`VmHWM` in /proc, read as the drain ends) of the instances, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_mib: Option<f64>,
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
        max_records: config.fill_records,
        record_key: config.record_key.clone(),
        unsigned: config.unsigned,
        rate_per_s: None,
        linger_ms: None,
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
        let rss = row.peak_rss_mib.map_or_else(String::new, |mib| format!("; peak RSS {mib:.0} MiB"));
        eprintln!("consumer-bench: {instances} consumer(s) {:.0} events/s{cpu}{rss}", row.events_per_s);
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
        peak_rss_mib: None,
    })
}

pub(crate) struct Instance {
    pub(crate) child: Child,
    pub(crate) admin: SocketAddr,
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
            let until = hookline_common::time::format_rfc3339_seconds(hookline_common::wire::now_ms() + 3_600_000);
            let overlay: Table = format!("[kafka.record_auth]\naccept_unsigned_until = \"{until}\"\n").parse()?;
            merge_overlay(&mut consumer_config, &overlay);
        }
        std::fs::write(&path, consumer_config.to_string())?;
        let mut child = Command::new(&config.consumer_bin)
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(if config.consumer_log_dir.is_some() { Stdio::piped() } else { Stdio::null() })
            .stderr(Stdio::null())
            .spawn()?;
        if let (Some(dir), Some(stdout)) = (&config.consumer_log_dir, child.stdout.take()) {
            std::fs::create_dir_all(dir)?;
            let log = std::fs::File::create(dir.join(format!("consumer-{run_id}-{instance_idx}.log")))?;
            std::thread::spawn(move || keep_log(stdout, log));
        }
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
    // VmHWM is the process's own high-water mark: read once at the end, it holds the peak of the whole drain.
    let peak_rss_mib = instances
        .iter()
        .filter_map(|instance| crate::h2_flood::peak_rss_bytes(instance.child.id()))
        .max()
        .map(|bytes| bytes as f64 / f64::from(1 << 20));
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
        peak_rss_mib,
    })
}

/// Copies a consumer's log to `log` without the `log` handler's line per event (a million lines per run).
fn keep_log(stdout: std::process::ChildStdout, mut log: std::fs::File) {
    use std::io::BufRead;
    for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
        if !line.contains("event processed") {
            let _ = writeln!(log, "{line}");
        }
    }
}

pub(crate) fn free_port() -> std::io::Result<SocketAddr> {
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
    let scrape = scrape_metrics(admin)?;
    let events = |outcome| scrape.sum("hookline_consumer_events_total", &[("outcome", outcome)]) as u64;
    Some(Totals {
        processed: events("processed"),
        duplicates: events("duplicate"),
        dead_lettered: events("dead_lettered"),
    })
}

/// One instance's `/metrics`, read; `None` while it is not up.
pub(crate) fn scrape_metrics(admin: SocketAddr) -> Option<Scrape> {
    let mut stream = TcpStream::connect_timeout(&admin, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(Scrape::parse(&text))
}
