//! Event search at scale: fills a fresh inbound topic with N accepted records shaped like the gateway's (its
//! headers, a JSON body of about `--body-bytes`, signed with a fresh record key, one record every
//! `--interval-us` of record time), then runs the replayer's search (the code `hookline-replayer events` runs)
//! over the whole range for one source and type (a sixteenth of the records, each MAC-checked) with a condition
//! that matches one in 500 of those, and prints records read per second; then a plain read of the same partitions,
//! with the same reader settings and nothing judged, for the ceiling beside it.
//!
//!   cargo run --release -p hookline-bench --bin event-search-bench -- --brokers 127.0.0.1:19092 --records 3600000

use hookline_common::time::format_rfc3339_millis;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use hookline_bench::record_key::BenchRecordKey;
use hookline_common::{
    config::KafkaConfig,
    kafka::{QuietContext, TopicSpec, assignment_reader_config, ensure_topics, producer_config},
    record_auth::RecordKeys,
    wire::{EventMeta, kafka as wire_kafka, now_ms},
};
use hookline_dlq_replayer::{ReplayerConfig, config::EventsConfig, events::SearchRequest, ops::Replayer};
use hookline_record::inbound::InboundRecord;
use rdkafka::{
    Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    producer::{FutureProducer, FutureRecord},
};

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, env = "KAFKA_BROKERS", default_value = "127.0.0.1:19092")]
    brokers: String,
    #[arg(long, default_value_t = 3_600_000)]
    records: usize,
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    #[arg(long, default_value_t = 400)]
    body_bytes: usize,
    /// Record time between two records (1000: an hour at 1,000 events/s).
    #[arg(long, default_value_t = 1000)]
    interval_us: i64,
    /// Also write a replayer config for the filled topic here (and its record key beside it, `<path>.key`, mode
    /// 0600), and the `events` command line to run with it: to time the CLI of a release build on the same data.
    #[arg(long)]
    cli_config_out: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let record_key = BenchRecordKey::generate()?;
    let kafka = KafkaConfig {
        record_auth: record_key.record_auth(),
        brokers: args.brokers.clone(),
        inbound_topic: format!("bench-{run}-inbound"),
        ..KafkaConfig::default()
    };
    ensure_topics(
        &kafka,
        &[TopicSpec { name: kafka.inbound_topic.clone(), partitions: args.partitions, compacted: false }],
        1,
    )
    .await
    .context("create the topic")?;
    let span_ms = i64::try_from(args.records).unwrap_or(i64::MAX) * args.interval_us / 1000;
    let base_ms = now_ms() - span_ms - 60_000;
    let started = Instant::now();
    fill(&kafka, record_key.keys(), &args, base_ms).await?;
    eprintln!("filled {} records in {:.1} s", args.records, started.elapsed().as_secs_f64());

    if let Some(path) = &args.cli_config_out {
        write_cli_config(path, &record_key, &kafka, base_ms, span_ms)?;
    }
    let config = ReplayerConfig {
        kafka: kafka.clone(),
        events: EventsConfig { max_records: u64::MAX, max_seconds: 3600, ..EventsConfig::default() },
        ..ReplayerConfig::default()
    };
    let replayer = Replayer::new(config)?;
    let request = SearchRequest {
        source: "stripe".to_owned(),
        event_type: Some("invoice.paid".to_owned()),
        since: format_rfc3339_millis(base_ms),
        until: Some(format_rfc3339_millis(base_ms + span_ms + 1)),
        conditions: vec!["/data/object/customer == \"cus_42\"".to_owned()],
        limit: Some(10_000),
        ..SearchRequest::default()
    };
    let search_started = Instant::now();
    let report = replayer
        .search_events(&request, |progress| {
            eprintln!("{}", hookline_dlq_replayer::events::render::progress_line(progress))
        })
        .await?;
    let search_s = search_started.elapsed().as_secs_f64();
    anyhow::ensure!(report.progress.records_read == args.records as u64, "read {:?}", report.progress);

    let raw_started = Instant::now();
    let raw = {
        let kafka = kafka.clone();
        let partitions = args.partitions;
        let records = args.records;
        tokio::task::spawn_blocking(move || raw_read(&kafka, partitions, records)).await??
    };
    let raw_s = raw_started.elapsed().as_secs_f64();
    let report = serde_json::json!({
        "records": args.records,
        "partitions": args.partitions,
        "body_bytes": args.body_bytes,
        "search_s": search_s,
        "search_records_per_s": args.records as f64 / search_s,
        "candidates_mac_checked": report.progress.candidates,
        "matches": report.matches.len(),
        "raw_read_s": raw_s,
        "raw_records_per_s": raw as f64 / raw_s,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// A replayer config for the filled topic, with a copy of the run's record key, and the command to time.
fn write_cli_config(
    path: &std::path::Path,
    record_key: &BenchRecordKey,
    kafka: &KafkaConfig,
    base_ms: i64,
    span_ms: i64,
) -> anyhow::Result<()> {
    use std::{io::Write as _, os::unix::fs::OpenOptionsExt as _};
    let key_path = path.with_extension("key");
    let key = record_key.record_auth().keys[0].load().map_err(|problem| anyhow::anyhow!("{problem}"))?;
    let mut out = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&key_path)?;
    out.write_all(&key)?;
    std::fs::write(
        path,
        format!(
            "[kafka]\nbrokers = {:?}\ninbound_topic = {:?}\nrecord_auth = {{ keys = [{{ id = {:?}, file = {:?} }}] }}\n\
             [events]\nmax_records = 100000000\nmax_seconds = 3600\n",
            kafka.brokers,
            kafka.inbound_topic,
            record_key.record_auth().keys[0].id,
            key_path.display().to_string(),
        ),
    )?;
    eprintln!(
        "hookline-replayer --config {} events --source stripe --type invoice.paid --since {} --until {} --where '/data/object/customer == \"cus_42\"' --limit 10000",
        path.display(),
        format_rfc3339_millis(base_ms),
        format_rfc3339_millis(base_ms + span_ms + 1)
    );
    Ok(())
}

const SOURCES: [&str; 4] = ["stripe", "github", "shopify", "slack"];
const STRIPE_TYPES: [&str; 4] = ["invoice.paid", "charge.succeeded", "customer.updated", "invoice.created"];

async fn fill(kafka: &KafkaConfig, keys: &RecordKeys, args: &Args, base_ms: i64) -> anyhow::Result<()> {
    let producer: FutureProducer = producer_config(kafka)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()?;
    let padding = "x".repeat(args.body_bytes.saturating_sub(160));
    let mut pending = std::collections::VecDeque::new();
    for i in 0..args.records {
        let source = SOURCES[i % SOURCES.len()];
        let event_type = if source == "stripe" { STRIPE_TYPES[(i / 4) % STRIPE_TYPES.len()] } else { "push" };
        let body = format!(
            r#"{{"id":"evt_{i}","type":"{event_type}","data":{{"object":{{"customer":"cus_{}","amount_paid":{},"note":"{padding}"}}}}}}"#,
            (i / 16) % 500,
            i % 10_000
        );
        let event_id = format!("evt_{i}");
        let timestamp = base_ms + i64::try_from(i).unwrap_or(0) * args.interval_us / 1000;
        // As the gateway writes it.
        let mut record = InboundRecord::new(EventMeta {
            source: source.to_owned(),
            event_id: event_id.clone(),
            event_type: Some(event_type.to_owned()),
            received_at_ms: timestamp,
            content_type: Some("application/json".to_owned()),
            secret_id: "primary".to_owned(),
            ordering_key: None,
        })
        .encode(&kafka.inbound_topic, body.clone().into());
        keys.sign_record(&mut record, now_ms()).map_err(|error| anyhow::anyhow!("sign: {error:?}"))?;
        let headers = wire_kafka::owned_headers(&record.headers);
        let partition = i32::try_from(i).unwrap_or(0) % args.partitions;
        let record = FutureRecord::to(&kafka.inbound_topic)
            .partition(partition)
            .key(event_id.as_bytes())
            .payload(body.as_bytes())
            .headers(headers)
            .timestamp(timestamp);
        pending.push_back(producer.send_result(record).map_err(|(error, _)| error)?);
        if pending.len() >= 200_000 {
            for delivery in pending.drain(..100_000) {
                delivery.await?.map_err(|(error, _)| error)?;
            }
        }
    }
    for delivery in pending {
        delivery.await?.map_err(|(error, _)| error)?;
    }
    Ok(())
}

/// Reads every record of the topic and does nothing with it: the ceiling.
fn raw_read(kafka: &KafkaConfig, partitions: i32, records: usize) -> anyhow::Result<usize> {
    let consumer: BaseConsumer<QuietContext> = assignment_reader_config(
        kafka,
        &[
            ("fetch.wait.max.ms", "50"),
            ("queued.min.messages", "200000"),
            ("queued.max.messages.kbytes", "262144"),
            ("fetch.max.bytes", "104857600"),
            ("max.partition.fetch.bytes", "16777216"),
        ],
    )
    .create_with_context(QuietContext::new("raw"))?;
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment.add_partition_offset(&kafka.inbound_topic, partition, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let mut read = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    while read < records && Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            message?;
            read += 1;
        }
    }
    Ok(read)
}
