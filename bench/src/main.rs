//! `hookline-bench <command>`: the load generator, the ceilings and the report, as one binary (one link of
//! librdkafka instead of one per tool). Every command stops by itself.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand};
use hookline_bench::{
    ceilings::{self, KafkaCeilingConfig},
    consumer_bench::{self, ConsumerBenchConfig},
    consumer_http::{self, HttpBenchConfig, HttpConsumerArgs},
    fan_out_egress, naive_consumer,
    record_key::BenchRecordKey,
    report,
};
use hookline_common::{
    config::KafkaConfig,
    kafka::{TopicSpec, ensure_topics},
};
use tokio_util::sync::CancellationToken;

mod loadgen_command;
use loadgen_command::{LoadgenArgs, loadgen};

#[derive(Debug, Parser)]
#[command(version, about = "hookline benchmarks: load generator, ceilings, report")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Signed webhooks against a gateway (or the HTTP ceiling), then the topic check.
    Loadgen(LoadgenArgs),
    /// A minimal hyper server answering 202 at once, for `--max-s` at most.
    HttpCeiling {
        #[arg(long, default_value = "127.0.0.1:48080")]
        listen: SocketAddr,
        #[arg(long, default_value_t = 900)]
        max_s: u64,
    },
    /// An rdkafka producer alone, with the gateway's settings and record layout.
    KafkaCeiling {
        #[arg(long, env = "KAFKA_BROKERS")]
        brokers: String,
        /// Created if missing (6 partitions, like the inbound topic).
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 1024)]
        message_bytes: usize,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        #[arg(long, default_value_t = 10.0)]
        duration_s: f64,
        /// Produce without the record MAC (what the MAC costs on the produce path; no service can do this).
        #[arg(long)]
        unsigned: bool,
        /// Open loop at this many records/s in all, each acknowledgement timed from its intended send time (as
        /// `load --rate` times the gateway's answers); without it, closed loop.
        #[arg(long)]
        rate: Option<f64>,
        /// The producer's `linger.ms` instead of the producers' fixed setting (fractions allowed): the gateway's
        /// own (0 for its sending-at-once producer below `batch_from_in_flight`), for a like-for-like pair.
        #[arg(long)]
        linger_ms: Option<f64>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The consumer's claim and done scripts against Redis: sequential, concurrent, pipelined.
    RedisCeiling {
        #[arg(long, env = "REDIS_URL")]
        redis_url: String,
        #[arg(long, default_value_t = 5.0)]
        duration_s: f64,
        #[arg(long, default_value_t = 6)]
        concurrency: usize,
        #[arg(long, default_value_t = 64)]
        batch: usize,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Raw consume versus the real consumer binary end to end, with 1, 2, 4 ... instances.
    Consumer {
        #[arg(long, env = "KAFKA_BROKERS")]
        brokers: String,
        #[arg(long, env = "REDIS_URL")]
        redis_url: String,
        /// Created (6 partitions) and filled.
        #[arg(long)]
        topic: String,
        #[arg(long, env = "DLQ_TOPIC", default_value = "webhooks.dlq")]
        dlq_topic: String,
        #[arg(long, env = "DLQ_STATUS_TOPIC", default_value = "webhooks.dlq-status")]
        dlq_status_topic: String,
        #[arg(long, default_value_t = 6)]
        partitions: i32,
        #[arg(long, default_value_t = 5.0)]
        fill_s: f64,
        /// Stop the fill at this many records (give `--fill-s` room enough to reach it): a backlog of a given
        /// size rather than of a given time.
        #[arg(long)]
        fill_records: Option<u64>,
        #[arg(long, default_value_t = 1024)]
        body_bytes: usize,
        /// The `consumer` binary (a release build).
        #[arg(long)]
        consumer_bin: PathBuf,
        #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
        instances: Vec<usize>,
        #[arg(long)]
        work_dir: PathBuf,
        #[arg(long, default_value_t = 120)]
        timeout_s: u64,
        /// A TOML file whose tables are merged over each consumer's config (TLS and SASL to Kafka and Redis);
        /// the fill and the raw consume stay on `--brokers`.
        #[arg(long)]
        overlay: Option<PathBuf>,
        /// With an overlay whose `[handler]` is `postgres`: SQL run before its tables are created (the tables its
        /// statements touch).
        #[arg(long)]
        setup_sql: Option<PathBuf>,
        /// Fill with unsigned records, accepted by the consumers' transition window: the consumer without its MAC
        /// check (what the check costs).
        #[arg(long)]
        unsigned: bool,
        /// Keep each consumer instance's log (but its line per event) in this folder (with `statistics.interval.ms` in an overlay's
        /// `[kafka.properties]`: librdkafka's statistics, one line per interval); else it is discarded.
        #[arg(long)]
        consumer_log_dir: Option<PathBuf>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The `postgres` handler's ceiling: new dedupe rows inserted by `connections` loops of one-statement
    /// transactions into `table`, over TLS (the stack's `POSTGRES_*` variables).
    PostgresCeiling {
        #[arg(long, env = "POSTGRES_URL")]
        url: String,
        #[arg(long, env = "POSTGRES_PASSWORD_FILE")]
        password_file: String,
        #[arg(long, env = "POSTGRES_CA_FILE")]
        ca_file: String,
        /// `schema.table`, created if missing.
        #[arg(long)]
        table: String,
        #[arg(long, default_value_t = 8)]
        connections: usize,
        #[arg(long, default_value_t = 10.0)]
        duration_s: f64,
        /// A statement run after the insert in each transaction (its one parameter, `$1`, the event id): the
        /// ceiling of that work done by hand, BEGIN, the insert and the statement pipelined, then COMMIT.
        #[arg(long)]
        work_sql: Option<String>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The consumer with the `http` handler against a local sink answering after D ms, for each D and partition
    /// count, then a healthy source alone and beside a source whose downstream always answers 503.
    ConsumerHttp {
        #[command(flatten)]
        consumer: HttpConsumerArgs,
        /// The delays of the throughput runs; `--delays-ms` with no value: none (only the isolation runs).
        #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "0,5,20,100")]
        delays_ms: Vec<u64>,
        #[arg(long, value_delimiter = ',', default_value = "1,6")]
        partitions: Vec<i32>,
        #[arg(long, value_delimiter = ',', default_value = "20,100")]
        isolation_delays_ms: Vec<u64>,
        /// Healthy events per isolation run (as many failing ones beside); default by D: 15,000 up to 20 ms, then
        /// 6,000. More gives a longer steady state after the breaker opens.
        #[arg(long)]
        isolation_events: Option<u64>,
        /// `processing.breaker_cooldown_ms` of the consumer (its default when absent). Under callgrind, whose
        /// slow time lets the default 10 s pass many times in one run, a long one keeps the real run's mix.
        #[arg(long)]
        breaker_cooldown_ms: Option<u64>,
        /// In the isolation runs, put the failing source in its own topic, a source topic of the service
        /// (`service.source_topics`), instead of the inbound topic both share by default.
        #[arg(long)]
        failing_source_topic: bool,
        /// Extra librdkafka properties for the consumer, `key=value,...`.
        #[arg(long, value_delimiter = ',')]
        kafka_properties: Vec<String>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// hookline's consumer beside the naive consumer most teams write first (a `StreamConsumer` loop, `SET NX` per
    /// record, the same sink), A B A B over one filled topic per delay D (`naive_consumer.rs`).
    ConsumerPeer {
        #[command(flatten)]
        consumer: HttpConsumerArgs,
        #[arg(long, value_delimiter = ',', default_value = "0,20")]
        delays_ms: Vec<u64>,
        #[arg(long, default_value_t = 6)]
        partitions: i32,
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// The naive consumer is timed over at most this long (at D = 20 ms it does ~50 events a second).
        #[arg(long, default_value_t = 10)]
        naive_window_s: u64,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// One consumer service with N `http` destinations in fan-out mode against the topic read once: the bytes its
    /// group fetches (librdkafka's `rx_bytes`), N destinations for one read (`fan_out_egress.rs`).
    FanOutEgress {
        #[command(flatten)]
        consumer: HttpConsumerArgs,
        #[arg(long, default_value_t = 100_000)]
        events: u64,
        #[arg(long, default_value_t = 20)]
        destinations: usize,
        #[arg(long, default_value_t = 6)]
        partitions: i32,
        /// Produce the events at this rate while the service runs (live traffic); without it, a backlog filled
        /// before the service starts.
        #[arg(long)]
        rate_per_s: Option<u64>,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Creates a topic (replication 1) if it does not exist.
    CreateTopic {
        #[arg(long, env = "KAFKA_BROKERS")]
        brokers: String,
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 6)]
        partitions: i32,
    },
    /// Turns a results directory into the tables of docs/benchmarks.md (stdout) and `summary.json`.
    Report {
        #[arg(long)]
        results: PathBuf,
        /// Criterion's output directory (`target/criterion`).
        #[arg(long)]
        criterion: PathBuf,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.command {
        Command::Loadgen(args) => loadgen(args).await,
        Command::HttpCeiling { listen, max_s } => {
            let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("bind {listen}"))?;
            eprintln!("http-ceiling: listening on {listen} for at most {max_s}s");
            let shutdown = CancellationToken::new();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    () = tokio::time::sleep(Duration::from_secs(max_s)) => {}
                }
                stop.cancel();
            });
            ceilings::serve_http_ceiling(listener, shutdown).await;
            Ok(())
        }
        Command::KafkaCeiling {
            brokers,
            topic,
            message_bytes,
            concurrency,
            duration_s,
            unsigned,
            rate,
            linger_ms,
            json,
        } => {
            if rate.is_some_and(|rate| rate.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)) {
                anyhow::bail!("--rate must be positive");
            }
            create_topic(&brokers, &topic, 6).await?;
            let report = ceilings::kafka_ceiling(&KafkaCeilingConfig {
                brokers,
                topic,
                message_bytes,
                concurrency,
                duration: Duration::from_secs_f64(duration_s),
                max_records: None,
                record_key: BenchRecordKey::generate()?,
                unsigned,
                rate_per_s: rate,
                linger_ms,
            })
            .await?;
            eprintln!(
                "kafka-ceiling: {:.0} acks/s, ack p50 {:.2} ms p99 {:.2} ms ({} failed)",
                report.messages_per_s, report.ack_latency.p50_ms, report.ack_latency.p99_ms, report.failed
            );
            let mut output = serde_json::to_value(&report)?;
            output["producer_cpu_s"] = serde_json::json!(own_cpu_seconds());
            write_json(json.as_deref(), &output)
        }
        Command::RedisCeiling { redis_url, duration_s, concurrency, batch, json } => {
            let rows =
                ceilings::redis_ceiling(&redis_url, Duration::from_secs_f64(duration_s), concurrency, batch).await?;
            for row in &rows {
                eprintln!(
                    "redis-ceiling: {} c={} batch={}: {:.0} claim+done/s",
                    row.mode, row.concurrency, row.batch, row.events_per_s
                );
            }
            write_json(json.as_deref(), &rows)
        }
        Command::Consumer {
            brokers,
            redis_url,
            topic,
            dlq_topic,
            dlq_status_topic,
            partitions,
            fill_s,
            fill_records,
            body_bytes,
            consumer_bin,
            instances,
            work_dir,
            timeout_s,
            overlay,
            setup_sql,
            unsigned,
            consumer_log_dir,
            json,
        } => {
            let overlay = match overlay {
                Some(path) => Some(std::fs::read_to_string(&path)?.parse::<hookline_common::config::Table>()?),
                None => None,
            };
            if let Some(overlay) = &overlay {
                let setup = setup_sql.map(std::fs::read_to_string).transpose()?;
                hookline_bench::postgres_bench::prepare_overlay(overlay, setup.as_deref(), &work_dir).await?;
            }
            create_topic(&brokers, &topic, partitions).await?;
            std::fs::create_dir_all(&work_dir)?;
            let report = consumer_bench::run(&ConsumerBenchConfig {
                brokers,
                redis_url,
                topic,
                record_key: BenchRecordKey::generate()?,
                dlq_topic,
                dlq_status_topic,
                fill: Duration::from_secs_f64(fill_s),
                fill_records,
                body_bytes,
                consumer_bin,
                instances,
                work_dir,
                timeout: Duration::from_secs(timeout_s),
                overlay,
                unsigned,
                consumer_log_dir,
            })
            .await?;
            write_json(json.as_deref(), &report)
        }
        Command::PostgresCeiling { url, password_file, ca_file, table, connections, duration_s, work_sql, json } => {
            let database = hookline_bench::postgres_bench::Database { url, password_file, ca_file };
            let report = hookline_bench::postgres_bench::ceiling(
                &database,
                &table,
                connections,
                Duration::from_secs_f64(duration_s),
                work_sql.as_deref(),
            )
            .await?;
            eprintln!(
                "postgres-ceiling: {} inserts in {:.1} s over {connections} connections: {:.0}/s; CPU per insert: \
                 database {:.1} µs, clients {:.1} µs",
                report.inserts, report.duration_s, report.inserts_per_s, report.cpu.database_us, report.cpu.bench_us
            );
            write_json(json.as_deref(), &report)
        }
        Command::ConsumerHttp {
            consumer,
            delays_ms,
            partitions,
            isolation_delays_ms,
            isolation_events,
            breaker_cooldown_ms,
            failing_source_topic,
            kafka_properties,
            json,
        } => {
            let config = HttpBenchConfig {
                isolation_delays_ms,
                isolation_events,
                breaker_cooldown_ms,
                failing_source_topic,
                kafka_properties,
                ..consumer.config(delays_ms, partitions)?
            };
            let rows = consumer_http::run_http(&config).await?;
            write_json(json.as_deref(), &rows)
        }
        Command::ConsumerPeer { consumer, delays_ms, partitions, rounds, naive_window_s, json } => {
            let config = consumer.config(delays_ms, vec![partitions])?;
            let report =
                naive_consumer::run_peer(&config, partitions, rounds, Duration::from_secs(naive_window_s)).await?;
            for (delay_ms, ratio) in &report.ratios {
                eprintln!("consumer-peer: D = {delay_ms} ms: hookline / naive = {ratio:.2}");
            }
            write_json(json.as_deref(), &report)
        }
        Command::FanOutEgress { consumer, events, destinations, partitions, rate_per_s, json } => {
            let config = consumer.config(Vec::new(), vec![partitions])?;
            let report = fan_out_egress::run(&config, events, destinations, partitions, rate_per_s).await?;
            eprintln!(
                "fan-out-egress: {} destinations fetched {} bytes, {:.3}x the topic read once ({} bytes; {} services: {} bytes)",
                report.destinations,
                report.fan_out_rx_bytes,
                report.ratio,
                report.read_once_rx_bytes,
                report.destinations,
                report.separate_services_rx_bytes
            );
            write_json(json.as_deref(), &report)
        }
        Command::CreateTopic { brokers, topic, partitions } => create_topic(&brokers, &topic, partitions).await,
        Command::Report { results, criterion } => {
            let tables = report::render(&results, &criterion)?;
            print!("{tables}");
            Ok(())
        }
    }
}

/// User + system CPU seconds this process has used (Linux `/proc/self/stat`, in USER_HZ = 100 ticks per second
/// on every mainstream architecture); `None` elsewhere.
fn own_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th of the whole line.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

async fn create_topic(brokers: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let spec = TopicSpec { name: topic.to_owned(), partitions, compacted: false };
    ensure_topics(&KafkaConfig { brokers: brokers.to_owned(), ..KafkaConfig::default() }, &[spec], 1)
        .await
        .with_context(|| format!("create topic {topic}"))
}

fn write_json(path: Option<&std::path::Path>, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    match path {
        Some(path) => std::fs::write(path, text + "\n").with_context(|| format!("write {}", path.display())),
        None => {
            println!("{text}");
            Ok(())
        }
    }
}
