//! A short smoke of the benchmark load generator against the real gateway in-process: a few hundred signed
//! requests (open loop, HTTP/1.1 then HTTP/2, with duplicates and forged signatures), then the topic check the
//! benchmarks rely on. It asserts correctness only, never speed: `scripts/bench` measures.

use std::time::Duration;

use hookline_bench::{
    loadgen::{self, LoadConfig, Mode, Outcome, Protocol},
    signing::{SchemeKind, Signer},
    topic_check,
};
use hookline_tests::{TEST_SECRET, TestStack};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_generator_acknowledged_events_are_in_the_topic_and_forged_ones_are_not() {
    let stack = TestStack::builder().build().await;
    let signer = Signer::new(SchemeKind::Github, TEST_SECRET, 1024).expect("signer");
    let base = LoadConfig {
        concurrency: 4,
        connections: 2,
        duplicate_share: 0.1,
        bad_signature_share: 0.1,
        ..LoadConfig::new(stack.gateway_addr, "github", signer)
    };
    // 150/s for 1.5 s over HTTP/1.1, then 100/s for 1 s over HTTP/2: about 325 requests.
    let http1 = loadgen::run(LoadConfig {
        mode: Mode::Open { rate_per_s: 150.0 },
        duration: Duration::from_millis(1500),
        ..base.clone()
    })
    .await
    .expect("HTTP/1.1 run");
    let http2 = loadgen::run(LoadConfig {
        mode: Mode::Open { rate_per_s: 100.0 },
        protocol: Protocol::Http2,
        duration: Duration::from_secs(1),
        ..base
    })
    .await
    .expect("HTTP/2 run");

    for report in [&http1, &http2] {
        assert!(report.count_2xx() > 0, "{}", report.summary());
        for delivery in &report.deliveries {
            let expected = if delivery.forged { 401 } else { 202 };
            assert_eq!(delivery.outcome, Outcome::Status(expected), "{delivery:?}");
        }
        assert_eq!(report.time_to_2xx.count, report.count_2xx());
    }
    let deliveries: Vec<_> = http1.deliveries.iter().chain(&http2.deliveries).cloned().collect();
    let (brokers, topic) = (stack.kafka.brokers.clone(), stack.kafka.inbound_topic.clone());
    let check = tokio::task::spawn_blocking(move || {
        topic_check::check_topic(&brokers, &topic, &deliveries, Duration::from_secs(30))
    })
    .await
    .expect("check task")
    .expect("topic read");
    assert!(check.passed, "{check:?}");
    assert_eq!(check.records_in_topic, check.acknowledged_deliveries);
    assert!(check.refused_deliveries > 0, "forged signatures were sent and refused: {check:?}");
    stack.shutdown().await;
}
