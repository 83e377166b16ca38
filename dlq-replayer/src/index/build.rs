//! Building the index: its state (entries per partition in offset order, the newest in memory and the oldest on
//! disk past the budget, interned strings), how a DLQ record (its MAC checked) or a status record changes it, and
//! what it holds in memory.

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use hookline_common::{
    record_auth::{Verdict, outcome},
    wire::{DeadLetterEntry, EntryStatus, EntryStatusRecord, kafka::headers_of, now_ms},
};
use hookline_record::dead_letter::Position as DeadLetterPosition;
use rdkafka::{
    Message,
    message::{BorrowedMessage, Headers},
};

pub(super) use super::compact::{
    INLINE_ERROR, Interner, MAX_STRING_BYTES, Meta, Origin, Origins, PackedPosition, StatusMeta, event_id,
    inline_error, truncate_utf8,
};
use super::{
    Index, IndexError, Position, Status,
    spill::{Segment, SpillFile},
};

/// One record of the DLQ topic, as the index reads it.
pub(super) struct DlqRecord<'a, H> {
    pub(super) position: Position,
    pub(super) key: Option<&'a [u8]>,
    pub(super) payload: Option<&'a [u8]>,
    pub(super) headers: Option<&'a H>,
    pub(super) timestamp_ms: Option<i64>,
}

/// One DLQ partition's entries, in offset order: the oldest on disk ([`Segment`]s, past the memory budget), the
/// newest in memory with their event ids and any error message not interned in one buffer (one allocation per
/// partition instead of one per entry: at a million entries, allocator overhead was a third of the index).
#[derive(Debug, Default)]
pub(super) struct Partition {
    pub(super) cold: Vec<Segment>,
    pub(super) metas: Vec<Meta>,
    /// Per entry, from its `event_id_at`: its event id, then its error message when that is not interned.
    pub(super) blob: Vec<u8>,
    /// The offset of the last entry added (in memory or on disk).
    pub(super) last_offset: Option<i64>,
}

/// Grows a vector by an eighth when full, not by doubling: a million entries would otherwise carry up to a
/// million slots spare.
fn reserve_an_eighth<T>(vector: &mut Vec<T>, more: usize) {
    if vector.len() + more > vector.capacity() {
        vector.reserve_exact(vector.len() / 8 + more.max(1024));
    }
}

/// What the index may hold in memory, and where the rest goes.
#[derive(Debug, Clone)]
pub struct Budget {
    /// The index's heap, counted from its structures: past it, the oldest entries move to disk.
    pub memory_bytes: usize,
    /// Where the spill file is made (unlinked at once: it lives as long as the index).
    pub spill_dir: PathBuf,
}

impl Budget {
    /// The share of the budget the string table may take before error messages stop being interned.
    fn strings_bytes(&self) -> usize {
        self.memory_bytes / 8
    }
}

impl Default for Budget {
    fn default() -> Self {
        Self { memory_bytes: usize::MAX, spill_dir: std::env::temp_dir() }
    }
}

/// The state behind the lock.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Per DLQ partition, entries in offset order.
    pub(super) partitions: BTreeMap<i32, Partition>,
    pub(super) strings: Interner,
    pub(super) origins: Origins,
    /// Status records whose entry the DLQ tail has not reached yet (both topics are tailed independently), in
    /// position order so that those the tail has passed are dropped by range. Bounded by
    /// [`super::status::MAX_EARLY_STATUSES`].
    pub(super) early_statuses: BTreeMap<Position, (StatusMeta, u32)>,
    /// Next offset to apply, per partition of the status topic (for read-your-writes).
    pub(super) status_next: HashMap<i32, i64>,
    pub(super) n_entries: usize,
    /// Entries whose record did not verify (included in `n_entries`).
    pub(super) n_unverified: usize,
    pub(super) budget: Budget,
    /// The entries past the budget, made on the first spill.
    pub(super) spill: Option<SpillFile>,
    /// Entries on disk (included in `n_entries`).
    pub(super) n_spilled: usize,
    /// A spill failed (the disk): the index stays in memory, over its budget, rather than lose entries.
    pub(super) spill_failed: bool,
}

impl State {
    pub(super) fn new(budget: Budget) -> Self {
        Self { budget, ..Self::default() }
    }

    /// Adds the entry of one DLQ record. `verified`: its MAC verified (or it is unsigned inside
    /// `accept_unsigned_until`); otherwise it comes from a writer without the record key and is indexed as a
    /// minimal `unverified` entry: none of its strings (each could be megabytes, and none can be believed).
    pub(super) fn add_entry<H: Headers>(&mut self, dlq_topic: &str, record: &DlqRecord<'_, H>, verified: bool) {
        let position = record.position;
        if !verified {
            let meta = Meta {
                unverified: true,
                last_failure_at_ms: record.timestamp_ms.unwrap_or(0),
                body_bytes: u32::try_from(record.payload.map_or(0, <[u8]>::len)).unwrap_or(u32::MAX),
                ..Meta::empty(position.offset)
            };
            self.push_entry(position.partition, meta, None, None);
            return;
        }
        // The one decoder of a dead letter, the tools' too: see `hookline_record::dead_letter`.
        let dead_letter = DeadLetterEntry::decode(
            DeadLetterPosition {
                topic: dlq_topic,
                partition: position.partition,
                offset: position.offset,
                timestamp_ms: record.timestamp_ms,
            },
            record.payload.map_or(0, <[u8]>::len),
            headers_of(record.headers),
        );
        // An error message the table holds already is named by its number; a new one is interned only while the
        // table is within its share of the budget, else kept with the entry.
        let error = dead_letter.error.as_deref().map(|error| truncate_utf8(error, MAX_STRING_BYTES));
        let interned_error = match error {
            None => Some(0),
            Some(error) => self.strings.lookup(error).or_else(|| {
                (self.strings.bytes < self.budget.strings_bytes()).then(|| self.strings.intern(Some(error)))
            }),
        };
        let strings = &mut self.strings;
        let meta = Meta {
            offset: position.offset,
            event_id_at: 0,
            event_id_len: u32::MAX,
            source: strings.intern(dead_letter.source.as_deref()),
            event_type: strings.intern(dead_letter.event_type.as_deref()),
            error_class: strings.intern(dead_letter.error_class.as_deref()),
            error: interned_error.unwrap_or(0),
            origin: self.origins.intern(Origin {
                topic: strings.intern(dead_letter.original_topic.as_deref()),
                service: strings.intern(dead_letter.service.as_deref()),
            }),
            original_partition: dead_letter.original_partition.unwrap_or(-1),
            attempts: dead_letter.attempts.map_or(0, |n| u16::try_from(n).unwrap_or(u16::MAX)),
            unverified: false,
            original_offset: dead_letter.original_offset.unwrap_or(-1),
            first_failure_at_ms: dead_letter.first_failure_at_ms.unwrap_or(0),
            last_failure_at_ms: dead_letter.last_failure_at_ms.unwrap_or(0),
            body_bytes: u32::try_from(dead_letter.body_bytes).unwrap_or(u32::MAX),
            by_reference: dead_letter.by_reference,
            replays: 0,
            replay_of: PackedPosition::pack(
                dead_letter.replay_of.as_deref().and_then(|id| Position::parse(dlq_topic, id)),
            ),
            status: None,
        };
        let inline = if interned_error.is_none() { error } else { None };
        self.push_entry(position.partition, meta, dead_letter.event_id.as_deref(), inline);
    }

    /// Appends an entry to its partition, unless the tail has passed its offset already.
    fn push_entry(&mut self, partition: i32, mut meta: Meta, event_id: Option<&str>, inline_error: Option<&str>) {
        if meta.status.is_none() {
            if let Some((status, replays)) = self.take_early_statuses_up_to(Position { partition, offset: meta.offset })
            {
                meta.status = Some(status);
                meta.replays = meta.replays.max(replays);
            }
        }
        let partition = self.partitions.entry(partition).or_default();
        // Tailing delivers a partition in offset order; a re-read after a reassignment is skipped.
        if partition.last_offset.is_some_and(|last| last >= meta.offset) {
            return;
        }
        let event_id = event_id.map(|id| truncate_utf8(id, MAX_STRING_BYTES)).unwrap_or_default();
        let inline_error = inline_error.unwrap_or_default();
        let more = event_id.len() + inline_error.len();
        let Ok(at) = u32::try_from(partition.blob.len()) else { return };
        if u32::try_from(partition.blob.len() + more).is_ok() {
            meta.event_id_at = at;
            reserve_an_eighth(&mut partition.blob, more);
            if meta.event_id_len == u32::MAX && !event_id.is_empty() {
                meta.event_id_len = event_id.len() as u32;
                partition.blob.extend_from_slice(event_id.as_bytes());
            }
            if !inline_error.is_empty() {
                meta.error = INLINE_ERROR | inline_error.len() as u32;
                partition.blob.extend_from_slice(inline_error.as_bytes());
            }
        }
        reserve_an_eighth(&mut partition.metas, 1);
        if meta.unverified {
            self.n_unverified += 1;
        }
        partition.last_offset = Some(meta.offset);
        partition.metas.push(meta);
        self.n_entries += 1;
    }

    /// The heap the index holds, counted from its structures (allocator overhead not included): entries in
    /// memory with their vectors' spare capacity, their buffers, interned strings and their table, early statuses,
    /// and the directory of what is on disk.
    pub(super) fn memory_bytes(&self) -> usize {
        let entries: usize = self
            .partitions
            .values()
            .map(|partition| {
                partition.metas.capacity() * std::mem::size_of::<Meta>()
                    + partition.blob.capacity()
                    + partition.cold.capacity() * std::mem::size_of::<Segment>()
            })
            .sum();
        let strings = self.strings.bytes
            + self.strings.values.len() * 16
            + self.strings.ids.capacity() * (std::mem::size_of::<(Arc<str>, u32)>() + 1)
            + self.strings.values.capacity() * std::mem::size_of::<Arc<str>>();
        let origins = self.origins.values.capacity() * std::mem::size_of::<Origin>()
            + self.origins.ids.capacity() * (std::mem::size_of::<(Origin, u32)>() + 1);
        // A B-tree node holds up to 11 pairs; count each pair with a node's share of overhead.
        let early = self.early_statuses.len() * (std::mem::size_of::<(Position, (StatusMeta, u32))>() + 16);
        entries + strings + origins + early
    }

    /// Applies a status record (already checked by the caller). A status for a position the DLQ tail has passed
    /// without finding an entry there is dropped (no entry can appear behind the tail), and one waiting for its
    /// entry is kept only while [`super::status::MAX_EARLY_STATUSES`] are not waiting already: what is dropped is
    /// returned, for the counters.
    pub(super) fn apply_status(
        &mut self,
        position: Position,
        record: &EntryStatusRecord,
        dlq_topic: &str,
    ) -> Result<Option<super::status::Dropped>, IndexError> {
        let status = StatusMeta {
            status: record.status,
            at_ms: record.at_ms,
            by: self.strings.intern(Some(&record.by)),
            note: self.strings.intern(record.note.as_deref()),
            new_entry: PackedPosition::pack(record.new_entry.as_deref().and_then(|id| Position::parse(dlq_topic, id))),
        };
        let replays = record.replays.unwrap_or(0);
        let passed = self.tail_has_passed(position);
        let found = self.update(position, |meta| {
            meta.status = Some(status);
            meta.replays = meta.replays.max(replays);
        })?;
        if found {
            return Ok(None);
        }
        if passed {
            return Ok(Some(super::status::Dropped::NoSuchEntry));
        }
        let seen = self.early_statuses.get(&position).map(|(_, n)| *n);
        if seen.is_none() && self.early_statuses.len() >= super::status::MAX_EARLY_STATUSES {
            return Ok(Some(super::status::Dropped::TooManyEarly));
        }
        self.early_statuses.insert(position, (status, seen.unwrap_or(0).max(replays)));
        Ok(None)
    }

    /// Whether the DLQ tail has read `position`'s partition at or past its offset.
    fn tail_has_passed(&self, position: Position) -> bool {
        self.partitions
            .get(&position.partition)
            .and_then(|partition| partition.last_offset)
            .is_some_and(|last| last >= position.offset)
    }

    /// The early status of the entry at `position`, if any, and every early status of its partition before it
    /// dropped: the tail has passed those positions, so their entries will never come.
    fn take_early_statuses_up_to(&mut self, position: Position) -> Option<(StatusMeta, u32)> {
        let start = Position { partition: position.partition, offset: i64::MIN };
        let passed: Vec<Position> = self.early_statuses.range(start..=position).map(|(at, _)| *at).collect();
        let mut found = None;
        for at in passed {
            let early = self.early_statuses.remove(&at);
            if at == position {
                found = early;
            }
        }
        found
    }

    pub(super) fn status_of(&self, meta: &Meta, replay_outcome_timeout_ms: i64, now: i64) -> Status {
        if meta.unverified {
            return Status::Unverified;
        }
        match meta.status.map(|status| (status.status, status.at_ms)) {
            None => Status::New,
            Some((EntryStatus::Replayed, at_ms)) if now.saturating_sub(at_ms) > replay_outcome_timeout_ms => {
                Status::ReplayOverdue
            }
            Some((EntryStatus::Replayed, _)) => Status::Replayed,
            Some((EntryStatus::ReplayFailed, _)) => Status::ReplayFailed,
            Some((EntryStatus::Succeeded, _)) => Status::Succeeded,
            Some((EntryStatus::FailedAgain, _)) => Status::FailedAgain,
            Some((EntryStatus::Discarded, _)) => Status::Discarded,
        }
    }

    /// How many entries this one's event went through before it: one per `hookline-replay-of` link.
    pub(super) fn failed_again_depth(&self, meta: &Meta) -> Result<u32, IndexError> {
        let mut depth = 0_u32;
        let mut cursor = meta.replay_of.get();
        while let Some(parent) = cursor {
            depth += 1;
            if depth > 1_000 {
                break; // A cycle cannot happen (a replay is always a later record), but never loop on bad data.
            }
            cursor = self.meta_at(parent)?.and_then(|parent| parent.replay_of.get());
        }
        Ok(depth)
    }
}

/// The MAC outcomes of the DLQ records the index has read (the status records' are [`super::StatusCounts`]).
#[derive(Debug, Default)]
pub struct EntryCounts {
    /// Per value of [`outcome::ALL`], in that order.
    auth: [AtomicU64; outcome::ALL.len()],
}

impl EntryCounts {
    fn count(&self, verdict: &Verdict) {
        let label = verdict.label();
        if let Some(at) = outcome::ALL.iter().position(|known| *known == label) {
            self.auth[at].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `(outcome, count)` for every outcome of the MAC check of DLQ records.
    pub fn auth(&self) -> Vec<(&'static str, u64)> {
        outcome::ALL.iter().zip(&self.auth).map(|(label, count)| (*label, count.load(Ordering::Relaxed))).collect()
    }
}

impl Index {
    /// The DLQ records' MAC outcomes so far.
    pub fn entry_counts(&self) -> &EntryCounts {
        &self.entry_counts
    }

    /// Entries whose record did not verify (listed as `unverified`).
    pub fn unverified_len(&self) -> usize {
        self.read().n_unverified
    }

    /// The bytes of the interned strings (each at most 2 KiB), and how many values were cut to that.
    pub fn string_bytes(&self) -> (usize, u64) {
        let state = self.read();
        (state.strings.bytes, state.strings.truncated)
    }

    /// The heap the index holds, counted from its structures (allocator overhead not included; see
    /// [`Budget`]).
    pub fn approx_bytes(&self) -> usize {
        self.read().memory_bytes()
    }

    /// Entries on disk, past the memory budget, and the bytes of the spill file.
    pub fn spilled(&self) -> (usize, u64) {
        let state = self.read();
        (state.n_spilled, state.spill.as_ref().map_or(0, SpillFile::len))
    }

    /// Applies a batch of records of either topic, in the order they were read. A DLQ record whose MAC does not
    /// verify becomes a minimal `unverified` entry; a status record is applied only when its MAC verifies
    /// ([`super::status`]).
    pub(super) fn apply(&self, dlq_status_topic: &str, batch: &[BorrowedMessage<'_>]) {
        let mut state = self.write();
        for message in batch {
            if message.topic() == self.dlq_topic {
                let record = DlqRecord {
                    position: Position { partition: message.partition(), offset: message.offset() },
                    key: message.key(),
                    payload: message.payload(),
                    headers: message.headers(),
                    timestamp_ms: message.timestamp().to_millis(),
                };
                self.add_dlq_record(&mut state, &record);
            } else if message.topic() == dlq_status_topic {
                state.status_next.insert(message.partition(), message.offset() + 1);
                if let Some((position, record)) = self.checked_status(message) {
                    self.apply_checked_status(&mut state, position, &record);
                }
            }
        }
        state.enforce_budget();
    }

    /// Checks a DLQ record's MAC and adds its entry: a full one when it verifies, a minimal `unverified` one
    /// otherwise.
    pub(super) fn add_dlq_record<H: Headers>(&self, state: &mut State, record: &DlqRecord<'_, H>) {
        let verdict = self.record_keys.verify(&self.dlq_topic, record.key, record.payload, record.headers, now_ms());
        state.add_entry(&self.dlq_topic, record, verdict.accepted());
        self.entry_counts.count(&verdict);
    }

    /// Records a status this process wrote, before the tail reads it back (the CLI's index is not tailed).
    pub fn apply_own_status(&self, position: Position, record: &EntryStatusRecord) {
        self.apply_checked_status(&mut self.write(), position, record);
    }

    /// Applies a status hookline wrote (checked by [`Index::checked_status`], or this process's own), counting
    /// what is dropped.
    fn apply_checked_status(&self, state: &mut State, position: Position, record: &EntryStatusRecord) {
        match state.apply_status(position, record, &self.dlq_topic) {
            Ok(Some(dropped)) => self.status_counts.count_dropped(dropped),
            Ok(None) => {}
            Err(error) => {
                tracing::error!(error = %error, entry_id = %position.id(&self.dlq_topic), "status not applied")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn positions_pack_into_twelve_bytes_and_back() {
        for position in
            [None, Some(Position { partition: 0, offset: 0 }), Some(Position { partition: 7, offset: 5_000_000_000 })]
        {
            assert_eq!(PackedPosition::pack(position).get(), position);
        }
        assert_eq!(std::mem::size_of::<PackedPosition>(), 12);
        // The per-entry budget (docs/benchmarks/dlq-and-reconciler.md): the fixed part of an entry stays at 120 bytes.
        assert!(std::mem::size_of::<Meta>() <= 120, "{}", std::mem::size_of::<Meta>());
    }

    fn status() -> EntryStatusRecord {
        EntryStatusRecord {
            status: EntryStatus::Discarded,
            at_ms: 1,
            by: "alice".into(),
            event_id: None,
            new_entry: None,
            note: None,
            replays: None,
        }
    }

    /// What `add_entry` appends for a record at `offset` of partition 0.
    fn entry_at(state: &mut State, offset: i64) -> Option<(StatusMeta, u32)> {
        let early = state.take_early_statuses_up_to(Position { partition: 0, offset });
        let meta = Meta { status: early.map(|(status, _)| status), ..Meta::empty(offset) };
        let partition = state.partitions.entry(0).or_default();
        partition.metas.push(meta);
        partition.last_offset = Some(offset);
        early
    }

    #[test]
    fn statuses_for_positions_without_an_entry_are_bounded() {
        use crate::index::{Dropped, MAX_EARLY_STATUSES};
        let mut state = State::default();
        let at = |offset| Position { partition: 0, offset };
        // Early statuses wait for their entry; those the tail passes without an entry are dropped with it.
        assert_eq!(state.apply_status(at(3), &status(), "dlq").unwrap(), None);
        assert_eq!(state.apply_status(at(5), &status(), "dlq").unwrap(), None);
        assert_eq!(state.apply_status(at(9), &status(), "dlq").unwrap(), None);
        assert!(entry_at(&mut state, 4).is_none());
        assert!(entry_at(&mut state, 5).is_some(), "the status waiting for offset 5 is applied");
        assert_eq!(state.early_statuses.keys().copied().collect::<Vec<_>>(), vec![at(9)], "offset 3 will never come");
        // A status for a position the tail has passed, where no entry is, is dropped at once.
        assert_eq!(state.apply_status(at(2), &status(), "dlq").unwrap(), Some(Dropped::NoSuchEntry));
        // At most MAX_EARLY_STATUSES wait; a new one past that is dropped (an update of a waiting one is kept).
        for offset in 0..MAX_EARLY_STATUSES as i64 {
            state.apply_status(at(1_000 + offset), &status(), "dlq").unwrap();
        }
        assert_eq!(state.early_statuses.len(), MAX_EARLY_STATUSES);
        assert_eq!(state.apply_status(at(i64::MAX), &status(), "dlq").unwrap(), Some(Dropped::TooManyEarly));
        assert_eq!(state.apply_status(at(9), &status(), "dlq").unwrap(), None);
        assert_eq!(state.early_statuses.len(), MAX_EARLY_STATUSES);
    }
}
