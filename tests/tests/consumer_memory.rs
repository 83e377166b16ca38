//! The consumer's memory is bounded in bytes, not only in records: a burst of large events held back by a slow
//! handler stays within `processing.max_window_bytes` (and librdkafka's prefetch within what
//! `processing.partition_prefetch_bytes` and `processing.fetch_max_bytes` allow per partition), whether the bodies
//! compress or not, and every event is still processed once. The bound is the formula of docs/operations.md
//! ("Memory", [`memory::bound_bytes`]) computed from the test's config, checked against the process's peak
//! resident set (`VmHWM` in /proc), not timed.

use std::time::Duration;

use hookline_consumer::{ConsumerConfig, memory};
use hookline_tests::{
    TestStack, eventually,
    process::{self, announced},
    push_meta,
};

/// Bodies just under the broker's default `message.max.bytes` (1 MiB + 12 bytes with the batch around them).
const BODY_BYTES: usize = 1_000_000;
/// Compressible bodies near the gateway's default body limit (1,000,000 bytes).
const COMPRESSIBLE_BODY_BYTES: usize = 950_000;
const N_COMPRESSIBLE_EVENTS: usize = 600;
const N_EVENTS: usize = 300;
const N_PARTITIONS: i32 = 2;
/// The window's bound: a tenth of the burst.
const MAX_WINDOW_BYTES: u64 = 30 << 20;

/// A JSON body of `BODY_BYTES` whose content does not compress (hex of a xorshift sequence), so that a fetch of
/// `partition_prefetch_bytes` compressed bytes is about as many bytes decompressed.
fn incompressible_body(seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut body = b"{\"pad\":\"".to_vec();
    while body.len() < BODY_BYTES - 2 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        body.extend(state.to_le_bytes().iter().map(|byte| b"0123456789abcdef"[usize::from(byte & 0x0f)]));
    }
    body.truncate(BODY_BYTES - 2);
    body.extend_from_slice(b"\"}");
    body
}

/// Peak resident set of a process, in bytes.
fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process's status");
    let line = status.lines().find(|line| line.starts_with("VmHWM:")).expect("VmHWM");
    let kib: u64 = line.split_whitespace().nth(1).expect("a value").parse().expect("KiB");
    kib * 1024
}

#[tokio::test]
async fn a_burst_of_1_mb_bodies_stays_within_the_byte_bound_and_every_event_is_processed_once() {
    let stack = TestStack::builder()
        .partitions(N_PARTITIONS)
        .consumer_config(|config: &mut ConsumerConfig| {
            config.processing.max_window_bytes = MAX_WINDOW_BYTES;
            config.processing.partition_prefetch_bytes = 1 << 20;
            config.processing.route_max_in_flight = config.processing.max_in_flight;
        })
        .build()
        .await;
    // The whole burst is in the topic before the consumer starts: the deepest backlog it can meet. Produced 50 at
    // a time: the producer's own queue holds 256 MiB.
    for chunk in (0..N_EVENTS).collect::<Vec<_>>().chunks(50) {
        let records = chunk
            .iter()
            .map(|&n| {
                let id = format!("big-{n}");
                let partition = i32::try_from(n).expect("small") % N_PARTITIONS;
                (
                    partition,
                    id.clone(),
                    hookline_common::wire::event_headers(&push_meta(&id)),
                    incompressible_body(n as u64),
                )
            })
            .collect();
        stack.produce_raw_batch(records).await;
    }

    // A slow handler (100 to 800 ms per event): records pile up in the consumer unless it stops fetching.
    let (child, lines) = process::spawn_consumer_process(
        env!("CARGO_BIN_EXE_test-consumer").as_ref(),
        &stack.consumer_config,
        "work:100",
    );
    eventually(Duration::from_secs(180), "every event of the burst processed", || async {
        announced(&lines, "done").len() == N_EVENTS
    })
    .await;
    let peak = peak_rss_bytes(child.id());

    let done: Vec<String> =
        lines.lock().expect("lines").iter().filter(|line| line.starts_with("done ")).cloned().collect();
    assert_eq!(done.len(), N_EVENTS, "every event handled once, none twice");
    assert!(stack.records(&stack.kafka.dlq_topic).await.is_empty(), "nothing dead-lettered");
    // Every partition this process reads: the inbound topic's and its retry topic's (two).
    let bound = memory::bound_bytes(&stack.consumer_config.processing, u64::try_from(N_PARTITIONS).expect("count") + 2);
    let burst = (N_EVENTS * BODY_BYTES) as u64;
    assert!(
        bound < burst,
        "the bound ({} MiB) is below the burst ({} MiB): the test can fail",
        bound >> 20,
        burst >> 20
    );
    assert!(
        peak <= bound,
        "peak RSS {} MiB above the bound {} MiB (fixed {} MiB + {} x max_window_bytes {} MiB + prefetch)",
        peak >> 20,
        bound >> 20,
        memory::FIXED_OVERHEAD_BYTES >> 20,
        memory::COPIES_PER_RECORD,
        MAX_WINDOW_BYTES >> 20
    );
    eprintln!("peak RSS {} MiB, bound {} MiB, burst {} MiB", peak >> 20, bound >> 20, burst >> 20);
}

/// A JSON body of `COMPRESSIBLE_BODY_BYTES` that lz4 compresses about as far as it can (some 250 times, like the
/// bench's bodies): one fetch of a few compressed KiB is hundreds of MiB decompressed.
fn compressible_body(id: &str) -> Vec<u8> {
    let mut body = format!("{{\"id\":\"{id}\",\"pad\":\"").into_bytes();
    body.resize(COMPRESSIBLE_BODY_BYTES - 2, b'x');
    body.extend_from_slice(b"\"}");
    body
}

/// The issue-44 case: librdkafka's fetch limits are in compressed bytes, so before `fetch_max_bytes` one fetch of
/// 1 MiB brought some 280 of these records (250 MiB decompressed) into one partition's queue, whatever the queue's
/// threshold: the process went far past the bound. The defaults of the fetch (`partition_prefetch_bytes`,
/// `fetch_max_bytes`) are kept; only the window is smaller, so that the bound is far below the backlog.
#[tokio::test]
async fn a_backlog_of_compressible_bodies_near_the_body_limit_stays_within_the_bound_and_each_is_processed_once() {
    let stack = TestStack::builder()
        .partitions(N_PARTITIONS)
        .consumer_config(|config: &mut ConsumerConfig| {
            config.processing.max_window_bytes = MAX_WINDOW_BYTES;
            config.processing.route_max_in_flight = config.processing.max_in_flight;
        })
        .build()
        .await;
    let defaults = hookline_consumer::config::ProcessingConfig::default();
    assert_eq!(stack.consumer_config.processing.fetch_max_bytes, defaults.fetch_max_bytes);
    assert_eq!(stack.consumer_config.processing.partition_prefetch_bytes, defaults.partition_prefetch_bytes);
    for chunk in (0..N_COMPRESSIBLE_EVENTS).collect::<Vec<_>>().chunks(100) {
        let records = chunk
            .iter()
            .map(|&n| {
                let id = format!("zip-{n}");
                let partition = i32::try_from(n).expect("small") % N_PARTITIONS;
                let body = compressible_body(&id);
                (partition, id.clone(), hookline_common::wire::event_headers(&push_meta(&id)), body)
            })
            .collect();
        stack.produce_raw_batch(records).await;
    }

    // A handler of 20 to 160 ms per event: the windows fill, and the backlog waits in Kafka and librdkafka.
    let (child, lines) = process::spawn_consumer_process(
        env!("CARGO_BIN_EXE_test-consumer").as_ref(),
        &stack.consumer_config,
        "work:20",
    );
    eventually(Duration::from_secs(180), "every event of the backlog processed", || async {
        announced(&lines, "done").len() == N_COMPRESSIBLE_EVENTS
    })
    .await;
    let peak = peak_rss_bytes(child.id());

    let done: Vec<String> =
        lines.lock().expect("lines").iter().filter(|line| line.starts_with("done ")).cloned().collect();
    assert_eq!(done.len(), N_COMPRESSIBLE_EVENTS, "every event handled once, none twice");
    assert!(stack.records(&stack.kafka.dlq_topic).await.is_empty(), "nothing dead-lettered");
    // Every partition this process reads: the inbound topic's and its retry topic's.
    let bound = memory::bound_bytes(&stack.consumer_config.processing, u64::try_from(N_PARTITIONS).expect("count") * 2);
    let backlog = (N_COMPRESSIBLE_EVENTS * COMPRESSIBLE_BODY_BYTES) as u64;
    assert!(
        bound < backlog,
        "the bound ({} MiB) is below the backlog ({} MiB, decompressed): the test can fail",
        bound >> 20,
        backlog >> 20
    );
    assert!(
        peak <= bound,
        "peak RSS {} MiB above the bound {} MiB (fixed {} MiB + {} x max_window_bytes {} MiB + {} partitions x {} MiB \
         of prefetch)",
        peak >> 20,
        bound >> 20,
        memory::FIXED_OVERHEAD_BYTES >> 20,
        memory::COPIES_PER_RECORD,
        MAX_WINDOW_BYTES >> 20,
        N_PARTITIONS * 2,
        memory::partition_prefetch_bound_bytes(&stack.consumer_config.processing) >> 20
    );
    eprintln!("peak RSS {} MiB, bound {} MiB, backlog {} MiB", peak >> 20, bound >> 20, backlog >> 20);
}
