//! The index's compact forms: interned strings, packed positions, and one entry in 120 bytes.

use std::{collections::HashMap, sync::Arc};

use hookline_common::wire::{EntryStatus, MAX_DLQ_ERROR_BYTES};

use super::Position;

/// The longest string the index keeps (an interned value, an event id): the most a consumer writes into
/// `hookline-dlq-error`. A longer header comes from no hookline writer; its first bytes are kept and `show` reads
/// the whole record from Kafka.
pub(super) const MAX_STRING_BYTES: usize = MAX_DLQ_ERROR_BYTES;

pub(super) use hookline_record::truncate_utf8;

/// A string table: each distinct value is stored once and named by its number (0 is "none").
#[derive(Debug, Default)]
pub(super) struct Interner {
    pub(super) ids: HashMap<Arc<str>, u32>,
    pub(super) values: Vec<Arc<str>>,
    /// The bytes of every value held (each at most [`MAX_STRING_BYTES`]).
    pub(super) bytes: usize,
    /// How many values were cut to [`MAX_STRING_BYTES`].
    pub(super) truncated: u64,
}

impl Interner {
    pub(super) fn intern(&mut self, value: Option<&str>) -> u32 {
        let Some(value) = value else { return 0 };
        let value = if value.len() > MAX_STRING_BYTES {
            self.truncated += 1;
            truncate_utf8(value, MAX_STRING_BYTES)
        } else {
            value
        };
        if let Some(&id) = self.ids.get(value) {
            return id;
        }
        let value: Arc<str> = Arc::from(value);
        self.bytes += value.len();
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
    pub(super) ids: HashMap<Origin, u32>,
    pub(super) values: Vec<Origin>,
}

impl Default for Origins {
    fn default() -> Self {
        Self { ids: HashMap::from([(Origin::default(), 0)]), values: vec![Origin::default()] }
    }
}

impl Origins {
    pub(super) fn intern(&mut self, origin: Origin) -> u32 {
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
#[derive(Debug, Clone, Copy)]
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
    /// Saturated at `u16::MAX` (a consumer gives up after a handful): two bytes, so that the flag below fits in the
    /// 120 bytes an entry may take.
    pub(super) attempts: u16,
    /// The record's MAC did not verify (nor was it unsigned inside `accept_unsigned_until`): nothing it claims is
    /// indexed, only its position, size and timestamp. Listed as `unverified`, never untriaged.
    pub(super) unverified: bool,
    /// A dead letter by reference: its body is only at the original position, and expires with that topic.
    pub(super) by_reference: bool,
    pub(super) original_offset: i64,
    pub(super) first_failure_at_ms: i64,
    /// The DLQ header, or else the record's timestamp: when the entry became a dead letter.
    pub(super) last_failure_at_ms: i64,
    pub(super) body_bytes: u32,
    /// How many times the entry was re-driven (the highest count any status record carried).
    pub(super) replays: u32,
    pub(super) replay_of: PackedPosition,
    pub(super) status: Option<StatusMeta>,
}

impl Meta {
    /// An entry at `offset` that names nothing.
    pub(super) fn empty(offset: i64) -> Self {
        Self {
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
            unverified: false,
            by_reference: false,
            original_offset: -1,
            first_failure_at_ms: 0,
            last_failure_at_ms: 0,
            body_bytes: 0,
            replays: 0,
            replay_of: PackedPosition::pack(None),
            status: None,
        }
    }
}

/// An entry's event id, from the buffer its `event_id_at` points into.
pub(super) fn event_id<'a>(meta: &Meta, blob: &'a [u8]) -> Option<&'a str> {
    if meta.event_id_len == u32::MAX {
        return None;
    }
    let start = meta.event_id_at as usize;
    blob.get(start..start + meta.event_id_len as usize).and_then(|bytes| std::str::from_utf8(bytes).ok())
}

/// An entry's error message when it is kept in the entry's buffer, not interned ([`INLINE_ERROR`]).
pub(super) fn inline_error<'a>(meta: &Meta, blob: &'a [u8]) -> Option<&'a str> {
    if meta.error & INLINE_ERROR == 0 {
        return None;
    }
    let start = meta.event_id_at as usize + if meta.event_id_len == u32::MAX { 0 } else { meta.event_id_len as usize };
    let len = (meta.error & !INLINE_ERROR) as usize;
    blob.get(start..start + len).and_then(|bytes| std::str::from_utf8(bytes).ok())
}

/// Set in [`Meta::error`]: the error message is not interned but kept after the event id in the entry's
/// buffer, and the rest of the number is its length. Messages are interned while the string table is within its
/// share of the budget ([`Budget::strings_bytes`]); past that, a message the table does not hold already is kept
/// per entry, so that the table cannot grow with the number of entries (a handler's error can differ per event).
pub(super) const INLINE_ERROR: u32 = 1 << 31;
