//! Flow control: which partitions stop being fetched (a full window, every window together at
//! `max_window_bytes`, or a source topic's partition where a held route's records wait) and which resume.

use std::time::Instant;

use super::{PartitionKey, Scheduler};

impl Scheduler {
    /// Partitions to pause (window full, every window together at `max_window_bytes`, or a source topic's
    /// partition where a held route's records wait) and to resume (window down to half, the bytes down to half,
    /// and nothing held); marks them so. The gap between the two matters: a partition read from the main queue is
    /// paused in librdkafka, which drops what it had prefetched for it and fetches again on resume, so resuming at
    /// the first free slot would pay a fetch round trip per few records.
    pub fn pause_changes(&mut self) -> (Vec<PartitionKey>, Vec<PartitionKey>) {
        self.update_holds(Instant::now());
        let (mut pause, mut resume) = (Vec::new(), Vec::new());
        let bytes = self.windowed_bytes();
        let (bytes_full, bytes_low) = (bytes >= self.max_window_bytes, bytes <= self.max_window_bytes / 2);
        for (partition, state) in &mut self.partitions {
            if state.revoked {
                continue;
            }
            let was_paused = state.fetch_paused_told;
            let len = state.window.len();
            if len >= self.partition_window || bytes_full {
                state.paused = true;
            } else if len <= self.partition_window / 2 && bytes_low {
                state.paused = false;
            }
            state.fetch_paused_told = state.fetch_paused();
            match (was_paused, state.fetch_paused_told) {
                (false, true) => pause.push(partition.clone()),
                (true, false) => resume.push(partition.clone()),
                _ => {}
            }
        }
        (pause, resume)
    }
}
