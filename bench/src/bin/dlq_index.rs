//! The replayer's index at scale: fills a fresh DLQ topic with N dead-letter records shaped like the consumer's
//! (every DLQ header, a JSON body, 64-hex-character event ids, a few hundred distinct error messages) and a
//! status for a fifth of them, then starts the real replayer service in this process and measures how long its
//! index takes to build (until `/readyz`), how much resident memory it adds, and the admin API's latency for
//! `list` (filtered pages, cursors), `stats` and `show` (one body read from Kafka by partition and offset).
//!
//!   cargo run --release -p hookline-bench --bin dlq-index-bench -- --brokers 127.0.0.1:19092 --entries 1000000

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use hookline_bench::record_key::BenchRecordKey;
use hookline_common::{
    config::{KafkaConfig, SecretRef},
    kafka::{TopicSpec, ensure_topics, producer_config},
    record_auth::RecordKeys,
    wire::{EntryStatus, EntryStatusRecord, EventMeta, kafka as wire_kafka, now_ms},
};
use hookline_dlq_replayer::ReplayerConfig;
use hookline_record::{
    Original, Outgoing, dead_letter::DeadLetterFailure, inbound::InboundRecord, retry::Origin as RetryOrigin,
};
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use rand::{Rng, SeedableRng, rngs::StdRng};
use rdkafka::{
    message::OwnedHeaders,
    producer::{FutureProducer, FutureRecord, Producer},
};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, env = "KAFKA_BROKERS", default_value = "127.0.0.1:19092")]
    brokers: String,
    #[arg(long, default_value_t = 1_000_000)]
    entries: usize,
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Requests per endpoint.
    #[arg(long, default_value_t = 2_000)]
    requests: usize,
    /// The replayer's `index.memory_budget_mb` (its default unless given).
    #[arg(long)]
    memory_budget_mb: Option<u64>,
}

const SOURCES: [&str; 6] = ["github", "stripe", "shopify", "slack", "twilio", "sendgrid"];
const TYPES: [&str; 8] =
    ["push", "invoice.paid", "orders/create", "event_callback", "sms", "delivered", "pull_request", "charge.failed"];

fn rss_bytes() -> u64 {
    status_bytes("VmRSS:")
}

/// The process's peak resident set since it started or since [`reset_peak_rss`].
fn peak_rss_bytes() -> u64 {
    status_bytes("VmHWM:")
}

fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Sets VmHWM back to the current VmRSS (Linux 4.0 and later: `5` to `/proc/self/clear_refs`), so that each phase's
/// peak is its own and not the fill's.
fn reset_peak_rss() {
    if let Err(error) = std::fs::write("/proc/self/clear_refs", "5") {
        eprintln!("could not reset the peak RSS: {error}");
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let run = uuid::Uuid::new_v4().simple().to_string();
    // The run's record key: the fill signs every dead letter as the consumer would, the replayer verifies.
    let record_key = BenchRecordKey::generate()?;
    let kafka = KafkaConfig {
        record_auth: record_key.record_auth(),
        brokers: args.brokers.clone(),
        dlq_topic: format!("bench-{run}-dlq"),
        dlq_status_topic: format!("bench-{run}-dlq-status"),
        ..KafkaConfig::default()
    };
    ensure_topics(
        &kafka,
        &[
            TopicSpec { name: kafka.dlq_topic.clone(), partitions: args.partitions, compacted: false },
            TopicSpec { name: kafka.dlq_status_topic.clone(), partitions: args.partitions, compacted: true },
        ],
        1,
    )
    .await
    .context("create topics")?;

    let started = Instant::now();
    fill(&kafka, record_key.keys(), args.entries, args.partitions).await?;
    eprintln!("filled {} entries in {:.1} s", args.entries, started.elapsed().as_secs_f64());

    // The CLI's way: one index built to the high watermarks, measured on its own.
    let mut replayer_config = ReplayerConfig { kafka: kafka.clone(), ..ReplayerConfig::default() };
    if let Some(budget) = args.memory_budget_mb {
        replayer_config.index.memory_budget_mb = budget;
    }
    reset_peak_rss();
    let rss_before_cli = rss_bytes();
    let cli_started = Instant::now();
    let (index, cli_build_s, rss_after_cli) = {
        let config = replayer_config.clone();
        tokio::task::spawn_blocking(move || {
            let index = hookline_dlq_replayer::ops::Replayer::empty_index(&config)?;
            hookline_dlq_replayer::index::tail(
                &config.kafka,
                &index,
                false,
                &CancellationToken::new(),
                Duration::from_secs(1800),
            )?;
            let build_s = cli_started.elapsed().as_secs_f64();
            Ok::<_, anyhow::Error>((index, build_s, rss_bytes()))
        })
        .await??
    };
    anyhow::ensure!(index.len() == args.entries, "index holds {} entries, not {}", index.len(), args.entries);
    let accounted_bytes = index.approx_bytes();
    let (cli_spilled_entries, cli_spill_file_bytes) = index.spilled();
    let cli_peak_rss = peak_rss_bytes();
    drop(index);
    eprintln!("CLI index: {cli_build_s:.1} s, {accounted_bytes} bytes accounted");

    let config_budget_mb = replayer_config.index.memory_budget_mb;
    let token_file = std::env::temp_dir().join(format!("hookline-bench-token-{run}"));
    std::fs::write(&token_file, "bench-token")?;
    let config = ReplayerConfig {
        kafka: kafka.clone(),
        api_token: Some(SecretRef::from_file("api", token_file.display().to_string())),
        refresh_interval_s: 15,
        ..replayer_config
    };
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = admin.local_addr()?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    reset_peak_rss();
    let rss_before = rss_bytes();
    let shutdown = CancellationToken::new();
    let build_started = Instant::now();
    let server = tokio::spawn(hookline_dlq_replayer::serve_api(config, admin, shutdown.clone()));
    loop {
        let (status, _) = get(&client, addr, "/readyz").await?;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let build_s = build_started.elapsed().as_secs_f64();
    let rss_after = rss_bytes();
    let bytes_per_entry = (rss_after.saturating_sub(rss_before)) as f64 / args.entries as f64;
    eprintln!("index built in {build_s:.1} s; RSS {} -> {} MiB", rss_before >> 20, rss_after >> 20);

    let mut rng = StdRng::seed_from_u64(7);
    let mut list = Histogram::<u64>::new(3)?;
    let mut cursor = String::new();
    for i in 0..args.requests {
        let path = match i % 4 {
            0 => format!("/v1/entries?limit=50&cursor={cursor}"),
            1 => format!("/v1/entries?limit=50&source={}", SOURCES[rng.random_range(0..SOURCES.len())]),
            2 => "/v1/entries?limit=50&status=new&error_class=poison".to_owned(),
            _ => format!("/v1/entries?limit=50&text=upstream%20{}", rng.random_range(0..300)),
        };
        let at = Instant::now();
        let (status, body) = get(&client, addr, &path).await?;
        list.record(at.elapsed().as_micros() as u64)?;
        anyhow::ensure!(status == 200, "{path}: {status}");
        if i % 4 == 0 {
            let page: serde_json::Value = serde_json::from_slice(&body)?;
            cursor = page["next_cursor"].as_str().unwrap_or("").to_owned();
        }
    }
    let mut stats = Histogram::<u64>::new(3)?;
    for i in 0..args.requests / 4 {
        let path = if i % 2 == 0 {
            "/v1/stats".to_owned()
        } else {
            format!("/v1/stats?source={}", SOURCES[i % SOURCES.len()])
        };
        let at = Instant::now();
        let (status, _) = get(&client, addr, &path).await?;
        stats.record(at.elapsed().as_micros() as u64)?;
        anyhow::ensure!(status == 200, "{path}: {status}");
    }
    let mut show = Histogram::<u64>::new(3)?;
    let per_partition = (args.entries as i64) / i64::from(args.partitions);
    for _ in 0..args.requests {
        let id = format!(
            "{}:{}:{}",
            kafka.dlq_topic,
            rng.random_range(0..args.partitions),
            rng.random_range(0..per_partition)
        );
        let path = format!("/v1/entries/{id}");
        let at = Instant::now();
        let (status, _) = get(&client, addr, &path).await?;
        show.record(at.elapsed().as_micros() as u64)?;
        anyhow::ensure!(status == 200, "{path}: {status}");
    }
    let service_peak_rss = peak_rss_bytes();
    shutdown.cancel();
    server.await??;
    let _ = std::fs::remove_file(token_file);
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let report = serde_json::json!({
        "entries": args.entries,
        "partitions": args.partitions,
        "index_memory_budget_mb": config_budget_mb,
        "cli_index_build_s": cli_build_s,
        "cli_index_accounted_bytes": accounted_bytes,
        "cli_spilled_entries": cli_spilled_entries,
        "cli_spill_file_bytes": cli_spill_file_bytes,
        "cli_rss_before_bytes": rss_before_cli,
        "cli_peak_rss_bytes": cli_peak_rss,
        "service_peak_rss_bytes": service_peak_rss,
        "cli_index_accounted_bytes_per_entry": accounted_bytes as f64 / args.entries as f64,
        "cli_index_rss_delta_bytes_per_entry": rss_after_cli.saturating_sub(rss_before_cli) as f64 / args.entries as f64,
        "service_ready_s": build_s,
        "service_rss_before_bytes": rss_before,
        "service_rss_after_bytes": rss_after,
        "service_rss_delta_bytes_per_entry": bytes_per_entry,
        "list_ms": {"n": list.len(), "p50": ms(&list, 0.5), "p99": ms(&list, 0.99), "max": list.max() as f64 / 1000.0},
        "stats_ms": {"n": stats.len(), "p50": ms(&stats, 0.5), "p99": ms(&stats, 0.99), "max": stats.max() as f64 / 1000.0},
        "show_ms": {"n": show.len(), "p50": ms(&show, 0.5), "p99": ms(&show, 0.99), "max": show.max() as f64 / 1000.0},
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

async fn get(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    path: &str,
) -> anyhow::Result<(u16, Bytes)> {
    let request = http::Request::get(format!("http://{addr}{path}"))
        .header("authorization", "Bearer bench-token")
        .body(Full::new(Bytes::new()))?;
    let response = client.request(request).await?;
    let status = response.status().as_u16();
    Ok((status, response.into_body().collect().await?.to_bytes()))
}

/// N DLQ records across the partitions, each with the consumer's DLQ headers and record MAC, and a status for
/// every fifth.
async fn fill(kafka: &KafkaConfig, keys: &RecordKeys, n: usize, partitions: i32) -> anyhow::Result<()> {
    let producer: FutureProducer = producer_config(kafka).set("linger.ms", "20").create()?;
    let mut rng = StdRng::seed_from_u64(42);
    let mut pending = Vec::with_capacity(10_000);
    for i in 0..n {
        let source = SOURCES[i % SOURCES.len()];
        let event_id: String = (0..32).map(|_| format!("{:02x}", rng.random::<u8>())).collect();
        let error = format!("upstream {} answered 422: field `amount` is invalid for account {}", i % 300, i % 300);
        let now = 1_764_000_000_000_i64 + i as i64 * 100;
        let class = if i % 3 == 0 { "retryable_exhausted" } else { "poison" };
        let body = format!(
            r#"{{"id":"{event_id}","type":"{}","data":{{"object":{{"amount":{},"currency":"usd","customer":"cus_{i}","description":"benchmark entry {i} with a body of a realistic size for a webhook"}}}}}}"#,
            TYPES[i % TYPES.len()],
            i % 10_000
        );
        // As the gateway writes the event and a consumer dead-letters it.
        let mut inbound = InboundRecord::new(EventMeta {
            source: source.to_owned(),
            event_id: event_id.clone(),
            event_type: Some(TYPES[i % TYPES.len()].to_owned()),
            received_at_ms: now,
            content_type: Some("application/json".to_owned()),
            secret_id: "primary".to_owned(),
            ordering_key: None,
        });
        inbound.forwarded_headers.push(("user-agent".to_owned(), Bytes::from_static(b"GitHub-Hookshot/abc123")));
        let inbound = inbound.encode("webhooks.inbound", Bytes::from(body));
        let failure = DeadLetterFailure {
            origin: RetryOrigin { topic: "webhooks.inbound".to_owned(), partition: 3, offset: i as i64 * 7 },
            consumer_group: "hookline-consumer".to_owned(),
            service: "hookline-consumer".to_owned(),
            handler: "http".to_owned(),
            attempts: 1 + (i % 5) as u32,
            error_class: class.to_owned(),
            error,
            first_failure_at_ms: now,
            last_failure_at_ms: now,
            consumer_version: "0.1.0".to_owned(),
            dedupe_retention_days: None,
            destination: None,
        };
        let original = Original { key: inbound.key.clone(), body: inbound.body.clone(), headers: &inbound.headers };
        let mut dead_letter = failure.encode(&kafka.dlq_topic, original);
        keys.sign_record(&mut dead_letter, now_ms())?;
        let partition = (i as i32) % partitions;
        let (headers, record) = kafka_record(&dead_letter);
        let record = record.partition(partition).headers(headers);
        pending.push(producer.send_result(record).map_err(|(error, _)| error)?);
        if i % 5 == 0 {
            let offset = (i as i64) / i64::from(partitions);
            let id = format!("{}:{partition}:{offset}", kafka.dlq_topic);
            let status = EntryStatusRecord {
                status: if i % 10 == 0 { EntryStatus::Succeeded } else { EntryStatus::Discarded },
                at_ms: now + 1000,
                by: "replayer:bench".into(),
                event_id: Some(event_id.clone()),
                new_entry: None,
                note: Some("benchmark".into()),
                replays: Some(1),
            };
            let mut status = status.encode(&kafka.dlq_status_topic, &id);
            keys.sign_record(&mut status, now_ms())?;
            let (headers, record) = kafka_record(&status);
            let record = record.headers(headers);
            pending.push(producer.send_result(record).map_err(|(error, _)| error)?);
        }
        if pending.len() >= 10_000 {
            for delivery in pending.drain(..) {
                delivery.await?.map_err(|(error, _)| error)?;
            }
        }
    }
    for delivery in pending.drain(..) {
        delivery.await?.map_err(|(error, _)| error)?;
    }
    producer.flush(Duration::from_secs(30))?;
    Ok(())
}

/// A signed record as librdkafka's parts (this bench produces with its own producer, to pick partitions), its
/// headers apart for the caller to attach.
fn kafka_record(record: &Outgoing) -> (OwnedHeaders, FutureRecord<'_, [u8], [u8]>) {
    let mut out = FutureRecord::<[u8], [u8]>::to(&record.topic);
    if let Some(key) = &record.key {
        out = out.key(key.as_ref());
    }
    if let Some(body) = &record.body {
        out = out.payload(body.as_ref());
    }
    (wire_kafka::owned_headers(&record.headers), out)
}
