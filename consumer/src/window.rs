//! The commit prefix of one partition: which offsets were fetched, which of them are handled, and the highest
//! offset below which everything is handled.
//!
//! Records of a partition are handled concurrently and finish in any order, but Kafka keeps one committed
//! offset per partition. Storing a record's offset as soon as it is handled would skip the unhandled records
//! below it after a crash. So the window stores only the contiguous prefix: the offset stored is always the
//! highest handled offset with every fetched offset below it handled too, and it never moves backwards.
//! A record handled beyond the prefix when the process dies is fetched again by the partition's next owner and
//! skipped by its done marker in Redis.
//!
//! The window also counts the bytes of what it holds (each record's payload, key and headers as admitted), so that
//! the scheduler can bound memory in bytes as well as in records (`processing.max_window_bytes`).

use std::collections::VecDeque;

use hookline_common::wire::FetchedRecord;

/// The records of one partition between the stored offset and the newest fetched one.
#[derive(Debug, Default)]
pub struct Window {
    /// Fetched offsets not yet below the stored prefix, ascending, with whether each is handled and its size in
    /// bytes. Offsets need not be contiguous: transaction markers and aborted records leave gaps that are never
    /// delivered.
    pending: VecDeque<(i64, bool, usize)>,
    /// The sum of the sizes in `pending`.
    bytes: usize,
    /// The newest offset admitted: a record at or below it is a re-fetch (after a pause) and is ignored.
    highest_admitted: Option<i64>,
}

impl Window {
    /// Admits a fetched offset; false when it was admitted before (librdkafka may re-deliver what it had
    /// prefetched for a partition that was paused and resumed).
    /// `bytes` is the record's size ([`record_bytes`]), counted until the prefix passes it.
    pub fn admit(&mut self, offset: i64, bytes: usize) -> bool {
        if self.highest_admitted.is_some_and(|highest| offset <= highest) {
            return false;
        }
        self.highest_admitted = Some(offset);
        self.pending.push_back((offset, false, bytes));
        self.bytes += bytes;
        true
    }

    /// Marks `offset` handled. Returns the new end of the prefix (the offset to store: Kafka then commits the
    /// next one) when the prefix moved forward.
    pub fn handled(&mut self, offset: i64) -> Option<i64> {
        if let Ok(index) = self.pending.binary_search_by_key(&offset, |(pending, _, _)| *pending) {
            self.pending[index].1 = true;
        }
        let mut prefix_end = None;
        while let Some(&(front, true, bytes)) = self.pending.front() {
            prefix_end = Some(front);
            self.bytes -= bytes;
            self.pending.pop_front();
        }
        prefix_end
    }

    /// Records fetched and not yet below the prefix: what the window holds in memory or in the handler.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Bytes of the records fetched and not yet below the prefix. Handled records above an unhandled one still
    /// count, though their memory is freed: the bound errs on the safe side, and the prefix soon passes them.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// What a fetched record weighs in a window: its payload, key, and header names and values.
pub fn record_bytes(message: &FetchedRecord) -> usize {
    let headers = message.headers().map_or(0, |headers| headers.byte_len());
    message.payload().map_or(0, <[u8]>::len) + message.key().map_or(0, <[u8]>::len) + headers
}

#[cfg(test)]
mod tests {
    use super::Window;

    #[test]
    fn prefix_advances_only_over_contiguous_handled_offsets() {
        let mut window = Window::default();
        for offset in 10..15 {
            assert!(window.admit(offset, 10));
        }
        assert_eq!(window.handled(12), None, "10 and 11 are not handled: nothing to store");
        assert_eq!(window.handled(11), None);
        assert_eq!(window.handled(10), Some(12), "10, 11, 12 are handled: store 12");
        assert_eq!(window.len(), 2);
        assert_eq!(window.handled(14), None);
        assert_eq!(window.handled(13), Some(14));
        assert!(window.is_empty());
    }

    #[test]
    fn bytes_count_until_the_prefix_passes_a_record() {
        let mut window = Window::default();
        window.admit(0, 100);
        window.admit(1, 5);
        assert_eq!(window.bytes(), 105);
        assert_eq!(window.handled(1), None);
        assert_eq!(window.bytes(), 105, "handled above an unhandled record: still counted");
        assert!(!window.admit(1, 5), "a re-fetch adds nothing");
        assert_eq!(window.handled(0), Some(1));
        assert_eq!(window.bytes(), 0);
    }

    #[test]
    fn gaps_in_offsets_do_not_hold_the_prefix() {
        let mut window = Window::default();
        for offset in [3, 5, 9] {
            window.admit(offset, 10);
        }
        assert_eq!(window.handled(5), None);
        assert_eq!(window.handled(3), Some(5));
        assert_eq!(window.handled(9), Some(9));
    }

    #[test]
    fn refetched_offsets_are_ignored_and_the_prefix_never_moves_back() {
        let mut window = Window::default();
        window.admit(0, 10);
        window.admit(1, 10);
        assert_eq!(window.handled(0), Some(0));
        assert!(!window.admit(0, 10), "a re-fetch of a handled record");
        assert!(!window.admit(1, 10), "a re-fetch of a pending record");
        assert_eq!(window.handled(0), None, "handling it again moves nothing");
        assert_eq!(window.handled(1), Some(1));
    }
}
