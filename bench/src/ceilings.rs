//! The ceilings the gateway and the consumer are measured against, on the same machine in the same run:
//! - [`serve_http_ceiling`]: a minimal hyper server that reads the body and answers 202 at once, so the load
//!   generator against it measures what HTTP alone (and the generator itself) allows;
//! - [`kafka_ceiling`]: an rdkafka producer alone, with the gateway's producer settings and record layout
//!   (including the record MAC the gateway adds, [`hookline_common::record_auth`]);
//! - [`redis_ceiling`]: the consumer's own claim and done scripts, one round trip at a time, concurrently, and
//!   pipelined.

use std::{
    convert::Infallible,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use hookline_common::{
    config::{KafkaConfig, RedisConfig},
    kafka::{QuietContext, producer_config},
    record_auth::RecordKeys,
    wire::{
        EventMeta, now_ms,
        redis_key::{DEDUPE_CLAIM_PREFIX, DEDUPE_DONE, DoneMarker},
    },
};
// The pipelined-scripts ceiling measures the previous layout's one-key scripts (the figures published with it).
use hookline_consumer::dedupe::{
    Claim, Dedupe,
    previous_layout::{CLAIM_SCRIPT, DONE_SCRIPT},
};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::{body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use rdkafka::{
    producer::{FutureProducer, FutureRecord},
    util::Timeout,
};
use redis::Script;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    loadgen::{Percentiles, new_histogram},
    record_key::BenchRecordKey,
    signing::json_body,
};

/// Serves `listener` until `shutdown`: every request's body is read whole and answered `202` with a small JSON
/// body, like the gateway's acknowledgement, over HTTP/1.1 or HTTP/2 (h2c).
pub async fn serve_http_ceiling(listener: TcpListener, shutdown: CancellationToken) {
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let (stream, _) = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => continue,
            },
        };
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(|request: Request<Incoming>| async move {
                let _ = request.into_body().collect().await;
                let mut response = Response::new(Full::new(Bytes::from_static(br#"{"status":"accepted"}"#)));
                *response.status_mut() = StatusCode::ACCEPTED;
                response.headers_mut().insert(http::header::CONTENT_TYPE, "application/json".parse().expect("mime"));
                Ok::<_, Infallible>(response)
            });
            tokio::select! {
                () = shutdown.cancelled() => {}
                _ = builder.serve_connection(TokioIo::new(stream), service) => {}
            }
        });
    }
}

#[derive(Debug, Clone)]
pub struct KafkaCeilingConfig {
    pub brokers: String,
    /// An existing topic (the script creates a fresh one per run).
    pub topic: String,
    pub message_bytes: usize,
    /// Produces awaiting their acknowledgement at once (the gateway's concurrent requests).
    pub concurrency: usize,
    pub duration: Duration,
    /// Stop once this many records were sent, even before `duration` is over (a fill of a given size).
    pub max_records: Option<u64>,
    /// Signs every record, as the gateway does (the MAC is part of the gateway's record).
    pub record_key: BenchRecordKey,
    /// Leaves the MAC out (records as written before record MACs): the other half of "what does the MAC cost"
    /// on the produce path. Never something a hookline service can do.
    pub unsigned: bool,
    /// Open loop: produce at this rate in all (each of the `concurrency` tasks its share, at fixed slots),
    /// each acknowledgement timed from its slot, not from when the task got round to it, as the load generator
    /// times a gateway's answers: the bare producer's side of "how much of the gateway's time to 2xx is the
    /// broker's". `None`: closed loop, as fast as `concurrency` awaited produces allow.
    pub rate_per_s: Option<f64>,
    /// `linger.ms` instead of the producers' fixed setting: the gateway's, for a like-for-like pair.
    pub linger_ms: Option<f64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct KafkaCeilingReport {
    pub message_bytes: usize,
    /// The `linger.ms` asked for, if not the producers' fixed one.
    pub linger_ms: Option<f64>,
    pub concurrency: usize,
    /// The open-loop rate asked for, if any.
    pub target_rate_per_s: Option<f64>,
    pub duration_s: f64,
    pub acknowledged: u64,
    pub failed: u64,
    /// Records produced before the measurement (also in the topic).
    pub warm_up_records: u64,
    pub messages_per_s: f64,
    pub ack_latency: Percentiles,
}

/// Produces gateway-shaped records (key = event id, the gateway's headers and record MAC, a JSON body) as fast as `concurrency`
/// awaited produces allow, with the gateway's producer settings (`producer_config`: idempotent, `acks=all`,
/// `linger.ms`, lz4), and measures the acknowledgements.
pub async fn kafka_ceiling(config: &KafkaCeilingConfig) -> Result<KafkaCeilingReport, rdkafka::error::KafkaError> {
    let kafka =
        KafkaConfig { brokers: config.brokers.clone(), inbound_topic: config.topic.clone(), ..KafkaConfig::default() };
    let mut producer_settings = producer_config(&kafka);
    if let Some(linger_ms) = config.linger_ms {
        producer_settings.set("linger.ms", linger_ms.to_string());
    }
    let producer: FutureProducer<QuietContext> =
        producer_settings.create_with_context(QuietContext::new("bench-kafka-ceiling"))?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    // Warm-up, not measured: the first produce to a fresh topic waits for its metadata and the producer id
    // (the gateway does the same before it reports ready). A gateway-shaped record, so consumers handle it.
    let warm_up_id = format!("kafka-{run_id}-warm-up");
    let keys = (!config.unsigned).then(|| config.record_key.keys().clone());
    let (body, headers) = gateway_record(keys.as_ref(), &config.topic, &warm_up_id, config.message_bytes);
    let record = FutureRecord::to(&config.topic).key(warm_up_id.as_bytes()).payload(&body).headers(headers);
    producer.send(record, Timeout::After(Duration::from_secs(10))).await.map_err(|(error, _)| error)?;
    let start = Instant::now();
    let end = start + config.duration;
    let mut tasks = Vec::new();
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let max_records = config.max_records.unwrap_or(u64::MAX);
    // Open loop: each task's slots `interval` apart, the tasks' first slots staggered across one interval.
    let interval = config.rate_per_s.map(|rate| Duration::from_secs_f64(config.concurrency as f64 / rate));
    for task_idx in 0..config.concurrency {
        let (producer, topic, run_id, keys) = (producer.clone(), config.topic.clone(), run_id.clone(), keys.clone());
        let (message_bytes, concurrency) = (config.message_bytes, config.concurrency);
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            let mut histogram = new_histogram();
            let (mut acknowledged, mut failed) = (0_u64, 0_u64);
            let mut seq = 0_u64;
            let mut slot = interval.map(|interval| start + interval.mul_f64(task_idx as f64 / concurrency as f64));
            while Instant::now() < end && sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < max_records {
                seq += 1;
                let event_id = format!("kafka-{run_id}-{task_idx}-{seq}");
                let (body, headers) = gateway_record(keys.as_ref(), &topic, &event_id, message_bytes);
                let record = FutureRecord::to(&topic).key(event_id.as_bytes()).payload(&body).headers(headers);
                let sent_at = match (slot, interval) {
                    (Some(at), Some(interval)) => {
                        tokio::time::sleep_until(at.into()).await;
                        slot = Some(at + interval);
                        at
                    }
                    _ => Instant::now(),
                };
                match producer.send(record, Timeout::After(Duration::ZERO)).await {
                    Ok(_) => {
                        acknowledged += 1;
                        let micros = u64::try_from(sent_at.elapsed().as_micros()).unwrap_or(u64::MAX);
                        histogram.saturating_record(micros.max(1));
                    }
                    Err(_) => failed += 1,
                }
            }
            (histogram, acknowledged, failed)
        }));
    }
    let mut histogram = new_histogram();
    let (mut acknowledged, mut failed) = (0, 0);
    for task in tasks {
        let (task_histogram, task_acknowledged, task_failed) = task.await.expect("producer task panicked");
        histogram.add(&task_histogram).expect("same bounds");
        acknowledged += task_acknowledged;
        failed += task_failed;
    }
    let duration_s = start.elapsed().as_secs_f64();
    Ok(KafkaCeilingReport {
        message_bytes: config.message_bytes,
        linger_ms: config.linger_ms,
        concurrency: config.concurrency,
        target_rate_per_s: config.rate_per_s,
        duration_s,
        acknowledged,
        failed,
        warm_up_records: 1,
        messages_per_s: acknowledged as f64 / duration_s,
        ack_latency: Percentiles::from_micros(&histogram),
    })
}

/// The body and headers the gateway would produce for a verified GitHub delivery of `event_id` to `topic`,
/// signed with `keys` (the record MAC the gateway's producer adds; none: unsigned).
fn gateway_record(
    keys: Option<&RecordKeys>,
    topic: &str,
    event_id: &str,
    message_bytes: usize,
) -> (Vec<u8>, rdkafka::message::OwnedHeaders) {
    let meta = EventMeta {
        source: "bench-github".to_owned(),
        event_id: event_id.to_owned(),
        event_type: Some("push".to_owned()),
        received_at_ms: now_ms(),
        content_type: Some("application/json".to_owned()),
        secret_id: "bench".to_owned(),
        ordering_key: None,
    };
    let body = json_body(event_id, message_bytes);
    let headers = match keys {
        Some(keys) => keys
            .sign(
                topic,
                Some(event_id.as_bytes()),
                Some(&body),
                Some(&hookline_common::wire::event_headers(&meta)),
                now_ms(),
            )
            .expect("the bench's record key is valid now"),
        None => hookline_common::wire::event_headers(&meta),
    };
    (body, headers)
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RedisCeilingRow {
    /// `sequential`, `concurrent`, `pipelined` or `batched_script`.
    pub mode: String,
    /// Tasks issuing claim/done pairs at once.
    pub concurrency: usize,
    /// Claims (then dones) per pipeline; 1 when not pipelined.
    pub batch: usize,
    pub duration_s: f64,
    /// Events taken through claim and done.
    pub events: u64,
    pub events_per_s: f64,
    /// Latency of one claim+done pair (per batch when pipelined).
    pub claim_done_latency: Percentiles,
}

/// Claim then done, the consumer's two dedupe round trips per event, with its own scripts: one event at a time
/// (`sequential`), from `concurrency` tasks over the consumer's multiplexed connection (`concurrent`, what the
/// partition workers do), and `batch` claims then `batch` dones per pipeline (`pipelined`, what batching would do).
pub async fn redis_ceiling(
    redis_url: &str,
    duration: Duration,
    concurrency: usize,
    batch: usize,
) -> Result<Vec<RedisCeilingRow>, hookline_consumer::dedupe::DedupeError> {
    let config = RedisConfig {
        url: redis_url.to_owned(),
        key_prefix: format!("hookline-bench:{}", uuid::Uuid::new_v4().simple()),
        // Short TTLs so the benchmark's keys clean themselves up.
        dedupe_ttl_s: 60,
        ..RedisConfig::default()
    };
    let dedupe = Dedupe::connect(&config, "bench").await?;
    let mut rows = Vec::new();
    for (mode, tasks) in [("sequential", 1), ("concurrent", concurrency)] {
        let start = Instant::now();
        let end = start + duration;
        let mut handles = Vec::new();
        for task_idx in 0..tasks {
            let dedupe = dedupe.clone();
            handles.push(tokio::spawn(async move {
                let mut histogram = new_histogram();
                let mut seq = 0_u64;
                while Instant::now() < end {
                    seq += 1;
                    let token = dedupe.token("bench", &format!("{mode}-{task_idx}-{seq}"));
                    let started = Instant::now();
                    let claim = dedupe.claim(&token).await?;
                    assert!(matches!(claim, Claim::Acquired(_)), "a fresh key is free");
                    let marker = DoneMarker {
                        processed_at_ms: hookline_common::wire::now_ms(),
                        handling_ms: 0,
                        topic: "webhooks.inbound".to_owned(),
                        partition: 0,
                        offset: i64::try_from(seq).unwrap_or(i64::MAX),
                    };
                    dedupe.mark_done(&token, &marker).await?;
                    histogram.saturating_record(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
                }
                Ok::<_, hookline_consumer::dedupe::DedupeError>((histogram, seq))
            }));
        }
        let mut histogram = new_histogram();
        let mut events = 0;
        for handle in handles {
            let (task_histogram, task_events) = handle.await.expect("redis task panicked")?;
            histogram.add(&task_histogram).expect("same bounds");
            events += task_events;
        }
        let duration_s = start.elapsed().as_secs_f64();
        rows.push(RedisCeilingRow {
            mode: mode.to_owned(),
            concurrency: tasks,
            batch: 1,
            duration_s,
            events,
            events_per_s: events as f64 / duration_s,
            claim_done_latency: Percentiles::from_micros(&histogram),
        });
    }
    rows.push(pipelined(&config, duration, batch).await?);
    rows.push(batched_scripts(&config, duration, batch).await?);
    Ok(rows)
}

/// The claim rule of [`CLAIM_SCRIPT`], applied to every key of one call: what a batched claim could look like.
/// Not what the consumer runs today; measured to size the fix (and on a Redis Cluster its keys would need one
/// hash slot, which the current key layout does not give).
const BATCH_CLAIM_SCRIPT: &str = r"
local replies = {}
for i, key in ipairs(KEYS) do
  local token = ARGV[i]
  if redis.call('SET', key, token, 'NX', 'PX', ARGV[#KEYS + 1]) then
    replies[i] = 'acquired'
  else
    local current = redis.call('GET', key)
    if current == token then replies[i] = 'acquired'
    elseif current == ARGV[#KEYS + 2] then replies[i] = 'done'
    elseif current == false then redis.call('SET', key, token, 'PX', ARGV[#KEYS + 1]); replies[i] = 'acquired'
    else replies[i] = 'held' end
  end
end
return replies
";

/// The done rule of [`DONE_SCRIPT`] for every key of one call.
const BATCH_DONE_SCRIPT: &str = r"
local replies = {}
for i, key in ipairs(KEYS) do
  local current = redis.call('GET', key)
  redis.call('SET', key, ARGV[#KEYS + 1], 'PX', ARGV[#KEYS + 2])
  if current == ARGV[i] or current == ARGV[#KEYS + 1] then replies[i] = 1 else replies[i] = 0 end
end
return replies
";

/// One task: one script call claiming `batch` keys, then one marking them done, per round.
async fn batched_scripts(
    config: &RedisConfig,
    duration: Duration,
    batch: usize,
) -> Result<RedisCeilingRow, hookline_consumer::dedupe::DedupeError> {
    let mut connection = hookline_common::redis_security::multiplexed_connection(config).await?;
    let (claim, done) = (Script::new(BATCH_CLAIM_SCRIPT), Script::new(BATCH_DONE_SCRIPT));
    let mut histogram = new_histogram();
    let mut events = 0_u64;
    let start = Instant::now();
    let end = start + duration;
    while Instant::now() < end {
        let keys: Vec<String> =
            (0..batch).map(|i| format!("{}:bench:batched-{events}-{i}", config.key_prefix)).collect();
        let tokens: Vec<String> =
            (0..batch).map(|_| format!("{DEDUPE_CLAIM_PREFIX}{}", uuid::Uuid::new_v4().simple())).collect();
        let started = Instant::now();
        let mut invocation = claim.prepare_invoke();
        for (key, token) in keys.iter().zip(&tokens) {
            invocation.key(key).arg(token);
        }
        let replies: Vec<String> =
            invocation.arg(config.claim_lease_ms).arg(DEDUPE_DONE).invoke_async(&mut connection).await?;
        assert!(replies.iter().all(|reply| reply == "acquired"), "fresh keys are free");
        let mut invocation = done.prepare_invoke();
        for (key, token) in keys.iter().zip(&tokens) {
            invocation.key(key).arg(token);
        }
        let _: Vec<i64> =
            invocation.arg(DEDUPE_DONE).arg(config.dedupe_ttl_s * 1000).invoke_async(&mut connection).await?;
        histogram.saturating_record(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        events += batch as u64;
    }
    let duration_s = start.elapsed().as_secs_f64();
    Ok(RedisCeilingRow {
        mode: "batched_script".to_owned(),
        concurrency: 1,
        batch,
        duration_s,
        events,
        events_per_s: events as f64 / duration_s,
        claim_done_latency: Percentiles::from_micros(&histogram),
    })
}

/// One task: a pipeline of `batch` claim scripts, then a pipeline of `batch` done scripts, per round.
async fn pipelined(
    config: &RedisConfig,
    duration: Duration,
    batch: usize,
) -> Result<RedisCeilingRow, hookline_consumer::dedupe::DedupeError> {
    let mut connection = hookline_common::redis_security::multiplexed_connection(config).await?;
    let (claim, done) = (Script::new(CLAIM_SCRIPT), Script::new(DONE_SCRIPT));
    for script in [&claim, &done] {
        script.load_async(&mut connection).await?;
    }
    let lease_ms = config.claim_lease_ms;
    let done_ttl_ms = config.dedupe_ttl_s * 1000;
    let mut histogram = new_histogram();
    let mut events = 0_u64;
    let start = Instant::now();
    let end = start + duration;
    while Instant::now() < end {
        let keys: Vec<(String, String)> = (0..batch)
            .map(|i| {
                (
                    format!("{}:bench:pipelined-{events}-{i}", config.key_prefix),
                    format!("{DEDUPE_CLAIM_PREFIX}{}", uuid::Uuid::new_v4().simple()),
                )
            })
            .collect();
        let started = Instant::now();
        let mut claims = redis::pipe();
        for (key, token) in &keys {
            claims.invoke_script(claim.key(key).arg(token).arg(lease_ms).arg(DEDUPE_DONE));
        }
        let replies: Vec<String> = claims.query_async(&mut connection).await?;
        assert!(replies.iter().all(|reply| reply == "acquired"), "fresh keys are free");
        let mut dones = redis::pipe();
        for (key, token) in &keys {
            dones.invoke_script(done.key(key).arg(token).arg(DEDUPE_DONE).arg(done_ttl_ms));
        }
        let _: Vec<i64> = dones.query_async(&mut connection).await?;
        histogram.saturating_record(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        events += batch as u64;
    }
    let duration_s = start.elapsed().as_secs_f64();
    Ok(RedisCeilingRow {
        mode: "pipelined".to_owned(),
        concurrency: 1,
        batch,
        duration_s,
        events,
        events_per_s: events as f64 / duration_s,
        claim_done_latency: Percentiles::from_micros(&histogram),
    })
}
