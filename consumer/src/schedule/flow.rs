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
    ///
    /// Records held in a source topic's partition wait for their route (a pause can last hours), not for the
    /// window, and their partition is not fetched: counted against the bound of the other partitions, held bytes
    /// above half of `max_window_bytes` would keep every other partition paused until the hold ends. So the
    /// other partitions are bounded by what the held bytes leave of `max_window_bytes`, and at least half of it
    /// ([`unheld_bound`]): the bytes in memory stay within 1.5 x `max_window_bytes` (held records are at most
    /// what the bound let in before their partition was held).
    pub fn pause_changes(&mut self) -> (Vec<PartitionKey>, Vec<PartitionKey>) {
        self.update_holds(Instant::now());
        let (mut pause, mut resume) = (Vec::new(), Vec::new());
        let held: usize = self.partitions.values().filter(|state| state.held).map(|state| state.window.bytes()).sum();
        let unheld = self.windowed_bytes().saturating_sub(held);
        let bound = unheld_bound(self.max_window_bytes, held);
        let (bytes_full, bytes_low) = (unheld >= bound, unheld <= bound / 2);
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

/// The bytes the partitions not held may have in their windows together: what `held` bytes leave of
/// `max_window_bytes`, and at least half of it.
fn unheld_bound(max_window_bytes: usize, held: usize) -> usize {
    max_window_bytes.saturating_sub(held).max(max_window_bytes / 2)
}
