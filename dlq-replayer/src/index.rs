//! The replayer's index of dead-letter entries and their fate: headers and metadata, never bodies. It is built
//! once by reading the DLQ and status topics from their start, then advanced by tailing both (the service), or
//! built once to the topics' high watermarks and dropped (the CLI). Kafka stays the only store: a restarted
//! replayer, or a second one, builds the same index.
//!
//! Entries are kept per DLQ partition in offset order (tailing appends in that order), so the stable listing
//! order is (partition, offset) and a cursor is the last position a page returned. Strings that repeat across
//! entries (source, event type, error class, error message, who, notes) are interned once; an entry holds their
//! numbers. Bodies and full headers are fetched from Kafka by partition and offset when one entry is shown or
//! re-driven ([`crate::fetch`]).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use hookline_common::{
    config::KafkaConfig,
    kafka::{QuietContext, partitions_of},
    wire::{DeadLetterEntry, EntryStatus, EntryStatusRecord, header, header_str, now_ms},
};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    config::RDKafkaLogLevel,
    consumer::{BaseConsumer, Consumer},
    error::KafkaError,
    message::BorrowedMessage,
};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// Where an entry lives in the DLQ topic: its id is `<dlq topic>:<partition>:<offset>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub partition: i32,
    pub offset: i64,
}

impl Position {
    /// The position an entry id names, when it names one of `dlq_topic`'s.
    pub fn parse(dlq_topic: &str, id: &str) -> Option<Self> {
        let rest = id.strip_prefix(dlq_topic)?.strip_prefix(':')?;
        let (partition, offset) = rest.split_once(':')?;
        Some(Self { partition: partition.parse().ok()?, offset: offset.parse().ok()? })
    }

    pub fn id(self, dlq_topic: &str) -> String {
        DeadLetterEntry::entry_id(dlq_topic, self.partition, self.offset)
    }
}

/// An entry's status as the operator sees it: the latest status record's, or `new`; and `replay_overdue` for a
/// `replayed` entry whose outcome has not arrived within `replay_outcome_timeout_s` (so `replay --all` takes it
/// again: a re-drive lost with its `replay_failed` record must not leave the entry `replayed` forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    New,
    Replayed,
    ReplayOverdue,
    ReplayFailed,
    Succeeded,
    FailedAgain,
    Discarded,
}

impl Status {
    pub const ALL: [Status; 7] = [
        Self::New,
        Self::Replayed,
        Self::ReplayOverdue,
        Self::ReplayFailed,
        Self::Succeeded,
        Self::FailedAgain,
        Self::Discarded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Replayed => "replayed",
            Self::ReplayOverdue => "replay_overdue",
            Self::ReplayFailed => "replay_failed",
            Self::Succeeded => "succeeded",
            Self::FailedAgain => "failed_again",
            Self::Discarded => "discarded",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }

    /// Nobody has dealt with the entry yet: `replay --all` without a status takes these, and the oldest one's
    /// age is the `hookline_dlq_oldest_untriaged_age_seconds` gauge.
    pub fn is_untriaged(self) -> bool {
        matches!(self, Self::New | Self::ReplayFailed | Self::ReplayOverdue)
    }
}

/// A string table: each distinct value is stored once and named by its number (0 is "none").
#[derive(Debug, Default)]
struct Interner {
    ids: HashMap<Arc<str>, u32>,
    values: Vec<Arc<str>>,
}

impl Interner {
    fn intern(&mut self, value: Option<&str>) -> u32 {
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

    fn get(&self, id: u32) -> Option<&str> {
        (id > 0).then(|| self.values.get(id as usize - 1).map(|value| &**value)).flatten()
    }

    fn lookup(&self, value: &str) -> Option<u32> {
        self.ids.get(value).copied()
    }
}

/// An optional [`Position`] in 12 bytes with 4-byte alignment (an `Option<Position>` takes 24): a partition of
/// -1 is none. Entries hold two, and there are millions of entries.
#[derive(Debug, Clone, Copy)]
struct PackedPosition {
    partition: i32,
    offset_low: u32,
    offset_high: u32,
}

impl PackedPosition {
    fn pack(position: Option<Position>) -> Self {
        match position {
            Some(Position { partition, offset }) => {
                let bits = offset as u64;
                Self { partition, offset_low: bits as u32, offset_high: (bits >> 32) as u32 }
            }
            None => Self { partition: -1, offset_low: 0, offset_high: 0 },
        }
    }

    fn get(self) -> Option<Position> {
        (self.partition >= 0).then(|| Position {
            partition: self.partition,
            offset: ((u64::from(self.offset_high) << 32) | u64::from(self.offset_low)) as i64,
        })
    }
}

/// The latest status record of an entry, compacted.
#[derive(Debug, Clone, Copy)]
struct StatusMeta {
    status: EntryStatus,
    at_ms: i64,
    by: u32,
    note: u32,
    new_entry: PackedPosition,
}

/// One entry in the index (no body, no header table).
#[derive(Debug)]
struct Meta {
    offset: i64,
    /// Where the event id is in its partition's [`Partition::event_ids`]; a length of `u32::MAX` is none.
    event_id_at: u32,
    event_id_len: u32,
    source: u32,
    event_type: u32,
    error_class: u32,
    error: u32,
    original_topic: u32,
    original_partition: i32,
    attempts: u32,
    original_offset: i64,
    first_failure_at_ms: i64,
    /// The DLQ header, or else the record's timestamp: when the entry became a dead letter.
    last_failure_at_ms: i64,
    body_bytes: u32,
    /// How many times the entry was re-driven (the highest count any status record carried).
    replays: u32,
    replay_of: PackedPosition,
    status: Option<StatusMeta>,
}

/// One DLQ partition's entries, in offset order, and their event ids in one buffer (one allocation per
/// partition instead of one per entry: at a million entries, allocator overhead was a third of the index).
#[derive(Debug, Default)]
struct Partition {
    metas: Vec<Meta>,
    event_ids: Vec<u8>,
}

impl Partition {
    fn event_id(&self, meta: &Meta) -> Option<&str> {
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
struct State {
    /// Per DLQ partition, entries in offset order.
    partitions: BTreeMap<i32, Partition>,
    strings: Interner,
    /// Status records whose entry the DLQ tail has not reached yet (both topics are tailed independently).
    early_statuses: HashMap<Position, (StatusMeta, u32)>,
    /// Next offset to apply, per partition of the status topic (for read-your-writes).
    status_next: HashMap<i32, i64>,
    n_entries: usize,
}

impl State {
    fn get(&self, position: Position) -> Option<&Meta> {
        let entries = &self.partitions.get(&position.partition)?.metas;
        entries.binary_search_by_key(&position.offset, |meta| meta.offset).ok().map(|index| &entries[index])
    }

    fn get_mut(&mut self, position: Position) -> Option<&mut Meta> {
        let entries = &mut self.partitions.get_mut(&position.partition)?.metas;
        entries.binary_search_by_key(&position.offset, |meta| meta.offset).ok().map(move |index| &mut entries[index])
    }

    fn add_entry(&mut self, dlq_topic: &str, message: &BorrowedMessage<'_>) {
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
            original_topic: strings.intern(text(header::dlq::ORIGINAL_TOPIC).as_deref()),
            original_partition: number(header::dlq::ORIGINAL_PARTITION)
                .and_then(|n| i32::try_from(n).ok())
                .unwrap_or(-1),
            attempts: number(header::dlq::ATTEMPTS).and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
            original_offset: number(header::dlq::ORIGINAL_OFFSET).unwrap_or(-1),
            first_failure_at_ms: number(header::dlq::FIRST_FAILURE_AT_MS).unwrap_or(0),
            last_failure_at_ms: number(header::dlq::LAST_FAILURE_AT_MS)
                .or_else(|| message.timestamp().to_millis())
                .unwrap_or(0),
            body_bytes: message.payload().map_or(0, |body| u32::try_from(body.len()).unwrap_or(u32::MAX)),
            replays: 0,
            replay_of: PackedPosition::pack(text(header::REPLAY_OF).and_then(|id| Position::parse(dlq_topic, &id))),
            status: None,
        };
        if let Some((status, replays)) = self.early_statuses.remove(&position) {
            meta.status = Some(status);
            meta.replays = replays;
        }
        let event_id = text(header::EVENT_ID);
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

    fn apply_status(&mut self, position: Position, record: &EntryStatusRecord, dlq_topic: &str) {
        let status = StatusMeta {
            status: record.status,
            at_ms: record.at_ms,
            by: self.strings.intern(Some(&record.by)),
            note: self.strings.intern(record.note.as_deref()),
            new_entry: PackedPosition::pack(record.new_entry.as_deref().and_then(|id| Position::parse(dlq_topic, id))),
        };
        let replays = record.replays.unwrap_or(0);
        match self.get_mut(position) {
            Some(meta) => {
                meta.status = Some(status);
                meta.replays = meta.replays.max(replays);
            }
            None => {
                let seen = self.early_statuses.get(&position).map_or(0, |(_, n)| *n);
                self.early_statuses.insert(position, (status, seen.max(replays)));
            }
        }
    }

    fn status_of(&self, meta: &Meta, replay_outcome_timeout_ms: i64, now: i64) -> Status {
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
    fn failed_again_depth(&self, meta: &Meta) -> u32 {
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

/// One entry with its fate, as listed and shown.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    #[serde(flatten)]
    pub entry: DeadLetterEntry,
    pub status: Status,
    /// The latest status record, if any.
    pub last_status: Option<EntryStatusRecord>,
    /// How many times this entry has been re-driven.
    pub replays: u32,
    /// The entry this one came from, when its event was a replay that failed again.
    pub replay_of: Option<String>,
    /// How many times this event has failed again after replays (0 for a first failure).
    pub failed_again: u32,
    /// `failed_again` reached `max_failed_again`: replaying needs `force`.
    pub flagged: bool,
}

impl Entry {
    pub fn position(&self) -> Position {
        Position { partition: self.entry.partition, offset: self.entry.offset }
    }
}

/// What a filter compiles to against the index: interned numbers, and the set of error messages the free text
/// matches (each distinct message is searched once, not once per entry).
#[derive(Debug)]
pub struct Query {
    source: Option<u32>,
    event_type: Option<u32>,
    error_class: Option<u32>,
    status: Option<Status>,
    since_ms: Option<i64>,
    until_ms: Option<i64>,
    /// For a text filter: which interned error messages contain it.
    errors: Option<Vec<bool>>,
    /// A named value the index has never seen: nothing matches.
    impossible: bool,
}

/// A parsed filter, independent of any index (see [`crate::filter`]).
#[derive(Debug, Clone, Default)]
pub struct Criteria {
    pub source: Option<String>,
    pub event_type: Option<String>,
    pub error_class: Option<String>,
    pub status: Option<Status>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub text: Option<String>,
}

/// One page of a listing.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub entries: Vec<Entry>,
    /// Pass it back as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
    /// How many entries match the filter in all.
    pub total_matching: usize,
}

/// Counts by source, error class and status.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub total: usize,
    pub by_source: BTreeMap<String, usize>,
    pub by_error_class: BTreeMap<String, usize>,
    pub by_status: BTreeMap<String, usize>,
}

/// Per source: how many entries nobody has dealt with, and when the oldest of them became a dead letter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Untriaged {
    pub count: usize,
    pub oldest_at_ms: i64,
}

/// What the gauges show: entries per (status, source, error class), and the untriaged ones per source.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub counts: Vec<((Status, String, String), usize)>,
    pub untriaged: BTreeMap<String, Untriaged>,
}

const UNKNOWN: &str = "unknown";

/// The index, shared between the tail that advances it and the readers.
#[derive(Debug)]
pub struct Index {
    dlq_topic: String,
    max_failed_again: u32,
    replay_outcome_timeout_ms: i64,
    state: RwLock<State>,
    caught_up: AtomicBool,
}

impl Index {
    pub fn new(dlq_topic: &str, max_failed_again: u32, replay_outcome_timeout_s: u64) -> Self {
        Self {
            dlq_topic: dlq_topic.to_owned(),
            max_failed_again,
            replay_outcome_timeout_ms: i64::try_from(replay_outcome_timeout_s.saturating_mul(1000)).unwrap_or(i64::MAX),
            state: RwLock::new(State::default()),
            caught_up: AtomicBool::new(false),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn dlq_topic(&self) -> &str {
        &self.dlq_topic
    }

    /// Whether the index has read both topics up to where they were when it started.
    pub fn is_caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    pub fn len(&self) -> usize {
        self.read().n_entries
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

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
        let early = state.early_statuses.capacity() * (std::mem::size_of::<(Position, (StatusMeta, u32))>() + 1);
        entries + strings + early
    }

    /// Whether the status topic's partition has been applied past `offset` (a write is visible).
    pub fn has_status_offset(&self, partition: i32, offset: i64) -> bool {
        self.read().status_next.get(&partition).is_some_and(|next| *next > offset)
    }

    /// Applies a batch of records of either topic, in the order they were read.
    fn apply(&self, dlq_status_topic: &str, batch: &[BorrowedMessage<'_>]) {
        let mut state = self.write();
        for message in batch {
            if message.topic() == self.dlq_topic {
                state.add_entry(&self.dlq_topic, message);
            } else if message.topic() == dlq_status_topic {
                state.status_next.insert(message.partition(), message.offset() + 1);
                let (Some(key), Some(value)) = (message.key(), message.payload()) else { continue };
                let key = String::from_utf8_lossy(key);
                let Some(position) = Position::parse(&self.dlq_topic, &key) else { continue };
                match serde_json::from_slice::<EntryStatusRecord>(value) {
                    Ok(record) => state.apply_status(position, &record, &self.dlq_topic),
                    Err(error) => tracing::warn!(entry_id = %key, error = %error, "unreadable status record skipped"),
                }
            }
        }
    }

    pub fn compile(&self, criteria: &Criteria) -> Query {
        let state = self.read();
        let mut impossible = false;
        let mut lookup = |value: &Option<String>| {
            value.as_ref().map(|value| {
                state.strings.lookup(value).unwrap_or_else(|| {
                    impossible = true;
                    0
                })
            })
        };
        let source = lookup(&criteria.source);
        let event_type = lookup(&criteria.event_type);
        let error_class = lookup(&criteria.error_class);
        let errors = criteria.text.as_ref().map(|text| {
            let text = text.to_lowercase();
            std::iter::once(false)
                .chain(state.strings.values.iter().map(|value| value.to_lowercase().contains(&text)))
                .collect()
        });
        Query {
            source,
            event_type,
            error_class,
            status: criteria.status,
            since_ms: criteria.since_ms,
            until_ms: criteria.until_ms,
            errors,
            impossible,
        }
    }

    fn matches(&self, state: &State, query: &Query, meta: &Meta, now: i64) -> bool {
        !query.impossible
            && query.source.is_none_or(|source| meta.source == source)
            && query.event_type.is_none_or(|event_type| meta.event_type == event_type)
            && query.error_class.is_none_or(|class| meta.error_class == class)
            && query.since_ms.is_none_or(|since| meta.last_failure_at_ms >= since)
            && query.until_ms.is_none_or(|until| meta.last_failure_at_ms < until)
            && query.errors.as_ref().is_none_or(|errors| errors.get(meta.error as usize).copied().unwrap_or(false))
            && query.status.is_none_or(|status| status == state.status_of(meta, self.replay_outcome_timeout_ms, now))
    }

    fn entry_of(&self, state: &State, partition: i32, meta: &Meta, now: i64) -> Entry {
        let strings = &state.strings;
        let text = |id: u32| strings.get(id).map(str::to_owned);
        let event_id = state.partitions.get(&partition).and_then(|part| part.event_id(meta)).map(str::to_owned);
        let failed_again = state.failed_again_depth(meta);
        let last_status = meta.status.map(|status| EntryStatusRecord {
            status: status.status,
            at_ms: status.at_ms,
            by: text(status.by).unwrap_or_default(),
            event_id: event_id.clone(),
            new_entry: status.new_entry.get().map(|position| position.id(&self.dlq_topic)),
            note: text(status.note),
            replays: (meta.replays > 0).then_some(meta.replays),
        });
        Entry {
            entry: DeadLetterEntry {
                id: Position { partition, offset: meta.offset }.id(&self.dlq_topic),
                partition,
                offset: meta.offset,
                source: text(meta.source),
                service: None,
                event_id,
                event_type: text(meta.event_type),
                error_class: text(meta.error_class),
                error: text(meta.error),
                attempts: (meta.attempts > 0).then_some(meta.attempts),
                original_topic: text(meta.original_topic),
                original_partition: (meta.original_partition >= 0).then_some(meta.original_partition),
                original_offset: (meta.original_offset >= 0).then_some(meta.original_offset),
                first_failure_at_ms: (meta.first_failure_at_ms > 0).then_some(meta.first_failure_at_ms),
                last_failure_at_ms: (meta.last_failure_at_ms > 0).then_some(meta.last_failure_at_ms),
                body_bytes: meta.body_bytes as usize,
            },
            status: state.status_of(meta, self.replay_outcome_timeout_ms, now),
            last_status,
            replays: meta.replays,
            replay_of: meta.replay_of.get().map(|position| position.id(&self.dlq_topic)),
            failed_again,
            flagged: failed_again >= self.max_failed_again,
        }
    }

    pub fn get(&self, position: Position) -> Option<Entry> {
        let state = self.read();
        let meta = state.get(position)?;
        Some(self.entry_of(&state, position.partition, meta, now_ms()))
    }

    /// Up to `limit` matching entries after `after` (exclusive), in (partition, offset) order, and how many match
    /// in all.
    pub fn page(&self, query: &Query, after: Option<Position>, limit: usize) -> Page {
        let state = self.read();
        let now = now_ms();
        let mut entries = Vec::new();
        let mut total_matching = 0;
        let mut last = None;
        let mut more = false;
        for (&partition, part) in &state.partitions {
            for meta in &part.metas {
                if !self.matches(&state, query, meta, now) {
                    continue;
                }
                total_matching += 1;
                let position = Position { partition, offset: meta.offset };
                if after.is_some_and(|after| position <= after) {
                    continue;
                }
                if entries.len() < limit {
                    entries.push(self.entry_of(&state, partition, meta, now));
                    last = Some(position);
                } else {
                    more = true;
                }
            }
        }
        Page {
            entries,
            next_cursor: if more {
                last.map(|position| format!("{}:{}", position.partition, position.offset))
            } else {
                None
            },
            total_matching,
        }
    }

    /// The positions of every matching entry (for bulk actions), in listing order.
    pub fn positions(&self, query: &Query) -> Vec<Position> {
        let state = self.read();
        let now = now_ms();
        let mut positions = Vec::new();
        for (&partition, part) in &state.partitions {
            for meta in part.metas.iter().filter(|meta| self.matches(&state, query, meta, now)) {
                positions.push(Position { partition, offset: meta.offset });
            }
        }
        positions
    }

    pub fn stats(&self, query: &Query) -> Stats {
        let state = self.read();
        let now = now_ms();
        // Counters indexed by interned number and by status: a million entries, no hashing per entry.
        let n_strings = state.strings.values.len() + 1;
        let mut by_source = vec![0_usize; n_strings];
        let mut by_class = vec![0_usize; n_strings];
        let mut by_status = [0_usize; Status::ALL.len()];
        let mut total = 0;
        for part in state.partitions.values() {
            for meta in part.metas.iter().filter(|meta| self.matches(&state, query, meta, now)) {
                total += 1;
                by_source[meta.source as usize] += 1;
                by_class[meta.error_class as usize] += 1;
                let status = state.status_of(meta, self.replay_outcome_timeout_ms, now);
                by_status[Status::ALL.iter().position(|s| *s == status).unwrap_or(0)] += 1;
            }
        }
        let named = |counts: Vec<usize>| -> BTreeMap<String, usize> {
            let mut named = BTreeMap::new();
            for (id, n) in counts.into_iter().enumerate().filter(|(_, n)| *n > 0) {
                let name = state.strings.get(id as u32).unwrap_or(UNKNOWN).to_owned();
                *named.entry(name).or_default() += n;
            }
            named
        };
        Stats {
            total,
            by_source: named(by_source),
            by_error_class: named(by_class),
            by_status: Status::ALL
                .iter()
                .zip(by_status)
                .filter(|(_, n)| *n > 0)
                .map(|(status, n)| (status.as_str().to_owned(), n))
                .collect(),
        }
    }

    /// Counts by (status, source, error class), for the `hookline_dlq_entries` gauge, and the untriaged entries
    /// per source.
    pub fn gauges(&self) -> Gauges {
        let state = self.read();
        let now = now_ms();
        let mut counts: HashMap<(Status, u32, u32), usize> = HashMap::new();
        let mut untriaged: HashMap<u32, Untriaged> = HashMap::new();
        for part in state.partitions.values() {
            for meta in &part.metas {
                let status = state.status_of(meta, self.replay_outcome_timeout_ms, now);
                *counts.entry((status, meta.source, meta.error_class)).or_default() += 1;
                if status.is_untriaged() {
                    let seen = untriaged.entry(meta.source).or_insert(Untriaged { count: 0, oldest_at_ms: i64::MAX });
                    seen.count += 1;
                    seen.oldest_at_ms = seen.oldest_at_ms.min(meta.last_failure_at_ms);
                }
            }
        }
        let name = |id: u32| state.strings.get(id).unwrap_or(UNKNOWN).to_owned();
        Gauges {
            counts: counts
                .into_iter()
                .map(|((status, source, class), n)| ((status, name(source), name(class)), n))
                .collect(),
            untriaged: untriaged.into_iter().map(|(source, seen)| (name(source), seen)).collect(),
        }
    }

    /// Dead letters over time: per source, how many entries became dead letters in each `bucket_ms` window
    /// starting at `since_ms` (for the console's chart).
    pub fn histogram(&self, since_ms: i64, bucket_ms: i64, n_buckets: usize) -> BTreeMap<String, Vec<usize>> {
        let state = self.read();
        let mut series: HashMap<u32, Vec<usize>> = HashMap::new();
        for part in state.partitions.values() {
            for meta in part.metas.iter().filter(|meta| meta.last_failure_at_ms >= since_ms) {
                let bucket = usize::try_from((meta.last_failure_at_ms - since_ms) / bucket_ms.max(1)).unwrap_or(0);
                if bucket < n_buckets {
                    series.entry(meta.source).or_insert_with(|| vec![0; n_buckets])[bucket] += 1;
                }
            }
        }
        series
            .into_iter()
            .map(|(source, counts)| (state.strings.get(source).unwrap_or(UNKNOWN).to_owned(), counts))
            .collect()
    }

    /// Records a status this process wrote, before the tail reads it back (the CLI's index is not tailed).
    pub fn apply_own_status(&self, position: Position, record: &EntryStatusRecord) {
        self.write().apply_status(position, record, &self.dlq_topic);
    }
}

/// Reads both topics into `index`: up to their high watermarks at the start, then, with `follow`, on and on
/// until `stop`. Blocking (a librdkafka consumer): run it on its own thread. Joins no group and commits nothing.
pub fn tail(
    kafka: &KafkaConfig,
    index: &Index,
    follow: bool,
    stop: &CancellationToken,
    startup_timeout: Duration,
) -> Result<(), KafkaError> {
    let consumer = reader(kafka, "dlq-index")?;
    let topics = [kafka.dlq_topic.as_str(), kafka.dlq_status_topic.as_str()];
    let mut assignment = TopicPartitionList::new();
    let mut targets: HashMap<(String, i32), i64> = HashMap::new();
    let mut assigned: HashMap<&str, usize> = HashMap::new();
    for topic in topics {
        let partitions = partitions_of(&consumer, topic, startup_timeout)?;
        assigned.insert(topic, partitions.len());
        for partition in partitions {
            let (low, high) = consumer.fetch_watermarks(topic, partition, startup_timeout)?;
            if high > low {
                targets.insert((topic.to_owned(), partition), high - 1);
            }
            assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
        }
    }
    consumer.assign(&assignment)?;
    let started = Instant::now();
    let mut last_metadata_check = Instant::now();
    if targets.is_empty() {
        // Both topics are empty: built already.
        index.caught_up.store(true, Ordering::Release);
        if !follow {
            return Ok(());
        }
    }
    let mut batch = Vec::with_capacity(1024);
    loop {
        if stop.is_cancelled() {
            return Ok(());
        }
        if !index.is_caught_up() && !follow && started.elapsed() > startup_timeout {
            return Err(KafkaError::NoMessageReceived);
        }
        batch.clear();
        let mut timed_out = false;
        while batch.len() < 1024 {
            match consumer.poll(Duration::from_millis(if batch.is_empty() { 200 } else { 0 })) {
                Some(Ok(message)) => batch.push(message),
                Some(Err(error)) => {
                    tracing::warn!(error = %error, "reading the dead-letter topics");
                    break;
                }
                None => {
                    timed_out = true;
                    break;
                }
            }
        }
        index.apply(&kafka.dlq_status_topic, &batch);
        if !index.is_caught_up() {
            for message in &batch {
                let key = (message.topic().to_owned(), message.partition());
                if targets.get(&key).is_some_and(|last| message.offset() >= *last) {
                    targets.remove(&key);
                }
            }
            if timed_out && !targets.is_empty() {
                // A target offset that is no record (a compacted or control record at the end) is reached when
                // the consumer's position passes it.
                if let Ok(positions) = consumer.position() {
                    for element in positions.elements() {
                        if let Offset::Offset(next) = element.offset() {
                            let key = (element.topic().to_owned(), element.partition());
                            if targets.get(&key).is_some_and(|last| next > *last) {
                                targets.remove(&key);
                            }
                        }
                    }
                }
            }
            if targets.is_empty() {
                index.caught_up.store(true, Ordering::Release);
                tracing::info!(
                    entries = index.len(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "dead-letter index built"
                );
                if !follow {
                    return Ok(());
                }
            }
        }
        // Partitions added to either topic later are picked up from their start.
        if follow && last_metadata_check.elapsed() > Duration::from_secs(30) {
            last_metadata_check = Instant::now();
            let mut added = TopicPartitionList::new();
            for topic in topics {
                let partitions = partitions_of(&consumer, topic, Duration::from_secs(5)).unwrap_or_default();
                let known = assigned.get(topic).copied().unwrap_or(0);
                for &partition in partitions.iter().skip(known) {
                    added.add_partition_offset(topic, partition, Offset::Beginning)?;
                }
                if partitions.len() > known {
                    assigned.insert(topic, partitions.len());
                }
            }
            if added.count() > 0 {
                consumer.incremental_assign(&added)?;
            }
        }
    }
}

/// A consumer that reads by assignment: no group membership, no commits, only committed records. The user's
/// `kafka.properties` (TLS, SASL) apply, minus the refused ones.
pub fn reader(kafka: &KafkaConfig, name: &'static str) -> Result<BaseConsumer<QuietContext>, KafkaError> {
    reader_config(kafka).create_with_context(QuietContext::new(name))
}

/// The settings of [`reader`], to adjust before creating one.
pub fn reader_config(kafka: &KafkaConfig) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &kafka.brokers)
        // Required by librdkafka even for assign(); nothing is committed to it.
        .set("group.id", format!("hookline-reader-{}", uuid::Uuid::new_v4()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .set("fetch.message.max.bytes", "16777216")
        .set("fetch.wait.max.ms", "10")
        // Prefetch bounded: the index, not librdkafka's queue, is what should hold memory.
        .set("queued.max.messages.kbytes", "16384")
        .set_log_level(RDKafkaLogLevel::Warning);
    for (key, value) in &kafka.properties {
        if hookline_common::config::refused_property(key).is_none() {
            config.set(key, value);
        }
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_pack_into_twelve_bytes_and_back() {
        for position in
            [None, Some(Position { partition: 0, offset: 0 }), Some(Position { partition: 7, offset: 5_000_000_000 })]
        {
            assert_eq!(PackedPosition::pack(position).get(), position);
        }
        assert_eq!(std::mem::size_of::<PackedPosition>(), 12);
        // The per-entry budget (docs/benchmarks.md): the fixed part of an entry stays at 120 bytes.
        assert!(std::mem::size_of::<Meta>() <= 120, "{}", std::mem::size_of::<Meta>());
    }

    #[test]
    fn ids_name_positions_of_their_own_topic_only() {
        assert_eq!(Position::parse("webhooks.dlq", "webhooks.dlq:2:17"), Some(Position { partition: 2, offset: 17 }));
        assert_eq!(Position::parse("webhooks.dlq", "webhooks.dlq-status:2:17"), None);
        assert_eq!(Position::parse("webhooks.dlq", "webhooks.dlq:2"), None);
        assert_eq!(Position { partition: 2, offset: 17 }.id("webhooks.dlq"), "webhooks.dlq:2:17");
    }
}
