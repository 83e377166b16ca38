//! Benchmarks of the webhook-to-durable-Kafka path, reproducible on one machine: a load generator that signs
//! every request with a real provider scheme and afterwards proves the topic holds exactly what was acknowledged
//! ([`loadgen`], [`topic_check`]), the ceilings it is compared with ([`ceilings`]: bare HTTP, a bare Kafka
//! producer, bare Redis dedupe round trips), the consumer's end-to-end throughput ([`consumer_bench`]), and an
//! HTTP/2 stream flood against the gateway's memory bound ([`h2_flood`]).
//!
//! `scripts/bench` runs the whole set through the `hookline-bench` binary and `report` turns the results into
//! the tables of `docs/benchmarks.md`. The test suite only runs a short smoke of the generator.

pub mod ceilings;
pub mod consumer_bench;
pub mod consumer_http;
pub mod cpu;
pub mod fan_out_egress;
pub mod h2_flood;
pub mod loadgen;
pub mod naive_consumer;
pub mod postgres_bench;
pub mod record_key;
pub mod report;
pub mod signing;
pub mod topic_check;

/// Runs the generator, then checks the topic (blocking read, off the runtime). The check needs the topic to be
/// fresh: it fails on records the run did not send.
pub async fn run_and_check(
    config: loadgen::LoadConfig,
    brokers: &str,
    topic: &str,
) -> anyhow::Result<(loadgen::LoadReport, topic_check::TopicCheck)> {
    let report = loadgen::run(config).await?;
    let (brokers, topic, deliveries) = (brokers.to_owned(), topic.to_owned(), report.deliveries.clone());
    let check = tokio::task::spawn_blocking(move || {
        topic_check::check_topic(&brokers, &topic, &deliveries, std::time::Duration::from_secs(60))
    })
    .await??;
    Ok((report, check))
}
