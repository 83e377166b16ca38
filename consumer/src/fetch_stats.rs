//! librdkafka's statistics, summarised in one log line per interval: how much it fetched (per partition: records
//! received, records queued in its prefetch and their bytes, fetch state, records dropped as outdated after a
//! pause) against what the consumer took. Off unless `statistics.interval.ms` is set in `kafka.properties`; it is
//! how the slow drain of a large backlog was diagnosed (docs/benchmarks/consumer.md, "A large backlog").

use std::fmt::Write;

use rdkafka::statistics::Statistics;

/// Logs one summary line of `statistics` (cumulative counters since the client started).
pub fn log(statistics: &Statistics) {
    let mut partitions = String::new();
    let (mut rx_records, mut queued_records, mut queued_bytes, mut outdated_drops) = (0_u64, 0_i64, 0_u64, 0_u64);
    for topic in statistics.topics.values() {
        for partition in topic.partitions.values().filter(|partition| partition.partition >= 0) {
            rx_records += partition.rxmsgs;
            queued_records += partition.fetchq_cnt;
            queued_bytes += partition.fetchq_size;
            outdated_drops += partition.rx_ver_drops;
            if partition.fetch_state == "none" && partition.rxmsgs == 0 {
                continue;
            }
            let _ = write!(
                partitions,
                "{}/{}: rx={} fetchq_cnt={} fetchq_size={} ver_drops={} state={} app_offset={}; ",
                topic.topic,
                partition.partition,
                partition.rxmsgs,
                partition.fetchq_cnt,
                partition.fetchq_size,
                partition.rx_ver_drops,
                partition.fetch_state,
                partition.app_offset,
            );
        }
    }
    let fetch_requests: i64 = statistics.brokers.values().filter_map(|broker| broker.req.get("Fetch")).copied().sum();
    let zbuf_grow: u64 = statistics.brokers.values().map(|broker| broker.zbuf_grow).sum();
    tracing::info!(
        rx_records,
        rx_bytes = statistics.rx_bytes,
        queued_records,
        queued_bytes,
        outdated_drops,
        fetch_requests,
        zbuf_grow,
        partitions = %partitions,
        "librdkafka statistics"
    );
}
