//! What the consumer may hold in memory at most, from its configuration, against the memory limit of its cgroup
//! (a Kubernetes pod's `resources.limits.memory`): checked once at start, with a warning when it cannot fit.
//! docs/operations.md ("Memory") gives the same formula, term by term.
//!
//! librdkafka's limits on a fetch are in *compressed* bytes, and a record batch decompresses by up to lz4's worst
//! ratio: with `fetch.message.max.bytes` = 1 MiB a single fetch of the bench's 900 KiB JSON bodies (about 250 times
//! compressible) brought some 280 records, 250 MiB, into one partition's queue (docs/benchmarks/consumer.md,
//! "Large compressible bodies"). So what bounds the prefetch here is the compressed size of a whole fetch response
//! (`processing.fetch_max_bytes`) times that ratio, not the queue's threshold alone.

use std::{sync::Arc, time::Duration};

use rdkafka::consumer::Consumer;

use crate::{config::ProcessingConfig, rebalance::GroupConsumer};

/// What the process holds besides records: the runtime, librdkafka's and the producers' buffers, Redis and HTTP
/// clients, the allocator's slack. Measured idle and under load at 40-60 MiB (docs/benchmarks/consumer.md).
pub const FIXED_OVERHEAD_BYTES: u64 = 128 << 20;
/// Each admitted record may exist up to three times: as fetched (in its window), as the event its handler reads,
/// and as the copy being produced to the retry or dead-letter topic.
pub const COPIES_PER_RECORD: u64 = 3;
/// The most a compressed record batch of hookline's topics grows when decompressed: they are written by hookline's
/// producers with lz4, whose format needs at least one byte per 255 bytes of a match (`compression.type` on the
/// topic, if an operator sets one, must then stay `producer` or `lz4`).
pub const LZ4_MAX_RATIO: u64 = 255;
/// The largest record batch of hookline's topics, decompressed: its producers batch up to librdkafka's
/// `batch.size` (1,000,000 bytes), or one record alone when it is larger, and a record is at most the gateway's
/// body limit (1,000,000 bytes by default, under the broker's `message.max.bytes`) plus its headers.
pub const BATCH_BYTES: u64 = 1 << 20;

/// What librdkafka and a reader hold for one assigned partition: its queue, which is fetched again only while
/// under `partition_prefetch_bytes`; the fetch response that took it over, decompressed (at most
/// `fetch_max_bytes` compressed for the whole response, or one batch alone when the first batch is larger); the
/// batch its oldest queued record still pins; and the one record its reader took past the windows' bound.
pub fn partition_prefetch_bound_bytes(processing: &ProcessingConfig) -> u64 {
    let queue = u64::try_from(processing.partition_prefetch_bytes).unwrap_or(u64::MAX);
    let fetch = u64::try_from(processing.fetch_max_bytes).unwrap_or(u64::MAX);
    let response = LZ4_MAX_RATIO.saturating_mul(fetch).max(BATCH_BYTES);
    queue.saturating_add(response).saturating_add(BATCH_BYTES).saturating_add(COPIES_PER_RECORD * BATCH_BYTES)
}

/// The most the consumer holds with `n_partitions` assigned (every partition of the topics it reads, on a single
/// instance): the fixed part, every copy of what the windows hold, and each partition's prefetch.
pub fn bound_bytes(processing: &ProcessingConfig, n_partitions: u64) -> u64 {
    FIXED_OVERHEAD_BYTES
        .saturating_add(COPIES_PER_RECORD.saturating_mul(processing.max_window_bytes))
        .saturating_add(n_partitions.saturating_mul(partition_prefetch_bound_bytes(processing)))
}

/// The memory limit of this process's cgroup: v2's `memory.max`, else v1's `memory.limit_in_bytes`; `None` when
/// there is none (`max`, or v1's "unlimited", a number near 2^63).
pub fn cgroup_limit_bytes() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let text = read("/sys/fs/cgroup/memory.max").or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))?;
    parse_limit(&text)
}

fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok().filter(|&limit| limit < 1 << 60)
}

/// Warns when what the consumer may hold does not fit its cgroup's memory limit; says nothing without a limit.
/// The partitions counted are all those of `topics` (read from the broker; one instance may be given them all).
/// Runs beside the consumer: nothing waits for it.
pub(crate) async fn warn_if_unfit(processing: ProcessingConfig, consumer: Arc<GroupConsumer>, topics: Vec<String>) {
    let Some(limit) = cgroup_limit_bytes() else { return };
    let n_partitions = tokio::task::spawn_blocking(move || {
        topics
            .iter()
            .filter_map(|name| consumer.fetch_metadata(Some(name.as_str()), Duration::from_secs(5)).ok())
            .map(|metadata| metadata.topics().iter().map(|topic| topic.partitions().len()).sum::<usize>())
            .sum::<usize>()
    })
    .await
    .unwrap_or(0);
    let bound = bound_bytes(&processing, u64::try_from(n_partitions).unwrap_or(u64::MAX));
    if bound > limit {
        tracing::warn!(
            bound_mib = bound >> 20,
            limit_mib = limit >> 20,
            partitions = n_partitions,
            max_window_bytes = processing.max_window_bytes,
            partition_prefetch_bytes = processing.partition_prefetch_bytes,
            fetch_max_bytes = processing.fetch_max_bytes,
            "the consumer's memory bounds do not fit its cgroup's memory limit: lower processing.max_window_bytes, \
             processing.fetch_max_bytes or processing.partition_prefetch_bytes, or raise the limit \
             (docs/operations.md, \"Memory\")"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_read_and_no_limit_is_none() {
        assert_eq!(parse_limit("1073741824\n"), Some(1 << 30));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None, "cgroup v1's unlimited");
    }

    #[test]
    fn the_defaults_fit_the_kubernetes_limit_of_1_gib_with_a_fifth_to_spare() {
        let processing = ProcessingConfig::default();
        // Six inbound and six retry partitions, all on one instance: docs/operations.md's 812 MiB.
        let bound = bound_bytes(&processing, 12);
        assert_eq!((bound + (1 << 19)) >> 20, 812, "{} bytes", bound);
        assert!(bound <= (1 << 30) * 4 / 5, "{} MiB", bound >> 20);
    }

    #[test]
    fn a_fetch_counts_at_lz4s_worst_ratio_and_at_least_one_batch() {
        let processing =
            ProcessingConfig { partition_prefetch_bytes: 1 << 20, fetch_max_bytes: 16 << 10, ..Default::default() };
        // queue 1 MiB + fetch 255 x 16 KiB + the pinned batch 1 MiB + 3 copies of the record past the bound.
        assert_eq!(
            partition_prefetch_bound_bytes(&processing),
            (1 << 20) + 255 * (16 << 10) + (1 << 20) + 3 * (1 << 20)
        );
        let tiny = ProcessingConfig { fetch_max_bytes: 1000, ..processing };
        assert_eq!(partition_prefetch_bound_bytes(&tiny), (1 << 20) + (1 << 20) + (1 << 20) + 3 * (1 << 20));
    }
}
