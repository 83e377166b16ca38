//! The consumer most teams write first, as the peer hookline's consumer is measured against (issue 25, item 4): one
//! rdkafka `StreamConsumer` loop that, per record, sets a Redis key for its event id with `SET NX EX`, and when
//! the key was new posts the body to the same sink hookline's `http` handler posts to, waits for the answer, and
//! lets auto-commit store the offset. Written here, in the bench crate, so both run in the same run against the
//! same topic and sink.
//!
//! What it keeps, and what it does not (the comparison is of throughput; these are why the two differ):
//! - duplicates: skipped while their key lives, like hookline's;
//! - a crash after the `SET` and before the sink's answer loses the event (the key says done, the work was not, and
//!   auto-commit stores each offset as the record is received):
//!   hookline claims first and marks done after success (two-phase);
//! - a sink failure is logged and the event is gone: no retry topic, no dead letter, no alert;
//! - no record MAC check, no route limits, no breaker; one record at a time, so its rate is bounded by the sink's
//!   latency (1 / D per consumer).

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use rdkafka::{
    ClientConfig, Message,
    consumer::{Consumer, StreamConsumer},
};

use crate::consumer_http::{HttpBenchConfig, Sink, fill_sources, measure_consumer, serve_sink};

/// One timed run of one of the two consumers.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PeerRow {
    /// `hookline` or `naive`.
    pub consumer: String,
    pub delay_ms: u64,
    /// 1-based; the two consumers alternate, hookline first (A B A B).
    pub round: usize,
    /// Events processed in the timed window.
    pub events: u64,
    pub duration_s: f64,
    pub events_per_s: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PeerReport {
    pub partitions: i32,
    pub rows: Vec<PeerRow>,
    /// Per delay: hookline's mean events/s over the naive consumer's.
    pub ratios: Vec<(u64, f64)>,
}

/// For each delay D: one topic filled with `n_events` records of one source, then hookline's consumer (the `http`
/// handler, `max_in_flight` as configured) and the naive loop, each in a fresh group over the whole topic,
/// alternating for `rounds` rounds, against one sink answering 200 after D.
pub async fn run_peer(
    config: &HttpBenchConfig,
    partitions: i32,
    rounds: usize,
    naive_window: Duration,
) -> anyhow::Result<PeerReport> {
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for &delay_ms in &config.delays_ms {
        let topic = format!("hookline-bench-peer-{}", uuid::Uuid::new_v4().simple());
        let retry_topic = format!("{topic}-retry");
        let specs = [&topic, &retry_topic].map(|name| hookline_common::kafka::TopicSpec {
            name: name.clone(),
            partitions,
            compacted: false,
        });
        let kafka = hookline_common::config::KafkaConfig { brokers: config.brokers.clone(), ..Default::default() };
        hookline_common::kafka::ensure_topics(&kafka, &specs, 1).await?;
        let n_events: u64 = if delay_ms == 0 { 20_000 } else { 15_000 };
        fill_sources(
            &config.brokers,
            &topic,
            &["bench-healthy"],
            n_events,
            config.body_bytes,
            config.record_key.keys(),
        )
        .await?;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let sink_addr = listener.local_addr()?;
        let sink_task =
            tokio::spawn(serve_sink(listener, Duration::from_millis(delay_ms), std::sync::Arc::new(Sink::default())));
        let mut per_consumer = [Vec::new(), Vec::new()];
        for round in 1..=rounds {
            let measured = measure_consumer(config, &topic, &retry_topic, sink_addr, n_events).await?;
            let row = PeerRow {
                consumer: "hookline".to_owned(),
                delay_ms,
                round,
                events: n_events,
                duration_s: measured.duration_s,
                events_per_s: measured.events_per_s,
            };
            eprintln!("consumer-peer: D = {delay_ms} ms, round {round}: hookline {:.0} events/s", row.events_per_s);
            per_consumer[0].push(row.events_per_s);
            rows.push(row);

            let row = naive_run(config, &topic, sink_addr, n_events, naive_window, delay_ms, round).await?;
            eprintln!("consumer-peer: D = {delay_ms} ms, round {round}: naive {:.0} events/s", row.events_per_s);
            per_consumer[1].push(row.events_per_s);
            rows.push(row);
        }
        sink_task.abort();
        let mean = |values: &[f64]| values.iter().sum::<f64>() / values.len().max(1) as f64;
        ratios.push((delay_ms, mean(&per_consumer[0]) / mean(&per_consumer[1]).max(f64::MIN_POSITIVE)));
    }
    Ok(PeerReport { partitions, rows, ratios })
}

/// The naive loop over `topic` in a fresh group and key space, timed from its first processed record until
/// `n_events` are processed or `window` has passed (at D = 20 ms it does ~50 a second).
async fn naive_run(
    config: &HttpBenchConfig,
    topic: &str,
    sink_addr: SocketAddr,
    n_events: u64,
    window: Duration,
    delay_ms: u64,
    round: usize,
) -> anyhow::Result<PeerRow> {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    // What a first consumer's config looks like: a group, earliest, auto-commit of what was read.
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &config.brokers)
        .set("group.id", format!("naive-{run_id}"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "true")
        .create()?;
    consumer.subscribe(&[topic])?;
    let mut redis = redis::Client::open(config.redis_url.as_str())?.get_multiplexed_async_connection().await?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let sink: http::Uri = format!("http://{sink_addr}/healthy").parse()?;

    let deadline = Instant::now() + config.timeout;
    let mut first: Option<Instant> = None;
    let mut processed = 0_u64;
    while processed < n_events && first.is_none_or(|first| first.elapsed() < window) {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let message = tokio::time::timeout(remaining, consumer.recv())
            .await
            .map_err(|_| anyhow::anyhow!("naive consumer: timed out after {processed} of {n_events}"))??;
        let event_id = hookline_record::Claims::of(hookline_common::wire::kafka::headers_of(message.headers()))
            .event_id()
            .unwrap_or_default();
        let key = format!("naive:{run_id}:{event_id}");
        let fresh: Option<String> =
            redis::cmd("SET").arg(&key).arg(1).arg("NX").arg("EX").arg(600).query_async(&mut redis).await?;
        if fresh.is_none() {
            continue;
        }
        let body = Bytes::copy_from_slice(message.payload().unwrap_or_default());
        let request = http::Request::post(sink.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        let response = client.request(request).await?;
        if !response.status().is_success() {
            eprintln!("naive consumer: {event_id}: the sink answered {}; the event is lost", response.status());
        }
        first.get_or_insert_with(Instant::now);
        processed += 1;
    }
    let duration_s = first.map_or(0.0, |first| first.elapsed().as_secs_f64()).max(1e-3);
    Ok(PeerRow {
        consumer: "naive".to_owned(),
        delay_ms,
        round,
        events: processed,
        duration_s,
        events_per_s: processed.saturating_sub(1) as f64 / duration_s,
    })
}
