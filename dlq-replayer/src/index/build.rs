//! Building the index: its compact state (interned strings, packed positions, entries per partition in offset
//! order) and how a DLQ record or a status record changes it.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use hookline_common::wire::{EntryStatus, EntryStatusRecord, header, header_str};
use rdkafka::{Message, message::BorrowedMessage};

use super::{Index, Position, Status};

/// A string table: each distinct value is stored once and named by its number (0 is "none").
#[derive(Debug, Default)]
pub(super) struct Interner {
    pub(super) ids: HashMap<Arc<str>, u32>,
    pub(super) values: Vec<Arc<str>>,
}

impl Interner {
    pub(super) fn intern(&mut self, value: Option<&str>) -> u32 {
        let Some(value) = value else { return 0 };
        if let Some(&id) = self.ids.get(value) {
            return id;
        }
        let value: Arc<str> = Arc::from(value);
        self.values.push(value.clone());
        let id = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
        self.ids.insert(value, id);
        id
    }

    pub(super) fn get(&self, id: u32) -> Option<&str> {
        (id > 0).then(|| self.values.get(id as usize - 1).map(|value| &**value)).flatten()
    }

    pub(super) fn lookup(&self, value: &str) -> Option<u32> {
        self.ids.get(value).copied()
    }
}

/// An optional [`Position`] in 12 bytes with 4-byte alignment (an `Option<Position>` takes 24): a partition of
/// -1 is none. Entries hold two, and there are millions of entries.
#[derive(Debug, Clone, Copy)]
pub(super) struct PackedPosition {
    pub(super) partition: i32,
    pub(super) offset_low: u32,
    pub(super) offset_high: u32,
}

impl PackedPosition {
    pub(super) fn pack(position: Option<Position>) -> Self {
        match position {
            Some(Position { partition, offset }) => {
                let bits = offset as u64;
                Self { partition, offset_low: bits as u32, offset_high: (bits >> 32) as u32 }
            }
            None => Self { partition: -1, offset_low: 0, offset_high: 0 },
        }
    }

    pub(super) fn get(self) -> Option<Position> {
        (self.partition >= 0).then(|| Position {
            partition: self.partition,
            offset: ((u64::from(self.offset_high) << 32) | u64::from(self.offset_low)) as i64,
        })
    }
}

/// Where an entry came from: its original topic and the consumer service that dead-lettered it (interned
/// strings), so that an entry names both with one number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(super) struct Origin {
    pub(super) topic: u32,
    pub(super) service: u32,
}

/// The distinct [`Origin`]s, numbered from 0 (the origin with neither).
#[derive(Debug)]
pub(super) struct Origins {
    ids: HashMap<Origin, u32>,
    pub(super) values: Vec<Origin>,
}

impl Default for Origins {
    fn default() -> Self {
        Self { ids: HashMap::from([(Origin::default(), 0)]), values: vec![Origin::default()] }
    }
}

impl Origins {
    fn intern(&mut self, origin: Origin) -> u32 {
        if let Some(&id) = self.ids.get(&origin) {
            return id;
        }
        let id = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
        self.values.push(origin);
        self.ids.insert(origin, id);
        id
    }

    pub(super) fn get(&self, id: u32) -> Origin {
        self.values.get(id as usize).copied().unwrap_or_default()
    }
}

/// The latest status record of an entry, compacted.
#[derive(Debug, Clone, Copy)]
pub(super) struct StatusMeta {
    pub(super) status: EntryStatus,
    pub(super) at_ms: i64,
    pub(super) by: u32,
    pub(super) note: u32,
    pub(super) new_entry: PackedPosition,
}

/// One entry in the index (no body, no header table).
#[derive(Debug)]
pub(super) struct Meta {
    pub(super) offset: i64,
    /// Where the event id is in its partition's [`Partition::event_ids`]; a length of `u32::MAX` is none.
    pub(super) event_id_at: u32,
    pub(super) event_id_len: u32,
    pub(super) source: u32,
    pub(super) event_type: u32,
    pub(super) error_class: u32,
    pub(super) error: u32,
    /// The (original topic, service) pair, as a number in [`State::origins`]: few distinct pairs exist, and an
    /// entry holding both strings' numbers would outgrow the per-entry budget.
    pub(super) origin: u32,
    pub(super) original_partition: i32,
    pub(super) attempts: u32,
    pub(super) original_offset: i64,
    pub(super) first_failure_at_ms: i64,
    /// The DLQ header, or else the record's timestamp: when the entry became a dead letter.
    pub(super) last_failure_at_ms: i64,
    pub(super) body_bytes: u32,
    /// A dead letter by reference: its body is only at the original position, and expires with that topic.
    pub(super) by_reference: bool,
    /// How many times the entry was re-driven (the highest count any status record carried).
    pub(super) replays: u32,
    pub(super) replay_of: PackedPosition,
    pub(super) status: Option<StatusMeta>,
}

/// One DLQ partition's entries, in offset order, and their event ids in one buffer (one allocation per
/// partition instead of one per entry: at a million entries, allocator overhead was a third of the index).
#[derive(Debug, Default)]
pub(super) struct Partition {
    pub(super) metas: Vec<Meta>,
    pub(super) event_ids: Vec<u8>,
}

impl Partition {
    pub(super) fn event_id(&self, meta: &Meta) -> Option<&str> {
        if meta.event_id_len == u32::MAX {
            return None;
        }
        let start = meta.event_id_at as usize;
        self.event_ids.get(start..start + meta.event_id_len as usize).and_then(|bytes| std::str::from_utf8(bytes).ok())
    }
}

/// Grows a vector by an eighth when full, not by doubling: a million entries would otherwise carry up to a
/// million slots spare.
fn reserve_an_eighth<T>(vector: &mut Vec<T>, more: usize) {
    if vector.len() + more > vector.capacity() {
        vector.reserve_exact(vector.len() / 8 + more.max(1024));
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
}

impl State {
    pub(super) fn get(&self, position: Position) -> Option<&Meta> {
        let entries = &self.partitions.get(&position.partition)?.metas;
        entries.binary_search_by_key(&position.offset, |meta| meta.offset).ok().map(|index| &entries[index])
    }

    pub(super) fn get_mut(&mut self, position: Position) -> Option<&mut Meta> {
        let entries = &mut self.partitions.get_mut(&position.partition)?.metas;
        entries.binary_search_by_key(&position.offset, |meta| meta.offset).ok().map(move |index| &mut entries[index])
    }

    pub(super) fn add_entry(&mut self, dlq_topic: &str, message: &BorrowedMessage<'_>) {
        let headers = message.headers();
        let text = |name: &'static str| header_str(headers, name).and_then(Result::ok);
        let number = |name: &'static str| text(name).and_then(|value| value.parse::<i64>().ok());
        let position = Position { partition: message.partition(), offset: message.offset() };
        let strings = &mut self.strings;
        let mut meta = Meta {
            offset: position.offset,
            event_id_at: 0,
            event_id_len: u32::MAX,
            source: strings.intern(text(header::SOURCE).as_deref()),
            event_type: strings.intern(text(header::EVENT_TYPE).as_deref()),
            error_class: strings.intern(text(header::dlq::ERROR_CLASS).as_deref()),
            error: strings.intern(text(header::dlq::ERROR).as_deref()),
            origin: self.origins.intern(Origin {
                topic: strings.intern(text(header::dlq::ORIGINAL_TOPIC).as_deref()),
                // The service header, or for an entry written before services had names its consumer group
                // (the service's default name): the same rule as `DeadLetterEntry::from_message`.
                service: strings
                    .intern(text(header::dlq::SERVICE).or_else(|| text(header::dlq::CONSUMER_GROUP)).as_deref()),
            }),
            original_partition: number(header::dlq::ORIGINAL_PARTITION)
                .and_then(|n| i32::try_from(n).ok())
                .unwrap_or(-1),
            attempts: number(header::dlq::ATTEMPTS).and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
            original_offset: number(header::dlq::ORIGINAL_OFFSET).unwrap_or(-1),
            first_failure_at_ms: number(header::dlq::FIRST_FAILURE_AT_MS).unwrap_or(0),
            last_failure_at_ms: number(header::dlq::LAST_FAILURE_AT_MS)
                .or_else(|| message.timestamp().to_millis())
                .unwrap_or(0),
            // A dead letter by reference: the length of the body it points to.
            body_bytes: number(header::dlq::BODY_BY_REFERENCE)
                .or_else(|| message.payload().map(|body| i64::try_from(body.len()).unwrap_or(i64::MAX)))
                .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            by_reference: number(header::dlq::BODY_BY_REFERENCE).is_some(),
            replays: 0,
            replay_of: PackedPosition::pack(text(header::REPLAY_OF).and_then(|id| Position::parse(dlq_topic, &id))),
            status: None,
        };
        if let Some((status, replays)) = self.take_early_statuses_up_to(position) {
            meta.status = Some(status);
            meta.replays = replays;
        }
        // A dead letter by reference carries its event id under its own name (see `header::dlq::EVENT_ID`).
        let event_id = text(header::EVENT_ID).or_else(|| text(header::dlq::EVENT_ID));
        let partition = self.partitions.entry(position.partition).or_default();
        // Tailing delivers a partition in offset order; a re-read after a reassignment is skipped.
        if partition.metas.last().is_some_and(|last| last.offset >= position.offset) {
            return;
        }
        if let Some(event_id) = event_id.filter(|id| u32::try_from(partition.event_ids.len() + id.len()).is_ok()) {
            reserve_an_eighth(&mut partition.event_ids, event_id.len());
            meta.event_id_at = partition.event_ids.len() as u32;
            meta.event_id_len = event_id.len() as u32;
            partition.event_ids.extend_from_slice(event_id.as_bytes());
        }
        reserve_an_eighth(&mut partition.metas, 1);
        partition.metas.push(meta);
        self.n_entries += 1;
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
    ) -> Option<super::status::Dropped> {
        let status = StatusMeta {
            status: record.status,
            at_ms: record.at_ms,
            by: self.strings.intern(Some(&record.by)),
            note: self.strings.intern(record.note.as_deref()),
            new_entry: PackedPosition::pack(record.new_entry.as_deref().and_then(|id| Position::parse(dlq_topic, id))),
        };
        let replays = record.replays.unwrap_or(0);
        let passed = self.tail_has_passed(position);
        match self.get_mut(position) {
            Some(meta) => {
                meta.status = Some(status);
                meta.replays = meta.replays.max(replays);
                None
            }
            None if passed => Some(super::status::Dropped::NoSuchEntry),
            None => {
                let seen = self.early_statuses.get(&position).map(|(_, n)| *n);
                if seen.is_none() && self.early_statuses.len() >= super::status::MAX_EARLY_STATUSES {
                    return Some(super::status::Dropped::TooManyEarly);
                }
                self.early_statuses.insert(position, (status, seen.unwrap_or(0).max(replays)));
                None
            }
        }
    }

    /// Whether the DLQ tail has read `position`'s partition at or past its offset.
    fn tail_has_passed(&self, position: Position) -> bool {
        self.partitions
            .get(&position.partition)
            .and_then(|partition| partition.metas.last())
            .is_some_and(|last| last.offset >= position.offset)
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
    pub(super) fn failed_again_depth(&self, meta: &Meta) -> u32 {
        let mut depth = 0_u32;
        let mut cursor = meta.replay_of.get();
        while let Some(parent) = cursor {
            depth += 1;
            if depth > 1_000 {
                break; // A cycle cannot happen (a replay is always a later record), but never loop on bad data.
            }
            cursor = self.get(parent).and_then(|parent| parent.replay_of.get());
        }
        depth
    }
}

impl Index {
    /// The heap the index holds, counted from its structures (allocator overhead not included): entries with
    /// their vectors' spare capacity, event ids, interned strings and their table, early statuses.
    pub fn approx_bytes(&self) -> usize {
        let state = self.read();
        let entries: usize = state
            .partitions
            .values()
            .map(|partition| partition.metas.capacity() * std::mem::size_of::<Meta>() + partition.event_ids.capacity())
            .sum();
        let strings: usize = state.strings.values.iter().map(|value| value.len() + 16).sum::<usize>()
            + state.strings.ids.capacity() * (std::mem::size_of::<(Arc<str>, u32)>() + 1)
            + state.strings.values.capacity() * std::mem::size_of::<Arc<str>>();
        let origins = state.origins.values.capacity() * std::mem::size_of::<Origin>()
            + state.origins.ids.capacity() * (std::mem::size_of::<(Origin, u32)>() + 1);
        // A B-tree node holds up to 11 pairs; count each pair with a node's share of overhead.
        let early = state.early_statuses.len() * (std::mem::size_of::<(Position, (StatusMeta, u32))>() + 16);
        entries + strings + origins + early
    }

    /// Applies a batch of records of either topic, in the order they were read. A status record is applied only
    /// when its MAC verifies ([`super::status`]).
    pub(super) fn apply(&self, dlq_status_topic: &str, batch: &[BorrowedMessage<'_>]) {
        let mut state = self.write();
        for message in batch {
            if message.topic() == self.dlq_topic {
                state.add_entry(&self.dlq_topic, message);
            } else if message.topic() == dlq_status_topic {
                state.status_next.insert(message.partition(), message.offset() + 1);
                self.apply_status_record(&mut state, message);
            }
        }
    }

    /// Records a status this process wrote, before the tail reads it back (the CLI's index is not tailed).
    pub fn apply_own_status(&self, position: Position, record: &EntryStatusRecord) {
        let dropped = self.write().apply_status(position, record, &self.dlq_topic);
        if let Some(dropped) = dropped {
            self.status_counts.count_dropped(dropped);
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
        let meta = Meta {
            offset,
            event_id_at: 0,
            event_id_len: u32::MAX,
            source: 0,
            event_type: 0,
            error_class: 0,
            error: 0,
            origin: 0,
            original_partition: -1,
            attempts: 0,
            original_offset: -1,
            first_failure_at_ms: 0,
            last_failure_at_ms: 0,
            body_bytes: 0,
            by_reference: false,
            replays: 0,
            replay_of: PackedPosition::pack(None),
            status: early.map(|(status, _)| status),
        };
        state.partitions.entry(0).or_default().metas.push(meta);
        early
    }

    #[test]
    fn statuses_for_positions_without_an_entry_are_bounded() {
        use crate::index::{Dropped, MAX_EARLY_STATUSES};
        let mut state = State::default();
        let at = |offset| Position { partition: 0, offset };
        // Early statuses wait for their entry; those the tail passes without an entry are dropped with it.
        assert_eq!(state.apply_status(at(3), &status(), "dlq"), None);
        assert_eq!(state.apply_status(at(5), &status(), "dlq"), None);
        assert_eq!(state.apply_status(at(9), &status(), "dlq"), None);
        assert!(entry_at(&mut state, 4).is_none());
        assert!(entry_at(&mut state, 5).is_some(), "the status waiting for offset 5 is applied");
        assert_eq!(state.early_statuses.keys().copied().collect::<Vec<_>>(), vec![at(9)], "offset 3 will never come");
        // A status for a position the tail has passed, where no entry is, is dropped at once.
        assert_eq!(state.apply_status(at(2), &status(), "dlq"), Some(Dropped::NoSuchEntry));
        // At most MAX_EARLY_STATUSES wait; a new one past that is dropped (an update of a waiting one is kept).
        for offset in 0..MAX_EARLY_STATUSES as i64 {
            state.apply_status(at(1_000 + offset), &status(), "dlq");
        }
        assert_eq!(state.early_statuses.len(), MAX_EARLY_STATUSES);
        assert_eq!(state.apply_status(at(i64::MAX), &status(), "dlq"), Some(Dropped::TooManyEarly));
        assert_eq!(state.apply_status(at(9), &status(), "dlq"), None);
        assert_eq!(state.early_statuses.len(), MAX_EARLY_STATUSES);
    }
}
