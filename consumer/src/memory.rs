//! What the consumer may hold in memory at most, from its configuration, against the memory limit of its cgroup
//! (a Kubernetes pod's `resources.limits.memory`): checked once at start, with a warning when it cannot fit.
//! docs/operations.md ("Memory") gives the same formula.

use std::{sync::Arc, time::Duration};

use rdkafka::consumer::Consumer;

use crate::{config::ProcessingConfig, rebalance::GroupConsumer};

/// What the process holds besides records: the runtime, librdkafka's and the producers' buffers, Redis and HTTP
/// clients, the allocator's slack. Measured idle and under load at 40-60 MiB (docs/benchmarks/consumer.md).
pub const FIXED_OVERHEAD_BYTES: u64 = 128 << 20;
/// Each admitted record may exist up to three times: as fetched (in its window), as the event its handler reads,
/// and as the copy being produced to the retry or dead-letter topic.
pub const COPIES_PER_RECORD: u64 = 3;
/// librdkafka's prefetch per partition, in units of `partition_prefetch_bytes`: its queue up to the threshold,
/// plus one fetch response of that many compressed bytes, decompressed (JSON compresses about 4 times with lz4).
pub const PREFETCH_MULTIPLE: u64 = 5;

/// The most the consumer holds with `n_partitions` assigned (every partition of the topics it reads, on a single
/// instance).
pub fn bound_bytes(processing: &ProcessingConfig, n_partitions: u64) -> u64 {
    let prefetch = u64::try_from(processing.partition_prefetch_bytes).unwrap_or(u64::MAX);
    FIXED_OVERHEAD_BYTES
        .saturating_add(COPIES_PER_RECORD.saturating_mul(processing.max_window_bytes))
        .saturating_add(n_partitions.saturating_mul(PREFETCH_MULTIPLE).saturating_mul(prefetch))
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
            "the consumer's memory bounds do not fit its cgroup's memory limit: lower processing.max_window_bytes \
             or processing.partition_prefetch_bytes, or raise the limit (docs/operations.md, \"Memory\")"
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
    fn the_defaults_fit_the_kubernetes_limit_of_1_gib() {
        let processing = ProcessingConfig::default();
        // Six inbound and six retry partitions, all on one instance.
        assert!(bound_bytes(&processing, 12) <= 1 << 30, "{} MiB", bound_bytes(&processing, 12) >> 20);
    }
}
